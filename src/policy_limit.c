/*-------------------------------------------------------------------------
 *
 * policy_limit.c
 *		Several limits in one policy: besides the limit of its row of
 *		rl_policy, a policy may have up to RL_MAX_LIMITS more, rows of
 *		rl_policy_limit (a name, an algorithm, a limit, a window, a burst).
 *		A call under the policy is admitted only if every limit admits, all
 *		or nothing (the dispatcher's rl_decide_all), and reports the
 *		binding limit; a charge (rl_adjust) and a reset reach every limit.
 *
 * Each limit keeps its own state, stored under the policy's name, two NUL
 * bytes, the limit's name, a NUL and the key (rl_policy_part_key): text has no
 * NUL, so it is neither the policy's own state (the name, one NUL, the key)
 * nor its penalty box (the name, two NULs, a key without NUL).  The call's
 * cost, override (a block, an unlimited key) and penalty box apply to every
 * limit; an override's limit and burst to the policy's own only.
 *
 * No shared state: the limits are the policy cache's (policy.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "args.h"
#include "dispatch_penalty.h"
#include "policy_limit.h"

/* the select list that reads rl_policy_limit in RlLimitColumn order */
const char *const rl_policy_limit_columns =
"policy, name, algo, \"limit\", per, burst";

PG_FUNCTION_INFO_V1(rl_policy_limit_validate);

/*
 * Add one row of rl_policy_limit (values and nulls in RlLimitColumn order)
 * to a policy's limits, their room (RL_MAX_LIMITS) taken in cxt on its
 * first row.  Rows were checked when written (rl_policy_limit_validate);
 * one that could not be used is left out rather than failing every call.
 */
