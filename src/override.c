/*-------------------------------------------------------------------------
 *
 * override.c
 *		Per-key overrides of a policy: the rows of rl_override (another
 *		limit or burst for one key, a block until a time, an unlimited
 *		key), kept by the policy cache (policy.c) in a hash table per
 *		policy, and applied to a request under that policy.
 *
 * An override changes a request's parameters and flags, never its stored
 * key: a key keeps what it has used when its override is set, changed or
 * removed.  A block and an unlimited key are answered by the dispatcher
 * without an engine (dispatch.c, override_decision).
 *
 * No shared state: the tables live in the policy cache's memory context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/timestamp.h"

#include "override.h"

/* a key of an override: the key's bytes (a copy in the cache's context) */
typedef struct RlOverrideKey
{
	const char *bytes;
	int			len;
} RlOverrideKey;

/* one row of rl_override, as a request applies it */
typedef struct RlOverride
{
	RlOverrideKey key;			/* hash key */
	bool		has_limit;
	int64		limit;
	bool		has_burst;
	int64		burst;
	uint8		flags;			/* RL_OVERRIDE_* */
	int64		blocked_until;	/* Unix us, or RL_BLOCKED_FOREVER */
	int64		anchor;			/* the key's billing anchor (Unix us), or
								 * RL_NO_ANCHOR */
} RlOverride;

/* the select list that reads rl_override's columns in RlOverrideColumn order */
const char *const rl_override_columns =
"policy, key, \"limit\", burst, unlimited, blocked_until, period_anchor";

/* Hash of an override's key: its bytes. */
static uint32
override_hash(const void *key, Size keysize)
{
	const RlOverrideKey *k = key;

	return hash_bytes((const unsigned char *) k->bytes, k->len);
}

/* Match of two overrides' keys: 0 when equal. */
static int
override_match(const void *key1, const void *key2, Size keysize)
{
	const RlOverrideKey *a = key1;
	const RlOverrideKey *b = key2;

	if (a->len != b->len)
		return 1;
	return memcmp(a->bytes, b->bytes, a->len);
}

/*
 * Add one row of rl_override (values and nulls in RlOverrideColumn order)
 * to a policy's table of overrides, created in cxt on its first row.
 * Rows were checked when written (rl_override_validate, policy.c); what a
 * later change of the policy made inapplicable is left out rather than
 * failing every call: a burst under an algorithm that has none.  A block
 * ending at -infinity is no block; at infinity, one without an end.
 */
void
rl_override_put(HTAB **overrides, MemoryContext cxt, RlAlgo algo,
				const Datum *values, const bool *nulls)
{
	RlOverrideKey key;
	RlOverride *ov;
	text	   *k = DatumGetTextPP(values[OCOL_KEY]);
	char	   *bytes;

	if (*overrides == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(RlOverrideKey);
		ctl.entrysize = sizeof(RlOverride);
		ctl.hash = override_hash;
		ctl.match = override_match;
		ctl.hcxt = cxt;
		*overrides = hash_create("ratelimit overrides", 16, &ctl,
								 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
								 HASH_CONTEXT);
	}
	key.len = VARSIZE_ANY_EXHDR(k);
	key.bytes = VARDATA_ANY(k);
	ov = hash_search(*overrides, &key, HASH_ENTER, NULL);
	bytes = MemoryContextAlloc(cxt, Max(key.len, 1));
	memcpy(bytes, key.bytes, key.len);
	ov->key.bytes = bytes;

	ov->has_limit = !nulls[OCOL_LIMIT];
	ov->limit = ov->has_limit ? DatumGetInt64(values[OCOL_LIMIT]) : 0;
	ov->has_burst = !nulls[OCOL_BURST] && rl_algo(algo)->has_burst;
	ov->burst = ov->has_burst ? DatumGetInt64(values[OCOL_BURST]) : 0;
	ov->flags = 0;
	ov->blocked_until = 0;
	if (!nulls[OCOL_UNLIMITED] && DatumGetBool(values[OCOL_UNLIMITED]))
		ov->flags |= RL_OVERRIDE_UNLIMITED;
	ov->anchor = RL_NO_ANCHOR;
	if (!nulls[OCOL_PERIOD_ANCHOR] &&
		!TIMESTAMP_NOT_FINITE(DatumGetTimestampTz(values[OCOL_PERIOD_ANCHOR])))
		ov->anchor = DatumGetTimestampTz(values[OCOL_PERIOD_ANCHOR]) +
			RL_UNIX_OFFSET;
	if (!nulls[OCOL_BLOCKED_UNTIL])
	{
		TimestampTz end = DatumGetTimestampTz(values[OCOL_BLOCKED_UNTIL]);

		if (!TIMESTAMP_IS_NOBEGIN(end))
		{
			ov->flags |= RL_OVERRIDE_BLOCK;
			ov->blocked_until = TIMESTAMP_IS_NOEND(end) ?
				RL_BLOCKED_FOREVER : end + RL_UNIX_OFFSET;
		}
	}
}

/*
 * Apply the key's override, if it has one, to its request.  A limit given
 * without a burst keeps the policy's own burst, or moves the burst with it
 * where the policy's is its limit's default (burst_given false).
 */
void
rl_override_apply(const RlPolicy *pol, const char *bytes, int len,
				  RlRequest *req)
{
	RlOverrideKey key;
	const RlOverride *ov;

	key.bytes = bytes;
	key.len = len;
	ov = hash_search(pol->overrides, &key, HASH_FIND, NULL);
	if (ov == NULL)
		return;
	/* the key's own billing periods (checked when written: calendar ones) */
	if (ov->anchor != RL_NO_ANCHOR && pol->algo == RL_FIXED_WINDOW &&
		pol->per.time == 0)
		rl_policy_period(pol, ov->anchor, &req->params);
	if (ov->has_limit)
	{
		req->params.limit = ov->limit;
		if (!pol->burst_given)
			req->params.burst = ov->limit;
	}
	if (ov->has_burst)
		req->params.burst = ov->burst;
	req->override = ov->flags;
	req->blocked_until = ov->blocked_until;
}
