/*-------------------------------------------------------------------------
 *
 * dispatch_durable.c
 *		The dispatcher's checks of durable policies' requests (dispatch.c
 *		calls them): where such a request may go, and the error when the
 *		store has no room for its key.
 *
 * No shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "dispatch_durable.h"

/*
 * Refuse a durable policy's request that cannot be made durable: on
 * another backend than the store (local: the request's backend, resolved,
 * is the store), or
 * one the store refuses (engine validate: a standby, durable keys not
 * enabled or not ready).
 */
void
rl_durable_check(const RlRequest *req, bool local)
{
	if (!local)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("policy \"%s\" is durable but ratelimit.backend is not local",
						req->policy),
				 errhint("Set the policy's backend to 'local'.")));
	rl_engine(RL_ENGINE_STORE)->validate(req);
}

/*
 * A durable key the store has no room for: fail_mode does not apply, a
 * durable policy must not silently run as a non-durable one.
 */
void
rl_durable_no_room(const RlRequest *req)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("no room in the ratelimit store for a key of durable policy \"%s\"",
					req->policy),
			 errdetail("Durable keys are never evicted; they stay until reset."),
			 errhint("Raise ratelimit.max_keys, or reset keys no longer needed.")));
}
