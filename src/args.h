/*-------------------------------------------------------------------------
 *
 * args.h
 *		Checks of the values a request is made of, shared by the SQL
 *		functions, policies and quota triggers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_ARGS_H
#define RL_ARGS_H

#include "fmgr.h"
#include "datatype/timestamp.h"
#include "pgtime.h"

#include "engine.h"

extern void rl_require_store(void);
extern void rl_arg_not_null(FunctionCallInfo fcinfo, int argno,
							const char *name);
extern RlAlgo rl_arg_algo(text *name, bool slots_ok);
extern void rl_arg_key_too_long(int len);
extern void rl_args_init(void);
extern const pg_tz *rl_arg_time_zone_setting(void);
extern const pg_tz *rl_arg_time_zone(const char *name);
extern void rl_arg_period(RlAlgo algo, const Interval *per, const pg_tz *tz,
						  bool zone_given, int64 anchor, RlParams *p);
extern Interval *rl_per_interval(const RlParams *p);
extern int64 rl_arg_anchor(TimestampTz anchor);
extern int64 rl_arg_duration(const Interval *iv, const char *name);
extern int64 rl_arg_max_wait(const Interval *max_wait);
extern int64 rl_arg_at(TimestampTz at);
extern void rl_arg_positive(int64 value, const char *name);
extern void rl_arg_cost(int64 cost);
extern void rl_cost_check(RlAlgo algo, const RlParams *p);
extern void rl_algo_check_use(RlAlgo algo, bool slots, const char *policy);
extern void rl_params_check(RlAlgo algo, RlParams *p, bool burst_given);

/*
 * Check a non-null key argument (a text datum) and point at its bytes,
 * detoasted if it must be.  Inline, with the test of
 * pg_detoast_datum_packed: every direct call checks its key (#9).
 */
static inline void
rl_arg_key(Datum datum, const char **bytes, int *len)
{
	text	   *key = (text *) DatumGetPointer(datum);

	if (unlikely(VARATT_IS_EXTERNAL(key) || VARATT_IS_COMPRESSED(key)))
		key = pg_detoast_datum_packed(key);
	*bytes = VARDATA_ANY(key);
	*len = VARSIZE_ANY_EXHDR(key);
	if (unlikely(*len > RL_MAX_KEY_LEN))
		rl_arg_key_too_long(*len);
}

#endif							/* RL_ARGS_H */
