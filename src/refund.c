/*-------------------------------------------------------------------------
 *
 * refund.c
 *		Give back what an aborted transaction or subtransaction consumed.
 *
 * A tracked consumption (every one made by a quota trigger; direct calls
 * when ratelimit.refund_on_rollback is on) is remembered until its
 * transaction ends, by the receipts of its decision (engine.h: where it
 * consumed, with which parameters, at which time, from which incarnation
 * of the state), which the dispatcher hands over.  When a subtransaction
 * aborts, what it consumed is given back; when it commits, its consumption
 * passes to its parent.  At top-level abort everything left is given back; at commit and
 * prepare it is forgotten.
 *
 * What is kept grows with the keys and the savepoint levels, not with the
 * rows: receipts are added up where one refund of the sum gives back
 * exactly what refunds of the parts, newest first, did (the algorithms'
 * refunds take units off within bounds, so sums of the same kind add up):
 *
 *	- a target is one state refunds reach: (engine, receipt flags,
 *	  database, algorithm, key, incarnation), an entry of a hash table;
 *	- an amount is what one (sub)transaction level consumed from a target
 *	  with one set of parameters (limit, per, burst).  A target's amounts
 *	  form a stack, newest on top: a call at another level, or with other
 *	  parameters, starts a new amount, so refunds keep the calls' order;
 *	- an amount holds (time, cost) pairs, oldest first.  A receipt adds its
 *	  cost to the newest pair when a refund cannot tell their times apart:
 *	  fixed_window and sliding_window_counter refunds depend only on the
 *	  window the time falls in, token_bucket and leaky_bucket refunds not on
 *	  the time at all, a lease's refund not either (it goes to the lease its
 *	  incarnation names).  A sliding_window_log refund needs the exact time
 *	  (the log keeps an entry per microsecond): a pair (16 bytes) per
 *	  distinct microsecond.  (The algorithm table's refund_grain, and the
 *	  receipt's RL_RECEIPT_TIMELESS, say which.)
 *
 * A subtransaction's commit merges its amounts into the parent's newest of
 * the same target and parameters, or moves them there as they are when
 * memory for the merge cannot be had (it is asked for without raising an
 * error).  An abort allocates nothing: freed amounts and levels go to free
 * lists for the next calls.  Nothing here raises an error at commit or
 * abort.  What is about to be given back is forgotten first, so nothing is
 * given back twice.  (Giving back is the engines', called here directly
 * through the engine table: the store takes a partition lock.)
 *
 * A refund that is a network round trip (a receipt RL_RECEIPT_REMOTE:
 * Redis's) is never made inside an abort, where waiting on a socket could
 * hang it and nothing may raise an error: its amount is queued instead,
 * and sent after the transaction ends, at the session's next call that
 * reaches an engine (the dispatcher calls rl_refund_flush) or, best
 * effort, when the session exits.  The queue is bounded
 * (RL_REFUND_QUEUE_MAX refunds): beyond it the oldest calls' refunds are
 * dropped, and counted (the engine's refunds_noted: rl_redis_info shows
 * refunds_queued, refunds_sent and refunds_dropped).
 *
 * Each transaction's tracking lives in a context of its own, "ratelimit
 * refunds", under TopMemoryContext, deleted when the transaction ends, or,
 * if refunds of it are still queued, when they have been sent.  No shared
 * state of its own: refunds go through the engines' own locking.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "storage/ipc.h"

#include "algo_common.h"
#include "refund.h"

/* refunds (pairs) that may wait in the queue; more are dropped */
#define RL_REFUND_QUEUE_MAX		10000

/* units consumed at a time: one call's, or several a refund treats as one */
typedef struct RlSpent
{
	int64		time;
	int64		cost;
} RlSpent;

/* the hash key of a target: the state a refund reaches */
typedef struct RlTargetKey
{
	const char *key;			/* in refund_cxt (a lookup: the request's) */
	int			keylen;
	Oid			dbid;
	RlAlgo		algo;
	uint8		engine;			/* RlEngineId */
	uint8		flags;			/* RL_RECEIPT_* */
	uint64		incarnation;
} RlTargetKey;

typedef struct RlAmount RlAmount;
typedef struct RlLevel RlLevel;

/*
 * One transaction's tracking: its context, and how many of its amounts are
 * queued.  A transaction that ended with amounts queued is retired: its
 * context is kept until they are sent.
 */
typedef struct RlBatch
{
	MemoryContext cxt;
	int64		queued;			/* its amounts in the queue */
	struct RlBatch *next;		/* retired batches */
} RlBatch;

