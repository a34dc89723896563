/*-------------------------------------------------------------------------
 *
 * redis_lease.c
 *		Concurrency limits on Redis (engine.h's acquire and release): a
 *		slot is a lease with an expiry, renewed by a background worker
 *		while the backend that holds it lives.
 *
 * A key's slots are a sorted set in Redis (lua/lease.lua): one member per
 * lease, named by its holder (this server's random number, the backend's
 * pid, the lease's entry and its generation: unique per server, backend
 * and slot), scored by when it expires (Redis TIME).  Taking a slot drops
 * the expired leases, counts the others and adds one if in_flight + 1 +
 * headroom <= limit.  A lease lasts ratelimit.redis_lease_time; it is
 * renewed while its holder lives, so a server that stops or dies frees
 * its slots within that time, and one paused longer loses them to others
 * (docs/redis.md: the trade-off).
 *
 * A backend cannot renew while it is idle, so the server's live leases are
 * kept in shared memory (RlSlotLeaseShared, ratelimit.redis_max_leases
 * entries, each with the key's Redis name) and the lease worker, a
 * background worker, renews them every third of the lease time.  An entry
 * is TAKING while its acquire runs, HELD once taken, LOST when a renewal
 * found its lease gone (expired, or the key reset: it is not brought
 * back, another may have its slot), RELEASE when its slot is given back
 * but Redis has not been told yet.  A backend gives a slot back itself
 * when it may do I/O (rl_release, a transaction's slots before its commit:
 * slots.c); inside an abort or at exit it marks the entry and wakes the
 * worker, which removes the lease.  The worker also marks the entries of
 * a backend that is gone (its PGPROC has another pid now) and keeps
 * trying to remove a lease until its expiry has passed.  A backend killed
 * by a signal makes the postmaster reinitialize shared memory: its leases
 * (and every other of this server) are left to expire, under a new server
 * number.  Waiting for a slot (max_wait) is not offered on Redis
 * (dispatch_slots.c refuses it).
 *
 * Shared state: the table, under the LWLock "ratelimit leases" (exclusive
 * to change an entry, held to scan and copy; no allocation, error or I/O
 * under it).  Redis is reached outside it, with the entry's generation
 * checked again after.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/wait_event.h"

#include "redis_int.h"

/* longest Redis name of a key: rl:{<namespace>:cc:<key>} */
#define RL_LEASE_KEY_MAX	(RL_MAX_STORED_KEY + 2 * NAMEDATALEN)

/* a holder's name: server number, pid, entry, generation */
#define RL_HOLDER_LEN		64

/* shortest wait of the worker between two rounds (ms) */
#define RL_LEASE_MIN_WAIT	10

/* how soon the worker tries again after a failed renewal (ms) */
#define RL_LEASE_RETRY		1000

typedef enum RlSlotLeaseState
{
	RL_LEASE_FREE = 0,
	RL_LEASE_TAKING,			/* its acquire is under way */
	RL_LEASE_HELD,				/* renewed by the worker */
	RL_LEASE_LOST,				/* its lease was gone at a renewal */
	RL_LEASE_RELEASE			/* to be removed from Redis */
} RlSlotLeaseState;

/* One lease of this server. */
typedef struct RlSlotLease
{
	uint8		state;			/* RlSlotLeaseState */
	uint32		generation;		/* one more at each use of the entry */
	int			pid;			/* its backend */
	int			procno;
	int64		renewed;		/* taken or last renewed (Unix us) */
	int64		expires;		/* its lease ends by then at the latest */
	int			keylen;
	char		key[RL_LEASE_KEY_MAX];	/* the key's Redis name */
} RlSlotLease;

typedef struct RlSlotLeaseShared
{
	LWLock	   *lock;
	uint64		server;			/* random, new at each (re)start */
	int			worker;			/* the worker's procno, or -1 */
	int			nleases;
	RlSlotLease leases[FLEXIBLE_ARRAY_MEMBER];
} RlSlotLeaseShared;

