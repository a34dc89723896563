/*-------------------------------------------------------------------------
 *
 * store_owner.c
 *		The store's owners and their fair shares: who may take room from
 *		whom (docs/design.md, "Isolation").
 *
 * Every entry belongs to an owner, the (database, role) whose call created
 * it, and its pool blocks count for that owner.  The capacity (entries, or
 * blocks) is split evenly between the databases whose owners hold some,
 * then between a database's owners: that is an owner's fair share.  One
 * owner may use everything while no other needs room; an owner under its
 * share that finds no room evicts what an owner over its share holds (of
 * another database, only if that database is over its part), and an owner
 * at or over its share may not take the last 1/16 of the pool.  So no
 * database or role can take the store or the pool from the others.
 *
 * Locking contract (store.c has the whole): the owner lock, exclusive, to
 * claim, pin or hand over a slot, shared to list them, never taken while a
 * partition lock is held; what an owner holds is in atomic counters,
 * changed under the partition lock of the entry concerned and read
 * without a lock.  Which entry to evict is store_entry.c's to find, with
 * the shares computed here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"

#include "store_int.h"

/*
 * Owner slots: the last 1/8 of the table is kept for databases' overflow
 * owners (slot 0, RL_OWNER_OVERFLOW, is the store-wide one).
 */
#define RL_OWNER_RESERVE_DIV 8

/* owners a backend keeps pinned: the roles it acted as most recently */
#define RL_OWNER_CACHE		8

/* ---- owner slots ---- */

/*
 * Make slot i an owner that holds nothing, of the database whose record is
 * slot db (-1: slot i is that record).  A role slot taken over from an
 * idle owner leaves its old database.  The owner lock is held.
 */
static int
owner_init(int i, Oid dbid, Oid roleid, int db)
{
	RlOwner    *o = &rl_owner_slots[i];

	if (o->in_use && o->db != i)
		rl_owner_slots[o->db].members--;
	o->dbid = dbid;
	o->roleid = roleid;
	o->in_use = true;
	o->db = (uint16) (db < 0 ? i : db);
	o->members = 0;
	if (db >= 0)
		rl_owner_slots[db].members++;
	pg_atomic_write_u64(&o->hint, 0);
	pg_atomic_write_u64(&o->evicted, 0);
	pg_atomic_write_u64(&o->refused, 0);
	return i;
}

/*
 * Can the slot be handed to another owner?  It holds nothing, no backend
 * caches it, and (a database's record) no role slot refers to it, so
 * nothing can start counting on it: entries are created only for owners a
 * backend has pinned (or by the postmaster at start).  The owner lock is
 * held.
 */
static bool
owner_idle(RlOwner *o)
{
	return o->members == 0 &&
		pg_atomic_read_u32(&o->pins) == 0 &&
		pg_atomic_read_u32(&o->entries) == 0 &&
		pg_atomic_read_u32(&o->blocks) == 0;
}

/*
 * The slot of (dbid, roleid), or -1; *free_slot is one that may be
 * claimed (-1 if none) and *nfree how many may.  The owner lock is held.
 */
static int
owner_lookup(Oid dbid, Oid roleid, int *free_slot, int *nfree)
{
	int			i;

	*free_slot = -1;
	*nfree = 0;
	for (i = 0; i < rl_store->nowners; i++)
	{
		RlOwner    *o = &rl_owner_slots[i];

		if (o->in_use && o->dbid == dbid && o->roleid == roleid)
			return i;
		if (i != RL_OWNER_OVERFLOW && (!o->in_use || owner_idle(o)))
		{
			if (*free_slot < 0)
				*free_slot = i;
			(*nfree)++;
		}
	}
	return -1;
}

/*
 * The slot for (dbid, roleid), claimed if need be, with its database's
 * record.  A role gets its own slot while more than the reserve is free;
 * otherwise it counts under its database's record (the database's
 * overflow owner), and when even the reserve is taken under the store's.
 * The owner lock is held exclusively (or no other process runs).
 */
