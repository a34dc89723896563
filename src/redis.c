/*-------------------------------------------------------------------------
 *
 * redis.c
 *		The Redis backend: connections, interruptible non-blocking I/O with
 *		deadlines, the decision scripts, Redis Cluster routing, and the
 *		circuit breaker.
 *
 * Each decision is one Lua script (redis_scripts.c) run with EVALSHA, and
 * with EVAL when Redis answers NOSCRIPT (after a restart or SCRIPT FLUSH).
 * Every key a decision touches carries one hash tag, so in a cluster they
 * live in one slot: the slot picks the node, MOVED updates the slot map and
 * ASK is followed once with ASKING.
 *
 * Each backend keeps one connection per Redis node in its own memory,
 * opened when first needed and closed after any error, timeout or
 * interruption (its reply stream is then unknown).  Every wait on a socket
 * is a wait on the process latch and the socket with a deadline (a
 * WaitEventSet kept with the connection: WaitLatchOrSocket without
 * rebuilding the set per wait), then CHECK_FOR_INTERRUPTS, so a cancel or
 * statement_timeout acts at once even if Redis hangs.  A
 * call never takes longer than ratelimit.redis_connect_timeout plus
 * ratelimit.redis_command_timeout.  Host names are resolved by the
 * operating system's resolver before connecting, which cannot be
 * interrupted: give addresses, or names resolved locally.
 *
 * Nothing Redis sends is trusted to be small.  hiredis 0.14's reader has
 * no limits of its own: it allocates what a reply's headers announce (an
 * array of 2^31 elements is a 16 GB calloc) and buffers a bulk string
 * until all of it has arrived.  Every context reads through reply-object
 * functions of ours that count what a reply holds before hiredis allocates
 * it, and after each read the item hiredis waits for is checked from its
 * header (a bulk string's length is refused before its data arrives): a
 * reply beyond the bounds below is a failed call, its connection closed.
 * Reads are hiredis's, 16 kB at a time, each after a wait with the
 * deadline and CHECK_FOR_INTERRUPTS, so parsing work between two checks is
 * bounded too.
 *
 * Shared state (RlRedisShared) is a few atomics and a message:
 *	- the breaker's open_until and the counters are pg_atomic_uint64, read
 *	  and written without locks;
 *	- last_error is protected by the spinlock "mutex", held only to copy it.
 * A failed call opens the breaker for ratelimit.redis_probe_interval:
 * calls then fail fast (fail_mode decides them) until the interval is over,
 * when the first backend to swap open_until forward probes Redis with its
 * own call; success closes the breaker.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/socket.h>

#include <hiredis/hiredis.h>

#include "common/cryptohash.h"
#include "common/sha1.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "algo_common.h"
#include "compat.h"
#include "guc.h"
#include "redis.h"

#define RL_REDIS_SLOTS			16384
#define RL_REDIS_MAX_NODES		1024
#define RL_REDIS_MAX_ATTEMPTS	8	/* redirects, reloads, retries per call,
									 * TRYAGAIN aside */
#define RL_REDIS_TRYAGAIN_MS	5	/* pause before retrying TRYAGAIN */
#define RL_REDIS_WARN_INTERVAL	(10 * USECS_PER_SEC)
#define RL_WAIT_SOCKET			2	/* position of the socket in a node's
									 * wait event set */

/*
 * Bounds on one reply (docs/redis.md, "Failures").  The largest replies
 * ratelimit asks for are CLUSTER SLOTS (at most 16384 slot ranges of a few
 * nodes each: about 400,000 elements if every slot were its own range,
 * arrays nested 4 deep) and SCAN with COUNT 1000 (about a thousand keys of
 * at most 4.2 kB); a decision's reply is a few short strings per call.
 */
#define RL_REDIS_MAX_ELEMENTS	1000000 /* array elements, all levels */
#define RL_REDIS_MAX_DEPTH		6		/* levels of arrays, the reply's own
										 * included */
#define RL_REDIS_MAX_BULK		(1024 * 1024)	/* bytes of one bulk string */
#define RL_REDIS_MAX_STRINGS	(32 * 1024 * 1024)	/* bytes of all the
													 * strings of a reply */
#define RL_REDIS_MAX_LINE		(64 * 1024) /* bytes of a status, error or
											 * integer line, or a header */
#define RL_REDIS_MAX_HEADER		24		/* characters of a bulk string's
										 * length: a sign and 20 digits fit */

#if HIREDIS_MAJOR != 0 || HIREDIS_MINOR < 14
#error "the reply bounds of src/redis.c are written for the reader of hiredis 0.14"
#endif

/* TTL slack after the state is back to a new key's (see docs/redis.md) */
#define RL_REDIS_SLACK_CLOCK	"1000"	/* ms: calls on a real clock */
#define RL_REDIS_SLACK_AT		"3600000"	/* ms: calls with "at" */

typedef struct RlRedisShared
{
	pg_atomic_uint64 open_until;	/* breaker: Unix us, 0 = closed */
	pg_atomic_uint64 last_warning;	/* Unix us of the last warning logged */
	pg_atomic_uint64 unwarned;	/* failures since that warning */
	pg_atomic_uint64 counters[RL_REDIS_NCOUNTERS];
	slock_t		mutex;			/* protects the two fields below */
	int64		last_error_at;
	char		last_error[256];
} RlRedisShared;

static RlRedisShared *rl_redis_shared = NULL;

/* One Redis node and this backend's connection to it. */
typedef struct RlRedisNode
{
	char	   *host;
	int			port;
	redisContext *ctx;			/* NULL when not connected */
	bool		busy;			/* an exchange is under way (or was cut) */
	WaitEventSet *wait;			/* latch, postmaster death and the socket */
	uint32		wait_on;		/* the socket event "wait" is set up for */
} RlRedisNode;

typedef enum RlTopology
{
	RL_TOPO_UNKNOWN,			/* to find out from a seed */
	RL_TOPO_STANDALONE,			/* a single Redis: nodes[current] */
	RL_TOPO_CLUSTER				/* slots[] maps slots to nodes */
} RlTopology;

/*
 * Per-backend state, in rl_redis_cxt.  nodes[0 .. nseeds - 1] are
 * ratelimit.redis_nodes; cluster nodes learnt later follow.
 */
static MemoryContext rl_redis_cxt = NULL;
static RlRedisNode *nodes = NULL;
static int	nnodes = 0;
static int	nseeds = 0;
static int16 *slots = NULL;
static RlTopology topology = RL_TOPO_UNKNOWN;
static int	current = 0;
static bool config_stale = true;

/* Replies received by the exchange under way; freed if it is cut short. */
static redisReply *held[2];
static int	nheld = 0;

