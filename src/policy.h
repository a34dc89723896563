/*-------------------------------------------------------------------------
 *
 * policy.h
 *		Named policies, cached per backend.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_POLICY_H
#define RL_POLICY_H

#include "fmgr.h"
#include "access/htup.h"
#include "access/tupdesc.h"
#include "pgtime.h"
#include "utils/hsearch.h"

#include "compat.h"
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
} RlPolicy;

/*
 * A caller's memory of the policy a name found (a call site's, a quota
 * trigger's): valid while the policy cache is the one it was found in, so
 * that a call repeating the name costs no lookup.  Zeroed: nothing found.
 */
typedef struct RlPolicyRef
{
	const RlPolicy *pol;
	uint32		generation;		/* the cache's when pol was found */
	int			len;
	char		name[NAMEDATALEN];
} RlPolicyRef;

extern void rl_policy_init(void);
extern const RlPolicy *rl_policy_find(const char *name, int len);
extern const RlPolicy *rl_policy_get(text *name);
extern void rl_policy_from_tuple(HeapTuple tuple, TupleDesc desc,
								 RlPolicy *pol);
rl_noreturn extern void rl_policy_missing(const char *name, int len);
extern const RlPolicy *rl_policy_find_ref(RlPolicyRef *ref, const char *name,
										  int len);
extern const RlPolicy *rl_policy_peek(const char *name, bool *known);
extern uint32 rl_policy_changes(void);
extern bool rl_policy_any_remote(void);
extern void rl_policy_period(const RlPolicy *pol, int64 anchor,
							 RlParams *p);
extern void rl_policy_request(const RlPolicy *pol, text *key,
							  RlRequest *req);
extern void rl_policy_request_in(const RlPolicy *pol, const char *key,
								 int keylen, char *buf, RlRequest *req);
extern void rl_policy_args(FunctionCallInfo fcinfo, RlPolicyRef *ref,
						   char *buf, int key_arg, int policy_arg, int at_arg,
						   int cost_arg, RlRequest *req);

#endif							/* RL_POLICY_H */
