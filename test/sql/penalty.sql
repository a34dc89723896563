-- A policy's penalty box (block_duration): after a denial the key is
-- denied for that long, consuming nothing, retry_after saying until when.
SET timezone = 'UTC';
INSERT INTO rl_policy (name, algo, "limit", per, block_duration)
VALUES ('pb', 'fixed_window', 2, '1 minute', '10 minutes');
-- two admitted, the third denied: into the box for 10 minutes from then
SELECT us / 1000000 AS s, c.* FROM unnest(ARRAY[0, 1000000, 2000000]) us,
	LATERAL c2('k', 'pb', us) c;
-- the window starts again at 60 s, the box holds until 602 s
SELECT us / 1000000 AS s, c.allowed, c.remaining, c.retry_after, c.reset_us
FROM unnest(ARRAY[60000000, 300000000, 601999999]) us, LATERAL c2('k', 'pb', us) c;
-- out of the box: the window's own allowance, untouched by the denials
SELECT allowed, remaining FROM c2('k', 'pb', 602000000);
-- other keys are not in the box
SELECT allowed, remaining FROM c2('other', 'pb', 3000000);
-- a new denial starts a new box; calls inside a box do not extend it
SELECT allowed, remaining FROM c2('k', 'pb', 603000000);
SELECT allowed, retry_after FROM c2('k', 'pb', 604000000);
SELECT allowed, retry_after FROM c2('k', 'pb', 605000000);
SELECT allowed FROM c2('k', 'pb', 1204000000);
-- a look (cost 0) past the limit is no attempt: it boxes nothing; nor
-- does a charge after the fact
SELECT allowed, remaining FROM rl_adjust('over', 'pb', 5, t(0));
SELECT allowed, remaining FROM c2('over', 'pb', 1000000, cost => 0);
SELECT allowed, remaining FROM c2('over', 'pb', 60000000);
-- all or nothing: a key in its box refuses the whole, the other is only
-- looked at; a key the engines deny goes into its box
SELECT rl_allow('a', 'pb', at => t(0)), rl_allow('a', 'pb', at => t(0)), rl_allow('a', 'pb', at => t(0));
SELECT key, allowed, remaining, retry_after
FROM rl_check_all(ARRAY['a', 'b'], ARRAY['pb', 'pb'], at => t(70000000));
SELECT allowed, remaining FROM c2('b', 'pb', 70000000, cost => 0);
SELECT rl_allow('c', 'pb', at => t(0)), rl_allow('c', 'pb', at => t(0));
SELECT key, allowed, retry_after
FROM rl_check_all(ARRAY['c', 'd'], ARRAY['pb', 'pb'], at => t(1000000));
SELECT allowed, retry_after FROM c2('c', 'pb', 120000000);
-- a trigger's row denied puts its key in the box (the real clock: a
-- bucket that refills once in 100 years, so that only the box can end)
INSERT INTO rl_policy (name, algo, "limit", per, burst, block_duration)
VALUES ('pb_rows', 'token_bucket', 1, '36500 days', 2, '1 hour');
CREATE TABLE pb_rows (k text);
CREATE TRIGGER pb_quota BEFORE INSERT ON pb_rows
	FOR EACH ROW EXECUTE FUNCTION rl_enforce('pb_rows', 'k');
INSERT INTO pb_rows VALUES ('e'), ('e');
\set VERBOSITY terse
INSERT INTO pb_rows VALUES ('e');
\set VERBOSITY default
SELECT allowed, retry_after > 0 AND retry_after <= 3600 AS until_the_box_ends
FROM rl_check('e', 'pb_rows', cost => 0);
-- rl_reset empties the key's box with its state
SELECT rl_reset('e', policy => 'pb_rows');
SELECT allowed, remaining FROM rl_check('e', 'pb_rows', cost => 0);
-- a shadow policy's box only reports
UPDATE rl_policy SET shadow = true WHERE name = 'pb';
SELECT allowed, remaining FROM c2('c', 'pb', 130000000);
UPDATE rl_policy SET shadow = false, block_duration = NULL WHERE name = 'pb';
-- without block_duration, no box
SELECT allowed FROM c2('c', 'pb', 130000000);
-- bad durations are refused when written
UPDATE rl_policy SET block_duration = '0' WHERE name = 'pb';
UPDATE rl_policy SET block_duration = '-1 minute' WHERE name = 'pb';
UPDATE rl_policy SET block_duration = '1 month' WHERE name = 'pb';
-- several limits: when one limit's box denies, the others are only looked
-- at, and a look is no attempt: the policy's own limit, lowered below what
-- the key used, does not go into its box for it
INSERT INTO rl_policy (name, algo, "limit", per, block_duration)
VALUES ('pb_two', 'fixed_window', 5, '1 hour', '10 minutes');
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per, burst)
VALUES ('pb_two', 'tb', 'token_bucket', 1, '5 minutes', 3);
SELECT rl_allow('f', 'pb_two', at => t(0)), rl_allow('f', 'pb_two', at => t(0)),
	rl_allow('f', 'pb_two', at => t(0)), rl_allow('f', 'pb_two', at => t(0));
INSERT INTO rl_override (policy, key, "limit") VALUES ('pb_two', 'f', 2);
SELECT allowed, "limit", retry_after FROM rl_check('f', 'pb_two', at => t(60000000));
DELETE FROM rl_override WHERE policy = 'pb_two';
SELECT allowed, "limit", remaining FROM rl_check('f', 'pb_two', at => t(601000000));
DELETE FROM rl_policy WHERE name = 'pb_two';
DROP TABLE pb_rows;
DELETE FROM rl_policy WHERE name IN ('pb', 'pb_rows');
