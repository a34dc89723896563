/*-------------------------------------------------------------------------
 *
 * backend.h
 *		One rate-limit request, and the entry points of the places that can
 *		decide it (the shared-memory store, Redis).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_BACKEND_H
#define RL_BACKEND_H

#include "algo.h"

/* Unix epoch minus PostgreSQL epoch, in microseconds */
#define RL_UNIX_OFFSET \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

/* "at" was not given: the deciding backend reads its clock */
#define RL_NO_TIME PG_INT64_MIN

/* a request's backend or fail_mode not set by its policy: use the setting */
#define RL_SETTING (-1)

typedef struct RlRequest
{
	RlAlgo		algo;
	Oid			dbid;
	const char *key;
	int			keylen;
	RlParams	params;
	int64		at;				/* Unix microseconds, or RL_NO_TIME */
	int			backend;		/* RlBackend, or RL_SETTING */
	int			fail_mode;		/* RlFailMode, or RL_SETTING */
	bool		shadow;			/* dry run: decide and count, always allow */
	const char *policy;			/* the policy's name, or NULL */
} RlRequest;

static inline void
rl_request_init(RlRequest *req)
{
	memset(req, 0, sizeof(*req));
	req->at = RL_NO_TIME;
	req->backend = RL_SETTING;
	req->fail_mode = RL_SETTING;
}

/* Outcome of a backend that may be unable to decide */
typedef enum RlStatus
{
	RL_OK = 0,					/* decision filled in */
	RL_NO_ROOM,					/* store full: the key cannot be tracked */
	RL_UNAVAILABLE				/* remote backend down, slow or failing */
} RlStatus;

/*
 * Where a decision consumed, and with what: what a refund needs.  A decision
 * has a receipt per place it consumed in (at most RL_MAX_RECEIPTS): the
 * store (its own consumption, or hybrid's pre-check with the pre-check's
 * parameters), Redis, this backend's Redis lease.
 */
typedef enum RlEngine
{
	RL_ENGINE_STORE = 0,
	RL_ENGINE_REDIS,
	RL_ENGINE_LEASE
} RlEngine;

#define RL_MAX_RECEIPTS 4

typedef struct RlReceipt
{
	RlEngine	engine;
	RlParams	params;			/* as consumed with; cost: the units */
	int64		time;			/* the consumption's time (Unix us) */
	uint64		incarnation;	/* the state's incarnation it consumed from */
} RlReceipt;

/* dispatch.c: the request's backend and fail mode, its policy's or the setting's */
extern int	rl_request_backend(const RlRequest *req);
extern int	rl_request_fail_mode(const RlRequest *req);

/* dispatch.c: decide with the configured backend and failure policy */
extern void rl_decide(const RlRequest *req, RlDecision *d);
extern bool rl_decide_all(const RlRequest *reqs, int n, RlDecision *ds);
extern void rl_give_back(const RlRequest *req, const RlDecision *d);
extern int	rl_receipts(const RlRequest *req, const RlDecision *d,
						RlReceipt *receipts);
extern void rl_refund_receipt(const RlRequest *req, const RlReceipt *r);

/* the decision made when the backend cannot decide (fail_mode) */
extern void rl_fail_decision(const RlRequest *req, int64 now, bool allow,
							 RlDecision *d);

/* store.c */
extern RlStatus rl_store_decide(const RlRequest *req, int64 now,
								 RlDecision *d);

/* clock: microseconds since the Unix epoch */
extern int64 rl_clock_now(void);

#endif							/* RL_BACKEND_H */
