/*-------------------------------------------------------------------------
 *
 * redis_lease.h
 *		The shared table of this server's leases (redis_lease.c) and what
 *		the lease worker (redis_lease_worker.c) uses of it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_REDIS_LEASE_H
#define RL_REDIS_LEASE_H

#include "redis_int.h"

/* longest Redis name of a key: rl:{<namespace>:cc:<key>} */
#define RL_LEASE_KEY_MAX	(RL_MAX_STORED_KEY + 2 * NAMEDATALEN)

/* a holder's name: server number, pid, entry, generation */
#define RL_HOLDER_LEN		64

/* shortest wait of the worker between two rounds (ms) */
#define RL_LEASE_MIN_WAIT	10

/* how soon the worker tries again after a failed renewal (ms) */
#define RL_LEASE_RETRY		1000

typedef enum RlSlotLeaseState
{
	RL_LEASE_FREE = 0,
	RL_LEASE_TAKING,			/* its acquire (or its wait) is under way */
	RL_LEASE_HELD,				/* renewed by the worker */
	RL_LEASE_LOST,				/* its lease was gone at a renewal */
	RL_LEASE_RELEASE			/* to be removed from Redis */
} RlSlotLeaseState;

/* One lease (or ticket in a queue) of this server. */
typedef struct RlSlotLease
{
	uint8		state;			/* RlSlotLeaseState */
	uint32		generation;		/* one more at each use of the entry */
	int			pid;			/* its backend */
	int			procno;
	int64		renewed;		/* taken or last renewed (Unix us) */
	int64		expires;		/* its lease ends by then at the latest */
	int			keylen;
	char		key[RL_LEASE_KEY_MAX];	/* the key's Redis name */
} RlSlotLease;

typedef struct RlSlotLeaseShared
{
	LWLock	   *lock;
	uint64		server;			/* random, new at each (re)start */
	int			worker;			/* the worker's procno, or -1 */
	int			nleases;
	RlSlotLease leases[FLEXIBLE_ARRAY_MEMBER];
} RlSlotLeaseShared;

/* What a lease script answered. */
typedef struct RlSlotLeaseReply
{
	bool		ok;				/* Redis answered */
	int64		taken;			/* acquire: 1 taken, 0 not, -1 ticket gone;
								 * else the count */
	int64		in_flight;		/* acquire: slots held after the call */
	bool		shed;			/* acquire, not taken: by the headroom alone */
} RlSlotLeaseReply;

extern RlSlotLeaseShared *rl_lease_shared;

extern void rl_lease_holder_name(char *buf, int index, const RlSlotLease *l);
extern void rl_lease_script(RlRedisCall *call, const char *op,
							const char *key, int keylen, const char *holder,
							const RlParams *p, RlSlotLeaseReply *reply);
extern void rl_lease_set(int i, uint32 gen, RlSlotLeaseState state);

#endif							/* RL_REDIS_LEASE_H */
