/*-------------------------------------------------------------------------
 *
 * trigger.c
 *		rl_enforce: a quota trigger to attach to any table.
 *
 *	CREATE TRIGGER orders_quota BEFORE INSERT ON orders FOR EACH ROW
 *		EXECUTE FUNCTION rl_enforce('orders_per_tenant', 'tenant_id'
 *									[, 'more_key_columns' ...]
 *									[, 'cost=<expression over the row>']);
 *
 * Each row (NEW for INSERT and UPDATE, OLD for DELETE) is one call under
 * the policy, keyed by the named columns' text values joined with ':'
 * (a NULL contributes an empty part), costing the policy's cost or the
 * expression's value.  A denied row raises SQLSTATE PT429 with the key, the
 * limit and the retry-after in the detail and hint (PostgREST answers
 * PT429 with HTTP 429).  What an admitted row consumed is given back if its
 * (sub)transaction aborts.
 *
 * Arguments.  An argument is the cost expression if it reads "cost", blanks,
 * "=", in any case ("cost=n", "COST = n"); otherwise it names a key column:
 * the column of exactly that name, else the only one whose name differs
 * from it in case alone.  What could be read two ways is refused: two cost
 * arguments, an argument of the cost form that also names a column, a name
 * matching several columns in case alone.  Every error names the trigger
 * and the table, in its message or (for errors of PostgreSQL's parser,
 * executor and the functions the expression calls) in its context.
 *
 * The trigger cache.  What a trigger resolves from its arguments and its
 * table's definition (the key columns' attribute numbers, the prepared cost
 * expression) is kept per session in an RlTriggerInfo, found by the
 * trigger's OID.  Any change to the table or to its triggers (ALTER TABLE,
 * CREATE OR REPLACE / ALTER / DROP TRIGGER) makes PostgreSQL send a
 * relcache invalidation for the table, to this session at its next
 * command and to every other session before it next uses the table; the
 * callback marks the table's infos stale, and the next row resolves them
 * again, exactly as a new session would.  A stale info may still be in use
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
#include "utils/timestamp.h"

#include "args.h"
#include "dispatch.h"
#include "policy.h"
#include "trigger.h"

/* the SQLSTATE of a row over its quota */
#define ERRCODE_RL_QUOTA_EXCEEDED	MAKE_SQLSTATE('P','T','4','2','9')

#define USAGE_HINT \
	"Use rl_enforce('policy', 'column' [, ...] [, 'cost=expression'])."

/*
 * The query a cost expression runs in: the row is $1, its columns are in
 * scope by name.  The expression has been parsed alone first, so it is one
 * expression; the newline ends a "--" comment at its end.
 */
#define COST_QUERY_PREFIX	"SELECT ("
#define COST_QUERY_SUFFIX	"\n)::bigint FROM (SELECT ($1).*) AS row"

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
	struct RlTriggerInfo *next_retired; /* in the retired list */
	MemoryContext cxt;
	char	   *policy;			/* the policy's name (first argument) */
	int			nkeys;
	AttrNumber *keys;			/* the key columns, in argument order */
	char	   *cost_expr;		/* after "cost =", trimmed; or NULL */
	SPIPlanPtr	cost_plan;		/* kept; NULL without a cost expression */
} RlTriggerInfo;

typedef struct RlTriggerEntry
{
	Oid			tgoid;			/* hash key */
	RlTriggerInfo *info;		/* NULL while (or if) being resolved */
} RlTriggerEntry;

/* Where a call is in the cost expression, for its error reports */
typedef enum RlCostPhase
{
	COST_NONE,					/* elsewhere */
	COST_PARSE,					/* parsing the expression alone */
	COST_PREPARE,				/* preparing the query around it */
	COST_RUN					/* computing a row's cost */
} RlCostPhase;

/* One rl_enforce call, as its error context callback sees it */
typedef struct RlTriggerCall
{
	Trigger    *tg;
	Relation	rel;
	RlCostPhase phase;
	const char *cost_expr;		/* while phase is not COST_NONE */
} RlTriggerCall;

static HTAB *trigger_cache = NULL;

/* replaced infos still in use, freed once they are not */
static RlTriggerInfo *retired = NULL;

