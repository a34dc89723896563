/*-------------------------------------------------------------------------
 *
 * store_owner.c
 *		The store's owners and their caps: how much of the store one role,
 *		or one database, may hold (docs/design.md, "Isolation").
 *
 * Every entry belongs to an owner, the (database, role) whose call created
 * it, and its pool blocks count for that owner.  What a role's owners hold
 * in every database is summed in the role's record, what a database's
 * owners hold in the database's record.  A call that needs a new entry (or
 * pool block) for an owner whose role already holds ratelimit.role_share
 * of the store's entries (blocks), or whose database holds
 * ratelimit.database_share, gets none: the call has no room, and its
 * fail_mode decides.  No live entry is ever evicted to make room (only
 * entries whose state is back to a new key's are reclaimed), so no role
 * can reset its own quota by filling the store, or take another's state.
 *
 * Locking contract (store.c has the whole): the owner lock, exclusive, to
 * claim, pin or hand over a slot, shared to list them, never taken while a
 * partition lock is held; what an owner and a record hold is in atomic
 * counters, changed under the partition lock of the entry concerned and
 * read without a lock.  A cap is taken by adding first and checking the
 * sum the add returned, so that concurrent calls never take more than it.
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
 * slot db and the role whose record is slot role (-1: slot i is that
 * record itself).  A slot taken over from an idle owner leaves its old
 * records.  The owner lock is held.
 */
static int
owner_init(int i, Oid dbid, Oid roleid, int db, int role)
{
	RlOwner    *o = &rl_owner_slots[i];

	if (o->in_use && o->db != i)
		rl_owner_slots[o->db].members--;
	if (o->in_use && o->role != i)
		rl_owner_slots[o->role].members--;
	o->dbid = dbid;
	o->roleid = roleid;
	o->in_use = true;
	o->db = (uint16) (db < 0 ? i : db);
	o->role = (uint16) (role < 0 ? i : role);
	o->members = 0;
	if (db >= 0)
		rl_owner_slots[db].members++;
	if (role >= 0)
		rl_owner_slots[role].members++;
	pg_atomic_write_u64(&o->refused, 0);
	return i;
}

/*
 * Can the slot be handed to another owner?  It holds nothing, no backend
 * caches it, and (a record) no owner slot names it, so nothing can start
 * counting on it: entries are created only for owners a
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
 * The slot of a record, claimed if need be and if more than "keep" slots
 * are free; -1 if none.  The owner lock is held.
 */
static int
record_claim(Oid dbid, Oid roleid, int keep)
{
	int			free_slot;
	int			nfree;
	int			slot = owner_lookup(dbid, roleid, &free_slot, &nfree);

	if (slot >= 0)
		return slot;
	if (nfree <= keep)
		return -1;
	return owner_init(free_slot, dbid, roleid, -1, -1);
}

/*
 * The slot for (dbid, roleid), claimed if need be, with its database's
 * and its role's records.  A role gets its own slot (and a record) while
 * more than the reserve is free; otherwise it counts under its database's
 * record (the database's overflow owner, which is its own role record:
 * the roles without a slot count, in each database, as one role), and when
 * even the reserve is taken under the store's slot.
 * The owner lock is held exclusively (or no other process runs).
 */
int
rl_owner_claim(Oid dbid, Oid roleid)
{
	int			reserve = rl_store->nowners / RL_OWNER_RESERVE_DIV;
	int			free_slot;
	int			nfree;
	int			slot = owner_lookup(dbid, roleid, &free_slot, &nfree);
	int			db;
	int			role;

	if (slot >= 0)
		return slot;
	if (!OidIsValid(dbid))
		return RL_OWNER_OVERFLOW;
	db = owner_lookup(dbid, InvalidOid, &free_slot, &nfree);
	if (db < 0)
	{
		if (nfree == 0)
			return RL_OWNER_OVERFLOW;
		db = owner_init(free_slot, dbid, InvalidOid, -1, -1);
	}
	if (!OidIsValid(roleid))
		return db;

	/* the records count as in use while the owner's slot is looked for */
	rl_owner_slots[db].members++;
	role = record_claim(InvalidOid, roleid, reserve + 1);
	if (role >= 0)
	{
		rl_owner_slots[role].members++;
		(void) owner_lookup(dbid, roleid, &free_slot, &nfree);
		rl_owner_slots[role].members--;
	}
	rl_owner_slots[db].members--;
	if (role < 0 || nfree <= reserve)
		return db;
	return owner_init(free_slot, dbid, roleid, db, role);
}

/*
 * this backend's pinned owners, most recently used first (not static:
 * rl_owner_current, inline in store_int.h, looks at the first, #9)
 */
RlOwnerCached rl_owner_cache[RL_OWNER_CACHE];
int			rl_owner_ncached = 0;

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

	for (i = 0; i < rl_owner_ncached; i++)
		owner_unpin(rl_owner_cache[i].slot);
	rl_owner_ncached = 0;
}

