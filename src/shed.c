/*-------------------------------------------------------------------------
 *
 * shed.c
 *		Load shedding by priority: a call carries a priority (critical,
 *		normal, sheddable) and its policy reserves a share of each of its
 *		limits for higher priorities (rl_policy.reserve, or a direct
 *		call's "reserve").  A sheddable call must leave the whole reserve
 *		free, a normal one half of it, a critical one none; a call without
 *		a priority is never shed.  The dispatcher turns that into the
 *		headroom of the call's parameters (algo.h): each algorithm admits
 *		only what would also admit cost + headroom, and charges the cost.
 *
 * The headroom is computed from the capacity the call is decided against
 * (the burst of a bucket, the limit otherwise), after a key's override,
 * for each of a policy's limits (rl_policy_limit) alike: floor(capacity *
 * share), in exact integers (the share is kept in millionths), and at most
 * capacity - cost, so that a call the limit admits when empty is admitted
 * by an empty key whatever its priority.  What a decision reports as
 * remaining is what is left for the caller: the units above its headroom.
 *
 * No shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "utils/builtins.h"

#include "shed.h"

/*
 * A reserve (a share of a capacity from 0 up to but not including 1) in
 * millionths, rounded to the nearest; name is the argument or column it
 * comes from, for the error (22023).
 */
int32
rl_shed_reserve(double reserve, const char *name)
{
	double		scaled;

	if (isnan(reserve) || reserve < 0.0 || reserve >= 1.0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" must be at least 0 and less than 1", name),
				 errdetail("It is the share of the limit kept free for calls of higher priority.")));
	scaled = rint(reserve * RL_SHED_WHOLE);
	/* a reserve just under 1 keeps at least a millionth for everyone */
	return scaled >= RL_SHED_WHOLE ? RL_SHED_WHOLE - 1 : (int32) scaled;
}

/* A priority's name: "critical", "normal" or "sheddable" (22023 if not). */
uint8
rl_shed_priority(text *priority)
{
	const char *name = VARDATA_ANY(priority);
	int			len = VARSIZE_ANY_EXHDR(priority);

	if (len == 8 && memcmp(name, "critical", 8) == 0)
		return RL_PRIORITY_CRITICAL;
	if (len == 6 && memcmp(name, "normal", 6) == 0)
		return RL_PRIORITY_NORMAL;
	if (len == 9 && memcmp(name, "sheddable", 9) == 0)
		return RL_PRIORITY_SHEDDABLE;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid priority \"%s\"", text_to_cstring(priority)),
			 errhint("A priority is \"critical\", \"normal\" or \"sheddable\".")));
	return RL_PRIORITY_NONE;	/* keep the compiler quiet */
}

/* A priority's name, as rl_shed_priority reads it ("" for none). */
const char *
rl_shed_priority_name(uint8 priority)
{
	switch (priority)
	{
		case RL_PRIORITY_CRITICAL:
			return "critical";
		case RL_PRIORITY_NORMAL:
			return "normal";
		case RL_PRIORITY_SHEDDABLE:
			return "sheddable";
	}
	return "";
}

/*
 * The units the request must leave free under its algorithm and
 * parameters: its priority's share of the reserve of the capacity, at
 * most what the cost leaves of it.
 */
int64
rl_shed_headroom(const RlRequest *req)
{
	int64		capacity = rl_algo_capacity(req->algo, &req->params);
	int64		share;
	int64		headroom;

	if (!rl_shed_applies(req))
		return 0;
	share = req->priority == RL_PRIORITY_SHEDDABLE ? req->reserve :
		req->reserve / 2;
	headroom = (int64) ((int128) capacity * share / RL_SHED_WHOLE);
	if (headroom > capacity - req->params.cost)
		headroom = capacity - req->params.cost;
	return Max(headroom, 0);
}

/*
 * rl_shed_request for n requests decided together: copies (room for n)
 * unless none keeps a headroom.
 */
const RlRequest *
rl_shed_requests(const RlRequest *reqs, int n, RlRequest *copies)
{
	int			i;

	for (i = 0; i < n; i++)
		if (rl_shed_applies(&reqs[i]))
			break;
	if (likely(i == n))
		return reqs;
	for (i = 0; i < n; i++)
	{
		copies[i] = reqs[i];
		copies[i].params.headroom = rl_shed_headroom(&reqs[i]);
	}
	return copies;
}
