/*-------------------------------------------------------------------------
 *
 * store_slots.c
 *		The shared-memory store's slots (a concurrency limit, engine.h's
 *		acquire and release): taking a slot, the queue of the backends
 *		waiting for one, and giving one back.
 *
 * A key's slots are an entry whose state is RL_STATE_SLOTS (algo_slots.c:
 * slots held, backends waiting, tickets given out).  Who waits is kept apart,
 * one RlSlotWaiter per PGPROC number: the entry (index and incarnation) it
 * waits on, its ticket, the limit it asked under and the headroom its priority
 * must leave free (shed.c), and whether a slot was handed to it.  When a slot
 * frees (a release, a waiter leaving, a waiter arriving to find one free), the
 * queue is served: the waiter with the lowest ticket takes it if its limit
 * allows, is marked granted and its latch is set, and so on while slots are
 * free.  A slot handed over never becomes free in between, so a call that does
 * not wait cannot take it (and the algorithm refuses such calls while anyone
 * waits).  Load shedding: a waiter whose limit allows a slot but whose headroom
 * does not is passed over, by the queue and by a new call (a critical call
 * takes a slot a sheddable waiter must leave free).  The backend waits in the
 * dispatcher, outside every lock, and polls its record when its latch is set.
 * The record also notes the first RL_HOLDS_SHOWN slots the backend holds and
 * since when, for rl_slots' longest hold.
 *
 * Locking: the key's partition lock, exclusively, for everything here
 * (shared to read the notes of holds: rl_store_held_since);
 * a waiter record is written under the partition lock of the entry it
 * names, so the records a partition's holder reads for its entries are
 * stable.  The latch of a granted waiter is set under the lock.  Nothing
 * allocates, raises or does I/O under it.  Entries with slots held or
 * waited for are never reclaimed or evicted (rl_store_pinned); a reset
 * drops them, waking their waiters (store_entry.c), whose holders' later
 * releases then give nothing back (the incarnation differs).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"

#include "algo_common.h"
#include "compat.h"
#include "store_int.h"

/* This backend's waiter record; checked against the table's size. */
static RlSlotWaiter *
my_waiter(void)
{
	int			procno = rl_my_procno();

	if (procno < 0 || procno >= rl_store->nwaiters)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("this process cannot hold slots of a concurrency limit"),
				 errdetail("Only client backends and background workers can.")));
	return &rl_waiters[procno];
}

/* Idle again (nothing held, nobody queued), or never reclaimed. */
static inline void
entry_settle(RlEntry *e)
{
	e->idle_at = rl_slots_idle(&e->st.slots) ? e->last : RL_TIME_SATURATE;
}

/*
 * Note that the backend holds a slot of the entry since t, if it has room
 * for it among those rl_slots sees.
 */
static void
hold_note(RlSlotWaiter *me, const RlEntry *e, int64 t)
{
	int			i;

	for (i = 0; i < RL_HOLDS_SHOWN; i++)
		if (me->holds[i].entry == RL_NIL)
		{
			me->holds[i].incarnation = e->incarnation;
			me->holds[i].since = t;
			me->holds[i].entry = entry_index(e);
			return;
		}
}

/* The receipt of a slot of the entry, taken at time t. */
static void
slot_receipt(RlReceipt *r, const RlRequest *req, const RlEntry *e, int64 t)
{
	r->engine = RL_ENGINE_STORE;
	r->flags = 0;
	r->params = req->params;
	r->time = t;
	r->incarnation = e->incarnation;
}

/*
 * Is the waiter held back by its headroom alone: its limit allows a slot
 * of the entry, what its priority must leave free does not?  Such a waiter
 * is passed over (load shedding); one its limit holds back is not.
 */
static inline bool
waiter_shed(const RlSlotWaiter *w, const RlSlotsState *s)
{
	return s->held < w->limit && s->held >= w->limit - w->headroom;
}

/*
 * The first waiter of the entry (the lowest ticket) that is not passed
 * over (waiter_shed), or -1; *any tells whether any record waits on it.
 */
static int
queue_first(RlEntry *e, bool *any)
{
	const RlSlotsState *s = &e->st.slots;
	uint32		idx = entry_index(e);
	int			first = -1;
	int			i;

	*any = false;
	for (i = 0; i < rl_store->nwaiters; i++)
	{
		RlSlotWaiter *w = &rl_waiters[i];

		if (w->entry != idx || w->incarnation != e->incarnation ||
			w->granted)
			continue;
		*any = true;
		if (!waiter_shed(w, s) &&
			(first < 0 || w->ticket < rl_waiters[first].ticket))
			first = i;
	}
	return first;
}

