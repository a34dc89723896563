/*-------------------------------------------------------------------------
 *
 * store_engine.c
 *		The shared-memory store as an engine (engine.h): decisions, all-or-
 *		nothing checks, refunds and looks, on the hot path of every call.
 *
 * A decision hashes its key, finds the caller's owner (before any lock),
 * takes the key's partition lock exclusively, finds or creates the entry,
 * clamps the call's time to the key's latest, runs the algorithm table's
 * decide on the entry's state (lending the pool to a log), records the
 * latest time and idle time, and releases the lock.  Nothing under the
 * lock allocates, raises or waits for I/O (store.c has the locking
 * contract), but for the WAL record of a durable key's refund
 * (store_wal.c).  A decision that changed a durable key notes it, after
 * the lock is released, for its image at commit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "store_int.h"

/* Lock a partition for the call (exclusively), remembering it. */
static void
call_lock(RlCall *call, int partno)
{
	LWLockAcquire(&rl_locks[partno].lock, LW_EXCLUSIVE);
	call->held[partno / 64] |= (uint64) 1 << (partno % 64);
}

/* ---- the engine: decisions and refunds ---- */

/*
 * Run the entry's algorithm.  Returns false if a log needed a block and
 * could get none (the entry is then unchanged but for expired log
 * entries).  call is NULL for a copy or a call that consumes nothing,
 * which never needs a block.
 */
static bool
entry_decide(RlEntry *e, bool fresh, int64 t, const RlParams *p,
			 RlOutcome *out, RlCall *call)
{
	const RlAlgoRoutine *algo = rl_algo(e->algo);
	RlChain		chain;
	bool		ok;

	/* only a log's state has a chain in the pool */
	if (algo->state != RL_STATE_LOG)
		return algo->decide(&e->st, fresh, t, e->last, p, out, NULL);

	chain = store_chain();
	ok = algo->decide(&e->st, fresh, t, e->last, p, out, &chain);
	rl_store_chain_freed(e, &chain);
	if (!ok && call != NULL &&
		(chain.spare = rl_store_block_take(call, e->owner)) != RL_NIL)
	{
		/* it must append to a full tail: again, with a block */
		ok = algo->decide(&e->st, false, t, e->last, p, out, &chain);
		Assert(ok && chain.spare == RL_NIL && chain.nfreed == 0);
		rl_store_blocks_changed(e, 1);
	}
	return ok;
}

/*
 * A new key's outcome, for a call that consumes nothing: the state after
 * it equals a new key's, so nothing is stored (and no pool block is used).
 */
static void
fresh_decide(const RlRequest *req, int64 t, RlOutcome *out)
{
	RlState		st;
	RlChain		chain = store_chain();

	(void) rl_algo(req->algo)->decide(&st, true, t, t, &req->params, out,
									  &chain);
}

/* The receipt of what the call consumed from the entry at time t. */
static inline void
store_receipt(RlReceipt *r, const RlRequest *req, const RlOutcome *out,
			  const RlEntry *e, int64 t)
{
	if (e == NULL || !out->allowed || req->params.cost == 0)
	{
		r->engine = RL_ENGINE_NONE;
		return;
	}
	r->engine = RL_ENGINE_STORE;
	r->flags = 0;
	r->params = req->params;
	r->time = t;
	r->incarnation = e->incarnation;
}

/*
 * Remember that the call changed a durable entry (a durable policy's, or
 * one made durable before), for its image at commit (store_wal.c, once
 * the locks are released).  A request of a durable policy makes the entry
 * durable if it was not.
 */
static void
note_durable(RlCall *call, RlEntry *e, bool durable)
{
	if (durable && !(e->flags & RL_ENTRY_DURABLE))
	{
		e->flags |= RL_ENTRY_DURABLE;
		rl_store->parts[call->partno].d.durable++;
	}
	if (call->ndurable < RL_MAX_MULTI)
	{
		call->durable[call->ndurable] = entry_index(e);
		call->durable_inc[call->ndurable] = e->incarnation;
		call->ndurable++;
	}
}

/*
 * Decide one request; the slot's partition lock is held exclusively.
 */
