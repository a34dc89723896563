/*-------------------------------------------------------------------------
 *
 * policy.c
 *		Named policies: rows of the rl_policy table, cached per backend.
 *
 * A call naming a policy must cost no table lookup: each backend keeps the
 * policies of its database in a hash table and reads the table again only
 * after it changed.  The table's triggers (rl_policy_changed: a statement
 * trigger enabled always, and a row trigger enabled in replica mode for
 * the rows logical replication applies, which fires row triggers only)
 * queue a relcache invalidation for it; PostgreSQL delivers that at
 * commit to every backend (and to hot standbys, through WAL), where
 * policy_inval marks the cache stale.  A rolled-back change sends nothing.
 * The invalidation of a renamed or dropped table (DROP EXTENSION) marks it
 * stale too, and the next read finds the table by name again.
 * The row trigger rl_policy_validate checks every row with the same checks
 * as a call's arguments (args.c), so a bad policy is refused when written,
 * not when used.
 *
 * Rows are read by column name: the columns are found in the table's
 * descriptor once (per reload, and for the validation trigger once per
 * relcache entry of the table), so a later version that adds, drops or
 * reorders columns of rl_policy moves nothing here.
 *
 * Per-key overrides (the rows of rl_override: another limit or burst for
 * one key, a block, an unlimited key) are read with the policies, by the
 * same invalidations (rl_override has the same triggers), into a hash
 * table per policy (RlPolicy.overrides, NULL for a policy without any): a
 * call costs one lookup more only under a policy that has overrides, and
 * never a table lookup.  An override changes the request's parameters,
 * not its stored key, so a key keeps what it used when its override
 * changes.
 *
 * Policies are read with the privileges of the role using them: SELECT on
 * rl_policy, and its row security if an administrator enabled it.  The
 * cache remembers the role it was read as; another role (after SET ROLE,
 * inside a SECURITY DEFINER function) is checked for SELECT before it is
 * served from it, and where row security filters what either role sees,
 * the table is read again as the role using it.
 *
 * No shared state: the cache is backend-local, in a context under
 * CacheMemoryContext.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "storage/sinval.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "args.h"
#include "compat.h"
#include "dispatch.h"
#include "keyhash.h"
#include "override.h"
#include "policy.h"
#include "policy_limit.h"
#include "stats.h"

/*
 * The cache's state.  The four rl_ ones are read by rl_policy_ref_again
 * (policy.h), inline in its callers (#9).
 */
static MemoryContext policy_context = NULL;	/* the cache and overrides */
static HTAB *policy_cache = NULL;
bool		rl_policy_cache_valid = false;
static Oid	policy_relid = InvalidOid;
static Oid	override_relid = InvalidOid;
static Oid	limit_relid = InvalidOid;
static uint32 policy_changes = 0;	/* invalidations of the cache seen */
/*
 * rl_policy_news's latest taking in: its statement, the counter then, and
 * how many ticks of the counter it holds for
 */
TimestampTz rl_policy_news_stmt = 0;
uint64		rl_policy_news_tsc = 0;
uint64		rl_policy_news_span = 0;
uint32		rl_policy_generation = 0;	/* the cache's, new at each reload
										 * (RlPolicyRef) */
static bool callback_registered = false;
Oid			rl_policy_reader = InvalidOid;	/* the role the cache was read
											 * as */
static bool policy_filtered = false;	/* row security filtered that read */
Oid			rl_policy_allowed = InvalidOid;	/* another role found to read
											 * the same rows */

/* the validation trigger's columns, for the table validate_relid */
static Oid	validate_relid = InvalidOid;
static RlPolicyAttnos validate_attnos;

PG_FUNCTION_INFO_V1(rl_policy_validate);
PG_FUNCTION_INFO_V1(rl_policy_changed);

/* relcache callback: the policy table (or everything) changed */
static void
policy_inval(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == policy_relid ||
		(OidIsValid(override_relid) && relid == override_relid) ||
		(OidIsValid(limit_relid) && relid == limit_relid))
	{
		rl_policy_cache_valid = false;
		policy_changes++;
		rl_policy_allowed = InvalidOid;	/* its privileges may have changed */
	}
	if (relid == InvalidOid || relid == validate_relid)
		validate_relid = InvalidOid;
}

/* syscache callback: role memberships changed: check roles again */
static void
policy_roles_inval(Datum arg, int cacheid, uint32 hashvalue)
{
	rl_policy_reader = InvalidOid;
	rl_policy_allowed = InvalidOid;
}

