/*-------------------------------------------------------------------------
 *
 * redis_engine.c
 *		The Redis engine (engine.h): decisions, all-or-nothing checks and
 *		refunds as Lua scripts run atomically in Redis, figures; resets
 *		are redis_reset.c's.
 *
 * Each decision is one script (redis_script.c) run with EVALSHA, and with
 * EVAL when Redis answers NOSCRIPT; every key a decision touches carries
 * one hash tag, so in a cluster they live in one slot (redis_cluster.c
 * routes it).  A call never takes longer than
 * ratelimit.redis_connect_timeout plus ratelimit.redis_command_timeout.
 * When Redis cannot decide in time, or the circuit breaker is open
 * (redis_breaker.c), the decision is RL_UNAVAILABLE and the dispatcher
 * applies fail_mode; resets are an administrator's act, and raise an
 * ERROR instead.  With ratelimit.redis_batch, decisions may come from a
 * lease this backend took (redis_batch.c).
 *
 * Receipts: an exact decision's (RL_RECEIPT_REMOTE: its refund is a
 * script, which the refund tracker sends after the transaction), a lease's
 * (RL_RECEIPT_TIMELESS: its refund credits the lease, locally).
 *
 * No shared state of its own (the breaker's is redis_breaker.c's).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "redis_int.h"

/* the generation of the connection settings the leases were taken under */
static uint64 leases_generation = 0;

/*
 * Define the Redis engine's settings (from _PG_init), its parts' each,
 * and its own.
 */
void
rl_redis_init(void)
{
	rl_redis_conn_init();
	rl_redis_script_init();
	rl_redis_breaker_init();
	rl_batch_init();
	rl_redis_reset_init();
	rl_redis_lease_init();
}

/*
 * Apply changed connection settings before a call; leases taken under
 * other settings are dropped.
 */
static void
engine_ready(void)
{
	uint64		gen = rl_redis_conn_ready();

	if (gen != leases_generation)
	{
		rl_batch_forget();
		leases_generation = gen;
	}
}

/*
 * engine validate: refuse what the Redis scripts cannot decide exactly, an
 * explicit "at" before RL_REDIS_MIN_TIME.  Called before anything is
 * consumed (a hybrid pre-check included).
 */
static void
redis_validate(const RlRequest *req)
{
	if (req->at != RL_NO_TIME && req->at < RL_REDIS_MIN_TIME)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("\"at\" is out of range for the Redis backend"),
				 errdetail("With \"ratelimit.backend\" = redis or hybrid, an explicit time must be after 1898-08-11 (2^51 microseconds before 1970).")));
}

static redisReply *script_run_kind(RlRedisCall *call, const RlRequest *req,
									const RlParams *p, RlScript kind,
									RlRedisNode **node);

/*
 * Run the request's decision script with parameters p.  Returns the reply
 * (its node's until the node's next exchange) and the node, or NULL with
 * the call's status set.
 */
static redisReply *
script_run(RlRedisCall *call, const RlRequest *req, const RlParams *p,
		   RlRedisNode **node)
{
	return script_run_kind(call, req, p, RL_SCRIPT_DECIDE, node);
}

/*
 * Run the request's decision script with parameters p, or its charge
 * script (RL_SCRIPT_CHARGE), p->cost signed (below zero: given back).
 * Refunds go their own way (redis_refund.c).
 */
static redisReply *
script_run_kind(RlRedisCall *call, const RlRequest *req, const RlParams *p,
				RlScript kind, RlRedisNode **node)
{
	const RlRedisScript *script;
	StringInfoData hkey;
	StringInfoData lkey;
	RlScriptArgs args;
	const char *argv[RL_SCRIPT_ARGV];
	size_t		argvlen[RL_SCRIPT_ARGV];
	int			argc;
	redisReply *r;

	script = rl_redis_script(kind, req->algo);
	rl_redis_key_names(&hkey, &lkey, req->dbid, req->algo, req->key,
					   req->keylen);
	if (kind == RL_SCRIPT_CHARGE)
	{
		RlParams	units = *p;

		/* the units and their direction: the scripts take no negatives */
		units.cost = p->cost < 0 ? -p->cost : p->cost;
		rl_redis_script_args(req, &units, NULL, &args);

		/*
		 * ARGV[7]: after the six, or in place of a decision's empty
		 * incarnation, before a calendar period's bounds
		 */
		args.argv[6] = p->cost < 0 ? "-" : "+";
		args.len[6] = 1;
		if (args.argc == 6)
			args.argc = 7;
	}
	else
		rl_redis_script_args(req, p, NULL, &args);
	argc = rl_redis_script_command(script, req->algo, &hkey, &lkey, &args,
								   argv, argvlen);

	r = rl_redis_key_command(call, rl_redis_slot(hkey.data, hkey.len), argc,
							 argv, argvlen, script->text, node);
	pfree(hkey.data);
	pfree(lkey.data);
	return r;
}

