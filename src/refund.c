/*-------------------------------------------------------------------------
 *
 * refund.c
 *		Give back what an aborted transaction or subtransaction consumed.
 *
 * A tracked consumption (every one made by a quota trigger; direct calls
 * when ratelimit.refund_on_rollback is on) is remembered until its
 * transaction ends, by the receipts of its decision (engine.h: where it
 * consumed, with which parameters, at which time, from which incarnation
 * of the state), which the dispatcher hands over.  When a subtransaction
 * aborts, what it consumed is given back; when it commits, its consumption
 * passes to its parent.  At top-level abort everything left is given
 * back; at commit and prepare it is forgotten.
 *
 * What is kept grows with the keys and the savepoint levels, not with the
 * rows: receipts are added up where one refund of the sum gives back
 * exactly what refunds of the parts, newest first, did (the algorithms'
 * refunds take units off within bounds, so sums of the same kind add up):
 *
 *	- a target is one state refunds reach: (engine, receipt flags,
 *	  database, algorithm, key, incarnation), an entry of a hash table.  A
 *	  lease's receipts (RL_RECEIPT_TIMELESS) share one target per key: a
 *	  newer lease voids what was kept for the older ones, which have
 *	  nothing left to give back (engine.h);
 *	- an amount is what one (sub)transaction level consumed from a target
 *	  with parameters of one class: those its refund reads the same.  Only
 *	  a window's W (the window a time falls in), and all of a lease's
 *	  parameters (which find the lease), make classes; a bucket's burst
 *	  does not: refunds that move a number within a bound compose (below).
 *	  A call adds to the amount of its level and class, found in the
 *	  target's list (innermost level first, the level's latest used
 *	  first), so alternating parameters do not start an amount per call.
 *	  Refunds of different classes commute (a window's refund is a count
 *	  taken down to no less than 0 in a window the refunds never move; a
 *	  lease's goes to the lease of its parameters only), so grouping calls
 *	  by class gives back what the calls, newest first, did;
 *	- an amount holds (time, cost) pairs, oldest first.  A receipt adds its
 *	  cost to the newest pair when a refund cannot tell their times apart:
 *	  fixed_window and sliding_window_counter refunds depend only on the
 *	  window the time falls in, token_bucket and leaky_bucket refunds not on
 *	  the time at all, a lease's refund not either (it goes to the lease its
 *	  incarnation names).  A sliding_window_log refund needs the exact time
 *	  (the log keeps an entry per microsecond): a pair (16 bytes) per
 *	  distinct microsecond.  (The algorithm table's refund_grain, and the
 *	  receipt's RL_RECEIPT_TIMELESS, say which.)  A bucket's refunds,
 *	  x -> min(B, x + c) (tokens) or max(0, x - c) (a level), each
 *	  with its call's burst B, compose: given back newest first, calls of
 *	  costs C so far and bound K followed by one of (B, c) are one refund
 *	  of C + c bounded by min(K, B + C).  The amount keeps K as its burst
 *	  (and the newest call's W: a W changing within a transaction rounds a
 *	  rescale differently, by at most a microsecond's flow).
 *
 * A subtransaction's commit merges its amounts into the parent's of the
 * same target and class, or moves them there as they are when
 * memory for the merge cannot be had (it is asked for without raising an
 * error).  An abort allocates nothing: freed amounts and levels go to free
 * lists for the next calls.  Nothing here raises an error at commit or
 * abort.  What is about to be given back is forgotten first, so nothing is
 * given back twice.  (Giving back is the engines', called here directly
 * through the engine table: the store takes a partition lock.)
 *
 * A refund that is a network round trip (RL_RECEIPT_REMOTE: Redis's) is never
 * made inside an abort, where a socket could hang it and nothing may raise an
 * error: its amount is queued, and the queue sent after the transaction (at
 * the session's next call that reaches an engine, or as it exits) in one call
 * of the engine's refund_queued (one deadline for all).  Past
 * RL_REFUND_QUEUE_MAX refunds the oldest calls' are dropped, and counted
 * (refunds_noted).  Each transaction's tracking lives in a context of its own
 * ("ratelimit refunds", under TopMemoryContext), deleted when the transaction
 * ends or, with refunds of it queued, once they are sent.  No shared state of
 * its own: refunds go through the engines' own locking.
 *
 * A local engine's receipts are not added to their targets one by one but
 * kept pending, and added in runs (below: rl_pending).
 *
 * The records are declared in refund_int.h; adding a call to an amount,
 * the classes and a target's list of amounts are refund_amount.c's; the
 * queue is refund_queue.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/int.h"
#include "utils/memutils.h"

#include "algo_common.h"
#include "refund.h"
#include "refund_int.h"

/* a cache line asked for ahead of its use, where the compiler can */
#if defined(__GNUC__) || defined(__clang__)
#define rl_prefetch(p)		__builtin_prefetch(p)
#else
#define rl_prefetch(p)		((void) (p))
#endif

