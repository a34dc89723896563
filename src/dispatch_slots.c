/*-------------------------------------------------------------------------
 *
 * dispatch_slots.c
 *		The dispatcher's door for concurrency limits (dispatch.c is the
 *		one for decisions): slots taken, waited for and given back.
 *
 * A call that must wait for a slot queues in the engine and sleeps here,
 * on its latch, outside every lock; slots.c keeps what this backend holds
 * and gives it back when the transaction or the session ends.  The store
 * keeps the slots of the local backend; Redis those of the others, as
 * leases (redis_lease.c), with a queue in Redis whose waiters block there
 * (briefly, between two checks for interrupts) instead of on the latch.
 *
 * No shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/wait_event.h"

#include "dispatch.h"
#include "shed.h"
#include "slots.h"
#include "stats.h"

/*
 * Longest sleep between two looks at a slot's queue.  A waiter is woken by
 * its latch when its turn comes (or the key is reset); this only bounds
 * the cost of a wake-up lost to a bug.
 */
#define RL_SLOT_RECHECK_MS	1000

/*
 * Wait in the engine's queue for a slot until it comes or the deadline
 * passes (then leave the queue).  r is the result of joining it.  An
 * engine whose POLL blocks (Redis) is polled without a sleep here.  A
 * cancel, a statement timeout or a termination raises in
 * CHECK_FOR_INTERRUPTS; slots.c leaves the queue at the (sub)abort or the
 * exit.  Returns TAKEN, BUSY, SHED, NO_ROOM or UNAVAILABLE.
 */
static RlSlotResult
slot_wait(const RlEngine *engine, const RlRequest *req, RlSlotResult r,
		  int64 deadline, RlReceipt *receipt)
{
	for (;;)
	{
		int64		left;

		if (r == RL_SLOT_GONE)	/* reset while queued: queue again */
			r = engine->acquire(req, RL_SLOT_QUEUE, rl_clock_now(), receipt);
		if (r != RL_SLOT_QUEUED)
			return r;
		left = deadline - rl_clock_now();
		if (left <= 0)
		{
			r = engine->acquire(req, RL_SLOT_LEAVE, rl_clock_now(), receipt);
			return r == RL_SLOT_GONE ? RL_SLOT_BUSY : r;
		}
		if (!engine->poll_blocks)
		{
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 (long) Min((left + 999) / 1000,
										RL_SLOT_RECHECK_MS),
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
		CHECK_FOR_INTERRUPTS();
		r = engine->acquire(req, RL_SLOT_POLL, rl_clock_now(), receipt);
	}
}

/*
 * A look at slots (rl_usage) reads the shared-memory store only: an ERROR
 * for a request of another backend (its policy's, or ratelimit.backend).
 */
void
rl_slots_local(const RlRequest *req)
{
	if (rl_request_backend(req) != RL_BACKEND_LOCAL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the usage of a concurrency limit is read from the shared-memory store only"),
				 errdetail("On Redis its slots are leases, which are not listed."),
				 errhint("Set \"ratelimit.backend\" to \"local\" for these calls.")));
}

/*
 * The engine that keeps the request's slots: the store for the local
 * backend, Redis (leases) for redis and hybrid (a local pre-check means
 * nothing for a slot held elsewhere).
 */
static const RlEngine *
slot_engine(const RlRequest *req)
{
	if (rl_request_backend(req) == RL_BACKEND_LOCAL)
		return rl_engine(RL_ENGINE_STORE);
	return rl_engine(RL_ENGINE_REDIS);
}

/*
 * Take a slot of the request's key (an algorithm that holds slots) for
 * the session or the current transaction, waiting at most max_wait
 * microseconds, first come first served.  A key this backend holds
 * already is not taken twice (slots.c).  When the store has no room for
 * the key, or Redis does not answer, fail_mode decides, and nothing is
 * held.  Returns whether the call may proceed.  On Redis a slot is a lease
 * and the queue is kept in Redis (redis_lease.c).
 * A call with a priority takes a slot only if its headroom stays free
 * (shed.c), waiting or not; one refused for that alone (the engine's
 * SHED) is counted as shed, as a decision's is.
 */
bool
rl_acquire_slot(const RlRequest *req, int64 max_wait, bool session)
{
	const RlEngine *engine;
	RlReceipt	receipt;
	RlOutcome	out;
	RlSlotResult r;
	RlRequest	shed;
	bool		shadowed;
	bool		failed;
	int64		now;

	req = rl_shed_request(req, &shed);	/* a priority's headroom */
	memset(&out, 0, sizeof(out));
	if (req->shadow)
		max_wait = 0;			/* a dry run never waits */
	engine = slot_engine(req);
	r = RL_SLOT_TAKEN;
	if (!rl_slots_held(req, session))
	{
		rl_dispatch_enter();
		rl_slots_begin(req, engine);
		now = rl_clock_now();
		r = engine->acquire(req, max_wait > 0 ? RL_SLOT_QUEUE : RL_SLOT_TRY,
							now, &receipt);
		r = slot_wait(engine, req, r, now + max_wait, &receipt);
		if (r == RL_SLOT_TAKEN)
			rl_slots_keep(&receipt, session);
		rl_slots_end();
	}
	failed = r == RL_SLOT_NO_ROOM || r == RL_SLOT_UNAVAILABLE;
	out.allowed = r == RL_SLOT_TAKEN ||
		(failed && rl_request_fail_mode(req) != RL_FAIL_CLOSED);
	out.shed = r == RL_SLOT_SHED;	/* counted apart (rl_stats) */
	shadowed = !out.allowed && req->shadow;
	rl_stats_count(req, &out, failed, shadowed);
	return out.allowed || shadowed;
}

/*
 * Give back this backend's slot of the request's key now, however held.
 * Returns whether it held one.
 */
bool
rl_release_slot(const RlRequest *req)
{
	return rl_slots_drop(req);
}

/* The slots this backend holds (rl_held), palloc'd; returns how many. */
int
rl_held_slots(RlHeldSlot **out)
{
	return rl_slots_list(out);
}
