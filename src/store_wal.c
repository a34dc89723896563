/*-------------------------------------------------------------------------
 *
 * store_wal.c
 *		Durable keys: the store's entries of durable policies, kept in
 *		PostgreSQL's write-ahead log through a custom resource manager, so
 *		that committed consumption survives a crash and reaches standbys.
 *
 * What is logged (records of resource manager rl_rmgr_id, replayed by
 * rl_wal_redo in the startup process: crash recovery, standbys, PITR):
 *	IMAGE	 a durable key's whole state (identity, owner, state, times):
 *			 at pre-commit, once per transaction and key it changed; after
 *			 a refund (a rolled-back consumption must not come back); by
 *			 the sweep.  Redo overwrites, never decides: replay needs no
 *			 algorithm code, so builds with other rounding replay alike.
 *	DROP	 a durable key reset (rl_reset, rl_reset_all).
 *	SWEPT	 a sweep for redo pointer R is complete: every durable key live
 *			 then has an image at or after R; redo drops the others.
 * Every record is inserted while the key's partition lock is held, so WAL
 * order is the order of the changes of each key.  That is the one place
 * where the store's "no I/O under an LWLock" bends: XLogInsert may write a
 * WAL buffer out, as it may under a buffer's content lock.
 *
 * Checkpoints.  Recovery starts at the last checkpoint's redo pointer R:
 * a key idle since before R must have an image after R.  Extensions get
 * no checkpoint hook, so the sweeper (one background worker) holds every
 * checkpoint back with DELAY_CHKPT_COMPLETE until it has logged an image
 * of every durable key, then SWEPT(R): a
 * checkpoint that collected the sweeper's virtual transaction id waits
 * until that id stops delaying it.  The sweeper swaps its id for a new one
 * (keeping the flag raised) only while holding ProcArrayLock exclusively
 * and after reading the redo pointer under it: a checkpoint collects ids
 * under ProcArrayLock after publishing its redo pointer, so either it
 * collected the old id and the sweeper saw its R (and swapped only once R
 * was swept), or it collects the new one and waits for a later swap.
 * Durable calls are refused until the sweeper holds its flag.
 *
 * Shutdown-type checkpoints (end of crash recovery, clean shutdown) allow
 * no WAL between their redo pointer and their record: they are covered by
 * the durable file, pg_stat/ratelimit.durable, holding every durable key
 * and the LSN up to which it has every record of ours.  It is written at
 * the end of redo (rm_cleanup, before the end-of-recovery checkpoint), by
 * the sweeper when it stops (after refusing further records, before the
 * shutdown checkpoint) and by the postmaster after a clean shutdown; it is
 * loaded when the store is created, whatever the shutdown was, and redo
 * skips the records it already holds.  A stale file is harmless: a later
 * swept checkpoint re-images every live key after its R and SWEPT drops
 * the keys the file has and that are gone.
 *
 * Locking: a durable entry changes under its partition lock, as any;
 * durable_lock (spinlock) guards the sweeper's fields of the store header.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "store_int.h"

/* what a transaction changed: entry index and incarnation */
typedef struct RlTouched
{
	uint32		idx;			/* hash key */
	uint32		incarnation;
} RlTouched;

enum
{
	RL_COMMIT_FLUSH,
	RL_COMMIT_ASYNC
};

static const struct config_enum_entry rl_durable_commit_options[] = {
	{"flush", RL_COMMIT_FLUSH, false},
	{"async", RL_COMMIT_ASYNC, false},
	{NULL, 0, false}
};

bool		rl_durable = false;
int			rl_durable_commit = RL_COMMIT_FLUSH;

/*
 * What the transaction changed: the first few keys in an array (most
 * transactions touch one or two), then in a hash table.
 */
#define RL_TOUCHED_FEW		8
static RlTouched touched_few[RL_TOUCHED_FEW];
static int	ntouched = 0;		/* in touched_few */
static HTAB *touched = NULL;	/* the rest, in TopTransactionContext */
static XLogRecPtr xact_end = InvalidXLogRecPtr; /* the transaction's other
												 * records (resets) */

/* ---- logging (the entry's partition lock held exclusively) ---- */

/*
 * May a backend log durable records now?  Not in recovery (the primary's
 * records arrive by redo), nor while the sweeper is not holding
 * checkpoints back (before it starts, after it stopped: the file then has
 * the state).
 */
static bool
log_allowed(void)
{
	bool		ok;

	if (RecoveryInProgress())
		return false;
	SpinLockAcquire(&rl_store->durable_lock);
	ok = rl_store->durable_armed && !rl_store->durable_stopping;
	SpinLockRelease(&rl_store->durable_lock);
	return ok;
}

