/*-------------------------------------------------------------------------
 *
 * override.h
 *		Per-key overrides of a policy (the rows of rl_override), as the
 *		policy cache keeps them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_OVERRIDE_H
#define RL_OVERRIDE_H

#include "utils/hsearch.h"

#include "engine.h"
#include "policy_row.h"

/* the columns of rl_override the cache reads, in this order */
typedef enum RlOverrideColumn
{
	OCOL_POLICY,
	OCOL_KEY,
	OCOL_LIMIT,
	OCOL_BURST,
	OCOL_UNLIMITED,
	OCOL_BLOCKED_UNTIL,
	OCOL_PERIOD_ANCHOR,
	OCOL_COUNT
} RlOverrideColumn;

extern const char *const rl_override_columns;

extern void rl_override_put(HTAB **overrides, MemoryContext cxt, RlAlgo algo,
							const Datum *values, const bool *nulls);
extern void rl_override_apply(const RlPolicy *pol, const char *bytes, int len,
							  RlRequest *req);

#endif							/* RL_OVERRIDE_H */
