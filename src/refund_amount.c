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

#include "common/hashfn.h"
#include "common/int.h"
#include "utils/memutils.h"

#include "algo_common.h"
#include "refund_int.h"

/* dynahash: hash a target's key (its key bytes and the rest) */
uint32
rl_refund_target_hash(const void *key, Size keysize)
{
	const RlTargetKey *k = (const RlTargetKey *) key;
	uint32		h = hash_bytes((const unsigned char *) k->key, k->keylen);

	h = hash_combine(h, k->dbid);
	h = hash_combine(h, ((uint32) k->algo << 16) | ((uint32) k->flags << 8) |
					 (uint32) k->engine);
	h = hash_combine(h, (uint32) k->incarnation);
	return hash_combine(h, (uint32) (k->incarnation >> 32));
}

/* dynahash: 0 if two targets' keys are the same state */
int
rl_refund_target_match(const void *key1, const void *key2, Size keysize)
{
	const RlTargetKey *a = (const RlTargetKey *) key1;
	const RlTargetKey *b = (const RlTargetKey *) key2;

	return !(a->keylen == b->keylen && a->dbid == b->dbid &&
			 a->algo == b->algo && a->engine == b->engine &&
			 a->flags == b->flags &&
			 a->incarnation == b->incarnation &&
			 memcmp(a->key, b->key, a->keylen) == 0);
}

/*
 * Make room for n pairs in the amount.  Raises an error when memory runs
 * out, or, with no_oom, returns false with the amount unchanged.
 */
static bool
spent_reserve(RlAmount *a, int64 n, bool no_oom)
{
	int64		max = Max(a->maxspent, 1);
	RlSpent    *spent;

	if (n <= a->maxspent)
		return true;
	while (max < n)
		max *= 2;
	spent = MemoryContextAllocExtended(a->target->batch->cxt, max * sizeof(RlSpent),
									   MCXT_ALLOC_HUGE |
									   (no_oom ? MCXT_ALLOC_NO_OOM : 0));
	if (spent == NULL)
		return false;
	if (a->nspent > 0)
		memcpy(spent, a->spent, a->nspent * sizeof(RlSpent));
	if (a->spent != NULL)
		pfree(a->spent);
	a->spent = spent;
	a->maxspent = max;
	return true;
}

/*
 * Would a refund at time t give back the same as one at time u, of an
 * amount with these parameters?  The algorithm table says (refund_grain):
 * the window refunds (and the Redis scripts mirroring them) depend only on
 * the window t falls in, the buckets' not on t; a log entry needs the
 * exact time.  A lease's refund (a timeless receipt) goes to the lease its
 * incarnation names, whatever the time.
 */
static bool
same_refund(const RlTarget *target, const RlParams *p, int64 t, int64 u)
{
	if (target->id.flags & RL_RECEIPT_TIMELESS)
		return true;
	switch (rl_algo(target->id.algo)->refund_grain)
	{
		case RL_GRAIN_WINDOW:
			return rl_floor_div(t, p->per) == rl_floor_div(u, p->per);
		case RL_GRAIN_NONE:
			return true;
		case RL_GRAIN_EXACT:
		default:
			return t == u;
	}
}

/* Do the target's refunds compose their bounds (a bucket's)? */
static bool
composes(const RlTarget *target)
{
	return !(target->id.flags & RL_RECEIPT_TIMELESS) &&
		rl_algo(target->id.algo)->refund_grain == RL_GRAIN_NONE;
}

/*
 * Add cost at time t, consumed with parameters p of the amount's class, to
 * the amount's newest pair if a refund cannot tell them apart, else as a
 * new pair.  A bucket's amount (one pair) composes its bound with p's
 * burst and takes p's W.  Returns false, changing nothing, if there is no
 * room for a new pair and no_oom says not to raise an error for it.  A sum
 * past PG_INT64_MAX stays there: a refund never gives back that much (a
 * state's units are bounded by its limit or burst).
 */
bool
rl_refund_add(RlAmount *a, const RlParams *p, int64 t, int64 cost,
			  bool no_oom)
{
	RlSpent    *last = a->nspent > 0 ? &a->spent[a->nspent - 1] : NULL;

	if (last != NULL && same_refund(a->target, &a->params, last->time, t))
	{
		if (composes(a->target))
		{
			int64		bound;

			/* given back first, this one is bounded by B, then C more */
			if (pg_add_s64_overflow(p->burst, last->cost, &bound))
				bound = PG_INT64_MAX;
			a->params.burst = Min(a->params.burst, bound);
			a->params.limit = p->limit;
			a->params.per = p->per;
		}
		if (pg_add_s64_overflow(last->cost, cost, &last->cost))
			last->cost = PG_INT64_MAX;
		return true;
	}
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
 * May calls with parameters p and q share an amount of the target: does
 * its refund read them the same?  A lease's refund finds the lease by all
 * of them; a window's reads W; the others read neither W nor the rest (a
 * bucket's: see composes).
 */
bool
rl_refund_same_class(const RlTarget *target, const RlParams *p,
					 const RlParams *q)
{
	if (target->id.flags & RL_RECEIPT_TIMELESS)
		return p->limit == q->limit && p->per == q->per &&
			p->burst == q->burst;
	return rl_algo(target->id.algo)->refund_grain != RL_GRAIN_WINDOW ||
		p->per == q->per;
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
		same_refund(a->target, &b->params, b->spent[b->nspent - 1].time,
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
