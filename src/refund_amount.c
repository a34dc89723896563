/*-------------------------------------------------------------------------
 *
 * refund_amount.c
 *		The refund tracker's amounts: adding a call to one, which calls may
 *		share one (a class), and the lists of a target's amounts.
 *
 * refund.c says what targets, amounts and levels are and why adding up is
 * exact.  Here: a call joins an amount's newest (time, cost) pair when a
 * refund cannot tell their times apart, a bucket's amount composes its
 * bound, a target's amounts are kept innermost level first.  Nothing here
 * raises an error where the caller says not to (no_oom); no shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "refund_int.h"

/*
 * Make room for n pairs in the amount: the first in the amount itself.
 * Raises an error when memory runs out, or, with no_oom, returns false
 * with the amount unchanged.
 */
static bool
spent_reserve(RlAmount *a, int64 n, bool no_oom)
{
	int64		max = Max(a->maxspent, 1);
	RlSpent    *spent;

	if (n <= a->maxspent)
		return true;
	if (n == 1)
	{
		a->spent = &a->one;
		a->maxspent = 1;
		return true;
	}
	while (max < n)
		max *= 2;
	spent = MemoryContextAllocExtended(a->target->batch->cxt,
									   max * sizeof(RlSpent),
									   MCXT_ALLOC_HUGE |
									   (no_oom ? MCXT_ALLOC_NO_OOM : 0));
	if (spent == NULL)
		return false;
	if (a->nspent > 0)
		memcpy(spent, a->spent, a->nspent * sizeof(RlSpent));
	if (a->spent != NULL && a->spent != &a->one)
		pfree(a->spent);
	a->spent = spent;
	a->maxspent = max;
	return true;
}

/* How the refunds of a target of this algorithm and receipt add up. */
RlTargetKind
rl_refund_kind(RlAlgo algo, uint8 flags)
{
	if (flags & RL_RECEIPT_TIMELESS)
		return RL_TARGET_LEASE;
	switch (rl_algo(algo)->refund_grain)
	{
		case RL_GRAIN_WINDOW:
			return RL_TARGET_WINDOW;
		case RL_GRAIN_NONE:
			return RL_TARGET_BOUND;
		case RL_GRAIN_EXACT:
		default:
			return RL_TARGET_EXACT;
	}
}

/*
 * Add cost at time t as the amount's newest pair (rl_refund_add, when the
 * newest pair cannot take it); the amount's first pair sets its
 * parameters.  Returns false, changing nothing, if there is no room for it
 * and no_oom says not to raise an error for it.
 */
bool
rl_refund_append(RlAmount *a, const RlParams *p, int64 t, int64 cost,
				 bool no_oom)
{
	if (!spent_reserve(a, a->nspent + 1, no_oom))
		return false;
	if (a->nspent == 0)
	{
		a->params = *p;
		a->params.cost = 0;
	}
	a->spent[a->nspent].time = t;
	a->spent[a->nspent].cost = cost;
	a->nspent++;
	return true;
}

/*
 * Do times t and u fall in the same window of parameters p?  Out of line
 * (#9): rl_refund_add's other cases, inline in every tracked call, take
 * no address of a local, so their callers need no stack protector.
 */
bool
rl_refund_same_window(const RlParams *p, int64 t, int64 u)
{
	int64		ts,
				us,
				end;

	rl_window_bounds(p, t, &ts, &end);
	rl_window_bounds(p, u, &us, &end);
	return ts == us;
}

/* Put the amount first in its target's list. */
void
rl_refund_link(RlAmount *a)
{
	a->tprev = NULL;
	a->tnext = a->target->amounts;
	if (a->tnext != NULL)
		a->tnext->tprev = a;
	a->target->amounts = a;
}

/* Take the amount out of its target's list. */
void
rl_refund_unlink(RlAmount *a)
{
	if (a->tprev != NULL)
		a->tprev->tnext = a->tnext;
	else
		a->target->amounts = a->tnext;
	if (a->tnext != NULL)
		a->tnext->tprev = a->tprev;
}

/*
 * The target's amount of the level for parameters of p's class, or NULL.
 * The target's list has the innermost level's amounts first: those of
 * inner levels than this one are passed over, and the walk ends at the
 * first amount of an outer level.
 */
RlAmount *
rl_refund_find(RlTarget *target, RlLevel *level, const RlParams *p)
{
	RlAmount   *a;
	bool		seen = false;

	for (a = target->amounts; a != NULL; a = a->tnext)
	{
		if (a->level == level)
		{
			if (rl_refund_same_class(target, &a->params, p))
				return a;
			seen = true;
		}
		else if (seen)
			break;
	}
	return NULL;
}

/*
 * Merge amount a (of a committed subtransaction) into b (its parent's, of
 * the same target and class: a's calls are the newer), and take a out
 * of its target's list (the caller frees it).  Returns false, changing
 * nothing, if memory for that could not be had; raises no error.
 */
bool
rl_refund_merge(RlAmount *a, RlAmount *b)
{
	int64		joined = 0;
	int64		i;

	if (a->nspent > 0 && b->nspent > 0 &&
		rl_refund_same_time(a->target, &b->params, b->spent[b->nspent - 1].time,
					a->spent[0].time))
		joined = 1;
	if (!spent_reserve(b, b->nspent + a->nspent - joined, true))
		return false;
	for (i = 0; i < a->nspent; i++)
		(void) rl_refund_add(b, &a->params, a->spent[i].time,
							 a->spent[i].cost, true);
	rl_refund_unlink(a);
	return true;
}

/*
 * Take the newest pair off the amount, as its refund's request and receipt
 * (off before it is given back: none is given back twice).
 */
void
rl_refund_pop(RlAmount *a, RlRequest *req, RlReceipt *r)
{
	a->nspent--;
	rl_request_for_key(req, a->target->id.dbid, a->target->id.algo,
					   a->target->id.key, a->target->id.keylen);
	r->engine = a->target->id.engine;
	r->flags = a->target->id.flags;
	r->incarnation = a->target->id.incarnation;
	r->entry = a->target->id.entry;
	r->params = a->params;
	r->time = a->spent[a->nspent].time;
	r->params.cost = a->spent[a->nspent].cost;
}
