/*-------------------------------------------------------------------------
 *
 * refund_queue.h
 *		The queue of refunds sent after their transaction (refund_queue.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_REFUND_QUEUE_H
#define RL_REFUND_QUEUE_H

#include "compat.h"

extern void rl_refund_flush(void);

/* refunds are queued for after their transaction: rl_refund_flush sends */
extern rl_hidden bool rl_refund_waiting;

#endif							/* RL_REFUND_QUEUE_H */
