/*-------------------------------------------------------------------------
 *
 * functions.c
 *		The SQL-callable functions that decide: rl_allow, rl_check, their
 *		policy forms, rl_allow_all, rl_check_all, rl_wait; rl_acquire and
 *		rl_release (slots of a concurrency limit).  Argument checks and
 *		results; the decisions are the dispatcher's.
 *
 * Every argument error is reported here, before any lock is taken, with a
 * SQLSTATE of class 22 and a message naming the argument (docs/reference.md
 * lists them).  functions_admin.c has the administration and observation
 * functions.  No shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "args.h"
#include "dispatch.h"
#include "keyhash.h"
#include "policy.h"
#include "policy_limit.h"
#include "shed.h"

/* argument positions shared by rl_allow and rl_check */
enum
{
	ARG_KEY,
	ARG_ALGO,
	ARG_LIMIT,
	ARG_PER,
	ARG_COST,
	ARG_BURST,
	ARG_AT,
	ARG_PRIORITY,				/* 0.3.0 */
	ARG_RESERVE					/* 0.3.0 */
};

/* arguments of the policy forms: (key, policy, at, cost, priority) */
enum
{
	PARG_KEY,
	PARG_POLICY,
	PARG_AT,
	PARG_COST,
	PARG_PRIORITY				/* 0.3.0 */
};

/* no such argument (rl_policy_args) */
#define NO_ARG		(-1)

PG_FUNCTION_INFO_V1(rl_allow);
PG_FUNCTION_INFO_V1(rl_check);
PG_FUNCTION_INFO_V1(rl_allow_policy);
PG_FUNCTION_INFO_V1(rl_check_policy);
PG_FUNCTION_INFO_V1(rl_allow_all);
PG_FUNCTION_INFO_V1(rl_check_all);
PG_FUNCTION_INFO_V1(rl_wait);
PG_FUNCTION_INFO_V1(rl_wait_policy);
PG_FUNCTION_INFO_V1(rl_adjust);

/* the longest algorithm name a call site remembers */
#define SITE_ALGO_MAX	32

/*
 * What one call site (an expression calling one of these functions: its
 * FmgrInfo's fn_extra) keeps from call to call, in the FmgrInfo's memory
 * context.  Repeated arguments cost no checks: the algorithm name and
 * parameters that were checked last, and what they made (a call checking
 * the same values gets the same result, so none is checked again); the
 * policy a name found; rl_check's result shape.
 */
typedef struct RlCallSite
{
	struct RlDecisionShape *shape;	/* rl_check's result, or NULL */
	bool		checked;		/* the arguments below were checked */
	bool		consts;			/* ... and are constants of the expression */
	int			algolen;
	char		algoname[SITE_ALGO_MAX];
	int64		limit;
	Interval	per;
	int64		cost;
	bool		burst_given;
	int64		burst;
	const pg_tz *tz;			/* ratelimit.time_zone's zone then */
	RlAlgo		algo;			/* what they made */
	RlParams	params;
	RlStatsHandle stats;		/* with consts: where its calls count */
	RlPolicyRef policy;			/* the policy forms' */
} RlCallSite;

/* The call site's memory, made at its first call. */
static RlCallSite *
call_site(FunctionCallInfo fcinfo)
{
	if (unlikely(fcinfo->flinfo->fn_extra == NULL))
		fcinfo->flinfo->fn_extra =
			MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt,
								   sizeof(RlCallSite));
	return (RlCallSite *) fcinfo->flinfo->fn_extra;
}

/*
 * Are these the arguments the call site checked last, under the same
 * ratelimit.time_zone (a calendar window's bounds follow it)?  algo: the
 * algorithm name; the parameters as passed.
 */
static inline bool
site_same_args(const RlCallSite *site, const text *algo, int64 limit,
			   const Interval *per, int64 cost, bool burst_given, int64 burst)
{
	int			len = VARSIZE_ANY_EXHDR(algo);

	return site->checked && site->algolen == len && site->limit == limit &&
		site->tz == rl_arg_time_zone_setting() &&
		site->cost == cost && site->burst_given == burst_given &&
		(!burst_given || site->burst == burst) &&
		site->per.time == per->time && site->per.day == per->day &&
		site->per.month == per->month &&
		rl_key_equal(site->algoname, VARDATA_ANY(algo), len);
}

