/*-------------------------------------------------------------------------
 *
 * slots.c
 *		The slots of concurrency limits this backend holds (rl_acquire),
 *		and their giving back: a transaction's at its commit or abort, a
 *		subtransaction's at its abort, a session's when it exits.
 *
 * A backend holds at most one slot of a key: taking a key it holds again
 * takes nothing more (a session's hold stays; a transaction's becomes the
 * session's if asked, or the outer level's if taken again there).  Each
 * holding keeps the receipt the engine gave (the incarnation of the
 * state), so that a slot is given back only to the state it was taken
 * from.  A transaction's holding records its nesting level: when that
 * subtransaction aborts the slot is given back (ROLLBACK TO SAVEPOINT, an
 * exception block), when it commits the slot passes to the parent.  A
 * session's holding ignores (sub)transactions, as session advisory locks
 * do.  PREPARE TRANSACTION is refused while the transaction holds slots:
 * the prepared transaction would outlive the backend that gives them back.
 *
 * The dispatcher waits for a slot in a queue of the engine; the request it
 * waits for is noted here first (rl_slots_begin), with the memory its
 * holding will take, so that an error during the wait (a cancel, a
 * statement timeout, the backend terminated) leaves the queue at the
 * (sub)abort or at exit, giving back a slot handed over meanwhile, and
 * that keeping the slot allocates nothing.  A transaction's slots on
 * Redis (leases) are given back just before its commit, while I/O is
 * still fine (redis_lease.c).  A backend that dies without
 * running its exit callbacks (SIGKILL, a crash) makes the postmaster
 * reinitialize shared memory: the store starts empty and no slot is held.
 *
 * Memory: the holdings and their keys in TopMemoryContext.  The engines'
 * release never raises; nothing here raises at commit, abort or exit.
 * No shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "storage/ipc.h"
#include "utils/memutils.h"

#include "slots.h"

typedef struct RlHolding
{
	Oid			dbid;
	RlAlgo		algo;
	int			keylen;
	char	   *key;			/* in TopMemoryContext */
	RlReceipt	receipt;
	bool		session;
	int			level;			/* transaction nesting level (not a
								 * session's) */
} RlHolding;

static RlHolding *holdings = NULL;
static int	nholdings = 0;
static int	maxholdings = 0;

/* the request being waited for (rl_slots_begin to rl_slots_end) */
static bool pending = false;
static RlRequest pending_req;
static char *pending_key = NULL;
static const RlEngine *pending_engine = NULL;	/* whose queue it is in */

static bool callbacks_registered = false;

/* The request naming a holding's state. */
static RlRequest
holding_request(const RlHolding *h)
{
	RlRequest	req;

	rl_request_for_key(&req, h->dbid, h->algo, h->key, h->keylen);
	return req;
}

/* The holding of the request's key, or -1. */
static int
holding_find(const RlRequest *req)
{
	int			i;

	for (i = 0; i < nholdings; i++)
	{
		RlHolding  *h = &holdings[i];

		if (h->keylen == req->keylen && h->dbid == req->dbid &&
			h->algo == req->algo && memcmp(h->key, req->key, h->keylen) == 0)
			return i;
	}
	return -1;
}

/* Give back holding i's slot and forget it (the last takes its place). */
static void
holding_release(int i)
{
	RlHolding  *h = &holdings[i];
	RlRequest	req = holding_request(h);

	rl_engine(h->receipt.engine)->release(&req, &h->receipt);
	pfree(h->key);
	holdings[i] = holdings[--nholdings];
}

/*
 * Leave the queue of the request being waited for, if any, giving back a
 * slot handed over meanwhile.  Raises no error.
 */
static void
pending_abandon(void)
{
	const RlEngine *engine = pending_engine;
	RlReceipt	receipt;

	if (!pending)
		return;
	if (engine->acquire(&pending_req, RL_SLOT_LEAVE, rl_clock_now(),
						&receipt) ==
		RL_SLOT_TAKEN)
		engine->release(&pending_req, &receipt);
	pfree(pending_key);
	pending_key = NULL;
	pending = false;
}

/*
 * Give back the transaction's slots taken at nesting level "from" or
 * deeper (1: all of them), of one engine's only unless it is
 * RL_ENGINE_NONE.
 */
static void
release_levels(int from, RlEngineId engine)
{
	int			i = 0;

	while (i < nholdings)
	{
		if (!holdings[i].session && holdings[i].level >= from &&
			(engine == RL_ENGINE_NONE || holdings[i].receipt.engine == engine))
			holding_release(i);
		else
			i++;
	}
}

