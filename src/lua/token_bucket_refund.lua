-- The refund of token_bucket (C: the algorithm's refund): ARGV[1] is the
-- refunded call's time, ARGV[7] the incarnation it consumed from.
-- the tokens go back, up to the capacity
if not same(v) then return 0 end
redis.call('HSET', H, 'x',
           str(min(add(rescale(num(v[2]), num(v[3]), W, false), cw), cap)),
           'w', str(W))
return 1
