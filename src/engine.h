/*-------------------------------------------------------------------------
 *
 * engine.h
 *		The storage-engine interface: what a place that keeps per-key state
 *		(the shared-memory store, Redis) offers the dispatcher.
 *
 * An engine is a table of functions (RlEngine), as PostgreSQL's index
 * access methods are (IndexAmRoutine).  The dispatcher (dispatch.c) is
 * the only caller of decisions and resets, the refund tracker (refund.c)
 * of refunds, the state file (persist.c) of images and restores.  A member
 * an engine cannot offer is NULL; its caller says what that means.
 *
 * The contract every member keeps:
 *	- Arguments are checked before an engine is called (args.c); the only
 *	  errors an engine raises are its own (validate, and the administrator's
 *	  reset and reset_all when the engine cannot be reached), always before
 *	  it changed anything.
 *	- A decision is deterministic given the state, the time and the
 *	  parameters (algo.h), and time never runs backwards for a key: the
 *	  engine clamps the call's time to the key's latest.
 *	- What an engine could not decide is a status (RL_NO_ROOM,
 *	  RL_UNAVAILABLE), never an error: the dispatcher applies fail_mode.
 *	- An engine reports where it consumed in a receipt; a refund gives back
 *	  exactly what one receipt recorded, to the same incarnation of the
 *	  state only, and only what still counts there.
 *	- Locks, memory and I/O are each engine's own (store.c: LWLocks, never
 *	  allocating under them; redis_*.c: sockets, waits with a deadline that
 *	  a cancel interrupts).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_ENGINE_H
#define RL_ENGINE_H

#include "algo.h"
#include "clock.h"
#include "compat.h"

/* keys longer than this are refused (SQLSTATE 22001) */
#define RL_MAX_KEY_LEN		4096

/*
 * longest key an engine holds: a policy's name, a NUL and a key; a
 * policy's other limit (policy_limit.c): the policy's name, two NULs, the
 * limit's name, a NUL and the key; the penalty box of either (dispatch.c):
 * one NUL more after the policy's name
 */
#define RL_MAX_STORED_KEY	(2 * NAMEDATALEN + 2 + RL_MAX_KEY_LEN)

/* most limits a policy may have besides its own (rl_policy_limit) */
#define RL_MAX_LIMITS		8

/*
 * One of a policy's limits besides its own (a row of rl_policy_limit): a
 * call under the policy is admitted only if each of them admits too.
 */
typedef struct RlExtraLimit
{
	char		name[NAMEDATALEN];
	RlAlgo		algo;
	RlParams	params;			/* cost unused: the call's applies */
} RlExtraLimit;

/* most keys one all-or-nothing call may cover (each may lock a partition) */
#define RL_MAX_MULTI		32

/* a request's backend or fail_mode not set by its policy: use the setting */
#define RL_SETTING			(-1)

/*
 * What a key's override (rl_override, policy.c) says besides its limit and
 * burst, as flags of RlRequest.override: deny while a block lasts, admit
 * without counting.  The dispatcher answers these itself, before any
 * engine; a block over by the call's time leaves the key unlimited if it
 * is, decided as usual if not.
 */
#define RL_OVERRIDE_BLOCK		0x01	/* denied before blocked_until */
#define RL_OVERRIDE_UNLIMITED	0x02	/* admitted, nothing counted */

/* blocked_until of a block without an end */
#define RL_BLOCKED_FOREVER	PG_INT64_MAX

/*
 * A call's priority (load shedding, shed.c): the share of its policy's
 * reserve it must leave free.  A call without one is never shed.
 */
#define RL_PRIORITY_NONE		0
#define RL_PRIORITY_CRITICAL	1	/* none of the reserve */
#define RL_PRIORITY_NORMAL		2	/* half of it */
#define RL_PRIORITY_SHEDDABLE	3	/* all of it */

