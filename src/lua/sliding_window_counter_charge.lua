-- The charge of sliding_window_counter (C: the algorithm's charge,
-- rl_adjust): the current window's count, past the limit if so, or given
-- back (never below zero).  Then a look.
local v = state('s', 'c', 'p')
local t = clock(v and num(v[1]))
local start = window(t)
local cur, prev = 0, 0
if v then
  local s = num(v[2])
  cur, prev = num(v[3]), num(v[4])
  if cmp(s, start) ~= 0 then
    prev = cmp(add(s, W), start) == 0 and cur or 0
    cur = 0
  end
end
if A[7] == '-' then cur = pos(cur, C) else cur = min(add(cur, C), MAXC) end
charged(t, (v or A[7] ~= '-') and
           {'s', str(start), 'c', str(cur), 'p', str(prev)} or nil)
