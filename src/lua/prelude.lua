-- The prelude of every Redis script of ratelimit (docs/redis.md).
--
-- A script deciding one call is this prelude, single.lua, the algorithm's
-- setup (bucket.lua for the buckets) and its decision (<algorithm>.lua);
-- its refund ends with <algorithm>_refund.lua instead.  The scripts mirror
-- src/algo_window.c, src/algo_bucket.c and src/algo_log.c operation for
-- operation: both engines give the same answers.  Keys travel only in
-- KEYS, values only in ARGV:
--
--   KEYS[1]  the state hash; KEYS[2] (sliding_window_log) the entry list
--   ARGV     at ('' = Redis TIME), limit, per, cost, burst, TTL slack (ms),
--            and for a refund the incarnation the refunded call consumed
--            from (ARGV[1] is then the refunded call's time; for a
--            decision its headroom, '' or absent for none (headroom(),
--            below); for a charge '+' (take) or '-' (give back)), then
--            for a calendar period (fixed_window) four bounds (window(),
--            below)
--
-- A decision replies {allowed (0/1), remaining, reset_at, retry_after
-- numerator, denominator, delay numerator, denominator, the call's time,
-- the state's incarnation}, all decimal strings but the first; fractions
-- are microseconds.  A refund replies 1 if it gave anything back, else 0.
--
-- Each state hash records its incarnation (field i): Redis TIME in
-- microseconds when the state was created.  A state reset (DEL), expired
-- or evicted and created again is another incarnation: Redis runs one
-- command at a time, and a re-creation is another command than the
-- creation.  A refund gives back only to the incarnation it names.
--
-- To run one by hand (a token bucket of 10 per second, cost 1):
--   cat prelude.lua single.lua bucket.lua token_bucket.lua > /tmp/tb.lua
--   redis-cli --eval /tmp/tb.lua 'rl:{0:tb:k}' , '' 10 1000000 1 10 1000
--

-- Exact integer arithmetic.  Redis Lua numbers are doubles, exact below
-- 2^53: a value of magnitude below 2^53 is a plain number (negative ones
-- only arise from times before 1970); a larger one, always positive, is a
-- table of base 2^24 limbs, least significant first, no leading zero limb.
-- Each operation takes the plain path when its result is provably exact,
-- so ordinary calls allocate nothing.
local floor, fmod, type = math.floor, math.fmod, type
local BASE, SAFE = 16777216, 9007199254740992

local function range() error('ratelimit: value out of range') end

local function limbs(x)
  if type(x) == 'table' then return x end
  local r, i = {}, 1
  while x > 0 do
    local q = floor(x / BASE)
    r[i] = x - q * BASE
    x, i = q, i + 1
  end
  return r
end

local function norm(r)
  local n = #r
  while n > 0 and r[n] == 0 do r[n] = nil; n = n - 1 end
  if n <= 2 or (n == 3 and r[3] < 32) then
    local v = 0
    for i = n, 1, -1 do v = v * BASE + r[i] end
    return v
  end
  return r
end

local function cmp(a, b)
  local ta, tb = type(a) == 'table', type(b) == 'table'
  if not ta and not tb then
    return a < b and -1 or (a > b and 1 or 0)
  elseif not ta then return -1
  elseif not tb then return 1
  elseif #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local sub

local function add(a, b)
  local pa, pb = type(a) == 'number', type(b) == 'number'
  if pa and pb then
    local s = a + b
    if s < SAFE and s > -SAFE then return s end
  end
  if pa and a < 0 then return sub(b, -a) end
  if pb and b < 0 then return sub(a, -b) end
  a, b = limbs(a), limbs(b)
  local r, carry = {}, 0
  for i = 1, (#a > #b and #a or #b) do
    local v = (a[i] or 0) + (b[i] or 0) + carry
    carry = v >= BASE and 1 or 0
    r[i] = v - carry * BASE
  end
  r[#r + 1] = carry
  return norm(r)
end

sub = function(a, b)
  local pa, pb = type(a) == 'number', type(b) == 'number'
  if pa and pb then
    local d = a - b
    if d < SAFE and d > -SAFE then return d end
  end
  if pb and b < 0 then return add(a, -b) end
  if pa and a < 0 then range() end
  if cmp(a, b) < 0 then
    local d = sub(b, a)
    if type(d) == 'table' then range() end
    return -d
  end
  a, b = limbs(a), limbs(b)
  local r, borrow = {}, 0
  for i = 1, #a do
    local v = a[i] - (b[i] or 0) - borrow
    borrow = v < 0 and 1 or 0
    r[i] = v + borrow * BASE
  end
  return norm(r)
end

local function mul(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    local p = a * b
    if p < SAFE and p > -SAFE then return p end
    if a < 0 or b < 0 then range() end
  elseif (type(a) == 'number' and a < 0) or (type(b) == 'number' and b < 0) then
    range()
  end
  a, b = limbs(a), limbs(b)
  local r, na, nb = {}, #a, #b
  for i = 1, na + nb + 1 do r[i] = 0 end
  for i = 1, na do
    local ai, carry, k = a[i], 0, i + nb
    for j = 1, nb do
      local v = r[i + j - 1] + ai * b[j] + carry
      carry = floor(v / BASE)
      r[i + j - 1] = v - carry * BASE
    end
    while carry > 0 do
      local v = r[k] + carry
      carry = floor(v / BASE)
      r[k] = v - carry * BASE
      k = k + 1
    end
  end
  return norm(r)
end

local function approx(x)
  if type(x) == 'number' then return x end
  local v = 0
  for i = #x, 1, -1 do v = v * BASE + x[i] end
  return v
end

-- floor(a / b) and a - b * floor(a / b), for b > 0
local function divmod(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    local r = fmod(a, b)
    if r < 0 then r = r + b end
    if a - r <= -SAFE then range() end
    return (a - r) / b, r
  end
  -- Each step takes a quotient estimate made in doubles and shrunk by
  -- 2^-40, far more than their rounding error, so it never overshoots.
  local q, r, bd = 0, a, approx(b)
  while cmp(r, b) >= 0 do
    local e = floor(approx(r) / bd * (1 - 2 ^ -40))
    if e < 1 then e = 1 end
    if e >= SAFE then e = norm(limbs(e)) end
    r = sub(r, mul(e, b))
    q = add(q, e)
  end
  return q, r
end

local function div(a, b) return (divmod(a, b)) end

local function cdiv(a, b)
  local q, r = divmod(a, b)
  if r ~= 0 then q = add(q, 1) end
  return q
end

-- decimal strings in and out
local function num(s)
  if not s then return nil end
  if #s <= 15 then return tonumber(s) end
  if string.byte(s, 1) == 45 then
    local x = tonumber(s)
    if x <= -SAFE then range() end
    return x
  end
  local head = #s % 7
  local x = head > 0 and tonumber(string.sub(s, 1, head)) or 0
  for i = head + 1, #s, 7 do
    x = add(mul(x, 10000000), tonumber(string.sub(s, i, i + 6)))
  end
  return x
end

local function str(x)
  if type(x) == 'number' then return string.format('%.0f', x) end
  local t, n, parts = {}, #x, {}
  for i = 1, n do t[i] = x[i] end
  while n > 0 do
    local rem = 0
    for i = n, 1, -1 do
      local v = rem * BASE + t[i]
      t[i] = floor(v / 10000000)
      rem = v - t[i] * 10000000
    end
    while n > 0 and t[n] == 0 do n = n - 1 end
    parts[#parts + 1] = rem
  end
  local s = string.format('%d', parts[#parts])
  for i = #parts - 1, 1, -1 do s = s .. string.format('%07d', parts[i]) end
  return s
end

local function min(a, b) return cmp(a, b) <= 0 and a or b end
local function pos(a, b) return cmp(a, b) > 0 and sub(a, b) or 0 end

-- The call being decided: K its keys, A its arguments (at ('' = Redis
-- TIME), limit, per, cost, burst, ttl slack in ms, and for a refund the
-- incarnation the refunded call consumed from), H its state hash and
-- L, W, C.  A script deciding several calls uses each in turn.
local K, A, H, L, W, C
local function use(keys, args)
  K, A, H = keys, args, keys[1]
  L, W, C = num(args[2]), num(args[3]), num(args[4])
end
local SATURATE = norm(limbs(2 ^ 62))

-- The key's state: HMGET of t (its latest time) and the given fields, or
-- nil for a new key.  A hash lacking a field (written by something else,
-- or half evicted) also starts afresh rather than failing every call.
-- I is the state's incarnation, nil for a new key, and for a hash written
-- before incarnations were (0.2.0) until a decision gives it one.
local I
local function state(...)
  local v = redis.call('HMGET', H, 'i', 't', ...)
  I = v[1] or nil
  table.remove(v, 1)
  for i = 1, #v do
    if not v[i] then I = nil; return nil end
  end
  return v
end

-- A decision's headroom (load shedding, src/shed.c): units that must stay
-- free after the call for it to be admitted; it is decided as if it cost
-- C plus that, and charged C.  Only decisions read ARGV[7] so.
local function headroom()
  local h = A[7]
  if not h or h == '' then return 0 end
  return num(h)
end

-- For a refund: is v the state of the incarnation the refunded call
-- consumed from?  Not once the key was reset, expired or evicted and
-- created again, nor for a state of unknown incarnation.
local function same(v)
  return v and I ~= nil and I == A[7]
end

-- The time of the call, never before the latest time the key has seen.
local function clock(latest)
  local t
  if A[1] == '' then
    local tm = redis.call('TIME')
    t = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  else
    t = num(A[1])
  end
  if latest and cmp(latest, t) > 0 then t = latest end
  return t
end

-- a sliding log's entry "time cost": its time and cost
local function entry(e)
  local sp = string.find(e, ' ', 1, true)
  return num(string.sub(e, 1, sp - 1)), num(string.sub(e, sp + 1))
end

-- The start and end of t's window (C: rl_window_bounds).  A calendar
-- period's bounds are computed by the caller (src/period.c: time zones
-- live there only) and sent as ARGV[8] to ARGV[11]: the starts of the
-- windows before, of and after the one holding the caller's time, and the
-- end of that last one (a call clamped to a later latest time takes its
-- window from the state: fixed_window.lua).  A time outside them (a clock
-- more than a period away from the caller's) is an error, never a guess.
-- Otherwise the window is floor(t / W) * W, W long.
local function window(t)
  if A[8] then
    for i = 8, 10 do
      local s, e = num(A[i]), num(A[i + 1])
      if cmp(t, s) >= 0 and cmp(t, e) < 0 then return s, e end
    end
    error('ratelimit: the call\'s time is outside the calendar periods sent')
  end
  local s = sub(t, select(2, divmod(t, W)))
  return s, add(s, W)
end

-- A sliding log's total at t, v its state ('n' second): the entries of list
-- G a window old are dropped first; a log without state starts empty.
local function log_expire(G, v, t)
  if not v then
    redis.call('DEL', G)
    return 0
  end
  local sum = num(v[2])
  while true do
    local e = redis.call('LINDEX', G, 0)
    if not e then break end
    local et, ec = entry(e)
    if cmp(add(et, W), t) > 0 then break end
    redis.call('LPOP', G)
    sum = sub(sum, ec)
  end
  return sum
end

-- fixed_window's window for a call at t, v its state ('s', 'c' first): a
-- call clamped to the key's latest time is in the window the state
-- records (every decision and charge writes t with s and e), since the
-- bounds sent were computed around the call's own time.
local function state_window(v, t)
  if A[8] and v and cmp(t, num(v[1])) == 0 then
    local e = redis.call('HGET', H, 'e')
    if e then return num(v[2]), num(e) end
  end
  return window(t)
end

-- t + ceil(n / d), saturated like the C algorithms' reset_at
local function after(t, n, d)
  return min(add(t, cdiv(n, d)), SATURATE)
end

-- The state's incarnation, given to a new one: Redis TIME in microseconds.
local function incarnation()
  if not I then
    local tm = redis.call('TIME')
    I = str(tonumber(tm[1]) * 1000000 + tonumber(tm[2]))
  end
  return I
end

-- A charge (rl_adjust, <algorithm>_charge.lua): C units taken whatever the
-- state holds, or given back when ARGV[7] is '-'.  Counts stay within 64
-- bits, as in shared memory.  charged stores the state the charge left at
-- t (fields; nil: nothing to store, a give-back to a new key), then makes
-- the call a look (cost 0) at t, which the algorithm's decision answers.
local MAXC = num('9223372036854775807')
local function charged(t, fields)
  if fields then
    redis.call('HSET', H, 'i', incarnation(), 't', str(t), unpack(fields))
  end
  use(K, {str(t), A[2], A[3], '0', A[5], A[6]})
end

-- Store the state (a new key is not stored by a call that consumes
-- nothing, as in shared memory), a new one with its incarnation, expire
-- the keys once the state is back to a new key's plus a slack, and reply
-- {allowed, remaining, reset_at, retry_after and delay as fractions of
-- microseconds, the call's time, the incarnation ('0': nothing stored)}.
local function finish(fresh, fields, t, reset, allowed, remaining,
                      rn, rd, dn, dd)
  if not fresh or cmp(C, 0) > 0 then
    redis.call('HSET', H, 'i', incarnation(), 't', str(t), unpack(fields))
    local ttl = floor(approx(pos(reset, t)) / 1000) + 1 + tonumber(A[6])
    if ttl > 35184372088832 then ttl = 35184372088832 end
    for i = 1, #K do redis.call('PEXPIRE', K[i], ttl) end
  end
  return {allowed and 1 or 0, str(remaining), str(reset), str(rn), str(rd),
          str(dn), str(dd), str(t), I or '0'}
end
