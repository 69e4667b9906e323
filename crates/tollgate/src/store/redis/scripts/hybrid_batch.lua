-- tollgate: take a batch of units for the hybrid store (composed after
-- prelude.lua and every algorithm file, in place of check.lua). The
-- arguments and reply are those the script had as lease.lua: replicas of
-- either version run side by side.
--
--   KEYS[1]   the Redis key of the (rule, key) pair (same key as a check)
--   ARGV[1]   t in µs, or "" for the server's TIME (an explicit t: tests only)
--   ARGV[2]   extra TTL in ms (0 normally)
--   ARGV[3]   algorithm code (as in prelude.lua)
--   ARGV[4..7] the rule: gcra / token_bucket: tau, T, burst, 0
--                        window algorithms: period, limit, 0, 0
--   ARGV[8]   need m: take nothing unless at least m units can be taken
--   ARGV[9]   n: take at most n units (m <= n <= capacity)
--   ARGV[10]  u: units of an earlier batch to give back first (0: none)
--   ARGV[11]  t0: the time (µs) that earlier batch was taken at
--   ARGV[12]  its reset_after (µs) right after it was taken
--   ARGV[13]  horizon h in units (gcra / token bucket only; 0 or absent: none)
--
-- First the refund: the state becomes no more generous than if the earlier
-- batch had taken u fewer units (fixed window, sliding window, sliding log:
-- exactly that; gcra and token bucket: min(u*T, tat_batch - t) of credit,
-- where tat_batch = t0 + reset is a lower bound of every TAT since the
-- batch, so the bucket given back can never have been full in between).
-- Then the batch: k = the largest cost <= n that the algorithm admits as one
-- check at t (found with the algorithm's own decision, nothing written while
-- searching), or 0 when k < m; k > 0 is consumed exactly as a check of cost k
-- (same writes, same TTL).
-- With a horizon h > 0 (gcra / token bucket), the batch is instead a charge
-- (CHARGES, docs/semantics.md "Charge") of k = min(n, what keeps the debt
-- within h units) units, or nothing when that is below m: a paced batch. Its
-- units become spendable one per T, the first at t + first (first = the
-- reset_after of a peek + T - tau, negative when units are there already):
-- unit j at the time a check of cost 1 would admit it, so a holder spending
-- no unit before its time admits exactly what the algorithm admits.
--
-- Reply: t, k, remaining and reset_after of a peek after the batch, wait_n
-- (µs until a check of cost n would be admitted with no other traffic; 0
-- now, -1 never), the end (µs) of the current window for fixed and sliding
-- window (-1 for the others: a batch must not be spent past it), and
-- wait_need (the same for a check of cost m: the retry_after of a check of
-- cost m that this batch could not cover), and first (µs from t to the first
-- unit of a paced batch; 0 otherwise).
local t = tonumber(ARGV[1])
if t == nil then
  local now = redis.call('TIME')
  t = tonumber(now[1]) * 1000000 + tonumber(now[2])
end
local key = KEYS[1]
local code = tonumber(ARGV[3])
local a, b, c, d = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local need, n = tonumber(ARGV[8]), tonumber(ARGV[9])
local u, t0, reset0 = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local horizon = tonumber(ARGV[13] or '0') or 0

local algo = ALGOS[code]
if algo == nil then
  error('tollgate: algorithm ' .. tostring(code) .. ' is not in this script')
end

-- the algorithm's decision for one check of `cost` at t (writes nothing
-- until the returned write is called)
local function eval(cost)
  if code == 1 or code == 2 then
    return algo(key, cost, cost * b, a, b, c, t)
  end
  return algo(key, cost, a, b, c, d, t)
end

if u > 0 then
  if code == 1 or code == 2 then
    local back = t0 + reset0 - t
    if back > u * b then back = u * b end
    if back > 0 then
      if code == 1 then
        local stored = tonumber(redis.call('GET', key))
        if stored ~= nil then
          local tat = stored - back
          if tat > t then
            redis.call('SET', key, num(tat), 'PX', ttl_ms(tat - t))
          else
            redis.call('DEL', key)
          end
        end
      else
        local h = redis.call('HMGET', key, 'c', 'l')
        local cr, l = tonumber(h[1]), tonumber(h[2])
        if cr ~= nil and l ~= nil then
          local elapsed = t - l
          if elapsed < 0 then elapsed = 0 end
          cr = cr + elapsed + back
          if cr > a then cr = a end
          local last = t
          if l > t then last = l end
          redis.call('HSET', key, 'c', num(cr), 'l', num(last))
          redis.call('PEXPIRE', key, ttl_ms(a - cr))
        end
      end
    end
  else
    REFUNDS[code](key, u, a, b, c, d, t0)
  end
end

local k = 0
local first = 0
if n > 0 and horizon > 0 and (code == 1 or code == 2) then
  local _, _, used = eval(0)
  if used + need * b <= a + horizon * b then
    first = used + b - a
    local _, _, _, took = CHARGES[code](key, n, horizon, a, b, c, t)
    k = took
  end
elseif n > 0 then
  local ok = function(cost)
    local allowed = eval(cost)
    return allowed
  end
  -- the answer is in [lo, hi] and ok(lo) holds (ok(0) is a peek)
  local lo, hi = 0, n
  local _, guess = eval(0)
  if guess > n then guess = n end
  if guess > 0 then
    if ok(guess) then
      lo = guess
      if guess < n and not ok(guess + 1) then hi = guess end
    else
      hi = guess - 1
    end
  end
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if ok(mid) then lo = mid else hi = mid - 1 end
  end
  k = lo
  if k < need then k = 0 end
  if k > 0 then
    local allowed, _, _, _, write = eval(k)
    if allowed then write() else k = 0 end
  end
end

-- µs until a check of `cost` would be admitted with no other traffic (0:
-- now, -1: never)
local function wait_for(cost)
  if cost == 0 then return 0 end
  local allowed, _, _, retry = eval(cost)
  if allowed then return 0 end
  return retry
end

local _, remaining, reset = eval(0)
local window_end = -1
if code == 3 or code == 4 then window_end = (idiv(t, a) + 1) * a end
return { t, k, remaining, reset, wait_for(n), window_end, wait_for(need), first }
