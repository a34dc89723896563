/*-------------------------------------------------------------------------
 *
 * store_durable.c
 *		Durable keys' images (store_wal.c has the design): the record of a
 *		key's whole state, putting one back in the store (redo, the file),
 *		the records described (pg_waldump), and the durable file,
 *		pg_stat/ratelimit.durable.
 *
 * An image is taken under the entry's partition lock and logged before it
 * is released; putting one back takes the lock (and the owner lock before
 * it, never under it).  The file is written by whoever makes sure no
 * durable record is logged meanwhile (store_wal.c says who), copying
 * entries a chunk at a time under their partition's lock and writing with
 * no lock held; the postmaster, alone, reads and writes it without locks.
 *
 * File format (native byte order): a header (magic, format, the system
 * identifier, the LSN up to which the file holds every durable record, the
 * entry count); per durable key its IMAGE body, the key bytes and a log's
 * entries; a CRC-32C of the entries then the header.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_crc32c.h"
#include "portability/instr_time.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "utils/memutils.h"

#include "store_int.h"

#define RL_DURABLE_FILE		PGSTAT_STAT_PERMANENT_DIRECTORY "/ratelimit.durable"
#define RL_DURABLE_TMP		RL_DURABLE_FILE ".tmp"
#define RL_DURABLE_MAGIC	0x524C4455	/* "RLDU" */

typedef struct RlDurableHeader
{
	uint32		magic;
	uint32		format;
	uint64		sysid;			/* pg_control's system identifier */
	uint64		end;			/* every record ending at or before it */
	uint64		count;
} RlDurableHeader;

int			rl_rmgr_id = RL_RMGR_ID_DEFAULT;	/* ratelimit.wal_rmgr_id */

static char key_buf[RL_MAX_STORED_KEY]; /* a key copied under a lock */

/*
 * A log's entries copied under a lock, for its image: grown with no lock
 * held (rl_durable_image_grow) when an image finds it short.
 */
static RlLogEntry *image_log = NULL;
static int	image_log_cap = 0;

/* ---- images ---- */

/*
 * How many log entries the entry's image needs, if the image buffer has
 * not room for them; 0 if it has (always, but for a log).  Partition lock
 * held.
 */
int
rl_durable_image_short(const RlEntry *e)
{
	RlChain		chain = store_chain();
	int			n;

	if (rl_algo(e->algo)->state != RL_STATE_LOG)
		return 0;
	n = rl_log_length(&e->st.log, &chain);
	return n > image_log_cap ? n : 0;
}

/*
 * Make room in the image buffer for nlog log entries, and some more (the
 * log may grow before the lock is taken again).  No lock held.
 */
void
rl_durable_image_grow(int nlog)
{
	Size		cap = Max((Size) nlog * 2, 64);

	if (nlog <= image_log_cap)
		return;
	if (image_log != NULL)
		pfree(image_log);
	image_log = MemoryContextAllocHuge(TopMemoryContext,
									   cap * sizeof(RlLogEntry));
	image_log_cap = (int) cap;
}

/*
 * An entry's image, its key copied to key_buf and a log's entries to
 * image_log (which has room: rl_durable_image_short); returns the key
 * length.
 */
static int
image_of(const RlEntry *e, RlWalImage *rec)
{
	const RlOwner *o = &rl_owner_slots[e->owner];

	memset(rec, 0, sizeof(*rec));
	rec->dbid = e->dbid;
	rec->owner_dbid = o->dbid;
	rec->owner_roleid = o->roleid;
	rec->keylen = (uint16) rl_store_key_copy(e, key_buf);
	rec->algo = e->algo;
	rec->format = RL_WAL_FORMAT;
	rec->last = e->last;
	rec->idle_at = e->idle_at;
	if (rl_algo(e->algo)->state == RL_STATE_LOG)
	{
		RlChain		chain = store_chain();
		int			n = rl_log_walk(&e->st.log, &chain, image_log,
									image_log_cap);

		Assert(n <= image_log_cap);
		rec->st.log.sum = e->st.log.sum;
		rec->st.log.nblocks = (uint32) n;
	}
	else
		rec->st = e->st;
	return rec->keylen;
}

