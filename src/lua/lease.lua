-- Leases: the slots of a concurrency limit on Redis (src/redis_lease.c,
-- docs/redis.md).  Not built on the prelude: a slot is no rate state.
--
--   KEYS[1]  the key's sorted set: member = a holder (unique per server,
--            backend and slot), score = when its lease expires (Redis TIME,
--            ms)
--   ARGV     op, holder, lease time (ms), and for 'acquire' the limit and
--            the headroom (slots that must stay free after the call)
--
-- 'acquire' drops the expired leases, counts the others and adds the
-- holder's if in_flight + 1 + headroom <= limit; replies {taken (0/1),
-- slots in flight after the call}.  'renew' moves a live lease's expiry
-- to now + lease time; a lease expired (or gone: a reset, an eviction) is
-- not brought back, for another may have its slot; replies 1 if renewed,
-- else 0.  'release' removes the holder's lease; replies how many went.
-- The set expires when its last lease would (plus a second).
--
-- To run one by hand (a limit of 2, no headroom, a lease of 30 s):
--   redis-cli --eval lease.lua 'rl:{0:cc:k}' , acquire me 30000 2 0

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local key, op, holder = KEYS[1], ARGV[1], ARGV[2]
local lease = tonumber(ARGV[3])

if not lease or lease <= 0 then
  return redis.error_reply('ratelimit: bad lease time')
end

-- keep the set until its latest lease is over
local function keep(until_ms)
  local ttl = until_ms - now + 1000
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

if op == 'acquire' then
  local limit, headroom = tonumber(ARGV[4]), tonumber(ARGV[5])
  if not limit or not headroom then
    return redis.error_reply('ratelimit: bad limit or headroom')
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local held = redis.call('ZCARD', key)
  if held + 1 + headroom <= limit then
    redis.call('ZADD', key, now + lease, holder)
    keep(now + lease)
    return {1, held + 1}
  end
  return {0, held}
elseif op == 'renew' then
  local until_ms = redis.call('ZSCORE', key, holder)
  if not until_ms or tonumber(until_ms) <= now then
    redis.call('ZREM', key, holder)
    return 0
  end
  redis.call('ZADD', key, 'XX', now + lease, holder)
  keep(now + lease)
  return 1
elseif op == 'release' then
  return redis.call('ZREM', key, holder)
end
return redis.error_reply('ratelimit: unknown lease operation')
