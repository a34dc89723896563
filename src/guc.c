/*-------------------------------------------------------------------------
 *
 * guc.c
 *		Every ratelimit.* setting.
 *
 * Sizes are read once at postmaster start (PGC_POSTMASTER).  Settings that
 * change what gets admitted are superuser-only (PGC_SUSET), so an ordinary
 * role cannot loosen its own limits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "guc.h"
#include "redis.h"

int			rl_max_keys = 100000;
int			rl_pool_size = 16384;	/* kB */
int			rl_max_owners = 1024;
int			rl_fail_mode = RL_FAIL_OPEN;
bool		rl_refund_on_rollback = false;
int			rl_backend = RL_BACKEND_LOCAL;
char	   *rl_redis_nodes = NULL;
int			rl_redis_database = 0;
char	   *rl_redis_user = NULL;
char	   *rl_redis_password = NULL;
char	   *rl_redis_namespace = NULL;
int			rl_redis_connect_timeout = 200;	/* ms */
int			rl_redis_command_timeout = 100;	/* ms */
int			rl_redis_clock = RL_REDIS_CLOCK_SERVER;
int			rl_redis_probe_interval = 1000;	/* ms */
double		rl_hybrid_multiple = 2.0;
int			rl_redis_batch = 0;	/* units; 0 = exact */

const struct config_enum_entry rl_backend_options[] = {
	{"local", RL_BACKEND_LOCAL, false},
	{"redis", RL_BACKEND_REDIS, false},
	{"hybrid", RL_BACKEND_HYBRID, false},
	{NULL, 0, false}
};

static const struct config_enum_entry redis_clock_options[] = {
	{"server", RL_REDIS_CLOCK_SERVER, false},
	{"client", RL_REDIS_CLOCK_CLIENT, false},
	{NULL, 0, false}
};

const struct config_enum_entry rl_fail_mode_options[] = {
	{"open", RL_FAIL_OPEN, false},
	{"closed", RL_FAIL_CLOSED, false},
	{"local", RL_FAIL_LOCAL, false},
	{NULL, 0, false}
};

/* ratelimit.redis_nodes: a non-empty list of host:port */
static bool
check_redis_nodes(char **newval, void **extra, GucSource source)
{
	int			n;
	char	  **hosts;
	int		   *ports;
	bool		ok = rl_redis_parse_nodes(*newval, &n, &hosts, &ports);
	int			i;

	for (i = 0; i < n; i++)
		pfree(hosts[i]);
	pfree(hosts);
	pfree(ports);
	if (!ok)
		GUC_check_errdetail("Expected host:port[,host:port...], with ports from 1 to 65535.");
	return ok;
}

/*
 * ratelimit.redis_namespace: becomes part of every key name, where ':', '{'
 * and '}' would make names ambiguous or move the hash tag.
 */
static bool
check_redis_namespace(char **newval, void **extra, GucSource source)
{
	if (strpbrk(*newval, ":{}") != NULL)
	{
		GUC_check_errdetail("The namespace must not contain ':', '{' or '}'.");
		return false;
	}
	return true;
}

/* The connection settings changed: reconnect before the next call. */
static void
assign_redis(const char *newval, void *extra)
{
	rl_redis_config_changed();
}

static void
assign_redis_int(int newval, void *extra)
{
	rl_redis_config_changed();
}

/*
 * SHOW and pg_settings display a mask, never the password: monitoring roles
 * (pg_read_all_settings) may read superuser-only settings.
 */
static const char *
show_redis_password(void)
{
	return rl_redis_password && rl_redis_password[0] ? "********" : "";
}

/*
 * Define the settings (from _PG_init, while shared_preload_libraries is
 * being processed).
 */