typedef struct RlTarget
{
	RlTargetKey id;				/* first: the hash key */
	RlAmount   *top;			/* its newest amount, or NULL */
	RlBatch    *batch;			/* the transaction's tracking it is of */
} RlTarget;

struct RlAmount
{
	RlTarget   *target;
	RlLevel    *level;
	RlAmount   *below;			/* the target's previous amount */
	RlAmount   *above;			/* the target's next amount, NULL on top */
	RlAmount   *next;			/* the level's older amount, the queue's
								 * next, or free list */
	RlParams	params;			/* limit, per and burst (cost: unused) */
	RlSpent    *spent;			/* oldest first */
	int64		nspent;
	int64		maxspent;
};

/* a (sub)transaction that consumed */
struct RlLevel
{
	SubTransactionId subid;
	RlAmount   *amounts;		/* newest first */
	RlLevel    *up;				/* the enclosing level (or free list) */
};

static MemoryContext refund_cxt = NULL;
static RlBatch *batch = NULL;	/* the transaction's, if it tracked */
static HTAB *targets = NULL;
static RlLevel *levels = NULL;	/* innermost first */
static RlAmount *free_amounts = NULL;
static RlLevel *free_levels = NULL;
static bool callbacks_registered = false;

/* refunds queued for after their transaction: amounts, oldest first */
static RlAmount *queue_head = NULL;
static RlAmount *queue_tail = NULL;
static int64 queue_pairs = 0;	/* refunds (pairs) in the queue */
static RlBatch *retired = NULL; /* ended transactions with amounts queued */
static bool exit_registered = false;

/* amounts are queued: the dispatcher's cheap test before rl_refund_flush */
bool		rl_refund_waiting = false;

static void refund_xact_callback(XactEvent event, void *arg);
static void refund_subxact_callback(SubXactEvent event,
									SubTransactionId mySubid,
									SubTransactionId parentSubid, void *arg);

/* dynahash: hash a target's key (its key bytes and the rest) */
static uint32
target_hash(const void *key, Size keysize)
{
	const RlTargetKey *k = (const RlTargetKey *) key;
	uint32		h = hash_bytes((const unsigned char *) k->key, k->keylen);

	h = hash_combine(h, k->dbid);
	h = hash_combine(h, ((uint32) k->algo << 16) | ((uint32) k->flags << 8) |
					 (uint32) k->engine);
	h = hash_combine(h, (uint32) k->incarnation);
	return hash_combine(h, (uint32) (k->incarnation >> 32));
}

/* dynahash: 0 if two targets' keys are the same state */
static int
target_match(const void *key1, const void *key2, Size keysize)
{
	const RlTargetKey *a = (const RlTargetKey *) key1;
	const RlTargetKey *b = (const RlTargetKey *) key2;

	return !(a->keylen == b->keylen && a->dbid == b->dbid &&
			 a->algo == b->algo && a->engine == b->engine &&
			 a->flags == b->flags &&
			 a->incarnation == b->incarnation &&
			 memcmp(a->key, b->key, a->keylen) == 0);
}

static void refund_exit(int code, Datum arg);

/*
 * The context and the table of this transaction, made on its first
 * tracked consumption.
 */
static void
refund_begin(void)
{
	HASHCTL		ctl;

	if (!callbacks_registered)
	{
		RegisterXactCallback(refund_xact_callback, NULL);
		RegisterSubXactCallback(refund_subxact_callback, NULL);
		callbacks_registered = true;
	}
	if (targets != NULL)
		return;
	refund_cxt = AllocSetContextCreate(TopMemoryContext,
									   "ratelimit refunds",
									   ALLOCSET_DEFAULT_SIZES);
	batch = MemoryContextAllocZero(refund_cxt, sizeof(RlBatch));
	batch->cxt = refund_cxt;
	ctl.keysize = sizeof(RlTargetKey);
	ctl.entrysize = sizeof(RlTarget);
	ctl.hash = target_hash;
	ctl.match = target_match;
	ctl.hcxt = refund_cxt;
	targets = hash_create("ratelimit refund targets", 64, &ctl,
						  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
						  HASH_CONTEXT);
}

/*
 * Forget everything at the end of the transaction, and free its memory
 * unless refunds of it are still queued (then it is retired, and freed
 * once they are sent).  Allocates nothing.
 */
static void
refund_forget(void)
{
	if (batch != NULL)
	{
		if (batch->queued > 0)
		{
			batch->next = retired;
			retired = batch;
		}
		else
			MemoryContextDelete(batch->cxt);
	}
	batch = NULL;
	refund_cxt = NULL;
	targets = NULL;
	levels = NULL;
	free_amounts = NULL;
	free_levels = NULL;
}

