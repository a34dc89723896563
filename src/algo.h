/*-------------------------------------------------------------------------
 *
 * algo.h
 *		The algorithm table: one row per rate-limiting algorithm.
 *
 * A row says everything the rest of ratelimit needs to know about an
 * algorithm: its name, the code of its Redis key names, the kind of state
 * it keeps, whether it takes a burst, how its refunds add up, whether
 * Redis batching may serve it, its pure C decision and refund, the check
 * of a saved state, and its Lua decision and refund (src/lua/).  The
 * engines (the shared-memory store, Redis), the refund tracker and the
 * state file use the row; none of them names an algorithm.  Adding an
 * algorithm is one C file (algo_<name>.c), its Lua files and one row in
 * algo_table.c (docs/design.md, "A sixth algorithm").
 *
 * The algorithms are pure functions: they take a state, the time of the
 * call and its parameters, and fill in an outcome.  Nothing here takes a
 * lock, allocates memory or raises an error, so the same code serves the
 * store (under an LWLock), the fallbacks of the Redis engine, and replay.
 * A decision is deterministic: the same state, time and parameters give
 * the same outcome and state.  The normative definition is the project's
 * semantics spec; the arithmetic is exact (see docs/algorithms.md):
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

#include "datatype/timestamp.h"

#include "compat.h"

#ifndef HAVE_INT128
#error "ratelimit needs a compiler with a 128-bit integer type"
#endif

/*
 * The algorithms, in the order of the table.  The numbers are part of the
 * state file's format (persist.c): a new algorithm is added at the end.
 */
typedef enum RlAlgo
{
	RL_FIXED_WINDOW = 0,
	RL_SLIDING_WINDOW_LOG,
	RL_SLIDING_WINDOW_COUNTER,
	RL_TOKEN_BUCKET,
	RL_LEAKY_BUCKET,
	RL_CONCURRENCY,
	RL_NUM_ALGOS
} RlAlgo;

/*
 * Accepted range of "at" (Unix us, about +-36000 years) and of "per" (100
 * years).  The state file's values are held to the same ranges.
 */
#define RL_MAX_ABS_TIME		((int64) 1 << 60)
#define RL_MAX_PER			(INT64CONST(36525) * USECS_PER_DAY)

/* A time a call could have used ("at" and the clock share the range). */
static inline bool
rl_time_ok(int64 t)
{
	return t >= -RL_MAX_ABS_TIME && t <= RL_MAX_ABS_TIME;
}

/*
 * A calendar period (fixed_window only, docs/algorithms.md): windows of
 * whole local days (weeks: multiples of 7, from a Monday) or of calendar
 * months, in a time zone, from an anchor or from the calendar's own
 * origin.  All zero (months = days = 0) for a window of W microseconds
 * aligned on the epoch.  The zone is PostgreSQL's (pg_tzset's cache keeps
 * it for the life of the process); computing bounds with it is pure.
 */
typedef struct RlPeriod
{
	int32		months;			/* > 0: calendar months per window */
	int32		days;			/* > 0: local days per window */
	int64		anchor;			/* Unix us: a period starts here; or
								 * RL_NO_ANCHOR */
	const struct pg_tz *tz;		/* the zone; NULL: UTC */
} RlPeriod;

#define RL_NO_ANCHOR		PG_INT64_MIN

/* The parameters of one call, already validated. */
typedef struct RlParams
{
	int64		limit;			/* L: units per window, > 0 */
	int64		per;			/* W: window in microseconds, > 0 (for a
								 * calendar period, its nominal length) */
	int64		cost;			/* c: units consumed, >= 0 */
	int64		burst;			/* B: bucket capacity (buckets only; = L if
								 * not given) */
	RlPeriod	period;			/* calendar windows (fixed_window) */
	int64		headroom;		/* load shedding: units that must stay free
								 * after the call for it to be admitted
								 * (decided as if it cost cost + headroom,
								 * charged cost; cost + headroom is at most
								 * the capacity); 0: none (shed.c) */
} RlParams;

/* Is the window a calendar period rather than W on the epoch? */
static inline bool
rl_period_is_calendar(const RlPeriod *period)
{
	return (period->months | period->days) != 0;
}

/* Do two sets of parameters cut time into the same windows? */
static inline bool
rl_period_equal(const RlPeriod *a, const RlPeriod *b)
{
	return a->months == b->months && a->days == b->days &&
		a->anchor == b->anchor && a->tz == b->tz;
}

