/*-------------------------------------------------------------------------
 *
 * refund.h
 *		Refunds of consumption made by aborted (sub)transactions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_REFUND_H
#define RL_REFUND_H

#include "engine.h"

extern void rl_refund_track(const RlRequest *req, const RlReceipt *receipts,
							 int n);

#endif							/* RL_REFUND_H */
