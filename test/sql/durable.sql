-- Durable policies (#10): what the SQL face checks.  The regression
-- server runs with ratelimit.durable off; the crash and standby behaviour
-- is tested by test/t/056_durable_crash.pl and 057_durable_standby.pl.
SET timezone = 'UTC';
SHOW ratelimit.durable;
SHOW ratelimit.durable_commit;
-- a durable policy: a column of rl_policy, false by default
INSERT INTO rl_policy (name, algo, "limit", per, durable)
VALUES ('quota', 'fixed_window', 5, '1 day', true),
	   ('quota_bucket', 'token_bucket', 5, '1 day', true);
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('plain_q', 'fixed_window', 5, '1 day');
SELECT name, durable FROM rl_policy WHERE name IN ('quota', 'quota_bucket', 'plain_q') ORDER BY name;
-- a sliding log can be durable (its images hold its entries)
INSERT INTO rl_policy (name, algo, "limit", per, durable)
VALUES ('quota_log', 'sliding_window_log', 5, '1 day', true);
UPDATE rl_policy SET algo = 'token_bucket' WHERE name = 'quota_log';
UPDATE rl_policy SET algo = 'sliding_window_log' WHERE name = 'quota_log';
SELECT name, algo, durable FROM rl_policy WHERE name = 'quota_log';
-- refused when written: only the local store logs its keys (Redis has
-- persistence of its own: docs/redis.md), and a concurrency limit's slots
-- end with their sessions
INSERT INTO rl_policy (name, algo, "limit", per, backend, durable)
VALUES ('bad', 'fixed_window', 5, '1 day', 'redis', true);
INSERT INTO rl_policy (name, algo, "limit", durable)
VALUES ('bad', 'concurrency', 2, true);
UPDATE rl_policy SET backend = 'redis' WHERE name = 'quota_log';
-- without ratelimit.durable a consuming call is refused (55000) and
-- nothing is consumed; a look (cost 0) works
SELECT rl_allow('t1', 'quota');
SELECT rl_check('t1', 'quota', at => '2026-01-01', cost => 3);
SELECT rl_allow_all(ARRAY['t1', 't2'], ARRAY['plain_q', 'quota']);
SELECT (rl_check('t1', 'quota', at => '2026-01-01', cost => 0)).remaining;
SELECT (rl_check('t2', 'plain_q', at => '2026-01-01', cost => 0)).remaining;
-- the quota trigger too, before the row is written
CREATE TABLE durable_orders (tenant text);
CREATE TRIGGER durable_orders_quota BEFORE INSERT ON durable_orders
	FOR EACH ROW EXECUTE FUNCTION rl_enforce('quota', 'tenant');
INSERT INTO durable_orders VALUES ('t1');
SELECT count(*) FROM durable_orders;
-- a durable policy without a backend of its own follows ratelimit.backend:
-- refused unless it is local
SET ratelimit.backend = 'redis';
SELECT rl_allow('t1', 'quota');
RESET ratelimit.backend;
-- the SQLSTATEs
\set VERBOSITY sqlstate
INSERT INTO rl_policy (name, algo, "limit", per, backend, durable)
VALUES ('bad', 'sliding_window_log', 5, '1 day', 'redis', true);
SELECT rl_allow('t1', 'quota');
SET ratelimit.backend = 'redis';
SELECT rl_allow('t1', 'quota');
RESET ratelimit.backend;
\set VERBOSITY default
-- the figures
SELECT durable_keys, durable_ready, sweeps, swept_keys FROM rl_durable_info();
SELECT has_function_privilege('public', 'rl_durable_info()', 'execute');
DROP TABLE durable_orders;
DELETE FROM rl_policy WHERE name IN ('quota', 'quota_bucket', 'plain_q', 'quota_log');
