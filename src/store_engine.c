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
 * the lock is released, for its image at commit.  A call that found no
 * room says why in a WARNING once the lock is released (at most one a
 * minute per backend).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"

#include "store_int.h"

/* at most one warning of a call without room per backend and interval */
#define RL_NO_ROOM_WARN_INTERVAL	(60 * USECS_PER_SEC)

/* how often a backend may look for entries of databases that are gone */
#define RL_DROP_GONE_INTERVAL		(10 * USECS_PER_SEC)

/* ---- the engine: decisions and refunds ---- */

/*
 * Run a log entry's algorithm (entry_decide's case of a state with a chain
 * in the pool); see entry_decide.
 */
static bool
entry_decide_log(RlEntry *e, RlDecideFn fn, bool fresh, int64 t,
				 const RlParams *p, RlOutcome *out, RlCall *call)
{
	RlChain		chain = store_chain();
	bool		ok;

	ok = fn(&e->st, fresh, t, e->last, p, out, &chain);
	rl_store_chain_freed(e, &chain);
	if (!ok && call != NULL &&
		(chain.spare = rl_store_block_take(call, e->owner)) != RL_NIL)
	{
		/* it must append to a full tail: again, with a block */
		ok = fn(&e->st, false, t, e->last, p, out, &chain);
		Assert(ok && chain.spare == RL_NIL && chain.nfreed == 0);
	}
	return ok;
}

/*
 * Run the entry's algorithm: its decision, or its charge (rl_adjust).
 * Returns false if a log needed a block and could get none (the entry is
 * then unchanged but for expired log entries).  call is NULL for a copy or
 * a call that consumes nothing, which never needs a block.  Inline, the
 * log's case apart (#9: a frame less on every decision).
 */
static pg_attribute_always_inline bool
entry_decide(RlEntry *e, bool fresh, int64 t, const RlParams *p,
			 RlOutcome *out, RlCall *call, bool charge)
{
	const RlAlgoRoutine *algo = rl_algo(e->algo);
	RlDecideFn	fn = charge ? algo->charge : algo->decide;

	/* only a log's state has a chain in the pool */
	if (likely(algo->state != RL_STATE_LOG))
		return fn(&e->st, fresh, t, e->last, p, out, NULL);
	return entry_decide_log(e, fn, fresh, t, p, out, call);
}

/*
 * A new key's outcome, for a call that consumes nothing (a give-back
 * included): the state after it equals a new key's, so nothing is stored
 * (and no pool block is used).
 */
static void
fresh_decide(const RlRequest *req, int64 t, RlOutcome *out)
{
	RlState		st;
	RlChain		chain = store_chain();
	RlParams	p = req->params;

	p.cost = 0;					/* a give-back's is below zero */
	(void) rl_algo(req->algo)->decide(&st, true, t, t, &p, out, &chain);
}

/*
 * The receipt of what the call consumed from the entry at time t, naming
 * the entry (a refund, and the refund tracker, then need not find or keep
 * the key).
 */
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
	r->flags = RL_RECEIPT_ENTRY;
	r->params = req->params;
	r->time = t;
	r->incarnation = e->incarnation;
	r->entry = entry_index(e) + 1;
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
 * Decide one request, or charge it (rl_adjust: a receipt is made, and
 * not used); the slot's partition lock is held exclusively.
 */
