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
#include "refund_pending.h"

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
	uint32		entry;			/* RL_RECEIPT_ENTRY: the state's entry (its
								 * key then is not kept: keylen 0) */
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

/*
 * A tally (refund_tally.c): what the tally level consumed from one state
 * that a receipt names by its entry, with parameters of one class, in one
 * window of it.  Two to a cache line, in an open-addressed table.
 */
typedef struct RlTally
{
	uint32		entry;			/* the receipts' entry; 0: a free slot */
	uint32		incarnation;
	uint32		cls;			/* its class, rl_tally_classes[cls] */
	uint32		order;			/* its number: tallies are numbered in
								 * the order they were made */
	int64		cost;			/* units; 0: nothing to give back */
	int64		time;			/* its first receipt's */
} RlTally;

/* a class of tallies: the state's database and algorithm, the parameters */
typedef struct RlTallyClass
{
	Oid			dbid;
	RlAlgo		algo;
	RlTargetKind kind;			/* RL_TARGET_BOUND or RL_TARGET_WINDOW */
	RlParams	params;			/* cost 0 */
	int64		window_start;	/* a window's: the last one a time was */
	int64		window_end;		/* found in (empty at first) */
} RlTallyClass;

#define RL_TALLY_CLASSES	16

/* refund_tally.c: the table, its level and classes (valid while mask > 0) */
extern rl_hidden RlTally *rl_tallies;
extern rl_hidden uint32 rl_tally_mask;
extern rl_hidden uint32 rl_tally_used;
extern rl_hidden SubTransactionId rl_tally_subid;
extern rl_hidden RlTallyClass rl_tally_classes[RL_TALLY_CLASSES];
extern rl_hidden uint32 rl_tally_last;

/* what became of a receipt offered to the tallies */
typedef enum RlTallyStep
{
	RL_TALLIED,					/* its state's tally took it */
	RL_TALLY_NOT,				/* it goes to its target */
	RL_TALLY_SPILL				/* its state's tally goes to its target
								 * first, then it is offered again */
} RlTallyStep;

extern RlTallyStep rl_tally_add_slow(const RlPending *p, uint32 *spill);
extern bool rl_tally_receipt(uint32 i, RlPending *p);
extern void rl_tally_spilled(uint32 i);
extern void rl_tally_clear(void);
extern void rl_tally_refund(void);
extern void rl_tally_forget(void);

/*
 * Give back at once what a pending receipt records, or a tally as one
 * (rl_tally_receipt): its state is named by its entry, so the request
 * needs no key.  At an abort: the store's refund never raises.
 */
static inline void
rl_refund_pending_give(const RlPending *p)
{
	RlRequest	req;

	rl_request_for_key(&req, p->dbid, p->algo, NULL, 0);
	(void) rl_engine(p->r.engine)->refund(&req, &p->r);
}

/*
 * Are a and b the same parameters, but for their cost?  (A tally's class,
 * refund_tally.c; every field its refund, or a state's, may read.)
 */
static inline bool
rl_params_same(const RlParams *a, const RlParams *b)
{
	return a->limit == b->limit && a->per == b->per &&
		a->burst == b->burst && a->headroom == b->headroom &&
		rl_period_equal(&a->period, &b->period);
}

/*
 * The slot of a pending receipt's state among the tallies (the table
 * exists): its tally's, or the free one where it would go.  Always inline:
 * on every tracked row.
 */
static pg_attribute_always_inline RlTally *
rl_tally_slot(const RlPending *p)
{
	uint32		i;

	for (i = (uint32) p->hash & rl_tally_mask;; i = (i + 1) & rl_tally_mask)
	{
		RlTally    *t = &rl_tallies[i];

		if (t->entry == 0 ||
			(t->entry == p->r.entry &&
			 t->incarnation == (uint32) p->r.incarnation))
			return t;
	}
}

/*
 * Are times t and u both in the last window class c found (any times, for
 * a bucket's class)?
 */
static inline bool
rl_tally_window_holds(const RlTallyClass *c, int64 t, int64 u)
{
	return c->kind != RL_TARGET_WINDOW ||
		(t >= c->window_start && t < c->window_end &&
		 u >= c->window_start && u < c->window_end);
}

/* Add units to a tally: a sum past PG_INT64_MAX stays there, as a pair's. */
static inline void
rl_tally_add_cost(RlTally *t, int64 cost)
{
	if (pg_add_s64_overflow(t->cost, cost, &t->cost))
		t->cost = PG_INT64_MAX;
}

/*
 * Offer a pending receipt to its state's tally, at the tally level (the
 * pending receipts'): inline, the usual call (#9: a quota trigger's row on
 * a state tallied already, of the last class used, in the window its
 * tally is of).  What else can become of it: rl_tally_add_slow.
 */
static pg_attribute_always_inline RlTallyStep
rl_tally_add(const RlPending *p, uint32 *spill)
{
	const RlTallyClass *c = &rl_tally_classes[rl_tally_last];
	RlTally    *t;

	if (unlikely(rl_tally_mask == 0))
		return rl_tally_add_slow(p, spill);
	t = rl_tally_slot(p);
	if (unlikely(t->entry == 0 || t->cost == 0 || t->cls != rl_tally_last ||
				 c->dbid != p->dbid || c->algo != p->algo ||
				 !rl_params_same(&c->params, &p->r.params) ||
				 !rl_tally_window_holds(c, t->time, p->r.time)))
		return rl_tally_add_slow(p, spill);
	rl_tally_add_cost(t, p->r.params.cost);
	return RL_TALLIED;
}

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
 * The hash of the target a receipt of a request reaches: its entry's when
 * it names one, else its key's, computed as the store does.  A key's
 * targets of other incarnations or engines (rare in one transaction) share
 * its bucket, told apart by their keys (refund.c).
 */
static inline uint64
rl_refund_target_hash(const RlRequest *req, const RlReceipt *r)
{
	if (likely(r->flags & RL_RECEIPT_ENTRY))
		return rl_refund_entry_hash(r->entry, r->incarnation);
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