/*
 * What the reply being read holds so far (one reply is read at a time in a
 * backend), counted by the reply-object functions before hiredis allocates
 * anything for it, and why it was refused.
 */
static int64 reply_elements = 0;
static int64 reply_bytes = 0;
static char reply_refused[160];

/* hiredis's own reply-object functions, which ours wrap. */
static redisReplyObjectFunctions *hiredis_functions = NULL;

/* The scripts: each algorithm's decision, and its refund */
typedef enum RlScript
{
	RL_SCRIPT_DECIDE,
	RL_SCRIPT_REFUND,
	RL_NUM_SCRIPTS
} RlScript;

/* The complete scripts and their SHA1s, built on first use. */
static char *script_text[RL_NUM_SCRIPTS][RL_NUM_ALGOS];
static char script_sha[RL_NUM_SCRIPTS][RL_NUM_ALGOS][SHA1_DIGEST_LENGTH * 2 + 1];
/* the all-or-nothing script, deciding several calls of any algorithms */
static char *script_all_text;
static char script_all_sha[SHA1_DIGEST_LENGTH * 2 + 1];

/* Key-name codes of the algorithms (part of the documented layout). */
static const char *const algo_code[RL_NUM_ALGOS] = {
	[RL_FIXED_WINDOW] = "fw",
	[RL_SLIDING_WINDOW_LOG] = "swl",
	[RL_SLIDING_WINDOW_COUNTER] = "swc",
	[RL_TOKEN_BUCKET] = "tb",
	[RL_LEAKY_BUCKET] = "lb",
};

/* Why the current call failed, for the warning and rl_redis_info(). */
static char call_error[256];

static void call_failed(const char *fmt,...) pg_attribute_printf(1, 2);
rl_noreturn static void admin_failed(const char *what);

/*
 * Record why the call fails.  Never given the password: messages name only
 * nodes, operations and Redis's own error text.
 */
static void
call_failed(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(call_error, sizeof(call_error), fmt, ap);
	va_end(ap);
}

/* Add one to a counter of rl_redis_info(). */
void
rl_redis_count(RlRedisCounter c)
{
	if (rl_redis_shared)
		pg_atomic_fetch_add_u64(&rl_redis_shared->counters[c], 1);
}

/* ---- shared memory ---- */

/* shmem_request_hook */
void
rl_redis_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(RlRedisShared)));
}

/* shmem_startup_hook; the caller holds AddinShmemInitLock */
void
rl_redis_startup(void)
{
	bool		found;
	int			i;

	rl_redis_shared = ShmemInitStruct("ratelimit redis",
									  sizeof(RlRedisShared), &found);
	if (found)
		return;
	pg_atomic_init_u64(&rl_redis_shared->open_until, 0);
	pg_atomic_init_u64(&rl_redis_shared->last_warning, 0);
	pg_atomic_init_u64(&rl_redis_shared->unwarned, 0);
	for (i = 0; i < RL_REDIS_NCOUNTERS; i++)
		pg_atomic_init_u64(&rl_redis_shared->counters[i], 0);
	SpinLockInit(&rl_redis_shared->mutex);
	rl_redis_shared->last_error_at = 0;
	rl_redis_shared->last_error[0] = '\0';
}

/*
 * Copy the breaker's state and the counters (for rl_redis_info()).
 */
void
rl_redis_stats(RlRedisStats *stats)
{
	int			i;

	memset(stats, 0, sizeof(*stats));
	if (rl_redis_shared == NULL)
		return;
	for (i = 0; i < RL_REDIS_NCOUNTERS; i++)
		stats->counters[i] =
			(int64) pg_atomic_read_u64(&rl_redis_shared->counters[i]);
	stats->breaker_until =
		(int64) pg_atomic_read_u64(&rl_redis_shared->open_until);
	SpinLockAcquire(&rl_redis_shared->mutex);
	stats->last_error_at = rl_redis_shared->last_error_at;
	memcpy(stats->last_error, rl_redis_shared->last_error,
		   sizeof(stats->last_error));
	SpinLockRelease(&rl_redis_shared->mutex);
}

/* ---- configuration ---- */

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

/*
 * Called by the assign hooks of the connection settings: the next call
 * closes every connection and starts from the seeds again.
 */
void
rl_redis_config_changed(void)
{
	config_stale = true;
	rl_batch_forget();
}

static void
node_close(RlRedisNode *node)
{
	if (node->wait != NULL)
		FreeWaitEventSet(node->wait);
	node->wait = NULL;
	if (node->ctx != NULL)
		redisFree(node->ctx);
	node->ctx = NULL;
	node->busy = false;
}

/*
 * Index of the node host:port, added if new; -1 if there are too many.
 * The array never moves (it is allocated at its maximum size), so pointers
 * to nodes stay valid.
 */
static int
node_lookup(const char *host, int port)
{
	int			i;

	for (i = 0; i < nnodes; i++)
		if (nodes[i].port == port && strcmp(nodes[i].host, host) == 0)
			return i;
	if (nnodes == RL_REDIS_MAX_NODES)
		return -1;
	nodes[nnodes].host = MemoryContextStrdup(rl_redis_cxt, host);
	nodes[nnodes].port = port;
	nodes[nnodes].ctx = NULL;
	nodes[nnodes].busy = false;
	nodes[nnodes].wait = NULL;
	return nnodes++;
}

/*
 * Apply the current settings: forget every node and connection, and take
 * the seeds from ratelimit.redis_nodes (already validated by its check
 * hook).
 */
static void
config_load(void)
{
	MemoryContext old;
	char	  **hosts;
	int		   *ports;
	int			n;
	int			i;

	for (i = 0; i < nnodes; i++)
		node_close(&nodes[i]);
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
		(void) node_lookup(hosts[i], ports[i]);
	nseeds = nnodes;
	slots = palloc(sizeof(int16) * RL_REDIS_SLOTS);
	MemoryContextSwitchTo(old);

	topology = RL_TOPO_UNKNOWN;
	current = 0;
	config_stale = false;
}

/* ---- scripts ---- */

/* The body of an algorithm's decision or refund script. */
static const char *
script_body(RlScript kind, RlAlgo algo)
{
	bool		refund = kind == RL_SCRIPT_REFUND;

	switch (algo)
	{
		case RL_FIXED_WINDOW:
			return refund ? rl_lua_refund_fixed_window : rl_lua_fixed_window;
		case RL_SLIDING_WINDOW_LOG:
			return refund ? rl_lua_refund_sliding_window_log :
				rl_lua_sliding_window_log;
		case RL_SLIDING_WINDOW_COUNTER:
			return refund ? rl_lua_refund_sliding_window_counter :
				rl_lua_sliding_window_counter;
		case RL_TOKEN_BUCKET:
			return refund ? rl_lua_refund_token_bucket : rl_lua_token_bucket;
		case RL_LEAKY_BUCKET:
			return refund ? rl_lua_refund_leaky_bucket : rl_lua_leaky_bucket;
		default:
			elog(ERROR, "unknown algorithm %d", algo);
	}
	return NULL;				/* keep the compiler quiet */
}

