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

-- ---- rl_keys: text valid in the caller's encoding, and the raw bytes ----

-- Keys and policy names of other databases are converted to this
-- database's encoding, NULL where they cannot be; key_bytes and
-- policy_bytes are the bytes as stored.  New OUT columns: drop and create.
DROP FUNCTION rl_keys(boolean);
CREATE FUNCTION rl_keys(
	all_databases boolean DEFAULT false,
	OUT dbid oid,
	OUT algo text,
	OUT policy text,
	OUT key text,
	OUT last_seen timestamptz,
	OUT reset_at timestamptz,
	OUT remaining bigint,
	OUT key_bytes bytea,
	OUT policy_bytes bytea)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_keys'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION rl_keys(boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_keys(boolean) TO pg_monitor;
