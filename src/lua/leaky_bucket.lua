-- leaky_bucket.  KEYS[1]: hash {t = latest time, x = level times w,
-- w = the W x is scaled by}
local x = 0
if last then
  x = pos(rescale(num(v[2]), num(v[3]), W, true), mul(sub(t, last), L))
end
local nw = mul(add(C, headroom()), W)  -- the cost plus the headroom
local allowed = cmp(add(x, nw), cap) <= 0
local rn, dn = 0, 0
if allowed then
  dn, x = x, add(x, cw)
else
  rn = sub(add(x, nw), cap)
end
return finish(not last, {'x', str(x), 'w', str(W)}, t, after(t, x, L),
              allowed, div(pos(cap, x), W), rn, L, dn, L)