/* A script's text, copied to TopMemoryContext, and its SHA1 in hex. */
static char *
script_finish(const StringInfo text, char *sha)
{
	pg_cryptohash_ctx *ctx;
	uint8		digest[SHA1_DIGEST_LENGTH];
	int			i;

	ctx = pg_cryptohash_create(PG_SHA1);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) text->data, text->len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute the SHA1 of a ratelimit script");
	pg_cryptohash_free(ctx);
	for (i = 0; i < SHA1_DIGEST_LENGTH; i++)
		sprintf(&sha[i * 2], "%02x", digest[i]);
	return MemoryContextStrdup(TopMemoryContext, text->data);
}

/*
 * Assemble the scripts and their SHA1s (once per backend, in
 * TopMemoryContext).  A script deciding or refunding one call is the
 * prelude, the call's setup, for the buckets the bucket part, then the
 * body.  The all-or-nothing script is the prelude, each body as a function
 * decide_<code> or refund_<code>, then the driver.
 */
static void
scripts_build(void)
{
	StringInfoData all;
	int			k;
	int			a;

	initStringInfo(&all);
	appendStringInfoString(&all, rl_lua_prelude);
	for (k = 0; k < RL_NUM_SCRIPTS; k++)
		for (a = 0; a < RL_NUM_ALGOS; a++)
		{
			const char *body = script_body((RlScript) k, (RlAlgo) a);
			const char *bucket = rl_algo_has_burst((RlAlgo) a) ?
				rl_lua_bucket : "";
			StringInfoData text;

			initStringInfo(&text);
			appendStringInfo(&text, "%s%s%s%s", rl_lua_prelude, rl_lua_single,
							 bucket, body);
			script_text[k][a] = script_finish(&text, script_sha[k][a]);
			pfree(text.data);

			appendStringInfo(&all, "local function %s_%s()\n%s%send\n",
							 k == RL_SCRIPT_DECIDE ? "decide" : "refund",
							 algo_code[a], bucket, body);
		}
	appendStringInfoString(&all, rl_lua_all);
	script_all_text = script_finish(&all, script_all_sha);
	pfree(all.data);
}

/* ---- cluster slots ---- */

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

/* ---- waiting and exchanging ---- */

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

/* ---- reading replies within bounds ---- */

static void reply_refuse(const char *fmt,...) pg_attribute_printf(1, 2);

/*
 * Refuse the reply being read, saying why.  The reply-object function that
 * refuses then returns NULL, which hiredis takes for a failed allocation:
 * the reader stops with an error, and node_exchange reports this reason.
 */
static void
reply_refuse(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(reply_refused, sizeof(reply_refused), fmt, ap);
	va_end(ap);
}

/* A reply's first object, its root, starts the counts afresh. */
static void
reply_count_start(const redisReadTask *task)
{
	if (task->parent == NULL)
	{
		reply_elements = 0;
		reply_bytes = 0;
	}
}

/*
 * createArray: called as soon as an array's header is parsed, before
 * hiredis allocates its elements.  Refuses arrays nested too deep and more
 * elements in one reply than RL_REDIS_MAX_ELEMENTS.
 */
static void *
bounded_array(const redisReadTask *task, int elements)
{
	const redisReadTask *p;
	int			depth = 1;

	reply_count_start(task);
	for (p = task->parent; p != NULL; p = p->parent)
		depth++;
	if (depth > RL_REDIS_MAX_DEPTH)
	{
		reply_refuse("arrays nested more than %d deep", RL_REDIS_MAX_DEPTH);
		return NULL;
	}
	if (elements < 0 || elements > RL_REDIS_MAX_ELEMENTS - reply_elements)
	{
		reply_refuse("an array of %d elements (at most %d elements in one reply)",
					 elements, RL_REDIS_MAX_ELEMENTS);
		return NULL;
	}
	reply_elements += elements;
	return hiredis_functions->createArray(task, elements);
}

/*
 * createString (bulk strings, status and error lines): refuses more than
 * RL_REDIS_MAX_STRINGS bytes of strings in one reply.  Each one's own
 * length was bounded before it was buffered (reader_within_bounds).
 */
static void *
bounded_string(const redisReadTask *task, char *str, size_t len)
{
	reply_count_start(task);
	if (len > (size_t) (RL_REDIS_MAX_STRINGS - reply_bytes))
	{
		reply_refuse("more than %d bytes of strings in one reply",
					 RL_REDIS_MAX_STRINGS);
		return NULL;
	}
	reply_bytes += len;
	return hiredis_functions->createString(task, str, len);
}

/* createInteger: nothing to bound (its place was counted by its array). */
static void *
bounded_integer(const redisReadTask *task, long long value)
{
	reply_count_start(task);
	return hiredis_functions->createInteger(task, value);
}

/* createNil: likewise. */
static void *
bounded_nil(const redisReadTask *task)
{
	reply_count_start(task);
	return hiredis_functions->createNil(task);
}

/* The reply-object functions of every context (hiredis's, bounded). */
static redisReplyObjectFunctions bounded_functions = {
	bounded_string,
	bounded_array,
	bounded_integer,
	bounded_nil,
	freeReplyObject				/* hiredis's own freeObject */
};

/*
 * Make a new context read through bounded_functions, wrapping the
 * reader's default ones (hiredis's, the same for every context).
 */
static void
reader_bound(redisContext *c)
{
	if (hiredis_functions == NULL)
		hiredis_functions = c->reader->fn;
	c->reader->fn = &bounded_functions;
}

/*
 * Is the item the reader waits for within bounds?  Called after each read,
 * once hiredis has parsed all it could: what is left in its buffer is the
 * beginning of one item, whose type character it has consumed.  A bulk
 * string ("$<length>\r\n<data>\r\n") is refused as soon as its length
 * shows it too long, before its data is buffered (hiredis would wait for
 * all of it); any other item (a status, error or integer line, an array's
 * header) once more of it is buffered than such a line may be long.
 */
