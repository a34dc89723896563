/*-------------------------------------------------------------------------
 *
 * redis_refund.c
 *		The Redis engine's refunds: refund scripts sent together, pipelined
 *		to each node, all within one call's deadline.
 *
 * An abort queues its Redis refunds (refund.c) and the session sends them
 * after the transaction, at its next call or as it exits: possibly thousands
 * at once (the queue holds up to 10,000).  One round trip each, every one with
 * its own deadline, would make that flush last as long as the refunds times
 * the timeouts against a slow Redis, with nothing to stop it as the session
 * exits.  So the refunds of a flush are one call: one deadline for all of them
 * (ratelimit.redis_connect_timeout plus ratelimit.redis_command_timeout, as
 * for any call), and to each node one exchange: SCRIPT LOAD of each refund
 * script the flush uses (after a restart no EVALSHA meets NOSCRIPT; not for a
 * single refund), then every refund's EVALSHA, their replies read as they
 * come.  A refund answered by a redirect, TRYAGAIN or NOSCRIPT all the same is
 * sent again alone, through the cluster's routing (redis_cluster.c), within
 * the same deadline; any other answer but an integer drops it.  What was not
 * answered by the deadline is dropped.
 *
 * A cancel or statement_timeout interrupts the flush as it does any call
 * (it waits through redis_conn.c): the refunds not answered by then are
 * dropped too.  None is ever sent twice: one Redis may have run without
 * answering is never resent.  Everything dropped is counted
 * (rl_redis_info's refunds_dropped), and a failure opens the breaker and
 * warns as a failed call does.
 *
 * No shared state but the counters (redis_breaker.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/timestamp.h"

#include "redis_int.h"

typedef enum RlRefundState
{
	RL_REFUND_PENDING,			/* to send in a pipeline */
	RL_REFUND_ALONE,			/* to send again alone (rerouted) */
	RL_REFUND_SENT,				/* Redis took it */
	RL_REFUND_DROPPED			/* refused, or given up */
} RlRefundState;

/* one refund of a flush */
typedef struct RlRefundItem
{
	const RlRequest *req;
	const RlReceipt *receipt;
	int			slot;
	RlRedisNode *node;			/* where the pipeline sends it */
	RlRefundState state;
} RlRefundItem;

/* the replies of one node's pipeline, as they come */
typedef struct RlRefundPipe
{
	RlRefundItem **sent;		/* the refunds, in the order sent */
	int			nloads;			/* SCRIPT LOAD replies come first */
	int			answered;		/* replies read */
	RlRedisCall *call;
	RlRedisNode *node;
	bool		failed;
} RlRefundPipe;

/*
 * The refund script command of an item, appended to the node's context
 * (hiredis copies it).  False if hiredis could not format it.
 */
static bool
append_refund(redisContext *c, const RlRefundItem *it)
{
	const RlRedisScript *script = rl_redis_script(RL_SCRIPT_REFUND,
												  it->req->algo);
	StringInfoData hkey;
	StringInfoData lkey;
	RlScriptArgs args;
	const char *argv[RL_SCRIPT_ARGV];
	size_t		argvlen[RL_SCRIPT_ARGV];
	int			argc;
	bool		ok;

	rl_redis_key_names(&hkey, &lkey, it->req->dbid, it->req->algo,
					   it->req->key, it->req->keylen);
	rl_redis_script_args(it->req, &it->receipt->params, it->receipt, &args);
	argc = rl_redis_script_command(script, it->req->algo, &hkey, &lkey,
								   &args, argv, argvlen);
	ok = redisAppendCommandArgv(c, argc, argv, argvlen) == REDIS_OK;
	pfree(hkey.data);
	pfree(lkey.data);
	return ok;
}

/* A reply of a pipeline (rl_redis_node_pipeline's consumer). */
static void
pipe_reply(redisReply *r, int i, void *arg)
{
	RlRefundPipe *pipe = (RlRefundPipe *) arg;
	RlRefundItem *it;

	pipe->answered = i + 1;
	if (i < pipe->nloads)
		return;					/* a failed load shows as NOSCRIPT below */
	it = pipe->sent[i - pipe->nloads];
	if (r->type == REDIS_REPLY_INTEGER)
		it->state = RL_REFUND_SENT;
	else if (rl_redis_reply_rerouted(r))
		it->state = RL_REFUND_ALONE;
	else
	{
		it->state = RL_REFUND_DROPPED;
		pipe->failed = true;
		rl_redis_reply_failed(pipe->call, pipe->node, "the refund script", r);
	}
}

