/*-------------------------------------------------------------------------
 *
 * dispatch.c
 *		The only door to the engines: resolve a request's backend and fail
 *		mode, pick the engine, compose hybrid, apply fail_mode and shadow,
 *		count the decision, and hand its receipts to the refund tracker.
 *
 * The SQL functions (functions.c, trigger.c, policy.c) reach per-key
 * state only through the functions here; the engines (engine.h) are
 * called only from here, from the refund tracker (refund.c) and from the
 * state file (persist.c).  Decisions are zeroed in one place
 * (decision_init), and an engine's outcome and receipt are taken as they
 * come: hybrid is the store's receipt of its pre-check plus Redis's.
 *
 * Slots of concurrency limits are taken in dispatch_slots.c.
 *
 * No shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/guc.h"

#include "dispatch.h"
#include "dispatch_durable.h"
#include "dispatch_penalty.h"
#include "refund.h"
#include "shed.h"
#include "stats.h"
#include "store.h"

int			rl_backend = RL_BACKEND_LOCAL;
int			rl_fail_mode = RL_FAIL_OPEN;
double		rl_hybrid_multiple = 2.0;
bool		rl_refund_on_rollback = false;

const struct config_enum_entry rl_backend_options[] = {
	{"local", RL_BACKEND_LOCAL, false},
	{"redis", RL_BACKEND_REDIS, false},
	{"hybrid", RL_BACKEND_HYBRID, false},
	{NULL, 0, false}
};

const struct config_enum_entry rl_fail_mode_options[] = {
	{"open", RL_FAIL_OPEN, false},
	{"closed", RL_FAIL_CLOSED, false},
	{"local", RL_FAIL_LOCAL, false},
	{NULL, 0, false}
};

/*
 * Define the dispatcher's settings (from _PG_init).  They change what gets
 * admitted, so they are superuser-only (PGC_SUSET): an ordinary role
 * cannot loosen its own limits.
 */
