/*-------------------------------------------------------------------------
 *
 * trigger.c
 *		rl_enforce: a quota trigger to attach to any table.
 *
 *	CREATE TRIGGER orders_quota BEFORE INSERT ON orders FOR EACH ROW
 *		EXECUTE FUNCTION rl_enforce('orders_per_tenant', 'tenant_id'
 *									[, 'more_key_columns' ...]
 *									[, 'cost=<expression over the row>']
 *									[, 'priority=<expression>']);
 *
 * Each row (NEW for INSERT and UPDATE, OLD for DELETE) is one call under the
 * policy, keyed by the named columns' values joined with ':' (a NULL
 * contributes an empty part), each written in its type's canonical text, the
 * same in every session (trigger_key.c), costing the policy's cost or the
 * expression's value, with the priority expression's priority (load shedding,
 * shed.c) if it has one.  A denied row raises SQLSTATE PT429 with the key, the
 * limit and the retry-after in the detail and hint (PostgREST answers PT429
 * with HTTP 429).  What an admitted row consumed is given back if its
 * (sub)transaction aborts.
 *
 * Arguments.  An argument is the cost expression if it reads "cost", blanks,
 * "=", in any case ("cost=n", "COST = n"), the priority expression likewise
 * with "priority" (trigger_cost.c); otherwise it names a key column: the
 * column of exactly that name, else the only one whose name differs from it in
 * case alone.  What could be read two ways is refused: two cost (or priority)
 * arguments, an argument of such a form that also names a column, a name
 * matching several columns in case alone.  Every error names the trigger and
 * the table, in its message or (for errors of PostgreSQL's parser, executor
 * and the functions the expression calls) in its context.
 *
 * The trigger cache.  What a trigger resolves from its arguments and its
 * table's definition (the key columns' attribute numbers and how each
 * becomes key bytes, the prepared cost expression, the policy) is kept per
 * session in an RlTriggerInfo, found by the trigger's OID (and remembered
 * by the call site, fn_extra, so that a row costs no lookup).  Any change
 * to the table or to its triggers (ALTER TABLE, CREATE OR REPLACE / ALTER /
 * DROP TRIGGER) makes PostgreSQL send a relcache invalidation for the
 * table, to this session at its next command and to every other session
 * before it next uses the table; the callback marks the table's infos
 * stale, and the next row resolves them again, exactly as a new session
 * would.  A change to a type the table's columns are made of sends none
 * for the table: ALTER TYPE of a composite type sends one for the type's
 * own relation, a change to a domain or another type one of pg_type's
 * syscache.  So an info also lists the types its table's columns are made
 * of (composites, domains, arrays, their elements and attributes, all the
 * way down), the composites' relations and the types' syscache hash
 * values, and the callbacks mark it stale on any of them too.  The policy
 * is remembered as the policy cache's RlPolicyRef, which a change to
 * rl_policy makes stale.  A row that runs no SQL has its key built in
 * place in the info's stored key (after the policy's name, written once)
 * and its request made in the info, once per policy found: another row
 * only writes its key's part (#9).  A stale info may still be in use
 * by an rl_enforce call further up the stack (a cost expression can write
 * to the table): it is retired, and freed once no call uses it.
 *
 * No shared state: the cache is backend-local, in CacheMemoryContext.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "parser/scansup.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/guc.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "args.h"
#include "dispatch.h"
#include "policy.h"
#include "policy_limit.h"
#include "shed.h"
#include "trigger.h"
#include "trigger_int.h"
#include "trigger_key.h"

/* the SQLSTATE of a row over its quota */
#define ERRCODE_RL_QUOTA_EXCEEDED	MAKE_SQLSTATE('P','T','4','2','9')

#define USAGE_HINT \
	"Use rl_enforce('policy', 'column' [, ...] [, 'cost=expression'] [, 'priority=expression'])."

/*
 * What a trigger resolved once, valid until its table or the trigger
 * changes.  Allocated in its own memory context, with all it points to.
 * Whatever is added here must be derived from the trigger and its table
 * alone, or be invalidated with what else it derives from (a resolved
 * policy, for one, also by the policy cache's invalidation).
 */