static bool
reader_within_bounds(const redisReader *r)
{
	const char *p;
	size_t		unread;
	size_t		i;
	int64		len = 0;

	if (r->ridx < 0 || r->buf == NULL || r->len <= r->pos)
		return true;
	p = r->buf + r->pos;
	unread = r->len - r->pos;
	if (r->rstack[r->ridx].type != REDIS_REPLY_STRING)
	{
		if (unread <= RL_REDIS_MAX_LINE)
			return true;
		reply_refuse("a line of more than %d bytes", RL_REDIS_MAX_LINE);
		return false;
	}
	for (i = 0; i < unread && p[i] != '\r'; i++)
	{
		/* stop adding digits once too long: no overflow */
		if (p[i] >= '0' && p[i] <= '9' && len <= RL_REDIS_MAX_BULK)
			len = len * 10 + (p[i] - '0');
		if (i >= RL_REDIS_MAX_HEADER)
			break;
	}
	if (len > RL_REDIS_MAX_BULK)
	{
		reply_refuse("a bulk string of more than %d bytes",
					 RL_REDIS_MAX_BULK);
		return false;
	}
	if (i >= RL_REDIS_MAX_HEADER)
	{
		reply_refuse("a bulk string length of more than %d characters",
					 RL_REDIS_MAX_HEADER);
		return false;
	}
	return true;
}

/* Free the replies of the exchange under way (or of one cut short). */
static void
held_free(void)
{
	while (nheld > 0)
		freeReplyObject(held[--nheld]);
}

/*
 * Send the commands already appended to the node's context and read n
 * replies into held[], before the deadline.  Every reply is read within the
 * bounds above.  On failure the connection is closed and false returned;
 * *io tells an I/O error (as opposed to a timeout or a reply refused),
 * after which a reused connection may be retried once.
 */
static bool
node_exchange(RlRedisNode *node, int n, TimestampTz deadline, bool *io)
{
	redisContext *c = node->ctx;
	int			done = 0;

	Assert(n <= lengthof(held));
	*io = false;
	reply_refused[0] = '\0';
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
	while (nheld < n)
	{
		void	   *reply = NULL;

		if (redisGetReply(c, &reply) == REDIS_ERR)
			goto read_error;
		if (reply != NULL)
		{
			held[nheld++] = reply;
			continue;
		}
		if (!reader_within_bounds(c->reader))
			goto read_error;
		if (!wait_socket(node, WL_SOCKET_READABLE, deadline))
			goto timeout;
		if (redisBufferRead(c) == REDIS_ERR)
			goto io_error;
	}
	node->busy = false;
	return true;

read_error:
	if (reply_refused[0] != '\0')
		call_failed("Redis at %s:%d sent a reply out of bounds: %s",
					node->host, node->port, reply_refused);
	else if (c->err != REDIS_ERR_IO && c->err != REDIS_ERR_EOF)
		call_failed("Redis at %s:%d sent a reply that cannot be read: %s",
					node->host, node->port, c->errstr);
	else
		goto io_error;
	node_close(node);
	held_free();
	return false;

io_error:
	call_failed("lost the connection to Redis at %s:%d: %s",
				node->host, node->port,
				c->errstr[0] ? c->errstr : "connection closed");
	*io = true;
	node_close(node);
	held_free();
	return false;

timeout:
	call_failed("Redis at %s:%d did not answer in time",
				node->host, node->port);
	node_close(node);
	held_free();
	return false;
}

/*
 * Send one command and take its reply (held[0]).  Used for the handshake
 * and topology queries.
 */
static bool
node_command(RlRedisNode *node, int argc, const char **argv,
			 const size_t *argvlen, TimestampTz deadline)
{
	bool		io;

	if (redisAppendCommandArgv(node->ctx, argc, argv, argvlen) != REDIS_OK)
	{
		call_failed("could not format a command for Redis at %s:%d",
					node->host, node->port);
		node_close(node);
		return false;
	}
	return node_exchange(node, 1, deadline, &io);
}

/* A reply that is an error: record it as the failure of the call. */
static bool
reply_failed(RlRedisNode *node, const char *what, redisReply *r)
{
	if (r->type == REDIS_REPLY_ERROR)
		call_failed("Redis at %s:%d refused %s: %.*s", node->host,
					node->port, what, (int) Min(r->len, 160), r->str);
	else
		call_failed("unexpected reply to %s from Redis at %s:%d", what,
					node->host, node->port);
	return false;
}

/*
 * Connect to the node if not connected (AUTH and SELECT included), before
 * the deadline.  A connection left busy by an interrupted exchange is
 * closed first: its reply stream is unknown.  *fresh tells whether the
 * connection was opened by this call.
 */
static bool
node_connect(RlRedisNode *node, TimestampTz deadline, bool *fresh)
{
	redisContext *c;
	int			err = 0;
	socklen_t	errlen = sizeof(err);

	held_free();
	if (node->busy)
		node_close(node);
	*fresh = false;
	if (node->ctx != NULL)
		return true;

	*fresh = true;
	rl_redis_count(RL_REDIS_CONNECTS);
	c = redisConnectNonBlock(node->host, node->port);
	if (c == NULL)
	{
		call_failed("out of memory connecting to Redis");
		return false;
	}
	if (c->err)
	{
		call_failed("could not connect to Redis at %s:%d: %s",
					node->host, node->port, c->errstr);
		redisFree(c);
		return false;
	}
	reader_bound(c);
	node->ctx = c;
	node->busy = true;
	if (!wait_socket(node, WL_SOCKET_WRITEABLE, deadline))
	{
		call_failed("could not connect to Redis at %s:%d: timeout",
					node->host, node->port);
		node_close(node);
		return false;
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) < 0 ||
		err != 0)
	{
		call_failed("could not connect to Redis at %s:%d: %s",
					node->host, node->port, strerror(err ? err : errno));
		node_close(node);
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
		if (!node_command(node, argc, argv, len, deadline))
			return false;
		if (held[0]->type == REDIS_REPLY_ERROR)
		{
			reply_failed(node, "AUTH", held[0]);
			held_free();
			node_close(node);
			return false;
		}
		held_free();
	}
	if (rl_redis_database != 0)
	{
		char		db[16];
		const char *argv[2] = {"SELECT", db};
		size_t		len[2];

		snprintf(db, sizeof(db), "%d", rl_redis_database);
		len[0] = 6;
		len[1] = strlen(db);
		if (!node_command(node, 2, argv, len, deadline))
			return false;
		if (held[0]->type == REDIS_REPLY_ERROR)
		{
			reply_failed(node, "SELECT", held[0]);
			held_free();
			node_close(node);
			return false;
		}
		held_free();
	}
	return true;
}

/* ---- topology ---- */

/*
 * Fill the slot map from a CLUSTER SLOTS reply.  An empty host means the
 * node asked.
 */
static bool
slots_load(RlRedisNode *asked, redisReply *r)
{
	size_t		i;

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
		idx = node_lookup(host, (int) master->element[1]->integer);
		if (idx < 0)
			return false;
		/* from the first slot that exists: a range may claim any numbers */
		for (s = Max(range->element[0]->integer, 0);
			 s <= range->element[1]->integer && s < RL_REDIS_SLOTS; s++)
			slots[s] = (int16) idx;
	}
	return true;
}

