/*-------------------------------------------------------------------------
 *
 * ratelimit.c
 *		Module magic, _PG_init and the shared-memory hooks.
 *
 * The extension must be in shared_preload_libraries: its state lives in
 * shared memory sized at postmaster start.  Loaded any other way it defines
 * nothing, and every SQL function fails with SQLSTATE 55000.
 *
 * _PG_init is thin: each module defines its own settings in its init
 * function (store.c, dispatch.c, redis_*.c) and sets up what it needs
 * (policy.c), and the shared-memory hooks call each module's request and
 * startup.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"

#include "utils/guc.h"

#include "args.h"
#include "compat.h"
#include "dispatch.h"
#include "persist.h"
#include "policy.h"
#include "redis.h"
#include "stats.h"
#include "store.h"
#include "trigger.h"

RL_MODULE_MAGIC;

void		_PG_init(void);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Ask for each module's shared memory and locks (shmem_request_hook). */
static void
rl_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	rl_store_request();
	rl_stats_request();
	rl_redis_shmem_request();
	rl_redis_lease_request();
}

/*
 * Attach to (or create) the shared state.  In the postmaster, a store just
 * created is filled with the durable keys (their file, whatever the last
 * shutdown was; WAL replay brings them up to date) and the state saved at
 * the last clean shutdown, and the state is saved again at the next one.
 */
static void
rl_shmem_startup(void)
{
	bool		created;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	created = rl_store_startup();
	rl_stats_startup();
	rl_redis_shmem_startup();
	rl_redis_lease_startup();
	LWLockRelease(AddinShmemInitLock);

	if (!IsUnderPostmaster)
	{
		if (created)
		{
			rl_store_durable_load();
			rl_persist_load();
		}
		on_shmem_exit(rl_persist_shutdown, (Datum) 0);
	}
}

/*
 * Define every module's settings and install the shared-memory hooks, while
 * shared_preload_libraries is processed.
 */
void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	rl_store_init();
	rl_store_wal_init();
	rl_args_init();
	rl_trigger_init();
	rl_dispatch_init();
	rl_redis_init();
	rl_policy_init();
	MarkGUCPrefixReserved("ratelimit");

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = rl_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = rl_shmem_startup;
}
