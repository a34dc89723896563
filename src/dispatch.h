/*-------------------------------------------------------------------------
 *
 * dispatch.h
 *		The dispatcher: the only door to the engines.  Every SQL function,
 *		trigger and policy reaches per-key state through these functions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_DISPATCH_H
#define RL_DISPATCH_H

#include "utils/guc.h"

#include "engine.h"
#include "slots.h"

typedef enum RlBackend
{
	RL_BACKEND_LOCAL,			/* the shared-memory store */
	RL_BACKEND_REDIS,			/* Redis decides every call */
	RL_BACKEND_HYBRID			/* a local pre-check, then Redis */
} RlBackend;

typedef enum RlFailMode
{
	RL_FAIL_OPEN,				/* allow what cannot be decided */
	RL_FAIL_CLOSED,				/* deny it */
	RL_FAIL_LOCAL				/* decide it in shared memory (remote
								 * backends only; "open" for the store) */
} RlFailMode;

/* the dispatcher's settings */
extern int	rl_backend;
extern int	rl_fail_mode;
extern double rl_hybrid_multiple;
extern bool rl_refund_on_rollback;

/* the values of ratelimit.backend and ratelimit.fail_mode (policy.c too) */
extern const struct config_enum_entry rl_backend_options[];
extern const struct config_enum_entry rl_fail_mode_options[];

/* receipts of one decision: hybrid's pre-check, and Redis or a lease */
#define RL_MAX_RECEIPTS		2

/*
 * One decision: what the algorithm reported (out), the dispatcher's own
 * flags, and where the call consumed (its receipts, what a refund needs).
 */
typedef struct RlDecision
{
	RlOutcome	out;
	bool		failed;			/* decided by fail_mode */
	bool		shadowed;		/* denied, but allowed as a shadow */
	int			nreceipts;
	RlReceipt	receipts[RL_MAX_RECEIPTS];
} RlDecision;

extern void rl_dispatch_init(void);
extern bool rl_dispatch_ready(void);
extern void rl_dispatch_enter(void);

extern int	rl_request_backend(const RlRequest *req);
extern int	rl_request_fail_mode(const RlRequest *req);

extern void rl_decide(const RlRequest *req, RlDecision *d);
extern bool rl_override_decision(const RlRequest *req, int64 now,
								 RlDecision *d);
extern RlRequest rl_hybrid_precheck(const RlRequest *req);
extern void rl_adjust_key(const RlRequest *req, RlDecision *d);
extern bool rl_decide_all(const RlRequest *reqs, int n, RlDecision *ds);
extern void rl_give_back(const RlRequest *req, RlDecision *d);
extern void rl_track(const RlRequest *req, const RlDecision *d);

extern void rl_slots_local(const RlRequest *req);
extern bool rl_acquire_slot(const RlRequest *req, int64 max_wait,
							bool session);
extern bool rl_release_slot(const RlRequest *req);
extern int	rl_held_slots(RlHeldSlot **out);

extern int64 rl_reset_key(const RlRequest *req, bool all_algos);
extern int64 rl_reset_database(Oid dbid, bool policies_remote);

extern int	rl_engine_info(RlEngineId engine, RlInfoItem *items);
extern bool rl_scan_keys(Oid dbid, uint64 *cursor, RlKeyImage *img);
extern bool rl_peek(const RlRequest *req, int64 now, RlOutcome *out);
extern int	rl_owners_list(RlOwnerImage **owners);

#endif							/* RL_DISPATCH_H */
