/*-------------------------------------------------------------------------
 *
 * store_int.h
 *		The shared-memory store's layout, shared by its files only (store.c
 *		lists them), and the lookup of a key's entry, inline: it is on every
 *		decision's path.
 *
 * The locking contract is at the head of store.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_STORE_INT_H
#define RL_STORE_INT_H

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/spin.h"

#include "compat.h"
#include "keyhash.h"
#include "store.h"

#define RL_MAX_PARTITIONS	128
#define RL_KEY_INLINE		50

/*
 * reclaim: entries looked at, and freed at most, by one inserting call;
 * looked at when a cap refuses (the role's idle entries may be anywhere)
 */
#define RL_RECLAIM_SCAN		256
#define RL_RECLAIM_FREE		32
#define RL_RECLAIM_SCAN_CAP	4096

/*
 * An entry is reclaimed only once it has been idle this long (us) before
 * the inserting call's time: a caller that read the clock earlier and
 * reached the lock late must still find the key's state.
 */
#define RL_RECLAIM_MARGIN	(10 * USECS_PER_SEC)

/* RlEntry.flags */
#define RL_ENTRY_USED		0x01
#define RL_ENTRY_DURABLE	0x02	/* logged in WAL (store_wal.c): never
									 * reclaimed nor evicted */
#define RL_ENTRY_SEEN		0x04	/* redo: imaged since the last sweep's
									 * end (store_wal.c) */

/* the store-wide overflow owner's slot */
#define RL_OWNER_OVERFLOW	0

typedef struct RlEntry
{
	uint64		hash;
	int64		last;			/* latest time this key has seen (clamp) */
	int64		idle_at;		/* from then on the state equals a new key's */
	RlState		st;				/* the algorithm's state */
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
	uint64		refused;
	uint32		durable;		/* entries of durable keys */
	slock_t		fast_lock;		/* a decision's fast path, and the mark: */
	uint32		slow;			/* holders of the LWLock (rl_part_lock) */
} RlPartitionData;

/* one cache line each: partitions are written under different locks */
typedef union RlPartition
{
	RlPartitionData d;
	char		pad[PG_CACHE_LINE_SIZE];
} RlPartition;

/*
 * An owner: (database, role), the role whose call created an entry.  Two
 * kinds of record sum what owners hold, for the caps (store_owner.c): the
 * slot (database, InvalidOid) is the database's record, which is also the
 * owner its roles share when the table is full; the slot (InvalidOid,
 * role) is the role's record, across databases.  An owner without a role
 * (a database's record, and slot 0) is its own role record.  Slot 0,
 * (InvalidOid, InvalidOid), is the store's: the owner of last resort.
 * dbid, roleid, in_use, db, role and members change under the owner lock;
 * counters are atomic.
 */
typedef struct RlOwner
{
	Oid			dbid;
	Oid			roleid;
	bool		in_use;
	uint16		db;				/* the slot of its database's record */
	uint16		role;			/* the slot of its role's record */
	int			members;		/* a record: owner slots that name it */
	pg_atomic_uint32 pins;		/* backends that cache this slot */
	pg_atomic_uint32 entries;	/* what the owner holds */
	pg_atomic_uint32 blocks;
	pg_atomic_uint32 db_entries;	/* a database's record: what its
									 * owners hold */
	pg_atomic_uint32 db_blocks;
	pg_atomic_uint32 role_entries;	/* a role's record: what its owners
									 * hold, in every database */
	pg_atomic_uint32 role_blocks;
	pg_atomic_uint64 refused;	/* its calls refused for want of room */
} RlOwner;

/* slots a backend holds whose times rl_slots sees (the first so many) */
#define RL_HOLDS_SHOWN		8

/* A slot a backend holds, and since when; entry RL_NIL: none. */
typedef struct RlSlotHold
{
	uint32		entry;
	uint32		incarnation;
	int64		since;			/* Unix us */
} RlSlotHold;