typedef struct RlTriggerInfo
{
	Oid			tgoid;
	Oid			relid;
	bool		valid;			/* false once the table or trigger changed */
	int			use_count;		/* rl_enforce calls using it right now */
	bool		runs_sql;		/* a row may run SQL: its expressions,
								 * or an output function of a key column */
	struct RlTriggerInfo *next_retired; /* in the retired list */
	MemoryContext cxt;
	char	   *policy;			/* the policy's name (first argument) */
	int			policylen;
	RlPolicyRef policy_ref;		/* the policy it found */
	char	   *stored;			/* the stored key of its rows: the policy's
								 * name and a NUL, written once, then a
								 * row's key, built in place (#9) */
	int			head;			/* where the key starts in stored */
	RlRequest	row;			/* the request of its rows that run no SQL
								 * (rl_policy_request_placed), made in
								 * place over the last one (#9) */
	uint32		row_generation; /* policy_ref's generation when row was
								 * made */
	bool		row_reusable;	/* row serves the next rows of that
								 * policy found, with only their key's
								 * part written */
	int			nkeys;
	RlKeyColumn *keys;			/* the key columns, in argument order */
	char	   *exprs[RL_NUM_EXPRS];	/* after "cost =" (RL_EXPR_COST) or
									 * "priority =", trimmed; or NULL */
	SPIPlanPtr	plans[RL_NUM_EXPRS];	/* kept; NULL without the
										 * expression */
	RlTypeDeps	deps;			/* the types the columns are made of */
} RlTriggerInfo;

/* what a call site (the trigger function's fn_extra) remembers */
typedef struct RlTriggerSite
{
	Oid			tgoid;
	uint64		sweeps;			/* trigger_sweeps when info was current */
	RlTriggerInfo *info;
} RlTriggerSite;

typedef struct RlTriggerEntry
{
	Oid			tgoid;			/* hash key */
	RlTriggerInfo *info;		/* NULL while (or if) being resolved */
} RlTriggerEntry;

static HTAB *trigger_cache = NULL;

/* replaced infos still in use, freed once they are not */
static RlTriggerInfo *retired = NULL;

/* sweeps made: an info a call site remembers lives until the next one */
static uint64 trigger_sweeps = 0;

/* the table whose trigger is being resolved, and whether it changed since */
static Oid	resolving_relid = InvalidOid;
static bool resolving_stale = false;

/*
 * ratelimit.trigger_at: the time quota triggers decide at; "": the clock.
 * trigger_at_set: whether it is set (its assign hook), one test a row.
 */
static char *rl_trigger_at = NULL;
static bool trigger_at_set = false;

PG_FUNCTION_INFO_V1(rl_enforce);

/* ratelimit.trigger_at's assign hook */
static void
trigger_at_assign(const char *newval, void *extra)
{
	trigger_at_set = newval != NULL && newval[0] != '\0';
}

/*
 * Define ratelimit.trigger_at (from _PG_init): for replays, backfills and
 * tests that cross a period's end (a month's) at a time they choose, as
 * "at" does for calls.  Superusers only, and checked as "at" at each row.
 */
void
rl_trigger_init(void)
{
	DefineCustomStringVariable("ratelimit.trigger_at",
							   "Time at which quota triggers decide, instead of the clock.",
							   "Empty (the default): the real clock.",
							   &rl_trigger_at, "", PGC_SUSET, GUC_NOT_IN_SAMPLE,
							   NULL, trigger_at_assign, NULL);
}

