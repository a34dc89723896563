/*-------------------------------------------------------------------------
 *
 * rl_floor.c
 *		The floor of the ratelimit benchmark: a C function with the
 *		signature of rl_allow that decides nothing and returns true.
 *
 * Its throughput under pgbench is what the server, the protocol, the
 * executor and the function-call machinery cost on their own, so that
 * rl_allow's throughput divided by this one is the share left after the
 * limiter's own work.  It must stay as cheap as a real call can be: it is
 * not STRICT (neither is rl_allow), reads no argument and detoasts
 * nothing.  It holds no state and takes no lock.
 *
 * The SQL declaration lives in test/bench/setup.sql.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(rl_floor);

/*
 * rl_floor(key text, algo text, limit bigint, per interval, cost bigint,
 *			burst bigint, at timestamptz) RETURNS boolean
 *
 * Always allows.  The arguments are left untouched on purpose: the cost of
 * evaluating them is already paid by the executor, as for rl_allow.
 */
Datum
rl_floor(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(true);
}
