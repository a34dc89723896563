/*-------------------------------------------------------------------------
 *
 * redis_conn.c
 *		The Redis engine's connections: their settings, interruptible
 *		non-blocking I/O with deadlines, and replies read within bounds.
 *
 * Each backend keeps one connection per Redis node in its own memory,
 * opened when first needed and closed after any error, timeout or
 * interruption (its reply stream is then unknown).  Every wait on a socket
 * is a wait on the process latch and the socket with a deadline (a
 * WaitEventSet kept with the connection: WaitLatchOrSocket without
 * rebuilding the set per wait), then CHECK_FOR_INTERRUPTS, so a cancel or
 * statement_timeout acts at once even if Redis hangs.  Host names are
 * resolved by the operating system's resolver before connecting, which
 * cannot be interrupted: give addresses, or names resolved locally.
 *
 * Nothing Redis sends is trusted to be small: every context reads through
 * redis_reply.c's bounds, and a reply beyond them is a failed call, its
 * connection closed.  Reads are hiredis's, 16 kB at a time, each after a
 * wait with the deadline and CHECK_FOR_INTERRUPTS, so parsing work between
 * two checks is bounded too.
 *
 * A reply belongs to its connection: it lives until the connection's next
 * exchange or its closing, which free it.  A call's failure is described
 * in its RlRedisCall, in text valid in any encoding.
 *
 * No shared state: connections are this backend's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>

#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "redis_int.h"

#define RL_WAIT_SOCKET			2	/* position of the socket in a node's
									 * wait event set */

char	   *rl_redis_nodes = NULL;
int			rl_redis_database = 0;
char	   *rl_redis_user = NULL;
char	   *rl_redis_password = NULL;
int			rl_redis_connect_timeout = 200; /* ms */
int			rl_redis_command_timeout = 100; /* ms */

/*
 * Per-backend state, in rl_redis_cxt.  nodes[0 .. nseeds - 1] are
 * ratelimit.redis_nodes; cluster nodes learnt later follow.  generation
 * counts the times the settings were applied: routing and leases made
 * under other settings are dropped when it moves.
 */
static MemoryContext rl_redis_cxt = NULL;
static RlRedisNode *nodes = NULL;
static int	nnodes = 0;
static int	nseeds = 0;
static bool config_stale = true;
static uint64 generation = 0;
static int	nconnected = 0;		/* nodes with a connection (ctx) */
static uint64 use_clock = 0;	/* stamps RlRedisNode.used */

/* ---- settings ---- */

/* ratelimit.redis_nodes: a non-empty list of host:port */
static bool
check_redis_nodes(char **newval, void **extra, GucSource source)
{
	int			n;
	char	  **hosts;
	int		   *ports;
	bool		ok = rl_redis_parse_nodes(*newval, &n, &hosts, &ports);
	int			i;

	for (i = 0; i < n; i++)
		pfree(hosts[i]);
	pfree(hosts);
	pfree(ports);
	if (!ok)
		GUC_check_errdetail("Expected host:port[,host:port...], with ports from 1 to 65535.");
	return ok;
}

/* The connection settings changed: reconnect before the next call. */
static void
assign_redis(const char *newval, void *extra)
{
	rl_redis_conn_invalidate();
}

static void
assign_redis_int(int newval, void *extra)
{
	rl_redis_conn_invalidate();
}

/*
 * SHOW and pg_settings display a mask, never the password: monitoring roles
 * (pg_read_all_settings) may read superuser-only settings.
 */
static const char *
show_redis_password(void)
{
	return rl_redis_password && rl_redis_password[0] ? "********" : "";
}

/*
 * Define the connection's settings (from rl_redis_init).  Superuser-only:
 * an ordinary role could otherwise switch itself to a fresh, empty limiter.
 */
