/*-------------------------------------------------------------------------
 *
 * refund.c
 *		Give back what an aborted transaction or subtransaction consumed.
 *
 * A tracked consumption (every one made by a quota trigger; direct calls
 * when ratelimit.refund_on_rollback is on) is remembered, with the
 * subtransaction that made it, in a list in TopTransactionContext.  When
 * a subtransaction aborts its entries are refunded; when it commits they
 * pass to its parent.  At top-level abort everything left is refunded, at
 * commit the list is forgotten.  A refund gives back what still counts,
 * where the decision recorded it: the shared-memory store, Redis, a Redis
 * lease (rl_give_back, docs/design.md).
 *
 * No shared state of its own: refunds go through the backends' own
 * locking.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"

#include "refund.h"

typedef struct RlConsumption
{
	struct RlConsumption *next;
	RlRequest	req;			/* its key is copied along */
	RlDecision	d;				/* where it consumed, and when */
	SubTransactionId subid;
} RlConsumption;

static RlConsumption *consumed = NULL;
static bool callbacks_registered = false;

/* Refund and forget the consumption of one subtransaction, or all. */
static void
refund_where(SubTransactionId subid)
{
	RlConsumption **link = &consumed;

	while (*link != NULL)
	{
		RlConsumption *c = *link;

		if (subid == InvalidSubTransactionId || c->subid == subid)
		{
			rl_give_back(&c->req, &c->d);
			*link = c->next;
		}
		else
			link = &c->next;
	}
}

static void
refund_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			refund_where(InvalidSubTransactionId);
			consumed = NULL;
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			consumed = NULL;
			break;
		default:
			break;
	}
}

static void
refund_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	RlConsumption *c;

	switch (event)
	{
		case SUBXACT_EVENT_ABORT_SUB:
			refund_where(mySubid);
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			for (c = consumed; c != NULL; c = c->next)
				if (c->subid == mySubid)
					c->subid = parentSubid;
			break;
		default:
			break;
	}
}

/*
 * Remember a decision's consumption, to give it back if the current
 * (sub)transaction aborts.  Decisions that consumed nothing are ignored.
 */
void
rl_refund_track(const RlRequest *req, const RlDecision *d)
{
	MemoryContext old;
	RlConsumption *c;
	char	   *key;

	/* a shadow's denial was turned into an allow: it consumed nothing */
	if (!(d->stored || d->remote || d->leased || d->prechecked) ||
		!d->allowed || d->shadowed || req->params.cost == 0)
		return;
	if (!callbacks_registered)
	{
		RegisterXactCallback(refund_xact_callback, NULL);
		RegisterSubXactCallback(refund_subxact_callback, NULL);
		callbacks_registered = true;
	}

	old = MemoryContextSwitchTo(TopTransactionContext);
	c = palloc(sizeof(RlConsumption));
	key = palloc(Max(req->keylen, 1));
	memcpy(key, req->key, req->keylen);
	c->req = *req;
	c->req.key = key;
	c->d = *d;
	c->subid = GetCurrentSubTransactionId();
	c->next = consumed;
	consumed = c;
	MemoryContextSwitchTo(old);
}
