-- rl_enforce: quotas enforced by a trigger where the data lives.
-- (Real time: token buckets refilling a unit per hours, so the decisions
-- here do not depend on when the test runs; errors are shown terse, since
-- their hints hold the seconds to wait.)
SET timezone = 'UTC';
\set VERBOSITY terse
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('orders_per_tenant', 'token_bucket', 3, '1 day'),
	   ('bytes_per_tenant', 'token_bucket', 100, '1 day'),
	   ('edits_per_user', 'sliding_window_log', 2, '1 day'),
	   ('deletes_per_tenant', 'token_bucket', 1, '1 day');
CREATE TABLE orders (id serial PRIMARY KEY, tenant int, author text, payload text);
CREATE TRIGGER orders_quota BEFORE INSERT ON orders FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('orders_per_tenant', 'tenant');
-- three orders per tenant per day, then SQLSTATE PT429
INSERT INTO orders (tenant) VALUES (1), (1), (2), (1);
INSERT INTO orders (tenant) VALUES (1);
SELECT tenant, count(*) FROM orders GROUP BY tenant ORDER BY tenant;
-- the error carries the key, the limit and the retry-after for the
-- application's 429 (GET STACKED DIAGNOSTICS)
DO $$
DECLARE
	state text; msg text; detail text; hint text; tab text;
BEGIN
	INSERT INTO orders (tenant) VALUES (1);
EXCEPTION WHEN SQLSTATE 'PT429' THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT, tab = TABLE_NAME;
	RAISE NOTICE 'state=% table=% message=%', state, tab, msg;
	RAISE NOTICE 'detail=%', detail;
	RAISE NOTICE 'retry-after present: %', hint ~ '^Retry after [0-9]+ seconds\.$';