/* ratelimit.trigger_at, once set (trigger_at_set), as a call's time. */
static pg_noinline int64
trigger_at_time(void)
{
	Datum		at;

	Assert(trigger_at_set);
	at = DirectFunctionCall3(timestamptz_in, CStringGetDatum(rl_trigger_at),
							 ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	return rl_arg_at(DatumGetTimestampTz(at));
}

/*
 * Error context of an rl_enforce call: names the trigger and the table.  In
 * the cost expression, a parse error's position is shown in the expression
 * as the user wrote it rather than in the query around it.
 */
static void
trigger_error_callback(void *arg)
{
	RlTriggerCall *call = (RlTriggerCall *) arg;
	const char *tgname = call->tg->tgname;
	const char *relname = RelationGetRelationName(call->rel);
	int			pos;

	switch (call->phase)
	{
		case COST_NONE:
			errcontext("quota trigger \"%s\" on table \"%s\"", tgname, relname);
			return;
		case COST_PARSE:
			/* the scanner's position is in the expression itself */
			pos = geterrposition();
			if (pos > 0)
			{
				errposition(0);
				internalerrposition(pos);
				internalerrquery(call->cost_expr);
			}
			break;
		case COST_PREPARE:
			/* SPI made it a position in the query around the expression */
			pos = getinternalerrposition() - (int) strlen(COST_QUERY_PREFIX);
			if (pos > 0 && pos <= pg_mbstrlen(call->cost_expr) + 1)
			{
				internalerrposition(pos);
				internalerrquery(call->cost_expr);
			}
			break;
		case COST_RUN:
			break;
	}
	errcontext("%s expression of quota trigger \"%s\" on table \"%s\"",
			   rl_row_expr_name(call->expr), tgname, relname);
}

/*
 * Relcache callback: the table relid (every table, for InvalidOid) or one
 * of its triggers changed.  Only marks its infos stale: they may be in use.
 */
static void
trigger_cache_inval(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS seq;
	RlTriggerEntry *entry;

	/* the table being resolved, or a type it is made of (unknown yet) */
	if (OidIsValid(resolving_relid))
		resolving_stale = true;
	hash_seq_init(&seq, trigger_cache);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		RlTriggerInfo *info = entry->info;

		if (info != NULL &&
			(relid == InvalidOid || info->relid == relid ||
			 rl_type_deps_have_rel(&info->deps, relid)))
			info->valid = false;
	}
}

/*
 * Syscache callback of pg_type: a type changed (hashvalue 0: any type).
 * Marks stale the infos whose table's columns are made of it.
 */
static void
trigger_type_inval(Datum arg, int cacheid, uint32 hashvalue)
{
	HASH_SEQ_STATUS seq;
	RlTriggerEntry *entry;

	if (OidIsValid(resolving_relid))
		resolving_stale = true;
	hash_seq_init(&seq, trigger_cache);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		RlTriggerInfo *info = entry->info;

		if (info != NULL &&
			(hashvalue == 0 ||
			 rl_type_deps_have_hash(&info->deps, hashvalue)))
			info->valid = false;
	}
}

/* Free an info no call uses. */
static void
trigger_info_free(RlTriggerInfo *info)
{
	int			i;

	for (i = 0; i < RL_NUM_EXPRS; i++)
		if (info->plans[i] != NULL)
			SPI_freeplan(info->plans[i]);
	MemoryContextDelete(info->cxt);
}

/*
 * Retire the infos that are stale (and keep's, which is being replaced),
 * dropping the entries of the others (their triggers may be gone), then
 * free every retired info no call uses any more.
 */
static void
trigger_cache_sweep(RlTriggerEntry *keep)
{
	HASH_SEQ_STATUS seq;
	RlTriggerEntry *entry;
	RlTriggerInfo **link;

	/* call sites' infos may be freed below: they look them up again */
	trigger_sweeps++;
	hash_seq_init(&seq, trigger_cache);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		if (entry != keep && entry->info != NULL && entry->info->valid)
			continue;
		if (entry->info != NULL)
		{
			entry->info->next_retired = retired;
			retired = entry->info;
			entry->info = NULL;
		}
		if (entry != keep)
			hash_search(trigger_cache, &entry->tgoid, HASH_REMOVE, NULL);
	}

	link = &retired;
	while (*link != NULL)
	{
		RlTriggerInfo *info = *link;

		if (info->use_count > 0)
			link = &info->next_retired;
		else
		{
			*link = info->next_retired;
			trigger_info_free(info);
		}
	}
}