/* The log entries following an image's key (0 but for a log). */
uint32
rl_durable_image_nlog(const RlWalImage *rec)
{
	if (rec->algo >= RL_NUM_ALGOS ||
		rl_algo(rec->algo)->state != RL_STATE_LOG)
		return 0;
	return rec->st.log.nblocks;
}

/*
 * Log the entry's image, under its partition lock (held exclusively; the
 * image buffer has room: rl_durable_image_short); returns the end of the
 * record.
 */
uint64
rl_durable_image_log(RlEntry *e)
{
	RlWalImage	rec;
	int			keylen = image_of(e, &rec);
	uint32		nlog = rl_durable_image_nlog(&rec);
	XLogRecPtr	end;

	XLogBeginInsert();
	XLogRegisterData((char *) &rec, sizeof(rec));
	XLogRegisterData(key_buf, keylen);
	if (nlog > 0)
		XLogRegisterData((char *) image_log, nlog * sizeof(RlLogEntry));
	end = XLogInsert(rl_rmgr_id, XLOG_RL_IMAGE);
	return end;
}

/*
 * Log that a durable entry is dropped (a reset); partition lock held.
 * Returns the end of the record.
 */
uint64
rl_durable_drop_log(RlEntry *e)
{
	RlWalDrop	rec;

	memset(&rec, 0, sizeof(rec));
	rec.dbid = e->dbid;
	rec.keylen = (uint16) rl_store_key_copy(e, key_buf);
	rec.algo = e->algo;
	rec.format = RL_WAL_FORMAT;
	XLogBeginInsert();
	XLogRegisterData((char *) &rec, sizeof(rec));
	XLogRegisterData(key_buf, rec.keylen);
	return XLogInsert(rl_rmgr_id, XLOG_RL_DROP);
}


/* rm_desc: a record, for pg_waldump and error contexts. */
void
rl_durable_desc(StringInfo buf, XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
	const char *data = XLogRecGetData(record);

	if (info == XLOG_RL_SWEPT)
	{
		RlWalSwept	rec;

		memcpy(&rec, data, sizeof(rec));
		appendStringInfo(buf, "redo %X/%X, " UINT64_FORMAT " keys",
						 LSN_FORMAT_ARGS(rec.redo), rec.keys);
	}
	else if (info == XLOG_RL_IMAGE)
	{
		RlWalImage	rec;

		memcpy(&rec, data, sizeof(rec));
		appendStringInfo(buf, "db %u, algorithm %u, key of %u bytes",
						 rec.dbid, rec.algo, rec.keylen);
		if (rl_durable_image_nlog(&rec) > 0)
			appendStringInfo(buf, ", %u log entries",
							 rl_durable_image_nlog(&rec));
	}
	else if (info == XLOG_RL_DROP)
	{
		RlWalDrop	rec;

		memcpy(&rec, data, sizeof(rec));
		appendStringInfo(buf, "db %u, algorithm %u, key of %u bytes",
						 rec.dbid, rec.algo, rec.keylen);
	}
}

/* rm_identify: a record type's name. */
const char *
rl_durable_identify(uint8 info)
{
	switch (info & ~XLR_INFO_MASK)
	{
		case XLOG_RL_IMAGE:
			return "IMAGE";
		case XLOG_RL_DROP:
			return "DROP";
		case XLOG_RL_SWEPT:
			return "SWEPT";
	}
	return NULL;
}

/*
 * The owner slot of an image's (database, role), claimed if need be.  The
 * last one is remembered: a replay or a load meets the same owner for
 * key after key, and claiming scans the owner slots.  The remembered slot
 * is checked under the owner lock (it may have been handed over since).
 */
static int
image_owner(Oid dbid, Oid roleid)
{
	static int	last = -1;
	int			owner = -1;

	if (last >= 0)
	{
		LWLockAcquire(owner_lock(), LW_SHARED);
		if (rl_owner_slots[last].in_use &&
			rl_owner_slots[last].dbid == dbid &&
			rl_owner_slots[last].roleid == roleid)
			owner = last;
		LWLockRelease(owner_lock());
	}
	if (owner < 0)
	{
		LWLockAcquire(owner_lock(), LW_EXCLUSIVE);
		owner = rl_owner_claim(dbid, roleid);
		LWLockRelease(owner_lock());
		last = owner;
	}
	return owner;
}

