-- Token bucket on one hash: c = credit in µs (tokens = c / T), l = last refill.

-- The credit and last refill at t (a new key is full); the third value
-- says whether the key exists.
local function tb_state(key, tau, t)
  local h = redis.call('HMGET', key, 'c', 'l')
  local c, l = tonumber(h[1]), tonumber(h[2])
  if not (c and l) then return tau, t, false end
  local elapsed = t - l
  if elapsed < 0 then elapsed = 0 end
  local credit = c + elapsed
  if credit > tau then credit = tau end
  if l > t then return credit, l, true end
  return credit, t, true
end
ALGOS[2] = function(key, cost, need, tau, interval, burst, t)
  local credit, last = tb_state(key, tau, t)
  local fits = cost <= burst
  local allowed = fits and credit >= need
  local after = credit
  if allowed then after = credit - need end
  local retry = -1
  if not allowed and fits then retry = need - credit end
  local write = function()
    redis.call('HSET', key, 'c', num(after), 'l', num(last))
    redis.call('PEXPIRE', key, ttl_ms(tau - after))
  end
  local remaining = 0
  if after > 0 then remaining = idiv(after, interval) end
  return allowed, remaining, tau - after, retry, write
end

-- Charge: the credit goes negative by the debt, at most max_debt units.
CHARGES[2] = function(key, cost, max_debt, tau, interval, burst, t)
  local credit, last = tb_state(key, tau, t)
  local units = 0
  local room = credit + max_debt * interval
  if room > 0 then units = idiv(room, interval) end
  if cost < units then units = cost end
  local after = credit - units * interval
  if units > 0 then
    redis.call('HSET', key, 'c', num(after), 'l', num(last))
    redis.call('PEXPIRE', key, ttl_ms(tau - after))
  end
  local remaining, debt = 0, 0
  if after > 0 then remaining = idiv(after, interval) end
  if after < 0 then debt = idiv(-after + interval - 1, interval) end
  return remaining, tau - after, debt, units
end

REFUNDS[2] = function(key, cost, need, tau, interval, burst, t0)
  local h = redis.call('HMGET', key, 'c', 'l')
  local c, l = tonumber(h[1]), tonumber(h[2])
  if c == nil or l == nil then return end
  c = c + need
  if c > tau then c = tau end
  redis.call('HSET', key, 'c', num(c))
  redis.call('PEXPIRE', key, ttl_ms(tau - c))
end

-- Give back: units * T of credit after the refill, never past full.
GIVEBACKS[2] = function(key, units, max_debt, tau, interval, burst, t, made)
  local credit, last, exists = tb_state(key, tau, t)
  if not exists then return end
  credit = credit + units * interval
  if credit > tau then credit = tau end
  redis.call('HSET', key, 'c', num(credit), 'l', num(last))
  redis.call('PEXPIRE', key, ttl_ms(tau - credit))
end

RETURNS[2] = function(key, units, p1, p2, p3, p4, t)
  GIVEBACKS[2](key, units, p1, p2, p3, p4, t, t)
end
