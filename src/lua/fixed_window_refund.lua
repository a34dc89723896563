-- The refund of fixed_window (C: the algorithm's refund): ARGV[1] is the
-- refunded call's time, ARGV[7] the incarnation it consumed from.
-- the units still count only while their window lasts
local v = state('s', 'c')
if not same(v) or cmp(num(v[2]), (window(num(A[1])))) ~= 0 then return 0 end
redis.call('HSET', H, 'c', str(pos(num(v[3]), C)))
return 1