/* What an algorithm reports for one call. */
typedef struct RlOutcome
{
	bool		allowed;
	int64		remaining;		/* floor, never negative */
	double		retry_after;	/* seconds; 0 when allowed */
	int64		reset_at;		/* Unix microseconds, rounded up */
	double		delay;			/* seconds; leaky_bucket only */
	bool		shed;			/* denied by the headroom alone: set by the
								 * dispatcher (shed.c), not the algorithm */
} RlOutcome;

/*
 * Was a call with parameters p denied (out) by its headroom alone?  Every
 * algorithm reports as remaining the units left, floored: it would have
 * admitted the cost without the headroom exactly when they cover the cost
 * (one unit for a call of cost 0, which misses a key exactly at its
 * limit).  The dispatcher's out->shed (shed.h) and a concurrency limit's
 * refusal (store_slots.c) are both this.
 */
static inline bool
rl_outcome_shed(const RlParams *p, const RlOutcome *out)
{
	return p->headroom > 0 && !out->allowed &&
		out->remaining >= Max(p->cost, 1);
}

/*
 * Per-key states, 24 bytes each.  A new key is passed to a decision with
 * fresh = true; the contents of the state are then ignored (a log must
 * have been made empty by rl_log_init).
 */
typedef struct RlWindowState	/* RL_STATE_WINDOW */
{
	int64		start;			/* start of the current window (Unix us) */
	int64		cur;			/* units counted in the current window */
	int64		prev;			/* units counted in the previous window */
} RlWindowState;

typedef struct RlBucketState	/* RL_STATE_BUCKET */
{
	int128		scaled;			/* tokens (token) or level (leaky), times per */
	int64		per;			/* the W "scaled" is expressed in */
} RlBucketState;

/*
 * RL_STATE_LOG: a queue of (time, cost) entries kept in a chain of
 * fixed-size blocks taken from a pool the caller owns (RlChain).  Only
 * algo_log.c knows the layout of the chain.
 */
#define RL_NIL				((uint32) 0xFFFFFFFF)
#define RL_BLOCK_SIZE		64

typedef struct RlLogEntry
{
	int64		time;			/* Unix us */
	int64		cost;
} RlLogEntry;

#define RL_LOG_PER_BLOCK	((int) (RL_BLOCK_SIZE / sizeof(RlLogEntry)))

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

/*
 * RL_STATE_SLOTS: slots held at once (a concurrency limit), not units per
 * time.  A slot is taken by a transaction or a session and given back when
 * it ends (the refund of the one unit taken); backends that wait for one
 * queue in ticket order, and the engine hands a freed slot to the first
 * of them (rl_slots_grant), so a newcomer never passes a waiter (but one
 * that its priority's headroom alone holds back: store_slots.c).
 */
typedef struct RlSlotsState
{
	int64		held;			/* slots taken */
	int64		waiting;		/* backends queued for one */
	int64		tickets;		/* tickets given to waiters so far */
} RlSlotsState;

typedef union RlState
{
	RlWindowState window;
	RlBucketState bucket;
	RlLogState	log;
	RlSlotsState slots;
} RlState;

/*
 * The kinds of state; the store keeps a log's blocks in its pool.  Slots
 * are held, not spent: only rl_acquire takes them, the rate-limiting
 * functions refuse their algorithms.
 */
typedef enum RlStateKind
{
	RL_STATE_WINDOW,
	RL_STATE_BUCKET,
	RL_STATE_LOG,
	RL_STATE_SLOTS
} RlStateKind;

/*
 * The pool a log's chain lives in, lent by the caller for one call.  A
 * call needs at most one new block: when it must append to a full tail
 * and no spare was lent, the decision returns false having changed
 * nothing but expired entries, and the caller can call again with one.
 * The blocks a call emptied are handed back through freed_*, linked.
 */
typedef struct RlChain
{
	RlBlock    *blocks;			/* the pool */
	uint32	   *next;			/* chain links, parallel to blocks */
	uint32		spare;			/* in: a free block, or RL_NIL; out: RL_NIL
								 * if the call used it */
	uint32		freed_first;	/* out: blocks the call emptied, linked */
	uint32		freed_last;
	uint32		nfreed;
} RlChain;

/*
 * A saved state, as the state file holds it, to be checked before it is
 * restored: the state (a log: its sum, then the entries apart), the key's
 * latest time and its idle time.
 */
typedef struct RlStateImage
{
	RlState		state;
	int64		last;
	int64		idle_at;
	int			nlog;			/* a log's entries with a cost, oldest first */
	const RlLogEntry *log;
} RlStateImage;