/*
 * Find out, from the first seed that answers, whether Redis is a cluster
 * (and then where the slots are) or a single server.
 */
static bool
topology_discover(TimestampTz call_deadline)
{
	int			i;

	for (i = 0; i < nseeds; i++)
	{
		RlRedisNode *node = &nodes[i];
		TimestampTz deadline;
		const char *argv[2] = {"CLUSTER", "SLOTS"};
		size_t		len[2] = {7, 5};
		bool		fresh;
		redisReply *r;

		deadline = Min(GetCurrentTimestamp() +
					   (int64) rl_redis_connect_timeout * 1000,
					   call_deadline);
		if (!node_connect(node, deadline, &fresh))
			continue;
		deadline = Min(GetCurrentTimestamp() +
					   (int64) rl_redis_command_timeout * 1000,
					   call_deadline);
		if (!node_command(node, 2, argv, len, deadline))
			continue;
		r = held[0];
		if (r->type == REDIS_REPLY_ERROR &&
			strstr(r->str, "cluster support disabled") != NULL)
		{
			topology = RL_TOPO_STANDALONE;
			current = i;
			held_free();
			return true;
		}
		if (r->type == REDIS_REPLY_ARRAY && r->elements > 0)
		{
			bool		ok = slots_load(&nodes[i], r);

			held_free();
			if (ok)
			{
				topology = RL_TOPO_CLUSTER;
				return true;
			}
			call_failed("could not read the slot map of Redis at %s:%d",
						nodes[i].host, nodes[i].port);
			continue;
		}
		reply_failed(node, "CLUSTER SLOTS", r);
		held_free();
	}
	if (nseeds == 0)
		call_failed("\"ratelimit.redis_nodes\" names no node");
	return false;
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
	return node_lookup(host, (int) port);
}

/* ---- the decision ---- */

/* Parse a decimal integer reply element; false if it is not one. */
static bool
reply_int128(const redisReply *r, int128 *v)
{
	const char *s = r->str;
	bool		neg = false;
	int128		x = 0;

	if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 40)
		return false;
	if (*s == '-')
	{
		neg = true;
		s++;
	}
	if (*s == '\0')
		return false;
	for (; *s; s++)
	{
		if (*s < '0' || *s > '9')
			return false;
		x = x * 10 + (*s - '0');
	}
	*v = neg ? -x : x;
	return true;
}

static int64
clamp64(int128 v)
{
	return v > PG_INT64_MAX ? PG_INT64_MAX :
		v < PG_INT64_MIN ? PG_INT64_MIN : (int64) v;
}

/*
 * Turn the script's reply into a decision, converting the fractions with
 * the same function as the C algorithms.
 */
static bool
reply_decision(const redisReply *r, RlDecision *d)
{
	int128		v[8];
	int			i;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 9 ||
		r->element[0]->type != REDIS_REPLY_INTEGER)
		return false;
	for (i = 0; i < 8; i++)
		if (!reply_int128(r->element[i + 1], &v[i]))
			return false;
	if (v[3] <= 0 || v[5] <= 0 || v[2] < 0 || v[4] < 0 ||
		v[6] < PG_INT64_MIN || v[6] > PG_INT64_MAX ||
		v[7] < 0 || v[7] > PG_UINT64_MAX)
		return false;
	d->allowed = r->element[0]->integer != 0;
	d->remaining = clamp64(v[0]);
	d->reset_at = clamp64(v[1]);
	d->retry_after = rl_seconds(v[2], v[3]);
	d->delay = rl_seconds(v[4], v[5]);
	d->time = (int64) v[6];
	d->incarnation = (uint64) v[7];
	return true;
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
 * The names of a state's keys, in fresh StringInfos: the hash
 * rl:{<namespace>:<algo>:<key>} (the namespace is the database OID unless
 * ratelimit.redis_namespace is set), and the sliding log's entry list, that
 * name plus ":log".
 */
static void
key_names(StringInfo hash, StringInfo log, Oid dbid, RlAlgo algo,
		  const char *key, int keylen)
{
	initStringInfo(hash);
	appendStringInfoString(hash, "rl:{");
	if (rl_redis_namespace[0] != '\0')
		appendStringInfoString(hash, rl_redis_namespace);
	else
		appendStringInfo(hash, "%u", dbid);
	appendStringInfo(hash, ":%s:", algo_code[algo]);
	appendBinaryStringInfo(hash, key, keylen);
	appendStringInfoChar(hash, '}');
	initStringInfo(log);
	appendBinaryStringInfo(log, hash->data, hash->len);
	appendStringInfoString(log, ":log");
}

/*
 * Run one command on the node that serves a key (the caller passes the
 * key's slot), following MOVED and ASK, pausing and retrying on TRYAGAIN
 * until the deadline, and retrying once on a reused connection that turns
 * out to be dead.  For a script (text not NULL), argv[0..1] are
 * EVALSHA and the SHA1, replaced by EVAL and the text on NOSCRIPT.  Returns
 * the reply in held[nheld - 1] (the caller calls held_free) and the node
 * that sent it, or NULL with call_error set.
 */
