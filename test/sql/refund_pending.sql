-- Refunds of receipts still pending (#9): a local engine's receipts are
-- kept in a bounded list (64) and added to their keys' tracking in runs.
-- An abort gives back what is pending and what was added alike, newest
-- first; a savepoint's release passes its pending receipts to its parent.
-- Every check compares the keys' state after the abort with their state
-- before the transaction (rl_peek at the same time): equal means exactly
-- what was consumed came back.
SET timezone = 'UTC';
SET ratelimit.refund_on_rollback = on;
CREATE TEMP TABLE pd_algos (algo text);
INSERT INTO pd_algos VALUES ('fixed_window'), ('sliding_window_log'),
	('sliding_window_counter'), ('token_bucket'), ('leaky_bucket');
-- the keys' state: remaining of each algorithm's key of each of n keys
CREATE FUNCTION pd_state(prefix text, n int, us bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT string_agg(a.algo || '/' || k || '=' || r.remaining, ' '
					  ORDER BY a.algo, k)
	FROM pd_algos a, generate_series(0, n - 1) k,
		LATERAL c(prefix || k || ':' || a.algo, a.algo, 1000, us, '1 hour', 0) r
$$;
-- m calls, cost 1 each, round robin on n keys of each algorithm, at us
-- (plus i: sliding_window_log keeps each microsecond); admitted calls
CREATE FUNCTION pd_use(prefix text, n int, m int, us bigint) RETURNS bigint
LANGUAGE sql AS $$
	SELECT count(*) FILTER (WHERE r.allowed)
	FROM pd_algos a, generate_series(0, m - 1) i,
		LATERAL c(prefix || (i % n) || ':' || a.algo, a.algo, 1000, us + i,
				  '1 hour', 1) r
$$;
-- committed use first, so that a wrong refund shows
SELECT pd_use('pd:a:', 3, 30, 0);
SELECT pd_state('pd:a:', 3, 100000) AS before \gset
-- 63, 64, 65 and 200 receipts in one transaction (five per call: one per
-- algorithm), rolled back: the bound passed, or not
BEGIN;
SELECT pd_use('pd:a:', 3, 13, 1000);
ROLLBACK;
SELECT pd_state('pd:a:', 3, 100000) = :'before' AS same;
BEGIN;
SELECT pd_use('pd:a:', 3, 64, 1000), pd_use('pd:a:', 3, 1, 2000);
ROLLBACK;
SELECT pd_state('pd:a:', 3, 100000) = :'before' AS same;
BEGIN;
SELECT pd_use('pd:a:', 3, 200, 1000);
SELECT pd_state('pd:a:', 3, 100000) = :'before' AS same;
ROLLBACK;
SELECT pd_state('pd:a:', 3, 100000) = :'before' AS same;
-- a subtransaction that consumed nothing leaves the pending receipts of
-- its parent alone, and its parent goes on adding to them
BEGIN;
SELECT pd_use('pd:a:', 3, 10, 3000);
SAVEPOINT s;
SELECT 1;
ROLLBACK TO SAVEPOINT s;
SELECT pd_use('pd:a:', 3, 10, 4000);
SAVEPOINT s2;
RELEASE SAVEPOINT s2;
ROLLBACK;
SELECT pd_state('pd:a:', 3, 100000) = :'before' AS same;
-- receipts pending in a savepoint, released into the parent savepoint,
-- rolled back with it; the top level's stay
SELECT pd_use('pd:b:', 2, 10, 0);
BEGIN;
SELECT pd_use('pd:b:', 2, 6, 1000);
SELECT pd_state('pd:b:', 2, 100000) AS top \gset
SAVEPOINT a;
SELECT pd_use('pd:b:', 2, 7, 2000);
SAVEPOINT b;
SELECT pd_use('pd:b:', 2, 9, 3000);
RELEASE SAVEPOINT b;
SELECT pd_state('pd:b:', 2, 100000) = :'top' AS same_as_top;
ROLLBACK TO SAVEPOINT a;
SELECT pd_state('pd:b:', 2, 100000) = :'top' AS same_as_top;
-- the released receipts, then the parent's own, rolled back together
SAVEPOINT c;
SELECT pd_use('pd:b:', 2, 5, 4000);
SAVEPOINT d;
SELECT pd_use('pd:b:', 2, 70, 5000);
RELEASE SAVEPOINT d;
SELECT pd_use('pd:b:', 2, 3, 6000);
ROLLBACK TO SAVEPOINT c;
SELECT pd_state('pd:b:', 2, 100000) = :'top' AS same_as_top;
COMMIT;
SELECT pd_state('pd:b:', 2, 100000) = :'top' AS same_as_top;
-- PL/pgSQL exception blocks: a subtransaction per iteration; those that
-- raise give back their call, the others keep it (fixed window: 300
-- iterations on 7 keys, one in three raising)
DO $$
DECLARE
	i int;
BEGIN
	FOR i IN 0 .. 299 LOOP
		BEGIN
			PERFORM c('pd:x:' || (i % 7), 'fixed_window', 1000, i, '1 hour', 1);
			IF i % 3 = 0 THEN
				RAISE EXCEPTION 'undo';
			END IF;
		EXCEPTION WHEN raise_exception THEN
			NULL;
		END;
	END LOOP;
END
$$;
SELECT k, r.remaining,
	1000 - (SELECT count(*) FROM generate_series(0, 299) i
			WHERE i % 7 = k AND i % 3 <> 0) AS expected
FROM generate_series(0, 6) k,
	LATERAL c('pd:x:' || k, 'fixed_window', 1000, 1000, '1 hour', 0) r
ORDER BY k;
-- keys of every length a receipt keeps in different places: in the
-- receipt (up to 16 bytes), copied aside (longer), and several at the
-- longest, which fill the room for copies before the bound of receipts
CREATE TEMP TABLE pd_keys (k text);
INSERT INTO pd_keys SELECT repeat('k', n) || ':' || n
FROM unnest(ARRAY[1, 13, 14, 15, 16, 17, 40, 1000, 4090]) n;
INSERT INTO pd_keys SELECT repeat(chr(97 + n), 4096) FROM generate_series(0, 3) n;
SELECT count(*) FILTER (WHERE r.allowed) FROM pd_keys,
	LATERAL c(k, 'token_bucket', 100, 0, '1 hour', 5) r;
SELECT string_agg(length(k) || ':' || r.remaining, ' ' ORDER BY length(k), k)
	AS before_keys
FROM pd_keys, LATERAL c(k, 'token_bucket', 100, 10, '1 hour', 0) r \gset
BEGIN;
SELECT count(*) FILTER (WHERE r.allowed)
FROM generate_series(1, 5) i, pd_keys,
	LATERAL c(k, 'token_bucket', 100, 0, '1 hour', i) r;
ROLLBACK;
SELECT string_agg(length(k) || ':' || r.remaining, ' ' ORDER BY length(k), k)
	= :'before_keys' AS same
FROM pd_keys, LATERAL c(k, 'token_bucket', 100, 10, '1 hour', 0) r;
SELECT :'before_keys';
