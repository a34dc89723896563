/*-------------------------------------------------------------------------
 *
 * redis_batch.c
 *		Local batching for the Redis engine (ratelimit.redis_batch): a
 *		backend takes up to N units from Redis in one decision (a lease) and
 *		admits the following calls of the same key from it, without a round
 *		trip, until the lease is spent or void.
 *
 * Precision is traded for speed, within bounds that depend only on N (see
 * docs/redis.md, "Local batching"):
 *	- fixed_window, sliding_window_counter: a lease lasts until the end of
 *	  the window it was taken in.  Everything admitted was counted in Redis
 *	  first, so nothing is over-admitted; units leased but not spent by the
 *	  window's end are lost (at most N - 1 per backend holding a lease).
 *	- token_bucket: a lease lasts one window W.  Tokens spent later than
 *	  they were taken let the bucket refill meanwhile, and tokens left at
 *	  expiry are lost: at most N per backend either way.
 * How long a lease lasts is the algorithm's (the table's lease_end); an
 * algorithm without one (sliding_window_log, leaky_bucket: their point is
 * exactness or a delay per call) is always decided exactly, as are calls
 * with an explicit "at" (a lease lives on the real clock) and calls costing
 * more than N.
 *
 * This file only keeps the leases; the engine (redis_engine.c) asks Redis.
 * A batched call starts with rl_batch_begin, which decides it from the
 * lease or says what to ask Redis: a lease (then rl_batch_leased records
 * it) or the exact decision (then rl_batch_exact remembers a denial).
 *
 * Leases live in this backend's memory (a hash table in TopMemoryContext),
 * not in shared memory: no lock is taken on the fast path.  A new lease
 * replaces one whose parameters (limit, per, burst) differ.  The table is
 * dropped when it reaches RL_BATCH_MAX_LEASES entries or the connection
 * settings change; dropping only loses unspent units.  Each lease is an
 * incarnation of its own, numbered in this backend: a call admitted from a
 * lease gives its units back to that lease only, never to one that
 * replaced it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include <limits.h>

#include "common/hashfn.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "redis_int.h"

#define RL_BATCH_MAX_LEASES		10000

int			rl_redis_batch = 0; /* units; 0 = exact */

typedef struct RlLease
{
	uint64		hash;			/* hash key: (dbid, algo, key bytes) */
	Oid			dbid;
	RlAlgo		algo;
	int			keylen;
	char	   *key;			/* in rl_batch_cxt */
	RlParams	params;			/* of the lease (cost aside) */
	int64		credit;			/* units left to admit; -1: no lease fits,
								 * decide exactly */
	uint64		incarnation;	/* the lease's number (0: none taken) */
	int64		expires;		/* Unix us: credit void from then on */
	int64		deny_until;		/* Unix us: calls costing deny_cost or more */
	int64		deny_cost;		/* are denied until then */
	int64		remaining;		/* Redis's latest remaining and reset_at */
	int64		reset_at;
} RlLease;

static HTAB *leases = NULL;
static MemoryContext rl_batch_cxt = NULL;
static uint64 leases_taken = 0; /* numbers the leases, never reset */

/* A new batch size: start afresh, as for the connection's settings. */
static void
assign_redis_batch(int newval, void *extra)
{
	rl_redis_conn_invalidate();
}

/* The batching setting (from rl_redis_init). */
void
rl_batch_init(void)
{
	DefineCustomIntVariable("ratelimit.redis_batch",
							"Units a backend takes from Redis at once and admits locally (0: every call asks Redis).",
							"Applies to fixed_window, sliding_window_counter and token_bucket; trades precision for speed (see docs/redis.md).",
							&rl_redis_batch,
							0, 0, INT_MAX,
							PGC_SUSET, 0,
							NULL, assign_redis_batch, NULL);
}

/*
 * Forget every lease (the connection's settings changed, or the table is
 * full).
 */
void
rl_batch_forget(void)
{
	if (rl_batch_cxt != NULL)
		MemoryContextReset(rl_batch_cxt);
	leases = NULL;
}

