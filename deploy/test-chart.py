#!/usr/bin/env python3
"""Tests the Helm chart deploy/helm/tollgate.

For each of the chart's main value sets (VALUE_SETS): renders it with real
Helm code (PyPI helm-python-sdk: Helm v4 through its C ABI), validates
every rendered object against the Kubernetes schemas (PyPI
kubernetes-validate, strict: no unknown field) for the oldest and newest
Kubernetes the chart targets, reads the objects for what matters (security
context, probes, the config mount, Secrets referenced and never inlined,
replicas, PDB, HPA, Services per door), and runs the real binary's
`tollgate validate` on the ConfigMap's TOML and Envoy files. Then bad
values must fail with a message naming the value (NEGATIVE), every flag
the chart passes must be one `tollgate serve` knows, and the plain
manifests in deploy/kubernetes/ must be what deploy/render-manifests.py
renders now.

    cargo build -p tollgate-server
    python3 deploy/test-chart.py [--tollgate target/debug/tollgate]

The binary defaults to $TOLLGATE_BIN, else $CARGO_TARGET_DIR/debug/tollgate,
else target/debug/tollgate. Exits 1 on the first failed set's report, after
running every set.
"""

import argparse
import copy
import importlib.util
import os
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

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent
# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ["1.30.0", "1.37.0"]
# Kinds from CRDs: their schemas are not Kubernetes's (the Prometheus
# Operator's ServiceMonitor), so kubernetes-validate has none; the test
# reads them instead (check_monitor).
NOT_IN_SCHEMAS = {"ServiceMonitor"}
# Config keys the binary gains in issue 38 from other parts of the work
# (INTERFACE38.md); a set whose TOML uses one fails `validate` until they
# are merged, and the failure says so.
NEW_KEYS = {
    "password_file": "[store] password_file",
    "[store.tls]": "[store.tls]",
    "token_file": "[[admin.tokens]] token_file",
    "[ops]": "[ops] readiness",
}
CONFIG_DIR = "/etc/tollgate"
DUMMY_PASSWORD = "chart-test-password-9f3a"
DUMMY_TOKEN = "chart-test-admin-token-6c1d2e0b"


