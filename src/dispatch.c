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
}

/*
 * Decide one request.  Only the shared-memory store exists so far; when it
 * has no room for the key, fail_mode decides.  The clock is read once here,
 * before any lock.
 */
void
rl_decide(const RlRequest *req, RlDecision *d)
{
	int64		now = rl_clock_now();

	if (rl_store_decide(req, now, d) == RL_NO_ROOM)
		rl_fail_decision(req, now, rl_fail_mode != RL_FAIL_CLOSED, d);
}