/*
 * A backend's slots (store_slots.c), one record per PGPROC number: the
 * slot it waits for (entry RL_NIL when none), and some of those it holds.
 * Each part is written under the partition lock of the entry it names.
 */
typedef struct RlSlotWaiter
{
	uint32		entry;			/* the entry's index, or RL_NIL */
	uint32		incarnation;	/* ... and its incarnation */
	int64		ticket;			/* its place in the entry's queue */
	int64		limit;			/* the limit it asked under */
	int64		headroom;		/* slots it must leave free (a priority's,
								 * shed.c) */
	bool		granted;		/* a slot was handed to it */
	RlSlotHold	holds[RL_HOLDS_SHOWN];
} RlSlotWaiter;

/* Why a call got no room: the store (or pool) full, or a cap */
typedef enum RlRefusal
{
	RL_REFUSED_NONE = 0,
	RL_REFUSED_FULL,			/* no free entry, nothing idle to reclaim */
	RL_REFUSED_POOL,			/* no free pool block */
	RL_REFUSED_ROLE,			/* the role holds ratelimit.role_share */
	RL_REFUSED_DATABASE			/* the database holds its share */
} RlRefusal;

typedef struct RlStoreHeader
{
	int			nparts;			/* a power of two */
	uint32		per_part;		/* entries (and buckets) per partition */
	uint32		nblocks;		/* pool size */
	int			nowners;		/* owner slots */
	int			nwaiters;		/* waiter records (PGPROC numbers) */
	pg_atomic_uint64 refused_role;	/* calls refused by a cap */
	pg_atomic_uint64 refused_database;
	slock_t		pool_lock;
	uint32		pool_free;		/* free blocks, linked by pool_next */
	uint32		pool_nfree;

	/* durable keys (store_wal.c): under durable_lock */
	slock_t		durable_lock;
	bool		durable_armed;	/* the sweeper holds checkpoints back */
	bool		durable_stopping;	/* no more records: the file has it all */
	uint64		durable_covered;	/* a sweep covers this redo pointer */
	uint64		durable_file_end;	/* redo skips records ending at or before
									 * it: the durable file has them */
	uint64		durable_sweeps;
	uint64		durable_swept;	/* images logged by sweeps */
	RlPartition parts[FLEXIBLE_ARRAY_MEMBER];
} RlStoreHeader;

/* Pointers into shared memory, set by rl_store_startup in every process. */
extern rl_hidden RlStoreHeader *rl_store;
extern rl_hidden LWLockPadded *rl_locks;
extern rl_hidden RlOwner *rl_owner_slots;
extern rl_hidden RlEntry *rl_entries;
extern rl_hidden uint32 *rl_buckets;
extern rl_hidden RlBlock *rl_blocks;
extern rl_hidden uint32 *rl_block_next;
extern rl_hidden RlSlotWaiter *rl_waiters;

/*
 * What one call (or one restored entry) does in the store: whose it is,
 * which partitions it holds locked, the request in hand (its partition,
 * the time before which entries of it may be reclaimed, the entry being
 * decided, never reclaimed meanwhile), and why it got no room (for its
 * warning, given once the locks are released).
 */
typedef struct RlCall
{
	uint16		owner;			/* the caller's owner slot */
	int			partno;
	int64		before;			/* PG_INT64_MIN: reclaim nothing */
	const RlEntry *busy;
	RlRefusal	refusal;
	bool		refused_blocks; /* the refusal was of a pool block */
	bool		uncapped;		/* a durable image put back: no cap, and
								 * ordinary keys evicted for room */
	bool		for_durable;	/* for a durable key: it may take the room
								 * kept for them (ratelimit.durable_reserve) */
	int			ndurable;		/* durable entries the call changed (the
								 * arrays are not zeroed) */
	uint32		durable[RL_MAX_MULTI];	/* ... their indexes */
	uint32		durable_inc[RL_MAX_MULTI];	/* ... and incarnations */
} RlCall;

