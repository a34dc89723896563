/*-------------------------------------------------------------------------
 *
 * redis_int.h
 *		What the Redis engine's files share, and nothing else includes:
 *
 *	redis_breaker.c	 the circuit breaker, the shared counters, last_error
 *	redis_reply.c	 replies read within bounds (hiredis's reader, wrapped)
 *	redis_conn.c	 connections and socket I/O: settings of the connection,
 *					 waits with a deadline, a call's status
 *	redis_cluster.c	 routing: the topology, slots, MOVED, ASK, TRYAGAIN
 *	redis_script.c	 the scripts (from the algorithm table's Lua), the names
 *					 of their keys, their arguments and replies
 *	redis_batch.c	 leases (ratelimit.redis_batch), this backend's memory
 *	redis_refund.c	 refunds: many at once, pipelined, one deadline
 *	redis_lease.c	 concurrency limits: slots as leases, renewed by the
 *					 lease worker
 *	redis_engine.c	 the engine (engine.h): decisions, refunds, resets,
 *					 figures
 *
 * Each file calls only those listed above it (the engine all of them);
 * none calls back up.  A failure is reported by the call's status
 * (RlRedisCall: its deadline and why it failed), not a global; a reply
 * belongs to the connection it came on and lives until that connection's
 * next exchange or its closing, so no caller has one to free.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_REDIS_INT_H
#define RL_REDIS_INT_H

#include <hiredis/hiredis.h>

#include "lib/stringinfo.h"
#include "storage/latch.h"

#include "redis.h"

#define RL_REDIS_SLOTS			16384
#define RL_REDIS_MAX_NODES		1024
#define RL_REDIS_ERROR_LEN		256

/*
 * Connections a backend keeps open at most (docs/redis.md): each holds two
 * descriptors (its socket, its wait event set's), reserved from
 * PostgreSQL's budget of external descriptors.  Past it, the least
 * recently used connection is closed; a cluster of more masters is still
 * served, with reconnections.
 */
#define RL_REDIS_MAX_CONNECTIONS	64

/*
 * One call to Redis (a decision, a refund, an administrator's command):
 * the deadline of the whole call, and why it failed.  error is valid text
 * in any encoding: bytes outside printable ASCII are escaped (\xNN).
 */
typedef struct RlRedisCall
{
	TimestampTz deadline;
	int			block_ms;		/* a blocking command's own wait (BLPOP) */
	char		error[RL_REDIS_ERROR_LEN];
} RlRedisCall;

/* One Redis node and this backend's connection to it. */
typedef struct RlRedisNode
{
	char	   *host;
	int			port;
	redisContext *ctx;			/* NULL when not connected */
	bool		busy;			/* an exchange is under way (or was cut) */
	uint64		used;			/* when it last connected or exchanged, to
								 * close the least recently used */
	WaitEventSet *wait;			/* latch, postmaster death and the socket */
	uint32		wait_on;		/* the socket event "wait" is set up for */
	redisReply *replies[2];		/* of the latest exchange (see above) */
	int			nreplies;
} RlRedisNode;

/* Counters shown by rl_redis_info(); see docs/redis.md. */
typedef enum RlRedisCounter
{
	RL_REDIS_CALLS,				/* decisions sent to Redis */
	RL_REDIS_FAILURES,			/* of those, not decided (down, slow,
								 * error) */
	RL_REDIS_SKIPPED,			/* not sent: the breaker was open */
	RL_REDIS_BREAKER_TRIPS,		/* times the breaker opened */
	RL_REDIS_CONNECTS,			/* connections opened */
	RL_REDIS_REDIRECTS,			/* MOVED and ASK redirections followed */
	RL_REDIS_SCRIPT_LOADS,		/* NOSCRIPT answered with EVAL */
	RL_REDIS_BATCHED,			/* admitted from a local lease (batching) */
	RL_REDIS_REFUNDS_QUEUED,	/* refunds queued at an abort, to be sent
								 * after the transaction */
	RL_REDIS_REFUNDS_SENT,		/* refunds Redis took */
	RL_REDIS_REFUNDS_DROPPED,	/* refunds not sent: the queue full, the
								 * breaker open, Redis failing, the session
								 * gone */
	RL_REDIS_NCOUNTERS
} RlRedisCounter;

