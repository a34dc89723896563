/*-------------------------------------------------------------------------
 *
 * redis_cluster.c
 *		Routing a Redis command to the node that serves its key: a single
 *		server, or a Redis Cluster's slot map with its redirects.
 *
 * On first use a session asks the first seed that answers for CLUSTER
 * SLOTS (a server without cluster support is used as a single server),
 * then sends each command to the master owning the slot of its key's hash
 * tag (CRC16 of the tag, modulo 16384).  MOVED updates the slot map and
 * retries there; ASK (a slot being migrated, key already on the target) is
 * followed once with ASKING; TRYAGAIN (a multi-key script while a
 * migration has moved some of its keys) is retried every few milliseconds
 * until the call's deadline; a reused connection Redis closed while idle
 * is reopened and the command sent again, once.  After a connection
 * failure the topology is forgotten, so a failover is picked up.
 *
 * No shared state: the topology is this backend's, and is forgotten when
 * the connection settings change (redis_conn.c's generation).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "redis_int.h"

#define RL_REDIS_MAX_ATTEMPTS	8	/* redirects, reloads, retries per call,
									 * TRYAGAIN aside */
#define RL_REDIS_TRYAGAIN_MS	5	/* pause before retrying TRYAGAIN */

typedef enum RlTopology
{
	RL_TOPO_UNKNOWN,			/* to find out from a seed */
	RL_TOPO_STANDALONE,			/* a single Redis: node "current" */
	RL_TOPO_CLUSTER				/* slots[] maps slots to nodes */
} RlTopology;

static RlTopology topology = RL_TOPO_UNKNOWN;
static int16 *slots = NULL;		/* in TopMemoryContext */
static int	current = 0;
static uint64 topology_generation = 0;	/* of the settings it was learnt
										 * under */

/*
 * Apply the connection settings if they changed; a topology learnt under
 * other settings is forgotten (the nodes it names are gone).
 */
static void
routing_ready(void)
{
	uint64		gen = rl_redis_conn_ready();

	if (gen != topology_generation)
	{
		topology = RL_TOPO_UNKNOWN;
		current = 0;
		topology_generation = gen;
	}
	if (slots == NULL)
		slots = MemoryContextAlloc(TopMemoryContext,
								   sizeof(int16) * RL_REDIS_SLOTS);
}

/* ---- slots ---- */

/*
 * CRC16-CCITT (XMODEM: polynomial 0x1021, no reflection, initial 0), the
 * checksum Redis Cluster hashes keys with, computed bit by bit.
 */
static uint16
crc16(const char *buf, size_t len)
{
	uint16		crc = 0;
	size_t		i;
	int			bit;

	for (i = 0; i < len; i++)
	{
		crc ^= (uint16) ((unsigned char) buf[i]) << 8;
		for (bit = 0; bit < 8; bit++)
			crc = (crc & 0x8000) ? (uint16) ((crc << 1) ^ 0x1021) :
				(uint16) (crc << 1);
	}
	return crc;
}

/*
 * The cluster slot of a key: only the part between the first '{' and the
 * next '}' is hashed, if that part is not empty.
 */
uint16
rl_redis_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open != NULL)
	{
		size_t		rest = len - (open - key) - 1;
		const char *close = memchr(open + 1, '}', rest);

		if (close != NULL && close > open + 1)
			return crc16(open + 1, close - open - 1) & (RL_REDIS_SLOTS - 1);
	}
	return crc16(key, len) & (RL_REDIS_SLOTS - 1);
}

/* ---- topology ---- */

/*
 * Fill the slot map from a CLUSTER SLOTS reply.  An empty host means the
 * node asked.  The ranges together claim at most the 16384 slots that
 * exist (they never overlap), so the work is bounded by the slots, not by
 * what a reply of ranges each claiming all of them would cost.
 */
static bool
slots_load(RlRedisNode *asked, redisReply *r)
{
	size_t		i;
	int64		claimed = 0;

	memset(slots, 0xFF, sizeof(int16) * RL_REDIS_SLOTS);
	for (i = 0; i < r->elements; i++)
	{
		redisReply *range = r->element[i];
		redisReply *master;
		char		host[256];
		int			idx;
		long long	s;

		if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
			range->element[0]->type != REDIS_REPLY_INTEGER ||
			range->element[1]->type != REDIS_REPLY_INTEGER ||
			range->element[2]->type != REDIS_REPLY_ARRAY ||
			range->element[2]->elements < 2)
			return false;
		master = range->element[2];
		if (master->element[0]->type != REDIS_REPLY_STRING ||
			master->element[1]->type != REDIS_REPLY_INTEGER)
			return false;
		if (master->element[0]->len == 0 ||
			strcmp(master->element[0]->str, "?") == 0)
			strlcpy(host, asked->host, sizeof(host));
		else
			strlcpy(host, master->element[0]->str, sizeof(host));
		if (master->element[1]->integer < 1 ||
			master->element[1]->integer > 65535)
			return false;
		idx = rl_redis_node_lookup(host, (int) master->element[1]->integer);
		if (idx < 0)
			return false;
		/* from the first slot that exists: a range may claim any numbers */
		for (s = Max(range->element[0]->integer, 0);
			 s <= range->element[1]->integer && s < RL_REDIS_SLOTS; s++)
		{
			if (++claimed > RL_REDIS_SLOTS)
				return false;
			slots[s] = (int16) idx;
		}
	}
	return true;
}

