/*-------------------------------------------------------------------------
 *
 * store.c
 *		The shared-memory store: per-key state for every algorithm, the
 *		local storage engine (engine.h).
 *
 * Layout (sized once at postmaster start from ratelimit.max_keys,
 * ratelimit.pool_size and ratelimit.max_owners; see docs/design.md):
 *
 *	RlStoreHeader	 settings as laid out, the pool's free list, owner counts
 *	RlPartition[n]	 per partition: free list, reclaim hand, counters
 *	RlOwner[]		 the owners: (database, role) and what each holds
 *	RlEntry[]		 max_keys entries, split evenly between partitions
 *	uint32[]		 hash buckets (chain heads), per partition
 *	RlBlock[]		 the pool: 64-byte blocks for sliding-log entries and
 *					 for the bytes of keys longer than RL_KEY_INLINE
 *	uint32[]		 the pool's chain links, parallel to the blocks
 *	RlSlotWaiter[]	 per PGPROC number (MaxBackends): the slot a backend
 *					 waits for, if any (store_slots.c)
 *
 * An entry's identity is (database, algorithm, key bytes); its 64-bit hash
 * picks a partition and a bucket, and the full key is always compared, so
 * two keys never share state.  Each partition is a self-contained table
 * with its own entries, so unrelated keys proceed in parallel.  Each entry
 * has an incarnation number, new each time the key's state is created, so
 * a refund never lands on state created after the call it gives back for.
 * An entry's state is the algorithm's (algo.h); the store runs the
 * algorithm table's decide and refund on it, and lends its pool to a
 * log's chain (algo_log.c knows the chain's layout, the store does not).
 *
 * The store's files, each calling only those before it:
 *	store.c			 this one: the settings, the layout, shared memory
 *	store_owner.c	 owners, and the caps of a role and of a database
 *					 (docs/design.md, "Isolation")
 *	store_entry.c	 the pool, keys, entries: creating, removing and
 *					 reclaiming them
 *	store_durable.c	 durable keys' images: logging one, putting one back,
 *					 the durable file
 *	store_wal.c		 durable keys in WAL: the resource manager, images at
 *					 pre-commit, redo, the sweeper that covers checkpoints
 *	store_engine.c	 the engine's decisions and refunds (the hot path)
 *	store_admin.c	 the engine's resets, figures, listings and images
 *	store_slots.c	 the engine's slots: taking, queueing, giving back
 * store_int.h has what they share, the lookup of a key's entry inline.
 *
 * Locking contract:
 *	- Every access to a partition's buckets, entries and counters holds that
 *	  partition's LWLock, taken by rl_part_lock (which raises the
 *	  partition's mark); exclusively to change anything, shared to read.
 *	- But a decision's fast path (store_engine.c): a decision on an
 *	  existing, non-durable entry whose state is a window or a bucket is
 *	  made under the partition's spinlock alone when the mark is down (no
 *	  LWLock holder); it walks the chain, runs the algorithm's arithmetic
 *	  and writes the entry's state and times, nothing else.  The mark is
 *	  raised under the same spinlock before a holder touches anything.
 *	- A call holds one partition lock, or (rl_allow_all) several, taken in
 *	  ascending order, so that two calls cannot deadlock.
 *	- The pool's free list and counters are protected by the pool spinlock,
 *	  held only to pop or push a chain.  Blocks reachable from an entry
 *	  belong to that entry's partition and are covered by its LWLock.
 *	- The owner lock (the tranche's last LWLock) is held exclusively to
 *	  claim, pin or hand over an owner slot and shared to list owners; it is
 *	  never taken while a partition lock is held.  What an owner holds is
 *	  kept in atomic counters, changed under the partition lock of the entry
 *	  concerned and read without a lock (a cap is taken by an atomic add
 *	  checked afterwards; an owner slot is only handed over once nothing
 *	  counts on it).
 *	- A waiter record (RlSlotWaiter) is written, by its backend or by one
 *	  handing it a slot, under the partition lock of the entry it names;
 *	  a backend's latch may be set under a partition lock.
 *	- Under any of them: no allocation, no ereport, no I/O, but for the WAL
 *	  record of a durable key's change (store_wal.c), inserted under its
 *	  partition lock as PostgreSQL inserts a buffer change's.  The clock is
 *	  read before the lock is taken.
 *
 * Reclaim: an entry whose state is back to that of a new key (its idle_at
 * has passed) can be dropped without changing any decision; a durable
 * key's never is (it stays until reset), nor is it evicted.  When a
 * partition has no free entry, the inserting call advances the partition's
 * clock hand over a bounded number of entries and frees those idle since
 * before both the real clock and the call's time, less a margin (a caller
 * delayed between reading the clock and taking the lock, or replaying
 * events with "at", must still find a key it could use): the work is
 * bounded per call and there is never a pass over the whole store.
 * No live entry is ever evicted: when nothing can be freed, or the call's
 * role or database holds its cap (store_owner.c), the call gets RL_NO_ROOM
 * and the dispatcher applies ratelimit.fail_mode.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/guc.h"

#include "store_int.h"

#define RL_TRANCHE			"ratelimit"
#define RL_KEYS_PER_PARTITION_MIN 256

int			rl_max_keys = 100000;
int			rl_pool_size = 16384;	/* kB */
int			rl_max_owners = 1024;
int			rl_role_share = 50;
int			rl_database_share = 75;
int			rl_durable_reserve = 10;