/*
 * Decide the request exactly in Redis, with parameters p.  RL_UNAVAILABLE
 * when Redis cannot decide it in time, or while the breaker is open.
 */
static RlStatus
exact_decide(const RlRequest *req, const RlParams *p, RlOutcome *out,
			 RlReceipt *receipt)
{
	RlRedisCall call;
	RlRedisNode *node;
	redisReply *r;
	bool		probe;
	int64		time;
	uint64		incarnation;

	receipt->engine = RL_ENGINE_NONE;
	if (!rl_redis_breaker_lets_through(&probe))
		return RL_UNAVAILABLE;

	rl_redis_count(RL_REDIS_CALLS);
	rl_redis_call_begin(&call);
	r = script_run(&call, req, p, &node);
	if (r != NULL && !rl_redis_reply_outcome(r, out, &time, &incarnation))
	{
		rl_redis_reply_failed(&call, node, "the decision script", r);
		r = NULL;
	}
	if (r == NULL)
	{
		rl_redis_failed(&call, true);
		return RL_UNAVAILABLE;
	}
	rl_redis_node_release(node);
	if (out->allowed && p->cost > 0)
	{
		receipt->engine = RL_ENGINE_REDIS;
		receipt->flags = RL_RECEIPT_REMOTE;
		receipt->params = *p;
		receipt->time = time;
		receipt->incarnation = incarnation;
	}
	rl_redis_breaker_close(probe);
	return RL_OK;
}

/*
 * A call in batching mode: from this backend's lease for the key if it
 * covers the cost, else by taking a new lease of ratelimit.redis_batch
 * units from Redis (the call's cost included), else exactly.
 */
static RlStatus
batch_decide(const RlRequest *req, RlOutcome *out, RlReceipt *receipt)
{
	int64		now = rl_clock_now();
	int64		lease_cost = 0;
	RlStatus	st;

	switch (rl_batch_begin(req, now, out, receipt, &lease_cost))
	{
		case RL_BATCH_NONE:
			return exact_decide(req, &req->params, out, receipt);
		case RL_BATCH_DONE:
			rl_redis_count(RL_REDIS_BATCHED);
			return RL_OK;
		case RL_BATCH_LEASE:
			{
				RlParams	lease = req->params;
				RlOutcome	granted;
				RlReceipt	unused;

				lease.cost = lease_cost;
				st = exact_decide(req, &lease, &granted, &unused);
				if (st != RL_OK)
					return st;
				if (rl_batch_leased(req, now, lease_cost, &granted, out,
									receipt))
					return RL_OK;
				/* too little left for a lease: exactly */
				break;
			}
		case RL_BATCH_EXACT:
			break;
	}
	st = exact_decide(req, &req->params, out, receipt);
	if (st == RL_OK)
		rl_batch_exact(req, now, out);
	return st;
}

/*
 * engine decide: the request in Redis (its own clock unless "at" is given
 * or ratelimit.redis_clock is client; now is unused).
 */
static RlStatus
redis_decide(const RlRequest *req, int64 now, RlOutcome *out,
			 RlReceipt *receipt)
{
	redis_validate(req);
	engine_ready();
	if (rl_redis_batch > 0)
		return batch_decide(req, out, receipt);
	return exact_decide(req, &req->params, out, receipt);
}

/*
 * Run the all-or-nothing script on n requests (lua/all.lua).  False on
 * failure, with the call's status set.  In a Redis Cluster every key must
 * be in one slot, which keys of different hash tags almost never are:
 * that is an ERROR, not a failure for fail_mode.
 */
