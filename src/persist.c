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
 *	header	 magic, version, PG_VERSION_NUM, entry count
 *	entries	 dbid, algo, key length, log length, owner (database, role),
 *			 last, idle_at, 24 bytes of state; then the key bytes and the
 *			 log entries
 *	trailer	 CRC-32C of everything before it
 * A file that is short, has another magic or version, fails the CRC, or
 * follows an unclean shutdown is ignored with a LOG line.
 *
 * Runs only in the postmaster, when no backend exists: the store's locks
 * are not taken.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"

#include "backend.h"
#include "persist.h"
#include "store.h"

#define RL_PERSIST_FILE		"pg_stat/ratelimit.state"
#define RL_PERSIST_TMP		"pg_stat/ratelimit.state.tmp"
#define RL_PERSIST_MAGIC	0x524C5354	/* "RLST" */
#define RL_PERSIST_VERSION	2

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

StaticAssertDecl(sizeof(((RlEntryImage *) 0)->state) == 24,
				 "saved state size must match the store's");

typedef struct RlWriter
{
	FILE	   *file;
	pg_crc32c	crc;
	uint64		count;
	bool		failed;
} RlWriter;

static void
write_bytes(RlWriter *w, const void *data, size_t len)
{
	if (w->failed || len == 0)
		return;
	COMP_CRC32C(w->crc, data, len);
	if (fwrite(data, 1, len, w->file) != len)
		w->failed = true;
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
	pe.nlog = img->nlog;
	pe.owner_dbid = img->owner_dbid;
	pe.owner_roleid = img->owner_roleid;
	pe.last = img->last;
	pe.idle_at = img->idle_at;
	if (img->algo == RL_SLIDING_WINDOW_LOG)
		memcpy(pe.state, &img->logsum, sizeof(img->logsum));
	else
		memcpy(pe.state, &img->state, sizeof(pe.state));
	write_bytes(w, &pe, sizeof(pe));
	write_bytes(w, img->key, img->keylen);
	write_bytes(w, img->log, sizeof(RlLogEntry) * img->nlog);
	w->count++;
}

/*
 * on_shmem_exit callback of the postmaster: save the state, unless the
 * exit is abnormal.
 */
void
rl_persist_shutdown(int code, Datum arg)
{
	RlWriter	w;
	RlPersistHeader header;

	if (code != 0 || !rl_store_ready())
		return;

	w.file = AllocateFile(RL_PERSIST_TMP, PG_BINARY_W);
	if (w.file == NULL)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write ratelimit state file \"%s\": %m",
						RL_PERSIST_TMP)));
		return;
	}
	INIT_CRC32C(w.crc);
	w.count = 0;
	w.failed = false;

	/* a header with count 0 first; rewritten once the count is known */
	memset(&header, 0, sizeof(header));
	if (fwrite(&header, sizeof(header), 1, w.file) != 1)
		w.failed = true;
	rl_store_foreach_image(write_entry, &w);

	header.magic = RL_PERSIST_MAGIC;
	header.version = RL_PERSIST_VERSION;
	header.pg_version = PG_VERSION_NUM;
	header.count = w.count;
	COMP_CRC32C(w.crc, &header, sizeof(header));
	FIN_CRC32C(w.crc);
	if (!w.failed &&
		(fwrite(&w.crc, sizeof(w.crc), 1, w.file) != 1 ||
		 fseek(w.file, 0, SEEK_SET) != 0 ||
		 fwrite(&header, sizeof(header), 1, w.file) != 1))
		w.failed = true;
	if (FreeFile(w.file) != 0)
		w.failed = true;

	if (w.failed)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write ratelimit state file \"%s\": %m",
						RL_PERSIST_TMP)));
		unlink(RL_PERSIST_TMP);
		return;
	}
	(void) durable_rename(RL_PERSIST_TMP, RL_PERSIST_FILE, LOG);
	elog(DEBUG1, "ratelimit saved the state of " UINT64_FORMAT " keys",
		 w.count);
}