static RlStatus
decide_locked(const RlRequest *req, RlSlot slot, int64 now, RlCall *call,
			  RlOutcome *out, RlReceipt *receipt, bool charge)
{
	int64		t = rl_request_time(req, now);
	RlStatus	status = RL_OK;
	RlEntry    *e;

	call->partno = slot.partno;
	call->before = Min(now, t) - RL_RECLAIM_MARGIN;
	call->for_durable = req->durable;
	e = rl_store_find(slot, req->dbid, req->algo, req->key, req->keylen);
	if (e != NULL)
	{
		t = Max(t, e->last);
		call->busy = e;
		call->for_durable |= (e->flags & RL_ENTRY_DURABLE) != 0;
		if (!entry_decide(e, false, t, &req->params, out, call, charge))
			status = RL_NO_ROOM;
		e->last = t;
	}
	else if (req->params.cost <= 0)
		fresh_decide(req, t, out);
	else if ((e = rl_store_create(slot, req, call)) == NULL)
		status = RL_NO_ROOM;
	else
	{
		e->last = t;
		call->busy = e;
		if (!entry_decide(e, true, t, &req->params, out, call, charge))
		{
			rl_store_remove(slot.partno, e);
			status = RL_NO_ROOM;
		}
	}
	call->busy = NULL;
	if (status == RL_NO_ROOM)
	{
		if (call->refusal == RL_REFUSED_ROLE)
			pg_atomic_fetch_add_u64(&rl_store->refused_role, 1);
		else if (call->refusal == RL_REFUSED_DATABASE)
			pg_atomic_fetch_add_u64(&rl_store->refused_database, 1);
		rl_store->parts[slot.partno].d.refused++;
		pg_atomic_fetch_add_u64(&rl_owner_slots[call->owner].refused, 1);
		receipt->engine = RL_ENGINE_NONE;
		return status;
	}
	if (e != NULL)
	{
		e->idle_at = out->reset_at;
		if (unlikely(req->durable || (e->flags & RL_ENTRY_DURABLE)) &&
			req->params.cost != 0)
			note_durable(call, e, req->durable);
	}
	store_receipt(receipt, req, out, e, t);
	return status;
}

/*
 * The entry holding the state a receipt of a request consumed from, or
 * NULL if that state is gone (reset, reclaimed once idle, evicted) or was
 * created again since; its partition lock (receipt_partition) is held.
 * Every receipt of the store names its entry (store_receipt), so the key
 * is not needed (the refund tracker keeps none): entries never move, and
 * an entry's incarnation is new each time a state is created in it.
 */
static RlEntry *
receipt_entry(const RlRequest *req, const RlReceipt *r)
{
	RlEntry    *e;

	Assert((r->flags & RL_RECEIPT_ENTRY) && r->entry > 0 &&
		   r->entry <= (uint32) rl_store->nparts * rl_store->per_part);
	e = &rl_entries[r->entry - 1];
	if (!(e->flags & RL_ENTRY_USED) || e->dbid != req->dbid ||
		e->algo != req->algo || e->incarnation != r->incarnation)
		return NULL;
	return e;
}

/* The partition of the entry a receipt names. */
static inline int
receipt_partition(const RlReceipt *r)
{
	return (int) ((r->entry - 1) / rl_store->per_part);
}

/*
 * Give back what a receipt recorded; the partition lock of its entry
 * (receipt_partition) is held exclusively.  A state that is gone, or was
 * created again since, has nothing to give back.
 */
static void
refund_locked(const RlRequest *req, const RlReceipt *r)
{
	const RlAlgoRoutine *algo = rl_algo(req->algo);
	RlEntry    *e = receipt_entry(req, r);
	RlChain		chain;

	if (e == NULL)
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
 * Say why a call of this backend found no room (its fail_mode decided), at
 * most once per interval: which cap, or that the store is full.  After
 * the partition locks are released; now is the real clock.
 */
static void
warn_no_room(const RlCall *call, int64 now)
{
	static int64 last_warned = PG_INT64_MIN;
	const char *what = call->refused_blocks ? "pool blocks" : "keys";
	uint64		cap;

	if (call->refusal == RL_REFUSED_NONE ||
		(last_warned != PG_INT64_MIN &&
		 now < last_warned + RL_NO_ROOM_WARN_INTERVAL && now >= last_warned))
		return;
	last_warned = now;
	switch (call->refusal)
	{
		case RL_REFUSED_ROLE:
			cap = rl_owner_cap(call->refused_blocks, false);
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("ratelimit: role \"%s\" holds its share of the store's %s",
							GetUserNameFromId(GetUserId(), false), what),
					 errdetail("One role may hold %d%% of them across databases (%llu), set by \"ratelimit.role_share\"; a call that needs more is decided by its fail_mode.",
							   rl_role_share, (unsigned long long) cap),
					 errhint("Raise \"ratelimit.role_share\", \"ratelimit.max_keys\" or \"ratelimit.pool_size\", or use fewer keys or shorter windows.")));
			break;
		case RL_REFUSED_DATABASE:
			cap = rl_owner_cap(call->refused_blocks, true);
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("ratelimit: database \"%s\" holds its share of the store's %s",
							get_database_name(MyDatabaseId), what),
					 errdetail("One database may hold %d%% of them (%llu), set by \"ratelimit.database_share\"; a call that needs more is decided by its fail_mode.",
							   rl_database_share, (unsigned long long) cap),
					 errhint("Raise \"ratelimit.database_share\", \"ratelimit.max_keys\" or \"ratelimit.pool_size\", or use fewer keys or shorter windows.")));
			break;
		default:
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("ratelimit: the store has no room for more %s",
							what),
					 errdetail("Every entry holds a key that is not idle yet; a call that needs a new one is decided by its fail_mode."),
					 errhint("Raise \"%s\".",
							 call->refused_blocks ? "ratelimit.pool_size" :
							 "ratelimit.max_keys")));
			break;
	}
}