int			rl_redis_lease_time = 30000;	/* ms */
int			rl_redis_max_leases = 256;

static RlSlotLeaseShared *lease_shared = NULL;
static bool exit_registered = false;

/*
 * Leases this backend marked RELEASE since its last look (releases_flush
 * scans the table only then: a call's path stays short).
 */
static int	my_releases = 0;

PGDLLEXPORT void rl_lease_worker_main(Datum arg);

/* What a lease script answered. */
typedef struct RlSlotLeaseReply
{
	bool		ok;				/* Redis answered */
	int64		taken;			/* acquire: 1 if taken; else the count */
	int64		in_flight;		/* acquire: slots held after the call */
} RlSlotLeaseReply;

/* The lease settings and the worker (from rl_redis_init). */
void
rl_redis_lease_init(void)
{
	BackgroundWorker worker;

	DefineCustomIntVariable("ratelimit.redis_lease_time",
							"How long a slot of a concurrency limit on Redis lasts without renewal.",
							"The lease worker renews the server's leases every third of it; a stopped or dead server's slots are free after it.",
							&rl_redis_lease_time,
							30000, 300, 86400000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("ratelimit.redis_max_leases",
							"Most slots of concurrency limits on Redis this server holds at once.",
							"Each takes about 4.5 kB of shared memory.",
							&rl_redis_max_leases,
							256, 16, 10000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "ratelimit");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "rl_lease_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "ratelimit lease worker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "ratelimit lease worker");
	RegisterBackgroundWorker(&worker);
}

/* The table's size. */
static Size
lease_size(void)
{
	return add_size(offsetof(RlSlotLeaseShared, leases),
					mul_size(sizeof(RlSlotLease), rl_redis_max_leases));
}

/* shmem_request_hook: the table and its lock. */
void
rl_redis_lease_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(lease_size()));
	RequestNamedLWLockTranche("ratelimit leases", 1);
}

/* shmem_startup_hook; the caller holds AddinShmemInitLock. */
void
rl_redis_lease_startup(void)
{
	bool		found;
	int			i;

	lease_shared = ShmemInitStruct("ratelimit leases", lease_size(), &found);
	if (found)
		return;
	lease_shared->lock = &GetNamedLWLockTranche("ratelimit leases")->lock;
	if (!pg_strong_random(&lease_shared->server,
						  sizeof(lease_shared->server)))
		lease_shared->server = (uint64) rl_clock_now() ^
			((uint64) MyProcPid << 32);
	lease_shared->worker = -1;
	lease_shared->nleases = rl_redis_max_leases;
	for (i = 0; i < rl_redis_max_leases; i++)
	{
		lease_shared->leases[i].state = RL_LEASE_FREE;
		lease_shared->leases[i].generation = 0;
	}
}

/* Wake the worker (a lease to remove); nothing if it does not run. */
static void
worker_wake(void)
{
	int			procno = lease_shared->worker;

	if (procno >= 0)
		SetLatch(&GetPGProcByNumber(procno)->procLatch);
}

/* A holder's name in Redis. */
static void
holder_name(char *buf, int index, const RlSlotLease *l)
{
	snprintf(buf, RL_HOLDER_LEN, "%016llx:%d:%d:%u",
			 (unsigned long long) lease_shared->server, l->pid, index,
			 l->generation);
}

/*
 * Run the lease script: op on the key's set (its Redis name) for the
 * holder; for an acquire, with the limit and the headroom.  reply->ok is
 * false when Redis did not answer as it should (the call's status says
 * why).
 */
