-- Sliding window counter on one hash holding two counters:
-- w = the current window's start (not its index: state left by a rule of
-- another period never passes for a later window), p = count of the window
-- before, c = count of the current window.
-- The estimate prev*(period-elapsed)/period + curr + cost <= limit is decided
-- exactly: ceil(prev*(period-elapsed)/period) = prev - floor(prev*elapsed/period).
local function sw_retry(period, limit, elapsed, prev, curr, cost)
  -- later in this window: prev*(period-e') <= (limit-curr-cost)*period
  if prev > 0 and curr + cost <= limit then
    local a = limit - curr - cost
    local q = period
    if a < prev then q = muldiv(a, period, prev) end
    if q >= 1 then
      local e2 = period - q
      if e2 < elapsed then e2 = elapsed end
      return e2 - elapsed
    end
  end
  -- next window: prev' = curr, curr' = 0
  local to_next = period - elapsed
  if curr == 0 then return to_next end
  local q = period
  if limit - cost < curr then q = muldiv(limit - cost, period, curr) end
  if q >= 1 then return to_next + (period - q) end
  return to_next + period
end

-- The window index at t, the previous and current counts as seen from
-- it, the previous count's weight ceil(prev * (period - elapsed) / period),
-- and the time elapsed in the window.
local function sw_state(key, period, t)
  local w = idiv(t, period)
  local elapsed = t - w * period
  local h = redis.call('HMGET', key, 'w', 'p', 'c')
  local sw, sp, sc = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0
  local prev, curr = 0, 0
  if sw == w * period then prev, curr = sp, sc elseif sw == (w - 1) * period then prev = sc end
  local weighted = 0
  if prev > 0 then weighted = prev - muldiv(prev, elapsed, period) end
  return w, prev, curr, weighted, elapsed
end

ALGOS[4] = function(key, cost, period, limit, _, _, t)
  local w, prev, curr, weighted, elapsed = sw_state(key, period, t)
  local fits = cost <= limit
  local allowed = fits and weighted + curr + cost <= limit
  local after = curr
  if allowed then after = curr + cost end
  local remaining = limit - after - weighted
  if remaining < 0 then remaining = 0 end
  local reset = 0
  if after > 0 then reset = (w + 2) * period - t elseif prev > 0 then reset = (w + 1) * period - t end
  local retry = -1
  if not allowed and fits then retry = sw_retry(period, limit, elapsed, prev, curr, cost) end
  local write = function()
    redis.call('HSET', key, 'w', num(w * period), 'p', num(prev), 'c', num(after))
    redis.call('PEXPIRE', key, ttl_ms((w + 2) * period - t))
  end
  return allowed, remaining, reset, retry, write
end

-- Charge: count[w] += cost, so far as the debt weighted + count[w] - limit
-- stays within max_debt (weighted = ceil(prev * (period - elapsed) / period)).
CHARGES[4] = function(key, cost, period, limit, max_debt, _, t)
  local w, prev, curr, weighted, elapsed = sw_state(key, period, t)
  local units = limit + max_debt - weighted - curr
  if units < 0 then units = 0 end
  if cost < units then units = cost end
  local after = curr + units
  if units > 0 then
    redis.call('HSET', key, 'w', num(w * period), 'p', num(prev), 'c', num(after))
    redis.call('PEXPIRE', key, ttl_ms((w + 2) * period - t))
  end
  local remaining, debt = limit - after - weighted, weighted + after - limit
  if remaining < 0 then remaining = 0 end
  if debt < 0 then debt = 0 end
  local reset = 0
  if after > 0 then reset = (w + 2) * period - t elseif prev > 0 then reset = (w + 1) * period - t end
  return remaining, reset, debt, units
end

REFUNDS[4] = function(key, cost, period, limit, _, _, t0)
  local w0 = idiv(t0, period) * period
  local h = redis.call('HMGET', key, 'w', 'p', 'c')
  local w = tonumber(h[1])
  local field
  if w == w0 then field = 'c' elseif w == w0 + period then field = 'p' else return end
  local v = (tonumber(h[field == 'c' and 3 or 2]) or 0) - cost
  if v < 0 then v = 0 end
  redis.call('HSET', key, field, num(v))
end

-- Give back: from the window the reservation counted in, while it still
-- counts at t (as the current or the previous window).
-- The window of t and the previous and current counts a give-back or a
-- refund starts from; nil for a key held at a later window, or none.
local function sw_counts(key, period, t)
  local w = idiv(t, period) * period
  local h = redis.call('HMGET', key, 'w', 'p', 'c')
  local sw, sp, sc = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0
  if sw == nil or sw > w then return nil end
  if sw == w then return w, sp, sc end
  if sw + period == w then return w, sc, 0 end
  return w, 0, 0
end

GIVEBACKS[4] = function(key, units, period, limit, max_debt, _, t, made)
  local w, prev, curr = sw_counts(key, period, t)
  if w == nil then return end
  local counted = idiv(made, period) * period
  if counted == w then
    curr = curr - units
    if curr < 0 then curr = 0 end
  elseif counted + period == w then
    prev = prev - units
    if prev < 0 then prev = 0 end
  else
    return
  end
  redis.call('HSET', key, 'w', num(w), 'p', num(prev), 'c', num(curr))
  redis.call('PEXPIRE', key, ttl_ms(w + 2 * period - t))
end

-- Refund: from the current window's count first, then the previous one's.
RETURNS[4] = function(key, units, period, limit, max_debt, _, t)
  local w, prev, curr = sw_counts(key, period, t)
  if w == nil then return end
  local c = units
  if c > curr then c = curr end
  local p = units - c
  if p > prev then p = prev end
  redis.call('HSET', key, 'w', num(w), 'p', num(prev - p), 'c', num(curr - c))
  redis.call('PEXPIRE', key, ttl_ms(w + 2 * period - t))
end
