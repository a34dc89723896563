-- Tallies (#9): a store's receipt names its entry, and the refund tracker
-- adds the receipts of one state, one class (database, algorithm,
-- parameters) and one window into a tally of 32 bytes, which moves to the
-- state's full record (it "spills") when a receipt it cannot take comes:
-- another class or window, a newer level, more classes than it keeps.
-- Every check compares the keys' state after an abort with their state
-- before the transaction (at the same time): equal means exactly what was
-- consumed came back.
SET timezone = 'UTC';
SET ratelimit.refund_on_rollback = on;
SELECT rl_reset_all(true) >= 0 AS emptied;
CREATE TEMP TABLE rt_algos (algo text);
INSERT INTO rt_algos VALUES ('fixed_window'), ('sliding_window_log'),
	('sliding_window_counter'), ('token_bucket'), ('leaky_bucket');
-- the keys' state: remaining of each algorithm's key of each of n keys,
-- limit lim per window per, at us
CREATE FUNCTION rt_state(prefix text, n int, lim bigint, us bigint,
						 per interval DEFAULT '1 hour') RETURNS text
LANGUAGE sql AS $$
	SELECT md5(string_agg(a.algo || '/' || k || '=' || r.remaining, ' '
						  ORDER BY a.algo, k))
	FROM rt_algos a, generate_series(0, n - 1) k,
		LATERAL c(prefix || k || ':' || a.algo, a.algo, lim, us, per, 0) r
$$;
-- m calls of costs 1 to 3, round robin on n keys of each algorithm, the
-- i-th at us + i * step; admitted calls
CREATE FUNCTION rt_use(prefix text, n int, m int, lim bigint, us bigint,
					   step bigint, per interval DEFAULT '1 hour')
RETURNS bigint
LANGUAGE sql AS $$
	SELECT count(*) FILTER (WHERE r.allowed)
	FROM rt_algos a, generate_series(0, m - 1) i,
		LATERAL c(prefix || (i % n) || ':' || a.algo, a.algo, lim,
				  us + i * step, per, 1 + i % 3) r
$$;
-- Each check compares keys used in a transaction with their twins, of
-- the same history but for the transaction (a look at a key moves its
-- time, so a key is never looked at before its last call): committed use
-- first, on both, so that a wrong refund shows.
SELECT rt_use('rt:a:', 1000, 1000, 100000, 0, 1),
	rt_use('rt:A:', 1000, 1000, 100000, 0, 1);
-- 1,000 keys of each algorithm (5,000 states: the table grows from 256
-- slots to 16,384), three calls each, rolled back
BEGIN;
SELECT rt_use('rt:a:', 1000, 3000, 100000, 1000, 1);
SELECT rt_state('rt:a:', 1000, 100000, 1000000) =
	rt_state('rt:A:', 1000, 100000, 1000000) AS same_inside;
ROLLBACK;
SELECT rt_state('rt:a:', 1000, 100000, 1000000) =
	rt_state('rt:A:', 1000, 100000, 1000000) AS same;
SELECT rl_reset_all(true) >= 0 AS emptied;
-- levels: tallies of the top level spilled by a savepoint's receipts on
-- the same keys, which roll back alone; a released savepoint's tallies are
-- its parent's, and roll back with it (the twin takes the top level's
-- calls only)
SELECT rt_use('rt:b:', 50, 100, 1000, 0, 1), rt_use('rt:B:', 50, 100, 1000, 0, 1);
BEGIN;
SELECT rt_use('rt:b:', 50, 200, 1000, 1000, 1), rt_use('rt:B:', 50, 200, 1000, 1000, 1);
SAVEPOINT a;
SELECT rt_use('rt:b:', 50, 300, 1000, 2000, 1);
ROLLBACK TO SAVEPOINT a;
SAVEPOINT b;
SELECT rt_use('rt:b:', 50, 300, 1000, 3000, 1);
SAVEPOINT c;
SELECT rt_use('rt:b:', 50, 80, 1000, 4000, 1);
RELEASE SAVEPOINT c;
SELECT rt_use('rt:b:', 50, 70, 1000, 5000, 1);
RELEASE SAVEPOINT b;
SELECT rt_use('rt:b:', 50, 60, 1000, 6000, 1);
SAVEPOINT d;
SELECT rt_use('rt:b:', 50, 50, 1000, 7000, 1);
ROLLBACK TO SAVEPOINT d;
SAVEPOINT e;
SELECT rt_use('rt:b:', 50, 40, 1000, 8000, 1);
ROLLBACK TO SAVEPOINT e;
ROLLBACK;
SELECT rt_state('rt:b:', 50, 1000, 1000000) =
	rt_state('rt:B:', 50, 1000, 1000000) AS same;
