/*-------------------------------------------------------------------------
 *
 * ratelimit.c
 *		Module magic, _PG_init and the shared-memory hooks.
 *
 * The extension must be in shared_preload_libraries: its state lives in
 * shared memory sized at postmaster start.  Loaded any other way it defines
 * nothing, and every SQL function fails with SQLSTATE 55000.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"

#include "guc.h"
#include "redis.h"
#include "store.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
rl_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	rl_store_request();
	rl_redis_request();
}

static void
rl_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	rl_store_startup();
	rl_redis_startup();
	LWLockRelease(AddinShmemInitLock);
}

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	rl_guc_init();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = rl_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = rl_shmem_startup;
}
