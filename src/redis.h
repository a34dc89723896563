/*-------------------------------------------------------------------------
 *
 * redis.h
 *		The Redis backend: decisions made by Lua scripts inside Redis (or a
 *		Redis Cluster), with a circuit breaker shared by all backends.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_REDIS_H
#define RL_REDIS_H

#include "backend.h"

/*
 * Earliest explicit "at" the Redis backend accepts (Unix us, 1898-08-11):
 * the scripts' exact arithmetic keeps negative values as plain Lua numbers,
 * which must stay above -2^53 after a window (at most 2^52 us) is taken off.
 */
#define RL_REDIS_MIN_TIME	(-((int64) 1 << 51))

/* Counters shown by rl_redis_info(); see docs/redis.md. */
typedef enum RlRedisCounter
{
	RL_REDIS_CALLS,				/* decisions sent to Redis */
	RL_REDIS_FAILURES,			/* of those, not decided (down, slow,
								 * error) */
	RL_REDIS_SKIPPED,			/* not sent: the breaker was open */
	RL_REDIS_BREAKER_TRIPS,		/* times the breaker opened */
	RL_REDIS_CONNECTS,			/* connections opened */
	RL_REDIS_REDIRECTS,			/* MOVED and ASK redirections followed */
	RL_REDIS_SCRIPT_LOADS,		/* NOSCRIPT answered with EVAL */
	RL_REDIS_BATCHED,			/* admitted from a local lease (batching) */
	RL_REDIS_NCOUNTERS
} RlRedisCounter;

typedef struct RlRedisStats
{
	int64		counters[RL_REDIS_NCOUNTERS];
	int64		breaker_until;	/* Unix us; 0 when the breaker is closed */
	int64		last_error_at;	/* Unix us; 0 if none */
	char		last_error[256];
} RlRedisStats;

/* the scripts (redis_scripts.c) */
extern const char rl_lua_prelude[];
extern const char rl_lua_bucket[];
extern const char rl_lua_fixed_window[];
extern const char rl_lua_sliding_window_log[];
extern const char rl_lua_sliding_window_counter[];
extern const char rl_lua_token_bucket[];
extern const char rl_lua_leaky_bucket[];
extern const char rl_lua_refund_fixed_window[];
extern const char rl_lua_refund_sliding_window_log[];
extern const char rl_lua_refund_sliding_window_counter[];
extern const char rl_lua_refund_token_bucket[];
extern const char rl_lua_refund_leaky_bucket[];
extern const char rl_lua_single[];
extern const char rl_lua_all[];

extern void rl_redis_request(void);
extern void rl_redis_startup(void);
extern void rl_redis_config_changed(void);
extern bool rl_redis_parse_nodes(const char *spec, int *nnodes,
								 char ***hosts, int **ports);
extern void rl_redis_check_request(const RlRequest *req);
extern RlStatus rl_redis_decide(const RlRequest *req, RlDecision *d);
extern void rl_redis_refund(const RlRequest *req, int64 t,
							uint64 incarnation);
extern RlStatus rl_redis_decide_all(const RlRequest *reqs, int n,
									RlDecision *ds);
extern int64 rl_redis_reset(Oid dbid, const char *key, int keylen,
							bool all_algos, RlAlgo algo);
extern int64 rl_redis_reset_all(Oid dbid);
extern void rl_redis_stats(RlRedisStats *stats);
extern void rl_redis_count(RlRedisCounter c);

/* redis_batch.c */
extern RlStatus rl_batch_decide(const RlRequest *req, RlDecision *d);
extern void rl_batch_refund(const RlRequest *req, uint64 incarnation);
extern void rl_batch_forget(void);
extern uint16 rl_redis_slot(const char *key, size_t len);

#endif							/* RL_REDIS_H */
