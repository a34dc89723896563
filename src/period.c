/*-------------------------------------------------------------------------
 *
 * period.c
 *		The bounds of a calendar period: whole local days and weeks, and
 *		calendar months, in a time zone, from an anchor.
 *
 * fixed_window's windows are either W microseconds aligned on the epoch
 * or calendar periods (RlPeriod, algo.h); this file computes the start and
 * end of the period holding a time.  Both engines use it: the store under
 * its partition lock (window_roll, algo_window.c), Redis by sending the
 * bounds it computed to the script (redis_script.c), so the calendar's
 * rules live here only.
 *
 * The rules (docs/algorithms.md, "Calendar periods"):
 *	- days: a period is N local days starting at midnight; without an
 *	  anchor they are counted from 1970-01-01, or for whole weeks from
 *	  Monday 1970-01-05.  A day of a change to or from daylight-saving time
 *	  is 23 or 25 hours long.
 *	- months: a period is N calendar months starting on the 1st at
 *	  midnight; without an anchor counted from January 1970 (so quarters
 *	  and years start in January).
 *	- an anchor moves the start to its local day (of the month, for months)
 *	  and time of day; a month shorter than that day starts its period on
 *	  its last day (an anchor on Jan 31: Feb 28 or 29, Mar 31, Apr 30).
 *	- a local time that does not exist or exists twice (daylight-saving
 *	  changes) is taken as PostgreSQL's timestamptz input takes it.
 *
 * Pure: pg_localtime and DetermineTimeZoneOffset read the zone's rules
 * loaded by pg_tzset before (args.c), and neither allocates nor raises an
 * error, so this runs under an LWLock.  No shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgtime.h"
#include "utils/datetime.h"

#include "algo.h"
#include "algo_common.h"
#include "clock.h"

/* 1970-01-05, a Monday, in days since 1970-01-01 */
#define RL_FIRST_MONDAY		4

/*
 * The Gregorian calendar repeats every 400 years, 146097 days: a date
 * before what j2date and date2j handle (Julian day 0, 4714 BC) is moved by
 * whole cycles into their range and back.
 */
#define RL_CYCLE_DAYS		146097
#define RL_CYCLE_YEARS		400

/* A time in local terms: its day since 1970-01-01 and time of day (us). */
typedef struct RlLocal
{
	int64		day;
	int64		tod;
} RlLocal;

/* The local day and time of day of Unix time t in tz (NULL: UTC). */
static RlLocal
period_local(int64 t, const pg_tz *tz)
{
	RlLocal		l;
	int64		local = t;

	if (tz != NULL)
	{
		pg_time_t	secs = (pg_time_t) rl_floor_div(t, USECS_PER_SEC);
		struct pg_tm *tm = pg_localtime(&secs, tz);

		if (tm != NULL)
			local = t + (int64) tm->tm_gmtoff * USECS_PER_SEC;
	}
	l.day = rl_floor_div(local, USECS_PER_DAY);
	l.tod = local - l.day * USECS_PER_DAY;
	return l;
}

/* The civil date of day "day" since 1970-01-01. */
static void
period_civil(int64 day, int *year, int *month, int *mday)
{
	int64		jd = day + UNIX_EPOCH_JDATE;
	int64		cycles = jd < 0 ? -jd / RL_CYCLE_DAYS + 1 : 0;

	j2date((int) (jd + cycles * RL_CYCLE_DAYS), year, month, mday);
	*year -= (int) (cycles * RL_CYCLE_YEARS);
}

/* The day since 1970-01-01 of a civil date. */
static int64
period_day(int year, int month, int mday)
{
	int64		cycles = year < 0 ? -(int64) year / RL_CYCLE_YEARS + 1 : 0;

	return date2j((int) (year + cycles * RL_CYCLE_YEARS), month, mday) -
		UNIX_EPOCH_JDATE - cycles * RL_CYCLE_DAYS;
}

/* The Unix time of local day "day" (since 1970) at tod, in tz. */
static int64
period_unix(int64 day, int64 tod, const pg_tz *tz)
{
	int64		local = day * USECS_PER_DAY + tod;
	struct pg_tm tm;
	int64		secs;

	if (tz == NULL)
		return local;
	memset(&tm, 0, sizeof(tm));
	period_civil(day, &tm.tm_year, &tm.tm_mon, &tm.tm_mday);
	secs = tod / USECS_PER_SEC;
	tm.tm_hour = (int) (secs / SECS_PER_HOUR);
	tm.tm_min = (int) (secs / SECS_PER_MINUTE % MINS_PER_HOUR);
	tm.tm_sec = (int) (secs % SECS_PER_MINUTE);
	/* the offset is UTC minus local time, in seconds */
	return local +
		(int64) DetermineTimeZoneOffset(&tm, unconstify(pg_tz *, tz)) *
		USECS_PER_SEC;
}

/* The local day (since 1970) of day "mday" of month index mi, clamped. */
static int64
period_month_day(int64 mi, int mday)
{
	int			year = (int) rl_floor_div(mi, MONTHS_PER_YEAR);
	int			month = (int) (mi - (int64) year * MONTHS_PER_YEAR) + 1;
	int			last = day_tab[isleap(year)][month - 1];

	return period_day(year, month, Min(mday, last));
}

/* The start of the k-th period of months from month index a0. */
static int64
period_month_start(const RlPeriod *pd, int64 a0, int mday, int64 tod,
				   int64 k)
{
	return period_unix(period_month_day(a0 + k * pd->months, mday), tod,
					   pd->tz);
}

/*
 * The start and end of the calendar period holding Unix time t.  The first
 * guess is the period holding t's local date; when t is before that
 * period's start (an anchor's time of day, or its day clamped at a month's
 * end), it is the one before.
 */
void
rl_period_bounds(const RlPeriod *pd, int64 t, int64 *start, int64 *end)
{
	RlLocal		now = period_local(t, pd->tz);
	RlLocal		origin;
	int64		k;

	if (pd->anchor != RL_NO_ANCHOR)
		origin = period_local(pd->anchor, pd->tz);
	else
	{
		origin.day = pd->days % 7 == 0 ? RL_FIRST_MONDAY : 0;
		origin.tod = 0;
	}

	if (pd->months > 0)
	{
		int			y,
					m,
					d,
					ay,
					am,
					ad;
		int64		mi,
					a0;

		period_civil(now.day, &y, &m, &d);
		mi = (int64) y * MONTHS_PER_YEAR + m - 1;
		if (pd->anchor != RL_NO_ANCHOR)
		{
			period_civil(origin.day, &ay, &am, &ad);
			a0 = (int64) ay * MONTHS_PER_YEAR + am - 1;
		}
		else
		{
			a0 = (int64) 1970 * MONTHS_PER_YEAR;
			ad = 1;
		}
		k = rl_floor_div(mi - a0, pd->months);
		*start = period_month_start(pd, a0, ad, origin.tod, k);
		if (*start > t)
			*start = period_month_start(pd, a0, ad, origin.tod, --k);
		*end = period_month_start(pd, a0, ad, origin.tod, k + 1);
	}
	else
	{
		k = rl_floor_div(now.day - origin.day, pd->days);
		*start = period_unix(origin.day + k * pd->days, origin.tod, pd->tz);
		if (*start > t)
		{
			k--;
			*start = period_unix(origin.day + k * pd->days, origin.tod,
								 pd->tz);
		}
		*end = period_unix(origin.day + (k + 1) * pd->days, origin.tod,
						   pd->tz);
	}
}
