/*-------------------------------------------------------------------------
 *
 * clock.c
 *		The limiter's clock (clock.h): the system clock, and the time-stamp
 *		counter's rate that lets a decision read it without a system call.
 *
 * The rules, so that a time read from the counter is the system clock's to
 * well under a microsecond:
 *
 *   - Only where the kernel keeps time with the counter (the clocksource
 *	   is "tsc"): the kernel has then found it constant in rate, running in
 *	   every idle state, and the same on every CPU.  Elsewhere every read is
 *	   the system clock's (gettimeofday).
 *   - Each reading of the system clock is bracketed by two reads of the
 *	   counter, and becomes the anchor only when the bracket is short (the
 *	   process was not preempted between them): at most 2,000 ticks, or
 *	   twice the shortest this process has seen (where every reading is
 *	   slow: under valgrind).  The reading is tied to the counter within
 *	   half its bracket: some 15 ns where a reading takes 30.
 *   - The rate is measured between anchors at least 10 ms apart, and
 *	   10,000 times their brackets (an error of at most a part in 10,000;
 *	   on hardware a few parts in a million), and used only when it agrees,
 *	   to one part in a thousand, with the measure before it: a step of the
 *	   system clock (settimeofday, NTP's step) inside one measure cannot
 *	   make a rate that is used.
 *   - A time is extrapolated from the anchor over at most 1 ms: an error
 *	   in the rate of a part in a million moves it by a nanosecond, and the
 *	   system clock's own slewing (NTP: at most 500 parts in a million) by
 *	   half a microsecond at most; a step of the system clock shows within
 *	   the millisecond.  A counter that went back (another CPU's, were they
 *	   not the same) is past the span too.
 *
 * The state is the process's own: no lock, nothing shared.  A forked
 * backend inherits its postmaster's, which is as good (one counter).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/time.h>
#include <time.h>

#include "clock.h"

/* how long a time is extrapolated from an anchor (ns) */
#define RL_CLOCK_SPAN		1000000
/* how far apart two anchors must be to measure the rate (ns) */
#define RL_CLOCK_BASE_MIN	10000000
/* ... and at most (ns): older, the rate is measured again from scratch */
#define RL_CLOCK_BASE_MAX	INT64CONST(60000000000)
/* a reading of the system clock bracketed by at most so many ticks */
#define RL_CLOCK_BRACKET	2000
/* anchors a measure of the rate spans: at least so many times their brackets */
#define RL_CLOCK_PRECISION	10000
/* two measures of the rate agree within one part in this */
#define RL_CLOCK_AGREE		1000

RlClockAnchor rl_clock_anchor;

/* rl_clock_system's reading of the system clock */
static struct timeval system_tv;

#ifdef RL_CLOCK_TSC

/* -1: not known yet; else whether the kernel keeps time with the counter */
static int	tsc_usable = -1;

/* the anchor the next measure of the rate starts from, and its bracket */
static bool have_base = false;
static uint64 base_tsc;
static int64 base_ns;
static uint64 base_bracket;

/* the shortest bracket seen */
static uint64 min_bracket = PG_UINT64_MAX;

/* the latest measure of the rate, used or not (ns per tick, times 2^32) */
static uint64 measured = 0;

/*
 * Does the kernel keep time with the time-stamp counter?  Read once per
 * process (the postmaster's answer is inherited).
 */
static pg_noinline bool
tsc_check(void)
{
	FILE	   *f;
	char		buf[32];
	bool		tsc = false;

	f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource",
			  "r");
	if (f == NULL)
		return false;
	if (fgets(buf, sizeof(buf), f) != NULL)
		tsc = strcmp(buf, "tsc\n") == 0 || strcmp(buf, "tsc") == 0;
	fclose(f);
	return tsc;
}

/*
 * A new anchor: the counter tsc, read within bracket ticks of system time
 * ns.  Measures the rate from the base anchor once they are far enough
 * apart, and sets how far the clock may be extrapolated from this anchor
 * (not at all without a rate two measures agree on).
 */
static void
clock_anchor(uint64 tsc, int64 ns, uint64 bracket)
{
	if (have_base && tsc > base_tsc && ns - base_ns <= RL_CLOCK_BASE_MAX)
	{
		double		rate = (double) (ns - base_ns) / (double) (tsc - base_tsc);

		if (ns - base_ns >= RL_CLOCK_BASE_MIN &&
			(double) (ns - base_ns) >=
			(double) RL_CLOCK_PRECISION * (double) (base_bracket + bracket) * rate)
		{
			uint64		m = 0;

			/* a counter of 50 MHz to 20 GHz */
			if (rate >= 0.05 && rate <= 20.0)
				m = (uint64) (rate * 4294967296.0);
			if (m != 0 && measured != 0 &&
				(m > measured ? m - measured : measured - m) <=
				measured / RL_CLOCK_AGREE)
				rl_clock_anchor.mult = m;
			else
				rl_clock_anchor.mult = 0;
			measured = m;
			base_tsc = tsc;
			base_ns = ns;
			base_bracket = bracket;
		}
	}
	else
	{
		/* the first anchor, or the counter or the clock moved oddly */
		rl_clock_anchor.mult = 0;
		measured = 0;
		have_base = true;
		base_tsc = tsc;
		base_ns = ns;
		base_bracket = bracket;
	}
	rl_clock_anchor.tsc = tsc;
	rl_clock_anchor.ns = ns;
	rl_clock_anchor.span = rl_clock_anchor.mult == 0 ? 0 :
		(((uint64) RL_CLOCK_SPAN) << 32) / rl_clock_anchor.mult;
}

/*
 * The system clock read where the counter may stand in for it: the reading,
 * bracketed by the counter, is a new anchor.  Out of line, so that
 * rl_clock_system's other case sets up no frame of its own.
 */
static pg_noinline int64
clock_read_anchor(void)
{
	struct timespec ts;
	uint64		t0,
				t1;
	int64		ns;

	t0 = __builtin_ia32_rdtsc();
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return GetCurrentTimestamp() + RL_UNIX_OFFSET;
	t1 = __builtin_ia32_rdtsc();
	ns = (int64) ts.tv_sec * INT64CONST(1000000000) + ts.tv_nsec;
	if (t1 >= t0)
	{
		uint64		bracket = t1 - t0;

		min_bracket = Min(min_bracket, bracket);
		if (bracket <= Max(RL_CLOCK_BRACKET, 2 * min_bracket))
			clock_anchor(t0 + bracket / 2, ns, bracket);
	}
	return ns / 1000;
}

#endif							/* RL_CLOCK_TSC */

/*
 * The system clock, in microseconds since the Unix epoch; where the
 * counter may stand in for it, the reading is a new anchor.  Elsewhere
 * (the kernel keeps time with another clocksource: kvm-clock, say) every
 * decision comes here: a test and the system's call, nothing more (#9).
 */
int64
rl_clock_system(void)
{
#ifdef RL_CLOCK_TSC
	if (tsc_usable != 0)
	{
		if (tsc_usable < 0)
			tsc_usable = tsc_check();
		if (tsc_usable > 0)
			return clock_read_anchor();
	}
#endif
	/* a static buffer: no frame to guard (the process's only reader) */
	gettimeofday(&system_tv, NULL);
	return (int64) system_tv.tv_sec * USECS_PER_SEC + system_tv.tv_usec;
}
