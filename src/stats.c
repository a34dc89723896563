/*-------------------------------------------------------------------------
 *
 * stats.c
 *		Decision counters per (database, algorithm, policy), in shared
 *		memory: allowed, denied, near the limit, decided by fail_mode,
 *		what shadow policies would have denied, and denials by a
 *		priority's headroom alone (load shedding).
 *
 * Per-key counters would multiply the store's memory, so counts are kept
 * per policy (direct calls count under a NULL policy, per algorithm), in a
 * fixed table of RL_STATS_SLOTS slots.  Slot 0 is "(other)": it counts the
 * decisions of identities that found no slot of their own, and what it
 * counted since the last reset is rl_status.stats_overflow.
 *
 * Slots are claimed by identity (open addressing, linear probing) and
 * given back in two ways: rl_stats_reset() frees every slot, and a claim
 * that finds the table full first frees the slots whose identity is gone
 * (a dropped database, a dropped or renamed policy of the claiming
 * backend's database, or one whose algorithm changed), then tries again.
 * A backend cannot read another database's policies: each database's
 * backends mark its slots whose policy is gone (rl_stats_mark_gone, when
 * they read the policies: after a change of them, and at each reload of a
 * session's cache), and a claim from any database frees marked slots.
 * A slot freed that way becomes a tombstone, so that probes go on past it;
 * a reset empties the whole table.
 *
 * Every slot has a generation, bumped whenever it is freed.  A backend
 * keeps a handle per identity (slot, generation) and checks the generation
 * at each count; when it changed, the backend claims again.  An identity
 * counted under "(other)" remembers the retry stamp instead (slots freed
 * anywhere, plus changes to this database's policies) and claims again when
 * it moves, so that room made by a reset or by dropping policies is used
 * without a reconnect.
 *
 * Locking contract: the stats LWLock, exclusive, to claim, free or reset a
 * slot (its identity, state and generation change only under it); shared to
 * look an identity up or to read identities.  Counters and generations are
 * atomics: a count reads the generation and adds to the counters without a
 * lock.  Freeing a slot bumps its generation before zeroing its counters.
 *
 * What the lock-free count guarantees: a backend that read a slot's
 * generation just before another backend freed the slot may still add
 * that one decision to the slot, after the change.  If the slot is then
 * free, the next claim zeroes it and the decision is simply counted as
 * before the reset; if the slot was claimed in between by a new identity,
 * that identity counts one decision too many.  So at most one decision per
 * backend caught counting at the instant a slot is freed can go astray;
 * from its next count on, the backend sees the new generation.  Slots are
 * freed only by a reset and when the table is full, never in steady state.
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
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "stats.h"

#define RL_STATS_SLOTS		1024
#define RL_STATS_TRANCHE	"ratelimit stats"

/* a backend forgets the identities it met beyond this many */
#define RL_STATS_CACHE_MAX	(4 * RL_STATS_SLOTS)

typedef enum RlSlotState
{
	RL_SLOT_EMPTY = 0,			/* not held since the last reset: ends probes */
	RL_SLOT_LIVE,				/* holds an identity */
	RL_SLOT_FREED				/* freed since: may be taken, probes go on */
} RlSlotState;

typedef struct RlStatsShared
{
	int			nused;			/* live slots, "(other)" included */
	pg_atomic_uint32 released;	/* bumped whenever slots are freed */
	RlStatsSlot slots[RL_STATS_SLOTS];
} RlStatsShared;

/* backend-local: identity -> handle */
typedef struct RlStatsCacheEntry
{
	RlStatsKey	key;
	RlStatsHandle handle;
} RlStatsCacheEntry;

static RlStatsShared *rl_stats = NULL;
RlStatsSlot *rl_stats_slots = NULL;
static LWLock *rl_stats_lock;
static HTAB *slot_cache = NULL;

/* what the policies say (policy.c registers them) */
static RlStatsPolicyGone policy_gone = NULL;
static RlStatsPolicyChanges policy_changes = NULL;

/*
 * Learn how to ask about policies (policy.c, from _PG_init).  Without it no
 * policy is ever taken for gone.
 */
