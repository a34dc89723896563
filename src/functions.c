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

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "backend.h"
#include "store.h"

/* accepted range of "at" (Unix us, about +-36000 years) and of "per" */
#define RL_MAX_ABS_TIME		((int64) 1 << 60)
#define RL_MAX_PER			(INT64CONST(36525) * USECS_PER_DAY) /* 100 years */

/* role whose members may pass an explicit "at", besides superusers */
#define RL_ADMIN_ROLE		"ratelimit_admin"

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

PG_FUNCTION_INFO_V1(rl_allow);
PG_FUNCTION_INFO_V1(rl_check);
PG_FUNCTION_INFO_V1(rl_reset);
PG_FUNCTION_INFO_V1(rl_reset_all);
PG_FUNCTION_INFO_V1(rl_store_info);

/* Fail unless the library was preloaded (the store exists). */
static void
require_store(void)
{
	if (!rl_store_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ratelimit must be loaded via \"shared_preload_libraries\""),
				 errhint("Add ratelimit to shared_preload_libraries in postgresql.conf and restart the server.")));
}

static void
require_not_null(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("\"%s\" must not be null", name)));
}

/* Parse a non-null algorithm name argument. */
static RlAlgo
algo_arg(text *name)
{
	RlAlgo		algo;

	if (!rl_algo_parse(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), &algo))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown algorithm \"%s\"", text_to_cstring(name)),
				 errhint("Valid algorithms are fixed_window, sliding_window_log, sliding_window_counter, token_bucket and leaky_bucket.")));
	return algo;
}

/* Check a non-null key argument and point at its bytes. */
static void
key_arg(text *key, const char **bytes, int *len)
{
	*bytes = VARDATA_ANY(key);
	*len = VARSIZE_ANY_EXHDR(key);
	if (*len > RL_MAX_KEY_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("\"key\" is too long (%d bytes)", *len),
				 errdetail("Keys may be at most %d bytes long.",
						   RL_MAX_KEY_LEN)));
}

/* The window in microseconds: positive, no months, at most 100 years. */
static int64
per_arg(Interval *per)
{
	int128		us;

	if (per->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"per\" must not contain months or years"),
				 errdetail("A month has no fixed length."),
				 errhint("Express the window in days, hours, minutes or seconds.")));
	us = (int128) per->day * USECS_PER_DAY + per->time;
	if (us <= 0 || us > RL_MAX_PER)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"per\" must be greater than zero and at most 36525 days")));
	return (int64) us;
}

/*
 * An explicit time: finite, within range, and only for superusers or
 * members of ratelimit_admin, since it moves the key's clock for everyone.
 */
static int64
at_arg(TimestampTz at)
{
	Oid			admin;

	if (!superuser())
	{
		admin = get_role_oid(RL_ADMIN_ROLE, true);
		if (!OidIsValid(admin) || !has_privs_of_role(GetUserId(), admin))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to pass \"at\""),
					 errdetail("An explicit time moves the key's clock for every caller."),
					 errhint("Only superusers and members of role \"%s\" may pass a non-null \"at\".",
							 RL_ADMIN_ROLE)));
	}
	if (TIMESTAMP_NOT_FINITE(at) ||
		at > RL_MAX_ABS_TIME - RL_UNIX_OFFSET ||
		at < -RL_MAX_ABS_TIME - RL_UNIX_OFFSET)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("\"at\" is out of range"),
				 errdetail("An explicit time must be finite and within 36000 years of 1970.")));
	return at + RL_UNIX_OFFSET;
}

static void
require_positive(int64 value, const char *name)
{
	if (value <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" must be greater than zero", name)));
}

/*
 * Build the request from the arguments of rl_allow / rl_check, checking
 * each one.  The key points into the (detoasted) argument.
 */