/*
 * Are the arguments from algo to burst constants of the expression that
 * calls the function (fn_expr)?  Their values then stay the same for as
 * long as the call site does, so what was checked once holds without
 * comparing them again.  A parameter is not taken for one: PL/pgSQL keeps
 * a simple expression's state across evaluations with other values.
 */
static bool
site_args_const(FunctionCallInfo fcinfo)
{
	Node	   *expr = fcinfo->flinfo->fn_expr;
	List	   *args;
	int			i;

	if (expr == NULL || !IsA(expr, FuncExpr))
		return false;
	args = ((FuncExpr *) expr)->args;
	if (list_length(args) != PG_NARGS() || PG_NARGS() <= ARG_BURST)
		return false;
	for (i = ARG_ALGO; i <= ARG_BURST; i++)
		if (!IsA(list_nth(args, i), Const))
			return false;
	return true;
}

/*
 * The algorithm and parameters of a call of rl_allow / rl_check / rl_wait
 * whose call site has not checked them as constants: each checked (or,
 * repeated, taken from what the call site checked last), and remembered.
 * The arguments' nulls are checked here.
 */
static pg_noinline void
request_params(FunctionCallInfo fcinfo, RlCallSite *site, RlRequest *req)
{
	RlParams   *p = &req->params;
	text	   *algo;
	int64		limit;
	Interval   *per;
	int64		cost;
	bool		burst_given;
	int64		burst = 0;

	/* a site that checked arguments once found the store (it stays) */
	if (!site->checked)
		rl_require_store();
	if (PG_ARGISNULL(ARG_KEY) || PG_ARGISNULL(ARG_ALGO) ||
		PG_ARGISNULL(ARG_LIMIT) || PG_ARGISNULL(ARG_PER) ||
		PG_ARGISNULL(ARG_COST))
	{
		rl_arg_not_null(fcinfo, ARG_KEY, "key");
		rl_arg_not_null(fcinfo, ARG_ALGO, "algo");
		rl_arg_not_null(fcinfo, ARG_LIMIT, "limit");
		rl_arg_not_null(fcinfo, ARG_PER, "per");
		rl_arg_not_null(fcinfo, ARG_COST, "cost");
	}

	algo = PG_GETARG_TEXT_PP(ARG_ALGO);
	limit = PG_GETARG_INT64(ARG_LIMIT);
	per = PG_GETARG_INTERVAL_P(ARG_PER);
	cost = PG_GETARG_INT64(ARG_COST);
	burst_given = !PG_ARGISNULL(ARG_BURST);
	if (burst_given)
		burst = PG_GETARG_INT64(ARG_BURST);

	if (site_same_args(site, algo, limit, per, cost, burst_given, burst))
	{
		req->algo = site->algo;
		*p = site->params;
		return;
	}

	site->checked = site->consts = false;
	req->algo = rl_arg_algo(algo, false);
	p->limit = limit;
	rl_arg_positive(p->limit, "limit");
	rl_arg_period(req->algo, per, rl_arg_time_zone_setting(), false,
				  RL_NO_ANCHOR, p);
	p->cost = cost;
	rl_arg_cost(p->cost);
	p->burst = burst;
	rl_params_check(req->algo, p, burst_given);

	/* checked: remember them, if the name fits */
	if (VARSIZE_ANY_EXHDR(algo) <= SITE_ALGO_MAX)
	{
		site->algolen = VARSIZE_ANY_EXHDR(algo);
		memcpy(site->algoname, VARDATA_ANY(algo), site->algolen);
		site->limit = limit;
		site->per = *per;
		site->cost = cost;
		site->burst_given = burst_given;
		site->burst = burst;
		site->tz = rl_arg_time_zone_setting();
		site->algo = req->algo;
		site->params = *p;
		site->checked = true;
		site->consts = site_args_const(fcinfo);
		site->stats = (RlStatsHandle) RL_STATS_HANDLE_INIT;
	}
}

/*
 * Build the request from the arguments of rl_allow / rl_check / rl_wait;
 * only the first two have "at".  The priority is argument priority_arg,
 * the reserve the next one (0.3.0: beyond those of an older definition).
 * A call site whose algorithm and parameters are constants it checked
 * once, under the same ratelimit.time_zone (a calendar window's bounds
 * follow it), checks only the key (#9).  The key points into the
 * (detoasted) argument.  Always inline (#9: a frame less per call).
 */
