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
#include "refund_pending.h"
#include "refund_queue.h"

/* the pending receipts (refund.c), for rl_refund_track */
extern rl_hidden RlPending rl_pending[RL_PENDING_MAX];
extern rl_hidden int rl_npending;
extern rl_hidden SubTransactionId rl_pending_subid;
extern rl_hidden SubTransactionId rl_refund_subid;

extern void rl_refund_track_slow(const RlRequest *req,
								 const RlReceipt *receipts, int n);

/*
 * Remember the receipts of a decision of the request, to give back what
 * they record if the current (sub)transaction aborts.  Inline, the usual
 * call (a quota trigger's row: one receipt naming its entry, the tracking
 * begun, room left, the pending receipts of the same level): the receipt
 * kept pending, without a call and whatever its key's length (#9).  The
 * rest is rl_refund_track_slow's.
 */
static pg_attribute_always_inline void
rl_refund_track(const RlRequest *req, const RlReceipt *receipts, int n)
{
	const RlReceipt *r = receipts;
	RlPending  *p;

	if (unlikely(n != 1 || rl_npending >= RL_PENDING_MAX ||
				 (r->flags & (RL_RECEIPT_REMOTE | RL_RECEIPT_TIMELESS |
							  RL_RECEIPT_ENTRY)) != RL_RECEIPT_ENTRY ||
				 rl_refund_subid == InvalidSubTransactionId ||
				 (rl_npending > 0 && rl_pending_subid != rl_refund_subid)))
	{
		rl_refund_track_slow(req, receipts, n);
		return;
	}
	p = &rl_pending[rl_npending++];
	p->hash = rl_refund_entry_hash(r->entry, r->incarnation);
	p->dbid = req->dbid;
	p->algo = req->algo;
	p->r = *r;
	rl_pending_subid = rl_refund_subid;
}

#endif							/* RL_REFUND_H */