/*
 * Log a durable entry's image, if durable records may be written and the
 * image buffer has room for it; the partition lock is held exclusively.
 * Returns the record's end, or InvalidXLogRecPtr.
 */
static XLogRecPtr
image_log_if_allowed(RlEntry *e)
{
	if (!(e->flags & RL_ENTRY_DURABLE) || !log_allowed() ||
		rl_durable_image_short(e) > 0)
		return InvalidXLogRecPtr;
	return rl_durable_image_log(e);
}

/*
 * Log a durable entry's image (after a refund); partition lock held.  The
 * record's end is kept: an abort flushes it (wal_xact_callback).  A log
 * longer than the image buffer is not imaged here (the buffer grows only
 * with no lock held): the key is one the transaction changed, imaged at
 * its end.
 */
void
rl_store_wal_image(RlEntry *e)
{
	XLogRecPtr	end = image_log_if_allowed(e);

	if (end > xact_end)
		xact_end = end;
}

/* Log that a durable entry is dropped (a reset); partition lock held. */
void
rl_store_wal_drop(RlEntry *e)
{
	XLogRecPtr	end;

	if (!(e->flags & RL_ENTRY_DURABLE) || !log_allowed())
		return;
	end = rl_durable_drop_log(e);
	if (end > xact_end)
		xact_end = end;
}

/* ---- transactions ---- */

/* Log the image of one key the transaction changed, if still there. */
static XLogRecPtr
touched_image(const RlTouched *t)
{
	int			partno = (int) (t->idx / rl_store->per_part);
	RlEntry    *e = &rl_entries[t->idx];
	XLogRecPtr	end = InvalidXLogRecPtr;
	int			grow = 0;

	do
	{
		/* a log longer than the image buffer: grown with no lock held */
		rl_durable_image_grow(grow);
		rl_part_lock(partno, LW_EXCLUSIVE);
		grow = 0;
		if ((e->flags & RL_ENTRY_USED) && e->incarnation == t->incarnation &&
			(grow = rl_durable_image_short(e)) == 0)
			end = image_log_if_allowed(e);
		rl_part_unlock(partno);
	} while (grow > 0);
	return end;
}

/*
 * Log an image of every durable key the transaction changed, each under
 * its partition lock; returns the end of the last record.
 */
static XLogRecPtr
touched_log(void)
{
	XLogRecPtr	end = InvalidXLogRecPtr;
	XLogRecPtr	rec_end;
	int			i;

	for (i = 0; i < ntouched; i++)
		if ((rec_end = touched_image(&touched_few[i])) > end)
			end = rec_end;
	if (touched != NULL)
	{
		HASH_SEQ_STATUS seq;
		RlTouched  *t;

		hash_seq_init(&seq, touched);
		while ((t = hash_seq_search(&seq)) != NULL)
			if ((rec_end = touched_image(t)) > end)
				end = rec_end;
	}
	return end;
}

/*
 * At pre-commit, the images of the durable keys the transaction changed:
 * they precede its commit record, so a transaction with an XID has them
 * flushed with its commit (and waits for synchronous standbys with it).
 * One without an XID writes no commit record: with durable_commit = flush
 * its images (and resets) are flushed here.  At an abort the images are
 * logged too: a consumption that is not given back (direct calls with
 * ratelimit.refund_on_rollback off) stays in memory, and stays after a
 * crash; with durable_commit = flush they are flushed, with the refunds'
 * images.
 */
static void
wal_xact_callback(XactEvent event, void *arg)
{
	XLogRecPtr	end = xact_end;
	XLogRecPtr	images;

	if (ntouched == 0 && end == InvalidXLogRecPtr)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			/*
			 * The sweeper stopped since the call (shutdown, or terminated
			 * by hand): the images cannot be logged, so the transaction
			 * must not commit (its consumption would not survive a crash).
			 */
			if (ntouched > 0 && rl_durable && !RecoveryInProgress() &&
				!log_allowed())
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("durable policies are not available yet"),
						 errdetail("The ratelimit sweeper stopped before this transaction could log its durable keys.")));
			images = touched_log();
			if (images > end)
				end = images;
			if (end != InvalidXLogRecPtr &&
				rl_durable_commit == RL_COMMIT_FLUSH &&
				!TransactionIdIsValid(GetTopTransactionIdIfAny()))
				XLogFlush(end);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			/*
			 * The refunds (refund.c's callback runs before this one: it is
			 * registered later, in the backend) and the images of what
			 * stays.  Flushed: a concurrent transaction's commit may have
			 * flushed an image holding this one's consumption, which must
			 * not survive a crash once the rollback returned.
			 */
			images = touched_log();
			if (images > end)
				end = images;
			if (end != InvalidXLogRecPtr &&
				rl_durable_commit == RL_COMMIT_FLUSH)
				XLogFlush(end);
			break;
		default:
			break;
	}
	ntouched = 0;
	touched = NULL;
	xact_end = InvalidXLogRecPtr;
}