/*
 * The column an argument names: the one of exactly that name, else the
 * only one whose name differs in case alone.  InvalidAttrNumber if none;
 * several differing in case alone are an error.
 */
static AttrNumber
column_named(RlTriggerCall *call, const char *name)
{
	TupleDesc	tupdesc = RelationGetDescr(call->rel);
	AttrNumber	found = InvalidAttrNumber;
	int			i;

	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->attnum;
	}
	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, i);

		if (att->attisdropped || pg_strcasecmp(NameStr(att->attname), name) != 0)
			continue;
		if (found != InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_AMBIGUOUS_COLUMN),
					 errmsg("column \"%s\" named by trigger \"%s\" is ambiguous in table \"%s\"",
							name, call->tg->tgname,
							RelationGetRelationName(call->rel)),
					 errdetail("It matches columns \"%s\" and \"%s\", which differ in case alone.",
							   NameStr(TupleDescAttr(tupdesc, found - 1)->attname),
							   NameStr(att->attname)),
					 errhint("Name the column exactly as the table spells it.")));
		found = att->attnum;
	}
	return found;
}

/*
 * Read the trigger's arguments into info (allocating in the current
 * memory context): the policy, the key columns and the expressions.
 */
static void
trigger_parse_args(RlTriggerCall *call, RlTriggerInfo *info)
{
	Trigger    *tg = call->tg;
	const char *relname = RelationGetRelationName(call->rel);
	int			expr_arg[RL_NUM_EXPRS] = {0};
	int			i;

	if (tg->tgnargs < 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" on table \"%s\" needs a policy and at least one key column",
						tg->tgname, relname),
				 errhint(USAGE_HINT)));
	info->policy = pstrdup(tg->tgargs[0]);
	info->policylen = strlen(info->policy);
	/* a longer name finds no policy: the row's error says so */
	info->head = Min(info->policylen, NAMEDATALEN - 1) + 1;
	info->stored = palloc(RL_MAX_STORED_KEY);
	memcpy(info->stored, info->policy, info->head - 1);
	info->stored[info->head - 1] = '\0';
	info->keys = palloc(sizeof(RlKeyColumn) * (tg->tgnargs - 1));
	for (i = 1; i < tg->tgnargs; i++)
	{
		const char *arg = tg->tgargs[i];
		RlRowExpr	which = RL_EXPR_COST;
		char	   *expr = rl_cost_argument(arg, &which);
		const char *name = rl_row_expr_name(which);
		AttrNumber	attnum = column_named(call, arg);

		if (expr == NULL)
		{
			if (attnum == InvalidAttrNumber)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_COLUMN),
						 errmsg("column \"%s\" named by trigger \"%s\" does not exist in table \"%s\"",
								arg, tg->tgname, relname)));
			info->keys[info->nkeys].attnum = attnum;
			rl_key_column(TupleDescAttr(RelationGetDescr(call->rel),
										attnum - 1)->atttypid,
						  &info->keys[info->nkeys]);
			info->nkeys++;
			continue;
		}
		if (attnum != InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_AMBIGUOUS_COLUMN),
					 errmsg("argument \"%s\" of trigger \"%s\" could be column \"%s\" of table \"%s\" or a %s expression",
							arg, tg->tgname,
							NameStr(TupleDescAttr(RelationGetDescr(call->rel),
												  attnum - 1)->attname),
							relname, name),
					 errhint("Rename the column, or write the expression so that it differs from the column's name.")));
		if (expr_arg[which] > 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("trigger \"%s\" on table \"%s\" has more than one %s expression",
							tg->tgname, relname, name),
					 errdetail("Both \"%s\" and \"%s\" are of the form \"%s=expression\".",
							   tg->tgargs[expr_arg[which]], arg, name),
					 errhint(USAGE_HINT)));
		if (expr[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s expression of trigger \"%s\" on table \"%s\" is empty",
							name, tg->tgname, relname),
					 errhint("Write an expression over the row after \"%s=\", or leave the argument out %s.",
							 name, rl_row_expr_default(which))));
		info->exprs[which] = expr;
		expr_arg[which] = i;
	}
	if (info->nkeys == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" on table \"%s\" names no key column",
						tg->tgname, relname),
				 errhint(USAGE_HINT)));
}

