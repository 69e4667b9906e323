"""The value sets deploy/test-chart.py renders, and what each must give.

A set is an example file of deploy/helm/examples/ (or none: the chart's
defaults) with overrides; `expect` is what the rendered objects must show
(test-chart.py's check_case reads it). NEGATIVE are values the chart must
refuse, with a piece of the message that says what to change.
"""

REDIS_PASSWORD_FILE = {"secrets/redis-password": ("tollgate-redis", "redis-password")}
SELECTOR = {"app.kubernetes.io/instance": "tollgate", "app.kubernetes.io/name": "tollgate"}


def limit(key, unit, n):
    """An Envoy descriptor with its rate limit."""
    return {"key": key, "rate_limit": {"unit": unit, "requests_per_unit": n}}


VALUE_SETS = [
    {
        "name": "defaults",
        "expect": {"replicas": 1, "url": "memory", "toml_contains": ['name = "api_per_key"']},
    },
    {
        "name": "memory",
        "example": "memory.yaml",
        "expect": {"replicas": 1, "url": "memory", "toml_contains": ['name = "login_per_ip"']},
    },
    {
        # Accepted on purpose, and warned about in NOTES.txt.
        "name": "memory-3-replicas",
        "values": {"replicaCount": 3, "store": {"memory": {"allowReplicas": True}}},
        "expect": {"replicas": 3, "url": "memory", "pdb": True, "memory_warning": True},
    },
    {
        # A rolling update chosen explicitly: taken as written.
        "name": "memory-rolling-update",
        "values": {"updateStrategy": {"type": "RollingUpdate"}},
        "expect": {"replicas": 1, "url": "memory", "strategy": {"type": "RollingUpdate"}},
    },
    {
        "name": "redis",
        "example": "redis.yaml",
        "expect": {
            "replicas": 2,
            "pdb": True,
            "url": "redis://redis-master:6379",
            "store": {"on_error": "local", "replicas": 2},
            "secret_files": REDIS_PASSWORD_FILE,
        },
    },
    {
        "name": "redis-tls",
        "example": "redis-tls.yaml",
        "expect": {
            "replicas": 2,
            "pdb": True,
            "url": "rediss://tollgate@redis.cache.svc:6380/2",
            "secret_files": {
                "secrets/tls/ca.crt": ("tollgate-redis-tls", "ca.crt"),
                "secrets/tls/tls.crt": ("tollgate-redis-tls", "tls.crt"),
                "secrets/tls/tls.key": ("tollgate-redis-tls", "tls.key"),
            },
            "env_secrets": {"TOLLGATE_REDIS_PASSWORD": ("tollgate-redis", "password")},
            "toml_contains": ['server_name = "redis.cache.svc"'],
        },
    },
    {
        # A TLS Secret with no key left to mount: no source at all (one
        # without items would project every key, tls.key too).
        "name": "tls-no-files",
        "values": {
            "store": {
                "kind": "redis",
                "tls": {"enabled": True, "existingSecret": "tls", "caKey": ""},
            }
        },
        "expect": {
            "replicas": 2,
            "pdb": True,
            "url": "rediss://redis:6379",
            "toml_lacks": ["[store.tls]"],
        },
    },
    {
        # Secret names and keys that YAML would read as numbers or a
        # boolean unless quoted (the API server wants strings).
        "name": "numeric-secret-names",
        "values": {
            "store": {
                "kind": "redis",
                "password": {"existingSecret": "1234", "key": "5678"},
                "urlSecret": {"name": "1e3", "key": "true"},
                "tls": {
                    "enabled": True,
                    "existingSecret": "2024",
                    "caKey": "1",
                    "certKey": "2",
                    "keyKey": "0x3",
                },
            },
            "doors": {
                "admin": {
                    "enabled": True,
                    "tokens": [{"name": "oncall", "existingSecret": "42", "key": "0777"}],
                }
            },
            "serviceAccount": {"name": "1001"},
            "priorityClassName": "1000",
        },
        "expect": {
            "replicas": 2,
            "pdb": True,
            "doors": ["http", "admin"],
            "url": "rediss://redis:6379",
            "secret_files": {
                "secrets/redis-password": ("1234", "5678"),
                "secrets/tls/ca.crt": ("2024", "1"),
                "secrets/tls/tls.crt": ("2024", "2"),
                "secrets/tls/tls.key": ("2024", "0x3"),
                "secrets/admin/oncall": ("42", "0777"),
            },
            "env_secrets": {"TOLLGATE_STORE": ("1e3", "true")},
            "pod": {"serviceAccountName": "1001", "priorityClassName": "1000"},
        },
    },
    {
        "name": "numeric-env-secret",
        "values": {
            "store": {
                "kind": "redis",
                "password": {"existingSecret": "123", "key": "1.5", "mountAs": "env"},
            }
        },
        "expect": {
            "replicas": 2,
            "pdb": True,
            "url": "redis://redis:6379",
            "env_secrets": {"TOLLGATE_REDIS_PASSWORD": ("123", "1.5")},
        },
    },
    {
        "name": "sentinel",
        "example": "sentinel.yaml",
        "expect": {
            "replicas": 2,
            "pdb": True,
            "url": "redis+sentinel://redis-node-0.redis-headless:26379,"
            "redis-node-1.redis-headless:26379,redis-node-2.redis-headless:26379/mymaster",
            "secret_files": REDIS_PASSWORD_FILE,
        },
    },
    {
        "name": "cluster",
        "example": "cluster.yaml",
        "expect": {
            "replicas": 3,
            "pdb": True,
            "url": "redis+cluster://redis-cluster-0.redis-cluster-headless:6379,"
            "redis-cluster-1.redis-cluster-headless:6379,"
            "redis-cluster-2.redis-cluster-headless:6379",
            "store": {"timeout": "100ms", "replicas": 3},
        },
    },
    {
        # The whole URL from a Secret (it may carry credentials): env
        # TOLLGATE_STORE, which wins over the URL the ConfigMap names.
        "name": "url-secret",
        "values": {"store": {"kind": "redis", "urlSecret": {"name": "tollgate-redis-url"}}},
        "expect": {
            "replicas": 2,
            "pdb": True,
            "url": "redis://redis:6379",
            "env_secrets": {"TOLLGATE_STORE": ("tollgate-redis-url", "url")},
        },
    },
    {
        "name": "hybrid",
        "example": "hybrid.yaml",
        "expect": {
            "replicas": 4,
            "pdb": True,
            "url": "redis://redis-master:6379",
            "store": {
                "hybrid": True,
                "hybrid_batch": 50,
                "hybrid_lease": "200ms",
                "max_keys": 200000,
                "replicas": 4,
            },
        },
    },
    {
        "name": "envoy-grpc-only",
        "example": "envoy.yaml",
        "expect": {
            "replicas": 2,
            "pdb": True,
            "doors": ["grpc"],
            "envoy": ["edge"],
            "grpc_cluster_ip": "None",
            "url": "redis://redis-master:6379",
        },
    },
    {
        # Two Envoy files for one domain, given as maps, merged.
        "name": "envoy-merged-domains",
        "values": {
            "doors": {"grpc": {"enabled": True}},
            "envoy": {
                "mergeDomains": True,
                "configs": {
                    "edge-a": {"domain": "edge", "descriptors": [limit("a", "second", 5)]},
                    "edge-b": {"domain": "edge", "descriptors": [limit("b", "minute", 50)]},
                },
            },
        },
        "expect": {
            "replicas": 1,
            "doors": ["http", "grpc"],
            "envoy": ["edge-a", "edge-b"],
            "url": "memory",
        },
    },
    {
        "name": "proxy",
        "example": "proxy.yaml",
        "expect": {
            "replicas": 2,
            "pdb": True,
            "doors": ["proxy"],
            "url": "redis://redis-master:6379",
            "toml_contains": [
                'upstream = "http://backend.default.svc:8080"',
                'trusted_proxies = ["10.0.0.0/8"]',
                'on_missing_key = "reject"',
                'cost = "response_header:x-usage-tokens"',
            ],
        },
    },
    {
        "name": "production",
        "example": "production.yaml",
        "expect": {
            "replicas": None,
            "hpa": (3, 12),
            "pdb": True,
            "monitor": True,
            # Ready with no Redis answering: one Redis failing must not
            # take every pod out of its Services at once (ops.readiness).
            "doors": ["http", "admin"],
            # The HTTP API has no authentication: never a public load balancer.
            "service_types": {"http": "ClusterIP", "admin": "ClusterIP", "ops": "ClusterIP"},
            "url": "redis://redis-master:6379",
            "store": {"replicas": 3},
            "secret_files": {
                **REDIS_PASSWORD_FILE,
                "secrets/admin/oncall": ("tollgate-admin", "token"),
            },
            "toml_contains": [
                "[[rules.overrides]]",
                'key = "enterprise:*"',
                "near_limit_ratio = 0.9",
            ],
            "pod": {
                "topologySpreadConstraints": [
                    {
                        "labelSelector": {"matchLabels": SELECTOR},
                        "maxSkew": 1,
                        "topologyKey": topology,
                        "whenUnsatisfiable": "ScheduleAnyway",
                    }
                    for topology in ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
                ]
            },
        },
    },
    {
        # The opt-in: readiness follows the store, and no Redis answers here.
        "name": "readiness-store",
        "example": "redis.yaml",
        "values": {"ops": {"readiness": "store"}},
        "expect": {
            "replicas": 2,
            "pdb": True,
            "ready": False,
            "url": "redis://redis-master:6379",
            "secret_files": REDIS_PASSWORD_FILE,
            "toml_contains": ['readiness = "store"'],
        },
    },
    {
        "name": "rollout-on-change",
        "example": "redis.yaml",
        "values": {"rolloutOnConfigChange": True},
        "expect": {
            "replicas": 2,
            "pdb": True,
            "rollout": True,
            "url": "redis://redis-master:6379",
            "secret_files": REDIS_PASSWORD_FILE,
        },
    },
    {
        # The whole TOML as written; no password file in it.
        "name": "raw-toml",
        "values": {
            "config": {
                "toml": '[store]\nurl = "memory"\n\n[[rules]]\nname = "raw"\n'
                'algorithm = "fixed_window"\nlimit = 7\nperiod = "1m"\n'
            }
        },
        "expect": {"replicas": 1, "url": "memory", "toml_contains": ['name = "raw"', "limit = 7"]},
    },
]

