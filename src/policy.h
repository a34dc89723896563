/*-------------------------------------------------------------------------
 *
 * policy.h
 *		Named policies, cached per backend.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_POLICY_H
#define RL_POLICY_H

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/inval.h"

#include "clock.h"
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

/* the policy cache's state (policy.c), for rl_policy_ref_again */
extern rl_hidden bool rl_policy_cache_valid;
extern rl_hidden uint32 rl_policy_generation;
extern rl_hidden Oid rl_policy_reader;
extern rl_hidden Oid rl_policy_allowed;
extern rl_hidden TimestampTz rl_policy_news_stmt;
extern rl_hidden uint64 rl_policy_news_tsc;
extern rl_hidden uint64 rl_policy_news_span;

/*
 * How long news hold where the clock has no rate for the time-stamp
 * counter (the kernel keeps time with another clocksource, kvm-clock say):
 * a millisecond or less for any counter of 1 GHz or more.
 */
#define RL_POLICY_NEWS_TICKS	UINT64CONST(1000000)

extern void rl_policy_init(void);
extern void rl_policy_news_take(void);
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
extern void rl_policy_request_placed(RlPolicyRef *ref, char *buf, int keylen,
									 RlRequest *req);
extern bool rl_policy_request_reusable(const RlPolicyRef *ref);
extern void rl_policy_args(FunctionCallInfo fcinfo, RlPolicyRef *ref,
						   char *buf, int key_arg, int policy_arg, int at_arg,
						   int cost_arg, RlRequest *req);

/*
 * Take in the changes other sessions committed (their invalidations: of
 * rl_policy's rows, its privileges and row security, role memberships),
 * even inside a transaction that already holds its locks, where
 * PostgreSQL would deliver them only at its next lock: at a statement's
 * first check, then at most a millisecond apart while it runs, by the
 * time-stamp counter: at the rate the clock measured, else at a
 * millisecond or less for any counter of 1 GHz or more.  This needs no
 * time of day, only a bound on how long news wait: a counter that runs
 * fast takes them in more often, one that went back (another CPU's) at
 * once, and a new statement always does.  #9: AcceptInvalidationMessages
 * cost a quota trigger's row 79 instructions; this test costs a few.  The
 * session's own changes reach the cache at once either way (at its next
 * command).
 */
static inline void
rl_policy_news(void)
{
#ifdef RL_CLOCK_TSC
	if (likely(GetCurrentStatementStartTimestamp() == rl_policy_news_stmt &&
			   __builtin_ia32_rdtsc() - rl_policy_news_tsc <
			   rl_policy_news_span))
		return;
#endif
	rl_policy_news_take();
}

/*
 * The policy ref found last, as rl_policy_find_ref with the same name
 * would return it, in the usual case: the cache is still the one it was
 * found in once committed changes are taken in (AcceptInvalidationMessages,
 * as every lookup), and the role using it the one it was read as or the
 * one allowed last.  NULL otherwise: rl_policy_find_ref decides (#9: a
 * quota trigger, whose ref always names the same policy, checks on every
 * row without a call's frame or a comparison of the name).
 */
static inline const RlPolicy *
rl_policy_ref_again(const RlPolicyRef *ref)
{
	Oid			role;

	rl_policy_news();
	role = GetUserId();
	if (likely(rl_policy_cache_valid && ref->pol != NULL &&
			   ref->generation == rl_policy_generation &&
			   (role == rl_policy_reader || role == rl_policy_allowed)))
		return ref->pol;
	return NULL;
}

/*
 * The part of a request under pol that follows its key's length, its key
 * written in place (rl_policy_request_placed): the stored key's length,
 * and a calendar window's bounds (calendar: it follows the
 * ratelimit.time_zone of each call).
 */
static inline void
rl_policy_request_rekey(const RlPolicy *pol, bool calendar, int keylen,
						RlRequest *req)
{
	req->keylen = pol->namelen + 1 + keylen;
	if (calendar)
		rl_policy_period(pol, pol->anchor, &req->params);
}

#endif							/* RL_POLICY_H */