/* Where a key lives: its hash and partition. */
typedef struct RlSlot
{
	uint64		hash;
	int			partno;
} RlSlot;

static inline LWLock *
owner_lock(void)
{
	return &rl_locks[rl_store->nparts].lock;
}

/* the marks this backend raised and has not lowered (store.c) */
extern rl_hidden uint8 rl_part_marks[RL_MAX_PARTITIONS];
extern rl_hidden bool rl_part_marks_armed;
extern void rl_part_marks_arm(void);

/*
 * Take partition partno's LWLock in mode, for anything but a decision's
 * fast path (store_engine.c), marking it held: a fast path, which takes
 * only the partition's spinlock, finds the mark under it and steps aside
 * to the LWLock.  Every holder of a partition's LWLock takes it here.
 * The backend notes its mark, for an abort to lower (rl_part_marks_arm).
 */
static inline void
rl_part_lock(int partno, LWLockMode mode)
{
	RlPartitionData *part = &rl_store->parts[partno].d;

	if (unlikely(!rl_part_marks_armed))
		rl_part_marks_arm();
	LWLockAcquire(&rl_locks[partno].lock, mode);
	SpinLockAcquire(&part->fast_lock);
	part->slow++;
	SpinLockRelease(&part->fast_lock);
	rl_part_marks[partno]++;
}

/* Release what rl_part_lock took. */
static inline void
rl_part_unlock(int partno)
{
	RlPartitionData *part = &rl_store->parts[partno].d;

	rl_part_marks[partno]--;
	SpinLockAcquire(&part->fast_lock);
	part->slow--;
	SpinLockRelease(&part->fast_lock);
	LWLockRelease(&rl_locks[partno].lock);
}

static inline uint32
entry_index(const RlEntry *e)
{
	return (uint32) (e - rl_entries);
}

/* The pool as a log's chain sees it, lending no spare block. */
static inline RlChain
store_chain(void)
{
	RlChain		chain;

	chain.blocks = rl_blocks;
	chain.next = rl_block_next;
	chain.spare = RL_NIL;
	chain.freed_first = chain.freed_last = RL_NIL;
	chain.nfreed = 0;
	return chain;
}

/* A call of the given owner that holds no lock yet. */
static inline void
rl_store_call_init(RlCall *call, uint16 owner)
{
	memset(call, 0, offsetof(RlCall, durable));
	call->owner = owner;
	call->before = PG_INT64_MIN;
}

/*
 * Where the state of (database, algorithm, key) lives.  The hash is
 * keyhash.h's (#9: a third of hash_bytes_extended's cost on a short key);
 * it lives in shared memory only (the state file and WAL records hold
 * keys, hashed again as they are read).
 */
static inline RlSlot
rl_store_slot(Oid dbid, RlAlgo algo, const char *key, int keylen)
{
	RlSlot		slot;

	slot.hash = rl_state_hash(dbid, algo, key, keylen);
	slot.partno = (int) (slot.hash & (uint64) (rl_store->nparts - 1));
	return slot;
}

/*
 * The head of the hash chain the hash picks in its partition: the hash's
 * high 32 bits scaled to [0, per_part) by a multiplication and a shift,
 * which spreads them as evenly as a modulo would, without a division.
 */
static inline uint32 *
rl_store_bucket(int partno, uint64 hash)
{
	uint32		per_part = rl_store->per_part;

	return &rl_buckets[(uint32) partno * per_part +
					   (uint32) (((hash >> 32) * (uint64) per_part) >> 32)];
}