void
rl_redis_conn_init(void)
{
	DefineCustomStringVariable("ratelimit.redis_nodes",
							   "Redis server, or seed nodes of a Redis Cluster, as host:port[,host:port...].",
							   NULL,
							   &rl_redis_nodes,
							   "127.0.0.1:6379",
							   PGC_SUSET, 0,
							   check_redis_nodes, assign_redis, NULL);

	DefineCustomIntVariable("ratelimit.redis_database",
							"Redis database number (0 with Redis Cluster).",
							NULL,
							&rl_redis_database,
							0, 0, INT_MAX,
							PGC_SUSET, 0,
							NULL, assign_redis_int, NULL);

	DefineCustomStringVariable("ratelimit.redis_user",
							   "Redis ACL user name (empty: the default user).",
							   NULL,
							   &rl_redis_user,
							   "",
							   PGC_SUSET, 0,
							   NULL, assign_redis, NULL);

	DefineCustomStringVariable("ratelimit.redis_password",
							   "Redis password (empty: no AUTH).",
							   NULL,
							   &rl_redis_password,
							   "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL,
							   NULL, assign_redis, show_redis_password);

	DefineCustomIntVariable("ratelimit.redis_connect_timeout",
							"Longest wait for a connection to Redis.",
							NULL,
							&rl_redis_connect_timeout,
							200, 1, 60000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.redis_command_timeout",
							"Longest wait for Redis to decide a call.",
							NULL,
							&rl_redis_command_timeout,
							100, 1, 60000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/*
 * Parse "host:port[,host:port...]" ("[v6addr]:port" too) into palloc'd
 * arrays (of palloc'd host names) in the current memory context.  False on
 * a syntax error.  Serves the setting's check hook and the connection setup
 * alike.
 */
bool
rl_redis_parse_nodes(const char *spec, int *nnodes_out, char ***hosts,
					 int **ports)
{
	char	   *copy = pstrdup(spec);
	char	   *item;
	char	   *save = NULL;
	int			n = 0;
	int			cap = 4;

	*hosts = palloc(sizeof(char *) * cap);
	*ports = palloc(sizeof(int) * cap);
	for (item = strtok_r(copy, ",", &save); item != NULL;
		 item = strtok_r(NULL, ",", &save))
	{
		char	   *host;
		char	   *colon;
		char	   *end;
		long		port;

		while (*item == ' ' || *item == '\t')
			item++;
		end = item + strlen(item);
		while (end > item && (end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		colon = strrchr(item, ':');
		if (colon == NULL || colon == item)
			break;
		*colon = '\0';
		host = item;
		if (host[0] == '[')
		{
			if (colon[-1] != ']' || colon - host < 3)
				break;
			colon[-1] = '\0';
			host++;
		}
		errno = 0;
		port = strtol(colon + 1, &end, 10);
		if (errno != 0 || *end != '\0' || end == colon + 1 ||
			port < 1 || port > 65535)
			break;
		if (n == cap)
		{
			cap *= 2;
			*hosts = repalloc(*hosts, sizeof(char *) * cap);
			*ports = repalloc(*ports, sizeof(int) * cap);
		}
		(*hosts)[n] = pstrdup(host);
		(*ports)[n] = (int) port;
		n++;
	}
	pfree(copy);
	*nnodes_out = n;
	return item == NULL && n > 0;
}

/* ---- nodes ---- */

/*
 * The settings that shape connections changed (an assign hook): the next
 * call closes every connection and starts from the seeds again.
 */
void
rl_redis_conn_invalidate(void)
{
	config_stale = true;
}

/* Free the replies of the node's latest exchange. */
void
rl_redis_node_release(RlRedisNode *node)
{
	while (node->nreplies > 0)
		freeReplyObject(node->replies[--node->nreplies]);
}

/*
 * Close the node's connection, if any, giving its descriptors back to
 * PostgreSQL's budget (the wait event set gives back its own).
 */
void
rl_redis_node_close(RlRedisNode *node)
{
	rl_redis_node_release(node);
	if (node->wait != NULL)
		FreeWaitEventSet(node->wait);
	node->wait = NULL;
	if (node->ctx != NULL)
	{
		redisFree(node->ctx);
		ReleaseExternalFD();
		nconnected--;
	}
	node->ctx = NULL;
	node->busy = false;
}

/*
 * Make room for one more connection: below RL_REDIS_MAX_CONNECTIONS, close
 * the least recently used one (no exchange is under way on another node:
 * one call talks to one node at a time).  Then reserve its descriptors
 * from PostgreSQL's budget of external ones (AcquireExternalFD), the
 * socket's and the wait event set's: CreateWaitEventSet reserves the
 * latter itself and raises an ERROR when it cannot, so that it can is
 * checked here first.  False when PostgreSQL has no descriptor left for
 * it (the call then fails, for fail_mode to decide); true with the
 * socket's descriptor reserved.
 */
static bool
reserve_connection(RlRedisNode *node)
{
	int			i;

	if (nconnected >= RL_REDIS_MAX_CONNECTIONS)
	{
		RlRedisNode *lru = NULL;

		for (i = 0; i < nnodes; i++)
			if (nodes[i].ctx != NULL && &nodes[i] != node &&
				(lru == NULL || nodes[i].used < lru->used))
				lru = &nodes[i];
		if (lru != NULL)
			rl_redis_node_close(lru);
	}
	if (!AcquireExternalFD())
		return false;
	if (!AcquireExternalFD())
	{
		ReleaseExternalFD();
		return false;
	}
	ReleaseExternalFD();
	return true;
}

/*
 * Index of the node host:port, added if new; -1 if there are too many.
 * The array never moves (it is allocated at its maximum size), so pointers
 * to nodes stay valid.
 */
int
rl_redis_node_lookup(const char *host, int port)
{
	int			i;

	for (i = 0; i < nnodes; i++)
		if (nodes[i].port == port && strcmp(nodes[i].host, host) == 0)
			return i;
	if (nnodes == RL_REDIS_MAX_NODES)
		return -1;
	memset(&nodes[nnodes], 0, sizeof(RlRedisNode));
	nodes[nnodes].host = MemoryContextStrdup(rl_redis_cxt, host);
	nodes[nnodes].port = port;
	return nnodes++;
}

RlRedisNode *
rl_redis_node(int i)
{
	Assert(i >= 0 && i < nnodes);
	return &nodes[i];
}

int
rl_redis_nnodes(void)
{
	return nnodes;
}

int
rl_redis_nseeds(void)
{
	return nseeds;
}

/*
 * Apply the current settings if they changed: forget every node and
 * connection, and take the seeds from ratelimit.redis_nodes (already
 * validated by its check hook).  Returns the generation of the settings
 * in force, which moves each time they are applied.
 */
uint64
rl_redis_conn_ready(void)
{
	MemoryContext old;
	char	  **hosts;
	int		   *ports;
	int			n;
	int			i;

	if (!config_stale)
		return generation;
	for (i = 0; i < nnodes; i++)
		rl_redis_node_close(&nodes[i]);
	if (rl_redis_cxt == NULL)
		rl_redis_cxt = AllocSetContextCreate(TopMemoryContext,
											 "ratelimit redis",
											 ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(rl_redis_cxt);

	old = MemoryContextSwitchTo(rl_redis_cxt);
	nodes = palloc(sizeof(RlRedisNode) * RL_REDIS_MAX_NODES);
	nnodes = 0;
	if (!rl_redis_parse_nodes(rl_redis_nodes, &n, &hosts, &ports))
		n = 0;
	for (i = 0; i < n; i++)
		(void) rl_redis_node_lookup(hosts[i], ports[i]);
	nseeds = nnodes;
	MemoryContextSwitchTo(old);

	config_stale = false;
	return ++generation;
}

/* ---- a call's status ---- */

/* A call starting now, with its deadline: both timeouts together. */
void
rl_redis_call_begin(RlRedisCall *call)
{
	call->deadline = GetCurrentTimestamp() +
		(int64) (rl_redis_connect_timeout + rl_redis_command_timeout) * 1000;
	call->block_ms = 0;
	call->error[0] = '\0';
}

/*
 * The call's command blocks in Redis for up to block_ms (BLPOP): that
 * long is added to its deadline and to its command's, so that the wait
 * is not taken for a slow server.
 */
void
rl_redis_call_block(RlRedisCall *call, int block_ms)
{
	call->deadline += (int64) (block_ms - call->block_ms) * 1000;
	call->block_ms = block_ms;
}

/* The deadline of a step of the call: timeout_ms from now, within it. */
TimestampTz
rl_redis_deadline(const RlRedisCall *call, int timeout_ms)
{
	return Min(GetCurrentTimestamp() + (int64) timeout_ms * 1000,
			   call->deadline);
}

/*
 * Record why the call fails, as text valid in every encoding: each byte
 * outside printable ASCII (Redis's own error text may hold any bytes, and
 * truncation may cut a character) is written \xNN, and an escape is never
 * cut.  Never given the password: messages name only nodes, operations and
 * Redis's own error text.
 */
void
rl_redis_call_failed(RlRedisCall *call, const char *fmt,...)
{
	char		raw[RL_REDIS_ERROR_LEN];
	const unsigned char *p;
	int			len = 0;
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	for (p = (const unsigned char *) raw; *p != '\0'; p++)
	{
		if (*p >= 0x20 && *p < 0x7F)
		{
			if (len + 1 >= RL_REDIS_ERROR_LEN)
				break;
			call->error[len++] = (char) *p;
		}
		else
		{
			if (len + 4 >= RL_REDIS_ERROR_LEN)
				break;
			snprintf(&call->error[len], 5, "\\x%02X", *p);
			len += 4;
		}
	}
	call->error[len] = '\0';
}

/* A reply that is an error (or unexpected): the failure of the call. */
bool
rl_redis_reply_failed(RlRedisCall *call, RlRedisNode *node, const char *what,
					  const redisReply *r)
{
	if (r->type == REDIS_REPLY_ERROR)
		rl_redis_call_failed(call, "Redis at %s:%d refused %s: %.*s",
							 node->host, node->port, what,
							 (int) Min(r->len, 160), r->str);
	else
		rl_redis_call_failed(call, "unexpected reply to %s from Redis at %s:%d",
							 what, node->host, node->port);
	return false;
}

/* ---- waiting ---- */

/*
 * Wait until the node's socket is ready for "event" (true) or the deadline
 * has passed (false).  Interrupts are served while waiting: a cancel raises
 * an ERROR from here, leaving the node marked busy.
 *
 * This is WaitLatchOrSocket, except that the wait event set lives as long
 * as the connection: most calls wait once, for the reply, and building and
 * tearing down an epoll set around each wait would cost four more system
 * calls per decision.
 */
static bool
wait_socket(RlRedisNode *node, uint32 event, TimestampTz deadline)
{
	pgsocket	fd = node->ctx->fd;

	if (node->wait == NULL)
	{
		node->wait = rl_waitset_create(3);
		AddWaitEventToSet(node->wait, WL_LATCH_SET, PGINVALID_SOCKET,
						  MyLatch, NULL);
		AddWaitEventToSet(node->wait, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
						  NULL, NULL);
		AddWaitEventToSet(node->wait, event, fd, NULL, NULL);
		node->wait_on = event;
	}
	else if (node->wait_on != event)
	{
		ModifyWaitEvent(node->wait, RL_WAIT_SOCKET, event, NULL);
		node->wait_on = event;
	}

	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		WaitEvent	ev;
		int			rc;

		if (now >= deadline)
			return false;
		rc = WaitEventSetWait(node->wait,
							  (long) ((deadline - now + 999) / 1000),
							  &ev, 1, PG_WAIT_EXTENSION);
		if (rc > 0 && (ev.events & WL_LATCH_SET))
			ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (rc > 0 && (ev.events & event))
			return true;
	}
}

/* ---- exchanging ---- */

/*
 * Send the commands already appended to the node's context and read n
 * replies, before the deadline: kept in node->replies (freed first from
 * the previous exchange; at most two) when consume is NULL, else each
 * handed to consume(reply, its position, arg) as it arrives and freed
 * after (a pipeline of any length).  Every reply is read within the bounds
 * above.  On failure the connection is closed, the call's status says why,
 * and false is returned; *io tells an I/O error (as opposed to a timeout
 * or a reply refused), after which a reused connection may be retried
 * once.
 */
bool
rl_redis_node_pipeline(RlRedisNode *node, int n, RlRedisCall *call,
					   TimestampTz deadline, bool *io,
					   void (*consume) (redisReply *r, int i, void *arg),
					   void *arg)
{
	redisContext *c = node->ctx;
	int			done = 0;
	int			got = 0;

	Assert(consume != NULL || n <= lengthof(node->replies));
	rl_redis_node_release(node);
	node->used = ++use_clock;
	*io = false;
	rl_redis_reply_begin();
	node->busy = true;
	for (;;)
	{
		if (redisBufferWrite(c, &done) == REDIS_ERR)
			goto io_error;
		if (done)
			break;
		if (!wait_socket(node, WL_SOCKET_WRITEABLE, deadline))
			goto timeout;
	}
	while (got < n)
	{
		void	   *reply = NULL;

		if (redisGetReply(c, &reply) == REDIS_ERR)
			goto read_error;
		if (reply != NULL)
		{
			if (consume == NULL)
				node->replies[node->nreplies++] = reply;
			else
			{
				/* freed even if consume raises: a cancel can come later */
				node->replies[node->nreplies++] = reply;
				consume(reply, got, arg);
				rl_redis_node_release(node);
			}
			got++;
			continue;
		}
		if (!rl_redis_reply_within_bounds(c->reader))
			goto read_error;
		if (!wait_socket(node, WL_SOCKET_READABLE, deadline))
			goto timeout;
		if (redisBufferRead(c) == REDIS_ERR)
			goto io_error;
	}
	node->busy = false;
	return true;

read_error:
	if (rl_redis_reply_refused() != NULL)
		rl_redis_call_failed(call, "Redis at %s:%d sent a reply out of bounds: %s",
							 node->host, node->port, rl_redis_reply_refused());
	else if (c->err != REDIS_ERR_IO && c->err != REDIS_ERR_EOF)
		rl_redis_call_failed(call, "Redis at %s:%d sent a reply that cannot be read: %s",
							 node->host, node->port, c->errstr);
	else
		goto io_error;
	rl_redis_node_close(node);
	return false;

io_error:
	rl_redis_call_failed(call, "lost the connection to Redis at %s:%d: %s",
						 node->host, node->port,
						 c->errstr[0] ? c->errstr : "connection closed");
	*io = true;
	rl_redis_node_close(node);
	return false;

timeout:
	rl_redis_call_failed(call, "Redis at %s:%d did not answer in time",
						 node->host, node->port);
	rl_redis_node_close(node);
	return false;
}

/* rl_redis_node_pipeline keeping the (at most two) replies in the node. */
bool
rl_redis_node_exchange(RlRedisNode *node, int n, RlRedisCall *call,
					   TimestampTz deadline, bool *io)
{
	return rl_redis_node_pipeline(node, n, call, deadline, io, NULL, NULL);
}

/*
 * Send one command and take its reply (the node's until its next
 * exchange), or NULL with the call's status set.
 */
redisReply *
rl_redis_node_command(RlRedisNode *node, int argc, const char **argv,
					  const size_t *argvlen, RlRedisCall *call,
					  TimestampTz deadline)
{
	bool		io;

	if (redisAppendCommandArgv(node->ctx, argc, argv, argvlen) != REDIS_OK)
	{
		rl_redis_call_failed(call, "could not format a command for Redis at %s:%d",
							 node->host, node->port);
		rl_redis_node_close(node);
		return NULL;
	}
	if (!rl_redis_node_exchange(node, 1, call, deadline, &io))
		return NULL;
	return node->replies[0];
}

/*
 * One command of the handshake, whose reply must not be an error.
 */
static bool
handshake(RlRedisNode *node, int argc, const char **argv,
		  const size_t *argvlen, RlRedisCall *call, TimestampTz deadline)
{
	redisReply *r = rl_redis_node_command(node, argc, argv, argvlen, call,
										  deadline);

	if (r == NULL)
		return false;
	if (r->type == REDIS_REPLY_ERROR)
	{
		rl_redis_reply_failed(call, node, argv[0], r);
		rl_redis_node_close(node);
		return false;
	}
	rl_redis_node_release(node);
	return true;
}

/*
 * Connect to the node if not connected (AUTH and SELECT included), before
 * the deadline.  A connection left busy by an interrupted exchange is
 * closed first: its reply stream is unknown.  *fresh tells whether the
 * connection was opened by this call.
 */
bool
rl_redis_node_connect(RlRedisNode *node, RlRedisCall *call,
					  TimestampTz deadline, bool *fresh)
{
	redisContext *c;
	int			err = 0;
	socklen_t	errlen = sizeof(err);

	if (node->busy)
		rl_redis_node_close(node);
	*fresh = false;
	if (node->ctx != NULL)
		return true;

	*fresh = true;
	rl_redis_count(RL_REDIS_CONNECTS);
	if (!reserve_connection(node))
	{
		rl_redis_call_failed(call, "could not connect to Redis at %s:%d: no file descriptor left (max_files_per_process)",
							 node->host, node->port);
		return false;
	}
	c = redisConnectNonBlock(node->host, node->port);
	if (c == NULL || c->err)
	{
		if (c == NULL)
			rl_redis_call_failed(call, "out of memory connecting to Redis");
		else
			rl_redis_call_failed(call, "could not connect to Redis at %s:%d: %s",
								 node->host, node->port, c->errstr);
		if (c != NULL)
			redisFree(c);
		ReleaseExternalFD();
		return false;
	}
	rl_redis_reply_bound(c);
	node->ctx = c;
	node->used = ++use_clock;
	nconnected++;
	node->busy = true;
	if (!wait_socket(node, WL_SOCKET_WRITEABLE, deadline))
	{
		rl_redis_call_failed(call, "could not connect to Redis at %s:%d: timeout",
							 node->host, node->port);
		rl_redis_node_close(node);
		return false;
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) < 0 ||
		err != 0)
	{
		rl_redis_call_failed(call, "could not connect to Redis at %s:%d: %s",
							 node->host, node->port,
							 strerror(err ? err : errno));
		rl_redis_node_close(node);
		return false;
	}
	node->busy = false;

	if (rl_redis_password[0] != '\0')
	{
		const char *argv[3];
		size_t		len[3];
		int			argc = 0;
		int			i;

		argv[argc++] = "AUTH";
		if (rl_redis_user[0] != '\0')
			argv[argc++] = rl_redis_user;
		argv[argc++] = rl_redis_password;
		for (i = 0; i < argc; i++)
			len[i] = strlen(argv[i]);
		if (!handshake(node, argc, argv, len, call, deadline))
			return false;
	}
	if (rl_redis_database != 0)
	{
		char		db[16];
		const char *argv[2] = {"SELECT", db};
		size_t		len[2];

		snprintf(db, sizeof(db), "%d", rl_redis_database);
		len[0] = 6;
		len[1] = strlen(db);
		if (!handshake(node, 2, argv, len, call, deadline))
			return false;
	}
	return true;
}
