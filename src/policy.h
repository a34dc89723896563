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

#include "compat.h"
#include "engine.h"
#include "policy_row.h"

/*
 * A caller's memory of the policy a name found (a call site's, a quota
 * trigger's): valid while the policy cache is the one it was found in, so
 * that a call repeating the name costs no lookup, nor filling the
 * policy's part of each request (#9: rl_policy_request_ref makes the
 * template at its first call under the policy found; a lookup that finds
 * it anew voids it).  Zeroed: nothing found.
 */
typedef struct RlPolicyRef
{
	const RlPolicy *pol;
	uint32		generation;		/* the cache's when pol was found */
	int			len;
	char		name[NAMEDATALEN];
	const RlPolicy *request_of; /* the pol request was made from, or NULL */
	bool		calendar;		/* a calendar window following the
								 * ratelimit.time_zone of each call */
	RlRequest	request;		/* pol's request without a key */
} RlPolicyRef;

extern void rl_policy_init(void);
extern const RlPolicy *rl_policy_find(const char *name, int len);
extern const RlPolicy *rl_policy_get(text *name);
rl_noreturn extern void rl_policy_missing(const char *name, int len);
extern const RlPolicy *rl_policy_find_ref(RlPolicyRef *ref, const char *name,
										  int len);
extern const RlPolicy *rl_policy_peek(const char *name, bool *known);
extern uint32 rl_policy_changes(void);
extern bool rl_policy_any_remote(void);
extern void rl_policy_request(const RlPolicy *pol, text *key,
							  RlRequest *req);
extern void rl_policy_request_in(const RlPolicy *pol, const char *key,
								 int keylen, char *buf, RlRequest *req);
extern void rl_policy_request_ref(RlPolicyRef *ref, const char *key,
								  int keylen, char *buf, RlRequest *req);
extern void rl_policy_args(FunctionCallInfo fcinfo, RlPolicyRef *ref,
						   char *buf, int key_arg, int policy_arg, int at_arg,
						   int cost_arg, RlRequest *req);

#endif							/* RL_POLICY_H */
