-- fixed_window.  KEYS[1]: hash {t = latest time, s = window start,
-- c = count in that window, and for a calendar period e = its end}.
-- A call clamped to the key's latest time is in the window the state
-- records (every decision writes t with s and e): its bounds come from the
-- state, since the bounds sent were computed around the call's own time.
local v = state('s', 'c')
local t = clock(v and num(v[1]))
local start, stop
if A[8] and v and cmp(t, num(v[1])) == 0 then
  local e = redis.call('HGET', H, 'e')
  if e then start, stop = num(v[2]), num(e) end
end
if not start then start, stop = window(t) end
local cur = 0
if v and cmp(num(v[2]), start) == 0 then cur = num(v[3]) end
local allowed = cmp(add(cur, C), L) <= 0
if allowed then cur = add(cur, C) end
local fields = {'s', str(start), 'c', str(cur)}
if A[8] then fields[5], fields[6] = 'e', str(stop) end
return finish(not v, fields, t,
              cmp(cur, 0) > 0 and stop or t, allowed, pos(L, cur),
              allowed and 0 or sub(stop, t), 1, 0, 1)
