/*-------------------------------------------------------------------------
 *
 * redis_lease_worker.c
 *		The lease worker: a background worker that renews this server's
 *		leases on Redis (redis_lease.c) every third of the lease time and
 *		removes those given back where a backend could not (an abort, an
 *		exit, a backend gone), tickets of waiters included.
 *
 * Shared state: the lease table (redis_lease.h), under its LWLock, copied
 * out before Redis is reached; an entry's generation is checked again
 * after.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/wait_event.h"

#include "redis_lease.h"

PGDLLEXPORT void rl_lease_worker_main(Datum arg);

/* Has the entry's backend gone (its PGPROC has another pid, or none)? */
static bool
holder_gone(const RlSlotLease *l)
{
	return GetPGProcByNumber(l->procno)->pid != l->pid;
}

/*
 * One round: mark the leases of backends gone, copy those to remove and
 * those due for renewal, then tell Redis, outside the lock.  Returns how
 * long (ms) until the next lease is due.
 */
static long
worker_round(RlSlotLease *copies, int *index)
{
	int64		now = rl_clock_now();
	int64		period = (int64) rl_redis_lease_time * 1000 / 3;
	int64		next = period;
	char		holder[RL_HOLDER_LEN];
	int			n = 0;
	int			k;
	int			i;

	LWLockAcquire(rl_lease_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < rl_lease_shared->nleases; i++)
	{
		RlSlotLease *l = &rl_lease_shared->leases[i];

		if (l->state == RL_LEASE_FREE)
			continue;
		if (l->state != RL_LEASE_RELEASE && holder_gone(l))
			l->state = RL_LEASE_RELEASE;
		if (l->state == RL_LEASE_RELEASE ||
			(l->state == RL_LEASE_HELD && now - l->renewed >= period))
		{
			memcpy(&copies[n], l, offsetof(RlSlotLease, key) + l->keylen);
			index[n++] = i;
		}
		else if (l->state == RL_LEASE_HELD)
			next = Min(next, l->renewed + period - now);
	}
	LWLockRelease(rl_lease_shared->lock);

	if (n > 0)
		(void) rl_redis_conn_ready();
	for (k = 0; k < n; k++)
	{
		RlSlotLease *c = &copies[k];
		bool		release = c->state == RL_LEASE_RELEASE;
		RlRedisCall call;
		RlSlotLeaseReply reply;
		int64		t = rl_clock_now();

		rl_lease_holder_name(holder, index[k], c);
		rl_redis_call_begin(&call);
		rl_lease_script(&call, release ? "release" : "renew", c->key,
					 c->keylen, holder, NULL, &reply);
		if (!reply.ok)
			rl_redis_failed(&call, false);
		if (release)
		{
			/* removed, or expired by now: forgotten either way */
			if (reply.ok || t > c->expires)
				rl_lease_set(index[k], c->generation, RL_LEASE_FREE);
			else
				next = Min(next, RL_LEASE_RETRY * 1000);
			continue;
		}
		if (!reply.ok)
		{
			next = Min(next, RL_LEASE_RETRY * 1000);
			continue;
		}
		LWLockAcquire(rl_lease_shared->lock, LW_EXCLUSIVE);
		{
			RlSlotLease *l = &rl_lease_shared->leases[index[k]];

			if (l->generation == c->generation && l->state == RL_LEASE_HELD)
			{
				l->renewed = t;
				l->expires = t + (int64) rl_redis_lease_time * 1000;
				if (reply.taken != 1)
					l->state = RL_LEASE_LOST;
			}
		}
		LWLockRelease(rl_lease_shared->lock);
	}
	return (long) Max(next / 1000, RL_LEASE_MIN_WAIT);
}

/* on_shmem_exit of the worker: nobody to wake any more. */
static void
worker_exit(int code, Datum arg)
{
	LWLockAcquire(rl_lease_shared->lock, LW_EXCLUSIVE);
	rl_lease_shared->worker = -1;
	LWLockRelease(rl_lease_shared->lock);
}

/*
 * The lease worker's main (a background worker, from a consistent state
 * on): renew the server's leases every third of the lease time, remove
 * those given back, until the server stops.  It uses the server's
 * settings (postgresql.conf) to reach Redis.  An error ends it; it is
 * started again a second later.
 */
void
rl_lease_worker_main(Datum arg)
{
	RlSlotLease *copies;
	int		   *index;
	MemoryContext round;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	/* the scripts' SHA1 (a cryptohash) is tracked by a resource owner */
	CurrentResourceOwner = ResourceOwnerCreate(NULL, "ratelimit lease worker");

	copies = MemoryContextAllocHuge(TopMemoryContext,
									sizeof(RlSlotLease) * rl_lease_shared->nleases);
	index = MemoryContextAlloc(TopMemoryContext,
							   sizeof(int) * rl_lease_shared->nleases);
	round = AllocSetContextCreate(TopMemoryContext, "ratelimit lease worker",
								  ALLOCSET_DEFAULT_SIZES);
	on_shmem_exit(worker_exit, (Datum) 0);
	LWLockAcquire(rl_lease_shared->lock, LW_EXCLUSIVE);
	rl_lease_shared->worker = rl_my_procno();
	LWLockRelease(rl_lease_shared->lock);

	for (;;)
	{
		MemoryContext old;
		long		wait;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		old = MemoryContextSwitchTo(round);
		wait = worker_round(copies, index);
		MemoryContextSwitchTo(old);
		MemoryContextReset(round);
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 wait, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