static pg_attribute_always_inline void
request_from_args(FunctionCallInfo fcinfo, bool has_at, int priority_arg,
				  RlRequest *req)
{
	RlCallSite *site = call_site(fcinfo);

	rl_request_init(req);
	req->dbid = MyDatabaseId;
	if (likely(site->consts && !PG_ARGISNULL(ARG_KEY) &&
			   site->tz == rl_arg_time_zone_setting()))
	{
		req->algo = site->algo;
		req->params = site->params;
		req->stats = &site->stats;
	}
	else
		request_params(fcinfo, site, req);
	rl_arg_key(PG_GETARG_DATUM(ARG_KEY), &req->key, &req->keylen);
	if (has_at && !PG_ARGISNULL(ARG_AT))
		req->at = rl_arg_at(PG_GETARG_TIMESTAMPTZ(ARG_AT));
	rl_shed_args(fcinfo, priority_arg, priority_arg + 1, req);
}

/*
 * Decide a direct call, remembering its consumption for a refund if
 * ratelimit.refund_on_rollback is on.
 */
static void
decide_direct(RlRequest *req, RlDecision *d)
{
	req->track = rl_refund_on_rollback;
	rl_decide_policy(req, d);
}

/*
 * The columns a decision is reported in.  Results are filled by column
 * name, so the library serves any version of the SQL definitions: a
 * database still on 0.2.0's six-column rl_decision, or a later one.
 */
typedef enum RlDecisionColumn
{
	DCOL_KEY,
	DCOL_POLICY,
	DCOL_ALLOWED,
	DCOL_LIMIT,
	DCOL_REMAINING,
	DCOL_RETRY_AFTER,
	DCOL_RESET_AT,
	DCOL_DELAY,
	DCOL_CAPACITY,
	DCOL_PER,
	DCOL_COUNT
} RlDecisionColumn;

static const struct
{
	const char *name;
	Oid			type;
}			decision_columns[DCOL_COUNT] =
{
	[DCOL_KEY] = {"key", TEXTOID},
	[DCOL_POLICY] = {"policy", TEXTOID},
	[DCOL_ALLOWED] = {"allowed", BOOLOID},
	[DCOL_LIMIT] = {"limit", INT8OID},
	[DCOL_REMAINING] = {"remaining", INT8OID},
	[DCOL_RETRY_AFTER] = {"retry_after", FLOAT8OID},
	[DCOL_RESET_AT] = {"reset_at", TIMESTAMPTZOID},
	[DCOL_DELAY] = {"delay", FLOAT8OID},
	[DCOL_CAPACITY] = {"capacity", INT8OID},
	[DCOL_PER] = {"per", INTERVALOID},
};

/*
 * A result's descriptor, and for each of its attributes the decision
 * column it holds (-1: none, left NULL).
 */
typedef struct RlDecisionShape
{
	TupleDesc	tupdesc;
	int8		column[FLEXIBLE_ARRAY_MEMBER];
} RlDecisionShape;

/* Map a result's attributes to decision columns, allocating in cxt. */
static RlDecisionShape *
decision_shape(TupleDesc tupdesc, MemoryContext cxt)
{
	RlDecisionShape *shape;
	int			i;
	int			c;

	shape = MemoryContextAlloc(cxt, offsetof(RlDecisionShape, column) +
							   sizeof(int8) * tupdesc->natts);
	shape->tupdesc = tupdesc;
	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, i);

		shape->column[i] = -1;
		if (att->attisdropped)
			continue;
		for (c = 0; c < DCOL_COUNT; c++)
			if (strcmp(NameStr(att->attname), decision_columns[c].name) == 0)
				break;
		if (c == DCOL_COUNT)
			continue;
		if (att->atttypid != decision_columns[c].type)
			elog(ERROR, "column \"%s\" of a decision has type %u, expected %u",
				 decision_columns[c].name, att->atttypid,
				 decision_columns[c].type);
		shape->column[i] = c;
	}
	return shape;
}

/*
 * Fill a row of that shape with a decision; key and policy are the
 * call's (rl_check_all's rows have them).  The capacity is what remaining
 * counts against: the burst for the buckets, the limit otherwise.
 */
