/*-------------------------------------------------------------------------
 *
 * store.c
 *		The shared-memory store: per-key state for the five algorithms.
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
 *
 * An entry's identity is (database, algorithm, key bytes); its 64-bit hash
 * picks a partition and a bucket, and the full key is always compared, so
 * two keys never share state.  Each partition is a self-contained table
 * with its own entries, so unrelated keys proceed in parallel.  Each entry
 * has an incarnation number, new each time the key's state is created, so
 * a refund never lands on state created after the call it gives back for.
 *
 * Isolation: every entry belongs to an owner, the (database, role) whose
 * call created it, and its pool blocks count for that owner.  The capacity
 * (entries, or blocks) is split evenly between the databases whose owners
 * hold some, then between a database's owners: that is an owner's fair
 * share.  One owner may use everything while no other needs room; an owner
 * under its share that finds no room evicts what an owner over its share
 * holds (of another database, only if that database is over its part),
 * and an owner at or over its share may not take the last 1/16 of the
 * pool.  So no database or role can take the store or the pool from the
 * others (docs/design.md, "Isolation").
 *
 * Locking contract:
 *	- Every access to a partition's buckets, entries and counters holds that
 *	  partition's LWLock; exclusively to change anything (every decision
 *	  changes its entry), shared to read.
 *	- A call holding partition locks takes another partition's lock only
 *	  with LWLockConditionalAcquire (to evict a pool-block holder there): it
 *	  never waits for one, so it cannot deadlock.
 *	- The pool's free list and counters are protected by the pool spinlock,
 *	  held only to pop or push a chain.  Blocks reachable from an entry
 *	  belong to that entry's partition and are covered by its LWLock.
 *	- The owner lock (the tranche's last LWLock) is held exclusively to
 *	  claim, pin or hand over an owner slot and shared to list owners; it is
 *	  never taken while a partition lock is held.  What an owner holds is
 *	  kept in atomic counters, changed under the partition lock of the entry
 *	  concerned and read without a lock (shares are a heuristic; an owner
 *	  slot is only handed over once nothing counts on it).
 *	- Under any of them: no allocation, no ereport, no I/O.  The clock is
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
 * When nothing can be freed or evicted the call gets RL_NO_ROOM and the
 * caller applies ratelimit.fail_mode.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "guc.h"
#include "store.h"

#define RL_TRANCHE			"ratelimit"
#define RL_MAX_PARTITIONS	128
#define RL_KEYS_PER_PARTITION_MIN 256
#define RL_KEY_INLINE		50

/* reclaim: entries looked at, and freed at most, by one inserting call */
#define RL_RECLAIM_SCAN		256
#define RL_RECLAIM_FREE		32

/*
 * An entry is reclaimed only once it has been idle this long (us) before
 * the inserting call's time: a caller that read the clock earlier and
 * reached the lock late must still find the key's state.
 */
#define RL_RECLAIM_MARGIN	(10 * USECS_PER_SEC)

/*
 * The pool's reserve: an owner at or over its fair share of the pool may
 * not take the last 1/16 of it, which stays for owners under theirs.
 */
#define RL_POOL_RESERVE_DIV	16

/*
 * Owner slots: the last 1/8 of the table is kept for databases' overflow
 * owners, slot 0 is the store-wide overflow owner.
 */
#define RL_OWNER_RESERVE_DIV 8
#define RL_OWNER_OVERFLOW	0

/* owners a backend keeps pinned: the roles it acted as most recently */
#define RL_OWNER_CACHE		8

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
	uint32		incarnation;	/* new each time the key's state is created */
	uint16		keylen;
	uint16		owner;			/* owner slot */
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
	uint32		incarnations;	/* the latest incarnation given out */
	uint64		reclaimed;
	uint64		evicted;
	uint64		refused;
} RlPartitionData;

/* one cache line each: partitions are written under different locks */
typedef union RlPartition
{
	RlPartitionData d;
	char		pad[PG_CACHE_LINE_SIZE];
} RlPartition;

/*
 * An owner: (database, role).  The slot (database, InvalidOid) is the
 * database's record: it counts the database's owners holding entries or
 * blocks, and is also the owner its roles share when the table is full.
 * Slot 0, (InvalidOid, InvalidOid), is both for the store.  dbid, roleid,
 * in_use, db and members change under the owner lock; counters are atomic.
 */
