-- fixed_window.  KEYS[1]: hash {t = latest time, s = window start,
-- c = count in that window}
local v = state('s', 'c')
local t = clock(v and num(v[1]))
local start = window(t)
local cur = 0
if v and cmp(num(v[2]), start) == 0 then cur = num(v[3]) end
local stop = add(start, W)
local allowed = cmp(add(cur, C), L) <= 0
if allowed then cur = add(cur, C) end
return finish(not v, {'s', str(start), 'c', str(cur)}, t,
              cmp(cur, 0) > 0 and stop or t, allowed, pos(L, cur),
              allowed and 0 or sub(stop, t), 1, 0, 1)
