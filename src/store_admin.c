/*-------------------------------------------------------------------------
 *
 * store_admin.c
 *		The store engine's administration: resets, figures, the keys and
 *		owners listed, and the images the state file saves and restores.
 *
 * Nothing here is on a decision's path.  Each partition is locked on its
 * own (store.c has the locking contract): never more than one partition
 * at a time, so that other keys keep being decided; the owner lock is
 * taken shared to list owners.  The images are taken and put back by the
 * postmaster alone (no backend running), without locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/syscache.h"

#include "store_int.h"

/*
 * engine reset: drop the state of one key for one algorithm, or for all
 * of them.  Returns the number of states dropped.
 */
int64
rl_store_reset(Oid dbid, const char *key, int keylen, bool all_algos,
			   RlAlgo algo)
{
	int64		dropped = 0;
	int			a;

	for (a = 0; a < RL_NUM_ALGOS; a++)
	{
		RlSlot		slot;
		RlEntry    *e;

		if (!all_algos && a != (int) algo)
			continue;
		slot = rl_store_slot(dbid, (RlAlgo) a, key, keylen);
		rl_part_lock(slot.partno, LW_EXCLUSIVE);
		e = rl_store_find(slot, dbid, (RlAlgo) a, key, keylen);
		if (e != NULL)
		{
			rl_store_wal_drop(e);
			rl_store_remove(slot.partno, e);
			dropped++;
		}
		rl_part_unlock(slot.partno);
	}
	return dropped;
}

/*
 * engine reset_all: drop every state of one database, or of all
 * (InvalidOid), one partition at a time.
 */
int64
rl_store_reset_all(Oid dbid)
{
	int64		dropped = 0;
	int			partno;

	for (partno = 0; partno < rl_store->nparts; partno++)
	{
		uint32		base = (uint32) partno * rl_store->per_part;
		uint32		j;

		rl_part_lock(partno, LW_EXCLUSIVE);
		for (j = 0; j < rl_store->per_part; j++)
		{
			RlEntry    *e = &rl_entries[base + j];

			if ((e->flags & RL_ENTRY_USED) &&
				(dbid == InvalidOid || e->dbid == dbid))
			{
				rl_store_wal_drop(e);
				rl_store_remove(partno, e);
				dropped++;
			}
		}
		rl_part_unlock(partno);
	}
	return dropped;
}