/*
 * Remember the durable entries a call changed, for their images at
 * pre-commit (no lock held: this allocates).
 */
void
rl_store_wal_note(const RlCall *call)
{
	int			i;
	int			j;

	for (i = 0; i < call->ndurable; i++)
	{
		RlTouched  *t = NULL;

		for (j = 0; j < ntouched && t == NULL; j++)
			if (touched_few[j].idx == call->durable[i])
				t = &touched_few[j];
		if (t == NULL && ntouched < RL_TOUCHED_FEW)
			t = &touched_few[ntouched++];
		else if (t == NULL)
		{
			if (touched == NULL)
			{
				HASHCTL		ctl;

				memset(&ctl, 0, sizeof(ctl));
				ctl.keysize = sizeof(uint32);
				ctl.entrysize = sizeof(RlTouched);
				ctl.hcxt = TopTransactionContext;
				touched = hash_create("ratelimit durable keys", 64, &ctl,
									  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
			}
			t = hash_search(touched, &call->durable[i], HASH_ENTER, NULL);
		}
		t->idx = call->durable[i];
		t->incarnation = call->durable_inc[i];
	}
}

/*
 * engine validate: refuse a durable request the store cannot make
 * durable, before anything is consumed.
 */
void
rl_store_wal_validate(const RlRequest *req)
{
	if (!req->durable)
		return;
	if (req->params.cost == 0)
		return;					/* a look: nothing to log */
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot consume from a durable policy during recovery"),
				 errdetail("A standby replays the primary's durable state; a call with cost 0 reads it.")));
	if (!rl_durable)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("durable policies need ratelimit.durable"),
				 errhint("Set ratelimit.durable = on and restart the server.")));
	if (!log_allowed())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("durable policies are not available yet"),
				 errdetail("The ratelimit sweeper is not running: the server is starting, stopping or was just promoted."),
				 errhint("Try again in a moment.")));
}

/* ---- redo ---- */

/* Drop a durable key (redo of DROP). */
static void
drop_apply(const RlWalDrop *rec, const char *key)
{
	RlSlot		slot = rl_store_slot(rec->dbid, (RlAlgo) rec->algo, key,
									 rec->keylen);
	RlEntry    *e;

	rl_part_lock(slot.partno, LW_EXCLUSIVE);
	e = rl_store_find(slot, rec->dbid, (RlAlgo) rec->algo, key, rec->keylen);
	if (e != NULL)
		rl_store_remove(slot.partno, e);
	rl_part_unlock(slot.partno);
}

/*
 * Redo of SWEPT(R): the primary imaged every durable key live then, after
 * R.  A durable key with no image replayed since the previous SWEPT (or
 * the start of redo) was dropped: a reset the durable file predates, whose
 * DROP precedes the redo start.  The others start the next round unseen.
 */
static void
swept_apply(void)
{
	int			partno;

	for (partno = 0; partno < rl_store->nparts; partno++)
	{
		uint32		base = (uint32) partno * rl_store->per_part;
		uint32		j;

		rl_part_lock(partno, LW_EXCLUSIVE);
		for (j = 0; j < rl_store->per_part; j++)
		{
			RlEntry    *e = &rl_entries[base + j];

			if ((e->flags & (RL_ENTRY_DURABLE | RL_ENTRY_SEEN)) ==
				RL_ENTRY_DURABLE)
				rl_store_remove(partno, e);
			else
				e->flags &= ~RL_ENTRY_SEEN;
		}
		rl_part_unlock(partno);
	}
}

/*
 * A record's body, checked: its format, and that it holds its key and
 * tail bytes more (a log's entries).
 */
static const char *
record_key(XLogReaderState *record, Size head, int keylen, Size tail,
		   uint8 format)
{
	if (format > RL_WAL_FORMAT)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ratelimit WAL record of format %u, this build reads up to %u",
						format, RL_WAL_FORMAT),
				 errhint("Upgrade ratelimit on this server (a standby before its primary).")));
	if (XLogRecGetDataLen(record) != head + keylen + tail)
		elog(PANIC, "ratelimit WAL record of %u bytes, expected %zu",
			 (unsigned) XLogRecGetDataLen(record), head + keylen + tail);
	return XLogRecGetData(record) + head;
}