/*
 * Make room for n pairs in the amount.  Raises an error when memory runs
 * out, or, with no_oom, returns false with the amount unchanged.
 */
static bool
spent_reserve(RlAmount *a, int64 n, bool no_oom)
{
	int64		max = Max(a->maxspent, 1);
	RlSpent    *spent;

	if (n <= a->maxspent)
		return true;
	while (max < n)
		max *= 2;
	spent = MemoryContextAllocExtended(refund_cxt, max * sizeof(RlSpent),
									   MCXT_ALLOC_HUGE |
									   (no_oom ? MCXT_ALLOC_NO_OOM : 0));
	if (spent == NULL)
		return false;
	if (a->nspent > 0)
		memcpy(spent, a->spent, a->nspent * sizeof(RlSpent));
	if (a->spent != NULL)
		pfree(a->spent);
	a->spent = spent;
	a->maxspent = max;
	return true;
}

/*
 * Would a refund at time t give back the same as one at time u, of an
 * amount with these parameters?  The algorithm table says (refund_grain):
 * the window refunds (and the Redis scripts mirroring them) depend only on
 * the window t falls in, the buckets' not on t; a log entry needs the
 * exact time.  A lease's refund (a timeless receipt) goes to the lease its
 * incarnation names, whatever the time.
 */
static bool
same_refund(const RlTarget *target, const RlParams *p, int64 t, int64 u)
{
	if (target->id.flags & RL_RECEIPT_TIMELESS)
		return true;
	switch (rl_algo(target->id.algo)->refund_grain)
	{
		case RL_GRAIN_WINDOW:
			{
				int64		ts,
							us,
							end;

				rl_window_bounds(p, t, &ts, &end);
				rl_window_bounds(p, u, &us, &end);
				return ts == us;
			}
		case RL_GRAIN_NONE:
			return true;
		case RL_GRAIN_EXACT:
		default:
			return t == u;
	}
}

/*
 * Add cost at time t to the amount's newest pair if a refund cannot tell
 * them apart, else as a new pair.  Returns false, changing nothing, if
 * there is no room for a new pair and no_oom says not to raise an error
 * for it.  A sum past PG_INT64_MAX stays there: a refund never gives back
 * that much (a state's units are bounded by its limit or burst).
 */
static bool
spent_add(RlAmount *a, int64 t, int64 cost, bool no_oom)
{
	RlSpent    *last = a->nspent > 0 ? &a->spent[a->nspent - 1] : NULL;

	if (last != NULL && same_refund(a->target, &a->params, last->time, t))
	{
		if (pg_add_s64_overflow(last->cost, cost, &last->cost))
			last->cost = PG_INT64_MAX;
		return true;
	}
	if (!spent_reserve(a, a->nspent + 1, no_oom))
		return false;
	a->spent[a->nspent].time = t;
	a->spent[a->nspent].cost = cost;
	a->nspent++;
	return true;
}

/* Do two amounts consume with the same parameters (their cost aside)? */
static bool
same_params(const RlParams *p, const RlParams *q)
{
	return p->limit == q->limit && p->per == q->per && p->burst == q->burst &&
		rl_period_equal(&p->period, &q->period);
}

/* The level of the current (sub)transaction, made if it has none. */
static RlLevel *
current_level(void)
{
	SubTransactionId subid = GetCurrentSubTransactionId();
	RlLevel    *level;

	if (levels != NULL && levels->subid == subid)
		return levels;
	if (free_levels != NULL)
	{
		level = free_levels;
		free_levels = level->up;
	}
	else
		level = MemoryContextAlloc(refund_cxt, sizeof(RlLevel));
	level->subid = subid;
	level->amounts = NULL;
	level->up = levels;
	levels = level;
	return level;
}

/*
 * The amount of the target for the current level and these parameters: its
 * newest if that is the one, else a new one on top of its stack.
 */
static RlAmount *
amount_for(RlTarget *target, const RlParams *p)
{
	RlAmount   *a = target->top;
	RlLevel    *level;

	if (a != NULL && a->level->subid == GetCurrentSubTransactionId() &&
		same_params(&a->params, p))
		return a;

	level = current_level();
	if (free_amounts != NULL)
	{
		a = free_amounts;
		free_amounts = a->next;
	}
	else
		a = MemoryContextAllocZero(refund_cxt, sizeof(RlAmount));
	a->target = target;
	a->level = level;
	a->params = *p;
	a->params.cost = 0;
	a->nspent = 0;
	a->below = target->top;
	a->above = NULL;
	if (a->below != NULL)
		a->below->above = a;
	target->top = a;
	a->next = level->amounts;
	level->amounts = a;
	return a;
}

