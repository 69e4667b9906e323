"""Runs tollgate's check script in batch mode ("b") the way the store
sends it: ITERS runs of BATCH GCRA checks (1,000,000 per 1 s, cost 1), each
on a key drawn among KEYS (1: one hot key), 50 runs pipelined at a time.
SCRIPTFILE is a function library (it starts with `#!lua`: loaded with
FUNCTION LOAD and run with FCALL, as the store does on Redis 7) or a script
(EVALSHA). Prints redis-server's own usec_per_call (INFO commandstats) for
the runs.

With DENIED=1 the rule is one a day in bursts of 2 and every key exists
first with a TAT two days ahead: every check is denied (bench/http's
"closed" rule on keys that have had their two).

usage: batch.py PORT SCRIPTFILE [BATCH=20] [KEYS=10000] [ITERS=3000]
"""
import os
import random
import re
import socket
import sys
import time

port = int(sys.argv[1]); src = open(sys.argv[2], 'rb').read()
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 20
nkeys = int(sys.argv[4]) if len(sys.argv) > 4 else 10000
iters = int(sys.argv[5]) if len(sys.argv) > 5 else 3000
s = socket.create_connection(('127.0.0.1', port)); f = s.makefile('rb')
def enc(*args):
    out = [b'*%d\r\n' % len(args)]
    for a in args:
        if isinstance(a, str): a = a.encode()
        out.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(out)
def read():
    line = f.readline()
    t = line[:1]
    if t in b'+-:': return line[1:-2]
    if t == b'$':
        n = int(line[1:-2]);
        if n < 0: return None
        d = f.read(n + 2); return d[:-2]
    if t == b'*':
        n = int(line[1:-2]); return [read() for _ in range(n)]
    raise Exception(line)
def cmd(*a):
    s.sendall(enc(*a)); return read()
if src.startswith(b'#!lua'):
    verb = 'FCALL'
    sha = re.match(rb'#!lua name=(\w+)', src)[1].decode()
    cmd('FUNCTION', 'LOAD', 'REPLACE', src)
else:
    verb = 'EVALSHA'
    sha = cmd('SCRIPT', 'LOAD', src).decode()
cmd('FLUSHALL')
denied = os.environ.get('DENIED') == '1'
rule = 'closed' if denied else 'open'
# code, cost, increment, tau, T, burst (see prelude.lua)
tuple_ = ['1', '1', '86400000000', '172800000000', '86400000000', '2'] if denied else \
    ['1', '1', '1', '1000000', '1', '1000000']
if denied:
    tat = str(int(time.time() * 1e6) + 2 * 86400 * 1000000)
    s.sendall(b''.join(enc('SET', 'tollgate-bench:{closed:=k%d}:gcra' % i, tat, 'PX', str(3 * 86400 * 1000))
                       for i in range(nkeys)))
    for _ in range(nkeys): read()
random.seed(1)
def one():
    ks = ['tollgate-bench:{%s:=k%d}:gcra' % (rule, random.randrange(nkeys)) for _ in range(batch)]
    # each key sent once, with one index a pair when some repeat (as the
    # store sends them); one tuple: no tuple indices (see check.lua, mode "b")
    distinct = list(dict.fromkeys(ks))
    krefs = b'' if len(distinct) == len(ks) else bytes(distinct.index(k) + 1 for k in ks)
    return enc(verb, sha, str(len(distinct)), *distinct, '', '0', str(batch), 'b', b'', krefs, *tuple_)
# one run first (not counted): the reply's shape is checked (a GCRA check
# answers one integer)
s.sendall(one()); r = read()
assert isinstance(r, list) and len(r) == 1 + batch, r
cmd('CONFIG', 'RESETSTAT')
chunk = 50
assert iters % chunk == 0, 'ITERS must be a multiple of 50'
for i in range(iters // chunk):
    s.sendall(b''.join(one() for _ in range(chunk)))
    for _ in range(chunk):
        r = read()
        if not isinstance(r, list): print(r); sys.exit(1)
        # a denied GCRA check answers -1 - used
        if denied: assert all(int(x) < 0 for x in r[1:]), r
info = cmd('INFO', 'commandstats').decode()
m = re.search(r'cmdstat_(?:evalsha|fcall):calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)', info)
calls, usec, per = int(m[1]), int(m[2]), float(m[3])
print('batch %d, %d keys: %d runs, %.2f us a run, %.2f us a check (usec_per_call)'
      % (batch, nkeys, calls, per, per / batch))