/*
 * Resolve the trigger afresh from its arguments and its table's current
 * definition, and make that its info.  Retires the info it replaces.  Out
 * of line: rl_enforce's row does not carry its frame (#9).
 */
static pg_noinline RlTriggerInfo *
trigger_info_resolve(RlTriggerCall *call)
{
	Oid			tgoid = call->tg->tgoid;
	RlTriggerEntry *entry;
	RlTriggerInfo *info;
	MemoryContext cxt;
	MemoryContext old;
	bool		found;
	int			i;

	if (trigger_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(RlTriggerEntry);
		ctl.hcxt = CacheMemoryContext;
		trigger_cache = hash_create("ratelimit triggers", 16, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		CacheRegisterRelcacheCallback(trigger_cache_inval, (Datum) 0);
		CacheRegisterSyscacheCallback(TYPEOID, trigger_type_inval, (Datum) 0);
	}
	entry = hash_search(trigger_cache, &tgoid, HASH_ENTER, &found);
	if (!found)
		entry->info = NULL;

	resolving_relid = RelationGetRelid(call->rel);
	resolving_stale = false;

	/* in a child of the current context until complete: an error frees it */
	cxt = AllocSetContextCreate(CurrentMemoryContext, "ratelimit trigger",
								ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	info = palloc0(sizeof(RlTriggerInfo));
	info->tgoid = tgoid;
	info->relid = RelationGetRelid(call->rel);
	info->cxt = cxt;
	trigger_parse_args(call, info);
	for (i = 0; i < RelationGetDescr(call->rel)->natts; i++)
		if (!TupleDescAttr(RelationGetDescr(call->rel), i)->attisdropped)
			rl_type_deps_add(&info->deps,
					 TupleDescAttr(RelationGetDescr(call->rel), i)->atttypid);
	MemoryContextSwitchTo(old);
	for (i = 0; i < RL_NUM_EXPRS; i++)
	{
		if (info->exprs[i] != NULL)
		{
			info->plans[i] = rl_cost_prepare(call, (RlRowExpr) i,
											 info->exprs[i]);
			info->runs_sql = true;
		}
	}
	for (i = 0; i < info->nkeys; i++)
		if (info->keys[i].kind == RL_KEY_OTHER)
			info->runs_sql = true;

	/* nothing below fails */
	MemoryContextSetParent(cxt, CacheMemoryContext);
	info->valid = !resolving_stale;
	resolving_relid = InvalidOid;
	trigger_cache_sweep(entry);
	entry->info = info;
	return info;
}

/*
 * The trigger's info, resolved again if its table, its types or the
 * trigger changed; remembered by the call site (flinfo's fn_extra) until
 * the next sweep of the cache may free it.
 */
static RlTriggerInfo *
trigger_info_get(RlTriggerCall *call, FmgrInfo *flinfo)
{
	RlTriggerSite *site = (RlTriggerSite *) flinfo->fn_extra;
	RlTriggerEntry *entry = NULL;
	RlTriggerInfo *info;

	if (likely(site != NULL && site->tgoid == call->tg->tgoid &&
			   site->sweeps == trigger_sweeps && site->info->valid &&
			   site->info->relid == RelationGetRelid(call->rel)))
		return site->info;

	if (trigger_cache != NULL)
		entry = hash_search(trigger_cache, &call->tg->tgoid, HASH_FIND, NULL);
	if (entry != NULL && entry->info != NULL && entry->info->valid &&
		entry->info->relid == RelationGetRelid(call->rel))
		info = entry->info;
	else
		info = trigger_info_resolve(call);

	if (site == NULL)
	{
		site = MemoryContextAlloc(flinfo->fn_mcxt, sizeof(RlTriggerSite));
		flinfo->fn_extra = site;
	}
	site->tgoid = call->tg->tgoid;
	site->sweeps = trigger_sweeps;
	site->info = info;
	return info;
}

/*
 * A row under a concurrency limit: its transaction takes a slot of the
 * row's key (one for all its rows of that key), without waiting, given
 * back when the transaction ends; PT429 if none is free.
 */
static void
enforce_slot(RlTriggerCall *call, const RlTriggerInfo *info,
			 const RlPolicy *pol, const RlRequest *req,
			 const RlKeyBuf *kb)
{
	if (info->plans[RL_EXPR_COST] != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" on table \"%s\" gives a cost, but policy \"%s\" is a concurrency limit",
						call->tg->tgname, RelationGetRelationName(call->rel),
						pol->name),
				 errdetail("A transaction holds one slot of a key, whatever its rows.")));
	if (!rl_acquire_slot(req, 0, false))
		ereport(ERROR,
				(errcode(ERRCODE_RL_QUOTA_EXCEEDED),
				 errmsg("concurrency limit reached for policy \"%s\"",
						pol->name),
				 errdetail("Key \"%s\" may be used by " INT64_FORMAT " transactions at once.",
						   pnstrdup(kb->data, kb->len),
						   req->params.limit),
				 errhint("Retry when one of them has ended."),
				 errtable(call->rel)));
}

