-- A refund gives back only to the incarnation of the state it consumed
-- from: a key reset and created again (as after reclaim or eviction) has
-- nothing of the old consumption to give back.
SET timezone = 'UTC';
SET ratelimit.refund_on_rollback = on;
CREATE TEMP TABLE ri_algos (algo text);
INSERT INTO ri_algos VALUES ('fixed_window'), ('sliding_window_log'),
	('sliding_window_counter'), ('token_bucket'), ('leaky_bucket');
-- one unit of two consumed in a savepoint (tracked); the key reset; its
-- new state used up at the same time (untracked); then the savepoint rolls
-- back: the refund must not land on the new state
BEGIN;
SAVEPOINT consumed;
SELECT a.algo, r.allowed, r.remaining FROM ri_algos a,
	LATERAL rl_check('ri:' || a.algo, a.algo, 2, '1 hour', 1, at => t(0)) r ORDER BY a.algo;
SET LOCAL ratelimit.refund_on_rollback = off;
SELECT a.algo, rl_reset('ri:' || a.algo, a.algo) AS reset FROM ri_algos a ORDER BY a.algo;
SELECT a.algo, r.allowed, r.remaining FROM ri_algos a,
	LATERAL rl_check('ri:' || a.algo, a.algo, 2, '1 hour', 2, at => t(0)) r ORDER BY a.algo;
ROLLBACK TO SAVEPOINT consumed;
COMMIT;
SELECT a.algo, r.remaining AS after_rollback FROM ri_algos a,
	LATERAL rl_check('ri:' || a.algo, a.algo, 2, '1 hour', 0, at => t(0)) r ORDER BY a.algo;
-- without a reset the same rollback gives its unit back
BEGIN;
SAVEPOINT consumed;
SELECT a.algo, r.remaining FROM ri_algos a,
	LATERAL rl_check('ri2:' || a.algo, a.algo, 2, '1 hour', 1, at => t(0)) r ORDER BY a.algo;
ROLLBACK TO SAVEPOINT consumed;
COMMIT;
SELECT a.algo, r.remaining AS given_back FROM ri_algos a,
	LATERAL rl_check('ri2:' || a.algo, a.algo, 2, '1 hour', 0, at => t(0)) r ORDER BY a.algo;
-- a whole transaction that aborts after the key was reset
BEGIN;
SELECT rl_allow('ri:all', 'token_bucket', 1, '1 hour', at => t(0));
SELECT rl_reset('ri:all', 'token_bucket') AS reset;
SET LOCAL ratelimit.refund_on_rollback = off;
SELECT rl_allow('ri:all', 'token_bucket', 1, '1 hour', at => t(0)) AS new_state_used;
ROLLBACK;
SELECT rl_allow('ri:all', 'token_bucket', 1, '1 hour', at => t(0)) AS still_used;
RESET ratelimit.refund_on_rollback;
