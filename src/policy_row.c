/*-------------------------------------------------------------------------
 *
 * policy_row.c
 *		A policy read from a row of rl_policy: its columns found by name in
 *		the row's descriptor, each checked as a call's argument is, and its
 *		window (a calendar period's zone and anchor) worked out.
 *
 * Columns are found by name (rl_policy_attnos), so a later version that
 * adds, drops or reorders columns of rl_policy moves nothing here; a
 * column added after 0.2.0 may be missing while a database is not updated
 * yet, and reads as NULL.
 *
 * No shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "args.h"
#include "dispatch.h"
#include "policy_row.h"
#include "shed.h"

/* the columns of rl_policy a policy is made of */
typedef enum RlPolicyColumn
{
	PCOL_NAME,
	PCOL_ALGO,
	PCOL_LIMIT,
	PCOL_PER,
	PCOL_BURST,
	PCOL_COST,
	PCOL_BACKEND,
	PCOL_FAIL_MODE,
	PCOL_SHADOW,
	PCOL_TIME_ZONE,				/* optional: 0.3.0 */
	PCOL_PERIOD_ANCHOR,			/* optional: 0.3.0 */
	PCOL_BLOCK_DURATION,
	PCOL_DURABLE,
	PCOL_RESERVE,				/* optional: 0.3.0 */
	PCOL_COUNT
} RlPolicyColumn;

/*
 * The columns by name.  An optional one (added after 0.2.0) may be missing
 * while a database has not been updated yet: it reads as NULL.
 */
static const struct
{
	const char *name;
	Oid			type;
	bool		optional;		/* absent before 0.3.0: read as NULL */
}			policy_columns[PCOL_COUNT] =
{
	[PCOL_NAME] = {"name", TEXTOID},
	[PCOL_ALGO] = {"algo", TEXTOID},
	[PCOL_LIMIT] = {"limit", INT8OID},
	[PCOL_PER] = {"per", INTERVALOID},
	[PCOL_BURST] = {"burst", INT8OID},
	[PCOL_COST] = {"cost", INT8OID},
	[PCOL_BACKEND] = {"backend", TEXTOID},
	[PCOL_FAIL_MODE] = {"fail_mode", TEXTOID},
	[PCOL_SHADOW] = {"shadow", BOOLOID},
	[PCOL_TIME_ZONE] = {"time_zone", TEXTOID, true},
	[PCOL_PERIOD_ANCHOR] = {"period_anchor", TIMESTAMPTZOID, true},
	[PCOL_BLOCK_DURATION] = {"block_duration", INTERVALOID, true},
	[PCOL_DURABLE] = {"durable", BOOLOID, true},
	[PCOL_RESERVE] = {"reserve", FLOAT8OID, true},
};

StaticAssertDecl(PCOL_COUNT == RL_POLICY_COLUMNS,
				 "RL_POLICY_COLUMNS is the number of rl_policy's columns");

/*
 * Find the policy's columns in a descriptor of rl_policy, by name.  A
 * column missing or of another type means the extension's objects were
 * changed by hand.
 */
void
rl_policy_attnos(TupleDesc desc, RlPolicyAttnos *cols)
{
	int			c;
	int			i;

	for (c = 0; c < PCOL_COUNT; c++)
	{
		cols->attno[c] = InvalidAttrNumber;
		for (i = 0; i < desc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);

			if (!att->attisdropped &&
				strcmp(NameStr(att->attname), policy_columns[c].name) == 0)
			{
				if (att->atttypid != policy_columns[c].type)
					ereport(ERROR,
							(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
							 errmsg("column \"%s\" of table \"rl_policy\" has type %s, expected %s",
									policy_columns[c].name,
									format_type_be(att->atttypid),
									format_type_be(policy_columns[c].type)),
							 errhint("Run ALTER EXTENSION ratelimit UPDATE, or recreate the extension.")));
				cols->attno[c] = att->attnum;
				break;
			}
		}
		if (cols->attno[c] == InvalidAttrNumber && !policy_columns[c].optional)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("table \"rl_policy\" has no column \"%s\"",
							policy_columns[c].name),
					 errhint("Run ALTER EXTENSION ratelimit UPDATE, or recreate the extension.")));
	}
}

/*
 * A policy's backend or fail_mode column: one of the values of the setting
 * of the same name, or NULL (RL_SETTING: use the setting).
 */
static int
policy_option(Datum value, bool isnull, const char *column,
			  const struct config_enum_entry *options)
{
	const struct config_enum_entry *o;
	char	   *name;
	StringInfoData valid;

	if (isnull)
		return RL_SETTING;
	name = TextDatumGetCString(value);
	for (o = options; o->name != NULL; o++)
		if (strcmp(o->name, name) == 0)
			return o->val;

	initStringInfo(&valid);
	for (o = options; o->name != NULL; o++)
		appendStringInfo(&valid, "%s, ", o->name);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown %s \"%s\"", column, name),
			 errhint("Valid values are %sor NULL for ratelimit.%s.",
					 valid.data, column)));
	return RL_SETTING;			/* keep compiler quiet */
}

/*
 * A durable policy's state is logged by the shared-memory store: it is
 * decided there, and by an algorithm whose state outlives sessions.
 */