/* qsort and bsearch of OIDs */
static int
oid_cmp(const void *a, const void *b)
{
	Oid			x = *(const Oid *) a;
	Oid			y = *(const Oid *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * The distinct databases of the partition's entries, added to the sorted
 * set dbs (of *n, room for *cap, grown in the current memory context).
 * Copied under the partition's shared lock into buf (per_part OIDs).
 */
static Oid *
partition_databases(int partno, Oid *buf, Oid *dbs, int *n, int *cap)
{
	uint32		base = (uint32) partno * rl_store->per_part;
	int			got = 0;
	int			i;
	uint32		j;

	rl_part_lock(partno, LW_SHARED);
	for (j = 0; j < rl_store->per_part; j++)
		if (rl_entries[base + j].flags & RL_ENTRY_USED)
			buf[got++] = rl_entries[base + j].dbid;
	rl_part_unlock(partno);

	for (i = 0; i < got; i++)
	{
		if (bsearch(&buf[i], dbs, *n, sizeof(Oid), oid_cmp) != NULL)
			continue;
		if (*n == *cap)
		{
			*cap *= 2;
			dbs = repalloc(dbs, sizeof(Oid) * *cap);
		}
		dbs[(*n)++] = buf[i];
		qsort(dbs, *n, sizeof(Oid), oid_cmp);
	}
	return dbs;
}

/*
 * Drop the entries of databases that do not exist: dropped ones, whose
 * keys only idleness would free otherwise, and those a forged state file
 * named (the postmaster cannot read the catalog when it loads the file).
 * The databases of the entries are collected partition by partition
 * under shared locks, looked up in pg_database with no lock held, and the
 * entries of those that do not exist are dropped under each partition's
 * exclusive lock.  In a transaction.  Returns the number dropped.
 */
int64
rl_store_drop_gone(void)
{
	Oid		   *buf = palloc(sizeof(Oid) * rl_store->per_part);
	int			cap = 16;
	int			n = 0;
	Oid		   *dbs = palloc(sizeof(Oid) * cap);
	int			ngone = 0;
	int64		dropped = 0;
	int			partno;
	int			i;

	for (partno = 0; partno < rl_store->nparts; partno++)
		dbs = partition_databases(partno, buf, dbs, &n, &cap);
	for (i = 0; i < n; i++)
		if (!SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(dbs[i])))
			dbs[ngone++] = dbs[i];	/* stays sorted */

	for (partno = 0; ngone > 0 && partno < rl_store->nparts; partno++)
	{
		uint32		base = (uint32) partno * rl_store->per_part;
		uint32		j;

		rl_part_lock(partno, LW_EXCLUSIVE);
		for (j = 0; j < rl_store->per_part; j++)
		{
			RlEntry    *e = &rl_entries[base + j];

			if ((e->flags & RL_ENTRY_USED) &&
				bsearch(&e->dbid, dbs, ngone, sizeof(Oid), oid_cmp) != NULL)
			{
				rl_store_remove(partno, e);
				dropped++;
			}
		}
		rl_part_unlock(partno);
	}
	pfree(buf);
	pfree(dbs);
	return dropped;
}

/* An item of rl_store_info. */
static void
item(RlInfoItem *items, int *n, const char *name, RlInfoType type,
	 int64 value)
{
	RlInfoItem *it = &items[(*n)++];

	it->name = name;
	it->type = type;
	it->isnull = false;
	it->value = value;
	it->text = NULL;
}

/*
 * engine info: store-wide figures (rl_store_info, rl_store_shares); each
 * partition is read under its shared lock, the owners' counters without a
 * lock.  The most a role, and a database, holds of the keys and of the
 * pool are read from their records.
 */
int
rl_store_figures(RlInfoItem *items)
{
	int64		used = 0;
	int64		reclaimed = 0;
	int64		refused = 0;
	int64		durable = 0;
	int64		sweeps;
	int64		swept;
	bool		ready;
	int64		pool_used;
	uint32		most[2][2] = {{0, 0}, {0, 0}};	/* [database][blocks] */
	int			owners = 0;
	int			n = 0;
	int			partno;
	int			i;

	for (partno = 0; partno < rl_store->nparts; partno++)
	{
		RlPartitionData *part = &rl_store->parts[partno].d;

		rl_part_lock(partno, LW_SHARED);
		used += part->used;
		reclaimed += part->reclaimed;
		refused += part->refused;
		durable += part->durable;
		rl_part_unlock(partno);
	}
	SpinLockAcquire(&rl_store->durable_lock);
	ready = rl_store->durable_armed && !rl_store->durable_stopping;
	sweeps = (int64) rl_store->durable_sweeps;
	swept = (int64) rl_store->durable_swept;
	SpinLockRelease(&rl_store->durable_lock);
	SpinLockAcquire(&rl_store->pool_lock);
	pool_used = rl_store->nblocks - rl_store->pool_nfree;
	SpinLockRelease(&rl_store->pool_lock);
	for (i = 0; i < rl_store->nowners; i++)
	{
		RlOwner    *o = &rl_owner_slots[i];

		if (rl_owner_held((uint16) i, false) > 0 ||
			rl_owner_held((uint16) i, true) > 0)
			owners++;
		most[0][0] = Max(most[0][0], pg_atomic_read_u32(&o->role_entries));
		most[0][1] = Max(most[0][1], pg_atomic_read_u32(&o->role_blocks));
		most[1][0] = Max(most[1][0], pg_atomic_read_u32(&o->db_entries));
		most[1][1] = Max(most[1][1], pg_atomic_read_u32(&o->db_blocks));
	}

	item(items, &n, "capacity", RL_INFO_BIGINT,
		 (int64) rl_store->nparts * rl_store->per_part);
	item(items, &n, "used", RL_INFO_BIGINT, used);
	item(items, &n, "pool_blocks", RL_INFO_BIGINT, rl_store->nblocks);
	item(items, &n, "pool_used", RL_INFO_BIGINT, pool_used);
	item(items, &n, "reclaimed", RL_INFO_BIGINT, reclaimed);
	item(items, &n, "refused", RL_INFO_BIGINT, refused);
	item(items, &n, "partitions", RL_INFO_INTEGER, rl_store->nparts);
	item(items, &n, "owners", RL_INFO_INTEGER, owners);
	item(items, &n, "role_share", RL_INFO_INTEGER, rl_role_share);
	item(items, &n, "database_share", RL_INFO_INTEGER, rl_database_share);
	item(items, &n, "role_keys_cap", RL_INFO_BIGINT,
		 (int64) rl_owner_cap(false, false));
	item(items, &n, "database_keys_cap", RL_INFO_BIGINT,
		 (int64) rl_owner_cap(false, true));
	item(items, &n, "role_pool_blocks_cap", RL_INFO_BIGINT,
		 (int64) rl_owner_cap(true, false));
	item(items, &n, "database_pool_blocks_cap", RL_INFO_BIGINT,
		 (int64) rl_owner_cap(true, true));
	item(items, &n, "top_role_keys", RL_INFO_BIGINT, most[0][0]);
	item(items, &n, "top_role_pool_blocks", RL_INFO_BIGINT, most[0][1]);
	item(items, &n, "top_database_keys", RL_INFO_BIGINT, most[1][0]);
	item(items, &n, "top_database_pool_blocks", RL_INFO_BIGINT, most[1][1]);
	item(items, &n, "refused_role", RL_INFO_BIGINT,
		 (int64) pg_atomic_read_u64(&rl_store->refused_role));
	item(items, &n, "refused_database", RL_INFO_BIGINT,
		 (int64) pg_atomic_read_u64(&rl_store->refused_database));
	item(items, &n, "durable_keys", RL_INFO_BIGINT, durable);
	item(items, &n, "durable_ready", RL_INFO_BOOL, ready);
	item(items, &n, "sweeps", RL_INFO_BIGINT, sweeps);
	item(items, &n, "swept_keys", RL_INFO_BIGINT, swept);
	return n;
}

int
rl_store_max_owners(void)
{
	return rl_store->nowners;
}

/*
 * Copy out the owners that hold something or counted something (out has
 * room for rl_store_max_owners()), each with what its role holds in every
 * database and what its database holds; returns how many.  Under the owner
 * lock, shared.
 */
int
rl_store_owners(RlOwnerImage *out)
{
	int			n = 0;
	int			i;

	LWLockAcquire(owner_lock(), LW_SHARED);
	for (i = 0; i < rl_store->nowners; i++)
	{
		RlOwner    *o = &rl_owner_slots[i];
		RlOwner    *db = &rl_owner_slots[o->db];
		RlOwner    *role = &rl_owner_slots[o->role];
		RlOwnerImage *img = &out[n];

		if (!o->in_use)
			continue;
		img->dbid = o->dbid;
		img->roleid = o->roleid;
		img->keys = pg_atomic_read_u32(&o->entries);
		img->pool_blocks = pg_atomic_read_u32(&o->blocks);
		img->refused = (int64) pg_atomic_read_u64(&o->refused);
		img->role_keys = pg_atomic_read_u32(&role->role_entries);
		img->role_pool_blocks = pg_atomic_read_u32(&role->role_blocks);
		img->database_keys = pg_atomic_read_u32(&db->db_entries);
		img->database_pool_blocks = pg_atomic_read_u32(&db->db_blocks);
		if (img->keys > 0 || img->pool_blocks > 0 || img->refused > 0)
			n++;
	}
	LWLockRelease(owner_lock());
	return n;
}

/*
 * engine scan: the next entry from *cursor on (an entry number) holding
 * state of database dbid (or of any database if InvalidOid), copied under
 * its partition's shared lock, briefly.
 */
bool
rl_store_scan(Oid dbid, uint64 *cursor, RlKeyImage *img)
{
	uint64		n = (uint64) rl_store->nparts * rl_store->per_part;

	while (*cursor < n)
	{
		uint32		idx = (uint32) (*cursor)++;
		int			partno = (int) (idx / rl_store->per_part);
		RlEntry    *e = &rl_entries[idx];
		bool		found = false;

		rl_part_lock(partno, LW_SHARED);
		if ((e->flags & RL_ENTRY_USED) &&
			(dbid == InvalidOid || e->dbid == dbid))
		{
			img->dbid = e->dbid;
			img->algo = (RlAlgo) e->algo;
			img->keylen = rl_store_key_copy(e, img->key);
			img->last = e->last;
			img->idle_at = e->idle_at;
			img->state = e->st;
			img->held_since = rl_algo(e->algo)->state == RL_STATE_SLOTS ?
				rl_store_held_since(e) : RL_NO_TIME;
			found = true;
		}
		rl_part_unlock(partno);
		if (found)
			return true;
		CHECK_FOR_INTERRUPTS();
	}
	return false;
}

/*
 * engine images: call fn for every entry holding state, with its image (a
 * log's entries that still have a cost, in an array), but durable keys
 * (they have a file of their own, store_wal.c).  Only for the postmaster
 * at shutdown, when no backend runs: takes no lock.
 */
void
rl_store_images(void (*fn) (const RlEntryImage *img, void *arg), void *arg)
{
	uint32		n = (uint32) rl_store->nparts * rl_store->per_part;
	char	   *key = palloc(RL_MAX_STORED_KEY);
	RlChain		chain = store_chain();
	RlLogEntry *log = NULL;
	int			logcap = 0;
	uint32		idx;

	for (idx = 0; idx < n; idx++)
	{
		RlEntry    *e = &rl_entries[idx];
		RlOwner    *o = &rl_owner_slots[e->owner];
		RlEntryImage img;

		if ((e->flags & (RL_ENTRY_USED | RL_ENTRY_DURABLE)) != RL_ENTRY_USED)
			continue;
		memset(&img, 0, sizeof(img));
		img.dbid = e->dbid;
		img.algo = (RlAlgo) e->algo;
		img.keylen = rl_store_key_copy(e, key);
		img.key = key;
		img.owner_dbid = o->dbid;
		img.owner_roleid = o->roleid;
		img.saved.last = e->last;
		img.saved.idle_at = e->idle_at;
		if (rl_algo(e->algo)->state == RL_STATE_LOG)
		{
			int			nlog = rl_log_length(&e->st.log, &chain);

			if (nlog > logcap)
			{
				logcap = Max(Max(64, logcap * 2), nlog);
				log = log ? repalloc(log, logcap * sizeof(RlLogEntry)) :
					palloc(logcap * sizeof(RlLogEntry));
			}
			img.saved.nlog = rl_log_walk(&e->st.log, &chain, log, logcap);
			img.saved.log = log;
			img.saved.state.log.sum = e->st.log.sum;
		}
		else
			img.saved.state = e->st;
		fn(&img, arg);
	}
	pfree(key);
	if (log)
		pfree(log);
}

/*
 * engine restore: put back an entry saved by rl_store_images, checked by
 * the caller, with its owner, within the caps of the owner's role and
 * database as a call would be.  Only for the postmaster at startup, when
 * no backend runs: takes no lock.
 */
RlRestore
rl_store_restore(const RlEntryImage *img)
{
	RlRequest	req;
	RlSlot		slot;
	RlCall		call;
	RlEntry    *e;

	rl_request_init(&req);
	req.dbid = img->dbid;
	req.algo = img->algo;
	req.key = img->key;
	req.keylen = img->keylen;
	slot = rl_store_slot(req.dbid, req.algo, req.key, req.keylen);
	if (rl_store_find(slot, req.dbid, req.algo, req.key, req.keylen) != NULL)
		return RL_RESTORE_DUPLICATE;
	rl_store_call_init(&call, (uint16) rl_owner_claim(img->owner_dbid,
													 img->owner_roleid));
	call.partno = slot.partno;
	call.before = PG_INT64_MIN;
	e = rl_store_create(slot, &req, &call);
	if (e == NULL)
		return RL_RESTORE_NO_ROOM;
	e->last = img->saved.last;
	e->idle_at = img->saved.idle_at;
	if (rl_algo(img->algo)->state != RL_STATE_LOG)
	{
		e->st = img->saved.state;
		return RL_RESTORED;
	}

	if (!rl_store_log_fill(e, &call, img->saved.log, img->saved.nlog))
	{
		rl_store_remove(slot.partno, e);
		return RL_RESTORE_NO_ROOM;
	}
	return RL_RESTORED;
}