static MemoryContext refund_cxt = NULL;

/*
 * The transaction's targets: a chained hash table of buckets[mask + 1],
 * grown to twice its size when it holds more targets than buckets.  (Its
 * own rather than dynahash: a quota trigger looks its target up on every
 * row, and dynahash's generic lookup cost about 280 instructions there,
 * #9.)  Targets never move: amounts point at them.
 */
#define RL_TARGETS_FIRST	64	/* buckets at first (a power of two) */
#define RL_TARGETS_MAX		(1 << 24)	/* buckets at most */
static RlTarget **buckets = NULL;
static uint32 bucket_mask = 0;
static uint32 ntargets = 0;
static RlLevel *levels = NULL;	/* innermost first */

/*
 * The current (sub)transaction's id while the transaction tracks: read at
 * its first tracked call, then followed by the subtransaction callback (a
 * start makes it the new one's, a commit or an abort its parent's), so
 * that a tracked call tells its level without a call (#9).
 */
SubTransactionId rl_refund_subid = InvalidSubTransactionId;
static RlLevel *free_levels = NULL;
static bool callbacks_registered = false;

/*
 * Receipts not yet added to their tallies or targets (#9).  A quota
 * trigger's row on one of many keys found its target, its key and its
 * amount each in memory the row before had not touched: four cache misses,
 * one after the other.  A receipt naming its entry (the store's) is
 * written here instead, and a run of them is added together, each tally
 * asked for a few receipts ahead (pending_add): the misses overlap.  All
 * of them are of one level, rl_pending_subid: the current
 * (sub)transaction or, once it committed, an enclosing one; no level newer
 * than it has amounts or tallies while any is pending (a receipt of
 * another level, or one tracked at once, adds them first).  An abort
 * gives them back from here, newest first, before its level's tallies and
 * amounts (pending_refund); a subtransaction's commit passes them to its
 * parent.  Bounded: the next receipt adds them first when full.
 */
#define RL_PENDING_AHEAD	4	/* receipts a tally is asked for ahead */

RlPending	rl_pending[RL_PENDING_MAX];
int			rl_npending = 0;	/* receipts in rl_pending */
SubTransactionId rl_pending_subid = InvalidSubTransactionId;
static int	pending_first = 0;	/* the first not added yet */

static void refund_xact_callback(XactEvent event, void *arg);
static void refund_subxact_callback(SubXactEvent event,
									SubTransactionId mySubid,
									SubTransactionId parentSubid, void *arg);

/*
 * The context and the table of this transaction, made on its first
 * tracked consumption.
 */
static void
refund_begin(void)
{
	if (!callbacks_registered)
	{
		RegisterXactCallback(refund_xact_callback, NULL);
		RegisterSubXactCallback(refund_subxact_callback, NULL);
		callbacks_registered = true;
	}
	if (buckets != NULL)
		return;
	refund_cxt = AllocSetContextCreate(TopMemoryContext,
									   "ratelimit refunds",
									   ALLOCSET_DEFAULT_SIZES);
	rl_refund_batch = MemoryContextAllocZero(refund_cxt, sizeof(RlBatch));
	rl_refund_batch->cxt = refund_cxt;
	buckets = MemoryContextAllocZero(refund_cxt,
									 RL_TARGETS_FIRST * sizeof(RlTarget *));
	bucket_mask = RL_TARGETS_FIRST - 1;
	ntargets = 0;
	rl_refund_subid = GetCurrentSubTransactionId();
}