typedef struct RlOwner
{
	Oid			dbid;
	Oid			roleid;
	bool		in_use;
	uint16		db;				/* the slot of its database's record */
	int			members;		/* a record: role slots of its database */
	pg_atomic_uint32 pins;		/* backends that cache this slot */
	pg_atomic_uint32 entries;
	pg_atomic_uint32 blocks;
	pg_atomic_uint32 entry_owners;	/* a record: its database's owners
									 * holding entries */
	pg_atomic_uint32 block_owners;	/* ... holding pool blocks */
	pg_atomic_uint32 db_entries;	/* a record: its database's entries */
	pg_atomic_uint32 db_blocks;	/* ... and pool blocks */
	pg_atomic_uint64 hint;		/* one of its block holders: (entry + 1) <<
								 * 32 | its blocks; 0 if none known */
	pg_atomic_uint64 evicted;
	pg_atomic_uint64 refused;
} RlOwner;

typedef struct RlStoreHeader
{
	int			nparts;			/* a power of two */
	uint32		per_part;		/* entries (and buckets) per partition */
	uint32		nblocks;		/* pool size */
	uint32		pool_reserve;	/* blocks left to owners under their share */
	int			nowners;		/* owner slots */
	pg_atomic_uint32 entry_dbs;	/* databases whose owners hold entries */
	pg_atomic_uint32 block_dbs; /* databases whose owners hold blocks */
	slock_t		pool_lock;
	uint32		pool_free;		/* free blocks, linked by pool_next */
	uint32		pool_nfree;
	RlPartition parts[FLEXIBLE_ARRAY_MEMBER];
} RlStoreHeader;

/* Pointers into shared memory, set by rl_store_startup in every process. */
static RlStoreHeader *rl_store = NULL;
static LWLockPadded *rl_locks;
static RlOwner *rl_owner_slots;
static RlEntry *rl_entries;
static uint32 *rl_buckets;
static RlBlock *rl_blocks;
static uint32 *rl_block_next;

/*
 * What one call (or one restored entry) does in the store: whose it is,
 * which partitions it holds locked, which entry it is deciding (never
 * evicted meanwhile).
 */
typedef struct RlCall
{
	uint16		owner;			/* the caller's owner slot */
	bool		restoring;		/* the postmaster loading the state file:
								 * no eviction, no reserve */
	int			partno;			/* partition of the request in hand */
	const RlEntry *busy;
	uint64		held[RL_MAX_PARTITIONS / 64];
} RlCall;

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

static inline LWLock *
owner_lock(void)
{
	return &rl_locks[rl_store->nparts].lock;
}

/*
 * Make slot i an owner that holds nothing, of the database whose record is
 * slot db (-1: slot i is that record).  A role slot taken over from an
 * idle owner leaves its old database.  The owner lock is held.
 */
