/*-------------------------------------------------------------------------
 *
 * policy_request.c
 *		The request of a call under a policy: the key's stored form, its
 *		override (override.c), the policy's other limits and penalty box
 *		(carried for the dispatcher), and a SQL function's policy
 *		arguments.
 *
 * No shared state: the policies are policy.c's cache.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "args.h"
#include "override.h"
#include "policy.h"

/*
 * The policy's part of its calls' requests, written into req: everything
 * but the key, the stored key and what follows the key (its override) or
 * each call (a calendar window's bounds under ratelimit.time_zone).  The
 * request counts its decisions through the policy's stats handle, and
 * carries the policy's other limits and its penalty box for the
 * dispatcher.
 */
static void
request_policy(const RlPolicy *pol, RlRequest *req)
{
	rl_request_init(req);
	req->algo = pol->algo;
	req->dbid = MyDatabaseId;
	req->params = pol->params;
	req->backend = pol->backend;
	req->fail_mode = pol->fail_mode;
	req->shadow = pol->shadow;
	req->durable = pol->durable;
	/* the cache's entries are ours: the handle is updated as it counts */
	req->stats = (RlStatsHandle *) &pol->stats;
	req->block_duration = pol->block_duration;
	req->nlimits = pol->nlimits;
	req->limits = pol->limits;
	req->reserve = pol->reserve;
}

/* Does the policy's window follow ratelimit.time_zone at each call? */
static inline bool
request_calendar(const RlPolicy *pol)
{
	/* a calendar window without a zone of its own follows the setting */
	return !pol->zone_given && pol->algo == RL_FIXED_WINDOW &&
		pol->per.time == 0;
}

/*
 * The key's part of a request whose policy's part is written, its stored
 * key in buf: the policy's name, a NUL byte and keylen bytes of key (text
 * never contains NUL, so policies never share state with each other or
 * with direct calls); a calendar window's bounds (calendar: it follows
 * the setting) and the key's override.
 */
static inline void
request_placed(const RlPolicy *pol, bool calendar, char *buf, int keylen,
			   RlRequest *req)
{
	req->key = buf;
	req->policy = buf;			/* the stored key starts with it */
	rl_policy_request_rekey(pol, calendar, keylen, req);
	if (unlikely(pol->overrides != NULL))
		rl_override_apply(pol, buf + pol->namelen + 1, keylen, req);
}

/*
 * request_placed for a key of the caller's: the key checked first, then
 * written into buf (room for NAMEDATALEN + keylen bytes) after the
 * policy's name.
 */
static inline void
request_key(const RlPolicy *pol, bool calendar, const char *key, int keylen,
			char *buf, RlRequest *req)
{
	if (keylen > RL_MAX_KEY_LEN)
		rl_arg_key_too_long(keylen);
	memcpy(buf, pol->name, pol->namelen + 1);
	memcpy(buf + pol->namelen + 1, key, keylen);
	request_placed(pol, calendar, buf, keylen, req);
}

/*
 * Build the request for a key under a policy (request_policy, then
 * request_key): the stored key written into buf (room for NAMEDATALEN +
 * keylen bytes).
 */
static void
rl_policy_request_in(const RlPolicy *pol, const char *key, int keylen,
					 char *buf, RlRequest *req)
{
	request_policy(pol, req);
	request_key(pol, request_calendar(pol), key, keylen, buf, req);
}

/*
 * Make the request template of the policy ref found (rl_policy_find_ref,
 * not NULL) if it has none: the policy's part of every request of it,
 * made once per policy found (#9), not at each call.
 */
static inline void
request_template(RlPolicyRef *ref)
{
	if (unlikely(ref->request_of != ref->pol))
	{
		request_policy(ref->pol, &ref->request);
		ref->calendar = request_calendar(ref->pol);
		ref->request_of = ref->pol;
	}
}

/*
 * rl_policy_request_in under the policy ref found, from its request
 * template: only the key's part is written.
 */
static void
rl_policy_request_ref(RlPolicyRef *ref, const char *key, int keylen,
					  char *buf, RlRequest *req)
{
	request_template(ref);
	*req = ref->request;
	request_key(ref->pol, ref->calendar, key, keylen, buf, req);
}

/*
 * rl_policy_request_ref for a stored key the caller wrote in place (#9: a
 * quota trigger builds its row's key there): buf holds the policy's name,
 * a NUL and keylen bytes of key (checked).
 */
void
rl_policy_request_placed(RlPolicyRef *ref, char *buf, int keylen,
						 RlRequest *req)
{
	request_template(ref);
	*req = ref->request;
	request_placed(ref->pol, ref->calendar, buf, keylen, req);
}

/*
 * May a request made by rl_policy_request_placed serve the next keys of
 * the same policy found, each written in place over the last, with only
 * rl_policy_request_rekey (#9: a quota trigger's rows, without a copy of
 * the template each)?  Only if nothing else in it depends on the key: the
 * policy has no overrides, and one limit (rl_decide_limits writes the
 * binding limit into its request).  The caller sets what is its own (the
 * time, the priority, tracking) at each call.
 */
bool
rl_policy_request_reusable(const RlPolicyRef *ref)
{
	return ref->pol->overrides == NULL && ref->pol->nlimits == 0;
}

/*
 * rl_policy_request_in for a text key, the stored key allocated in the
 * current memory context.
 */
void
rl_policy_request(const RlPolicy *pol, text *key, RlRequest *req)
{
	int			len = VARSIZE_ANY_EXHDR(key);

	if (len > RL_MAX_KEY_LEN)
		rl_arg_key_too_long(len);
	rl_policy_request_in(pol, VARDATA_ANY(key), len,
						 palloc(pol->namelen + 1 + len), req);
}

/*
 * The request of a SQL function's policy form: the key (argument key_arg)
 * under the policy (policy_arg), with an optional cost replacing the
 * policy's (cost_arg) and an optional explicit time (at_arg); an argument
 * number is -1 where the function has no such argument.  Every argument
 * is checked.  The policy is remembered in the call site's ref (NULL: a
 * call that needs no memory); the stored key is written into buf
 * (RL_MAX_STORED_KEY bytes; NULL: allocated in the current context).
 */
void
rl_policy_args(FunctionCallInfo fcinfo, RlPolicyRef *ref, char *buf,
			   int key_arg, int policy_arg, int at_arg, int cost_arg,
			   RlRequest *req)
{
	RlPolicyRef once;
	const RlPolicy *pol;
	text	   *name;
	text	   *key;

	rl_require_store();
	rl_arg_not_null(fcinfo, key_arg, "key");
	rl_arg_not_null(fcinfo, policy_arg, "policy");
	if (ref == NULL)
	{
		memset(&once, 0, sizeof(once));
		ref = &once;
	}
	name = PG_GETARG_TEXT_PP(policy_arg);
	pol = rl_policy_find_ref(ref, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	if (pol == NULL)
		rl_policy_missing(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	key = PG_GETARG_TEXT_PP(key_arg);
	if (buf == NULL)
		rl_policy_request(pol, key, req);
	else
		rl_policy_request_ref(ref, VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key),
							  buf, req);
	if (cost_arg >= 0 && !PG_ARGISNULL(cost_arg))
	{
		req->params.cost = PG_GETARG_INT64(cost_arg);
		rl_arg_cost(req->params.cost);
		rl_cost_check(req->algo, &req->params);
	}
	if (at_arg >= 0 && !PG_ARGISNULL(at_arg))
		req->at = rl_arg_at(PG_GETARG_TIMESTAMPTZ(at_arg));
}
