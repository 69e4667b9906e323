#!/usr/bin/env python3
"""bench/http/load.py HOST:PORT N CONNS KIND [KEYS]: sends N requests over
CONNS keep-alive connections, one in flight each (bench/http-instructions.sh).
KIND: check-open | check-closed | charge-open | healthz | get (GET / with
x-key among KEYS)."""
import random, selectors, socket, sys

def build(kind, keys):
    reqs = []
    for i in range(keys):
        k = "k%d" % i
        if kind.startswith("check-") or kind.startswith("charge-"):
            verb, rule = kind.split("-", 1)
            body = '{"rule":"%s","key":"%s","cost":1}' % (rule, k)
            reqs.append(("POST /v1/" + verb + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
        elif kind == "healthz":
            reqs.append(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        elif kind == "get":
            reqs.append(("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nx-key: %s\r\n\r\n" % k).encode())
    return reqs

def main():
    host, port = sys.argv[1].rsplit(":", 1)
    n, conns, kind = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    keys = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    reqs = build(kind, keys)
    rnd = random.Random(1)
    sel = selectors.DefaultSelector()
    sent = done = 0
    statuses = {}
    state = {}
    for _ in range(min(conns, n)):
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state[s] = bytearray()
        s.sendall(reqs[rnd.randrange(len(reqs))]); sent += 1
        sel.register(s, selectors.EVENT_READ)
    while done < n:
        for key, _ in sel.select():
            s = key.fileobj
            data = s.recv(65536)
            if not data:
                raise SystemExit("connection closed")
            buf = state[s]; buf += data
            while True:
                h = buf.find(b"\r\n\r\n")
                if h < 0: break
                head = bytes(buf[:h]).decode()
                cl = 0
                for line in head.split("\r\n")[1:]:
                    k, v = line.split(":", 1)
                    if k.lower() == "content-length": cl = int(v)
                if len(buf) < h + 4 + cl: break
                st = head.split(" ", 2)[1]
                statuses[st] = statuses.get(st, 0) + 1
                del buf[:h + 4 + cl]
                done += 1
                if sent < n:
                    s.sendall(reqs[rnd.randrange(len(reqs))]); sent += 1
    print("done", done, statuses, file=sys.stderr)

main()