/*
 * The owner slot of a call made now in database dbid: (dbid, the current
 * user).  Found in the backend's cache, or claimed under the owner lock
 * and pinned, so that the slot cannot be handed to another owner while it
 * is cached.  Called before any partition lock is taken, through
 * rl_owner_current (store_int.h), which answers the usual case inline.
 */
uint16
rl_owner_lookup(Oid dbid)
{
	static bool exit_registered = false;
	Oid			roleid = GetUserId();
	RlOwnerCached found;
	int			i;

	/* the same owner as the last call: nearly always */
	if (likely(rl_owner_ncached > 0 && rl_owner_cache[0].dbid == dbid &&
			   rl_owner_cache[0].roleid == roleid))
		return rl_owner_cache[0].slot;
	for (i = 0; i < rl_owner_ncached; i++)
		if (rl_owner_cache[i].dbid == dbid &&
			rl_owner_cache[i].roleid == roleid)
			break;
	if (i < rl_owner_ncached)
		found = rl_owner_cache[i];
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
		if (rl_owner_ncached == RL_OWNER_CACHE)
			owner_unpin(rl_owner_cache[--rl_owner_ncached].slot);
		i = rl_owner_ncached++;
	}
	/*
	 * move the others down one place (valgrind takes a fortified memmove of
	 * overlapping entries for a memcpy)
	 */
	for (; i > 0; i--)
		rl_owner_cache[i] = rl_owner_cache[i - 1];
	rl_owner_cache[0] = found;
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
 * Count delta more entries (or blocks) for the owner, its database and its
 * role, without a cap (a release, or the store's own count).  Under the
 * partition lock of the entry concerned.
 */
void
rl_owner_count(uint16 owner, bool blocks, int32 delta)
{
	RlOwner    *o = &rl_owner_slots[owner];
	RlOwner    *db = &rl_owner_slots[o->db];
	RlOwner    *role = &rl_owner_slots[o->role];

	if (delta == 0)
		return;
	pg_atomic_fetch_add_u32(blocks ? &o->blocks : &o->entries, delta);
	pg_atomic_fetch_add_u32(blocks ? &db->db_blocks : &db->db_entries, delta);
	pg_atomic_fetch_add_u32(blocks ? &role->role_blocks : &role->role_entries,
							delta);
}

/*
 * A cap: how many entries (or pool blocks) one role may hold across
 * databases, or one database (ratelimit.role_share and
 * ratelimit.database_share, percentages of the capacity).
 */
uint64
rl_owner_cap(bool blocks, bool database)
{
	uint64		capacity = blocks ? rl_store->nblocks :
		(uint64) rl_store->nparts * rl_store->per_part;

	return capacity * (uint64) (database ? rl_database_share :
								rl_role_share) / 100;
}

/*
 * Add n to a record's sum if that keeps it within the cap (a cap of the
 * whole capacity is none: the store or the pool being full says it).  The
 * sum is added to first and checked as the add returned it, so that calls
 * racing in other partitions never pass a cap together.
 */
static bool
sum_take(pg_atomic_uint32 *sum, uint32 n, uint64 cap, uint64 capacity)
{
	if (cap >= capacity)
	{
		pg_atomic_fetch_add_u32(sum, n);
		return true;
	}
	if ((uint64) pg_atomic_fetch_add_u32(sum, n) + n <= cap)
		return true;
	pg_atomic_fetch_sub_u32(sum, n);
	return false;
}

/*
 * Take n more entries (or pool blocks) for the owner, within the caps of
 * its role and its database; over a cap, nothing is taken and the cap is
 * returned.  Under the partition lock of the entry concerned.
 */
RlRefusal
rl_owner_take(uint16 owner, bool blocks, uint32 n)
{
	RlOwner    *o = &rl_owner_slots[owner];
	RlOwner    *db = &rl_owner_slots[o->db];
	RlOwner    *role = &rl_owner_slots[o->role];
	pg_atomic_uint32 *role_sum = blocks ? &role->role_blocks :
		&role->role_entries;
	uint64		capacity = blocks ? rl_store->nblocks :
		(uint64) rl_store->nparts * rl_store->per_part;

	if (!sum_take(role_sum, n, rl_owner_cap(blocks, false), capacity))
		return RL_REFUSED_ROLE;
	if (!sum_take(blocks ? &db->db_blocks : &db->db_entries, n,
				  rl_owner_cap(blocks, true), capacity))
	{
		pg_atomic_fetch_sub_u32(role_sum, n);
		return RL_REFUSED_DATABASE;
	}
	pg_atomic_fetch_add_u32(blocks ? &o->blocks : &o->entries, n);
	return RL_REFUSED_NONE;
}
