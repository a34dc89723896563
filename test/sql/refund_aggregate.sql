-- Refunds of many calls: a transaction tracks its consumption per key and
-- (sub)transaction level, adding calls up where a refund cannot tell them
-- apart.  What an abort gives back must be exactly what giving back each
-- call, newest first, gave.
SET timezone = 'UTC';
SET ratelimit.refund_on_rollback = on;
CREATE TEMP TABLE ag_algos (algo text);
INSERT INTO ag_algos VALUES ('fixed_window'), ('sliding_window_log'),
	('sliding_window_counter'), ('token_bucket'), ('leaky_bucket');
-- a look (cost 0) at a key of each algorithm, at time us
CREATE FUNCTION ag_look(prefix text, lim bigint, us bigint,
						per interval DEFAULT '1 hour')
RETURNS TABLE (algo text, remaining bigint, reset_us bigint)
LANGUAGE sql AS $$
	SELECT a.algo, r.remaining, r.reset_us
	FROM ag_algos a, LATERAL c(prefix || a.algo, a.algo, lim, us, per, 0) r
	ORDER BY a.algo
$$;
-- 2000 calls per algorithm, each at its own microsecond, on a key that
-- has committed use: the rollback leaves the committed use only
SELECT a.algo, r.allowed FROM ag_algos a,
	LATERAL c('ag:many:' || a.algo, a.algo, 5000, 0, '1 hour', 7) r ORDER BY a.algo;
BEGIN;
SELECT a.algo, count(*) FILTER (WHERE r.allowed) AS admitted
FROM ag_algos a, generate_series(1, 2000) i,
	LATERAL c('ag:many:' || a.algo, a.algo, 5000, i * 10, '1 hour', 1 + i % 2) r
GROUP BY a.algo ORDER BY a.algo;
SELECT * FROM ag_look('ag:many:', 5000, 30000);
ROLLBACK;
SELECT * FROM ag_look('ag:many:', 5000, 30000);
-- savepoints three deep: a release passes its level's use to the parent, a
-- rollback to a savepoint gives back that level's only (and what was
-- released into it)
BEGIN;
SELECT a.algo, r.remaining FROM ag_algos a,
	LATERAL c('ag:sp:' || a.algo, a.algo, 100, 10, '1 hour', 1) r ORDER BY a.algo;
SAVEPOINT s1;
SELECT a.algo, r.remaining FROM ag_algos a,
	LATERAL c('ag:sp:' || a.algo, a.algo, 100, 20, '1 hour', 2) r ORDER BY a.algo;
SAVEPOINT s2;
SELECT a.algo, r.remaining FROM ag_algos a,
	LATERAL c('ag:sp:' || a.algo, a.algo, 100, 30, '1 hour', 4) r ORDER BY a.algo;
SAVEPOINT s3;
SELECT a.algo, r.remaining FROM ag_algos a,
	LATERAL c('ag:sp:' || a.algo, a.algo, 100, 40, '1 hour', 8) r ORDER BY a.algo;
ROLLBACK TO SAVEPOINT s3;
SELECT * FROM ag_look('ag:sp:', 100, 45);
SELECT a.algo, r.remaining FROM ag_algos a,
	LATERAL c('ag:sp:' || a.algo, a.algo, 100, 50, '1 hour', 16) r ORDER BY a.algo;
RELEASE SAVEPOINT s3;
RELEASE SAVEPOINT s2;
SELECT * FROM ag_look('ag:sp:', 100, 55);
SAVEPOINT s4;
SELECT a.algo, r.remaining FROM ag_algos a,
	LATERAL c('ag:sp:' || a.algo, a.algo, 100, 60, '1 hour', 32) r ORDER BY a.algo;
