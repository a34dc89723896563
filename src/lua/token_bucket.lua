-- token_bucket.  KEYS[1]: hash {t = latest time, x = tokens times w (or
-- '-' and the tokens owed times w), w = the W x is scaled by}
local x, d = cap, 0
if last then
  local x0, d0 = content(v[2], num(v[3]))
  x, d = credit(x0, d0, mul(sub(t, last), L))
end
local nw = mul(add(C, headroom()), W)  -- the cost plus the headroom
local allowed = cmp(d, 0) == 0 and cmp(x, nw) >= 0
if allowed then x = sub(x, cw) end
return finish(not last, {'x', stored(x, d), 'w', str(W)}, t,
              after(t, add(sub(cap, x), d), L), allowed, div(x, W),
              allowed and 0 or add(sub(nw, x), d), L, 0, 1)
