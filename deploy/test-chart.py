#!/usr/bin/env python3
"""Tests the Helm chart deploy/helm/tollgate.

For each of the chart's main value sets (chart_cases.VALUE_SETS): renders
it with real Helm code (PyPI helm-python-sdk: Helm v4 through its C ABI),
validates every rendered object against the Kubernetes schemas (PyPI
kubernetes-validate, strict: an unknown field fails) of the oldest and the
newest Kubernetes the chart targets, reads the objects for what matters
(security context, probes, the config mount, Secrets referenced and never
inlined, replicas, PDB, HPA, a Service per door), and runs the real
binary on the pod's files laid out as the kubelet would (chart_run.py):
`tollgate validate` on the ConfigMap's TOML and Envoy files, then `tollgate
serve` with the pod's own arguments and environment on loopback ports,
whose probes, doors and SIGTERM must behave. Then bad values must fail with
a message naming the value (chart_cases.NEGATIVE), a change to a setting
serve reads only at start must change the pod template (a rollout) while a
rule's must not, every flag the chart passes must be one `tollgate serve
--help` lists, the chart's README must document every value, and the plain
manifests in deploy/kubernetes/ must be what deploy/render-manifests.py
renders now, with no image only the building machine has.

    cargo build -p tollgate-server
    python3 deploy/test-chart.py [--tollgate PATH]

The binary: --tollgate, else $TOLLGATE_BIN, else
$CARGO_TARGET_DIR/debug/tollgate, else target/debug/tollgate. Every set
runs; the failures are listed at the end and the exit code is 1.
"""

import argparse
import copy
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

sys.dont_write_bytecode = True  # no __pycache__ left in deploy/
from chart_cases import NEGATIVE, VALUE_SETS  # noqa: E402
from chart_run import (  # noqa: E402
    CONFIG_DIR,
    Pod,
    check_flags,
    make_certs,
    projected_items,
    run_serve,
    run_validate,
)

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent
# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ["1.30.0", "1.37.0"]
# Kinds of CRDs, whose schemas are not Kubernetes's (the Prometheus
# Operator's ServiceMonitor): kubernetes-validate has none, so the test
# reads them instead (check_objects).
NOT_IN_SCHEMAS = {"ServiceMonitor"}
RECREATE = {"type": "Recreate"}
ROLLING = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
PORTS = {"http": 8080, "grpc": 8081, "proxy": 8082, "admin": 9091, "ops": 9090}


