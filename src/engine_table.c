/*-------------------------------------------------------------------------
 *
 * engine_table.c
 *		The engine table: the engines (their interface is RlEngine,
 *		engine.h), by the id receipts name them with.
 *
 * Adding an engine: its files, its RlEngine, an id in engine.h and its
 * place here; the dispatcher then decides which requests go to it.  No
 * shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "engine.h"
#include "redis.h"
#include "store.h"

const RlEngine *const rl_engines[RL_NUM_ENGINES] = {
	[RL_ENGINE_NONE] = NULL,
	[RL_ENGINE_STORE] = &rl_store_engine,
	[RL_ENGINE_REDIS] = &rl_redis_engine,
};