static void
decision_values(const RlDecisionShape *shape, const RlRequest *req,
				const RlDecision *d, Datum key, Datum policy,
				Datum *values, bool *nulls)
{
	int			i;

	for (i = 0; i < shape->tupdesc->natts; i++)
	{
		nulls[i] = false;
		switch (shape->column[i])
		{
			case DCOL_KEY:
				values[i] = key;
				break;
			case DCOL_POLICY:
				values[i] = policy;
				break;
			case DCOL_ALLOWED:
				values[i] = BoolGetDatum(d->out.allowed);
				break;
			case DCOL_LIMIT:
				values[i] = Int64GetDatum(req->params.limit);
				break;
			case DCOL_REMAINING:
				values[i] = Int64GetDatum(d->out.remaining);
				break;
			case DCOL_RETRY_AFTER:
				values[i] = Float8GetDatum(d->out.retry_after);
				break;
			case DCOL_RESET_AT:
				values[i] = TimestampTzGetDatum(rl_clock_timestamptz(d->out.reset_at));
				break;
			case DCOL_DELAY:
				values[i] = Float8GetDatum(d->out.delay);
				break;
			case DCOL_CAPACITY:
				values[i] = Int64GetDatum(rl_algo_capacity(req->algo,
														   &req->params));
				break;
			case DCOL_PER:
				values[i] = IntervalPGetDatum(rl_per_interval(&req->params));
				break;
			default:
				nulls[i] = true;
				break;
		}
	}
}

/*
 * A decision as an rl_decision datum.  The blessed descriptor and its
 * shape are built once per call site and kept with it.
 */
static Datum
decision_datum(FunctionCallInfo fcinfo, const RlRequest *req,
			   const RlDecision *d)
{
	RlCallSite *site = call_site(fcinfo);
	RlDecisionShape *shape = site->shape;
	Datum	   *values;
	bool	   *nulls;

	if (shape == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
		TupleDesc	tupdesc;

		if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "function must return type rl_decision");
		tupdesc = BlessTupleDesc(CreateTupleDescCopy(tupdesc));
		shape = decision_shape(tupdesc, fcinfo->flinfo->fn_mcxt);
		site->shape = shape;
		MemoryContextSwitchTo(old);
	}
	values = palloc(sizeof(Datum) * shape->tupdesc->natts);
	nulls = palloc(sizeof(bool) * shape->tupdesc->natts);
	decision_values(shape, req, d, (Datum) 0, (Datum) 0, values, nulls);
	return HeapTupleGetDatum(heap_form_tuple(shape->tupdesc, values, nulls));
}

/*
 * rl_allow(key, algo, limit, per, cost, burst, at, priority, reserve)
 * returns boolean (0.2.0's definition: without the last two)
 */
Datum
rl_allow(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	RlDecision	d;

	request_from_args(fcinfo, true, ARG_PRIORITY, &req);
	decide_direct(&req, &d);
	PG_RETURN_BOOL(d.out.allowed);
}

/*
 * rl_check(same arguments) returns rl_decision: (allowed, limit, remaining,
 * retry_after, reset_at, delay, capacity, per).
 */
Datum
rl_check(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	RlDecision	d;

	request_from_args(fcinfo, true, ARG_PRIORITY, &req);
	decide_direct(&req, &d);
	PG_RETURN_DATUM(decision_datum(fcinfo, &req, &d));
}

/*
 * rl_allow(key, policy, at, cost, priority) returns boolean (0.2.0's
 * definition: without priority)
 */
Datum
rl_allow_policy(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	RlDecision	d;
	char		buf[RL_MAX_STORED_KEY];

	rl_policy_args(fcinfo, &call_site(fcinfo)->policy, buf, PARG_KEY,
				   PARG_POLICY, PARG_AT, PARG_COST, &req);
	rl_algo_check_use(req.algo, false, req.policy);
	rl_shed_args(fcinfo, PARG_PRIORITY, -1, &req);
	decide_direct(&req, &d);
	PG_RETURN_BOOL(d.out.allowed);
}

/*
 * rl_check(key, policy, at, cost, priority) returns rl_decision
 */
Datum
rl_check_policy(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	RlDecision	d;
	char		buf[RL_MAX_STORED_KEY];

	rl_policy_args(fcinfo, &call_site(fcinfo)->policy, buf, PARG_KEY,
				   PARG_POLICY, PARG_AT, PARG_COST, &req);
	rl_algo_check_use(req.algo, false, req.policy);
	rl_shed_args(fcinfo, PARG_PRIORITY, -1, &req);
	decide_direct(&req, &d);
	PG_RETURN_DATUM(decision_datum(fcinfo, &req, &d));
}

