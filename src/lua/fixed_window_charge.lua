-- The charge of fixed_window (C: the algorithm's charge, rl_adjust): the
-- count of the call's window, past the limit if so, or given back (never
-- below zero).  Then a look.  A calendar period's window is found as the
-- decision finds it (state_window), its end kept in the state.
local v = state('s', 'c')
local t = clock(v and num(v[1]))
local start, stop = state_window(v, t)
local cur = 0
if v and cmp(num(v[2]), start) == 0 then cur = num(v[3]) end
if A[7] == '-' then cur = pos(cur, C) else cur = min(add(cur, C), MAXC) end
local fields = {'s', str(start), 'c', str(cur)}
if A[8] then fields[5], fields[6] = 'e', str(stop) end
charged(t, (v or A[7] ~= '-') and fields or nil)