/*
 * rm_redo: apply one of our records, unless the durable file loaded at
 * start has it already.
 */
static void
rl_wal_redo(XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;

	if (record->EndRecPtr <= rl_store->durable_file_end)
		return;
	switch (info)
	{
		case XLOG_RL_IMAGE:
			{
				RlWalImage	rec;
				const char *key;

				memcpy(&rec, XLogRecGetData(record), sizeof(rec));
				key = record_key(record, sizeof(rec), rec.keylen,
								 (Size) rl_durable_image_nlog(&rec) *
								 sizeof(RlLogEntry), rec.format);
				if (!rl_durable_image_apply(&rec, key, key + rec.keylen, true))
					ereport(WARNING,
							(errcode(ERRCODE_DATA_CORRUPTED),
							 errmsg("ratelimit: the durable key image at %X/%X is not one a call could have made",
									LSN_FORMAT_ARGS(record->ReadRecPtr)),
							 errdetail("Its state, times or algorithm are out of range for this build of ratelimit; the key keeps the state it had.")));
				break;
			}
		case XLOG_RL_DROP:
			{
				RlWalDrop	rec;
				const char *key;

				memcpy(&rec, XLogRecGetData(record), sizeof(rec));
				key = record_key(record, sizeof(rec), rec.keylen, 0,
								 rec.format);
				drop_apply(&rec, key);
				break;
			}
		case XLOG_RL_SWEPT:
			{
				RlWalSwept	rec;

				memcpy(&rec, XLogRecGetData(record), sizeof(rec));
				swept_apply();
				SpinLockAcquire(&rl_store->durable_lock);
				if (rec.redo > rl_store->durable_covered)
					rl_store->durable_covered = rec.redo;
				SpinLockRelease(&rl_store->durable_lock);
				break;
			}
		default:
			elog(PANIC, "ratelimit WAL record of unknown type %u", info);
	}
}

/*
 * rm_cleanup, at the end of redo (crash recovery, promotion, PITR), before
 * the end-of-recovery checkpoint that no WAL may follow: the file holds
 * the state replayed.
 */
static void
rl_wal_cleanup(void)
{
	rl_durable_file_write(GetXLogReplayRecPtr(NULL), "end of recovery");
}

static RmgrData rl_rmgr = {
	.rm_name = RL_RMGR_NAME,
	.rm_redo = rl_wal_redo,
	.rm_desc = rl_durable_desc,
	.rm_identify = rl_durable_identify,
	.rm_startup = NULL,
	.rm_cleanup = rl_wal_cleanup,
	.rm_mask = NULL,
	.rm_decode = NULL,
};

/* ---- start ---- */

/*
 * From _PG_init: the settings, the resource manager (always: a standby
 * replays whatever its primary logs), and the sweeper when durable keys
 * are enabled.
 */
void
rl_store_wal_init(void)
{
	BackgroundWorker worker;

	DefineCustomBoolVariable("ratelimit.durable",
							 "Enables durable policies: their keys are logged in WAL.",
							 "Starts the sweeper, a background worker that holds each checkpoint until every durable key is logged after its redo point.",
							 &rl_durable,
							 false,
							 PGC_POSTMASTER, 0,
							 NULL, NULL, NULL);
	DefineCustomEnumVariable("ratelimit.durable_commit",
							 "Whether a transaction without a transaction id flushes its durable keys' records at commit.",
							 "flush waits for the WAL flush, as a commit does; async leaves it to the WAL writer.",
							 &rl_durable_commit,
							 RL_COMMIT_FLUSH, rl_durable_commit_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.wal_rmgr_id",
							"The id of ratelimit's custom WAL resource manager.",
							"128 is PostgreSQL's experimental id; change it only if another extension uses it (docs/design.md says how).",
							&rl_rmgr_id,
							RL_RMGR_ID_DEFAULT, RM_MIN_CUSTOM_ID,
							RM_MAX_CUSTOM_ID,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	rl_store_durable_room = rl_durable;
	RegisterCustomRmgr(rl_rmgr_id, &rl_rmgr);
	/* inherited by every backend; a test of two variables if unused */
	RegisterXactCallback(wal_xact_callback, NULL);
	if (!rl_durable)
		return;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "ratelimit");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "rl_sweeper_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "ratelimit sweeper");
	snprintf(worker.bgw_type, BGW_MAXLEN, "ratelimit sweeper");
	RegisterBackgroundWorker(&worker);
}

