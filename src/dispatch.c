/*-------------------------------------------------------------------------
 *
 * dispatch.c
 *		Decide a request with the configured backend, and apply
 *		ratelimit.fail_mode when that backend cannot decide.
 *
 * No shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "backend.h"
#include "guc.h"
#include "redis.h"
#include "stats.h"
#include "store.h"

static void apply_shadow(const RlRequest *req, RlDecision *d);

/*
 * The real clock (never the transaction's frozen now()), in microseconds
 * since the Unix epoch.
 */
int64
rl_clock_now(void)
{
	return GetCurrentTimestamp() + RL_UNIX_OFFSET;
}

/*
 * The decision for a call no backend could decide.  Allowing reports what a
 * new key would (nothing is recorded); denying asks to retry after one
 * window.
 */
void
rl_fail_decision(const RlRequest *req, int64 now, bool allow, RlDecision *d)
{
	int64		t = req->at == RL_NO_TIME ? now : req->at;
	int64		capacity = rl_algo_has_burst(req->algo) ?
		req->params.burst : req->params.limit;

	d->allowed = allow;
	d->remaining = allow ? capacity - req->params.cost : 0;
	d->retry_after = allow ? 0.0 : (double) req->params.per / 1000000.0;
	d->reset_at = allow ? t : t + req->params.per;
	d->delay = 0.0;
	d->time = t;
	d->stored = false;
	d->failed = true;
}

/*
 * Decide in the shared-memory store; when it has no room for the key,
 * fail_mode decides ("local" counts as "open" there).
 */
static void
local_decide(const RlRequest *req, int64 now, int fail_mode, RlDecision *d)
{
	if (rl_store_decide(req, now, d) == RL_NO_ROOM)
		rl_fail_decision(req, now, fail_mode != RL_FAIL_CLOSED, d);
}

/* n times ratelimit.hybrid_multiple, within what the algorithms accept */
static int64
hybrid_scale(int64 n)
{
	double		scaled = (double) n * rl_hybrid_multiple;

	return scaled >= (double) ((int64) 1 << 62) ? Max(n, (int64) 1 << 62) :
		Max(n, (int64) scaled);
}

/* The request hybrid's local pre-check decides. */
static RlRequest
hybrid_precheck(const RlRequest *req)
{
	RlRequest	pre = *req;

	pre.params.limit = hybrid_scale(req->params.limit);
	pre.params.burst = hybrid_scale(req->params.burst);
	return pre;
}

/*
 * Decide one request with the given backend and fail mode.
 *
 * hybrid first decides locally with the limit and burst multiplied by
 * ratelimit.hybrid_multiple: a cheap sanity limit per server that keeps
 * floods away from Redis.  What it denies is denied; what it admits goes to
 * Redis.  When Redis cannot decide, fail_mode applies; "local" then keeps
 * the local answer (the pre-check's in hybrid mode).  With
 * ratelimit.redis_batch, Redis's answers may come from a lease this backend
 * took earlier (redis_batch.c).
 */
static void
decide(const RlRequest *req, int64 now, int backend, int fail_mode,
	   RlDecision *d)
{
	RlDecision	remote;

	if (backend == RL_BACKEND_LOCAL)
	{
		local_decide(req, now, fail_mode, d);
		return;
	}
	rl_redis_check_request(req);
	if (backend == RL_BACKEND_HYBRID)
	{
		RlRequest	pre = hybrid_precheck(req);

		local_decide(&pre, now, fail_mode, d);
		/* recorded with the pre-check's parameters, not the request's */
		d->prechecked = d->stored;
		d->precheck_time = d->time;
		d->precheck_incarnation = d->incarnation;
		d->stored = false;
		if (!d->allowed)
			return;
	}

	if ((rl_redis_batch > 0 ? rl_batch_decide(req, &remote) :
		 rl_redis_decide(req, &remote)) == RL_OK)
	{
		remote.prechecked = d->prechecked;
		remote.precheck_time = d->precheck_time;
		remote.precheck_incarnation = d->precheck_incarnation;
		*d = remote;
	}
	else if (fail_mode == RL_FAIL_LOCAL)
	{
		if (backend == RL_BACKEND_REDIS)
			local_decide(req, now, fail_mode, d);
	}
	else
		rl_fail_decision(req, now, fail_mode == RL_FAIL_OPEN, d);
}

int
rl_request_backend(const RlRequest *req)
{
	return req->backend == RL_SETTING ? rl_backend : req->backend;
}

int
rl_request_fail_mode(const RlRequest *req)
{
	return req->fail_mode == RL_SETTING ? rl_fail_mode : req->fail_mode;
}

/*
 * Decide one request with its policy's backend and fail mode, or the
 * settings'.  The clock is read once here, before any lock.  A shadow
 * (dry-run) request is decided and counted like any other, then allowed.
 */