/*
 * rl_adjust(key, policy, delta, at) returns rl_decision: charge delta
 * units to the key under the policy after the fact (past its limit if
 * so), or give -delta back; reports a look at its state after.
 */
Datum
rl_adjust(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	RlDecision	d;

	rl_arg_not_null(fcinfo, 2, "delta");
	rl_policy_args(fcinfo, &call_site(fcinfo)->policy, NULL, 0, 1, 3, NO_ARG,
				   &req);
	rl_algo_check_use(req.algo, false, req.policy);
	req.params.cost = PG_GETARG_INT64(2);
	if (req.params.cost == PG_INT64_MIN)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("\"delta\" is out of range"),
				 errdetail("A give-back is at most 9223372036854775807 units.")));
	rl_adjust_policy(&req, &d);
	PG_RETURN_DATUM(decision_datum(fcinfo, &req, &d));
}

/* ---- all or nothing across keys ---- */

/*
 * Decide rl_allow_all / rl_check_all (keys text[], policies text[],
 * costs bigint[] DEFAULT NULL, at DEFAULT NULL, priority DEFAULT NULL):
 * keys[i] under policies[i], with costs[i] if given, each with the
 * call's priority (0.3.0), all or nothing.  Fills reqs and ds,
 * points *keys and *policies at the arrays' elements, and returns the
 * count; *all tells whether every limit admitted.
 */
static int
multi_decide(FunctionCallInfo fcinfo, RlRequest *reqs, RlDecision *ds,
			 Datum **keys_out, Datum **policies_out, bool *all)
{
	Datum	   *keys,
			   *policies,
			   *costs = NULL;
	bool	   *key_nulls,
			   *policy_nulls,
			   *cost_nulls = NULL;
	int			n,
				npolicies,
				ncosts = 0;
	int			i;

	rl_require_store();
	rl_arg_not_null(fcinfo, 0, "keys");
	rl_arg_not_null(fcinfo, 1, "policies");
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(0), TEXTOID, -1, false,
					  TYPALIGN_INT, &keys, &key_nulls, &n);
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(1), TEXTOID, -1, false,
					  TYPALIGN_INT, &policies, &policy_nulls, &npolicies);
	if (!PG_ARGISNULL(2))
		deconstruct_array(PG_GETARG_ARRAYTYPE_P(2), INT8OID, 8,
						  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &costs,
						  &cost_nulls, &ncosts);
	if (n < 1 || n > RL_MAX_MULTI || npolicies != n ||
		(costs != NULL && ncosts != n))
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("\"keys\", \"policies\" and \"costs\" must have the same length, from 1 to %d",
						RL_MAX_MULTI)));

	for (i = 0; i < n; i++)
	{
		const RlPolicy *pol;

		if (key_nulls[i] || policy_nulls[i] || (costs && cost_nulls[i]))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("\"keys\", \"policies\" and \"costs\" must not contain nulls")));
		pol = rl_policy_get(DatumGetTextPP(policies[i]));
		rl_policy_request(pol, DatumGetTextPP(keys[i]), &reqs[i]);
		rl_limits_refuse(&reqs[i], "an all-or-nothing check");
		rl_algo_check_use(reqs[i].algo, false, reqs[i].policy);
		if (costs != NULL)
		{
			reqs[i].params.cost = DatumGetInt64(costs[i]);
			rl_arg_cost(reqs[i].params.cost);
			rl_cost_check(reqs[i].algo, &reqs[i].params);
		}
		if (!PG_ARGISNULL(3))
			reqs[i].at = rl_arg_at(PG_GETARG_TIMESTAMPTZ(3));
		rl_shed_args(fcinfo, 4, -1, &reqs[i]);
	}

	/*
	 * A later policy lookup may have read the policies again, freeing the
	 * stats handles of earlier requests' policies: count by identity.
	 */
	for (i = 0; i < n; i++)
	{
		reqs[i].track = rl_refund_on_rollback;
		reqs[i].stats = NULL;
	}
	*all = rl_decide_all(reqs, n, ds);
	*keys_out = keys;
	*policies_out = policies;
	return n;
}

/*
 * rl_allow_all(keys, policies, costs, at, priority) returns boolean: true
 * if every limit admits, and then all consume; otherwise none does.
 */