/*
 * Find out, from the first seed that answers, whether Redis is a cluster
 * (and then where the slots are) or a single server.
 */
static bool
topology_discover(RlRedisCall *call)
{
	int			nseeds = rl_redis_nseeds();
	int			i;

	for (i = 0; i < nseeds; i++)
	{
		RlRedisNode *node = rl_redis_node(i);
		TimestampTz deadline;
		const char *argv[2] = {"CLUSTER", "SLOTS"};
		size_t		len[2] = {7, 5};
		bool		fresh;
		redisReply *r;

		deadline = rl_redis_deadline(call, rl_redis_connect_timeout);
		if (!rl_redis_node_connect(node, call, deadline, &fresh))
			continue;
		deadline = rl_redis_deadline(call, rl_redis_command_timeout);
		r = rl_redis_node_command(node, 2, argv, len, call, deadline);
		if (r == NULL)
			continue;
		if (r->type == REDIS_REPLY_ERROR &&
			strstr(r->str, "cluster support disabled") != NULL)
		{
			topology = RL_TOPO_STANDALONE;
			current = i;
			rl_redis_node_release(node);
			return true;
		}
		if (r->type == REDIS_REPLY_ARRAY && r->elements > 0)
		{
			bool		ok = slots_load(node, r);

			rl_redis_node_release(node);
			if (ok)
			{
				topology = RL_TOPO_CLUSTER;
				return true;
			}
			rl_redis_call_failed(call, "could not read the slot map of Redis at %s:%d",
								 node->host, node->port);
			continue;
		}
		rl_redis_reply_failed(call, node, "CLUSTER SLOTS", r);
		rl_redis_node_release(node);
	}
	if (nseeds == 0)
		rl_redis_call_failed(call, "\"ratelimit.redis_nodes\" names no node");
	return false;
}

/*
 * Make sure the topology is known (asking a seed if need be, within the
 * call's deadline).  False, with the call's status set, if no seed could
 * tell.
 */
bool
rl_redis_topology(RlRedisCall *call)
{
	routing_ready();
	return topology != RL_TOPO_UNKNOWN || topology_discover(call);
}

bool
rl_redis_is_cluster(void)
{
	return topology == RL_TOPO_CLUSTER;
}

/*
 * Forget the topology (after a failure): the next call asks the seeds
 * again, so a failover is picked up.
 */
void
rl_redis_topology_forget(void)
{
	topology = RL_TOPO_UNKNOWN;
}

/*
 * The node that serves a slot, as far as this backend knows; the topology
 * is known.  Redirects (rl_redis_key_command) correct it.
 */
RlRedisNode *
rl_redis_route(int slot)
{
	if (topology == RL_TOPO_CLUSTER && slots[slot] >= 0)
		return rl_redis_node(slots[slot]);
	return rl_redis_node(current);
}

/*
 * Mark each master once in seen[] (RL_REDIS_MAX_NODES places): the node in
 * use, or every node owning slots.  The topology is known.
 */
void
rl_redis_masters(bool *seen)
{
	int			i;

	memset(seen, 0, sizeof(bool) * RL_REDIS_MAX_NODES);
	if (topology == RL_TOPO_STANDALONE)
		seen[current] = true;
	else
		for (i = 0; i < RL_REDIS_SLOTS; i++)
			if (slots[i] >= 0)
				seen[slots[i]] = true;
}

/*
 * Parse "MOVED <slot> <host>:<port>" or "ASK ...": the node's index, or -1.
 */
static int
redirect_target(const char *msg, int *slot)
{
	const char *p = strchr(msg, ' ');
	const char *addr;
	const char *colon;
	char		host[256];
	long		s;
	long		port;

	if (p == NULL)
		return -1;
	s = strtol(p + 1, NULL, 10);
	addr = strchr(p + 1, ' ');
	if (addr == NULL || (colon = strrchr(addr, ':')) == NULL ||
		colon - addr - 1 <= 0 || colon - addr - 1 >= (int) sizeof(host) ||
		s < 0 || s >= RL_REDIS_SLOTS)
		return -1;
	port = strtol(colon + 1, NULL, 10);
	if (port < 1 || port > 65535)
		return -1;
	*slot = (int) s;
	memcpy(host, addr + 1, colon - addr - 1);
	host[colon - addr - 1] = '\0';
	return rl_redis_node_lookup(host, (int) port);
}

