/*-------------------------------------------------------------------------
 *
 * guc.h
 *		The ratelimit.* settings.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_GUC_H
#define RL_GUC_H

#include "utils/guc.h"

typedef enum RlFailMode
{
	RL_FAIL_OPEN,				/* allow what cannot be decided */
	RL_FAIL_CLOSED,				/* deny it */
	RL_FAIL_LOCAL				/* decide it in shared memory (remote
								 * backends only; "open" for the store) */
} RlFailMode;

extern int	rl_max_keys;
extern int	rl_pool_size;
extern int	rl_max_owners;
extern int	rl_fail_mode;
extern bool rl_refund_on_rollback;

/* ---- Redis backend (redis.c, dispatch.c) ---- */

typedef enum RlBackend
{
	RL_BACKEND_LOCAL,			/* the shared-memory store */
	RL_BACKEND_REDIS,			/* Redis decides every call */
	RL_BACKEND_HYBRID			/* a local pre-check, then Redis */
} RlBackend;

typedef enum RlRedisClock
{
	RL_REDIS_CLOCK_SERVER,		/* Redis TIME */
	RL_REDIS_CLOCK_CLIENT		/* this server's clock */
} RlRedisClock;

extern int	rl_backend;
extern char *rl_redis_nodes;
extern int	rl_redis_database;
extern char *rl_redis_user;
extern char *rl_redis_password;
extern char *rl_redis_namespace;
extern int	rl_redis_connect_timeout;
extern int	rl_redis_command_timeout;
extern int	rl_redis_clock;
extern int	rl_redis_probe_interval;
extern double rl_hybrid_multiple;
extern int	rl_redis_batch;

/* the values of ratelimit.backend and ratelimit.fail_mode (policy.c too) */
extern const struct config_enum_entry rl_backend_options[];
extern const struct config_enum_entry rl_fail_mode_options[];

extern void rl_guc_init(void);

#endif							/* RL_GUC_H */
