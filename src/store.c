/*-------------------------------------------------------------------------
 *
 * store.c
 *		The shared-memory store: per-key state for the five algorithms.
 *
 * Layout (sized once at postmaster start from ratelimit.max_keys and
 * ratelimit.pool_size; see docs/design.md):
 *
 *	RlStoreHeader	 settings as laid out, the pool's free list
 *	RlPartition[n]	 per partition: free list, reclaim hand, counters
 *	RlEntry[]		 max_keys entries, split evenly between partitions
 *	uint32[]		 hash buckets (chain heads), per partition
 *	RlBlock[]		 the pool: 64-byte blocks for sliding-log entries and
 *					 for the bytes of keys longer than RL_KEY_INLINE
 *	uint32[]		 the pool's chain links, parallel to the blocks
 *
 * An entry's identity is (database, algorithm, key bytes); its 64-bit hash
 * picks a partition and a bucket, and the full key is always compared, so
 * two keys never share state.  Each partition is a self-contained table
 * with its own entries, so unrelated keys proceed in parallel.
 *
 * Locking contract:
 *	- Every access to a partition's buckets, entries and counters holds that
 *	  partition's LWLock; exclusively to change anything (every decision
 *	  changes its entry), shared to read.
 *	- The pool's free list and counters are protected by the pool spinlock,
 *	  held only to pop or push a chain.  Blocks reachable from an entry
 *	  belong to that entry's partition and are covered by its LWLock.
 *	- Under either lock: no allocation, no ereport, no I/O.  The clock is
 *	  read before the lock is taken.
 *
 * Reclaim: an entry whose state is back to that of a new key (its idle_at
 * has passed) can be dropped without changing any decision.  When a
 * partition has no free entry, the inserting call advances the partition's
 * clock hand over a bounded number of entries and frees those idle since
 * before both the real clock and the call's time, less a margin (a caller
 * delayed between reading the clock and taking the lock, or replaying
 * events with "at", must still find a key it could use): the work is
 * bounded per call and there is never a pass over the whole store.
 * When nothing can be freed the call gets RL_NO_ROOM and the caller
 * applies ratelimit.fail_mode.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "guc.h"
#include "store.h"

#define RL_TRANCHE			"ratelimit"
#define RL_MAX_PARTITIONS	128
#define RL_KEYS_PER_PARTITION_MIN 256
#define RL_KEY_INLINE		56

/* reclaim: entries looked at, and freed at most, by one inserting call */
#define RL_RECLAIM_SCAN		256
#define RL_RECLAIM_FREE		32

/*
 * An entry is reclaimed only once it has been idle this long (us) before
 * the inserting call's time: a caller that read the clock earlier and
 * reached the lock late must still find the key's state.
 */
#define RL_RECLAIM_MARGIN	(10 * USECS_PER_SEC)

/* RlEntry.flags */
#define RL_ENTRY_USED		0x01

typedef struct RlEntry
{
	uint64		hash;
	int64		last;			/* latest time this key has seen (clamp) */
	int64		idle_at;		/* from then on the state equals a new key's */
	union
	{
		RlWindowState window;
		RlBucketState bucket;
		RlLogState	log;
	}			st;
	uint32		next;			/* bucket chain, or free list */
	Oid			dbid;
	uint32		key_more;		/* pool blocks with key bytes past the
								 * inline part, or RL_NIL */
	uint16		keylen;
	uint8		algo;
	uint8		flags;
	char		key[RL_KEY_INLINE];
} RlEntry;

StaticAssertDecl(sizeof(RlEntry) == 128 - 8,
				 "RlEntry plus its bucket slot should stay under 128 bytes");

typedef struct RlPartitionData
{
	uint32		free;			/* free entries, linked by next */
	uint32		hand;			/* next entry (offset) reclaim looks at */
	uint32		used;
	uint64		reclaimed;
	uint64		refused;
} RlPartitionData;

/* one cache line each: partitions are written under different locks */
typedef union RlPartition
{
	RlPartitionData d;
	char		pad[PG_CACHE_LINE_SIZE];
} RlPartition;