def load_render_module():
    """deploy/render-manifests.py as a module (its name has a hyphen)."""
    path = DEPLOY / "render-manifests.py"
    spec = importlib.util.spec_from_file_location("render_manifests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RENDER = load_render_module()


class Failures:
    """Collects failed assertions, so one run reports every set."""

    def __init__(self):
        self.items = []

    def check(self, ok, what):
        if not ok:
            self.items.append(what)
        return ok


def values_of(case):
    """A case's values: its example file (if any) under its overrides."""
    values = RENDER.load_values(case["example"]) if case.get("example") else {}
    return deep_merge(values, copy.deepcopy(case.get("values", {})))


def deep_merge(base, over):
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            deep_merge(base[k], v)
        else:
            base[k] = v
    return base


def by_kind(docs, kind):
    return [obj for _, _, obj in docs if obj["kind"] == kind]


def flag_value(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def validate_schemas(docs, fail, name):
    """Every object against every KUBE_VERSIONS schema; returns the count."""
    count = 0
    for source, _, obj in docs:
        if obj["kind"] in NOT_IN_SCHEMAS:
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                where = "/".join(str(p) for p in e.path)
                what = f"{source} {obj['kind']} on {version}: {where}: {e.message}"
                fail.check(False, f"{name}: {what}")
            except kubernetes_validate.SchemaNotFoundError as e:
                fail.check(False, f"{name}: {source}: {e.message}")
        count += 1
    return count


def check_pod(name, dep, fail):
    """What every pod must have, whatever the values; returns the container."""
    spec = dep["spec"]["template"]["spec"]
    psc = spec.get("securityContext", {})
    fail.check(psc.get("runAsNonRoot") is True, f"{name}: pod runAsNonRoot is not true")
    fail.check(psc.get("runAsUser") == 65532, f"{name}: pod runAsUser is not 65532")
    fail.check(
        psc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
        f"{name}: pod seccompProfile is not RuntimeDefault",
    )
    fail.check(
        spec.get("automountServiceAccountToken") is False,
        f"{name}: a service account token is mounted",
    )
    [c] = spec["containers"]
    sc = c.get("securityContext", {})
    fail.check(sc.get("readOnlyRootFilesystem") is True, f"{name}: root filesystem is writable")
    fail.check(sc.get("allowPrivilegeEscalation") is False, f"{name}: privilege escalation allowed")
    fail.check(
        sc.get("capabilities", {}).get("drop") == ["ALL"], f"{name}: capabilities not all dropped"
    )
    fail.check(sc.get("runAsNonRoot") is True, f"{name}: container runAsNonRoot is not true")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    fail.check(ports.get("ops") == PORTS["ops"], f"{name}: no ops port 9090: {ports}")
    for probe, path in [
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/healthz"),
    ]:
        got = c.get(probe, {}).get("httpGet", {})
        fail.check(
            got.get("path") == path and got.get("port") == "ops",
            f"{name}: {probe} is {got}, want GET {path} on port ops",
        )
    args = c["args"]
    fail.check(
        args[:3] == ["serve", "--config", f"{CONFIG_DIR}/tollgate.toml"],
        f"{name}: args start {args[:3]}",
    )
    fail.check(
        flag_value(args, "--ops") == "0.0.0.0:9090", f"{name}: --ops is {flag_value(args, '--ops')}"
    )
    mounts = c.get("volumeMounts", [])
    fail.check(
        all("subPath" not in m and "subPathExpr" not in m for m in mounts),
        f"{name}: a subPath mount: {mounts}",
    )
    config = [m for m in mounts if m["mountPath"] == CONFIG_DIR]
    fail.check(
        len(config) == 1 and config[0]["name"] == "config" and config[0].get("readOnly") is True,
        f"{name}: {CONFIG_DIR} mount: {mounts}",
    )
    for e in c.get("env", []):
        fail.check(
            not e["name"].startswith("TOLLGATE_")
            or e == {"name": "TOLLGATE_HTTP", "value": ""}
            or ("value" not in e and "secretKeyRef" in e.get("valueFrom", {})),
            f"{name}: env {e['name']} not from a Secret: {e}",
        )
    # The image sets TOLLGATE_HTTP=0.0.0.0:8080: without the HTTP door the
    # pod must blank it, or the API opens anyway.
    blanked = {"name": "TOLLGATE_HTTP", "value": ""} in c.get("env", [])
    fail.check(
        blanked == ("--http" not in args),
        f"{name}: TOLLGATE_HTTP blanked: {blanked}, --http given: {'--http' in args}",
    )
    return c


def check_objects(name, want, docs, fail):
    """Replicas, PDB, HPA, ServiceMonitor, the rollout annotation."""
    [dep] = by_kind(docs, "Deployment")
    fail.check(not by_kind(docs, "Secret"), f"{name}: the chart rendered a Secret")
    got = dep["spec"].get("replicas")
    fail.check(got == want.get("replicas"), f"{name}: replicas {got}, want {want.get('replicas')}")
    # A memory store's rollout must not run two pods with their own counters.
    strategy = want.get("strategy") or (RECREATE if want.get("url") == "memory" else ROLLING)
    got = dep["spec"].get("strategy")
    fail.check(got == strategy, f"{name}: strategy {got}, want {strategy}")
    pdbs = by_kind(docs, "PodDisruptionBudget")
    fail.check(len(pdbs) == int(bool(want.get("pdb"))), f"{name}: {len(pdbs)} PDBs")
    for pdb in pdbs:
        fail.check(pdb["spec"].get("maxUnavailable") == 1, f"{name}: PDB {pdb['spec']}")
        fail.check(
            pdb["spec"]["selector"] == dep["spec"]["selector"], f"{name}: PDB selects other pods"
        )
    hpas = by_kind(docs, "HorizontalPodAutoscaler")
    fail.check(len(hpas) == int(bool(want.get("hpa"))), f"{name}: {len(hpas)} HPAs")
    for hpa in hpas:
        spec = hpa["spec"]
        fail.check(
            (spec["minReplicas"], spec["maxReplicas"]) == want["hpa"], f"{name}: HPA {spec}"
        )
        fail.check(
            spec["scaleTargetRef"]["name"] == dep["metadata"]["name"],
            f"{name}: HPA scales something else",
        )
    monitors = by_kind(docs, "ServiceMonitor")
    fail.check(
        len(monitors) == int(bool(want.get("monitor"))), f"{name}: {len(monitors)} ServiceMonitors"
    )
    services = services_by_door(docs)
    for monitor in monitors:
        [ep] = monitor["spec"]["endpoints"]
        fail.check(
            ep["port"] == "ops" and ep["path"] == "/metrics",
            f"{name}: ServiceMonitor endpoint {ep}",
        )
        sel = monitor["spec"]["selector"]["matchLabels"]
        picked = [
            door
            for door, svc in services.items()
            if all(svc["metadata"]["labels"].get(k) == v for k, v in sel.items())
        ]
        fail.check(picked == ["ops"], f"{name}: ServiceMonitor selects the Services of {picked}")
    annotations = dep["spec"]["template"]["metadata"].get("annotations") or {}
    fail.check(
        ("checksum/config" in annotations) == bool(want.get("rollout")),
        f"{name}: annotations {annotations}, rollout={want.get('rollout')}",
    )
    for key, value in want.get("pod", {}).items():
        got = dep["spec"]["template"]["spec"].get(key)
        fail.check(got == value, f"{name}: pod {key} = {got}, want {value}")


def services_by_door(docs):
    return {
        s["metadata"]["labels"]["app.kubernetes.io/component"]: s for s in by_kind(docs, "Service")
    }


def check_doors(name, want, docs, c, fail):
    """A Service per enabled door and ops, each to a port the pod serves."""
    [dep] = by_kind(docs, "Deployment")
    doors = set(want.get("doors", ["http"]))
    services = services_by_door(docs)
    fail.check(
        set(services) == doors | {"ops"},
        f"{name}: Services for {sorted(services)}, want {sorted(doors | {'ops'})}",
    )
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    fail.check(set(ports) == doors | {"ops"}, f"{name}: container ports {ports}")
    for door, svc in services.items():
        [port] = svc["spec"]["ports"]
        fail.check(
            port["port"] == PORTS[door] and port["targetPort"] == door,
            f"{name}: Service {door}: {port}",
        )
        fail.check(ports.get(door) == PORTS[door], f"{name}: no container port {door}")
        fail.check(
            svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"],
            f"{name}: Service {door} selects other pods",
        )
    for door in ("http", "grpc", "proxy", "admin"):
        addr = flag_value(c["args"], f"--{door}")
        want_addr = f"0.0.0.0:{PORTS[door]}" if door in doors else None
        fail.check(addr == want_addr, f"{name}: --{door} is {addr}, want {want_addr}")
    if "grpc" in services:
        [port] = services["grpc"]["spec"]["ports"]
        fail.check(
            port.get("appProtocol") == "kubernetes.io/h2c",
            f"{name}: gRPC appProtocol {port.get('appProtocol')}",
        )
        got = services["grpc"]["spec"].get("clusterIP")
        fail.check(got == want.get("grpc_cluster_ip"), f"{name}: gRPC clusterIP {got}")
    for door, kind in want.get("service_types", {}).items():
        got = services.get(door, {}).get("spec", {}).get("type")
        fail.check(got == kind, f"{name}: Service {door} type {got}, want {kind}")


def check_config(name, want, docs, c, notes, fail):
    """The TOML, and every file it names filled from the right Secret."""
    [dep] = by_kind(docs, "Deployment")
    [cm] = by_kind(docs, "ConfigMap")
    text = cm["data"]["tollgate.toml"]
    config = tomllib.loads(text)
    store = config.get("store", {})
    url = store.get("url", "")
    fail.check(
        not re.search(r"://[^/@]*:[^/@]*@", url), f"{name}: a password in the store URL {url}"
    )
    if "url" in want:
        fail.check(url == want["url"], f"{name}: store url {url!r}, want {want['url']!r}")
    for key, value in want.get("store", {}).items():
        fail.check(
            store.get(key) == value, f"{name}: [store] {key} = {store.get(key)!r}, want {value!r}"
        )
    for check in want.get("toml_contains", []):
        fail.check(check in text, f"{name}: the TOML lacks {check!r}:\n{text}")
    for check in want.get("toml_lacks", []):
        fail.check(check not in text, f"{name}: the TOML has {check!r}:\n{text}")

    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    for source in volumes["config"]["projected"]["sources"]:
        for kind, ref in source.items():
            fail.check(
                ref.get("items"),
                f"{name}: the {kind} {ref.get('name')} is projected without items: every key",
            )
    items = projected_items(dep)
    fail.check(
        items.get("tollgate.toml") == ("configMap", cm["metadata"]["name"], "tollgate.toml"),
        f"{name}: tollgate.toml comes from {items.get('tollgate.toml')}",
    )
    secrets = {path: ref[1:] for path, ref in items.items() if ref[0] == "secret"}
    fail.check(
        secrets == want.get("secret_files", {}),
        f"{name}: Secret files {secrets}, want {want.get('secret_files', {})}",
    )
    # Each file the TOML names is one a Secret fills, and each Secret's file is named.
    named = {"password_file": store.get("password_file")}
    named.update({f"tls.{k}": v for k, v in store.get("tls", {}).items() if k != "server_name"})
    for i, token in enumerate(config.get("admin", {}).get("tokens", [])):
        fail.check("token" not in token, f"{name}: admin token {token['name']} inlined")
        named[f"admin.tokens[{i}]"] = token.get("token_file")
    named = {k: v for k, v in named.items() if v is not None}
    in_pod = {f"{CONFIG_DIR}/{p}" for p in secrets}
    fail.check(
        set(named.values()) == in_pod,
        f"{name}: the TOML names {named}, the Secrets fill {sorted(in_pod)}",
    )
    env = {
        e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    fail.check(
        env == want.get("env_secrets", {}),
        f"{name}: env from Secrets {env}, want {want.get('env_secrets', {})}",
    )

    envoy_files = sorted(p for p in items if p.startswith("envoy/"))
    fail.check(
        envoy_files == [f"envoy/{n}.yaml" for n in want.get("envoy", [])],
        f"{name}: Envoy files {envoy_files}",
    )
    args = c["args"]
    envoy_args = [args[i + 1] for i, a in enumerate(args) if a == "--envoy-config"]
    fail.check(
        envoy_args == [f"{CONFIG_DIR}/{p}" for p in envoy_files],
        f"{name}: --envoy-config {envoy_args}",
    )
    for p in envoy_files:
        key = items[p][2]
        fail.check(
            isinstance(yaml.safe_load(cm["data"][key]), dict), f"{name}: {key} is not a YAML map"
        )
    warned = "WARNING: the memory store" in notes
    fail.check(
        warned == bool(want.get("memory_warning")),
        f"{name}: NOTES.txt memory warning {'shown' if warned else 'missing'}",
    )


def check_negative(chart, fail):
    """Bad values fail the render with a message naming what to change."""
    for case in NEGATIVE:
        try:
            chart.render(values=case["values"], name="tollgate", namespace="default")
        except (helm.HelmValuesError, helm.HelmRenderError) as e:
            fail.check(
                case["error"] in str(e),
                f"negative {case['name']}: the error does not say {case['error']!r}: {e}",
            )
        else:
            fail.check(False, f"negative {case['name']}: rendered; want {case['error']!r}")


def check_rollout(chart, fail):
    """rolloutOnConfigChange: the checksum follows the config, and only it."""

    def checksum(limit, team=None):
        rule = {"name": "r", "algorithm": "gcra", "limit": limit, "period": "1s"}
        values = {"rolloutOnConfigChange": True, "config": {"rules": [rule]}}
        if team:
            values["podAnnotations"] = {"team": team}
        docs = RENDER.documents(chart.render(values=values, name="tollgate", namespace="default"))
        [dep] = by_kind(docs, "Deployment")
        return dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    fail.check(checksum(10) != checksum(11), "checksum/config did not follow a config change")
    fail.check(checksum(10) == checksum(10, "x"), "checksum/config changed with no config change")


def check_start_settings(chart, fail):
    """What serve reads only at start (the store, [admin], listeners) rolls
    the pods when changed; what it reloads (rules) leaves them alone."""

    def deployment(**over):
        rule = {"name": "r", "algorithm": "gcra", "limit": 10, "period": "1s"}
        values = deep_merge(
            {"store": {"kind": "redis", "redis": {"host": "redis-a"}}, "config": {"rules": [rule]}},
            over,
        )
        docs = RENDER.documents(chart.render(values=values, name="tollgate", namespace="default"))
        [dep] = by_kind(docs, "Deployment")
        return dep

    def template(**over):
        return deployment(**over)["spec"]["template"]

    base = template()
    rule = {"name": "r", "algorithm": "gcra", "limit": 11, "period": "1s"}
    fail.check(
        deployment(config={"rules": [rule]}) == deployment(),
        "a rule's change changed the Deployment: it should reload, not roll",
    )
    fail.check(
        template(replicaCount=3) == base, "scaling changed the pod template: it should not roll"
    )
    fail.check(
        template(store={"onError": "deny"}) == base,
        "store.onError changed the pod template: serve reloads it",
    )
    rolls = {
        "store.redis.host": {"store": {"redis": {"host": "redis-b"}}},
        "store.prefix": {"store": {"prefix": "other"}},
        "store.timeout": {"store": {"timeout": "80ms"}},
        "store.username": {"store": {"username": "app"}},
        "store.tls.serverName": {"store": {"tls": {"enabled": True, "serverName": "r.example"}}},
    }
    for what, over in rolls.items():
        fail.check(template(**over) != base, f"{what} changed, and the pod template did not")
    raw = '[store]\nurl = "redis://{}:6379"\n[[rules]]\nname = "r"\nlimit = {}\n'
    fail.check(
        template(config={"toml": raw.format("redis-c", 1)})
        != template(config={"toml": raw.format("redis-d", 1)}),
        "config.toml's [store] url changed, and the pod template did not",
    )
    fail.check(
        template(config={"toml": raw.format("redis-c", 1)})
        == template(config={"toml": raw.format("redis-c", 2)}),
        "config.toml's rule changed the pod template: it should reload, not roll",
    )
    proxy = {"enabled": True, "upstream": "http://b:80"}
    timeout = proxy | {"settings": {"send_timeout": "5s"}}
    fail.check(
        template(doors={"proxy": proxy}) != template(doors={"proxy": timeout}),
        "[proxy] send_timeout changed, and the pod template did not",
    )


def check_readme(fail):
    """The chart's README documents every value of values.yaml and no other
    (a row's `.port` after `store.redis.host` is `store.redis.port`), and
    its links resolve."""
    readme = (RENDER.CHART / "README.md").read_text()
    table = readme[readme.index("## Values") :]
    documented = set()
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        full = None
        for token in re.findall(r"`([^`]+)`", line.split(" | ")[0]):
            if token.startswith(".") and full:
                token = full.rsplit(".", 1)[0] + token
            documented.add(token)
            full = token

    def leaves(values, prefix=""):
        for k, v in values.items():
            path = prefix + k
            if isinstance(v, dict) and v and path not in documented:
                yield from leaves(v, path + ".")
            else:
                yield path

    values = yaml.safe_load((RENDER.CHART / "values.yaml").read_text())
    known = set(leaves(values))
    for path in sorted(known):
        parents = {path.rsplit(".", i)[0] for i in range(path.count(".") + 1)}
        fail.check(parents & documented, f"README.md: value {path} is not in the table")
    for path in sorted(documented - known):
        fail.check(False, f"README.md: the table names {path}, which values.yaml has not")
    links = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "doc_links.py"), str(RENDER.CHART / "README.md")],
        capture_output=True,
        text=True,
    )
    fail.check(links.returncode == 0, f"README.md links: {links.stdout}{links.stderr}")


