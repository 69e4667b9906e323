#!/usr/bin/env python3
"""Writes the committed seed corpora (fuzz/corpus/<target>/): valid
examples from the tests and docs plus edge cases, a few each. Run from
anywhere; rewrites the seed files it names and leaves others alone."""
import hashlib
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def seed(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:12]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def example(path):
    with open(os.path.join(REPO, path), "rb") as f:
        return f.read()


# /v1/*: the endpoint's index (check, charge, reserve, settle, cancel,
# acquire, release, renew), then the body.
for i, body in [
    (0, '{"rule":"g","key":"k"}'),
    (0, '{"rule":"tpm","key":"team-a","cost":0}'),
    (0, '{ "rule" : "g", "key" : "k\\u00e9", "cost" : 18446744073709551615 }'),
    (0, '{"checks":[{"rule":"g","key":"k"},{"rule":"sw","key":"vip-1","cost":2}],"cost":0}'),
    (0, '{"rule":"g","key":"k","rule":"g"}'),
    (0, '{"rule":"g","key":"k","cost":1.5e3}'),
    (0, '{"rule":"g","key":"k","cost":-0}'),
    (1, '{"rule":"tpm","key":"team-a","cost":9000}'),
    (2, '{"rule":"tpm","key":"team-a","cost":2000,"ttl_ms":120000}'),
    (3, '{"reservation":"r1~XPrdvz-8O8U5I6WpudWTNA~tpm~PXRlYW0tYQ","cost":2750}'),
    (4, '{"reservation":"r1~XPrdvz-8O8U5I6WpudWTNA~tpm~PXRlYW0tYQ"}'),
    (5, '{"rule":"inflight","key":"team-a"}'),
    (6, '{"lease":"l1~uZhpJeNso74sT9mfXeGPaA~inflight~PXRlYW0tYQ"}'),
    (7, '{"lease":"l1~uZhpJeNso74sT9mfXeGPaA~inflight~PXRlYW0tYQ"}'),
]:
    seed("v1_api", bytes([i]) + body.encode())

# Admin: route index (keys GET/DELETE, blocks POST/GET/DELETE, refunds
# POST, overrides GET/PUT/DELETE, top GET), path tail, "\n", body.
for i, tail, body in [
    (0, "g/tenant%3Aacme", ""),
    (1, "*/tenant%3Aacme", ""),
    (2, "", '{"rule":"*","key":"tenant:evil","for_ms":600000}'),
    (4, "*/tenant%3Aevil", ""),
    (5, "", '{"rule":"g","key":"tenant:acme","cost":-5}'),
    (7, "g/tenant%3Atrial%3A*", '{"limit":10,"period":"1m","ttl_ms":86400000}'),
    (8, "g/tenant%3Aacme", ""),
    (9, "g?n=20", ""),
    (0, "g/%zz", ""),
]:
    seed("admin_api", bytes([i]) + f"{tail}\n{body}".encode())

# RESP2 replies as Redis sends them.
for r in [
    b"*5\r\n:1733500000123456\r\n:1\r\n:9\r\n:0\r\n:0\r\n",
    b"*4\r\n:1\r\n:-2\r\n:999999999999999999\r\n:0\r\n",
    b"*2\r\n:1\r\n:12345678901234567890\r\n",
    b"+OK\r\n",
    b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
    b"$5\r\nhello\r\n",
    b"$-1\r\n",
    b"*-1\r\n",
    b"*2\r\n$6\r\nmaster\r\n*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n",
    b"*3\r\n:1\r\n-ERR in a transaction\r\n+QUEUED\r\n",
    b":42\r\n",
    b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
]:
    seed("resp", r)

# Config: the examples, and a few rules the checker must weigh.
seed("config_toml", example("examples/tollgate.toml"))
seed("config_toml", example("examples/llm-tokens.toml"))
seed("config_toml", """
[[rules]]
name = "per_tenant"
algorithm = "gcra"
limit = 100
period = "1s"
  [[rules.overrides]]
  key = "tenant:enterprise:*"
  limit = 5000
  burst = 10000
""")
seed("config_toml", """
[[rules]]
name = "tpm"
algorithm = "token_bucket"
limit = 18446744073709551615
period = "366d"
burst = 1
cost = "response_header:x-usage-tokens"
estimate = 1
""")
seed("config_toml", '[admin]\ntokens = [{ name = "ops", token = "0123456789abcdef0123" }]\n')

# Envoy YAML: the example and the reference cases.
seed("envoy_yaml", example("examples/envoy/edge-ratelimit.yaml"))
data = os.path.join(REPO, "crates/tollgate-server/tests/data/envoy_reference")
for name in ["basic.yaml", "wildcard.yaml", "share_threshold.yaml", "metadata.yaml",
             "replaces_self.yaml", "quota_mode.yaml", "bad_yaml.yaml", "non_map_list.yaml"]:
    seed("envoy_yaml", example(os.path.join(data, name)))


# gRPC: a chunk size, then the body (5-byte prefix + RateLimitRequest).
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(tag, payload):
    return varint(tag << 3 | 2) + varint(len(payload)) + payload


def entry(k, v):
    return field(1, field(1, k.encode()) + field(2, v.encode()))


def request(domain, descriptors, hits=0):
    m = field(1, domain.encode())
    for d in descriptors:
        m += field(2, d)
    if hits:
        m += varint(3 << 3) + varint(hits)
    return m


