/*-------------------------------------------------------------------------
 *
 * policy_row.h
 *		A policy, and how one is read from a row of rl_policy.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_POLICY_ROW_H
#define RL_POLICY_ROW_H

#include "access/htup.h"
#include "access/tupdesc.h"
#include "pgtime.h"
#include "utils/hsearch.h"

#include "engine.h"
#include "stats.h"

typedef struct RlPolicy
{
	char		name[NAMEDATALEN];	/* hash key */
	int			namelen;
	RlAlgo		algo;
	RlParams	params;			/* params.cost: the policy's default cost */
	Interval	per;			/* as the row gives it */
	bool		zone_given;		/* its time_zone column is set; else the
								 * zone is ratelimit.time_zone's, taken at
								 * each call */
	const pg_tz *zone;			/* the column's zone, if given */
	int64		anchor;			/* period_anchor (Unix us), or
								 * RL_NO_ANCHOR */
	int			backend;		/* RlBackend, or RL_SETTING */
	int			fail_mode;		/* RlFailMode, or RL_SETTING */
	bool		shadow;
	bool		burst_given;	/* params.burst is the policy's own */
	int64		block_duration; /* its penalty box (us), or 0 */
	int			nlimits;		/* its other limits (rl_policy_limit) */
	RlExtraLimit *limits;		/* RL_MAX_LIMITS of room, or NULL */
	HTAB	   *overrides;		/* its keys' overrides (RlOverride), or
								 * NULL when it has none */
	RlStatsHandle stats;		/* its decisions' counters, found once */
	bool		durable;		/* logged in WAL (store_wal.c) */
	int32		reserve;		/* share of each limit kept for higher
								 * priorities, in millionths (shed.c) */
} RlPolicy;

/* the columns of rl_policy a policy is read from (policy_row.c) */
#define RL_POLICY_COLUMNS	14

/* where each column is in a descriptor of the table (or of a query) */
typedef struct RlPolicyAttnos
{
	AttrNumber	attno[RL_POLICY_COLUMNS];
} RlPolicyAttnos;

extern void rl_policy_attnos(TupleDesc desc, RlPolicyAttnos *cols);
extern void rl_policy_from_row(HeapTuple tuple, TupleDesc desc,
							   const RlPolicyAttnos *cols, RlPolicy *pol);
extern void rl_policy_from_tuple(HeapTuple tuple, TupleDesc desc,
								 RlPolicy *pol);
extern void rl_policy_period(const RlPolicy *pol, int64 anchor,
							 RlParams *p);

#endif							/* RL_POLICY_ROW_H */
