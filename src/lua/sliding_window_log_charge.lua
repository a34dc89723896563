-- The charge of sliding_window_log (C: the algorithm's charge,
-- rl_adjust): logged at the call's time past the limit if so (the total
-- within 64 bits), or given back from the newest entries, which go once
-- spent.  Then a look.
local G = K[2]
local v = state('n')
local t = clock(v and num(v[1]))
local sum = log_expire(G, v, t)
if A[7] == '-' then
  local left = C
  while cmp(left, 0) > 0 do
    local e = redis.call('LINDEX', G, -1)
    if not e then break end
    local et, ec = entry(e)
    local given = min(left, ec)
    left, sum = sub(left, given), sub(sum, given)
    if cmp(ec, given) == 0 then
      redis.call('RPOP', G)
    else
      redis.call('LSET', G, -1, str(et) .. ' ' .. str(sub(ec, given)))
    end
  end
else
  local n = min(C, sub(MAXC, sum))
  if cmp(n, 0) > 0 then
    local e = redis.call('LINDEX', G, -1)
    local et, ec
    if e then et, ec = entry(e) end
    if et and cmp(et, t) == 0 then
      redis.call('LSET', G, -1, str(t) .. ' ' .. str(add(ec, n)))
    else
      redis.call('RPUSH', G, str(t) .. ' ' .. str(n))
    end
    sum = add(sum, n)
  end
end
charged(t, (v or A[7] ~= '-') and {'n', str(sum)} or nil)