static bool
call_all(RlRedisCall *call, const RlRequest *reqs, int n, RlOutcome *outs,
		 int64 *times, uint64 *incarnations)
{
	const RlRedisScript *script = rl_redis_script_all();
	int			maxargs = 4 + n * 17;
	const char **argv = palloc(sizeof(char *) * maxargs);
	size_t	   *argvlen = palloc(sizeof(size_t) * maxargs);
	RlScriptArgs *args = palloc(sizeof(RlScriptArgs) * n);
	char		numkeys[16];
	char		ncalls[16];
	int			argc = 3;
	int			slot = -1;
	redisReply *r;
	RlRedisNode *node;
	bool		ok = true;
	int			i;
	int			j;

	if (!rl_redis_topology(call))
		return false;

	/* KEYS: each call's keys, in order */
	for (i = 0; i < n; i++)
	{
		const RlRequest *req = &reqs[i];
		StringInfoData hkey;
		StringInfoData lkey;
		int			s;

		rl_redis_key_names(&hkey, &lkey, req->dbid, req->algo, req->key,
						   req->keylen);
		s = rl_redis_slot(hkey.data, hkey.len);
		if (rl_redis_is_cluster() && slot >= 0 && s != slot)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("all-or-nothing checks on a Redis Cluster need every key in one hash slot"),
					 errdetail("Keys 1 and %d are in slots %d and %d.",
							   i + 1, slot, s),
					 errhint("Use a single Redis server, or the local backend, for all-or-nothing checks.")));
		slot = s;
		argv[argc] = hkey.data;
		argvlen[argc++] = hkey.len;
		if (rl_redis_nkeys(req->algo) == 2)
		{
			argv[argc] = lkey.data;
			argvlen[argc++] = lkey.len;
		}
	}
	snprintf(numkeys, sizeof(numkeys), "%d", argc - 3);

	/* ARGV: n, then each call's code, key count, shadow flag, arguments */
	snprintf(ncalls, sizeof(ncalls), "%d", n);
	argv[argc] = ncalls;
	argvlen[argc++] = strlen(ncalls);
	for (i = 0; i < n; i++)
	{
		const RlRequest *req = &reqs[i];

		argv[argc] = rl_algo(req->algo)->code;
		argvlen[argc] = strlen(argv[argc]);
		argc++;
		argv[argc] = rl_redis_nkeys(req->algo) == 2 ? "2" : "1";
		argvlen[argc++] = 1;
		argv[argc] = req->shadow ? "1" : "0";
		argvlen[argc++] = 1;
		rl_redis_script_args(req, &req->params, NULL, &args[i]);
		argv[argc] = args[i].nargs;
		argvlen[argc++] = strlen(args[i].nargs);
		for (j = 0; j < args[i].argc; j++)
		{
			argv[argc] = args[i].argv[j];
			argvlen[argc++] = args[i].len[j];
		}
	}

	argv[0] = "EVALSHA";
	argvlen[0] = 7;
	argv[1] = script->sha;
	argvlen[1] = strlen(script->sha);
	argv[2] = numkeys;
	argvlen[2] = strlen(numkeys);
	r = rl_redis_key_command(call, slot, argc, argv, argvlen, script->text,
							 &node);
	if (r == NULL)
		return false;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t) n)
		ok = false;
	for (i = 0; ok && i < n; i++)
		ok = rl_redis_reply_outcome(r->element[i], &outs[i], &times[i],
									&incarnations[i]);
	if (!ok)
		rl_redis_reply_failed(call, node, "the all-or-nothing script", r);
	rl_redis_node_release(node);
	return ok;
}

/*
 * engine decide_all: n requests all or nothing in Redis, in one script
 * (the store's decide_all, in Redis): every request is decided; if one is
 * denied, a shadow's denial aside, what the others consumed is given back
 * and they report a look at their state.  RL_UNAVAILABLE as for a
 * decision.
 */
static RlStatus
redis_decide_all(const RlRequest *reqs, int n, int64 now,
				 const bool *fail_open, RlOutcome *outs, RlReceipt *receipts,
				 RlStatus *statuses)
{
	RlRedisCall call;
	int64		times[RL_MAX_MULTI];
	uint64		incarnations[RL_MAX_MULTI];
	bool		probe;
	bool		all = true;
	int			i;

	for (i = 0; i < n; i++)
	{
		redis_validate(&reqs[i]);
		receipts[i].engine = RL_ENGINE_NONE;
		statuses[i] = RL_OK;
	}
	engine_ready();
	if (!rl_redis_breaker_lets_through(&probe))
		return RL_UNAVAILABLE;

	rl_redis_count(RL_REDIS_CALLS);
	rl_redis_call_begin(&call);
	if (!call_all(&call, reqs, n, outs, times, incarnations))
	{
		rl_redis_failed(&call, true);
		return RL_UNAVAILABLE;
	}
	for (i = 0; i < n; i++)
		if (!outs[i].allowed && !reqs[i].shadow)
			all = false;
	for (i = 0; all && i < n; i++)
		if (outs[i].allowed && reqs[i].params.cost > 0)
		{
			receipts[i].engine = RL_ENGINE_REDIS;
			receipts[i].flags = RL_RECEIPT_REMOTE;
			receipts[i].params = reqs[i].params;
			receipts[i].time = times[i];
			receipts[i].incarnation = incarnations[i];
		}
	rl_redis_breaker_close(probe);
	return RL_OK;
}

