-- The setup of token_bucket and leaky_bucket, after the prelude, before
-- their decision or refund: the bucket's state and its capacity.
-- Bring a content scaled by W "from" to W "to" (C: bucket_rescale).
local function rescale(x, from, to, up)
  if cmp(from, to) == 0 then return x end
  local whole, part = divmod(x, from)
  local q, r = divmod(mul(part, to), from)
  if up and r ~= 0 then q = add(q, 1) end
  return add(mul(whole, to), q)
end
local B = num(A[5])
local v = state('x', 'w')
local last = v and num(v[1])
local t = clock(last)
local cap, cw = mul(B, W), mul(C, W)
