-- The charge of leaky_bucket (C: the algorithm's charge, rl_adjust): the
-- units join the queue past its capacity if so, or leave it (never below
-- empty).  Then a look.
local x = 0
if last then
  x = pos(rescale(num(v[2]), num(v[3]), W, true), mul(sub(t, last), L))
end
if A[7] == '-' then
  x = pos(x, cw)
else
  x = min(add(x, cw), mul(MAXC, W))
end
charged(t, (last or A[7] ~= '-') and {'x', str(x), 'w', str(W)} or nil)