def check_manifests(fail):
    """The plain manifests name no image only the machine that built it
    has (localhost/), and their header says to replace the one they name."""
    for file in RENDER.MANIFESTS:
        text = (RENDER.OUT / file).read_text()
        head = text.split("\n---\n", 1)[0]
        images = re.findall(r"^ +image: \"?([^\"\s]+)", text, re.M)
        fail.check(images, f"deploy/kubernetes/{file}: no image")
        for image in images:
            repo = image.rsplit(":", 1)[0]
            fail.check(
                not image.startswith("localhost/"),
                f"deploy/kubernetes/{file}: image {image} exists only where it was built",
            )
            fail.check(
                repo in head and "build-image.sh" in head,
                f"deploy/kubernetes/{file}: the header does not say to push the image "
                f"deploy/build-image.sh builds and replace {repo}:\n{head}",
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    default = os.environ.get("TOLLGATE_BIN") or str(target / "debug" / "tollgate")
    parser.add_argument("--tollgate", default=default, help="the binary (default %(default)s)")
    binary = Path(parser.parse_args().tollgate)
    if not binary.exists():
        sys.exit(f"no tollgate at {binary}: cargo build -p tollgate-server, or pass --tollgate")
    started = time.monotonic()
    fail = Failures()

    version = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]
    app = yaml.safe_load((RENDER.CHART / "Chart.yaml").read_text())["appVersion"]
    fail.check(app == version, f"Chart.yaml appVersion {app}, workspace version {version}")
    lint = helm.lint(str(RENDER.CHART), strict=True, kube_version="v" + KUBE_VERSIONS[0])
    fail.check(
        not lint["errors"] and all(m["severity"] < 2 for m in lint["messages"]),
        f"helm lint: {lint}",
    )

    validated = read_only = 0
    flags = set()
    pending = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        tempfile.TemporaryDirectory() as logs,
        helm.Chart.load(str(RENDER.CHART)) as chart,
    ):
        certs = make_certs(tmp)
        for case in VALUE_SETS:
            name, want = case["name"], case["expect"]
            before = len(fail.items)
            rendered = chart.render(values=values_of(case), name="tollgate", namespace="default")
            docs = RENDER.documents(rendered)
            notes = next((t for s, t in rendered.items() if s.endswith("NOTES.txt")), "")
            validated += validate_schemas(docs, fail, name)
            read_only += sum(1 for _, _, o in docs if o["kind"] in NOT_IN_SCHEMAS)
            [dep] = by_kind(docs, "Deployment")
            c = check_pod(name, dep, fail)
            check_objects(name, want, docs, fail)
            check_doors(name, want, docs, c, fail)
            check_config(name, want, docs, c, notes, fail)
            flags.update(a for a in c["args"] if a.startswith("--"))
            pod = Pod(docs)
            with tempfile.TemporaryDirectory() as files:
                pod.lay_out(files, certs)
                valid = run_validate(binary, name, pod, fail)
                served = run_serve(binary, name, pod, want.get("ready", True), fail, logs)
            if pod.new_parts():
                pending[name] = pod.new_parts()
            status = "ok" if len(fail.items) == before else "FAILED"
            print(
                f"{name:<22} {len(docs)} objects, validate {'accepted' if valid else 'refused'}, "
                f"serve {'ok' if served else 'failed'}: {status}"
            )
        check_negative(chart, fail)
        check_rollout(chart, fail)
        check_start_settings(chart, fail)
    check_flags(binary, flags, fail)
    check_readme(fail)
    stale = subprocess.run(
        [sys.executable, str(DEPLOY / "render-manifests.py"), "--check"],
        capture_output=True,
        text=True,
    )
    fail.check(stale.returncode == 0, f"deploy/kubernetes/ is stale:\n{stale.stdout}{stale.stderr}")
    check_manifests(fail)

    print(
        f"{len(VALUE_SETS)} value sets: {validated} objects valid for Kubernetes "
        f"{' and '.join(KUBE_VERSIONS)} (strict), {read_only} ServiceMonitor read but not "
        f"schema-checked (a CRD); {len(NEGATIVE)} bad value sets refused; "
        f"{time.monotonic() - started:.1f} s"
    )
    if pending and fail.items:
        print(
            "sets using what other parts of issue 38 add to the binary: "
            + "; ".join(f"{k} ({', '.join(v)})" for k, v in pending.items())
        )
    if fail.items:
        print(f"\n{len(fail.items)} failed:", file=sys.stderr)
        for item in fail.items:
            print(f"- {item}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