/* Read the whole file; NULL if absent or unreadable. */
static char *
read_file(size_t *len)
{
	FILE	   *file = AllocateFile(RL_PERSIST_FILE, PG_BINARY_R);
	char	   *data = NULL;
	long		size;

	if (file == NULL)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not read ratelimit state file \"%s\": %m",
							RL_PERSIST_FILE)));
		return NULL;
	}
	if (fseek(file, 0, SEEK_END) == 0 && (size = ftell(file)) >= 0 &&
		fseek(file, 0, SEEK_SET) == 0)
	{
		data = palloc_extended(Max(size, 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
		if (data != NULL && fread(data, 1, size, file) != (size_t) size)
		{
			pfree(data);
			data = NULL;
		}
		*len = (size_t) size;
	}
	FreeFile(file);
	return data;
}

/*
 * Check the file's framing: header, entries that fit, and the CRC.
 * Returns NULL if sound, or why not.
 */
static const char *
check_file(const char *data, size_t len)
{
	RlPersistHeader header;
	pg_crc32c	crc;
	pg_crc32c	stored;
	size_t		pos = sizeof(header);
	uint64		i;

	if (len < sizeof(header) + sizeof(crc))
		return "it is too short";
	memcpy(&header, data, sizeof(header));
	if (header.magic != RL_PERSIST_MAGIC)
		return "it is not a ratelimit state file";
	if (header.version != RL_PERSIST_VERSION ||
		header.pg_version != PG_VERSION_NUM)
		return "it was written by another version";

	for (i = 0; i < header.count; i++)
	{
		RlPersistEntry pe;

		if (pos + sizeof(pe) > len - sizeof(crc))
			return "it is truncated";
		memcpy(&pe, data + pos, sizeof(pe));
		if (pe.keylen < 0 || pe.keylen > RL_MAX_STORED_KEY || pe.nlog < 0 ||
			pe.algo < 0 || pe.algo >= RL_NUM_ALGOS)
			return "it holds an invalid entry";
		pos += sizeof(pe) + pe.keylen + (size_t) pe.nlog * sizeof(RlLogEntry);
		if (pos > len - sizeof(crc))
			return "it is truncated";
	}
	if (pos != len - sizeof(crc))
		return "it has trailing bytes";

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, data + sizeof(header), pos - sizeof(header));
	COMP_CRC32C(crc, &header, sizeof(header));
	FIN_CRC32C(crc);
	memcpy(&stored, data + pos, sizeof(stored));
	if (!EQ_CRC32C(crc, stored))
		return "its checksum does not match";
	return NULL;
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
 * At postmaster start, with a new store: load the state saved at the last
 * clean shutdown, skipping keys already idle, then remove the file.
 */
void
rl_persist_load(void)
{
	size_t		len = 0;
	char	   *data = read_file(&len);
	const char *problem;
	RlPersistHeader header;
	size_t		pos = sizeof(header);
	int64		now = rl_clock_now();
	uint64		loaded = 0;
	uint64		dropped = 0;
	uint64		i;

	if (data == NULL)
		return;
	problem = check_file(data, len);
	if (problem == NULL && !shut_down_cleanly())
		problem = "the server did not shut down cleanly";
	if (problem != NULL)
	{
		ereport(LOG,
				(errmsg("ignoring ratelimit state file \"%s\": %s",
						RL_PERSIST_FILE, problem)));
		pfree(data);
		unlink(RL_PERSIST_FILE);
		return;
	}

	memcpy(&header, data, sizeof(header));
	for (i = 0; i < header.count; i++)
	{
		RlPersistEntry pe;
		RlEntryImage img;
		RlLogEntry *log = NULL;

		memcpy(&pe, data + pos, sizeof(pe));
		pos += sizeof(pe);
		memset(&img, 0, sizeof(img));
		img.dbid = pe.dbid;
		img.owner_dbid = pe.owner_dbid;
		img.owner_roleid = pe.owner_roleid;
		img.algo = (RlAlgo) pe.algo;
		img.keylen = pe.keylen;
		img.key = data + pos;
		pos += pe.keylen;
		img.last = pe.last;
		img.idle_at = pe.idle_at;
		memcpy(&img.state, pe.state, sizeof(img.state));
		img.nlog = pe.nlog;
		if (pe.nlog > 0)
		{
			/* copied out: the file's bytes need not be aligned */
			log = palloc(sizeof(RlLogEntry) * pe.nlog);
			memcpy(log, data + pos, sizeof(RlLogEntry) * pe.nlog);
			pos += sizeof(RlLogEntry) * pe.nlog;
		}
		img.log = log;

		if (img.idle_at > now && rl_store_restore(&img) == RL_RESTORED)
			loaded++;
		else
			dropped++;
		if (log)
			pfree(log);
	}
	pfree(data);
	unlink(RL_PERSIST_FILE);
	ereport(LOG,
			(errmsg("ratelimit restored the state of " UINT64_FORMAT " keys (" UINT64_FORMAT " idle or without room)",
					loaded, dropped)));
}
