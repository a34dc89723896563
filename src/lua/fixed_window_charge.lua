-- The charge of fixed_window (C: the algorithm's charge, rl_adjust): the
-- count of the call's window, past the limit if so, or given back (never
-- below zero).  Then a look.
local v = state('s', 'c')
local t = clock(v and num(v[1]))
local start = window(t)
local cur = 0
if v and cmp(num(v[2]), start) == 0 then cur = num(v[3]) end
if A[7] == '-' then cur = pos(cur, C) else cur = min(add(cur, C), MAXC) end
charged(t, (v or A[7] ~= '-') and {'s', str(start), 'c', str(cur)} or nil)
