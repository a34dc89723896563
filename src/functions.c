/*-------------------------------------------------------------------------
 *
 * functions.c
 *		The SQL-callable functions: argument checks and results.
 *
 * Every argument error is reported here, before any lock is taken, with a
 * SQLSTATE of class 22 and a message naming the argument (docs/reference.md
 * lists them).  No shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "args.h"
#include "backend.h"
#include "guc.h"
#include "policy.h"
#include "redis.h"
#include "refund.h"
#include "stats.h"
#include "store.h"

/* argument positions shared by rl_allow and rl_check */
enum
{
	ARG_KEY,
	ARG_ALGO,
	ARG_LIMIT,
	ARG_PER,
	ARG_COST,
	ARG_BURST,
	ARG_AT
};

/* arguments of the policy forms: (key, policy, at, cost) */
enum
{
	PARG_KEY,
	PARG_POLICY,
	PARG_AT,
	PARG_COST
};

PG_FUNCTION_INFO_V1(rl_allow);
PG_FUNCTION_INFO_V1(rl_check);
PG_FUNCTION_INFO_V1(rl_allow_policy);
PG_FUNCTION_INFO_V1(rl_check_policy);
PG_FUNCTION_INFO_V1(rl_allow_all);
PG_FUNCTION_INFO_V1(rl_check_all);
PG_FUNCTION_INFO_V1(rl_wait);
PG_FUNCTION_INFO_V1(rl_wait_policy);
PG_FUNCTION_INFO_V1(rl_reset);
PG_FUNCTION_INFO_V1(rl_reset_all);
PG_FUNCTION_INFO_V1(rl_store_info);
PG_FUNCTION_INFO_V1(rl_owners);
PG_FUNCTION_INFO_V1(rl_stats);
PG_FUNCTION_INFO_V1(rl_stats_reset);
PG_FUNCTION_INFO_V1(rl_stats_info);
PG_FUNCTION_INFO_V1(rl_keys);
PG_FUNCTION_INFO_V1(rl_redis_info);

/*
 * Build the request from the arguments of rl_allow / rl_check / rl_wait,
 * checking each one; only the first two have "at".  The key points into
 * the (detoasted) argument.
 */
static void
request_from_args(FunctionCallInfo fcinfo, bool has_at, RlRequest *req)
{
	RlParams   *p = &req->params;

	rl_require_store();
	rl_arg_not_null(fcinfo, ARG_KEY, "key");
	rl_arg_not_null(fcinfo, ARG_ALGO, "algo");
	rl_arg_not_null(fcinfo, ARG_LIMIT, "limit");
	rl_arg_not_null(fcinfo, ARG_PER, "per");
	rl_arg_not_null(fcinfo, ARG_COST, "cost");

	rl_request_init(req);
	rl_arg_key(PG_GETARG_TEXT_PP(ARG_KEY), &req->key, &req->keylen);
	req->algo = rl_arg_algo(PG_GETARG_TEXT_PP(ARG_ALGO));
	req->dbid = MyDatabaseId;

	p->limit = PG_GETARG_INT64(ARG_LIMIT);
	rl_arg_positive(p->limit, "limit");
	p->per = rl_arg_per(PG_GETARG_INTERVAL_P(ARG_PER));
	p->cost = PG_GETARG_INT64(ARG_COST);
	rl_arg_cost(p->cost);
	if (!PG_ARGISNULL(ARG_BURST))
		p->burst = PG_GETARG_INT64(ARG_BURST);
	rl_params_check(req->algo, p, !PG_ARGISNULL(ARG_BURST));

	if (has_at && !PG_ARGISNULL(ARG_AT))
		req->at = rl_arg_at(PG_GETARG_TIMESTAMPTZ(ARG_AT));
}

/*
 * The request for a key under a policy, with an optional cost replacing
 * the policy's and an optional explicit time.  at_arg / cost_arg are
 * argument numbers, or -1 where the function has no such argument.
 */
