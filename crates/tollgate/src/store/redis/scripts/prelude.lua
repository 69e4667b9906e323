-- tollgate: shared prelude of every script. The scripts implement
-- docs/semantics.md exactly, bit for bit with the Rust algorithms.
--
-- Calling convention (every script):
--   KEYS[i]   the Redis key of pair i (one key per (rule, key) pair; hash-tagged)
--   ARGV[1]   t in microseconds, or "" to read the server's TIME (the normal case;
--             an explicit t is for replay and tests only)
--   ARGV[2]   extra TTL in milliseconds added to every expiry (0 normally; replay
--             passes a margin because its trace clock is not the server's)
--   ARGV[3]   n, the number of pairs
--   ARGV[4]   mode: "c" check (decide; write only if every pair admits),
--             "d" dry run (decide, write nothing; admitting pairs report a peek),
--             "r" refund (undo an admitted check made at t = ARGV[1]; Redis
--             Cluster multi-rule checks whose pairs live on several nodes),
--             "g" charge: every pair charged in turn, never denied
--             (docs/semantics.md, "Charge"); its six arguments are those of
--             CHARGE ARGUMENTS below,
--             "f" refund: every pair given its cost back now, the units
--             counted last first (docs/semantics.md, "Refund"); arguments
--             and reply as mode "g" (units: 0),
--             "v" reserve: as "c", and when every pair admits, a record per
--             pair (KEYS[n+i]; ARGV after the pairs: ttl and remember, µs
--             in hex, and the record's PX in ms),
--             "s" settle: KEYS[n+i] the pairs' records, the pairs' six
--             arguments as in mode "g", then one actual usage per pair
--             (-1: cancel); see check.lua,
--             "a" acquire: as "c" over concurrency pairs, each taking a lease
--             with the id ARGV[5 + 6n] (the pairs' own arguments as for a
--             check: p1 = lease (µs), p2 = limit),
--             "l" release / "w" renew the lease ARGV[5 + 6n] of every pair:
--             reply t, status (0 done, 1 no such live lease), then each
--             pair's four decision integers (a peek after),
--             "b" batch: every pair is an independent single check, decided
--             and written in order (a later pair on the same key sees the
--             earlier one's write); a pair that raises an error reports it
--             and the others go on
--   then 6 arguments per pair: algorithm code, cost, p1, p2, p3, p4 -- except
--   in mode "b": ARGV[5] is one byte per pair, the 1-based index of its six
--   arguments among the distinct 6-argument tuples that follow ARGV[6]
--   (each sent once per run, however many pairs share it), or empty when
--   there is one; ARGV[6] is one byte per pair, the 1-based index of its key
--   among KEYS (each distinct key sent once), or empty when every pair has
--   its own key (KEYS[i]); n counts the pairs, not the keys
--     gcra (1), token_bucket (2):  p1 = cost*period/limit (µs, floored),
--                                  p2 = tau = burst*period/limit, p3 = T = period/limit,
--                                  p4 = burst
--     fixed_window (3), sliding_window (4), sliding_log (5): p1 = period (µs), p2 = limit
--   CHARGE ARGUMENTS (mode "g"): the cost is not capped at capacity, and
--     gcra (1), token_bucket (2):  p1 = max_debt (units), p2 = tau, p3 = T, p4 = burst
--     fixed_window (3), sliding_window (4), sliding_log (5): p1 = period, p2 = limit,
--                                  p3 = max_debt (units)
-- Reply: t (µs), then 4 integers per pair: allowed (0/1), remaining,
-- reset_after (µs), retry_after (µs, or -1 for none); in mode "g" 6 per
-- pair: those four, the debt and the units recorded (the rest of the cost
-- was clamped at max_debt). In mode "b" a GCRA pair (code 1) answers ONE
-- integer: used = its TAT after minus t when it admits, else -1 - used
-- (the client derives the four from the rule); a failed pair's first is
-- its error text, and the others of its four zeros.
--
-- Precision: Lua numbers are IEEE doubles, exact for integers below 2^53
-- (about 285 years of microseconds). Every stored or compared value stays
-- below that: t (epoch µs, ~2^50.7), tat = t + tau with tau <= 3660 days,
-- counts <= limit <= 10^12. The one product that can exceed 2^53, the
-- sliding window's prev * elapsed, is computed exactly by muldiv below.
-- Numbers are written with %d (never tostring, which keeps 14 digits): every
-- value written is a whole number below 2^53, which Lua 5.1's %d converts
-- through a 64-bit integer exactly, at half the cost of %.0f.

-- The library functions a check calls, as locals: a global is a table
-- lookup each time it is named, and a check names several. Bound as a run
-- begins (a function library cannot see them while it is loaded).
local tonumber, floor, ceil, format, rcall, rpcall, unpack
-- Redis 7 takes SET's NX and GET together: a check that creates its key
-- does it in one command (see check.lua, mode "b").
local NX_GET
local function bind()
  tonumber, floor, ceil, format, unpack = _G.tonumber, math.floor, math.ceil, string.format, _G.unpack
  rcall, rpcall = redis.call, redis.pcall
  NX_GET = (redis.REDIS_VERSION_NUM or 0) >= 0x070000
end

-- The number of an argument string. A function library keeps them from
-- call to call: a rule's parameters come again in every run, and tonumber
-- of a decimal string is one of the dearer steps of a check (two strtod
-- calls), where this is a lookup of a string Lua has interned already. At
-- most 4096 strings are kept (per-call limits bring numbers of their own),
-- then it starts afresh; a script begins afresh on every call.
local NUMS, nums_kept = {}, 0
local function arg_num(s)
  local v = NUMS[s]
  if v == nil then
    v = tonumber(s)
    if v == nil then return nil end
    if nums_kept >= 4096 then NUMS, nums_kept = {}, 0 end
    NUMS[s] = v
    nums_kept = nums_kept + 1
  end
  return v
end

-- The run's keys and arguments (a script's KEYS and ARGV, a function's own
-- two arguments) and its TTL margin, set by `begin` as a run starts. A
-- script composed for EVAL starts with `local EVAL = true`, and a function
-- library with `local EVAL = false` (it defines what its function calls,
-- once, when it is loaded: see scripts.rs and docs/redis-store.md).
local K, A, margin
local function begin(keys, argv)
  if not rcall then bind() end
  K, A = keys, argv
  margin = arg_num(argv[2]) or 0
end
if EVAL then
  if redis.replicate_commands then pcall(redis.replicate_commands) end
  begin(KEYS, ARGV)
end

local TWO53 = 9007199254740992

-- A reply of t and then m zeros (m <= 1020: 255 checks of four), its size
-- set once: a table grown one element at a time is rehashed at every power
-- of two, which cost a batch's reply more than filling it. A function
-- library keeps ZEROS from call to call; a script would build it anew on
-- every call, so a script's reply (and one of unknown size: m nil) grows.
local ZEROS
local function presized(t, m)
  if EVAL or not m or m > 1020 then return { t } end
  if not ZEROS then
    ZEROS = {}
    for i = 1, 1020 do ZEROS[i] = 0 end
  end
  return { t, unpack(ZEROS, 1, m) }
end

-- floor(a / b) for integers 0 <= a < 2^53, b >= 1, exactly.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- floor(a * b / c) for integers 0 <= a, b < 2^53 and 1 <= c < 2^52, exactly,
-- when the result is below 2^53.
local function muldiv(a, b, c)
  if a == 0 or b == 0 then return 0 end
  if a <= TWO53 / b then return idiv(a * b, c) end
  local qa = idiv(a, c)
  local ra = a - qa * c
  local qb = idiv(b, c)
  local rb = b - qb * c
  -- a*b = qa*b*c + ra*qb*c + ra*rb; ra, rb < c: shift-and-add for ra*rb / c
  local bits = {}
  local x = rb
  while x > 0 do
    local bit = x % 2
    bits[#bits + 1] = bit
    x = (x - bit) / 2
  end
  local q, r = 0, 0
  for i = #bits, 1, -1 do
    q = q * 2
    r = r * 2
    if r >= c then r = r - c; q = q + 1 end
    if bits[i] == 1 then
      r = r + ra
      if r >= c then r = r - c; q = q + 1 end
    end
  end
  return qa * b + ra * qb + q
end

local function num(x)
  return format('%d', x)
end

-- Milliseconds of TTL for a key that is back to empty `us` microseconds from t.
local function ttl_ms(us)
  local ms = ceil(us / 1000) + margin
  if ms < 1 then ms = 1 end
  return num(ms)
end

local ALGOS = {}
local REFUNDS = {}
local CHARGES = {}
-- Give-backs (docs/semantics.md, "Reserve, then settle"): (key, units,
-- the pair's charge arguments p1..p4, t, the reservation's time).
local GIVEBACKS = {}
-- Refunds (docs/semantics.md, "Refund"): (key, units, the pair's charge
-- arguments p1..p4, t); the units counted last come off first.
local RETURNS = {}
