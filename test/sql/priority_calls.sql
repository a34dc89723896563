-- Load shedding (docs/quotas.md, "Load shedding") in the functions that
-- wait or decide several keys at once, and how shed denials are counted
-- (rl_stats.shed).  Rate decisions at explicit times where the function
-- takes one; rl_wait, which does not, under windows of a day (nothing
-- expires meanwhile) and with max_wait 0 (it never sleeps).

-- rl_wait called directly: a 20% reserve of 10 keeps 2 from sheddable
-- calls, 1 from normal ones; critical calls reach the limit
SELECT count(*) FILTER (WHERE rl_wait('pw:d', 'sliding_window_log', 10,
	'1 day', max_wait => '0', priority => 'sheddable', reserve => 0.2))
	AS sheddable
FROM generate_series(1, 12);
SELECT rl_wait('pw:d', 'sliding_window_log', 10, '1 day', max_wait => '0',
	priority => 'normal', reserve => 0.2) AS normal_9th,
	rl_wait('pw:d', 'sliding_window_log', 10, '1 day', max_wait => '0',
	priority => 'normal', reserve => 0.2) AS normal_10th,
	rl_wait('pw:d', 'sliding_window_log', 10, '1 day', max_wait => '0',
	priority => 'critical', reserve => 0.2) AS critical_10th,
	rl_wait('pw:d', 'sliding_window_log', 10, '1 day', max_wait => '0',
	priority => 'critical', reserve => 0.2) AS critical_11th;
-- without a priority, a reserve changes nothing
SELECT count(*) FILTER (WHERE rl_wait('pw:n', 'sliding_window_log', 10,
	'1 day', max_wait => '0', reserve => 0.2)) AS unprioritised
FROM generate_series(1, 12);

-- rl_wait under a policy: its reserve
INSERT INTO rl_policy (name, algo, "limit", per, reserve)
VALUES ('pc_wait', 'sliding_window_log', 10, '1 day', 0.2);
SELECT count(*) FILTER (WHERE rl_wait('pw:p', 'pc_wait', max_wait => '0',
	priority => 'sheddable')) AS sheddable
FROM generate_series(1, 12);
SELECT rl_wait('pw:p', 'pc_wait', max_wait => '0', priority => 'critical')
	AS critical;
-- a denied sheddable call would wait for the reserve to be free again:
-- not within max_wait here (positional arguments)
SELECT rl_wait('pw:p', 'pc_wait', '0', 1, 'sheddable') AS positional;

-- rl_allow_all and rl_check_all: the call's priority under each key's
-- policy, all or nothing.  Two policies of 10 per hour, reserves of 20%
-- and none: sheddable calls stop at 8 on the first, whatever the second
-- has left
INSERT INTO rl_policy (name, algo, "limit", per, reserve)
VALUES ('pc_a', 'fixed_window', 10, '1 hour', 0.2),
	('pc_b', 'fixed_window', 10, '1 hour', 0);
SELECT count(*) FILTER (WHERE rl_allow_all(ARRAY['pa:1', 'pa:1'],
	ARRAY['pc_a', 'pc_b'], at => t(0), priority => 'sheddable'))
	AS sheddable
FROM generate_series(1, 12);
SELECT key, policy, allowed, remaining, capacity
FROM rl_check_all(ARRAY['pa:1', 'pa:1'], ARRAY['pc_a', 'pc_b'],
	at => t(0), priority => 'sheddable');
SELECT key, policy, allowed, remaining
FROM rl_check_all(ARRAY['pa:1', 'pa:1'], ARRAY['pc_a', 'pc_b'],
	at => t(0), priority => 'normal');
SELECT rl_allow_all(ARRAY['pa:1', 'pa:1'], ARRAY['pc_a', 'pc_b'],
	at => t(0), priority => 'critical') AS critical,
	rl_allow_all(ARRAY['pa:1', 'pa:1'], ARRAY['pc_a', 'pc_b'],
	at => t(0), priority => 'critical') AS critical_past_limit;
-- no priority, a NULL one: none; a bad one is an error (22023)
SELECT rl_allow_all(ARRAY['pa:2'], ARRAY['pc_a'], at => t(0)) AS none,
	rl_allow_all(ARRAY['pa:2'], ARRAY['pc_a'], at => t(0),
		priority => NULL) AS null_priority;