ROLLBACK TO SAVEPOINT s1;
SELECT * FROM ag_look('ag:sp:', 100, 65);
COMMIT;
SELECT * FROM ag_look('ag:sp:', 100, 70);
-- the same calls with everything released, then the whole rolled back
BEGIN;
SELECT count(*) FROM ag_algos a, LATERAL c('ag:rel:' || a.algo, a.algo, 100, 10, '1 hour', 1) r;
SAVEPOINT s1;
SELECT count(*) FROM ag_algos a, LATERAL c('ag:rel:' || a.algo, a.algo, 100, 20, '1 hour', 2) r;
SAVEPOINT s2;
SELECT count(*) FROM ag_algos a, LATERAL c('ag:rel:' || a.algo, a.algo, 100, 20, '1 hour', 4) r;
RELEASE SAVEPOINT s2;
SELECT count(*) FROM ag_algos a, LATERAL c('ag:rel:' || a.algo, a.algo, 100, 30, '1 hour', 8) r;
RELEASE SAVEPOINT s1;
SELECT * FROM ag_look('ag:rel:', 100, 35);
ROLLBACK;
SELECT * FROM ag_look('ag:rel:', 100, 40);
-- a savepoint per call, as a PL/pgSQL loop with an exception block makes:
-- released ones are kept until the rollback, rolled-back ones come back
-- (300 calls of each algorithm from time start + 1, every third in a
-- block that fails)
CREATE FUNCTION ag_loop(start bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. 300 LOOP
		BEGIN
			PERFORM c('ag:loop:' || a.algo, a.algo, 1000, start + i, '1 hour', 1)
			FROM ag_algos a;
			IF i % 3 = 0 THEN
				RAISE EXCEPTION 'roll back';
			END IF;
		EXCEPTION WHEN raise_exception THEN
			NULL;
		END;
	END LOOP;
END $$;
SELECT ag_loop(100);
SELECT * FROM ag_look('ag:loop:', 1000, 500);
BEGIN;
SELECT ag_loop(1000);
SELECT * FROM ag_look('ag:loop:', 1000, 1500);
ROLLBACK;
SELECT * FROM ag_look('ag:loop:', 1000, 1500);
-- calls on either side of a window boundary go back to their own window:
-- after the roll, a fixed window's old units no longer count, a sliding
-- counter's weigh as the previous window's
SELECT c('ag:edge:' || a.algo, a.algo, 20, 100000, '1 second', 2) FROM ag_algos a
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo;
BEGIN;
SELECT c('ag:edge:' || a.algo, a.algo, 20, 500000 + i, '1 second', 3)
FROM ag_algos a, generate_series(1, 2) i
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo, i;
SAVEPOINT s;
SELECT c('ag:edge:' || a.algo, a.algo, 20, 900000, '1 second', 1) FROM ag_algos a
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo;
RELEASE SAVEPOINT s;
SAVEPOINT s;
SELECT c('ag:edge:' || a.algo, a.algo, 20, 1200000 + i, '1 second', 2)
FROM ag_algos a, generate_series(1, 2) i
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo, i;
RELEASE SAVEPOINT s;
SELECT c('ag:edge:' || a.algo, a.algo, 20, 1300000, '1 second', 1) FROM ag_algos a
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo;
ROLLBACK;
SELECT a.algo, r.* FROM ag_algos a,
	LATERAL c('ag:edge:' || a.algo, a.algo, 20, 1400000, '1 second', 0) r
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo;
-- the same, the committed units in the second window this time
BEGIN;
SELECT c('ag:edge2:' || a.algo, a.algo, 20, 300000, '1 second', 4) FROM ag_algos a
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo;
SAVEPOINT s;
SELECT c('ag:edge2:' || a.algo, a.algo, 20, 400000, '1 second', 3) FROM ag_algos a
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo;
SELECT c('ag:edge2:' || a.algo, a.algo, 20, 1100000, '1 second', 5) FROM ag_algos a
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo;
ROLLBACK TO SAVEPOINT s;
SELECT c('ag:edge2:' || a.algo, a.algo, 20, 1200000, '1 second', 1) FROM ag_algos a
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo;
COMMIT;
SELECT a.algo, r.* FROM ag_algos a,
	LATERAL c('ag:edge2:' || a.algo, a.algo, 20, 1300000, '1 second', 0) r
WHERE a.algo IN ('fixed_window', 'sliding_window_counter') ORDER BY a.algo;
-- sliding_window_log: calls at several times, two at one microsecond; the
-- entries go newest first, so each emptied one is the newest and leaves
-- the log: reset_at is the committed entry's
SELECT c('ag:log', 'sliding_window_log', 50, 0, '1 second', 1);
BEGIN;
SELECT c('ag:log', 'sliding_window_log', 50, 10, '1 second', 2);
SELECT c('ag:log', 'sliding_window_log', 50, 10, '1 second', 3);
SAVEPOINT s1;
SELECT c('ag:log', 'sliding_window_log', 50, 20, '1 second', 4);
SELECT c('ag:log', 'sliding_window_log', 50, 20, '1 second', 5);
RELEASE SAVEPOINT s1;
SELECT c('ag:log', 'sliding_window_log', 50, 20, '1 second', 1);
SAVEPOINT s2;
SELECT c('ag:log', 'sliding_window_log', 50, 30, '1 second', 6);
ROLLBACK TO SAVEPOINT s2;
SELECT c('ag:log', 'sliding_window_log', 50, 40, '1 second', 0);
ROLLBACK;
SELECT c('ag:log', 'sliding_window_log', 50, 50, '1 second', 0);
-- a key's parameters change between calls: refunds come back in the order
-- of the calls, each with its own (a bucket's burst bounds what returns)
BEGIN;
SELECT c('ag:burst', 'token_bucket', 1, 0, '1 hour', 5, 10);
SELECT c('ag:burst', 'token_bucket', 1, 1, '1 hour', 5, 5);
SELECT c('ag:burst', 'token_bucket', 1, 2, '1 hour', 0, 10);
ROLLBACK;
SELECT c('ag:burst', 'token_bucket', 1, 3, '1 hour', 0, 10);
-- (the later call's smaller burst caps its tokens first, once the bucket
-- has refilled)
BEGIN;
SELECT c('ag:burst3', 'token_bucket', 1, 0, '1 second', 3, 10);
SELECT c('ag:burst3', 'token_bucket', 1, 0, '1 second', 2, 4);
SELECT c('ag:burst3', 'token_bucket', 1, 100000000, '1 second', 0, 10);
ROLLBACK;
SELECT c('ag:burst3', 'token_bucket', 1, 100000001, '1 second', 0, 10);
BEGIN;
SELECT c('ag:burst2', 'leaky_bucket', 1, 0, '1 hour', 4, 10);
SELECT c('ag:burst2', 'leaky_bucket', 1, 1, '1 hour', 4, 5);
SELECT c('ag:burst2', 'leaky_bucket', 1, 2, '2 hours', 2, 10);
SELECT c('ag:burst2', 'leaky_bucket', 1, 3, '1 hour', 1, 10);
ROLLBACK;
SELECT c('ag:burst2', 'leaky_bucket', 1, 4, '1 hour', 0, 10);
-- parameters alternating between calls of one key (a limit or a window
-- computed per row), with savepoints: what comes back is still what giving
-- back each call, newest first, gave (a bucket's changing burst bounds it)
SELECT a.algo, r.allowed FROM ag_algos a,
	LATERAL c('ag:alt:' || a.algo, a.algo, 50, 0, '1 second', 20) r ORDER BY a.algo;
BEGIN;
SELECT a.algo, count(*) FILTER (WHERE r.allowed) AS admitted
FROM ag_algos a, generate_series(1, 300) i,
	LATERAL c('ag:alt:' || a.algo, a.algo, 30 + 20 * (i % 2), i * 5000,
			  '1 second', 1 + i % 3) r
GROUP BY a.algo ORDER BY a.algo;
SAVEPOINT s1;
SELECT a.algo, count(*) FILTER (WHERE r.allowed) AS admitted
FROM ag_algos a, generate_series(301, 400) i,
	LATERAL c('ag:alt:' || a.algo, a.algo, 30 + 20 * (i % 2), i * 5000,
			  '1 second', 1 + i % 3) r
GROUP BY a.algo ORDER BY a.algo;
SAVEPOINT s2;
SELECT a.algo, count(*) FILTER (WHERE r.allowed) AS admitted
FROM ag_algos a, generate_series(401, 500) i,
	LATERAL c('ag:alt:' || a.algo, a.algo, 30 + 20 * (i % 3), i * 5000,
			  '1 second', 1 + i % 2) r
GROUP BY a.algo ORDER BY a.algo;
ROLLBACK TO SAVEPOINT s2;
SELECT * FROM ag_look('ag:alt:', 50, 2500000, '1 second');
RELEASE SAVEPOINT s1;
SELECT a.algo, count(*) FILTER (WHERE r.allowed) AS admitted
FROM ag_algos a, generate_series(501, 600) i,
	LATERAL c('ag:alt:' || a.algo, a.algo, 30 + 20 * (i % 2), i * 5000,
			  '1 second', 1 + i % 3) r
GROUP BY a.algo ORDER BY a.algo;
SELECT * FROM ag_look('ag:alt:', 50, 3000000, '1 second');
ROLLBACK;
SELECT * FROM ag_look('ag:alt:', 50, 3000000, '1 second');
-- the window alternating
BEGIN;
SELECT a.algo, count(*) FILTER (WHERE r.allowed) AS admitted
FROM ag_algos a, generate_series(1, 400) i,
	LATERAL c('ag:altper:' || a.algo, a.algo, 40, i * 7000,
			  CASE WHEN i % 2 = 0 THEN '1 second' ELSE '2 seconds' END::interval,
			  1 + i % 3) r
GROUP BY a.algo ORDER BY a.algo;
SELECT * FROM ag_look('ag:altper:', 40, 2800000, '1 second');
ROLLBACK;
SELECT * FROM ag_look('ag:altper:', 40, 2800000, '1 second');
SELECT * FROM ag_look('ag:altper:', 40, 2800000, '2 seconds');
-- all or nothing: every key's units come back
INSERT INTO rl_policy (name, algo, "limit", per) VALUES
	('ag_user', 'fixed_window', 5, '1 hour'),
	('ag_tenant', 'sliding_window_log', 10, '1 hour'),
	('ag_global', 'token_bucket', 100, '1 hour');
BEGIN;
SELECT rl_allow_all(ARRAY['ag:u' || (i % 2), 'ag:t', 'ag:g'],
	ARRAY['ag_user', 'ag_tenant', 'ag_global'], at => t(10 * i))
FROM generate_series(1, 4) i;
SAVEPOINT s;
SELECT * FROM rl_check_all(ARRAY['ag:t', 'ag:g'],
	ARRAY['ag_tenant', 'ag_global'], ARRAY[3, 40], at => t(50));
ROLLBACK TO SAVEPOINT s;
SELECT * FROM rl_check_all(ARRAY['ag:u1', 'ag:g'],
	ARRAY['ag_user', 'ag_global'], ARRAY[1, 30], at => t(60));
SELECT k, p, r.remaining FROM (VALUES ('ag:u0', 'ag_user'), ('ag:u1', 'ag_user'),
	('ag:t', 'ag_tenant'), ('ag:g', 'ag_global')) v(k, p),
	LATERAL rl_check(k, p, at => t(70), cost => 0) r;
ROLLBACK;
SELECT k, p, r.remaining, r.reset_at - t(0) AS reset_in
FROM (VALUES ('ag:u0', 'ag_user'), ('ag:u1', 'ag_user'),
	('ag:t', 'ag_tenant'), ('ag:g', 'ag_global')) v(k, p),
	LATERAL rl_check(k, p, at => t(80), cost => 0) r;
RESET ratelimit.refund_on_rollback;
-- quota triggers: many rows on a few keys, in five policies at once (one
-- per algorithm, long windows: the real clock does not matter here)
INSERT INTO rl_policy (name, algo, "limit", per)
SELECT 'ag_' || algo, algo, 100000, '10000 days' FROM ag_algos;
CREATE TABLE ag_rows (tenant int, n int);
CREATE TRIGGER ag_fw BEFORE INSERT ON ag_rows FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('ag_fixed_window', 'tenant');
CREATE TRIGGER ag_swl BEFORE INSERT ON ag_rows FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('ag_sliding_window_log', 'tenant');
CREATE TRIGGER ag_swc BEFORE INSERT ON ag_rows FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('ag_sliding_window_counter', 'tenant', 'cost=n');
CREATE TRIGGER ag_tb AFTER INSERT ON ag_rows FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('ag_token_bucket', 'tenant', 'cost=n');
CREATE TRIGGER ag_lb AFTER INSERT ON ag_rows FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('ag_leaky_bucket', 'tenant');
-- what each tenant has used under each policy
CREATE FUNCTION ag_used() RETURNS TABLE (algo text, tenant int, used bigint)
LANGUAGE sql AS $$
	SELECT a.algo, k, 100000 - r.remaining
	FROM ag_algos a, generate_series(0, 2) k,
		LATERAL rl_check(k::text, 'ag_' || a.algo, cost => 0) r
	ORDER BY 1, 2
$$;
INSERT INTO ag_rows VALUES (0, 1), (1, 2);
BEGIN;
INSERT INTO ag_rows SELECT i % 3, 1 + i % 2 FROM generate_series(1, 1500) i;
SAVEPOINT a;
INSERT INTO ag_rows SELECT i % 2, 1 FROM generate_series(1, 300) i;
ROLLBACK TO SAVEPOINT a;
SAVEPOINT b;
INSERT INTO ag_rows SELECT 2, 3 FROM generate_series(1, 200) i;
RELEASE SAVEPOINT b;
SELECT * FROM ag_used();
ROLLBACK;
SELECT * FROM ag_used();
BEGIN;
INSERT INTO ag_rows SELECT 0, 1 FROM generate_series(1, 500) i;
SAVEPOINT a;
INSERT INTO ag_rows SELECT 0, 2 FROM generate_series(1, 500) i;
ROLLBACK TO SAVEPOINT a;
COMMIT;
SELECT * FROM ag_used();
SELECT count(*) FROM ag_rows;