typedef struct RlStoreHeader
{
	int			nparts;			/* a power of two */
	uint32		per_part;		/* entries (and buckets) per partition */
	uint32		nblocks;		/* pool size */
	slock_t		pool_lock;
	uint32		pool_free;		/* free blocks, linked by pool_next */
	uint32		pool_nfree;
	RlPartition parts[FLEXIBLE_ARRAY_MEMBER];
} RlStoreHeader;

/* Pointers into shared memory, set by rl_store_startup in every process. */
static RlStoreHeader *rl_store = NULL;
static LWLockPadded *rl_locks;
static RlEntry *rl_entries;
static uint32 *rl_buckets;
static RlBlock *rl_blocks;
static uint32 *rl_block_next;

/* Layout derived from the settings; the same in every process. */
static int
layout_partitions(void)
{
	int			n = 1;

	while (n < RL_MAX_PARTITIONS &&
		   (int64) n * 2 * RL_KEYS_PER_PARTITION_MIN <= rl_max_keys)
		n *= 2;
	return n;
}

static uint32
layout_per_part(int nparts)
{
	return (uint32) ((rl_max_keys + nparts - 1) / nparts);
}

static uint32
layout_blocks(void)
{
	return (uint32) ((int64) rl_pool_size * 1024 /
					 (sizeof(RlBlock) + sizeof(uint32)));
}

static Size
store_size(void)
{
	int			nparts = layout_partitions();
	Size		nentries = (Size) nparts * layout_per_part(nparts);
	Size		size;

	size = MAXALIGN(offsetof(RlStoreHeader, parts) +
					sizeof(RlPartition) * nparts);
	size = add_size(size, mul_size(nentries, sizeof(RlEntry)));
	size = add_size(size, MAXALIGN(mul_size(nentries, sizeof(uint32))));
	size = add_size(size, mul_size(layout_blocks(), sizeof(RlBlock)));
	size = add_size(size, MAXALIGN(mul_size(layout_blocks(), sizeof(uint32))));
	return size;
}

/*
 * Ask for shared memory and locks (shmem_request_hook).
 */
void
rl_store_request(void)
{
	RequestAddinShmemSpace(store_size());
	RequestNamedLWLockTranche(RL_TRANCHE, layout_partitions());
}

/*
 * Attach to the store, creating it on first call (shmem_startup_hook; the
 * caller holds AddinShmemInitLock).  Returns whether it was created.
 */
bool
rl_store_startup(void)
{
	int			nparts = layout_partitions();
	uint32		per_part = layout_per_part(nparts);
	Size		nentries = (Size) nparts * per_part;
	uint32		nblocks = layout_blocks();
	bool		found;
	char	   *p;
	int			i;

	p = ShmemInitStruct("ratelimit store", store_size(), &found);
	rl_store = (RlStoreHeader *) p;
	p += MAXALIGN(offsetof(RlStoreHeader, parts) +
				  sizeof(RlPartition) * nparts);
	rl_entries = (RlEntry *) p;
	p += nentries * sizeof(RlEntry);
	rl_buckets = (uint32 *) p;
	p += MAXALIGN(nentries * sizeof(uint32));
	rl_blocks = (RlBlock *) p;
	p += (Size) nblocks * sizeof(RlBlock);
	rl_block_next = (uint32 *) p;
	rl_locks = GetNamedLWLockTranche(RL_TRANCHE);

	if (found)
		return false;

	rl_store->nparts = nparts;
	rl_store->per_part = per_part;
	rl_store->nblocks = nblocks;
	SpinLockInit(&rl_store->pool_lock);
	rl_store->pool_free = nblocks > 0 ? 0 : RL_NIL;
	rl_store->pool_nfree = nblocks;
	for (i = 0; i < (int) nblocks; i++)
		rl_block_next[i] = i + 1 < (int) nblocks ? (uint32) i + 1 : RL_NIL;

	for (i = 0; i < nparts; i++)
	{
		RlPartitionData *part = &rl_store->parts[i].d;
		uint32		base = (uint32) i * per_part;
		uint32		j;

		part->free = base;
		part->hand = 0;
		part->used = 0;
		part->reclaimed = 0;
		part->refused = 0;
		for (j = 0; j < per_part; j++)
		{
			rl_entries[base + j].flags = 0;
			rl_entries[base + j].next = j + 1 < per_part ? base + j + 1 : RL_NIL;
			rl_buckets[base + j] = RL_NIL;
		}
	}
	return true;
}

