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

#include "engine.h"

/* units consumed at a time: one call's, or several a refund treats as one */
typedef struct RlSpent
{
	int64		time;
	int64		cost;
} RlSpent;

/* the hash key of a target: the state a refund reaches */
typedef struct RlTargetKey
{
	const char *key;			/* in its batch's context (a lookup: the
								 * request's) */
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
	uint64		incarnation;	/* what its refunds name (a lease target:
								 * the newest lease's) */
	RlAmount   *amounts;		/* innermost level first; within a level,
								 * the latest used first */
	RlBatch    *batch;			/* the transaction's tracking it is of */
} RlTarget;

struct RlAmount
{
	RlTarget   *target;
	RlLevel    *level;
	RlAmount   *tprev;			/* the target's list */
	RlAmount   *tnext;
	RlAmount   *next;			/* the level's older amount, the queue's
								 * next, or free list */
	RlParams	params;			/* limit, per and burst (a bucket's: the
								 * composed bound; cost: unused) */
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

extern uint32 rl_refund_target_hash(const void *key, Size keysize);
extern int	rl_refund_target_match(const void *key1, const void *key2,
								   Size keysize);
extern bool rl_refund_same_class(const RlTarget *target, const RlParams *p,
								 const RlParams *q);
extern bool rl_refund_add(RlAmount *a, const RlParams *p, int64 t,
						  int64 cost, bool no_oom);
extern void rl_refund_link(RlAmount *a);
extern void rl_refund_unlink(RlAmount *a);
extern RlAmount *rl_refund_find(RlTarget *target, RlLevel *level,
								const RlParams *p);
extern bool rl_refund_merge(RlAmount *a, RlAmount *b);

#endif							/* RL_REFUND_INT_H */
