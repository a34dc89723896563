/*-------------------------------------------------------------------------
 *
 * persist.c
 *		Keep the store's state across a clean restart.
 *
 * At a clean shutdown the postmaster writes every entry still holding
 * state to pg_stat/ratelimit.state (through a temporary file and a durable
 * rename, so the file is whole or absent); at the next start it loads the
 * entries that are not idle yet and removes the file.  A crash, or an
 * immediate shutdown, keeps nothing: a crash writes no file, and a file
 * written at an immediate shutdown is dropped at start because pg_control
 * shows no clean shutdown.  The state then starts afresh, as after crash
 * reinitialization of shared memory.
 *
 * Format (version RL_PERSIST_VERSION, native byte order):
 *	header	 magic, version, PG_VERSION_NUM (read back: its major only),
 *			 entry count
 *	entries	 RlPersistEntry: database, algorithm, key length, log length,
 *			 owner (database, role), last, idle_at, 24 bytes of state (a
 *			 sliding log: the sum of its costs); then the key bytes and
 *			 the log entries (time, cost)
 *	trailer	 CRC-32C of the entries, then of the header
 *
 * The file is not trusted.  Only a regular file is read, opened without
 * blocking (a FIFO at the path must not hang the start).  Its header is
 * checked before anything else is read, and the file is read as a stream,
 * twice (framing and CRC, then the entries): nothing is allocated for what
 * it claims but one key and one log no longer than the pool.  A file that
 * is short, of another magic or version (or of another PostgreSQL major
 * release), fails its CRC or follows an unclean shutdown is ignored
 * whole.  Each entry is checked against what a call could have produced,
 * with the ranges the SQL functions apply to their arguments (algo.h), the
 * state and its idle time by its algorithm (the table's image_valid, which
 * also bounds the idle time by the state); an entry that fails is dropped,
 * and the drops are logged once, with a count per reason.  Entries of
 * databases that do not exist cannot be told here (no catalog access):
 * the store drops them when it needs room (store_admin.c).
 *
 * Runs only in the postmaster, when no backend exists: the store engine's
 * images and restore take no lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "utils/memutils.h"

#include "algo_common.h"
#include "engine.h"
#include "persist.h"
#include "store.h"

#define RL_PERSIST_FILE		PGSTAT_STAT_PERMANENT_DIRECTORY "/ratelimit.state"
#define RL_PERSIST_TMP		RL_PERSIST_FILE ".tmp"
#define RL_PERSIST_MAGIC	0x524C5354	/* "RLST" */
#define RL_PERSIST_VERSION	2

/*
 * A saved key whose latest time is further ahead of the clock at start
 * than this (us) is dropped: every call would be clamped to that time.
 * The margin allows for a clock stepped back between stop and start.
 */
#define RL_PERSIST_FUTURE	(60 * USECS_PER_SEC)

typedef struct RlPersistHeader
{
	uint32		magic;
	uint32		version;
	uint32		pg_version;
	uint32		pad;
	uint64		count;
} RlPersistHeader;

typedef struct RlPersistEntry
{
	Oid			dbid;
	int32		algo;
	int32		keylen;
	int32		nlog;
	Oid			owner_dbid;
	Oid			owner_roleid;
	int64		last;
	int64		idle_at;
	char		state[24];
} RlPersistEntry;

StaticAssertDecl(sizeof(RlState) == 24,
				 "saved state size must match the store's");
StaticAssertDecl(sizeof(RlPersistEntry) == 64,
				 "the saved entry has no padding");

/* Why an entry of the file was not restored */
typedef enum RlSkip
{
	SKIP_IDLE,					/* back to a new key's state: not needed */
	SKIP_NO_ROOM,				/* the store is smaller now */
	SKIP_ALGO,					/* the rest: invalid */
	SKIP_KEY,
	SKIP_OWNER,
	SKIP_TIME,
	SKIP_FUTURE,
	SKIP_STATE,
	SKIP_LOG,
	SKIP_DUPLICATE,
	SKIP_NREASONS
} RlSkip;

static const char *const skip_reasons[SKIP_NREASONS] = {
	[SKIP_IDLE] = "idle",
	[SKIP_NO_ROOM] = "without room",
	[SKIP_ALGO] = "with an unknown algorithm",
	[SKIP_KEY] = "with a key too long",
	[SKIP_OWNER] = "with an owner of another database",
	[SKIP_TIME] = "with a time out of range",
	[SKIP_FUTURE] = "with a time in the future",
	[SKIP_STATE] = "with a window or count out of range",
	[SKIP_LOG] = "with a log out of order, a cost not positive or a wrong sum",
	[SKIP_DUPLICATE] = "duplicate",
};

