/*-------------------------------------------------------------------------
 *
 * refund_int.h
 *		The refund tracker's records (refund.c) and the amounts' arithmetic
 *		and lists (refund_amount.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_REFUND_INT_H
#define RL_REFUND_INT_H

#include "common/int.h"

#include "algo_common.h"
#include "engine.h"
#include "keyhash.h"

/*
 * How a target's refunds add up, from its algorithm's refund_grain and its
 * receipts' flags (rl_refund_kind): which calls join a pair, and which
 * parameters make a class of amounts.
 */
typedef enum RlTargetKind
{
	RL_TARGET_WINDOW,			/* calls of one window of W; class: W */
	RL_TARGET_BOUND,			/* any calls, their bounds composed (a
								 * bucket's); one class */
	RL_TARGET_EXACT,			/* calls of one microsecond; one class */
	RL_TARGET_LEASE				/* any calls; class: every parameter (a
								 * lease's refund finds the lease by them) */
} RlTargetKind;

/* units consumed at a time: one call's, or several a refund treats as one */
typedef struct RlSpent
{
	int64		time;
	int64		cost;
} RlSpent;

/*
 * The hash key of a target: the state a refund reaches.  A lease target's
 * (RL_RECEIPT_TIMELESS) is the key's, whatever its lease: its incarnation
 * is not part of the key, and is the newest lease's.
 */
typedef struct RlTargetKey
{
	const char *key;			/* in its batch's context (a lookup: the
								 * request's) */
	int			keylen;
	Oid			dbid;
	RlAlgo		algo;
	uint8		engine;			/* RlEngineId */
	uint8		flags;			/* RL_RECEIPT_* */
	uint8		kind;			/* RlTargetKind: not part of the key, set
								 * once the entry is made */
	uint64		incarnation;	/* what its refunds name */
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
	uint64		hash;			/* rl_refund_target_hash of id */
	struct RlTarget *hnext;		/* the next of its bucket (refund.c) */
	RlTargetKey id;				/* the hash key */
	RlAmount   *amounts;		/* innermost level first; within a level,
								 * the latest used first */
	RlBatch    *batch;			/* the transaction's tracking it is of */
	RlAmount   *spare;			/* an amount made with it, not used yet */
} RlTarget;

struct RlAmount
{
	/* what a call adds to it reads, first (#9: fewer cache lines) */
	RlTarget   *target;
	RlLevel    *level;
	RlSpent    *spent;			/* oldest first */
	int64		nspent;
	RlSpent		one;			/* spent, while it holds one pair (#9: most
								 * amounts of a quota trigger's rows) */
	RlParams	params;			/* limit, per and burst (a bucket's: the
								 * composed bound; cost: unused) */
	int64		maxspent;
	RlAmount   *tprev;			/* the target's list */
	RlAmount   *tnext;
	RlAmount   *next;			/* the level's older amount, the queue's
								 * next, or free list */
};

/* a (sub)transaction that consumed */
struct RlLevel
{
	SubTransactionId subid;
	RlAmount   *amounts;		/* newest first */
	RlLevel    *up;				/* the enclosing level (or free list) */
};

/* refund_queue.c: the transaction's tracking, and its free amounts */
extern rl_hidden RlBatch *rl_refund_batch;
extern rl_hidden RlAmount *rl_refund_free;
extern rl_hidden bool rl_refund_exit_registered;
extern void rl_refund_exit_register(void);
extern void rl_refund_retire(RlBatch *b);
extern void rl_refund_queue(RlAmount *a);

extern void rl_refund_pop(RlAmount *a, RlRequest *req, RlReceipt *r);
extern RlTargetKind rl_refund_kind(RlAlgo algo, uint8 flags);
extern bool rl_refund_append(RlAmount *a, const RlParams *p, int64 t,
							 int64 cost, bool no_oom);
extern void rl_refund_link(RlAmount *a);
extern void rl_refund_unlink(RlAmount *a);
extern RlAmount *rl_refund_find(RlTarget *target, RlLevel *level,
								const RlParams *p);
