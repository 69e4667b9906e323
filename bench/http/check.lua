-- wrk script: POST rate-limit checks, pre-built so the per-request Lua cost
-- is one table lookup (wrk shares the 2 cores with the server under test).
--
--   wrk -s bench/http/check.lua URL -- FORMAT RULE KEYS
--
-- FORMAT  tollgate      POST /v1/check {"rule":RULE,"key":K,"cost":1}
--         throttlecrab  POST /throttle {"key":RULE:K, max_burst, count_per_period, period}
--                       with RULE's limits (see LIMITS, the same as bench/http/rules.toml)
-- RULE    open (admitted: 1,000,000/s, burst 1,000,000) | closed (denied: 1/day, burst 2;
--         throttlecrab 0.4 admits every check at burst 1: it stores the key with a 0 TTL);
--         for tollgate any rule it serves (bench/grpc.sh: the Envoy limits' envoy.DOMAIN.user)
-- KEYS    1 = one hot key; N = uniformly random among N keys (k0 .. k{N-1})

local LIMITS = {
  open   = { burst = 1000000, count = 1000000, period = 1 },
  closed = { burst = 2,       count = 1,       period = 86400 },
}

local thread_no = 0
function setup(thread)
  thread_no = thread_no + 1
  thread:set("seed", thread_no)
end

local requests = {}
local n = 1

function init(args)
  local format, rule, keys = args[1] or "tollgate", args[2] or "open", tonumber(args[3] or "1")
  local lim = LIMITS[rule]
  if lim == nil and format ~= "tollgate" then error("unknown rule " .. tostring(rule)) end
  local headers = { ["Content-Type"] = "application/json" }
  n = keys
  for i = 0, keys - 1 do
    local key = "k" .. i
    local path, body
    if format == "tollgate" then
      path = "/v1/check"
      body = string.format('{"rule":"%s","key":"%s","cost":1}', rule, key)
    elseif format == "throttlecrab" then
      path = "/throttle"
      body = string.format(
        '{"key":"%s:%s","max_burst":%d,"count_per_period":%d,"period":%d,"quantity":1}',
        rule, key, lim.burst, lim.count, lim.period)
    else
      error("unknown format " .. tostring(format))
    end
    requests[i + 1] = wrk.format("POST", path, headers, body)
  end
  math.randomseed(os.time() * 16 + (seed or 0))
end

function request()
  if n == 1 then return requests[1] end
  return requests[math.random(n)]
end