static void
policy_durable_check(const RlPolicy *pol)
{
	if (pol->backend != RL_SETTING && pol->backend != RL_BACKEND_LOCAL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("policy \"%s\": a durable policy must use the local backend",
						pol->name)));
	/* slots are held by backends, which a crash ends: nothing to keep */
	if (rl_algo_holds(pol->algo))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("policy \"%s\": a concurrency limit cannot be durable",
						pol->name),
				 errdetail("Its slots are held by sessions, which a crash or failover ends.")));
}

/*
 * Check one policy row and fill in the policy; cols says where its columns
 * are in desc.  Raises the same errors as a call's arguments would.
 */
void
rl_policy_from_row(HeapTuple tuple, TupleDesc desc, const RlPolicyAttnos *cols,
				   RlPolicy *pol)
{
	Datum		values[PCOL_COUNT];
	bool		nulls[PCOL_COUNT];
	text	   *name;
	int			len;
	int			c;

	for (c = 0; c < PCOL_COUNT; c++)
	{
		values[c] = (Datum) 0;
		nulls[c] = true;
		if (cols->attno[c] != InvalidAttrNumber)
			values[c] = heap_getattr(tuple, cols->attno[c], desc, &nulls[c]);
	}

	if (nulls[PCOL_NAME])
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("\"name\" must not be null")));
	name = DatumGetTextPP(values[PCOL_NAME]);
	len = VARSIZE_ANY_EXHDR(name);
	if (len < 1 || len >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("policy name must be 1 to %d bytes long",
						NAMEDATALEN - 1)));
	memset(pol->name, 0, NAMEDATALEN);
	memcpy(pol->name, VARDATA_ANY(name), len);
	pol->namelen = len;
	pol->stats = (RlStatsHandle) RL_STATS_HANDLE_INIT;

	if (nulls[PCOL_ALGO] || nulls[PCOL_LIMIT] || nulls[PCOL_PER] ||
		nulls[PCOL_COST] || nulls[PCOL_SHADOW])
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("policy \"%s\": algo, limit, per, cost and shadow must not be null",
						pol->name)));
	pol->algo = rl_arg_algo(DatumGetTextPP(values[PCOL_ALGO]), true);
	pol->params.limit = DatumGetInt64(values[PCOL_LIMIT]);
	rl_arg_positive(pol->params.limit, "limit");
	pol->per = *DatumGetIntervalP(values[PCOL_PER]);
	pol->zone_given = !nulls[PCOL_TIME_ZONE];
	pol->zone = pol->zone_given ?
		rl_arg_time_zone(TextDatumGetCString(values[PCOL_TIME_ZONE])) : NULL;
	pol->anchor = nulls[PCOL_PERIOD_ANCHOR] ? RL_NO_ANCHOR :
		rl_arg_anchor(DatumGetTimestampTz(values[PCOL_PERIOD_ANCHOR]));
	rl_policy_period(pol, pol->anchor, &pol->params);
	pol->params.cost = DatumGetInt64(values[PCOL_COST]);
	rl_arg_cost(pol->params.cost);
	pol->params.headroom = 0;	/* a call's priority sets it (shed.c) */
	if (!nulls[PCOL_BURST])
		pol->params.burst = DatumGetInt64(values[PCOL_BURST]);
	rl_params_check(pol->algo, &pol->params, !nulls[PCOL_BURST]);
	pol->backend = policy_option(values[PCOL_BACKEND], nulls[PCOL_BACKEND],
								 "backend", rl_backend_options);
	pol->fail_mode = policy_option(values[PCOL_FAIL_MODE],
								   nulls[PCOL_FAIL_MODE], "fail_mode",
								   rl_fail_mode_options);
	pol->shadow = DatumGetBool(values[PCOL_SHADOW]);
	pol->burst_given = !nulls[PCOL_BURST];
	pol->nlimits = 0;
	pol->limits = NULL;
	pol->block_duration = nulls[PCOL_BLOCK_DURATION] ? 0 :
		rl_arg_duration(DatumGetIntervalP(values[PCOL_BLOCK_DURATION]),
						"block_duration");
	pol->overrides = NULL;
	pol->durable = !nulls[PCOL_DURABLE] && DatumGetBool(values[PCOL_DURABLE]);
	if (pol->durable)
		policy_durable_check(pol);
	pol->reserve = nulls[PCOL_RESERVE] ? 0 :
		rl_shed_reserve(DatumGetFloat8(values[PCOL_RESERVE]), "reserve");
}

/*
 * A policy read from a row of rl_policy (or of a query over it) with the
 * descriptor desc, by column name, checked as the validation trigger
 * checks it (override_validate.c reads an override's policy so).
 */
void
rl_policy_from_tuple(HeapTuple tuple, TupleDesc desc, RlPolicy *pol)
{
	RlPolicyAttnos cols;

	rl_policy_attnos(desc, &cols);
	rl_policy_from_row(tuple, desc, &cols, pol);
}

/*
 * The policy's window, with an anchor (the policy's, or a key's): sets
 * p->per and p->period.  The zone is the policy's time_zone, or else
 * ratelimit.time_zone's as it is now.
 */
void
rl_policy_period(const RlPolicy *pol, int64 anchor, RlParams *p)
{
	rl_arg_period(pol->algo, &pol->per,
				  pol->zone_given ? pol->zone : rl_arg_time_zone_setting(),
				  pol->zone_given, anchor, p);
}
