-- The refund of leaky_bucket (C: the algorithm's refund): ARGV[1] is the
-- refunded call's time, ARGV[7] the incarnation it consumed from.
-- the units leave the queue (what already drained is gone)
if not same(v) then return 0 end
redis.call('HSET', H, 'x', str(pos(rescale(num(v[2]), num(v[3]), W, true), cw)),
           'w', str(W))
return 1
