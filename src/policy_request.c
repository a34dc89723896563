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
 * key is copied into the current memory context.
 */
void
rl_policy_request(const RlPolicy *pol, text *key, RlRequest *req)
{
	const char *bytes;
	int			len;
	int			namelen = strlen(pol->name);
	char	   *stored;

	rl_arg_key(key, &bytes, &len);
	stored = palloc(namelen + 1 + len);
	memcpy(stored, pol->name, namelen + 1);
	memcpy(stored + namelen + 1, bytes, len);

	rl_request_init(req);
	req->algo = pol->algo;
	req->dbid = MyDatabaseId;
	req->key = stored;
	req->keylen = namelen + 1 + len;
	req->params = pol->params;
	/* a calendar window without a zone of its own follows the setting */
	if (!pol->zone_given && pol->algo == RL_FIXED_WINDOW && pol->per.time == 0)
		rl_policy_period(pol, pol->anchor, &req->params);
	req->backend = pol->backend;
	req->fail_mode = pol->fail_mode;
	req->shadow = pol->shadow;
	req->policy = stored;		/* the stored key starts with it */
	req->block_duration = pol->block_duration;
	req->nlimits = pol->nlimits;
	req->limits = pol->limits;
	if (unlikely(pol->overrides != NULL))
		rl_override_apply(pol->overrides, pol->burst_given, bytes, len, req);
}

/*
 * The request of a SQL function's policy form: the key (argument key_arg)
 * under the policy (policy_arg), with an optional cost replacing the
 * policy's (cost_arg) and an optional explicit time (at_arg); an argument
 * number is -1 where the function has no such argument.  Every argument
 * is checked.
 */
void
rl_policy_args(FunctionCallInfo fcinfo, int key_arg, int policy_arg,
			   int at_arg, int cost_arg, RlRequest *req)
{
	const RlPolicy *pol;

	rl_require_store();
	rl_arg_not_null(fcinfo, key_arg, "key");
	rl_arg_not_null(fcinfo, policy_arg, "policy");
	pol = rl_policy_get(PG_GETARG_TEXT_PP(policy_arg));
	rl_policy_request(pol, PG_GETARG_TEXT_PP(key_arg), req);
	if (cost_arg >= 0 && !PG_ARGISNULL(cost_arg))
	{
		req->params.cost = PG_GETARG_INT64(cost_arg);
		rl_arg_cost(req->params.cost);
		rl_cost_check(req->algo, &req->params);
	}
	if (at_arg >= 0 && !PG_ARGISNULL(at_arg))
		req->at = rl_arg_at(PG_GETARG_TIMESTAMPTZ(at_arg));
}