/*
 * May this backend look for entries of databases that are gone, now?  At
 * most once per interval (the look reads every entry and the catalog),
 * and only in a transaction.
 */
static bool
may_drop_gone(int64 now)
{
	static int64 last_look = PG_INT64_MIN;

	if (!IsTransactionState() ||
		(last_look != PG_INT64_MIN && now >= last_look &&
		 now < last_look + RL_DROP_GONE_INTERVAL))
		return false;
	last_look = now;
	return true;
}

/*
 * Decide (or charge) one request under its partition's lock, taken and
 * released here.  A request without room first drops the entries of
 * databases that are gone, if this backend may look now, and is tried
 * again; still without room, its WARNING is given, outside the lock.
 * Inline in store_decide and store_charge (#9: a frame less per call).
 */
static pg_attribute_always_inline RlStatus
decide_unlocked(const RlRequest *req, RlSlot slot, int64 now, RlCall *call,
				RlOutcome *out, RlReceipt *receipt, bool charge)
{
	RlStatus	status;

	rl_part_lock(slot.partno, LW_EXCLUSIVE);
	status = decide_locked(req, slot, now, call, out, receipt, charge);
	rl_part_unlock(slot.partno);
	if (unlikely(call->ndurable > 0))
		rl_store_wal_note(call);
	if (unlikely(status == RL_NO_ROOM))
	{
		/* entries of databases that are gone hold room: drop them, again */
		if (call->refusal == RL_REFUSED_FULL && may_drop_gone(now) &&
			rl_store_drop_gone() > 0)
		{
			rl_part_lock(slot.partno, LW_EXCLUSIVE);
			status = decide_locked(req, slot, now, call, out, receipt, charge);
			rl_part_unlock(slot.partno);
		}
		if (status == RL_NO_ROOM)
			warn_no_room(call, now);
	}
	return status;
}

/*
 * A decision's fast path, taken when the key's entry exists, its state is
 * its own (not a log, whose chain lives in the pool; not slots, which
 * queue waiters) and not durable (its change is logged at commit), and no
 * one holds the partition's LWLock (rl_part_lock's mark): the decision is
 * made under the partition's spinlock alone, held for the lookup and the
 * algorithm's arithmetic, which cannot fail, allocate or wait (#9: a
 * spinlock costs a tenth of an LWLock taken and released).  Returns
 * false, having changed nothing, when any of that does not hold; the
 * caller then takes the LWLock.
 */