static void
lease_script(RlRedisCall *call, const char *op, const char *key, int keylen,
			 const char *holder, const RlParams *p, RlSlotLeaseReply *reply)
{
	const RlRedisScript *script = rl_redis_lease_script();
	const char *argv[10];
	size_t		argvlen[10];
	char		lease[16];
	char		limit[24];
	char		headroom[24];
	int			argc = 0;
	int			i;
	bool		acquire = p != NULL;
	RlRedisNode *node;
	redisReply *r;

	snprintf(lease, sizeof(lease), "%d", rl_redis_lease_time);
	argv[argc++] = "EVALSHA";
	argv[argc++] = script->sha;
	argv[argc++] = "1";
	argv[argc++] = key;
	argv[argc++] = op;
	argv[argc++] = holder;
	argv[argc++] = lease;
	if (acquire)
	{
		snprintf(limit, sizeof(limit), INT64_FORMAT, p->limit);
		snprintf(headroom, sizeof(headroom), INT64_FORMAT, p->headroom);
		argv[argc++] = limit;
		argv[argc++] = headroom;
	}
	for (i = 0; i < argc; i++)
		argvlen[i] = i == 3 ? (size_t) keylen : strlen(argv[i]);

	reply->ok = false;
	r = rl_redis_key_command(call, rl_redis_slot(key, keylen), argc, argv,
							 argvlen, script->text, &node);
	if (r == NULL)
		return;
	if (acquire && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		r->element[0]->type == REDIS_REPLY_INTEGER &&
		r->element[1]->type == REDIS_REPLY_INTEGER)
	{
		reply->taken = r->element[0]->integer;
		reply->in_flight = r->element[1]->integer;
		reply->ok = true;
	}
	else if (!acquire && r->type == REDIS_REPLY_INTEGER)
	{
		reply->taken = r->integer;
		reply->ok = true;
	}
	if (!reply->ok)
		rl_redis_reply_failed(call, node, "the lease script", r);
	rl_redis_node_release(node);
}

/*
 * Set entry i (of generation gen) to state, or free it; nothing if it was
 * used again meanwhile.
 */
static void
lease_set(int i, uint32 gen, RlSlotLeaseState state)
{
	RlSlotLease *l = &lease_shared->leases[i];

	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	if (l->generation == gen && l->state != RL_LEASE_FREE)
		l->state = state;
	LWLockRelease(lease_shared->lock);
	if (state == RL_LEASE_RELEASE)
		my_releases++;
}

/*
 * on_shmem_exit: the leases this backend still has are to be removed (by
 * the worker: no I/O at exit).  Raises no error.
 */
static void
lease_exit(int code, Datum arg)
{
	int			i;

	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < lease_shared->nleases; i++)
	{
		RlSlotLease *l = &lease_shared->leases[i];

		if (l->state != RL_LEASE_FREE && l->pid == MyProcPid)
			l->state = RL_LEASE_RELEASE;
	}
	LWLockRelease(lease_shared->lock);
	worker_wake();
}

/*
 * Remove from Redis the leases this backend gave back while it could not
 * do I/O (an abort): before it takes another, so that its own earlier
 * slot does not count against it.  What Redis does not take now is left
 * to the worker.
 */
static void
releases_flush(void)
{
	char	   *key;
	char		holder[RL_HOLDER_LEN];
	int			i;

	if (my_releases == 0)
		return;
	my_releases = 0;
	key = palloc(RL_LEASE_KEY_MAX);
	for (i = 0; i < lease_shared->nleases; i++)
	{
		RlSlotLease *l = &lease_shared->leases[i];
		RlRedisCall call;
		RlSlotLeaseReply reply;
		bool		mine;
		uint32		gen = 0;
		int			keylen = 0;

		LWLockAcquire(lease_shared->lock, LW_SHARED);
		mine = l->state == RL_LEASE_RELEASE && l->pid == MyProcPid;
		if (mine)
		{
			gen = l->generation;
			keylen = l->keylen;
			memcpy(key, l->key, keylen);
			holder_name(holder, i, l);
		}
		LWLockRelease(lease_shared->lock);
		if (!mine)
			continue;
		rl_redis_call_begin(&call);
		lease_script(&call, "release", key, keylen, holder, NULL, &reply);
		if (!reply.ok)
		{
			/* the worker tries again; so does this backend's next call */
			rl_redis_failed(&call, false);
			worker_wake();
			my_releases++;
			break;
		}
		lease_set(i, gen, RL_LEASE_FREE);
	}
	pfree(key);
}

