/*-------------------------------------------------------------------------
 *
 * refund_tally.c
 *		Tallies: the refund tracker's compact records of the states a
 *		quota trigger's rows consume from.
 *
 * A quota trigger's rows over many keys found, for each row, its target,
 * the target's copy of the key and its amount (refund.c): some 400 bytes
 * a key, four cache lines a row, which the rows of thousands of other keys
 * had pushed out of the caches in between (#9: that alone cost an INSERT
 * on 10,000 tenants a third of the no-op trigger's time).  A tally is what
 * such a row needs, in 32 bytes: the state, named by the store's entry and
 * incarnation as the receipt names it (RL_RECEIPT_ENTRY: a refund reaches
 * it without the key), the units consumed, the first receipt's time, and a
 * class shared by all tallies of the same database, algorithm and
 * parameters.  The tallies are an open-addressed table (linear probing, at
 * most three quarters full) of one level, rl_tally_subid: the pending
 * receipts', which are added here or to their targets (pending_add).
 *
 * Exactness.  A tally holds a run of receipts a target's amount would have
 * added into one pair (refund.c): receipts of one class, and of a window
 * algorithm in one window (a bucket's refund reads no time, and with one
 * burst B its composed bound stays B).  Given back, it is what the pair
 * would give back.  What a tally cannot take (another class or window, or
 * a receipt of its state that goes to its target: one of a class past the
 * RL_TALLY_CLASSES kept) first moves the tally to its target ("spills" it,
 * as the pair it would have been), so a state's tally is always newer
 * than its target's amounts of the same level, and refunds newest first
 * give back the tally first, then the level's amounts.  The table is of
 * one level: a receipt of a newer level (pending, or tracked at once)
 * spills every tally to its target first (refund.c), so the targets
 * have no level newer than the tallies'; a subtransaction's commit makes
 * its tallies its parent's (refund.c's callback).
 *
 * Memory: the table and the list of its used slots live in the
 * transaction's context (its batch's), grown by doubling; a growth is the
 * only allocation, before anything changes.  At an abort nothing is
 * allocated: the tallies are given back through the store's refund and
 * forgotten.  No shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "refund_int.h"

#define RL_TALLY_FIRST		256	/* slots at first (a power of two) */

/* the most tallies a table of n slots holds: three quarters of them */
#define RL_TALLY_ROOM(n)	((n) / 4 * 3)

RlTally    *rl_tallies = NULL;
uint32		rl_tally_mask = 0;	/* slots - 1; 0: no table */
uint32		rl_tally_used = 0;	/* slots taken */
SubTransactionId rl_tally_subid = InvalidSubTransactionId;
RlTallyClass rl_tally_classes[RL_TALLY_CLASSES];
uint32		rl_tally_last = 0;	/* the class last used */

static uint32 nclasses = 0;
static uint32 *used = NULL;		/* the slots taken, in order (at most
								 * RL_TALLY_ROOM of them) */

/*
 * A table of twice the slots (the first one: RL_TALLY_FIRST), the tallies
 * moved into it.  Raises an error if memory runs out, changing nothing (a
 * part allocated is freed with the transaction's context).
 */