END $$;
-- a rolled-back insert does not consume; nor does a rolled-back savepoint
SELECT rl_reset_all() >= 0 AS cleared;
BEGIN;
INSERT INTO orders (tenant) VALUES (5), (5);
ROLLBACK;
BEGIN;
INSERT INTO orders (tenant) VALUES (5);
SAVEPOINT s1;
INSERT INTO orders (tenant) VALUES (5);
SAVEPOINT s2;
INSERT INTO orders (tenant) VALUES (5);
ROLLBACK TO SAVEPOINT s1;
INSERT INTO orders (tenant) VALUES (5);
RELEASE SAVEPOINT s1;
COMMIT;
SELECT count(*) AS tenant5_orders FROM orders WHERE tenant = 5;
INSERT INTO orders (tenant) VALUES (5);
INSERT INTO orders (tenant) VALUES (5);
-- a savepoint released into a transaction that then aborts gives back too
SELECT rl_reset_all() >= 0 AS cleared;
BEGIN;
SAVEPOINT a;
INSERT INTO orders (tenant) VALUES (6), (6), (6);
RELEASE SAVEPOINT a;
ROLLBACK;
INSERT INTO orders (tenant) VALUES (6), (6), (6);
-- several key columns, a cost expression, an AFTER trigger
CREATE TRIGGER orders_bytes AFTER INSERT OR UPDATE ON orders FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'tenant', 'cost=coalesce(octet_length(payload), 0)');
SELECT rl_reset_all() >= 0 AS cleared;
INSERT INTO orders (tenant, payload) VALUES (7, repeat('x', 60));
INSERT INTO orders (tenant, payload) VALUES (7, repeat('x', 50));
INSERT INTO orders (tenant, payload) VALUES (7, repeat('x', 40));
UPDATE orders SET payload = 'y' WHERE tenant = 7;
UPDATE orders SET payload = repeat('y', 39) WHERE tenant = 7;
-- UPDATE and DELETE, keys of two columns
CREATE TRIGGER orders_edits BEFORE UPDATE ON orders FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('edits_per_user', 'tenant', 'author');
CREATE TRIGGER orders_deletes BEFORE DELETE ON orders FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('deletes_per_tenant', 'tenant');
DROP TRIGGER orders_bytes ON orders;
UPDATE orders SET author = 'ann' WHERE tenant = 2;
UPDATE orders SET payload = 'a' WHERE tenant = 2 AND author = 'ann';
UPDATE orders SET payload = 'b' WHERE tenant = 2 AND author = 'ann';
DELETE FROM orders WHERE tenant = 6 AND id = (SELECT min(id) FROM orders WHERE tenant = 6);
DELETE FROM orders WHERE tenant = 6;
-- mistakes in the trigger's definition are clear errors
CREATE TABLE t2 (a int, b text);
CREATE TRIGGER bad1 BEFORE INSERT ON t2 FOR EACH ROW EXECUTE FUNCTION rl_enforce('orders_per_tenant', 'nope');
INSERT INTO t2 VALUES (1, 'x');
DROP TRIGGER bad1 ON t2;
CREATE TRIGGER bad2 BEFORE INSERT ON t2 FOR EACH STATEMENT EXECUTE FUNCTION rl_enforce('orders_per_tenant', 'a');
INSERT INTO t2 VALUES (1, 'x');
DROP TRIGGER bad2 ON t2;
CREATE TRIGGER bad3 BEFORE INSERT ON t2 FOR EACH ROW EXECUTE FUNCTION rl_enforce('no_such_policy', 'a');
INSERT INTO t2 VALUES (1, 'x');
DROP TRIGGER bad3 ON t2;
CREATE TRIGGER bad4 BEFORE INSERT ON t2 FOR EACH ROW EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'a', 'cost=octet_length(b)');
INSERT INTO t2 VALUES (1, NULL);
INSERT INTO t2 VALUES (1, repeat('z', 101));
INSERT INTO t2 VALUES (1, 'ok');
DROP TRIGGER bad4 ON t2;
CREATE TRIGGER bad5 BEFORE INSERT ON t2 FOR EACH ROW EXECUTE FUNCTION rl_enforce('orders_per_tenant');
INSERT INTO t2 VALUES (1, 'x');
DROP TRIGGER bad5 ON t2;
SELECT rl_enforce();
DROP TABLE t2;
-- Arguments are read leniently where that is unambiguous: "cost" in any
-- case with blanks around "=", a key column by its exact name or else the
-- only one differing in case alone.
SELECT rl_reset_all() >= 0 AS cleared;
CREATE TABLE t3 (id int, "Tenant" int, region text, amount int);
CREATE TRIGGER lenient BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'TENANT', 'Region', ' Cost =  amount * 2 ');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
SELECT remaining FROM rl_check('8:eu', 'bytes_per_tenant', cost => 0);
DROP TRIGGER lenient ON t3;
-- A NULL key column gives an empty part: NULL and '' are the same key.
CREATE TRIGGER nullkey BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'region', 'cost=amount');
INSERT INTO t3 VALUES (1, 9, NULL, 30), (1, 9, '', 30);
SELECT remaining FROM rl_check('9:', 'bytes_per_tenant', cost => 0);
DROP TRIGGER nullkey ON t3;
-- What could be read two ways is refused, and every error names the
-- trigger and the table (the context line names them for errors raised by
-- PostgreSQL itself, with the position shown in the expression).
\set VERBOSITY default
CREATE TRIGGER twocosts BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'cost=1', 'COST = amount');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
DROP TRIGGER twocosts ON t3;
ALTER TABLE t3 ADD COLUMN "cost=amount" int;
CREATE TRIGGER columnorcost BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'cost=amount');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
DROP TRIGGER columnorcost ON t3;
ALTER TABLE t3 DROP COLUMN "cost=amount";
ALTER TABLE t3 ADD COLUMN "REGION" text;
CREATE TRIGGER twocolumns BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'Region');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
DROP TRIGGER twocolumns ON t3;
CREATE TRIGGER empty BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'cost = ');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
DROP TRIGGER empty ON t3;
CREATE TRIGGER typo BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'cost=amout * 2');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
DROP TRIGGER typo ON t3;
CREATE TRIGGER unbalanced BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'cost=(amount * 2');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
DROP TRIGGER unbalanced ON t3;
CREATE TRIGGER notone BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'cost=amount; DELETE FROM t3');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
DROP TRIGGER notone ON t3;
CREATE TRIGGER notone BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'cost=amount FROM t3');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
DROP TRIGGER notone ON t3;
CREATE TRIGGER divide BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'cost=amount / (id - 1)');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
DROP TRIGGER divide ON t3;
CREATE TRIGGER nopolicy BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('no_such_policy', 'Tenant');
INSERT INTO t3 VALUES (1, 8, 'eu', 5);
DROP TRIGGER nopolicy ON t3;
\set VERBOSITY terse
-- The trigger follows its table's definition, changed by this session
-- too (test/t/045_catalog_changes.pl changes it from another session).
SELECT rl_reset_all() >= 0 AS cleared;
CREATE TRIGGER follows BEFORE INSERT ON t3 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'Tenant', 'cost=coalesce(amount, 0)');
INSERT INTO t3 ("Tenant", amount) VALUES (10, 5);
ALTER TABLE t3 DROP COLUMN amount;
ALTER TABLE t3 ADD COLUMN amount int;
INSERT INTO t3 ("Tenant", amount) VALUES (10, 7);
ALTER TABLE t3 ALTER COLUMN amount TYPE bigint;
INSERT INTO t3 ("Tenant", amount) VALUES (10, 11);
SELECT remaining FROM rl_check('10', 'bytes_per_tenant', cost => 0);
-- A cost expression may replace its own trigger and write to its table:
-- the rows below it use the new arguments, the row above keeps its own.
CREATE TABLE t4 (tenant int, depth int);
CREATE FUNCTION t4_cost(d int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
	IF d < 3 THEN
		EXECUTE format($f$CREATE OR REPLACE TRIGGER nested AFTER INSERT ON t4
			FOR EACH ROW EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'tenant',
				'cost=t4_cost(depth) + %s')$f$, 10 * (d + 1));
		INSERT INTO t4 VALUES (11, d + 1);
	END IF;
	RETURN 1;
