/*-------------------------------------------------------------------------
 *
 * redis_batch.c
 *		Local batching for the Redis backend (ratelimit.redis_batch): a
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
 * sliding_window_log and leaky_bucket, whose point is exactness or a delay
 * per call, are always decided exactly, as are calls with an explicit "at"
 * (a lease lives on the real clock) and calls costing more than N.
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

#include "common/hashfn.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "guc.h"
#include "redis.h"

#define RL_BATCH_MAX_LEASES		10000

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

/* Forget every lease (the settings changed, or the table is full). */
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

/* Is this lease for exactly the request's state and parameters? */
static bool
lease_matches(const RlLease *l, const RlRequest *req)
{
	return l->dbid == req->dbid && l->algo == req->algo &&
		l->keylen == req->keylen &&
		memcmp(l->key, req->key, req->keylen) == 0 &&
		l->params.limit == req->params.limit &&
		l->params.per == req->params.per &&
		l->params.burst == req->params.burst;
}

/* When a lease taken now with this decision stops being usable. */
static int64
lease_expiry(const RlRequest *req, int64 now, const RlDecision *d)
{
	int64		per = req->params.per;

	switch (req->algo)
	{
		case RL_FIXED_WINDOW:
			/* the call consumed: reset_at is the window's end */
			return d->reset_at;
		case RL_SLIDING_WINDOW_COUNTER:
			/* (w + 2) W: the window ends one W earlier */
			return d->reset_at - per;
		default:
			return now + per;
	}
}

/* A decision made from the lease alone. */
static void
local_decision(RlLease *l, bool allowed, int64 now, RlDecision *d)
{
	rl_redis_count(RL_REDIS_BATCHED);
	d->allowed = allowed;
	d->remaining = allowed ? l->remaining + l->credit : l->remaining;
	d->retry_after = allowed ? 0.0 : (double) (l->deny_until - now) / 1000000.0;
	d->reset_at = l->reset_at;
	d->delay = 0.0;
	d->time = now;
	d->incarnation = l->incarnation;
	d->leased = allowed;
}

/*
 * Decide exactly in Redis.  A denial holds, if nothing else happens, for
 * retry_after, and anything else happening can only consume more: until
 * then the same call, or a costlier one, is denied locally.
 */
static RlStatus
exact_decide(RlLease *l, const RlRequest *req, int64 now, RlDecision *d)
{
	RlStatus	st = rl_redis_decide(req, d);

	if (st == RL_OK && !d->allowed)
	{
		l->deny_until = now + (int64) floor(d->retry_after * 1000000.0);
		l->deny_cost = req->params.cost;
		l->remaining = d->remaining;
		l->reset_at = d->reset_at;
	}
	return st;
}

/*
 * Decide the request in batching mode: from this backend's lease for the
 * key if it covers the cost, else by taking a new lease of
 * ratelimit.redis_batch units from Redis (the call's cost included), else
 * exactly.  Returns what rl_redis_decide returns; on RL_UNAVAILABLE the
 * caller applies fail_mode.
 */
RlStatus
rl_batch_decide(const RlRequest *req, RlDecision *d)
{
	int64		capacity = rl_algo_has_burst(req->algo) ?
		req->params.burst : req->params.limit;
	RlRequest	lease_req;
	RlDecision	ld;
	RlLease    *l;
	RlStatus	st;
	uint64		hash;
	int64		now;
	bool		found;

	if (req->at != RL_NO_TIME || req->params.cost == 0 ||
		req->params.cost > rl_redis_batch ||
		(req->algo != RL_FIXED_WINDOW &&
		 req->algo != RL_SLIDING_WINDOW_COUNTER &&
		 req->algo != RL_TOKEN_BUCKET))
		return rl_redis_decide(req, d);

	/* a lease's decision fills only the reported fields */
	memset(d, 0, sizeof(*d));
	now = rl_clock_now();
	hash = lease_hash(req);
	l = hash_search(lease_table(), &hash, HASH_ENTER, &found);
	if (found && !lease_matches(l, req))
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
		local_decision(l, false, now, d);
		return RL_OK;
	}
	if (now < l->expires)
	{
		if (l->credit >= req->params.cost)
		{
			/* the fast path: admitted from the lease */
			l->credit -= req->params.cost;
			local_decision(l, true, now, d);
			return RL_OK;
		}
		if (l->credit < 0)
			return exact_decide(l, req, now, d);
	}

	/* take a new lease, this call's cost included */
	lease_req = *req;
	lease_req.params.cost = Min(rl_redis_batch, capacity);
	st = rl_redis_decide(&lease_req, &ld);
	if (st != RL_OK)
		return st;
	if (!ld.allowed)
	{
		/*
		 * Too little left for a lease: decide exactly until a lease would
		 * fit again.
		 */
		l->credit = -1;
		l->expires = now + (int64) ceil(ld.retry_after * 1000000.0);
		return exact_decide(l, req, now, d);
	}
	l->incarnation = ++leases_taken;
	l->expires = lease_expiry(req, now, &ld);
	l->credit = lease_req.params.cost - req->params.cost;
	l->remaining = ld.remaining;
	l->reset_at = ld.reset_at;
	*d = ld;
	d->remaining = ld.remaining + l->credit;
	/* the call spent part of the lease: a refund goes back to it */
	d->time = now;
	d->incarnation = l->incarnation;
	d->remote = false;
	d->leased = true;
	return RL_OK;
}

/*
 * Give back to this backend's lease what a call admitted from the lease
 * numbered "incarnation" spent, if that lease is still the key's and still
 * usable; otherwise the units went with the lease (what an unspent lease
 * loses anyway).
 */
void
rl_batch_refund(const RlRequest *req, uint64 incarnation)
{
	uint64		hash;
	RlLease    *l;

	if (leases == NULL)
		return;
	hash = lease_hash(req);
	l = hash_search(leases, &hash, HASH_FIND, NULL);
	if (l != NULL && lease_matches(l, req) && l->credit >= 0 &&
		l->incarnation == incarnation && rl_clock_now() < l->expires)
		l->credit += req->params.cost;
}