void
rl_decide(const RlRequest *req, RlDecision *d)
{
	int64		now = rl_clock_now();

	memset(d, 0, sizeof(*d));
	decide(req, now, rl_request_backend(req), rl_request_fail_mode(req), d);
	apply_shadow(req, d);
	rl_stats_count(req, d);
}

/* A receipt of units consumed in an engine with these parameters. */
static RlReceipt
receipt(RlEngine engine, RlParams params, int64 time, uint64 incarnation)
{
	RlReceipt	r;

	r.engine = engine;
	r.params = params;
	r.time = time;
	r.incarnation = incarnation;
	return r;
}

/*
 * Fill receipts with where and with what a decision consumed: the store,
 * hybrid's pre-check (in the store, with the pre-check's parameters, time
 * and incarnation), Redis, this backend's lease.  Returns how many; none
 * for a decision that consumed nothing (denied, a shadow's denial turned
 * into an allow, cost 0).
 */
int
rl_receipts(const RlRequest *req, const RlDecision *d, RlReceipt *receipts)
{
	int			n = 0;

	if (!d->allowed || d->shadowed || req->params.cost == 0)
		return 0;
	if (d->stored)
		receipts[n++] = receipt(RL_ENGINE_STORE, req->params, d->time,
								d->incarnation);
	if (d->prechecked)
		receipts[n++] = receipt(RL_ENGINE_STORE, hybrid_precheck(req).params,
								d->precheck_time, d->precheck_incarnation);
	if (d->remote)
		receipts[n++] = receipt(RL_ENGINE_REDIS, req->params, d->time,
								d->incarnation);
	if (d->leased)
		receipts[n++] = receipt(RL_ENGINE_LEASE, req->params, d->time,
								d->incarnation);
	return n;
}

/*
 * Give back what a receipt of the request (its database, algorithm and key;
 * the receipt has the parameters and the cost) records, where it was
 * consumed.  Only what still counts there is given back (see the engines'
 * refunds).  Never raises an error.
 */
void
rl_refund_receipt(const RlRequest *req, const RlReceipt *r)
{
	RlRequest	q = *req;

	q.params = r->params;
	switch (r->engine)
	{
		case RL_ENGINE_STORE:
			rl_store_refund(&q, r->time, r->params.cost, r->incarnation);
			break;
		case RL_ENGINE_REDIS:
			rl_redis_refund(&q, r->time, r->incarnation);
			break;
		case RL_ENGINE_LEASE:
			rl_batch_refund(&q, r->incarnation);
			break;
	}
}

/*
 * Give back what a decision consumed, wherever it was recorded (its
 * receipts).  Never raises an error.
 */
void
rl_give_back(const RlRequest *req, const RlDecision *d)
{
	RlReceipt	receipts[RL_MAX_RECEIPTS];
	int			n = rl_receipts(req, d, receipts);
	int			i;

	for (i = 0; i < n; i++)
		rl_refund_receipt(req, &receipts[i]);
}

/* A shadow request is allowed whatever it decided. */
static void
apply_shadow(const RlRequest *req, RlDecision *d)
{
	if (req->shadow && !d->allowed)
	{
		d->allowed = true;
		d->retry_after = 0.0;
		d->shadowed = true;
	}
}

/*
 * Decide n requests all or nothing in the shared-memory store
 * (rl_store_decide_all), filling ds from scratch: the atomicity comes from
 * holding the store's partition locks together.  A request the store has
 * no room for is decided by its fail_mode ("local" counting as "open"), a
 * denial counting against the whole.  Returns whether all admitted.
 */
static bool
local_decide_all(const RlRequest *reqs, int n, int64 now, RlDecision *ds)
{
	bool		fail_open[RL_MAX_MULTI] = {0};
	RlStatus	statuses[RL_MAX_MULTI];
	bool		all;
	int			i;

	memset(ds, 0, sizeof(RlDecision) * n);
	for (i = 0; i < n; i++)
		fail_open[i] = rl_request_fail_mode(&reqs[i]) != RL_FAIL_CLOSED;
	all = rl_store_decide_all(reqs, n, now, fail_open, ds, statuses);
	for (i = 0; i < n; i++)
		if (statuses[i] == RL_NO_ROOM)
			rl_fail_decision(&reqs[i], now, fail_open[i], &ds[i]);
	return all;
}

/*
 * n requests Redis could not decide all or nothing: each request's
 * fail_mode decides.  If one says "closed", nothing is admitted (each
 * request reports its own fail_mode's answer); otherwise "open" requests
 * are allowed and "local" ones are decided in the store, all or nothing
 * among them (in hybrid mode, where ds holds the pre-check's decisions,
 * those stand).  Returns whether all admitted.
 */
