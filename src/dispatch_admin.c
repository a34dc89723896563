/*-------------------------------------------------------------------------
 *
 * dispatch_admin.c
 *		The dispatcher's doors beside decisions (dispatch.c): charges after
 *		the fact (rl_adjust), resets, the engines' figures, the store's
 *		keys and owners.
 *
 * No shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "dispatch.h"
#include "dispatch_penalty.h"
#include "store.h"

/*
 * Charge units to a key after the fact (req->params.cost above zero), or
 * give them back (below zero): rl_adjust, outside of any transaction's
 * rollback (nothing is tracked).  d reports a look (cost 0) at the key's
 * state after it.  On the Redis backend the charge goes to Redis, in
 * hybrid mode to the store's pre-check too.  An unlimited key's override
 * leaves its state alone (a block does not: the units were used).  A
 * charge no engine could record is an ERROR: unlike a decision's, no
 * fail mode can stand in for it.
 */
void
rl_adjust_key(const RlRequest *req, RlDecision *d)
{
	int			backend = rl_request_backend(req);
	int64		now;

	rl_dispatch_enter();
	now = rl_clock_now();
	memset(d, 0, sizeof(*d));
	if ((req->override & RL_OVERRIDE_UNLIMITED) &&
		rl_override_decision(req, now, d) && d->out.allowed)
		return;
	if (backend != RL_BACKEND_REDIS)
	{
		RlRequest	local = backend == RL_BACKEND_HYBRID ?
			rl_hybrid_precheck(req) : *req;

		if (rl_engine(RL_ENGINE_STORE)->charge(&local, now, &d->out) != RL_OK)
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("the rate-limit store has no room for the key to charge"),
					 errhint("Raise \"ratelimit.max_keys\" or \"ratelimit.pool_size\", or retry once idle keys are reclaimed.")));
	}
	if (backend != RL_BACKEND_LOCAL)
	{
		const RlEngine *redis = rl_engine(RL_ENGINE_REDIS);

		redis->validate(req);
		if (redis->charge(req, now, &d->out) != RL_OK)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not charge the key in Redis"),
					 errdetail("Redis could not be reached in time, or the circuit breaker is open; nothing was charged there.")));
	}
}

/* Drop one stored key's state, in the store and in Redis if req uses it. */
static int64
reset_stored(const RlRequest *req, const RlRequest *stored, bool all_algos)
{
	int64		dropped;

	dropped = rl_engine(RL_ENGINE_STORE)->reset(stored->dbid, stored->key,
												stored->keylen, all_algos,
												stored->algo);
	if (rl_request_backend(req) != RL_BACKEND_LOCAL)
		dropped += rl_engine(RL_ENGINE_REDIS)->reset(stored->dbid,
													 stored->key,
													 stored->keylen,
													 all_algos,
													 stored->algo);
	return dropped;
}

/*
 * Drop a key's state (rl_reset): for one algorithm or all of them, in the
 * store, and in Redis too when the request's backend is not local; under
 * a policy, its penalty box too (dispatch.c).  Returns the number of
 * states dropped.  An ERROR if Redis cannot be reached (the store, cleared
 * first, stays cleared).
 */
int64
rl_reset_key(const RlRequest *req, bool all_algos)
{
	int64		dropped;

	rl_dispatch_enter();
	dropped = reset_stored(req, req, all_algos);
	if (req->policy != NULL)
	{
		char	   *buf = palloc(RL_MAX_STORED_KEY);
		RlRequest	box;

		rl_penalty_request(req, 0, buf, &box);
		dropped += reset_stored(req, &box, false);
		pfree(buf);
	}
	return dropped;
}

/*
 * Drop every state of a database (InvalidOid: of all), in the store, and
 * in Redis when ratelimit.backend uses it or policies_remote says a policy
 * does.
 */
int64
rl_reset_database(Oid dbid, bool policies_remote)
{
	int64		dropped;

	rl_dispatch_enter();
	dropped = rl_engine(RL_ENGINE_STORE)->reset_all(dbid);

	if (rl_backend != RL_BACKEND_LOCAL || policies_remote)
		dropped += rl_engine(RL_ENGINE_REDIS)->reset_all(dbid);
	return dropped;
}

/* An engine's figures (rl_store_info, rl_redis_info). */
int
rl_engine_info(RlEngineId engine, RlInfoItem *items)
{
	return rl_engine(engine)->info(items);
}

/* The next key holding state in the store (rl_keys). */
bool
rl_scan_keys(Oid dbid, uint64 *cursor, RlKeyImage *img)
{
	return rl_engine(RL_ENGINE_STORE)->scan(dbid, cursor, img);
}

/* What a look at a key of the store would report now (rl_keys). */
bool
rl_peek(const RlRequest *req, int64 now, RlOutcome *out)
{
	return rl_engine(RL_ENGINE_STORE)->peek(req, now, out);
}

/* The store's owners (rl_owners), palloc'd; returns how many. */
int
rl_owners_list(RlOwnerImage **owners)
{
	*owners = palloc(sizeof(RlOwnerImage) * rl_store_max_owners());
	return rl_store_owners(*owners);
}
