-- tollgate: the body shared by every script: decide every pair against one
-- snapshot, then write only if every pair admits (all-or-nothing).
local t = tonumber(ARGV[1])
if t == nil then
  local now = redis.call('TIME')
  t = tonumber(now[1]) * 1000000 + tonumber(now[2])
end
local n = tonumber(ARGV[3])
local mode = ARGV[4]

-- Each argument string's number, converted once per run: a multi-rule run
-- may repeat parameters, and tonumber of a long decimal string is one of
-- the dearer steps of a check (two strtod calls).
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

local out = {}
if mode == 'b' then
  -- Batch: ARGV[5] holds one byte per pair, the (1-based) index of its six
  -- arguments among the distinct tuples that follow (a batch's checks
  -- mostly share one rule and cost: each tuple is sent, and converted to
  -- numbers, once per run). Every pair is decided and, if it admits,
  -- written at once, so a later pair on the same key sees it; the reply is
  -- built as it goes.
  local refs, tuples = ARGV[5], {}
  for j = 1, (#ARGV - 5) / 6 do
    local b = 5 + (j - 1) * 6
    tuples[j] = { tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]),
                  tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]) }
  end
  local byte = string.byte
  local reply = { t }
  local done = 0
  -- Decides pairs done+1..n; one pcall for the whole run, not one per pair.
  local function run()
    for i = done + 1, n do
      local p = tuples[byte(refs, i)]
      local cost = p[2]
      local allowed, remaining, reset, retry, write = algo_of(p[1])(KEYS[i], cost, p[3], p[4], p[5], p[6], t)
      if allowed and cost > 0 then write() end
      local r = 4 * i - 2
      reply[r] = allowed and 1 or 0
      reply[r + 1] = remaining
      reply[r + 2] = reset
      reply[r + 3] = retry
      done = i
    end
  end
  while done < n do
    local ok, e = pcall(run)
    if not ok then
      -- Pair done+1 failed (e.g. READONLY, WRONGTYPE; redis.call raises a
      -- table {err = …}): its error text and three zeros; the others go on.
      done = done + 1
      if type(e) == 'table' and e.err then e = e.err end
      local r = 4 * done - 2
      reply[r] = tostring(e)
      reply[r + 1] = 0
      reply[r + 2] = 0
      reply[r + 3] = 0
    end
  end
  return reply
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
  reply[#reply + 1] = o[1] and 1 or 0
  reply[#reply + 1] = o[2]
  reply[#reply + 1] = o[3]
  reply[#reply + 1] = o[4]
end
return reply
