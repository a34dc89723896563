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
 * number.
 *
 * Waiting (max_wait): a waiter takes a ticket at the end of the key's
 * queue in Redis (a sorted set beside the leases, same hash tag), named
 * like a lease by its entry, which stays TAKING while it waits.  A ticket
 * expires after RL_TICKET_TIME unless its waiter renews it, which it does
 * at each look (at least every RL_WAIT_BLOCK_MS): a waiter that dies
 * holds the queue up for that long at most.  A call that does not wait
 * takes no slot while a live ticket is in the queue; a waiter takes one
 * only when its ticket is the first.  Every release (a lease or a ticket
 * removed, by a backend or the worker) pushes wake-ups on the key's list,
 * on which the waiters block (BLPOP, RL_WAIT_BLOCK_MS at most, so that
 * the dispatcher checks for interrupts between two, and expired leases,
 * which push nothing, are seen).  Leaving the queue removes the ticket
 * like a lease: at once where the backend may do I/O (the deadline), else
 * through the worker (a cancel, an error, the exit).
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
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "redis_lease.h"

/* how long a waiter's ticket lives without a look of its waiter (ms) */
#define RL_TICKET_TIME		3000

/* longest block of a waiter on the wake-up list (ms) */
#define RL_WAIT_BLOCK_MS	50

int			rl_redis_lease_time = 30000;	/* ms */
int			rl_redis_max_leases = 256;

RlSlotLeaseShared *rl_lease_shared = NULL;
static bool exit_registered = false;

/*
 * Leases this backend marked RELEASE since its last look (releases_flush
 * scans the table only then: a call's path stays short).
 */
static int	my_releases = 0;

/*
 * The entry of this backend's ticket while it waits, or -1; and whether
 * the latest look held it back by its headroom alone (LEAVE's SHED).
 */
static int	wait_entry = -1;
static uint32 wait_gen = 0;
static bool wait_shed = false;

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

	rl_lease_shared = ShmemInitStruct("ratelimit leases", lease_size(), &found);
	if (found)
		return;
	rl_lease_shared->lock = &GetNamedLWLockTranche("ratelimit leases")->lock;
	if (!pg_strong_random(&rl_lease_shared->server,
						  sizeof(rl_lease_shared->server)))
		rl_lease_shared->server = (uint64) rl_clock_now() ^
			((uint64) MyProcPid << 32);
	rl_lease_shared->worker = -1;
	rl_lease_shared->nleases = rl_redis_max_leases;
	for (i = 0; i < rl_redis_max_leases; i++)
	{
		rl_lease_shared->leases[i].state = RL_LEASE_FREE;
		rl_lease_shared->leases[i].generation = 0;
	}
}

/* Wake the worker (a lease to remove); nothing if it does not run. */
static void
worker_wake(void)
{
	int			procno = rl_lease_shared->worker;

	if (procno >= 0)
		SetLatch(&GetPGProcByNumber(procno)->procLatch);
}

/* A holder's name in Redis. */
void
rl_lease_holder_name(char *buf, int index, const RlSlotLease *l)
{
	snprintf(buf, RL_HOLDER_LEN, "%016llx:%d:%d:%u",
			 (unsigned long long) rl_lease_shared->server, l->pid, index,
			 l->generation);
}

/*
 * The Redis names of the key's queue, its tickets' expiries and its
 * wake-up list (lua/lease.lua): the key's name (which ends with its hash
 * tag) and a suffix, in names[0..2] (each RL_LEASE_KEY_MAX + 4 bytes),
 * their lengths in lens.  A name is bytes, not a C string: a policy's key
 * holds a NUL between the policy's name and the caller's key, so a length
 * taken with strlen would name one queue for every key of the policy.
 */
static void
queue_names(const char *key, int keylen, char names[3][RL_LEASE_KEY_MAX + 4],
			size_t lens[3])
{
	static const char *const suffix[3] = {":q", ":qt", ":w"};
	int			k;

	for (k = 0; k < 3; k++)
	{
		memcpy(names[k], key, keylen);
		strcpy(names[k] + keylen, suffix[k]);
		lens[k] = (size_t) keylen + strlen(suffix[k]);
	}
}