/*
 * How the refunds of two calls relate, for the refund tracker (refund.c),
 * which adds up calls whose refunds move the same number:
 *	RL_GRAIN_WINDOW	 a refund depends only on the window (of W) the call's
 *					 time falls in, and takes a count down to no less
 *					 than 0 without moving the window: calls of one window
 *					 add up, and refunds of any W commute;
 *	RL_GRAIN_NONE	 a refund does not depend on the time, and is
 *					 x -> min(B, x + c) (B the burst) or max(0, x - c):
 *					 calls add up, their bounds composed;
 *	RL_GRAIN_EXACT	 a refund needs the call's exact time, and reads no
 *					 other parameter.
 * No refund reads the limit.
 */
typedef enum RlRefundGrain
{
	RL_GRAIN_WINDOW,
	RL_GRAIN_NONE,
	RL_GRAIN_EXACT
} RlRefundGrain;

/*
 * Decide one call at time t (after the clamp) on the state; "last" is the
 * latest time the key had seen before this call.  Fills every field of the
 * outcome.  Returns false only for a log that must append and was lent no
 * spare block (RlChain); the state has then changed by expiry alone.  The
 * chain is NULL for the states that have none (all but RL_STATE_LOG).
 */
typedef bool (*RlDecideFn) (RlState *s, bool fresh, int64 t, int64 last,
							const RlParams *p, RlOutcome *o, RlChain *chain);

/*
 * Charge after the fact (rl_adjust), at time t (after the clamp): p->cost
 * units are taken whatever the state holds, which may go past the limit
 * (later calls are denied until the allowance recovers), or, when p->cost
 * is negative, given back from what counts at t (never below a new key's
 * state).  Fills the outcome of a look (cost 0) at the state after.  The
 * return value and the chain as for RlDecideFn.
 */
typedef RlDecideFn RlChargeFn;

/*
 * Give back cost units consumed by a call decided at time t with p (an
 * aborted transaction, an all-or-nothing check that failed).  Only what
 * still counts is given back: a consumption whose window has passed has
 * stopped counting already.
 */
typedef void (*RlRefundFn) (RlState *s, int64 t, const RlParams *p,
							int64 cost, RlChain *chain);

/*
 * Could calls have left this saved state (the state file is not trusted)?
 * If so, also bound its idle time: lower it to the latest time at which
 * the state can still differ from a new key's, so that no saved idle time
 * keeps a key in the store longer than its state needs.  The latest time
 * is checked by the caller (its range, not in the future).
 */
typedef bool (*RlImageValidFn) (RlStateImage *img);

/*
 * Redis batching: until when a lease taken at "now" by a call with p, which
 * Redis answered with o, may admit calls.  NULL: the algorithm is never
 * batched.
 */
typedef int64 (*RlLeaseEndFn) (const RlParams *p, int64 now,
							   const RlOutcome *o);

typedef struct RlAlgoRoutine
{
	const char *name;			/* as SQL spells it */
	int			namelen;
	const char *code;			/* in Redis key names: rl:{ns:<code>:key} */
	RlStateKind state;
	bool		has_burst;		/* a capacity apart from the limit */
	RlRefundGrain refund_grain;
	RlDecideFn	decide;
	RlChargeFn	charge;			/* rl_adjust */
	RlRefundFn	refund;
	RlImageValidFn image_valid;
	RlLeaseEndFn lease_end;		/* NULL: never batched */
	const char *lua_setup;		/* Lua run before decide and refund, or "" */
	const char *lua_decide;		/* Lua: the decision (src/lua/<name>.lua) */
	const char *lua_refund;		/* Lua: the refund */
	const char *lua_charge;		/* Lua: the charge (rl_adjust) */
} RlAlgoRoutine;

extern rl_hidden const RlAlgoRoutine rl_algos[RL_NUM_ALGOS];

static inline const RlAlgoRoutine *
rl_algo(RlAlgo algo)
{
	return &rl_algos[algo];
}

/* What remaining counts against: the burst for the buckets, else the limit. */
static inline int64
rl_algo_capacity(RlAlgo algo, const RlParams *p)
{
	return rl_algos[algo].has_burst ? p->burst : p->limit;
}

/* Does the algorithm hold slots (a concurrency limit) rather than rates? */
static inline bool
rl_algo_holds(RlAlgo algo)
{
	return rl_algos[algo].state == RL_STATE_SLOTS;
}

extern bool rl_algo_parse(const char *name, int len, RlAlgo *algo);
extern const char *rl_algo_name(RlAlgo algo);
extern const char *rl_algo_list(bool burst_only);

/* algo_window.c */
extern bool rl_fixed_window(RlState *s, bool fresh, int64 t, int64 last,
							const RlParams *p, RlOutcome *o, RlChain *chain);
