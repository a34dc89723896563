/*-------------------------------------------------------------------------
 *
 * algo_window.c
 *		fixed_window and sliding_window_counter.
 *
 * Both count units per window of W microseconds aligned on the Unix epoch;
 * fixed_window's windows may instead be calendar periods (days in a time
 * zone, months, from an anchor: period.c).  rl_window_bounds is the one
 * place a window's bounds come from.  The state records where its current
 * window starts, so a change of W or of period is simply a new window.
 * Pure functions: no locks, allocation or errors.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "algo.h"
#include "algo_common.h"

/*
 * The start and end of the window holding t: a calendar period, or W on
 * the epoch.  The Redis engine sends the script the bounds it gets here.
 */
void
rl_window_bounds(const RlParams *p, int64 t, int64 *start, int64 *end)
{
	if (unlikely(rl_period_is_calendar(&p->period)))
		rl_period_bounds(&p->period, t, start, end);
	else
	{
		*start = rl_floor_div(t, p->per) * p->per;
		*end = *start + p->per;
	}
}

/*
 * Move the state to the window containing t, and return that window's end.
 * When keep_previous is set and the stored window is the one just before
 * (sliding_window_counter, whose windows are all W long), its count
 * becomes the previous window's count; otherwise both counts start from
 * zero.
 */
static int64
window_roll(RlWindowState *s, bool fresh, int64 t, const RlParams *p,
			bool keep_previous)
{
	int64		start;
	int64		end;
	int64		per = p->per;

	rl_window_bounds(p, t, &start, &end);
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
	return end;
}

/*
 * fixed_window: allowed iff count + c + h <= L (h the headroom), then
 * count += c.
 */
bool
rl_fixed_window(RlState *state, bool fresh, int64 t, int64 last,
				const RlParams *p, RlOutcome *o, RlChain *chain)
{
	RlWindowState *s = &state->window;
	int64		end;

	end = window_roll(s, fresh, t, p, false);

	o->allowed = p->cost + p->headroom <= p->limit - s->cur;
	if (o->allowed)
		s->cur += p->cost;
	o->remaining = Max(p->limit - s->cur, 0);
	o->retry_after = o->allowed ? 0.0 : rl_seconds64(end - t, 1);
	o->reset_at = s->cur > 0 ? end : t;
	o->delay = 0.0;
	return true;
}

/*
 * sliding_window_counter: the previous window's count weighted by the part
 * of it still inside the sliding window, plus the current count.  All
 * comparisons are made on values multiplied by W, so they are exact.  The
 * call is decided, and its wait computed, for its cost plus the headroom
 * (need); it counts its cost.
 */
bool
rl_sliding_window_counter(RlState *state, bool fresh, int64 t, int64 last,
						  const RlParams *p, RlOutcome *o, RlChain *chain)
{
	RlWindowState *s = &state->window;
	int64		per = p->per;
	int64		elapsed;
	int128		capacity;
	int128		used;			/* estimate * W */
	int64		need = p->cost + p->headroom;

	(void) window_roll(s, fresh, t, p, true);
	elapsed = t - s->start;
	capacity = (int128) p->limit * per;
	used = (int128) s->prev * (per - elapsed) + (int128) s->cur * per;

	o->allowed = used + (int128) need * per <= capacity;
	if (o->allowed)
	{
		s->cur += p->cost;
		used += (int128) p->cost * per;
		o->retry_after = 0.0;
	}
	else if ((int128) s->cur + need <= p->limit)
	{
		/*
		 * Enough room once the previous window's weight fades:
		 * W - (L - cur - c) * W / prev - e.  Denial implies prev > 0.
		 */
		int128		slack = (int128) p->limit - s->cur - need;

		o->retry_after = rl_seconds((int128) (per - elapsed) * s->prev -
									slack * per, s->prev);
	}
	else
	{
		/*
		 * Only the next window helps, where cur becomes prev:
		 * (W - e) + max(0, W - (L - c) * W / cur).  Here cur + c > L, so the
		 * second term is positive and cur > 0.
		 */
		int128		excess = (int128) s->cur + need - p->limit;

		o->retry_after = rl_seconds((int128) (per - elapsed) * s->cur +
									excess * per, s->cur);
	}

	o->remaining = rl_units(capacity - used, per);
	if (s->cur > 0)
		o->reset_at = s->start + 2 * per;
	else if (s->prev > 0)
		o->reset_at = s->start + per;
	else
		o->reset_at = t;
	o->delay = 0.0;
	return true;
}

