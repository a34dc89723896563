/*-------------------------------------------------------------------------
 *
 * trigger.h
 *		rl_enforce, the quota trigger: its setting.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_TRIGGER_H
#define RL_TRIGGER_H

extern void rl_trigger_init(void);

#endif							/* RL_TRIGGER_H */
