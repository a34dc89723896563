/*-------------------------------------------------------------------------
 *
 * override_validate.c
 *		The validation trigger of rl_override: an override a call could
 *		not use is refused when written, with the errors of a call's
 *		arguments.
 *
 * No shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "args.h"
#include "policy.h"

PG_FUNCTION_INFO_V1(rl_override_validate);

/* A column of a row of rl_override, by name. */
static Datum
override_column(HeapTuple tuple, TupleDesc desc, const char *name,
				bool *isnull)
{
	int			attno = SPI_fnumber(desc, name);

	if (attno <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"rl_override\" has no column \"%s\"", name),
				 errhint("Run ALTER EXTENSION ratelimit UPDATE, or recreate the extension.")));
	return heap_getattr(tuple, attno, desc, isnull);
}

/*
 * BEFORE INSERT OR UPDATE row trigger on rl_override: refuse an override
 * a call could not use, with the errors of a call's arguments.  Its policy
 * must exist (42704; read as the transaction sees it, so that a policy and
 * its overrides can be written together), its key fit, its limit and
 * burst be positive, its burst apply to the policy's algorithm, and the
 * policy's cost fit in the capacity it leaves.
 */
Datum
rl_override_validate(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	tuple;
	Datum		policy;
	Datum		key;
	Datum		limit;
	Datum		burst;
	Datum		anchor;
	bool		policy_null;
	bool		key_null;
	bool		limit_null;
	bool		burst_null;
	bool		anchor_null;
	Oid			argtype = TEXTOID;
	StringInfoData query;
	RlPolicy	pol;
	RlParams	params;
	const char *bytes;
	int			len;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "rl_override_validate must be called as a row trigger");
	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	desc = RelationGetDescr(trigdata->tg_relation);
	policy = override_column(tuple, desc, "policy", &policy_null);
	key = override_column(tuple, desc, "key", &key_null);
	limit = override_column(tuple, desc, "limit", &limit_null);
	burst = override_column(tuple, desc, "burst", &burst_null);
	anchor = override_column(tuple, desc, "period_anchor", &anchor_null);
	if (policy_null || key_null)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("\"policy\" and \"key\" of an override must not be null")));
	rl_arg_key(key, &bytes, &len);

	initStringInfo(&query);
	appendStringInfo(&query, "SELECT * FROM %s.rl_policy WHERE name = $1",
					 quote_identifier(get_namespace_name(RelationGetNamespace(trigdata->tg_relation))));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(query.data, 1, &argtype, &policy, NULL, false,
							  1) != SPI_OK_SELECT)
		elog(ERROR, "could not read table \"rl_policy\"");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("rate-limit policy \"%s\" does not exist",
						TextDatumGetCString(policy)),
				 errhint("An override names a policy of table rl_policy.")));
	rl_policy_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, &pol);
	SPI_finish();

	params = pol.params;
	/* a key's anchor: for the policy's calendar periods only (22023) */
	if (!anchor_null)
		rl_policy_period(&pol, rl_arg_anchor(DatumGetTimestampTz(anchor)),
						 &params);
	if (!limit_null)
	{
		params.limit = DatumGetInt64(limit);
		rl_arg_positive(params.limit, "limit");
		if (!pol.burst_given)
			params.burst = params.limit;
	}
	if (!burst_null)
	{
		params.burst = DatumGetInt64(burst);
		rl_params_check(pol.algo, &params, true);
	}
	else
		rl_cost_check(pol.algo, &params);
	return PointerGetDatum(tuple);
}