void
rl_stats_policy_hooks(RlStatsPolicyGone gone, RlStatsPolicyChanges changes)
{
	policy_gone = gone;
	policy_changes = changes;
}

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
	rl_stats_slots = rl_stats->slots;
	rl_stats_lock = &GetNamedLWLockTranche(RL_STATS_TRANCHE)[0].lock;
	if (found)
		return;
	memset(rl_stats, 0, sizeof(RlStatsShared));
	pg_atomic_init_u32(&rl_stats->released, 0);
	for (i = 0; i < RL_STATS_SLOTS; i++)
	{
		pg_atomic_init_u32(&rl_stats->slots[i].generation, 0);
		for (c = 0; c < RL_NSTATS; c++)
			pg_atomic_init_u64(&rl_stats->slots[i].counters[c], 0);
	}
	/* slot 0 collects what does not fit: identity "(other)" */
	rl_stats->slots[0].state = RL_SLOT_LIVE;
	rl_stats->slots[0].key.algo = -1;
	strlcpy(rl_stats->slots[0].key.policy, "(other)", NAMEDATALEN);
	rl_stats->nused = 1;
}

/* Zero a slot's counters. */
static void
slot_zero(RlStatsSlot *slot)
{
	int			c;

	for (c = 0; c < RL_NSTATS; c++)
		pg_atomic_write_u64(&slot->counters[c], 0);
}

/*
 * Free a live slot, leaving it in state (empty or freed).  The generation
 * moves first, so that a backend that sees the old one counted before the
 * counters were zeroed.  The caller holds the stats lock exclusively and
 * bumps rl_stats->released.
 */
static void
slot_free(RlStatsSlot *slot, RlSlotState state)
{
	pg_atomic_fetch_add_u32(&slot->generation, 1);
	memset(&slot->key, 0, sizeof(slot->key));
	slot->state = state;
	slot->gone = false;
	slot_zero(slot);
	rl_stats->nused--;
}

/*
 * The stamp a handle on "(other)" keeps: it moves when slots are freed
 * anywhere, and when this database's policies change (a dropped policy
 * leaves a slot to reclaim).  A sum of two counters that only grow.
 */
static uint32
retry_stamp(void)
{
	return pg_atomic_read_u32(&rl_stats->released) +
		(policy_changes != NULL ? policy_changes() : 0);
}

/*
 * Look the identity up, and with take, claim a slot for it if it has none.
 * Takes the stats lock, shared without take, exclusive with it.  Fills the
 * handle and returns true if the identity has (or now has) a slot.
 */
static bool
slot_search(const RlStatsKey *key, bool take, RlStatsHandle *handle)
{
	uint32		h = hash_bytes((const unsigned char *) key, sizeof(*key));
	int			nprobe = RL_STATS_SLOTS - 1;
	int			found = -1;
	int			free_slot = -1;
	int			i;

	LWLockAcquire(rl_stats_lock, take ? LW_EXCLUSIVE : LW_SHARED);
	for (i = 0; i < nprobe; i++)
	{
		int			idx = 1 + (h + i) % nprobe;
		RlStatsSlot *slot = &rl_stats->slots[idx];

		if (slot->state == RL_SLOT_LIVE)
		{
			if (memcmp(&slot->key, key, sizeof(*key)) == 0)
			{
				found = idx;
				break;
			}
			continue;
		}
		if (free_slot < 0)
			free_slot = idx;
		if (slot->state == RL_SLOT_EMPTY)
			break;
	}
	if (found < 0 && take && free_slot >= 0)
	{
		RlStatsSlot *slot = &rl_stats->slots[free_slot];

		/* a count that went astray into the free slot is not this one's */
		slot_zero(slot);
		slot->key = *key;
		slot->state = RL_SLOT_LIVE;
		slot->gone = false;
		rl_stats->nused++;
		found = free_slot;
	}
	if (found >= 0)
	{
		handle->slot = found;
		handle->stamp = pg_atomic_read_u32(&rl_stats->slots[found].generation);
	}
	LWLockRelease(rl_stats_lock);
	return found >= 0;
}