static HTAB *
lease_table(void)
{
	HASHCTL		ctl;

	if (leases != NULL && hash_get_num_entries(leases) < RL_BATCH_MAX_LEASES)
		return leases;
	if (rl_batch_cxt == NULL)
		rl_batch_cxt = AllocSetContextCreate(TopMemoryContext,
											 "ratelimit redis leases",
											 ALLOCSET_DEFAULT_SIZES);
	rl_batch_forget();
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(RlLease);
	ctl.hcxt = rl_batch_cxt;
	leases = hash_create("ratelimit redis leases", 256, &ctl,
						 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	return leases;
}

/* The lease table's key: a hash of (dbid, algo, key bytes). */
static uint64
lease_hash(const RlRequest *req)
{
	return hash_bytes_extended((const unsigned char *) req->key, req->keylen,
							   ((uint64) req->dbid << 8) | req->algo);
}

/* Is this lease for exactly the request's state and these parameters? */
static bool
lease_matches(const RlLease *l, const RlRequest *req, const RlParams *p)
{
	return l->dbid == req->dbid && l->algo == req->algo &&
		l->keylen == req->keylen &&
		memcmp(l->key, req->key, req->keylen) == 0 &&
		l->params.limit == p->limit &&
		l->params.per == p->per &&
		l->params.burst == p->burst &&
		rl_period_equal(&l->params.period, &p->period);
}

/* The request's lease, or NULL if it has none. */
static RlLease *
lease_find(const RlRequest *req, const RlParams *p)
{
	uint64		hash;
	RlLease    *l;

	if (leases == NULL)
		return NULL;
	hash = lease_hash(req);
	l = hash_search(leases, &hash, HASH_FIND, NULL);
	return l != NULL && lease_matches(l, req, p) ? l : NULL;
}

/* An outcome made from the lease alone, with its receipt if admitted. */
static void
local_outcome(const RlRequest *req, RlLease *l, bool allowed, int64 now,
			  RlOutcome *out, RlReceipt *receipt)
{
	out->allowed = allowed;
	out->remaining = allowed ? l->remaining + l->credit : l->remaining;
	out->retry_after = allowed ? 0.0 :
		(double) (l->deny_until - now) / 1000000.0;
	out->reset_at = l->reset_at;
	out->delay = 0.0;
	receipt->engine = RL_ENGINE_NONE;
	if (allowed)
	{
		/* the call spent part of the lease: a refund goes back to it */
		receipt->engine = RL_ENGINE_REDIS;
		receipt->flags = RL_RECEIPT_TIMELESS;
		receipt->params = req->params;
		receipt->time = now;
		receipt->incarnation = l->incarnation;
	}
}

/*
 * Begin a call in batching mode.  RL_BATCH_DONE: decided from this
 * backend's lease for the key (*out, *receipt filled).  RL_BATCH_LEASE:
 * ask Redis for a lease of *lease_cost units (the call's cost included),
 * then call rl_batch_leased.  RL_BATCH_EXACT: decide exactly, then call
 * rl_batch_exact.  RL_BATCH_NONE: the call is never batched; decide it
 * exactly (a call with a priority's headroom too: a lease would admit it
 * without looking at what is left for others).
 */
RlBatchStep
rl_batch_begin(const RlRequest *req, int64 now, RlOutcome *out,
			   RlReceipt *receipt, int64 *lease_cost)
{
	RlLease    *l;
	uint64		hash;
	bool		found;

	if (req->at != RL_NO_TIME || req->params.cost == 0 ||
		req->params.cost > rl_redis_batch || req->params.headroom > 0 ||
		rl_algo(req->algo)->lease_end == NULL)
		return RL_BATCH_NONE;

	hash = lease_hash(req);
	l = hash_search(lease_table(), &hash, HASH_ENTER, &found);
	if (found && !lease_matches(l, req, &req->params))
	{
		pfree(l->key);
		found = false;
	}
	if (!found)
	{
		l->dbid = req->dbid;
		l->algo = req->algo;
		l->keylen = req->keylen;
		l->key = MemoryContextAlloc(rl_batch_cxt, Max(req->keylen, 1));
		memcpy(l->key, req->key, req->keylen);
		l->params = req->params;
		l->credit = 0;
		l->incarnation = 0;
		l->expires = 0;
		l->deny_until = 0;
	}

	if (now < l->deny_until && req->params.cost >= l->deny_cost)
	{
		/* denied again: nothing can have freed units meanwhile */
		local_outcome(req, l, false, now, out, receipt);
		return RL_BATCH_DONE;
	}
	if (now < l->expires)
	{
		if (l->credit >= req->params.cost)
		{
			/* the fast path: admitted from the lease */
			l->credit -= req->params.cost;
			local_outcome(req, l, true, now, out, receipt);
			return RL_BATCH_DONE;
		}
		if (l->credit < 0)
			return RL_BATCH_EXACT;
	}
	*lease_cost = Min(rl_redis_batch,
					  rl_algo_capacity(req->algo, &req->params));
	return RL_BATCH_LEASE;
}

/*
 * Redis answered the request for a lease of lease_cost units (granted).
 * If it admitted, the lease is recorded and the call decided from it
 * (true, *out and *receipt filled).  If not, too little is left for a
 * lease: calls are decided exactly until one would fit again (false: the
 * caller decides this one exactly).
 */
bool
rl_batch_leased(const RlRequest *req, int64 now, int64 lease_cost,
				const RlOutcome *granted, RlOutcome *out, RlReceipt *receipt)
{
	RlLease    *l = lease_find(req, &req->params);

	if (l == NULL)
		return false;
	if (!granted->allowed)
	{
		l->credit = -1;
		l->expires = now + (int64) ceil(granted->retry_after * 1000000.0);
		return false;
	}
	l->incarnation = ++leases_taken;
	l->expires = rl_algo(req->algo)->lease_end(&req->params, now, granted);
	l->credit = lease_cost - req->params.cost;
	l->remaining = granted->remaining;
	l->reset_at = granted->reset_at;
	*out = *granted;
	out->remaining = granted->remaining + l->credit;
	receipt->engine = RL_ENGINE_REDIS;
	receipt->flags = RL_RECEIPT_TIMELESS;
	receipt->params = req->params;
	receipt->time = now;
	receipt->incarnation = l->incarnation;
	return true;
}

/*
 * Redis decided the request exactly.  A denial holds, if nothing else
 * happens, for retry_after, and anything else happening can only consume
 * more: until then the same call, or a costlier one, is denied locally.
 */
void
rl_batch_exact(const RlRequest *req, int64 now, const RlOutcome *out)
{
	RlLease    *l;

	if (out->allowed || (l = lease_find(req, &req->params)) == NULL)
		return;
	l->deny_until = now + (int64) floor(out->retry_after * 1000000.0);
	l->deny_cost = req->params.cost;
	l->remaining = out->remaining;
	l->reset_at = out->reset_at;
}

/*
 * Give back to this backend's lease what a call admitted from the lease
 * the receipt names spent, if that lease is still the key's and still
 * usable; otherwise the units went with the lease (what an unspent lease
 * loses anyway).
 */
void
rl_batch_refund(const RlRequest *req, const RlReceipt *receipt)
{
	RlLease    *l = lease_find(req, &receipt->params);

	if (l != NULL && l->credit >= 0 &&
		l->incarnation == receipt->incarnation && rl_clock_now() < l->expires)
		l->credit += receipt->params.cost;
}
