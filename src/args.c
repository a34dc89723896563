/*-------------------------------------------------------------------------
 *
 * args.c
 *		Checks of the values a request is made of.
 *
 * Shared by the SQL functions, the policy table's validation trigger and
 * the quota trigger, so a value is accepted or refused the same way
 * wherever it comes from.  Every refusal is an ERROR with a SQLSTATE of
 * class 22 (42501 for "at" without privilege, 55000 without the preload)
 * and a message naming the argument; docs/reference.md lists them.  Runs
 * before any lock is taken.  No shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "args.h"
#include "compat.h"
#include "dispatch.h"

/* role whose members may pass an explicit "at", besides superusers */
#define RL_ADMIN_ROLE		"ratelimit_admin"

/* Fail unless the library was preloaded (the store exists). */
void
rl_require_store(void)
{
	if (!rl_dispatch_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ratelimit must be loaded via \"shared_preload_libraries\""),
				 errhint("Add ratelimit to shared_preload_libraries in postgresql.conf and restart the server.")));
}

void
rl_arg_not_null(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("\"%s\" must not be null", name)));
}

/*
 * Parse a non-null algorithm name argument.  An algorithm that holds slots
 * (concurrency) is accepted only where slots_ok: a rate-limiting call
 * would take a slot that nothing gives back.
 */
RlAlgo
rl_arg_algo(text *name, bool slots_ok)
{
	RlAlgo		algo;

	if (!rl_algo_parse(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), &algo))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown algorithm \"%s\"", text_to_cstring(name)),
				 errhint("Valid algorithms are %s.", rl_algo_list(false))));
	if (!slots_ok && rl_algo_holds(algo))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("algorithm \"%s\" limits calls in flight, not a rate",
						rl_algo_name(algo)),
				 errhint("Take a slot with rl_acquire(key, max_in_flight); valid algorithms here are %s.",
						 rl_algo_list(false))));
	return algo;
}

/* Check a non-null key argument and point at its bytes. */
void
rl_arg_key(text *key, const char **bytes, int *len)
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
int64
rl_arg_per(const Interval *per)
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
 * A window in microseconds as an interval, for results and messages: all of
 * it in the time field, as rl_arg_per counts a day as 24 hours.
 */
Interval *
rl_per_interval(int64 per)
{
	Interval   *iv = palloc(sizeof(Interval));

	iv->time = per;
	iv->day = 0;
	iv->month = 0;
	return iv;
}

/*
 * An explicit time: finite, within range, and only for superusers or
 * members of ratelimit_admin, since it moves the key's clock for everyone.
 */
int64
rl_arg_at(TimestampTz at)
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

void
rl_arg_positive(int64 value, const char *name)
{
	if (value <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" must be greater than zero", name)));
}

void
rl_arg_cost(int64 cost)
{
	if (cost < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"cost\" must not be negative")));
}

/*
 * A cost that can fit: at most the limit, or the burst for the buckets.
 */
void
rl_cost_check(RlAlgo algo, const RlParams *p)
{
	int64		capacity = rl_algo_capacity(algo, p);

	if (p->cost > capacity)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"cost\" (" INT64_FORMAT ") exceeds the %s (" INT64_FORMAT ") and can never be admitted",
						p->cost, rl_algo(algo)->has_burst ? "burst" : "limit",
						capacity)));
}

/*
 * A request (a policy's) used where its kind of algorithm is expected:
 * slots by rl_acquire (slots true), rates by the rate-limiting functions.
 */
void
rl_algo_check_use(RlAlgo algo, bool slots, const char *policy)
{
	if (rl_algo_holds(algo) == slots)
		return;
	if (slots)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("policy \"%s\" is not a concurrency limit", policy),
				 errhint("rl_acquire takes policies of algorithm \"concurrency\".")));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("policy \"%s\" is a concurrency limit, not a rate", policy),
			 errhint("Take its slots with rl_acquire(key, policy => '%s').",
					 policy)));
}

/*
 * Checks across the parameters of one algorithm: a burst only for the
 * buckets (the capacity defaults to the limit), and a cost that can fit; a
 * concurrency limit's holder takes one slot.  Sets p->burst when it was
 * not given.
 */
void
rl_params_check(RlAlgo algo, RlParams *p, bool burst_given)
{
	if (rl_algo_holds(algo) && p->cost != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"cost\" of a concurrency limit must be 1"),
				 errdetail("A transaction or a session holds one slot of a key.")));
	if (!burst_given)
		p->burst = p->limit;
	else if (!rl_algo(algo)->has_burst)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"burst\" does not apply to algorithm \"%s\"",
						rl_algo_name(algo)),
				 errhint("Only %s have a burst; pass NULL.", rl_algo_list(true))));
	else
		rl_arg_positive(p->burst, "burst");
	rl_cost_check(algo, p);
}
