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

-- ---- Updating functions whose result columns change ----

-- A function's result columns cannot change in place (CREATE OR REPLACE
-- refuses), so such a function is renamed to NAME_0_2_0, created anew
-- under its name, and given the privileges granted or revoked on the old
-- one (recorded as they were: pg_dump dumps what an administrator changed,
-- as after a new install).  The old one is then dropped, unless something
-- depends on it (a view): it is kept, a member of the extension working
-- as before (the library fills results by column name or position), and a
-- WARNING names its users.  docs/reference.md, "Updating to 0.3.0", says
-- what to do.  The helper is dropped after its last use (load shedding).
CREATE FUNCTION rl_update_replaced(old regprocedure, new regprocedure)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	g record;
	users text;
BEGIN
	-- the new function's privileges: exactly the old one's (none granted
	-- or revoked: the default, as the new one has)
	IF (SELECT proacl IS NOT NULL FROM pg_proc WHERE oid = old) THEN
		EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', new);
		FOR g IN
			SELECT a.grantee, a.is_grantable
			FROM pg_proc p, aclexplode(p.proacl) a
			WHERE p.oid = old AND a.privilege_type = 'EXECUTE'
		LOOP
			EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s%s', new,
				CASE WHEN g.grantee = 0 THEN 'PUBLIC'
					ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
				CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
		END LOOP;
	END IF;
	-- Its initial privileges (what pg_dump leaves out) are the old one's,
	-- not those just granted: an administrator's grants are dumped.  (The
	-- roles they name, recorded for them from PostgreSQL 17 on, likewise.)
	DELETE FROM pg_init_privs
	WHERE classoid = 'pg_proc'::regclass AND objoid = new;
	INSERT INTO pg_init_privs (objoid, classoid, objsubid, privtype, initprivs)
	SELECT new, classoid, objsubid, privtype, initprivs
	FROM pg_init_privs
	WHERE classoid = 'pg_proc'::regclass AND objoid = old;
	DELETE FROM pg_shdepend
	WHERE classid = 'pg_proc'::regclass AND objid = new AND deptype = 'i';
	INSERT INTO pg_shdepend
	SELECT dbid, classid, new, objsubid, refclassid, refobjid, deptype
	FROM pg_shdepend
	WHERE classid = 'pg_proc'::regclass AND objid = old AND deptype = 'i';

	SELECT string_agg(pg_describe_object(classid, objid, objsubid), ', ')
	INTO users
	FROM pg_depend
	WHERE refclassid = 'pg_proc'::regclass AND refobjid = old
		AND deptype = 'n';
	IF users IS NULL THEN
		EXECUTE format('DROP FUNCTION %s', old);
	ELSE
		RAISE WARNING 'the 0.2.0 definition of % is kept as %, for %',
			new, old, users
			USING DETAIL = 'Version 0.3.0 adds result columns or arguments to it, which creates it anew; what was built on the old one keeps working as it did.',
				  HINT = format('Create those objects again over %s to see the new columns, then run ALTER EXTENSION ratelimit DROP FUNCTION %s; DROP FUNCTION %s;', new, old, old);
	END IF;
END
$$;

-- rl_keys: text valid in the caller's encoding, and the raw bytes.  Keys
-- and policy names of other databases are converted to this database's
-- encoding, NULL where they cannot be; key_bytes and policy_bytes are the
-- bytes as stored (new columns at the end).  Concurrency limits (#12):
-- in_flight, waiting and longest_hold of their keys, NULL for the others.
ALTER FUNCTION rl_keys(boolean) RENAME TO rl_keys_0_2_0;
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
	OUT policy_bytes bytea,
	OUT in_flight bigint,
	OUT waiting bigint,
	OUT longest_hold interval)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_keys'
LANGUAGE C VOLATILE;
SELECT rl_update_replaced('rl_keys_0_2_0(boolean)', 'rl_keys(boolean)');

-- Decisions report their capacity and window (docs/reference.md): what
-- remaining counts against (the burst for token_bucket and leaky_bucket,
-- the limit otherwise) and the window.  The library fills results by
-- column name, so a database still on the 0.2.0 definitions keeps working
-- with it.  CASCADE: tables made OF rl_decision gain them too.
ALTER TYPE rl_decision ADD ATTRIBUTE capacity bigint CASCADE,
	ADD ATTRIBUTE per interval CASCADE;

