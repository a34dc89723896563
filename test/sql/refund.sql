-- Refunds: what an aborted transaction consumed is given back (always for
-- quota triggers; for direct calls with ratelimit.refund_on_rollback).
SET timezone = 'UTC';
-- off by default: a rolled-back direct call still counts
BEGIN;
SELECT rl_allow('rf:off', 'fixed_window', 1, '1 hour', at => t(0));
ROLLBACK;
SELECT rl_allow('rf:off', 'fixed_window', 1, '1 hour', at => t(1)) AS still_counted;
SET ratelimit.refund_on_rollback = on;
-- every algorithm gives back exactly what the aborted calls took
CREATE TEMP TABLE algos (algo text);
INSERT INTO algos VALUES ('fixed_window'), ('sliding_window_log'),
	('sliding_window_counter'), ('token_bucket'), ('leaky_bucket');
SELECT a.algo, (SELECT remaining FROM rl_check('rf:' || a.algo, a.algo, 10, '1 minute', 3, at => t(0))) AS after_first
FROM algos a ORDER BY a.algo;
BEGIN;
SELECT a.algo, r.remaining AS inside FROM algos a,
	LATERAL rl_check('rf:' || a.algo, a.algo, 10, '1 minute', 4, at => t(1000)) r ORDER BY a.algo;
ROLLBACK;
SELECT a.algo, r.remaining AS after_rollback, r.reset_at - t(0) AS reset_in FROM algos a,
	LATERAL rl_check('rf:' || a.algo, a.algo, 10, '1 minute', 0, at => t(2000)) r ORDER BY a.algo;
-- savepoints: only the rolled-back part is given back
BEGIN;
SELECT rl_allow('rf:sp', 'fixed_window', 3, '1 hour', at => t(0));
SAVEPOINT a;
SELECT rl_allow('rf:sp', 'fixed_window', 3, '1 hour', at => t(1));
ROLLBACK TO SAVEPOINT a;
SELECT rl_allow('rf:sp', 'fixed_window', 3, '1 hour', at => t(2));
COMMIT;
SELECT remaining FROM rl_check('rf:sp', 'fixed_window', 3, '1 hour', 0, at => t(3));
-- a window that has rolled has nothing left to give back
BEGIN;
SELECT rl_allow('rf:old', 'fixed_window', 1, '1 second', at => t(0));
SELECT rl_allow('rf:old', 'fixed_window', 1, '1 second', at => t(1500000));
ROLLBACK;
SELECT remaining FROM rl_check('rf:old', 'fixed_window', 1, '1 second', 0, at => t(1600000));
-- an error aborts the transaction: its calls are given back
BEGIN;
SELECT rl_allow('rf:err', 'token_bucket', 1, '1 hour', at => t(0));
SELECT 1 / 0;
ROLLBACK;
SELECT rl_allow('rf:err', 'token_bucket', 1, '1 hour', at => t(1)) AS given_back_after_error;
-- a shadow policy's denials consumed nothing: nothing to give back
INSERT INTO rl_policy (name, algo, "limit", per, shadow) VALUES ('rf_shadow', 'fixed_window', 1, '1 hour', true);
SELECT rl_allow('rf:sh', 'rf_shadow', at => t(0)) AS committed_use;
BEGIN;
SELECT rl_allow('rf:sh', 'rf_shadow', at => t(1)), rl_allow('rf:sh', 'rf_shadow', at => t(2));
ROLLBACK;
SELECT remaining FROM rl_check('rf:sh', 'rf_shadow', at => t(3), cost => 0);
RESET ratelimit.refund_on_rollback;
-- only superusers may turn it on
CREATE ROLE regress_rl_refund;
SET ROLE regress_rl_refund;
SET ratelimit.refund_on_rollback = on;
RESET ROLE;
DROP ROLE regress_rl_refund;