/* ---- writing ---- */

#define RL_WRITE_BUFFER		65536

typedef struct RlWriter
{
	int			fd;
	pg_crc32c	crc;
	uint64		count;
	bool		failed;
	int			used;			/* bytes in buf */
	char	   *buf;
} RlWriter;

/* Write out the buffer. */
static void
writer_flush(RlWriter *w)
{
	char	   *p = w->buf;

	while (!w->failed && w->used > 0)
	{
		ssize_t		n;

		errno = 0;
		n = write(w->fd, p, w->used);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
		{
			/* a short write without an error means no space */
			if (errno == 0)
				errno = ENOSPC;
			w->failed = true;
			break;
		}
		p += n;
		w->used -= (int) n;
	}
}

/* Append bytes to the file, through the buffer; crc says whether they count. */
static void
writer_put(RlWriter *w, const void *data, size_t len, bool crc)
{
	const char *p = data;

	if (crc)
		COMP_CRC32C(w->crc, data, len);
	while (!w->failed && len > 0)
	{
		size_t		n = Min(len, (size_t) (RL_WRITE_BUFFER - w->used));

		memcpy(w->buf + w->used, p, n);
		w->used += (int) n;
		p += n;
		len -= n;
		if (w->used == RL_WRITE_BUFFER)
			writer_flush(w);
	}
}

static void
write_entry(const RlEntryImage *img, void *arg)
{
	RlWriter   *w = (RlWriter *) arg;
	RlPersistEntry pe;

	memset(&pe, 0, sizeof(pe));
	pe.dbid = img->dbid;
	pe.algo = img->algo;
	pe.keylen = img->keylen;
	pe.owner_dbid = img->owner_dbid;
	pe.owner_roleid = img->owner_roleid;
	pe.nlog = img->saved.nlog;
	pe.last = img->saved.last;
	pe.idle_at = img->saved.idle_at;
	/* a log: the sum of its costs, then zeros; the entries follow the key */
	if (rl_algo(img->algo)->state == RL_STATE_LOG)
		memcpy(pe.state, &img->saved.state.log.sum, sizeof(int64));
	else
		memcpy(pe.state, &img->saved.state, sizeof(pe.state));
	writer_put(w, &pe, sizeof(pe), true);
	writer_put(w, img->key, img->keylen, true);
	writer_put(w, img->saved.log, sizeof(RlLogEntry) * img->saved.nlog, true);
	w->count++;
}

/*
 * on_shmem_exit callback of the postmaster: save the state, unless the
 * exit is abnormal.  The temporary file is made anew (never opened if
 * something else is at its path).
 */
void
rl_persist_shutdown(int code, Datum arg)
{
	const RlEngine *store = rl_engine(RL_ENGINE_STORE);
	RlWriter	w;
	RlPersistHeader header;

	if (code != 0 || store->images == NULL)
		return;

	(void) unlink(RL_PERSIST_TMP);
	w.fd = OpenTransientFile(RL_PERSIST_TMP,
							 O_WRONLY | O_CREAT | O_EXCL | PG_BINARY);
	if (w.fd < 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", RL_PERSIST_TMP)));
		return;
	}
	w.buf = palloc(RL_WRITE_BUFFER);
	w.used = 0;
	INIT_CRC32C(w.crc);
	w.count = 0;
	w.failed = false;

	/* a header with count 0 first; rewritten once the count is known */
	memset(&header, 0, sizeof(header));
	writer_put(&w, &header, sizeof(header), false);
	store->images(write_entry, &w);

	header.magic = RL_PERSIST_MAGIC;
	header.version = RL_PERSIST_VERSION;
	header.pg_version = PG_VERSION_NUM;
	header.count = w.count;
	COMP_CRC32C(w.crc, &header, sizeof(header));
	FIN_CRC32C(w.crc);
	writer_put(&w, &w.crc, sizeof(w.crc), false);
	writer_flush(&w);
	if (!w.failed)
	{
		errno = 0;
		if (pg_pwrite(w.fd, &header, sizeof(header), 0) != sizeof(header))
		{
			if (errno == 0)
				errno = ENOSPC;
			w.failed = true;
		}
	}
	if (w.failed)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", RL_PERSIST_TMP)));
	if (CloseTransientFile(w.fd) != 0 && !w.failed)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", RL_PERSIST_TMP)));
		w.failed = true;
	}
	pfree(w.buf);
	if (w.failed)
	{
		(void) unlink(RL_PERSIST_TMP);
		return;
	}
	(void) durable_rename(RL_PERSIST_TMP, RL_PERSIST_FILE, LOG);
	elog(DEBUG1, "ratelimit saved the state of " UINT64_FORMAT " keys",
		 w.count);
}