/*
 * Twice as many buckets, once there are more targets than buckets (up to
 * RL_TARGETS_MAX: past it, chains grow).  Raises an error if memory runs
 * out (only ever called tracking a call, not at commit or abort).
 */
static void
targets_grow(void)
{
	uint32		n = bucket_mask + 1;
	RlTarget  **grown;
	uint32		i;

	if (ntargets <= n || n >= RL_TARGETS_MAX)
		return;
	grown = MemoryContextAllocZero(refund_cxt, 2 * n * sizeof(RlTarget *));
	for (i = 0; i < n; i++)
	{
		RlTarget   *t = buckets[i];

		while (t != NULL)
		{
			RlTarget   *next = t->hnext;
			uint32		b = (uint32) (t->hash & (2 * n - 1));

			t->hnext = grown[b];
			grown[b] = t;
			t = next;
		}
	}
	pfree(buckets);
	buckets = grown;
	bucket_mask = 2 * n - 1;
}

/*
 * A new target, the state a receipt reaches (its key, if it names no
 * entry, copied: a target never points at the request's), its hash
 * computed, with no amounts yet.  One allocation holds the target, its key
 * and its first amount, in the order a lookup reads them (#9: a row of a
 * new key allocated four times, a row of a known one read four places
 * apart); track_receipt asks for its lines together, once it has its
 * address.
 */
static pg_noinline RlTarget *
target_add(const RlPending *p, const char *key, int keylen)
{
	Size		keyspace = MAXALIGN(Max(keylen, 1));
	char	   *chunk = MemoryContextAlloc(refund_cxt,
										   MAXALIGN(sizeof(RlTarget)) +
										   keyspace + sizeof(RlAmount));
	RlTarget   *t = (RlTarget *) chunk;
	char	   *copy = chunk + MAXALIGN(sizeof(RlTarget));

	if (keylen > 0)
		memcpy(copy, key, keylen);
	memset(&t->id, 0, sizeof(t->id));
	t->id.key = copy;
	t->id.keylen = keylen;
	t->id.dbid = p->dbid;
	t->id.algo = p->algo;
	t->id.engine = p->r.engine;
	t->id.flags = p->r.flags;
	t->id.incarnation = p->r.incarnation;
	t->id.entry = (p->r.flags & RL_RECEIPT_ENTRY) ? p->r.entry : 0;
	t->id.kind = rl_refund_kind(p->algo, p->r.flags);
	t->amounts = NULL;
	t->spare = (RlAmount *) (copy + keyspace);
	t->batch = rl_refund_batch;
	t->hash = p->hash;
	t->hnext = buckets[p->hash & bucket_mask];
	buckets[p->hash & bucket_mask] = t;
	ntargets++;
	targets_grow();
	return t;
}

/*
 * Forget everything at the end of the transaction, and free its memory
 * unless refunds of it are still queued (then it is retired, and freed
 * once they are sent).  Allocates nothing.
 */
static void
refund_forget(void)
{
	if (rl_refund_batch != NULL)
	{
		if (rl_refund_batch->queued > 0)
			rl_refund_retire(rl_refund_batch);
		else
			MemoryContextDelete(rl_refund_batch->cxt);
	}
	rl_npending = pending_first = 0;
	rl_tally_forget();
	rl_refund_subid = InvalidSubTransactionId;
	rl_refund_batch = NULL;
	refund_cxt = NULL;
	buckets = NULL;
	ntargets = 0;
	levels = NULL;
	rl_refund_free = NULL;
	free_levels = NULL;
}

/*
 * The level of (sub)transaction subid, made if it has none: the current
 * one, or one with no newer level (a pending receipt's).
 */
static RlLevel *
level_of(SubTransactionId subid)
{
	RlLevel    *level;

	if (levels != NULL && levels->subid == subid)
		return levels;
	if (free_levels != NULL)
	{
		level = free_levels;
		free_levels = level->up;
	}
	else
		level = MemoryContextAlloc(refund_cxt, sizeof(RlLevel));
	level->subid = subid;
	level->amounts = NULL;
	level->up = levels;
	levels = level;
	return level;
}