/*
 * engine refund: give back what a receipt recorded.  A lease's goes back
 * to the lease.  A remote one runs the algorithm's refund script, which
 * gives back only where the units still count and only to the
 * incarnation the decision consumed from (redis_refund.c, as a flush of
 * one).  False when it was not made: the breaker open, or Redis not
 * taking it in time (the units stay consumed; a warning says why, at the
 * bounded rate of failed calls, and the breaker opens).  Never called
 * inside an abort: the refund tracker queues remote refunds
 * (RL_RECEIPT_REMOTE) and sends them after the transaction
 * (redis_refund_queued).
 */
static bool
redis_refund(const RlRequest *req, const RlReceipt *receipt)
{
	if (!(receipt->flags & RL_RECEIPT_REMOTE))
	{
		rl_batch_refund(req, receipt);
		return true;
	}
	engine_ready();
	return rl_redis_refund_many(req, receipt, 1) == 1;
}

/*
 * engine refund_queued: the refunds an abort queued, sent together after
 * the transaction: one deadline for all, pipelined (redis_refund.c).
 */
static void
redis_refund_queued(const RlRequest *reqs, const RlReceipt *receipts, int n)
{
	engine_ready();
	(void) rl_redis_refund_many(reqs, receipts, n);
}

/*
 * engine refunds_noted: the refund tracker queued, or dropped, refunds of
 * this engine's receipts (an atomic add: fine at an abort).
 */
static void
redis_refunds_noted(int64 queued, int64 dropped)
{
	rl_redis_count_n(RL_REDIS_REFUNDS_QUEUED, queued);
	rl_redis_count_n(RL_REDIS_REFUNDS_DROPPED, dropped);
}

/* engine reset: one key's state (redis_reset.c), after the settings. */
static int64
redis_reset(Oid dbid, const char *key, int keylen, bool all_algos,
			RlAlgo algo)
{
	engine_ready();
	return rl_redis_reset(dbid, key, keylen, all_algos, algo);
}

/* engine reset_all: every state of the database (redis_reset.c). */
static int64
redis_reset_all(Oid dbid)
{
	engine_ready();
	return rl_redis_reset_all(dbid);
}

/*
 * engine charge (rl_adjust): the charge script, atomic in Redis.  Its
 * clock as a decision's.  RL_UNAVAILABLE when Redis cannot run it in
 * time, or while the breaker is open: nothing recorded then.
 */
static RlStatus
redis_charge(const RlRequest *req, int64 now, RlOutcome *out)
{
	RlRedisCall call;
	RlRedisNode *node;
	redisReply *r;
	bool		probe;
	int64		time;
	uint64		incarnation;

	redis_validate(req);
	engine_ready();
	if (!rl_redis_breaker_lets_through(&probe))
		return RL_UNAVAILABLE;
	rl_redis_count(RL_REDIS_CALLS);
	rl_redis_call_begin(&call);
	r = script_run_kind(&call, req, &req->params, RL_SCRIPT_CHARGE,
						&node);
	if (r != NULL && !rl_redis_reply_outcome(r, out, &time, &incarnation))
	{
		rl_redis_reply_failed(&call, node, "the charge script", r);
		r = NULL;
	}
	if (r == NULL)
	{
		rl_redis_failed(&call, true);
		return RL_UNAVAILABLE;
	}
	rl_redis_node_release(node);
	rl_redis_breaker_close(probe);
	return RL_OK;
}

/* engine acquire: a slot as a lease (redis_lease.c), after the settings. */
static RlSlotResult
redis_acquire(const RlRequest *req, RlSlotOp op, int64 now,
			  RlReceipt *receipt)
{
	engine_ready();
	return rl_redis_lease_acquire(req, op, now, receipt);
}

/* engine info: the breaker and the counters (rl_redis_info). */
static int
redis_info(RlInfoItem *items)
{
	return rl_redis_breaker_info(items);
}

const RlEngine rl_redis_engine = {
	.name = "redis",
	.validate = redis_validate,
	.decide = redis_decide,
	.decide_all = redis_decide_all,
	.charge = redis_charge,
	.peek = NULL,				/* a look writes the key's latest time */
	.refund = redis_refund,
	.refund_queued = redis_refund_queued,
	.refunds_noted = redis_refunds_noted,
	.reset = redis_reset,
	.reset_all = redis_reset_all,
	.info = redis_info,
	.scan = NULL,				/* rl_keys lists the store only */
	.images = NULL,
	.restore = NULL,
	.acquire = redis_acquire,	/* leases, a queue in Redis */
	.release = rl_redis_lease_release,
	.poll_blocks = true,		/* BLPOP on the key's wake-up list */
};