RlStoreHeader *rl_store = NULL;
LWLockPadded *rl_locks;
RlOwner    *rl_owner_slots;
RlEntry    *rl_entries;
uint8		rl_part_marks[RL_MAX_PARTITIONS];
bool		rl_part_marks_armed = false;
uint32	   *rl_buckets;
RlBlock    *rl_blocks;
uint32	   *rl_block_next;
RlSlotWaiter *rl_waiters;

/*
 * Define the store's settings (from _PG_init, while
 * shared_preload_libraries is processed): sizes, read once at postmaster
 * start.
 */
void
rl_store_init(void)
{
	DefineCustomIntVariable("ratelimit.max_keys",
							"Number of keys the shared-memory store can hold.",
							"Each key takes about 124 bytes of shared memory.",
							&rl_max_keys,
							100000, 16, INT_MAX / 2,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.pool_size",
							"Shared memory for sliding_window_log entries and long keys.",
							"Held in 64-byte blocks: four log entries, or 64 bytes of a key past its first 50.",
							&rl_pool_size,
							16384, 64, 64 * 1024 * 1024,
							PGC_POSTMASTER, GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.max_owners",
							"Number of (database, role) owners whose holdings of the store are counted apart.",
							"Owners beyond it share an overflow owner per database (see docs/design.md).",
							&rl_max_owners,
							1024, 16, 65535,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.role_share",
							"Percentage of the store's keys, and of its pool, that one role may hold across databases.",
							"A call that needs a new key past it is decided by fail_mode.",
							&rl_role_share,
							50, 1, 100,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.database_share",
							"Percentage of the store's keys, and of its pool, that one database may hold.",
							"A call that needs a new key past it is decided by fail_mode.",
							&rl_database_share,
							75, 1, 100,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.durable_reserve",
							"Percentage of each partition's keys, and of the pool, kept for durable keys.",
							"With ratelimit.durable on, ordinary keys never take the last of them, so live ordinary keys cannot crowd durable ones out.",
							&rl_durable_reserve,
							10, 0, 90,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
}

/* ---- layout ---- */

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
	size = add_size(size, MAXALIGN(mul_size(rl_max_owners, sizeof(RlOwner))));
	size = add_size(size, mul_size(nentries, sizeof(RlEntry)));
	size = add_size(size, MAXALIGN(mul_size(nentries, sizeof(uint32))));
	size = add_size(size, mul_size(layout_blocks(), sizeof(RlBlock)));
	size = add_size(size, MAXALIGN(mul_size(layout_blocks(), sizeof(uint32))));
	size = add_size(size, mul_size(MaxBackends, sizeof(RlSlotWaiter)));
	return size;
}

/*
 * Ask for shared memory and locks (shmem_request_hook): one lock per
 * partition, and the owner lock.
 */
void
rl_store_request(void)
{
	RequestAddinShmemSpace(store_size());
	RequestNamedLWLockTranche(RL_TRANCHE, layout_partitions() + 1);
}

/*
 * Lower the marks this backend raised and did not lower (rl_part_lock):
 * its partition LWLocks are gone (an abort releases them all), so its
 * marks would only keep those partitions' decisions on the LWLock's path.
 * Nothing under a partition lock raises; this covers an error that would.
 */
static void
part_marks_lower(void)
{
	int			i;

	if (rl_store == NULL)
		return;
	for (i = 0; i < rl_store->nparts; i++)
		if (rl_part_marks[i] > 0)
		{
			RlPartitionData *part = &rl_store->parts[i].d;

			SpinLockAcquire(&part->fast_lock);
			part->slow -= rl_part_marks[i];
			SpinLockRelease(&part->fast_lock);
			rl_part_marks[i] = 0;
		}
}

