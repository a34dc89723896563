-- The refund of sliding_window_counter (C: the algorithm's refund): ARGV[1] is the
-- refunded call's time, ARGV[7] the incarnation it consumed from.
-- in the call's window, or in the previous one if the window has
-- rolled once since
local v = state('s', 'c', 'p')
if not same(v) then return 0 end
local s, start = num(v[2]), (window(num(A[1])))
if cmp(s, start) == 0 then
  redis.call('HSET', H, 'c', str(pos(num(v[3]), C)))
elseif cmp(s, add(start, W)) == 0 then
  redis.call('HSET', H, 'p', str(pos(num(v[4]), C)))
else
  return 0
end
return 1
