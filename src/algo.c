/*-------------------------------------------------------------------------
 *
 * algo.c
 *		Names of the algorithms and what each accepts.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "algo.h"

static const char *const rl_algo_names[RL_NUM_ALGOS] = {
	[RL_FIXED_WINDOW] = "fixed_window",
	[RL_SLIDING_WINDOW_LOG] = "sliding_window_log",
	[RL_SLIDING_WINDOW_COUNTER] = "sliding_window_counter",
	[RL_TOKEN_BUCKET] = "token_bucket",
	[RL_LEAKY_BUCKET] = "leaky_bucket",
};

/*
 * Map an algorithm name (not NUL-terminated) to its number.  Called on
 * every request, so it compares lengths before bytes.
 */
bool
rl_algo_parse(const char *name, int len, RlAlgo *algo)
{
	int			i;

	for (i = 0; i < RL_NUM_ALGOS; i++)
	{
		const char *candidate = rl_algo_names[i];

		if (strlen(candidate) == (size_t) len &&
			memcmp(candidate, name, len) == 0)
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
	return rl_algo_names[algo];
}

/* Only the buckets have a capacity distinct from the limit. */
bool
rl_algo_has_burst(RlAlgo algo)
{
	return algo == RL_TOKEN_BUCKET || algo == RL_LEAKY_BUCKET;
}