/*
 * Is an image one a call could have made: an algorithm, format and key
 * length of this build, times within range, and a state its algorithm
 * accepts (the table's image_valid, as for the state file, with a log's
 * entries, aligned in entries)?  The algorithm may lower the idle time,
 * in *idle_at.
 */
static bool
image_sound(const RlWalImage *rec, const RlLogEntry *entries,
			int64 *idle_at)
{
	RlStateImage img;

	if (rec->algo >= RL_NUM_ALGOS || rec->format > RL_WAL_FORMAT ||
		rec->keylen == 0 || rec->keylen > RL_MAX_STORED_KEY ||
		!rl_time_ok(rec->last) || rec->idle_at < -RL_MAX_ABS_TIME)
		return false;
	img.state = rec->st;
	img.last = rec->last;
	img.idle_at = rec->idle_at;
	img.nlog = (int) rl_durable_image_nlog(rec);
	img.log = entries;
	if (!rl_algo((RlAlgo) rec->algo)->image_valid(&img))
		return false;
	*idle_at = img.idle_at;
	return true;
}

/*
 * A log's entries of an image (log, unaligned), aligned in memory of the
 * caller's context; NULL when it has none.
 */
static RlLogEntry *
image_entries(const RlWalImage *rec, const char *log)
{
	uint32		nlog = rl_durable_image_nlog(rec);
	RlLogEntry *entries;

	if (nlog == 0)
		return NULL;
	entries = palloc_extended(nlog * sizeof(RlLogEntry), MCXT_ALLOC_HUGE);
	memcpy(entries, log, nlog * sizeof(RlLogEntry));
	return entries;
}

/*
 * Put a durable key's image in the store (redo, the durable file): the
 * entry is created if need be (by reclaiming idle ordinary keys), its
 * state overwritten; a log's entries (log, unaligned) are put back in
 * blocks of the pool.  redo: an image replayed, marked as seen since the
 * last sweep's end (store_wal.c's swept_apply).  An image no call could
 * have made (image_sound: a record of another build) is not applied: the
 * caller is told, and the key keeps what it had.
 */
bool
rl_durable_image_apply(const RlWalImage *rec, const char *key,
					   const char *log, bool redo)
{
	RlSlot		slot = rl_store_slot(rec->dbid, (RlAlgo) rec->algo, key,
									 rec->keylen);
	RlPartitionData *part = &rl_store->parts[slot.partno].d;
	uint32		nlog = rl_durable_image_nlog(rec);
	RlLogEntry *entries;
	int64		idle_at;
	RlRequest	req;
	RlCall		call;
	RlEntry    *e;
	bool		room = true;
	int			tries;

	/* the log's entries aligned, checked, and the owner: before the lock */
	entries = image_entries(rec, log);
	if (!image_sound(rec, entries, &idle_at))
	{
		if (entries != NULL)
			pfree(entries);
		return false;
	}
	rl_request_init(&req);
	req.dbid = rec->dbid;
	req.algo = (RlAlgo) rec->algo;
	req.key = key;
	req.keylen = rec->keylen;
	req.durable = true;
	rl_store_call_init(&call, (uint16) image_owner(rec->owner_dbid,
												   rec->owner_roleid));
	call.partno = slot.partno;
	call.before = rl_clock_now() - RL_RECLAIM_MARGIN;
	call.uncapped = true;

	for (tries = 0;; tries++)
	{
		rl_part_lock(slot.partno, LW_EXCLUSIVE);
		e = rl_store_find(slot, rec->dbid, (RlAlgo) rec->algo, key,
						  rec->keylen);
		if (e == NULL)
			e = rl_store_create(slot, &req, &call);
		if (e != NULL)
		{
			if (!(e->flags & RL_ENTRY_DURABLE))
			{
				e->flags |= RL_ENTRY_DURABLE;
				part->durable++;
			}
			e->last = rec->last;
			e->idle_at = idle_at;
			if (rl_algo(rec->algo)->state == RL_STATE_LOG)
			{
				RlChain		chain = store_chain();

				rl_log_release(&e->st.log, &chain);
				rl_store_chain_freed(e, &chain);
				room = rl_store_log_fill(e, &call, entries, (int) nlog);
			}
			else
				e->st = rec->st;
			if (redo)
				e->flags |= RL_ENTRY_SEEN;
		}
		rl_part_unlock(slot.partno);

		/*
		 * The pool full (of a standby's own ordinary logs and long keys,
		 * say): drop ordinary keys holding blocks, each partition under
		 * its own lock, and try again (a few times: ordinary calls may
		 * take the blocks meanwhile).
		 */
		if ((e != NULL && room) || !call.refused_blocks || tries >= 8 ||
			!rl_store_free_blocks(nlog / RL_LOG_PER_BLOCK +
								  rec->keylen / RL_BLOCK_SIZE + 2))
			break;
		call.refusal = RL_REFUSED_NONE;
		call.refused_blocks = false;
	}
	if (entries != NULL)
		pfree(entries);
	if (e == NULL || !room)
		ereport(FATAL,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("no room in the ratelimit store for a durable key"),
				 errhint("Raise ratelimit.max_keys and ratelimit.pool_size to at least their values on the primary.")));
	return true;
}

