-- fixed_window.  KEYS[1]: hash {t = latest time, s = window start,
-- c = count in that window, and for a calendar period e = its end}.
-- A call clamped to the key's latest time takes its window from the
-- state (prelude.lua, state_window).
local v = state('s', 'c')
local t = clock(v and num(v[1]))
local start, stop = state_window(v, t)
local cur = 0
if v and cmp(num(v[2]), start) == 0 then cur = num(v[3]) end
local allowed = cmp(add(add(cur, C), headroom()), L) <= 0
if allowed then cur = add(cur, C) end
local fields = {'s', str(start), 'c', str(cur)}
if A[8] then fields[5], fields[6] = 'e', str(stop) end
return finish(not v, fields, t,
              cmp(cur, 0) > 0 and stop or t, allowed, pos(L, cur),
              allowed and 0 or sub(stop, t), 1, 0, 1)
