-- The refund of sliding_window_log (C: the algorithm's refund): ARGV[1] is the
-- refunded call's time, ARGV[7] the incarnation it consumed from.
-- the call's entry, if still logged; an emptied newest entry goes
local G = K[2]
local v = state('n')
if not same(v) then return 0 end
local T = num(A[1])
local n = redis.call('LLEN', G)
local i = n
local last = redis.call('LINDEX', G, -1)
if not last or cmp((entry(last)), T) < 0 then return 0 end
if cmp((entry(last)), T) ~= 0 then
  i = nil
  for k, e in ipairs(redis.call('LRANGE', G, 0, -1)) do
    local c = cmp((entry(e)), T)
    if c > 0 then break end
    if c == 0 then i = k; break end
  end
  if not i then return 0 end
end
local et, ec = entry(redis.call('LINDEX', G, i - 1))
local given = min(C, ec)
redis.call('HSET', H, 'n', str(sub(num(v[2]), given)))
if i == n and cmp(ec, given) == 0 then
  redis.call('RPOP', G)
else
  redis.call('LSET', G, i - 1, str(et) .. ' ' .. str(sub(ec, given)))
end
return 1
