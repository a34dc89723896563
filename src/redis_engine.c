/*-------------------------------------------------------------------------
 *
 * redis_engine.c
 *		The Redis engine (engine.h): decisions, all-or-nothing checks and
 *		refunds as Lua scripts run atomically in Redis, resets, figures.
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

#include "lib/stringinfo.h"
#include "utils/timestamp.h"

#include "redis_int.h"

/* the generation of the connection settings the leases were taken under */
static uint64 leases_generation = 0;

/*
 * Define the Redis engine's settings (from _PG_init), its parts' each.
 */
void
rl_redis_init(void)
{
	rl_redis_conn_init();
	rl_redis_script_init();
	rl_redis_breaker_init();
	rl_batch_init();
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

/*
 * Run the request's decision script with parameters p, or with a receipt
 * its refund script.  Returns the reply (its node's until the node's next
 * exchange) and the node, or NULL with the call's status set.
 */
static redisReply *
script_run(RlRedisCall *call, const RlRequest *req, const RlParams *p,
		   const RlReceipt *refund, RlRedisNode **node)
{
	const RlRedisScript *script;
	StringInfoData hkey;
	StringInfoData lkey;
	RlScriptArgs args;
	const char *argv[16];
	size_t		argvlen[16];
	int			argc = 0;
	int			i;
	redisReply *r;

	script = rl_redis_script(refund != NULL ? RL_SCRIPT_REFUND :
							 RL_SCRIPT_DECIDE, req->algo);
	rl_redis_key_names(&hkey, &lkey, req->dbid, req->algo, req->key,
					   req->keylen);
	rl_redis_script_args(req, p, refund, &args);

	argv[argc] = "EVALSHA";
	argvlen[argc++] = 7;
	argv[argc] = script->sha;
	argvlen[argc++] = strlen(script->sha);
	argv[argc] = rl_redis_nkeys(req->algo) == 2 ? "2" : "1";
	argvlen[argc++] = 1;
	argv[argc] = hkey.data;
	argvlen[argc++] = hkey.len;
	if (rl_redis_nkeys(req->algo) == 2)
	{
		argv[argc] = lkey.data;
		argvlen[argc++] = lkey.len;
	}
	for (i = 0; i < args.argc; i++)
	{
		argv[argc] = args.argv[i];
		argvlen[argc++] = args.len[i];
	}

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
	r = script_run(&call, req, p, NULL, &node);
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
 * incarnation the decision consumed from; it is not sent while the
 * breaker is open, and when Redis cannot take it in time the units stay
 * consumed (false; a warning says why, at the bounded rate of failed
 * calls, and the breaker opens).  Never called inside an abort: the refund
 * tracker queues remote refunds (RL_RECEIPT_REMOTE) and sends them after
 * the transaction.
 */
static bool
redis_refund(const RlRequest *req, const RlReceipt *receipt)
{
	RlRedisCall call;
	RlRedisNode *node;
	redisReply *r;

	if (!(receipt->flags & RL_RECEIPT_REMOTE))
	{
		rl_batch_refund(req, receipt);
		return true;
	}
	if (rl_redis_breaker_open())
	{
		rl_redis_count(RL_REDIS_REFUNDS_DROPPED);
		return false;
	}
	engine_ready();
	rl_redis_call_begin(&call);
	r = script_run(&call, req, &receipt->params, receipt, &node);
	if (r != NULL && r->type != REDIS_REPLY_INTEGER)
	{
		rl_redis_reply_failed(&call, node, "the refund script", r);
		r = NULL;
	}
	if (r == NULL)
	{
		rl_redis_count(RL_REDIS_REFUNDS_DROPPED);
		rl_redis_failed(&call, false);
		return false;
	}
	rl_redis_node_release(node);
	rl_redis_count(RL_REDIS_REFUNDS_SENT);
	return true;
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

/* Raise the ERROR of an administrator's command Redis could not carry out. */
static void
admin_failed(const RlRedisCall *call, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("could not %s in Redis: %s", what, call->error)));
}

/*
 * engine reset: drop the key's state in Redis, for one algorithm or all of
 * them (one request each).  Resetting is an administrator's act: if Redis
 * cannot be reached it is an ERROR, not a matter for fail_mode.
 */
static int64
redis_reset(Oid dbid, const char *key, int keylen, bool all_algos,
			RlAlgo algo)
{
	int64		dropped = 0;
	int			a;

	engine_ready();
	for (a = 0; a < RL_NUM_ALGOS; a++)
	{
		RlRedisCall call;
		StringInfoData hkey;
		StringInfoData lkey;
		const char *argv[3];
		size_t		argvlen[3];
		redisReply *r;
		RlRedisNode *node;

		if (!all_algos && a != (int) algo)
			continue;
		rl_redis_key_names(&hkey, &lkey, dbid, (RlAlgo) a, key, keylen);
		argv[0] = "DEL";
		argv[1] = hkey.data;
		argv[2] = lkey.data;
		argvlen[0] = 3;
		argvlen[1] = hkey.len;
		argvlen[2] = lkey.len;

		rl_redis_call_begin(&call);
		r = rl_redis_key_command(&call, rl_redis_slot(hkey.data, hkey.len),
								 1 + rl_redis_nkeys((RlAlgo) a), argv,
								 argvlen, NULL, &node);
		if (r != NULL && r->type != REDIS_REPLY_INTEGER)
		{
			rl_redis_reply_failed(&call, node, "DEL", r);
			r = NULL;
		}
		if (r == NULL)
			admin_failed(&call, "reset the key");
		if (r->integer > 0)
			dropped++;
		rl_redis_node_release(node);
		pfree(hkey.data);
		pfree(lkey.data);
	}
	return dropped;
}

/*
 * Send one command to a node for an administrator's command, and return
 * its reply (the node's until its next exchange).  An ERROR if the node
 * cannot be reached in time or answers an error.
 */
static redisReply *
admin_command(RlRedisNode *node, int argc, const char **argv,
			  const size_t *argvlen, const char *what)
{
	RlRedisCall call;
	bool		fresh;
	redisReply *r = NULL;

	rl_redis_call_begin(&call);
	if (rl_redis_node_connect(node, &call,
							  rl_redis_deadline(&call, rl_redis_connect_timeout),
							  &fresh))
		r = rl_redis_node_command(node, argc, argv, argvlen, &call,
								  GetCurrentTimestamp() +
								  (int64) rl_redis_command_timeout * 1000);
	if (r != NULL && r->type == REDIS_REPLY_ERROR)
	{
		rl_redis_reply_failed(&call, node, argv[0], r);
		r = NULL;
	}
	if (r == NULL)
		admin_failed(&call, what);
	return r;
}

/*
 * SCAN pattern of the states to drop: rl:{<namespace>:*, glob characters
 * of the namespace escaped; the database's rl:{<oid>:*, or every
 * database's rl:{[0-9]*.
 */
static char *
reset_pattern(Oid dbid)
{
	StringInfoData pattern;

	initStringInfo(&pattern);
	appendStringInfoString(&pattern, "rl:{");
	if (rl_redis_namespace[0] != '\0')
	{
		const char *c;

		for (c = rl_redis_namespace; *c; c++)
		{
			if (strchr("*?[]\\", *c) != NULL)
				appendStringInfoChar(&pattern, '\\');
			appendStringInfoChar(&pattern, *c);
		}
		appendStringInfoString(&pattern, ":*");
	}
	else if (OidIsValid(dbid))
		appendStringInfo(&pattern, "%u:*", dbid);
	else
		appendStringInfoString(&pattern, "[0-9]*");
	return pattern.data;
}

/*
 * Drop, on one node, the keys matching the pattern: SCAN it and UNLINK each
 * key found, one per UNLINK (in a cluster the keys span slots).  The keys
 * of a SCAN reply are copied out before the next command (which frees the
 * reply): an ERROR anywhere leaks nothing.  Returns the states dropped (a
 * state's hash ends with its hash tag; a log's list goes with its state).
 */
static int64
reset_node(RlRedisNode *node, const char *pattern)
{
	char		cursor[32] = "0";
	int64		dropped = 0;

	do
	{
		const char *scan[6] = {"SCAN", cursor, "MATCH", pattern,
		"COUNT", "1000"};
		size_t		scanlen[6];
		redisReply *r;
		char	  **keys;
		size_t	   *lens;
		size_t		nkeys = 0;
		size_t		k;
		int			j;

		for (j = 0; j < 6; j++)
			scanlen[j] = strlen(scan[j]);
		r = admin_command(node, 6, scan, scanlen, "reset every state");
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
			r->element[0]->type != REDIS_REPLY_STRING ||
			r->element[0]->len >= sizeof(cursor) ||
			r->element[1]->type != REDIS_REPLY_ARRAY)
		{
			RlRedisCall call;

			rl_redis_call_begin(&call);
			rl_redis_reply_failed(&call, node, "SCAN", r);
			admin_failed(&call, "reset every state");
		}
		strlcpy(cursor, r->element[0]->str, sizeof(cursor));
		keys = palloc(sizeof(char *) * Max(r->element[1]->elements, 1));
		lens = palloc(sizeof(size_t) * Max(r->element[1]->elements, 1));
		for (k = 0; k < r->element[1]->elements; k++)
		{
			redisReply *key = r->element[1]->element[k];

			if (key->type != REDIS_REPLY_STRING)
				continue;
			keys[nkeys] = palloc(key->len + 1);
			memcpy(keys[nkeys], key->str, key->len);
			lens[nkeys++] = key->len;
		}

		for (k = 0; k < nkeys; k++)
		{
			const char *unlink[2] = {"UNLINK", keys[k]};
			size_t		unlinklen[2] = {6, lens[k]};

			r = admin_command(node, 2, unlink, unlinklen,
							  "reset every state");
			if (r->type == REDIS_REPLY_INTEGER && r->integer > 0 &&
				lens[k] > 0 && keys[k][lens[k] - 1] == '}')
				dropped++;
			pfree(keys[k]);
		}
		pfree(keys);
		pfree(lens);
	} while (strcmp(cursor, "0") != 0);
	rl_redis_node_release(node);
	return dropped;
}