-- rl_check_all's rows gain the same columns (and it takes a priority:
-- load shedding, below; created anew once for both).
ALTER FUNCTION rl_check_all(text[], text[], bigint[], timestamptz)
	RENAME TO rl_check_all_0_2_0;
CREATE FUNCTION rl_check_all(
	keys text[],
	policies text[],
	costs bigint[] DEFAULT NULL,
	at timestamptz DEFAULT NULL,
	priority text DEFAULT NULL)
RETURNS TABLE (
	key text,
	policy text,
	allowed boolean,
	"limit" bigint,
	remaining bigint,
	retry_after double precision,
	reset_at timestamptz,
	delay double precision,
	capacity bigint,
	per interval)
AS 'MODULE_PATHNAME', 'rl_check_all'
LANGUAGE C VOLATILE;
SELECT rl_update_replaced(
	'rl_check_all_0_2_0(text[], text[], bigint[], timestamptz)',
	'rl_check_all(text[], text[], bigint[], timestamptz, text)');

-- X-RateLimit-Limit is the capacity, so that it bounds
-- X-RateLimit-Remaining (a bucket's burst may exceed its limit).
CREATE OR REPLACE FUNCTION rl_headers(d rl_decision) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	SELECT jsonb_strip_nulls(jsonb_build_object(
		'X-RateLimit-Limit', coalesce(d.capacity, d."limit")::text,
		'X-RateLimit-Remaining', d.remaining::text,
		'X-RateLimit-Reset', ceil(extract(epoch FROM d.reset_at))::bigint::text,
		'Retry-After', CASE WHEN NOT d.allowed
			THEN ceil(d.retry_after)::bigint::text END))
$$;

-- ---- A library that is not preloaded is reported at once ----

-- Without shared_preload_libraries every function fails (55000).  Say so
-- when the extension is created or updated, with the same message and hint
-- as those calls, as a WARNING: the extension is still created.
DO $$
DECLARE
	message text;
	hint text;
BEGIN
	PERFORM rl_store_info();
EXCEPTION WHEN object_not_in_prerequisite_state THEN
	GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
	RAISE WARNING '%', message
		USING DETAIL = 'The extension is installed, but every call of its functions fails until the library is preloaded.',
			  HINT = hint;
END $$;

-- ---- Policy changes reach every session, however they are written ----

-- Sessions reread rl_policy when a trigger announces a change.  Rows
-- written in replica mode (session_replication_role = replica) fire only
-- triggers enabled ALWAYS or REPLICA, and logical replication applies rows
-- in that mode firing row triggers only: without these, sessions on a
-- subscriber would keep the policies they had read.
ALTER TABLE rl_policy ENABLE ALWAYS TRIGGER rl_policy_changed;
CREATE TRIGGER rl_policy_applied
	AFTER INSERT OR UPDATE OR DELETE ON rl_policy
	FOR EACH ROW EXECUTE FUNCTION rl_policy_changed();
ALTER TABLE rl_policy ENABLE REPLICA TRIGGER rl_policy_applied;

-- ---- Store isolation: caps per role and per database (docs/design.md) ----

-- rl_store_info and rl_status are never dropped: a view a user built on
-- them keeps working, and privileges granted or revoked on them stay.
-- rl_store_info keeps its columns (the library fills them by name); the
-- new figures come from rl_store_shares(), a new function over the same C
-- function, and rl_status gains them as new columns at its end (CREATE OR
-- REPLACE VIEW), with the decision counters' figures (rl_stats_info,
-- above).
CREATE FUNCTION rl_store_shares(
	OUT owners integer,
	OUT role_share integer,
	OUT database_share integer,
	OUT role_keys_cap bigint,
	OUT database_keys_cap bigint,
	OUT role_pool_blocks_cap bigint,
	OUT database_pool_blocks_cap bigint,
	OUT top_role_keys bigint,
	OUT top_database_keys bigint,
	OUT top_role_pool_blocks bigint,
	OUT top_database_pool_blocks bigint,
	OUT refused_role bigint,
	OUT refused_database bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_store_info'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION rl_store_shares() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_store_shares() TO pg_monitor;

CREATE OR REPLACE VIEW rl_status AS
	SELECT s.capacity, s.used, s.pool_blocks, s.pool_used, s.reclaimed,
		   s.refused, s.partitions, r.breaker_open, r.breaker_until,
		   r.calls AS redis_calls, r.failures AS redis_failures,
		   r.skipped AS redis_skipped, r.last_error AS redis_last_error,
		   r.last_error_at AS redis_last_error_at, h.owners, h.role_share,
		   h.database_share, h.top_role_keys, h.top_database_keys,
		   h.top_role_pool_blocks, h.top_database_pool_blocks,
		   h.refused_role, h.refused_database,
		   i.slots AS stats_slots, i.slots_used AS stats_slots_used,
		   i.overflow AS stats_overflow
	FROM rl_store_info() s, rl_redis_info() r, rl_stats_info() i,
		 rl_store_shares() h;

-- Who holds the store: per (database, role), its keys and pool blocks and
-- its calls refused for want of room, with what its role holds in every
-- database and what its database holds (what the caps bound).
CREATE FUNCTION rl_owners(
	OUT dbid oid,
	OUT roleid oid,
	OUT keys bigint,
	OUT pool_blocks bigint,
	OUT refused bigint,
	OUT role_keys bigint,
	OUT role_pool_blocks bigint,
	OUT database_keys bigint,
	OUT database_pool_blocks bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_owners'
LANGUAGE C VOLATILE;

CREATE VIEW rl_owners AS
	SELECT d.datname, r.rolname, o.keys, o.pool_blocks, o.refused,
		   o.role_keys, o.role_pool_blocks, o.database_keys,
		   o.database_pool_blocks
	FROM rl_owners() o
		LEFT JOIN pg_catalog.pg_database d ON d.oid = o.dbid
		LEFT JOIN pg_catalog.pg_roles r ON r.oid = o.roleid;

REVOKE ALL ON FUNCTION rl_owners() FROM PUBLIC;
REVOKE ALL ON rl_owners FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_owners() TO pg_monitor;
GRANT SELECT ON rl_owners TO pg_monitor;

-- ---- One door, two tables of functions: refunds after the transaction ----

-- Redis refunds are no longer sent inside an abort: they are queued and
-- sent after the transaction (docs/redis.md, "The scripts").
-- rl_redis_info counts them: queued, sent (taken by Redis), dropped (the
-- queue full, the breaker open, Redis failing, the session gone).  New OUT
-- columns: created anew, its privileges kept (rl_update_replaced, above).
-- rl_status over it is not dropped (its privileges and the views users
-- built on it stay): it reads no Redis figure while the function is made
-- again, then reads them again.
CREATE OR REPLACE VIEW rl_status AS
	SELECT s.capacity, s.used, s.pool_blocks, s.pool_used, s.reclaimed,
		   s.refused, s.partitions, NULL::boolean AS breaker_open,
		   NULL::timestamptz AS breaker_until, NULL::bigint AS redis_calls,
		   NULL::bigint AS redis_failures, NULL::bigint AS redis_skipped,
		   NULL::text AS redis_last_error,
		   NULL::timestamptz AS redis_last_error_at, h.owners, h.role_share,
		   h.database_share, h.top_role_keys, h.top_database_keys,
		   h.top_role_pool_blocks, h.top_database_pool_blocks,
		   h.refused_role, h.refused_database,
		   i.slots AS stats_slots, i.slots_used AS stats_slots_used,
		   i.overflow AS stats_overflow
	FROM rl_store_info() s, rl_stats_info() i, rl_store_shares() h;
ALTER FUNCTION rl_redis_info() RENAME TO rl_redis_info_0_2_0;
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
	OUT last_error_at timestamptz,
	OUT refunds_queued bigint,
	OUT refunds_sent bigint,
	OUT refunds_dropped bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_redis_info'
LANGUAGE C VOLATILE;

CREATE OR REPLACE VIEW rl_status AS
	SELECT s.capacity, s.used, s.pool_blocks, s.pool_used, s.reclaimed,
		   s.refused, s.partitions, r.breaker_open, r.breaker_until,
		   r.calls AS redis_calls, r.failures AS redis_failures,
		   r.skipped AS redis_skipped, r.last_error AS redis_last_error,
		   r.last_error_at AS redis_last_error_at, h.owners, h.role_share,
		   h.database_share, h.top_role_keys, h.top_database_keys,
		   h.top_role_pool_blocks, h.top_database_pool_blocks,
		   h.refused_role, h.refused_database,
		   i.slots AS stats_slots, i.slots_used AS stats_slots_used,
		   i.overflow AS stats_overflow
	FROM rl_store_info() s, rl_redis_info() r, rl_stats_info() i,
		 rl_store_shares() h;
SELECT rl_update_replaced('rl_redis_info_0_2_0()', 'rl_redis_info()');

-- rl_reset's C entry point for this version's definition (the library
-- keeps "rl_reset" for databases still on 0.1.0's or 0.2.0's).
CREATE OR REPLACE FUNCTION rl_reset(key text, algo text DEFAULT NULL, policy text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rl_reset_0_3'
LANGUAGE C VOLATILE;

-- ---- Billing periods, usage and the IETF RateLimit fields (#11) ----

-- Calendar periods for fixed_window (docs/algorithms.md): the zone days,
-- weeks and months are counted in (NULL: ratelimit.time_zone), and the
-- instant a policy's periods start from (NULL: midnight, Monday for
-- weeks, the 1st of the month, January for several months).
ALTER TABLE rl_policy
	ADD COLUMN time_zone text,
	ADD COLUMN period_anchor timestamptz;

-- Per key of a policy: what it used in its current period, its limit and
-- what remains, and the period (docs/reference.md says what "used" and the
-- period are for each algorithm).  at: the time to look at (as rl_check's
-- "at", for superusers and ratelimit_admin).
CREATE FUNCTION rl_usage(
	policy text,
	for_key text DEFAULT NULL,
	at timestamptz DEFAULT NULL,
	OUT key text,
	OUT used bigint,
	OUT "limit" bigint,
	OUT remaining bigint,
	OUT period_start timestamptz,
	OUT period_end timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_usage'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION rl_usage(text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_usage(text, text, timestamptz) TO pg_monitor;

-- A policy name as a structured-field String (RFC 9651): printable ASCII,
-- with " and \ escaped.
CREATE FUNCTION rl_sf_string(name text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
	IF name !~ '^[ -~]*$' THEN
		RAISE EXCEPTION 'policy name "%" cannot be a RateLimit header field''s name', name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A structured-field String holds printable ASCII characters only.';
	END IF;
	RETURN '"' || replace(replace(name, '\', '\\'), '"', '\"') || '"';
END $$;

-- A count as a structured-field Integer (RFC 9651, section 3.3.1): at
-- most 15 digits, so a larger one is sent as 999999999999999 (a limit
-- of 2^63 - 1 is "more than a client will use" either way).
CREATE FUNCTION rl_sf_integer(n numeric) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
	SELECT least(n, 999999999999999)::bigint::text
$$;

-- The headers of rl_headers(d) and the RateLimit-Policy and RateLimit
-- fields of draft-ietf-httpapi-ratelimit-headers-11 (May 2026, the latest
-- draft) for a policy of that name: q the capacity, w the window in
-- seconds (left out for months, which have no fixed length), r what
-- remains, t the seconds until the allowance is back (reset_at), or when
-- denied until a retry may pass (retry_after, so that Retry-After is
-- never before its end); each an Integer of at most 15 digits.  at: the
-- time of the decision (NULL: the statement's start), for the delta t.
CREATE FUNCTION rl_headers(d rl_decision, policy text,
						   at timestamptz DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
	SELECT rl_headers(d) || jsonb_strip_nulls(jsonb_build_object(
		'RateLimit-Policy', rl_sf_string(policy) ||
			';q=' || rl_sf_integer(coalesce(d.capacity, d."limit")) ||
			CASE WHEN d.per IS NOT NULL AND extract(month FROM d.per) = 0
				AND extract(year FROM d.per) = 0
				THEN ';w=' || rl_sf_integer(ceil(extract(epoch FROM d.per)))
				ELSE '' END,
		'RateLimit', rl_sf_string(policy) ||
			';r=' || rl_sf_integer(d.remaining) ||
			';t=' || rl_sf_integer(CASE WHEN NOT d.allowed
				THEN ceil(d.retry_after::numeric)
				ELSE greatest(0, ceil(extract(epoch FROM
					d.reset_at - coalesce(at, statement_timestamp()))))
				END)))
$$;

-- ---- Per-key overrides and blocks (docs/quotas.md, "Per-key overrides") ----

-- One row per key whose limits differ from its policy's: another limit or
-- burst (a plan: raised or lowered), a block until a time ('infinity': no
-- end), or no limit at all.  Sessions read it with the policies, after the
-- same invalidations: a change applies at the next call once committed,
-- and a key keeps what it has used.  Deleting or renaming a policy takes
-- its overrides with it.
CREATE TABLE rl_override (
	policy text NOT NULL REFERENCES rl_policy (name)
		ON UPDATE CASCADE ON DELETE CASCADE,
	key text NOT NULL,
	"limit" bigint,				-- NULL: the policy's
	burst bigint,				-- NULL: the policy's (or the limit, as its)
	unlimited boolean NOT NULL DEFAULT false,	-- admit, count nothing
	blocked_until timestamptz,	-- deny until then; NULL: not blocked
	period_anchor timestamptz,	-- the key's billing anchor; NULL: the policy's
	PRIMARY KEY (policy, key)
);
COMMENT ON TABLE rl_override IS 'rate-limit overrides: another limit, a block or no limit for one key under a policy';

-- What rl_override and rl_policy_limit, the parts of the policies that
-- sessions read with rl_policy, both get: pg_dump dumps their rows; every
-- caller reads them, administrators write them; the C function
-- TABLE_validate refuses a row a call could not use (a call's checks, in
-- a BEFORE row trigger of that name); and every change makes sessions
-- reread the policies, as rl_policy's do (rl_policy_changed, from the
-- statement trigger TABLE_changed, which fires in replica mode too, and
-- the row trigger TABLE_applied for the rows logical replication
-- applies).  Dropped after its last use (rl_policy_limit).
CREATE FUNCTION rl_setup_policy_part(tab text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	rel regclass := format('@extschema@.%I', tab)::regclass;
BEGIN
	PERFORM pg_extension_config_dump(rel, '');
	EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', rel);
	EXECUTE format('GRANT SELECT ON %s TO PUBLIC', rel);
	EXECUTE format('CREATE FUNCTION @extschema@.%I() RETURNS trigger '
		'AS %L, %L LANGUAGE C', tab || '_validate', 'MODULE_PATHNAME',
		tab || '_validate');
	EXECUTE format('CREATE TRIGGER %I BEFORE INSERT OR UPDATE ON %s '
		'FOR EACH ROW EXECUTE FUNCTION @extschema@.%I()',
		tab || '_validate', rel, tab || '_validate');
	EXECUTE format('CREATE TRIGGER %I '
		'AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s '
		'FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.rl_policy_changed()',
		tab || '_changed', rel);
	EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', rel,
		tab || '_changed');
	EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON %s '
		'FOR EACH ROW EXECUTE FUNCTION @extschema@.rl_policy_changed()',
		tab || '_applied', rel);
	EXECUTE format('ALTER TABLE %s ENABLE REPLICA TRIGGER %I', rel,
		tab || '_applied');
END
$$;
SELECT rl_setup_policy_part('rl_override');

-- Block a key under a policy for a time (NULL: until rl_unblock), from
-- "at" (NULL: now).  Returns the end of the block.  Writes rl_override,
-- so its caller needs the privileges of whoever manages policies.
CREATE FUNCTION rl_block(
	key text,
	policy text,
	duration interval DEFAULT NULL,
	at timestamptz DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	until timestamptz;
BEGIN
	IF key IS NULL OR policy IS NULL THEN
		RAISE EXCEPTION '"key" and "policy" must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF duration IS NOT NULL AND duration <= interval '0' THEN
		RAISE EXCEPTION '"duration" must be positive'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Pass NULL for a block without an end; rl_unblock lifts a block.';
	END IF;
	until := CASE WHEN duration IS NULL THEN timestamptz 'infinity'
		ELSE coalesce(at, now()) + duration END;
	INSERT INTO @extschema@.rl_override AS o (policy, key, blocked_until)
	VALUES (policy, key, until)
	ON CONFLICT ON CONSTRAINT rl_override_pkey
	DO UPDATE SET blocked_until = EXCLUDED.blocked_until;
	RETURN until;
END
$$;
REVOKE ALL ON FUNCTION rl_block(text, text, interval, timestamptz) FROM PUBLIC;

-- Lift a key's block; the row goes when nothing else is left in it.
-- Returns whether the key had a block (ended or not).
CREATE FUNCTION rl_unblock(key text, policy text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	found_one boolean;
BEGIN
	UPDATE @extschema@.rl_override o SET blocked_until = NULL
	WHERE o.policy = rl_unblock.policy AND o.key = rl_unblock.key
		AND o.blocked_until IS NOT NULL;
	found_one := FOUND;
	DELETE FROM @extschema@.rl_override o
	WHERE o.policy = rl_unblock.policy AND o.key = rl_unblock.key
		AND o."limit" IS NULL AND o.burst IS NULL AND NOT o.unlimited
		AND o.blocked_until IS NULL;
	RETURN found_one;
END
$$;
REVOKE ALL ON FUNCTION rl_unblock(text, text) FROM PUBLIC;

-- Sessions that read the policies before rl_override existed read them
-- again, overrides included, once this update commits.
UPDATE rl_policy SET name = name WHERE false;

-- ---- Penalty box: a policy's block after a denial (docs/quotas.md) ----

-- After a call under the policy is denied, its key is denied for this
-- long (retry_after says until when); NULL: no penalty box.
ALTER TABLE rl_policy ADD COLUMN block_duration interval;

-- ---- Charges after the fact: rl_adjust (docs/quotas.md) ----

-- Charge delta units to a key under a policy once the real cost is known
-- (past the limit if so: later calls are denied until it recovers), or
-- give -delta units back; outside of transaction rollback.  Returns a
-- look (cost 0) at the key's state after it.  Revoked from PUBLIC: a
-- give-back lifts a key's limit, as rl_reset does; grant it to the roles
-- that settle costs.
CREATE FUNCTION rl_adjust(
	key text,
	policy text,
	delta bigint,
	at timestamptz DEFAULT NULL)
RETURNS rl_decision
AS 'MODULE_PATHNAME', 'rl_adjust'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION rl_adjust(text, text, bigint, timestamptz) FROM PUBLIC;

-- ---- Several limits in one policy (docs/quotas.md) ----

-- A policy's limits besides the one of its row in rl_policy: a call under
-- the policy is admitted only if every limit admits, all or nothing, and
-- reports the binding limit.  A row per limit, named within its policy;
-- the policy's cost, backend, fail mode, shadow, penalty box and a key's
-- block or unlimited override apply to all of them.
CREATE TABLE rl_policy_limit (
	policy text NOT NULL REFERENCES rl_policy (name)
		ON UPDATE CASCADE ON DELETE CASCADE,
	name text NOT NULL,
	algo text NOT NULL,
	"limit" bigint NOT NULL,
	per interval NOT NULL DEFAULT '1 second',
	burst bigint,
	PRIMARY KEY (policy, name)
);
COMMENT ON TABLE rl_policy_limit IS 'rate-limit policies'' further limits: a call is admitted only if each admits';
-- dumped, read by all, checked and announced as rl_override (above)
SELECT rl_setup_policy_part('rl_policy_limit');
DROP FUNCTION rl_setup_policy_part(text);

-- ---- Concurrency limits (#12): slots held by a transaction or a session ----

-- Take a slot of the key if fewer than max_in_flight are held, waiting at
-- most max_wait for one (first come, first served); held until the
-- transaction ends ('transaction') or the session does ('session'), or
-- until rl_release.  A backend holds at most one slot of a key.
CREATE FUNCTION rl_acquire(
	key text,
	max_in_flight bigint,
	hold text DEFAULT 'transaction',
	max_wait interval DEFAULT '0',
	priority text DEFAULT NULL,			-- load shedding, below
	reserve double precision DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_acquire'
LANGUAGE C VOLATILE;

-- The same under a policy of algorithm 'concurrency' (its "limit").
CREATE FUNCTION rl_acquire(
	key text,
	policy text,
	hold text DEFAULT 'transaction',
	max_wait interval DEFAULT '0',
	priority text DEFAULT NULL)			-- load shedding, below
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_acquire_policy'
LANGUAGE C VOLATILE;

-- Give back this session's slot of the key now; false if it holds none.
CREATE FUNCTION rl_release(key text, policy text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_release'
LANGUAGE C VOLATILE;

-- The keys whose slots are held or waited for, in the store.
CREATE FUNCTION rl_slots(
	all_databases boolean DEFAULT false,
	OUT dbid oid,
	OUT policy text,
	OUT key text,
	OUT in_flight bigint,
	OUT waiting bigint,
	OUT held_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_slots'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION rl_slots(boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_slots(boolean) TO pg_monitor;

-- The slots this session holds.
CREATE FUNCTION rl_held(
	OUT policy text,
	OUT key text,
	OUT hold text,
	OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_held'
LANGUAGE C VOLATILE;

-- ---- Durable quotas (#10): state that survives crashes and failover ----

-- A durable policy's keys are logged in WAL (docs/design.md, "Durable
-- keys"): committed consumption survives a crash and reaches standbys.
ALTER TABLE rl_policy ADD COLUMN durable boolean NOT NULL DEFAULT false;

-- The durable keys and the sweeper that covers checkpoints.
CREATE FUNCTION rl_durable_info(
	OUT durable_keys bigint,
	OUT durable_ready boolean,
	OUT sweeps bigint,
	OUT swept_keys bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_store_info'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION rl_durable_info() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_durable_info() TO pg_monitor;

-- ---- Load shedding by priority (#12) ----

-- The share of each of a policy's limits (of its capacity: the burst of a
-- bucket) kept free for calls of higher priority (docs/quotas.md, "Load
-- shedding"): a 'sheddable' call must leave all of it free, a 'normal'
-- one half of it, a 'critical' one, or one without a priority, none.
-- From 0 (nothing kept) up to but not including 1.
ALTER TABLE rl_policy ADD COLUMN reserve double precision NOT NULL DEFAULT 0;

-- rl_allow and rl_check take a priority (and, called directly, the
-- reserve), as the last arguments: created anew (rl_update_replaced,
-- above), so that a call with the old arguments finds one function.
ALTER FUNCTION rl_allow(text, text, bigint, interval, bigint, bigint, timestamptz)
	RENAME TO rl_allow_0_2_0;
CREATE FUNCTION rl_allow(
	key text,
	algo text,
	"limit" bigint,
	per interval DEFAULT '1 second',
	cost bigint DEFAULT 1,
	burst bigint DEFAULT NULL,
	at timestamptz DEFAULT NULL,
	priority text DEFAULT NULL,
	reserve double precision DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_allow'
LANGUAGE C VOLATILE;
SELECT rl_update_replaced(
	'rl_allow_0_2_0(text, text, bigint, interval, bigint, bigint, timestamptz)',
	'rl_allow(text, text, bigint, interval, bigint, bigint, timestamptz, text, double precision)');

ALTER FUNCTION rl_check(text, text, bigint, interval, bigint, bigint, timestamptz)
	RENAME TO rl_check_0_2_0;
CREATE FUNCTION rl_check(
	key text,
	algo text,
	"limit" bigint,
	per interval DEFAULT '1 second',
	cost bigint DEFAULT 1,
	burst bigint DEFAULT NULL,
	at timestamptz DEFAULT NULL,
	priority text DEFAULT NULL,
	reserve double precision DEFAULT NULL)
RETURNS rl_decision
AS 'MODULE_PATHNAME', 'rl_check'
LANGUAGE C VOLATILE;
SELECT rl_update_replaced(
	'rl_check_0_2_0(text, text, bigint, interval, bigint, bigint, timestamptz)',
	'rl_check(text, text, bigint, interval, bigint, bigint, timestamptz, text, double precision)');

ALTER FUNCTION rl_allow(text, text, timestamptz, bigint)
	RENAME TO rl_allow_0_2_0;
CREATE FUNCTION rl_allow(
	key text,
	policy text,
	at timestamptz DEFAULT NULL,
	cost bigint DEFAULT NULL,
	priority text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_allow_policy'
LANGUAGE C VOLATILE;
SELECT rl_update_replaced('rl_allow_0_2_0(text, text, timestamptz, bigint)',
	'rl_allow(text, text, timestamptz, bigint, text)');

ALTER FUNCTION rl_check(text, text, timestamptz, bigint)
	RENAME TO rl_check_0_2_0;
CREATE FUNCTION rl_check(
	key text,
	policy text,
	at timestamptz DEFAULT NULL,
	cost bigint DEFAULT NULL,
	priority text DEFAULT NULL)
RETURNS rl_decision
AS 'MODULE_PATHNAME', 'rl_check_policy'
LANGUAGE C VOLATILE;
SELECT rl_update_replaced('rl_check_0_2_0(text, text, timestamptz, bigint)',
	'rl_check(text, text, timestamptz, bigint, text)');

-- ---- Load shedding: every deciding function takes a priority ----

-- rl_wait (and, called directly, the reserve) and rl_allow_all take a
-- priority as their last arguments, as rl_allow does (rl_check_all
-- above, with its new columns): created anew, their privileges kept.
ALTER FUNCTION rl_wait(text, text, bigint, interval, bigint, bigint, interval)
	RENAME TO rl_wait_0_2_0;
CREATE FUNCTION rl_wait(
	key text,
	algo text,
	"limit" bigint,
	per interval DEFAULT '1 second',
	cost bigint DEFAULT 1,
	burst bigint DEFAULT NULL,
	max_wait interval DEFAULT '10 seconds',
	priority text DEFAULT NULL,
	reserve double precision DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_wait'
LANGUAGE C VOLATILE;
SELECT rl_update_replaced(
	'rl_wait_0_2_0(text, text, bigint, interval, bigint, bigint, interval)',
	'rl_wait(text, text, bigint, interval, bigint, bigint, interval, text, double precision)');

ALTER FUNCTION rl_wait(text, text, interval, bigint) RENAME TO rl_wait_0_2_0;
CREATE FUNCTION rl_wait(
	key text,
	policy text,
	max_wait interval DEFAULT '10 seconds',
	cost bigint DEFAULT NULL,
	priority text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_wait_policy'
LANGUAGE C VOLATILE;
SELECT rl_update_replaced('rl_wait_0_2_0(text, text, interval, bigint)',
	'rl_wait(text, text, interval, bigint, text)');

ALTER FUNCTION rl_allow_all(text[], text[], bigint[], timestamptz)
	RENAME TO rl_allow_all_0_2_0;
CREATE FUNCTION rl_allow_all(
	keys text[],
	policies text[],
	costs bigint[] DEFAULT NULL,
	at timestamptz DEFAULT NULL,
	priority text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_allow_all'
LANGUAGE C VOLATILE;
SELECT rl_update_replaced(
	'rl_allow_all_0_2_0(text[], text[], bigint[], timestamptz)',
	'rl_allow_all(text[], text[], bigint[], timestamptz, text)');

-- rl_stats counts shed denials apart (denials the headroom alone caused,
-- also counted as denied): a new column at the end of the function,
-- created anew, and of the view over it (CREATE OR REPLACE VIEW keeps
-- its privileges and what users built on it).  The view reads the new
-- function: the old one is then dropped.
ALTER FUNCTION rl_stats(boolean) RENAME TO rl_stats_0_2_0;
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
	OUT shadow_denied bigint,
	OUT shed bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_stats'
LANGUAGE C VOLATILE;
CREATE OR REPLACE VIEW rl_stats AS
	SELECT d.datname, s.algo, s.policy, s.allowed, s.denied, s.near_limit,
		   s.failed_open, s.failed_closed, s.shadow_denied, s.shed
	FROM rl_stats(true) s LEFT JOIN pg_catalog.pg_database d ON d.oid = s.dbid;
SELECT rl_update_replaced('rl_stats_0_2_0(boolean)', 'rl_stats(boolean)');

-- the last function created anew: the helper goes
DROP FUNCTION rl_update_replaced(regprocedure, regprocedure);