/*
 * A free entry for a lease of the key (its Redis name), TAKING, or -1 when
 * the table is full.
 */
static int
entry_take(const StringInfoData *name, uint32 *gen)
{
	int			i;

	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < lease_shared->nleases; i++)
	{
		RlSlotLease *l = &lease_shared->leases[i];

		if (l->state != RL_LEASE_FREE)
			continue;
		l->state = RL_LEASE_TAKING;
		l->generation++;
		l->pid = MyProcPid;
		l->procno = rl_my_procno();
		l->renewed = rl_clock_now();
		l->expires = l->renewed + (int64) rl_redis_lease_time * 1000;
		l->keylen = name->len;
		memcpy(l->key, name->data, name->len);
		*gen = l->generation;
		LWLockRelease(lease_shared->lock);
		return i;
	}
	LWLockRelease(lease_shared->lock);
	return -1;
}

/*
 * The acquire of entry i, in Redis.  Separate from its caller so that
 * nothing the PG_TRY there protects is a local it changes.
 */
static void
acquire_run(RlRedisCall *call, const RlRequest *req, int i,
			RlSlotLeaseReply *reply)
{
	char		holder[RL_HOLDER_LEN];
	RlSlotLease *l = &lease_shared->leases[i];

	holder_name(holder, i, l);
	lease_script(call, "acquire", l->key, l->keylen, holder, &req->params,
				 reply);
}

/*
 * engine acquire for Redis: TRY only (Redis keeps no queue).  A lease of
 * the key is taken if in_flight + 1 + headroom <= limit; TAKEN fills the
 * receipt (its incarnation names the entry and its generation).  NO_ROOM
 * when the table is full, UNAVAILABLE when Redis cannot answer (the
 * breaker open, a failure): fail_mode decides, nothing is held.  An error
 * (a cancel) during the call leaves the entry to be removed.
 */
RlSlotResult
rl_redis_lease_acquire(const RlRequest *req, RlSlotOp op, int64 now,
					   RlReceipt *receipt)
{
	StringInfoData hkey;
	StringInfoData lkey;
	RlRedisCall call;
	RlSlotLeaseReply reply;
	uint32		gen;
	bool		probe;
	int			i;

	receipt->engine = RL_ENGINE_NONE;
	if (op != RL_SLOT_TRY)
		return RL_SLOT_BUSY;
	if (!exit_registered)
	{
		on_shmem_exit(lease_exit, (Datum) 0);
		exit_registered = true;
	}
	rl_redis_key_names(&hkey, &lkey, req->dbid, req->algo, req->key,
					   req->keylen);
	if (hkey.len > RL_LEASE_KEY_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("the Redis name of a concurrency limit's key is too long"),
				 errdetail("It has %d bytes; at most %d are allowed.",
						   hkey.len, (int) RL_LEASE_KEY_MAX)));
	if (!rl_redis_breaker_lets_through(&probe))
		return RL_SLOT_UNAVAILABLE;
	releases_flush();
	i = entry_take(&hkey, &gen);
	pfree(hkey.data);
	pfree(lkey.data);
	if (i < 0)
		return RL_SLOT_NO_ROOM;

	rl_redis_count(RL_REDIS_CALLS);
	rl_redis_call_begin(&call);
	PG_TRY();
	{
		acquire_run(&call, req, i, &reply);
	}
	PG_CATCH();
	{
		lease_set(i, gen, RL_LEASE_RELEASE);
		worker_wake();
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!reply.ok)
	{
		/* it may have been taken before the reply was lost */
		rl_redis_failed(&call, true);
		lease_set(i, gen, RL_LEASE_RELEASE);
		worker_wake();
		return RL_SLOT_UNAVAILABLE;
	}
	rl_redis_breaker_close(probe);
	if (reply.taken != 1)
	{
		lease_set(i, gen, RL_LEASE_FREE);
		return RL_SLOT_BUSY;
	}
	lease_set(i, gen, RL_LEASE_HELD);
	receipt->engine = RL_ENGINE_REDIS;
	receipt->flags = 0;
	receipt->params = req->params;
	receipt->time = rl_clock_now();
	receipt->incarnation = ((uint64) gen << 32) | (uint32) i;
	return RL_SLOT_TAKEN;
}