static void
tally_grow(void)
{
	MemoryContext cxt = rl_refund_batch->cxt;
	uint32		n = RL_TALLY_FIRST;
	RlTally    *grown;
	uint32	   *grown_used;
	uint32		i;

	if (rl_tally_mask != 0)
		n = 2 * (rl_tally_mask + 1);

	grown = MemoryContextAllocExtended(cxt, n * sizeof(RlTally),
									   MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	grown_used = MemoryContextAllocExtended(cxt,
											RL_TALLY_ROOM(n) * sizeof(uint32),
											MCXT_ALLOC_HUGE);
	for (i = 0; i < rl_tally_used; i++)
	{
		const RlTally *t = &rl_tallies[used[i]];
		uint32		j;

		for (j = (uint32) rl_refund_entry_hash(t->entry, t->incarnation) &
			 (n - 1);
			 grown[j].entry != 0; j = (j + 1) & (n - 1))
			;
		grown[j] = *t;
		grown_used[i] = j;
	}
	if (rl_tallies != NULL)
	{
		pfree(rl_tallies);
		pfree(used);
	}
	rl_tallies = grown;
	used = grown_used;
	rl_tally_mask = n - 1;
}

/*
 * The class of the receipt's database, algorithm and parameters, made if
 * it is new; -1 if the receipt cannot be tallied (its refunds need its
 * time: a log's), or every class is taken.
 */
static int
tally_class(const RlPending *p)
{
	RlTargetKind kind = rl_refund_kind(p->algo, p->r.flags);
	RlTallyClass *c;
	uint32		i;

	if (kind != RL_TARGET_BOUND && kind != RL_TARGET_WINDOW)
		return -1;
	for (i = 0; i < nclasses; i++)
	{
		c = &rl_tally_classes[i];
		if (c->dbid == p->dbid && c->algo == p->algo &&
			rl_params_same(&c->params, &p->r.params))
			return (int) i;
	}
	if (nclasses == RL_TALLY_CLASSES)
		return -1;
	c = &rl_tally_classes[nclasses];
	c->dbid = p->dbid;
	c->algo = p->algo;
	c->kind = kind;
	c->params = p->r.params;
	c->params.cost = 0;
	c->window_start = c->window_end = 0;
	return (int) nclasses++;
}

/*
 * Do times t and u fall in the same window of class c?  The class keeps
 * the last window a time was found in, so that a run of receipts in one
 * window computes its bounds once.
 */
static bool
tally_same_window(RlTallyClass *c, int64 t, int64 u)
{
	if (!rl_tally_window_holds(c, u, u))
		rl_window_bounds(&c->params, u, &c->window_start, &c->window_end);
	return rl_tally_window_holds(c, t, u);
}

/*
 * rl_tally_add's other calls: a state without a tally (or whose tally
 * holds nothing), a receipt of another class or window than its tally's,
 * one that cannot be tallied.  The table is made or grown first when a
 * new state needs a slot.  Returns RL_TALLY_NOT when the receipt goes to
 * its target, RL_TALLY_SPILL (the tally's number in *spill) when its
 * state's tally must go there first.  Raises an error if memory runs out,
 * with the receipt in neither.
 */
RlTallyStep
rl_tally_add_slow(const RlPending *p, uint32 *spill)
{
	int			cls;
	RlTally    *t = NULL;

	if (rl_tally_mask != 0)
		t = rl_tally_slot(p);
	cls = tally_class(p);
	if (t != NULL && t->entry != 0 && t->cost > 0)
	{
		if (cls >= 0 && t->cls == (uint32) cls &&
			tally_same_window(&rl_tally_classes[cls], t->time, p->r.time))
		{
			rl_tally_add_cost(t, p->r.params.cost);
			rl_tally_last = (uint32) cls;
			return RL_TALLIED;
		}
		*spill = t->order;
		return RL_TALLY_SPILL;
	}
	if (cls < 0)
		return RL_TALLY_NOT;
	if (t == NULL || t->entry == 0)
	{
		if (rl_tally_mask == 0 ||
			rl_tally_used >= RL_TALLY_ROOM(rl_tally_mask + 1))
		{
			tally_grow();
			t = rl_tally_slot(p);
		}
		t->entry = p->r.entry;
		t->incarnation = (uint32) p->r.incarnation;
		t->order = rl_tally_used;
		used[rl_tally_used++] = (uint32) (t - rl_tallies);
	}
	t->cls = (uint32) cls;
	t->cost = p->r.params.cost;
	t->time = p->r.time;
	(void) tally_same_window(&rl_tally_classes[cls], t->time, t->time);
	rl_tally_last = (uint32) cls;
	return RL_TALLIED;
}

/*
 * Tally number i (in the order they were made) as the receipt it would
 * have been as its target's pair: its state, its class's parameters, its
 * units and first time.  Returns false if it holds nothing.
 */
bool
rl_tally_receipt(uint32 i, RlPending *p)
{
	const RlTally *t = &rl_tallies[used[i]];
	const RlTallyClass *c = &rl_tally_classes[t->cls];

	if (t->cost == 0)
		return false;
	p->dbid = c->dbid;
	p->algo = c->algo;
	p->r.engine = RL_ENGINE_STORE;
	p->r.flags = RL_RECEIPT_ENTRY;
	p->r.params = c->params;
	p->r.params.cost = t->cost;
	p->r.time = t->time;
	p->r.incarnation = t->incarnation;
	p->r.entry = t->entry;
	p->hash = rl_refund_entry_hash(t->entry, t->incarnation);
	return true;
}

/* Tally number i holds nothing any more (it went to its target). */
void
rl_tally_spilled(uint32 i)
{
	rl_tallies[used[i]].cost = 0;
}

/* Empty the table (its slots, not its memory). */
void
rl_tally_clear(void)
{
	uint32		i;

	for (i = 0; i < rl_tally_used; i++)
		memset(&rl_tallies[used[i]], 0, sizeof(RlTally));
	rl_tally_used = 0;
	rl_tally_subid = InvalidSubTransactionId;
}

/*
 * Give back every tally (its level aborts: the tallies are newer than its
 * amounts), and empty the table.  Allocates nothing, raises nothing: the
 * store's refunds never do.
 */
void
rl_tally_refund(void)
{
	uint32		i;

	for (i = rl_tally_used; i-- > 0;)
	{
		RlPending	p;

		if (!rl_tally_receipt(i, &p))
			continue;
		rl_tally_spilled(i);
		rl_refund_pending_give(&p);
	}
	rl_tally_clear();
}

/*
 * Forget the tallies at the end of the transaction (their memory goes
 * with its context).
 */
void
rl_tally_forget(void)
{
	rl_tallies = NULL;
	used = NULL;
	rl_tally_mask = 0;
	rl_tally_used = 0;
	rl_tally_subid = InvalidSubTransactionId;
	rl_tally_last = 0;
	nclasses = 0;
}
