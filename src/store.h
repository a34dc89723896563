/*-------------------------------------------------------------------------
 *
 * store.h
 *		The shared-memory store of per-key state.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_STORE_H
#define RL_STORE_H

#include "backend.h"

/* keys longer than this are refused (SQLSTATE 22001) */
#define RL_MAX_KEY_LEN	4096

/* longest key the store holds: a policy's name, a NUL and a key */
#define RL_MAX_STORED_KEY	(NAMEDATALEN + RL_MAX_KEY_LEN)

/* an entry's identity and times, for listing */
typedef struct RlKeyImage
{
	Oid			dbid;
	RlAlgo		algo;
	int			keylen;
	char		key[RL_MAX_STORED_KEY];
	int64		last;
	int64		idle_at;
} RlKeyImage;

/* a whole entry, for saving and restoring */
typedef struct RlEntryImage
{
	Oid			dbid;
	RlAlgo		algo;
	int			keylen;
	const char *key;
	Oid			owner_dbid;		/* its owner (see RlOwnerImage) */
	Oid			owner_roleid;
	int64		last;
	int64		idle_at;
	union
	{
		RlWindowState window;
		RlBucketState bucket;
	}			state;			/* all but sliding_window_log */
	int			nlog;			/* sliding_window_log: its entries with a
								 * cost, oldest first */
	const RlLogEntry *log;
	int64		logsum;			/* their total cost */
} RlEntryImage;

/* What rl_store_restore made of an image */
typedef enum RlRestore
{
	RL_RESTORED,
	RL_RESTORE_NO_ROOM,			/* no entry or pool block left for it */
	RL_RESTORE_DUPLICATE		/* the key is in the store already */
} RlRestore;

/*
 * An owner: the (database, role) that created entries, with what it holds.
 * A database's overflow owner has roleid InvalidOid; the store-wide one
 * has both InvalidOid.
 */
typedef struct RlOwnerImage
{
	Oid			dbid;
	Oid			roleid;
	int64		keys;			/* entries */
	int64		pool_blocks;
	int64		evicted;		/* its entries evicted for others */
	int64		refused;		/* its calls refused for want of room */
} RlOwnerImage;

/* most keys one all-or-nothing call may cover (each may lock a partition) */
#define RL_MAX_MULTI	32

/* Store-wide figures, summed over partitions. */
typedef struct RlStoreStats
{
	int64		capacity;		/* ratelimit.max_keys, as laid out */
	int64		used;			/* entries holding state */
	int64		pool_blocks;	/* blocks for logs and long keys */
	int64		pool_used;
	int64		reclaimed;		/* idle entries given back to make room */
	int64		refused;		/* calls that found no room (fail_mode) */
	int			partitions;
	int64		evicted;		/* live entries evicted for an owner under
								 * its share */
	int			owners;			/* owners holding entries or blocks */
} RlStoreStats;

extern void rl_store_request(void);
extern bool rl_store_startup(void);
extern bool rl_store_ready(void);
extern void rl_store_refund(const RlRequest *req, int64 t, int64 cost,
							uint64 incarnation);
extern bool rl_store_decide_all(const RlRequest *reqs, int n, int64 now,
								const bool *fail_open, RlDecision *ds,
								RlStatus *statuses);
extern int64 rl_store_reset(Oid dbid, const char *key, int keylen,
							bool all_algos, RlAlgo algo);
extern int64 rl_store_reset_all(Oid dbid);
extern void rl_store_stats(RlStoreStats *stats);
extern uint32 rl_store_nentries(void);
extern bool rl_store_key_at(uint32 idx, Oid dbid, RlKeyImage *img);
extern bool rl_store_peek(const RlRequest *req, int64 now, RlDecision *d);
extern void rl_store_foreach_image(void (*fn) (const RlEntryImage *img,
											   void *arg),
								   void *arg);
extern RlRestore rl_store_restore(const RlEntryImage *img);
extern int	rl_store_owners(RlOwnerImage *out);
extern int	rl_store_max_owners(void);

#endif							/* RL_STORE_H */