Datum
rl_allow_all(PG_FUNCTION_ARGS)
{
	RlRequest	reqs[RL_MAX_MULTI];
	RlDecision	ds[RL_MAX_MULTI];
	Datum	   *keys;
	Datum	   *policies;
	bool		all;

	(void) multi_decide(fcinfo, reqs, ds, &keys, &policies, &all);
	PG_RETURN_BOOL(all);
}

/*
 * rl_check_all(keys, policies, costs, at, priority) returns setof (key,
 * policy, allowed, limit, remaining, retry_after, reset_at, delay, capacity,
 * per): one row per key, in order.  Consumption is all or nothing as for
 * rl_allow_all; when any row is denied, the others report whether they would
 * have admitted.
 */
Datum
rl_check_all(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlRequest	reqs[RL_MAX_MULTI];
	RlDecision	ds[RL_MAX_MULTI];
	Datum	   *key_values;
	Datum	   *policy_values;
	RlDecisionShape *shape;
	Datum	   *values;
	bool	   *nulls;
	bool		all;
	int			n;
	int			i;

	n = multi_decide(fcinfo, reqs, ds, &key_values, &policy_values, &all);
	InitMaterializedSRF(fcinfo, 0);
	shape = decision_shape(rsinfo->setDesc, CurrentMemoryContext);
	values = palloc(sizeof(Datum) * rsinfo->setDesc->natts);
	nulls = palloc(sizeof(bool) * rsinfo->setDesc->natts);
	for (i = 0; i < n; i++)
	{
		decision_values(shape, &reqs[i], &ds[i], key_values[i],
						policy_values[i], values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* ---- waiting instead of denying ---- */

/* Sleep for us microseconds, interruptibly. */
static void
sleep_us(int64 us)
{
	int64		until = rl_clock_now() + us;
	int64		left;

	while ((left = until - rl_clock_now()) > 0)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 (long) ((left + 999) / 1000), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Wait until the request is admitted, at most max_wait microseconds.
 * Denied calls wait for retry_after and try again; an admitted
 * leaky_bucket call sleeps its delay, so admitted calls leave at a smooth
 * rate.  An admission whose delay would pass the deadline is given back
 * and reported as not admitted.
 */
static bool
wait_admitted(const RlRequest *req, int64 max_wait)
{
	int64		deadline = rl_clock_now() + max_wait;

	for (;;)
	{
		RlDecision	d;
		int64		now;
		int64		wait;

		rl_decide(req, &d);
		now = rl_clock_now();
		if (d.out.allowed)
		{
			wait = (int64) ceil(d.out.delay * 1000000.0);
			if (wait > 0 && now + wait > deadline)
			{
				rl_give_back(req, &d);
				return false;
			}
			if (rl_refund_on_rollback)
				rl_track(req, &d);
			if (wait > 0)
				sleep_us(wait);
			return true;
		}
		wait = (int64) ceil(d.out.retry_after * 1000000.0);
		if (now + wait > deadline)
			return false;
		sleep_us(Max(wait, 1));
	}
}

/*
 * rl_wait(key, algo, limit, per, cost, burst, max_wait, priority, reserve)
 * returns boolean (0.2.0's definition: without the last two)
 */
Datum
rl_wait(PG_FUNCTION_ARGS)
{
	RlRequest	req;

	rl_arg_not_null(fcinfo, 6, "max_wait");
	request_from_args(fcinfo, false, 7, &req);
	PG_RETURN_BOOL(wait_admitted(&req, rl_arg_max_wait(PG_GETARG_INTERVAL_P(6))));
}

/*
 * rl_wait(key, policy, max_wait, cost, priority) returns boolean (0.2.0's
 * definition: without priority)
 */
Datum
rl_wait_policy(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	char		buf[RL_MAX_STORED_KEY];

	rl_arg_not_null(fcinfo, 2, "max_wait");
	rl_policy_args(fcinfo, &call_site(fcinfo)->policy, buf, 0, 1, NO_ARG, 3,
				   &req);
	rl_algo_check_use(req.algo, false, req.policy);
	rl_limits_refuse(&req, "rl_wait");
	rl_shed_args(fcinfo, 4, -1, &req);
	/* waits may take in policy changes meanwhile: count by identity */
	req.stats = NULL;
	PG_RETURN_BOOL(wait_admitted(&req, rl_arg_max_wait(PG_GETARG_INTERVAL_P(2))));
}
