/*-------------------------------------------------------------------------
 *
 * dispatch_durable.h
 *		The dispatcher's checks of durable policies' requests.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_DISPATCH_DURABLE_H
#define RL_DISPATCH_DURABLE_H

#include "compat.h"
#include "engine.h"

extern void rl_durable_check(const RlRequest *req, bool local);
rl_noreturn extern void rl_durable_no_room(const RlRequest *req);

#endif							/* RL_DISPATCH_DURABLE_H */