bool
rl_store_ready(void)
{
	return rl_store != NULL;
}

/* ---- the pool (spinlock held only to pop or push) ---- */

static uint32
pool_pop(void)
{
	uint32		block;

	SpinLockAcquire(&rl_store->pool_lock);
	block = rl_store->pool_free;
	if (block != RL_NIL)
	{
		rl_store->pool_free = rl_block_next[block];
		rl_store->pool_nfree--;
	}
	SpinLockRelease(&rl_store->pool_lock);
	return block;
}

/* Give back n blocks already linked from first to last. */
static void
pool_push(uint32 first, uint32 last, uint32 n)
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
	pool_push(first, last, n);
}

/* ---- keys ---- */

static uint64
key_hash(Oid dbid, RlAlgo algo, const char *key, int keylen)
{
	return hash_bytes_extended((const unsigned char *) key, keylen,
							   ((uint64) dbid << 8) | (uint64) algo);
}

/* Does the entry hold exactly this key? */
static bool
key_equal(const RlEntry *e, const char *key, int keylen)
{
	int			n = Min(keylen, RL_KEY_INLINE);
	uint32		block = e->key_more;

	if (e->keylen != keylen || memcmp(e->key, key, n) != 0)
		return false;
	for (key += n, keylen -= n; keylen > 0; key += n, keylen -= n)
	{
		n = Min(keylen, RL_BLOCK_SIZE);
		if (memcmp(rl_blocks[block].bytes, key, n) != 0)
			return false;
		block = rl_block_next[block];
	}
	return true;
}

/*
 * Copy the key into the entry, taking pool blocks for the bytes past the
 * inline part.  Returns false (holding no block) if the pool is empty.
 */