/* the table whose trigger is being resolved, and whether it changed since */
static Oid	resolving_relid = InvalidOid;
static bool resolving_stale = false;

/* ratelimit.trigger_at: the time quota triggers decide at; "": the clock */
static char *rl_trigger_at = NULL;

PG_FUNCTION_INFO_V1(rl_enforce);

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
							   NULL, NULL, NULL);
}

/* ratelimit.trigger_at as the time of a call, or RL_NO_TIME when unset. */
static int64
trigger_time(void)
{
	Datum		at;

	if (rl_trigger_at == NULL || rl_trigger_at[0] == '\0')
		return RL_NO_TIME;
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
	errcontext("cost expression of quota trigger \"%s\" on table \"%s\"",
			   tgname, relname);
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

	if (relid == InvalidOid || relid == resolving_relid)
		resolving_stale = true;
	hash_seq_init(&seq, trigger_cache);
	while ((entry = hash_seq_search(&seq)) != NULL)
		if (entry->info != NULL &&
			(relid == InvalidOid || entry->info->relid == relid))
			entry->info->valid = false;
}

/* Free an info no call uses. */
static void
trigger_info_free(RlTriggerInfo *info)
{
	if (info->cost_plan != NULL)
		SPI_freeplan(info->cost_plan);
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
 * If the argument has the cost form ("cost", "=", any case, blanks around
 * them), its expression without the blanks around it, in the current
 * memory context; otherwise NULL.
 */
static char *
cost_argument(const char *arg)
{
	const char *p = arg;
	char	   *expr;
	int			len;

	while (scanner_isspace(*p))
		p++;
	if (pg_strncasecmp(p, "cost", 4) != 0)
		return NULL;
	p += 4;
	while (scanner_isspace(*p))
		p++;
	if (*p != '=')
		return NULL;
	p++;
	while (scanner_isspace(*p))
		p++;
	expr = pstrdup(p);
	len = strlen(expr);
	while (len > 0 && scanner_isspace(expr[len - 1]))
		expr[--len] = '\0';
	return expr;
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
 * memory context): the policy, the key columns and the cost expression.
 */
static void
trigger_parse_args(RlTriggerCall *call, RlTriggerInfo *info)
{
	Trigger    *tg = call->tg;
	const char *relname = RelationGetRelationName(call->rel);
	int			cost_arg = 0;
	int			i;

	if (tg->tgnargs < 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" on table \"%s\" needs a policy and at least one key column",
						tg->tgname, relname),
				 errhint(USAGE_HINT)));
	info->policy = pstrdup(tg->tgargs[0]);
	info->keys = palloc(sizeof(AttrNumber) * (tg->tgnargs - 1));
	for (i = 1; i < tg->tgnargs; i++)
	{
		const char *arg = tg->tgargs[i];
		char	   *expr = cost_argument(arg);
		AttrNumber	attnum = column_named(call, arg);

		if (expr == NULL)
		{
			if (attnum == InvalidAttrNumber)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_COLUMN),
						 errmsg("column \"%s\" named by trigger \"%s\" does not exist in table \"%s\"",
								arg, tg->tgname, relname)));
			info->keys[info->nkeys++] = attnum;
			continue;
		}
		if (attnum != InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_AMBIGUOUS_COLUMN),
					 errmsg("argument \"%s\" of trigger \"%s\" could be column \"%s\" of table \"%s\" or a cost expression",
							arg, tg->tgname,
							NameStr(TupleDescAttr(RelationGetDescr(call->rel),
												  attnum - 1)->attname),
							relname),
					 errhint("Rename the column, or write the expression so that it differs from the column's name.")));
		if (cost_arg > 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("trigger \"%s\" on table \"%s\" has more than one cost expression",
							tg->tgname, relname),
					 errdetail("Both \"%s\" and \"%s\" are of the form \"cost=expression\".",
							   tg->tgargs[cost_arg], arg),
					 errhint(USAGE_HINT)));
		if (expr[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cost expression of trigger \"%s\" on table \"%s\" is empty",
							tg->tgname, relname),
					 errhint("Write an expression over the row after \"cost=\", or leave the argument out to use the policy's cost.")));
		info->cost_expr = expr;
		cost_arg = i;
	}
	if (info->nkeys == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" on table \"%s\" names no key column",
						tg->tgname, relname),
				 errhint(USAGE_HINT)));
}

