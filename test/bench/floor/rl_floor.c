/*-------------------------------------------------------------------------
 *
 * rl_floor.c
 *		The floors of the ratelimit benchmark: a C function with the
 *		signature of rl_allow that decides nothing and returns true, and
 *		a C row trigger that lets every row through, the floor of a quota
 *		trigger (rl_enforce).
 *
 * rl_floor's throughput under pgbench is what the server, the protocol, the
 * executor and the function-call machinery cost on their own, so that
 * rl_allow's throughput divided by this one is the share left after the
 * limiter's own work; in instructions (test/bench/cost.sh), rl_allow's
 * count minus this one's is the limiter's own.  Both must stay as cheap as
 * a real call can be: rl_floor is not STRICT (neither is rl_allow), reads
 * no argument and detoasts nothing; the trigger reads no argument and no
 * column.  They hold no state and take no lock.
 *
 * The SQL declarations live in test/bench/setup.sql.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/trigger.h"
#include "fmgr.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(rl_floor);
PG_FUNCTION_INFO_V1(rl_floor_trigger);

/*
 * rl_floor(key text, algo text, limit bigint, per interval, cost bigint,
 *			burst bigint, at timestamptz) RETURNS boolean
 *
 * rl_floor(key text, policy text, at timestamptz, cost bigint)
 *		RETURNS boolean
 *
 * Always allows.  The same C function serves both forms of rl_allow (the
 * algorithm form and the policy form).  The arguments are left untouched on
 * purpose: the cost of evaluating them is already paid by the executor, as
 * for rl_allow.
 */
Datum
rl_floor(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(true);
}

/*
 * rl_floor_trigger() RETURNS trigger
 *
 * A row trigger that returns the row unchanged (NEW, or OLD for DELETE).
 * The one check it makes is the one every C trigger makes, rl_enforce
 * included: that the trigger manager called it.
 */
Datum
rl_floor_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_floor_trigger() was not called by the trigger manager")));
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		return PointerGetDatum(trigdata->tg_newtuple);
	return PointerGetDatum(trigdata->tg_trigtuple);
}