/*
 * engine reset_all: drop every state of a database (InvalidOid: of every
 * database) in Redis: each master is scanned for the keys of the
 * namespace.  With ratelimit.redis_namespace set, the namespace is what
 * the keys are named by, so it is the namespace's states that go.  An
 * ERROR if Redis cannot be reached in time, as for a reset.
 */
static int64
redis_reset_all(Oid dbid)
{
	RlRedisCall call;
	bool	   *masters;
	char	   *pattern;
	int64		dropped = 0;
	int			i;

	engine_ready();
	rl_redis_call_begin(&call);
	if (!rl_redis_topology(&call))
		admin_failed(&call, "reset every state");
	pattern = reset_pattern(dbid);
	masters = palloc(sizeof(bool) * RL_REDIS_MAX_NODES);
	rl_redis_masters(masters);
	for (i = 0; i < rl_redis_nnodes(); i++)
		if (masters[i])
			dropped += reset_node(rl_redis_node(i), pattern);
	pfree(masters);
	pfree(pattern);
	return dropped;
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
	.peek = NULL,				/* a look writes the key's latest time */
	.refund = redis_refund,
	.refunds_noted = redis_refunds_noted,
	.reset = redis_reset,
	.reset_all = redis_reset_all,
	.info = redis_info,
	.scan = NULL,				/* rl_keys lists the store only */
	.images = NULL,
	.restore = NULL,
};