static void
part_marks_xact(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		part_marks_lower();
}

static void
part_marks_subxact(SubXactEvent event, SubTransactionId mySubid,
				   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		part_marks_lower();
}

static void
part_marks_exit(int code, Datum arg)
{
	part_marks_lower();
}

/*
 * Arm the lowering of this backend's marks, at its first partition lock:
 * at a (sub)transaction's abort, which has released every LWLock, and at
 * exit.
 */
void
rl_part_marks_arm(void)
{
	rl_part_marks_armed = true;
	RegisterXactCallback(part_marks_xact, NULL);
	RegisterSubXactCallback(part_marks_subxact, NULL);
	before_shmem_exit(part_marks_exit, (Datum) 0);
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
	rl_owner_slots = (RlOwner *) p;
	p += MAXALIGN((Size) rl_max_owners * sizeof(RlOwner));
	rl_entries = (RlEntry *) p;
	p += nentries * sizeof(RlEntry);
	rl_buckets = (uint32 *) p;
	p += MAXALIGN(nentries * sizeof(uint32));
	rl_blocks = (RlBlock *) p;
	p += (Size) nblocks * sizeof(RlBlock);
	rl_block_next = (uint32 *) p;
	p += MAXALIGN((Size) nblocks * sizeof(uint32));
	rl_waiters = (RlSlotWaiter *) p;
	rl_locks = GetNamedLWLockTranche(RL_TRANCHE);

	if (found)
		return false;

	rl_store->nparts = nparts;
	rl_store->per_part = per_part;
	rl_store->nblocks = nblocks;
	rl_store->nowners = rl_max_owners;
	rl_store->nwaiters = MaxBackends;
	for (i = 0; i < MaxBackends; i++)
	{
		int			j;

		memset(&rl_waiters[i], 0, sizeof(RlSlotWaiter));
		rl_waiters[i].entry = RL_NIL;
		for (j = 0; j < RL_HOLDS_SHOWN; j++)
			rl_waiters[i].holds[j].entry = RL_NIL;
	}
	pg_atomic_init_u64(&rl_store->refused_role, 0);
	pg_atomic_init_u64(&rl_store->refused_database, 0);
	SpinLockInit(&rl_store->pool_lock);
	rl_store->pool_free = nblocks > 0 ? 0 : RL_NIL;
	rl_store->pool_nfree = nblocks;
	for (i = 0; i < (int) nblocks; i++)
		rl_block_next[i] = i + 1 < (int) nblocks ? (uint32) i + 1 : RL_NIL;
	SpinLockInit(&rl_store->durable_lock);
	rl_store->durable_armed = false;
	rl_store->durable_stopping = false;
	rl_store->durable_covered = 0;
	rl_store->durable_file_end = 0;
	rl_store->durable_sweeps = 0;
	rl_store->durable_swept = 0;

	/* every owner slot free but slot 0, the store-wide overflow owner */
	for (i = 0; i < rl_max_owners; i++)
	{
		RlOwner    *o = &rl_owner_slots[i];

		memset(o, 0, sizeof(RlOwner));
		pg_atomic_init_u32(&o->pins, 0);
		pg_atomic_init_u32(&o->entries, 0);
		pg_atomic_init_u32(&o->blocks, 0);
		pg_atomic_init_u32(&o->db_entries, 0);
		pg_atomic_init_u32(&o->db_blocks, 0);
		pg_atomic_init_u32(&o->role_entries, 0);
		pg_atomic_init_u32(&o->role_blocks, 0);
		pg_atomic_init_u64(&o->refused, 0);
	}
	rl_owner_slots[RL_OWNER_OVERFLOW].dbid = InvalidOid;
	rl_owner_slots[RL_OWNER_OVERFLOW].roleid = InvalidOid;
	rl_owner_slots[RL_OWNER_OVERFLOW].in_use = true;
	rl_owner_slots[RL_OWNER_OVERFLOW].db = RL_OWNER_OVERFLOW;
	rl_owner_slots[RL_OWNER_OVERFLOW].role = RL_OWNER_OVERFLOW;

	for (i = 0; i < nparts; i++)
	{
		RlPartitionData *part = &rl_store->parts[i].d;
		uint32		base = (uint32) i * per_part;
		uint32		j;

		part->free = base;
		part->hand = 0;
		part->used = 0;
		part->incarnations = 0;
		part->reclaimed = 0;
		part->refused = 0;
		part->durable = 0;
		SpinLockInit(&part->fast_lock);
		part->slow = 0;
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
