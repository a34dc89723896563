-- Calendar periods (fixed_window): months and years, days and weeks in a
-- time zone, billing anchors; rl_usage; the IETF RateLimit fields.
SET timezone = 'UTC';
-- a call's time, allowed, remaining, reset_at, retry_after and window
CREATE FUNCTION cal(key text, lim bigint, per interval, at timestamptz,
					cost bigint DEFAULT 1)
RETURNS TABLE (allowed boolean, remaining bigint, reset_at timestamptz,
			   retry_after double precision, per interval)
LANGUAGE sql
AS $$
	SELECT r.allowed, r.remaining, r.reset_at, r.retry_after, r.per
	FROM rl_check(key, 'fixed_window', lim, per, cost, NULL, at) r
$$;
-- Months: 2 a month.  The period is the calendar month: the last
-- microsecond of January and the first of February are two periods.
SELECT * FROM cal('m:1', 2, '1 month', '2026-01-31 23:59:59+00');
SELECT * FROM cal('m:1', 2, '1 month', '2026-01-31 23:59:59.5+00');
SELECT * FROM cal('m:1', 2, '1 month', '2026-01-31 23:59:59.999999+00');
SELECT * FROM cal('m:1', 2, '1 month', '2026-02-01 00:00:00+00');
SELECT * FROM cal('m:1', 2, '1 month', '2026-02-27 00:00:00+00');
SELECT * FROM cal('m:1', 2, '1 month', '2026-02-28 12:00:00+00');
-- across a year's end
SELECT * FROM cal('m:2', 1, '1 month', '2025-12-31 23:59:59.999999+00');
SELECT * FROM cal('m:2', 1, '1 month', '2025-12-31 23:59:59.999999+00');
SELECT * FROM cal('m:2', 1, '1 month', '2026-01-01 00:00:00+00');
-- February of a leap year has 29 days, of other years 28
SELECT * FROM cal('m:3', 1, '1 month', '2024-02-29 23:59:59+00');
SELECT * FROM cal('m:3', 1, '1 month', '2024-02-29 23:59:59.5+00');
SELECT * FROM cal('m:4', 1, '1 month', '2100-02-28 12:00:00+00');
SELECT * FROM cal('m:5', 1, '1 month', '2000-02-29 12:00:00+00');
-- quarters start in January, April, July and October; years on January 1
SELECT * FROM cal('m:6', 5, '3 months', '2026-05-15 00:00:00+00');
SELECT * FROM cal('m:7', 5, '3 months', '2026-12-31 00:00:00+00');
SELECT * FROM cal('m:8', 5, '1 year', '2028-02-29 00:00:00+00');
SELECT * FROM cal('m:9', 5, '2 years', '2027-06-01 00:00:00+00');
-- Days and weeks.  In UTC a day is midnight to midnight, as before; whole
-- weeks start on Monday (2026-01-01 was a Thursday)
SELECT * FROM cal('d:1', 5, '1 day', '2026-01-01 13:00:00+00');
SELECT * FROM cal('d:2', 5, '7 days', '2026-01-01 13:00:00+00');
SELECT * FROM cal('d:3', 5, '14 days', '2026-01-01 13:00:00+00');
-- a day of hours is 24 hours on the epoch, not a calendar day
SELECT * FROM cal('d:4', 5, '24 hours', '2026-01-01 13:00:00+00');
-- In a zone: days start at local midnight.  Paris moves to summer time on
-- 2026-03-29 (a day of 23 hours) and back on 2026-10-25 (25 hours).
SET ratelimit.time_zone = 'Europe/Paris';
SELECT * FROM cal('z:1', 1, '1 day', '2026-03-28 22:59:59+00');
SELECT * FROM cal('z:1', 1, '1 day', '2026-03-28 23:00:00+00');
SELECT * FROM cal('z:1', 1, '1 day', '2026-03-29 21:59:59+00');
SELECT * FROM cal('z:1', 1, '1 day', '2026-03-29 22:00:00+00');
SELECT * FROM cal('z:2', 1, '1 day', '2026-10-25 12:00:00+00');
SELECT * FROM cal('z:2', 1, '1 day', '2026-10-25 22:59:59+00');
SELECT * FROM cal('z:2', 1, '1 day', '2026-10-25 23:00:00+00');
-- a week in Paris: Monday 00:00 local (CET, UTC+1)
SELECT * FROM cal('z:3', 1, '7 days', '2026-01-01 13:00:00+00');
-- a month in Paris: March 2026 starts 2026-02-28 23:00 UTC and ends
-- 2026-03-31 22:00 UTC (summer time since the 29th)
SELECT * FROM cal('z:4', 1, '1 month', '2026-02-28 22:59:59+00');
SELECT * FROM cal('z:4', 1, '1 month', '2026-02-28 23:00:00+00');
SELECT * FROM cal('z:4', 1, '1 month', '2026-03-31 21:00:00+00');
RESET ratelimit.time_zone;
SHOW ratelimit.time_zone;
-- Policies: a zone of their own, and a billing anchor.  Anchored on
-- January 31 at 10:00, a monthly period starts on the 31st, or on the last
-- day of a shorter month: February 28 (29 in a leap year), March 31,
-- April 30.
-- a policy with its zone and anchor (bad ones are refused when written)
CREATE FUNCTION cal_policy(name text, lim bigint, per interval,
						   zone text DEFAULT NULL, anchor timestamptz DEFAULT NULL,
						   algo text DEFAULT 'fixed_window')