void
rl_guc_init(void)
{
	DefineCustomIntVariable("ratelimit.max_keys",
							"Number of keys the shared-memory store can hold.",
							"Each key takes about 124 bytes of shared memory.",
							&rl_max_keys,
							100000, 16, INT_MAX / 2,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.pool_size",
							"Shared memory for sliding_window_log entries and long keys.",
							"Held in 64-byte blocks: four log entries, or 64 bytes of a key past its first 50.",
							&rl_pool_size,
							16384, 64, 64 * 1024 * 1024,
							PGC_POSTMASTER, GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.max_owners",
							"Number of (database, role) owners whose shares of the store are kept apart.",
							"Owners beyond it share an overflow owner per database (see docs/design.md).",
							&rl_max_owners,
							1024, 16, 65535,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("ratelimit.fail_mode",
							 "What to decide when the limiter cannot track or reach a key's state.",
							 "open allows the call, closed denies it, local decides it in shared memory (Redis backend only).",
							 &rl_fail_mode,
							 RL_FAIL_OPEN, rl_fail_mode_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("ratelimit.refund_on_rollback",
							 "Give back what direct calls consumed when their transaction aborts.",
							 "Quota triggers always do.  Off by default: a rolled-back transaction may still have read data or answered a client.",
							 &rl_refund_on_rollback,
							 false,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	/* ---- Redis backend settings ---- */

	DefineCustomEnumVariable("ratelimit.backend",
							 "Where decisions are made: local shared memory, Redis, or both.",
							 "hybrid checks a local limit of ratelimit.hybrid_multiple times the limit first, then asks Redis.",
							 &rl_backend,
							 RL_BACKEND_LOCAL, rl_backend_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("ratelimit.redis_nodes",
							   "Redis server, or seed nodes of a Redis Cluster, as host:port[,host:port...].",
							   NULL,
							   &rl_redis_nodes,
							   "127.0.0.1:6379",
							   PGC_SUSET, 0,
							   check_redis_nodes, assign_redis, NULL);

	DefineCustomIntVariable("ratelimit.redis_database",
							"Redis database number (0 with Redis Cluster).",
							NULL,
							&rl_redis_database,
							0, 0, INT_MAX,
							PGC_SUSET, 0,
							NULL, assign_redis_int, NULL);

	DefineCustomStringVariable("ratelimit.redis_user",
							   "Redis ACL user name (empty: the default user).",
							   NULL,
							   &rl_redis_user,
							   "",
							   PGC_SUSET, 0,
							   NULL, assign_redis, NULL);

	DefineCustomStringVariable("ratelimit.redis_password",
							   "Redis password (empty: no AUTH).",
							   NULL,
							   &rl_redis_password,
							   "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL,
							   NULL, assign_redis, show_redis_password);

	DefineCustomStringVariable("ratelimit.redis_namespace",
							   "Replaces the database OID in Redis key names.",
							   "Servers or databases with the same namespace share their limits. Empty: the database OID.",
							   &rl_redis_namespace,
							   "",
							   PGC_SUSET, 0,
							   check_redis_namespace, assign_redis, NULL);

	DefineCustomIntVariable("ratelimit.redis_connect_timeout",
							"Longest wait for a connection to Redis.",
							NULL,
							&rl_redis_connect_timeout,
							200, 1, 60000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.redis_command_timeout",
							"Longest wait for Redis to decide a call.",
							NULL,
							&rl_redis_command_timeout,
							100, 1, 60000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("ratelimit.redis_clock",
							 "Clock of calls without \"at\": Redis TIME (server) or this server's (client).",
							 NULL,
							 &rl_redis_clock,
							 RL_REDIS_CLOCK_SERVER, redis_clock_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.redis_probe_interval",
							"How long calls skip Redis after a failure before one probes it again.",
							NULL,
							&rl_redis_probe_interval,
							1000, 1, 3600000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomRealVariable("ratelimit.hybrid_multiple",
							 "Local pre-check of hybrid mode, as a multiple of the limit.",
							 NULL,
							 &rl_hybrid_multiple,
							 2.0, 1.0, 1000000.0,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.redis_batch",
							"Units a backend takes from Redis at once and admits locally (0: every call asks Redis).",
							"Applies to fixed_window, sliding_window_counter and token_bucket; trades precision for speed (see docs/redis.md).",
							&rl_redis_batch,
							0, 0, INT_MAX,
							PGC_SUSET, 0,
							NULL, assign_redis_int, NULL);

	MarkGUCPrefixReserved("ratelimit");
}
