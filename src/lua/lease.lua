-- Leases: the slots of a concurrency limit on Redis (src/redis_lease.c,
-- docs/redis.md), and the queue of those waiting for one.  Not built on
-- the prelude: a slot is no rate state.
--
--   KEYS[1]  the key's leases, a sorted set: member = a holder (unique per
--            server, backend and slot), score = when its lease expires
--            (Redis TIME, ms)
--   KEYS[2]  the queue, a sorted set: member = a waiter's holder name,
--            score = its ticket (one above the last, first come first
--            served)
--   KEYS[3]  when each ticket expires (same members, score = ms)
--   KEYS[4]  the wake-up list the waiters block on (BLPOP)
--   (all four share the key's hash tag: one Redis Cluster slot)
--   ARGV     op, holder, lease time (ms), and for 'acquire', 'queue' and
--            'poll' the limit, the headroom (slots that must stay free
--            after the call) and the ticket time (ms)
--
-- 'acquire' drops the expired leases and tickets, counts the live leases
-- and adds the holder's if nobody waits and in_flight + 1 + headroom <=
-- limit; replies {taken (0/1), slots in flight after the call, shed}, shed
-- 1 when only the headroom held the holder back (a slot free under the
-- limit, nobody waiting ahead), else 0.  'queue'
-- is 'acquire' that, when no slot is given, gives the holder a ticket at
-- the end of the queue (expiring after the ticket time).  'poll' renews
-- the holder's ticket and gives it a slot if its ticket is the first and
-- the slot (plus headroom) is free (shed as for 'acquire', the holder's
-- ticket the first); replies {-1, in flight} when its
-- ticket is gone (expired: the waiter was away too long; it queues
-- again).  'renew' moves a live lease's expiry to now + lease time; a
-- lease expired (or gone: a reset, an eviction) is not brought back, for
-- another may have its slot; replies 1 if renewed, else 0.  'release'
-- removes the holder's lease and ticket; replies how many went.  Whenever
-- a slot frees or a ticket goes (released, left, expired), one wake-up per
-- waiter (at most 16) is pushed on KEYS[4]: each waiter then looks again.
-- The sets and the list expire when their latest member would (plus a
-- second).
--
-- To run one by hand (a limit of 2, no headroom, a lease of 30 s):
--   redis-cli --eval lease.lua 'rl:{0:cc:k}' 'rl:{0:cc:k}:q' \
--     'rl:{0:cc:k}:qt' 'rl:{0:cc:k}:w' , acquire me 30000 2 0 3000

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local key, queue, tickets, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, holder = ARGV[1], ARGV[2]
local lease = tonumber(ARGV[3])

if not lease or lease <= 0 then
  return redis.error_reply('ratelimit: bad lease time')
end

-- keep k until until_ms is over (plus a second)
local function keep(k, until_ms)
  local ttl = until_ms - now + 1000
  if redis.call('PTTL', k) < ttl then
    redis.call('PEXPIRE', k, ttl)
  end
end

-- a wake-up for each waiter (at most 16): each looks at the queue again
local function wake_all()
  local n = math.min(redis.call('ZCARD', queue), 16)
  if n == 0 then
    return
  end
  for _ = 1, n do
    redis.call('RPUSH', wake, '1')
  end
  redis.call('LTRIM', wake, -16, -1)
  redis.call('PEXPIRE', wake, 5000)
end

-- drop expired leases and tickets (waking the queue if a ticket went)
local function sweep()
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local gone = redis.call('ZRANGEBYSCORE', tickets, '-inf', now)
  if #gone > 0 then
    for _, h in ipairs(gone) do
      redis.call('ZREM', queue, h)
    end
    redis.call('ZREMRANGEBYSCORE', tickets, '-inf', now)
    wake_all()
  end
  return redis.call('ZCARD', key)
end

-- the holder takes a slot
local function take(held)
  redis.call('ZADD', key, now + lease, holder)
  keep(key, now + lease)
  return {1, held + 1}
end

if op == 'acquire' or op == 'queue' or op == 'poll' then
  local limit, headroom = tonumber(ARGV[4]), tonumber(ARGV[5])
  local ticket = tonumber(ARGV[6])
  if not limit or not headroom or not ticket or ticket <= 0 then
    return redis.error_reply('ratelimit: bad limit, headroom or ticket time')
  end
  local held = sweep()
  local fits = held + 1 + headroom <= limit
  if op == 'poll' then
    if not redis.call('ZSCORE', queue, holder) then
      return {-1, held}
    end
    redis.call('ZADD', tickets, 'XX', now + ticket, holder)
    keep(queue, now + ticket)
    keep(tickets, now + ticket)
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if first ~= holder or not fits then
      return {0, held, (first == holder and held + 1 <= limit) and 1 or 0}
    end
    redis.call('ZREM', queue, holder)
    redis.call('ZREM', tickets, holder)
    -- the next in line may fit too
    if held + 2 <= limit then
      wake_all()
    end
    return take(held)
  end
  local waiting = redis.call('ZCARD', queue)
  if fits and waiting == 0 then
    return take(held)
  end
  local shed = (waiting == 0 and held + 1 <= limit) and 1 or 0
  if op == 'queue' then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    local seq = 1
    if #last == 2 then
      seq = tonumber(last[2]) + 1
    end
    redis.call('ZADD', queue, seq, holder)
    redis.call('ZADD', tickets, now + ticket, holder)
    keep(queue, now + ticket)
    keep(tickets, now + ticket)
  end
  return {0, held, shed}
elseif op == 'renew' then
  local until_ms = redis.call('ZSCORE', key, holder)
  if not until_ms or tonumber(until_ms) <= now then
    redis.call('ZREM', key, holder)
    return 0
  end
  redis.call('ZADD', key, 'XX', now + lease, holder)
  keep(key, now + lease)
  return 1
elseif op == 'release' then
  local n = redis.call('ZREM', key, holder)
  n = n + redis.call('ZREM', queue, holder)
  redis.call('ZREM', tickets, holder)
  if n > 0 then
    wake_all()
  end
  return n
end
return redis.error_reply('ratelimit: unknown lease operation')