END $$;
CREATE TRIGGER nested AFTER INSERT ON t4 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('bytes_per_tenant', 'tenant', 'cost=t4_cost(depth)');
INSERT INTO t4 VALUES (11, 0);
SELECT 100 - remaining AS consumed FROM rl_check('11', 'bytes_per_tenant', cost => 0);
INSERT INTO t4 VALUES (11, 3);
SELECT 100 - remaining AS consumed FROM rl_check('11', 'bytes_per_tenant', cost => 0);
DROP TABLE t3, t4;
DROP FUNCTION t4_cost(int);
-- Integer keys are written in decimal by the trigger itself: the digit
-- count at each power of ten and at the ends of the type (#9).
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('digits', 'token_bucket', 1, '1 day');
CREATE TABLE t5 (tenant bigint);
CREATE TRIGGER digits BEFORE INSERT ON t5 FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('digits', 'tenant');
INSERT INTO t5
SELECT v FROM (SELECT (10::numeric ^ g)::bigint AS p
			   FROM generate_series(0, 18) g) s,
	LATERAL (VALUES (p - 1), (p), (-p), (1 - p)) AS x(v)
UNION SELECT 9223372036854775807 UNION SELECT -9223372036854775808;
SELECT count(*) AS rows,
	(SELECT array_agg(key ORDER BY key) FROM rl_keys()
	 WHERE policy = 'digits') =
	array_agg(tenant::text ORDER BY tenant::text) AS same_keys
FROM t5;
DROP TABLE t5;
DELETE FROM rl_policy WHERE name = 'digits';