static redisReply *
key_command(int slot, int argc, const char **argv, size_t *argvlen,
			const char *text, RlRedisNode **from)
{
	TimestampTz call_deadline = GetCurrentTimestamp() +
	(int64) (rl_redis_connect_timeout + rl_redis_command_timeout) * 1000;
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

		if (topology == RL_TOPO_UNKNOWN && !topology_discover(call_deadline))
			return NULL;
		if (asking >= 0)
			node = &nodes[asking];
		else if (topology == RL_TOPO_CLUSTER && slots[slot] >= 0)
			node = &nodes[slots[slot]];
		else
			node = &nodes[current];

		deadline = Min(GetCurrentTimestamp() +
					   (int64) rl_redis_connect_timeout * 1000,
					   call_deadline);
		if (!node_connect(node, deadline, &fresh))
		{
			topology = RL_TOPO_UNKNOWN;
			return NULL;
		}
		if ((asking >= 0 &&
			 redisAppendCommand(node->ctx, "ASKING") != REDIS_OK) ||
			redisAppendCommandArgv(node->ctx, argc, argv,
								   argvlen) != REDIS_OK)
		{
			call_failed("could not format a command for Redis");
			node_close(node);
			return NULL;
		}
		deadline = Min(GetCurrentTimestamp() +
					   (int64) rl_redis_command_timeout * 1000,
					   call_deadline);
		if (!node_exchange(node, asking >= 0 ? 2 : 1, deadline, &io))
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
		r = held[nheld - 1];
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
				reply_failed(node, "a redirect", r);
				held_free();
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
			held_free();
			if (GetCurrentTimestamp() + RL_REDIS_TRYAGAIN_MS * 1000 >=
				call_deadline)
			{
				call_failed("Redis at %s:%d kept answering TRYAGAIN (a slot migration)",
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
		held_free();
	}
	call_failed("too many redirections or retries from Redis");
	return NULL;
}

/*
 * What a refund script gives back: the consumption of a call decided at
 * "time" from the state of incarnation "incarnation".
 */
typedef struct RlRefunded
{
	int64		time;
	uint64		incarnation;
} RlRefunded;

/* A script's ARGV for one call (see redis_scripts.c) */
typedef struct RlScriptArgs
{
	char		num[6][24];		/* at, limit, per, cost, burst, and for a
								 * refund the incarnation */
	const char *argv[7];		/* at ... burst, the TTL slack, and for a
								 * refund the incarnation */
	size_t		len[7];
	int			argc;			/* 6, 7 for a refund */
} RlScriptArgs;

/*
 * Fill a call's script arguments.  For a refund (of not NULL), "at" is the
 * refunded call's time and the incarnation follows; otherwise "at" is the
 * request's own time: its explicit "at", the PostgreSQL clock with
 * ratelimit.redis_clock = client, or '' for Redis's TIME.
 */
static void
script_args(const RlRequest *req, const RlRefunded *of, RlScriptArgs *a)
{
	int64		values[4] = {req->params.limit, req->params.per,
	req->params.cost, req->params.burst};
	int			i;

	if (of != NULL)
		snprintf(a->num[0], 24, INT64_FORMAT, of->time);
	else if (req->at != RL_NO_TIME)
		snprintf(a->num[0], 24, INT64_FORMAT, req->at);
	else if (rl_redis_clock == RL_REDIS_CLOCK_CLIENT)
		snprintf(a->num[0], 24, INT64_FORMAT, rl_clock_now());
	else
		a->num[0][0] = '\0';
	for (i = 0; i < 4; i++)
		snprintf(a->num[i + 1], 24, INT64_FORMAT, values[i]);
	for (i = 0; i < 5; i++)
		a->argv[i] = a->num[i];
	a->argv[5] = req->at != RL_NO_TIME ? RL_REDIS_SLACK_AT :
		RL_REDIS_SLACK_CLOCK;
	a->argc = 6;
	if (of != NULL)
	{
		snprintf(a->num[5], 24, UINT64_FORMAT, of->incarnation);
		a->argv[a->argc++] = a->num[5];
	}
	for (i = 0; i < a->argc; i++)
		a->len[i] = strlen(a->argv[i]);
}

/* The settings read and the scripts built: ready to call Redis. */
static void
redis_ready(void)
{
	if (config_stale)
		config_load();
	if (script_text[0][0] == NULL)
		scripts_build();
}

/*
 * Run the request's decision script, or with "of" its refund script.
 * Returns the reply (in held[], the caller calls held_free) and the node
 * that sent it, or NULL with call_error set.
 */
static redisReply *
script_run(const RlRequest *req, const RlRefunded *of, RlRedisNode **node)
{
	RlScript	kind = of != NULL ? RL_SCRIPT_REFUND : RL_SCRIPT_DECIDE;
	StringInfoData hkey;
	StringInfoData lkey;
	RlScriptArgs args;
	const char *argv[12];
	size_t		argvlen[12];
	int			argc = 0;
	int			i;
	redisReply *r;

	redis_ready();
	key_names(&hkey, &lkey, req->dbid, req->algo, req->key, req->keylen);
	script_args(req, of, &args);

	argv[argc] = "EVALSHA";
	argvlen[argc++] = 7;
	argv[argc] = script_sha[kind][req->algo];
	argvlen[argc++] = strlen(argv[1]);
	argv[argc] = req->algo == RL_SLIDING_WINDOW_LOG ? "2" : "1";
	argvlen[argc++] = 1;
	argv[argc] = hkey.data;
	argvlen[argc++] = hkey.len;
	if (req->algo == RL_SLIDING_WINDOW_LOG)
	{
		argv[argc] = lkey.data;
		argvlen[argc++] = lkey.len;
	}
	for (i = 0; i < args.argc; i++)
	{
		argv[argc] = args.argv[i];
		argvlen[argc++] = args.len[i];
	}

	r = key_command(rl_redis_slot(hkey.data, hkey.len), argc, argv, argvlen,
					script_text[kind][req->algo], node);
	pfree(hkey.data);
	pfree(lkey.data);
	return r;
}

/*
 * Decide the request in Redis.  False on failure, with call_error set.
 */
static bool
redis_call(const RlRequest *req, RlDecision *d)
{
	redisReply *r;
	RlRedisNode *node;
	bool		ok;

	r = script_run(req, NULL, &node);
	if (r == NULL)
		return false;
	ok = reply_decision(r, d);
	if (!ok)
		reply_failed(node, "the decision script", r);
	held_free();
	return ok;
}

/* Raise the ERROR of an administrator's command Redis could not carry out. */
static void
admin_failed(const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("could not %s in Redis: %s", what, call_error)));
}

/*
 * Drop the key's state in Redis, for one algorithm or all of them (rl_reset
 * with a Redis backend).  Returns the number of states dropped.  Resetting
 * is an administrator's act: if Redis cannot be reached it is an ERROR, not
 * a matter for fail_mode.
 */
int64
rl_redis_reset(Oid dbid, const char *key, int keylen, bool all_algos,
			   RlAlgo algo)
{
	int64		dropped = 0;
	int			a;

	if (config_stale)
		config_load();
	for (a = 0; a < RL_NUM_ALGOS; a++)
	{
		StringInfoData hkey;
		StringInfoData lkey;
		const char *argv[3];
		size_t		argvlen[3];
		redisReply *r;
		RlRedisNode *node;

		if (!all_algos && a != (int) algo)
			continue;
		key_names(&hkey, &lkey, dbid, (RlAlgo) a, key, keylen);
		argv[0] = "DEL";
		argv[1] = hkey.data;
		argv[2] = lkey.data;
		argvlen[0] = 3;
		argvlen[1] = hkey.len;
		argvlen[2] = lkey.len;

		r = key_command(rl_redis_slot(hkey.data, hkey.len),
						a == RL_SLIDING_WINDOW_LOG ? 3 : 2, argv, argvlen,
						NULL, &node);
		if (r != NULL && r->type != REDIS_REPLY_INTEGER)
		{
			reply_failed(node, "DEL", r);
			held_free();
			r = NULL;
		}
		if (r == NULL)
			admin_failed("reset the key");
		if (r->integer > 0)
			dropped++;
		held_free();
		pfree(hkey.data);
		pfree(lkey.data);
	}
	return dropped;
}