static bool
fail_decide_all(const RlRequest *reqs, int n, int64 now, bool hybrid,
				RlDecision *ds)
{
	RlRequest	sub[RL_MAX_MULTI];
	RlDecision	subd[RL_MAX_MULTI];
	int			subidx[RL_MAX_MULTI];
	int			nsub = 0;
	bool		closed = false;
	bool		all;
	int			i;

	for (i = 0; i < n; i++)
		if (rl_request_fail_mode(&reqs[i]) == RL_FAIL_CLOSED)
			closed = true;
	for (i = 0; i < n; i++)
	{
		int			mode = rl_request_fail_mode(&reqs[i]);

		if (mode == RL_FAIL_LOCAL && !closed)
		{
			if (!hybrid)
			{
				subidx[nsub] = i;
				sub[nsub++] = reqs[i];
			}
		}
		else
		{
			bool		pc = ds[i].prechecked;
			int64		pt = ds[i].precheck_time;
			uint64		pi = ds[i].precheck_incarnation;

			rl_fail_decision(&reqs[i], now, mode == RL_FAIL_OPEN, &ds[i]);
			ds[i].prechecked = pc;
			ds[i].precheck_time = pt;
			ds[i].precheck_incarnation = pi;
		}
	}
	all = !closed;
	if (nsub > 0)
	{
		all = local_decide_all(sub, nsub, now, subd);
		for (i = 0; i < nsub; i++)
			ds[subidx[i]] = subd[i];
	}
	return all;
}

/*
 * Decide n requests all or nothing with Redis (one script: atomic in
 * Redis), after hybrid's pre-check, itself all or nothing in the store;
 * fail_decide_all when Redis cannot decide.  Whatever is not admitted in
 * the end gives back what the pre-check consumed.  Returns whether all
 * admitted.
 */
static bool
remote_decide_all(const RlRequest *reqs, int n, int64 now, bool hybrid,
				  RlDecision *ds)
{
	RlRequest	pre[RL_MAX_MULTI];
	RlDecision	remote[RL_MAX_MULTI];
	bool		all;
	int			i;

	for (i = 0; i < n; i++)
	{
		rl_redis_check_request(&reqs[i]);
		pre[i] = hybrid_precheck(&reqs[i]);
	}
	if (hybrid)
	{
		if (!local_decide_all(pre, n, now, ds))
			return false;
		for (i = 0; i < n; i++)
		{
			ds[i].prechecked = ds[i].stored;
			ds[i].precheck_time = ds[i].time;
			ds[i].precheck_incarnation = ds[i].incarnation;
			ds[i].stored = false;
		}
	}

	if (rl_redis_decide_all(reqs, n, remote) == RL_OK)
	{
		all = true;
		for (i = 0; i < n; i++)
		{
			remote[i].prechecked = ds[i].prechecked;
			remote[i].precheck_time = ds[i].precheck_time;
			remote[i].precheck_incarnation = ds[i].precheck_incarnation;
			ds[i] = remote[i];
			if (!ds[i].allowed && !reqs[i].shadow)
				all = false;
		}
	}
	else
		all = fail_decide_all(reqs, n, now, hybrid, ds);

	if (hybrid && !all)
		for (i = 0; i < n; i++)
			if (ds[i].prechecked)
			{
				rl_store_refund(&pre[i], ds[i].precheck_time,
								reqs[i].params.cost,
								ds[i].precheck_incarnation);
				ds[i].prechecked = false;
			}
	return all;
}

/* A backend's name, as the setting spells it. */
static const char *
backend_name(int backend)
{
	const struct config_enum_entry *o;

	for (o = rl_backend_options; o->name != NULL; o++)
		if (o->val == backend)
			return o->name;
	return "?";
}

/*
 * Decide n requests all or nothing, on the backend they share (their
 * policies' or the setting's): the local store, or Redis.  Returns whether
 * all admitted.
 */
bool
rl_decide_all(const RlRequest *reqs, int n, RlDecision *ds)
{
	int			backend = rl_request_backend(&reqs[0]);
	int64		now;
	bool		all;
	int			i;

	for (i = 1; i < n; i++)
		if (rl_request_backend(&reqs[i]) != backend)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("all-or-nothing checks need every key on the same backend"),
					 errdetail("Key %d is decided by the %s backend, key 1 by the %s backend.",
							   i + 1, backend_name(rl_request_backend(&reqs[i])),
							   backend_name(backend))));
	memset(ds, 0, sizeof(RlDecision) * n);

	now = rl_clock_now();
	if (backend == RL_BACKEND_LOCAL)
		all = local_decide_all(reqs, n, now, ds);
	else
		all = remote_decide_all(reqs, n, now, backend == RL_BACKEND_HYBRID, ds);
	for (i = 0; i < n; i++)
	{
		apply_shadow(&reqs[i], &ds[i]);
		rl_stats_count(&reqs[i], &ds[i]);
	}
	return all;
}