/* One rate-limit request, checked. */
typedef struct RlRequest
{
	RlAlgo		algo;
	Oid			dbid;
	const char *key;
	int			keylen;
	RlParams	params;
	int64		at;				/* Unix microseconds, or RL_NO_TIME */
	int			backend;		/* RlBackend, or RL_SETTING */
	int			fail_mode;		/* RlFailMode, or RL_SETTING */
	bool		shadow;			/* dry run: decide and count, always allow */
	bool		track;			/* give back what it consumed if its
								 * (sub)transaction aborts (refund.c) */
	bool		durable;		/* a durable policy's: the store logs it in
								 * WAL (store_wal.c) */
	const char *policy;			/* the policy's name, or NULL */
	uint8		override;		/* RL_OVERRIDE_* of the key's override */
	int64		blocked_until;	/* RL_OVERRIDE_BLOCK: Unix us, or
								 * RL_BLOCKED_FOREVER */
	int64		block_duration; /* a policy's penalty box: after a denial,
								 * deny for this long (us); 0: none */
	int			nlimits;		/* the policy's other limits (the policy
								 * cache's), decided with this one */
	const RlExtraLimit *limits;
	uint8		priority;		/* RL_PRIORITY_* */
	int32		reserve;		/* the share of each limit's capacity kept
								 * for higher priorities, in millionths */
	struct RlStatsHandle *stats;	/* where its decisions are counted, found
									 * once (a policy's); NULL: by identity */
} RlRequest;

static inline void
rl_request_init(RlRequest *req)
{
	memset(req, 0, sizeof(*req));
	req->at = RL_NO_TIME;
	req->backend = RL_SETTING;
	req->fail_mode = RL_SETTING;
}

/*
 * The time a request is decided at: its "at" if it gave one, else now
 * (the real clock, read by the caller).
 */
static inline int64
rl_request_time(const RlRequest *req, int64 now)
{
	return req->at == RL_NO_TIME ? now : req->at;
}

/* A request naming the state of (database, algorithm, key), nothing more. */
static inline void
rl_request_for_key(RlRequest *req, Oid dbid, RlAlgo algo, const char *key,
				   int keylen)
{
	rl_request_init(req);
	req->dbid = dbid;
	req->algo = algo;
	req->key = key;
	req->keylen = keylen;
}

/* Outcome of an engine that may be unable to decide */
typedef enum RlStatus
{
	RL_OK = 0,					/* decided */
	RL_NO_ROOM,					/* store full: the key cannot be tracked */
	RL_UNAVAILABLE				/* remote engine down, slow or failing */
} RlStatus;

/* The engines, as receipts name them. */
typedef enum RlEngineId
{
	RL_ENGINE_NONE = 0,			/* a receipt of nothing consumed */
	RL_ENGINE_STORE,
	RL_ENGINE_REDIS,
	RL_NUM_ENGINES
} RlEngineId;

