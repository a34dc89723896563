-- All or nothing (rl_allow_all, rl_check_all): several calls of any
-- algorithms, as the shared-memory store decides them under its partition
-- locks.  Sent after the prelude and, for each algorithm of the table
-- (src/algo_table.c), its decision and refund as functions decide[code] and
-- refund[code] (redis_script.c assembles them).  Every call is decided at
-- one time; if one is denied (a shadow's denial aside), the admitted ones
-- are refunded (to the incarnation each reply names) and then reported as
-- a look (cost 0) at their time.
--
-- KEYS: the calls' keys, in order.  ARGV: the number of calls, then for
-- each its algorithm's code, its number of keys, 1 if it is a shadow (else
-- 0), its number of arguments and its arguments (see the prelude: six,
-- seven with a headroom, or eleven with a calendar period's bounds).  The reply is each call's
-- reply.
local calls, ki, ai, now = {}, 1, 2, nil
for i = 1, tonumber(ARGV[1]) do
  local c = {algo = ARGV[ai], shadow = ARGV[ai + 2] == '1', keys = {},
             args = {}}
  local nargs = tonumber(ARGV[ai + 3])
  for j = 1, tonumber(ARGV[ai + 1]) do c.keys[j] = KEYS[ki]; ki = ki + 1 end
  for j = 1, nargs do c.args[j] = ARGV[ai + 3 + j] end
  if c.args[1] == '' then
    if not now then
      local tm = redis.call('TIME')
      now = str(tonumber(tm[1]) * 1000000 + tonumber(tm[2]))
    end
    c.args[1] = now
  end
  calls[i], ai = c, ai + 4 + nargs
end
local replies, all = {}, true
for i, c in ipairs(calls) do
  use(c.keys, c.args)
  replies[i] = decide[c.algo]()
  if replies[i][1] == 0 and not c.shadow then all = false end
end
if not all then
  for i, c in ipairs(calls) do
    if replies[i][1] == 1 then
      local args = {replies[i][8], c.args[2], c.args[3], c.args[4],
                    c.args[5], c.args[6], replies[i][9]}
      for j = 8, #c.args do args[j] = c.args[j] end
      use(c.keys, args)
      refund[c.algo]()
      args[4], args[7] = '0', c.args[7]
      use(c.keys, args)
      replies[i] = decide[c.algo]()
    end
  end
end
return replies
