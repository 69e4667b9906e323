-- The live-replica heartbeat: one call per replica per interval.
--
-- KEYS[1]  the fleet's sorted set, `{prefix}:replicas` (member: replica id,
--          score: the Redis server's time of its last heartbeat, in ms)
-- ARGV[1]  this replica's id
-- ARGV[2]  how long a heartbeat counts, in ms (a few intervals): older
--          members are removed, and the key expires this long after the
--          last heartbeat of any replica, so it never lingers without a TTL
--
-- Returns {live replicas (this one included), server time in ms}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return {redis.call('ZCARD', KEYS[1]), now}
