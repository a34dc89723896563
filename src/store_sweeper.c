/*-------------------------------------------------------------------------
 *
 * store_sweeper.c
 *		Durable keys' sweeper (store_wal.c has the design): the background
 *		worker that holds every checkpoint back until each durable key has
 *		an image after its redo pointer, then SWEPT; and its stop, which
 *		writes the durable file before the shutdown checkpoint.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xloginsert.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/sinvaladt.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "store_int.h"

/* the sweeper: its wake-ups, and how long a checkpoint may wait for it */
#define RL_SWEEPER_NAP_MS	10
#define RL_SWEEPER_SWAP_MS	100

PGDLLEXPORT void rl_sweeper_main(Datum arg);

/*
 * Log an image of every durable key, a chunk of entries per hold of a
 * partition lock, then SWEPT(redo).
 */
static void
sweep(XLogRecPtr redo)
{
	RlWalSwept	rec;
	uint64		n = 0;
	int			partno;

	for (partno = 0; partno < rl_store->nparts; partno++)
	{
		uint32		base = (uint32) partno * rl_store->per_part;
		uint32		lo;

		for (lo = 0; lo < rl_store->per_part; lo += RL_WAL_CHUNK)
		{
			uint32		hi = Min(lo + RL_WAL_CHUNK, rl_store->per_part);
			uint32		j = lo;
			int			grow = 0;

			while (j < hi)
			{
				/* a log longer than the image buffer: grown unlocked */
				rl_durable_image_grow(grow);
				rl_part_lock(partno, LW_EXCLUSIVE);
				for (; j < hi; j++)
				{
					RlEntry    *e = &rl_entries[base + j];

					if (!(e->flags & RL_ENTRY_DURABLE))
						continue;
					if ((grow = rl_durable_image_short(e)) > 0)
						break;
					(void) rl_durable_image_log(e);
					n++;
				}
				rl_part_unlock(partno);
			}
		}
		CHECK_FOR_INTERRUPTS();
	}
	rec.redo = redo;
	rec.keys = n;
	XLogBeginInsert();
	XLogRegisterData((char *) &rec, sizeof(rec));
	/* flushed: a checkpoint's would, but a sweep after a restart has none */
	XLogFlush(XLogInsert(rl_rmgr_id, XLOG_RL_SWEPT));
	SpinLockAcquire(&rl_store->durable_lock);
	rl_store->durable_covered = redo;
	rl_store->durable_sweeps++;
	rl_store->durable_swept += n;
	SpinLockRelease(&rl_store->durable_lock);
}

/*
 * Take a new virtual transaction id, the flag staying raised, if every
 * checkpoint that may have collected the current one is swept: the redo
 * pointer is read under ProcArrayLock, held exclusively, as checkpoints
 * collect ids under it after publishing their redo pointer.  raise: the
 * first time, raising the flag.  Returns whether it swapped.
 */
static bool
sweeper_swap(bool raise)
{
	bool		ok;

	LWLockAcquire(ProcArrayLock, LW_EXCLUSIVE);
	SpinLockAcquire(&rl_store->durable_lock);
	ok = raise || rl_store->durable_covered >= GetRedoRecPtr();
	SpinLockRelease(&rl_store->durable_lock);
	if (ok)
	{
		rl_proc_lxid(MyProc) = GetNextLocalTransactionId();
		MyProc->delayChkptFlags |= DELAY_CHKPT_COMPLETE;
	}
	LWLockRelease(ProcArrayLock);
	return ok;
}

/*
 * The sweeper's loop: sweep when the redo pointer moves past what is
 * covered, and swap the virtual transaction id (releasing the checkpoints
 * that wait for the old one) when the redo pointer moved since the last
 * swap or some time passed.
 */
