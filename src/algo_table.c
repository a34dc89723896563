/*-------------------------------------------------------------------------
 *
 * algo_table.c
 *		The algorithm table (its row is RlAlgoRoutine, algo.h) and the
 *		lookup of an algorithm by name.
 *
 * One row per algorithm, in RlAlgo order.  The algorithms' files and the
 * Lua they run in Redis are named by their rows; everything else reads the
 * rows.  No shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/memutils.h"

#include "algo.h"
#include "lua_scripts.h"		/* generated from src/lua by the Makefile */

#define NAME(s)		s, sizeof(s) - 1

const RlAlgoRoutine rl_algos[RL_NUM_ALGOS] = {
	[RL_FIXED_WINDOW] = {
		.name = NAME("fixed_window"),
		.code = "fw",
		.state = RL_STATE_WINDOW,
		.has_burst = false,
		.refund_grain = RL_GRAIN_WINDOW,
		.decide = rl_fixed_window,
		.charge = rl_fixed_window_charge,
		.refund = rl_fixed_window_refund,
		.image_valid = rl_fixed_window_image_valid,
		.lease_end = rl_fixed_window_lease_end,
		.lua_setup = "",
		.lua_decide = rl_lua_fixed_window,
		.lua_refund = rl_lua_fixed_window_refund,
		.lua_charge = rl_lua_fixed_window_charge,
	},
	[RL_SLIDING_WINDOW_LOG] = {
		.name = NAME("sliding_window_log"),
		.code = "swl",
		.state = RL_STATE_LOG,
		.has_burst = false,
		.refund_grain = RL_GRAIN_EXACT,
		.decide = rl_sliding_window_log,
		.charge = rl_sliding_window_log_charge,
		.refund = rl_sliding_window_log_refund,
		.image_valid = rl_log_image_valid,
		.lease_end = NULL,		/* exact by design: never batched */
		.lua_setup = "",
		.lua_decide = rl_lua_sliding_window_log,
		.lua_refund = rl_lua_sliding_window_log_refund,
		.lua_charge = rl_lua_sliding_window_log_charge,
	},
	[RL_SLIDING_WINDOW_COUNTER] = {
		.name = NAME("sliding_window_counter"),
		.code = "swc",
		.state = RL_STATE_WINDOW,
		.has_burst = false,
		.refund_grain = RL_GRAIN_WINDOW,
		.decide = rl_sliding_window_counter,
		.charge = rl_sliding_window_counter_charge,
		.refund = rl_sliding_window_counter_refund,
		.image_valid = rl_sliding_window_counter_image_valid,
		.lease_end = rl_sliding_window_counter_lease_end,
		.lua_setup = "",
		.lua_decide = rl_lua_sliding_window_counter,
		.lua_refund = rl_lua_sliding_window_counter_refund,
		.lua_charge = rl_lua_sliding_window_counter_charge,
	},
	[RL_TOKEN_BUCKET] = {
		.name = NAME("token_bucket"),
		.code = "tb",
		.state = RL_STATE_BUCKET,
		.has_burst = true,
		.refund_grain = RL_GRAIN_NONE,
		.decide = rl_token_bucket,
		.charge = rl_token_bucket_charge,
		.refund = rl_token_bucket_refund,
		.image_valid = rl_token_bucket_image_valid,
		.lease_end = rl_token_bucket_lease_end,
		.lua_setup = rl_lua_bucket,
		.lua_decide = rl_lua_token_bucket,
		.lua_refund = rl_lua_token_bucket_refund,
		.lua_charge = rl_lua_token_bucket_charge,
	},
	[RL_LEAKY_BUCKET] = {
		.name = NAME("leaky_bucket"),
		.code = "lb",
		.state = RL_STATE_BUCKET,
		.has_burst = true,
		.refund_grain = RL_GRAIN_NONE,
		.decide = rl_leaky_bucket,
		.charge = rl_leaky_bucket_charge,
		.refund = rl_leaky_bucket_refund,
		.image_valid = rl_leaky_bucket_image_valid,
		.lease_end = NULL,		/* a delay per call: never batched */
		.lua_setup = rl_lua_bucket,
		.lua_decide = rl_lua_leaky_bucket,
		.lua_refund = rl_lua_leaky_bucket_refund,
		.lua_charge = rl_lua_leaky_bucket_charge,
	},
	[RL_CONCURRENCY] = {
		.name = NAME("concurrency"),
		.code = "cc",
		.state = RL_STATE_SLOTS,
		.has_burst = false,
		.refund_grain = RL_GRAIN_NONE,
		.decide = rl_concurrency,
		.refund = rl_concurrency_refund,
		.image_valid = rl_slots_image_valid,
		.lease_end = NULL,		/* a slot is held, not spent: no lease */
		.lua_setup = "",
		.lua_decide = "",		/* the shared-memory store only, so far */
		.lua_refund = "",
	},
};

/*
 * Map an algorithm name (not NUL-terminated) to its number.  Called on
 * every request: lengths and first bytes are compared before the rest.
 */
bool
rl_algo_parse(const char *name, int len, RlAlgo *algo)
{
	int			i;

	for (i = 0; i < RL_NUM_ALGOS; i++)
	{
		const RlAlgoRoutine *a = &rl_algos[i];

		if (a->namelen == len && a->name[0] == name[0] &&
			memcmp(a->name, name, len) == 0)
		{
			*algo = (RlAlgo) i;
			return true;
		}
	}
	return false;
}

const char *
rl_algo_name(RlAlgo algo)
{
	Assert(algo >= 0 && algo < RL_NUM_ALGOS);
	return rl_algos[algo].name;
}

/*
 * The names of the rate-limiting algorithms, for messages ("a, b and c"):
 * all of them, or those that take a burst.  Those that hold slots
 * (concurrency) are rl_acquire's, not the rate functions'.  Built once, in
 * TopMemoryContext.
 */
const char *
rl_algo_list(bool burst_only)
{
	static char *lists[2] = {NULL, NULL};

	if (lists[burst_only] == NULL)
	{
		StringInfoData buf;
		int			n = 0;
		int			done = 0;
		int			i;

		for (i = 0; i < RL_NUM_ALGOS; i++)
			if ((!burst_only || rl_algos[i].has_burst) &&
				!rl_algo_holds((RlAlgo) i))
				n++;
		initStringInfo(&buf);
		for (i = 0; i < RL_NUM_ALGOS; i++)
		{
			if ((burst_only && !rl_algos[i].has_burst) ||
				rl_algo_holds((RlAlgo) i))
				continue;
			appendStringInfo(&buf, "%s%s",
							 done == 0 ? "" : done == n - 1 ? " and " : ", ",
							 rl_algos[i].name);
			done++;
		}
		lists[burst_only] = MemoryContextStrdup(TopMemoryContext, buf.data);
		pfree(buf.data);
	}
	return lists[burst_only];
}
