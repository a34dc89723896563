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
 * Cost expressions are prepared once per trigger and kept in a backend-
 * local hash table.  No shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "commands/trigger.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "args.h"
#include "policy.h"
#include "refund.h"

/* the SQLSTATE of a row over its quota */
#define ERRCODE_RL_QUOTA_EXCEEDED	MAKE_SQLSTATE('P','T','4','2','9')

#define COST_PREFIX "cost="

/* a trigger's prepared cost expression */
typedef struct RlCostPlan
{
	Oid			tgoid;			/* hash key */
	char	   *expr;			/* the expression it was prepared from */
	SPIPlanPtr	plan;
} RlCostPlan;

static HTAB *cost_plans = NULL;

PG_FUNCTION_INFO_V1(rl_enforce);

/*
 * The prepared plan computing the cost expression over a row of the
 * trigger's table; prepared again if the trigger's expression changed.
 * Called inside SPI.
 */
static SPIPlanPtr
cost_plan(Trigger *tg, Relation rel, const char *expr)
{
	RlCostPlan *entry;
	bool		found;
	Oid			argtype = RelationGetDescr(rel)->tdtypeid;
	StringInfoData query;

	if (cost_plans == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(RlCostPlan);
		ctl.hcxt = TopMemoryContext;
		cost_plans = hash_create("ratelimit cost plans", 16, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	entry = hash_search(cost_plans, &tg->tgoid, HASH_ENTER, &found);
	if (found && strcmp(entry->expr, expr) == 0)
		return entry->plan;
	if (found)
	{
		SPI_freeplan(entry->plan);
		pfree(entry->expr);
	}
	/* leave the entry consistent if preparing fails */
	hash_search(cost_plans, &tg->tgoid, HASH_REMOVE, NULL);

	initStringInfo(&query);
	appendStringInfo(&query, "SELECT (%s)::bigint FROM (SELECT ($1).*) AS row",
					 expr);
	{
		SPIPlanPtr	plan = SPI_prepare(query.data, 1, &argtype);

		if (plan == NULL)
			elog(ERROR, "could not prepare the cost expression: %s",
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		entry = hash_search(cost_plans, &tg->tgoid, HASH_ENTER, NULL);
		entry->plan = plan;
		entry->expr = MemoryContextStrdup(TopMemoryContext, expr);
	}
	pfree(query.data);
	return entry->plan;
}

/* The cost expression's value for the row. */
static int64
row_cost(Trigger *tg, Relation rel, HeapTuple tuple, const char *expr)
{
	Datum		row = heap_copy_tuple_as_datum(tuple, RelationGetDescr(rel));
	Datum		value;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_plan(cost_plan(tg, rel, expr), &row, NULL, true, 1) !=
		SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not evaluate the cost expression");
	value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
						  &isnull);
	SPI_finish();
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("cost expression \"%s\" of trigger \"%s\" is null for this row",
						expr, tg->tgname),
				 errhint("Use coalesce() in the expression to give such rows a cost.")));
	return DatumGetInt64(value);
}

/*
 * The row's key: the text of the named columns joined with ':'.
 */
static text *
row_key(Trigger *tg, Relation rel, HeapTuple tuple, const char **cost_expr)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	StringInfoData key;
	int			ncols = 0;
	int			i;

	initStringInfo(&key);
	*cost_expr = NULL;
	for (i = 1; i < tg->tgnargs; i++)
	{
		const char *arg = tg->tgargs[i];
		int			attnum;
		char	   *value;

		if (strncmp(arg, COST_PREFIX, strlen(COST_PREFIX)) == 0)
		{
			*cost_expr = arg + strlen(COST_PREFIX);
			continue;
		}
		attnum = SPI_fnumber(tupdesc, arg);
		if (attnum <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" named by trigger \"%s\" does not exist in table \"%s\"",
							arg, tg->tgname, RelationGetRelationName(rel))));
		if (ncols++ > 0)
			appendStringInfoChar(&key, ':');
		value = SPI_getvalue(tuple, tupdesc, attnum);
		if (value != NULL)
			appendStringInfoString(&key, value);
	}
	if (ncols == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" names no key column", tg->tgname),
				 errhint("Use rl_enforce('policy', 'column' [, ...] [, 'cost=expression']).")));
	return cstring_to_text(key.data);
}

/* "per" as an interval's text, for messages. */
static char *
per_text(int64 per)
{
	Interval	iv;

	iv.time = per;
	iv.day = 0;
	iv.month = 0;
	return DatumGetCString(DirectFunctionCall1(interval_out,
											   IntervalPGetDatum(&iv)));
}

/*
 * rl_enforce(policy, key_column [, ...] [, 'cost=expression']): a row
 * trigger, BEFORE or AFTER, for INSERT, UPDATE or DELETE.
 */
Datum
rl_enforce(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Trigger    *tg;
	Relation	rel;
	HeapTuple	tuple;
	const RlPolicy *pol;
	const char *cost_expr;
	text	   *key;
	RlRequest	req;
	RlDecision	d;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_enforce must be called as a trigger")));
	tg = trigdata->tg_trigger;
	rel = trigdata->tg_relation;
	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" must be FOR EACH ROW", tg->tgname)));
	if (tg->tgnargs < 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" needs a policy and at least one key column",
						tg->tgname),
				 errhint("Use rl_enforce('policy', 'column' [, ...] [, 'cost=expression']).")));
	rl_require_store();

	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	pol = rl_policy_get(cstring_to_text(tg->tgargs[0]));
	key = row_key(tg, rel, tuple, &cost_expr);
	rl_policy_request(pol, key, &req);
	if (cost_expr != NULL)
	{
		req.params.cost = row_cost(tg, rel, tuple, cost_expr);
		rl_arg_cost(req.params.cost);
		rl_cost_check(req.algo, &req.params);
	}

	rl_decide(&req, &d);
	if (!d.allowed)
		ereport(ERROR,
				(errcode(ERRCODE_RL_QUOTA_EXCEEDED),
				 errmsg("rate limit exceeded for policy \"%s\"", pol->name),
				 errdetail("Key \"%s\" may use " INT64_FORMAT " per %s; this row costs " INT64_FORMAT ".",
						   text_to_cstring(key), req.params.limit,
						   per_text(req.params.per), req.params.cost),
				 errhint("Retry after %.0f seconds.", ceil(d.retry_after)),
				 errtable(rel)));
	rl_refund_track(&req, &d);

	if (TRIGGER_FIRED_AFTER(trigdata->tg_event))
		return PointerGetDatum(NULL);
	return PointerGetDatum(tuple);
}
