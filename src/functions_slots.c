/*-------------------------------------------------------------------------
 *
 * functions_slots.c
 *		The SQL functions of concurrency limits: rl_acquire (direct and
 *		under a policy) and rl_release.  rl_slots and rl_held, which
 *		report them, are functions_admin.c's.
 *
 * No shared state: slots are taken through the dispatcher
 * (dispatch_slots.c) and kept by slots.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"

#include "args.h"
#include "dispatch.h"
#include "policy.h"
#include "shed.h"

PG_FUNCTION_INFO_V1(rl_acquire);
PG_FUNCTION_INFO_V1(rl_acquire_policy);
PG_FUNCTION_INFO_V1(rl_release);

/* A request for a slot of the key (argument 0) of a concurrency limit. */
static void
slot_request(FunctionCallInfo fcinfo, RlRequest *req)
{
	rl_require_store();
	rl_arg_not_null(fcinfo, 0, "key");
	rl_request_init(req);
	rl_arg_key(PG_GETARG_DATUM(0), &req->key, &req->keylen);
	req->algo = RL_CONCURRENCY;
	req->dbid = MyDatabaseId;
	req->params.limit = 1;
	req->params.per = 1;		/* time plays no part */
	req->params.cost = 1;
	req->params.burst = 1;
}

/*
 * Take a slot for the request with the arguments hold (2) and max_wait (3)
 * of both forms of rl_acquire.
 */
static bool
acquire_args(FunctionCallInfo fcinfo, const RlRequest *req)
{
	const char *hold;
	bool		session;

	rl_arg_not_null(fcinfo, 2, "hold");
	rl_arg_not_null(fcinfo, 3, "max_wait");
	hold = text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (strcmp(hold, "transaction") == 0)
		session = false;
	else if (strcmp(hold, "session") == 0)
		session = true;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"hold\" must be \"transaction\" or \"session\", not \"%s\"",
						hold)));
	return rl_acquire_slot(req, rl_arg_max_wait(PG_GETARG_INTERVAL_P(3)),
						   session);
}

/*
 * rl_acquire(key, max_in_flight, hold DEFAULT 'transaction', max_wait
 * DEFAULT '0', priority DEFAULT NULL, reserve DEFAULT NULL) returns
 * boolean: take a slot of the key, held until the transaction ends
 * ('transaction') or the session does ('session'), or until rl_release;
 * wait for one at most max_wait; leave the priority's share of the
 * reserve free (shed.c).
 */
Datum
rl_acquire(PG_FUNCTION_ARGS)
{
	RlRequest	req;

	slot_request(fcinfo, &req);
	rl_arg_not_null(fcinfo, 1, "max_in_flight");
	req.params.limit = PG_GETARG_INT64(1);
	rl_arg_positive(req.params.limit, "max_in_flight");
	req.params.burst = req.params.limit;
	rl_shed_args(fcinfo, 4, 5, &req);
	PG_RETURN_BOOL(acquire_args(fcinfo, &req));
}

/*
 * rl_acquire(key, policy, hold DEFAULT 'transaction', max_wait DEFAULT
 * '0', priority DEFAULT NULL) returns boolean: the same under a policy of
 * algorithm concurrency (its limit, reserve, backend, fail_mode; a shadow
 * policy admits when full).
 */
Datum
rl_acquire_policy(PG_FUNCTION_ARGS)
{
	RlRequest	req;

	rl_policy_args(fcinfo, NULL, NULL, 0, 1, -1, -1, &req);
	rl_algo_check_use(req.algo, true, req.policy);
	rl_shed_args(fcinfo, 4, -1, &req);
	PG_RETURN_BOOL(acquire_args(fcinfo, &req));
}

/*
 * rl_release(key, policy DEFAULT NULL) returns boolean: give back this
 * session's slot of the key (under the policy) now, however it is held;
 * false if it holds none.
 */
Datum
rl_release(PG_FUNCTION_ARGS)
{
	RlRequest	req;

	if (PG_NARGS() > 1 && !PG_ARGISNULL(1))
	{
		rl_policy_args(fcinfo, NULL, NULL, 0, 1, -1, -1, &req);
		rl_algo_check_use(req.algo, true, req.policy);
	}
	else
		slot_request(fcinfo, &req);
	PG_RETURN_BOOL(rl_release_slot(&req));
}
