-- Several limits in one policy (rl_policy_limit): a rate and a daily quota
-- on the same key, all or nothing, the binding limit reported.
SET timezone = 'UTC';
INSERT INTO rl_policy (name, algo, "limit", per, burst)
VALUES ('search', 'token_bucket', 10, '1 second', 20);
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per)
VALUES ('search', 'daily', 'fixed_window', 25, '1 day');
SELECT policy, name, algo, "limit", per, burst FROM rl_policy_limit;
-- the burst of 20 binds first: 20 admitted, the 21st denied by the rate
SELECT count(*) FILTER (WHERE allowed) AS admitted FROM generate_series(1, 20) i,
	LATERAL c2('k', 'search', 0 * i) c;
SELECT allowed, "limit", remaining, retry_after FROM c2('k', 'search', 0);
-- one second later the bucket holds 10 again, the day 5: the day binds
SELECT allowed, "limit", remaining FROM c2('k', 'search', 1000000);
SELECT r."limit", r.capacity, r.per, r.remaining FROM rl_check('k', 'search', at => t(1000000), cost => 0) r;
SELECT rl_headers(rl_check('k', 'search', at => t(1000000), cost => 0));
SELECT count(*) FILTER (WHERE allowed) AS admitted FROM generate_series(1, 6) i,
	LATERAL c2('k', 'search', 1000000 + 0 * i) c;
-- denied by the day: nothing taken from the bucket (all or nothing), and
-- retry_after the day's
SELECT allowed, "limit", remaining, retry_after FROM c2('k', 'search', 2000000);
UPDATE rl_policy_limit SET "limit" = 1000 WHERE name = 'daily';
SELECT allowed, "limit", remaining FROM c2('k', 'search', 2000000, cost => 0);
-- a trigger's row counts under every limit, and a rollback gives back to each
CREATE TABLE queries (tenant text);
CREATE TRIGGER queries_quota BEFORE INSERT ON queries
	FOR EACH ROW EXECUTE FUNCTION rl_enforce('search', 'tenant');
UPDATE rl_policy_limit SET "limit" = 3 WHERE name = 'daily';
BEGIN;
INSERT INTO queries VALUES ('t1'), ('t1');
SELECT remaining FROM rl_check('t1', 'search', cost => 0);
ROLLBACK;
SELECT "limit", remaining FROM rl_check('t1', 'search', cost => 0);
INSERT INTO queries VALUES ('t1'), ('t1'), ('t1');
\set VERBOSITY terse
INSERT INTO queries VALUES ('t1');
\set VERBOSITY default
-- rl_adjust charges every limit; rl_reset resets every one
SELECT "limit", allowed, remaining FROM rl_adjust('k2', 'search', 15, t(0));
SELECT "limit", allowed, remaining FROM c2('k2', 'search', 0, cost => 0);
SELECT rl_reset('k2', policy => 'search');
SELECT "limit", remaining FROM c2('k2', 'search', 0, cost => 0);
-- a key's block or unlimited override applies to every limit; its limit
-- to the policy's own
UPDATE rl_policy_limit SET "limit" = 50 WHERE name = 'daily';
INSERT INTO rl_override (policy, key, "limit", burst) VALUES ('search', 'big', 100, 100);
SELECT allowed, "limit", remaining FROM c2('big', 'search', 0, cost => 4);
UPDATE rl_override SET unlimited = true WHERE key = 'big';
SELECT allowed, "limit", remaining FROM c2('big', 'search', 0);
SELECT rl_block('big', 'search', at => t(0)) IS NOT NULL AS blocked;
SELECT allowed FROM c2('big', 'search', 0);
-- functions that take one limit per element refuse such a policy
SELECT rl_allow_all(ARRAY['k'], ARRAY['search']);
SELECT rl_wait('k', 'search', max_wait => interval '1 second');
-- renaming the policy takes its limits along; deleting it, away
UPDATE rl_policy SET name = 'search2' WHERE name = 'search';
SELECT policy, name FROM rl_policy_limit;
SELECT "limit" FROM c2('k', 'search2', 2000000, cost => 0);
-- bad limits are refused when written
\set VERBOSITY sqlstate
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('nope', 'x', 'fixed_window', 1, '1 day');
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('search2', 'x', 'token-bucket', 1, '1 day');
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('search2', 'x', 'fixed_window', 0, '1 day');
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('search2', 'x', 'token_bucket', 1, '1 month');
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per, burst) VALUES ('search2', 'x', 'fixed_window', 1, '1 day', 5);
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('search2', '', 'fixed_window', 1, '1 day');
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('search2', repeat('n', 64), 'fixed_window', 1, '1 day');
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('search2', NULL, 'fixed_window', 1, '1 day');
\set VERBOSITY default
INSERT INTO rl_policy (name, algo, "limit", per, cost) VALUES ('heavy', 'fixed_window', 100, '1 hour', 5);
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('heavy', 'x', 'fixed_window', 3, '1 day');
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per)
SELECT 'heavy', 'l' || i, 'fixed_window', 100, '1 day' FROM generate_series(1, 9) i;
SELECT count(*) FROM rl_policy_limit WHERE policy = 'heavy';
-- a call's cost no limit could ever admit is a call's error
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('search2', 'tiny', 'fixed_window', 2, '1 day');
SELECT rl_allow('k', 'search2', cost => 3);
-- rl_keys lists each limit's state under the policy, with key NULL (its
-- bytes start with a NUL) and no look with the policy's own parameters
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('search2', 'tb', 'token_bucket', 100, '1 hour');
-- (an hour ahead: the bucket of 10 a second is not full again, and so
-- not idle, by the time rl_keys looks, however slow the server)
SELECT rl_allow('live', 'search2', at => now() + interval '1 hour');
SELECT algo, key, remaining IS NOT NULL AS looked, encode(key_bytes, 'escape') AS key_bytes
FROM rl_keys() WHERE policy = 'search2' AND encode(key_bytes, 'hex') LIKE '%6c697665'
ORDER BY algo, key_bytes;
-- a calendar month as one of the limits: a token bucket per second and a
-- monthly allowance, the month binding across its end (ratelimit.time_zone)
INSERT INTO rl_policy (name, algo, "limit", per, burst) VALUES ('monthly', 'token_bucket', 10, '1 second', 20);
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per) VALUES ('monthly', 'month', 'fixed_window', 2, '1 month');
SELECT allowed, remaining, reset_at FROM rl_check('m', 'monthly', at => '2026-01-31 22:00:00+00');
SELECT allowed, remaining, reset_at FROM rl_check('m', 'monthly', at => '2026-01-31 23:00:00+00');
SELECT allowed, remaining, retry_after FROM rl_check('m', 'monthly', at => '2026-01-31 23:59:00+00');
SELECT allowed, remaining, reset_at FROM rl_check('m', 'monthly', at => '2026-02-01 00:00:00+00');
DELETE FROM rl_policy WHERE name = 'monthly';
-- privileges and dump as rl_policy's
SELECT has_table_privilege('public', 'rl_policy_limit', 'SELECT') AS readable,
	   has_table_privilege('public', 'rl_policy_limit', 'INSERT') AS writable;
SELECT extconfig::regclass[] @> ARRAY['rl_policy_limit'::regclass] AS dumped
FROM pg_extension WHERE extname = 'ratelimit';
DROP TABLE queries;
DELETE FROM rl_policy WHERE name IN ('search2', 'heavy');
SELECT count(*) AS limits_left FROM rl_policy_limit;