/*
 * engine release for Redis: the receipt's lease is to be removed.  Done
 * now when this backend may do I/O (in a transaction, interrupts not held:
 * rl_release, slots.c before a commit), else left to the worker (an
 * abort, the exit).  Raises no error but a cancel's during the I/O (the
 * worker then removes it).
 */
void
rl_redis_lease_release(const RlRequest *req, const RlReceipt *receipt)
{
	uint32		i = (uint32) (receipt->incarnation & 0xFFFFFFFF);
	uint32		gen = (uint32) (receipt->incarnation >> 32);
	RlSlotLease *l;
	bool		mine = false;

	if (lease_shared == NULL || i >= (uint32) lease_shared->nleases)
		return;
	l = &lease_shared->leases[i];
	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	if (l->generation == gen && l->state != RL_LEASE_FREE &&
		l->pid == MyProcPid)
	{
		l->state = RL_LEASE_RELEASE;
		mine = true;
	}
	LWLockRelease(lease_shared->lock);
	if (!mine)
		return;
	my_releases++;
	if (IsTransactionState() && CritSectionCount == 0 &&
		InterruptHoldoffCount == 0 && !proc_exit_inprogress &&
		!rl_redis_breaker_open())
		releases_flush();
	else
		worker_wake();
}

/* ---- the worker ---- */

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

	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < lease_shared->nleases; i++)
	{
		RlSlotLease *l = &lease_shared->leases[i];

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
	LWLockRelease(lease_shared->lock);

	if (n > 0)
		(void) rl_redis_conn_ready();
	for (k = 0; k < n; k++)
	{
		RlSlotLease *c = &copies[k];
		bool		release = c->state == RL_LEASE_RELEASE;
		RlRedisCall call;
		RlSlotLeaseReply reply;
		int64		t = rl_clock_now();

		holder_name(holder, index[k], c);
		rl_redis_call_begin(&call);
		lease_script(&call, release ? "release" : "renew", c->key,
					 c->keylen, holder, NULL, &reply);
		if (!reply.ok)
			rl_redis_failed(&call, false);
		if (release)
		{
			/* removed, or expired by now: forgotten either way */
			if (reply.ok || t > c->expires)
				lease_set(index[k], c->generation, RL_LEASE_FREE);
			else
				next = Min(next, RL_LEASE_RETRY * 1000);
			continue;
		}
		if (!reply.ok)
		{
			next = Min(next, RL_LEASE_RETRY * 1000);
			continue;
		}
		LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
		{
			RlSlotLease *l = &lease_shared->leases[index[k]];

			if (l->generation == c->generation && l->state == RL_LEASE_HELD)
			{
				l->renewed = t;
				l->expires = t + (int64) rl_redis_lease_time * 1000;
				if (reply.taken != 1)
					l->state = RL_LEASE_LOST;
			}
		}
		LWLockRelease(lease_shared->lock);
	}
	return (long) Max(next / 1000, RL_LEASE_MIN_WAIT);
}

/* on_shmem_exit of the worker: nobody to wake any more. */
static void
worker_exit(int code, Datum arg)
{
	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	lease_shared->worker = -1;
	LWLockRelease(lease_shared->lock);
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
									sizeof(RlSlotLease) * lease_shared->nleases);
	index = MemoryContextAlloc(TopMemoryContext,
							   sizeof(int) * lease_shared->nleases);
	round = AllocSetContextCreate(TopMemoryContext, "ratelimit lease worker",
								  ALLOCSET_DEFAULT_SIZES);
	on_shmem_exit(worker_exit, (Datum) 0);
	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	lease_shared->worker = rl_my_procno();
	LWLockRelease(lease_shared->lock);

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
