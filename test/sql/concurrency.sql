-- Concurrency limits: rl_acquire takes one of max_in_flight slots of a
-- key, for the transaction (the default) or the session; rl_release gives
-- it back early.  Slots between sessions and waits: test/specs/
-- concurrency_wait.spec and test/t/087_concurrency_slots.pl.

-- a transaction's slot is given back at commit
BEGIN;
SELECT rl_acquire('c:a', 2) AS first;
-- a backend holds at most one slot of a key: taking it again takes nothing
SELECT rl_acquire('c:a', 2) AS again, rl_acquire('c:a', 1) AS again_under_1;
SELECT key, hold FROM rl_held();
SELECT key, in_flight, waiting FROM rl_slots();
COMMIT;
SELECT count(*) AS held_after_commit FROM rl_held();
SELECT count(*) AS keys_after_commit FROM rl_slots();
-- outside a transaction block, the statement's transaction holds it
SELECT rl_acquire('c:a', 1) AS autocommit;
SELECT count(*) AS keys_after_statement FROM rl_slots();

-- and at abort
BEGIN;
SELECT rl_acquire('c:b', 1);
ROLLBACK;
SELECT count(*) AS keys_after_abort FROM rl_slots();

-- a savepoint rolled back gives back the slots taken since; one released
-- into its parent stays
BEGIN;
SELECT rl_acquire('c:outer', 1);
SAVEPOINT s1;
SELECT rl_acquire('c:inner', 1);
SAVEPOINT s2;
SELECT rl_acquire('c:kept', 1);
RELEASE SAVEPOINT s2;
ROLLBACK TO SAVEPOINT s1;
SELECT key FROM rl_held() ORDER BY key;
SAVEPOINT s3;
SELECT rl_acquire('c:inner2', 1);
RELEASE SAVEPOINT s3;
SELECT key FROM rl_held() ORDER BY key;
COMMIT;
-- taken again at the outer level: a rollback of the inner one keeps it
BEGIN;
SAVEPOINT s1;
SELECT rl_acquire('c:both', 1);
RELEASE SAVEPOINT s1;
SAVEPOINT s2;
SELECT rl_acquire('c:both', 1);
ROLLBACK TO SAVEPOINT s2;
SELECT key FROM rl_held();
COMMIT;
-- an exception block is a subtransaction too
DO $$
BEGIN
	BEGIN
		PERFORM rl_acquire('c:exc', 1);
		RAISE EXCEPTION 'boom';
	EXCEPTION WHEN raise_exception THEN
		NULL;
	END;
	IF EXISTS (SELECT FROM rl_held()) THEN
		RAISE EXCEPTION 'slot kept after the exception block';
	END IF;
END $$;

-- a session's slot outlives its transactions, until rl_release
SELECT rl_acquire('c:s', 1, 'session');
BEGIN;
SELECT rl_acquire('c:s', 1) AS held_already;
ROLLBACK;
SELECT key, hold FROM rl_held();
SELECT key, in_flight, held_since <= now() AS since_known FROM rl_slots();
SELECT rl_release('c:s') AS released, rl_release('c:s') AS released_twice;
SELECT count(*) AS keys_after_release FROM rl_slots();
-- a transaction's slot taken again for the session becomes the session's
BEGIN;
SELECT rl_acquire('c:u', 1);
SELECT rl_acquire('c:u', 1, 'session');
COMMIT;
SELECT key, hold FROM rl_held();
SELECT rl_release('c:u');
-- rl_release inside a transaction gives a transaction's slot back at once
BEGIN;
SELECT rl_acquire('c:r', 1);
SELECT rl_release('c:r');
SELECT count(*) AS keys_after_release FROM rl_slots();
COMMIT;
SELECT rl_release('c:never');

-- PREPARE TRANSACTION is refused while the transaction holds a slot (and
-- the aborted transaction gives it back)
BEGIN;
SELECT rl_acquire('c:p', 1);
PREPARE TRANSACTION 'c_p';
SELECT count(*) AS keys_after_refused_prepare FROM rl_slots();

-- a reset drops the state: the holder's slot is forgotten, and giving it
-- back later changes nothing
SELECT rl_acquire('c:reset', 1, 'session');
SELECT rl_reset('c:reset', 'concurrency');
SELECT rl_acquire('c:reset', 1, 'session') AS still_held_here;
SELECT count(*) AS keys_after_reset FROM rl_slots();
SELECT rl_release('c:reset');

-- the key is listed by rl_keys while slots are held; rl_stats counts calls
SELECT rl_acquire('c:k', 3, 'session');
SELECT algo, key, remaining FROM rl_keys() WHERE algo = 'concurrency';
SELECT rl_release('c:k');
SELECT algo, allowed >= 1 AS counted FROM rl_stats WHERE algo = 'concurrency';