extern bool rl_fixed_window_charge(RlState *s, bool fresh, int64 t,
								   int64 last, const RlParams *p,
								   RlOutcome *o, RlChain *chain);
extern void rl_fixed_window_refund(RlState *s, int64 t, const RlParams *p,
								   int64 cost, RlChain *chain);
extern int64 rl_fixed_window_lease_end(const RlParams *p, int64 now,
									   const RlOutcome *o);
extern bool rl_sliding_window_counter(RlState *s, bool fresh, int64 t,
									  int64 last, const RlParams *p,
									  RlOutcome *o, RlChain *chain);
extern bool rl_sliding_window_counter_charge(RlState *s, bool fresh,
											 int64 t, int64 last,
											 const RlParams *p,
											 RlOutcome *o, RlChain *chain);
extern void rl_sliding_window_counter_refund(RlState *s, int64 t,
											 const RlParams *p, int64 cost,
											 RlChain *chain);
extern int64 rl_sliding_window_counter_lease_end(const RlParams *p,
												 int64 now,
												 const RlOutcome *o);
extern bool rl_fixed_window_image_valid(RlStateImage *img);
extern bool rl_sliding_window_counter_image_valid(RlStateImage *img);
extern void rl_window_bounds(const RlParams *p, int64 t, int64 *start,
							 int64 *end);

/* period.c: the bounds of a calendar period (pure) */
extern void rl_period_bounds(const RlPeriod *period, int64 t, int64 *start,
							 int64 *end);

/* algo_bucket.c */
extern bool rl_token_bucket(RlState *s, bool fresh, int64 t, int64 last,
							const RlParams *p, RlOutcome *o, RlChain *chain);
extern bool rl_token_bucket_charge(RlState *s, bool fresh, int64 t,
								   int64 last, const RlParams *p,
								   RlOutcome *o, RlChain *chain);
extern void rl_token_bucket_refund(RlState *s, int64 t, const RlParams *p,
								   int64 cost, RlChain *chain);
extern int64 rl_token_bucket_lease_end(const RlParams *p, int64 now,
									   const RlOutcome *o);
extern bool rl_leaky_bucket(RlState *s, bool fresh, int64 t, int64 last,
							const RlParams *p, RlOutcome *o, RlChain *chain);
extern bool rl_leaky_bucket_charge(RlState *s, bool fresh, int64 t,
								   int64 last, const RlParams *p,
								   RlOutcome *o, RlChain *chain);
extern void rl_leaky_bucket_refund(RlState *s, int64 t, const RlParams *p,
								   int64 cost, RlChain *chain);
extern bool rl_token_bucket_image_valid(RlStateImage *img);
extern bool rl_leaky_bucket_image_valid(RlStateImage *img);

/* algo_log.c: sliding_window_log, and the only code that walks a chain */
extern bool rl_sliding_window_log(RlState *s, bool fresh, int64 t,
								  int64 last, const RlParams *p,
								  RlOutcome *o, RlChain *chain);
extern bool rl_sliding_window_log_charge(RlState *s, bool fresh, int64 t,
										 int64 last, const RlParams *p,
										 RlOutcome *o, RlChain *chain);
extern void rl_sliding_window_log_refund(RlState *s, int64 t,
										 const RlParams *p, int64 cost,
										 RlChain *chain);
extern bool rl_log_image_valid(RlStateImage *img);
extern void rl_log_init(RlLogState *s);
extern bool rl_log_append(RlLogState *s, RlChain *chain, int64 t,
						  int64 cost);
extern int	rl_log_walk(const RlLogState *s, const RlChain *chain,
						RlLogEntry *out, int max);
extern int	rl_log_length(const RlLogState *s, const RlChain *chain);
extern void rl_log_release(RlLogState *s, RlChain *chain);

/* algo_slots.c: concurrency, and the queue of those waiting for a slot */
extern bool rl_concurrency(RlState *s, bool fresh, int64 t, int64 last,
						   const RlParams *p, RlOutcome *o, RlChain *chain);
extern void rl_concurrency_refund(RlState *s, int64 t, const RlParams *p,
								  int64 cost, RlChain *chain);
extern bool rl_slots_image_valid(RlStateImage *img);
extern int64 rl_slots_enqueue(RlSlotsState *s);
extern bool rl_slots_grant(RlSlotsState *s, int64 limit);
extern void rl_slots_leave(RlSlotsState *s);
extern bool rl_slots_idle(const RlSlotsState *s);

#endif							/* RL_ALGO_H */
