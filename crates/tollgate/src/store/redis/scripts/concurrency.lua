-- Concurrency on one sorted set: member "<lease id>:<slots>", score = the
-- lease's expiry (µs). A lease counts while t < expiry; ended ones are
-- dropped by every run that looks at the key. The key lives until its
-- latest lease ends.

-- The live leases at t, by expiry: { expiry, slots, member } each (the
-- ended ones dropped first).
local function cc_live(key, t)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(t))
  local live = redis.call('ZRANGEBYSCORE', key, '(' .. num(t), '+inf', 'WITHSCORES')
  local list = {}
  for i = 1, #live, 2 do
    list[#list + 1] = { tonumber(live[i + 1]), tonumber(string.match(live[i], ':(%d+)$')), live[i] }
  end
  return list
end

-- The decision of an acquire of `cost` slots (0: a peek) against `list`.
local function cc_decide(list, cost, lease, limit, t)
  local held, latest = 0, nil
  for i = 1, #list do
    held = held + list[i][2]
    if latest == nil or list[i][1] > latest then latest = list[i][1] end
  end
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
  return allowed, limit - after, reset, retry
end

ALGOS[6] = function(key, cost, lease, limit, _, _, t)
  local allowed, remaining, reset, retry = cc_decide(cc_live(key, t), cost, lease, limit, t)
  local write = function()
    error('tollgate: a concurrency rule is acquired, not checked')
  end
  return allowed, remaining, reset, retry, write
end

-- Acquire: the decision, and when admitted a lease of `cost` slots with
-- `id` (0 slots: a peek, no lease).
local function cc_acquire(key, cost, lease, limit, id, t)
  local list = cc_live(key, t)
  local allowed, remaining, reset, retry = cc_decide(list, cost, lease, limit, t)
  if allowed and cost > 0 then
    redis.call('ZADD', key, num(t + lease), id .. ':' .. num(cost))
    redis.call('PEXPIRE', key, ttl_ms(reset))
  end
  return allowed, remaining, reset, retry
end

-- The live lease `id` of `key`, and the key's live leases.
local function cc_find(key, id, t)
  local list = cc_live(key, t)
  local prefix = id .. ':'
  for i = 1, #list do
    if string.sub(list[i][3], 1, #prefix) == prefix then return i, list end
  end
  return nil, list
end

-- Releases (or renews) the lease at `list[i]`; the key's state after, as a
-- peek reports it.
local function cc_end(key, list, i, renew, lease, limit, t)
  if renew then
    local e = t + lease
    if list[i][1] < e then
      list[i][1] = e
      redis.call('ZADD', key, num(e), list[i][3])
    end
  else
    redis.call('ZREM', key, list[i][3])
    table.remove(list, i)
  end
  local allowed, remaining, reset, retry = cc_decide(list, 0, lease, limit, t)
  if renew then redis.call('PEXPIRE', key, ttl_ms(reset)) end
  return allowed, remaining, reset, retry
end
