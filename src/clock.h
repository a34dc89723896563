/*-------------------------------------------------------------------------
 *
 * clock.h
 *		The limiter's clock: microseconds since the Unix epoch.
 *
 * Every time a decision uses (the clock, "at", reset_at, the state's
 * times) is a count of microseconds since 1970 in an int64.  The clock is
 * the real one, never the transaction's frozen now().  Inline and without
 * state, so that any file may read it without depending on another.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_CLOCK_H
#define RL_CLOCK_H

#include "datatype/timestamp.h"
#include "utils/timestamp.h"

/* Unix epoch minus PostgreSQL epoch, in microseconds */
#define RL_UNIX_OFFSET \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

/* "at" was not given: the deciding engine reads its clock */
#define RL_NO_TIME PG_INT64_MIN

/* The real clock, in microseconds since the Unix epoch. */
static inline int64
rl_clock_now(void)
{
	return GetCurrentTimestamp() + RL_UNIX_OFFSET;
}

/* A time of ours as a timestamptz. */
static inline TimestampTz
rl_clock_timestamptz(int64 t)
{
	return (TimestampTz) (t - RL_UNIX_OFFSET);
}

#endif							/* RL_CLOCK_H */