/*
 * Send the pending refunds items[0 .. n - 1] (sorted by node) that go to
 * the node of items[0], in one pipeline.  Returns how many items the run
 * had.  *again is set when the node's reused connection turned out dead
 * before it answered anything (Redis closed it while idle): those stay
 * pending, for one more round.
 */
static int
pipe_node(RlRedisCall *call, RlRefundItem **items, int n, bool *again,
		  bool *failed)
{
	RlRedisNode *node = items[0]->node;
	RlRefundPipe pipe;
	bool		loads[RL_NUM_ALGOS] = {false};
	bool		fresh;
	bool		io;
	int			run;
	int			i;

	for (run = 1; run < n && items[run]->node == node; run++)
		;
	if (!rl_redis_node_connect(node, call,
							   rl_redis_deadline(call, rl_redis_connect_timeout),
							   &fresh))
	{
		rl_redis_topology_forget();
		*failed = true;
		return run;
	}

	memset(&pipe, 0, sizeof(pipe));
	pipe.sent = items;
	pipe.call = call;
	pipe.node = node;

	/*
	 * The scripts are loaded first for a pipeline of several: after a
	 * restart each refund would otherwise meet NOSCRIPT and go alone.  One
	 * refund alone loads its script only on NOSCRIPT (EVAL), as a decision
	 * does, rather than send the script's text each time.
	 */
	for (i = 0; run > 1 && i < run; i++)
		loads[items[i]->req->algo] = true;
	for (i = 0; i < RL_NUM_ALGOS; i++)
	{
		const char *load[3] = {"SCRIPT", "LOAD", NULL};
		size_t		loadlen[3] = {6, 4, 0};

		if (!loads[i])
			continue;
		load[2] = rl_redis_script(RL_SCRIPT_REFUND, (RlAlgo) i)->text;
		loadlen[2] = strlen(load[2]);
		if (redisAppendCommandArgv(node->ctx, 3, load, loadlen) != REDIS_OK)
			goto unformatted;
		pipe.nloads++;
	}
	for (i = 0; i < run; i++)
		if (!append_refund(node->ctx, items[i]))
			goto unformatted;

	if (!rl_redis_node_pipeline(node, pipe.nloads + run, call,
								rl_redis_deadline(call, rl_redis_command_timeout),
								&io, pipe_reply, &pipe))
	{
		rl_redis_topology_forget();
		if (io && !fresh && pipe.answered == 0)
			*again = true;
		else
			*failed = true;
	}
	*failed |= pipe.failed;
	return run;

unformatted:
	rl_redis_call_failed(call, "could not format a command for Redis at %s:%d",
						 node->host, node->port);
	rl_redis_node_close(node);
	*failed = true;
	return run;
}