-- a policy of algorithm concurrency: rl_acquire(key, policy => ...)
INSERT INTO rl_policy (name, algo, "limit") VALUES ('c_imports', 'concurrency', 2);
BEGIN;
SELECT rl_acquire('tenant:1', 'c_imports') AS under_policy;
SELECT rl_acquire('tenant:1', 2) AS direct_is_another_key;
SELECT policy, key, hold FROM rl_held() ORDER BY policy NULLS FIRST;
SELECT policy, key, in_flight FROM rl_slots() ORDER BY policy NULLS FIRST;
SELECT rl_release('tenant:1', policy => 'c_imports') AS released_policy_slot;
SELECT policy, key FROM rl_held();
COMMIT;
-- a quota trigger under it: a transaction takes one slot per key, for all
-- its rows (another transaction refused: concurrency_wait.spec)
CREATE TABLE c_import (tenant int, n int);
CREATE TRIGGER c_import_slots BEFORE INSERT ON c_import
	FOR EACH ROW EXECUTE FUNCTION rl_enforce('c_imports', 'tenant');
BEGIN;
INSERT INTO c_import SELECT 1, n FROM generate_series(1, 10) n;
INSERT INTO c_import VALUES (2, 1);
SELECT policy, key, in_flight FROM rl_slots() ORDER BY key;
COMMIT;
SELECT count(*) AS slots_after_import FROM rl_slots();
-- a cost expression makes no sense for it
CREATE TRIGGER c_import_cost BEFORE INSERT ON c_import
	FOR EACH ROW EXECUTE FUNCTION rl_enforce('c_imports', 'tenant', 'cost=n');
INSERT INTO c_import VALUES (3, 1);
DROP TABLE c_import;
-- a concurrency policy is refused by the rate functions, and a rate
-- policy by rl_acquire; its cost is 1
SELECT rl_allow('k', 'c_imports');
SELECT rl_check('k', 'c_imports');
SELECT rl_wait('k', 'c_imports', max_wait => '0');
SELECT rl_allow_all(ARRAY['k'], ARRAY['c_imports']);
INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('c_rate', 'fixed_window', 1, '1 second');
SELECT rl_acquire('k', 'c_rate');
SELECT rl_release('k', 'c_rate');
SELECT rl_acquire('k', 'c_missing');
INSERT INTO rl_policy (name, algo, "limit", cost) VALUES ('c_cost', 'concurrency', 2, 2);
INSERT INTO rl_policy (name, algo, "limit", burst) VALUES ('c_burst', 'concurrency', 2, 2);
DELETE FROM rl_policy WHERE name IN ('c_imports', 'c_rate');

-- bad arguments
SELECT rl_acquire(NULL, 1);
SELECT rl_acquire('c:x', NULL::bigint);
SELECT rl_acquire('c:x', NULL::text);
SELECT rl_acquire('c:x', 0);
SELECT rl_acquire('c:x', 1, 'forever');
SELECT rl_acquire('c:x', 1, NULL);
SELECT rl_acquire('c:x', 1, max_wait => '-1 second');
SELECT rl_acquire('c:x', 1, max_wait => '1 month');
SELECT rl_acquire(repeat('x', 5000), 1);
-- the rate-limiting functions refuse the algorithm
SELECT rl_allow('c:x', 'concurrency', 1, '1 second');
-- on Redis a slot is a lease and a wait a ticket in Redis
-- (test/t/094_redis_lease_waiters.pl, 096_redis_leases.pl); Redis
-- unreachable, a waiting call is decided by fail_mode at once
SET ratelimit.backend = 'redis';
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET ratelimit.fail_mode = 'closed';
SET client_min_messages = error;
SELECT rl_acquire('c:x', 1, max_wait => '1 hour');
RESET client_min_messages;
RESET ratelimit.fail_mode;
RESET ratelimit.redis_nodes;
RESET ratelimit.backend;
SELECT count(*) AS keys_at_end FROM rl_slots();
-- rl_usage of a concurrency policy: the slots in flight, no period
INSERT INTO rl_policy (name, algo, "limit") VALUES ('c_usage', 'concurrency', 3);
SELECT rl_acquire('u:1', 'c_usage', 'session');
SELECT key, used, "limit", remaining, period_start, period_end FROM rl_usage('c_usage');
SELECT key, used, "limit", remaining FROM rl_usage('c_usage', 'u:1');
SELECT rl_release('u:1', 'c_usage');
-- on Redis the leases are not listed: rl_usage refuses (0A000)
SET ratelimit.backend = 'redis';
SELECT * FROM rl_usage('c_usage', 'u:1');
RESET ratelimit.backend;
DELETE FROM rl_policy WHERE name = 'c_usage';
