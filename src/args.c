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
 * before any lock is taken.  No shared state; the setting
 * ratelimit.time_zone is defined here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgtime.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "args.h"
#include "compat.h"
#include "dispatch.h"

/* role whose members may pass an explicit "at", besides superusers */
#define RL_ADMIN_ROLE		"ratelimit_admin"

/* most months a calendar period may hold (100 years, as RL_MAX_PER) */
#define RL_MAX_MONTHS		1200

/* ratelimit.time_zone: its text, and the zone (set by its assign hook) */
static char *rl_time_zone = NULL;
static const pg_tz *rl_time_zone_tz = NULL;

/*
 * ratelimit.time_zone's check: a zone PostgreSQL knows.  pg_tzset loads it
 * into its cache, which keeps it for the life of the process.
 */
static bool
time_zone_check(char **newval, void **extra, GucSource source)
{
	if (pg_tzset(*newval) == NULL)
	{
		GUC_check_errmsg("unknown time zone \"%s\"", *newval);
		return false;
	}
	return true;
}

/*
 * ratelimit.time_zone's assignment: the zone the check loaded, from
 * pg_tzset's cache (no "extra", which PostgreSQL 16 allocates differently
 * from 15).
 */
static void
time_zone_assign(const char *newval, void *extra)
{
	rl_time_zone_tz = pg_tzset(newval);
}

/* Define ratelimit.time_zone (from _PG_init). */
void
rl_args_init(void)
{
	DefineCustomStringVariable("ratelimit.time_zone",
							   "Time zone of fixed_window's calendar periods (days, weeks, months).",
							   "A policy's time_zone column takes precedence.",
							   &rl_time_zone, "UTC", PGC_SUSET, 0,
							   time_zone_check, time_zone_assign, NULL);
}

/* ratelimit.time_zone's zone */
const pg_tz *
rl_arg_time_zone_setting(void)
{
	return rl_time_zone_tz;
}

/* A zone by name, or a clear error (for a policy's time_zone column). */
const pg_tz *
rl_arg_time_zone(const char *name)
{
	pg_tz	   *tz = pg_tzset(name);

	if (tz == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown time zone \"%s\"", name),
				 errhint("Use a name of pg_timezone_names, such as \"Europe/Paris\".")));
	return tz;
}

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

/* The error of a key longer than RL_MAX_KEY_LEN bytes. */
void
rl_arg_key_too_long(int len)
{
	ereport(ERROR,
			(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
			 errmsg("\"key\" is too long (%d bytes)", len),
			 errdetail("Keys may be at most %d bytes long.",
					   RL_MAX_KEY_LEN)));
}

/*
 * The window of algorithm algo: p->per and p->period from "per", the zone
 * (ratelimit.time_zone's, or a policy's: zone_given) and an anchor (Unix
 * us, or RL_NO_ANCHOR).  Months and years, and days in a zone other than
 * UTC, from an anchor or in whole weeks (which start on Monday), make a
 * calendar period: fixed_window only (docs/algorithms.md says why).  A
 * per of whole days in UTC without an anchor stays W on the epoch, which
 * is the same windows.  Otherwise per is positive and at most 100 years;
 * a day counts 24 hours.
 */
void
rl_arg_period(RlAlgo algo, const Interval *per, const pg_tz *tz,
			  bool zone_given, int64 anchor, RlParams *p)
{
	RlPeriod   *pd = &p->period;
	bool		calendar_algo = algo == RL_FIXED_WINDOW;
	long int	gmtoff;
	int128		us;

	memset(pd, 0, sizeof(*pd));
	pd->anchor = RL_NO_ANCHOR;
	if (tz != NULL && pg_get_timezone_offset(tz, &gmtoff) && gmtoff == 0)
		tz = NULL;				/* UTC: plain arithmetic */

	if (per->month != 0)
	{
		if (!calendar_algo)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a \"per\" of months or years applies only to algorithm \"fixed_window\""),
					 errdetail("Algorithm \"%s\" needs windows of one fixed length, and months have none.",
							   rl_algo_name(algo)),
					 errhint("Use fixed_window for calendar periods, or express the window in days, hours, minutes or seconds.")));
		if (per->day != 0 || per->time != 0 || per->month < 0 ||
			per->month > RL_MAX_MONTHS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a calendar \"per\" must be whole months or years, from 1 month to 100 years"),
					 errhint("Write it as '1 month', '3 months' or '1 year'.")));
		pd->months = per->month;
		/* nominal: what a window that cannot be decided is told to wait */
		p->per = (int64) per->month * 31 * USECS_PER_DAY;
	}
	else
	{
		us = (int128) per->day * USECS_PER_DAY + per->time;
		if (us <= 0 || us > RL_MAX_PER)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("\"per\" must be greater than zero and at most 36525 days")));
		p->per = (int64) us;
		if (calendar_algo && per->time == 0 &&
			(tz != NULL || anchor != RL_NO_ANCHOR || per->day % 7 == 0))
			pd->days = per->day;
	}

	if (!(calendar_algo && per->time == 0) &&
		(zone_given || anchor != RL_NO_ANCHOR))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"time_zone\" and \"period_anchor\" apply only to fixed_window with a \"per\" of whole days, weeks, months or years"),
				 errdetail("Other windows are not aligned on the calendar.")));
	if (rl_period_is_calendar(pd))
	{
		pd->tz = tz;
		pd->anchor = anchor;
	}
}

/*
 * A duration other than a window (a policy's block_duration) in
 * microseconds: positive, no months, at most 100 years, as a window.
 */
int64
rl_arg_duration(const Interval *iv, const char *name)
{
	int128		us;

	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" must not contain months or years", name),
				 errdetail("A month has no fixed length.")));
	us = (int128) iv->day * USECS_PER_DAY + iv->time;
	if (us <= 0 || us > RL_MAX_PER)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" must be greater than zero and at most 36525 days",
						name)));
	return (int64) us;
}

/*
 * A request's window as an interval, for results and messages: months for
 * a period of months, days for one of days, else all of it in the time
 * field (a day of a window of W counts 24 hours).
 */
Interval *
rl_per_interval(const RlParams *p)
{
	Interval   *iv = palloc(sizeof(Interval));

	iv->time = 0;
	iv->day = 0;
	iv->month = 0;
	if (p->period.months > 0)
		iv->month = p->period.months;
	else if (p->period.days > 0)
		iv->day = p->period.days;
	else
		iv->time = p->per;
	return iv;
}

/* A billing anchor: finite, and within the range of "at". */
int64
rl_arg_anchor(TimestampTz anchor)
{
	if (TIMESTAMP_NOT_FINITE(anchor) ||
		anchor > RL_MAX_ABS_TIME - RL_UNIX_OFFSET ||
		anchor < -RL_MAX_ABS_TIME - RL_UNIX_OFFSET)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("\"period_anchor\" is out of range"),
				 errdetail("An anchor must be finite and within 36000 years of 1970.")));
	return anchor + RL_UNIX_OFFSET;
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

/* The longest wait, in microseconds: no months, not negative. */
int64
rl_arg_max_wait(const Interval *max_wait)
{
	int128		us = (int128) max_wait->day * USECS_PER_DAY + max_wait->time;

	if (max_wait->month != 0 || us < 0 || us > PG_INT64_MAX / 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"max_wait\" must be zero or positive, without months")));
	return (int64) us;
}
