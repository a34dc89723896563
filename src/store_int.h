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

#include "common/hashfn.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/spin.h"

#include "compat.h"
#include "store.h"

#define RL_MAX_PARTITIONS	128
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

/* an owner's hint (RlOwner.hint): one of its entries and its block count */
#define HINT_MAKE(idx, n)	((((uint64) (idx) + 1) << 32) | (uint64) (n))
#define HINT_ENTRY(h)		((uint32) ((h) >> 32) - 1)
#define HINT_BLOCKS(h)		((uint32) (h))

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
	uint64		evicted;
	uint64		refused;
	uint32		durable;		/* entries of durable keys */
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
}

/* Does the call hold this partition's lock? */
static inline bool
call_holds(const RlCall *call, int partno)
{
	return (call->held[partno / 64] & ((uint64) 1 << (partno % 64))) != 0;
}

/* Where the state of (database, algorithm, key) lives. */
static inline RlSlot
rl_store_slot(Oid dbid, RlAlgo algo, const char *key, int keylen)
{
	RlSlot		slot;

	slot.hash = hash_bytes_extended((const unsigned char *) key, keylen,
									((uint64) dbid << 8) | (uint64) algo);
	slot.partno = (int) (slot.hash & (uint64) (rl_store->nparts - 1));
	return slot;
}

/* The head of the hash chain the hash picks in its partition. */
static inline uint32 *
rl_store_bucket(int partno, uint64 hash)
{
	uint32		per_part = rl_store->per_part;

	return &rl_buckets[(uint32) partno * per_part +
					   (uint32) ((hash >> 32) % per_part)];
}

/* Does the entry hold exactly this key (inline bytes, then the pool's)? */
static inline bool
rl_store_key_equal(const RlEntry *e, const char *key, int keylen)
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
 * The entry holding the state of (database, algorithm, key), or NULL; the
 * slot's partition lock is held.
 */
static inline RlEntry *
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

/*
 * Fair shares of entries (or pool blocks) as seen by one call, on behalf
 * of an owner (store_owner.c).
 */
typedef struct RlShares
{
	bool		blocks;
	uint64		db_share;		/* each database's */
	uint16		owner;			/* the owner the call acts for */
	uint16		db;				/* its database's record */
} RlShares;

/* store_owner.c */
extern uint16 rl_owner_current(Oid dbid);
extern int	rl_owner_claim(Oid dbid, Oid roleid);
extern uint32 rl_owner_held(uint16 owner, bool blocks);
extern void rl_owner_count(uint16 owner, bool blocks, int32 delta);
extern void rl_owner_hint(uint16 owner, uint32 idx, uint32 nblocks);
extern void rl_owner_shares(RlShares *sh, uint16 owner, bool blocks);
extern bool rl_owner_under(const RlShares *sh, uint16 owner);
extern bool rl_owner_evictable(const RlShares *sh, uint16 owner);

/* store_entry.c */
extern RlEntry *rl_store_create(RlSlot slot, const RlRequest *req,
								int64 before, RlCall *call);
extern void rl_store_remove(int partno, RlEntry *e);
extern uint32 rl_store_entry_blocks(const RlEntry *e);
extern void rl_store_blocks_changed(RlEntry *e, int32 delta);
extern void rl_store_pool_push(uint32 first, uint32 last, uint32 n);
extern uint32 rl_store_pool_pop(bool reserve_ok);
extern uint32 rl_store_block_take(RlCall *call, uint16 owner);
extern int	rl_store_key_copy(const RlEntry *e, char *out);

/* store_admin.c: the engine's members off the decisions' path */
extern int64 rl_store_reset(Oid dbid, const char *key, int keylen,
							bool all_algos, RlAlgo algo);
extern int64 rl_store_reset_all(Oid dbid);
extern int	rl_store_figures(RlInfoItem *items);
extern bool rl_store_scan(Oid dbid, uint64 *cursor, RlKeyImage *img);
extern void rl_store_images(void (*fn) (const RlEntryImage *img, void *arg),
							void *arg);
extern RlRestore rl_store_restore(const RlEntryImage *img);

/*
 * Durable keys' WAL records (store_wal.c has the design).  The resource
 * manager's id: 128 is RM_EXPERIMENTAL_ID, PostgreSQL's id for
 * development; a released version must use one reserved on the wiki page
 * "CustomWALResourceManagers" (docs/design.md).
 */
#define RL_RMGR_ID			128
#define RL_RMGR_NAME		"ratelimit"

/* record types (the high bits of xl_info) */
#define XLOG_RL_IMAGE		0x00
#define XLOG_RL_DROP		0x10
#define XLOG_RL_SWEPT		0x20

/* the format of IMAGE and DROP bodies; redo refuses a newer one */
#define RL_WAL_FORMAT		1

/* entries imaged (sweep) or copied (file) per hold of a partition lock */
#define RL_WAL_CHUNK		32

/* A durable key's whole state: an IMAGE's body, and the file's entry. */
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
extern uint64 rl_durable_image_log(RlEntry *e);
extern uint64 rl_durable_drop_log(RlEntry *e);
extern void rl_durable_image_apply(const RlWalImage *rec, const char *key,
								   bool redo);
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