/* ---- settings ---- */

/* redis_conn.c: the connection */
extern char *rl_redis_nodes;
extern int	rl_redis_database;
extern char *rl_redis_user;
extern char *rl_redis_password;
extern int	rl_redis_connect_timeout;
extern int	rl_redis_command_timeout;

/* redis_breaker.c */
extern int	rl_redis_probe_interval;

/* redis_script.c */
typedef enum RlRedisClock
{
	RL_REDIS_CLOCK_SERVER,		/* Redis TIME */
	RL_REDIS_CLOCK_CLIENT		/* this server's clock */
} RlRedisClock;

extern char *rl_redis_namespace;
extern int	rl_redis_clock;

/* redis_batch.c */
extern int	rl_redis_batch;

/* ---- redis_reply.c ---- */

extern void rl_redis_reply_bound(redisContext *c);
extern void rl_redis_reply_begin(void);
extern bool rl_redis_reply_within_bounds(const redisReader *r);
extern const char *rl_redis_reply_refused(void);

/* ---- redis_conn.c ---- */

extern void rl_redis_conn_init(void);
extern void rl_redis_conn_invalidate(void);
extern uint64 rl_redis_conn_ready(void);
extern bool rl_redis_parse_nodes(const char *spec, int *nnodes,
								 char ***hosts, int **ports);
extern RlRedisNode *rl_redis_node(int i);
extern int	rl_redis_nnodes(void);
extern int	rl_redis_nseeds(void);
extern int	rl_redis_node_lookup(const char *host, int port);
extern void rl_redis_node_release(RlRedisNode *node);
extern void rl_redis_node_close(RlRedisNode *node);
extern bool rl_redis_node_connect(RlRedisNode *node, RlRedisCall *call,
								  TimestampTz deadline, bool *fresh);
extern bool rl_redis_node_exchange(RlRedisNode *node, int n,
								   RlRedisCall *call, TimestampTz deadline,
								   bool *io);
extern bool rl_redis_node_pipeline(RlRedisNode *node, int n,
								   RlRedisCall *call, TimestampTz deadline,
								   bool *io,
								   void (*consume) (redisReply *r, int i,
													void *arg),
								   void *arg);
extern redisReply *rl_redis_node_command(RlRedisNode *node, int argc,
										 const char **argv,
										 const size_t *argvlen,
										 RlRedisCall *call,
										 TimestampTz deadline);
extern void rl_redis_call_begin(RlRedisCall *call);
extern void rl_redis_call_block(RlRedisCall *call, int block_ms);
extern TimestampTz rl_redis_deadline(const RlRedisCall *call,
									 int timeout_ms);
extern void rl_redis_call_failed(RlRedisCall *call, const char *fmt,...)
			pg_attribute_printf(2, 3);
extern bool rl_redis_reply_failed(RlRedisCall *call, RlRedisNode *node,
								  const char *what, const redisReply *r);

/* ---- redis_cluster.c ---- */

extern uint16 rl_redis_slot(const char *key, size_t len);
extern bool rl_redis_topology(RlRedisCall *call);
extern bool rl_redis_is_cluster(void);
extern void rl_redis_topology_forget(void);
extern RlRedisNode *rl_redis_route(int slot);
extern bool rl_redis_reply_rerouted(const redisReply *r);
extern void rl_redis_masters(bool *seen);
extern redisReply *rl_redis_key_command(RlRedisCall *call, int slot,
										int argc, const char **argv,
										size_t *argvlen, const char *text,
										RlRedisNode **from);

/* ---- redis_breaker.c ---- */

extern void rl_redis_breaker_init(void);
extern void rl_redis_count(RlRedisCounter c);
extern void rl_redis_count_n(RlRedisCounter c, int64 n);
extern bool rl_redis_breaker_open(void);
extern bool rl_redis_breaker_lets_through(bool *probe);
extern void rl_redis_breaker_close(bool probe);
extern void rl_redis_failed(const RlRedisCall *call, bool decision);
extern int	rl_redis_breaker_info(RlInfoItem *items);

/* ---- redis_script.c ---- */