/*
 * Has the identity of a slot gone: its database dropped, or, in this
 * backend's database, its policy dropped, renamed or moved to another
 * algorithm?  Policies are read from this backend's cache, never from the
 * table (a caller up the stack may hold a pointer into the cache); when
 * the cache is not current, no policy is taken for gone.  *last_db and
 * *last_exists remember the latest database looked up.
 */
static bool
identity_gone(const RlStatsKey *key, Oid *last_db, bool *last_exists)
{
	bool		known;
	bool		gone;

	if (key->dbid != *last_db)
	{
		*last_db = key->dbid;
		*last_exists = SearchSysCacheExists1(DATABASEOID,
											 ObjectIdGetDatum(key->dbid));
	}
	if (!*last_exists)
		return true;
	if (key->dbid != MyDatabaseId || key->policy[0] == '\0' ||
		policy_gone == NULL)
		return false;
	gone = policy_gone(key->policy, key->algo, &known);
	return known && gone;
}

/*
 * Free the slots whose identity is gone; returns how many.  Identities are
 * copied under the shared lock and checked without it (the checks read
 * catalogs); a slot is freed only if it still holds the identity checked,
 * in the same generation.
 */
/* Live slots copied under the shared lock, to be checked without it. */
typedef struct RlSlotCopy
{
	int			n;
	RlStatsKey	keys[RL_STATS_SLOTS];
	int			idx[RL_STATS_SLOTS];
	uint32		gens[RL_STATS_SLOTS];
	bool		gone[RL_STATS_SLOTS];	/* the slot's mark */
} RlSlotCopy;

/*
 * Copy the live slots (of database dbid with a policy, or all when dbid is
 * InvalidOid); palloc'd.
 */
static RlSlotCopy *
slots_copy(Oid dbid)
{
	RlSlotCopy *c = palloc(sizeof(RlSlotCopy));
	int			i;

	c->n = 0;
	LWLockAcquire(rl_stats_lock, LW_SHARED);
	for (i = 1; i < RL_STATS_SLOTS; i++)
	{
		RlStatsSlot *slot = &rl_stats->slots[i];

		if (slot->state != RL_SLOT_LIVE ||
			(OidIsValid(dbid) &&
			 (slot->key.dbid != dbid || slot->key.policy[0] == '\0')))
			continue;
		c->keys[c->n] = slot->key;
		c->idx[c->n] = i;
		c->gens[c->n] = pg_atomic_read_u32(&slot->generation);
		c->gone[c->n] = slot->gone;
		c->n++;
	}
	LWLockRelease(rl_stats_lock);
	return c;
}

/*
 * Is slot i of the copy still the slot copied (same identity, same
 * generation)?  The caller holds the stats lock.
 */
static bool
slot_unchanged(const RlSlotCopy *c, int i)
{
	RlStatsSlot *slot = &rl_stats->slots[c->idx[i]];

	return slot->state == RL_SLOT_LIVE &&
		pg_atomic_read_u32(&slot->generation) == c->gens[i] &&
		memcmp(&slot->key, &c->keys[i], sizeof(RlStatsKey)) == 0;
}

/*
 * Free the slots whose identity is gone, or that their database marked
 * gone; returns how many.  Identities are copied under the shared lock and
 * checked without it (the checks read catalogs); a slot is freed only if
 * it still holds the identity checked, in the same generation.
 */
static int
slots_reclaim(void)
{
	RlSlotCopy *c = slots_copy(InvalidOid);
	Oid			last_db = InvalidOid;
	bool		last_exists = true;
	int			ngone = 0;
	int			freed = 0;
	int			i;

	/* the latest committed policies: take in what changed */
	AcceptInvalidationMessages();
	for (i = 0; i < c->n; i++)
		if (c->gone[i] || identity_gone(&c->keys[i], &last_db, &last_exists))
		{
			c->keys[ngone] = c->keys[i];
			c->idx[ngone] = c->idx[i];
			c->gens[ngone] = c->gens[i];
			ngone++;
		}

	if (ngone > 0)
	{
		LWLockAcquire(rl_stats_lock, LW_EXCLUSIVE);
		for (i = 0; i < ngone; i++)
			if (slot_unchanged(c, i))
			{
				slot_free(&rl_stats->slots[c->idx[i]], RL_SLOT_FREED);
				freed++;
			}
		if (freed > 0)
			pg_atomic_fetch_add_u32(&rl_stats->released, 1);
		LWLockRelease(rl_stats_lock);
	}
	pfree(c);
	return freed;
}