/* ---- reading ---- */

/* Log that the file is ignored whole, and why (a sentence). */
static void
ignore_file(const char *why)
{
	ereport(LOG,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("ignoring invalid data in file \"%s\"", RL_PERSIST_FILE),
			 errdetail_internal("%s", why)));
}

/* ---- the file read as a stream: nothing allocated after what it says ---- */

#define RL_READ_BUFFER		65536

typedef struct RlReader
{
	int			fd;
	char	   *buf;
	size_t		len;			/* bytes in buf */
	size_t		pos;			/* the next one to hand out */
	uint64		done;			/* bytes handed out since the start */
	pg_crc32c	crc;			/* of what was handed out while crc_on */
	bool		crc_on;
	bool		failed;			/* a read error (logged), or the end */
} RlReader;

/*
 * Hand out the next n bytes of the file, copied to out (or skipped if out
 * is NULL), adding them to the CRC if it is on.  False at the end of the
 * file or on a read error (logged once).
 */
static bool
reader_get(RlReader *r, void *out, uint64 n)
{
	char	   *dst = out;

	while (n > 0)
	{
		size_t		chunk;

		if (r->pos == r->len)
		{
			ssize_t		got;

			if (r->failed)
				return false;
			got = read(r->fd, r->buf, RL_READ_BUFFER);
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0)
			{
				if (got < 0)
					ereport(LOG,
							(errcode_for_file_access(),
							 errmsg("could not read file \"%s\": %m",
									RL_PERSIST_FILE)));
				r->failed = true;
				return false;
			}
			r->len = (size_t) got;
			r->pos = 0;
		}
		chunk = (size_t) Min(n, (uint64) (r->len - r->pos));
		if (r->crc_on)
			COMP_CRC32C(r->crc, r->buf + r->pos, chunk);
		if (dst != NULL)
		{
			memcpy(dst, r->buf + r->pos, chunk);
			dst += chunk;
		}
		r->pos += chunk;
		r->done += chunk;
		n -= chunk;
	}
	return true;
}

/* Go back to the first entry (after the header), the CRC started anew. */
static bool
reader_rewind(RlReader *r)
{
	if (lseek(r->fd, sizeof(RlPersistHeader), SEEK_SET) < 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not seek in file \"%s\": %m", RL_PERSIST_FILE)));
		return false;
	}
	r->len = r->pos = 0;
	r->done = sizeof(RlPersistHeader);
	r->failed = false;
	INIT_CRC32C(r->crc);
	return true;
}

/*
 * Open the file; -1 if absent, not a regular file, or unreadable (logged),
 * with *size its size.  It is opened with O_NONBLOCK and checked with
 * fstat before any read, so that a FIFO or a device at its path cannot
 * block the start.
 */
static int
open_file(uint64 *size)
{
	int			fd;
	struct stat st;

	fd = OpenTransientFile(RL_PERSIST_FILE, O_RDONLY | O_NONBLOCK | PG_BINARY);
	if (fd < 0)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", RL_PERSIST_FILE)));
		return -1;
	}
	if (fstat(fd, &st) != 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", RL_PERSIST_FILE)));
		CloseTransientFile(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode))
	{
		ignore_file("It is not a regular file.");
		CloseTransientFile(fd);
		(void) unlink(RL_PERSIST_FILE);
		return -1;
	}
	*size = (uint64) st.st_size;
	return fd;
}

/*
 * Check the file's framing as a stream, before anything of it is kept:
 * the header first (its magic, versions, and an entry count the file's
 * size can hold), then entries that fit exactly, then the CRC.  Nothing is
 * allocated for what the file says.  Returns NULL if sound, or why not (a
 * sentence).
 */
