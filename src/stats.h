/*-------------------------------------------------------------------------
 *
 * stats.h
 *		Decision counters per (database, algorithm, policy).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_STATS_H
#define RL_STATS_H

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
extern void rl_stats_count(const RlRequest *req, const RlOutcome *out,
						   bool failed, bool shadowed);
extern void rl_stats_count_in(RlStatsHandle *handle, const RlRequest *req,
							  const RlOutcome *out, bool failed,
							  bool shadowed);
extern int	rl_stats_read(Oid dbid, RlStatsRow *out);
extern void rl_stats_figures(RlStatsFigures *figures);
extern void rl_stats_clear(void);
extern int	rl_stats_capacity(void);

#endif							/* RL_STATS_H */
