-- Sliding log on one sorted set: score = admission time (µs), member =
-- "time:cost". Checks admitted at the same microsecond are merged into one
-- member. An entry made at s counts while t < s + period.
-- Appends (t, cost), merged with an entry of the same microsecond, after
-- dropping the expired ones; the key lives until its newest entry expires.
local function sl_append(key, t, cost, period)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(t - period))
  local same = redis.call('ZRANGEBYSCORE', key, num(t), num(t))
  local total = cost
  for i = 1, #same do
    total = total + tonumber(string.match(same[i], ':(%d+)$'))
    redis.call('ZREM', key, same[i])
  end
  redis.call('ZADD', key, num(t), num(t) .. ':' .. num(total))
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, ttl_ms(tonumber(last[2]) + period - t))
end

-- The units of the entries counting at t, and the newest entry's time.
local function sl_used(key, period, t)
  local live = redis.call('ZRANGEBYSCORE', key, '(' .. num(t - period), '+inf', 'WITHSCORES')
  local used, newest = 0, nil
  for i = 1, #live, 2 do
    used = used + tonumber(string.match(live[i], ':(%d+)$'))
    newest = tonumber(live[i + 1])
  end
  return used, newest
end

ALGOS[5] = function(key, cost, period, limit, _, _, t)
  local live = redis.call('ZRANGEBYSCORE', key, '(' .. num(t - period), '+inf', 'WITHSCORES')
  local costs, times, used = {}, {}, 0
  for i = 1, #live, 2 do
    local c = tonumber(string.match(live[i], ':(%d+)$'))
    costs[#costs + 1] = c
    times[#times + 1] = tonumber(live[i + 1])
    used = used + c
  end
  local fits = cost <= limit
  local allowed = fits and used + cost <= limit
  local after = used
  if allowed then after = used + cost end
  local newest = times[#times]
  if allowed and cost > 0 and (newest == nil or newest < t) then newest = t end
  local reset = 0
  if newest then reset = newest + period - t end
  local retry = -1
  if not allowed and fits then
    local freed = 0
    for i = 1, #costs do
      freed = freed + costs[i]
      if used - freed + cost <= limit then
        retry = times[i] + period - t
        break
      end
    end
  end
  local write = function() sl_append(key, t, cost, period) end
  local remaining = limit - after
  if remaining < 0 then remaining = 0 end
  return allowed, remaining, reset, retry, write
end

REFUNDS[5] = function(key, cost, period, limit, _, _, t0)
  local same = redis.call('ZRANGEBYSCORE', key, num(t0), num(t0))
  if #same == 0 then return end
  local total = tonumber(string.match(same[1], ':(%d+)$')) - cost
  redis.call('ZREM', key, same[1])
  if total > 0 then redis.call('ZADD', key, num(t0), num(t0) .. ':' .. num(total)) end
end

-- Charge: append what keeps the units counting within limit + max_debt.
CHARGES[5] = function(key, cost, period, limit, max_debt, _, t)
  local used, newest = sl_used(key, period, t)
  local units = limit + max_debt - used
  if units < 0 then units = 0 end
  if cost < units then units = cost end
  if units > 0 then
    sl_append(key, t, units, period)
    if newest == nil or newest < t then newest = t end
  end
  local after = used + units
  local reset = 0
  if newest then reset = newest + period - t end
  local remaining, debt = limit - after, after - limit
  if remaining < 0 then remaining = 0 end
  if debt < 0 then debt = 0 end
  return remaining, reset, debt, units
end

-- Give back: shrink the reservation's own entry.
GIVEBACKS[5] = function(key, units, period, limit, max_debt, _, t, made)
  REFUNDS[5](key, units, period, limit, 0, 0, made)
end

-- Refund: the entries counting at t shrink, newest first.
RETURNS[5] = function(key, units, period, limit, max_debt, _, t)
  local live = redis.call('ZRANGEBYSCORE', key, '(' .. num(t - period), '+inf')
  local i = #live
  while units > 0 and i >= 1 do
    local at, c = string.match(live[i], '^(%d+):(%d+)$')
    c = tonumber(c)
    local take = units
    if take > c then take = c end
    units = units - take
    redis.call('ZREM', key, live[i])
    if c > take then redis.call('ZADD', key, at, at .. ':' .. num(c - take)) end
    i = i - 1
  end
end
