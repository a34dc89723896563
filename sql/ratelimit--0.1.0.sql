/* ratelimit--0.1.0.sql: rate limits and quotas in shared memory */

\echo Use "CREATE EXTENSION ratelimit" to load this file. \quit

-- What one decision reports (see docs/reference.md).
CREATE TYPE rl_decision AS (
	allowed boolean,
	"limit" bigint,
	remaining bigint,
	retry_after double precision,
	reset_at timestamptz,
	delay double precision
);

-- Consume cost units of key's allowance under algo; true if admitted.
CREATE FUNCTION rl_allow(
	key text,
	algo text,
	"limit" bigint,
	per interval DEFAULT '1 second',
	cost bigint DEFAULT 1,
	burst bigint DEFAULT NULL,
	at timestamptz DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_allow'
LANGUAGE C VOLATILE;

-- The same decision with everything a caller needs for HTTP 429 headers.
CREATE FUNCTION rl_check(
	key text,
	algo text,
	"limit" bigint,
	per interval DEFAULT '1 second',
	cost bigint DEFAULT 1,
	burst bigint DEFAULT NULL,
	at timestamptz DEFAULT NULL)
RETURNS rl_decision
AS 'MODULE_PATHNAME', 'rl_check'
LANGUAGE C VOLATILE;

-- Forget a key's state (one algorithm, or all when algo is NULL).
CREATE FUNCTION rl_reset(key text, algo text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rl_reset'
LANGUAGE C VOLATILE;

-- Forget every key of this database (or of every database).
CREATE FUNCTION rl_reset_all(all_databases boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rl_reset_all'
LANGUAGE C VOLATILE;

-- Store-wide figures: capacity and use of the key table and the pool.
CREATE FUNCTION rl_store_info(
	OUT capacity bigint,
	OUT used bigint,
	OUT pool_blocks bigint,
	OUT pool_used bigint,
	OUT reclaimed bigint,
	OUT refused bigint,
	OUT partitions integer)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_store_info'
LANGUAGE C VOLATILE;

-- Resetting state lifts limits: administrators only.  Store figures are
-- for monitoring roles.
REVOKE ALL ON FUNCTION rl_reset(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION rl_reset_all(boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION rl_store_info() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_store_info() TO pg_monitor;