int
rl_owner_claim(Oid dbid, Oid roleid)
{
	int			free_slot;
	int			nfree;
	int			slot = owner_lookup(dbid, roleid, &free_slot, &nfree);
	int			db;

	if (slot >= 0)
		return slot;
	if (!OidIsValid(dbid))
		return RL_OWNER_OVERFLOW;
	db = owner_lookup(dbid, InvalidOid, &free_slot, &nfree);
	if (db < 0)
	{
		if (nfree == 0)
			return RL_OWNER_OVERFLOW;
		db = owner_init(free_slot, dbid, InvalidOid, -1);
	}
	if (!OidIsValid(roleid))
		return db;

	/* the record counts as in use while the role's slot is looked for */
	rl_owner_slots[db].members++;
	(void) owner_lookup(dbid, roleid, &free_slot, &nfree);
	rl_owner_slots[db].members--;
	if (nfree <= rl_store->nowners / RL_OWNER_RESERVE_DIV)
		return db;
	return owner_init(free_slot, dbid, roleid, db);
}

typedef struct RlOwnerCached
{
	Oid			dbid;
	Oid			roleid;
	uint16		slot;
} RlOwnerCached;

/* this backend's pinned owners, most recently used first */
static RlOwnerCached owner_cache[RL_OWNER_CACHE];
static int	owner_ncached = 0;

/* Let go of a slot this backend pinned. */
static void
owner_unpin(uint16 slot)
{
	pg_atomic_fetch_sub_u32(&rl_owner_slots[slot].pins, 1);
}

/* before_shmem_exit: let go of every slot this backend pinned. */
static void
owner_unpin_all(int code, Datum arg)
{
	int			i;

	for (i = 0; i < owner_ncached; i++)
		owner_unpin(owner_cache[i].slot);
	owner_ncached = 0;
}

/*
 * The owner slot of a call made now in database dbid: (dbid, the current
 * user).  Found in the backend's cache, or claimed under the owner lock
 * and pinned, so that the slot cannot be handed to another owner while it
 * is cached.  Called before any partition lock is taken.
 */
uint16
rl_owner_current(Oid dbid)
{
	static bool exit_registered = false;
	Oid			roleid = GetUserId();
	RlOwnerCached found;
	int			i;

	/* the same owner as the last call: nearly always */
	if (likely(owner_ncached > 0 && owner_cache[0].dbid == dbid &&
			   owner_cache[0].roleid == roleid))
		return owner_cache[0].slot;
	for (i = 0; i < owner_ncached; i++)
		if (owner_cache[i].dbid == dbid && owner_cache[i].roleid == roleid)
			break;
	if (i < owner_ncached)
		found = owner_cache[i];
	else
	{
		if (!exit_registered)
		{
			before_shmem_exit(owner_unpin_all, (Datum) 0);
			exit_registered = true;
		}
		found.dbid = dbid;
		found.roleid = roleid;
		LWLockAcquire(owner_lock(), LW_EXCLUSIVE);
		found.slot = (uint16) rl_owner_claim(dbid, roleid);
		pg_atomic_fetch_add_u32(&rl_owner_slots[found.slot].pins, 1);
		LWLockRelease(owner_lock());
		/* forget the least recently used */
		if (owner_ncached == RL_OWNER_CACHE)
			owner_unpin(owner_cache[--owner_ncached].slot);
		i = owner_ncached++;
	}
	memmove(&owner_cache[1], &owner_cache[0], i * sizeof(RlOwnerCached));
	owner_cache[0] = found;
	return found.slot;
}

/* What the owner holds: entries, or pool blocks. */
uint32
rl_owner_held(uint16 owner, bool blocks)
{
	RlOwner    *o = &rl_owner_slots[owner];

	return pg_atomic_read_u32(blocks ? &o->blocks : &o->entries);
}

/*
 * Add delta to a counter of holders; report whether it went from zero to
 * more (1), back to zero (-1), or neither (0).
 */
static int
holders_add(pg_atomic_uint32 *counter, int32 delta)
{
	uint32		before = pg_atomic_fetch_add_u32(counter, delta);

	Assert(delta > 0 || before >= (uint32) -delta);
	if (before == 0)
		return 1;
	return (int64) before + delta == 0 ? -1 : 0;
}

/*
 * Count delta more entries (or blocks) for the owner and its database, and
 * keep the number of the database's owners holding some, and of databases
 * whose owners do.  Under the partition lock of the entry concerned.
 */
