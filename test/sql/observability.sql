-- Counters per policy, live keys, store figures: readable by monitoring
-- roles, resettable by administrators.
SET timezone = 'UTC';
SELECT rl_stats_reset();
SELECT rl_reset_all() >= 0 AS cleared;
INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('o_api', 'fixed_window', 5, '1 hour');
INSERT INTO rl_policy (name, algo, "limit", per, shadow) VALUES ('o_trial', 'token_bucket', 1, '1 hour', true);
-- 7 calls at a limit of 5: 5 allowed (the 4th and 5th with <= 20% left), 2 denied
SELECT count(*) FILTER (WHERE rl_allow('k1', 'o_api', at => '2030-01-01 00:00:00+00'::timestamptz + i * interval '1 us'))
FROM generate_series(1, 7) i;
-- a shadow policy allows all, and counts what it would have denied
SELECT count(*) FILTER (WHERE rl_allow('k1', 'o_trial', at => '2030-01-01 00:00:00+00'::timestamptz + i * interval '1 us'))
FROM generate_series(1, 3) i;
SELECT rl_allow('k2', 'sliding_window_log', 10, '1 hour', at => '2030-01-01');
SELECT algo, policy, allowed, denied, near_limit, failed_open, failed_closed, shadow_denied
FROM rl_stats WHERE datname = current_database() AND allowed + denied > 0
ORDER BY policy NULLS FIRST, algo;
-- live keys: for policy keys, what a look would report
SELECT algo, policy, key, last_seen, reset_at, remaining FROM rl_keys() ORDER BY key, algo;
-- keys back to a new key's state are not listed
SELECT rl_allow('k3', 'fixed_window', 1, '1 second', at => '2020-01-01');
SELECT count(*) FROM rl_keys() WHERE key = 'k3';
-- keys as text and as the bytes stored
SELECT policy, key, key_bytes, policy_bytes FROM rl_keys() ORDER BY key, algo;
-- the store, Redis and the counter table at a glance: four identities (two
-- policies, two algorithms called directly) hold a slot, none overflowed
SELECT used, refused, breaker_open, redis_calls, stats_slots, stats_slots_used,
	   stats_overflow
FROM rl_status;
SELECT * FROM rl_stats_info();
-- the queries docs/reference.md gives for the Prometheus exporter: every
-- row of rl_stats, "(other)" included, and the overflow
SELECT datname = current_database() AS here, algo, policy, allowed, denied FROM (
	SELECT coalesce(datname, '') AS datname, coalesce(algo, '') AS algo,
		   coalesce(policy, '') AS policy, sum(allowed)::bigint AS allowed,
		   sum(denied)::bigint AS denied, sum(near_limit)::bigint AS near_limit,
		   sum(failed_open)::bigint AS failed_open,
		   sum(failed_closed)::bigint AS failed_closed,
		   sum(shadow_denied)::bigint AS shadow_denied
	FROM rl_stats GROUP BY 1, 2, 3) q
WHERE datname IN ('', current_database()) ORDER BY policy, algo;
SELECT stats_slots, stats_slots_used, stats_overflow FROM (
	SELECT capacity, used, pool_blocks, pool_used, reclaimed, refused,
		   breaker_open::int AS redis_breaker_open, redis_failures,
		   stats_slots, stats_slots_used, stats_overflow
	FROM rl_status) q;
-- privileges: a monitoring role reads, an ordinary role does not
CREATE ROLE regress_rl_monitor IN ROLE pg_monitor;
CREATE ROLE regress_rl_nobody;
SET ROLE regress_rl_monitor;
SELECT count(*) > 0 AS monitor_reads_stats FROM rl_stats;
SELECT count(*) > 0 AS monitor_reads_keys FROM rl_keys();
SELECT count(*) = 1 AS monitor_reads_status FROM rl_status;
SELECT slots FROM rl_stats_info();
SELECT rl_stats_reset();
RESET ROLE;
SET ROLE regress_rl_nobody;
SELECT * FROM rl_stats;
SELECT * FROM rl_keys();
SELECT * FROM rl_status;
SELECT * FROM rl_stats_info();
RESET ROLE;
DROP ROLE regress_rl_monitor;
DROP ROLE regress_rl_nobody;
-- resetting zeroes the counters and gives every slot back
SELECT rl_stats_reset();
SELECT count(*) AS rows_after_reset FROM rl_stats WHERE datname = current_database();
SELECT slots_used, overflow FROM rl_stats_info();
-- an identity claims a slot again at its next decision
SELECT rl_allow('k1', 'o_api', at => '2030-01-01 00:00:01+00');
SELECT algo, policy, allowed, denied FROM rl_stats
WHERE datname = current_database() ORDER BY policy NULLS FIRST, algo;
SELECT slots_used, overflow FROM rl_stats_info();
