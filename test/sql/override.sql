-- Per-key overrides (rl_override): another limit or burst for one key, a
-- block, an unlimited key; what a key used is kept across changes.
SET timezone = 'UTC';
-- a statement's error as SQLSTATE and message
CREATE FUNCTION err(q text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('ov_orders', 'fixed_window', 3, '1 hour'),
	   ('ov_api', 'token_bucket', 2, '1 second');
INSERT INTO rl_policy (name, algo, "limit", per, burst)
VALUES ('ov_burst', 'token_bucket', 2, '1 second', 4);
-- raise: tenant 42 gets ten times the quota, others keep the policy's
INSERT INTO rl_override (policy, key, "limit") VALUES ('ov_orders', 'tenant:42', 30);
SELECT allowed, "limit", remaining FROM c2('tenant:42', 'ov_orders', 0);
SELECT allowed, "limit", remaining FROM c2('tenant:1', 'ov_orders', 0);
-- lower: tenant 42 has used 1; lowered to 2, it has 1 left, then none
UPDATE rl_override SET "limit" = 2 WHERE key = 'tenant:42';
SELECT allowed, "limit", remaining FROM c2('tenant:42', 'ov_orders', 1);
SELECT allowed, "limit", remaining, retry_after FROM c2('tenant:42', 'ov_orders', 2);
-- raised again: the 2 used stay used
UPDATE rl_override SET "limit" = 5 WHERE key = 'tenant:42';
SELECT allowed, "limit", remaining FROM c2('tenant:42', 'ov_orders', 3);
-- removed: the policy's 3 again, 3 used: denied
DELETE FROM rl_override WHERE key = 'tenant:42';
SELECT allowed, "limit", remaining FROM c2('tenant:42', 'ov_orders', 4);
-- a bucket: a limit without a burst moves the burst the policy left to
-- its limit; a policy's own burst stays; an override's burst replaces it
INSERT INTO rl_override (policy, key, "limit") VALUES ('ov_api', 'k', 10), ('ov_burst', 'k', 10);
INSERT INTO rl_override (policy, key, burst) VALUES ('ov_api', 'b', 7);
SELECT p, k, r.allowed, r."limit", r.capacity, r.remaining
FROM (VALUES ('ov_api', 'k'), ('ov_burst', 'k'), ('ov_api', 'b'), ('ov_api', 'other')) v (p, k),
	 LATERAL rl_check(k, p, at => t(0)) r ORDER BY p, k;
-- unlimited: admitted, counts nothing; its usage is the same afterwards
SELECT rl_allow('mon', 'ov_orders', at => t(0));
INSERT INTO rl_override (policy, key, unlimited) VALUES ('ov_orders', 'mon', true);
SELECT us, c.allowed, c.remaining FROM generate_series(1, 5) us, LATERAL c2('mon', 'ov_orders', us) c;
DELETE FROM rl_override WHERE key = 'mon';
SELECT allowed, remaining FROM c2('mon', 'ov_orders', 6);
-- block for a minute from t(0): denied until then, retry_after says when;
-- then the policy's limit as before
SELECT rl_block('blk', 'ov_orders', '1 minute', at => t(0));
SELECT policy, key, "limit", unlimited, blocked_until FROM rl_override WHERE key = 'blk';
SELECT allowed, remaining, retry_after, reset_us FROM c2('blk', 'ov_orders', 15000000);
SELECT allowed, remaining FROM c2('blk', 'ov_orders', 60000000);
-- a block without an end: retry after one window; rl_unblock lifts it
SELECT rl_block('blk', 'ov_orders');
SELECT allowed, remaining, retry_after FROM c2('blk', 'ov_orders', 61000000);
SELECT rl_unblock('blk', 'ov_orders'), rl_unblock('blk', 'ov_orders');
SELECT count(*) AS rows_left FROM rl_override WHERE key = 'blk';
SELECT allowed, remaining FROM c2('blk', 'ov_orders', 62000000);
-- a block keeps the key's other override; unblocking keeps that
INSERT INTO rl_override (policy, key, "limit") VALUES ('ov_orders', 'vip', 100);
SELECT rl_block('vip', 'ov_orders', '1 hour', at => t(0)) IS NOT NULL AS blocked;
SELECT allowed, "limit" FROM c2('vip', 'ov_orders', 0);
SELECT rl_unblock('vip', 'ov_orders');
SELECT allowed, "limit", remaining FROM c2('vip', 'ov_orders', 0);
-- an unlimited key's block wins while it lasts
UPDATE rl_override SET unlimited = true, blocked_until = t(10) WHERE key = 'vip';
SELECT allowed FROM c2('vip', 'ov_orders', 5);
SELECT allowed, remaining FROM c2('vip', 'ov_orders', 10);
-- all or nothing: a blocked key refuses the whole, the other key only
-- looked at (nothing taken); an unlimited key admits
SELECT rl_block('b2', 'ov_orders', at => t(0)) = 'infinity' AS forever;
SELECT key, policy, allowed, remaining
FROM rl_check_all(ARRAY['b2', 'fresh'], ARRAY['ov_orders', 'ov_orders'], at => t(0));
SELECT allowed, remaining FROM c2('fresh', 'ov_orders', 0, cost => 0);
SELECT rl_allow_all(ARRAY['vip', 'fresh'], ARRAY['ov_orders', 'ov_api'], at => t(20));
SELECT allowed, remaining FROM c2('fresh', 'ov_orders', 20, cost => 0);
-- quota triggers apply overrides too
CREATE TABLE ov_rows (tenant text);
CREATE TRIGGER ov_quota BEFORE INSERT ON ov_rows
	FOR EACH ROW EXECUTE FUNCTION rl_enforce('ov_orders', 'tenant');
INSERT INTO ov_rows VALUES ('b2');
INSERT INTO ov_rows VALUES ('vip'), ('vip'), ('vip'), ('vip');
-- bad overrides are refused when written, with a call's errors
SELECT err($$INSERT INTO rl_override (policy, key, "limit") VALUES ('nope', 'k', 1)$$);
SELECT err($$INSERT INTO rl_override (policy, key, "limit") VALUES ('ov_orders', 'z', 0)$$);
SELECT err($$INSERT INTO rl_override (policy, key, burst) VALUES ('ov_orders', 'z', 5)$$);
SELECT err($$INSERT INTO rl_override (policy, key, burst) VALUES ('ov_api', 'z', -1)$$);
SELECT err($$INSERT INTO rl_override (policy, key, "limit") VALUES ('ov_orders', repeat('x', 4097), 5)$$);
SELECT err($$INSERT INTO rl_override (policy, key) VALUES ('ov_orders', NULL)$$);
SELECT err($$INSERT INTO rl_override (policy, key) VALUES ('ov_orders', 'vip')$$);
INSERT INTO rl_policy (name, algo, "limit", per, cost) VALUES ('ov_costly', 'fixed_window', 10, '1 hour', 4);
SELECT err($$INSERT INTO rl_override (policy, key, "limit") VALUES ('ov_costly', 'z', 3)$$);
SELECT err($$UPDATE rl_override SET "limit" = -5 WHERE key = 'vip'$$);
SELECT err($$SELECT rl_block('k', 'nope', '1 hour')$$);
SELECT err($$SELECT rl_block('k', 'ov_orders', '-1 hour')$$);
SELECT err($$SELECT rl_block(NULL, 'ov_orders')$$);
-- a cost that can never fit what an override leaves is a call's error
INSERT INTO rl_override (policy, key, "limit") VALUES ('ov_costly', 'small', 4);
SELECT err($$SELECT rl_allow('small', 'ov_costly', cost => 5)$$);
-- an override and its policy written in one transaction
BEGIN;
INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('ov_new', 'fixed_window', 1, '1 day');
INSERT INTO rl_override (policy, key, "limit") VALUES ('ov_new', 'big', 50);
COMMIT;
SELECT allowed, "limit" FROM c2('big', 'ov_new', 0);
-- renaming a policy takes its overrides along; deleting it, away
UPDATE rl_policy SET name = 'ov_newer' WHERE name = 'ov_new';
SELECT policy, key FROM rl_override WHERE key = 'big';
SELECT allowed, "limit" FROM c2('big', 'ov_newer', 1);
DELETE FROM rl_policy WHERE name = 'ov_newer';
SELECT count(*) FROM rl_override WHERE key = 'big';
-- a change rolled back is not seen
BEGIN;
UPDATE rl_override SET "limit" = 1000 WHERE key = 'vip';
ROLLBACK;
SELECT "limit" FROM c2('vip', 'ov_orders', 0, cost => 0);
-- privileges: anyone reads overrides; only who manages policies writes them
CREATE ROLE ov_user;
SET ROLE ov_user;
SELECT count(*) > 0 AS can_read FROM rl_override;
SELECT err($$INSERT INTO rl_override (policy, key, "limit") VALUES ('ov_orders', 'mine', 1000)$$);
SELECT err($$SELECT rl_block('k', 'ov_orders')$$);
SELECT err($$SELECT rl_unblock('b2', 'ov_orders')$$);
RESET ROLE;
-- a key's own billing anchor: tenant 7 signed up on the 15th, its months
-- run from the 15th at noon; other keys keep the policy's calendar months
INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('ov_billing', 'fixed_window', 2, '1 month');
INSERT INTO rl_override (policy, key, period_anchor) VALUES ('ov_billing', 't7', '2026-01-15 12:00:00+00');
SELECT key, allowed, remaining, reset_at
FROM (VALUES ('t7'), ('t8')) k(key),
	 LATERAL rl_check(k.key, 'ov_billing', at => '2026-02-10 00:00:00+00');
SELECT allowed, reset_at FROM rl_check('t7', 'ov_billing', at => '2026-02-15 11:59:59+00');
SELECT allowed, reset_at FROM rl_check('t7', 'ov_billing', at => '2026-02-15 11:59:59+00');
SELECT allowed, reset_at FROM rl_check('t7', 'ov_billing', at => '2026-02-15 12:00:00+00');
SELECT period_start, period_end FROM rl_usage('ov_billing', 't7', at => '2026-02-20 00:00:00+00');
-- an anchor only for a policy of calendar periods (22023), and finite (22008)
INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('ov_tb', 'token_bucket', 2, '1 hour');
SELECT err($$INSERT INTO rl_override (policy, key, period_anchor) VALUES ('ov_tb', 'x', '2026-01-15')$$);
SELECT err($$INSERT INTO rl_override (policy, key, period_anchor) VALUES ('ov_billing', 'x', 'infinity')$$);
DROP ROLE ov_user;
-- overrides are dumped with the database
SELECT extconfig::regclass[] @> ARRAY['rl_override'::regclass] AS dumped
FROM pg_extension WHERE extname = 'ratelimit';
DROP TABLE ov_rows;
DELETE FROM rl_policy WHERE name LIKE 'ov\_%';
SELECT count(*) AS overrides_left FROM rl_override;
DROP FUNCTION err(text);