/*
 * Run the lease script: op on the key's set (its Redis name) for the
 * holder; for an acquire, a queue or a poll, with the limit, the headroom
 * and the ticket time.  reply->ok is false when Redis did not answer as it
 * should (the call's status says why).
 */
void
rl_lease_script(RlRedisCall *call, const char *op, const char *key,
				int keylen, const char *holder, const RlParams *p,
				RlSlotLeaseReply *reply)
{
	const RlRedisScript *script = rl_redis_lease_script();
	const char *argv[14];
	size_t		argvlen[14];
	char		names[3][RL_LEASE_KEY_MAX + 4];
	size_t		lens[3];
	char		lease[16];
	char		limit[24];
	char		headroom[24];
	char		ticket[16];
	int			argc = 0;
	int			i;
	bool		acquire = p != NULL;
	RlRedisNode *node;
	redisReply *r;

	queue_names(key, keylen, names, lens);
	snprintf(lease, sizeof(lease), "%d", rl_redis_lease_time);
	argv[argc++] = "EVALSHA";
	argv[argc++] = script->sha;
	argv[argc++] = "4";
	argv[argc++] = key;
	argv[argc++] = names[0];
	argv[argc++] = names[1];
	argv[argc++] = names[2];
	argv[argc++] = op;
	argv[argc++] = holder;
	argv[argc++] = lease;
	if (acquire)
	{
		snprintf(limit, sizeof(limit), INT64_FORMAT, p->limit);
		snprintf(headroom, sizeof(headroom), INT64_FORMAT, p->headroom);
		snprintf(ticket, sizeof(ticket), "%d", RL_TICKET_TIME);
		argv[argc++] = limit;
		argv[argc++] = headroom;
		argv[argc++] = ticket;
	}
	for (i = 0; i < argc; i++)
		argvlen[i] = i == 3 ? (size_t) keylen :
			i >= 4 && i <= 6 ? lens[i - 4] : strlen(argv[i]);

	reply->ok = false;
	r = rl_redis_key_command(call, rl_redis_slot(key, keylen), argc, argv,
							 argvlen, script->text, &node);
	if (r == NULL)
		return;
	if (acquire && r->type == REDIS_REPLY_ARRAY &&
		(r->elements == 2 || r->elements == 3) &&
		r->element[0]->type == REDIS_REPLY_INTEGER &&
		r->element[1]->type == REDIS_REPLY_INTEGER &&
		(r->elements == 2 || r->element[2]->type == REDIS_REPLY_INTEGER))
	{
		reply->taken = r->element[0]->integer;
		reply->in_flight = r->element[1]->integer;
		reply->shed = r->elements == 3 && r->element[2]->integer == 1;
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
 * Block on the key's wake-up list for RL_WAIT_BLOCK_MS at most (BLPOP):
 * until a release pushes a wake-up, or the time is up.  The call's
 * timeouts are the usual ones on top of the block, so that a BLPOP is not
 * taken for a slow server.  False when Redis did not answer (the call's
 * status says why).
 */
static bool
wake_wait(RlRedisCall *call, const char *key, int keylen)
{
	char		names[3][RL_LEASE_KEY_MAX + 4];
	size_t		lens[3];
	char		block[16];
	const char *argv[3];
	size_t		argvlen[3];
	RlRedisNode *node;
	redisReply *r;

	queue_names(key, keylen, names, lens);
	snprintf(block, sizeof(block), "%.3f", RL_WAIT_BLOCK_MS / 1000.0);
	argv[0] = "BLPOP";
	argv[1] = names[2];
	argv[2] = block;
	argvlen[0] = 5;
	argvlen[1] = lens[2];
	argvlen[2] = strlen(block);
	rl_redis_call_block(call, RL_WAIT_BLOCK_MS);
	r = rl_redis_key_command(call, rl_redis_slot(key, keylen), 3, argv,
							 argvlen, NULL, &node);
	if (r == NULL)
		return false;
	if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_ARRAY)
	{
		rl_redis_reply_failed(call, node, "a wait for a slot", r);
		rl_redis_node_release(node);
		return false;
	}
	rl_redis_node_release(node);
	return true;
}

/*
 * Set entry i (of generation gen) to state, or free it; nothing if it was
 * used again meanwhile.
 */
void
rl_lease_set(int i, uint32 gen, RlSlotLeaseState state)
{
	RlSlotLease *l = &rl_lease_shared->leases[i];

	LWLockAcquire(rl_lease_shared->lock, LW_EXCLUSIVE);
	if (l->generation == gen && l->state != RL_LEASE_FREE)
		l->state = state;
	LWLockRelease(rl_lease_shared->lock);
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

	LWLockAcquire(rl_lease_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < rl_lease_shared->nleases; i++)
	{
		RlSlotLease *l = &rl_lease_shared->leases[i];

		if (l->state != RL_LEASE_FREE && l->pid == MyProcPid)
			l->state = RL_LEASE_RELEASE;
	}
	LWLockRelease(rl_lease_shared->lock);
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
	for (i = 0; i < rl_lease_shared->nleases; i++)
	{
		RlSlotLease *l = &rl_lease_shared->leases[i];
		RlRedisCall call;
		RlSlotLeaseReply reply;
		bool		mine;
		uint32		gen = 0;
		int			keylen = 0;

		LWLockAcquire(rl_lease_shared->lock, LW_SHARED);
		mine = l->state == RL_LEASE_RELEASE && l->pid == MyProcPid;
		if (mine)
		{
			gen = l->generation;
			keylen = l->keylen;
			memcpy(key, l->key, keylen);
			rl_lease_holder_name(holder, i, l);
		}
		LWLockRelease(rl_lease_shared->lock);
		if (!mine)
			continue;
		rl_redis_call_begin(&call);
		rl_lease_script(&call, "release", key, keylen, holder, NULL, &reply);
		if (!reply.ok)
		{
			/* the worker tries again; so does this backend's next call */
			rl_redis_failed(&call, false);
			worker_wake();
			my_releases++;
			break;
		}
		rl_lease_set(i, gen, RL_LEASE_FREE);
	}
	pfree(key);
}

/*
 * Send the removals this backend marked now if it may do I/O (in a
 * transaction, interrupts not held: not inside an abort or at exit), else
 * leave them to the worker.
 */
static void
releases_send(void)
{
	if (IsTransactionState() && CritSectionCount == 0 &&
		InterruptHoldoffCount == 0 && !proc_exit_inprogress &&
		!rl_redis_breaker_open())
		releases_flush();
	else
		worker_wake();
}

/*
 * A free entry for a lease of the key (its Redis name), TAKING, or -1 when
 * the table is full.
 */
static int
entry_take(const StringInfoData *name, uint32 *gen)
{
	int			i;

	LWLockAcquire(rl_lease_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < rl_lease_shared->nleases; i++)
	{
		RlSlotLease *l = &rl_lease_shared->leases[i];

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
		LWLockRelease(rl_lease_shared->lock);
		return i;
	}
	LWLockRelease(rl_lease_shared->lock);
	return -1;
}

/*
 * Run op ("acquire", "queue" or "poll") for entry i, in Redis; for a poll,
 * after a block on the wake-up list.  Separate from its caller so that
 * nothing the PG_TRY there protects is a local it changes.
 */
static void
acquire_run(RlRedisCall *call, const RlRequest *req, int i, const char *op,
			RlSlotLeaseReply *reply)
{
	char		holder[RL_HOLDER_LEN];
	RlSlotLease *l = &rl_lease_shared->leases[i];

	reply->ok = false;
	if (strcmp(op, "poll") == 0 && !wake_wait(call, l->key, l->keylen))
		return;
	rl_lease_holder_name(holder, i, l);
	rl_lease_script(call, op, l->key, l->keylen, holder, &req->params,
					reply);
}

/*
 * Leave the queue (LEAVE): the ticket's entry is to be removed, at once
 * where this backend may do I/O (the deadline), else by the worker (an
 * abort, the exit: slots.c).  Nothing if it does not wait.
 */
static void
wait_leave(void)
{
	if (wait_entry < 0)
		return;
	rl_lease_set(wait_entry, wait_gen, RL_LEASE_RELEASE);
	wait_entry = -1;
	releases_send();
}

/*
 * engine acquire for Redis.  TRY: a lease of the key is taken if nobody
 * waits and in_flight + 1 + headroom <= limit.  QUEUE: the same, or a
 * ticket at the end of the key's queue (QUEUED; the entry stays TAKING).
 * POLL: block on the key's wake-up list a moment, then take a slot if the
 * ticket is first and one is free (QUEUED if not, GONE if the ticket
 * expired: queue again).  LEAVE: the ticket goes (BUSY).  A TRY, or a
 * LEAVE after a look, that the headroom alone held back is SHED (the
 * script's reply says so).  TAKEN fills the
 * receipt (its incarnation names the entry and its generation).  NO_ROOM
 * when the table is full, UNAVAILABLE when Redis cannot answer (the
 * breaker open, a failure): fail_mode decides, nothing is held.  An error
 * (a cancel) during the call leaves the entry to be removed.
 */
RlSlotResult
rl_redis_lease_acquire(const RlRequest *req, RlSlotOp op, int64 now,
					   RlReceipt *receipt)
{
	RlRedisCall call;
	RlSlotLeaseReply reply;
	uint32		gen;
	bool		probe;
	int			i;

	receipt->engine = RL_ENGINE_NONE;
	if (op == RL_SLOT_LEAVE)
	{
		bool		shed = wait_entry >= 0 && wait_shed;

		wait_leave();
		return shed ? RL_SLOT_SHED : RL_SLOT_BUSY;
	}
	if (!exit_registered)
	{
		on_shmem_exit(lease_exit, (Datum) 0);
		exit_registered = true;
	}
	if (op == RL_SLOT_POLL)
	{
		if (wait_entry < 0)
			return RL_SLOT_BUSY;
		i = wait_entry;
		gen = wait_gen;
		if (!rl_redis_breaker_lets_through(&probe))
		{
			wait_leave();
			return RL_SLOT_UNAVAILABLE;
		}
	}
	else
	{
		StringInfoData hkey;
		StringInfoData lkey;

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
		if (op == RL_SLOT_QUEUE)
		{
			wait_entry = i;
			wait_gen = gen;
			wait_shed = false;
		}
	}

	rl_redis_count(RL_REDIS_CALLS);
	rl_redis_call_begin(&call);
	PG_TRY();
	{
		acquire_run(&call, req, i, op == RL_SLOT_TRY ? "acquire" :
					op == RL_SLOT_QUEUE ? "queue" : "poll", &reply);
	}
	PG_CATCH();
	{
		rl_lease_set(i, gen, RL_LEASE_RELEASE);
		wait_entry = -1;
		worker_wake();
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!reply.ok)
	{
		/* it may have been taken before the reply was lost */
		rl_redis_failed(&call, true);
		rl_lease_set(i, gen, RL_LEASE_RELEASE);
		wait_entry = -1;
		worker_wake();
		return RL_SLOT_UNAVAILABLE;
	}
	rl_redis_breaker_close(probe);
	if (reply.taken != 1)
	{
		if (op == RL_SLOT_TRY)
		{
			rl_lease_set(i, gen, RL_LEASE_FREE);
			return reply.shed ? RL_SLOT_SHED : RL_SLOT_BUSY;
		}
		if (reply.taken == 0)
		{
			wait_shed = reply.shed;
			return RL_SLOT_QUEUED;
		}
		/* the ticket expired (this waiter was away): queue again */
		rl_lease_set(i, gen, RL_LEASE_FREE);
		wait_entry = -1;
		return RL_SLOT_GONE;
	}
	wait_entry = -1;
	rl_lease_set(i, gen, RL_LEASE_HELD);
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

	if (rl_lease_shared == NULL || i >= (uint32) rl_lease_shared->nleases)
		return;
	l = &rl_lease_shared->leases[i];
	LWLockAcquire(rl_lease_shared->lock, LW_EXCLUSIVE);
	if (l->generation == gen && l->state != RL_LEASE_FREE &&
		l->pid == MyProcPid)
	{
		l->state = RL_LEASE_RELEASE;
		mine = true;
	}
	LWLockRelease(rl_lease_shared->lock);
	if (!mine)
		return;
	my_releases++;
	releases_send();
}