/* qsort: refunds by the node they go to */
static int
by_node(const void *a, const void *b)
{
	const RlRedisNode *x = (*(RlRefundItem *const *) a)->node;
	const RlRedisNode *y = (*(RlRefundItem *const *) b)->node;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * One round of pipelines: the pending refunds, grouped by the node that
 * serves their slot, one pipeline per node, while the deadline lasts.
 * Returns whether a reused connection asks for another round.
 */
static bool
pipe_round(RlRedisCall *call, RlRefundItem *items, int n, bool *failed)
{
	RlRefundItem **pending = palloc(sizeof(RlRefundItem *) * n);
	bool		again = false;
	int			npending = 0;
	int			i;

	if (!rl_redis_topology(call))
	{
		*failed = true;
		pfree(pending);
		return false;
	}
	for (i = 0; i < n; i++)
		if (items[i].state == RL_REFUND_PENDING)
		{
			items[i].node = rl_redis_route(items[i].slot);
			pending[npending++] = &items[i];
		}
	qsort(pending, npending, sizeof(RlRefundItem *), by_node);
	for (i = 0; i < npending;)
	{
		if (GetCurrentTimestamp() >= call->deadline)
			break;
		CHECK_FOR_INTERRUPTS();
		i += pipe_node(call, &pending[i], npending - i, &again, failed);
	}
	pfree(pending);
	return again;
}

/*
 * Send what is left after the pipelines: the refunds to send again alone
 * (rl_redis_key_command follows the redirect, loads the script, waits out
 * TRYAGAIN), while the deadline lasts.
 */
static void
send_alone(RlRedisCall *call, RlRefundItem *items, int n, bool *failed)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		RlRefundItem *it = &items[i];
		const RlRedisScript *script;
		StringInfoData hkey;
		StringInfoData lkey;
		RlScriptArgs args;
		const char *argv[RL_SCRIPT_ARGV];
		size_t		argvlen[RL_SCRIPT_ARGV];
		int			argc;
		RlRedisNode *node;
		redisReply *r;

		if (it->state != RL_REFUND_ALONE)
			continue;
		if (GetCurrentTimestamp() >= call->deadline)
			break;
		script = rl_redis_script(RL_SCRIPT_REFUND, it->req->algo);
		rl_redis_key_names(&hkey, &lkey, it->req->dbid, it->req->algo,
						   it->req->key, it->req->keylen);
		rl_redis_script_args(it->req, &it->receipt->params, it->receipt,
							 &args);
		argc = rl_redis_script_command(script, it->req->algo, &hkey, &lkey,
									   &args, argv, argvlen);
		r = rl_redis_key_command(call, it->slot, argc, argv, argvlen,
								 script->text, &node);
		pfree(hkey.data);
		pfree(lkey.data);
		if (r != NULL && r->type == REDIS_REPLY_INTEGER)
			it->state = RL_REFUND_SENT;
		else
		{
			if (r != NULL)
				rl_redis_reply_failed(call, node, "the refund script", r);
			it->state = RL_REFUND_DROPPED;
			*failed = true;
		}
		if (r != NULL)
			rl_redis_node_release(node);
	}
}

/* Count what a flush sent and dropped (everything not sent). */
static int
count_refunds(const RlRefundItem *items, int n)
{
	int			sent = 0;
	int			i;

	for (i = 0; i < n; i++)
		if (items[i].state == RL_REFUND_SENT)
			sent++;
	rl_redis_count_n(RL_REDIS_REFUNDS_SENT, sent);
	rl_redis_count_n(RL_REDIS_REFUNDS_DROPPED, n - sent);
	return sent;
}

/*
 * Give back what n remote receipts recorded (reqs[i] names the state of
 * receipts[i]), as one call: one deadline, pipelined per node.  Not while
 * the breaker is open.  Returns how many Redis took; every other one is
 * dropped, and counted.  Outside any abort: a cancel or statement_timeout
 * may interrupt it (an ERROR, after what was not sent is counted).
 */
int
rl_redis_refund_many(const RlRequest *reqs, const RlReceipt *receipts,
					 int n)
{
	RlRedisCall call;
	RlRefundItem *items;
	bool		failed = false;
	int			sent;
	int			i;

	if (n <= 0)
		return 0;
	if (rl_redis_breaker_open())
	{
		rl_redis_count_n(RL_REDIS_REFUNDS_DROPPED, n);
		return 0;
	}
	items = palloc(sizeof(RlRefundItem) * n);
	for (i = 0; i < n; i++)
	{
		StringInfoData hkey;
		StringInfoData lkey;

		items[i].req = &reqs[i];
		items[i].receipt = &receipts[i];
		items[i].state = RL_REFUND_PENDING;
		items[i].node = NULL;
		rl_redis_key_names(&hkey, &lkey, reqs[i].dbid, reqs[i].algo,
						   reqs[i].key, reqs[i].keylen);
		items[i].slot = rl_redis_slot(hkey.data, hkey.len);
		pfree(hkey.data);
		pfree(lkey.data);
	}

	rl_redis_call_begin(&call);
	PG_TRY();
	{
		/* a second round only for a connection found dead while idle */
		if (pipe_round(&call, items, n, &failed))
			(void) pipe_round(&call, items, n, &failed);
		send_alone(&call, items, n, &failed);
	}
	PG_CATCH();
	{
		(void) count_refunds(items, n);
		PG_RE_THROW();
	}
	PG_END_TRY();

	sent = count_refunds(items, n);
	if (sent < n)
	{
		if (!failed || call.error[0] == '\0')
			rl_redis_call_failed(&call, "%d refund(s) not answered in time",
								 n - sent);
		rl_redis_failed(&call, false);
	}
	pfree(items);
	return sent;
}