static void
policy_request(FunctionCallInfo fcinfo, int key_arg, int policy_arg,
			   int at_arg, int cost_arg, RlRequest *req)
{
	const RlPolicy *pol;

	rl_require_store();
	rl_arg_not_null(fcinfo, key_arg, "key");
	rl_arg_not_null(fcinfo, policy_arg, "policy");
	pol = rl_policy_get(PG_GETARG_TEXT_PP(policy_arg));
	rl_policy_request(pol, PG_GETARG_TEXT_PP(key_arg), req);
	if (cost_arg >= 0 && !PG_ARGISNULL(cost_arg))
	{
		req->params.cost = PG_GETARG_INT64(cost_arg);
		rl_arg_cost(req->params.cost);
		rl_cost_check(req->algo, &req->params);
	}
	if (at_arg >= 0 && !PG_ARGISNULL(at_arg))
		req->at = rl_arg_at(PG_GETARG_TIMESTAMPTZ(at_arg));
}

/*
 * Decide a direct call, remembering its consumption for a refund if
 * ratelimit.refund_on_rollback is on.
 */
static void
decide_direct(const RlRequest *req, RlDecision *d)
{
	rl_decide(req, d);
	if (rl_refund_on_rollback)
		rl_refund_track(req, d);
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
				values[i] = BoolGetDatum(d->allowed);
				break;
			case DCOL_LIMIT:
				values[i] = Int64GetDatum(req->params.limit);
				break;
			case DCOL_REMAINING:
				values[i] = Int64GetDatum(d->remaining);
				break;
			case DCOL_RETRY_AFTER:
				values[i] = Float8GetDatum(d->retry_after);
				break;
			case DCOL_RESET_AT:
				values[i] = TimestampTzGetDatum(d->reset_at - RL_UNIX_OFFSET);
				break;
			case DCOL_DELAY:
				values[i] = Float8GetDatum(d->delay);
				break;
			case DCOL_CAPACITY:
				values[i] = Int64GetDatum(rl_algo_has_burst(req->algo) ?
										  req->params.burst :
										  req->params.limit);
				break;
			case DCOL_PER:
				values[i] = IntervalPGetDatum(rl_per_interval(req->params.per));
				break;
			default:
				nulls[i] = true;
				break;
		}
	}
}

/*
 * A decision as an rl_decision datum.  The blessed descriptor and its
 * shape are built once per call site and kept in fn_extra.
 */
static Datum
decision_datum(FunctionCallInfo fcinfo, const RlRequest *req,
			   const RlDecision *d)
{
	RlDecisionShape *shape = (RlDecisionShape *) fcinfo->flinfo->fn_extra;
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
		fcinfo->flinfo->fn_extra = shape;
		MemoryContextSwitchTo(old);
	}
	values = palloc(sizeof(Datum) * shape->tupdesc->natts);
	nulls = palloc(sizeof(bool) * shape->tupdesc->natts);
	decision_values(shape, req, d, (Datum) 0, (Datum) 0, values, nulls);
	return HeapTupleGetDatum(heap_form_tuple(shape->tupdesc, values, nulls));
}

/*
 * rl_allow(key, algo, limit, per, cost, burst, at) returns boolean
 */
Datum
rl_allow(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	RlDecision	d;

	request_from_args(fcinfo, true, &req);
	decide_direct(&req, &d);
	PG_RETURN_BOOL(d.allowed);
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

	request_from_args(fcinfo, true, &req);
	decide_direct(&req, &d);
	PG_RETURN_DATUM(decision_datum(fcinfo, &req, &d));
}

/*
 * rl_allow(key, policy, at, cost) returns boolean
 */
Datum
rl_allow_policy(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	RlDecision	d;

	policy_request(fcinfo, PARG_KEY, PARG_POLICY, PARG_AT, PARG_COST, &req);
	decide_direct(&req, &d);
	PG_RETURN_BOOL(d.allowed);
}

/*
 * rl_check(key, policy, at, cost) returns rl_decision
 */
Datum
rl_check_policy(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	RlDecision	d;

	policy_request(fcinfo, PARG_KEY, PARG_POLICY, PARG_AT, PARG_COST, &req);
	decide_direct(&req, &d);
	PG_RETURN_DATUM(decision_datum(fcinfo, &req, &d));
}

/* ---- all or nothing across keys ---- */

