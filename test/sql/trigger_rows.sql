-- A quota trigger's rows of one statement (#9: a row that runs no SQL
-- writes its key in place and reuses the request of the rows before it
-- when nothing else in it depends on the key): each row is decided as its
-- own key's call, whatever the rows before it (a key's override, the
-- binding one of several limits), and each (sub)transaction's rows go
-- back alone.  Decided at ratelimit.trigger_at, read at the same time.
SET timezone = 'UTC';
SET ratelimit.trigger_at = '2026-01-01 00:00:00+00';
\set VERBOSITY terse
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('tr_rows', 'fixed_window', 100, '1 day'),
	   ('tr_multi', 'fixed_window', 100, '1 day');
INSERT INTO rl_override (policy, key, "limit") VALUES ('tr_rows', '1', 2);
CREATE FUNCTION tr_left(k text, p text) RETURNS TABLE ("limit" bigint, remaining bigint)
LANGUAGE sql AS $$
	SELECT r."limit", r.remaining
	FROM rl_check(k, p, at => '2026-01-01 00:00:00+00', cost => 0) r
$$;
CREATE TABLE tr_orders (tenant int);
CREATE TRIGGER tr_quota BEFORE INSERT ON tr_orders FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('tr_rows', 'tenant');
-- key 1's override (2 a day) stays with key 1: key 2 keeps the policy's 100
INSERT INTO tr_orders VALUES (1), (2), (2), (2), (1), (2);
SELECT k, l.* FROM (VALUES ('1'), ('2')) v(k), LATERAL tr_left(k, 'tr_rows') l ORDER BY k;
-- the override follows key 1 to a row after key 2's: its third is denied
INSERT INTO tr_orders VALUES (2), (1);
SELECT k, l.* FROM (VALUES ('1'), ('2')) v(k), LATERAL tr_left(k, 'tr_rows') l ORDER BY k;
-- a policy with several limits: each row counts under both, the binding
-- limit (a bucket of 3 an hour) reported for a row does not become the
-- next row's own
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per)
VALUES ('tr_multi', 'hourly', 'token_bucket', 3, '1 hour');
CREATE TABLE tr_queries (tenant int);
CREATE TRIGGER tr_multi_quota BEFORE INSERT ON tr_queries FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('tr_multi', 'tenant');
INSERT INTO tr_queries VALUES (1), (2), (1), (2), (1);
INSERT INTO tr_queries VALUES (1);
SELECT k, l.* FROM (VALUES ('1'), ('2')) v(k), LATERAL tr_left(k, 'tr_multi') l ORDER BY k;
DELETE FROM rl_policy_limit WHERE name = 'hourly';
SELECT k, l.* FROM (VALUES ('1'), ('2')) v(k), LATERAL tr_left(k, 'tr_multi') l ORDER BY k;
-- savepoints and exception blocks: what each rolled back consumed goes
-- back, nothing else; a released savepoint's rows join the enclosing one
BEGIN;
SAVEPOINT first;
INSERT INTO tr_orders VALUES (6);
ROLLBACK TO SAVEPOINT first;
INSERT INTO tr_orders VALUES (3);
SAVEPOINT a;
INSERT INTO tr_orders VALUES (3), (4);
SAVEPOINT b;
INSERT INTO tr_orders VALUES (4);
RELEASE SAVEPOINT b;
INSERT INTO tr_orders VALUES (4);
ROLLBACK TO SAVEPOINT a;
INSERT INTO tr_orders VALUES (4);
DO $$
BEGIN
	BEGIN
		INSERT INTO tr_orders VALUES (3), (5);
		RAISE EXCEPTION 'undone';
	EXCEPTION WHEN raise_exception THEN
		NULL;
	END;
	INSERT INTO tr_orders VALUES (5);
END $$;
SAVEPOINT c;
INSERT INTO tr_orders VALUES (5);
COMMIT;
SELECT k, l.* FROM (VALUES ('3'), ('4'), ('5'), ('6')) v(k), LATERAL tr_left(k, 'tr_rows') l ORDER BY k;
-- a key of several columns longer than 4096 bytes is refused (22001), one
-- of 4096 admitted
CREATE TABLE tr_notes (author text, topic text);
CREATE TRIGGER tr_notes_quota BEFORE INSERT ON tr_notes FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('tr_rows', 'author', 'topic');
INSERT INTO tr_notes VALUES (repeat('a', 4000), repeat('b', 96));
INSERT INTO tr_notes VALUES (repeat('a', 4000), repeat('b', 95));
SELECT count(*) FROM tr_notes;
RESET ratelimit.trigger_at;
\set VERBOSITY default
