-- The refund of token_bucket (C: the algorithm's refund): ARGV[1] is the
-- refunded call's time, ARGV[7] the incarnation it consumed from.
-- the tokens go back (what is owed first), up to the capacity
if not same(v) then return 0 end
local x0, d0 = content(v[2], num(v[3]))
local x, d = credit(x0, d0, cw)
redis.call('HSET', H, 'x', stored(x, d), 'w', str(W))
return 1