def framed(m):
    return b"\x00" + struct.pack(">I", len(m)) + m


import re
yaml = example("examples/envoy/edge-ratelimit.yaml").decode()
domain = re.search(r"^domain:\s*(\S+)", yaml, re.M).group(1)
keys = re.findall(r"key:\s*(\S+)", yaml)
k0 = keys[0] if keys else "generic_key"
one = request(domain, [entry(k0, "v")])
seed("envoy_grpc", b"\x00" + framed(one))
seed("envoy_grpc", b"\x03" + framed(one))
seed("envoy_grpc", b"\x00" + framed(request(domain, [entry(k0, "a") + entry(keys[-1], "b"),
                                                      entry(k0, "c") + field(3, varint(1 << 3) + varint(5))],
                                             hits=2)))
seed("envoy_grpc", b"\x00" + framed(request(domain, [entry(k0, "x") + field(2, varint(1 << 3) + varint(7) + varint(2 << 3) + varint(1))])))
seed("envoy_grpc", b"\x00" + framed(request(domain, [entry(k0, "x") + varint(4 << 3) + varint(1)])))
seed("envoy_grpc", b"\x00" + framed(one) + framed(one))
seed("envoy_grpc", b"\x00" + b"\x00\xff\xff\xff\xff")
seed("envoy_grpc", b"\x00" + b"\x01\x00\x00\x00\x00")

# Replay: the examples and every op.
seed("replay_csv", example("examples/trace.csv")[:400])
seed("replay_csv", example("examples/llm-trace.csv")[:600])
seed("replay_csv", "t_ms,rule,key,cost,op,ttl_ms\n"
     "0,sw,a,30,reserve,\n0,sw,a,30,reserve,1000\n10,sw,a,50,settle,\n20,sw,a,,cancel,\n"
     "30,sw,a,80,charge,\n40,sw,a,1,,\n40,sw,a,0,check,\n700,inflight,k,,acquire,\n"
     "730,inflight,k,,renew,\n1720,inflight,k,,release,\n")
seed("replay_csv", 't_ms,rule,key,cost\n0,g,"a,b",1\n5,g,"q""uote",\n5,g,k,18446744073709551615\n')
seed("replay_csv", "t_ms,rule,key\n9223372036854775,g,k\n")

# Proxy heads: request target, then header fields.
for h in [
    "/v1/completions\nhost: api.example\nx-api-key: a+b\nx-forwarded-for: 198.51.100.7, 10.0.0.2\n"
    "connection: close, x-secret\nx-secret: 1\nx-usage-tokens: 2750",
    "http://a.example:8080/%6cogin/./x/../y//z\nhost: A.Example..\nx-usage-tokens: +5",
    "/\nhost: [::1]:443\nx-forwarded-for: 2001:db8::1\nx-usage-tokens: 1\nx-usage-tokens: 2",
    "header:x-api-key+client_ip+path\nte: trailers\ntransfer-encoding: chunked",
    "10.0.0.0/8\nx-forwarded-for: ,,\nupgrade: websocket",
    "response_header:x-usage-tokens\nx-usage-tokens: 18446744073709551616",
    "u@a.example:80\nhost: a:65536",
]:
    seed("proxy_headers", h)

# Response bodies for the usage meter: a kind byte (even JSON, odd SSE;
# 2 set: the body was cut short), a piece size, then the body.
for kind, body in [
    (0, '{"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29}}'),
    (0, '{"usage":{"input_tokens":36,"output_tokens":87,"total_tokens":123}}'),
    (0, '{"usage":{"input_tokens":4,"cache_creation_input_tokens":null,"cache_read_input_tokens":2,"output_tokens":3}}'),
    (0, '{"usage":{"total_tokens":-5,"total_tokens":1.5e3}}'),
    (2, '{"usage":{"total_tokens":18446744073709551616'),
    (1, 'data: {"choices":[],"usage":null}\n\ndata: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":2,"total_tokens":10}}\n\ndata: [DONE]\n\n'),
    (1, 'event: response.completed\r\ndata: {"type":"response.completed","response":{"usage":{"input_tokens":37,"output_tokens":11,"total_tokens":48}}}\r\n\r\n'),
    (1, 'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}\n\nevent: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":15}}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n'),
    (3, '\ufeff: hi\rdata: {"a":[{"/":7}]}\r\rdata: {"usage":\ndata: {"total_tokens":4}}\n\ndata: {"us'),
]:
    for step in [1, 7]:
        seed("usage_body", bytes([kind, step]) + body.encode())

# Ticket ids from the docs and the tests' shapes.
for t in [
    "r1~XPrdvz-8O8U5I6WpudWTNA~tpm~PXRlYW0tYQ",
    "l1~uZhpJeNso74sT9mfXeGPaA~inflight~PXRlYW0tYQ",
    "r1~XPrdvz-8O8U5I6WpudWTNA~tpm.v2~PXRlYW0tYQ~rpm~I2FhZjRjNjFkZGNjNWU4YTJkYWJlZGUwZjNiNDgyY2Q5YWVhOTQzNGQ",
    "l1~abc~r~PWs",
    "r1~XPrdvz-8O8U5I6WpudWTNB~tpm~PXRlYW0tYR",
]:
    seed("ticket_ids", t)
