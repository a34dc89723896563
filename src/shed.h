/*-------------------------------------------------------------------------
 *
 * shed.h
 *		Load shedding by priority: a call's priority and its policy's
 *		reserve, and the headroom its decisions keep free (shed.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_SHED_H
#define RL_SHED_H

#include "fmgr.h"

#include "engine.h"

/* a whole capacity, in the millionths a reserve is kept in */
#define RL_SHED_WHOLE		1000000

extern int32 rl_shed_reserve(double reserve, const char *name);
extern uint8 rl_shed_priority(text *priority);
extern const char *rl_shed_priority_name(uint8 priority);
extern int64 rl_shed_headroom(const RlRequest *req);
extern const RlRequest *rl_shed_requests(const RlRequest *reqs, int n,
										 RlRequest *copies);

/* Does the request keep a headroom (a priority below critical, a reserve)? */
static inline bool
rl_shed_applies(const RlRequest *req)
{
	return req->priority >= RL_PRIORITY_NORMAL && req->reserve > 0;
}

/*
 * The functions below are on the path of every decision: inline, so that
 * a call without a priority pays a few tests and no frame (#9).
 */

/*
 * A SQL function's priority (argument priority_arg) and, for a direct
 * call, its reserve (reserve_arg; -1: a policy's, already in req), into
 * req.  An argument past those of the function's SQL definition (an older
 * version's, without them) is none, as is NULL.
 */
static inline void
rl_shed_args(FunctionCallInfo fcinfo, int priority_arg, int reserve_arg,
			 RlRequest *req)
{
	if (PG_NARGS() > priority_arg && !PG_ARGISNULL(priority_arg))
		req->priority = rl_shed_priority(PG_GETARG_TEXT_PP(priority_arg));
	if (reserve_arg >= 0 && PG_NARGS() > reserve_arg &&
		!PG_ARGISNULL(reserve_arg))
		req->reserve = rl_shed_reserve(PG_GETARG_FLOAT8(reserve_arg),
									   "reserve");
}

/*
 * The request as decided: req itself when it keeps no headroom, else a
 * copy of it in copy with its headroom set.
 */
static inline const RlRequest *
rl_shed_request(const RlRequest *req, RlRequest *copy)
{
	if (likely(!rl_shed_applies(req)))
		return req;
	*copy = *req;
	copy->params.headroom = rl_shed_headroom(req);
	return copy;
}

/*
 * What a decision of the request (as rl_shed_request made it) reports as
 * remaining: the units left above its headroom, those the caller may use;
 * and whether a denial was the headroom's alone (out->shed, counted by
 * rl_stats and named by a quota trigger's error: rl_outcome_shed).
 */
static inline void
rl_shed_report(const RlRequest *req, RlOutcome *out)
{
	int64		headroom = req->params.headroom;

	out->shed = false;
	if (unlikely(headroom > 0))
	{
		out->shed = rl_outcome_shed(&req->params, out);
		out->remaining = out->remaining > headroom ?
			out->remaining - headroom : 0;
	}
}

#endif							/* RL_SHED_H */
