/*-------------------------------------------------------------------------
 *
 * stats.h
 *		Decision counters per (database, algorithm, policy).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_STATS_H
#define RL_STATS_H

#include "backend.h"

typedef enum RlStat
{
	RL_STAT_ALLOWED,
	RL_STAT_DENIED,
	RL_STAT_NEAR_LIMIT,			/* allowed with at most 20% left */
	RL_STAT_FAILED_OPEN,		/* allowed by fail_mode */
	RL_STAT_FAILED_CLOSED,		/* denied by fail_mode */
	RL_STAT_SHADOW_DENIED,		/* a shadow policy would have denied */
	RL_NSTATS
} RlStat;

typedef struct RlStatsRow
{
	Oid			dbid;
	int			algo;			/* RlAlgo, or -1 for "(other)" */
	char		policy[NAMEDATALEN];
	uint64		counters[RL_NSTATS];
} RlStatsRow;

extern void rl_stats_request(void);
extern void rl_stats_startup(void);
extern Size rl_stats_shmem_size(void);
extern void rl_stats_count(const RlRequest *req, const RlDecision *d);
extern int	rl_stats_read(Oid dbid, RlStatsRow *out);
extern void rl_stats_clear(void);
extern int	rl_stats_capacity(void);

#endif							/* RL_STATS_H */
