/*-------------------------------------------------------------------------
 *
 * refund_pending.h
 *		A receipt kept pending by the refund tracker, and the hash of the
 *		state it names: shared by refund.h (the tracking inline in every
 *		tracked call) and refund_int.h (the tracker's own files).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_REFUND_PENDING_H
#define RL_REFUND_PENDING_H

#include "engine.h"
#include "keyhash.h"

/*
 * A receipt that names its state's entry (RL_RECEIPT_ENTRY: the store's),
 * kept pending, not yet added to its tally or target (refund.c: why, and
 * when they are added).
 */
#define RL_PENDING_MAX		64	/* receipts */

typedef struct RlPending
{
	uint64		hash;			/* rl_refund_entry_hash */
	Oid			dbid;
	RlAlgo		algo;
	RlReceipt	r;
} RlPending;

/*
 * The hash of a state a receipt names by its entry and incarnation
 * (RL_RECEIPT_ENTRY): its tally's and target's (refund.c), without its key
 * (#9).
 */
static inline uint64
rl_refund_entry_hash(uint32 entry, uint64 incarnation)
{
	return rl_id_hash(((uint64) entry << 32) | (uint32) incarnation);
}

#endif							/* RL_REFUND_PENDING_H */