static void
request_from_args(FunctionCallInfo fcinfo, RlRequest *req)
{
	RlParams   *p = &req->params;
	int64		capacity;

	require_store();
	require_not_null(fcinfo, ARG_KEY, "key");
	require_not_null(fcinfo, ARG_ALGO, "algo");
	require_not_null(fcinfo, ARG_LIMIT, "limit");
	require_not_null(fcinfo, ARG_PER, "per");
	require_not_null(fcinfo, ARG_COST, "cost");

	key_arg(PG_GETARG_TEXT_PP(ARG_KEY), &req->key, &req->keylen);
	req->algo = algo_arg(PG_GETARG_TEXT_PP(ARG_ALGO));
	req->dbid = MyDatabaseId;

	p->limit = PG_GETARG_INT64(ARG_LIMIT);
	require_positive(p->limit, "limit");
	p->per = per_arg(PG_GETARG_INTERVAL_P(ARG_PER));
	p->cost = PG_GETARG_INT64(ARG_COST);
	if (p->cost < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"cost\" must not be negative")));

	p->burst = p->limit;
	if (!PG_ARGISNULL(ARG_BURST))
	{
		if (!rl_algo_has_burst(req->algo))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("\"burst\" does not apply to algorithm \"%s\"",
							rl_algo_name(req->algo)),
					 errhint("Only token_bucket and leaky_bucket have a burst; pass NULL.")));
		p->burst = PG_GETARG_INT64(ARG_BURST);
		require_positive(p->burst, "burst");
	}

	capacity = rl_algo_has_burst(req->algo) ? p->burst : p->limit;
	if (p->cost > capacity)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"cost\" (" INT64_FORMAT ") exceeds the %s (" INT64_FORMAT ") and can never be admitted",
						p->cost, rl_algo_has_burst(req->algo) ? "burst" : "limit",
						capacity)));

	req->at = PG_ARGISNULL(ARG_AT) ? RL_NO_TIME :
		at_arg(PG_GETARG_TIMESTAMPTZ(ARG_AT));
}

/*
 * rl_allow(key, algo, limit, per, cost, burst, at) returns boolean
 */
Datum
rl_allow(PG_FUNCTION_ARGS)
{
	RlRequest	req;
	RlDecision	d;

	request_from_args(fcinfo, &req);
	rl_decide(&req, &d);
	PG_RETURN_BOOL(d.allowed);
}

/*
 * rl_check(same arguments) returns rl_decision: (allowed, limit, remaining,
 * retry_after, reset_at, delay).  The result descriptor is built once per
 * call site and kept in fn_extra.
 */
Datum
rl_check(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc = (TupleDesc) fcinfo->flinfo->fn_extra;
	RlRequest	req;
	RlDecision	d;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};

	request_from_args(fcinfo, &req);
	if (tupdesc == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);

		if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "rl_check must return a composite type");
		tupdesc = BlessTupleDesc(CreateTupleDescCopy(tupdesc));
		fcinfo->flinfo->fn_extra = tupdesc;
		MemoryContextSwitchTo(old);
	}

	rl_decide(&req, &d);

	values[0] = BoolGetDatum(d.allowed);
	values[1] = Int64GetDatum(req.params.limit);
	values[2] = Int64GetDatum(d.remaining);
	values[3] = Float8GetDatum(d.retry_after);
	values[4] = TimestampTzGetDatum(d.reset_at - RL_UNIX_OFFSET);
	values[5] = Float8GetDatum(d.delay);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * rl_reset(key, algo DEFAULT NULL) returns bigint: drop the key's state for
 * one algorithm, or all of them, in this database.
 */
Datum
rl_reset(PG_FUNCTION_ARGS)
{
	const char *key;
	int			keylen;
	RlAlgo		algo = RL_FIXED_WINDOW;

	require_store();
	require_not_null(fcinfo, 0, "key");
	key_arg(PG_GETARG_TEXT_PP(0), &key, &keylen);
	if (!PG_ARGISNULL(1))
		algo = algo_arg(PG_GETARG_TEXT_PP(1));
	PG_RETURN_INT64(rl_store_reset(MyDatabaseId, key, keylen,
								   PG_ARGISNULL(1), algo));
}

/*
 * rl_reset_all(all_databases DEFAULT false) returns bigint: drop every
 * state of this database, or of the whole cluster.
 */
Datum
rl_reset_all(PG_FUNCTION_ARGS)
{
	bool		all_databases = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);

	require_store();
	PG_RETURN_INT64(rl_store_reset_all(all_databases ? InvalidOid :
									   MyDatabaseId));
}

/*
 * rl_store_info() returns one row of store-wide figures.
 */
Datum
rl_store_info(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	RlStoreStats s;
	Datum		values[7];
	bool		nulls[7] = {false, false, false, false, false, false, false};

	require_store();
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
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
