/*-------------------------------------------------------------------------
 *
 * persist.h
 *		The store's state across a clean restart.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_PERSIST_H
#define RL_PERSIST_H

extern void rl_persist_shutdown(int code, Datum arg);
extern void rl_persist_load(void);

#endif							/* RL_PERSIST_H */