/* ---- the durable file ---- */

/* Write all of buf to fd, or fail with errno set. */
static bool
write_all(int fd, const char *buf, size_t len)
{
	while (len > 0)
	{
		ssize_t		n;

		errno = 0;
		n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
		{
			if (errno == 0)
				errno = ENOSPC;
			return false;
		}
		buf += n;
		len -= (size_t) n;
	}
	return true;
}

/*
 * Write every durable key to the file, with the LSN up to which it holds
 * every record of ours.  The caller makes sure no durable record is logged
 * meanwhile (redo is over; the sweeper stopped them; no backend is left).
 * Entries are copied under their partition's lock, a chunk at a time, and
 * written with no lock held.  Failures are logged: the previous file stays.
 */
void
rl_durable_file_write(uint64 end, const char *why)
{
	Size		bufsize = RL_WAL_CHUNK * (sizeof(RlWalImage) +
										  RL_MAX_STORED_KEY);
	char	   *buf = palloc(bufsize);
	RlDurableHeader hdr;
	pg_crc32c	crc;
	bool		ok;
	int			fd;
	int			partno;
	instr_time	start;
	instr_time	took;

	INSTR_TIME_SET_CURRENT(start);
	(void) unlink(RL_DURABLE_TMP);
	fd = OpenTransientFile(RL_DURABLE_TMP,
						   O_WRONLY | O_CREAT | O_EXCL | PG_BINARY);
	if (fd < 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", RL_DURABLE_TMP)));
		pfree(buf);
		return;
	}
	memset(&hdr, 0, sizeof(hdr));
	ok = write_all(fd, (char *) &hdr, sizeof(hdr));
	INIT_CRC32C(crc);
	for (partno = 0; ok && partno < rl_store->nparts; partno++)
	{
		uint32		base = (uint32) partno * rl_store->per_part;
		uint32		lo;

		for (lo = 0; ok && lo < rl_store->per_part; lo += RL_WAL_CHUNK)
		{
			uint32		hi = Min(lo + RL_WAL_CHUNK, rl_store->per_part);
			Size		used = 0;
			uint32		j = lo;

			while (j < hi)
			{
				int			grow = 0;

				if (IsUnderPostmaster)
					rl_part_lock(partno, LW_SHARED);
				for (; j < hi; j++)
				{
					RlEntry    *e = &rl_entries[base + j];
					RlWalImage	rec;
					Size		nlog;
					int			keylen;

					if (!(e->flags & RL_ENTRY_DURABLE))
						continue;
					/* a log longer than the buffers: grow them unlocked */
					if ((grow = rl_durable_image_short(e)) > 0 ||
						used + sizeof(rec) + RL_MAX_STORED_KEY +
						(Size) image_log_cap * sizeof(RlLogEntry) > bufsize)
						break;
					keylen = image_of(e, &rec);
					nlog = rl_durable_image_nlog(&rec) * sizeof(RlLogEntry);
					memcpy(buf + used, &rec, sizeof(rec));
					memcpy(buf + used + sizeof(rec), key_buf, keylen);
					if (nlog > 0)
						memcpy(buf + used + sizeof(rec) + keylen, image_log,
							   nlog);
					used += sizeof(rec) + keylen + nlog;
					hdr.count++;
				}
				if (IsUnderPostmaster)
					rl_part_unlock(partno);
				if (j < hi)
				{
					rl_durable_image_grow(grow);
					bufsize = Max(bufsize, used + sizeof(RlWalImage) +
								  RL_MAX_STORED_KEY +
								  (Size) image_log_cap * sizeof(RlLogEntry));
					buf = repalloc_huge(buf, bufsize);
				}
			}
			COMP_CRC32C(crc, buf, used);
			ok = write_all(fd, buf, used);
		}
	}
	hdr.magic = RL_DURABLE_MAGIC;
	hdr.format = RL_WAL_FORMAT;
	hdr.sysid = GetSystemIdentifier();
	hdr.end = end;
	COMP_CRC32C(crc, &hdr, sizeof(hdr));
	FIN_CRC32C(crc);
	ok = ok && write_all(fd, (char *) &crc, sizeof(crc));
	if (ok)
	{
		errno = 0;
		ok = pg_pwrite(fd, &hdr, sizeof(hdr), 0) == sizeof(hdr);
		if (!ok && errno == 0)
			errno = ENOSPC;
	}
	if (!ok)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", RL_DURABLE_TMP)));
	if (CloseTransientFile(fd) != 0 && ok)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", RL_DURABLE_TMP)));
		ok = false;
	}
	pfree(buf);
	if (!ok)
	{
		(void) unlink(RL_DURABLE_TMP);
		return;
	}
	/* fsyncs the file, renames, fsyncs the directory */
	if (durable_rename(RL_DURABLE_TMP, RL_DURABLE_FILE, LOG) == 0)
	{
		INSTR_TIME_SET_CURRENT(took);
		INSTR_TIME_SUBTRACT(took, start);
		ereport(LOG,
				(errmsg("ratelimit saved " UINT64_FORMAT " durable keys up to %X/%X (%s) in %.3f s",
						hdr.count, LSN_FORMAT_ARGS(end), why,
						INSTR_TIME_GET_DOUBLE(took))));
	}
}