static const char *
check_file(RlReader *r, uint64 size, RlPersistHeader *header)
{
	pg_crc32c	stored;
	uint64		end;
	uint64		i;

	if (size < sizeof(*header) + sizeof(stored))
		return "The file is too short.";
	if (!reader_get(r, header, sizeof(*header)))
		return "It could not be read.";
	if (header->magic != RL_PERSIST_MAGIC)
		return "It is not a ratelimit state file.";
	/* a minor release keeps the layout: only the major must match */
	if (header->version != RL_PERSIST_VERSION ||
		header->pg_version / 10000 != PG_VERSION_NUM / 10000)
		return "It was written by another version of ratelimit or PostgreSQL.";
	end = size - sizeof(stored);
	if (header->count > (end - sizeof(*header)) / sizeof(RlPersistEntry))
		return "It is truncated.";

	r->crc_on = true;
	for (i = 0; i < header->count; i++)
	{
		RlPersistEntry pe;

		if (end - r->done < sizeof(pe) || !reader_get(r, &pe, sizeof(pe)))
			return "It is truncated.";
		if (pe.keylen < 0 || pe.nlog < 0)
			return "An entry has a negative length.";
		if ((uint64) pe.keylen + (uint64) pe.nlog * sizeof(RlLogEntry) >
			end - r->done ||
			!reader_get(r, NULL, (uint64) pe.keylen +
						(uint64) pe.nlog * sizeof(RlLogEntry)))
			return "It is truncated.";
	}
	if (r->done != end)
		return "It has trailing bytes.";
	r->crc_on = false;
	COMP_CRC32C(r->crc, header, sizeof(*header));
	FIN_CRC32C(r->crc);
	if (!reader_get(r, &stored, sizeof(stored)))
		return "It is truncated.";
	if (!EQ_CRC32C(r->crc, stored))
		return "Its checksum does not match.";
	return NULL;
}

/*
 * Why an entry of the file cannot be restored as it is (a reason from
 * SKIP_ALGO on), or SKIP_NREASONS if it is sound: every value within what
 * a call could have produced.  img holds the entry's saved state, its log
 * read (the caller skips a key too long to be read).  The state and its
 * idle time are the algorithm's to check (its image_valid, which also
 * lowers the idle time to the latest the state allows).
 */
static RlSkip
entry_problem(const RlPersistEntry *pe, RlStateImage *img, int64 now)
{
	const RlAlgoRoutine *algo;

	if (pe->algo < 0 || pe->algo >= RL_NUM_ALGOS)
		return SKIP_ALGO;
	algo = rl_algo((RlAlgo) pe->algo);
	if (pe->keylen > RL_MAX_STORED_KEY)
		return SKIP_KEY;
	if (pe->owner_dbid != pe->dbid &&
		(OidIsValid(pe->owner_dbid) || OidIsValid(pe->owner_roleid)))
		return SKIP_OWNER;

	if (!rl_time_ok(pe->last) || pe->idle_at < -RL_MAX_ABS_TIME)
		return SKIP_TIME;
	if (pe->last > now + RL_PERSIST_FUTURE)
		return SKIP_FUTURE;
	if (!algo->image_valid(img))
		return algo->state == RL_STATE_LOG ? SKIP_LOG : SKIP_STATE;
	return SKIP_NREASONS;
}

/*
 * Did the server last stop with a shutdown checkpoint?  After an immediate
 * shutdown the postmaster still exits normally and writes the file, but
 * the state it saved was not final (backends were killed mid-call), and
 * the database itself goes through crash recovery: the state is dropped.
 */
static bool
shut_down_cleanly(void)
{
	bool		crc_ok;
	ControlFileData *control = get_controlfile(DataDir, &crc_ok);
	bool		clean = crc_ok &&
		(control->state == DB_SHUTDOWNED ||
		 control->state == DB_SHUTDOWNED_IN_RECOVERY);

	pfree(control);
	return clean;
}

/*
 * Log what was restored, and what was not, with a count per reason.
 */
static void
log_restore(uint64 loaded, const uint64 *skipped)
{
	StringInfoData detail;
	int			r;

	initStringInfo(&detail);
	for (r = 0; r < SKIP_NREASONS; r++)
	{
		if (skipped[r] == 0)
			continue;
		appendStringInfo(&detail, "%s" UINT64_FORMAT " %s",
						 detail.len > 0 ? ", " : "Not restored: ",
						 skipped[r], skip_reasons[r]);
	}
	if (detail.len > 0)
		appendStringInfoChar(&detail, '.');
	ereport(LOG,
			(errmsg("ratelimit restored the state of " UINT64_FORMAT " keys from file \"%s\"",
					loaded, RL_PERSIST_FILE),
			 detail.len > 0 ? errdetail_internal("%s", detail.data) : 0));
	pfree(detail.data);
}

/*
 * The most log entries one saved log may have: what the pool can hold.
 * A longer one could not be restored, and is not read.
 */
static int64
log_max(void)
{
	return (int64) rl_pool_size * 1024 / (sizeof(RlBlock) + sizeof(uint32)) *
		RL_LOG_PER_BLOCK;
}

