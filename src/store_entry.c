/*-------------------------------------------------------------------------
 *
 * store_entry.c
 *		The store's entries, their keys and the pool: creating an entry
 *		(making room for it: reclaim and eviction), removing one, and the
 *		pool blocks of long keys and logs.
 *
 * Everything here runs under the partition lock of the entry concerned,
 * held exclusively (store.c has the locking contract): no allocation, no
 * ereport, no I/O.  The pool's spinlock is taken inside, for a handful of
 * instructions; another partition's lock only with
 * LWLockConditionalAcquire, to evict a pool-block holder there.  Who may
 * evict whom is store_owner.c's: the fair shares.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "store_int.h"

static void make_room(int partno, int64 before, const RlCall *call);

/* ---- the pool (spinlock held only to pop or push) ---- */

/*
 * A free block, or RL_NIL; the reserve only if allowed.
 */
uint32
rl_store_pool_pop(bool reserve_ok)
{
	uint32		block = RL_NIL;

	SpinLockAcquire(&rl_store->pool_lock);
	if (rl_store->pool_nfree > (reserve_ok ? 0 : rl_store->pool_reserve))
	{
		block = rl_store->pool_free;
		rl_store->pool_free = rl_block_next[block];
		rl_store->pool_nfree--;
	}
	SpinLockRelease(&rl_store->pool_lock);
	return block;
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
 * Copy the key into the entry, taking pool blocks (for the entry's owner)
 * for the bytes past the inline part.  Returns false (holding no block) if
 * there are not enough.
 */
static bool
key_store(RlEntry *e, const char *key, int keylen, RlCall *call)
{
	int			n = Min(keylen, RL_KEY_INLINE);
	uint32	   *link = &e->key_more;

	memcpy(e->key, key, n);
	e->keylen = keylen;
	*link = RL_NIL;
	for (key += n, keylen -= n; keylen > 0; key += n, keylen -= n)
	{
		uint32		block = rl_store_block_take(call, e->owner);

		if (block == RL_NIL)
		{
			pool_push_chain(e->key_more);
			e->key_more = RL_NIL;
			return false;
		}
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

/* The entry's block count changed by delta: count it for its owner. */
void
rl_store_blocks_changed(RlEntry *e, int32 delta)
{
	if (delta == 0)
		return;
	rl_owner_count(e->owner, true, delta);
	rl_owner_hint(e->owner, entry_index(e), rl_store_entry_blocks(e));
}

/* Unlink a used entry from its bucket, free its blocks and the entry. */
void
rl_store_remove(int partno, RlEntry *e)
{
	RlPartitionData *part = &rl_store->parts[partno].d;
	uint32		idx = entry_index(e);
	uint32	   *link = rl_store_bucket(partno, e->hash);

	while (*link != idx)
		link = &rl_entries[*link].next;
	*link = e->next;

	rl_owner_count(e->owner, true, -(int32) rl_store_entry_blocks(e));
	rl_owner_hint(e->owner, idx, 0);
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
 * Take a free entry for a new key of the call's owner and link it in,
 * making room if the partition is full (entries idle since before
 * "before", or an eviction).  NULL if there is no room.
 */
RlEntry *
rl_store_create(RlSlot slot, const RlRequest *req, int64 before,
				RlCall *call)
{
	RlPartitionData *part = &rl_store->parts[slot.partno].d;
	uint32	   *bucket;
	uint32		idx;
	RlEntry    *e;

	if (part->free == RL_NIL)
		make_room(slot.partno, before, call);
	if (part->free == RL_NIL)
		return NULL;

	/* off the free list first: taking key blocks may evict onto it */
	idx = part->free;
	e = &rl_entries[idx];
	part->free = e->next;
	e->owner = call->owner;
	if (!key_store(e, req->key, req->keylen, call))
	{
		e->next = part->free;
		part->free = idx;
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
	rl_owner_count(e->owner, false, 1);
	rl_store_blocks_changed(e, (int32) key_blocks(e->keylen));
	return e;
}

/* ---- reclaim and eviction (under the calling partition lock) ---- */

/* Drop a live entry to make room for an owner under its share. */
static void
entry_evict(int partno, RlEntry *e)
{
	rl_store->parts[partno].d.evicted++;
	pg_atomic_fetch_add_u64(&rl_owner_slots[e->owner].evicted, 1);
	rl_store_remove(partno, e);
}

/*
 * Make room in a full partition: free the entries idle since before
 * "before" ahead of the clock hand, looking at a bounded number of them.
 * If none is idle and the call's owner holds less than its fair share of
 * the entries, evict the entry closest to idle among those looked at whose
 * owners hold more than theirs (its state is the nearest to a new key's).
 */
static void
make_room(int partno, int64 before, const RlCall *call)
{
	RlPartitionData *part = &rl_store->parts[partno].d;
	uint32		base = (uint32) partno * rl_store->per_part;
	RlShares	sh;
	bool		may_evict;
	RlEntry    *candidate = NULL;
	int			scanned;
	int			freed = 0;

	rl_owner_shares(&sh, call->owner, false);
	may_evict = !call->restoring && rl_owner_under(&sh, call->owner);
	for (scanned = 0; scanned < RL_RECLAIM_SCAN && freed < RL_RECLAIM_FREE;
		 scanned++)
	{
		RlEntry    *e = &rl_entries[base + part->hand];

		if (++part->hand == rl_store->per_part)
			part->hand = 0;
		/* a durable key stays until reset: a quota's idle tenant too */
		if ((e->flags & (RL_ENTRY_USED | RL_ENTRY_DURABLE)) != RL_ENTRY_USED)
			continue;
		if (e->idle_at <= before)
		{
			rl_store_remove(partno, e);
			freed++;
		}
		else if (may_evict && e != call->busy &&
				 (candidate == NULL || e->idle_at < candidate->idle_at) &&
				 rl_owner_evictable(&sh, e->owner))
			candidate = e;
	}
	part->reclaimed += freed;
	if (freed == 0 && candidate != NULL)
		entry_evict(partno, candidate);
}

/*
 * Evict the block holder the owner's hint names, if it is still one of the
 * owner's and not the entry being decided.  Its partition lock is taken
 * only if it is free at once, unless the call holds it already.  Returns
 * whether an entry was evicted.
 */
static bool
evict_hinted(const RlCall *call, uint16 owner)
{
	uint64		hint = pg_atomic_read_u64(&rl_owner_slots[owner].hint);
	uint32		idx;
	int			partno;
	RlEntry    *e;
	bool		locked = false;
	bool		evicted = false;

	if (hint == 0)
		return false;
	idx = HINT_ENTRY(hint);
	partno = (int) (idx / rl_store->per_part);
	e = &rl_entries[idx];
	if (!call_holds(call, partno))
	{
		if (!LWLockConditionalAcquire(&rl_locks[partno].lock, LW_EXCLUSIVE))
			return false;
		locked = true;
	}
	if ((e->flags & (RL_ENTRY_USED | RL_ENTRY_DURABLE)) == RL_ENTRY_USED &&
		e->owner == owner && e != call->busy && rl_store_entry_blocks(e) > 0)
	{
		entry_evict(partno, e);
		evicted = true;
	}
	if (locked)
		LWLockRelease(&rl_locks[partno].lock);
	return evicted;
}

/*
 * Evict the entry with the most pool blocks, of an owner whose blocks may
 * be evicted, among the entries the clock hand of the call's partition
 * looks at next.  Returns whether an entry was evicted.
 */
static bool
evict_nearby(const RlCall *call, const RlShares *sh)
{
	RlPartitionData *part = &rl_store->parts[call->partno].d;
	uint32		base = (uint32) call->partno * rl_store->per_part;
	uint32		pos = part->hand;
	RlEntry    *best = NULL;
	uint32		best_blocks = 0;
	int			n;

	for (n = 0; n < RL_RECLAIM_SCAN && n < (int) rl_store->per_part; n++)
	{
		RlEntry    *e = &rl_entries[base + pos];
		uint32		blocks;

		if (++pos == rl_store->per_part)
			pos = 0;
		if ((e->flags & (RL_ENTRY_USED | RL_ENTRY_DURABLE)) != RL_ENTRY_USED ||
			e == call->busy)
			continue;
		blocks = rl_store_entry_blocks(e);
		if (blocks > best_blocks && rl_owner_evictable(sh, e->owner))
		{
			best = e;
			best_blocks = blocks;
		}
	}
	if (best == NULL)
		return false;
	entry_evict(call->partno, best);
	return true;
}

/*
 * The pool is empty and an owner under its fair share needs a block: evict
 * a block holder of the evictable owner holding most blocks, the one its
 * hint names, or else one near the call's partition's hand.  Returns
 * whether blocks were freed.
 */
static bool
block_evict(const RlCall *call, const RlShares *sh)
{
	int			best = -1;
	uint32		best_held = 0;
	int			i;

	for (i = 0; i < rl_store->nowners; i++)
	{
		uint32		held = rl_owner_held((uint16) i, true);

		if (held > best_held &&
			pg_atomic_read_u64(&rl_owner_slots[i].hint) != 0 &&
			rl_owner_evictable(sh, (uint16) i))
		{
			best = i;
			best_held = held;
		}
	}
	if (best >= 0 && evict_hinted(call, (uint16) best))
		return true;
	return evict_nearby(call, sh);
}

/*
 * A free pool block for an entry of the given owner, or RL_NIL.  An owner
 * at or over its fair share of the pool may not take the reserve; one
 * under it may, and if the pool is empty it evicts a block holder of an
 * owner over its share.  Restoring takes any free block.
 */
uint32
rl_store_block_take(RlCall *call, uint16 owner)
{
	RlShares	sh;
	bool		under;
	uint32		block;

	if (call->restoring)
		return rl_store_pool_pop(true);
	rl_owner_shares(&sh, owner, true);
	under = rl_owner_under(&sh, owner);
	block = rl_store_pool_pop(under);
	if (block == RL_NIL && under && block_evict(call, &sh))
		block = rl_store_pool_pop(true);
	return block;
}
