/*-------------------------------------------------------------------------
 *
 * dispatch_penalty.h
 *		The stored keys of a policy's parts and its penalty box's request.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_DISPATCH_PENALTY_H
#define RL_DISPATCH_PENALTY_H

#include "engine.h"

extern int	rl_policy_part_key(const RlRequest *req, const char *name,
							   char *buf);
extern void rl_penalty_request(const RlRequest *req, int64 cost, char *buf,
							   RlRequest *box);

#endif							/* RL_DISPATCH_PENALTY_H */
