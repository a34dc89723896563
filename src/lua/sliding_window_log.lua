-- sliding_window_log.  KEYS[1]: hash {t = latest time, n = total cost of
-- the logged entries}; KEYS[2]: list of "time cost" entries, oldest first,
-- one per microsecond (calls at the same time merge).
local G = K[2]
local v = state('n')
local t = clock(v and num(v[1]))
local sum = log_expire(G, v, t)
local N = add(C, headroom())  -- decided for the cost plus the headroom
local allowed = cmp(add(sum, N), L) <= 0
if allowed and cmp(C, 0) > 0 then
  local e = redis.call('LINDEX', G, -1)
  local et, ec
  if e then et, ec = entry(e) end
  if et and cmp(et, t) == 0 then
    redis.call('LSET', G, -1, str(t) .. ' ' .. str(add(ec, C)))
  else
    redis.call('RPUSH', G, str(t) .. ' ' .. str(C))
  end
  sum = add(sum, C)
end
local rn = 0
if not allowed then
  local newer = sum
  for _, e in ipairs(redis.call('LRANGE', G, 0, -1)) do
    local et, ec = entry(e)
    newer = sub(newer, ec)
    if cmp(add(newer, N), L) <= 0 then rn = sub(add(et, W), t); break end
  end
end
local reset = t
local e = redis.call('LINDEX', G, -1)
if e then reset = add((entry(e)), W) end
return finish(not v, {'n', str(sum)}, t, reset, allowed, pos(L, sum),
              rn, 1, 0, 1)