void
rl_dispatch_init(void)
{
	DefineCustomEnumVariable("ratelimit.fail_mode",
							 "What to decide when the limiter cannot track or reach a key's state.",
							 "open allows the call, closed denies it, local decides it in shared memory (Redis backend only).",
							 &rl_fail_mode,
							 RL_FAIL_OPEN, rl_fail_mode_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("ratelimit.refund_on_rollback",
							 "Give back what direct calls consumed when their transaction aborts.",
							 "Quota triggers always do.  Off by default: a rolled-back transaction may still have read data or answered a client.",
							 &rl_refund_on_rollback,
							 false,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("ratelimit.backend",
							 "Where decisions are made: local shared memory, Redis, or both.",
							 "hybrid checks a local limit of ratelimit.hybrid_multiple times the limit first, then asks Redis.",
							 &rl_backend,
							 RL_BACKEND_LOCAL, rl_backend_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomRealVariable("ratelimit.hybrid_multiple",
							 "Local pre-check of hybrid mode, as a multiple of the limit.",
							 NULL,
							 &rl_hybrid_multiple,
							 2.0, 1.0, 1000000.0,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
}

/* Is the library preloaded, its shared state there? */
bool
rl_dispatch_ready(void)
{
	return rl_store_ready();
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
 * Before a call reaches an engine: send the refunds that aborts queued
 * (refund.c), so that they land before anything this session does next.
 */
static inline void
dispatch_enter(void)
{
	if (unlikely(rl_refund_waiting))
		rl_refund_flush();
}

/* dispatch_enter, for the administrator's doors (dispatch_admin.c). */
void
rl_dispatch_enter(void)
{
	dispatch_enter();
}

/*
 * A decision before anything decided it: the one place it is zeroed (its
 * receipts past nreceipts are never read).
 */
static inline void
decision_init(RlDecision *d)
{
	memset(d, 0, offsetof(RlDecision, receipts));
}

/* Where the next engine writes its receipt (kept by keep_receipt). */
static inline RlReceipt *
next_receipt(RlDecision *d)
{
	Assert(d->nreceipts < RL_MAX_RECEIPTS);
	return &d->receipts[d->nreceipts];
}

/* Keep the receipt an engine wrote at next_receipt, if it consumed. */
static inline void
keep_receipt(RlDecision *d)
{
	if (d->receipts[d->nreceipts].engine != RL_ENGINE_NONE)
		d->nreceipts++;
}

/*
 * The outcome for a call no engine could decide.  Allowing reports what a
 * new key would (nothing is recorded); denying asks to retry after one
 * window.  Receipts already kept (hybrid's pre-check) stay.
 */
static void
fail_decision(const RlRequest *req, int64 now, bool allow, RlDecision *d)
{
	int64		t = rl_request_time(req, now);

	d->out.allowed = allow;
	d->out.remaining = allow ?
		rl_algo_capacity(req->algo, &req->params) - req->params.cost : 0;
	d->out.retry_after = allow ? 0.0 : (double) req->params.per / 1000000.0;
	d->out.reset_at = allow ? t : t + req->params.per;
	d->out.delay = 0.0;
	d->failed = true;
}

/*
 * The answer to a request that its key's override decides without an
 * engine (RL_OVERRIDE_*, set by policy.c): a blocked key is denied until
 * the block's end, which it reports as the time to retry (a block without
 * an end: one window, as a closed fail mode does); an unlimited key is
 * admitted and counts nothing.  Returns false when the request is to be
 * decided as usual: no such override, or only a block over by the call's
 * time.
 */
bool
rl_override_decision(const RlRequest *req, int64 now, RlDecision *d)
{
	int64		t = rl_request_time(req, now);

	if ((req->override & RL_OVERRIDE_BLOCK) && t < req->blocked_until)
	{
		d->out.allowed = false;
		d->out.remaining = 0;
		if (req->blocked_until == RL_BLOCKED_FOREVER)
		{
			d->out.retry_after = (double) req->params.per / 1000000.0;
			d->out.reset_at = t + req->params.per;
		}
		else
		{
			d->out.retry_after = (double) (req->blocked_until - t) / 1000000.0;
			d->out.reset_at = req->blocked_until;
		}
		return true;
	}
	if (req->override & RL_OVERRIDE_UNLIMITED)
	{
		d->out.allowed = true;
		d->out.remaining = rl_algo_capacity(req->algo, &req->params);
		d->out.reset_at = t;
		return true;
	}
	return false;
}

/*
 * Decide in the shared-memory store; when it has no room for the key,
 * the request's fail_mode decides ("local" counts as "open" there).
 */
static inline void
local_decide(const RlRequest *req, int64 now, RlDecision *d)
{
	if (likely(rl_engine(RL_ENGINE_STORE)->decide(req, now, &d->out,
												  next_receipt(d)) == RL_OK))
		keep_receipt(d);
	else if (unlikely(req->durable))
		rl_durable_no_room(req);
	else
		fail_decision(req, now,
					  rl_request_fail_mode(req) != RL_FAIL_CLOSED, d);
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
RlRequest
rl_hybrid_precheck(const RlRequest *req)
{
	RlRequest	pre = *req;

	pre.params.limit = hybrid_scale(req->params.limit);
	pre.params.burst = hybrid_scale(req->params.burst);
	pre.params.headroom = 0;	/* shedding is Redis's, on the real limit */
	return pre;
}

/*
 * Decide one request with Redis (backend redis or hybrid) and the given
 * fail mode.
 *
 * hybrid first decides locally with the limit and burst multiplied by
 * ratelimit.hybrid_multiple: a cheap sanity limit per server that keeps
 * floods away from Redis.  What it denies is denied; what it admits goes to
 * Redis, and the decision keeps both receipts.  When Redis cannot decide,
 * fail_mode applies; "local" then keeps the local answer (the pre-check's
 * in hybrid mode).
 */
static void
remote_decide(const RlRequest *req, int64 now, int backend, int fail_mode,
			  RlDecision *d)
{
	const RlEngine *redis = rl_engine(RL_ENGINE_REDIS);
	RlOutcome	out;

	redis->validate(req);
	if (backend == RL_BACKEND_HYBRID)
	{
		RlRequest	pre = rl_hybrid_precheck(req);

		local_decide(&pre, now, d);
		if (!d->out.allowed)
			return;
	}

	if (redis->decide(req, now, &out, next_receipt(d)) == RL_OK)
	{
		d->out = out;
		d->failed = false;
		keep_receipt(d);
	}
	else if (fail_mode == RL_FAIL_LOCAL)
	{
		if (backend == RL_BACKEND_REDIS)
			local_decide(req, now, d);
	}
	else
		fail_decision(req, now, fail_mode == RL_FAIL_OPEN, d);
}

/* A shadow request is allowed whatever it decided. */
static void
apply_shadow(const RlRequest *req, RlDecision *d)
{
	if (req->shadow && !d->out.allowed)
	{
		d->out.allowed = true;
		d->out.retry_after = 0.0;
		d->shadowed = true;
	}
}

/* Decide one request with the engines of its backend. */
static inline void
engine_decide(const RlRequest *req, int64 now, int backend, RlDecision *d)
{
	if (likely(backend == RL_BACKEND_LOCAL))
		local_decide(req, now, d);
	else
		remote_decide(req, now, backend, rl_request_fail_mode(req), d);
}

/*
 * Look into the key's penalty box (a decision of cost 0): if the key is in
 * it, turn boxed into a copy of req blocked until the box's end (answered
 * by override_decision) and return true.  A box no engine could look
 * into holds nothing: the key's own decision applies its fail mode.
 */
static bool
penalty_look(const RlRequest *req, int64 now, int backend, RlRequest *boxed)
{
	char		buf[RL_MAX_STORED_KEY];
	RlRequest	box;
	RlDecision	d;

	rl_penalty_request(req, 0, buf, &box);
	decision_init(&d);
	engine_decide(&box, now, backend, &d);
	if (d.failed || d.out.remaining > 0)
		return false;
	*boxed = *req;
	boxed->override |= RL_OVERRIDE_BLOCK;
	boxed->blocked_until = d.out.reset_at;
	return true;
}

/*
 * If the engines denied req (d) a call that would have consumed (a look
 * of cost 0 is no attempt), put its key into the penalty box from the
 * call's time, and report the box's end if it comes later than the
 * denial's own.
 */
static void
penalty_start(const RlRequest *req, int64 now, int backend, RlDecision *d)
{
	char		buf[RL_MAX_STORED_KEY];
	RlRequest	box;
	RlDecision	bd;
	int64		t = rl_request_time(req, now);

	if (d->out.allowed || d->failed || req->params.cost == 0)
		return;
	rl_penalty_request(req, 1, buf, &box);
	decision_init(&bd);
	engine_decide(&box, now, backend, &bd);
	if (bd.failed || !bd.out.allowed)
		return;
	if (t + req->block_duration > d->out.reset_at)
	{
		d->out.reset_at = t + req->block_duration;
		d->out.retry_after = (double) req->block_duration / 1000000.0;
	}
}

/*
 * Is the request answered without an engine (rl_override_decision): by a
 * block in force (of its override or penalty box), or as unlimited?
 */
static inline bool
answered_at(const RlRequest *req, int64 now)
{
	return ((req->override & RL_OVERRIDE_BLOCK) &&
			rl_request_time(req, now) < req->blocked_until) ||
		(req->override & RL_OVERRIDE_UNLIMITED);
}

/*
 * Decide one request with its policy's backend and fail mode, or the
 * settings'.  The clock is read once here, before any lock.  A shadow
 * (dry-run) request is decided and counted like any other, then allowed.
 * A tracked request's consumption is given back if its (sub)transaction
 * aborts.  A key's override or penalty box may answer before the engines.
 * A call with a priority keeps its headroom free (shed.c).
 */
void
rl_decide(const RlRequest *req, RlDecision *d)
{
	int64		now;
	int			backend = rl_request_backend(req);
	RlRequest	boxed;
	RlRequest	shed;

	dispatch_enter();
	req = rl_shed_request(req, &shed);
	if (unlikely(req->durable))
		rl_durable_check(req, backend == RL_BACKEND_LOCAL);
	now = rl_clock_now();
	decision_init(d);
	if (unlikely(req->override != 0) &&
		rl_override_decision(req, now, d))
		 /* answered by the key's override */ ;
	else if (unlikely(req->block_duration > 0) &&
			 penalty_look(req, now, backend, &boxed))
	{
		req = &boxed;
		(void) rl_override_decision(req, now, d);
	}
	else
	{
		engine_decide(req, now, backend, d);
		if (unlikely(req->block_duration > 0))
			penalty_start(req, now, backend, d);
	}
	rl_shed_report(req, &d->out);
	apply_shadow(req, d);
	rl_stats_count(req, &d->out, d->failed, d->shadowed);
	/* rl_track's, without its frame (#9) */
	if (req->track && d->nreceipts > 0)
		rl_refund_track(req, d->receipts, d->nreceipts);
}

/*
 * Remember what a decision consumed, to give it back if the current
 * (sub)transaction aborts (refund.c).  A shadow's denial turned into an
 * allow consumed nothing, and has no receipt.
 */
void
rl_track(const RlRequest *req, const RlDecision *d)
{
	if (d->nreceipts > 0)
		rl_refund_track(req, d->receipts, d->nreceipts);
}

/*
 * Give back at once what a decision consumed, wherever it was recorded
 * (its receipts), and forget its receipts.
 */
void
rl_give_back(const RlRequest *req, RlDecision *d)
{
	int			i;

	dispatch_enter();
	for (i = 0; i < d->nreceipts; i++)
		(void) rl_engine(d->receipts[i].engine)->refund(req, &d->receipts[i]);
	d->nreceipts = 0;
}

/*
 * Decide n requests all or nothing in the shared-memory store, filling ds
 * (zeroed by the caller): the atomicity comes from holding the store's
 * partition locks together.  A request the store has no room for is
 * decided by its fail_mode ("local" counting as "open"), a denial counting
 * against the whole.  Returns whether all admitted.
 */
static bool
local_decide_all(const RlRequest *reqs, int n, int64 now, RlDecision *ds)
{
	bool		fail_open[RL_MAX_MULTI] = {0};
	RlStatus	statuses[RL_MAX_MULTI];
	RlOutcome	outs[RL_MAX_MULTI];
	RlReceipt	receipts[RL_MAX_MULTI];
	bool		all = true;
	int			i;

	/* a durable key without room admits nothing, then raises */
	for (i = 0; i < n; i++)
		fail_open[i] = !reqs[i].durable &&
			rl_request_fail_mode(&reqs[i]) != RL_FAIL_CLOSED;
	(void) rl_engine(RL_ENGINE_STORE)->decide_all(reqs, n, now, fail_open,
												  outs, receipts, statuses);
	for (i = 0; i < n; i++)
		if (statuses[i] != RL_OK && reqs[i].durable)
			rl_durable_no_room(&reqs[i]);
	for (i = 0; i < n; i++)
	{
		if (statuses[i] == RL_OK)
		{
			ds[i].out = outs[i];
			*next_receipt(&ds[i]) = receipts[i];
			keep_receipt(&ds[i]);
			if (!outs[i].allowed && !reqs[i].shadow)
				all = false;
		}
		else
		{
			fail_decision(&reqs[i], now, fail_open[i], &ds[i]);
			if (!fail_open[i])
				all = false;
		}
	}
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
			fail_decision(&reqs[i], now, mode == RL_FAIL_OPEN, &ds[i]);
	}
	all = !closed;
	if (nsub > 0)
	{
		memset(subd, 0, sizeof(RlDecision) * nsub);
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
	const RlEngine *redis = rl_engine(RL_ENGINE_REDIS);
	RlRequest	pre[RL_MAX_MULTI];
	RlOutcome	outs[RL_MAX_MULTI];
	RlReceipt	receipts[RL_MAX_MULTI];
	RlStatus	statuses[RL_MAX_MULTI];
	bool		fail_open[RL_MAX_MULTI] = {0};
	bool		all;
	int			i;

	for (i = 0; i < n; i++)
	{
		redis->validate(&reqs[i]);
		pre[i] = rl_hybrid_precheck(&reqs[i]);
	}
	if (hybrid && !local_decide_all(pre, n, now, ds))
		return false;

	if (redis->decide_all(reqs, n, now, fail_open, outs, receipts,
						  statuses) == RL_OK)
	{
		all = true;
		for (i = 0; i < n; i++)
		{
			ds[i].out = outs[i];
			ds[i].failed = false;
			*next_receipt(&ds[i]) = receipts[i];
			keep_receipt(&ds[i]);
			if (!outs[i].allowed && !reqs[i].shadow)
				all = false;
		}
	}
	else
		all = fail_decide_all(reqs, n, now, hybrid, ds);

	if (hybrid && !all)
		for (i = 0; i < n; i++)
		{
			int			j;
			int			kept = 0;

			/* the pre-check's receipts are the store's */
			for (j = 0; j < ds[i].nreceipts; j++)
			{
				if (ds[i].receipts[j].engine == RL_ENGINE_STORE)
					(void) rl_engine(RL_ENGINE_STORE)->refund(&pre[i],
															  &ds[i].receipts[j]);
				else
					ds[i].receipts[kept++] = ds[i].receipts[j];
			}
			ds[i].nreceipts = kept;
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

/* Decide n requests all or nothing with the engines of their backend. */
static inline bool
engine_decide_all(const RlRequest *reqs, int n, int64 now, int backend,
				  RlDecision *ds)
{
	if (backend == RL_BACKEND_LOCAL)
		return local_decide_all(reqs, n, now, ds);
	return remote_decide_all(reqs, n, now, backend == RL_BACKEND_HYBRID, ds);
}

/*
 * Decide n requests all or nothing when some keys have an override that
 * answers without an engine (override_decision): those are answered here,
 * the others decided by the engines all or nothing among themselves.  If
 * a block denies (and its policy is no shadow: *blocked), the others are
 * only looked at (cost 0, anything it took given back), as the rows of a
 * check that did not admit report.  Returns whether all admitted.
 */
static bool
override_decide_all(const RlRequest *reqs, int n, int64 now, int backend,
					RlDecision *ds, bool *blocked)
{
	RlRequest	sub[RL_MAX_MULTI];
	RlDecision	subd[RL_MAX_MULTI];
	int			subidx[RL_MAX_MULTI];
	int			nsub = 0;
	bool		all = true;
	int			i;

	*blocked = false;
	for (i = 0; i < n; i++)
	{
		if (reqs[i].override != 0 &&
			rl_override_decision(&reqs[i], now, &ds[i]))
		{
			if (!ds[i].out.allowed && !reqs[i].shadow)
				*blocked = true;
			continue;
		}
		subidx[nsub] = i;
		sub[nsub++] = reqs[i];
	}
	if (nsub == 0)
		return !*blocked;
	for (i = 0; i < nsub; i++)
	{
		decision_init(&subd[i]);
		if (*blocked)
			sub[i].params.cost = 0;
	}
	all = engine_decide_all(sub, nsub, now, backend, subd);
	for (i = 0; i < nsub; i++)
	{
		if (*blocked)
			rl_give_back(&sub[i], &subd[i]);
		ds[subidx[i]] = subd[i];
	}
	return all && !*blocked;
}

/*
 * Decide n requests all or nothing when some have an override or a
 * penalty box: the keys in their box are blocked until its end
 * (override_decide_all), and the keys the engines denied go into theirs.
 * When a block denied, the others were only looked at: a look is no
 * attempt, so none of them goes into its box (a key over a limit lowered
 * since would otherwise be boxed by another key's block).
 */
static bool
boxed_decide_all(const RlRequest *reqs, int n, int64 now, int backend,
				 RlDecision *ds)
{
	RlRequest	boxed[RL_MAX_MULTI];
	bool		all;
	bool		blocked;
	int			i;

	memcpy(boxed, reqs, sizeof(RlRequest) * n);
	for (i = 0; i < n; i++)
		if (reqs[i].block_duration > 0 && !answered_at(&reqs[i], now))
			(void) penalty_look(&reqs[i], now, backend, &boxed[i]);
	all = override_decide_all(boxed, n, now, backend, ds, &blocked);
	if (blocked)
		return all;
	for (i = 0; i < n; i++)
		if (boxed[i].block_duration > 0 && !answered_at(&boxed[i], now))
			penalty_start(&boxed[i], now, backend, &ds[i]);
	return all;
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
	RlRequest	shed[RL_MAX_MULTI];
	int64		now;
	bool		all;
	int			i;

	reqs = rl_shed_requests(reqs, n, shed);

	for (i = 1; i < n; i++)
		if (rl_request_backend(&reqs[i]) != backend)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("all-or-nothing checks need every key on the same backend"),
					 errdetail("Key %d is decided by the %s backend, key 1 by the %s backend.",
							   i + 1, backend_name(rl_request_backend(&reqs[i])),
							   backend_name(backend))));
	for (i = 0; i < n; i++)
	{
		decision_init(&ds[i]);
		if (unlikely(reqs[i].durable))
			rl_durable_check(&reqs[i], backend == RL_BACKEND_LOCAL);
	}

	dispatch_enter();
	now = rl_clock_now();
	for (i = 0; i < n; i++)
		if (unlikely(reqs[i].override != 0 || reqs[i].block_duration > 0))
			break;
	if (i < n)
		all = boxed_decide_all(reqs, n, now, backend, ds);
	else
		all = engine_decide_all(reqs, n, now, backend, ds);
	for (i = 0; i < n; i++)
	{
		rl_shed_report(&reqs[i], &ds[i].out);
		apply_shadow(&reqs[i], &ds[i]);
		rl_stats_count(&reqs[i], &ds[i].out, ds[i].failed, ds[i].shadowed);
	}
	if (all)
		for (i = 0; i < n; i++)
			if (reqs[i].track)
				rl_track(&reqs[i], &ds[i]);
	return all;
}