static int
owner_init(int i, Oid dbid, Oid roleid, int db)
{
	RlOwner    *o = &rl_owner_slots[i];

	if (o->in_use && o->db != i)
		rl_owner_slots[o->db].members--;
	o->dbid = dbid;
	o->roleid = roleid;
	o->in_use = true;
	o->db = (uint16) (db < 0 ? i : db);
	o->members = 0;
	if (db >= 0)
		rl_owner_slots[db].members++;
	pg_atomic_write_u64(&o->hint, 0);
	pg_atomic_write_u64(&o->evicted, 0);
	pg_atomic_write_u64(&o->refused, 0);
	return i;
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
	rl_locks = GetNamedLWLockTranche(RL_TRANCHE);

	if (found)
		return false;

	rl_store->nparts = nparts;
	rl_store->per_part = per_part;
	rl_store->nblocks = nblocks;
	rl_store->pool_reserve = nblocks / RL_POOL_RESERVE_DIV;
	rl_store->nowners = rl_max_owners;
	pg_atomic_init_u32(&rl_store->entry_dbs, 0);
	pg_atomic_init_u32(&rl_store->block_dbs, 0);
	SpinLockInit(&rl_store->pool_lock);
	rl_store->pool_free = nblocks > 0 ? 0 : RL_NIL;
	rl_store->pool_nfree = nblocks;
	for (i = 0; i < (int) nblocks; i++)
		rl_block_next[i] = i + 1 < (int) nblocks ? (uint32) i + 1 : RL_NIL;

	for (i = 0; i < rl_max_owners; i++)
	{
		RlOwner    *o = &rl_owner_slots[i];

		o->in_use = false;
		o->db = 0;
		o->members = 0;
		pg_atomic_init_u32(&o->pins, 0);
		pg_atomic_init_u32(&o->entries, 0);
		pg_atomic_init_u32(&o->blocks, 0);
		pg_atomic_init_u32(&o->entry_owners, 0);
		pg_atomic_init_u32(&o->block_owners, 0);
		pg_atomic_init_u32(&o->db_entries, 0);
		pg_atomic_init_u32(&o->db_blocks, 0);
		pg_atomic_init_u64(&o->hint, 0);
		pg_atomic_init_u64(&o->evicted, 0);
		pg_atomic_init_u64(&o->refused, 0);
	}
	owner_init(RL_OWNER_OVERFLOW, InvalidOid, InvalidOid, -1);

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
		part->evicted = 0;
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

/* ---- owners ---- */

/*
 * Can the slot be handed to another owner?  It holds nothing, no backend
 * caches it, and (a database's record) no role slot refers to it, so
 * nothing can start counting on it: entries are created only for owners a
 * backend has pinned (or by the postmaster at start).  The owner lock is
 * held.
 */
static bool
owner_idle(RlOwner *o)
{
	return o->members == 0 &&
		pg_atomic_read_u32(&o->pins) == 0 &&
		pg_atomic_read_u32(&o->entries) == 0 &&
		pg_atomic_read_u32(&o->blocks) == 0;
}

/*
 * The slot of (dbid, roleid), or -1; *free_slot is one that may be
 * claimed (-1 if none) and *nfree how many may.  The owner lock is held.
 */
static int
owner_lookup(Oid dbid, Oid roleid, int *free_slot, int *nfree)
{
	int			i;

	*free_slot = -1;
	*nfree = 0;
	for (i = 0; i < rl_store->nowners; i++)
	{
		RlOwner    *o = &rl_owner_slots[i];

		if (o->in_use && o->dbid == dbid && o->roleid == roleid)
			return i;
		if (i != RL_OWNER_OVERFLOW && (!o->in_use || owner_idle(o)))
		{
			if (*free_slot < 0)
				*free_slot = i;
			(*nfree)++;
		}
	}
	return -1;
}

/*
 * The slot for (dbid, roleid), claimed if need be, with its database's
 * record.  A role gets its own slot while more than the reserve is free;
 * otherwise it counts under its database's record (the database's
 * overflow owner), and when even the reserve is taken under the store's.
 * The owner lock is held exclusively (or no other process runs).
 */
static int
owner_claim(Oid dbid, Oid roleid)
{
	int			free_slot;
	int			nfree;
	int			slot = owner_lookup(dbid, roleid, &free_slot, &nfree);
	int			db;

	if (slot >= 0)
		return slot;
	if (!OidIsValid(dbid))
		return RL_OWNER_OVERFLOW;
	db = owner_lookup(dbid, InvalidOid, &free_slot, &nfree);
	if (db < 0)
	{
		if (nfree == 0)
			return RL_OWNER_OVERFLOW;
		db = owner_init(free_slot, dbid, InvalidOid, -1);
	}
	if (!OidIsValid(roleid))
		return db;

	/* the record counts as in use while the role's slot is looked for */
	rl_owner_slots[db].members++;
	(void) owner_lookup(dbid, roleid, &free_slot, &nfree);
	rl_owner_slots[db].members--;
	if (nfree <= rl_store->nowners / RL_OWNER_RESERVE_DIV)
		return db;
	return owner_init(free_slot, dbid, roleid, db);
}

typedef struct RlOwnerCached
{
	Oid			dbid;
	Oid			roleid;
	uint16		slot;
} RlOwnerCached;

/* this backend's pinned owners, most recently used first */
static RlOwnerCached owner_cache[RL_OWNER_CACHE];
static int	owner_ncached = 0;

/* Let go of a slot this backend pinned. */
static void
owner_unpin(uint16 slot)
{
	pg_atomic_fetch_sub_u32(&rl_owner_slots[slot].pins, 1);
}

/* before_shmem_exit: let go of every slot this backend pinned. */
static void
owner_unpin_all(int code, Datum arg)
{
	int			i;

	for (i = 0; i < owner_ncached; i++)
		owner_unpin(owner_cache[i].slot);
	owner_ncached = 0;
}

/*
 * The owner slot of a call made now in database dbid: (dbid, the current
 * user).  Found in the backend's cache, or claimed under the owner lock
 * and pinned, so that the slot cannot be handed to another owner while it
 * is cached.  Called before any partition lock is taken.
 */
static uint16
owner_current(Oid dbid)
{
	static bool exit_registered = false;
	Oid			roleid = GetUserId();
	RlOwnerCached found;
	int			i;

	for (i = 0; i < owner_ncached; i++)
		if (owner_cache[i].dbid == dbid && owner_cache[i].roleid == roleid)
			break;
	if (i < owner_ncached)
		found = owner_cache[i];
	else
	{
		if (!exit_registered)
		{
			before_shmem_exit(owner_unpin_all, (Datum) 0);
			exit_registered = true;
		}
		found.dbid = dbid;
		found.roleid = roleid;
		LWLockAcquire(owner_lock(), LW_EXCLUSIVE);
		found.slot = (uint16) owner_claim(dbid, roleid);
		pg_atomic_fetch_add_u32(&rl_owner_slots[found.slot].pins, 1);
		LWLockRelease(owner_lock());
		/* forget the least recently used */
		if (owner_ncached == RL_OWNER_CACHE)
			owner_unpin(owner_cache[--owner_ncached].slot);
		i = owner_ncached++;
	}
	memmove(&owner_cache[1], &owner_cache[0], i * sizeof(RlOwnerCached));
	owner_cache[0] = found;
	return found.slot;
}

/* What the owner holds: entries, or pool blocks. */
static inline uint32
owner_held(uint16 owner, bool blocks)
{
	RlOwner    *o = &rl_owner_slots[owner];

	return pg_atomic_read_u32(blocks ? &o->blocks : &o->entries);
}

/*
 * Add delta to a counter of holders; report whether it went from zero to
 * more (1), back to zero (-1), or neither (0).
 */
static int
holders_add(pg_atomic_uint32 *counter, int32 delta)
{
	uint32		before = pg_atomic_fetch_add_u32(counter, delta);

	Assert(delta > 0 || before >= (uint32) -delta);
	if (before == 0)
		return 1;
	return (int64) before + delta == 0 ? -1 : 0;
}

/*
 * Count delta more entries (or blocks) for the owner and its database, and
 * keep the number of the database's owners holding some, and of databases
 * whose owners do.  Under the partition lock of the entry concerned.
 */
static void
owner_count(uint16 owner, bool blocks, int32 delta)
{
	RlOwner    *o = &rl_owner_slots[owner];
	RlOwner    *db = &rl_owner_slots[o->db];
	int			change;

	if (delta == 0)
		return;
	pg_atomic_fetch_add_u32(blocks ? &db->db_blocks : &db->db_entries, delta);
	change = holders_add(blocks ? &o->blocks : &o->entries, delta);
	if (change != 0 &&
		holders_add(blocks ? &db->block_owners : &db->entry_owners,
					change) != 0)
		holders_add(blocks ? &rl_store->block_dbs : &rl_store->entry_dbs,
					change);
}

/*
 * Fair shares of entries (or pool blocks) as seen by one call, on behalf
 * of an owner: the capacity is split evenly between the databases whose
 * owners hold some, then a database's share between its owners holding
 * some; the call's owner and its database count as holding some.
 * Splitting by database first keeps a database with many roles from
 * taking the share of the others.  Read without a lock: a heuristic.
 */
typedef struct RlShares
{
	bool		blocks;
	uint64		db_share;		/* each database's */
	uint16		owner;			/* the owner the call acts for */
	uint16		db;				/* its database's record */
} RlShares;

static void
shares_init(RlShares *sh, uint16 owner, bool blocks)
{
	RlOwner    *db = &rl_owner_slots[rl_owner_slots[owner].db];
	uint64		capacity = blocks ? rl_store->nblocks :
		(uint64) rl_store->nparts * rl_store->per_part;
	int32		ndbs = (int32) pg_atomic_read_u32(blocks ? &rl_store->block_dbs :
												  &rl_store->entry_dbs);

	if (pg_atomic_read_u32(blocks ? &db->block_owners : &db->entry_owners) == 0)
		ndbs++;
	sh->blocks = blocks;
	sh->db_share = capacity / Max(ndbs, 1);
	sh->owner = owner;
	sh->db = rl_owner_slots[owner].db;
}

/* An owner's fair share: its database's, over the database's owners. */
static uint64
share_of(const RlShares *sh, uint16 owner)
{
	uint16		dbslot = rl_owner_slots[owner].db;
	RlOwner    *db = &rl_owner_slots[dbslot];
	int32		nowners = (int32) pg_atomic_read_u32(sh->blocks ?
													 &db->block_owners :
													 &db->entry_owners);

	if (dbslot == sh->db && owner_held(sh->owner, sh->blocks) == 0)
		nowners++;
	return sh->db_share / Max(nowners, 1);
}

/* Does the owner hold less than its fair share? */
static inline bool
owner_under(const RlShares *sh, uint16 owner)
{
	return owner_held(owner, sh->blocks) < share_of(sh, owner);
}

/*
 * May an owner under its share evict what this owner holds?  Only if this
 * owner holds more than its own share, and, in another database, if that
 * database holds more than a database's share: an owner within its share
 * is never evicted, nor a database within its share for another's sake.
 */
static bool
owner_evictable(const RlShares *sh, uint16 owner)
{
	uint16		dbslot = rl_owner_slots[owner].db;
	RlOwner    *db = &rl_owner_slots[dbslot];

	if (owner_held(owner, sh->blocks) <= share_of(sh, owner))
		return false;
	return dbslot == sh->db ||
		pg_atomic_read_u32(sh->blocks ? &db->db_blocks :
						   &db->db_entries) > sh->db_share;
}

/* hint values: an entry and its block count */
#define HINT_MAKE(idx, n)	((((uint64) (idx) + 1) << 32) | (uint64) (n))
#define HINT_ENTRY(h)		((uint32) ((h) >> 32) - 1)
#define HINT_BLOCKS(h)		((uint32) (h))

/*
 * Entry idx of the owner now holds nblocks pool blocks: keep the owner's
 * hint on a block holder, preferring the one with the most blocks, and
 * drop it when that entry holds none any more.  Compare-and-swap, since
 * entries of one owner change under different partition locks.
 */
static void
hint_note(RlOwner *o, uint32 idx, uint32 nblocks)
{
	uint64		old = pg_atomic_read_u64(&o->hint);

	for (;;)
	{
		uint64		new;

		if (old != 0 && HINT_ENTRY(old) == idx)
			new = nblocks > 0 ? HINT_MAKE(idx, nblocks) : 0;
		else if (nblocks > HINT_BLOCKS(old))
			new = HINT_MAKE(idx, nblocks);
		else
			return;
		if (new == old || pg_atomic_compare_exchange_u64(&o->hint, &old, new))
			return;
	}
}

/* ---- the pool (spinlock held only to pop or push) ---- */

/*
 * A free block, or RL_NIL; the reserve only if allowed.
 */
static uint32
pool_pop(bool reserve_ok)
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

/* Pool blocks a key of this length takes. */
static inline uint32
key_blocks(int keylen)
{
	if (keylen <= RL_KEY_INLINE)
		return 0;
	return (uint32) (keylen - RL_KEY_INLINE + RL_BLOCK_SIZE - 1) / RL_BLOCK_SIZE;
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

static uint32 block_take(RlCall *call, uint16 owner);

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
		uint32		block = block_take(call, e->owner);

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

static inline uint32
entry_index(const RlEntry *e)
{
	return (uint32) (e - rl_entries);
}

/* Pool blocks the entry holds: its key's and its log's. */
static inline uint32
entry_blocks(const RlEntry *e)
{
	return key_blocks(e->keylen) +
		(e->algo == RL_SLIDING_WINDOW_LOG ? e->st.log.nblocks : 0);
}

/* The entry's block count changed by delta: count it for its owner. */
static void
entry_blocks_changed(RlEntry *e, int32 delta)
{
	if (delta == 0)
		return;
	owner_count(e->owner, true, delta);
	hint_note(&rl_owner_slots[e->owner], entry_index(e), entry_blocks(e));
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
	uint32		idx = entry_index(e);
	uint32	   *link = bucket_of(partno, e->hash);

	while (*link != idx)
		link = &rl_entries[*link].next;
	*link = e->next;

	owner_count(e->owner, true, -(int32) entry_blocks(e));
	hint_note(&rl_owner_slots[e->owner], idx, 0);
	owner_count(e->owner, false, -1);
	pool_push_chain(e->key_more);
	if (e->algo == RL_SLIDING_WINDOW_LOG && e->st.log.nblocks > 0)
		pool_push(e->st.log.head, e->st.log.tail, e->st.log.nblocks);

	e->flags = 0;
	e->next = part->free;
	part->free = idx;
	part->used--;
}

/* Drop a live entry to make room for an owner under its share. */
static void
entry_evict(int partno, RlEntry *e)
{
	rl_store->parts[partno].d.evicted++;
	pg_atomic_fetch_add_u64(&rl_owner_slots[e->owner].evicted, 1);
	entry_remove(partno, e);
}

/* Does the call hold this partition's lock? */
static inline bool
call_holds(const RlCall *call, int partno)
{
	return (call->held[partno / 64] & ((uint64) 1 << (partno % 64))) != 0;
}

/*
 * Make room in a full partition: free the entries idle since before
 * "before" ahead of the clock hand, looking at a bounded number of them.
 * If none is idle and the call's owner holds less than its fair share of
 * the entries, evict the entry closest to idle among those looked at whose
 * owners hold more than theirs (its state is the nearest to a new key's).
 */
static void
partition_make_room(int partno, int64 before, const RlCall *call)
{
	RlPartitionData *part = &rl_store->parts[partno].d;
	uint32		base = (uint32) partno * rl_store->per_part;
	RlShares	sh;
	bool		may_evict;
	RlEntry    *candidate = NULL;
	int			scanned;
	int			freed = 0;

	shares_init(&sh, call->owner, false);
	may_evict = !call->restoring && owner_under(&sh, call->owner);
	for (scanned = 0; scanned < RL_RECLAIM_SCAN && freed < RL_RECLAIM_FREE;
		 scanned++)
	{
		RlEntry    *e = &rl_entries[base + part->hand];

		if (++part->hand == rl_store->per_part)
			part->hand = 0;
		if (!(e->flags & RL_ENTRY_USED))
			continue;
		if (e->idle_at <= before)
		{
			entry_remove(partno, e);
			freed++;
		}
		else if (may_evict && e != call->busy &&
				 (candidate == NULL || e->idle_at < candidate->idle_at) &&
				 owner_evictable(&sh, e->owner))
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
	if ((e->flags & RL_ENTRY_USED) && e->owner == owner && e != call->busy &&
		entry_blocks(e) > 0)
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
		if (!(e->flags & RL_ENTRY_USED) || e == call->busy)
			continue;
		blocks = entry_blocks(e);
		if (blocks > best_blocks && owner_evictable(sh, e->owner))
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
		uint32		held = owner_held((uint16) i, true);

		if (held > best_held &&
			pg_atomic_read_u64(&rl_owner_slots[i].hint) != 0 &&
			owner_evictable(sh, (uint16) i))
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
static uint32
block_take(RlCall *call, uint16 owner)
{
	RlShares	sh;
	bool		under;
	uint32		block;

	if (call->restoring)
		return pool_pop(true);
	shares_init(&sh, owner, true);
	under = owner_under(&sh, owner);
	block = pool_pop(under);
	if (block == RL_NIL && under && block_evict(call, &sh))
		block = pool_pop(true);
	return block;
}

/*
 * Take a free entry for a new key of the call's owner and link it in,
 * making room if the partition is full (entries idle since before
 * "before", or an eviction).  NULL if there is no room.
 */
static RlEntry *
entry_create(int partno, uint64 hash, const RlRequest *req, int64 before,
			 RlCall *call)
{
	RlPartitionData *part = &rl_store->parts[partno].d;
	uint32	   *bucket;
	uint32		idx;
	RlEntry    *e;

	if (part->free == RL_NIL)
		partition_make_room(partno, before, call);
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

	e->hash = hash;
	e->dbid = req->dbid;
	e->algo = (uint8) req->algo;
	e->flags = RL_ENTRY_USED;
	if (++part->incarnations == 0)
		part->incarnations = 1;
	e->incarnation = part->incarnations;
	memset(&e->st, 0, sizeof(e->st));
	if (req->algo == RL_SLIDING_WINDOW_LOG)
		rl_log_init(&e->st.log);
	bucket = bucket_of(partno, hash);
	e->next = *bucket;
	*bucket = idx;
	owner_count(e->owner, false, 1);
	entry_blocks_changed(e, (int32) key_blocks(e->keylen));
	return e;
}

/*
 * Run the entry's algorithm.  Returns false if a sliding log needed a
 * block and could get none (the entry is then unchanged but for expired
 * log entries).  call is NULL for a copy or a call that consumes nothing,
 * which never needs a block.
 */
static bool
entry_decide(RlEntry *e, bool fresh, int64 t, const RlParams *p,
			 RlDecision *d, RlCall *call)
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
				entry_blocks_changed(e, -(int32) m.nfreed);
				if (!ok && call != NULL &&
					(m.spare = block_take(call, e->owner)) != RL_NIL)
				{
					/* it must append to a full tail: again, with a block */
					ok = rl_sliding_window_log(&e->st.log, &m, t, p, d);
					Assert(ok && m.spare == RL_NIL && m.nfreed == 0);
					entry_blocks_changed(e, 1);
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
	(void) entry_decide(&e, true, t, &req->params, d, NULL);
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

/* A call of the given owner that holds no lock yet. */
static void
call_init(RlCall *call, uint16 owner)
{
	memset(call, 0, sizeof(*call));
	call->owner = owner;
}

/* Lock a partition for the call (exclusively), remembering it. */
static void
call_lock(RlCall *call, int partno)
{
	LWLockAcquire(&rl_locks[partno].lock, LW_EXCLUSIVE);
	call->held[partno / 64] |= (uint64) 1 << (partno % 64);
}

/*
 * Decide one request; the slot's partition lock is held exclusively.
 */
static RlStatus
decide_locked(const RlRequest *req, RlSlot slot, int64 now, RlCall *call,
			  RlDecision *d)
{
	int64		t = req->at == RL_NO_TIME ? now : req->at;
	RlStatus	status = RL_OK;
	RlEntry    *e;

	call->partno = slot.partno;
	e = entry_find(slot.partno, slot.hash, req->dbid, req->algo, req->key,
				   req->keylen);
	if (e != NULL)
	{
		if (t < e->last)
			t = e->last;
		call->busy = e;
		if (!entry_decide(e, false, t, &req->params, d, call))
			status = RL_NO_ROOM;
		e->last = t;
	}
	else if (req->params.cost == 0)
		fresh_decide(req, t, d);
	else if ((e = entry_create(slot.partno, slot.hash, req,
							   Min(now, t) - RL_RECLAIM_MARGIN, call)) == NULL)
		status = RL_NO_ROOM;
	else
	{
		e->last = t;
		call->busy = e;
		if (!entry_decide(e, true, t, &req->params, d, call))
		{
			entry_remove(slot.partno, e);
			status = RL_NO_ROOM;
		}
	}
	call->busy = NULL;
	if (status == RL_OK && e != NULL)
		e->idle_at = d->reset_at;
	if (status == RL_NO_ROOM)
	{
		rl_store->parts[slot.partno].d.refused++;
		pg_atomic_fetch_add_u64(&rl_owner_slots[call->owner].refused, 1);
	}
	d->time = t;
	d->stored = status == RL_OK && e != NULL;
	d->incarnation = d->stored ? e->incarnation : 0;
	return status;
}

/*
 * Give back cost units the request consumed at time t from the given
 * incarnation of the key's state; the slot's partition lock is held
 * exclusively.  A key that is gone (reset, reclaimed once idle, evicted),
 * or whose state was created again since, has nothing to give back.
 */
static void
refund_locked(const RlRequest *req, RlSlot slot, int64 t, int64 cost,
			  uint64 incarnation)
{
	const RlParams *p = &req->params;
	RlEntry    *e;

	e = entry_find(slot.partno, slot.hash, req->dbid, req->algo, req->key,
				   req->keylen);
	if (e == NULL || e->incarnation != incarnation)
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
				entry_blocks_changed(e, -(int32) m.nfreed);
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
 * time never runs backwards; d->time reports the time used and
 * d->incarnation the state's incarnation.
 */
RlStatus
rl_store_decide(const RlRequest *req, int64 now, RlDecision *d)
{
	RlSlot		slot = slot_of(req);
	RlCall		call;
	RlStatus	status;

	call_init(&call, owner_current(req->dbid));
	call_lock(&call, slot.partno);
	status = decide_locked(req, slot, now, &call, d);
	LWLockRelease(slot_lock(slot));
	return status;
}

/*
 * Give back what a decision at time t consumed from the given incarnation
 * (see refund_locked).
 */
void
rl_store_refund(const RlRequest *req, int64 t, int64 cost,
				uint64 incarnation)
{
	RlSlot		slot = slot_of(req);

	LWLockAcquire(slot_lock(slot), LW_EXCLUSIVE);
	refund_locked(req, slot, t, cost, incarnation);
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
 * does not admit, what the others consumed is given back (to the
 * incarnation each consumed from: the same, since the locks were held
 * throughout) and their decisions are made again with cost 0, so each
 * reports whether it would have admitted and its state afterwards.
 * Returns whether all were admitted.  n is at most RL_MAX_MULTI.
 */
bool
rl_store_decide_all(const RlRequest *reqs, int n, int64 now,
					const bool *fail_open, RlDecision *ds, RlStatus *statuses)
{
	RlSlot		slots[RL_MAX_MULTI];
	int			partnos[RL_MAX_MULTI];
	int			nparts = 0;
	RlCall		call;
	bool		all = true;
	int			i;

	Assert(n > 0 && n <= RL_MAX_MULTI);
	call_init(&call, owner_current(reqs[0].dbid));
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
		call_lock(&call, partnos[i]);

	for (i = 0; i < n; i++)
	{
		statuses[i] = decide_locked(&reqs[i], slots[i], now, &call, &ds[i]);
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
			refund_locked(&reqs[i], slots[i], ds[i].time, reqs[i].params.cost,
						  ds[i].incarnation);
			look.params.cost = 0;
			look.at = ds[i].time;
			(void) decide_locked(&look, slots[i], now, &call, &ds[i]);
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
 * Store-wide figures; each partition is read under its shared lock, the
 * owners' counters without a lock.
 */
void
rl_store_stats(RlStoreStats *stats)
{
	int			partno;
	int			i;

	memset(stats, 0, sizeof(*stats));
	stats->partitions = rl_store->nparts;
	stats->capacity = (int64) rl_store->nparts * rl_store->per_part;
	for (partno = 0; partno < rl_store->nparts; partno++)
	{
		RlPartitionData *part = &rl_store->parts[partno].d;

		LWLockAcquire(&rl_locks[partno].lock, LW_SHARED);
		stats->used += part->used;
		stats->reclaimed += part->reclaimed;
		stats->evicted += part->evicted;
		stats->refused += part->refused;
		LWLockRelease(&rl_locks[partno].lock);
	}
	SpinLockAcquire(&rl_store->pool_lock);
	stats->pool_blocks = rl_store->nblocks;
	stats->pool_used = rl_store->nblocks - rl_store->pool_nfree;
	SpinLockRelease(&rl_store->pool_lock);
	for (i = 0; i < rl_store->nowners; i++)
		if (owner_held((uint16) i, false) > 0 ||
			owner_held((uint16) i, true) > 0)
			stats->owners++;
}

int
rl_store_max_owners(void)
{
	return rl_store->nowners;
}

/*
 * Copy out the owners that hold something or counted something (out has
 * room for rl_store_max_owners()); returns how many.  Under the owner
 * lock, shared.
 */
int
rl_store_owners(RlOwnerImage *out)
{
	int			n = 0;
	int			i;

	LWLockAcquire(owner_lock(), LW_SHARED);
	for (i = 0; i < rl_store->nowners; i++)
	{
		RlOwner    *o = &rl_owner_slots[i];
		RlOwnerImage *img = &out[n];

		if (!o->in_use)
			continue;
		img->dbid = o->dbid;
		img->roleid = o->roleid;
		img->keys = pg_atomic_read_u32(&o->entries);
		img->pool_blocks = pg_atomic_read_u32(&o->blocks);
		img->evicted = (int64) pg_atomic_read_u64(&o->evicted);
		img->refused = (int64) pg_atomic_read_u64(&o->refused);
		if (img->keys > 0 || img->pool_blocks > 0 || img->evicted > 0 ||
			img->refused > 0)
			n++;
	}
	LWLockRelease(owner_lock());
	return n;
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
		(void) entry_decide(&copy, false, Max(now, e->last), &p, d, NULL);
	}
	LWLockRelease(slot_lock(slot));
	return e != NULL;
}

/*
 * Call fn for every entry holding state, with its image (a sliding log's
 * entries that still have a cost, in an array: a refund can leave an entry
 * of cost 0, which changes no decision).  Only for the postmaster at
 * shutdown, when no backend runs: takes no lock.
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
		RlOwner    *o = &rl_owner_slots[e->owner];
		RlEntryImage img;

		if (!(e->flags & RL_ENTRY_USED))
			continue;
		memset(&img, 0, sizeof(img));
		img.dbid = e->dbid;
		img.algo = (RlAlgo) e->algo;
		img.keylen = key_copy(e, key);
		img.key = key;
		img.owner_dbid = o->dbid;
		img.owner_roleid = o->roleid;
		img.last = e->last;
		img.idle_at = e->idle_at;
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
					const RlLogEntry *entry = &rl_blocks[block].entries[pos];

					if (entry->cost == 0)
						continue;
					if (img.nlog == logcap)
					{
						logcap = Max(64, logcap * 2);
						log = log ? repalloc(log, logcap * sizeof(RlLogEntry)) :
							palloc(logcap * sizeof(RlLogEntry));
					}
					log[img.nlog++] = *entry;
				}
				block = block == ls->tail ? RL_NIL : rl_block_next[block];
				pos = 0;
			}
			img.log = log;
			img.logsum = ls->sum;
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
 * Put back an entry saved by rl_store_foreach_image, checked by the
 * caller, with its owner.  Only for the postmaster at startup, when no
 * backend runs: takes no lock, and evicts nothing.
 */
RlRestore
rl_store_restore(const RlEntryImage *img)
{
	RlRequest	req;
	RlSlot		slot;
	RlCall		call;
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
		return RL_RESTORE_DUPLICATE;
	call_init(&call, (uint16) owner_claim(img->owner_dbid, img->owner_roleid));
	call.restoring = true;
	call.partno = slot.partno;
	e = entry_create(slot.partno, slot.hash, &req, PG_INT64_MIN, &call);
	if (e == NULL)
		return RL_RESTORE_NO_ROOM;
	e->last = img->last;
	e->idle_at = img->idle_at;
	if (img->algo != RL_SLIDING_WINDOW_LOG)
	{
		memcpy(&e->st, &img->state, sizeof(img->state));
		return RL_RESTORED;
	}

	for (i = 0; i < img->nlog; i++)
	{
		RlLogState *ls = &e->st.log;
		RlLogEntry *entry;

		if (ls->tail == RL_NIL || ls->tail_len == RL_LOG_PER_BLOCK)
		{
			uint32		block = block_take(&call, e->owner);

			if (block == RL_NIL)
			{
				entry_remove(slot.partno, e);
				return RL_RESTORE_NO_ROOM;
			}
			rl_block_next[block] = RL_NIL;
			if (ls->tail == RL_NIL)
				ls->head = block;
			else
				rl_block_next[ls->tail] = block;
			ls->tail = block;
			ls->tail_len = 0;
			ls->nblocks++;
			entry_blocks_changed(e, 1);
		}
		entry = &rl_blocks[ls->tail].entries[ls->tail_len++];
		*entry = img->log[i];
		ls->sum += entry->cost;
	}
	return RL_RESTORED;
}