/*
 * Hand free slots of the entry to its waiters, lowest ticket first, while
 * the first one's limit allows (those their headroom holds back passed
 * over).  A count of waiters no record matches (cannot happen; a record
 * is cleared with its count) is dropped, so that calls are not refused for
 * a queue that is empty.
 */
static void
queue_serve(RlEntry *e)
{
	RlSlotsState *s = &e->st.slots;

	while (s->waiting > 0)
	{
		bool		any;
		int			first = queue_first(e, &any);

		if (!any)
		{
			s->waiting = 0;
			break;
		}
		if (first < 0 ||
			!rl_slots_grant(s, rl_waiters[first].limit -
							rl_waiters[first].headroom))
			break;
		rl_waiters[first].granted = true;
		SetLatch(&GetPGProcByNumber(first)->procLatch);
	}
}

/*
 * TRY or QUEUE: take a slot if one is free and nobody waits, or (QUEUE)
 * join the queue.  A TRY refused by its headroom alone (a slot free under
 * the limit, nobody ahead) is SHED.  The partition lock is held; call has
 * the caller's owner.
 */
static RlSlotResult
slot_take(const RlRequest *req, RlSlot slot, int64 now, bool queue,
		  RlSlotWaiter *me, RlCall *call, RlReceipt *receipt)
{
	int64		t = rl_request_time(req, now);
	bool		fresh = false;
	int64		waiting = 0;
	bool		any;
	bool		queued;
	RlOutcome	out;
	RlEntry    *e;

	e = rl_store_find(slot, req->dbid, req->algo, req->key, req->keylen);
	if (e == NULL)
	{
		call->before = Min(now, t) - RL_RECLAIM_MARGIN;
		e = rl_store_create(slot, req, call);
		if (e == NULL)
		{
			if (call->refusal == RL_REFUSED_ROLE)
				pg_atomic_fetch_add_u64(&rl_store->refused_role, 1);
			else if (call->refusal == RL_REFUSED_DATABASE)
				pg_atomic_fetch_add_u64(&rl_store->refused_database, 1);
			rl_store->parts[slot.partno].d.refused++;
			pg_atomic_fetch_add_u64(&rl_owner_slots[call->owner].refused, 1);
			return RL_SLOT_NO_ROOM;
		}
		fresh = true;
	}
	else if (t < e->last)
		t = e->last;
	e->last = t;

	/*
	 * Waiters whose headroom alone holds them back (sheddable ones) do not
	 * hold back a call a free slot admits: the algorithm, which refuses a
	 * call while anyone waits, sees none when they are all such.
	 */
	if (!fresh && e->st.slots.waiting > 0 && queue_first(e, &any) < 0)
	{
		waiting = e->st.slots.waiting;
		e->st.slots.waiting = 0;
	}
	queued = e->st.slots.waiting > 0;
	(void) rl_algo(req->algo)->decide(&e->st, fresh, t, t, &req->params,
									  &out, NULL);
	if (waiting > 0)
		e->st.slots.waiting = waiting;
	if (out.allowed)
	{
		slot_receipt(receipt, req, e, t);
		hold_note(me, e, t);
		entry_settle(e);
		return RL_SLOT_TAKEN;
	}
	if (!queue)
	{
		entry_settle(e);
		/* a slot free under the limit, and nobody ahead: the headroom's */
		return !queued && rl_outcome_shed(&req->params, &out) ?
			RL_SLOT_SHED : RL_SLOT_BUSY;
	}

	me->ticket = rl_slots_enqueue(&e->st.slots);
	me->limit = req->params.limit;
	me->headroom = req->params.headroom;
	me->incarnation = e->incarnation;
	me->granted = false;
	me->entry = entry_index(e);
	queue_serve(e);
	entry_settle(e);
	if (!me->granted)
		return RL_SLOT_QUEUED;
	me->entry = RL_NIL;
	slot_receipt(receipt, req, e, t);
	hold_note(me, e, t);
	return RL_SLOT_TAKEN;
}

/*
 * POLL or LEAVE, for a backend in a queue: has its slot come?  If not,
 * LEAVE takes it out of the queue (and serves the queue: it may have been
 * the first, waiting under a lower limit than those behind it): SHED if a
 * slot was free under its limit then, BUSY if not.  The partition lock is
 * held.
 */
