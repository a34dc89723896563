/* ratelimit--0.2.0--0.3.0.sql: hardening, engines, quotas that survive */

\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.3.0'" to load this file. \quit

-- ---- Store isolation: owners and their shares (docs/design.md) ----

-- rl_store_info gains the evictions made for owners under their share and
-- the number of owners holding entries or pool blocks; rl_status, built on
-- it, is made again with them.
DROP VIEW rl_status;
DROP FUNCTION rl_store_info();
CREATE FUNCTION rl_store_info(
	OUT capacity bigint,
	OUT used bigint,
	OUT pool_blocks bigint,
	OUT pool_used bigint,
	OUT reclaimed bigint,
	OUT refused bigint,
	OUT partitions integer,
	OUT evicted bigint,
	OUT owners integer)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_store_info'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION rl_store_info() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_store_info() TO pg_monitor;

CREATE VIEW rl_status AS
	SELECT s.capacity, s.used, s.pool_blocks, s.pool_used, s.reclaimed,
		   s.refused, s.partitions, s.evicted, s.owners,
		   r.breaker_open, r.breaker_until,
		   r.calls AS redis_calls, r.failures AS redis_failures,
		   r.skipped AS redis_skipped, r.last_error AS redis_last_error,
		   r.last_error_at AS redis_last_error_at
	FROM rl_store_info() s, rl_redis_info() r;
REVOKE ALL ON rl_status FROM PUBLIC;
GRANT SELECT ON rl_status TO pg_monitor;

-- Who holds the store: per (database, role), its keys and pool blocks,
-- the entries it lost to owners under their share, and its calls refused.
CREATE FUNCTION rl_owners(
	OUT dbid oid,
	OUT roleid oid,
	OUT keys bigint,
	OUT pool_blocks bigint,
	OUT evicted bigint,
	OUT refused bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_owners'
LANGUAGE C VOLATILE;

CREATE VIEW rl_owners AS
	SELECT d.datname, r.rolname, o.keys, o.pool_blocks, o.evicted, o.refused
	FROM rl_owners() o
		LEFT JOIN pg_catalog.pg_database d ON d.oid = o.dbid
		LEFT JOIN pg_catalog.pg_roles r ON r.oid = o.roleid;

REVOKE ALL ON FUNCTION rl_owners() FROM PUBLIC;
REVOKE ALL ON rl_owners FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_owners() TO pg_monitor;
GRANT SELECT ON rl_owners TO pg_monitor;
