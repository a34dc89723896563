/*-------------------------------------------------------------------------
 *
 * redis.h
 *		The Redis engine: decisions made by Lua scripts inside Redis (or a
 *		Redis Cluster), with a circuit breaker shared by all backends.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_REDIS_H
#define RL_REDIS_H

#include "engine.h"

/*
 * Earliest explicit "at" the Redis engine accepts (Unix us, 1898-08-11):
 * the scripts' exact arithmetic keeps negative values as plain Lua numbers,
 * which must stay above -2^53 after a window (at most 2^52 us) is taken off.
 */
#define RL_REDIS_MIN_TIME	(-((int64) 1 << 51))

/* the engine (engine.h), redis_engine.c */
extern const RlEngine rl_redis_engine;

/* settings, from _PG_init; shared memory (the breaker and counters) */
extern void rl_redis_init(void);
extern void rl_redis_shmem_request(void);
extern void rl_redis_shmem_startup(void);

/* concurrency limits' leases (redis_lease.c): their table, their worker */
extern void rl_redis_lease_request(void);
extern void rl_redis_lease_startup(void);

#endif							/* RL_REDIS_H */
