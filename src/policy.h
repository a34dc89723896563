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
#include "pgtime.h"

#include "engine.h"

typedef struct RlPolicy
{
	char		name[NAMEDATALEN];	/* hash key */
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
} RlPolicy;

extern void rl_policy_init(void);
extern const RlPolicy *rl_policy_find(const char *name, int len);
extern const RlPolicy *rl_policy_get(text *name);
extern const RlPolicy *rl_policy_peek(const char *name, bool *known);
extern uint32 rl_policy_changes(void);
extern bool rl_policy_any_remote(void);
extern void rl_policy_period(const RlPolicy *pol, int64 anchor,
							 RlParams *p);
extern void rl_policy_request(const RlPolicy *pol, text *key,
							  RlRequest *req);
extern void rl_policy_args(FunctionCallInfo fcinfo, int key_arg,
						   int policy_arg, int at_arg, int cost_arg,
						   RlRequest *req);

#endif							/* RL_POLICY_H */
