-- The charge of token_bucket (C: the algorithm's charge, rl_adjust): the
-- tokens taken whatever is left, what is missing owed; or given back,
-- what is owed first, up to the capacity.  Then a look.
local x, d = cap, 0
if last then
  local x0, d0 = content(v[2], num(v[3]))
  x, d = credit(x0, d0, mul(sub(t, last), L))
end
if A[7] == '-' then
  x, d = credit(x, d, cw)
elseif cmp(x, cw) >= 0 then
  x = sub(x, cw)
else
  x, d = 0, min(add(d, sub(cw, x)), mul(MAXC, W))
end
charged(t, (last or A[7] ~= '-') and {'x', stored(x, d), 'w', str(W)} or nil)
