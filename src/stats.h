/*-------------------------------------------------------------------------
 *
 * stats.h
 *		Decision counters per (database, algorithm, policy).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_STATS_H
#define RL_STATS_H

#include "port/atomics.h"

#include "algo.h"
#include "compat.h"
#include "engine.h"

typedef enum RlStat
{
	RL_STAT_ALLOWED,
	RL_STAT_DENIED,
	RL_STAT_NEAR_LIMIT,			/* allowed with at most 20% left */
	RL_STAT_FAILED_OPEN,		/* allowed by fail_mode */
	RL_STAT_FAILED_CLOSED,		/* denied by fail_mode */
	RL_STAT_SHADOW_DENIED,		/* a shadow policy would have denied */
	RL_STAT_SHED,				/* denied by a priority's headroom alone */
	RL_NSTATS
} RlStat;

typedef struct RlStatsRow
{
	Oid			dbid;
	int			algo;			/* RlAlgo, or -1 for "(other)" */
	char		policy[NAMEDATALEN];
	uint64		counters[RL_NSTATS];
} RlStatsRow;

/*
 * Where one identity's counters are, as a backend remembers it: a slot and
 * the slot's generation when it was claimed.  A handle is checked at each
 * count and claimed again when the slot changed hands (stats.c).  Whoever
 * keeps one (rl_stats_count's own cache, or a policy's cache entry) starts
 * it at RL_STATS_HANDLE_INIT and passes the same identity every time.
 */
typedef struct RlStatsHandle
{
	int			slot;			/* -1: not claimed yet; 0: "(other)" */
	uint32		stamp;			/* slot > 0: its generation when claimed;
								 * slot 0: rl_stats' retry stamp then */
} RlStatsHandle;

#define RL_STATS_HANDLE_INIT {-1, 0}

/*
 * An identity, and the slot of the shared table (stats.c) that counts its
 * decisions; here for the count every decision makes inline.
 */
typedef struct RlStatsKey
{
	Oid			dbid;
	int32		algo;
	char		policy[NAMEDATALEN];	/* "" for direct calls */
} RlStatsKey;

typedef struct RlStatsSlot
{
	RlStatsKey	key;
	int			state;			/* RlSlotState (stats.c) */
	bool		gone;			/* its database saw its policy gone */
	pg_atomic_uint32 generation;	/* bumped when freed */
	pg_atomic_uint64 counters[RL_NSTATS];
} RlStatsSlot;

/* the shared table's slots, NULL until it is attached (stats.c) */
extern rl_hidden RlStatsSlot *rl_stats_slots;

/* the table's figures, for rl_stats_info() */
typedef struct RlStatsFigures
{
	int			slots;			/* identities that can have their own slot */
	int			used;			/* of them, held */
	uint64		overflow;		/* decisions counted under "(other)" */
} RlStatsFigures;

/*
 * What the counters need to know of policies, told by policy.c (which
 * registers these at start, so that the counters need not call up into
 * it): whether a policy of this backend's database is gone (dropped,
 * renamed, or of another algorithm now; *known false when its cache is not
 * current: then nothing is taken for gone), and a counter that moves
 * whenever this database's policies change.
 */
typedef bool (*RlStatsPolicyGone) (const char *policy, int algo,
								   bool *known);
typedef uint32 (*RlStatsPolicyChanges) (void);

extern void rl_stats_policy_hooks(RlStatsPolicyGone gone,
								  RlStatsPolicyChanges changes);
extern void rl_stats_mark_gone(RlStatsPolicyGone gone);
extern void rl_stats_request(void);
extern void rl_stats_startup(void);
extern Size rl_stats_shmem_size(void);
extern void rl_stats_count_any(const RlRequest *req, const RlOutcome *out,
							   bool failed, bool shadowed);
extern int	rl_stats_read(Oid dbid, RlStatsRow *out);
extern void rl_stats_figures(RlStatsFigures *figures);
extern void rl_stats_clear(void);
extern int	rl_stats_capacity(void);

/*
 * Add one decision of a request to a slot's counters, atomically, without
 * a lock.
 */
static inline void
rl_stats_add(RlStatsSlot *slot, const RlRequest *req, const RlOutcome *out,
			 bool failed, bool shadowed)
{
	int64		capacity;

	if (failed)
		pg_atomic_fetch_add_u64(&slot->counters[out->allowed ? RL_STAT_FAILED_OPEN :
												 RL_STAT_FAILED_CLOSED], 1);
	if (shadowed)
		pg_atomic_fetch_add_u64(&slot->counters[RL_STAT_SHADOW_DENIED], 1);
	if (!out->allowed)
	{
		pg_atomic_fetch_add_u64(&slot->counters[RL_STAT_DENIED], 1);
		if (unlikely(out->shed))
			pg_atomic_fetch_add_u64(&slot->counters[RL_STAT_SHED], 1);
		return;
	}
	pg_atomic_fetch_add_u64(&slot->counters[RL_STAT_ALLOWED], 1);
	capacity = rl_algo_capacity(req->algo, &req->params);
	if ((double) out->remaining <= 0.2 * (double) capacity)
		pg_atomic_fetch_add_u64(&slot->counters[RL_STAT_NEAR_LIMIT], 1);
}

/*
 * Count one decision of a request.  Inline when the request carries a
 * handle to a slot of its own that still holds (a policy's, a call
 * site's: #9, on every decision); rl_stats_count_any otherwise.
 */
static inline void
rl_stats_count(const RlRequest *req, const RlOutcome *out, bool failed,
			   bool shadowed)
{
	const RlStatsHandle *handle = req->stats;

	if (likely(handle != NULL && handle->slot > 0 && rl_stats_slots != NULL) &&
		likely(pg_atomic_read_u32(&rl_stats_slots[handle->slot].generation) ==
			   handle->stamp))
		rl_stats_add(&rl_stats_slots[handle->slot], req, out, failed,
					 shadowed);
	else
		rl_stats_count_any(req, out, failed, shadowed);
}

#endif							/* RL_STATS_H */