typedef enum RlScript
{
	RL_SCRIPT_DECIDE,
	RL_SCRIPT_REFUND,
	RL_SCRIPT_CHARGE,			/* rl_adjust: the charge, then a look */
	RL_NUM_SCRIPTS
} RlScript;

typedef struct RlRedisScript
{
	char	   *text;
	char		sha[41];		/* SHA1 in hex */
} RlRedisScript;

/* A script's ARGV for one call (see src/lua/prelude.lua) */
typedef struct RlScriptArgs
{
	char		num[10][24];	/* at, limit, per, cost, burst, for a
								 * refund the incarnation (a decision's
								 * headroom), then a calendar period's
								 * four bounds */
	const char *argv[11];		/* at ... burst, the TTL slack, the
								 * incarnation (a decision's headroom, ''
								 * for none; a charge's direction), the
								 * bounds */
	size_t		len[11];
	int			argc;			/* 6, 7 for a refund or a headroom, 11
								 * with bounds */
	char		nargs[4];		/* argc, in decimal (the all script) */
} RlScriptArgs;

/*
 * places of a script command's argv (rl_redis_script_command): EVALSHA,
 * the SHA1, the number of keys, two keys, RlScriptArgs's eleven
 */
#define RL_SCRIPT_ARGV		16

extern void rl_redis_script_init(void);
extern const RlRedisScript *rl_redis_script(RlScript kind, RlAlgo algo);
extern const RlRedisScript *rl_redis_script_all(void);
extern const RlRedisScript *rl_redis_lease_script(void);
extern void rl_redis_key_names(StringInfo hash, StringInfo log, Oid dbid,
							   RlAlgo algo, const char *key, int keylen);
extern int	rl_redis_nkeys(RlAlgo algo);
extern void rl_redis_script_args(const RlRequest *req, const RlParams *p,
								 const RlReceipt *r, RlScriptArgs *a);
extern int	rl_redis_script_command(const RlRedisScript *script,
									RlAlgo algo,
									const StringInfoData *hkey,
									const StringInfoData *lkey,
									const RlScriptArgs *args,
									const char **argv, size_t *argvlen);
extern bool rl_redis_reply_outcome(const redisReply *r, RlOutcome *out,
								   int64 *time, uint64 *incarnation);

/* ---- redis_batch.c ---- */

extern void rl_batch_init(void);

/* What a batched call needs (rl_batch_begin) */
typedef enum RlBatchStep
{
	RL_BATCH_NONE,				/* never batched: decide exactly */
	RL_BATCH_DONE,				/* decided from this backend's lease */
	RL_BATCH_EXACT,				/* decide exactly, then rl_batch_exact */
	RL_BATCH_LEASE				/* ask Redis for a lease (rl_batch_leased) */
} RlBatchStep;

extern RlBatchStep rl_batch_begin(const RlRequest *req, int64 now,
								  RlOutcome *out, RlReceipt *receipt,
								  int64 *lease_cost);
extern bool rl_batch_leased(const RlRequest *req, int64 now,
							int64 lease_cost, const RlOutcome *granted,
							RlOutcome *out, RlReceipt *receipt);
extern void rl_batch_exact(const RlRequest *req, int64 now,
						   const RlOutcome *out);
extern void rl_batch_refund(const RlRequest *req, const RlReceipt *receipt);
extern void rl_batch_forget(void);

/* ---- redis_refund.c ---- */

extern int	rl_redis_refund_many(const RlRequest *reqs,
								 const RlReceipt *receipts, int n);

/* ---- redis_lease.c ---- */

extern int	rl_redis_lease_time;
extern int	rl_redis_max_leases;

extern void rl_redis_lease_init(void);
extern RlSlotResult rl_redis_lease_acquire(const RlRequest *req,
										   RlSlotOp op, int64 now,
										   RlReceipt *receipt);
extern void rl_redis_lease_release(const RlRequest *req,
								   const RlReceipt *receipt);

/* redis_reset.c */
extern void rl_redis_reset_init(void);
extern int64 rl_redis_reset(Oid dbid, const char *key, int keylen,
							bool all_algos, RlAlgo algo);
extern int64 rl_redis_reset_all(Oid dbid);

#endif							/* RL_REDIS_INT_H */