static RlStatus
decide_locked(const RlRequest *req, RlSlot slot, int64 now, RlCall *call,
			  RlOutcome *out, RlReceipt *receipt)
{
	int64		t = req->at == RL_NO_TIME ? now : req->at;
	RlStatus	status = RL_OK;
	RlEntry    *e;

	call->partno = slot.partno;
	e = rl_store_find(slot, req->dbid, req->algo, req->key, req->keylen);
	if (e != NULL)
	{
		if (t < e->last)
			t = e->last;
		call->busy = e;
		if (!entry_decide(e, false, t, &req->params, out, call))
			status = RL_NO_ROOM;
		e->last = t;
	}
	else if (req->params.cost == 0)
		fresh_decide(req, t, out);
	else if ((e = rl_store_create(slot, req, Min(now, t) - RL_RECLAIM_MARGIN,
								  call)) == NULL)
		status = RL_NO_ROOM;
	else
	{
		e->last = t;
		call->busy = e;
		if (!entry_decide(e, true, t, &req->params, out, call))
		{
			rl_store_remove(slot.partno, e);
			status = RL_NO_ROOM;
		}
	}
	call->busy = NULL;
	if (status == RL_NO_ROOM)
	{
		rl_store->parts[slot.partno].d.refused++;
		pg_atomic_fetch_add_u64(&rl_owner_slots[call->owner].refused, 1);
		receipt->engine = RL_ENGINE_NONE;
		return status;
	}
	if (e != NULL)
	{
		e->idle_at = out->reset_at;
		if (unlikely(req->durable || (e->flags & RL_ENTRY_DURABLE)) &&
			req->params.cost > 0)
			note_durable(call, e, req->durable);
	}
	store_receipt(receipt, req, out, e, t);
	return status;
}

/*
 * Give back what a receipt recorded; the slot's partition lock is held
 * exclusively.  A key that is gone (reset, reclaimed once idle, evicted),
 * or whose state was created again since, has nothing to give back.
 */
static void
refund_locked(const RlRequest *req, RlSlot slot, const RlReceipt *r)
{
	const RlAlgoRoutine *algo = rl_algo(req->algo);
	RlEntry    *e;
	RlChain		chain;

	e = rl_store_find(slot, req->dbid, req->algo, req->key, req->keylen);
	if (e == NULL || e->incarnation != r->incarnation)
		return;
	if (algo->state != RL_STATE_LOG)
		algo->refund(&e->st, r->time, &r->params, r->params.cost, NULL);
	else
	{
		chain = store_chain();
		algo->refund(&e->st, r->time, &r->params, r->params.cost, &chain);
		rl_store_chain_freed(e, &chain);
	}
	/* a rolled-back consumption must not come back after a crash */
	if (e->flags & RL_ENTRY_DURABLE)
		rl_store_wal_image(e);
}

/*
 * engine decide: one request against the shared-memory state.  "now" is
 * the real clock, read by the caller before any lock: it is the call's
 * time unless "at" was given, and the time reclaim compares idle_at with.
 * The key's time never runs backwards.
 */
static RlStatus
store_decide(const RlRequest *req, int64 now, RlOutcome *out,
			 RlReceipt *receipt)
{
	RlSlot		slot = rl_store_slot(req->dbid, req->algo, req->key,
									 req->keylen);
	RlCall		call;
	RlStatus	status;

	rl_store_call_init(&call, rl_owner_current(req->dbid));
	call_lock(&call, slot.partno);
	status = decide_locked(req, slot, now, &call, out, receipt);
	LWLockRelease(&rl_locks[slot.partno].lock);
	if (unlikely(call.ndurable > 0))
		rl_store_wal_note(&call);
	return status;
}

/* engine refund: see refund_locked.  Never raises. */
static bool
store_refund(const RlRequest *req, const RlReceipt *receipt)
{
	RlSlot		slot = rl_store_slot(req->dbid, req->algo, req->key,
									 req->keylen);

	LWLockAcquire(&rl_locks[slot.partno].lock, LW_EXCLUSIVE);
	refund_locked(req, slot, receipt);
	LWLockRelease(&rl_locks[slot.partno].lock);
	return true;
}

static int
partno_cmp(const void *a, const void *b)
{
	return *(const int *) a - *(const int *) b;
}

