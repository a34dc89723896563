/*-------------------------------------------------------------------------
 *
 * clock.h
 *		The limiter's clock: microseconds since the Unix epoch.
 *
 * Every time a decision uses (the clock, "at", reset_at, the state's
 * times) is a count of microseconds since 1970 in an int64.  The clock is
 * the real one, never the transaction's frozen now().
 *
 * Reading the system clock costs a decision a quarter of its own time
 * (#9: 24 ns of gettimeofday's, against some 90 ns a decision adds to a
 * call).  Where the kernel itself keeps time with the CPU's time-stamp
 * counter (its clocksource is "tsc"), the clock is read as the kernel's
 * vDSO reads it, from the counter scaled by its rate, without the vDSO's
 * ordering fence: from the latest reading of the system clock (an anchor)
 * for at most a millisecond, at a rate measured against the system clock
 * over at least 10 ms.  Past that millisecond, with no rate measured yet,
 * or anywhere else, the system clock is read (clock.c has the rules).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_CLOCK_H
#define RL_CLOCK_H

#include "datatype/timestamp.h"
#include "utils/timestamp.h"

#include "compat.h"

/* Unix epoch minus PostgreSQL epoch, in microseconds */
#define RL_UNIX_OFFSET \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

/* "at" was not given: the deciding engine reads its clock */
#define RL_NO_TIME PG_INT64_MIN

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RL_CLOCK_TSC 1
#endif

/*
 * The latest reading of the system clock and the counter, and the
 * counter's rate; this process's own (clock.c).
 */
typedef struct RlClockAnchor
{
	uint64		tsc;			/* the counter at the reading */
	int64		ns;				/* the system clock then, ns since 1970 */
	uint64		span;			/* ticks the clock may be extrapolated over
								 * from it; 0: none (read the system's) */
	uint64		mult;			/* ns per tick, times 2^32 */
} RlClockAnchor;

extern rl_hidden RlClockAnchor rl_clock_anchor;
extern int64 rl_clock_system(void);

/* The real clock, in microseconds since the Unix epoch. */
static inline int64
rl_clock_now(void)
{
#ifdef RL_CLOCK_TSC
	uint64		d = __builtin_ia32_rdtsc() - rl_clock_anchor.tsc;

	if (likely(d < rl_clock_anchor.span))
		return (rl_clock_anchor.ns +
				(int64) ((d * rl_clock_anchor.mult) >> 32)) / 1000;
#endif
	return rl_clock_system();
}

/* A time of ours as a timestamptz. */
static inline TimestampTz
rl_clock_timestamptz(int64 t)
{
	return (TimestampTz) (t - RL_UNIX_OFFSET);
}

#endif							/* RL_CLOCK_H */