/*
 * Decide the row under the trigger's policy; PT429 if denied.  The row's
 * key is built in stored, after the policy's name and NUL (info->head
 * bytes, there already), and its request made in req: in place, the info's
 * own (in_place: a row that runs no SQL, so no other row of the trigger
 * can run until it is decided), made once per policy found and then only
 * its key's part written when nothing else depends on the key (#9); or
 * afresh.  The expressions run first: they may run SQL that reads the
 * policies again, which would free the policy a request points into.
 */
static pg_attribute_always_inline void
enforce_row(RlTriggerCall *call, RlTriggerInfo *info, HeapTuple tuple,
			TupleTableSlot *slot, bool in_place, char *stored, RlRequest *req)
{
	const RlPolicy *pol;
	RlPolicyRef *ref = &info->policy_ref;
	RlKeyBuf	kb;
	RlDecision	d;
	int64		cost = 0;
	uint8		priority = RL_PRIORITY_NONE;
	bool		reused;

	/* a row in place runs no SQL: it has no expressions */
	if (!in_place && info->plans[RL_EXPR_COST] != NULL)
		cost = rl_row_cost(call, info->exprs[RL_EXPR_COST],
						   info->plans[RL_EXPR_COST], tuple);
	if (!in_place && info->plans[RL_EXPR_PRIORITY] != NULL)
		priority = rl_row_priority(call, info->exprs[RL_EXPR_PRIORITY],
								   info->plans[RL_EXPR_PRIORITY], tuple);
	kb.data = stored + info->head;
	rl_key_build(info->keys, info->nkeys, slot, &kb);

	pol = rl_policy_ref_again(ref);
	if (unlikely(pol == NULL))
		pol = rl_policy_find_ref(ref, info->policy, info->policylen);
	if (pol == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("rate-limit policy \"%s\" named by trigger \"%s\" on table \"%s\" does not exist",
						info->policy, call->tg->tgname,
						RelationGetRelationName(call->rel)),
				 errhint("Policies are the rows of table rl_policy.")));
	Assert(pol->namelen + 1 == info->head);
	reused = in_place && likely(info->row_reusable &&
								info->row_generation == ref->generation);
	if (reused)
		rl_policy_request_rekey(pol, ref->calendar, kb.len, req);
	else
	{
		rl_policy_request_placed(ref, stored, kb.len, req);
		if (in_place)
		{
			/* a concurrency limit's row takes a slot: never reused */
			info->row_generation = ref->generation;
			info->row_reusable = rl_policy_request_reusable(ref) &&
				!rl_algo_holds(req->algo);
		}
	}
	req->priority = priority;
	if (!reused && rl_algo_holds(req->algo))
	{
		enforce_slot(call, info, pol, req, &kb);
		return;
	}
	if (!in_place && info->plans[RL_EXPR_COST] != NULL)
	{
		req->params.cost = cost;
		rl_arg_cost(req->params.cost);
		rl_cost_check(req->algo, &req->params);
	}

	req->at = likely(!trigger_at_set) ? RL_NO_TIME : trigger_at_time();
	/* what an admitted row consumed goes back if its transaction aborts */
	req->track = true;
	rl_decide_policy(req, &d);
	if (!d.out.allowed)
	{
		Interval   *per = rl_per_interval(&req->params);

		/* a shed row: its priority and what it must leave free say why */
		ereport(ERROR,
				(errcode(ERRCODE_RL_QUOTA_EXCEEDED),
				 errmsg("rate limit exceeded for policy \"%s\"", pol->name),
				 d.out.shed ?
				 errdetail("Key \"%s\" is shed: at priority \"%s\" a row must leave " INT64_FORMAT " of the capacity of " INT64_FORMAT " free (reserve %g); this row costs " INT64_FORMAT ".",
						   pnstrdup(kb.data, kb.len),
						   rl_shed_priority_name(req->priority),
						   rl_shed_headroom(req),
						   rl_algo_capacity(req->algo, &req->params),
						   (double) req->reserve / RL_SHED_WHOLE,
						   req->params.cost) :
				 errdetail("Key \"%s\" may use " INT64_FORMAT " per %s; this row costs " INT64_FORMAT ".",
						   pnstrdup(kb.data, kb.len), req->params.limit,
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(per))),
						   req->params.cost),
				 errhint("Retry after %.0f seconds.", ceil(d.out.retry_after)),
				 errtable(call->rel)));
	}
}