/*
 * engine decide_all: n requests all or nothing.  The partitions involved
 * are locked together, in ascending order (so two such calls cannot
 * deadlock), for the whole operation.  If any does not admit, what the
 * others consumed is given back (to the incarnation each consumed from:
 * the same, since the locks were held throughout) and their decisions are
 * made again with cost 0, so each reports whether it would have admitted
 * and its state afterwards.  A request the store has no room for leaves
 * its outcome to the caller (status RL_NO_ROOM).
 */
static RlStatus
store_decide_all(const RlRequest *reqs, int n, int64 now,
				 const bool *fail_open, RlOutcome *outs, RlReceipt *receipts,
				 RlStatus *statuses)
{
	RlSlot		slots[RL_MAX_MULTI];
	int			partnos[RL_MAX_MULTI];
	int			nparts = 0;
	RlCall		call;
	bool		all = true;
	int			i;

	Assert(n > 0 && n <= RL_MAX_MULTI);
	rl_store_call_init(&call, rl_owner_current(reqs[0].dbid));
	for (i = 0; i < n; i++)
	{
		slots[i] = rl_store_slot(reqs[i].dbid, reqs[i].algo, reqs[i].key,
								 reqs[i].keylen);
		partnos[i] = slots[i].partno;
	}
	qsort(partnos, n, sizeof(int), partno_cmp);
	for (i = 0; i < n; i++)
		if (nparts == 0 || partnos[nparts - 1] != partnos[i])
			partnos[nparts++] = partnos[i];

	for (i = 0; i < nparts; i++)
		call_lock(&call, partnos[i]);

	for (i = 0; i < n; i++)
	{
		statuses[i] = decide_locked(&reqs[i], slots[i], now, &call, &outs[i],
									&receipts[i]);
		if (statuses[i] == RL_OK ? !outs[i].allowed && !reqs[i].shadow :
			!fail_open[i])
			all = false;
	}
	if (!all)
	{
		for (i = 0; i < n; i++)
		{
			RlRequest	look = reqs[i];
			RlReceipt	none;

			if (receipts[i].engine == RL_ENGINE_NONE)
				continue;
			refund_locked(&reqs[i], slots[i], &receipts[i]);
			look.params.cost = 0;
			look.at = receipts[i].time;
			(void) decide_locked(&look, slots[i], now, &call, &outs[i], &none);
			receipts[i].engine = RL_ENGINE_NONE;
		}
	}

	for (i = nparts - 1; i >= 0; i--)
		LWLockRelease(&rl_locks[partnos[i]].lock);
	if (unlikely(call.ndurable > 0))
		rl_store_wal_note(&call);
	return RL_OK;
}

/*
 * engine peek: what a call of cost 0 would report now, without changing
 * anything: the algorithm runs on a copy of the state, under the shared
 * lock (a log's expiry only moves the copy's head; the blocks the copy
 * "frees" still belong to the entry).  False if the key has no state.
 */
static bool
store_peek(const RlRequest *req, int64 now, RlOutcome *out)
{
	RlSlot		slot = rl_store_slot(req->dbid, req->algo, req->key,
									 req->keylen);
	RlParams	p = req->params;
	RlEntry    *e;

	p.cost = 0;
	LWLockAcquire(&rl_locks[slot.partno].lock, LW_SHARED);
	e = rl_store_find(slot, req->dbid, req->algo, req->key, req->keylen);
	if (e != NULL)
	{
		RlState		copy = e->st;
		RlChain		chain = store_chain();

		(void) rl_algo(e->algo)->decide(&copy, false, Max(now, e->last),
										e->last, &p, out, &chain);
	}
	LWLockRelease(&rl_locks[slot.partno].lock);
	return e != NULL;
}

const RlEngine rl_store_engine = {
	.name = "local",
	.validate = rl_store_wal_validate,
	.decide = store_decide,
	.decide_all = store_decide_all,
	.peek = store_peek,
	.refund = store_refund,
	.refunds_noted = NULL,		/* its refunds are made at once */
	.reset = rl_store_reset,
	.reset_all = rl_store_reset_all,
	.info = rl_store_figures,
	.scan = rl_store_scan,
	.images = rl_store_images,
	.restore = rl_store_restore,
};
