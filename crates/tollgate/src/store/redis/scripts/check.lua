-- tollgate: the body shared by every script: decide every pair against one
-- snapshot, then write only if every pair admits (all-or-nothing).
local t = tonumber(ARGV[1])
if t == nil then
  local now = redis.call('TIME')
  t = tonumber(now[1]) * 1000000 + tonumber(now[2])
end
local n = tonumber(ARGV[3])
local mode = ARGV[4]

-- Each argument string's number, converted once per run: a batch repeats
-- its rules' parameters pair after pair, and tonumber of a long decimal
-- string is one of the dearer steps of a check (two strtod calls).
local nums = {}
local function arg(j)
  local s = ARGV[j]
  local v = nums[s]
  if v == nil then
    v = tonumber(s)
    nums[s] = v
  end
  return v
end

local function pair(i)
  local b = 4 + (i - 1) * 6
  return arg(b + 1), arg(b + 2), arg(b + 3), arg(b + 4), arg(b + 5), arg(b + 6)
end

local function algo_of(code)
  local algo = ALGOS[code]
  if algo == nil then
    error('tollgate: algorithm ' .. tostring(code) .. ' is not in this script')
  end
  return algo
end

-- what a check of zero cost reports (for gcra and token_bucket p1 is the
-- cost's increment: a peek has none)
local function peek(i)
  local code, _, p1, p2, p3, p4 = pair(i)
  if code == 1 or code == 2 then p1 = 0 end
  local allowed, remaining, reset, retry = algo_of(code)(KEYS[i], 0, p1, p2, p3, p4, t)
  return { allowed, remaining, reset, retry }
end

-- One independent check (mode b): decide pair i and, if it admits, write
-- at once, so a later pair on the same key sees it.
local function check_one(i)
  local code, cost, p1, p2, p3, p4 = pair(i)
  local allowed, remaining, reset, retry, write = algo_of(code)(KEYS[i], cost, p1, p2, p3, p4, t)
  if allowed and cost > 0 then write() end
  return { allowed, remaining, reset, retry }
end

local out = {}
if mode == 'b' then
  for i = 1, n do
    local ok, o = pcall(check_one, i)
    if ok then
      out[i] = o
    else
      -- This pair failed (e.g. READONLY, WRONGTYPE): its own error, the
      -- other pairs are unaffected. redis.call raises a table {err = …}.
      if type(o) == 'table' and o.err then o = o.err end
      out[i] = { err = tostring(o) }
    end
  end
elseif mode == 'r' then
  for i = 1, n do
    local code, cost, p1, p2, p3, p4 = pair(i)
    REFUNDS[code](KEYS[i], cost, p1, p2, p3, p4, t)
  end
  for i = 1, n do out[i] = peek(i) end
else
  local writes, all = {}, true
  for i = 1, n do
    local code, cost, p1, p2, p3, p4 = pair(i)
    local allowed, remaining, reset, retry, write = algo_of(code)(KEYS[i], cost, p1, p2, p3, p4, t)
    if not allowed then all = false end
    out[i] = { allowed, remaining, reset, retry }
    if allowed and cost > 0 then writes[#writes + 1] = write end
  end
  if all and mode == 'c' then
    for i = 1, #writes do writes[i]() end
  elseif n > 1 or mode == 'd' then
    -- nothing is consumed: pairs that would have admitted report a peek
    for i = 1, n do
      if out[i][1] then out[i] = peek(i) end
    end
  end
end

local reply = { t }
for i = 1, n do
  local o = out[i]
  if o.err then
    -- a failed pair of a batch: its error text, then three zeros
    reply[#reply + 1] = o.err
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
  else
    reply[#reply + 1] = o[1] and 1 or 0
    reply[#reply + 1] = o[2]
    reply[#reply + 1] = o[3]
    reply[#reply + 1] = o[4]
  end
end
return reply
