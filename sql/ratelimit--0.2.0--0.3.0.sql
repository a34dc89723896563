/* ratelimit--0.2.0--0.3.0.sql: hardening, engines, quotas that survive */

\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.3.0'" to load this file. \quit

-- ---- Decision counters: slots that are given back, overflow in sight ----

-- The counter table's slots, how many are held, and the decisions counted
-- under "(other)" (identities that found no slot) since the last reset.
CREATE FUNCTION rl_stats_info(
	OUT slots integer,
	OUT slots_used integer,
	OUT overflow bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_stats_info'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION rl_stats_info() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_stats_info() TO pg_monitor;

-- rl_status gains the counter table's figures (new columns at the end, so
-- the view keeps its privileges)
CREATE OR REPLACE VIEW rl_status AS
	SELECT s.capacity, s.used, s.pool_blocks, s.pool_used, s.reclaimed,
		   s.refused, s.partitions, r.breaker_open, r.breaker_until,
		   r.calls AS redis_calls, r.failures AS redis_failures,
		   r.skipped AS redis_skipped, r.last_error AS redis_last_error,
		   r.last_error_at AS redis_last_error_at,
		   i.slots AS stats_slots, i.slots_used AS stats_slots_used,
		   i.overflow AS stats_overflow
	FROM rl_store_info() s, rl_redis_info() r, rl_stats_info() i;