/*
 * Refuse a cost expression that is not one expression (a list, an alias,
 * "*", or clauses such as FROM): parsed alone, it must be a SELECT of one
 * target and nothing else.
 */
static void
cost_check_syntax(RlTriggerCall *call, const char *expr)
{
	List	   *stmts;
	SelectStmt *sel;
	SelectStmt *bare;
	ResTarget  *target = NULL;

	call->phase = COST_PARSE;
	stmts = raw_parser(expr, RAW_PARSE_PLPGSQL_EXPR);
	sel = (SelectStmt *) linitial_node(RawStmt, stmts)->stmt;
	bare = copyObject(sel);
	bare->targetList = NIL;
	if (list_length(sel->targetList) == 1)
		target = linitial_node(ResTarget, sel->targetList);
	if (target == NULL || target->name != NULL ||
		(IsA(target->val, ColumnRef) &&
		 IsA(llast(castNode(ColumnRef, target->val)->fields), A_Star)) ||
		!equal(bare, makeNode(SelectStmt)))
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("cost expression \"%s\" of trigger \"%s\" on table \"%s\" is not a single expression",
						expr, call->tg->tgname,
						RelationGetRelationName(call->rel)),
				 errhint("Write one expression over the row's columns, without a list, an alias or clauses such as FROM.")));
}

/*
 * The kept plan computing a cost expression over a row of the trigger's
 * table.
 */
static SPIPlanPtr
cost_prepare(RlTriggerCall *call, const char *expr)
{
	Oid			argtype = RelationGetDescr(call->rel)->tdtypeid;
	char	   *query;
	SPIPlanPtr	plan;

	call->cost_expr = expr;
	cost_check_syntax(call, expr);

	call->phase = COST_PREPARE;
	query = psprintf(COST_QUERY_PREFIX "%s" COST_QUERY_SUFFIX, expr);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(query, 1, &argtype);
	if (plan == NULL)
		elog(ERROR, "could not prepare the cost expression: %s",
			 SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	SPI_finish();
	pfree(query);
	call->phase = COST_NONE;
	return plan;
}

/*
 * Resolve the trigger afresh from its arguments and its table's current
 * definition, and make that its info.  Retires the info it replaces.
 */
static RlTriggerInfo *
trigger_info_resolve(RlTriggerCall *call)
{
	Oid			tgoid = call->tg->tgoid;
	RlTriggerEntry *entry;
	RlTriggerInfo *info;
	MemoryContext cxt;
	MemoryContext old;
	bool		found;

	if (trigger_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(RlTriggerEntry);
		ctl.hcxt = CacheMemoryContext;
		trigger_cache = hash_create("ratelimit triggers", 16, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		CacheRegisterRelcacheCallback(trigger_cache_inval, (Datum) 0);
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
	MemoryContextSwitchTo(old);
	if (info->cost_expr != NULL)
		info->cost_plan = cost_prepare(call, info->cost_expr);

	/* nothing below fails */
	MemoryContextSetParent(cxt, CacheMemoryContext);
	info->valid = !resolving_stale;
	resolving_relid = InvalidOid;
	trigger_cache_sweep(entry);
	entry->info = info;
	return info;
}

/* The trigger's info, resolved again if its table or the trigger changed. */
static RlTriggerInfo *
trigger_info_get(RlTriggerCall *call)
{
	RlTriggerEntry *entry = NULL;

	if (trigger_cache != NULL)
		entry = hash_search(trigger_cache, &call->tg->tgoid, HASH_FIND, NULL);
	if (entry != NULL && entry->info != NULL && entry->info->valid &&
		entry->info->relid == RelationGetRelid(call->rel))
		return entry->info;
	return trigger_info_resolve(call);
}

/* The cost expression's value for the row. */
static int64
row_cost(RlTriggerCall *call, const RlTriggerInfo *info, HeapTuple tuple)
{
	Datum		row = heap_copy_tuple_as_datum(tuple,
											   RelationGetDescr(call->rel));
	Datum		value;
	bool		isnull;

	call->phase = COST_RUN;
	call->cost_expr = info->cost_expr;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_plan(info->cost_plan, &row, NULL, true, 1) !=
		SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not evaluate the cost expression");
	value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
						  &isnull);
	SPI_finish();
	call->phase = COST_NONE;
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("cost expression \"%s\" of trigger \"%s\" on table \"%s\" is null for this row",
						info->cost_expr, call->tg->tgname,
						RelationGetRelationName(call->rel)),
				 errhint("Use coalesce() in the expression to give such rows a cost.")));
	return DatumGetInt64(value);
}