/*
 * Decide rl_allow_all / rl_check_all (keys text[], policies text[],
 * costs bigint[] DEFAULT NULL, at DEFAULT NULL): keys[i] under
 * policies[i], with costs[i] if given, all or nothing.  Fills reqs and ds,
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
		if (costs != NULL)
		{
			reqs[i].params.cost = DatumGetInt64(costs[i]);
			rl_arg_cost(reqs[i].params.cost);
			rl_cost_check(reqs[i].algo, &reqs[i].params);
		}
		if (!PG_ARGISNULL(3))
			reqs[i].at = rl_arg_at(PG_GETARG_TIMESTAMPTZ(3));
	}

	*all = rl_decide_all(reqs, n, ds);
	if (*all && rl_refund_on_rollback)
		for (i = 0; i < n; i++)
			rl_refund_track(&reqs[i], &ds[i]);
	*keys_out = keys;
	*policies_out = policies;
	return n;
}

/*
 * rl_allow_all(keys, policies, costs, at) returns boolean: true if every
 * limit admits, and then all consume; otherwise none does.
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
 * rl_check_all(keys, policies, costs, at) returns setof (key, policy,
 * allowed, limit, remaining, retry_after, reset_at, delay, capacity, per):
 * one row per key, in order.  Consumption is all or nothing as for rl_allow_all; when
 * any row is denied, the others report whether they would have admitted.
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

/* The longest wait, in microseconds: no months, not negative. */
static int64
max_wait_arg(const Interval *max_wait)
{
	int128		us = (int128) max_wait->day * USECS_PER_DAY + max_wait->time;

	if (max_wait->month != 0 || us < 0 || us > PG_INT64_MAX / 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"max_wait\" must be zero or positive, without months")));
	return (int64) us;
}

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
		if (d.allowed)
		{
			wait = (int64) ceil(d.delay * 1000000.0);
			if (wait > 0 && now + wait > deadline)
			{
				rl_give_back(req, &d);
				return false;
			}
			if (rl_refund_on_rollback)
				rl_refund_track(req, &d);
			if (wait > 0)
				sleep_us(wait);
			return true;
		}
		wait = (int64) ceil(d.retry_after * 1000000.0);
		if (now + wait > deadline)
			return false;
		sleep_us(Max(wait, 1));
	}
}

/*
 * rl_wait(key, algo, limit, per, cost, burst, max_wait) returns boolean
 */
Datum
rl_wait(PG_FUNCTION_ARGS)
{
	RlRequest	req;

	rl_arg_not_null(fcinfo, 6, "max_wait");
	request_from_args(fcinfo, false, &req);
	PG_RETURN_BOOL(wait_admitted(&req, max_wait_arg(PG_GETARG_INTERVAL_P(6))));
}

/*
 * rl_wait(key, policy, max_wait, cost) returns boolean
 */
Datum
rl_wait_policy(PG_FUNCTION_ARGS)
{
	RlRequest	req;

	rl_arg_not_null(fcinfo, 2, "max_wait");
	policy_request(fcinfo, 0, 1, -1, 3, &req);
	PG_RETURN_BOOL(wait_admitted(&req, max_wait_arg(PG_GETARG_INTERVAL_P(2))));
}

/* ---- administration ---- */

/*
 * rl_reset(key, algo DEFAULT NULL, policy DEFAULT NULL) returns bigint:
 * drop the key's state for one algorithm, all of them, or one policy, in
 * this database.
 */
Datum
rl_reset(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	bool		all_algos;
	int64		dropped;

	rl_require_store();
	rl_arg_not_null(fcinfo, 0, "key");
	if (PG_NARGS() > 2 && !PG_ARGISNULL(2))
	{
		if (!PG_ARGISNULL(1))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pass either \"algo\" or \"policy\", not both")));
		policy_request(fcinfo, 0, 2, -1, -1, &req);
		all_algos = false;
	}
	else
	{
		rl_request_init(&req);
		rl_arg_key(PG_GETARG_TEXT_PP(0), &req.key, &req.keylen);
		all_algos = PG_ARGISNULL(1);
		if (!all_algos)
			req.algo = rl_arg_algo(PG_GETARG_TEXT_PP(1));
	}
	dropped = rl_store_reset(MyDatabaseId, req.key, req.keylen,
							 all_algos, req.algo);
	/* the Redis backends keep their state in Redis too */
	if (rl_request_backend(&req) != RL_BACKEND_LOCAL)
		dropped += rl_redis_reset(MyDatabaseId, req.key, req.keylen,
								  all_algos, req.algo);
	PG_RETURN_INT64(dropped);
}

/*
 * rl_reset_all(all_databases DEFAULT false) returns bigint: drop every
 * state of this database, or of the whole cluster; in Redis too when
 * ratelimit.backend or a policy of this database uses it.
 */
