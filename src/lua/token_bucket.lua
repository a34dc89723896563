-- token_bucket.  KEYS[1]: hash {t = latest time, x = tokens times w,
-- w = the W x is scaled by}
local x = cap
if last then
  x = min(add(rescale(num(v[2]), num(v[3]), W, false),
              mul(sub(t, last), L)), cap)
end
local allowed = cmp(x, cw) >= 0
if allowed then x = sub(x, cw) end
return finish(not last, {'x', str(x), 'w', str(W)}, t,
              after(t, sub(cap, x), L), allowed, div(x, W),
              allowed and 0 or sub(cw, x), L, 0, 1)
