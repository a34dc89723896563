/*-------------------------------------------------------------------------
 *
 * redis_reset.c
 *		The Redis engine's resets (engine.h: reset, reset_all): one key's
 *		state, or every state of a database, scanned and unlinked node by
 *		node.
 *
 * Resetting is an administrator's act: when Redis cannot be reached, or
 * answers what no Redis would (a SCAN cursor seen twice), it is an ERROR
 * (08006), not a matter for fail_mode.  rl_reset_all is bounded as a whole
 * by ratelimit.redis_reset_timeout and interruptible at each round.
 *
 * No shared state.  The engine (redis_engine.c) applies changed
 * connection settings before calling these.
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

/* ratelimit.redis_reset_timeout: rl_reset_all's time in Redis, at most */
static int	rl_redis_reset_timeout = 60000; /* ms */

/* Define the resets' setting (from rl_redis_init). */
void
rl_redis_reset_init(void)
{
	DefineCustomIntVariable("ratelimit.redis_reset_timeout",
							"Longest time rl_reset_all may spend scanning and clearing Redis.",
							NULL,
							&rl_redis_reset_timeout,
							60000, 1, 86400000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
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
int64
rl_redis_reset(Oid dbid, const char *key, int keylen, bool all_algos,
			RlAlgo algo)
{
	int64		dropped = 0;
	int			a;

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
 * A SCAN cursor: Redis's are unsigned 64-bit decimal numbers.  False if
 * the text is not one.
 */
static bool
scan_cursor(const redisReply *r, uint64 *cursor)
{
	size_t		i;

	*cursor = 0;
	if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 20)
		return false;
	for (i = 0; i < r->len; i++)
		if (r->str[i] < '0' || r->str[i] > '9' ||
			pg_mul_u64_overflow(*cursor, 10, cursor) ||
			pg_add_u64_overflow(*cursor, r->str[i] - '0', cursor))
			return false;
	return true;
}

/*
 * Raise rl_reset_all's ERROR, saying why the call failed, or, once past its
 * deadline (whichever step ran into it), that it took too long.
 */
static void
reset_failed(RlRedisCall *call, RlRedisNode *node)
{
	if (GetCurrentTimestamp() >= call->deadline)
		rl_redis_call_failed(call, "scanning Redis at %s:%d took longer than \"ratelimit.redis_reset_timeout\" (%d ms)",
							 node->host, node->port, rl_redis_reset_timeout);
	admin_failed(call, "reset every state");
}

/*
 * Send the commands appended to the node's context and read n replies,
 * each to consume, within the reset's deadline; an ERROR if the node
 * cannot be reached in time.
 */
static void
admin_pipeline(RlRedisCall *call, RlRedisNode *node, int n,
			   void (*consume) (redisReply *r, int i, void *arg), void *arg)
{
	bool		io;

	if (!rl_redis_node_pipeline(node, n, call,
								rl_redis_deadline(call, rl_redis_command_timeout),
								&io, consume, arg))
		reset_failed(call, node);
}

/* what reset_node learns from the replies of one round */
typedef struct RlResetRound
{
	RlRedisCall *call;
	RlRedisNode *node;
	uint64		cursor;			/* SCAN's next cursor */
	char	  **keys;			/* the keys SCAN found (copied out) */
	size_t	   *lens;
	size_t		nkeys;
	const char *refused;		/* the command Redis refused, or NULL */
	int64		dropped;		/* states UNLINK dropped */
} RlResetRound;

/* consume a SCAN reply: the cursor, and the keys copied out */
static void
scan_reply(redisReply *r, int i, void *arg)
{
	RlResetRound *round = (RlResetRound *) arg;
	size_t		k;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		!scan_cursor(r->element[0], &round->cursor) ||
		r->element[1]->type != REDIS_REPLY_ARRAY)
	{
		rl_redis_reply_failed(round->call, round->node, "SCAN", r);
		round->refused = "SCAN";
		return;
	}
	round->keys = palloc(sizeof(char *) * Max(r->element[1]->elements, 1));
	round->lens = palloc(sizeof(size_t) * Max(r->element[1]->elements, 1));
	for (k = 0; k < r->element[1]->elements; k++)
	{
		redisReply *key = r->element[1]->element[k];

		if (key->type != REDIS_REPLY_STRING)
			continue;
		round->keys[round->nkeys] = palloc(key->len + 1);
		memcpy(round->keys[round->nkeys], key->str, key->len);
		round->lens[round->nkeys++] = key->len;
	}
}

/*
 * consume an UNLINK reply: a state's hash ends with its hash tag (a log's
 * list goes with its state)
 */
static void
unlink_reply(redisReply *r, int i, void *arg)
{
	RlResetRound *round = (RlResetRound *) arg;

	if (r->type == REDIS_REPLY_ERROR && round->refused == NULL)
	{
		rl_redis_reply_failed(round->call, round->node, "UNLINK", r);
		round->refused = "UNLINK";
	}
	else if (r->type == REDIS_REPLY_INTEGER && r->integer > 0 &&
			 round->lens[i] > 0 && round->keys[i][round->lens[i] - 1] == '}')
		round->dropped++;
}

/*
 * Drop, on one node, the keys matching the pattern: SCAN it, and UNLINK
 * the keys each SCAN found, one UNLINK per key (in a cluster the keys
 * span slots) sent together in one exchange.  Bounded whatever the node
 * answers: the reset's deadline (ratelimit.redis_reset_timeout) holds for
 * the whole scan, each wait is interruptible, and a cursor the node has
 * returned before (a scan going round in circles) is an ERROR.  Returns
 * the states dropped.
 */
static int64
reset_node(RlRedisCall *call, RlRedisNode *node, const char *pattern)
{
	HASHCTL		ctl;
	HTAB	   *seen;
	int64		dropped = 0;
	RlResetRound round;

	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(uint64);
	ctl.hcxt = CurrentMemoryContext;
	seen = hash_create("ratelimit SCAN cursors", 256, &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	memset(&round, 0, sizeof(round));
	do
	{
		char		cursor[24];
		const char *scan[6] = {"SCAN", cursor, "MATCH", pattern,
		"COUNT", "1000"};
		size_t		scanlen[6];
		bool		fresh;
		bool		found;
		size_t		k;
		int			j;

		CHECK_FOR_INTERRUPTS();
		if (GetCurrentTimestamp() >= call->deadline)
			reset_failed(call, node);
		snprintf(cursor, sizeof(cursor), UINT64_FORMAT, round.cursor);
		for (j = 0; j < 6; j++)
			scanlen[j] = strlen(scan[j]);
		round.call = call;
		round.node = node;
		round.nkeys = 0;
		if (!rl_redis_node_connect(node, call,
								   rl_redis_deadline(call, rl_redis_connect_timeout),
								   &fresh))
			reset_failed(call, node);
		if (redisAppendCommandArgv(node->ctx, 6, scan, scanlen) != REDIS_OK)
			elog(ERROR, "could not format SCAN");
		admin_pipeline(call, node, 1, scan_reply, &round);
		if (round.refused != NULL)
			admin_failed(call, "reset every state");
		if (round.cursor != 0)
		{
			(void) hash_search(seen, &round.cursor, HASH_ENTER, &found);
			if (found)
			{
				rl_redis_call_failed(call, "Redis at %s:%d returned the SCAN cursor " UINT64_FORMAT " twice",
									 node->host, node->port, round.cursor);
				admin_failed(call, "reset every state");
			}
		}

		if (round.nkeys > 0)
		{
			for (k = 0; k < round.nkeys; k++)
			{
				const char *unlink[2] = {"UNLINK", round.keys[k]};
				size_t		unlinklen[2] = {6, round.lens[k]};

				if (redisAppendCommandArgv(node->ctx, 2, unlink,
										   unlinklen) != REDIS_OK)
					elog(ERROR, "could not format UNLINK");
			}
			admin_pipeline(call, node, (int) round.nkeys, unlink_reply,
						   &round);
			if (round.refused != NULL)
				admin_failed(call, "reset every state");
			for (k = 0; k < round.nkeys; k++)
				pfree(round.keys[k]);
		}
		if (round.keys != NULL)
		{
			pfree(round.keys);
			pfree(round.lens);
			round.keys = NULL;
		}
	} while (round.cursor != 0);
	dropped = round.dropped;
	hash_destroy(seen);
	return dropped;
}

/*
 * engine reset_all: drop every state of a database (InvalidOid: of every
 * database) in Redis: each master is scanned for the keys of the
 * namespace.  With ratelimit.redis_namespace set, the namespace is what
 * the keys are named by, so it is the namespace's states that go.  An
 * ERROR if Redis cannot be reached in time, or the whole takes longer
 * than ratelimit.redis_reset_timeout, as for a reset.
 */
int64
rl_redis_reset_all(Oid dbid)
{
	RlRedisCall call;
	bool	   *masters;
	char	   *pattern;
	int64		dropped = 0;
	int			i;

	rl_redis_call_begin(&call);
	if (!rl_redis_topology(&call))
		admin_failed(&call, "reset every state");
	call.deadline = GetCurrentTimestamp() +
		(int64) rl_redis_reset_timeout * 1000;
	pattern = reset_pattern(dbid);
	masters = palloc(sizeof(bool) * RL_REDIS_MAX_NODES);
	rl_redis_masters(masters);
	for (i = 0; i < rl_redis_nnodes(); i++)
		if (masters[i])
			dropped += reset_node(&call, rl_redis_node(i), pattern);
	pfree(masters);
	pfree(pattern);
	return dropped;
}
