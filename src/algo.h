/*-------------------------------------------------------------------------
 *
 * algo.h
 *		The five rate-limiting algorithms as pure functions.
 *
 * Each algorithm takes its small state, the time of the call and the
 * parameters, and fills in a decision.  Nothing here takes a lock,
 * allocates memory or raises an error, so the same code serves the
 * shared-memory store, the local fallback of the Redis backend and unit
 * tests.  The normative definition is the project's semantics spec; the
 * arithmetic is exact (see docs/algorithms.md):
 *
 *	- times are microseconds since the Unix epoch (int64);
 *	- bucket contents are kept scaled by the window length in microseconds,
 *	  so refilling and draining at L units per W is integer arithmetic;
 *	- retry_after and delay are exact fractions of microseconds converted
 *	  to seconds once, reset_at is rounded up to the next microsecond.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_ALGO_H
#define RL_ALGO_H

#ifndef HAVE_INT128
#error "ratelimit needs a compiler with a 128-bit integer type"
#endif

typedef enum RlAlgo
{
	RL_FIXED_WINDOW = 0,
	RL_SLIDING_WINDOW_LOG,
	RL_SLIDING_WINDOW_COUNTER,
	RL_TOKEN_BUCKET,
	RL_LEAKY_BUCKET,
	RL_NUM_ALGOS
} RlAlgo;

/* The parameters of one call, already validated. */
typedef struct RlParams
{
	int64		limit;			/* L: units per window, > 0 */
	int64		per;			/* W: window in microseconds, > 0 */
	int64		cost;			/* c: units consumed, >= 0 */
	int64		burst;			/* B: bucket capacity (buckets only; = L if
								 * not given) */
} RlParams;

/* What one call decides and reports. */
typedef struct RlDecision
{
	bool		allowed;
	int64		remaining;		/* floor, never negative */
	double		retry_after;	/* seconds; 0 when allowed */
	int64		reset_at;		/* Unix microseconds, rounded up */
	double		delay;			/* seconds; leaky_bucket only */
	/* where the call consumed, for a refund (set by the backends): */
	int64		time;			/* the call's time after the clamp (Unix us) */
	uint64		incarnation;	/* the state's incarnation the call consumed
								 * from (a refund applies only to it) */
	bool		stored;			/* recorded in the shared-memory store */
	bool		remote;			/* recorded in Redis by an exact decision */
	bool		leased;			/* spent from this backend's Redis lease */
	bool		prechecked;		/* recorded in the store by hybrid's
								 * pre-check, at precheck_time */
	int64		precheck_time;
	uint64		precheck_incarnation;	/* the pre-check's, likewise */
	/* set by dispatch.c: */
	bool		failed;			/* decided by fail_mode */
	bool		shadowed;		/* denied, but allowed as a shadow */
} RlDecision;

/*
 * Per-key state of the O(1) algorithms, 24 bytes each.  A new key is passed
 * with fresh = true; the contents of the struct are then ignored.
 */
typedef struct RlWindowState	/* fixed_window, sliding_window_counter */
{
	int64		start;			/* start of the current window (Unix us) */
	int64		cur;			/* units counted in the current window */
	int64		prev;			/* units counted in the previous window */
} RlWindowState;

typedef struct RlBucketState	/* token_bucket, leaky_bucket */
{
	int128		scaled;			/* tokens (token) or level (leaky), times per */
	int64		per;			/* the W "scaled" is expressed in */
} RlBucketState;

/*
 * sliding_window_log keeps its entries in a chain of fixed-size blocks
 * taken from a pool the caller owns.  A call needs at most one new block:
 * when it must append to a full tail and no "spare" was lent, it returns
 * false having changed nothing but expired entries, and the caller can
 * call again with a spare.  The blocks a call emptied are handed back.
 */
#define RL_NIL				((uint32) 0xFFFFFFFF)
#define RL_BLOCK_SIZE		64
#define RL_LOG_PER_BLOCK	((int) (RL_BLOCK_SIZE / sizeof(RlLogEntry)))

typedef struct RlLogEntry
{
	int64		time;			/* Unix us */
	int64		cost;
} RlLogEntry;

typedef union RlBlock
{
	RlLogEntry	entries[RL_LOG_PER_BLOCK];
	char		bytes[RL_BLOCK_SIZE];
} RlBlock;

typedef struct RlLogState
{
	int64		sum;			/* total cost of the stored entries */
	uint32		head;			/* block holding the oldest entry */
	uint32		tail;			/* block holding the newest entry */
	uint16		head_pos;		/* index of the oldest entry in head */
	uint16		tail_len;		/* entries used in tail */
	uint32		nblocks;		/* blocks in the chain */
} RlLogState;

typedef struct RlLogMemory
{
	RlBlock    *blocks;			/* the pool */
	uint32	   *next;			/* chain links, parallel to blocks */
	uint32		spare;			/* in: a free block, or RL_NIL; out: RL_NIL
								 * if the call used it */
	uint32		freed_first;	/* out: blocks the call emptied, linked */
	uint32		freed_last;
	uint32		nfreed;
} RlLogMemory;

extern bool rl_algo_parse(const char *name, int len, RlAlgo *algo);
extern const char *rl_algo_name(RlAlgo algo);
extern bool rl_algo_has_burst(RlAlgo algo);

extern void rl_fixed_window(RlWindowState *s, bool fresh, int64 t,
							const RlParams *p, RlDecision *d);
extern void rl_sliding_window_counter(RlWindowState *s, bool fresh, int64 t,
									  const RlParams *p, RlDecision *d);
extern void rl_token_bucket(RlBucketState *s, bool fresh, int64 t,
							int64 last, const RlParams *p, RlDecision *d);
extern void rl_leaky_bucket(RlBucketState *s, bool fresh, int64 t,
							int64 last, const RlParams *p, RlDecision *d);

/*
 * Give back cost units consumed at time t (a transaction that aborted, an
 * all-or-nothing check that failed).  Only what still counts is given
 * back: a consumption whose window has passed already stopped counting.
 */
extern void rl_fixed_window_refund(RlWindowState *s, int64 t,
								   const RlParams *p, int64 cost);
extern void rl_sliding_window_counter_refund(RlWindowState *s, int64 t,
											 const RlParams *p, int64 cost);
extern void rl_token_bucket_refund(RlBucketState *s, const RlParams *p,
								   int64 cost);
extern void rl_leaky_bucket_refund(RlBucketState *s, const RlParams *p,
								   int64 cost);
extern void rl_log_refund(RlLogState *s, RlLogMemory *m, int64 t,
						  int64 cost);

extern void rl_log_init(RlLogState *s);
extern bool rl_sliding_window_log(RlLogState *s, RlLogMemory *m, int64 t,
								  const RlParams *p, RlDecision *d);

#endif							/* RL_ALGO_H */
