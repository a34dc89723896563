-- sliding_window_counter.  KEYS[1]: hash {t = latest time, s = start of
-- the current window, c = its count, p = the previous window's count}
local v = state('s', 'c', 'p')
local t = clock(v and num(v[1]))
local start = (window(t))
local cur, prev = 0, 0
if v then
  local s = num(v[2])
  cur, prev = num(v[3]), num(v[4])
  if cmp(s, start) ~= 0 then
    prev = cmp(add(s, W), start) == 0 and cur or 0
    cur = 0
  end
end
-- decided for the cost plus the headroom (N), counting the cost
local N = add(C, headroom())
local cap, left = mul(L, W), sub(W, sub(t, start))
local used = add(mul(prev, left), mul(cur, W))
local allowed = cmp(add(used, mul(N, W)), cap) <= 0
local rn, rd = 0, 1
if allowed then
  cur, used = add(cur, C), add(used, mul(C, W))
elseif cmp(add(cur, N), L) <= 0 then
  -- W - (L - cur - n) * W / prev - e
  rn, rd = sub(mul(left, prev), mul(sub(L, add(cur, N)), W)), prev
else
  -- (W - e) + W - (L - n) * W / cur
  rn, rd = add(mul(left, cur), mul(sub(add(cur, N), L), W)), cur
end
local reset = t
if cmp(cur, 0) > 0 then reset = add(start, mul(2, W))
elseif cmp(prev, 0) > 0 then reset = add(start, W) end
return finish(not v, {'s', str(start), 'c', str(cur), 'p', str(prev)},
              t, reset, allowed, div(pos(cap, used), W), rn, rd, 0, 1)
