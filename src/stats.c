/*-------------------------------------------------------------------------
 *
 * stats.c
 *		Decision counters per (database, algorithm, policy), in shared
 *		memory: allowed, denied, near the limit, decided by fail_mode, and
 *		what shadow policies would have denied.
 *
 * Per-key counters would multiply the store's memory, so counts are kept
 * per policy (direct calls count under a NULL policy, per algorithm).  A
 * fixed table of RL_STATS_SLOTS slots; calls beyond it count in slot 0,
 * "(other)".  Slots are never freed (a reset zeroes their counters), so
 * each backend caches the address of the slots it uses.
 *
 * Locking contract: the stats LWLock (exclusive) is taken only to claim a
 * slot, the first time a backend meets an identity; reading the identity
 * of slots takes it shared.  Counters are atomics, added without a lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "stats.h"

#define RL_STATS_SLOTS		1024
#define RL_STATS_TRANCHE	"ratelimit stats"

typedef struct RlStatsKey
{
	Oid			dbid;
	int32		algo;
	char		policy[NAMEDATALEN];	/* "" for direct calls */
} RlStatsKey;

typedef struct RlStatsSlot
{
	RlStatsKey	key;
	bool		used;
	pg_atomic_uint64 counters[RL_NSTATS];
} RlStatsSlot;

typedef struct RlStatsShared
{
	int			nused;
	RlStatsSlot slots[RL_STATS_SLOTS];
} RlStatsShared;

/* backend-local: identity -> slot */
typedef struct RlStatsCacheEntry
{
	RlStatsKey	key;
	RlStatsSlot *slot;
} RlStatsCacheEntry;

static RlStatsShared *rl_stats = NULL;
static LWLock *rl_stats_lock;
static HTAB *slot_cache = NULL;

Size
rl_stats_shmem_size(void)
{
	return sizeof(RlStatsShared);
}

void
rl_stats_request(void)
{
	RequestAddinShmemSpace(rl_stats_shmem_size());
	RequestNamedLWLockTranche(RL_STATS_TRANCHE, 1);
}

/* shmem_startup_hook; the caller holds AddinShmemInitLock */
void
rl_stats_startup(void)
{
	bool		found;
	int			i;
	int			c;

	rl_stats = ShmemInitStruct("ratelimit stats", sizeof(RlStatsShared),
							   &found);
	rl_stats_lock = &GetNamedLWLockTranche(RL_STATS_TRANCHE)[0].lock;
	if (found)
		return;
	memset(rl_stats, 0, sizeof(RlStatsShared));
	for (i = 0; i < RL_STATS_SLOTS; i++)
		for (c = 0; c < RL_NSTATS; c++)
			pg_atomic_init_u64(&rl_stats->slots[i].counters[c], 0);
	/* slot 0 collects what does not fit: identity "(other)" */
	rl_stats->slots[0].used = true;
	rl_stats->slots[0].key.algo = -1;
	strlcpy(rl_stats->slots[0].key.policy, "(other)", NAMEDATALEN);
	rl_stats->nused = 1;
}

/* Find or claim the slot of an identity in shared memory. */
static RlStatsSlot *
slot_claim(const RlStatsKey *key)
{
	uint32		h = hash_bytes((const unsigned char *) key, sizeof(*key));
	RlStatsSlot *found = &rl_stats->slots[0];
	int			i;

	LWLockAcquire(rl_stats_lock, LW_EXCLUSIVE);
	for (i = 0; i < RL_STATS_SLOTS - 1; i++)
	{
		RlStatsSlot *slot = &rl_stats->slots[1 + (h + i) % (RL_STATS_SLOTS - 1)];

		if (!slot->used)
		{
			slot->key = *key;
			slot->used = true;
			rl_stats->nused++;
			found = slot;
			break;
		}
		if (memcmp(&slot->key, key, sizeof(*key)) == 0)
		{
			found = slot;
			break;
		}
	}
	LWLockRelease(rl_stats_lock);
	return found;
}

/*
 * Count one decision of a request.  The slot is found through a backend-
 * local cache; the counters are added atomically.
 */
void
rl_stats_count(const RlRequest *req, const RlDecision *d)
{
	RlStatsKey	key;
	RlStatsCacheEntry *entry;
	bool		found;
	RlStatsSlot *slot;
	int64		capacity;

	if (rl_stats == NULL)
		return;
	if (slot_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(RlStatsKey);
		ctl.entrysize = sizeof(RlStatsCacheEntry);
		ctl.hcxt = TopMemoryContext;
		slot_cache = hash_create("ratelimit stats slots", 64, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}

	memset(&key, 0, sizeof(key));
	key.dbid = req->dbid;
	key.algo = req->algo;
	if (req->policy != NULL)
		strlcpy(key.policy, req->policy, NAMEDATALEN);
	entry = hash_search(slot_cache, &key, HASH_ENTER, &found);
	if (!found)
		entry->slot = slot_claim(&key);
	slot = entry->slot;

	if (d->failed)
		pg_atomic_fetch_add_u64(&slot->counters[d->allowed ? RL_STAT_FAILED_OPEN :
												 RL_STAT_FAILED_CLOSED], 1);
	if (d->shadowed)
		pg_atomic_fetch_add_u64(&slot->counters[RL_STAT_SHADOW_DENIED], 1);
	if (!d->allowed)
	{
		pg_atomic_fetch_add_u64(&slot->counters[RL_STAT_DENIED], 1);
		return;
	}
	pg_atomic_fetch_add_u64(&slot->counters[RL_STAT_ALLOWED], 1);
	capacity = rl_algo_has_burst(req->algo) ? req->params.burst :
		req->params.limit;
	if ((double) d->remaining <= 0.2 * (double) capacity)
		pg_atomic_fetch_add_u64(&slot->counters[RL_STAT_NEAR_LIMIT], 1);
}

/*
 * Copy the used slots (of one database, or all when dbid is InvalidOid).
 * Returns how many were copied into out, which has RL_STATS_SLOTS places.
 */
int
rl_stats_read(Oid dbid, RlStatsRow *out)
{
	int			n = 0;
	int			i;
	int			c;

	if (rl_stats == NULL)
		return 0;
	LWLockAcquire(rl_stats_lock, LW_SHARED);
	for (i = 0; i < RL_STATS_SLOTS; i++)
	{
		RlStatsSlot *slot = &rl_stats->slots[i];

		if (!slot->used || (i > 0 && OidIsValid(dbid) && slot->key.dbid != dbid))
			continue;
		out[n].dbid = slot->key.dbid;
		out[n].algo = slot->key.algo;
		strlcpy(out[n].policy, slot->key.policy, NAMEDATALEN);
		for (c = 0; c < RL_NSTATS; c++)
			out[n].counters[c] = pg_atomic_read_u64(&slot->counters[c]);
		n++;
	}
	LWLockRelease(rl_stats_lock);
	return n;
}

/* Zero every counter (slots keep their identity). */
void
rl_stats_clear(void)
{
	int			i;
	int			c;

	if (rl_stats == NULL)
		return;
	for (i = 0; i < RL_STATS_SLOTS; i++)
		for (c = 0; c < RL_NSTATS; c++)
			pg_atomic_write_u64(&rl_stats->slots[i].counters[c], 0);
}

int
rl_stats_capacity(void)
{
	return RL_STATS_SLOTS;
}