/*
 * Mark the slots of this database's policies that gone says are gone (and
 * clear the mark of those it says exist), so that a claim in any database
 * may free them once the table is full: a backend cannot read another
 * database's policies.  policy.c calls it when it has read them all.
 */
void
rl_stats_mark_gone(RlStatsPolicyGone gone)
{
	RlSlotCopy *c;
	int			i;
	int			nchanged = 0;

	if (rl_stats == NULL)
		return;
	c = slots_copy(MyDatabaseId);
	for (i = 0; i < c->n; i++)
	{
		bool		known;
		bool		is_gone = gone(c->keys[i].policy, c->keys[i].algo, &known);

		if (known && is_gone != c->gone[i])
		{
			c->keys[nchanged] = c->keys[i];
			c->idx[nchanged] = c->idx[i];
			c->gens[nchanged] = c->gens[i];
			c->gone[nchanged] = is_gone;
			nchanged++;
		}
	}
	if (nchanged > 0)
	{
		LWLockAcquire(rl_stats_lock, LW_EXCLUSIVE);
		for (i = 0; i < nchanged; i++)
			if (slot_unchanged(c, i))
				rl_stats->slots[c->idx[i]].gone = c->gone[i];
		LWLockRelease(rl_stats_lock);
	}
	pfree(c);
}

/*
 * Point the handle at the identity's slot: its own if it has one or one is
 * free, after reclaiming the slots of gone identities if the table is
 * full; "(other)" otherwise.
 */
static void
slot_claim(const RlStatsKey *key, RlStatsHandle *handle)
{
	/* read first: slots freed while we look make the next count retry */
	uint32		stamp = retry_stamp();

	if (slot_search(key, false, handle) || slot_search(key, true, handle))
		return;
	if (slots_reclaim() > 0 && slot_search(key, true, handle))
		return;
	handle->slot = 0;
	handle->stamp = stamp;
}

/*
 * Does the handle still hold: its slot not freed since it was claimed, or,
 * on "(other)", no room made since?
 */
static inline bool
handle_current(const RlStatsHandle *handle)
{
	if (handle->slot > 0)
		return pg_atomic_read_u32(&rl_stats->slots[handle->slot].generation) ==
			handle->stamp;
	return handle->slot == 0 && handle->stamp == retry_stamp();
}

/* The identity a request counts under. */
static void
request_key(const RlRequest *req, RlStatsKey *key)
{
	memset(key, 0, sizeof(*key));
	key->dbid = req->dbid;
	key->algo = req->algo;
	if (req->policy != NULL)
		strlcpy(key->policy, req->policy, NAMEDATALEN);
}

/*
 * Claim a slot for the request's identity again, for its handle (which was
 * not current).  Out of line: rare, and its key would make every count's
 * frame larger.
 */
static pg_noinline void
handle_claim(RlStatsHandle *handle, const RlRequest *req)
{
	RlStatsKey	key;

	request_key(req, &key);
	slot_claim(&key, handle);
}

/*
 * Count one decision of a request, in the slot the handle points to; the
 * handle is checked first (its slot may have changed hands, or room may
 * have been made for an identity counted under "(other)") and claimed
 * again if needed.  The counters are added atomically, without a lock.
 */
static pg_attribute_always_inline void
count_in(RlStatsHandle *handle, const RlRequest *req, const RlOutcome *out,
		 bool failed, bool shadowed)
{
	if (unlikely(!handle_current(handle)))
		handle_claim(handle, req);
	rl_stats_add(&rl_stats->slots[handle->slot], req, out, failed, shadowed);
}

/*
 * Count one decision of a request under an identity other than a policy's
 * or a direct call's of this database (rl_stats_count): with the handle of
 * an entry of a backend-local hash table, dropped when it grows past
 * RL_STATS_CACHE_MAX identities; it hashes the identity on every call.
 */