SELECT rl_allow_all(ARRAY['pa:2'], ARRAY['pc_a'], priority => 'low');
SELECT * FROM rl_check_all(ARRAY['pa:2'], ARRAY['pc_a'], priority => 'High');
SELECT rl_wait('pw:x', 'pc_wait', max_wait => '0', priority => 'urgent');
SELECT rl_wait('pw:x', 'fixed_window', 10, max_wait => '0',
	priority => 'normal', reserve => 1);

-- rl_stats counts a denial its priority's headroom alone caused as shed
-- (and denied): under a policy of 10 with a 20% reserve, 8 sheddable
-- calls are admitted, 2 more shed; 2 critical calls take the reserve;
-- then the key is full, and neither a sheddable nor a critical call is
-- shed (the limit denies them)
INSERT INTO rl_policy (name, algo, "limit", per, reserve)
VALUES ('pc_stats', 'token_bucket', 10, '1 hour', 0.2);
SELECT count(*) FILTER (WHERE rl_allow('ps', 'pc_stats', at => t(0),
	priority => 'sheddable')) AS sheddable
FROM generate_series(1, 10);
SELECT allowed, denied, shed FROM rl_stats WHERE policy = 'pc_stats';
SELECT count(*) FILTER (WHERE rl_allow('ps', 'pc_stats', at => t(0),
	priority => 'critical')) AS critical
FROM generate_series(1, 2);
SELECT rl_allow('ps', 'pc_stats', at => t(0), priority => 'sheddable')
	AS sheddable_full,
	rl_allow('ps', 'pc_stats', at => t(0), priority => 'critical')
	AS critical_full;
SELECT allowed, denied, shed FROM rl_stats WHERE policy = 'pc_stats';
-- a normal call costing 2 with 1 unit left is denied by the limit, not
-- shed; costing 1 with 1 left it is shed (its headroom is 1)
SELECT rl_allow('ps2', 'pc_stats', at => t(0), cost => 9,
	priority => 'critical') AS nine;
SELECT rl_allow('ps2', 'pc_stats', at => t(0), cost => 2,
	priority => 'normal') AS two,
	rl_allow('ps2', 'pc_stats', at => t(0), cost => 1,
	priority => 'normal') AS one;
SELECT allowed, denied, shed FROM rl_stats WHERE policy = 'pc_stats';
-- all or nothing and rl_wait count their shed denials alike (a cost of
-- 9 leaves room for a headroom of 1 only: admitted by an empty key)
SELECT rl_allow_all(ARRAY['pa:1'], ARRAY['pc_a'], at => t(0),
	priority => 'sheddable') AS all_shed;
SELECT rl_allow_all(ARRAY['pa:3'], ARRAY['pc_a'], at => t(0),
	costs => ARRAY[9]::bigint[], priority => 'sheddable') AS cost_nine;
SELECT policy, allowed, denied, shed FROM rl_stats
WHERE policy IN ('pc_a', 'pc_b', 'pc_wait') ORDER BY policy;
-- a direct call counts under its algorithm (a policy of NULL)
SELECT rl_allow('pd', 'leaky_bucket', 2, '1 hour', at => t(0),
	priority => 'sheddable', reserve => 0.5) AS first;
SELECT shed AS before FROM rl_stats
WHERE policy IS NULL AND algo = 'leaky_bucket'
	AND datname = current_database() \gset
SELECT rl_allow('pd', 'leaky_bucket', 2, '1 hour', at => t(0),
	priority => 'sheddable', reserve => 0.5) AS second_shed;
SELECT shed - :before AS shed_direct FROM rl_stats
WHERE policy IS NULL AND algo = 'leaky_bucket'
	AND datname = current_database();

-- a quota trigger's error for a shed row names the priority and what it
-- must leave free; a row the limit itself denies keeps the usual detail
CREATE TABLE pc_jobs (tenant int, kind text);
CREATE TRIGGER pc_jobs_quota BEFORE INSERT ON pc_jobs FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('pc_a', 'tenant', 'priority = kind');
SET ratelimit.trigger_at = '2026-01-01 00:00:00+00';
INSERT INTO pc_jobs SELECT 7, 'normal' FROM generate_series(1, 9);
INSERT INTO pc_jobs VALUES (7, 'normal');
INSERT INTO pc_jobs VALUES (7, 'sheddable');
INSERT INTO pc_jobs VALUES (7, 'critical');
INSERT INTO pc_jobs VALUES (7, 'critical');
RESET ratelimit.trigger_at;
SELECT count(*) AS rows FROM pc_jobs;

DROP TABLE pc_jobs;
DELETE FROM rl_policy WHERE name LIKE 'pc\_%';