void
rl_owner_count(uint16 owner, bool blocks, int32 delta)
{
	RlOwner    *o = &rl_owner_slots[owner];
	RlOwner    *db = &rl_owner_slots[o->db];
	int			change;

	if (delta == 0)
		return;
	pg_atomic_fetch_add_u32(blocks ? &db->db_blocks : &db->db_entries, delta);
	change = holders_add(blocks ? &o->blocks : &o->entries, delta);
	if (change != 0 &&
		holders_add(blocks ? &db->block_owners : &db->entry_owners,
					change) != 0)
		holders_add(blocks ? &rl_store->block_dbs : &rl_store->entry_dbs,
					change);
}

/*
 * Fair shares of entries (or pool blocks) as seen by one call, on behalf
 * of an owner: the capacity is split evenly between the databases whose
 * owners hold some, then a database's share between its owners holding
 * some; the call's owner and its database count as holding some.
 * Splitting by database first keeps a database with many roles from
 * taking the share of the others.  Read without a lock: a heuristic.
 */
void
rl_owner_shares(RlShares *sh, uint16 owner, bool blocks)
{
	RlOwner    *db = &rl_owner_slots[rl_owner_slots[owner].db];
	uint64		capacity = blocks ? rl_store->nblocks :
		(uint64) rl_store->nparts * rl_store->per_part;
	int32		ndbs = (int32) pg_atomic_read_u32(blocks ? &rl_store->block_dbs :
												  &rl_store->entry_dbs);

	if (pg_atomic_read_u32(blocks ? &db->block_owners : &db->entry_owners) == 0)
		ndbs++;
	sh->blocks = blocks;
	sh->db_share = capacity / Max(ndbs, 1);
	sh->owner = owner;
	sh->db = rl_owner_slots[owner].db;
}

/* An owner's fair share: its database's, over the database's owners. */
static uint64
share_of(const RlShares *sh, uint16 owner)
{
	uint16		dbslot = rl_owner_slots[owner].db;
	RlOwner    *db = &rl_owner_slots[dbslot];
	int32		nowners = (int32) pg_atomic_read_u32(sh->blocks ?
													 &db->block_owners :
													 &db->entry_owners);

	if (dbslot == sh->db && rl_owner_held(sh->owner, sh->blocks) == 0)
		nowners++;
	return sh->db_share / Max(nowners, 1);
}

/* Does the owner hold less than its fair share? */
bool
rl_owner_under(const RlShares *sh, uint16 owner)
{
	return rl_owner_held(owner, sh->blocks) < share_of(sh, owner);
}

/*
 * May an owner under its share evict what this owner holds?  Only if this
 * owner holds more than its own share, and, in another database, if that
 * database holds more than a database's share: an owner within its share
 * is never evicted, nor a database within its share for another's sake.
 */
bool
rl_owner_evictable(const RlShares *sh, uint16 owner)
{
	uint16		dbslot = rl_owner_slots[owner].db;
	RlOwner    *db = &rl_owner_slots[dbslot];

	if (rl_owner_held(owner, sh->blocks) <= share_of(sh, owner))
		return false;
	return dbslot == sh->db ||
		pg_atomic_read_u32(sh->blocks ? &db->db_blocks :
						   &db->db_entries) > sh->db_share;
}

/*
 * Entry idx of the owner now holds nblocks pool blocks: keep the owner's
 * hint on a block holder, preferring the one with the most blocks, and
 * drop it when that entry holds none any more.  Compare-and-swap, since
 * entries of one owner change under different partition locks.
 */
void
rl_owner_hint(uint16 owner, uint32 idx, uint32 nblocks)
{
	RlOwner    *o = &rl_owner_slots[owner];
	uint64		old = pg_atomic_read_u64(&o->hint);

	for (;;)
	{
		uint64		new;

		if (old != 0 && HINT_ENTRY(old) == idx)
			new = nblocks > 0 ? HINT_MAKE(idx, nblocks) : 0;
		else if (nblocks > HINT_BLOCKS(old))
			new = HINT_MAKE(idx, nblocks);
		else
			return;
		if (new == old || pg_atomic_compare_exchange_u64(&o->hint, &old, new))
			return;
	}
}
