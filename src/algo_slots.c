/*-------------------------------------------------------------------------
 *
 * algo_slots.c
 *		concurrency: at most "limit" slots of a key held at once, and the
 *		queue of the backends waiting for one.
 *
 * A slot is taken by a call of cost 1 (rl_acquire) and given back by the
 * refund of that unit, when the transaction or the session that holds it
 * ends, or by rl_release.  Time plays no part: a slot is held until it is
 * given back, however long.  Waiters take tickets; the engine keeps who
 * holds which ticket (the store: a record per backend) and, when a slot
 * frees, grants it to the lowest ticket (rl_slots_grant), so a slot goes
 * to the waiters in the order they came.  A call that does not wait is
 * refused while anyone waits, even with a slot free for an instant: it
 * would pass the queue.  (Load shedding: the store passes over waiters
 * their priority's headroom alone holds back, store_slots.c.)
 *
 * Pure functions on the state (algo.h): no locks, no allocation, no
 * errors.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "algo.h"
#include "algo_common.h"

/*
 * A call of cost c takes c slots if they are free and nobody waits, and h
 * more (the headroom) would still be free; a call of cost 0 reports
 * whether one would be free so.  reset_at is the call's time
 * while the key is idle (nothing held, nobody waiting), the saturated time
 * otherwise, so the store never reclaims a key whose slots are held.
 */
bool
rl_concurrency(RlState *st, bool fresh, int64 t, int64 last,
			   const RlParams *p, RlOutcome *o, RlChain *chain)
{
	RlSlotsState *s = &st->slots;

	if (fresh)
		memset(s, 0, sizeof(*s));
	if (p->cost == 0)
		o->allowed = s->held + p->headroom < p->limit;
	else
	{
		o->allowed = s->waiting == 0 &&
			s->held <= p->limit - p->cost - p->headroom;
		if (o->allowed)
			s->held += p->cost;
	}
	o->remaining = s->held < p->limit ? p->limit - s->held : 0;
	o->retry_after = 0.0;		/* unknown: whenever a holder ends */
	o->reset_at = rl_slots_idle(s) ? t : RL_TIME_SATURATE;
	o->delay = 0.0;
	return true;
}

/* Give back cost slots (never below none). */
void
rl_concurrency_refund(RlState *st, int64 t, const RlParams *p, int64 cost,
					  RlChain *chain)
{
	RlSlotsState *s = &st->slots;

	s->held = s->held > cost ? s->held - cost : 0;
}

/*
 * A saved state: slots are held by backends, which a restart ends, so
 * only an idle state can have been saved by a clean shutdown, and it is
 * idle at once (nothing of it outlives a restart).
 */
bool
rl_slots_image_valid(RlStateImage *img)
{
	const RlSlotsState *s = &img->state.slots;

	if (s->held != 0 || s->waiting != 0 || s->tickets < 0)
		return false;
	rl_idle_bound(img, img->last, 0);
	return true;
}

/* A backend queues for a slot: its ticket. */
int64
rl_slots_enqueue(RlSlotsState *s)
{
	s->waiting++;
	return ++s->tickets;
}

/*
 * The first waiter (the caller found it: the lowest ticket) takes a slot
 * if one is free under its limit.  Returns whether it did.
 */
bool
rl_slots_grant(RlSlotsState *s, int64 limit)
{
	if (s->waiting <= 0 || s->held >= limit)
		return false;
	s->held++;
	s->waiting--;
	return true;
}

/* A waiter leaves the queue without a slot. */
void
rl_slots_leave(RlSlotsState *s)
{
	if (s->waiting > 0)
		s->waiting--;
}

/* Nothing held, nobody waiting: the state of a new key. */
bool
rl_slots_idle(const RlSlotsState *s)
{
	return s->held == 0 && s->waiting == 0;
}