static RlSlotResult
slot_poll(const RlRequest *req, int64 now, RlSlotWaiter *me, bool leave,
		  RlReceipt *receipt)
{
	RlEntry    *e;
	bool		shed;

	if (me->entry == RL_NIL)
		return RL_SLOT_BUSY;
	e = &rl_entries[me->entry];
	if (!(e->flags & RL_ENTRY_USED) || e->incarnation != me->incarnation)
	{
		me->entry = RL_NIL;
		return RL_SLOT_GONE;
	}
	if (me->granted)
	{
		me->entry = RL_NIL;
		slot_receipt(receipt, req, e, Max(now, e->last));
		hold_note(me, e, receipt->time);
		return RL_SLOT_TAKEN;
	}
	if (!leave)
		return RL_SLOT_QUEUED;
	shed = me->headroom > 0 && waiter_shed(me, &e->st.slots);
	me->entry = RL_NIL;
	rl_slots_leave(&e->st.slots);
	queue_serve(e);
	entry_settle(e);
	return shed ? RL_SLOT_SHED : RL_SLOT_BUSY;
}

/*
 * engine acquire: see RlSlotOp.  The owner is found and the caller's
 * record checked before the lock is taken.
 */
RlSlotResult
rl_store_acquire(const RlRequest *req, RlSlotOp op, int64 now,
				 RlReceipt *receipt)
{
	RlSlot		slot = rl_store_slot(req->dbid, req->algo, req->key,
									 req->keylen);
	RlSlotWaiter *me = my_waiter();
	RlSlotResult result;
	RlCall		call;

	Assert(rl_algo_holds(req->algo));
	receipt->engine = RL_ENGINE_NONE;
	rl_store_call_init(&call, op <= RL_SLOT_QUEUE ?
					   rl_owner_current(req->dbid) : 0);
	rl_part_lock(slot.partno, LW_EXCLUSIVE);
	call.partno = slot.partno;
	if (op <= RL_SLOT_QUEUE)
		result = slot_take(req, slot, now, op == RL_SLOT_QUEUE, me, &call,
						   receipt);
	else
		result = slot_poll(req, now, me, op == RL_SLOT_LEAVE, receipt);
	rl_part_unlock(slot.partno);
	return result;
}

/*
 * engine release: give back the slot a receipt recorded, to the same
 * incarnation of the key's state only, and hand it on to the first
 * waiter.  The holder's note of it goes, whether the state is still
 * there or not (its entry is in the key's partition either way).  Called
 * by the holder only, which has a record (it took the slot).  Never
 * raises.
 */
void
rl_store_release(const RlRequest *req, const RlReceipt *receipt)
{
	RlSlot		slot = rl_store_slot(req->dbid, req->algo, req->key,
									 req->keylen);
	RlSlotWaiter *me = &rl_waiters[rl_my_procno()];
	RlEntry    *e;
	int			i;

	rl_part_lock(slot.partno, LW_EXCLUSIVE);
	for (i = 0; i < RL_HOLDS_SHOWN; i++)
		if (me->holds[i].entry != RL_NIL &&
			me->holds[i].incarnation == receipt->incarnation &&
			me->holds[i].entry / rl_store->per_part == (uint32) slot.partno)
		{
			me->holds[i].entry = RL_NIL;
			break;
		}
	e = rl_store_find(slot, req->dbid, req->algo, req->key, req->keylen);
	if (e != NULL && e->incarnation == receipt->incarnation)
	{
		rl_algo(req->algo)->refund(&e->st, receipt->time, &receipt->params,
								   receipt->params.cost, NULL);
		queue_serve(e);
		entry_settle(e);
	}
	rl_part_unlock(slot.partno);
}

/*
 * Since when the longest-held slot of the entry is held, among the slots
 * backends noted (RL_HOLDS_SHOWN each), or RL_NO_TIME.  The entry's
 * partition lock is held (shared is enough: notes of its slots change
 * under it, exclusively).
 */
int64
rl_store_held_since(const RlEntry *e)
{
	uint32		idx = entry_index(e);
	int64		since = RL_NO_TIME;
	int			i;
	int			j;

	if (e->st.slots.held == 0)
		return RL_NO_TIME;
	for (i = 0; i < rl_store->nwaiters; i++)
		for (j = 0; j < RL_HOLDS_SHOWN; j++)
		{
			const RlSlotHold *h = &rl_waiters[i].holds[j];

			if (h->entry == idx && h->incarnation == e->incarnation &&
				(since == RL_NO_TIME || h->since < since))
				since = h->since;
		}
	return since;
}
