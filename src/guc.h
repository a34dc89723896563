/*-------------------------------------------------------------------------
 *
 * guc.h
 *		The ratelimit.* settings.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_GUC_H
#define RL_GUC_H

typedef enum RlFailMode
{
	RL_FAIL_OPEN,				/* allow what cannot be decided */
	RL_FAIL_CLOSED,				/* deny it */
	RL_FAIL_LOCAL				/* decide it in shared memory (remote
								 * backends only; "open" for the store) */
} RlFailMode;

extern int	rl_max_keys;
extern int	rl_pool_size;
extern int	rl_fail_mode;

extern void rl_guc_init(void);

#endif							/* RL_GUC_H */
