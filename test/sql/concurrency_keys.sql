-- rl_keys shows a concurrency limit's keys with their slots: in flight,
-- backends waiting, the longest hold; NULL for the keys of other
-- algorithms.  Waiting backends: test/t/097_concurrency_keys.pl.

SELECT rl_acquire('ck:a', 3, 'session') AS session_slot;
BEGIN;
SELECT rl_acquire('ck:b', 2) AS transaction_slot;
SELECT algo, policy, key, remaining, in_flight, waiting,
	longest_hold >= '0' AND longest_hold < '1 hour' AS hold_since_the_call
FROM rl_keys() WHERE algo = 'concurrency' ORDER BY key;
COMMIT;
-- the transaction's slot is back: its key is idle and not listed
SELECT key, in_flight FROM rl_keys() WHERE algo = 'concurrency' ORDER BY key;

-- a policy's key
INSERT INTO rl_policy (name, algo, "limit") VALUES ('ck_policy', 'concurrency', 2);
SELECT rl_acquire('t:1', 'ck_policy', 'session') AS policy_slot;
SELECT policy, key, in_flight, waiting, longest_hold IS NOT NULL AS hold_known
FROM rl_keys() WHERE algo = 'concurrency' ORDER BY policy NULLS FIRST, key;

-- the keys of a rate: NULL in the three columns
SELECT rl_allow('ck:rate', 'fixed_window', 10, '1 hour') AS rate_call;
SELECT algo, in_flight, waiting, longest_hold
FROM rl_keys() WHERE key = 'ck:rate';

SELECT rl_release('t:1', policy => 'ck_policy') AS released_policy,
	rl_release('ck:a') AS released_direct;
SELECT count(*) AS concurrency_keys_at_end FROM rl_keys() WHERE algo = 'concurrency';
SELECT rl_reset('ck:rate', 'fixed_window') AS rate_reset;
DELETE FROM rl_policy WHERE name = 'ck_policy';
