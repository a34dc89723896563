/*-------------------------------------------------------------------------
 *
 * store_entry.c
 *		The store's entries, their keys and the pool: creating an entry
 *		(making room for it by reclaiming idle ones), removing one, and the
 *		pool blocks of long keys and logs.
 *
 * Everything here runs under the partition lock of the entry concerned,
 * held exclusively (store.c has the locking contract): no allocation, no
 * ereport, no I/O.  The pool's spinlock is taken inside, for a handful of
 * instructions.  No live entry is evicted: an entry, or a block, is taken
 * only within the caps of its owner's role and database (store_owner.c)
 * and only if one is free or idle.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/latch.h"
#include "storage/proc.h"

#include "store_int.h"

/* ratelimit.durable is on: room is kept for durable keys (store_wal.c) */
bool		rl_store_durable_room = false;

static void make_room(const RlCall *call, int scan);
static void evict_ordinary(const RlCall *call);

/* ---- the pool (spinlock held only to pop or push) ---- */

/*
 * What ordinary keys leave free of n entries or blocks: the room kept for
 * durable keys (ratelimit.durable_reserve, when durable keys are on), 0
 * for a call for a durable key.
 */
static inline uint32
reserved(const RlCall *call, uint32 n)
{
	if (!rl_store_durable_room || call->for_durable || call->uncapped)
		return 0;
	return (uint32) ((uint64) n * (uint32) rl_durable_reserve / 100);
}

/* A free block, if more than keep are free, or RL_NIL. */
static uint32
pool_pop(uint32 keep)
{
	uint32		block = RL_NIL;

	SpinLockAcquire(&rl_store->pool_lock);
	if (rl_store->pool_nfree > keep)
	{
		block = rl_store->pool_free;
		rl_store->pool_free = rl_block_next[block];
		rl_store->pool_nfree--;
	}
	SpinLockRelease(&rl_store->pool_lock);
	return block;
}

/* The number of free blocks. */
static uint32
pool_free_count(void)
{
	uint32		n;

	SpinLockAcquire(&rl_store->pool_lock);
	n = rl_store->pool_nfree;
	SpinLockRelease(&rl_store->pool_lock);
	return n;
}

/* Give back n blocks already linked from first to last. */
void
rl_store_pool_push(uint32 first, uint32 last, uint32 n)
{
	if (n == 0)
		return;
	SpinLockAcquire(&rl_store->pool_lock);
	rl_block_next[last] = rl_store->pool_free;
	rl_store->pool_free = first;
	rl_store->pool_nfree += n;
	SpinLockRelease(&rl_store->pool_lock);
}

/* Give back a chain of blocks that ends with RL_NIL. */
static void
pool_push_chain(uint32 first)
{
	uint32		last = first;
	uint32		n = 1;

	if (first == RL_NIL)
		return;
	while (rl_block_next[last] != RL_NIL)
	{
		last = rl_block_next[last];
		n++;
	}
	rl_store_pool_push(first, last, n);
}

/* ---- keys ---- */

/* Pool blocks a key of this length takes. */
static inline uint32
key_blocks(int keylen)
{
	if (keylen <= RL_KEY_INLINE)
		return 0;
	return (uint32) (keylen - RL_KEY_INLINE + RL_BLOCK_SIZE - 1) / RL_BLOCK_SIZE;
}

/*
 * Copy the key into the entry, taking pool blocks (counted for the entry's
 * owner) for the bytes past the inline part.  Returns false (holding no
 * block) if it may not have enough.
 */
