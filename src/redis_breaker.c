/*-------------------------------------------------------------------------
 *
 * redis_breaker.c
 *		The Redis engine's shared state: the circuit breaker, the counters
 *		of rl_redis_info() and the latest failure.
 *
 * A failed call opens the breaker for ratelimit.redis_probe_interval:
 * calls then fail fast (fail_mode decides them) until the interval is over,
 * when the first backend to swap open_until forward probes Redis with its
 * own call; success closes the breaker.  Failures are logged as a WARNING
 * at most once per RL_REDIS_WARN_INTERVAL for the whole server.
 *
 * Shared state (RlRedisShared) is a few atomics and a message:
 *	- the breaker's open_until and the counters are pg_atomic_uint64, read
 *	  and written without locks;
 *	- last_error is protected by the spinlock "mutex", held only to copy it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port/atomics.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/guc.h"

#include "redis_int.h"

#define RL_REDIS_WARN_INTERVAL	(10 * USECS_PER_SEC)

typedef struct RlRedisShared
{
	pg_atomic_uint64 open_until;	/* breaker: Unix us, 0 = closed */
	pg_atomic_uint64 last_warning;	/* Unix us of the last warning logged */
	pg_atomic_uint64 unwarned;	/* failures since that warning */
	pg_atomic_uint64 counters[RL_REDIS_NCOUNTERS];
	slock_t		mutex;			/* protects the two fields below */
	int64		last_error_at;
	char		last_error[RL_REDIS_ERROR_LEN];
} RlRedisShared;

int			rl_redis_probe_interval = 1000; /* ms */

static RlRedisShared *rl_redis_shared = NULL;

/* The breaker's setting (from rl_redis_init). */
void
rl_redis_breaker_init(void)
{
	DefineCustomIntVariable("ratelimit.redis_probe_interval",
							"How long calls skip Redis after a failure before one probes it again.",
							NULL,
							&rl_redis_probe_interval,
							1000, 1, 3600000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* shmem_request_hook */
void
rl_redis_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(RlRedisShared)));
}

/* shmem_startup_hook; the caller holds AddinShmemInitLock */
void
rl_redis_shmem_startup(void)
{
	bool		found;
	int			i;

	rl_redis_shared = ShmemInitStruct("ratelimit redis",
									  sizeof(RlRedisShared), &found);
	if (found)
		return;
	pg_atomic_init_u64(&rl_redis_shared->open_until, 0);
	pg_atomic_init_u64(&rl_redis_shared->last_warning, 0);
	pg_atomic_init_u64(&rl_redis_shared->unwarned, 0);
	for (i = 0; i < RL_REDIS_NCOUNTERS; i++)
		pg_atomic_init_u64(&rl_redis_shared->counters[i], 0);
	SpinLockInit(&rl_redis_shared->mutex);
	rl_redis_shared->last_error_at = 0;
	rl_redis_shared->last_error[0] = '\0';
}

/* Add one to a counter of rl_redis_info(). */
void
rl_redis_count(RlRedisCounter c)
{
	if (rl_redis_shared)
		pg_atomic_fetch_add_u64(&rl_redis_shared->counters[c], 1);
}

/* Add n to a counter (an atomic add: no lock, no error, at an abort too). */
void
rl_redis_count_n(RlRedisCounter c, int64 n)
{
	if (rl_redis_shared && n > 0)
		pg_atomic_fetch_add_u64(&rl_redis_shared->counters[c], (uint64) n);
}

/* Is the breaker open (calls skip Redis)? */
bool
rl_redis_breaker_open(void)
{
	return rl_redis_shared != NULL &&
		pg_atomic_read_u64(&rl_redis_shared->open_until) != 0;
}

/*
 * May a decision go to Redis?  Not while the breaker is open (the call is
 * counted as skipped), except for the one call that wins the right to
 * probe once the interval is over (*probe is then set).
 */
bool
rl_redis_breaker_lets_through(bool *probe)
{
	int64		now = rl_clock_now();
	uint64		until;

	*probe = false;
	if (rl_redis_shared == NULL)
		return true;
	until = pg_atomic_read_u64(&rl_redis_shared->open_until);
	if (until != 0)
	{
		uint64		next = (uint64) now +
		(uint64) rl_redis_probe_interval * 1000;

		if ((uint64) now < until ||
			!pg_atomic_compare_exchange_u64(&rl_redis_shared->open_until,
											&until, next))
		{
			rl_redis_count(RL_REDIS_SKIPPED);
			return false;
		}
		*probe = true;
	}
	return true;
}

/* A decision went through: a probe closes the breaker. */
void
rl_redis_breaker_close(bool probe)
{
	if (!probe)
		return;
	pg_atomic_write_u64(&rl_redis_shared->open_until, 0);
	ereport(LOG,
			(errmsg("ratelimit: Redis is reachable again")));
}

