/*-------------------------------------------------------------------------
 *
 * dispatch_admin.c
 *		The dispatcher's doors for administration and observation: resets,
 *		the engines' figures, the store's keys and owners.  Decisions are
 *		in dispatch.c.
 *
 * No shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "dispatch.h"
#include "store.h"

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
