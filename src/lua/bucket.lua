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
-- token_bucket's content: x tokens, or d owed after a charge past the
-- limit (stored as x = '-' d; C: the content below zero), times W, at
-- this call's W (d rounds up, as C rounds a content below zero down).
local function content(s, w)
  if string.byte(s, 1) == 45 then
    return 0, rescale(num(string.sub(s, 2)), w, W, true)
  end
  return rescale(num(s), w, W, false), 0
end
local function stored(x, d)
  return cmp(d, 0) > 0 and '-' .. str(d) or str(x)
end
-- x tokens, d owed, after n more (times W): the debt first, up to the capacity
local function credit(x, d, n)
  if cmp(d, 0) > 0 then
    if cmp(n, d) < 0 then return 0, sub(d, n) end
    n, d = sub(n, d), 0
  end
  return min(add(x, n), cap), 0
end