/* Remember one receipt of the request. */
static void
track_receipt(const RlRequest *req, const RlReceipt *r)
{
	RlTargetKey id;
	RlTarget   *target;

	memset(&id, 0, sizeof(id));
	id.key = req->key;
	id.keylen = req->keylen;
	id.dbid = req->dbid;
	id.algo = req->algo;
	id.engine = r->engine;
	id.flags = r->flags;
	id.incarnation = r->incarnation;
	target = hash_search(targets, &id, HASH_FIND, NULL);
	if (target == NULL)
	{
		/* copied first: an entry never points at the caller's key */
		char	   *key = MemoryContextAlloc(refund_cxt, Max(id.keylen, 1));

		memcpy(key, id.key, id.keylen);
		target = hash_search(targets, &id, HASH_ENTER, NULL);
		target->id.key = key;
		target->top = NULL;
		target->batch = batch;
	}
	/* a remote refund may be queued and sent as the session exits */
	if ((r->flags & RL_RECEIPT_REMOTE) && !exit_registered)
	{
		on_shmem_exit(refund_exit, (Datum) 0);
		exit_registered = true;
	}
	(void) spent_add(amount_for(target, &r->params), r->time, r->params.cost,
					 false);
}

/*
 * Remember the receipts of a decision of the request, to give back what
 * they record if the current (sub)transaction aborts.
 */
void
rl_refund_track(const RlRequest *req, const RlReceipt *receipts, int n)
{
	int			i;

	if (n == 0)
		return;
	refund_begin();
	for (i = 0; i < n; i++)
		track_receipt(req, &receipts[i]);
}

/* Take the amount off its target's stack (its top). */
static void
amount_unlink(RlAmount *a)
{
	Assert(a->target->top == a && a->above == NULL);
	a->target->top = a->below;
	if (a->below != NULL)
		a->below->above = NULL;
}

/*
 * Give back what an amount holds, pair by pair, newest first: each pair is
 * taken off before it is given back, so none is given back twice (an
 * engine's refund may be interrupted).
 */
static void
amount_refund(RlAmount *a)
{
	RlRequest	req;
	RlReceipt	r;

	rl_request_init(&req);
	req.dbid = a->target->id.dbid;
	req.algo = a->target->id.algo;
	req.key = a->target->id.key;
	req.keylen = a->target->id.keylen;
	r.engine = a->target->id.engine;
	r.flags = a->target->id.flags;
	r.incarnation = a->target->id.incarnation;
	r.params = a->params;
	while (a->nspent > 0)
	{
		a->nspent--;
		if (a->target->id.flags & RL_RECEIPT_REMOTE)
			queue_pairs--;
		r.time = a->spent[a->nspent].time;
		r.params.cost = a->spent[a->nspent].cost;
		(void) rl_engine(r.engine)->refund(&req, &r);
	}
}

/*
 * Queue an amount whose refunds are network round trips, for after the
 * transaction (at an abort: allocates nothing).  Past the queue's bound
 * its oldest pairs are dropped (they would be sent last).
 */
static void
amount_queue(RlAmount *a)
{
	const RlEngine *engine = rl_engine(a->target->id.engine);
	int64		room = Max(RL_REFUND_QUEUE_MAX - queue_pairs, 0);
	int64		dropped = 0;

	if (a->nspent > room)
	{
		dropped = a->nspent - room;
		memmove(a->spent, a->spent + dropped, room * sizeof(RlSpent));
		a->nspent = room;
	}
	if (engine->refunds_noted != NULL)
		engine->refunds_noted(a->nspent, dropped);
	if (a->nspent == 0)
	{
		a->next = free_amounts;
		free_amounts = a;
		return;
	}
	a->next = NULL;
	if (queue_tail != NULL)
		queue_tail->next = a;
	else
		queue_head = a;
	queue_tail = a;
	queue_pairs += a->nspent;
	a->target->batch->queued++;
	rl_refund_waiting = true;
}

/*
 * Give back everything a level consumed, newest first, and forget the
 * level; a remote engine's refunds are queued.  The level must be the
 * innermost.  Allocates nothing.
 */
static void
level_refund(RlLevel *level)
{
	RlAmount   *a;

	Assert(levels == level);
	levels = level->up;
	while ((a = level->amounts) != NULL)
	{
		level->amounts = a->next;
		amount_unlink(a);
		if (a->target->id.flags & RL_RECEIPT_REMOTE)
		{
			amount_queue(a);
			continue;
		}
		amount_refund(a);
		a->next = free_amounts;
		free_amounts = a;
	}
	level->up = free_levels;
	free_levels = level;
}

