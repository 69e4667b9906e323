-- tollgate: the body shared by every script: decide every pair against one
-- snapshot, then write only if every pair admits (all-or-nothing). `main`
-- is one run; a script calls it on KEYS and ARGV, a function library
-- registers it (see scripts.rs).

-- The run's time (µs).
local t

-- The share of recent first reads of a GCRA key in a batch that found no
-- key (an exponential average, kept from call to call by a function
-- library): while most find none, a key is read by the `SET … NX … GET`
-- that also creates it; while most find one, by `GET`, which costs Redis
-- much less than a `SET` that finds its key (see mode "b"). Either way the
-- check is decided the same.
local absent = 1

-- The numbers of the six arguments after A[b] (see `arg_num` in
-- prelude.lua): a pair's, or in mode "b" a tuple's.
local function six(b)
  return arg_num(A[b + 1]), arg_num(A[b + 2]), arg_num(A[b + 3]), arg_num(A[b + 4]),
    arg_num(A[b + 5]), arg_num(A[b + 6])
end

local function pair(i)
  return six(4 + (i - 1) * 6)
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
  local allowed, remaining, reset, retry = algo_of(code)(K[i], 0, p1, p2, p3, p4, t)
  return { allowed, remaining, reset, retry }
end

local function main(keys, argv)
  begin(keys, argv)
  t = tonumber(A[1])
  if t == nil then
    local now = redis.call('TIME')
    t = tonumber(now[1]) * 1000000 + tonumber(now[2])
  end
  local n = arg_num(A[3])
  local mode = A[4]

  local out = {}
  if mode == 'b' then
    -- Batch: A[5] holds one byte per pair, the (1-based) index of its six
    -- arguments among the distinct tuples that follow, or nothing when
    -- there is one tuple (a batch's checks mostly share one rule and cost:
    -- each tuple is sent, and converted to numbers, once per run). Every pair is decided in order, and a later
    -- pair on the same key sees what an earlier one consumed; the reply is
    -- built as it goes.
    -- A GCRA key (one stored number) that pairs of the run share (there
    -- are key indices: kx) is read once and written once per
    -- run: `state[key]` is its number as the run's earlier pairs left it
    -- (false: none; negated once a pair consumed from it, which also puts
    -- the key in `dirty`), and the keys in `dirty` are written after the
    -- last pair, with their last value. What Redis holds afterwards is
    -- exactly what a write after each pair would leave (the run is atomic,
    -- and the last value of a key is its largest TAT, with the longest
    -- TTL), for one GET and one SET a key instead of a GET and a SET a
    -- pair: a hot key's batch costs Redis about as much as one check. Any
    -- other pair is written as soon as it admits.
    -- A[6]: one byte per pair, the (1-based) index of its key among the
    -- run's keys, or nothing when each pair has its own (KEYS[i]): the
    -- client sends a key once however many pairs of the run name it (a
    -- hot key's batch: one key), which saves Redis reading it and making
    -- a Lua string of it per pair.
    local refs, krefs, tuples = A[5], A[6], {}
    for j = 1, (#A - 6) / 6 do
      tuples[j] = { six(6 + (j - 1) * 6) }
    end
    -- No indices: every pair has the one tuple.
    local only = #refs == 0 and tuples[1]
    local byte = string.byte
    -- the key indices as numbers, read out in one call (not a call a pair)
    local kx = #krefs > 0 and { byte(krefs, 1, -1) }
    -- The reply: t, then per pair ONE integer for GCRA (code 1): the TAT
    -- after it minus t, `used`, when it admits, else -1 - used (the client
    -- derives the rest from the rule: see encode.rs, `gcra_decision`), and
    -- the four of a single check for the others; a failed pair's error
    -- text in place of its first, and zeros for the rest. `pos` is the next
    -- pair's place.
    local reply, pos = presized(t, only and n * (only[1] == 1 and 1 or 4)), 2
    local done = 0
    -- `kept[key]`: the last pair whose consumption of a GCRA key is in
    -- Redis already (it created the key: see below).
    local state, dirty, kept = {}, {}, {}
    local function fail(at, width, e)
      if type(e) == 'table' and e.err then e = e.err end
      reply[at] = tostring(e)
      for r = at + 1, at + width - 1 do reply[r] = 0 end
    end
    -- Decides pairs done+1..n; one pcall for the whole run, not one per pair.
    local function run()
      -- (the loop's upvalues as locals: registers, not upvalue reads)
      local reply, state, dirty, kept, K, t, kx = reply, state, dirty, kept, K, t, kx
      -- the pair's tuple and its numbers, read again only when it changes
      local p, code, cost, inc, tau, cap
      for i = done + 1, n do
        local q = only or tuples[byte(refs, i)]
        if q ~= p then p, code, cost, inc, tau, cap = q, q[1], q[2], q[3], q[4], q[6] end
        local key = kx and K[kx[i]] or K[i]
        if code == 1 then
          -- GCRA, as gcra.lua decides it, inline (two calls a pair cost
          -- more than the decision). `dirt`: the key is in `dirty` already.
          -- Without key indices (kx) no other pair of the run names this
          -- key: nothing is kept in `state`, and an admission is written at
          -- once (on many keys, growing those tables cost Redis more than
          -- the write it saves for keys named again).
          local stored, created, dirt = nil, false, false
          if kx then stored = state[key] end
          if stored == nil then
            if NX_GET and absent >= 0.5 and cost > 0 and cost <= cap and inc <= tau then
              -- A check of a key that does not exist is admitted (cost <=
              -- burst and increment <= tau) and leaves t + increment: write
              -- that unless the key exists, and read it if it does, in one
              -- command. Checks of many keys mostly find theirs gone (a key
              -- lives until its TAT): this halves their commands.
              -- (what it writes is the same for every pair of this tuple
              -- in the run: formatted once)
              local v = p[7]
              if not v then
                v = num(t + inc)
                p[7], p[8] = v, ttl_ms(inc)
              end
              -- (a refused write, e.g. OOM or READONLY, refuses this
              -- read too: the key is read by GET instead, so that only a
              -- check that consumes meets the refusal, at its own write;
              -- WRONGTYPE raises again there)
              -- (`old`: false, the value, or the error table; a string's
              -- `err` is nil, and costs less to ask than type())
              local old = rpcall('SET', key, v, 'NX', 'PX', p[8], 'GET')
              if not old then
                created = true
                absent = absent * 0.9375 + 0.0625
              elseif old.err then
                stored = tonumber(rcall('GET', key))
              else
                stored = tonumber(old)
                absent = absent * 0.9375
              end
            else
              local old = rcall('GET', key)
              stored = tonumber(old)
              absent = absent * 0.9375 + (old and 0 or 0.0625)
            end
            -- a TAT at or before t counts as none (and so every number kept
            -- in `state` is above t >= 0: its sign is free to mark dirt)
            if not stored or stored <= t then stored = false end
            if kx then state[key] = stored end
          elseif stored and stored < 0 then
            stored, dirt = -stored, true
          end
          if created then
            -- written already, and clean: what Redis holds
            if kx then
              state[key] = t + inc
              kept[key] = i
            end
            reply[pos] = inc
          else
            local tat = t
            if stored and stored > t then tat = stored end
            local after = tat + inc
            if cost <= cap and after - t <= tau then
              if cost > 0 then
                if not kx then
                  rcall('SET', key, num(after), 'PX', ttl_ms(after - t))
                else
                  if not dirt then dirty[#dirty + 1] = key end
                  state[key] = -after
                end
              end
              reply[pos] = after - t
            else
              reply[pos] = t - tat - 1
            end
          end
          pos = pos + 1
        else
          local allowed, remaining, reset, retry, write =
            algo_of(code)(key, cost, p[3], p[4], p[5], p[6], t)
          if allowed and cost > 0 then write() end
          reply[pos] = allowed and 1 or 0
          reply[pos + 1] = remaining
          reply[pos + 2] = reset
          reply[pos + 3] = retry
          pos = pos + 4
        end
        done = i
      end
    end
    while done < n do
      local ok, e = pcall(run)
      if not ok then
        -- Pair done+1 failed (e.g. WRONGTYPE; redis.call raises a table
        -- {err = …}): its error text (and zeros); the others go on.
        done = done + 1
        local p = only or tuples[byte(refs, done)]
        local width = p[1] == 1 and 1 or 4
        fail(pos, width, e)
        pos = pos + width
      end
    end
    -- One pcall for the writes too; a refused write (e.g. READONLY, OOM)
    -- means nothing this run consumed from its key was kept (but what a
    -- pair that created it consumed): every pair on that key from its
    -- first consuming one on (those that consumed, and those decided on
    -- what they consumed) reports the error instead.
    local written = 0
    local function write()
      for j = written + 1, #dirty do
        local key = dirty[j]
        local v = -state[key]
        -- GCRA's write, as in gcra.lua (called through a function per key,
        -- it cost redis-server ~1,100 more instructions a check on 10k keys)
        rcall('SET', key, num(v), 'PX', ttl_ms(v - t))
        written = j
      end
    end
    while written < #dirty do
      local ok, e = pcall(write)
      if not ok then
        written = written + 1
        local key, from, at = dirty[written], n + 1, 2
        for i = 1, n do
          local p = only or tuples[byte(refs, i)]
          local width = p[1] == 1 and 1 or 4
          if (kx and K[kx[i]] or K[i]) == key and i > (kept[key] or 0) then
            local v = reply[at]
            if from > n and p[2] > 0 and type(v) == 'number' and v >= 0 then from = i end
            if i >= from then fail(at, width, e) end
          end
          at = at + width
        end
      end
    end
    return reply
  elseif mode == 'g' or mode == 'f' then
    -- Charge (mode 'g'): every pair in turn (a later pair on the same key
    -- sees the earlier one's units), never denied. Refund (mode 'f'): every
    -- pair given its cost back, then read as a charge of nothing reads it.
    -- The reply: t, then 6 per pair (units: 0 for a refund).
    local function usage(i, code, cost, p1, p2, p3, p4)
      local charge = CHARGES[code]
      if charge == nil then
        error('tollgate: algorithm ' .. tostring(code) .. ' is not in this script')
      end
      if mode == 'f' then
        RETURNS[code](K[i], cost, p1, p2, p3, p4, t)
        cost = 0
      end
      return charge(K[i], cost, p1, p2, p3, p4, t)
    end
    if n == 1 then
      local remaining, reset, debt, units = usage(1, pair(1))
      return { t, 1, remaining, reset, -1, debt, units }
    end
    local reply = { t }
    for i = 1, n do
      local remaining, reset, debt, units = usage(i, pair(i))
      reply[#reply + 1] = 1
      reply[#reply + 1] = remaining
      reply[#reply + 1] = reset
      reply[#reply + 1] = -1
      reply[#reply + 1] = debt
      reply[#reply + 1] = units
    end
    return reply
  elseif mode == 'v' and n == 1 then
    -- One reservation (several: with the checks, below).
    local code, cost, p1, p2, p3, p4 = pair(1)
    local allowed, remaining, reset, retry, write = algo_of(code)(K[1], cost, p1, p2, p3, p4, t)
    if allowed then
      if cost > 0 then write() end
      redis.call('SET', K[2], '0:' .. A[6] .. ':' .. string.format('%x', t) .. ':'
        .. A[11] .. ':' .. A[12] .. A[14], 'PX', A[13])
    end
    return { t, allowed and 1 or 0, remaining, reset, retry }
  elseif mode == 's' then
    -- Settle (or cancel) a reservation: K[n+i] are its records, K[2n+i]
    -- its pairs' reset marks. Unknown (a record missing or past its
    -- memory, or a pair's key reset since) or finished (settled before):
    -- nothing changes. Else every pair: usage above its estimate charged;
    -- below it given back unless late (past the ttl); a cancel (-1) gives
    -- the whole estimate back. Reply: t, status (0 done, 1 unknown,
    -- 2 finished), late (0/1), then 8 per pair: allowed, remaining,
    -- reset_after, retry_after, debt, units charged, estimate, and the
    -- capacity of the rule it was counted under (-1: the pair's own).
    --
    -- A record "settled:estimate:made:ttl:remember:rule" (see mode 'v'):
    -- its state (0 open, 1 settled or unknown: nil) and, when open, the
    -- estimate, the time made, the end of the ttl and of its memory, and
    -- the rule that admitted it (nil in a record without one).
    local function record(rec)
      if not rec then return nil end
      if rec == '1' then return 1 end
      local st, e, m, d, f, rule =
        string.match(rec, '^(%d):(%d+):(%x+):(%x+):(%x+)(.*)$')
      if st == nil then return nil end
      m = tonumber(m, 16)
      d = m + tonumber(d, 16)
      f = d + tonumber(f, 16)
      if t >= f then return nil end
      if st ~= '0' then return 1 end
      local c, q1, q2, q3, q4, cap =
        string.match(rule, '^:(%x+):(%x+):(%x+):(%x+):(%x+):(%x+)$')
      if c ~= nil then
        rule = { tonumber(c, 16), tonumber(q1, 16), tonumber(q2, 16), tonumber(q3, 16),
          tonumber(q4, 16), tonumber(cap, 16) }
      else
        rule = nil
      end
      return 0, tonumber(e), m, d, rule
    end
    -- Pair i's usage `actual` against its estimate e made at `made`, under
    -- the rule that admitted it (`admitted`, as the record keeps it: a
    -- per-key override's), else the pair's own (a reload changed the
    -- rule's algorithm, or an older record). Also answers the capacity of
    -- the rule used (-1: the pair's own).
    local function settle(i, admitted, e, made, late, actual)
      local code, _, p1, p2, p3, p4 = pair(i)
      local cap = -1
      if admitted ~= nil and admitted[1] == code then
        p1, p2, p3, p4, cap = admitted[2], admitted[3], admitted[4], admitted[5], admitted[6]
      end
      local remaining, reset, debt, units
      if actual >= e then
        remaining, reset, debt, units = CHARGES[code](K[i], actual - e, p1, p2, p3, p4, t)
        return remaining, reset, debt, units, cap
      end
      if not late then
        local back = e
        if actual > 0 then back = e - actual end
        GIVEBACKS[code](K[i], back, p1, p2, p3, p4, t, made)
      end
      remaining, reset, debt, units = CHARGES[code](K[i], 0, p1, p2, p3, p4, t)
      return remaining, reset, debt, units, cap
    end
    -- Whether pair i's key was reset (docs/admin.md) at or after the
    -- reservation was made: its mark K[2n+i] holds the reset's time. The
    -- state the estimate was counted in is gone, and the reservation with
    -- it (as a reset key's leases are).
    local function reset_since(i, made)
      local r = redis.call('GET', K[2 * n + i])
      return r and tonumber(r) >= made
    end
    if n == 1 then
      -- At the server's time the record is read and closed in one call
      -- (SET … GET), its value becoming "1"; the key's TTL still forgets
      -- it. At an explicit time the record keeps its times once settled
      -- (its first byte set to 1), so that its memory after the ttl is
      -- counted on that clock, not on Redis's.
      local at_once = A[1] == ''
      local rec
      if at_once then
        rec = redis.call('SET', K[2], '1', 'XX', 'KEEPTTL', 'GET')
      else
        rec = redis.call('GET', K[2])
      end
      local st, e, made, due, admitted = record(rec)
      if st ~= 0 then return { t, st == nil and 1 or 2, 0 } end
      if reset_since(1, made) then
        redis.call('DEL', K[2])
        return { t, 1, 0 }
      end
      if not at_once then redis.call('SETRANGE', K[2], 0, '1') end
      local late = t > due
      local remaining, reset, debt, units, cap =
        settle(1, admitted, e, made, late, tonumber(A[11]))
      return { t, 0, late and 1 or 0, 1, remaining, reset, -1, debt, units, e, cap }
    end
    local recs = {}
    for i = 1, n do
      local st, e, made, due, admitted = record(redis.call('GET', K[n + i]))
      if st == nil then return { t, 1, 0 } end
      recs[i] = { st, e, made, due, admitted }
    end
    for i = 1, n do
      if recs[i][1] ~= 0 then return { t, 2, 0 } end
    end
    for i = 1, n do
      if reset_since(i, recs[i][3]) then
        for j = 1, n do redis.call('DEL', K[n + j]) end
        return { t, 1, 0 }
      end
    end
    local late = t > recs[1][4]
    local reply = { t, 0, late and 1 or 0 }
    local base = 4 + 6 * n
    for i = 1, n do
      redis.call('SETRANGE', K[n + i], 0, '1')
      local e = recs[i][2]
      local remaining, reset, debt, units, cap =
        settle(i, recs[i][5], e, recs[i][3], late, tonumber(A[base + i]))
      reply[#reply + 1] = 1
      reply[#reply + 1] = remaining
      reply[#reply + 1] = reset
      reply[#reply + 1] = -1
      reply[#reply + 1] = debt
      reply[#reply + 1] = units
      reply[#reply + 1] = e
      reply[#reply + 1] = cap
    end
    return reply
  elseif mode == 'l' or mode == 'w' then
    -- Release or renew lease A[5 + 6n] on every pair: all of them live, or
    -- nothing changes (status 1).
    local id = A[5 + 6 * n]
    local found = {}
    for i = 1, n do
      local at, list = cc_find(K[i], id, t)
      if at == nil then return { t, 1 } end
      found[i] = { at, list }
    end
    local reply = { t, 0 }
    for i = 1, n do
      local _, _, lease, limit = pair(i)
      local allowed, remaining, reset, retry =
        cc_end(K[i], found[i][2], found[i][1], mode == 'w', lease, limit, t)
      reply[#reply + 1] = allowed and 1 or 0
      reply[#reply + 1] = remaining
      reply[#reply + 1] = reset
      reply[#reply + 1] = retry
    end
    return reply
  elseif mode == 'a' then
    -- Acquire: every pair's decision first; when all admit, each takes a
    -- lease of its cost with the id A[5 + 6n].
    local id = A[5 + 6 * n]
    local all = true
    if n == 1 then
      -- One pair decides and takes its lease in one look at the key.
      local code, cost, lease, limit = pair(1)
      if code ~= 6 then error('tollgate: only concurrency rules are acquired') end
      local allowed, remaining, reset, retry = cc_acquire(K[1], cost, lease, limit, id, t)
      out[1] = { allowed, remaining, reset, retry }
      n = 0
    end
    for i = 1, n do
      local code, cost, lease, limit = pair(i)
      if code ~= 6 then error('tollgate: only concurrency rules are acquired') end
      local allowed, remaining, reset, retry = cc_decide(cc_live(K[i], t), cost, lease, limit, t)
      if not allowed then all = false end
      out[i] = { allowed, remaining, reset, retry }
    end
    if all then
      for i = 1, n do
        local _, cost, lease, limit = pair(i)
        local allowed, remaining, reset, retry = cc_acquire(K[i], cost, lease, limit, id, t)
        out[i] = { allowed, remaining, reset, retry }
      end
      if n == 0 then n = 1 end
    else
      for i = 1, n do
        if out[i][1] then out[i] = peek(i) end
      end
    end
  elseif mode == 'r' then
    for i = 1, n do
      local code, cost, p1, p2, p3, p4 = pair(i)
      REFUNDS[code](K[i], cost, p1, p2, p3, p4, t)
    end
    for i = 1, n do out[i] = peek(i) end
  else
    local writes, all = {}, true
    for i = 1, n do
      local code, cost, p1, p2, p3, p4 = pair(i)
      local allowed, remaining, reset, retry, write = algo_of(code)(K[i], cost, p1, p2, p3, p4, t)
      if not allowed then all = false end
      out[i] = { allowed, remaining, reset, retry }
      if allowed and cost > 0 then writes[#writes + 1] = write end
    end
    if all and (mode == 'c' or mode == 'v') then
      for i = 1, #writes do writes[i]() end
      if mode == 'v' then
        -- A reservation: a record beside each pair's state (same hash slot),
        -- kept until its memory after the ttl ends:
        -- "settled:estimate:made:ttl:remember:rule", settled 0 or 1 (the
        -- first byte, so a settle marks it with SETRANGE), the estimate as
        -- its argument, the times in hex (µs; the ttl, the memory after it
        -- and the record's PX come from the client): no decimal
        -- formatting, and a settle parses them with strtoul
        -- (docs/redis-store.md). The rule that admitted the pair, as the
        -- client wrote it (":code:p1:p2:p3:p4:capacity" in hex), last.
        local tail = ':' .. string.format('%x', t) .. ':' .. A[5 + 6 * n] .. ':' .. A[6 + 6 * n]
        local px = A[7 + 6 * n]
        for i = 1, n do
          redis.call('SET', K[n + i], '0:' .. A[6 + (i - 1) * 6] .. tail .. A[7 + 6 * n + i],
            'PX', px)
        end
      end
    elseif n > 1 or mode == 'd' or mode == 'v' then
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
end