static void
sweeper_loop(void)
{
	XLogRecPtr	swapped_redo = GetRedoRecPtr();
	TimestampTz swapped_at = GetCurrentTimestamp();

	while (!ShutdownRequestPending)
	{
		XLogRecPtr	redo;
		XLogRecPtr	covered;

		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 RL_SWEEPER_NAP_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		redo = GetRedoRecPtr();
		SpinLockAcquire(&rl_store->durable_lock);
		covered = rl_store->durable_covered;
		SpinLockRelease(&rl_store->durable_lock);
		if (covered < redo)
			sweep(redo);
		if ((redo != swapped_redo ||
			 TimestampDifferenceExceeds(swapped_at, GetCurrentTimestamp(),
										RL_SWEEPER_SWAP_MS)) &&
			sweeper_swap(false))
		{
			swapped_redo = redo;
			swapped_at = GetCurrentTimestamp();
		}
	}
}

/*
 * Stop: refuse further durable records, wait out the calls logging one
 * (they hold a partition lock), flush and write the durable file, then
 * lower the flag: checkpoints from now on, the shutdown one too, are
 * covered by the file.
 */
static void
sweeper_stop(void)
{
	XLogRecPtr	end;
	int			partno;

	SpinLockAcquire(&rl_store->durable_lock);
	rl_store->durable_stopping = true;
	SpinLockRelease(&rl_store->durable_lock);
	for (partno = 0; partno < rl_store->nparts; partno++)
	{
		rl_part_lock(partno, LW_EXCLUSIVE);
		rl_part_unlock(partno);
	}
	/*
	 * Where WAL ends: the insert position, less the page header it stands
	 * after at a page's start (XLogFlush refuses a position past the WAL
	 * generated, as after pg_switch_wal).
	 */
	end = GetXLogInsertRecPtr();
	if (XLogSegmentOffset(end, wal_segment_size) == SizeOfXLogLongPHD)
		end -= SizeOfXLogLongPHD;
	else if (end % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		end -= SizeOfXLogShortPHD;
	XLogFlush(end);
	rl_durable_file_write(end, "sweeper stop");

	LWLockAcquire(ProcArrayLock, LW_EXCLUSIVE);
	MyProc->delayChkptFlags &= ~DELAY_CHKPT_COMPLETE;
	rl_proc_lxid(MyProc) = InvalidLocalTransactionId;
	LWLockRelease(ProcArrayLock);
	SpinLockAcquire(&rl_store->durable_lock);
	rl_store->durable_armed = false;
	SpinLockRelease(&rl_store->durable_lock);
}

/*
 * The sweeper's main (a background worker, from the end of recovery on).
 * It needs a place in the ProcArray, hence a connection to no database.
 * An error while it holds checkpoints back is a PANIC: exiting would lower
 * its flag and let a checkpoint complete that no sweep covers; crash
 * recovery from the last swept checkpoint is exact.
 */
void
rl_sweeper_main(Datum arg)
{
	ControlFileData *cf;
	bool		crc_ok;
	bool		restarted;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	/*
	 * A shutdown-type checkpoint (end of recovery, shutdown: redo at the
	 * record itself) is covered by the file written just before it.
	 */
	cf = get_controlfile(DataDir, &crc_ok);
	SpinLockAcquire(&rl_store->durable_lock);
	if (crc_ok && cf->checkPointCopy.redo == cf->checkPoint &&
		cf->checkPoint > rl_store->durable_covered)
		rl_store->durable_covered = cf->checkPoint;
	SpinLockRelease(&rl_store->durable_lock);

	SpinLockAcquire(&rl_store->durable_lock);
	restarted = rl_store->durable_stopping;
	SpinLockRelease(&rl_store->durable_lock);

	PG_TRY();
	{
		(void) sweeper_swap(true);

		/*
		 * A sweeper of this server stopped (terminated by hand): its file
		 * may hold the consumption of transactions that rolled back since,
		 * unlogged while no sweeper ran.  Every key is imaged again before
		 * durable calls resume.
		 */
		if (restarted)
			sweep(GetRedoRecPtr());
		SpinLockAcquire(&rl_store->durable_lock);
		rl_store->durable_armed = true;
		rl_store->durable_stopping = false;
		SpinLockRelease(&rl_store->durable_lock);

		sweeper_loop();
		sweeper_stop();
	}
	PG_CATCH();
	{
		EmitErrorReport();
		elog(PANIC, "the ratelimit sweeper failed while holding checkpoints back");
	}
	PG_END_TRY();
	/* 1: started again unless the server is stopping (terminated by hand) */
	proc_exit(1);
}