static bool
key_store(RlEntry *e, const char *key, int keylen, RlCall *call)
{
	int			n = Min(keylen, RL_KEY_INLINE);
	uint32	   *link = &e->key_more;
	int32		taken = 0;

	memcpy(e->key, key, n);
	e->keylen = keylen;
	*link = RL_NIL;
	for (key += n, keylen -= n; keylen > 0; key += n, keylen -= n)
	{
		uint32		block = rl_store_block_take(call, e->owner);

		if (block == RL_NIL)
		{
			pool_push_chain(e->key_more);
			rl_owner_count(e->owner, true, -taken);
			e->key_more = RL_NIL;
			return false;
		}
		taken++;
		n = Min(keylen, RL_BLOCK_SIZE);
		memcpy(rl_blocks[block].bytes, key, n);
		rl_block_next[block] = RL_NIL;
		*link = block;
		link = &rl_block_next[block];
	}
	return true;
}

/* The key of an entry, copied out; the partition lock is held. */
int
rl_store_key_copy(const RlEntry *e, char *out)
{
	int			n = Min(e->keylen, RL_KEY_INLINE);
	int			done = n;
	uint32		block = e->key_more;

	memcpy(out, e->key, n);
	while (done < e->keylen)
	{
		n = Min(e->keylen - done, RL_BLOCK_SIZE);
		memcpy(out + done, rl_blocks[block].bytes, n);
		done += n;
		block = rl_block_next[block];
	}
	return e->keylen;
}

/* ---- entries (partition lock held exclusively) ---- */

/* Pool blocks the entry holds: its key's and its log's. */
uint32
rl_store_entry_blocks(const RlEntry *e)
{
	return key_blocks(e->keylen) +
		(rl_algo(e->algo)->state == RL_STATE_LOG ? e->st.log.nblocks : 0);
}

/*
 * The entry's block count changed by delta, for blocks not taken through
 * rl_store_block_take (which counts them): blocks a log's chain handed
 * back.  Count it for its owner.
 */
void
rl_store_blocks_changed(RlEntry *e, int32 delta)
{
	rl_owner_count(e->owner, true, delta);
}

/*
 * The entry's state is going (a reset): wake the backends queued on it,
 * which then find it gone and queue again, on the key's new state.
 */
static void
waiters_wake(const RlEntry *e)
{
	uint32		idx = entry_index(e);
	int			i;

	for (i = 0; i < rl_store->nwaiters; i++)
		if (rl_waiters[i].entry == idx)
			SetLatch(&GetPGProcByNumber(i)->procLatch);
}

/* Unlink a used entry from its bucket, free its blocks and the entry. */
void
rl_store_remove(int partno, RlEntry *e)
{
	RlPartitionData *part = &rl_store->parts[partno].d;
	uint32		idx = entry_index(e);
	uint32	   *link = rl_store_bucket(partno, e->hash);

	if (rl_algo(e->algo)->state == RL_STATE_SLOTS && e->st.slots.waiting > 0)
		waiters_wake(e);

	while (*link != idx)
		link = &rl_entries[*link].next;
	*link = e->next;

	rl_owner_count(e->owner, true, -(int32) rl_store_entry_blocks(e));
	rl_owner_count(e->owner, false, -1);
	if (e->flags & RL_ENTRY_DURABLE)
		part->durable--;
	pool_push_chain(e->key_more);
	if (rl_algo(e->algo)->state == RL_STATE_LOG)
	{
		RlChain		chain = store_chain();

		rl_log_release(&e->st.log, &chain);
		rl_store_pool_push(chain.freed_first, chain.freed_last, chain.nfreed);
	}

	e->flags = 0;
	e->next = part->free;
	part->free = idx;
	part->used--;
}

/*
 * Take an entry (or a pool block) for the owner within the caps of its
 * role and database.  A role or database at its cap may hold entries that
 * are idle but not reclaimed yet (reclaim runs when room is needed): the
 * call's partition is reclaimed once, looking further than for a full
 * partition (its idle entries may be anywhere), and the cap tried again.
 */