/*
 * The amount of the target for the current level and p's class, when it
 * is not the latest used (track_receipt's test): the one it has (moved
 * first in the target's list, so that a run of calls finds it at once),
 * else a new one.
 */
static pg_noinline RlAmount *
amount_for(RlTarget *target, const RlParams *p, SubTransactionId subid)
{
	RlLevel    *level = level_of(subid);
	RlAmount   *a = rl_refund_find(target, level, p);

	if (a != NULL)
	{
		rl_refund_unlink(a);
		rl_refund_link(a);
		return a;
	}
	if (target->spare != NULL)
	{
		a = target->spare;
		target->spare = NULL;
		a->spent = NULL;
		a->maxspent = 0;
	}
	else if (rl_refund_free != NULL)
	{
		a = rl_refund_free;
		rl_refund_free = a->next;
	}
	else
		a = MemoryContextAllocZero(refund_cxt, sizeof(RlAmount));
	a->target = target;
	a->level = level;
	a->params = *p;
	a->params.cost = 0;
	a->nspent = 0;
	rl_refund_link(a);
	a->next = level->amounts;
	level->amounts = a;
	return a;
}

/*
 * A lease target's receipt of lease number incarnation.  Lease numbers
 * grow (engine.h): a newer lease voids what the target kept for the older
 * ones (its amounts are kept, empty, for the next calls); a receipt of an
 * older lease has nothing to give back.  Returns whether to keep it.
 */
static bool
lease_current(RlTarget *target, uint64 incarnation)
{
	RlAmount   *a;

	if (incarnation == target->id.incarnation)
		return true;
	if (incarnation < target->id.incarnation)
		return false;
	for (a = target->amounts; a != NULL; a = a->tnext)
		a->nspent = 0;
	target->id.incarnation = incarnation;
	return true;
}

/*
 * Is the target the state a receipt reaches: its entry's (key and keylen
 * NULL and 0), or its request's key's?
 */
static inline bool
target_is(const RlTarget *t, const RlPending *p, const char *key, int keylen)
{
	return t->id.keylen == keylen && t->id.dbid == p->dbid &&
		t->id.algo == p->algo && t->id.engine == p->r.engine &&
		t->id.flags == p->r.flags &&
		(t->id.incarnation == p->r.incarnation ||
		 (p->r.flags & RL_RECEIPT_TIMELESS)) &&
		t->id.entry == ((p->r.flags & RL_RECEIPT_ENTRY) ? p->r.entry : 0) &&
		rl_key_equal(t->id.key, key, keylen);
}

/*
 * Remember one receipt at level subid in its target, its state named by
 * its entry (key NULL) or by the request's key: the target found in the
 * table by the receipt's hash and compared with the receipt as it is, its
 * latest used amount taken if it is the level's and of the class; the
 * rest out of line.  (A quota trigger's row reaches its tally instead.)
 */
static void
track_receipt(const RlPending *p, const char *key, int keylen,
			  SubTransactionId subid)
{
	const RlReceipt *r = &p->r;
	RlTarget   *target;
	RlAmount   *a;

	for (target = buckets[p->hash & bucket_mask]; target != NULL;
		 target = target->hnext)
	{
		/*
		 * the target's key and its amount follow it (target_add): ask for
		 * their lines now, not each after the one before it (#9)
		 */
		rl_prefetch((const char *) target + 64);
		rl_prefetch((const char *) target + 128);
		if (target->hash == p->hash && target_is(target, p, key, keylen))
			break;
	}
	if (unlikely(target == NULL))
		target = target_add(p, key, keylen);
	else if (unlikely(r->flags & RL_RECEIPT_TIMELESS) &&
			 !lease_current(target, r->incarnation))
		return;
	if (unlikely(r->flags & RL_RECEIPT_REMOTE) && !rl_refund_exit_registered)
		rl_refund_exit_register();
	a = target->amounts;
	if (unlikely(a == NULL || a->level != levels ||
				 levels->subid != subid ||
				 !rl_refund_same_class(target, &a->params, &r->params)))
		a = amount_for(target, &r->params, subid);
	(void) rl_refund_add(a, &r->params, r->time, r->params.cost, false);
}