/*
 * enforce_row for a row that may run SQL (its expressions, an output
 * function): the info counted as in use meanwhile (SQL may replace it, see
 * trigger_cache_sweep), its request made on the stack (a row of the same
 * trigger may run inside it).  Out of line: rl_enforce's usual row carries
 * no PG_TRY frame.
 */
static pg_noinline void
enforce_row_sql(RlTriggerCall *call, RlTriggerInfo *info, HeapTuple tuple,
				TupleTableSlot *slot)
{
	char		stored[RL_MAX_STORED_KEY];
	RlRequest	req;

	memcpy(stored, info->stored, info->head);
	info->use_count++;
	PG_TRY();
	{
		enforce_row(call, info, tuple, slot, false, stored, &req);
	}
	PG_FINALLY();
	{
		info->use_count--;
	}
	PG_END_TRY();
}

/*
 * rl_enforce(policy, key_column [, ...] [, 'cost=expression']
 * [, 'priority=expression']): a row trigger, BEFORE or AFTER, for INSERT,
 * UPDATE or DELETE.
 */
Datum
rl_enforce(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	RlTriggerCall call;
	ErrorContextCallback errcallback;
	RlTriggerInfo *info;
	HeapTuple	tuple;
	TupleTableSlot *slot;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_enforce must be called as a trigger")));
	call.tg = trigdata->tg_trigger;
	call.rel = trigdata->tg_relation;
	/* expr and cost_expr are set before a phase that reads them */
	call.phase = COST_NONE;
	errcallback.callback = trigger_error_callback;
	errcallback.arg = &call;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;

	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" on table \"%s\" must be FOR EACH ROW",
						call.tg->tgname, RelationGetRelationName(call.rel))));
	/* a trigger that has its site found the store (it stays, #9) */
	if (unlikely(fcinfo->flinfo->fn_extra == NULL))
		rl_require_store();

	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		tuple = trigdata->tg_newtuple;
		slot = trigdata->tg_newslot;
	}
	else
	{
		tuple = trigdata->tg_trigtuple;
		slot = trigdata->tg_trigslot;
	}
	info = trigger_info_get(&call, fcinfo->flinfo);
	if (likely(!info->runs_sql))
		enforce_row(&call, info, tuple, slot, true, info->stored, &info->row);
	else
		enforce_row_sql(&call, info, tuple, slot);

	error_context_stack = errcallback.previous;
	if (TRIGGER_FIRED_AFTER(trigdata->tg_event))
		return PointerGetDatum(NULL);
	return PointerGetDatum(tuple);
}
