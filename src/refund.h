/*-------------------------------------------------------------------------
 *
 * refund.h
 *		Refunds of consumption made by aborted (sub)transactions, and the
 *		queue of those sent after the transaction (refund.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_REFUND_H
#define RL_REFUND_H

#include "engine.h"
#include "refund_queue.h"

/*
 * A local engine's receipt kept pending, not yet added to its target
 * (refund.c: why, and when they are added): its key, short ones here.
 */
#define RL_PENDING_MAX		64	/* receipts */
#define RL_PENDING_SHORT	16	/* a key this long is kept in the receipt */

typedef struct RlPending
{
	uint64		hash;			/* rl_refund_target_hash */
	const char *key;			/* short (or else refund.c's copy) */
	int			keylen;
	Oid			dbid;
	RlAlgo		algo;
	char		short_key[RL_PENDING_SHORT];
	RlReceipt	r;
} RlPending;

/* the pending receipts (refund.c), for rl_refund_track */
extern rl_hidden RlPending rl_pending[RL_PENDING_MAX];
extern rl_hidden int rl_npending;
extern rl_hidden SubTransactionId rl_pending_subid;
extern rl_hidden SubTransactionId rl_refund_subid;

extern void rl_refund_track_slow(const RlRequest *req,
								 const RlReceipt *receipts, int n);

/*
 * Copy a key of at most RL_PENDING_SHORT bytes, reading none past its end:
 * two words overlapping, or bytes (#9: libc's memcpy cost a row some 30
 * instructions).
 */
static inline void
rl_copy_short(char *dst, const char *src, int len)
{
	if (len >= 8)
	{
		uint64		a;
		uint64		b;

		memcpy(&a, src, 8);
		memcpy(&b, src + len - 8, 8);
		memcpy(dst, &a, 8);
		memcpy(dst + len - 8, &b, 8);
	}
	else if (len >= 4)
	{
		uint32		a;
		uint32		b;

		memcpy(&a, src, 4);
		memcpy(&b, src + len - 4, 4);
		memcpy(dst, &a, 4);
		memcpy(dst + len - 4, &b, 4);
	}
	else
	{
		int			i;

		for (i = 0; i < len; i++)
			dst[i] = src[i];
	}
}

/*
 * Remember the receipts of a decision of the request, to give back what
 * they record if the current (sub)transaction aborts.  Inline, the usual
 * call (a quota trigger's row: one receipt of a local engine, its key
 * short, the tracking begun, room left, the pending receipts of the same
 * level): the receipt kept pending, without a call (#9).  The rest is
 * rl_refund_track_slow's.
 */
static pg_attribute_always_inline void
rl_refund_track(const RlRequest *req, const RlReceipt *receipts, int n)
{
	const RlReceipt *r = receipts;
	RlPending  *p;

	if (unlikely(n != 1 || rl_npending >= RL_PENDING_MAX ||
				 (r->flags & (RL_RECEIPT_REMOTE | RL_RECEIPT_TIMELESS |
							  RL_RECEIPT_KEYHASH)) != RL_RECEIPT_KEYHASH ||
				 req->keylen > RL_PENDING_SHORT ||
				 rl_refund_subid == InvalidSubTransactionId ||
				 (rl_npending > 0 && rl_pending_subid != rl_refund_subid)))
	{
		rl_refund_track_slow(req, receipts, n);
		return;
	}
	p = &rl_pending[rl_npending++];
	p->hash = r->keyhash;
	p->key = p->short_key;
	p->keylen = req->keylen;
	p->dbid = req->dbid;
	p->algo = req->algo;
	rl_copy_short(p->short_key, req->key, req->keylen);
	p->r = *r;
	rl_pending_subid = rl_refund_subid;
}

#endif							/* RL_REFUND_H */
