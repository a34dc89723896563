/*-------------------------------------------------------------------------
 *
 * policy_limit.h
 *		Several limits in one policy: the rows of rl_policy_limit, their
 *		requests, and calls and charges under all of a policy's limits.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_POLICY_LIMIT_H
#define RL_POLICY_LIMIT_H

#include "fmgr.h"

#include "dispatch.h"

/* the columns of rl_policy_limit the cache reads, in this order */
typedef enum RlLimitColumn
{
	LCOL_POLICY,
	LCOL_NAME,
	LCOL_ALGO,
	LCOL_LIMIT,
	LCOL_PER,
	LCOL_BURST,
	LCOL_COUNT
} RlLimitColumn;

extern const char *const rl_policy_limit_columns;

extern void rl_policy_limit_put(RlExtraLimit **limits, int *n,
								MemoryContext cxt, const Datum *values,
								const bool *nulls);
extern void rl_decide_limits(RlRequest *req, RlDecision *d);
extern void rl_adjust_policy(RlRequest *req, RlDecision *d);
extern int64 rl_reset_policy(const RlRequest *req);
extern void rl_limits_refuse(const RlRequest *req, const char *function);

/*
 * Decide a call (a function's or a trigger's row) under a policy: with
 * one limit (nearly always), the dispatcher's decision, called directly
 * (#9: no frame of the several-limits case on every call); with several,
 * rl_decide_limits.
 */
static inline void
rl_decide_policy(RlRequest *req, RlDecision *d)
{
	if (likely(req->nlimits == 0))
		rl_decide(req, d);
	else
		rl_decide_limits(req, d);
}

#endif							/* RL_POLICY_LIMIT_H */