/*
 * At postmaster start, with a new store: load the state saved at the last
 * clean shutdown, skipping keys already idle and dropping invalid entries,
 * then remove the file.  The file is read twice as a stream: once to
 * check its framing and CRC, once to restore; what is allocated is a
 * buffer, a key, and a log no longer than the pool can hold.
 */
void
rl_persist_load(void)
{
	const RlEngine *store = rl_engine(RL_ENGINE_STORE);
	RlReader	r;
	uint64		size = 0;
	const char *problem;
	RlPersistHeader header;
	int64		now = rl_clock_now();
	uint64		loaded = 0;
	uint64		skipped[SKIP_NREASONS] = {0};
	char	   *key;
	RlLogEntry *log = NULL;
	int64		logcap = 0;
	uint64		i;

	memset(&r, 0, sizeof(r));
	r.fd = open_file(&size);
	if (r.fd < 0)
		return;
	r.buf = palloc(RL_READ_BUFFER);
	INIT_CRC32C(r.crc);
	problem = check_file(&r, size, &header);
	if (problem == NULL && !shut_down_cleanly())
	{
		ereport(LOG,
				(errmsg("ignoring file \"%s\"", RL_PERSIST_FILE),
				 errdetail("The server did not shut down cleanly, so the state saved in it may not be final.")));
		problem = "";
	}
	else if (problem != NULL)
		ignore_file(problem);
	if (problem != NULL || !reader_rewind(&r))
	{
		pfree(r.buf);
		CloseTransientFile(r.fd);
		(void) unlink(RL_PERSIST_FILE);
		return;
	}

	key = palloc(RL_MAX_STORED_KEY);
	for (i = 0; i < header.count; i++)
	{
		RlPersistEntry pe;
		RlEntryImage img;
		RlSkip		skip = SKIP_NREASONS;

		/* framed by check_file: these reads only fail on an I/O error */
		if (!reader_get(&r, &pe, sizeof(pe)))
			break;
		memset(&img, 0, sizeof(img));
		img.dbid = pe.dbid;
		img.algo = (RlAlgo) pe.algo;
		img.keylen = pe.keylen;
		img.key = key;
		img.owner_dbid = pe.owner_dbid;
		img.owner_roleid = pe.owner_roleid;
		img.saved.last = pe.last;
		img.saved.idle_at = pe.idle_at;
		img.saved.nlog = pe.nlog;
		/* a log's state is its sum; the others' the 24 bytes saved */
		if (pe.algo >= 0 && pe.algo < RL_NUM_ALGOS &&
			rl_algo((RlAlgo) pe.algo)->state == RL_STATE_LOG)
			memcpy(&img.saved.state.log.sum, pe.state, sizeof(int64));
		else
			memcpy(&img.saved.state, pe.state, sizeof(img.saved.state));

		if (pe.keylen > RL_MAX_STORED_KEY)
			skip = SKIP_KEY;
		else if (pe.nlog > log_max())
			skip = SKIP_NO_ROOM;
		if (skip != SKIP_NREASONS)
		{
			if (!reader_get(&r, NULL, (uint64) pe.keylen +
							(uint64) pe.nlog * sizeof(RlLogEntry)))
				break;
			skipped[skip]++;
			continue;
		}
		if (pe.nlog > logcap)
		{
			logcap = Min(Max(Max(64, logcap * 2), pe.nlog), log_max());
			log = log ? repalloc_huge(log, sizeof(RlLogEntry) * logcap) :
				palloc_extended(sizeof(RlLogEntry) * logcap, MCXT_ALLOC_HUGE);
		}
		if (!reader_get(&r, key, pe.keylen) ||
			!reader_get(&r, log, sizeof(RlLogEntry) * (uint64) pe.nlog))
			break;
		img.saved.log = log;

		skip = entry_problem(&pe, &img.saved, now);
		if (skip == SKIP_NREASONS && img.saved.idle_at <= now)
			skip = SKIP_IDLE;
		if (skip != SKIP_NREASONS)
			skipped[skip]++;
		else
			switch (store->restore(&img))
			{
				case RL_RESTORED:
					loaded++;
					break;
				case RL_RESTORE_NO_ROOM:
					skipped[SKIP_NO_ROOM]++;
					break;
				case RL_RESTORE_DUPLICATE:
					skipped[SKIP_DUPLICATE]++;
					break;
			}
	}
	pfree(key);
	if (log)
		pfree(log);
	pfree(r.buf);
	CloseTransientFile(r.fd);
	(void) unlink(RL_PERSIST_FILE);
	log_restore(loaded, skipped);
}