/* what an engine says of a receipt, for the refund tracker */
#define RL_RECEIPT_TIMELESS	0x01	/* its refund does not depend on the
									 * time (a Redis lease's); its
									 * incarnation numbers the key's lease,
									 * and a greater one replaces the
									 * smaller ones for good */
#define RL_RECEIPT_REMOTE	0x02	/* its refund is a network round trip:
									 * at an abort it is queued and sent
									 * after the transaction (refund.c) */
#define RL_RECEIPT_ENTRY	0x04	/* entry names the state itself (the
									 * store's entry), which a refund
									 * reaches without the key: the refund
									 * tracker keeps no key for it (#9) */

/*
 * Where a call consumed, and with what: what a refund needs.  Filled by the
 * engine that consumed (engine RL_ENGINE_NONE: nothing was consumed).
 */
typedef struct RlReceipt
{
	uint8		engine;			/* RlEngineId */
	uint8		flags;			/* RL_RECEIPT_* */
	RlParams	params;			/* as consumed with; cost: the units */
	int64		time;			/* the consumption's time (Unix us) */
	uint64		incarnation;	/* the state's incarnation it consumed from */
	uint32		entry;			/* with RL_RECEIPT_ENTRY: the store's entry
								 * (its index + 1), which with the
								 * incarnation names one state */
} RlReceipt;

/* an entry's identity and times, as a scan reports it */
typedef struct RlKeyImage
{
	Oid			dbid;
	RlAlgo		algo;
	int			keylen;
	char		key[RL_MAX_STORED_KEY];
	int64		last;			/* latest time the key has seen */
	int64		idle_at;		/* from then on its state is a new key's */
	RlState		state;			/* the algorithm's state (a log's chain is
								 * not the caller's to walk) */
	int64		held_since;		/* slots: since when the longest-held one
								 * is held (Unix us), or RL_NO_TIME */
} RlKeyImage;

/* a whole entry, for saving and restoring */
typedef struct RlEntryImage
{
	Oid			dbid;
	RlAlgo		algo;
	int			keylen;
	const char *key;
	Oid			owner_dbid;		/* its owner (the store's isolation) */
	Oid			owner_roleid;
	RlStateImage saved;			/* the state, its times, a log's entries */
} RlEntryImage;

/*
 * An owner of the store's entries: the (database, role) that created them,
 * with what it holds.  A database's overflow owner has roleid InvalidOid;
 * the store-wide one has both InvalidOid.
 */
typedef struct RlOwnerImage
{
	Oid			dbid;
	Oid			roleid;
	int64		keys;			/* entries */
	int64		pool_blocks;
	int64		refused;		/* its calls refused for want of room */
	int64		role_keys;		/* what its role holds, in every database */
	int64		role_pool_blocks;
	int64		database_keys;	/* what its database holds */
	int64		database_pool_blocks;
} RlOwnerImage;

/*
 * What a call asks of an engine's slots (a concurrency limit): take one
 * now if free (TRY), or else join the queue for one (QUEUE); once queued,
 * whether the slot has come (POLL), or leave the queue (LEAVE).
 */
typedef enum RlSlotOp
{
	RL_SLOT_TRY,
	RL_SLOT_QUEUE,
	RL_SLOT_POLL,
	RL_SLOT_LEAVE
} RlSlotOp;

typedef enum RlSlotResult
{
	RL_SLOT_TAKEN,				/* the caller holds a slot: see the receipt */
	RL_SLOT_BUSY,				/* none free (TRY), or left the queue */
	RL_SLOT_SHED,				/* as BUSY, held back by the priority's
								 * headroom alone: a slot was free under
								 * the limit (shed.c) */
	RL_SLOT_QUEUED,				/* in the queue: wait for the latch, poll */
	RL_SLOT_GONE,				/* the key's state was dropped (a reset)
								 * while queued: no longer in the queue */
	RL_SLOT_NO_ROOM,			/* the key cannot be tracked */
	RL_SLOT_UNAVAILABLE			/* a remote engine did not answer */
} RlSlotResult;

/* What a restore made of an image */
typedef enum RlRestore
{
	RL_RESTORED,
	RL_RESTORE_NO_ROOM,			/* no entry or pool block left for it */
	RL_RESTORE_DUPLICATE		/* the key is in the store already */
} RlRestore;

/*
 * A figure an engine reports (rl_store_info, rl_redis_info): the SQL
 * functions return them by column name.
 */
typedef enum RlInfoType
{
	RL_INFO_BIGINT,
	RL_INFO_INTEGER,
	RL_INFO_BOOL,
	RL_INFO_TIME,				/* Unix us, as a timestamptz */
	RL_INFO_TEXT
} RlInfoType;

typedef struct RlInfoItem
{
	const char *name;
	RlInfoType	type;
	bool		isnull;
	int64		value;
	const char *text;			/* RL_INFO_TEXT, palloc'd */
} RlInfoItem;

#define RL_MAX_INFO_ITEMS	32

typedef struct RlEngine
{
	const char *name;

	/*
	 * Refuse, with an ERROR, a request the engine cannot decide exactly
	 * (Redis: an "at" before 1898).  Called before anything is consumed
	 * anywhere.  NULL: every checked request is fine.
	 */
	void		(*validate) (const RlRequest *req);

	/*
	 * Decide one request: now is the real clock, read before any lock; the
	 * call's time is "at" if given, else now (or the engine's own clock).
	 * Fills every field of *out and, when the call consumed (allowed, cost
	 * above zero, recorded), *receipt; otherwise receipt->engine is
	 * RL_ENGINE_NONE.  RL_NO_ROOM or RL_UNAVAILABLE: nothing consumed,
	 * *out undefined.
	 */
	RlStatus	(*decide) (const RlRequest *req, int64 now, RlOutcome *out,
						   RlReceipt *receipt);

	/*
	 * Decide n requests (at most RL_MAX_MULTI) all or nothing: every one
	 * consumes, or none does; no other call sees a state in between.  A
	 * request admits if allowed or a shadow, or, when statuses[i] is
	 * RL_NO_ROOM, if fail_open[i].  When one does not admit, the others
	 * report a look (cost 0) at their state, and have no receipt.  Returns
	 * RL_UNAVAILABLE when nothing could be decided (nothing consumed).
	 */
	RlStatus	(*decide_all) (const RlRequest *reqs, int n, int64 now,
							   const bool *fail_open, RlOutcome *outs,
							   RlReceipt *receipts, RlStatus *statuses);

	/*
	 * Charge req->params.cost units after the fact (rl_adjust), whatever
	 * the state holds (past the limit if so), or give them back when it is
	 * below zero: the algorithm table's charge.  Not a decision: no
	 * receipt, nothing to refund.  Fills *out with a look (cost 0) at the
	 * state after, at the call's time.  RL_NO_ROOM or RL_UNAVAILABLE:
	 * nothing recorded, *out undefined.
	 */
	RlStatus	(*charge) (const RlRequest *req, int64 now, RlOutcome *out);

	/*
	 * What a call of cost 0 would report now, changing nothing, not even the
	 * key's latest time.  False if the key has no state.  NULL: the engine
	 * cannot look without writing (Redis).
	 */
	bool		(*peek) (const RlRequest *req, int64 now, RlOutcome *out);

	/*
	 * Give back what one receipt of this engine recorded; the request names
	 * the state (database, algorithm, key), the receipt has the parameters.
	 * Returns false if the engine could not be reached (the units stay
	 * consumed).  The store's takes a partition lock and never raises; a
	 * REMOTE receipt's does network I/O and is never called inside an abort
	 * (refund.c queues it), so a cancel may interrupt it.
	 */
	bool		(*refund) (const RlRequest *req, const RlReceipt *receipt);

	/*
	 * Give back what n REMOTE receipts of this engine recorded (reqs[i]
	 * names the state of receipts[i]): the refunds aborts queued, sent
	 * after their transaction, together, within one deadline for all of
	 * them.  What it could not send it drops and counts in the engine's
	 * figures.  A cancel or statement_timeout may interrupt it (an ERROR:
	 * what was not sent is dropped, and counted); nothing is sent twice.
	 * NULL: the engine has no REMOTE receipts.
	 */
	void		(*refund_queued) (const RlRequest *reqs,
								  const RlReceipt *receipts, int n);

	/*
	 * The refund tracker queued refunds of REMOTE receipts of this engine
	 * (at an abort: no allocation, no error, no I/O), and dropped some for
	 * want of room in its queue or at the session's exit: for the engine's
	 * figures.  NULL: the engine has no REMOTE receipts.
	 */
	void		(*refunds_noted) (int64 queued, int64 dropped);

	/*
	 * Drop the key's state for one algorithm or all of them; the states
	 * of every key of a database (InvalidOid: of all).  Return how many
	 * states went.  An ERROR if the engine cannot be reached.
	 */
	int64		(*reset) (Oid dbid, const char *key, int keylen,
						  bool all_algos, RlAlgo algo);
	int64		(*reset_all) (Oid dbid);

	/* Fill items with the engine's figures; returns how many. */
	int			(*info) (RlInfoItem *items);

	/*
	 * The next key of database dbid (InvalidOid: any) holding state, from
	 * *cursor on (0 to start); false when there is none left.  Each key is
	 * read consistently, the whole is not a snapshot.  NULL: not offered.
	 */
	bool		(*scan) (Oid dbid, uint64 *cursor, RlKeyImage *img);

	/*
	 * The state file (persist.c, postmaster only, no backend running):
	 * call fn with each entry's image; put an image back.  NULL: the
	 * engine keeps its state elsewhere.
	 */
	void		(*images) (void (*fn) (const RlEntryImage *img, void *arg),
						   void *arg);
	RlRestore	(*restore) (const RlEntryImage *img);

	/*
	 * Slots (an algorithm whose state is RL_STATE_SLOTS).  acquire: see
	 * RlSlotOp; a backend queues for one key at a time, and is woken (its
	 * latch set) when its turn comes or the key is reset; it never waits
	 * inside the engine, but for a POLL that blocks (poll_blocks).  TAKEN
	 * fills the receipt: release gives that slot
	 * back (to the same incarnation only) and hands it to the first waiter.
	 * release never raises (it is called inside aborts and at exit; Redis's
	 * does I/O only where a cancel may interrupt it).  Redis keeps slots
	 * as leases and its queue in Redis (redis_lease.c).  NULL: the engine
	 * keeps no slots.
	 */
	RlSlotResult (*acquire) (const RlRequest *req, RlSlotOp op, int64 now,
							 RlReceipt *receipt);
	void		(*release) (const RlRequest *req, const RlReceipt *receipt);

	/*
	 * acquire's POLL waits itself, briefly, for a wake-up (Redis: BLPOP),
	 * instead of the caller on its latch.
	 */
	bool		poll_blocks;
} RlEngine;

/* the engines by id (engine_table.c) */
extern rl_hidden const RlEngine *const rl_engines[RL_NUM_ENGINES];

static inline const RlEngine *
rl_engine(RlEngineId id)
{
	Assert(id > RL_ENGINE_NONE && id < RL_NUM_ENGINES);
	return rl_engines[id];
}

#endif							/* RL_ENGINE_H */
