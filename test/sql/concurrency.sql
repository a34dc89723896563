-- Concurrency limits: rl_acquire takes one of max_in_flight slots of a
-- key, for the transaction (the default) or the session; rl_release gives
-- it back early.  Slots between sessions and waits: test/specs/
-- concurrency_wait.spec and test/t/083_concurrency.pl.

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
SELECT key, in_flight FROM rl_slots();
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

-- bad arguments
SELECT rl_acquire(NULL, 1);
SELECT rl_acquire('c:x', NULL);
SELECT rl_acquire('c:x', 0);
SELECT rl_acquire('c:x', 1, 'forever');
SELECT rl_acquire('c:x', 1, NULL);
SELECT rl_acquire('c:x', 1, max_wait => '-1 second');
SELECT rl_acquire('c:x', 1, max_wait => '1 month');
SELECT rl_acquire(repeat('x', 5000), 1);
-- the rate-limiting functions refuse the algorithm
SELECT rl_allow('c:x', 'concurrency', 1, '1 second');
INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('c_pol', 'concurrency', 1, '1 second');
-- only the shared-memory store keeps slots
SET ratelimit.backend = 'redis';
SELECT rl_acquire('c:x', 1);
RESET ratelimit.backend;
SELECT count(*) AS keys_at_end FROM rl_slots();
