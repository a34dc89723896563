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

int			rl_max_keys = 100000;
int			rl_pool_size = 16384;	/* kB */
int			rl_fail_mode = RL_FAIL_OPEN;

static const struct config_enum_entry fail_mode_options[] = {
	{"open", RL_FAIL_OPEN, false},
	{"closed", RL_FAIL_CLOSED, false},
	{"local", RL_FAIL_LOCAL, false},
	{NULL, 0, false}
};

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
							"Held in 64-byte blocks: four log entries, or 64 bytes of a key past its first 56.",
							&rl_pool_size,
							16384, 64, 64 * 1024 * 1024,
							PGC_POSTMASTER, GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("ratelimit.fail_mode",
							 "What to decide when the limiter cannot track or reach a key's state.",
							 "open allows the call, closed denies it, local decides it in shared memory (Redis backend only).",
							 &rl_fail_mode,
							 RL_FAIL_OPEN, fail_mode_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	/* ---- Redis backend settings go here ---- */

	MarkGUCPrefixReserved("ratelimit");
}