/* Does the error reply start with this word? */
static bool
error_is(const redisReply *r, const char *word)
{
	size_t		n = strlen(word);

	return r->type == REDIS_REPLY_ERROR && r->len >= n &&
		strncmp(r->str, word, n) == 0 &&
		(r->len == n || r->str[n] == ' ');
}

/*
 * Is the reply one that rl_redis_key_command acts on (a redirect, a retry,
 * a script to load) rather than returns?  A command that met one in a
 * pipeline is sent again alone, through rl_redis_key_command.
 */
bool
rl_redis_reply_rerouted(const redisReply *r)
{
	return error_is(r, "MOVED") || error_is(r, "ASK") ||
		error_is(r, "TRYAGAIN") || error_is(r, "NOSCRIPT");
}

/*
 * Run one command on the node that serves a key (the caller passes the
 * key's slot), following MOVED and ASK, pausing and retrying on TRYAGAIN
 * until the deadline, and retrying once on a reused connection that turns
 * out to be dead.  For a script (text not NULL), argv[0..1] are EVALSHA
 * and the SHA1, replaced by EVAL and the text on NOSCRIPT.  Returns the
 * reply (the node's, until its next exchange) and the node that sent it,
 * or NULL with the call's status set.
 */
redisReply *
rl_redis_key_command(RlRedisCall *call, int slot, int argc,
					 const char **argv, size_t *argvlen, const char *text,
					 RlRedisNode **from)
{
	int			asking = -1;	/* node to send ASKING to, or -1 */
	bool		retried = false;
	int			attempt;

	for (attempt = 0; attempt < RL_REDIS_MAX_ATTEMPTS; attempt++)
	{
		RlRedisNode *node;
		TimestampTz deadline;
		redisReply *r;
		bool		fresh;
		bool		io;
		int			target;
		int			s;

		if (!rl_redis_topology(call))
			return NULL;
		node = asking >= 0 ? rl_redis_node(asking) : rl_redis_route(slot);

		deadline = rl_redis_deadline(call, rl_redis_connect_timeout);
		if (!rl_redis_node_connect(node, call, deadline, &fresh))
		{
			topology = RL_TOPO_UNKNOWN;
			return NULL;
		}
		if ((asking >= 0 &&
			 redisAppendCommand(node->ctx, "ASKING") != REDIS_OK) ||
			redisAppendCommandArgv(node->ctx, argc, argv,
								   argvlen) != REDIS_OK)
		{
			rl_redis_call_failed(call, "could not format a command for Redis");
			rl_redis_node_close(node);
			return NULL;
		}
		deadline = rl_redis_deadline(call, rl_redis_command_timeout +
									 call->block_ms);
		if (!rl_redis_node_exchange(node, asking >= 0 ? 2 : 1, call, deadline,
									&io))
		{
			if (io && !fresh && !retried)
			{
				/* a connection Redis closed while idle (restart) */
				retried = true;
				continue;
			}
			topology = RL_TOPO_UNKNOWN;
			return NULL;
		}
		r = node->replies[node->nreplies - 1];
		asking = -1;

		if (text != NULL && error_is(r, "NOSCRIPT"))
		{
			rl_redis_count(RL_REDIS_SCRIPT_LOADS);
			argv[0] = "EVAL";
			argv[1] = text;
			argvlen[0] = 4;
			argvlen[1] = strlen(text);
		}
		else if (error_is(r, "MOVED") || error_is(r, "ASK"))
		{
			target = redirect_target(r->str, &s);
			if (target < 0)
			{
				rl_redis_reply_failed(call, node, "a redirect", r);
				return NULL;
			}
			rl_redis_count(RL_REDIS_REDIRECTS);
			if (error_is(r, "ASK"))
				asking = target;
			else if (topology == RL_TOPO_CLUSTER)
				slots[s] = (int16) target;
			else
				topology = RL_TOPO_UNKNOWN;
		}
		else if (error_is(r, "TRYAGAIN"))
		{
			/*
			 * A multi-key script while a slot migration has moved some of
			 * its keys: pause and retry, until the deadline.
			 */
			if (GetCurrentTimestamp() + RL_REDIS_TRYAGAIN_MS * 1000 >=
				call->deadline)
			{
				rl_redis_call_failed(call, "Redis at %s:%d kept answering TRYAGAIN (a slot migration)",
									 node->host, node->port);
				return NULL;
			}
			attempt--;
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 RL_REDIS_TRYAGAIN_MS, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		else
		{
			*from = node;
			return r;
		}
	}
	rl_redis_call_failed(call, "too many redirections or retries from Redis");
	return NULL;
}
