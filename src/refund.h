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

extern void rl_refund_track(const RlRequest *req, const RlReceipt *receipts,
							 int n);
extern void rl_refund_flush(void);

/* refunds are queued for after their transaction: rl_refund_flush sends */
extern rl_hidden bool rl_refund_waiting;

#endif							/* RL_REFUND_H */
