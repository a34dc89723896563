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
extern void rl_shed_args(FunctionCallInfo fcinfo, int priority_arg,
						 int reserve_arg, RlRequest *req);
extern int64 rl_shed_headroom(const RlRequest *req);
extern const RlRequest *rl_shed_request(const RlRequest *req,
										RlRequest *copy);
extern const RlRequest *rl_shed_requests(const RlRequest *reqs, int n,
										 RlRequest *copies);
extern void rl_shed_report(const RlRequest *req, RlOutcome *out);

/* Does the request keep a headroom (a priority below critical, a reserve)? */
static inline bool
rl_shed_applies(const RlRequest *req)
{
	return req->priority >= RL_PRIORITY_NORMAL && req->reserve > 0;
}

#endif							/* RL_SHED_H */