/* Hear of changes to the policy table, once per backend. */
static void
policy_watch(void)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(policy_inval, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, policy_roles_inval,
									  (Datum) 0);
		callback_registered = true;
	}
}

/*
 * Is the policy of that name gone, or of another algorithm now?  For the
 * decision counters (stats.c), from the cache as it is (never reloaded:
 * a caller up the stack may hold pointers into it).
 */
static bool
policy_gone(const char *name, int algo, bool *known)
{
	const RlPolicy *pol = rl_policy_peek(name, known);

	return pol == NULL || (int) pol->algo != algo;
}

/*
 * Tell the decision counters how to ask about policies (from _PG_init).
 */
void
rl_policy_init(void)
{
	rl_stats_policy_hooks(policy_gone, rl_policy_changes);
}

/* The schema the extension is installed in, or InvalidOid. */
static Oid
extension_schema(void)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			nsp = InvalidOid;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("ratelimit"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		nsp = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return nsp;
}

/* The cached policy named by a text, or NULL (for override_load). */
static RlPolicy *
policy_by_text(text *name)
{
	char		key[NAMEDATALEN];
	int			len = VARSIZE_ANY_EXHDR(name);

	if (len >= NAMEDATALEN)
		return NULL;
	memset(key, 0, NAMEDATALEN);
	memcpy(key, VARDATA_ANY(name), len);
	return hash_search(policy_cache, key, HASH_FIND, NULL);
}

/* A row of rl_override, into its policy's overrides. */
static void
override_row(RlPolicy *pol, const Datum *values, const bool *nulls)
{
	rl_override_put(&pol->overrides, policy_context, pol->algo, values,
					nulls);
}

/* A row of rl_policy_limit, into its policy's other limits. */
static void
limit_row(RlPolicy *pol, const Datum *values, const bool *nulls)
{
	rl_policy_limit_put(&pol->limits, &pol->nlimits, policy_context, values,
						nulls);
}

/*
 * Read the rows of a table of the policies' parts (rl_override,
 * rl_policy_limit: the first of the columns selected names the policy)
 * into the cache's policies, as put says (SPI connected, the policies
 * loaded), in its latest committed state as the policies are read.
 */