static pg_attribute_always_inline bool
decide_fast(const RlRequest *req, RlSlot slot, int64 now, RlOutcome *out,
			RlReceipt *receipt)
{
	const RlAlgoRoutine *algo = rl_algo(req->algo);
	RlPartitionData *part = &rl_store->parts[slot.partno].d;
	RlEntry    *e;
	int64		t;

	if (unlikely(algo->state >= RL_STATE_LOG || req->durable))
		return false;
	SpinLockAcquire(&part->fast_lock);
	if (unlikely(part->slow > 0) ||
		unlikely((e = rl_store_find(slot, req->dbid, req->algo, req->key,
									req->keylen)) == NULL) ||
		unlikely(e->flags & RL_ENTRY_DURABLE))
	{
		SpinLockRelease(&part->fast_lock);
		return false;
	}
	t = Max(rl_request_time(req, now), e->last);
	(void) algo->decide(&e->st, false, t, e->last, &req->params, out, NULL);
	e->last = t;
	e->idle_at = out->reset_at;
	store_receipt(receipt, req, out, e, t);
	SpinLockRelease(&part->fast_lock);
	return true;
}

/* store_decide's case that decide_fast does not take, under the LWLock. */
static pg_noinline RlStatus
decide_slow(const RlRequest *req, RlSlot slot, int64 now, RlOutcome *out,
			RlReceipt *receipt)
{
	RlCall		call;

	rl_store_call_init(&call, rl_owner_current(req->dbid));
	return decide_unlocked(req, slot, now, &call, out, receipt, false);
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

	if (likely(decide_fast(req, slot, now, out, receipt)))
		return RL_OK;
	return decide_slow(req, slot, now, out, receipt);
}

/*
 * engine charge (rl_adjust): as a decision, with the algorithm's charge;
 * a give-back to a key without state has nothing to give.
 */
static RlStatus
store_charge(const RlRequest *req, int64 now, RlOutcome *out)
{
	RlSlot		slot = rl_store_slot(req->dbid, req->algo, req->key,
									 req->keylen);
	RlCall		call;
	RlReceipt	unused;

	rl_store_call_init(&call, rl_owner_current(req->dbid));
	return decide_unlocked(req, slot, now, &call, out, &unused, true);
}

/*
 * engine refund: see refund_locked.  Only the request's database and
 * algorithm are read: the receipt names the entry.  Never raises.
 */
static bool
store_refund(const RlRequest *req, const RlReceipt *receipt)
{
	int			partno = receipt_partition(receipt);

	rl_part_lock(partno, LW_EXCLUSIVE);
	refund_locked(req, receipt);
	rl_part_unlock(partno);
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
		rl_part_lock(partnos[i], LW_EXCLUSIVE);

	for (i = 0; i < n; i++)
	{
		statuses[i] = decide_locked(&reqs[i], slots[i], now, &call, &outs[i],
									&receipts[i], false);
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
			refund_locked(&reqs[i], &receipts[i]);
			look.params.cost = 0;
			look.at = receipts[i].time;
			(void) decide_locked(&look, slots[i], now, &call, &outs[i], &none,
								 false);
			receipts[i].engine = RL_ENGINE_NONE;
		}
	}

	for (i = nparts - 1; i >= 0; i--)
		rl_part_unlock(partnos[i]);
	warn_no_room(&call, now);
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
	rl_part_lock(slot.partno, LW_SHARED);
	e = rl_store_find(slot, req->dbid, req->algo, req->key, req->keylen);
	if (e != NULL)
	{
		RlState		copy = e->st;
		RlChain		chain = store_chain();

		(void) rl_algo(e->algo)->decide(&copy, false, Max(now, e->last),
										e->last, &p, out, &chain);
	}
	rl_part_unlock(slot.partno);
	return e != NULL;
}

const RlEngine rl_store_engine = {
	.name = "local",
	.validate = rl_store_wal_validate,
	.decide = store_decide,
	.decide_all = store_decide_all,
	.charge = store_charge,
	.peek = store_peek,
	.refund = store_refund,
	.refund_queued = NULL,		/* its refunds are made at once */
	.refunds_noted = NULL,
	.reset = rl_store_reset,
	.reset_all = rl_store_reset_all,
	.info = rl_store_figures,
	.scan = rl_store_scan,
	.images = rl_store_images,
	.restore = rl_store_restore,
	.acquire = rl_store_acquire,
	.release = rl_store_release,
};