/* Does the entry hold exactly this key (inline bytes, then the pool's)? */
static inline bool
rl_store_key_equal(const RlEntry *e, const char *key, int keylen)
{
	int			n = Min(keylen, RL_KEY_INLINE);
	uint32		block = e->key_more;

	if (e->keylen != keylen || !rl_key_equal(e->key, key, n))
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
 * The entry holding the state of (database, algorithm, key), or NULL; the
 * slot's partition lock is held.  The bucket's chain: its head, then each
 * entry, every one a read that waits on the one before; the entries of a
 * partition's live keys lie close together (rl_store_create takes the
 * first free one), which a page-table walk rewards (#9: a key's entry at a
 * home its hash chose, found with one read, cost the wall clock more on
 * 10,000 keys spread over a store of 100,000: design.md).  Always inline
 * (#9: on every decision).
 */
static pg_attribute_always_inline RlEntry *
rl_store_find(RlSlot slot, Oid dbid, RlAlgo algo, const char *key,
			  int keylen)
{
	uint32		i;

	for (i = *rl_store_bucket(slot.partno, slot.hash); i != RL_NIL;
		 i = rl_entries[i].next)
	{
		RlEntry    *e = &rl_entries[i];

		if (e->hash == slot.hash && e->dbid == dbid && e->algo == algo &&
			rl_store_key_equal(e, key, keylen))
			return e;
	}
	return NULL;
}

/* store_owner.c */
extern uint16 rl_owner_lookup(Oid dbid);
extern int	rl_owner_claim(Oid dbid, Oid roleid);
extern uint32 rl_owner_held(uint16 owner, bool blocks);
extern void rl_owner_count(uint16 owner, bool blocks, int32 delta);
extern RlRefusal rl_owner_take(uint16 owner, bool blocks, uint32 n);
extern uint64 rl_owner_cap(bool blocks, bool database);

/* an owner this backend pinned (store_owner.c) */
typedef struct RlOwnerCached
{
	Oid			dbid;
	Oid			roleid;
	uint16		slot;
} RlOwnerCached;

/* this backend's pinned owners, most recently used first (store_owner.c) */
extern RlOwnerCached rl_owner_cache[];
extern int	rl_owner_ncached;

/*
 * The owner slot of a call made now in database dbid (rl_owner_lookup),
 * the same as the last call's answered inline (#9: on every decision).
 */
static inline uint16
rl_owner_current(Oid dbid)
{
	if (likely(rl_owner_ncached > 0 && rl_owner_cache[0].dbid == dbid &&
			   rl_owner_cache[0].roleid == GetUserId()))
		return rl_owner_cache[0].slot;
	return rl_owner_lookup(dbid);
}

/* store_entry.c */
extern bool rl_store_durable_room;
extern RlEntry *rl_store_create(RlSlot slot, const RlRequest *req,
								RlCall *call);
extern void rl_store_remove(int partno, RlEntry *e);
extern uint32 rl_store_entry_blocks(const RlEntry *e);
extern void rl_store_blocks_changed(RlEntry *e, int32 delta);
extern void rl_store_pool_push(uint32 first, uint32 last, uint32 n);
extern uint32 rl_store_block_take(RlCall *call, uint16 owner);
extern int	rl_store_key_copy(const RlEntry *e, char *out);
extern bool rl_store_log_fill(RlEntry *e, RlCall *call,
							  const RlLogEntry *log, int nlog);
extern bool rl_store_free_blocks(uint32 n);

/* store_slots.c: the engine's slots */
extern RlSlotResult rl_store_acquire(const RlRequest *req, RlSlotOp op,
									 int64 now, RlReceipt *receipt);
extern void rl_store_release(const RlRequest *req, const RlReceipt *receipt);
extern int64 rl_store_held_since(const RlEntry *e);

/* store_admin.c: the engine's members off the decisions' path */
extern int64 rl_store_reset(Oid dbid, const char *key, int keylen,
							bool all_algos, RlAlgo algo);
extern int64 rl_store_reset_all(Oid dbid);
extern int64 rl_store_drop_gone(void);
extern int	rl_store_figures(RlInfoItem *items);
extern bool rl_store_scan(Oid dbid, uint64 *cursor, RlKeyImage *img);
extern void rl_store_images(void (*fn) (const RlEntryImage *img, void *arg),
							void *arg);
extern RlRestore rl_store_restore(const RlEntryImage *img);

/*
 * Durable keys' WAL records (store_wal.c has the design).  The resource
 * manager's id, ratelimit.wal_rmgr_id (rl_rmgr_id, store_durable.c): by
 * default 128, RM_EXPERIMENTAL_ID, PostgreSQL's id for development, until
 * one is reserved on the wiki page "CustomWALResourceManagers"
 * (docs/design.md).
 */
#define RL_RMGR_ID_DEFAULT	128
#define RL_RMGR_NAME		"ratelimit"

/* record types (the high bits of xl_info) */
#define XLOG_RL_IMAGE		0x00
#define XLOG_RL_DROP		0x10
#define XLOG_RL_SWEPT		0x20

/* the format of IMAGE and DROP bodies; redo refuses a newer one */
#define RL_WAL_FORMAT		1

/* entries imaged (sweep) or copied (file) per hold of a partition lock */
#define RL_WAL_CHUNK		32

/*
 * A durable key's whole state: an IMAGE's body, and the file's entry.  A
 * log's state is its entries with a cost, oldest first, after the key
 * (RlLogEntry, unaligned): st.log then holds their sum and, in nblocks,
 * their count, nothing else (the chain's blocks are each server's own).
 */
typedef struct RlWalImage
{
	Oid			dbid;
	Oid			owner_dbid;
	Oid			owner_roleid;
	uint16		keylen;
	uint8		algo;
	uint8		format;			/* RL_WAL_FORMAT */
	int64		last;
	int64		idle_at;
	RlState		st;
	/* the key's bytes follow */
} RlWalImage;

StaticAssertDecl(sizeof(RlWalImage) == 56, "a durable image has no padding");

/* A durable key reset: a DROP's body. */
typedef struct RlWalDrop
{
	Oid			dbid;
	uint16		keylen;
	uint8		algo;
	uint8		format;
	/* the key's bytes follow */
} RlWalDrop;

/* The end of a sweep: a SWEPT's body. */
typedef struct RlWalSwept
{
	uint64		redo;			/* the redo pointer swept for */
	uint64		keys;			/* images the sweep logged */
} RlWalSwept;

/* store_durable.c: images, the durable file, records described */
extern int	rl_rmgr_id;
extern int	rl_durable_image_short(const RlEntry *e);
extern void rl_durable_image_grow(int nlog);
extern uint64 rl_durable_image_log(RlEntry *e);
extern uint64 rl_durable_drop_log(RlEntry *e);
extern uint32 rl_durable_image_nlog(const RlWalImage *rec);
extern bool rl_durable_image_apply(const RlWalImage *rec, const char *key,
								   const char *log, bool redo);
extern void rl_durable_file_write(uint64 end, const char *why);
struct StringInfoData;
struct XLogReaderState;
extern void rl_durable_desc(struct StringInfoData *buf,
							struct XLogReaderState *record);
extern const char *rl_durable_identify(uint8 info);

/* store_wal.c: durable keys (under the entry's partition lock, but noted) */
extern void rl_store_wal_validate(const RlRequest *req);
extern void rl_store_wal_image(RlEntry *e);
extern void rl_store_wal_drop(RlEntry *e);
extern void rl_store_wal_note(const RlCall *call);

/*
 * Give back the blocks a log's chain handed back (a call emptied them),
 * and count them off the entry's owner.
 */
static inline void
rl_store_chain_freed(RlEntry *e, const RlChain *chain)
{
	if (chain->nfreed > 0)
	{
		rl_store_pool_push(chain->freed_first, chain->freed_last,
						   chain->nfreed);
		rl_store_blocks_changed(e, -(int32) chain->nfreed);
	}
}

#endif							/* RL_STORE_INT_H */