void
rl_policy_limit_put(RlExtraLimit **limits, int *n, MemoryContext cxt,
					const Datum *values, const bool *nulls)
{
	RlExtraLimit *lim;
	text	   *name;
	text	   *algo;

	if (nulls[LCOL_NAME] || nulls[LCOL_ALGO] || nulls[LCOL_LIMIT] ||
		nulls[LCOL_PER] || *n >= RL_MAX_LIMITS)
		return;
	if (*limits == NULL)
		*limits = MemoryContextAllocZero(cxt,
										 sizeof(RlExtraLimit) * RL_MAX_LIMITS);
	lim = &(*limits)[*n];
	name = DatumGetTextPP(values[LCOL_NAME]);
	algo = DatumGetTextPP(values[LCOL_ALGO]);
	if (VARSIZE_ANY_EXHDR(name) < 1 || VARSIZE_ANY_EXHDR(name) >= NAMEDATALEN ||
		!rl_algo_parse(VARDATA_ANY(algo), VARSIZE_ANY_EXHDR(algo), &lim->algo))
		return;
	memset(lim->name, 0, NAMEDATALEN);
	memcpy(lim->name, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	lim->params.limit = DatumGetInt64(values[LCOL_LIMIT]);
	rl_arg_period(lim->algo, DatumGetIntervalP(values[LCOL_PER]),
				  rl_arg_time_zone_setting(), false, RL_NO_ANCHOR,
				  &lim->params);
	lim->params.cost = 0;
	lim->params.burst = !nulls[LCOL_BURST] && rl_algo(lim->algo)->has_burst ?
		DatumGetInt64(values[LCOL_BURST]) : lim->params.limit;
	(*n)++;
}

/*
 * The request of the policy's limit i (besides its own) for req, its key
 * written into buf (room for RL_MAX_STORED_KEY bytes): the limit's
 * algorithm and parameters, the call's cost, everything else the call's.
 */
static void
limit_request(const RlRequest *req, int i, char *buf, RlRequest *sub)
{
	const RlExtraLimit *lim = &req->limits[i];

	*sub = *req;
	sub->algo = lim->algo;
	sub->params = lim->params;
	sub->params.cost = req->params.cost;
	/* a calendar limit keeps the policy's own calendar: its zone, anchor */
	if (rl_period_is_calendar(&sub->params.period) &&
		rl_period_is_calendar(&req->params.period))
	{
		sub->params.period.tz = req->params.period.tz;
		sub->params.period.anchor = req->params.period.anchor;
	}
	sub->keylen = rl_policy_part_key(req, lim->name, buf);
	sub->key = buf;
	sub->policy = buf;
	sub->nlimits = 0;
	sub->limits = NULL;
}

/*
 * The requests of every limit of req's policy: its own first, then the
 * others (n = 1 + req->nlimits), keys palloc'd.  For a call (not a
 * charge), a cost a limit could never admit is an error (22023), as for
 * the policy's own.
 */
static int
limit_requests(const RlRequest *req, bool call, RlRequest *reqs)
{
	int			i;

	reqs[0] = *req;
	reqs[0].nlimits = 0;
	reqs[0].limits = NULL;
	for (i = 0; i < req->nlimits; i++)
	{
		limit_request(req, i, palloc(RL_MAX_STORED_KEY), &reqs[i + 1]);
		if (call)
			rl_cost_check(reqs[i + 1].algo, &reqs[i + 1].params);
	}
	return 1 + req->nlimits;
}

/*
 * The binding limit of n decisions: when one denied, the denial with the
 * longest wait; when all admitted, the one with the fewest units left
 * (the policy's own first among equals).
 */
static int
binding_limit(const RlDecision *ds, int n)
{
	int			b = 0;
	int			i;

	for (i = 1; i < n; i++)
		if (ds[b].out.allowed ? !ds[i].out.allowed ||
			ds[i].out.remaining < ds[b].out.remaining :
			!ds[i].out.allowed && ds[i].out.retry_after > ds[b].out.retry_after)
			b = i;
	return b;
}

/* Report limit b of reqs as the call's: its decision and its parameters. */
static void
report_binding(RlRequest *req, const RlRequest *reqs, const RlDecision *ds,
			   int b, RlDecision *d)
{
	*d = ds[b];
	d->nreceipts = 0;			/* each limit's are tracked by its own */
	req->algo = reqs[b].algo;
	req->params = reqs[b].params;
}

/*
 * Decide a call under a policy with several limits (rl_decide_policy's
 * other case), all or nothing: what an admitted call consumed is tracked
 * under each limit (req->track), and d reports the
 * binding limit, whose algorithm and parameters req then carries (for the
 * result's limit, capacity and window, and a trigger's message); d has no
 * receipts then: it cannot be given back as a whole.
 */
void
rl_decide_limits(RlRequest *req, RlDecision *d)
{
	RlRequest	reqs[1 + RL_MAX_LIMITS];
	RlDecision	ds[1 + RL_MAX_LIMITS];
	int			n;

	n = limit_requests(req, true, reqs);
	(void) rl_decide_all(reqs, n, ds);
	report_binding(req, reqs, ds, binding_limit(ds, n), d);
}

/*
 * Charge (or give back) units under a policy (rl_adjust): under each of
 * its limits, d reporting the binding limit's look, as rl_decide_policy.
 */
void
rl_adjust_policy(RlRequest *req, RlDecision *d)
{
	RlRequest	reqs[1 + RL_MAX_LIMITS];
	RlDecision	ds[1 + RL_MAX_LIMITS];
	int			n = limit_requests(req, false, reqs);
	int			i;

	for (i = 0; i < n; i++)
		rl_adjust_key(&reqs[i], &ds[i]);
	report_binding(req, reqs, ds, binding_limit(ds, n), d);
}

/* Reset a key under every limit of its policy (rl_reset); how many went. */
int64
rl_reset_policy(const RlRequest *req)
{
	RlRequest	reqs[1 + RL_MAX_LIMITS];
	int			n = limit_requests(req, false, reqs);
	int64		dropped = 0;
	int			i;

	for (i = 0; i < n; i++)
		dropped += rl_reset_key(&reqs[i], false);
	return dropped;
}

/*
 * Refuse a policy with several limits where a function cannot take it
 * (rl_check_all, rl_wait: 0A000).
 */
void
rl_limits_refuse(const RlRequest *req, const char *function)
{
	if (req->nlimits > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s does not take policy \"%s\", which has several limits",
						function, req->policy),
				 errhint("Call rl_check or rl_allow under that policy.")));
}

