/* ratelimit--0.1.0--0.2.0.sql: Redis backend, policies, quota triggers */

\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.2.0'" to load this file. \quit

-- ---- Redis backend (docs/redis.md) ----

-- The circuit breaker and failure counters, server-wide.
CREATE FUNCTION rl_redis_info(
	OUT breaker_open boolean,
	OUT breaker_until timestamptz,
	OUT calls bigint,
	OUT failures bigint,
	OUT skipped bigint,
	OUT breaker_trips bigint,
	OUT connects bigint,
	OUT redirects bigint,
	OUT script_loads bigint,
	OUT batched bigint,
	OUT last_error text,
	OUT last_error_at timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_redis_info'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION rl_redis_info() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_redis_info() TO pg_monitor;

-- ---- Policies: named limits, stored as data ----

CREATE TABLE rl_policy (
	name text PRIMARY KEY,
	algo text NOT NULL,
	"limit" bigint NOT NULL,
	per interval NOT NULL DEFAULT '1 second',
	burst bigint,
	cost bigint NOT NULL DEFAULT 1,
	backend text,				-- local, redis, hybrid; NULL: ratelimit.backend
	fail_mode text,				-- open, closed, local; NULL: ratelimit.fail_mode
	shadow boolean NOT NULL DEFAULT false	-- decide and count, always allow
);
COMMENT ON TABLE rl_policy IS 'rate-limit policies: rl_allow(key, policy => name)';
SELECT pg_catalog.pg_extension_config_dump('rl_policy', '');
-- policies are read by every caller; written by administrators
REVOKE ALL ON rl_policy FROM PUBLIC;
GRANT SELECT ON rl_policy TO PUBLIC;

-- Refuse a row a call could not use (the same checks as a call's).
CREATE FUNCTION rl_policy_validate() RETURNS trigger
AS 'MODULE_PATHNAME', 'rl_policy_validate'
LANGUAGE C;
CREATE TRIGGER rl_policy_validate BEFORE INSERT OR UPDATE ON rl_policy
	FOR EACH ROW EXECUTE FUNCTION rl_policy_validate();

-- Make every session reread the policies once the change commits.
CREATE FUNCTION rl_policy_changed() RETURNS trigger
AS 'MODULE_PATHNAME', 'rl_policy_changed'
LANGUAGE C;
CREATE TRIGGER rl_policy_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rl_policy
	FOR EACH STATEMENT EXECUTE FUNCTION rl_policy_changed();

-- A key under a policy.  Pass cost and at by name: positionally, a third
-- argument would be read as the algorithm form's limit.
CREATE FUNCTION rl_allow(
	key text,
	policy text,
	at timestamptz DEFAULT NULL,
	cost bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_allow_policy'
LANGUAGE C VOLATILE;

CREATE FUNCTION rl_check(
	key text,
	policy text,
	at timestamptz DEFAULT NULL,
	cost bigint DEFAULT NULL)
RETURNS rl_decision
AS 'MODULE_PATHNAME', 'rl_check_policy'
LANGUAGE C VOLATILE;

-- All or nothing across keys (per user, per tenant, global...): either
-- every limit admits and all consume, or none consumes.
CREATE FUNCTION rl_allow_all(
	keys text[],
	policies text[],
	costs bigint[] DEFAULT NULL,
	at timestamptz DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_allow_all'
LANGUAGE C VOLATILE;

CREATE FUNCTION rl_check_all(
	keys text[],
	policies text[],
	costs bigint[] DEFAULT NULL,
	at timestamptz DEFAULT NULL)
RETURNS TABLE (
	key text,
	policy text,
	allowed boolean,
	"limit" bigint,
	remaining bigint,
	retry_after double precision,
	reset_at timestamptz,
	delay double precision)
AS 'MODULE_PATHNAME', 'rl_check_all'
LANGUAGE C VOLATILE;

-- Wait (interruptibly, at most max_wait) instead of denying; a leaky
-- bucket's admitted calls sleep their delay: traffic shaping in SQL.
CREATE FUNCTION rl_wait(
	key text,
	algo text,
	"limit" bigint,
	per interval DEFAULT '1 second',
	cost bigint DEFAULT 1,
	burst bigint DEFAULT NULL,
	max_wait interval DEFAULT '10 seconds')
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_wait'
LANGUAGE C VOLATILE;

CREATE FUNCTION rl_wait(
	key text,
	policy text,
	max_wait interval DEFAULT '10 seconds',
	cost bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_wait_policy'
LANGUAGE C VOLATILE;

-- rl_reset learns to reset a key under a policy.
DROP FUNCTION rl_reset(text, text);
CREATE FUNCTION rl_reset(key text, algo text DEFAULT NULL, policy text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rl_reset'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION rl_reset(text, text, text) FROM PUBLIC;

-- ---- Quota triggers ----

-- rl_enforce(policy, key_column [, ...] [, 'cost=expression']): a row over
-- its quota raises SQLSTATE PT429; what an aborted row consumed is given back.
CREATE FUNCTION rl_enforce() RETURNS trigger
AS 'MODULE_PATHNAME', 'rl_enforce'
LANGUAGE C;

-- ---- HTTP ----

-- The standard headers for a decision, as jsonb (Retry-After only when
-- denied; X-RateLimit-Reset in Unix seconds).
CREATE FUNCTION rl_headers(d rl_decision) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	SELECT jsonb_strip_nulls(jsonb_build_object(
		'X-RateLimit-Limit', d."limit"::text,
		'X-RateLimit-Remaining', d.remaining::text,
		'X-RateLimit-Reset', ceil(extract(epoch FROM d.reset_at))::bigint::text,
		'Retry-After', CASE WHEN NOT d.allowed
			THEN ceil(d.retry_after)::bigint::text END))
$$;

-- ---- Observability ----

-- Decision counters per (database, algorithm, policy); direct calls count
-- under a NULL policy.
CREATE FUNCTION rl_stats(
	all_databases boolean DEFAULT false,
	OUT dbid oid,
	OUT algo text,
	OUT policy text,
	OUT allowed bigint,
	OUT denied bigint,
	OUT near_limit bigint,
	OUT failed_open bigint,
	OUT failed_closed bigint,
	OUT shadow_denied bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_stats'
LANGUAGE C VOLATILE;

CREATE VIEW rl_stats AS
	SELECT d.datname, s.algo, s.policy, s.allowed, s.denied, s.near_limit,
		   s.failed_open, s.failed_closed, s.shadow_denied
	FROM rl_stats(true) s LEFT JOIN pg_catalog.pg_database d ON d.oid = s.dbid;

CREATE FUNCTION rl_stats_reset() RETURNS void
AS 'MODULE_PATHNAME', 'rl_stats_reset'
LANGUAGE C VOLATILE;

-- The keys holding state, with what a look at them would report now.
CREATE FUNCTION rl_keys(
	all_databases boolean DEFAULT false,
	OUT dbid oid,
	OUT algo text,
	OUT policy text,
	OUT key text,
	OUT last_seen timestamptz,
	OUT reset_at timestamptz,
	OUT remaining bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_keys'
LANGUAGE C VOLATILE;

-- The whole limiter at a glance: the store and the Redis backend.
CREATE VIEW rl_status AS
	SELECT s.capacity, s.used, s.pool_blocks, s.pool_used, s.reclaimed,
		   s.refused, s.partitions, r.breaker_open, r.breaker_until,
		   r.calls AS redis_calls, r.failures AS redis_failures,
		   r.skipped AS redis_skipped, r.last_error AS redis_last_error,
		   r.last_error_at AS redis_last_error_at
	FROM rl_store_info() s, rl_redis_info() r;

-- Monitoring roles read everything above; resetting is for administrators.
REVOKE ALL ON FUNCTION rl_stats(boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION rl_keys(boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION rl_stats_reset() FROM PUBLIC;
REVOKE ALL ON rl_stats, rl_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_stats(boolean), rl_keys(boolean) TO pg_monitor;
GRANT SELECT ON rl_stats, rl_status TO pg_monitor;
