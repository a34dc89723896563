/*-------------------------------------------------------------------------
 *
 * algo_common.h
 *		Exact integer helpers shared by the algorithm files.
 *
 * Everything is inline and pure: the callers run under an LWLock.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_ALGO_COMMON_H
#define RL_ALGO_COMMON_H

#include "algo.h"
#include "common/int.h"

/* reset_at is saturated here (Unix us, about year 148000) */
#define RL_TIME_SATURATE	((int64) 1 << 62)

/* floor(a / b) for b > 0 */
static inline int64
rl_floor_div(int64 a, int64 b)
{
	int64		q = a / b;

	if (a % b != 0 && a < 0)
		q--;
	return q;
}

/*
 * ceil(a / b) for a >= 0, b > 0.  When both fit in 63 bits (nearly every
 * call) in 64-bit arithmetic: the same quotient, without the 128-bit
 * division's library call.
 */
static inline int128
rl_ceil_div128(int128 a, int128 b)
{
	if (likely(a >= 0 && a <= PG_INT64_MAX / 2 && b <= PG_INT64_MAX / 2))
		return ((int64) a + (int64) b - 1) / (int64) b;
	return (a + b - 1) / b;
}

/*
 * t + ceil(num / den) microseconds, saturated; num >= 0, den > 0, all in
 * 64 bits (a sum past 64 bits is past the saturation too).
 */
static inline int64
rl_time_after64(int64 t, int64 num, int64 den)
{
	int64		r;

	if (pg_add_s64_overflow(t, num / den + (num % den != 0), &r) ||
		r > RL_TIME_SATURATE)
		return RL_TIME_SATURATE;
	return r;
}

/* t + ceil(num / den) microseconds, saturated; num >= 0, den > 0 */
static inline int64
rl_time_after(int64 t, int128 num, int128 den)
{
	int128		r;

	if (likely(num >= 0 && num <= PG_INT64_MAX && den <= PG_INT64_MAX))
		return rl_time_after64(t, (int64) num, (int64) den);
	r = (int128) t + rl_ceil_div128(num, den);
	return r > RL_TIME_SATURATE ? RL_TIME_SATURATE : (int64) r;
}

/*
 * num / den microseconds, in seconds; num >= 0, den > 0.  The 64-bit
 * form converts the same integer to the same double without the 128-bit
 * conversion's library call.
 */
static inline double
rl_seconds64(int64 num, int64 den)
{
	return (double) num / ((double) den * 1000000.0);
}

/* rl_seconds64 for a 128-bit numerator */
static inline double
rl_seconds(int128 num, int128 den)
{
	return (double) num / ((double) den * 1000000.0);
}

/* floor(a / b) clamped to [0, INT64_MAX] for b > 0 */
static inline int64
rl_units(int128 a, int64 b)
{
	int128		q;

	if (a <= 0)
		return 0;
	/* in 64 bits when it fits, as rl_ceil_div128 */
	if (likely(a <= PG_INT64_MAX))
		return (int64) a / b;
	q = a / b;
	return q > PG_INT64_MAX ? PG_INT64_MAX : (int64) q;
}

/*
 * The longest a saved state may stay unlike a new key's when the state
 * cannot tell (a token bucket's burst is not saved): two longest windows.
 */
#define RL_IDLE_MAX			(2 * RL_MAX_PER)

/*
 * Bound a saved idle time (an image_valid function's): the state cannot
 * differ from a new key's after "from" plus "span" microseconds (from the
 * state itself), so a later idle time, which would keep the key in the
 * store for nothing, is lowered to it.  Saturated as reset_at is.
 */
static inline void
rl_idle_bound(RlStateImage *img, int64 from, int64 span)
{
	int64		bound = span >= RL_TIME_SATURATE - from ?
		RL_TIME_SATURATE : from + span;

	if (img->idle_at > bound)
		img->idle_at = bound;
}

#endif							/* RL_ALGO_COMMON_H */