/*
 * Send the queued refunds, oldest first (the dispatcher, before a call
 * reaches an engine; the session's exit).  Outside any abort: an engine's
 * refund may wait on a socket, and a cancel may interrupt it (what was not
 * sent yet stays queued).  A transaction's retired tracking is freed once
 * its last queued amount is sent.
 */
void
rl_refund_flush(void)
{
	RlAmount   *a;

	while ((a = queue_head) != NULL)
	{
		RlBatch    *b = a->target->batch;

		amount_refund(a);
		queue_head = a->next;
		if (queue_head == NULL)
			queue_tail = NULL;
		b->queued--;
		if (b == batch)
		{
			/* the current transaction's: back to its free list */
			a->next = free_amounts;
			free_amounts = a;
		}
		else if (b->queued == 0)
		{
			RlBatch   **link = &retired;

			while (*link != b)
				link = &(*link)->next;
			*link = b->next;
			MemoryContextDelete(b->cxt);
		}
	}
	rl_refund_waiting = false;
}

/*
 * on_shmem_exit: send what is still queued, best effort.  Registered after
 * the callback that aborts a transaction left open, so its refunds are
 * queued by then.  Never raises (an error here would make the exit
 * recurse): what cannot be sent is dropped, and counted.
 */
static void
refund_exit(int code, Datum arg)
{
	if (queue_head == NULL)
		return;
	PG_TRY();
	{
		rl_refund_flush();
	}
	PG_CATCH();
	{
		FlushErrorState();
	}
	PG_END_TRY();
	while (queue_head != NULL)
	{
		RlAmount   *a = queue_head;
		const RlEngine *engine = rl_engine(a->target->id.engine);

		if (engine->refunds_noted != NULL)
			engine->refunds_noted(0, a->nspent);
		queue_pairs -= a->nspent;
		queue_head = a->next;
	}
	queue_tail = NULL;
	rl_refund_waiting = false;
}


/*
 * Merge amount a into the one below it (the parent level's, with the same
 * parameters) and free a.  Returns false, changing nothing, if memory for
 * that could not be had; raises no error.
 */
static bool
amount_merge(RlAmount *a)
{
	RlAmount   *b = a->below;
	int64		joined = 0;
	int64		i;

	if (a->nspent > 0 && b->nspent > 0 &&
		same_refund(a->target, &a->params, b->spent[b->nspent - 1].time,
					a->spent[0].time))
		joined = 1;
	if (!spent_reserve(b, b->nspent + a->nspent - joined, true))
		return false;
	for (i = 0; i < a->nspent; i++)
		(void) spent_add(b, a->spent[i].time, a->spent[i].cost, true);

	b->above = a->above;
	if (a->above != NULL)
		a->above->below = b;
	else
		a->target->top = b;
	a->next = free_amounts;
	free_amounts = a;
	return true;
}

/*
 * A subtransaction committed: its level becomes its parent's.  Its amounts
 * join the parent's newest of the same target and parameters, or move
 * there as they are (newer than the parent's own).  Raises no error.
 */
static void
level_commit(RlLevel *level, SubTransactionId parent_subid)
{
	RlLevel    *parent = level->up;
	RlAmount   *moved = NULL;
	RlAmount  **tail = &moved;
	RlAmount   *a;
	RlAmount   *next;

	if (parent == NULL || parent->subid != parent_subid)
	{
		/* the parent consumed nothing itself */
		level->subid = parent_subid;
		return;
	}
	for (a = level->amounts; a != NULL; a = next)
	{
		next = a->next;
		if (a->below != NULL && a->below->level == parent &&
			same_params(&a->params, &a->below->params) && amount_merge(a))
			continue;
		a->level = parent;
		*tail = a;
		tail = &a->next;
	}
	*tail = parent->amounts;
	parent->amounts = moved;
	levels = parent;
	level->up = free_levels;
	free_levels = level;
}

/* At the end of the transaction: refund everything if it aborted. */
static void
refund_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			while (levels != NULL)
				level_refund(levels);
			refund_forget();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			refund_forget();
			break;
		default:
			break;
	}
}

/*
 * At the end of a subtransaction: refund what it consumed if it aborted,
 * pass it to its parent if it committed.  Only the innermost level can be
 * the subtransaction's: one that consumed nothing has none.
 */
static void
refund_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (levels == NULL || levels->subid != mySubid)
		return;
	switch (event)
	{
		case SUBXACT_EVENT_ABORT_SUB:
			level_refund(levels);
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			level_commit(levels, parentSubid);
			break;
		default:
			break;
	}
}