static bool
key_store(RlEntry *e, const char *key, int keylen)
{
	int			n = Min(keylen, RL_KEY_INLINE);
	uint32	   *link = &e->key_more;

	memcpy(e->key, key, n);
	e->keylen = keylen;
	*link = RL_NIL;
	for (key += n, keylen -= n; keylen > 0; key += n, keylen -= n)
	{
		uint32		block = pool_pop();

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

/* ---- entries (partition lock held exclusively) ---- */

static inline uint32 *
bucket_of(int partno, uint64 hash)
{
	uint32		per_part = rl_store->per_part;

	return &rl_buckets[(uint32) partno * per_part +
					   (uint32) ((hash >> 32) % per_part)];
}

static RlEntry *
entry_find(int partno, uint64 hash, Oid dbid, RlAlgo algo,
		   const char *key, int keylen)
{
	uint32		i;

	for (i = *bucket_of(partno, hash); i != RL_NIL; i = rl_entries[i].next)
	{
		RlEntry    *e = &rl_entries[i];

		if (e->hash == hash && e->dbid == dbid && e->algo == algo &&
			key_equal(e, key, keylen))
			return e;
	}
	return NULL;
}

/* Unlink a used entry from its bucket, free its blocks and the entry. */
static void
entry_remove(int partno, RlEntry *e)
{
	RlPartitionData *part = &rl_store->parts[partno].d;
	uint32		idx = (uint32) (e - rl_entries);
	uint32	   *link = bucket_of(partno, e->hash);

	while (*link != idx)
		link = &rl_entries[*link].next;
	*link = e->next;

	pool_push_chain(e->key_more);
	if (e->algo == RL_SLIDING_WINDOW_LOG && e->st.log.nblocks > 0)
		pool_push(e->st.log.head, e->st.log.tail, e->st.log.nblocks);

	e->flags = 0;
	e->next = part->free;
	part->free = idx;
	part->used--;
}

/*
 * Free entries idle since before "before", ahead of the partition's clock
 * hand, looking at a bounded number of them.
 */
static void
partition_reclaim(int partno, int64 before)
{
	RlPartitionData *part = &rl_store->parts[partno].d;
	uint32		base = (uint32) partno * rl_store->per_part;
	int			scanned;
	int			freed = 0;

	for (scanned = 0; scanned < RL_RECLAIM_SCAN && freed < RL_RECLAIM_FREE;
		 scanned++)
	{
		RlEntry    *e = &rl_entries[base + part->hand];

		if (++part->hand == rl_store->per_part)
			part->hand = 0;
		if ((e->flags & RL_ENTRY_USED) && e->idle_at <= before)
		{
			entry_remove(partno, e);
			freed++;
		}
	}
	part->reclaimed += freed;
}

/*
 * Take a free entry for a new key and link it in, reclaiming entries idle
 * since before "before" if the partition is full.  NULL if there is no
 * room.
 */
static RlEntry *
entry_create(int partno, uint64 hash, const RlRequest *req, int64 before)
{
	RlPartitionData *part = &rl_store->parts[partno].d;
	uint32	   *bucket = bucket_of(partno, hash);
	uint32		idx;
	RlEntry    *e;

	if (part->free == RL_NIL)
		partition_reclaim(partno, before);
	if (part->free == RL_NIL)
		return NULL;

	idx = part->free;
	e = &rl_entries[idx];
	if (!key_store(e, req->key, req->keylen))
		return NULL;
	part->free = e->next;
	part->used++;

	e->hash = hash;
	e->dbid = req->dbid;
	e->algo = (uint8) req->algo;
	e->flags = RL_ENTRY_USED;
	e->next = *bucket;
	*bucket = idx;
	return e;
}

/*
 * Run the entry's algorithm.  Returns false if a sliding log needed a
 * block and the pool had none (the entry is then unchanged but for expired
 * log entries).
 */
static bool
entry_decide(RlEntry *e, bool fresh, int64 t, const RlParams *p,
			 RlDecision *d)
{
	switch ((RlAlgo) e->algo)
	{
		case RL_FIXED_WINDOW:
			rl_fixed_window(&e->st.window, fresh, t, p, d);
			break;
		case RL_SLIDING_WINDOW_COUNTER:
			rl_sliding_window_counter(&e->st.window, fresh, t, p, d);
			break;
		case RL_TOKEN_BUCKET:
			rl_token_bucket(&e->st.bucket, fresh, t, e->last, p, d);
			break;
		case RL_LEAKY_BUCKET:
			rl_leaky_bucket(&e->st.bucket, fresh, t, e->last, p, d);
			break;
		case RL_SLIDING_WINDOW_LOG:
			{
				RlLogMemory m;
				bool		ok;

				if (fresh)
					rl_log_init(&e->st.log);
				m.blocks = rl_blocks;
				m.next = rl_block_next;
				m.spare = RL_NIL;
				ok = rl_sliding_window_log(&e->st.log, &m, t, p, d);
				pool_push(m.freed_first, m.freed_last, m.nfreed);
				if (!ok && (m.spare = pool_pop()) != RL_NIL)
				{
					/* it must append to a full tail: again, with a block */
					ok = rl_sliding_window_log(&e->st.log, &m, t, p, d);
					Assert(ok && m.spare == RL_NIL && m.nfreed == 0);
				}
				return ok;
			}
		default:
			Assert(false);
	}
	return true;
}

/*
 * A new key's decision, for a call that consumes nothing: the state after
 * it equals a new key's, so nothing is stored (and no pool block is used).
 */
static void
fresh_decide(const RlRequest *req, int64 t, RlDecision *d)
{
	RlEntry		e;

	e.algo = (uint8) req->algo;
	e.last = t;
	(void) entry_decide(&e, true, t, &req->params, d);
}

/* Where a request's key lives. */
typedef struct RlSlot
{
	uint64		hash;
	int			partno;
} RlSlot;

static RlSlot
slot_of(const RlRequest *req)
{
	RlSlot		slot;

	slot.hash = key_hash(req->dbid, req->algo, req->key, req->keylen);
	slot.partno = (int) (slot.hash & (uint64) (rl_store->nparts - 1));
	return slot;
}

static inline LWLock *
slot_lock(RlSlot slot)
{
	return &rl_locks[slot.partno].lock;
}

/*
 * Decide one request; the slot's partition lock is held exclusively.
 */
static RlStatus
decide_locked(const RlRequest *req, RlSlot slot, int64 now, RlDecision *d)
{
	int64		t = req->at == RL_NO_TIME ? now : req->at;
	RlStatus	status = RL_OK;
	RlEntry    *e;

	e = entry_find(slot.partno, slot.hash, req->dbid, req->algo, req->key,
				   req->keylen);
	if (e != NULL)
	{
		if (t < e->last)
			t = e->last;
		if (!entry_decide(e, false, t, &req->params, d))
			status = RL_NO_ROOM;
		e->last = t;
	}
	else if (req->params.cost == 0)
		fresh_decide(req, t, d);
	else if ((e = entry_create(slot.partno, slot.hash, req,
							   Min(now, t) - RL_RECLAIM_MARGIN)) == NULL)
		status = RL_NO_ROOM;
	else
	{
		e->last = t;
		if (!entry_decide(e, true, t, &req->params, d))
		{
			entry_remove(slot.partno, e);
			status = RL_NO_ROOM;
		}
	}
	if (status == RL_OK && e != NULL)
		e->idle_at = d->reset_at;
	if (status == RL_NO_ROOM)
		rl_store->parts[slot.partno].d.refused++;
	d->time = t;
	d->stored = status == RL_OK && e != NULL;
	return status;
}

/*
 * Give back cost units the request consumed at time t; the slot's
 * partition lock is held exclusively.  A key that is gone (reset, or
 * reclaimed once idle) has nothing to give back.
 */
static void
refund_locked(const RlRequest *req, RlSlot slot, int64 t, int64 cost)
{
	const RlParams *p = &req->params;
	RlEntry    *e;

	e = entry_find(slot.partno, slot.hash, req->dbid, req->algo, req->key,
				   req->keylen);
	if (e == NULL)
		return;
	switch ((RlAlgo) e->algo)
	{
		case RL_FIXED_WINDOW:
			rl_fixed_window_refund(&e->st.window, t, p, cost);
			break;
		case RL_SLIDING_WINDOW_COUNTER:
			rl_sliding_window_counter_refund(&e->st.window, t, p, cost);
			break;
		case RL_TOKEN_BUCKET:
			rl_token_bucket_refund(&e->st.bucket, p, cost);
			break;
		case RL_LEAKY_BUCKET:
			rl_leaky_bucket_refund(&e->st.bucket, p, cost);
			break;
		case RL_SLIDING_WINDOW_LOG:
			{
				RlLogMemory m;

				m.blocks = rl_blocks;
				m.next = rl_block_next;
				rl_log_refund(&e->st.log, &m, t, cost);
				pool_push(m.freed_first, m.freed_last, m.nfreed);
				break;
			}
		default:
			Assert(false);
	}
}

/*
 * Decide one request against the shared-memory state.  "now" is the real
 * clock, read by the caller before any lock: it is the call's time unless
 * "at" was given, and the time reclaim compares idle_at with.  The key's
 * time never runs backwards; d->time reports the time used.
 */
RlStatus
rl_store_decide(const RlRequest *req, int64 now, RlDecision *d)
{
	RlSlot		slot = slot_of(req);
	RlStatus	status;

	LWLockAcquire(slot_lock(slot), LW_EXCLUSIVE);
	status = decide_locked(req, slot, now, d);
	LWLockRelease(slot_lock(slot));
	return status;
}

/*
 * Give back what a decision at time t consumed (see refund_locked).
 */
void
rl_store_refund(const RlRequest *req, int64 t, int64 cost)
{
	RlSlot		slot = slot_of(req);

	LWLockAcquire(slot_lock(slot), LW_EXCLUSIVE);
	refund_locked(req, slot, t, cost);
	LWLockRelease(slot_lock(slot));
}

static int
partno_cmp(const void *a, const void *b)
{
	return *(const int *) a - *(const int *) b;
}

/*
 * Decide n requests all or nothing: every one consumes, or none does.
 * The partitions involved are locked together, in ascending order (so two
 * such calls cannot deadlock), for the whole operation.  A request admits
 * if it is allowed or a shadow, or if it cannot be tracked and fail_open[i]
 * (its decision is then left for the caller: status RL_NO_ROOM).  If any
 * does not admit, what the others consumed is given back and their
 * decisions are made again with cost 0, so each reports whether it would
 * have admitted and its state afterwards.
 * Returns whether all were admitted.  n is at most RL_MAX_MULTI.
 */
bool
rl_store_decide_all(const RlRequest *reqs, int n, int64 now,
					const bool *fail_open, RlDecision *ds, RlStatus *statuses)
{
	RlSlot		slots[RL_MAX_MULTI];
	int			partnos[RL_MAX_MULTI];
	int			nparts = 0;
	bool		all = true;
	int			i;

	Assert(n > 0 && n <= RL_MAX_MULTI);
	for (i = 0; i < n; i++)
	{
		slots[i] = slot_of(&reqs[i]);
		partnos[i] = slots[i].partno;
	}
	qsort(partnos, n, sizeof(int), partno_cmp);
	for (i = 0; i < n; i++)
		if (nparts == 0 || partnos[nparts - 1] != partnos[i])
			partnos[nparts++] = partnos[i];

	for (i = 0; i < nparts; i++)
		LWLockAcquire(&rl_locks[partnos[i]].lock, LW_EXCLUSIVE);

	for (i = 0; i < n; i++)
	{
		statuses[i] = decide_locked(&reqs[i], slots[i], now, &ds[i]);
		if (statuses[i] == RL_OK ? !ds[i].allowed && !reqs[i].shadow :
			!fail_open[i])
			all = false;
	}
	if (!all)
	{
		for (i = 0; i < n; i++)
		{
			RlRequest	look = reqs[i];

			if (statuses[i] != RL_OK || !ds[i].allowed)
				continue;
			refund_locked(&reqs[i], slots[i], ds[i].time, reqs[i].params.cost);
			look.params.cost = 0;
			look.at = ds[i].time;
			(void) decide_locked(&look, slots[i], now, &ds[i]);
		}
	}

	for (i = nparts - 1; i >= 0; i--)
		LWLockRelease(&rl_locks[partnos[i]].lock);
	return all;
}

/*
 * Drop the state of one key for one algorithm, or for all of them.
 * Returns the number of states dropped.
 */
int64
rl_store_reset(Oid dbid, const char *key, int keylen, bool all_algos,
			   RlAlgo algo)
{
	int64		dropped = 0;
	int			a;

	for (a = 0; a < RL_NUM_ALGOS; a++)
	{
		uint64		hash;
		int			partno;
		LWLock	   *lock;
		RlEntry    *e;

		if (!all_algos && a != (int) algo)
			continue;
		hash = key_hash(dbid, (RlAlgo) a, key, keylen);
		partno = (int) (hash & (uint64) (rl_store->nparts - 1));
		lock = &rl_locks[partno].lock;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		e = entry_find(partno, hash, dbid, (RlAlgo) a, key, keylen);
		if (e != NULL)
		{
			entry_remove(partno, e);
			dropped++;
		}
		LWLockRelease(lock);
	}
	return dropped;
}

/*
 * Drop every state of one database, or of all (InvalidOid), one partition
 * at a time.
 */
int64
rl_store_reset_all(Oid dbid)
{
	int64		dropped = 0;
	int			partno;

	for (partno = 0; partno < rl_store->nparts; partno++)
	{
		uint32		base = (uint32) partno * rl_store->per_part;
		uint32		j;

		LWLockAcquire(&rl_locks[partno].lock, LW_EXCLUSIVE);
		for (j = 0; j < rl_store->per_part; j++)
		{
			RlEntry    *e = &rl_entries[base + j];

			if ((e->flags & RL_ENTRY_USED) &&
				(dbid == InvalidOid || e->dbid == dbid))
			{
				entry_remove(partno, e);
				dropped++;
			}
		}
		LWLockRelease(&rl_locks[partno].lock);
	}
	return dropped;
}

/*
 * Store-wide figures; each partition is read under its shared lock.
 */
void
rl_store_stats(RlStoreStats *stats)
{
	int			partno;

	memset(stats, 0, sizeof(*stats));
	stats->partitions = rl_store->nparts;
	stats->capacity = (int64) rl_store->nparts * rl_store->per_part;
	for (partno = 0; partno < rl_store->nparts; partno++)
	{
		RlPartitionData *part = &rl_store->parts[partno].d;

		LWLockAcquire(&rl_locks[partno].lock, LW_SHARED);
		stats->used += part->used;
		stats->reclaimed += part->reclaimed;
		stats->refused += part->refused;
		LWLockRelease(&rl_locks[partno].lock);
	}
	SpinLockAcquire(&rl_store->pool_lock);
	stats->pool_blocks = rl_store->nblocks;
	stats->pool_used = rl_store->nblocks - rl_store->pool_nfree;
	SpinLockRelease(&rl_store->pool_lock);
}

/* ---- listing, saving and restoring entries ---- */

/* The key of an entry, copied out; the partition lock is held. */
static int
key_copy(const RlEntry *e, char *out)
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

uint32
rl_store_nentries(void)
{
	return (uint32) rl_store->nparts * rl_store->per_part;
}

/*
 * Copy entry number idx if it holds state of database dbid (or of any
 * database if InvalidOid).  Takes its partition lock shared, briefly.
 */
bool
rl_store_key_at(uint32 idx, Oid dbid, RlKeyImage *img)
{
	int			partno = (int) (idx / rl_store->per_part);
	RlEntry    *e = &rl_entries[idx];
	bool		found = false;

	LWLockAcquire(&rl_locks[partno].lock, LW_SHARED);
	if ((e->flags & RL_ENTRY_USED) &&
		(dbid == InvalidOid || e->dbid == dbid))
	{
		img->dbid = e->dbid;
		img->algo = (RlAlgo) e->algo;
		img->keylen = key_copy(e, img->key);
		img->last = e->last;
		img->idle_at = e->idle_at;
		found = true;
	}
	LWLockRelease(&rl_locks[partno].lock);
	return found;
}

/*
 * What a call of cost 0 would report now, without changing anything: the
 * algorithm runs on a copy of the state, under the shared lock (a sliding
 * log's expiry only moves the copy's head).  False if the key has no state.
 */
bool
rl_store_peek(const RlRequest *req, int64 now, RlDecision *d)
{
	RlSlot		slot = slot_of(req);
	RlParams	p = req->params;
	RlEntry    *e;
	RlEntry		copy;

	p.cost = 0;
	LWLockAcquire(slot_lock(slot), LW_SHARED);
	e = entry_find(slot.partno, slot.hash, req->dbid, req->algo, req->key,
				   req->keylen);
	if (e != NULL && e->algo == RL_SLIDING_WINDOW_LOG)
	{
		/* the blocks the copy "frees" still belong to the entry */
		RlLogState	log = e->st.log;
		RlLogMemory m;

		m.blocks = rl_blocks;
		m.next = rl_block_next;
		m.spare = RL_NIL;
		(void) rl_sliding_window_log(&log, &m, Max(now, e->last), &p, d);
	}
	else if (e != NULL)
	{
		copy = *e;
		(void) entry_decide(&copy, false, Max(now, e->last), &p, d);
	}
	LWLockRelease(slot_lock(slot));
	return e != NULL;
}

/*
 * Call fn for every entry holding state, with its image (a sliding log's
 * entries in an array).  Only for the postmaster at shutdown, when no
 * backend runs: takes no lock.
 */
void
rl_store_foreach_image(void (*fn) (const RlEntryImage *img, void *arg),
					   void *arg)
{
	uint32		n = rl_store_nentries();
	char	   *key = palloc(RL_MAX_STORED_KEY);
	RlLogEntry *log = NULL;
	int			logcap = 0;
	uint32		idx;

	for (idx = 0; idx < n; idx++)
	{
		RlEntry    *e = &rl_entries[idx];
		RlEntryImage img;

		if (!(e->flags & RL_ENTRY_USED))
			continue;
		img.dbid = e->dbid;
		img.algo = (RlAlgo) e->algo;
		img.keylen = key_copy(e, key);
		img.key = key;
		img.last = e->last;
		img.idle_at = e->idle_at;
		img.nlog = 0;
		img.log = NULL;
		if (e->algo == RL_SLIDING_WINDOW_LOG)
		{
			const RlLogState *ls = &e->st.log;
			uint32		block = ls->head;
			int			pos = ls->head_pos;

			while (block != RL_NIL)
			{
				int			end = block == ls->tail ? ls->tail_len :
					RL_LOG_PER_BLOCK;

				for (; pos < end; pos++)
				{
					if (img.nlog == logcap)
					{
						logcap = Max(64, logcap * 2);
						log = log ? repalloc(log, logcap * sizeof(RlLogEntry)) :
							palloc(logcap * sizeof(RlLogEntry));
					}
					log[img.nlog++] = rl_blocks[block].entries[pos];
				}
				block = block == ls->tail ? RL_NIL : rl_block_next[block];
				pos = 0;
			}
			img.log = log;
		}
		else
			memcpy(&img.state, &e->st, sizeof(img.state));
		fn(&img, arg);
	}
	pfree(key);
	if (log)
		pfree(log);
}

/*
 * Put back an entry saved by rl_store_foreach_image.  Only for the
 * postmaster at startup, when no backend runs: takes no lock.  Returns
 * false if there is no room for it (or for its log).
 */
bool
rl_store_restore(const RlEntryImage *img)
{
	RlRequest	req;
	RlSlot		slot;
	RlEntry    *e;
	int			i;

	rl_request_init(&req);
	req.dbid = img->dbid;
	req.algo = img->algo;
	req.key = img->key;
	req.keylen = img->keylen;
	slot = slot_of(&req);
	if (entry_find(slot.partno, slot.hash, req.dbid, req.algo, req.key,
				   req.keylen) != NULL)
		return false;
	e = entry_create(slot.partno, slot.hash, &req, PG_INT64_MIN);
	if (e == NULL)
		return false;
	e->last = img->last;
	e->idle_at = img->idle_at;
	if (img->algo != RL_SLIDING_WINDOW_LOG)
	{
		memcpy(&e->st, &img->state, sizeof(img->state));
		return true;
	}

	rl_log_init(&e->st.log);
	for (i = 0; i < img->nlog; i++)
	{
		RlLogState *ls = &e->st.log;
		RlLogEntry *entry;

		if (ls->tail == RL_NIL || ls->tail_len == RL_LOG_PER_BLOCK)
		{
			uint32		block = pool_pop();

			if (block == RL_NIL)
			{
				entry_remove(slot.partno, e);
				return false;
			}
			rl_block_next[block] = RL_NIL;
			if (ls->tail == RL_NIL)
				ls->head = block;
			else
				rl_block_next[ls->tail] = block;
			ls->tail = block;
			ls->tail_len = 0;
			ls->nblocks++;
		}
		entry = &rl_blocks[ls->tail].entries[ls->tail_len++];
		*entry = img->log[i];
		ls->sum += entry->cost;
	}
	return true;
}
