/*-------------------------------------------------------------------------
 *
 * store.h
 *		The shared-memory store: the local storage engine.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_STORE_H
#define RL_STORE_H

#include "engine.h"

/* the engine (engine.h), store.c */
extern const RlEngine rl_store_engine;

/*
 * its settings: ratelimit.max_keys, pool_size, max_owners, role_share,
 * database_share, durable_reserve
 */
extern int	rl_max_keys;
extern int	rl_pool_size;
extern int	rl_max_owners;
extern int	rl_role_share;
extern int	rl_database_share;
extern int	rl_durable_reserve;

extern void rl_store_init(void);
extern void rl_store_request(void);
extern bool rl_store_startup(void);
extern bool rl_store_ready(void);

/* store_wal.c: durable keys (ratelimit.durable, the durable file) */
extern bool rl_durable;
extern void rl_store_wal_init(void);
extern void rl_store_durable_load(void);

/* store_admin.c: who holds the store (rl_owners) */
extern int	rl_store_owners(RlOwnerImage *out);
extern int	rl_store_max_owners(void);

#endif							/* RL_STORE_H */