/* Log that the durable file is ignored, and why. */
static void
durable_file_ignored(const char *why)
{
	ereport(WARNING,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("ignoring file \"%s\"", RL_DURABLE_FILE),
			 errdetail_internal("%s", why),
			 errhint("Durable keys start from what WAL replay gives them.")));
}

/*
 * Is an image of the file, at p, one a call could have made (image_sound)?
 * The file is checked whole by its CRC; this guards against a file of
 * another build.  Its size was checked.
 */
static bool
file_image_sound(const RlWalImage *rec, const char *p)
{
	RlLogEntry *entries = image_entries(rec, p + sizeof(*rec) + rec->keylen);
	int64		idle_at;
	bool		sound = image_sound(rec, entries, &idle_at);

	if (entries != NULL)
		pfree(entries);
	return sound;
}

/* An image's size in the file: its body, its key and a log's entries. */
static Size
image_size(const RlWalImage *rec)
{
	return sizeof(*rec) + rec->keylen +
		(Size) rl_durable_image_nlog(rec) * sizeof(RlLogEntry);
}

/*
 * Load the durable file into a store just created (postmaster, no backend
 * running), whatever the last shutdown was: redo then skips the records
 * it holds.  A file of another cluster, of a newer format, truncated or
 * failing its CRC is ignored whole (with a WARNING).
 */