extern bool rl_refund_merge(RlAmount *a, RlAmount *b);
extern bool rl_refund_same_window(const RlParams *p, int64 t, int64 u);

/*
 * The hash of the target a receipt of a request reaches (rl_refund_track:
 * without building its key first, #9): its key's, the engine's when the
 * receipt carries it (the store hashed the key already), else computed as
 * the store does.  A key's targets of other incarnations or engines (rare
 * in one transaction) share its bucket, told apart by their keys (refund.c).
 */
static inline uint64
rl_refund_target_hash(const RlRequest *req, const RlReceipt *r)
{
	if (likely(r->flags & RL_RECEIPT_KEYHASH))
		return r->keyhash;
	return rl_state_hash(req->dbid, req->algo, req->key, req->keylen);
}

/*
 * May calls with parameters p and q share an amount of the target: does
 * its refund read them the same?  A lease's refund finds the lease by all
 * of them; a window's reads W and its period (which windows cut time);
 * the others read neither W nor the rest (a bucket's burst: its bounds
 * compose, rl_refund_add).
 */
static inline bool
rl_refund_same_class(const RlTarget *target, const RlParams *p,
					 const RlParams *q)
{
	switch ((RlTargetKind) target->id.kind)
	{
		case RL_TARGET_WINDOW:
			return p->per == q->per &&
				rl_period_equal(&p->period, &q->period);
		case RL_TARGET_LEASE:
			return p->limit == q->limit && p->per == q->per &&
				p->burst == q->burst &&
				rl_period_equal(&p->period, &q->period);
		default:
			return true;
	}
}

/*
 * Would a refund at time t give back the same as one at time u, of an
 * amount with parameters p?  The window refunds (and the Redis scripts
 * mirroring them) depend only on the window t falls in, the buckets' not
 * on t, a lease's not either (it goes to the lease its incarnation names);
 * a log entry needs the exact time.
 */
static inline bool
rl_refund_same_time(const RlTarget *target, const RlParams *p, int64 t,
					int64 u)
{
	switch ((RlTargetKind) target->id.kind)
	{
		case RL_TARGET_WINDOW:
			return rl_refund_same_window(p, t, u);
		case RL_TARGET_EXACT:
			return t == u;
		default:
			return true;
	}
}

/*
 * Add cost at time t, consumed with parameters p of the amount's class, to
 * the amount's newest pair if a refund cannot tell them apart (a bucket's
 * amount, one pair, composes its bound with p's burst and takes p's W:
 * given back newest first, this call is bounded by its burst B, then the
 * pair's cost C more, so the bound becomes min(K, B + C)); else as a new
 * pair (rl_refund_append).  Returns false, changing nothing, if there is
 * no room for a new pair and no_oom says not to raise an error for it.  A
 * sum past PG_INT64_MAX stays there: a refund never gives back that much
 * (a state's units are bounded by its limit or burst).
 */
static inline bool
rl_refund_add(RlAmount *a, const RlParams *p, int64 t, int64 cost,
			  bool no_oom)
{
	RlSpent    *last;

	if (a->nspent == 0)
		return rl_refund_append(a, p, t, cost, no_oom);
	last = &a->spent[a->nspent - 1];
	if (!rl_refund_same_time(a->target, &a->params, last->time, t))
		return rl_refund_append(a, p, t, cost, no_oom);
	if (a->target->id.kind == RL_TARGET_BOUND)
	{
		int64		bound;

		if (pg_add_s64_overflow(p->burst, last->cost, &bound))
			bound = PG_INT64_MAX;
		a->params.burst = Min(a->params.burst, bound);
		a->params.limit = p->limit;
		a->params.per = p->per;
	}
	if (pg_add_s64_overflow(last->cost, cost, &last->cost))
		last->cost = PG_INT64_MAX;
	return true;
}

#endif							/* RL_REFUND_INT_H */