NEGATIVE = [
    {
        "name": "memory store on 3 replicas",
        "values": {"replicaCount": 3},
        "error": "store.kind=memory keeps each pod's counters apart: "
        "3 pods would admit 3 times every limit",
    },
    {
        "name": "memory store autoscaled",
        "values": {"autoscaling": {"enabled": True}},
        "error": "store.memory.allowReplicas=true",
    },
    {
        "name": "unknown store kind",
        "values": {"store": {"kind": "etcd"}},
        "error": "at '/store/kind': value must be one of",
    },
    {
        "name": "misspelt value",
        "values": {"replicas": 2},
        "error": "additional properties 'replicas' not allowed",
    },
    {
        "name": "bad duration",
        "values": {"store": {"timeout": "50"}},
        "error": "at '/store/timeout'",
    },
    {
        "name": "hybrid on memory",
        "values": {"store": {"hybrid": {"enabled": True}}},
        "error": "store.hybrid.enabled takes its batches from Redis",
    },
    {
        "name": "Redis URL with the memory kind",
        "values": {"store": {"url": "redis://r:6379"}},
        "error": "names a Redis store: set store.kind",
    },
    {
        "name": "password on memory",
        "values": {"store": {"password": {"existingSecret": "s"}}},
        "error": "apply to Redis stores, not store.kind=memory",
    },
    {
        # The ConfigMap is no place for a secret: a password belongs in a Secret.
        "name": "password in store.url",
        "values": {"store": {"kind": "redis", "url": "redis://app:hunter2@r:6379/0"}},
        "error": "store.url carries a password",
    },
    {
        "name": "password alone in a Sentinel store.url",
        "values": {"store": {"kind": "sentinel", "url": "redis+sentinel://:p@ss/w@s:26379/m"}},
        "error": "store.password.existingSecret",
    },
    {
        "name": "password in config.toml's url",
        "values": {
            "config": {
                "toml": '[store]\nurl = "redis+cluster://u:pw@c:6379"\n\n[[rules]]\nname = "r"\n'
            }
        },
        "error": "config.toml's [store] url carries a password",
    },
    {
        "name": "TLS on sentinel",
        "values": {"store": {"kind": "sentinel", "tls": {"enabled": True}}},
        "error": "store.tls is for standalone Redis (rediss://), not store.kind=sentinel",
    },
    {
        "name": "client cert without key",
        "values": {
            "store": {
                "kind": "redis",
                "tls": {"enabled": True, "existingSecret": "t", "certKey": "tls.crt"},
            }
        },
        "error": "store.tls.certKey and store.tls.keyKey go together",
    },
    {
        "name": "cluster without nodes",
        "values": {"store": {"kind": "cluster", "cluster": {"nodes": []}}},
        "error": "store.kind=cluster needs store.cluster.nodes",
    },
    {
        "name": "no door",
        "values": {"doors": {"http": {"enabled": False}}},
        "error": "no front door",
    },
    {
        "name": "proxy without upstream",
        "values": {"doors": {"proxy": {"enabled": True}}},
        "error": "doors.proxy.enabled needs doors.proxy.upstream",
    },
    {
        "name": "gRPC without Envoy files",
        "values": {"doors": {"grpc": {"enabled": True}}},
        "error": "doors.grpc.enabled needs envoy.configs",
    },
    {
        "name": "Envoy files without gRPC",
        "values": {"envoy": {"configs": {"edge": "domain: edge\n"}}},
        "error": "envoy.configs are served by the gRPC door",
    },
    {
        "name": "admin without tokens",
        "values": {"doors": {"admin": {"enabled": True}}},
        "error": "doors.admin.enabled needs doors.admin.tokens",
    },
    {
        # Two files at one path in the projected volume: the API server
        # refuses the Deployment ("conflicting duplicate paths").
        "name": "admin token names twice",
        "values": {
            "doors": {
                "admin": {
                    "enabled": True,
                    "tokens": [
                        {"name": "oncall", "existingSecret": "a", "key": "token"},
                        {"name": "oncall", "existingSecret": "b", "key": "token"},
                    ],
                }
            }
        },
        "error": 'doors.admin.tokens: the name "oncall" is given twice',
    },
    {
        # The second listener cannot bind: the pod crash-loops.
        "name": "a door on the ops port",
        "values": {"doors": {"http": {"port": 9090}}},
        "error": "doors.http.port and ops.port are both 9090",
    },
    {
        "name": "two doors on one port",
        "values": {"doors": {"proxy": {"enabled": True, "upstream": "http://b:80", "port": 8080}}},
        "error": "doors.http.port and doors.proxy.port are both 8080",
    },
    {
        "name": "no rules",
        "values": {"config": {"rules": []}},
        "error": "config.rules is empty",
    },
    {
        "name": "autoscaling max below min",
        "values": {
            "store": {"kind": "redis"},
            "autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2},
        },
        "error": "autoscaling.maxReplicas is below autoscaling.minReplicas",
    },
]