/*
 * A charge (or, below zero, a give-back) on the current window's count,
 * which stays within 0 and the largest count.
 */
static void
window_charge(RlWindowState *s, int64 delta)
{
	if (delta >= 0)
		s->cur = delta > PG_INT64_MAX - s->cur ? PG_INT64_MAX : s->cur + delta;
	else
		s->cur = Max(s->cur + delta, 0);
}

/*
 * fixed_window's charge: the count of the call's window, past the limit
 * if so, then a look.
 */
bool
rl_fixed_window_charge(RlState *state, bool fresh, int64 t, int64 last,
					   const RlParams *p, RlOutcome *o, RlChain *chain)
{
	RlParams	look = *p;

	window_roll(&state->window, fresh, t, p, false);
	window_charge(&state->window, p->cost);
	look.cost = 0;
	return rl_fixed_window(state, false, t, last, &look, o, chain);
}

/*
 * sliding_window_counter's charge: the current window's count, as a call
 * consumes, then a look.
 */
bool
rl_sliding_window_counter_charge(RlState *state, bool fresh, int64 t,
								 int64 last, const RlParams *p, RlOutcome *o,
								 RlChain *chain)
{
	RlParams	look = *p;

	window_roll(&state->window, fresh, t, p, true);
	window_charge(&state->window, p->cost);
	look.cost = 0;
	return rl_sliding_window_counter(state, false, t, last, &look, o, chain);
}

/*
 * fixed_window: the units still count only while their window lasts.
 */
void
rl_fixed_window_refund(RlState *state, int64 t, const RlParams *p,
					   int64 cost, RlChain *chain)
{
	RlWindowState *s = &state->window;
	int64		start;
	int64		end;

	rl_window_bounds(p, t, &start, &end);
	if (s->start == start)
		s->cur = Max(s->cur - cost, 0);
}

/*
 * sliding_window_counter: in the current window, or in the previous one if
 * the window has rolled once since (where they still weigh).
 */
void
rl_sliding_window_counter_refund(RlState *state, int64 t, const RlParams *p,
								 int64 cost, RlChain *chain)
{
	RlWindowState *s = &state->window;
	int64		start;
	int64		end;

	rl_window_bounds(p, t, &start, &end);
	if (s->start == start)
		s->cur = Max(s->cur - cost, 0);
	else if (s->start == start + p->per)
		s->prev = Max(s->prev - cost, 0);
}

/*
 * fixed_window's lease lasts until the end of its window: the call
 * consumed, so reset_at is the window's end.
 */
int64
rl_fixed_window_lease_end(const RlParams *p, int64 now, const RlOutcome *o)
{
	return o->reset_at;
}

/*
 * sliding_window_counter's lease too: its window ends one W before
 * reset_at (the start plus 2 W).
 */
int64
rl_sliding_window_counter_lease_end(const RlParams *p, int64 now,
									const RlOutcome *o)
{
	return o->reset_at - p->per;
}

/*
 * A saved window: counts not negative, the window holding the latest time
 * and at most 100 years long.
 */
static bool
window_image_valid(const RlStateImage *img)
{
	const RlWindowState *w = &img->state.window;

	return img->nlog == 0 && w->cur >= 0 && w->prev >= 0 &&
		w->start <= img->last && w->start > img->last - RL_MAX_PER;
}

/*
 * fixed_window: a saved window (above); its state is a new key's once its
 * window has ended (start + W, W at most 100 years), or at once if its
 * count is 0: the idle time is bounded by that.
 */
bool
rl_fixed_window_image_valid(RlStateImage *img)
{
	const RlWindowState *w = &img->state.window;

	if (!window_image_valid(img))
		return false;
	if (w->cur > 0)
		rl_idle_bound(img, w->start, RL_MAX_PER);
	else
		rl_idle_bound(img, img->last, 0);
	return true;
}

/*
 * sliding_window_counter: a saved window (above); the current count weighs
 * until the end of the next window (start + 2 W), the previous one until
 * the end of this window, a state of zeros not at all: the idle time is
 * bounded by that.
 */
bool
rl_sliding_window_counter_image_valid(RlStateImage *img)
{
	const RlWindowState *w = &img->state.window;

	if (!window_image_valid(img))
		return false;
	if (w->cur > 0)
		rl_idle_bound(img, w->start, 2 * RL_MAX_PER);
	else if (w->prev > 0)
		rl_idle_bound(img, w->start, RL_MAX_PER);
	else
		rl_idle_bound(img, img->last, 0);
	return true;
}