RETURNS void
LANGUAGE sql
AS $$
	INSERT INTO rl_policy (name, algo, "limit", per, time_zone, period_anchor)
	VALUES (name, algo, lim, per, zone, anchor)
$$;
SELECT cal_policy('billing', 2, '1 month', anchor => '2026-01-31 10:00:00+00');
SELECT cal_policy('daily_ny', 1, '1 day', 'America/New_York');
SELECT cal_policy('billing_leap', 1, '1 month', anchor => '2024-01-31 10:00:00+00');
SELECT cal_policy('fortnight', 1, '14 days', anchor => '2026-01-07 06:00:00+00');
CREATE FUNCTION calp(key text, policy text, at timestamptz)
RETURNS TABLE (allowed boolean, remaining bigint, reset_at timestamptz,
			   retry_after double precision, per interval)
LANGUAGE sql
AS $$
	SELECT r.allowed, r.remaining, r.reset_at, r.retry_after, r.per
	FROM rl_check(key, policy, at) r
$$;
SELECT * FROM calp('t:1', 'billing', '2026-01-31 09:59:59+00');
SELECT * FROM calp('t:1', 'billing', '2026-01-31 10:00:00+00');
SELECT * FROM calp('t:1', 'billing', '2026-02-15 00:00:00+00');
SELECT * FROM calp('t:1', 'billing', '2026-02-20 00:00:00+00');
SELECT * FROM calp('t:1', 'billing', '2026-02-28 10:00:00+00');
SELECT * FROM calp('t:1', 'billing', '2026-03-31 09:59:59+00');
SELECT * FROM calp('t:1', 'billing', '2026-04-15 00:00:00+00');
SELECT * FROM calp('t:2', 'billing_leap', '2024-02-29 09:59:59+00');
SELECT * FROM calp('t:2', 'billing_leap', '2024-02-29 10:00:00+00');
SELECT * FROM calp('t:3', 'daily_ny', '2026-03-08 04:59:59+00');
SELECT * FROM calp('t:3', 'daily_ny', '2026-03-08 05:00:00+00');
SELECT * FROM calp('t:4', 'fortnight', '2026-01-07 05:59:59+00');
SELECT * FROM calp('t:4', 'fortnight', '2026-01-21 06:00:00+00');
-- the policy's zone wins over the setting
SET ratelimit.time_zone = 'Asia/Tokyo';
SELECT * FROM calp('t:5', 'daily_ny', '2026-06-01 12:00:00+00');
-- a policy without a zone follows the setting at each call
UPDATE rl_policy SET per = '1 day', period_anchor = NULL WHERE name = 'billing';
SELECT * FROM calp('t:6', 'billing', '2026-06-01 12:00:00+00');
RESET ratelimit.time_zone;
SELECT * FROM calp('t:7', 'billing', '2026-06-01 12:00:00+00');
UPDATE rl_policy SET per = '1 month', period_anchor = '2026-01-31 10:00:00+00'
WHERE name = 'billing';
-- all or nothing across a monthly quota and a daily one
SELECT key, policy, allowed, remaining, reset_at
FROM rl_check_all(ARRAY['t:8', 't:8'], ARRAY['billing', 'daily_ny'],
				  at => '2026-03-05 12:00:00+00');
-- A refund gives back to the period it was taken from, and only there
SET ratelimit.refund_on_rollback = on;
BEGIN;
SELECT allowed FROM rl_check('t:9', 'billing', at => '2026-02-27 10:00:00+00');
ROLLBACK;
SELECT remaining FROM rl_check('t:9', 'billing', at => '2026-02-27 10:00:01+00', cost => 0);
-- Two calls rolled back together, one on each side of a period's start
-- (a call between them, not given back, keeps its unit): each refund goes
-- to its own period, the first to none since its period is over.
BEGIN;
SELECT allowed FROM rl_check('t:10', 'billing', at => '2026-02-28 09:59:59+00');
SET LOCAL ratelimit.refund_on_rollback = off;
SELECT allowed FROM rl_check('t:10', 'billing', at => '2026-02-28 10:00:00+00');
SET LOCAL ratelimit.refund_on_rollback = on;
SELECT allowed FROM rl_check('t:10', 'billing', at => '2026-02-28 10:00:00+00');
ROLLBACK;
SELECT remaining FROM rl_check('t:10', 'billing', at => '2026-02-28 10:00:01+00', cost => 0);
RESET ratelimit.refund_on_rollback;
-- rl_usage: per key, what it used this period, its limit, what remains
-- and the period
SELECT * FROM rl_usage('billing', at => '2026-03-05 12:00:00+00') ORDER BY key;
SELECT * FROM rl_usage('billing', 't:1', '2026-04-15 00:00:01+00');
SELECT * FROM rl_usage('billing', 'nobody', '2026-04-15 00:00:01+00');
-- a sliding log: the units of the last W; a bucket: no "used"
INSERT INTO rl_policy (name, algo, "limit", per) VALUES
	('u_log', 'sliding_window_log', 5, '1 hour'),
	('u_bucket', 'token_bucket', 5, '1 hour');