/*
 * Send one command to a node for an administrator's command, and return
 * its reply (in held[]; the caller calls held_free).  An ERROR if the node
 * cannot be reached in time or answers an error.
 */
static redisReply *
admin_command(RlRedisNode *node, int argc, const char **argv,
			  const size_t *argvlen, const char *what)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		fresh;

	if (!node_connect(node, now + (int64) rl_redis_connect_timeout * 1000,
					  &fresh) ||
		!node_command(node, argc, argv, argvlen,
					  GetCurrentTimestamp() +
					  (int64) rl_redis_command_timeout * 1000))
		admin_failed(what);
	if (held[0]->type == REDIS_REPLY_ERROR)
	{
		reply_failed(node, argv[0], held[0]);
		held_free();
		admin_failed(what);
	}
	return held[0];
}

/*
 * Drop every state of a database (InvalidOid: of every database) in Redis
 * (rl_reset_all): SCAN each master for the keys of the namespace and UNLINK
 * them.  With ratelimit.redis_namespace set, the namespace is what the
 * keys are named by, so it is the namespace's states that go, in both
 * forms.  Returns the number of states dropped (a sliding log's entry list
 * goes with its state).  An ERROR if Redis cannot be reached in time, as
 * for rl_reset.
 */
int64
rl_redis_reset_all(Oid dbid)
{
	StringInfoData pattern;
	bool	   *seen;
	int64		dropped = 0;
	int			i;

	if (config_stale)
		config_load();
	if (topology == RL_TOPO_UNKNOWN &&
		!topology_discover(GetCurrentTimestamp() +
						   (int64) (rl_redis_connect_timeout +
									rl_redis_command_timeout) * 1000))
		admin_failed("reset every state");

	/* rl:{<namespace>:*, glob characters of the namespace escaped */
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

	/* each master once: the node in use, or every node owning slots */
	seen = palloc0(sizeof(bool) * RL_REDIS_MAX_NODES);
	if (topology == RL_TOPO_STANDALONE)
		seen[current] = true;
	else
		for (i = 0; i < RL_REDIS_SLOTS; i++)
			if (slots[i] >= 0)
				seen[slots[i]] = true;

	for (i = 0; i < nnodes; i++)
	{
		char		cursor[32] = "0";

		if (!seen[i])
			continue;
		do
		{
			const char *scan[6] = {"SCAN", cursor, "MATCH", pattern.data,
			"COUNT", "1000"};
			size_t		scanlen[6];
			redisReply *r;
			redisReply *keys;
			size_t		k;
			int			j;

			for (j = 0; j < 6; j++)
				scanlen[j] = strlen(scan[j]);
			r = admin_command(&nodes[i], 6, scan, scanlen, "reset every state");
			if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
				r->element[0]->type != REDIS_REPLY_STRING ||
				r->element[0]->len >= sizeof(cursor) ||
				r->element[1]->type != REDIS_REPLY_ARRAY)
			{
				reply_failed(&nodes[i], "SCAN", r);
				held_free();
				admin_failed("reset every state");
			}
			strlcpy(cursor, r->element[0]->str, sizeof(cursor));
			/* take the keys out of held[], which the next command reuses */
			keys = r->element[1];
			r->element[1] = NULL;
			r->elements = 1;
			held_free();

			/* one key per UNLINK: in a cluster the keys span slots */
			for (k = 0; k < keys->elements; k++)
			{
				redisReply *key = keys->element[k];
				const char *unlink[2] = {"UNLINK", key->str};
				size_t		unlinklen[2] = {6, key->len};

				if (key->type != REDIS_REPLY_STRING)
					continue;
				r = admin_command(&nodes[i], 2, unlink, unlinklen,
								  "reset every state");
				/* a state's hash ends with its hash tag; its log does not */
				if (r->type == REDIS_REPLY_INTEGER && r->integer > 0 &&
					key->len > 0 && key->str[key->len - 1] == '}')
					dropped++;
				held_free();
			}
			freeReplyObject(keys);
		} while (strcmp(cursor, "0") != 0);
	}
	pfree(seen);
	pfree(pattern.data);
	return dropped;
}

/*
 * A call failed: count it, open the breaker for a probe interval from now
 * and log a warning at most once per RL_REDIS_WARN_INTERVAL for the whole
 * server.
 */
static void
failure(bool decision)
{
	int64		now = rl_clock_now();
	uint64		interval = (uint64) rl_redis_probe_interval * 1000;
	uint64		was;
	uint64		last;
	uint64		unwarned;

	if (decision)
		rl_redis_count(RL_REDIS_FAILURES);
	if (rl_redis_shared == NULL)
		return;
	was = pg_atomic_exchange_u64(&rl_redis_shared->open_until,
								 (uint64) now + interval);
	if (was == 0)
		rl_redis_count(RL_REDIS_BREAKER_TRIPS);

	SpinLockAcquire(&rl_redis_shared->mutex);
	rl_redis_shared->last_error_at = now;
	strlcpy(rl_redis_shared->last_error, call_error,
			sizeof(rl_redis_shared->last_error));
	SpinLockRelease(&rl_redis_shared->mutex);

	unwarned = pg_atomic_fetch_add_u64(&rl_redis_shared->unwarned, 1) + 1;
	last = pg_atomic_read_u64(&rl_redis_shared->last_warning);
	if ((uint64) now >= last + RL_REDIS_WARN_INTERVAL &&
		pg_atomic_compare_exchange_u64(&rl_redis_shared->last_warning,
									   &last, (uint64) now))
	{
		unwarned = pg_atomic_exchange_u64(&rl_redis_shared->unwarned, 0);
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ratelimit: Redis is unavailable: %s", call_error),
				 errdetail("%llu call(s) to Redis failed since the last warning; while the circuit breaker is open, calls skip Redis (rl_redis_info() counts them) and \"ratelimit.fail_mode\" decides; Redis is probed again every %d ms.",
						   (unsigned long long) unwarned,
						   rl_redis_probe_interval)));
	}
}

/*
 * Refuse what the Redis scripts cannot decide exactly: an explicit "at"
 * before RL_REDIS_MIN_TIME.  Called before anything is consumed (a hybrid
 * pre-check included).
 */
void
rl_redis_check_request(const RlRequest *req)
{
	if (req->at != RL_NO_TIME && req->at < RL_REDIS_MIN_TIME)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("\"at\" is out of range for the Redis backend"),
				 errdetail("With \"ratelimit.backend\" = redis or hybrid, an explicit time must be after 1898-08-11 (2^51 microseconds before 1970).")));
}

/*
 * May a decision go to Redis?  Not while the breaker is open (the call is
 * counted as skipped), except for the one call that wins the right to
 * probe once the interval is over (*probe is then set).
 */