static void
parts_load(Oid nsp, const char *table, const char *columns, int ncolumns,
		   void (*put) (RlPolicy *pol, const Datum *values,
						const bool *nulls))
{
	StringInfoData query;
	SPIPlanPtr	plan;
	uint64		i;

	initStringInfo(&query);
	appendStringInfo(&query, "SELECT %s FROM %s.%s", columns,
					 quote_identifier(get_namespace_name(nsp)), table);
	plan = SPI_prepare(query.data, 0, NULL);
	if (plan == NULL ||
		SPI_execute_snapshot(plan, NULL, NULL, GetLatestSnapshot(),
							 InvalidSnapshot, true, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read table \"%s\"", table);
	for (i = 0; i < SPI_processed; i++)
	{
		Datum		values[OCOL_COUNT + LCOL_COUNT];
		bool		nulls[OCOL_COUNT + LCOL_COUNT];
		RlPolicy   *pol;
		int			c;

		for (c = 0; c < ncolumns; c++)
			values[c] = heap_getattr(SPI_tuptable->vals[i], c + 1,
									 SPI_tuptable->tupdesc, &nulls[c]);
		if (nulls[0])
			continue;
		pol = policy_by_text(DatumGetTextPP(values[0]));
		if (pol != NULL)
			put(pol, values, nulls);
	}
	pfree(query.data);
}

/*
 * Read every policy of the table into the hash table "into" (keyed by
 * name), as the current role, with the latest snapshot (the latest
 * committed policies, whatever the transaction's snapshot: a REPEATABLE
 * READ transaction must not cache what it saw at its start) and, with
 * own_changes, what this transaction wrote until now.
 */
static void
policy_read(Oid nsp, HTAB *into, bool own_changes)
{
	StringInfoData query;
	SPIPlanPtr	plan;
	RlPolicyAttnos cols;
	uint64		i;

	initStringInfo(&query);
	appendStringInfo(&query,
					 "SELECT * FROM %s.rl_policy",
					 quote_identifier(get_namespace_name(nsp)));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(query.data, 0, NULL);
	if (plan == NULL ||
		SPI_execute_snapshot(plan, NULL, NULL, GetLatestSnapshot(),
							 InvalidSnapshot, !own_changes, false,
							 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read table \"rl_policy\"");
	rl_policy_attnos(SPI_tuptable->tupdesc, &cols);
	for (i = 0; i < SPI_processed; i++)
	{
		RlPolicy	pol;
		RlPolicy   *entry;

		rl_policy_from_row(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, &cols,
						&pol);
		entry = hash_search(into, pol.name, HASH_ENTER, NULL);
		*entry = pol;
	}
	SPI_finish();
	pfree(query.data);
}

/* A hash table of policies by name, in the memory context cxt. */
static HTAB *
policy_table(MemoryContext cxt)
{
	HASHCTL		ctl;

	ctl.keysize = NAMEDATALEN;
	ctl.entrysize = sizeof(RlPolicy);
	ctl.hcxt = cxt;
	return hash_create("ratelimit policies", 64, &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* what policy_absent checks against; what a changing transaction leaves */
static HTAB *policy_marking = NULL;
static HTAB *policy_pending = NULL;
static bool xact_registered = false;

/* rl_stats_mark_gone's question: is it absent, or of another algorithm? */
static bool
policy_absent(const char *name, int algo, bool *known)
{
	char		key[NAMEDATALEN];
	RlPolicy   *pol;

	*known = true;
	memset(key, 0, NAMEDATALEN);
	strlcpy(key, name, NAMEDATALEN);
	pol = hash_search(policy_marking, key, HASH_FIND, NULL);
	return pol == NULL || (int) pol->algo != algo;
}

/*
 * Tell the decision counters which of this database's policies are gone,
 * from all the table's policies (other databases' backends cannot read
 * them, and free the slots marked once the counters' table is full).
 */
static void
policy_mark_gone(HTAB *policies)
{
	policy_marking = policies;
	rl_stats_mark_gone(policy_absent);
	policy_marking = NULL;
}

/*
 * Read every policy of this database into the cache.  The cache is marked
 * valid first: an invalidation arriving while the table is read marks it
 * stale again, and the next call reads it once more.
 */
static void
policy_reload(void)
{
	Oid			nsp = extension_schema();

	policy_relid = OidIsValid(nsp) ? get_relname_relid("rl_policy", nsp) :
		InvalidOid;
	if (!OidIsValid(policy_relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"rl_policy\" of extension \"ratelimit\" does not exist in this database"),
				 errhint("Run CREATE EXTENSION ratelimit, or ALTER EXTENSION ratelimit UPDATE.")));

	override_relid = get_relname_relid("rl_override", nsp);
	limit_relid = get_relname_relid("rl_policy_limit", nsp);

	policy_watch();
	if (policy_context != NULL)
		MemoryContextDelete(policy_context);
	policy_cache = NULL;
	policy_context = AllocSetContextCreate(CacheMemoryContext,
										   "ratelimit policies",
										   ALLOCSET_SMALL_SIZES);
	policy_cache = policy_table(policy_context);
	rl_policy_generation++;
	rl_policy_cache_valid = true;
	rl_policy_reader = GetUserId();
	policy_filtered = check_enable_rls(policy_relid, InvalidOid, true) ==
		RLS_ENABLED;
	rl_policy_allowed = InvalidOid;
	policy_read(nsp, policy_cache, false);
	if (OidIsValid(override_relid) || OidIsValid(limit_relid))
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		if (OidIsValid(override_relid))
			parts_load(nsp, "rl_override", rl_override_columns, OCOL_COUNT,
					   override_row);
		if (OidIsValid(limit_relid))
			parts_load(nsp, "rl_policy_limit", rl_policy_limit_columns,
					   LCOL_COUNT, limit_row);
		SPI_finish();
	}
	if (!policy_filtered)
		policy_mark_gone(policy_cache);
}

/*
 * Read the table into the cache (policy_cache_ready found it stale): out
 * of line, so that the check of every call carries no PG_TRY frame.
 */
static pg_noinline void
policy_cache_fill(void)
{
	PG_TRY();
	{
		policy_reload();
	}
	PG_CATCH();
	{
		/* a cache read halfway must not be taken as complete */
		rl_policy_cache_valid = false;
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/*
 * rl_policy_news's taking in: out of line, its test inline (policy.h).
 */
void
rl_policy_news_take(void)
{
	rl_policy_news_stmt = GetCurrentStatementStartTimestamp();
#ifdef RL_CLOCK_TSC
	rl_policy_news_tsc = __builtin_ia32_rdtsc();
	rl_policy_news_span = rl_clock_anchor.span != 0 ? rl_clock_anchor.span :
		RL_POLICY_NEWS_TICKS;
#endif
	AcceptInvalidationMessages();
}

/*
 * Make the cache current: reads the table only if it changed.  Inline: a
 * quota trigger checks on every row (#9).
 */
static inline void
policy_cache_ready(void)
{
	rl_policy_news();
	if (unlikely(!rl_policy_cache_valid))
		policy_cache_fill();
}

/*
 * policy_role_ready for a role that is neither the cache's reader nor the
 * last role allowed.
 */
static pg_noinline bool
policy_role_check(Oid role)
{
	if (policy_filtered ||
		check_enable_rls(policy_relid, InvalidOid, true) == RLS_ENABLED)
	{
		rl_policy_cache_valid = false;
		return false;
	}
	if (pg_class_aclcheck(policy_relid, role, ACL_SELECT) != ACLCHECK_OK &&
		pg_attribute_aclcheck_all(policy_relid, role, ACL_SELECT,
								  ACLMASK_ALL) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, "rl_policy");
	rl_policy_allowed = role;
	return true;
}

/*
 * May the current role use the cache (made current), read as another
 * role?  It may if it may read the whole table (SELECT on it, or on each
 * column), unless row security filters what it or the reader sees: then
 * the cache is marked stale, to be read again as this role (false).  A
 * role without SELECT gets the error reading the table would give.  The
 * usual answer (the reader, or the role allowed last) inline.
 */
static inline bool
policy_role_ready(void)
{
	Oid			role = GetUserId();

	if (likely(role == rl_policy_reader || role == rl_policy_allowed))
		return true;
	return policy_role_check(role);
}

/*
 * The policy of that name, or NULL.  Reads the table only if it changed
 * since the last call, or as this role if row security applies.
 */
const RlPolicy *
rl_policy_find(const char *name, int len)
{
	char		key[NAMEDATALEN];

	policy_cache_ready();
	if (!policy_role_ready())
		policy_cache_ready();
	if (len >= NAMEDATALEN)
		return NULL;
	memset(key, 0, NAMEDATALEN);
	memcpy(key, name, len);
	return hash_search(policy_cache, key, HASH_FIND, NULL);
}

/*
 * The policy of that name as the cache holds it, without ever reading the
 * table: for code running inside a decision, whose callers may hold
 * pointers into the cache that a reload would free.  *known is false (and
 * the result NULL) when the cache is not loaded or a change has come in
 * since; it reflects the invalidations accepted so far, so a caller that
 * needs the latest committed policies calls AcceptInvalidationMessages
 * first.  name is NUL-terminated.
 */
const RlPolicy *
rl_policy_peek(const char *name, bool *known)
{
	char		key[NAMEDATALEN];

	*known = policy_cache != NULL && rl_policy_cache_valid;
	if (!*known)
		return NULL;
	memset(key, 0, NAMEDATALEN);
	strlcpy(key, name, NAMEDATALEN);
	return hash_search(policy_cache, key, HASH_FIND, NULL);
}

/*
 * How many times the policies of this database were seen to change (a
 * counter that only grows; wraps around): lets a caller notice a change
 * without looking at the policies.
 */
uint32
rl_policy_changes(void)
{
	return policy_changes;
}

/*
 * Does any policy of this database keep its state in Redis (backend redis
 * or hybrid, its own or the setting's)?  False where the extension has no
 * policy table (version 0.1.0).
 */
bool
rl_policy_any_remote(void)
{
	HASH_SEQ_STATUS seq;
	RlPolicy   *pol;
	bool		any = false;
	Oid			nsp = extension_schema();

	if (!OidIsValid(nsp) ||
		!OidIsValid(get_relname_relid("rl_policy", nsp)))
		return false;
	policy_cache_ready();
	hash_seq_init(&seq, policy_cache);
	while ((pol = hash_seq_search(&seq)) != NULL)
	{
		RlRequest	req;

		/* the backend a request under it would go to */
		rl_request_init(&req);
		req.backend = pol->backend;
		if (rl_request_backend(&req) != RL_BACKEND_LOCAL)
		{
			any = true;
			hash_seq_term(&seq);
			break;
		}
	}
	return any;
}

/* An unknown policy's error (42704). */
void
rl_policy_missing(const char *name, int len)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("rate-limit policy \"%s\" does not exist",
					pnstrdup(name, len)),
			 errhint("Policies are the rows of table rl_policy.")));
}

/*
 * The policy of that name; an unknown name is an error (42704).
 */
const RlPolicy *
rl_policy_get(text *name)
{
	const RlPolicy *pol = rl_policy_find(VARDATA_ANY(name),
										 VARSIZE_ANY_EXHDR(name));

	if (pol == NULL)
		rl_policy_missing(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	return pol;
}

/*
 * The policy of that name, as rl_policy_find, remembered in ref: while the
 * cache is the one ref's policy was found in and the name is the same,
 * that policy is returned without a lookup (the table's changes are taken
 * in first, as every lookup does).  NULL if there is no such policy.
 */
const RlPolicy *
rl_policy_find_ref(RlPolicyRef *ref, const char *name, int len)
{
	policy_cache_ready();
	/* the role using it may read what the cache holds (a reload: new ref) */
	if (!policy_role_ready())
		policy_cache_ready();
	if (likely(ref->pol != NULL && ref->generation == rl_policy_generation &&
			   ref->len == len && rl_key_equal(ref->name, name, len)))
		return ref->pol;
	ref->pol = NULL;
	if (len >= NAMEDATALEN)
		return NULL;
	ref->pol = rl_policy_find(name, len);
	ref->generation = rl_policy_generation;
	ref->len = len;
	memcpy(ref->name, name, len);
	ref->request_of = NULL;		/* its request template is made anew */
	return ref->pol;
}

/*
 * BEFORE INSERT OR UPDATE row trigger on rl_policy: refuse a row a call
 * could not use.
 */
Datum
rl_policy_validate(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Oid			relid;
	HeapTuple	tuple;
	RlPolicy	pol;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "rl_policy_validate must be called as a row trigger");
	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	relid = RelationGetRelid(trigdata->tg_relation);
	if (relid != validate_relid)
	{
		policy_watch();
		validate_relid = InvalidOid;
		rl_policy_attnos(RelationGetDescr(trigdata->tg_relation),
					  &validate_attnos);
		validate_relid = relid;
	}
	rl_policy_from_row(tuple, RelationGetDescr(trigdata->tg_relation),
					&validate_attnos, &pol);
	return PointerGetDatum(tuple);
}

/*
 * As a transaction that changed the table commits (before: an error still
 * aborts cleanly), tell the counters which policies it leaves; at an
 * abort, nothing.
 */
static void
policy_xact(XactEvent event, void *arg)
{
	HTAB	   *policies = policy_pending;

	/* in TopTransactionContext: it goes with the transaction */
	policy_pending = NULL;
	if (event == XACT_EVENT_PRE_COMMIT && policies != NULL)
		policy_mark_gone(policies);
}

/*
 * After a statement changed the table: read the policies as this
 * transaction sees them, into a table of its own (the cache may be in use
 * up the stack), for policy_xact.  Only where the role reads every row
 * (SELECT, no row security: else it would take policies it cannot see for
 * gone).  Rows applied in replica mode are left to the next reload.
 */
static void
policy_changed_mark(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);
	Oid			role = GetUserId();
	HTAB	   *policies;

	if ((pg_class_aclcheck(relid, role, ACL_SELECT) != ACLCHECK_OK &&
		 pg_attribute_aclcheck_all(relid, role, ACL_SELECT,
								   ACLMASK_ALL) != ACLCHECK_OK) ||
		check_enable_rls(relid, InvalidOid, true) == RLS_ENABLED)
		return;
	if (!xact_registered)
	{
		RegisterXactCallback(policy_xact, NULL);
		xact_registered = true;
	}
	policies = policy_table(TopTransactionContext);
	policy_read(RelationGetNamespace(rel), policies, true);
	if (policy_pending != NULL)
		hash_destroy(policy_pending);
	policy_pending = policies;
}

/*
 * AFTER trigger on rl_policy, for each statement or (in replica mode) each
 * row: every backend rereads the policies once this transaction commits.
 */
Datum
rl_policy_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "rl_policy_changed must be called as a trigger");
	CacheInvalidateRelcacheByRelid(RelationGetRelid(trigdata->tg_relation));
	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		policy_changed_mark(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}