static RlRefusal
take_capped(RlCall *call, uint16 owner, bool blocks)
{
	RlRefusal	why;

	/* a durable key's image put back: what was admitted stays, counted */
	if (call->uncapped)
	{
		rl_owner_count(owner, blocks, 1);
		return RL_REFUSED_NONE;
	}
	why = rl_owner_take(owner, blocks, 1);

	if (why != RL_REFUSED_NONE && call->before != PG_INT64_MIN)
	{
		make_room(call, RL_RECLAIM_SCAN_CAP);
		why = rl_owner_take(owner, blocks, 1);
	}
	return why;
}

/*
 * Has the partition a free entry for the call, outside the room kept for
 * durable keys if it is not for one?
 */
static inline bool
room_free(const RlCall *call, const RlPartitionData *part)
{
	return part->free != RL_NIL &&
		rl_store->per_part - part->used > reserved(call, rl_store->per_part);
}

/*
 * Take a free entry for a new key of the call's owner and link it in,
 * within the caps of the owner's role and database, reclaiming idle
 * entries if the partition is full.  NULL if there is no room
 * (call->refusal says why).
 */
RlEntry *
rl_store_create(RlSlot slot, const RlRequest *req, RlCall *call)
{
	RlPartitionData *part = &rl_store->parts[slot.partno].d;
	uint32	   *bucket;
	uint32		idx;
	RlEntry    *e;
	RlRefusal	why;

	/* the caps first: a call over one is refused for it, store full or not */
	if ((why = take_capped(call, call->owner, false)) == RL_REFUSED_NONE)
	{
		if (!room_free(call, part) && call->before != PG_INT64_MIN)
			make_room(call, RL_RECLAIM_SCAN);
		if (!room_free(call, part) && call->uncapped)
			evict_ordinary(call);
		if (!room_free(call, part))
		{
			rl_owner_count(call->owner, false, -1);
			why = RL_REFUSED_FULL;
		}
	}
	if (why != RL_REFUSED_NONE)
	{
		call->refusal = why;
		call->refused_blocks = false;
		return NULL;
	}

	/* off the free list first: taking key blocks may reclaim onto it */
	idx = part->free;
	e = &rl_entries[idx];
	part->free = e->next;
	e->owner = call->owner;
	if (!key_store(e, req->key, req->keylen, call))
	{
		e->next = part->free;
		part->free = idx;
		rl_owner_count(call->owner, false, -1);
		return NULL;
	}
	part->used++;

	e->hash = slot.hash;
	e->dbid = req->dbid;
	e->algo = (uint8) req->algo;
	e->flags = RL_ENTRY_USED;
	if (req->durable)
	{
		e->flags |= RL_ENTRY_DURABLE;
		part->durable++;
	}
	if (++part->incarnations == 0)
		part->incarnations = 1;
	e->incarnation = part->incarnations;
	memset(&e->st, 0, sizeof(e->st));
	if (rl_algo(req->algo)->state == RL_STATE_LOG)
		rl_log_init(&e->st.log);
	bucket = rl_store_bucket(slot.partno, slot.hash);
	e->next = *bucket;
	*bucket = idx;
	return e;
}

/*
 * Put a saved log's entries (oldest first) into an entry's empty log,
 * taking pool blocks for the call (the state file, a durable image).
 * Returns false, the log emptied again, if a block could not be had.
 */
bool
rl_store_log_fill(RlEntry *e, RlCall *call, const RlLogEntry *log, int nlog)
{
	RlChain		chain = store_chain();
	int			i;

	for (i = 0; i < nlog; i++)
	{
		if (rl_log_append(&e->st.log, &chain, log[i].time, log[i].cost))
			continue;
		chain.spare = rl_store_block_take(call, e->owner);
		if (chain.spare == RL_NIL)
		{
			rl_log_release(&e->st.log, &chain);
			rl_store_chain_freed(e, &chain);
			return false;
		}
		(void) rl_log_append(&e->st.log, &chain, log[i].time, log[i].cost);
	}
	return true;
}

/* ---- reclaim (under the calling partition lock) ---- */

