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
 * Build the request for a key under a policy.  The stored key is the
 * policy's name, a NUL byte and the key: text never contains NUL, so
 * policies never share state with each other or with direct calls.  The
 * stored key is written into buf (room for NAMEDATALEN + keylen bytes),
 * the key checked first.  The request counts its decisions through the
 * policy's stats handle, and carries the key's override, the policy's
 * other limits and its penalty box for the dispatcher.
 */
void
rl_policy_request_in(const RlPolicy *pol, const char *key, int keylen,
					 char *buf, RlRequest *req)
{
	if (keylen > RL_MAX_KEY_LEN)
		rl_arg_key_too_long(keylen);
	memcpy(buf, pol->name, pol->namelen + 1);
	memcpy(buf + pol->namelen + 1, key, keylen);

	rl_request_init(req);
	req->algo = pol->algo;
	req->dbid = MyDatabaseId;
	req->key = buf;
	req->keylen = pol->namelen + 1 + keylen;
	req->params = pol->params;
	/* a calendar window without a zone of its own follows the setting */
	if (!pol->zone_given && pol->algo == RL_FIXED_WINDOW && pol->per.time == 0)
		rl_policy_period(pol, pol->anchor, &req->params);
	req->backend = pol->backend;
	req->fail_mode = pol->fail_mode;
	req->shadow = pol->shadow;
	req->durable = pol->durable;
	req->policy = buf;			/* the stored key starts with it */
	/* the cache's entries are ours: the handle is updated as it counts */
	req->stats = (RlStatsHandle *) &pol->stats;
	req->block_duration = pol->block_duration;
	req->nlimits = pol->nlimits;
	req->limits = pol->limits;
	req->reserve = pol->reserve;
	if (unlikely(pol->overrides != NULL))
		rl_override_apply(pol, key, keylen, req);
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
	RlPolicyRef once = {0};
	const RlPolicy *pol;
	text	   *name;
	text	   *key;

	rl_require_store();
	rl_arg_not_null(fcinfo, key_arg, "key");
	rl_arg_not_null(fcinfo, policy_arg, "policy");
	name = PG_GETARG_TEXT_PP(policy_arg);
	pol = rl_policy_find_ref(ref != NULL ? ref : &once, VARDATA_ANY(name),
							 VARSIZE_ANY_EXHDR(name));
	if (pol == NULL)
		rl_policy_missing(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	key = PG_GETARG_TEXT_PP(key_arg);
	if (buf == NULL)
		rl_policy_request(pol, key, req);
	else
		rl_policy_request_in(pol, VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key),
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
