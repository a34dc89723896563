/*-------------------------------------------------------------------------
 *
 * usage.c
 *		rl_usage: per key of a policy, what it used in its period, for
 *		billing and dashboards.
 *
 * A key's usage is a look at its state (the engine's peek: what a call of
 * cost 0 would report, changing nothing) turned into "used" by the
 * algorithm's meaning of it (docs/reference.md, "rl_usage"):
 *	- fixed_window: the units counted in the current window, which is the
 *	  period reported (a calendar period's bounds: period.c);
 *	- sliding_window_log and sliding_window_counter: the units counted
 *	  over the W before the time looked at (the counter's weighted
 *	  estimate, rounded up), that W being the period;
 *	- token_bucket and leaky_bucket: no "used" (a bucket refills all the
 *	  time: what it holds is not a count over any period); NULL, with
 *	  what remains.
 * All keys of a policy come from the engine's scan (the shared-memory
 * store; Redis offers none, so there a key must be named and its look is
 * a call of cost 0).  Each key is read under its partition's shared lock,
 * one at a time: the whole is not a snapshot.  No shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "args.h"
#include "dispatch.h"
#include "policy.h"

PG_FUNCTION_INFO_V1(rl_usage);

#define USAGE_COLUMNS	6

/*
 * Fill a row for the request's key from what a look reported (found:
 * the key has state; otherwise it is a new key's, nothing used).
 */
static void
usage_row(const RlRequest *req, int64 now, bool found, const RlOutcome *out,
		  Datum *values, bool *nulls)
{
	const RlParams *p = &req->params;
	int64		remaining = found ? out->remaining : p->limit;
	int			skip = (int) strlen(req->policy) + 1;	/* "policy\0" */
	int64		start;
	int64		end;
	int			i;

	for (i = 0; i < USAGE_COLUMNS; i++)
		nulls[i] = false;
	values[0] = PointerGetDatum(cstring_to_text_with_len(req->key + skip,
														 req->keylen - skip));
	values[2] = Int64GetDatum(p->limit);
	values[3] = Int64GetDatum(remaining);
	switch (rl_algo(req->algo)->state)
	{
		case RL_STATE_WINDOW:
		case RL_STATE_LOG:
			values[1] = Int64GetDatum(p->limit - Min(remaining, p->limit));
			if (req->algo == RL_FIXED_WINDOW)
				rl_window_bounds(p, now, &start, &end);
			else
			{
				start = now - p->per;
				end = now;
			}
			values[4] = TimestampTzGetDatum(rl_clock_timestamptz(start));
			values[5] = TimestampTzGetDatum(rl_clock_timestamptz(end));
			break;
		case RL_STATE_BUCKET:
			nulls[1] = nulls[4] = nulls[5] = true;
			break;
	}
}

/*
 * A look at one key of a remote policy: a call of cost 0 (Redis cannot
 * look without writing; a call of cost 0 changes only the key's latest
 * time).  False if the engine could not answer.
 */
static bool
usage_remote(RlRequest *req, RlOutcome *out)
{
	RlDecision	d;

	req->params.cost = 0;
	req->track = false;
	rl_decide(req, &d);
	*out = d.out;
	return !d.failed;
}

/*
 * rl_usage(policy, for_key DEFAULT NULL, at DEFAULT NULL) returns setof
 * (key, used, limit, remaining, period_start, period_end): the key's
 * usage, or that of every key of the policy holding state in the store.
 */
Datum
rl_usage(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	const RlPolicy *pol;
	RlRequest	req;
	RlOutcome	out;
	Datum		values[USAGE_COLUMNS];
	bool		nulls[USAGE_COLUMNS];
	int64		now;
	bool		local;

	rl_require_store();
	rl_arg_not_null(fcinfo, 0, "policy");
	pol = rl_policy_get(PG_GETARG_TEXT_PP(0));
	now = PG_ARGISNULL(2) ? rl_clock_now() :
		rl_arg_at(PG_GETARG_TIMESTAMPTZ(2));
	rl_policy_request(pol, PG_ARGISNULL(1) ? cstring_to_text("") :
					  PG_GETARG_TEXT_PP(1), &req);
	req.at = now;
	local = rl_request_backend(&req) == RL_BACKEND_LOCAL;
	InitMaterializedSRF(fcinfo, 0);

	if (!PG_ARGISNULL(1))
	{
		bool		found;

		found = local ? rl_peek(&req, now, &out) : usage_remote(&req, &out);
		usage_row(&req, now, found, &out, values, nulls);
		if (!local && !found)
			nulls[1] = nulls[3] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values,
							 nulls);
	}
	else
	{
		RlKeyImage *img = palloc(sizeof(RlKeyImage));
		int			namelen = strlen(pol->name);
		uint64		cursor = 0;

		if (!local)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("rl_usage cannot list the keys of policy \"%s\", whose backend is not local",
							pol->name),
					 errdetail("Redis offers no scan of the keys; each one would be a call."),
					 errhint("Name the key: rl_usage('%s', 'key').", pol->name)));
		while (rl_scan_keys(MyDatabaseId, &cursor, img))
		{
			if (img->algo != pol->algo || img->idle_at <= now ||
				img->keylen < namelen + 1 ||
				memcmp(img->key, pol->name, namelen + 1) != 0)
				continue;
			req.key = img->key;
			req.keylen = img->keylen;
			if (!rl_peek(&req, now, &out))
				continue;		/* gone since the scan saw it */
			/* the look was at the key's latest time if later (a clamp) */
			usage_row(&req, Max(now, img->last), true, &out, values, nulls);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values,
								 nulls);
			pfree(DatumGetPointer(values[0]));
		}
	}
	return (Datum) 0;
}