/*
 * Reclaim in the call's partition: free the entries idle since before the
 * call's reclaim time ahead of the clock hand, looking at up to "scan" of
 * them (and the whole partition at most), but for the entry the call is
 * deciding.  A live entry is never dropped, whoever asks.
 */
static void
make_room(const RlCall *call, int scan)
{
	int			partno = call->partno;
	int64		before = call->before;
	RlPartitionData *part = &rl_store->parts[partno].d;
	uint32		base = (uint32) partno * rl_store->per_part;
	int			scanned;
	int			freed = 0;

	scan = (int) Min((uint32) scan, rl_store->per_part);
	for (scanned = 0; scanned < scan && freed < RL_RECLAIM_FREE; scanned++)
	{
		RlEntry    *e = &rl_entries[base + part->hand];

		if (++part->hand == rl_store->per_part)
			part->hand = 0;
		/* a durable key stays until reset: a quota's idle tenant too */
		if ((e->flags & (RL_ENTRY_USED | RL_ENTRY_DURABLE)) != RL_ENTRY_USED)
			continue;
		if (e->idle_at <= before && e != call->busy)
		{
			rl_store_remove(partno, e);
			freed++;
		}
	}
	part->reclaimed += freed;
}

/*
 * A durable image put back (redo, the durable file) found the pool full:
 * drop ordinary keys holding blocks (a log's, a long key's), live or not,
 * each partition under its own lock, until at least n blocks are free.
 * No lock held.  Returns whether they are.
 */
bool
rl_store_free_blocks(uint32 n)
{
	int			partno;

	for (partno = 0; partno < rl_store->nparts; partno++)
	{
		uint32		base = (uint32) partno * rl_store->per_part;
		uint32		j;

		if (pool_free_count() >= n)
			return true;
		rl_part_lock(partno, LW_EXCLUSIVE);
		for (j = 0; j < rl_store->per_part && pool_free_count() < n; j++)
		{
			RlEntry    *e = &rl_entries[base + j];

			if ((e->flags & (RL_ENTRY_USED | RL_ENTRY_DURABLE)) ==
				RL_ENTRY_USED && rl_store_entry_blocks(e) > 0)
			{
				rl_store_remove(partno, e);
				rl_store->parts[partno].d.reclaimed++;
			}
		}
		rl_part_unlock(partno);
	}
	return pool_free_count() >= n;
}

/*
 * A durable image put back (redo, the durable file) finds its partition
 * full: evict an ordinary key, live or not.  Replay must not stop for
 * keys a crash would have lost anyway (a standby's own ordinary calls, the
 * state file of a clean start); only durable keys filling the partition
 * stop it.
 */
static void
evict_ordinary(const RlCall *call)
{
	int			partno = call->partno;
	uint32		base = (uint32) partno * rl_store->per_part;
	uint32		j;

	for (j = 0; j < rl_store->per_part; j++)
	{
		RlEntry    *e = &rl_entries[base + j];

		if ((e->flags & (RL_ENTRY_USED | RL_ENTRY_DURABLE)) == RL_ENTRY_USED &&
			e != call->busy)
		{
			rl_store_remove(partno, e);
			rl_store->parts[partno].d.reclaimed++;
			return;
		}
	}
}

/*
 * A free pool block for an entry of the given owner, counted for it, or
 * RL_NIL (call->refusal says why): within the caps of the owner's role and
 * database, if the pool has one free.
 */
uint32
rl_store_block_take(RlCall *call, uint16 owner)
{
	uint32		block = pool_pop(reserved(call, rl_store->nblocks));
	RlRefusal	why = RL_REFUSED_POOL;

	/* a full pool first: a cap refuses only what the pool could give */
	if (block != RL_NIL &&
		(why = take_capped(call, owner, true)) != RL_REFUSED_NONE)
	{
		rl_store_pool_push(block, block, 1);
		block = RL_NIL;
	}
	if (block == RL_NIL)
	{
		call->refusal = why;
		call->refused_blocks = true;
	}
	return block;
}