-- the same levels, rolled back to the first savepoint only: what the top
-- level consumed stays, as its twin's does
BEGIN;
SELECT rt_use('rt:b:', 50, 100, 1000, 10000, 1), rt_use('rt:B:', 50, 100, 1000, 10000, 1);
SAVEPOINT a;
SELECT rt_use('rt:b:', 50, 300, 1000, 11000, 1);
SAVEPOINT b;
SELECT rt_use('rt:b:', 50, 80, 1000, 12000, 1);
RELEASE SAVEPOINT b;
SELECT rt_use('rt:b:', 50, 70, 1000, 13000, 1);
ROLLBACK TO SAVEPOINT a;
COMMIT;
SELECT rt_state('rt:b:', 50, 1000, 1000000) =
	rt_state('rt:B:', 50, 1000, 1000000) AS same;
-- and committed through a released savepoint: kept
BEGIN;
SAVEPOINT a;
SELECT rt_use('rt:b:', 50, 100, 1000, 20000, 1);
RELEASE SAVEPOINT a;
COMMIT;
SELECT rt_use('rt:B:', 50, 100, 1000, 20000, 1);
SELECT rt_state('rt:b:', 50, 1000, 1000000) =
	rt_state('rt:B:', 50, 1000, 1000000) AS same;
-- classes: one key of each algorithm called with alternating limits and
-- bursts (a tally per class: each change spills the last one), and more
-- classes in one transaction than the tallies keep (16)
CREATE FUNCTION rt_keystate(prefix text, us bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT string_agg(a.algo || '=' || r.remaining, ' ' ORDER BY a.algo)
	FROM rt_algos a, LATERAL c(prefix || a.algo, a.algo, 1000, us, '1 hour', 0) r
$$;
SELECT count(*) FILTER (WHERE r.allowed) FROM rt_algos a,
	generate_series(0, 9) i, (VALUES ('rt:c:'), ('rt:C:')) v(p),
	LATERAL c(v.p || a.algo, a.algo, 1000, i, '1 hour', 1) r;
BEGIN;
SELECT count(*) FILTER (WHERE r.allowed) FROM rt_algos a,
	generate_series(0, 59) i,
	LATERAL c('rt:c:' || a.algo, a.algo,
			  (ARRAY[1000, 2000, 1000, 1500, 1000])[1 + i % 5], 100 + i,
			  '1 hour', 1 + i % 2,
			  CASE WHEN a.algo LIKE '%bucket'
				  THEN (ARRAY[NULL, 3000, 1000, NULL, 2500])[1 + i % 5] END) r;
ROLLBACK;
BEGIN;
-- 20 keys of 20 classes, then the first key through every class again
SELECT count(*) FILTER (WHERE r.allowed) FROM rt_algos a,
	generate_series(0, 19) k,
	LATERAL c('rt:c:' || k || ':' || a.algo, a.algo, 1000 + k, 200, '1 hour', 2) r;
SELECT count(*) FILTER (WHERE r.allowed) FROM rt_algos a,
	generate_series(0, 39) i,
	LATERAL c('rt:c:' || a.algo, a.algo, 1000 + i % 20, 300 + i, '1 hour', 1) r;
ROLLBACK;
SELECT rt_keystate('rt:c:', 1000000) = rt_keystate('rt:C:', 1000000) AS same,
	rt_keystate('rt:c:', 1000000);
SELECT string_agg(r.remaining::text, ' ' ORDER BY a.algo, k) AS fresh
FROM rt_algos a, generate_series(0, 19) k,
	LATERAL c('rt:c:' || k || ':' || a.algo, a.algo, 1000 + k, 1000000, '1 hour', 0) r
WHERE r.remaining <> 1000 + k;
-- windows: one-second windows, calls 0.1 s apart crossing several of them
-- (each crossing spills a window's tally), more than the pending receipts
-- hold after the last crossing: what the current and the previous window
-- count (sliding_window_counter reads both) comes back
SELECT rt_use('rt:w:', 3, 30, 100, 0, 100000, '1 second'),
	rt_use('rt:W:', 3, 30, 100, 0, 100000, '1 second');
BEGIN;
SELECT rt_use('rt:w:', 3, 60, 100, 3000000, 100000, '1 second');
SELECT count(*) FROM generate_series(1, 100) i,
	LATERAL c('rt:w:other', 'token_bucket', 1000, 8900000, '1 second', 1) r;
ROLLBACK;
SELECT rt_state('rt:w:', 3, 100, 8950000, '1 second') =
	rt_state('rt:W:', 3, 100, 8950000, '1 second') AS same;
SELECT a.algo, k, r.remaining FROM rt_algos a, generate_series(0, 2) k,
	LATERAL c('rt:w:' || k || ':' || a.algo, a.algo, 100, 8950000, '1 second', 0) r
ORDER BY 1, 2;
-- a key reset and created again in the transaction: its old tally gives
-- nothing to the new state, the new state's tally gives its own back
BEGIN;
SELECT a.algo, r.remaining FROM rt_algos a,
	LATERAL c('rt:r:' || a.algo, a.algo, 10, 0, '1 hour', 3) r ORDER BY a.algo;
SELECT sum(rl_reset('rt:r:' || algo, algo)) AS reset FROM rt_algos;
SELECT a.algo, r.remaining FROM rt_algos a,
	LATERAL c('rt:r:' || a.algo, a.algo, 10, 0, '1 hour', 4) r ORDER BY a.algo;
ROLLBACK;
SELECT a.algo, r.remaining AS fresh FROM rt_algos a,
	LATERAL c('rt:r:' || a.algo, a.algo, 10, 0, '1 hour', 0) r ORDER BY a.algo;
RESET ratelimit.refund_on_rollback;
-- quota triggers on 2,000 tenants: rows rolled back with their statement,
-- their savepoint, their exception block; the committed ones counted
SELECT rl_reset_all(true) >= 0 AS emptied;
INSERT INTO rl_policy (name, algo, "limit", per)
SELECT 'rt_' || algo, algo, 100000, '10000 days' FROM rt_algos
WHERE algo <> 'sliding_window_log';
CREATE TABLE rt_rows (tenant int, n int);
CREATE TRIGGER rt_fw BEFORE INSERT ON rt_rows FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('rt_fixed_window', 'tenant');
CREATE TRIGGER rt_swc BEFORE INSERT ON rt_rows FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('rt_sliding_window_counter', 'tenant');
CREATE TRIGGER rt_tb AFTER INSERT ON rt_rows FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('rt_token_bucket', 'tenant');
CREATE TRIGGER rt_lb AFTER INSERT ON rt_rows FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('rt_leaky_bucket', 'tenant');
-- per policy: tenants that used anything, and the units they used
CREATE FUNCTION rt_used() RETURNS TABLE (policy text, tenants bigint, used numeric)
LANGUAGE sql AS $$
	SELECT 'rt_' || a.algo, count(*) FILTER (WHERE r.remaining < 100000),
		sum(100000 - r.remaining)
	FROM rt_algos a, generate_series(0, 1999) k,
		LATERAL rl_check(k::text, 'rt_' || a.algo, cost => 0) r
	WHERE a.algo <> 'sliding_window_log'
	GROUP BY a.algo ORDER BY 1
$$;
INSERT INTO rt_rows SELECT i % 2000, 1 FROM generate_series(1, 2000) i;
BEGIN;
INSERT INTO rt_rows SELECT i % 2000, 1 FROM generate_series(1, 6000) i;
SAVEPOINT a;
INSERT INTO rt_rows SELECT i % 1000, 1 FROM generate_series(1, 2000) i;
ROLLBACK TO SAVEPOINT a;
SELECT * FROM rt_used();
ROLLBACK;
SELECT * FROM rt_used();
-- an exception block per row: those that raise give their rows back
DO $$
DECLARE
	i int;
BEGIN
	FOR i IN 0 .. 599 LOOP
		BEGIN
			INSERT INTO rt_rows VALUES (i % 300, 1);
			IF i % 4 = 0 THEN
				RAISE EXCEPTION 'undo';
			END IF;
		EXCEPTION WHEN raise_exception THEN
			NULL;
		END;
	END LOOP;
END
$$;
SELECT * FROM rt_used();
-- a statement that fails after thousands of rows gives them all back
INSERT INTO rt_rows SELECT i % 2000, 1 / (10000 - i) FROM generate_series(1, 10000) i;
SELECT * FROM rt_used();
SELECT count(*) FROM rt_rows;
SELECT rl_reset_all(true) >= 0 AS emptied;
