-- Policies: named limits stored as data, used by name, changed without
-- restarts.
SET timezone = 'UTC';
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('api', 'token_bucket', 3, '1 minute'),
	   ('orders', 'fixed_window', 2, '1 hour'),
	   ('logins', 'sliding_window_log', 2, '10 minutes');
INSERT INTO rl_policy (name, algo, "limit", per, burst, cost)
VALUES ('uploads', 'leaky_bucket', 10, '1 second', 100, 5);
SELECT name, algo, "limit", per, burst, cost, backend, fail_mode, shadow
FROM rl_policy ORDER BY name;
-- a bad policy is refused when written, with the call's errors
INSERT INTO rl_policy (name, algo, "limit") VALUES ('bad', 'token-bucket', 1);
INSERT INTO rl_policy (name, algo, "limit") VALUES ('bad', 'fixed_window', 0);
INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('bad', 'leaky_bucket', 1, '1 month');
INSERT INTO rl_policy (name, algo, "limit", burst) VALUES ('bad', 'fixed_window', 1, 2);
INSERT INTO rl_policy (name, algo, "limit", cost) VALUES ('bad', 'fixed_window', 1, 2);
INSERT INTO rl_policy (name, algo, "limit", backend) VALUES ('bad', 'fixed_window', 1, 'memcached');
INSERT INTO rl_policy (name, algo, "limit", fail_mode) VALUES ('bad', 'fixed_window', 1, 'maybe');
INSERT INTO rl_policy (name, algo, "limit") VALUES (repeat('n', 64), 'fixed_window', 1);
INSERT INTO rl_policy (name, algo, "limit") VALUES ('', 'fixed_window', 1);
UPDATE rl_policy SET "limit" = -1 WHERE name = 'api';
-- use by name: positional or named
SELECT rl_allow('user:1', 'api', at => t(0)), rl_allow('user:1', policy => 'api', at => t(1)),
	   rl_allow(key => 'user:1', policy => 'api', at => t(2)), rl_allow('user:1', 'api', at => t(3));
SELECT * FROM c2('user:1', 'api', 20000000);
-- the cost defaults to the policy's, and can be given
SELECT * FROM c2('file:1', 'uploads', 0);
SELECT * FROM c2('file:1', 'uploads', 0, cost => 50);
SELECT * FROM c2('file:1', 'uploads', 0, cost => 101);
-- an unknown policy is an error
SELECT rl_allow('user:1', 'nope');
SELECT rl_allow('user:1', NULL::text, at => t(0));
-- policies never share state with each other or with direct calls
SELECT rl_allow('tenant:9', 'orders', at => t(0)), rl_allow('tenant:9', 'orders', at => t(1)),
	   rl_allow('tenant:9', 'orders', at => t(2));
SELECT rl_allow('tenant:9', 'fixed_window', 2, '1 hour', at => t(3)) AS direct_call_unaffected;
INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('orders2', 'fixed_window', 2, '1 hour');
SELECT rl_allow('tenant:9', 'orders2', at => t(4)) AS other_policy_unaffected;
-- a committed change applies at the next call, without a reset
UPDATE rl_policy SET "limit" = 5 WHERE name = 'orders';
SELECT * FROM c2('tenant:9', 'orders', 5);
DELETE FROM rl_policy WHERE name = 'orders2';
SELECT rl_allow('tenant:9', 'orders2', at => t(6));
-- a change rolled back is not seen
BEGIN;
UPDATE rl_policy SET "limit" = 100 WHERE name = 'orders';
SELECT (c2('tenant:9', 'orders', 7, cost => 0)).remaining AS inside_the_transaction;
ROLLBACK;
SELECT (c2('tenant:9', 'orders', 8, cost => 0)).remaining AS after_rollback;
-- shadow (dry-run) policies decide and count, and always allow
INSERT INTO rl_policy (name, algo, "limit", per, shadow) VALUES ('trial', 'fixed_window', 1, '1 hour', true);
SELECT us, c.* FROM unnest(ARRAY[0, 1, 2]) us, LATERAL c2('t:1', 'trial', us) c;
UPDATE rl_policy SET shadow = false WHERE name = 'trial';
SELECT * FROM c2('t:1', 'trial', 3);
-- reset a key under a policy
SELECT rl_reset('t:1', policy => 'trial');
SELECT * FROM c2('t:1', 'trial', 4);
SELECT rl_reset('t:1', 'fixed_window', 'trial');
-- policies work in read-only transactions (state is not in tables)
BEGIN READ ONLY;
SELECT rl_allow('ro:1', 'api', at => t(0)) AS read_only_ok;
COMMIT;
-- the policy table is dumped with the database
SELECT extconfig::regclass[] FROM pg_extension WHERE extname = 'ratelimit';