static void
slots_xact_callback(XactEvent event, void *arg)
{
	int			i;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			for (i = 0; i < nholdings; i++)
				if (!holdings[i].session)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot prepare a transaction that holds a slot of a concurrency limit"),
							 errhint("Release the slot with rl_release, or take it for the session.")));
			break;
		case XACT_EVENT_PRE_COMMIT:

			/*
			 * Redis's slots (leases) now, while a round trip may still be
			 * made: after the commit their giving back is left to the lease
			 * worker, a little later (redis_lease.c).
			 */
			release_levels(1, RL_ENGINE_REDIS);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			pending_abandon();
			release_levels(1, RL_ENGINE_NONE);
			break;
		default:
			break;
	}
}

static void
slots_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			i;

	switch (event)
	{
		case SUBXACT_EVENT_ABORT_SUB:
			pending_abandon();
			release_levels(level, RL_ENGINE_NONE);
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			for (i = 0; i < nholdings; i++)
				if (!holdings[i].session && holdings[i].level >= level)
					holdings[i].level = level - 1;
			break;
		default:
			break;
	}
}

/*
 * on_shmem_exit: give back every slot still held (the transaction's were
 * given back as PostgreSQL aborted it, before this runs), and leave a
 * queue.  Raises no error.
 */
static void
slots_exit(int code, Datum arg)
{
	pending_abandon();
	while (nholdings > 0)
		holding_release(nholdings - 1);
}

/*
 * Does this backend hold a slot of the request's key?  If so, the holding
 * is kept longer if asked: for the session, or at the current (outer)
 * level.
 */
bool
rl_slots_held(const RlRequest *req, bool session)
{
	int			i = holding_find(req);
	RlHolding  *h;

	if (i < 0)
		return false;
	h = &holdings[i];
	if (session)
		h->session = true;
	else if (!h->session)
		h->level = Min(h->level, GetCurrentTransactionNestLevel());
	return true;
}

/*
 * Note the request about to be waited for in the engine's queue, with the
 * memory its holding would take, and register the callbacks that give
 * slots back.
 */
void
rl_slots_begin(const RlRequest *req, const RlEngine *engine)
{
	Assert(!pending);
	if (!callbacks_registered)
	{
		RegisterXactCallback(slots_xact_callback, NULL);
		RegisterSubXactCallback(slots_subxact_callback, NULL);
		on_shmem_exit(slots_exit, (Datum) 0);
		callbacks_registered = true;
	}
	if (nholdings == maxholdings)
	{
		int			n = Max(8, maxholdings * 2);

		holdings = holdings == NULL ?
			MemoryContextAlloc(TopMemoryContext, n * sizeof(RlHolding)) :
			repalloc(holdings, n * sizeof(RlHolding));
		maxholdings = n;
	}
	pending_key = MemoryContextAlloc(TopMemoryContext, Max(req->keylen, 1));
	memcpy(pending_key, req->key, req->keylen);
	pending_req = *req;
	pending_req.key = pending_key;
	pending_req.policy = NULL;
	pending_engine = engine;
	pending = true;
}

/*
 * The request noted by rl_slots_begin took a slot: hold it for the
 * session or the transaction.  Allocates nothing.
 */
void
rl_slots_keep(const RlReceipt *receipt, bool session)
{
	RlHolding  *h = &holdings[nholdings];

	Assert(pending && nholdings < maxholdings);
	h->dbid = pending_req.dbid;
	h->algo = pending_req.algo;
	h->keylen = pending_req.keylen;
	h->key = pending_key;
	h->receipt = *receipt;
	h->session = session;
	h->level = GetCurrentTransactionNestLevel();
	nholdings++;
	pending_key = NULL;
	pending = false;
}

/* The wait is over: forget the request if it took no slot. */
void
rl_slots_end(void)
{
	if (!pending)
		return;
	pfree(pending_key);
	pending_key = NULL;
	pending = false;
}

/*
 * Give back this backend's slot of the request's key now (rl_release),
 * however it is held.  Returns whether it held one.
 */
bool
rl_slots_drop(const RlRequest *req)
{
	int			i = holding_find(req);

	if (i < 0)
		return false;
	holding_release(i);
	return true;
}

/* This backend's holdings, palloc'd in the current context. */
int
rl_slots_list(RlHeldSlot **out)
{
	int			i;

	*out = palloc(Max(nholdings, 1) * sizeof(RlHeldSlot));
	for (i = 0; i < nholdings; i++)
	{
		(*out)[i].key = holdings[i].key;
		(*out)[i].keylen = holdings[i].keylen;
		(*out)[i].session = holdings[i].session;
		(*out)[i].since = holdings[i].receipt.time;
	}
	return nholdings;
}