static pg_noinline void
count_by_identity(const RlRequest *req, const RlOutcome *out, bool failed,
				  bool shadowed)
{
	RlStatsKey	key;
	RlStatsCacheEntry *entry;
	bool		found;

	if (slot_cache != NULL &&
		hash_get_num_entries(slot_cache) >= RL_STATS_CACHE_MAX)
	{
		hash_destroy(slot_cache);
		slot_cache = NULL;
	}
	if (slot_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(RlStatsKey);
		ctl.entrysize = sizeof(RlStatsCacheEntry);
		ctl.hcxt = TopMemoryContext;
		slot_cache = hash_create("ratelimit stats slots", 64, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}

	request_key(req, &key);
	entry = hash_search(slot_cache, &key, HASH_ENTER, &found);
	if (!found)
		entry->handle = (RlStatsHandle) RL_STATS_HANDLE_INIT;
	count_in(&entry->handle, req, out, failed, shadowed);
}

/*
 * Count one decision of a request (rl_stats_count's case that is not
 * inline): in the slot of the handle the request carries (a policy's or a
 * call site's, found once), else with the handle this backend keeps for
 * the request's identity: for a direct call of this database, one per
 * algorithm; for anything else, count_by_identity's.  The first two cost
 * no hash.
 */
void
rl_stats_count_any(const RlRequest *req, const RlOutcome *out, bool failed,
				   bool shadowed)
{
	static RlStatsHandle direct[RL_NUM_ALGOS];
	static bool direct_ready = false;
	int			i;

	if (rl_stats == NULL)
		return;
	if (likely(req->stats != NULL))
	{
		count_in(req->stats, req, out, failed, shadowed);
		return;
	}
	if (req->policy == NULL && req->dbid == MyDatabaseId &&
		(int) req->algo >= 0 && req->algo < RL_NUM_ALGOS)
	{
		if (unlikely(!direct_ready))
		{
			for (i = 0; i < RL_NUM_ALGOS; i++)
				direct[i] = (RlStatsHandle) RL_STATS_HANDLE_INIT;
			direct_ready = true;
		}
		count_in(&direct[req->algo], req, out, failed, shadowed);
		return;
	}
	count_by_identity(req, out, failed, shadowed);
}

/*
 * Copy the live slots (of one database, or all when dbid is InvalidOid;
 * "(other)" always).  Returns how many were copied into out, which has
 * rl_stats_capacity() places.
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

		if (slot->state != RL_SLOT_LIVE ||
			(i > 0 && OidIsValid(dbid) && slot->key.dbid != dbid))
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

/*
 * The table's figures.  The overflow is what "(other)" counted: every
 * decision counts once as allowed or denied.
 */
void
rl_stats_figures(RlStatsFigures *figures)
{
	RlStatsSlot *other;

	memset(figures, 0, sizeof(*figures));
	if (rl_stats == NULL)
		return;
	other = &rl_stats->slots[0];
	LWLockAcquire(rl_stats_lock, LW_SHARED);
	figures->slots = RL_STATS_SLOTS - 1;
	figures->used = rl_stats->nused - 1;
	LWLockRelease(rl_stats_lock);
	figures->overflow = pg_atomic_read_u64(&other->counters[RL_STAT_ALLOWED]) +
		pg_atomic_read_u64(&other->counters[RL_STAT_DENIED]);
}

/*
 * Free every slot and zero every counter, "(other)" included: identities
 * claim their slots again at their next count.
 */
void
rl_stats_clear(void)
{
	int			i;

	if (rl_stats == NULL)
		return;
	LWLockAcquire(rl_stats_lock, LW_EXCLUSIVE);
	for (i = 1; i < RL_STATS_SLOTS; i++)
	{
		RlStatsSlot *slot = &rl_stats->slots[i];

		if (slot->state == RL_SLOT_LIVE)
			slot_free(slot, RL_SLOT_EMPTY);
		else
			slot->state = RL_SLOT_EMPTY;
	}
	slot_zero(&rl_stats->slots[0]);
	pg_atomic_fetch_add_u32(&rl_stats->released, 1);
	LWLockRelease(rl_stats_lock);
}

/* Rows rl_stats_read may return: every slot. */
int
rl_stats_capacity(void)
{
	return RL_STATS_SLOTS;
}
