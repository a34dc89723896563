/*-------------------------------------------------------------------------
 *
 * slots.h
 *		The slots of concurrency limits this backend holds, given back when
 *		their transaction or the session ends (slots.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_SLOTS_H
#define RL_SLOTS_H

#include "engine.h"

/* one slot this backend holds, as rl_slots_list reports it */
typedef struct RlHeldSlot
{
	const char *key;
	int			keylen;
	bool		session;		/* held until the session ends */
	int64		since;			/* taken at (Unix us) */
} RlHeldSlot;

extern bool rl_slots_held(const RlRequest *req, bool session);
extern void rl_slots_begin(const RlRequest *req, const RlEngine *engine);
extern void rl_slots_keep(const RlReceipt *receipt, bool session);
extern void rl_slots_end(void);
extern bool rl_slots_drop(const RlRequest *req);
extern int	rl_slots_list(RlHeldSlot **out);

#endif							/* RL_SLOTS_H */