/*
 * BEFORE INSERT OR UPDATE row trigger on rl_policy_limit: refuse a limit
 * a call could not use, with a call's errors: its name 1 to 63 bytes, its
 * algorithm, limit, window and burst as a policy's, its policy existing
 * (42704) with a cost that fits the limit, at most RL_MAX_LIMITS of them
 * per policy (54000).
 */
Datum
rl_policy_limit_validate(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	tuple;
	Datum		v[LCOL_COUNT];
	bool		isnull[LCOL_COUNT];
	const char *names[LCOL_COUNT] = {"policy", "name", "algo", "limit",
	"per", "burst"};
	Oid			argtypes[2] = {TEXTOID, TEXTOID};
	RlAlgo		algo;
	RlParams	p;
	StringInfoData query;
	int			c;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "rl_policy_limit_validate must be called as a row trigger");
	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	desc = RelationGetDescr(trigdata->tg_relation);
	for (c = 0; c < LCOL_COUNT; c++)
	{
		int			attno = SPI_fnumber(desc, names[c]);

		if (attno <= 0)
			elog(ERROR, "table \"rl_policy_limit\" has no column \"%s\"",
				 names[c]);
		v[c] = heap_getattr(tuple, attno, desc, &isnull[c]);
		if (isnull[c] && c != LCOL_BURST)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("\"%s\" must not be null", names[c])));
	}
	if (VARSIZE_ANY_EXHDR(DatumGetTextPP(v[LCOL_NAME])) < 1 ||
		VARSIZE_ANY_EXHDR(DatumGetTextPP(v[LCOL_NAME])) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("limit name must be 1 to %d bytes long",
						NAMEDATALEN - 1)));
	algo = rl_arg_algo(DatumGetTextPP(v[LCOL_ALGO]), false);
	p.limit = DatumGetInt64(v[LCOL_LIMIT]);
	rl_arg_positive(p.limit, "limit");
	rl_arg_period(algo, DatumGetIntervalP(v[LCOL_PER]),
				  rl_arg_time_zone_setting(), false, RL_NO_ANCHOR, &p);
	p.burst = isnull[LCOL_BURST] ? 0 : DatumGetInt64(v[LCOL_BURST]);

	/* the policy, as this transaction sees it, and its other limits */
	initStringInfo(&query);
	appendStringInfo(&query,
					 "SELECT p.cost, (SELECT count(*) FROM %s.rl_policy_limit l"
					 " WHERE l.policy = p.name AND l.name <> $2)"
					 " FROM %s.rl_policy p WHERE p.name = $1",
					 quote_identifier(get_namespace_name(RelationGetNamespace(trigdata->tg_relation))),
					 quote_identifier(get_namespace_name(RelationGetNamespace(trigdata->tg_relation))));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(query.data, 2, argtypes, &v[LCOL_POLICY], NULL,
							  false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read table \"rl_policy\"");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("rate-limit policy \"%s\" does not exist",
						TextDatumGetCString(v[LCOL_POLICY])),
				 errhint("A limit names a policy of table rl_policy.")));
	{
		bool		n1;
		bool		n2;

		p.cost = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1, &n1));
		if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 2, &n2)) >=
			RL_MAX_LIMITS)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("policy \"%s\" has %d limits besides its own, the most it may have",
							TextDatumGetCString(v[LCOL_POLICY]),
							RL_MAX_LIMITS)));
	}
	SPI_finish();
	rl_params_check(algo, &p, !isnull[LCOL_BURST]);
	return PointerGetDatum(tuple);
}