def load_render_module():
    """deploy/render-manifests.py as a module (its name has a hyphen)."""
    spec = importlib.util.spec_from_file_location("render_manifests", DEPLOY / "render-manifests.py")
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
    """A case's values: its example file (if any) with its overrides."""
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
                path = "/".join(str(p) for p in e.path)
                fail.check(False, f"{name}: {source} {obj['kind']} on {version}: {path}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError as e:
                fail.check(False, f"{name}: {source}: {e.message}")
        count += 1
    return count


def check_pod(dep, fail, name):
    """What every pod must have, whatever the values."""
    spec = dep["spec"]["template"]["spec"]
    pod_sc = spec.get("securityContext", {})
    fail.check(pod_sc.get("runAsNonRoot") is True, f"{name}: pod runAsNonRoot is not true")
    fail.check(pod_sc.get("runAsUser") == 65532, f"{name}: pod runAsUser is not 65532")
    fail.check(
        pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
        f"{name}: pod seccompProfile is not RuntimeDefault",
    )
    fail.check(spec.get("automountServiceAccountToken") is False, f"{name}: a service account token is mounted")
    [c] = spec["containers"]
    sc = c.get("securityContext", {})
    fail.check(sc.get("readOnlyRootFilesystem") is True, f"{name}: root filesystem is writable")
    fail.check(sc.get("allowPrivilegeEscalation") is False, f"{name}: privilege escalation allowed")
    fail.check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{name}: capabilities not all dropped")
    fail.check(sc.get("runAsNonRoot") is True, f"{name}: container runAsNonRoot is not true")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    fail.check(ports.get("ops") == 9090, f"{name}: no ops port 9090: {ports}")
    for probe, path in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")]:
        got = c.get(probe, {}).get("httpGet", {})
        fail.check(
            got.get("path") == path and got.get("port") == "ops",
            f"{name}: {probe} is {got}, want GET {path} on port ops",
        )
    args = c["args"]
    fail.check(args[:3] == ["serve", "--config", f"{CONFIG_DIR}/tollgate.toml"], f"{name}: args start {args[:3]}")
    fail.check(flag_value(args, "--ops") == "0.0.0.0:9090", f"{name}: --ops is {flag_value(args, '--ops')}")
    mounts = c.get("volumeMounts", [])
    fail.check(all("subPath" not in m and "subPathExpr" not in m for m in mounts), f"{name}: a subPath mount: {mounts}")
    config_mounts = [m for m in mounts if m["mountPath"] == CONFIG_DIR]
    fail.check(len(config_mounts) == 1 and config_mounts[0].get("readOnly") is True, f"{name}: {CONFIG_DIR} mount: {mounts}")
    for e in c.get("env", []):
        if e["name"] in ("TOLLGATE_REDIS_PASSWORD", "TOLLGATE_STORE", "TOLLGATE_ADMIN_TOKEN"):
            fail.check(
                "value" not in e and "secretKeyRef" in e.get("valueFrom", {}),
                f"{name}: env {e['name']} not from a Secret: {e}",
            )
    return c


def flag_value(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def projected_items(dep):
    """The config volume's files: path -> (source kind, object name, key)."""
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    out = {}
    for source in volumes["config"]["projected"]["sources"]:
        [(kind, ref)] = source.items()
        for item in ref["items"]:
            out[item["path"]] = (kind, ref["name"], item["key"])
    return out


def check_case(case, docs, notes, fail):
    """The assertions of one value set (`case["expect"]`)."""
    name = case["name"]
    want = case["expect"]
    fail.check(not by_kind(docs, "Secret"), f"{name}: the chart rendered a Secret (it must only reference them)")
    [dep] = by_kind(docs, "Deployment")
    [cm] = by_kind(docs, "ConfigMap")
    c = check_pod(dep, fail, name)
    args = c["args"]
    toml_text = cm["data"]["tollgate.toml"]
    config = tomllib.loads(toml_text)
    fail.check(DUMMY_PASSWORD not in yaml.safe_dump([o for _, _, o in docs]), f"{name}: a password in a manifest")

    # Replicas, PDB, HPA, ServiceMonitor, rollout annotation.
    fail.check(dep["spec"].get("replicas") == want.get("replicas"), f"{name}: replicas {dep['spec'].get('replicas')}, want {want.get('replicas')}")
    pdbs = by_kind(docs, "PodDisruptionBudget")
    fail.check(len(pdbs) == (1 if want.get("pdb") else 0), f"{name}: {len(pdbs)} PDBs, want pdb={want.get('pdb')}")
    for pdb in pdbs:
        fail.check(pdb["spec"].get("maxUnavailable") == 1, f"{name}: PDB {pdb['spec']}")
        fail.check(pdb["spec"]["selector"] == dep["spec"]["selector"], f"{name}: PDB selects other pods")
    hpas = by_kind(docs, "HorizontalPodAutoscaler")
    fail.check(len(hpas) == (1 if want.get("hpa") else 0), f"{name}: {len(hpas)} HPAs")
    for hpa in hpas:
        lo, hi = want["hpa"]
        fail.check((hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (lo, hi), f"{name}: HPA {hpa['spec']}")
        fail.check(hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"], f"{name}: HPA scales something else")
    monitors = by_kind(docs, "ServiceMonitor")
    fail.check(len(monitors) == (1 if want.get("monitor") else 0), f"{name}: {len(monitors)} ServiceMonitors")
    annotations = dep["spec"]["template"]["metadata"].get("annotations", {})
    fail.check(("checksum/config" in annotations) == bool(want.get("rollout")), f"{name}: checksum/config annotation {annotations}")

    # Services: one per door and ops, each to a port the container has.
    doors = set(want.get("doors", ["http"]))
    services = {s["metadata"]["labels"]["app.kubernetes.io/component"]: s for s in by_kind(docs, "Service")}
    fail.check(set(services) == doors | {"ops"}, f"{name}: Services for {sorted(services)}, want {sorted(doors | {'ops'})}")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    standard = {"http": 8080, "grpc": 8081, "proxy": 8082, "admin": 9091, "ops": 9090}
    for door, svc in services.items():
        [port] = svc["spec"]["ports"]
        fail.check(port["port"] == standard[door] and port["targetPort"] == door, f"{name}: Service {door}: {port}")
        fail.check(ports.get(door) == standard[door], f"{name}: no container port {door}")
        fail.check(svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"], f"{name}: Service {door} selects other pods")
    for door in ("http", "grpc", "proxy", "admin"):
        addr = flag_value(args, f"--{door}")
        fail.check(
            addr == (f"0.0.0.0:{standard[door]}" if door in doors else None),
            f"{name}: --{door} is {addr}",
        )
    if "grpc" in doors:
        [port] = services["grpc"]["spec"]["ports"]
        fail.check(port.get("appProtocol") == "kubernetes.io/h2c", f"{name}: gRPC appProtocol {port.get('appProtocol')}")
        fail.check(services["grpc"]["spec"].get("clusterIP") == want.get("grpc_cluster_ip"), f"{name}: gRPC clusterIP")
    for monitor in monitors:
        [ep] = monitor["spec"]["endpoints"]
        fail.check(ep["port"] == "ops" and ep["path"] == "/metrics", f"{name}: ServiceMonitor endpoint {ep}")
        sel = monitor["spec"]["selector"]["matchLabels"]
        fail.check(
            all(services["ops"]["metadata"]["labels"].get(k) == v for k, v in sel.items())
            and not any(all(s["metadata"]["labels"].get(k) == v for k, v in sel.items()) for d, s in services.items() if d != "ops"),
            f"{name}: ServiceMonitor selects {sel}, not the ops Service alone",
        )

    # The config: store URL, files and Secrets at the paths the TOML names.
    store = config.get("store", {})
    if "url" in want:
        fail.check(store.get("url") == want["url"], f"{name}: store url {store.get('url')!r}, want {want['url']!r}")
    for key, value in want.get("store", {}).items():
        fail.check(store.get(key) == value, f"{name}: [store] {key} = {store.get(key)!r}, want {value!r}")
    items = projected_items(dep)
    fail.check(items.get("tollgate.toml") == ("configMap", cm["metadata"]["name"], "tollgate.toml"), f"{name}: tollgate.toml item {items}")
    secrets = {path: ref for path, ref in items.items() if ref[0] == "secret"}
    fail.check(set(secrets) == set(want.get("secret_files", {})), f"{name}: secret files {sorted(secrets)}, want {sorted(want.get('secret_files', {}))}")
    for path, (secret, key) in want.get("secret_files", {}).items():
        fail.check(secrets.get(path, (None,))[1:] == (secret, key), f"{name}: {path} from {secrets.get(path)}, want {secret}/{key}")
    for field, path in [("password_file", "secrets/redis-password")]:
        if path in secrets:
            fail.check(store.get(field) == f"{CONFIG_DIR}/{path}", f"{name}: [store] {field} = {store.get(field)!r}")
        else:
            fail.check(field not in store, f"{name}: [store] {field} names a file no Secret fills")
    tls = store.get("tls", {})
    for field, path in [("ca_file", "secrets/tls/ca.crt"), ("cert_file", "secrets/tls/tls.crt"), ("key_file", "secrets/tls/tls.key")]:
        fail.check(
            (tls.get(field) == f"{CONFIG_DIR}/{path}") == (path in secrets) and (field in tls) == (path in secrets),
            f"{name}: [store.tls] {field} = {tls.get(field)!r} but Secret file {path} {'is' if path in secrets else 'is not'} mounted",
        )
    for token in config.get("admin", {}).get("tokens", []):
        fail.check(token.get("token_file", "").removeprefix(f"{CONFIG_DIR}/") in secrets, f"{name}: admin token {token} not mounted")
        fail.check("token" not in token, f"{name}: an admin token inlined")
    env = {e["name"]: e for e in c.get("env", [])}
    fail.check(("TOLLGATE_REDIS_PASSWORD" in env) == (want.get("password") == "env"), f"{name}: TOLLGATE_REDIS_PASSWORD in env: {sorted(env)}")
    envoy_files = sorted(p for p in items if p.startswith("envoy/"))
    fail.check(envoy_files == [f"envoy/{n}.yaml" for n in want.get("envoy", [])], f"{name}: Envoy files {envoy_files}")
    envoy_args = [args[i + 1] for i, a in enumerate(args) if a == "--envoy-config"]
    fail.check(envoy_args == [f"{CONFIG_DIR}/{p}" for p in envoy_files], f"{name}: --envoy-config {envoy_args}")
    fail.check(
        ("WARNING: the memory store" in notes) == bool(want.get("memory_warning")),
        f"{name}: NOTES.txt memory warning {'missing' if want.get('memory_warning') else 'unexpected'}",
    )
    for check in want.get("toml_contains", []):
        fail.check(check in toml_text, f"{name}: TOML lacks {check!r}:\n{toml_text}")
    for key, value in want.get("pod", {}).items():
        got = dep["spec"]["template"]["spec"].get(key)
        fail.check(got == value, f"{name}: pod {key} = {got}, want {value}")
    return c, cm


def run_validate(binary, case, c, cm, certs, fail):
    """`tollgate validate` on the ConfigMap's files, laid out as in the pod
    (CONFIG_DIR under a temporary root, Secrets' files filled with dummies)."""
    name = case["name"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "etc" / "tollgate"
        relocate = lambda text: text.replace(f"{CONFIG_DIR}/", f"{root}/")  # noqa: E731
        for key, text in cm["data"].items():
            path = root / (key.replace("envoy.", "envoy/", 1) if key.startswith("envoy.") else key)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(relocate(text))
        dep_items = {p for p in c["_items"] if p.startswith("secrets/")}
        for path in dep_items:
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.startswith("secrets/tls/"):
                target.write_bytes((certs / Path(path).name).read_bytes())
            elif path.startswith("secrets/admin/"):
                target.write_text(DUMMY_TOKEN + "\n")
            else:
                target.write_text(DUMMY_PASSWORD + "\n")
        args = c["args"]
        cmd = [str(binary), "validate", "--config", relocate(flag_value(args, "--config"))]
        for i, a in enumerate(args):
            if a == "--envoy-config":
                cmd += ["--envoy-config", relocate(args[i + 1])]
        if "--envoy-merge-domains" in args:
            cmd.append("--envoy-merge-domains")
        env = dict(os.environ)
        env.pop("TOLLGATE_REDIS_PASSWORD", None)
        if any(e["name"] == "TOLLGATE_REDIS_PASSWORD" for e in c.get("env", [])):
            env["TOLLGATE_REDIS_PASSWORD"] = DUMMY_PASSWORD
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
        out = done.stdout + done.stderr
        toml_text = cm["data"]["tollgate.toml"]
        new = [what for key, what in NEW_KEYS.items() if key in toml_text]
        hint = (
            f"\n  (this set uses {', '.join(new)}: keys other parts of issue 38 add to the binary; "
            "merge them, rebuild, rerun)"
            if new
            else ""
        )
        fail.check(done.returncode == 0, f"{name}: tollgate validate exit {done.returncode}:\n{out.strip()}{hint}")
        fail.check(DUMMY_PASSWORD not in out and DUMMY_TOKEN not in out, f"{name}: validate printed a secret")
        return done.returncode == 0, new


def make_certs(tmp):
    """A CA and a client certificate signed by it, for the TLS sets."""
    d = Path(tmp)
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=d)  # noqa: E731
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=chart-test-ca")
    run("openssl", "req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=tollgate")
    run("openssl", "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "tls.crt", "-days", "2")
    return d


def check_flags(binary, flags, fail):
    """Every flag the chart passes to serve is one serve knows."""
    done = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True, timeout=60)
    fail.check(done.returncode == 0, f"tollgate serve --help exit {done.returncode}: {done.stderr}")
    for flag in sorted(flags):
        fail.check(
            f"{flag} " in done.stdout or f"{flag}\n" in done.stdout or f"{flag}=" in done.stdout,
            f"the chart passes {flag}, which `tollgate serve --help` does not list"
            + (" (--ops is added by another part of issue 38: merge it, rebuild, rerun)" if flag == "--ops" else ""),
        )


def check_negative(chart, fail):
    """Bad values fail the render with a message naming what to change."""
    for case in NEGATIVE:
        try:
            chart.render(values=case["values"], name="tollgate", namespace="default")
        except (helm.HelmValuesError, helm.HelmRenderError) as e:
            fail.check(case["error"] in str(e), f"negative {case['name']}: error does not say {case['error']!r}: {e}")
        else:
            fail.check(False, f"negative {case['name']}: rendered, want an error saying {case['error']!r}")


def check_rollout(chart, fail):
    """rolloutOnConfigChange: the checksum follows the config, only it."""
    def checksum(limit, annotation=None):
        values = {"rolloutOnConfigChange": True, "config": {"rules": [{"name": "r", "algorithm": "gcra", "limit": limit, "period": "1s"}]}}
        if annotation:
            values["podAnnotations"] = {"team": annotation}
        docs = RENDER.documents(chart.render(values=values, name="tollgate", namespace="default"))
        [dep] = by_kind(docs, "Deployment")
        return dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    fail.check(checksum(10) != checksum(11), "rolloutOnConfigChange: checksum/config did not change with the config")
    fail.check(checksum(10) == checksum(10, "x"), "rolloutOnConfigChange: checksum/config changed without a config change")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_bin = os.environ.get("TOLLGATE_BIN") or str(Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "tollgate")
    parser.add_argument("--tollgate", default=default_bin, help="the tollgate binary (default %(default)s)")
    args = parser.parse_args()
    binary = Path(args.tollgate)
    if not binary.exists():
        sys.exit(f"no tollgate binary at {binary}: cargo build -p tollgate-server, or pass --tollgate")
    started = time.monotonic()
    fail = Failures()

    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    meta = yaml.safe_load((RENDER.CHART / "Chart.yaml").read_text())
    fail.check(
        meta["appVersion"] == cargo["workspace"]["package"]["version"],
        f"Chart.yaml appVersion {meta['appVersion']} is not the workspace version {cargo['workspace']['package']['version']}",
    )
    lint = helm.lint(str(RENDER.CHART), strict=True, kube_version="v" + KUBE_VERSIONS[0])
    fail.check(not lint["errors"] and all(m["severity"] < 2 for m in lint["messages"]), f"helm lint: {lint}")

    validated = skipped = 0
    flags = set()
    pending = {}
    with tempfile.TemporaryDirectory() as tmp, helm.Chart.load(str(RENDER.CHART)) as chart:
        certs = make_certs(tmp)
        for case in VALUE_SETS:
            before = len(fail.items)
            rendered = chart.render(values=values_of(case), name="tollgate", namespace="default")
            docs = RENDER.documents(rendered)
            notes = next((t for s, t in rendered.items() if s.endswith("NOTES.txt")), "")
            validated += validate_schemas(docs, fail, case["name"])
            skipped += sum(1 for _, _, o in docs if o["kind"] in NOT_IN_SCHEMAS)
            c, cm = check_case(case, docs, notes, fail)
            c["_items"] = projected_items(by_kind(docs, "Deployment")[0])
            flags.update(a for a in c["args"] if a.startswith("--"))
            ok, new = run_validate(binary, case, c, cm, certs, fail)
            if new:
                pending[case["name"]] = new
            status = "ok" if len(fail.items) == before else "FAILED"
            print(f"{case['name']:<22} {len(docs)} objects, validate {'ok' if ok else 'refused'}: {status}")
        check_negative(chart, fail)
        check_rollout(chart, fail)
    check_flags(binary, flags, fail)
    stale = subprocess.run([sys.executable, str(DEPLOY / "render-manifests.py"), "--check"], capture_output=True, text=True)
    fail.check(stale.returncode == 0, f"deploy/kubernetes/ is stale:\n{stale.stdout}{stale.stderr}")

    took = time.monotonic() - started
    print(
        f"{len(VALUE_SETS)} value sets, {validated} manifests validated against Kubernetes "
        f"{' and '.join(KUBE_VERSIONS)} (strict), {skipped} ServiceMonitors read but not schema-checked "
        f"(a CRD), {len(NEGATIVE)} bad value sets refused; {took:.1f} s"
    )
    if pending:
        print("sets using config keys new in issue 38: " + "; ".join(f"{k} ({', '.join(v)})" for k, v in pending.items()))
    if fail.items:
        print(f"\n{len(fail.items)} failed:", file=sys.stderr)
        for item in fail.items:
            print(f"- {item}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