SELECT rl_allow('u:1', 'u_log', '2026-03-05 12:00:00+00', 2),
	   rl_allow('u:1', 'u_bucket', '2026-03-05 12:00:00+00', 2);
SELECT * FROM rl_usage('u_log', at => '2026-03-05 12:30:00+00');
SELECT * FROM rl_usage('u_bucket', at => '2026-03-05 12:06:00+00');
-- The IETF fields (draft-ietf-httpapi-ratelimit-headers-11) beside the
-- X-RateLimit ones: q the capacity, w the window (none for months), r what
-- remains, t the seconds to reset_at (to retry_after when denied)
SELECT rl_headers(r, 'billing', '2026-03-05 12:00:00+00')
FROM rl_check('h:1', 'billing', at => '2026-03-05 12:00:00+00') r;
SELECT rl_headers(r, 'per_minute', '2026-03-05 12:00:15+00')
FROM rl_check('h:2', 'fixed_window', 10, '1 minute', at => '2026-03-05 12:00:15+00') r;
SELECT rl_headers(r, 'a "quoted" \ name', '2026-03-05 12:00:15+00')
FROM rl_check('h:2', 'fixed_window', 1, '1 minute', at => '2026-03-05 12:00:16+00') r;
SELECT rl_headers(r, 'bucket', '2026-03-05 12:00:00+00')
FROM rl_check('h:3', 'token_bucket', 10, '1 minute', 5, 20, '2026-03-05 12:00:00+00') r;
-- an Integer has at most 15 digits: larger counts are sent as the largest
SELECT rl_headers(r, 'huge', '2026-03-05 12:00:00+00')
FROM rl_check('h:5', 'token_bucket', 9223372036854775807, '36525 days', 1,
			  at => '2026-03-05 12:00:00+00') r;
-- a quota trigger's calendar window follows the setting at each row too,
-- though the trigger keeps its policy's part of the request (#9): under UTC
-- the day of 2026-06-01 12:00 ends in 12 hours, under Tokyo's in 3
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('daily_rows', 'fixed_window', 1, '1 day');
CREATE TABLE cal_rows (tenant int);
CREATE TRIGGER cal_rows_quota BEFORE INSERT ON cal_rows FOR EACH ROW
EXECUTE FUNCTION rl_enforce('daily_rows', 'tenant');
SET ratelimit.trigger_at = '2026-06-01 12:00:00+00';
SET ratelimit.time_zone = 'UTC';
INSERT INTO cal_rows VALUES (1);
INSERT INTO cal_rows VALUES (1);
SET ratelimit.time_zone = 'Asia/Tokyo';
INSERT INTO cal_rows VALUES (2);
INSERT INTO cal_rows VALUES (2);
RESET ratelimit.time_zone;
RESET ratelimit.trigger_at;
DROP TABLE cal_rows;
DELETE FROM rl_policy WHERE name = 'daily_rows';
-- Bad input
\set VERBOSITY sqlstate
SELECT rl_allow('k', 'token_bucket', 1, '1 month');
SELECT rl_allow('k', 'sliding_window_counter', 1, '1 year');
SELECT rl_allow('k', 'fixed_window', 1, '1 month 2 days');
SELECT rl_allow('k', 'fixed_window', 1, '101 years');
SELECT rl_allow('k', 'fixed_window', 1, '-1 month');
SET ratelimit.time_zone = 'Mars/Olympus_Mons';
SELECT rl_usage('no_such_policy');
\set VERBOSITY default
SELECT rl_allow('k', 'token_bucket', 1, '1 month');
SELECT rl_allow('k', 'fixed_window', 1, '1 month 2 days');
SET ratelimit.time_zone = 'Mars/Olympus_Mons';
SELECT cal_policy('bad', 1, '1 day', 'Mars/Olympus_Mons');
SELECT cal_policy('bad', 1, '1 day', 'Europe/Paris', algo => 'token_bucket');
SELECT cal_policy('bad', 1, '1 hour', anchor => '2026-01-01 00:00:00+00');
SELECT cal_policy('bad', 1, '1 month', anchor => 'infinity');
INSERT INTO rl_policy (name, algo, "limit", per, backend)
VALUES ('remote_month', 'fixed_window', 1, '1 month', 'redis');
SELECT * FROM rl_usage('remote_month');
SELECT rl_headers(r, 'caf' || chr(233)) FROM rl_check('h:4', 'billing', at => '2026-03-05 12:00:00+00') r;
DELETE FROM rl_policy;
DROP FUNCTION cal(text, bigint, interval, timestamptz, bigint);
DROP FUNCTION calp(text, text, timestamptz);
DROP FUNCTION cal_policy(text, bigint, interval, text, timestamptz, text);