Datum
rl_reset_all(PG_FUNCTION_ARGS)
{
	bool		all_databases = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	Oid			dbid;
	int64		dropped;

	rl_require_store();
	/* EXECUTE is granted per database; the others are not its to reset */
	if (all_databases && !superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to reset the limits of every database"),
				 errhint("Only superusers may pass all_databases => true.")));
	dbid = all_databases ? InvalidOid : MyDatabaseId;
	dropped = rl_store_reset_all(dbid);
	if (rl_backend != RL_BACKEND_LOCAL || rl_policy_any_remote())
		dropped += rl_redis_reset_all(dbid);
	PG_RETURN_INT64(dropped);
}

/*
 * rl_store_info() returns one row of store-wide figures.
 */
Datum
rl_store_info(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	RlStoreStats s;
	Datum		values[9];
	bool		nulls[9] = {false, false, false, false, false, false, false,
	false, false};

	rl_require_store();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "rl_store_info must return a composite type");
	tupdesc = BlessTupleDesc(tupdesc);
	rl_store_stats(&s);

	values[0] = Int64GetDatum(s.capacity);
	values[1] = Int64GetDatum(s.used);
	values[2] = Int64GetDatum(s.pool_blocks);
	values[3] = Int64GetDatum(s.pool_used);
	values[4] = Int64GetDatum(s.reclaimed);
	values[5] = Int64GetDatum(s.refused);
	values[6] = Int32GetDatum(s.partitions);
	values[7] = Int64GetDatum(s.evicted);
	values[8] = Int32GetDatum(s.owners);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * rl_owners() returns setof (dbid, roleid, keys, pool_blocks, evicted,
 * refused): what each owner of the store's entries holds, in every
 * database.  An overflow owner has a NULL roleid (a database's) or NULL
 * dbid and roleid (the store's).
 */
Datum
rl_owners(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlOwnerImage *owners;
	int			n;
	int			i;

	rl_require_store();
	owners = palloc(sizeof(RlOwnerImage) * rl_store_max_owners());
	n = rl_store_owners(owners);
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < n; i++)
	{
		Datum		values[6];
		bool		nulls[6] = {false, false, false, false, false, false};

		values[0] = ObjectIdGetDatum(owners[i].dbid);
		nulls[0] = !OidIsValid(owners[i].dbid);
		values[1] = ObjectIdGetDatum(owners[i].roleid);
		nulls[1] = !OidIsValid(owners[i].roleid);
		values[2] = Int64GetDatum(owners[i].keys);
		values[3] = Int64GetDatum(owners[i].pool_blocks);
		values[4] = Int64GetDatum(owners[i].evicted);
		values[5] = Int64GetDatum(owners[i].refused);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * rl_redis_info() returns one row: the Redis backend's circuit breaker and
 * failure counters, for the whole server.
 */
Datum
rl_redis_info(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	RlRedisStats s;
	Datum		values[RL_REDIS_NCOUNTERS + 4];
	bool		nulls[RL_REDIS_NCOUNTERS + 4];
	int			i;

	rl_require_store();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "rl_redis_info must return a composite type");
	tupdesc = BlessTupleDesc(tupdesc);
	rl_redis_stats(&s);

	memset(nulls, 0, sizeof(nulls));
	values[0] = BoolGetDatum(s.breaker_until != 0);
	values[1] = TimestampTzGetDatum(s.breaker_until - RL_UNIX_OFFSET);
	nulls[1] = s.breaker_until == 0;
	for (i = 0; i < RL_REDIS_NCOUNTERS; i++)
		values[2 + i] = Int64GetDatum(s.counters[i]);
	values[2 + i] = CStringGetTextDatum(s.last_error);
	nulls[2 + i] = s.last_error_at == 0;
	values[3 + i] = TimestampTzGetDatum(s.last_error_at - RL_UNIX_OFFSET);
	nulls[3 + i] = s.last_error_at == 0;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* ---- text written in other databases ---- */

/*
 * A database whose keys and policy names a listing returns: its encoding
 * (-1 if it no longer exists) and the conversion from it to this
 * database's encoding (InvalidOid if none is needed or none exists).
 */
typedef struct RlSourceDb
{
	Oid			dbid;			/* hash key */
	int			encoding;
	Oid			proc;
} RlSourceDb;

/*
 * The source database dbid, looked up once per call in *cache (created in
 * the current memory context on first use).
 */
static const RlSourceDb *
source_db(Oid dbid, HTAB **cache)
{
	RlSourceDb *db;
	bool		found;

	if (*cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(RlSourceDb);
		ctl.hcxt = CurrentMemoryContext;
		*cache = hash_create("ratelimit source databases", 16, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	db = hash_search(*cache, &dbid, HASH_ENTER, &found);
	if (found)
		return db;

	db->encoding = -1;
	db->proc = InvalidOid;
	if (dbid == MyDatabaseId)
		db->encoding = GetDatabaseEncoding();
	else
	{
		HeapTuple	tuple;

		tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dbid));
		if (HeapTupleIsValid(tuple))
		{
			db->encoding = ((Form_pg_database) GETSTRUCT(tuple))->encoding;
			ReleaseSysCache(tuple);
		}
	}
	if (db->encoding > PG_SQL_ASCII && db->encoding != GetDatabaseEncoding() &&
		GetDatabaseEncoding() != PG_SQL_ASCII)
		db->proc = FindDefaultConversionProc(db->encoding,
											 GetDatabaseEncoding());
	return db;
}

/*
 * Bytes written as text in a source database, as text valid in this
 * database's encoding, or NULL when they cannot be represented in it.
 * ASCII is the same in every server encoding.  Bytes from an SQL_ASCII
 * database, from a dropped one (whose encoding is unknown), or read in an
 * SQL_ASCII database are taken as they are (PostgreSQL's own rule for
 * SQL_ASCII), if valid here.  Others are converted with the default
 * conversion, whole or not at all.
 */
static text *
text_from_db(const RlSourceDb *db, const char *bytes, int len)
{
	int			encoding = GetDatabaseEncoding();
	unsigned char *src;
	unsigned char *buf;
	int			size;
	int			i;
	text	   *result;

	for (i = 0; i < len; i++)
		if (IS_HIGHBIT_SET(bytes[i]) || bytes[i] == '\0')
			break;
	if (i == len)
		return cstring_to_text_with_len(bytes, len);

	if (db->encoding <= PG_SQL_ASCII || db->encoding == encoding ||
		encoding == PG_SQL_ASCII)
		return pg_verify_mbstr(encoding, bytes, len, true) ?
			cstring_to_text_with_len(bytes, len) : NULL;
	if (!OidIsValid(db->proc) ||
		!pg_verify_mbstr(db->encoding, bytes, len, true))
		return NULL;

	size = len * MAX_CONVERSION_GROWTH + 1;
	buf = palloc(size);
	src = (unsigned char *) unconstify(char *, bytes);
	if (pg_do_encoding_conversion_buf(db->proc, db->encoding, encoding,
									  src, len, buf, size, true) != len)
		result = NULL;
	else
		result = cstring_to_text((char *) buf);
	pfree(buf);
	return result;
}

/* Bytes as a bytea datum. */
static Datum
bytea_datum(const char *bytes, int len)
{
	bytea	   *result = palloc(VARHDRSZ + len);

	SET_VARSIZE(result, VARHDRSZ + len);
	memcpy(VARDATA(result), bytes, len);
	return PointerGetDatum(result);
}

/* ---- observability ---- */

/*
 * rl_stats(all_databases DEFAULT false) returns setof (dbid, algo, policy,
 * allowed, denied, near_limit, failed_open, failed_closed, shadow_denied).
 * A policy name of another database is converted to this database's
 * encoding, or NULL if it cannot be represented in it.
 */
Datum
rl_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		all_databases = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	HTAB	   *dbs = NULL;
	RlStatsRow *rows;
	int			n;
	int			i;

	rl_require_store();
	rows = palloc(sizeof(RlStatsRow) * rl_stats_capacity());
	n = rl_stats_read(all_databases ? InvalidOid : MyDatabaseId, rows);

	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < n; i++)
	{
		Datum		values[3 + RL_NSTATS];
		bool		nulls[3 + RL_NSTATS];
		int			c;

		memset(nulls, 0, sizeof(nulls));
		values[0] = ObjectIdGetDatum(rows[i].dbid);
		nulls[0] = rows[i].algo < 0;
		if (rows[i].algo >= 0)
			values[1] = CStringGetTextDatum(rl_algo_name((RlAlgo) rows[i].algo));
		else
			nulls[1] = true;
		nulls[2] = true;
		if (rows[i].policy[0] != '\0')
		{
			text	   *policy = text_from_db(source_db(rows[i].dbid, &dbs),
											  rows[i].policy,
											  strlen(rows[i].policy));

			values[2] = PointerGetDatum(policy);
			nulls[2] = policy == NULL;
		}
		for (c = 0; c < RL_NSTATS; c++)
			values[3 + c] = Int64GetDatum((int64) rows[i].counters[c]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * rl_stats_reset() zeroes the decision counters and frees every slot:
 * identities claim one again at their next decision.
 */
Datum
rl_stats_reset(PG_FUNCTION_ARGS)
{
	rl_require_store();
	rl_stats_clear();
	PG_RETURN_VOID();
}

/*
 * rl_stats_info() returns one row: the slots of the counter table, how
 * many are held, and the decisions counted under "(other)" since the last
 * reset.
 */
Datum
rl_stats_info(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	RlStatsFigures f;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	rl_require_store();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "rl_stats_info must return a composite type");
	tupdesc = BlessTupleDesc(tupdesc);
	rl_stats_figures(&f);

	values[0] = Int32GetDatum(f.slots);
	values[1] = Int32GetDatum(f.used);
	values[2] = Int64GetDatum((int64) f.overflow);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * rl_keys(all_databases DEFAULT false) returns setof (dbid, algo, policy,
 * key, last_seen, reset_at, remaining, key_bytes, policy_bytes): the keys
 * whose state is not yet back to a new key's.  For keys used through a
 * policy of this database, remaining and reset_at are what a call of cost
 * 0 would report now; for direct calls (whose parameters are not stored)
 * remaining is NULL.  key and policy are text valid in this database's
 * encoding (text_from_db), NULL where the bytes cannot be represented;
 * key_bytes and policy_bytes are the bytes as stored.  Each entry is read
 * under its partition's shared lock, one at a time.
 */
Datum
rl_keys(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		all_databases = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	RlKeyImage *img = palloc(sizeof(RlKeyImage));
	HTAB	   *dbs = NULL;
	int64		now = rl_clock_now();
	uint32		n;
	uint32		idx;

	rl_require_store();
	n = rl_store_nentries();
	InitMaterializedSRF(fcinfo, 0);
	for (idx = 0; idx < n; idx++)
	{
		Datum		values[9];
		bool		nulls[9] = {false, false, true, false, false, false, true,
		false, true};
		const RlSourceDb *db;
		text	   *text_value;
		char	   *nul;
		const char *key;
		int			keylen;
		int64		reset_at;

		CHECK_FOR_INTERRUPTS();
		if (!rl_store_key_at(idx, all_databases ? InvalidOid : MyDatabaseId,
							 img) || img->idle_at <= now)
			continue;

		db = source_db(img->dbid, &dbs);
		key = img->key;
		keylen = img->keylen;
		reset_at = img->idle_at;
		nul = memchr(img->key, '\0', img->keylen);
		if (nul != NULL)
		{
			const RlPolicy *pol = NULL;
			RlRequest	req;
			RlDecision	d;
			int			namelen = (int) (nul - img->key);

			text_value = text_from_db(db, img->key, namelen);
			values[2] = PointerGetDatum(text_value);
			nulls[2] = text_value == NULL;
			values[8] = bytea_datum(img->key, namelen);
			nulls[8] = false;
			key = nul + 1;
			keylen = img->keylen - (int) (key - img->key);
			if (img->dbid == MyDatabaseId)
				pol = rl_policy_find(img->key, namelen);
			if (pol != NULL && pol->algo == img->algo)
			{
				rl_policy_request(pol, cstring_to_text_with_len(key, keylen),
								  &req);
				if (rl_store_peek(&req, now, &d))
				{
					values[6] = Int64GetDatum(d.remaining);
					nulls[6] = false;
					reset_at = d.reset_at;
				}
			}
		}
		values[0] = ObjectIdGetDatum(img->dbid);
		values[1] = CStringGetTextDatum(rl_algo_name(img->algo));
		text_value = text_from_db(db, key, keylen);
		values[3] = PointerGetDatum(text_value);
		nulls[3] = text_value == NULL;
		values[4] = TimestampTzGetDatum(img->last - RL_UNIX_OFFSET);
		values[5] = TimestampTzGetDatum(reset_at - RL_UNIX_OFFSET);
		values[7] = bytea_datum(key, keylen);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