/*
 * A call failed (a decision, or a refund, or an administrator's command):
 * count it, remember why, open the breaker for a probe interval from now
 * and log a warning at most once per RL_REDIS_WARN_INTERVAL for the whole
 * server.
 */
void
rl_redis_failed(const RlRedisCall *call, bool decision)
{
	int64		now = rl_clock_now();
	uint64		interval = (uint64) rl_redis_probe_interval * 1000;
	uint64		was;
	uint64		last;
	uint64		unwarned;

	if (decision)
		rl_redis_count(RL_REDIS_FAILURES);
	if (rl_redis_shared == NULL)
		return;
	was = pg_atomic_exchange_u64(&rl_redis_shared->open_until,
								 (uint64) now + interval);
	if (was == 0)
		rl_redis_count(RL_REDIS_BREAKER_TRIPS);

	SpinLockAcquire(&rl_redis_shared->mutex);
	rl_redis_shared->last_error_at = now;
	memcpy(rl_redis_shared->last_error, call->error,
		   sizeof(rl_redis_shared->last_error));
	SpinLockRelease(&rl_redis_shared->mutex);

	unwarned = pg_atomic_fetch_add_u64(&rl_redis_shared->unwarned, 1) + 1;
	last = pg_atomic_read_u64(&rl_redis_shared->last_warning);
	if ((uint64) now >= last + RL_REDIS_WARN_INTERVAL &&
		pg_atomic_compare_exchange_u64(&rl_redis_shared->last_warning,
									   &last, (uint64) now))
	{
		unwarned = pg_atomic_exchange_u64(&rl_redis_shared->unwarned, 0);
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ratelimit: Redis is unavailable: %s", call->error),
				 errdetail("%llu call(s) to Redis failed since the last warning; while the circuit breaker is open, calls skip Redis (rl_redis_info() counts them) and \"ratelimit.fail_mode\" decides; Redis is probed again every %d ms.",
						   (unsigned long long) unwarned,
						   rl_redis_probe_interval)));
	}
}

/* An item of rl_redis_info. */
static void
item(RlInfoItem *items, int *n, const char *name, RlInfoType type,
	 bool isnull, int64 value)
{
	RlInfoItem *it = &items[(*n)++];

	it->name = name;
	it->type = type;
	it->isnull = isnull;
	it->value = value;
	it->text = NULL;
}

/*
 * The breaker's state, the counters and the latest failure, as
 * rl_redis_info() reports them.
 */
int
rl_redis_breaker_info(RlInfoItem *items)
{
	static const char *const counter_names[RL_REDIS_NCOUNTERS] = {
		[RL_REDIS_CALLS] = "calls",
		[RL_REDIS_FAILURES] = "failures",
		[RL_REDIS_SKIPPED] = "skipped",
		[RL_REDIS_BREAKER_TRIPS] = "breaker_trips",
		[RL_REDIS_CONNECTS] = "connects",
		[RL_REDIS_REDIRECTS] = "redirects",
		[RL_REDIS_SCRIPT_LOADS] = "script_loads",
		[RL_REDIS_BATCHED] = "batched",
		[RL_REDIS_REFUNDS_QUEUED] = "refunds_queued",
		[RL_REDIS_REFUNDS_SENT] = "refunds_sent",
		[RL_REDIS_REFUNDS_DROPPED] = "refunds_dropped",
	};
	int64		until = 0;
	int64		error_at = 0;
	char		error[RL_REDIS_ERROR_LEN];
	int			n = 0;
	int			i;

	error[0] = '\0';
	if (rl_redis_shared != NULL)
	{
		until = (int64) pg_atomic_read_u64(&rl_redis_shared->open_until);
		SpinLockAcquire(&rl_redis_shared->mutex);
		error_at = rl_redis_shared->last_error_at;
		memcpy(error, rl_redis_shared->last_error, sizeof(error));
		SpinLockRelease(&rl_redis_shared->mutex);
	}
	item(items, &n, "breaker_open", RL_INFO_BOOL, false, until != 0);
	item(items, &n, "breaker_until", RL_INFO_TIME, until == 0, until);
	for (i = 0; i < RL_REDIS_NCOUNTERS; i++)
		item(items, &n, counter_names[i], RL_INFO_BIGINT, false,
			 rl_redis_shared == NULL ? 0 :
			 (int64) pg_atomic_read_u64(&rl_redis_shared->counters[i]));
	item(items, &n, "last_error", RL_INFO_TEXT, error_at == 0, 0);
	items[n - 1].text = pstrdup(error);
	item(items, &n, "last_error_at", RL_INFO_TIME, error_at == 0, error_at);
	return n;
}
