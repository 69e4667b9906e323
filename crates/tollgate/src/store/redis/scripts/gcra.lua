-- GCRA on one string key holding the theoretical arrival time (µs).
-- Each algorithm defines eval(key, cost, p1..p4, t) -> allowed, remaining,
-- reset_after, retry_after (-1 none), write; write(t) applies an admitted check.

-- The decision from the stored TAT (nil: none): allowed, remaining,
-- reset_after, retry_after, and the TAT an admitted check leaves. A batch
-- (check.lua, mode "b") decides its GCRA pairs the same way, inline.
local function gcra(stored, cost, inc, tau, interval, burst, t)
  local tat = t
  if stored and stored > t then tat = stored end
  local new_tat = tat + inc
  local fits = cost <= burst
  local allowed = fits and new_tat - t <= tau
  local kept = tat
  if allowed then kept = new_tat end
  local used = kept - t
  local left = tau - used
  if left < 0 then left = 0 end
  local retry = -1
  if not allowed and fits then retry = new_tat - tau - t end
  return allowed, idiv(left, interval), used, retry, new_tat
end

ALGOS[1] = function(key, cost, inc, tau, interval, burst, t)
  local allowed, remaining, used, retry, new_tat =
    gcra(tonumber(rcall('GET', key)), cost, inc, tau, interval, burst, t)
  local write = function()
    rcall('SET', key, num(new_tat), 'PX', ttl_ms(new_tat - t))
  end
  return allowed, remaining, used, retry, write
end

REFUNDS[1] = function(key, cost, inc, tau, interval, burst, t0)
  local stored = tonumber(rcall('GET', key))
  if stored == nil then return end
  local tat = stored - inc
  if tat < t0 then tat = t0 end
  rcall('SET', key, num(tat), 'PX', ttl_ms(tat - t0))
end

-- Charge (docs/semantics.md, "Charge"): new_tat = max(tat, t) + units * T,
-- units = the cost, or as much of it as keeps the debt within max_debt.
CHARGES[1] = function(key, cost, max_debt, tau, interval, burst, t)
  local stored = tonumber(rcall('GET', key))
  local tat = t
  if stored and stored > t then tat = stored end
  local ceiling = t + tau + max_debt * interval
  local units = 0
  if ceiling > tat then units = idiv(ceiling - tat, interval) end
  if cost < units then units = cost end
  local new_tat = tat + units * interval
  local used = new_tat - t
  if units > 0 then rcall('SET', key, num(new_tat), 'PX', ttl_ms(used)) end
  local left, debt = tau - used, 0
  if left < 0 then
    debt = idiv(-left + interval - 1, interval)
    left = 0
  end
  return idiv(left, interval), used, debt, units
end

-- Give back: the TAT moves back by units * T, never below t.
GIVEBACKS[1] = function(key, units, max_debt, tau, interval, burst, t, made)
  local stored = tonumber(rcall('GET', key))
  if stored == nil or stored <= t then return end
  local tat = stored - units * interval
  if tat < t then tat = t end
  rcall('SET', key, num(tat), 'PX', ttl_ms(tat - t))
end

RETURNS[1] = function(key, units, p1, p2, p3, p4, t)
  GIVEBACKS[1](key, units, p1, p2, p3, p4, t, t)
end