/*
 * Move tally number i to its target, at the tally level, as the pair it
 * would have been there (refund_tally.c).  Raises an error if memory runs
 * out, with the tally unchanged.
 */
static pg_noinline void
tally_spill(uint32 i)
{
	RlPending	p;

	if (rl_tally_receipt(i, &p))
		track_receipt(&p, NULL, 0, rl_tally_subid);
	rl_tally_spilled(i);
}

/*
 * Move every tally to its target and empty the table: before a receipt of
 * a newer level is added to a target or a tally.  Raises an error if
 * memory runs out: the tallies not moved yet stay.
 */
static void
tally_flush(void)
{
	uint32		i;

	for (i = 0; i < rl_tally_used; i++)
		tally_spill(i);
	rl_tally_clear();
}

/*
 * Add the pending receipts to their tallies (refund_tally.c), or to their
 * targets, oldest first, at their level; the tallies of an older level go
 * to their targets first.  A receipt's tally slot is asked for
 * RL_PENDING_AHEAD receipts ahead.  Raises an error if memory runs out:
 * the receipts not added yet stay pending (an abort follows, and gives
 * them back).
 */
static pg_noinline void
pending_add(void)
{
	int			i;
	uint32		spill;

	if (rl_tally_used > 0 && rl_tally_subid != rl_pending_subid)
		tally_flush();
	rl_tally_subid = rl_pending_subid;
	if (rl_tally_mask != 0)
		for (i = pending_first; i < rl_npending &&
			 i < pending_first + RL_PENDING_AHEAD; i++)
			rl_prefetch(&rl_tallies[rl_pending[i].hash & rl_tally_mask]);
	for (; pending_first < rl_npending; pending_first++)
	{
		RlPending  *p = &rl_pending[pending_first];

		if (rl_tally_mask != 0 &&
			pending_first + RL_PENDING_AHEAD < rl_npending)
			rl_prefetch(&rl_tallies[p[RL_PENDING_AHEAD].hash & rl_tally_mask]);
		for (;;)
		{
			RlTallyStep step = rl_tally_add(p, &spill);

			if (likely(step == RL_TALLIED))
				break;
			if (step == RL_TALLY_NOT)
			{
				track_receipt(p, NULL, 0, rl_pending_subid);
				break;
			}
			tally_spill(spill);
		}
	}
	rl_npending = pending_first = 0;
}

/*
 * Give back the pending receipts of an aborting level, newest first (at
 * an abort: allocates nothing, raises nothing), and forget them.
 */
static void
pending_refund(void)
{
	while (rl_npending > pending_first)
		rl_refund_pending_give(&rl_pending[--rl_npending]);
	rl_npending = pending_first = 0;
}

/*
 * rl_refund_track's other calls (refund.h): a receipt naming its entry
 * kept pending (the pending added first when there is no room, or they
 * are of another level); any other added to its target at once, after
 * the pending, and after the tallies of an older level.
 */
void
rl_refund_track_slow(const RlRequest *req, const RlReceipt *receipts, int n)
{
	int			i;

	if (unlikely(buckets == NULL))
	{
		if (n == 0)
			return;
		refund_begin();
	}
	for (i = 0; i < n; i++)
	{
		const RlReceipt *r = &receipts[i];
		bool		pend = (r->flags & (RL_RECEIPT_REMOTE |
										RL_RECEIPT_TIMELESS |
										RL_RECEIPT_ENTRY)) == RL_RECEIPT_ENTRY;
		RlPending	now;
		RlPending  *p = &now;

		if (rl_npending > 0 &&
			(!pend || rl_npending == RL_PENDING_MAX ||
			 rl_pending_subid != rl_refund_subid))
			pending_add();
		if (pend)
		{
			p = &rl_pending[rl_npending];
			rl_pending_subid = rl_refund_subid;
		}
		p->hash = rl_refund_target_hash(req, r);
		p->dbid = req->dbid;
		p->algo = req->algo;
		p->r = *r;
		if (pend)
		{
			rl_npending++;
			continue;
		}
		/* added to its target at once, its key the request's */
		Assert(rl_refund_subid == GetCurrentSubTransactionId());
		Assert(!(r->flags & RL_RECEIPT_ENTRY));
		if (rl_tally_used > 0 && rl_tally_subid != rl_refund_subid)
			tally_flush();
		track_receipt(p, req->key, req->keylen, rl_refund_subid);
	}
}