/*
 * The row's key: the text of the key columns joined with ':', a NULL
 * giving an empty part.
 */
static text *
row_key(const RlTriggerInfo *info, Relation rel, HeapTuple tuple)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	StringInfoData key;
	int			i;

	initStringInfo(&key);
	for (i = 0; i < info->nkeys; i++)
	{
		char	   *value = SPI_getvalue(tuple, tupdesc, info->keys[i]);

		if (i > 0)
			appendStringInfoChar(&key, ':');
		if (value != NULL)
			appendStringInfoString(&key, value);
	}
	return cstring_to_text(key.data);
}

/*
 * Decide the row under the trigger's policy; PT429 if denied.
 */
static void
enforce_row(RlTriggerCall *call, const RlTriggerInfo *info, HeapTuple tuple)
{
	const RlPolicy *pol;
	text	   *key;
	RlRequest	req;
	RlDecision	d;

	pol = rl_policy_find(info->policy, strlen(info->policy));
	if (pol == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("rate-limit policy \"%s\" named by trigger \"%s\" on table \"%s\" does not exist",
						info->policy, call->tg->tgname,
						RelationGetRelationName(call->rel)),
				 errhint("Policies are the rows of table rl_policy.")));
	key = row_key(info, call->rel, tuple);
	rl_policy_request(pol, key, &req);
	if (info->cost_plan != NULL)
	{
		req.params.cost = row_cost(call, info, tuple);
		rl_arg_cost(req.params.cost);
		rl_cost_check(req.algo, &req.params);
	}

	req.at = trigger_time();
	/* what an admitted row consumed goes back if its transaction aborts */
	req.track = true;
	rl_decide(&req, &d);
	if (!d.out.allowed)
	{
		Interval   *per = rl_per_interval(&req.params);

		ereport(ERROR,
				(errcode(ERRCODE_RL_QUOTA_EXCEEDED),
				 errmsg("rate limit exceeded for policy \"%s\"", pol->name),
				 errdetail("Key \"%s\" may use " INT64_FORMAT " per %s; this row costs " INT64_FORMAT ".",
						   text_to_cstring(key), req.params.limit,
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(per))),
						   req.params.cost),
				 errhint("Retry after %.0f seconds.", ceil(d.out.retry_after)),
				 errtable(call->rel)));
	}
}

/*
 * rl_enforce(policy, key_column [, ...] [, 'cost=expression']): a row
 * trigger, BEFORE or AFTER, for INSERT, UPDATE or DELETE.
 */
Datum
rl_enforce(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	RlTriggerCall call;
	ErrorContextCallback errcallback;
	RlTriggerInfo *info;
	HeapTuple	tuple;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_enforce must be called as a trigger")));
	call.tg = trigdata->tg_trigger;
	call.rel = trigdata->tg_relation;
	call.phase = COST_NONE;
	call.cost_expr = NULL;
	errcallback.callback = trigger_error_callback;
	errcallback.arg = &call;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;

	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" on table \"%s\" must be FOR EACH ROW",
						call.tg->tgname, RelationGetRelationName(call.rel))));
	rl_require_store();

	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	info = trigger_info_get(&call);
	/* a cost expression writing to the table may replace info meanwhile */
	info->use_count++;
	PG_TRY();
	{
		enforce_row(&call, info, tuple);
	}
	PG_FINALLY();
	{
		info->use_count--;
	}
	PG_END_TRY();

	error_context_stack = errcallback.previous;
	if (TRIGGER_FIRED_AFTER(trigdata->tg_event))
		return PointerGetDatum(NULL);
	return PointerGetDatum(tuple);
}
