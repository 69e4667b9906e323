-- Fixed window on one hash: w = the counted window's start floor(t / period) * period
-- (its start, not its index: state left by a rule of another period never
-- passes for a later window), n = count.
ALGOS[3] = function(key, cost, period, limit, _, _, t)
  local w = idiv(t, period)
  local start = w * period
  local h = redis.call('HMGET', key, 'w', 'n')
  local count = 0
  if tonumber(h[1]) == start then count = tonumber(h[2]) or 0 end
  local fits = cost <= limit
  local allowed = fits and count + cost <= limit
  local after = count
  if allowed then after = count + cost end
  local to_next = (w + 1) * period - t
  local retry = -1
  if not allowed and fits then retry = to_next end
  local write = function()
    redis.call('HSET', key, 'w', num(start), 'n', num(after))
    redis.call('PEXPIRE', key, ttl_ms(to_next))
  end
  local remaining = limit - after
  if remaining < 0 then remaining = 0 end
  return allowed, remaining, to_next, retry, write
end

-- Charge: count[w] += cost, at most max_debt over the limit; the debt ends
-- with the window.
CHARGES[3] = function(key, cost, period, limit, max_debt, _, t)
  local w = idiv(t, period)
  local start = w * period
  local h = redis.call('HMGET', key, 'w', 'n')
  local count = 0
  if tonumber(h[1]) == start then count = tonumber(h[2]) or 0 end
  local units = limit + max_debt - count
  if units < 0 then units = 0 end
  if cost < units then units = cost end
  local after = count + units
  local to_next = (w + 1) * period - t
  if units > 0 then
    redis.call('HSET', key, 'w', num(start), 'n', num(after))
    redis.call('PEXPIRE', key, ttl_ms(to_next))
  end
  local remaining, debt = limit - after, after - limit
  if remaining < 0 then remaining = 0 end
  if debt < 0 then debt = 0 end
  return remaining, to_next, debt, units
end

REFUNDS[3] = function(key, cost, period, limit, _, _, t0)
  local h = redis.call('HMGET', key, 'w', 'n')
  if tonumber(h[1]) ~= idiv(t0, period) * period then return end
  local n = (tonumber(h[2]) or 0) - cost
  if n < 0 then n = 0 end
  redis.call('HSET', key, 'n', num(n))
end

-- Give back: from the count of the window the reservation counted in,
-- while it is the key's window.
GIVEBACKS[3] = function(key, units, period, limit, max_debt, _, t, made)
  REFUNDS[3](key, units, period, limit, 0, 0, made)
end

RETURNS[3] = function(key, units, period, limit, _, _, t)
  REFUNDS[3](key, units, period, limit, 0, 0, t)
end
