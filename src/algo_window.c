/*-------------------------------------------------------------------------
 *
 * algo_window.c
 *		fixed_window and sliding_window_counter.
 *
 * Both count units per window of W microseconds aligned on the Unix epoch.
 * The state records where its current window starts, so a change of W is
 * simply a new window.  Pure functions: no locks, allocation or errors.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "algo.h"
#include "algo_common.h"

/*
 * Move the state to the window containing t.  When keep_previous is set
 * and the stored window is the one just before, its count becomes the
 * previous window's count; otherwise both counts start from zero.
 */
static void
window_roll(RlWindowState *s, bool fresh, int64 t, int64 per,
			bool keep_previous)
{
	int64		start = rl_floor_div(t, per) * per;

	if (fresh)
	{
		s->start = start;
		s->cur = 0;
		s->prev = 0;
	}
	else if (s->start != start)
	{
		s->prev = (keep_previous && s->start == start - per) ? s->cur : 0;
		s->cur = 0;
		s->start = start;
	}
}

/*
 * fixed_window: allowed iff count + c <= L, then count += c.
 */
void
rl_fixed_window(RlWindowState *s, bool fresh, int64 t, const RlParams *p,
				RlDecision *d)
{
	int64		end;

	window_roll(s, fresh, t, p->per, false);
	end = s->start + p->per;

	d->allowed = p->cost <= p->limit - s->cur;
	if (d->allowed)
		s->cur += p->cost;
	d->remaining = Max(p->limit - s->cur, 0);
	d->retry_after = d->allowed ? 0.0 : rl_seconds(end - t, 1);
	d->reset_at = s->cur > 0 ? end : t;
	d->delay = 0.0;
}

/*
 * sliding_window_counter: the previous window's count weighted by the part
 * of it still inside the sliding window, plus the current count.  All
 * comparisons are made on values multiplied by W, so they are exact.
 */
void
rl_sliding_window_counter(RlWindowState *s, bool fresh, int64 t,
						  const RlParams *p, RlDecision *d)
{
	int64		per = p->per;
	int64		elapsed;
	int128		capacity;
	int128		used;			/* estimate * W */
	int128		cost = (int128) p->cost * per;

	window_roll(s, fresh, t, per, true);
	elapsed = t - s->start;
	capacity = (int128) p->limit * per;
	used = (int128) s->prev * (per - elapsed) + (int128) s->cur * per;

	d->allowed = used + cost <= capacity;
	if (d->allowed)
	{
		s->cur += p->cost;
		used += cost;
		d->retry_after = 0.0;
	}
	else if ((int128) s->cur + p->cost <= p->limit)
	{
		/*
		 * Enough room once the previous window's weight fades:
		 * W - (L - cur - c) * W / prev - e.  Denial implies prev > 0.
		 */
		int128		slack = (int128) p->limit - s->cur - p->cost;

		d->retry_after = rl_seconds((int128) (per - elapsed) * s->prev -
									slack * per, s->prev);
	}
	else
	{
		/*
		 * Only the next window helps, where cur becomes prev:
		 * (W - e) + max(0, W - (L - c) * W / cur).  Here cur + c > L, so the
		 * second term is positive and cur > 0.
		 */
		int128		excess = (int128) s->cur + p->cost - p->limit;

		d->retry_after = rl_seconds((int128) (per - elapsed) * s->cur +
									excess * per, s->cur);
	}

	d->remaining = rl_units(capacity - used, per);
	if (s->cur > 0)
		d->reset_at = s->start + 2 * per;
	else if (s->prev > 0)
		d->reset_at = s->start + per;
	else
		d->reset_at = t;
	d->delay = 0.0;
}

/*
 * fixed_window: the units still count only while their window lasts.
 */
void
rl_fixed_window_refund(RlWindowState *s, int64 t, const RlParams *p,
					   int64 cost)
{
	if (s->start == rl_floor_div(t, p->per) * p->per)
		s->cur = Max(s->cur - cost, 0);
}

/*
 * sliding_window_counter: in the current window, or in the previous one if
 * the window has rolled once since (where they still weigh).
 */
void
rl_sliding_window_counter_refund(RlWindowState *s, int64 t,
								 const RlParams *p, int64 cost)
{
	int64		start = rl_floor_div(t, p->per) * p->per;

	if (s->start == start)
		s->cur = Max(s->cur - cost, 0);
	else if (s->start == start + p->per)
		s->prev = Max(s->prev - cost, 0);
}
