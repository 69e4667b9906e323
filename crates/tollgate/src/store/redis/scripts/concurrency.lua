-- Concurrency on one sorted set: member "<lease id>:<slots>", score = the
-- lease's expiry (µs). A lease counts while t < expiry; ended ones are
-- dropped by every run that looks at the key. The key lives until its
-- latest lease ends.

-- The slots held at t, the latest expiry, and the live leases by expiry.
local function cc_live(key, t)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(t))
  local live = redis.call('ZRANGEBYSCORE', key, '(' .. num(t), '+inf', 'WITHSCORES')
  local held, latest, list = 0, nil, {}
  for i = 1, #live, 2 do
    local slots = tonumber(string.match(live[i], ':(%d+)$'))
    local e = tonumber(live[i + 1])
    held = held + slots
    latest = e
    list[#list + 1] = { e, slots, live[i] }
  end
  return held, latest, list
end

-- The decision of an acquire of `cost` slots (0: a peek).
local function cc_decide(key, cost, lease, limit, t)
  local held, latest, list = cc_live(key, t)
  local capable = cost <= limit
  local allowed = capable and held + cost <= limit
  local after = held
  if allowed then after = held + cost end
  local reset = 0
  if allowed and cost > 0 then
    local e = t + lease
    if latest and latest > e then e = latest end
    reset = e - t
  elseif latest then
    reset = latest - t
  end
  local retry = -1
  if not allowed and capable then
    local need, freed = held + cost - limit, 0
    for i = 1, #list do
      freed = freed + list[i][2]
      if freed >= need then
        retry = list[i][1] - t
        break
      end
    end
  end
  return allowed, limit - after, reset, retry, list
end

ALGOS[6] = function(key, cost, lease, limit, _, _, t)
  local allowed, remaining, reset, retry = cc_decide(key, cost, lease, limit, t)
  local write = function()
    error('tollgate: a concurrency rule is acquired, not checked')
  end
  return allowed, remaining, reset, retry, write
end

-- A lease of `slots` with `id` (call only when cc_decide admitted it).
local function cc_acquire(key, slots, lease, id, t)
  local e = t + lease
  redis.call('ZADD', key, num(e), id .. ':' .. num(slots))
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, ttl_ms(tonumber(last[2]) - t))
end

-- The live lease `id` of `key`: its member and expiry, or nil.
local function cc_find(key, id, t)
  local _, _, list = cc_live(key, t)
  local prefix = id .. ':'
  for i = 1, #list do
    if string.sub(list[i][3], 1, #prefix) == prefix then return list[i][3], list[i][1] end
  end
  return nil
end