static void
durable_file_load(void)
{
	RlDurableHeader hdr;
	pg_crc32c	crc;
	pg_crc32c	want;
	char	   *data;
	char	   *p;
	off_t		size;
	struct stat st;
	int			fd;
	uint64		i;
	instr_time	start;
	instr_time	took;

	INSTR_TIME_SET_CURRENT(start);
	fd = OpenTransientFile(RL_DURABLE_FILE, O_RDONLY | O_NONBLOCK | PG_BINARY);
	if (fd < 0)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", RL_DURABLE_FILE)));
		return;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
		st.st_size < (off_t) (sizeof(hdr) + sizeof(crc)))
	{
		CloseTransientFile(fd);
		durable_file_ignored("It is not a regular file of at least a header.");
		return;
	}
	size = st.st_size;
	data = palloc_extended(size, MCXT_ALLOC_HUGE);
	if (pg_pread(fd, data, size, 0) != size)
	{
		CloseTransientFile(fd);
		pfree(data);
		durable_file_ignored("It could not be read whole.");
		return;
	}
	CloseTransientFile(fd);
	memcpy(&hdr, data, sizeof(hdr));
	memcpy(&want, data + size - sizeof(crc), sizeof(crc));
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, data + sizeof(hdr), size - sizeof(hdr) - sizeof(crc));
	COMP_CRC32C(crc, &hdr, sizeof(hdr));
	FIN_CRC32C(crc);
	if (hdr.magic != RL_DURABLE_MAGIC || hdr.format > RL_WAL_FORMAT ||
		crc != want)
	{
		pfree(data);
		durable_file_ignored("Its header or CRC is wrong.");
		return;
	}
	if (hdr.sysid != GetSystemIdentifier())
	{
		pfree(data);
		durable_file_ignored("It belongs to another cluster.");
		return;
	}

	/* check every entry before placing any */
	p = data + sizeof(hdr);
	for (i = 0; i < hdr.count; i++)
	{
		RlWalImage	rec;

		if (p + sizeof(rec) > data + size - sizeof(crc))
			break;
		memcpy(&rec, p, sizeof(rec));
		if (rec.keylen > RL_MAX_STORED_KEY ||
			image_size(&rec) > (Size) (data + size - sizeof(crc) - p))
			break;
		if (!file_image_sound(&rec, p))
		{
			pfree(data);
			durable_file_ignored("An image holds a state, times or an algorithm no call could have made.");
			return;
		}
		p += image_size(&rec);
	}
	if (i != hdr.count || p != data + size - sizeof(crc))
	{
		pfree(data);
		durable_file_ignored("Its entries do not match its header.");
		return;
	}
	p = data + sizeof(hdr);
	for (i = 0; i < hdr.count; i++)
	{
		RlWalImage	rec;

		memcpy(&rec, p, sizeof(rec));
		(void) rl_durable_image_apply(&rec, p + sizeof(rec),
									  p + sizeof(rec) + rec.keylen, false);
		p += image_size(&rec);
	}
	pfree(data);
	rl_store->durable_file_end = hdr.end;
	INSTR_TIME_SET_CURRENT(took);
	INSTR_TIME_SUBTRACT(took, start);
	ereport(LOG,
			(errmsg("ratelimit loaded " UINT64_FORMAT " durable keys up to %X/%X in %.3f s",
					hdr.count, LSN_FORMAT_ARGS(hdr.end),
					INSTR_TIME_GET_DOUBLE(took))));
}

/*
 * on_shmem_exit of the postmaster: after a clean shutdown, save the
 * durable keys again (refunds of backends that aborted after the sweeper
 * stopped are in memory only), with the shutdown checkpoint's location:
 * every record of ours precedes it.
 */
static void
durable_file_at_exit(int code, Datum arg)
{
	ControlFileData *cf;
	bool		crc_ok;

	if (code != 0)
		return;
	cf = get_controlfile(DataDir, &crc_ok);
	if (crc_ok && (cf->state == DB_SHUTDOWNED ||
				   cf->state == DB_SHUTDOWNED_IN_RECOVERY))
		rl_durable_file_write(cf->checkPoint, "shutdown");
}

/*
 * The postmaster, when the store was just created (start, or restart after
 * a crash): load the durable file, save it at a clean exit.
 */
void
rl_store_durable_load(void)
{
	durable_file_load();
	on_shmem_exit(durable_file_at_exit, (Datum) 0);
}