static bool
breaker_lets_through(bool *probe)
{
	int64		now = rl_clock_now();
	uint64		until;

	*probe = false;
	if (rl_redis_shared == NULL)
		return true;
	until = pg_atomic_read_u64(&rl_redis_shared->open_until);
	if (until != 0)
	{
		uint64		next = (uint64) now +
		(uint64) rl_redis_probe_interval * 1000;

		if ((uint64) now < until ||
			!pg_atomic_compare_exchange_u64(&rl_redis_shared->open_until,
											&until, next))
		{
			rl_redis_count(RL_REDIS_SKIPPED);
			return false;
		}
		*probe = true;
	}
	return true;
}

/* A decision went through: a probe closes the breaker. */
static void
breaker_close(bool probe)
{
	if (!probe)
		return;
	pg_atomic_write_u64(&rl_redis_shared->open_until, 0);
	ereport(LOG,
			(errmsg("ratelimit: Redis is reachable again")));
}

/*
 * Decide the request in Redis.  RL_UNAVAILABLE when Redis cannot decide it
 * in time, or while the breaker is open (the caller applies fail_mode).
 * An explicit "at" before RL_REDIS_MIN_TIME is an error
 * (rl_redis_check_request).
 */
RlStatus
rl_redis_decide(const RlRequest *req, RlDecision *d)
{
	bool		probe;

	/* a Redis decision fills only the reported fields */
	memset(d, 0, sizeof(*d));
	rl_redis_check_request(req);
	if (!breaker_lets_through(&probe))
		return RL_UNAVAILABLE;

	rl_redis_count(RL_REDIS_CALLS);
	if (!redis_call(req, d))
	{
		failure(true);
		return RL_UNAVAILABLE;
	}
	d->remote = d->allowed && req->params.cost > 0;
	breaker_close(probe);
	return RL_OK;
}

/*
 * Run the all-or-nothing script on n requests (rl_lua_all).  False on
 * failure, with call_error set.  In a Redis Cluster every key must be in
 * one slot, which keys of different hash tags almost never are: that is an
 * ERROR, not a failure for fail_mode.
 */
static bool
redis_call_all(const RlRequest *reqs, int n, RlDecision *ds)
{
	int			maxargs = 4 + n * 11;
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

	redis_ready();
	if (topology == RL_TOPO_UNKNOWN &&
		!topology_discover(GetCurrentTimestamp() +
						   (int64) (rl_redis_connect_timeout +
									rl_redis_command_timeout) * 1000))
		return false;

	/* KEYS: each call's keys, in order */
	for (i = 0; i < n; i++)
	{
		const RlRequest *req = &reqs[i];
		StringInfoData hkey;
		StringInfoData lkey;
		int			s;

		key_names(&hkey, &lkey, req->dbid, req->algo, req->key, req->keylen);
		s = rl_redis_slot(hkey.data, hkey.len);
		if (topology == RL_TOPO_CLUSTER && slot >= 0 && s != slot)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("all-or-nothing checks on a Redis Cluster need every key in one hash slot"),
					 errdetail("Keys 1 and %d are in slots %d and %d.",
							   i + 1, slot, s),
					 errhint("Use a single Redis server, or the local backend, for all-or-nothing checks.")));
		slot = s;
		argv[argc] = hkey.data;
		argvlen[argc++] = hkey.len;
		if (req->algo == RL_SLIDING_WINDOW_LOG)
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

		argv[argc] = algo_code[req->algo];
		argvlen[argc] = strlen(argv[argc]);
		argc++;
		argv[argc] = req->algo == RL_SLIDING_WINDOW_LOG ? "2" : "1";
		argvlen[argc++] = 1;
		argv[argc] = req->shadow ? "1" : "0";
		argvlen[argc++] = 1;
		script_args(req, NULL, &args[i]);
		for (j = 0; j < args[i].argc; j++)
		{
			argv[argc] = args[i].argv[j];
			argvlen[argc++] = args[i].len[j];
		}
	}

	argv[0] = "EVALSHA";
	argvlen[0] = 7;
	argv[1] = script_all_sha;
	argvlen[1] = strlen(script_all_sha);
	argv[2] = numkeys;
	argvlen[2] = strlen(numkeys);
	r = key_command(slot, argc, argv, argvlen, script_all_text, &node);
	if (r == NULL)
		return false;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t) n)
		ok = false;
	for (i = 0; ok && i < n; i++)
		ok = reply_decision(r->element[i], &ds[i]);
	if (!ok)
		reply_failed(node, "the all-or-nothing script", r);
	held_free();
	return ok;
}

/*
 * Decide n requests all or nothing in Redis, in one script (the local
 * store's rl_store_decide_all, in Redis): every request is decided; if one
 * is denied, a shadow's denial aside, what the others consumed is given
 * back and they report a look at their state.  RL_UNAVAILABLE as for
 * rl_redis_decide.
 */
RlStatus
rl_redis_decide_all(const RlRequest *reqs, int n, RlDecision *ds)
{
	bool		probe;
	bool		all = true;
	int			i;

	memset(ds, 0, sizeof(RlDecision) * n);
	for (i = 0; i < n; i++)
		rl_redis_check_request(&reqs[i]);
	if (!breaker_lets_through(&probe))
		return RL_UNAVAILABLE;

	rl_redis_count(RL_REDIS_CALLS);
	if (!redis_call_all(reqs, n, ds))
	{
		failure(true);
		return RL_UNAVAILABLE;
	}
	for (i = 0; i < n; i++)
		if (!ds[i].allowed && !reqs[i].shadow)
			all = false;
	for (i = 0; i < n; i++)
		ds[i].remote = all && ds[i].allowed && reqs[i].params.cost > 0;
	breaker_close(probe);
	return RL_OK;
}

/*
 * Give back what a decision Redis made at time t consumed (cost units of
 * the request), if they still count there and the key's state is still
 * the incarnation the decision consumed from (not reset, expired or
 * evicted since).  Called from the end of an aborted (sub)transaction, with
 * interrupts held: it never raises an error.  While the breaker is open
 * nothing is sent; when Redis cannot take the refund in time, the units
 * stay consumed (a warning says why, at the bounded rate of failed calls,
 * and the breaker opens).
 */
void
rl_redis_refund(const RlRequest *req, int64 t, uint64 incarnation)
{
	RlRefunded	of = {t, incarnation};
	redisReply *r;
	RlRedisNode *node;

	if (rl_redis_shared != NULL &&
		pg_atomic_read_u64(&rl_redis_shared->open_until) != 0)
		return;
	r = script_run(req, &of, &node);
	if (r != NULL && r->type != REDIS_REPLY_INTEGER)
	{
		reply_failed(node, "the refund script", r);
		r = NULL;
	}
	held_free();
	if (r == NULL)
		failure(false);
}