/*
 * Give back at once what an amount holds, pair by pair, newest first (an
 * engine whose refunds are local: made at an abort).
 */
static void
amount_refund(RlAmount *a)
{
	RlRequest	req;
	RlReceipt	r;

	while (a->nspent > 0)
	{
		rl_refund_pop(a, &req, &r);
		(void) rl_engine(r.engine)->refund(&req, &r);
	}
}

/*
 * Give back everything a level consumed, newest first, and forget the
 * level; a remote engine's refunds are queued.  The level must be the
 * innermost.  Allocates nothing.
 */
static void
level_refund(RlLevel *level)
{
	RlAmount   *a;

	Assert(levels == level);
	levels = level->up;
	while ((a = level->amounts) != NULL)
	{
		level->amounts = a->next;
		rl_refund_unlink(a);
		if (a->target->id.flags & RL_RECEIPT_REMOTE)
		{
			rl_refund_queue(a);
			continue;
		}
		amount_refund(a);
		a->next = rl_refund_free;
		rl_refund_free = a;
	}
	level->up = free_levels;
	free_levels = level;
}

/*
 * A subtransaction committed: its level becomes its parent's.  Its amounts
 * join the parent's of the same target and class, or move there as they
 * are (newer than the parent's own).  Raises no error.
 */
static void
level_commit(RlLevel *level, SubTransactionId parent_subid)
{
	RlLevel    *parent = level->up;
	RlAmount   *moved = NULL;
	RlAmount  **tail = &moved;
	RlAmount   *a;
	RlAmount   *next;

	if (parent == NULL || parent->subid != parent_subid)
	{
		/* the parent consumed nothing itself */
		level->subid = parent_subid;
		return;
	}
	for (a = level->amounts; a != NULL; a = next)
	{
		RlAmount   *b = rl_refund_find(a->target, parent, &a->params);

		next = a->next;
		if (b != NULL && rl_refund_merge(a, b))
		{
			a->next = rl_refund_free;
			rl_refund_free = a;
			continue;
		}
		a->level = parent;
		*tail = a;
		tail = &a->next;
	}
	*tail = parent->amounts;
	parent->amounts = moved;
	levels = parent;
	level->up = free_levels;
	free_levels = level;
}

/* At the end of the transaction: refund everything if it aborted. */
static void
refund_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			pending_refund();
			rl_tally_refund();
			while (levels != NULL)
				level_refund(levels);
			refund_forget();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			refund_forget();
			break;
		default:
			break;
	}
}

/*
 * At the start of a subtransaction: it is the current one.  At its end:
 * its parent is, and what it consumed is refunded if it aborted, passed to
 * its parent if it committed.  Only the innermost level can be the
 * subtransaction's: one that consumed nothing has none.
 */
static void
refund_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (buckets == NULL)
		return;					/* not tracking: rl_refund_subid is invalid */
	if (event == SUBXACT_EVENT_START_SUB)
		rl_refund_subid = mySubid;
	else if (event == SUBXACT_EVENT_COMMIT_SUB ||
			 event == SUBXACT_EVENT_ABORT_SUB)
		rl_refund_subid = parentSubid;
	if (rl_npending > 0 && rl_pending_subid == mySubid)
	{
		if (event == SUBXACT_EVENT_ABORT_SUB)
			pending_refund();
		else if (event == SUBXACT_EVENT_COMMIT_SUB)
			rl_pending_subid = parentSubid;
	}
	if (rl_tally_used > 0 && rl_tally_subid == mySubid)
	{
		if (event == SUBXACT_EVENT_ABORT_SUB)
			rl_tally_refund();
		else if (event == SUBXACT_EVENT_COMMIT_SUB)
			rl_tally_subid = parentSubid;
	}
	if (levels == NULL || levels->subid != mySubid)
		return;
	switch (event)
	{
		case SUBXACT_EVENT_ABORT_SUB:
			level_refund(levels);
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			level_commit(levels, parentSubid);
			break;
		default:
			break;
	}
}
