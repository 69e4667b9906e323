-- wrk script: GET PATH, optionally with an `x-key` header uniformly random
-- among KEYS keys (the proxy's rule keys on it; a plain upstream ignores it).
-- Requests are pre-built, as in check.lua, so every target pays the same
-- per-request Lua cost.
--
--   wrk -s bench/http/get.lua URL -- PATH [KEYS]

local thread_no = 0
function setup(thread)
  thread_no = thread_no + 1
  thread:set("seed", thread_no)
end

local requests = {}
local n = 1

function init(args)
  local path, keys = args[1] or "/", tonumber(args[2] or "0")
  if keys <= 0 then
    requests[1] = wrk.format("GET", path)
    n = 1
  else
    n = keys
    for i = 0, keys - 1 do
      requests[i + 1] = wrk.format("GET", path, { ["x-key"] = "k" .. i })
    end
  end
  math.randomseed(os.time() * 16 + (seed or 0))
end

function request()
  if n == 1 then return requests[1] end
  return requests[math.random(n)]
end
