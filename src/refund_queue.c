/*-------------------------------------------------------------------------
 *
 * refund_queue.c
 *		The queue of refunds sent after their transaction (refund.c: why).
 *
 * A refund that is a network round trip (RL_RECEIPT_REMOTE: Redis's) is
 * never made inside an abort: its amount is queued (rl_refund_queue,
 * allocating nothing), and the queue sent after the transaction, at the
 * session's next call that reaches an engine (rl_refund_flush) or as it
 * exits, in one call of each engine's refund_queued.  An ended
 * transaction with amounts queued is retired: its tracking's context (the
 * targets' keys) is freed once they are sent.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/ipc.h"
#include "utils/memutils.h"

#include "refund_int.h"
#include "refund_queue.h"

/* refunds (pairs) that may wait in the queue; more are dropped */
#define RL_REFUND_QUEUE_MAX		10000

/*
 * The transaction's tracking, if it tracked, and its free amounts:
 * refund.c's, here where taking an amount off the queue reuses them.
 */
RlBatch    *rl_refund_batch = NULL;
RlAmount   *rl_refund_free = NULL;

/* refunds queued for after their transaction: amounts, oldest first */
static RlAmount *queue_head = NULL;
static RlAmount *queue_tail = NULL;
static int64 queue_pairs = 0;	/* refunds (pairs) in the queue */
static RlBatch *retired = NULL; /* ended transactions with amounts queued */
bool		rl_refund_exit_registered = false;

/* amounts are queued: the dispatcher's cheap test before rl_refund_flush */
bool		rl_refund_waiting = false;

/*
 * on_shmem_exit: send what is queued, best effort (registered after the
 * callback that aborts a transaction left open).  Interrupts are held: the
 * engine's one deadline bounds the wait.  Never raises (the exit would
 * recurse): what cannot be sent is dropped, and counted.
 */
static void
refund_exit(int code, Datum arg)
{
	PG_TRY();
	{
		rl_refund_flush();
	}
	PG_CATCH();
	{
		FlushErrorState();
	}
	PG_END_TRY();
	while (queue_head != NULL)
	{
		RlAmount   *a = queue_head;
		const RlEngine *engine = rl_engine(a->target->id.engine);

		if (engine->refunds_noted != NULL)
			engine->refunds_noted(0, a->nspent);
		queue_pairs -= a->nspent;
		queue_head = a->next;
	}
	queue_tail = NULL;
	rl_refund_waiting = false;
}

/*
 * A remote refund may be queued and sent as the session exits: register
 * the exit callback that sends it, once.
 */
void
rl_refund_exit_register(void)
{
	on_shmem_exit(refund_exit, (Datum) 0);
	rl_refund_exit_registered = true;
}

/* An ended transaction's tracking with amounts queued: freed once sent. */
void
rl_refund_retire(RlBatch *b)
{
	b->next = retired;
	retired = b;
}

/*
 * Queue an amount whose refunds are network round trips, for after the
 * transaction (at an abort: allocates nothing).  Past the queue's bound
 * its oldest pairs are dropped (they would be sent last).
 */
void
rl_refund_queue(RlAmount *a)
{
	const RlEngine *engine = rl_engine(a->target->id.engine);
	int64		room = Max(RL_REFUND_QUEUE_MAX - queue_pairs, 0);
	int64		dropped = 0;

	if (a->nspent > room)
	{
		dropped = a->nspent - room;
		memmove(a->spent, a->spent + dropped, room * sizeof(RlSpent));
		a->nspent = room;
	}
	if (engine->refunds_noted != NULL)
		engine->refunds_noted(a->nspent, dropped);
	if (a->nspent == 0)
	{
		a->next = rl_refund_free;
		rl_refund_free = a;
		return;
	}
	a->next = NULL;
	if (queue_tail != NULL)
		queue_tail->next = a;
	else
		queue_head = a;
	queue_tail = a;
	queue_pairs += a->nspent;
	a->target->batch->queued++;
	rl_refund_waiting = true;
}

/*
 * Take an amount off the queue: to the free list if its transaction is the
 * current one, else its retired tracking, once none of it is queued, to
 * *done (freed after the refunds are sent: their keys live there).
 */
static void
amount_dequeue(RlAmount *a, RlBatch **done)
{
	RlBatch    *b = a->target->batch;

	b->queued--;
	if (b == rl_refund_batch)
	{
		a->next = rl_refund_free;
		rl_refund_free = a;
	}
	else if (b->queued == 0)
	{
		RlBatch   **link = &retired;

		while (*link != b)
			link = &(*link)->next;
		*link = b->next;
		b->next = *done;
		*done = b;
	}
}

/*
 * Send the queued refunds, outside any abort (the dispatcher; the exit):
 * each engine's in one refund_queued (one deadline for all), amounts oldest
 * first, pairs newest first.  The queue is emptied first: what a cancel
 * interrupts is dropped (the engine counts it), never sent twice.
 */
void
rl_refund_flush(void)
{
	RlRequest  *reqs;
	RlReceipt  *receipts;
	RlBatch    *done = NULL;
	RlAmount   *a;
	RlAmount   *next;
	int			n = 0;
	int			i;
	int			j;

	if (queue_head == NULL)
		return;
	/* allocated before the queue is taken: if this fails, it stays */
	reqs = palloc(sizeof(RlRequest) * queue_pairs);
	receipts = palloc(sizeof(RlReceipt) * queue_pairs);
	for (a = queue_head; a != NULL; a = next)
	{
		next = a->next;
		for (; a->nspent > 0; n++)
			rl_refund_pop(a, &reqs[n], &receipts[n]);
		amount_dequeue(a, &done);
	}
	Assert(n == queue_pairs);
	queue_head = queue_tail = NULL;
	queue_pairs = 0;
	rl_refund_waiting = false;

	PG_TRY();
	{
		/* each engine's refunds together (a run of the same engine) */
		for (i = 0; i < n; i = j)
		{
			for (j = i + 1; j < n && receipts[j].engine == receipts[i].engine;)
				j++;
			rl_engine(receipts[i].engine)->refund_queued(&reqs[i],
														 &receipts[i], j - i);
		}
	}
	PG_FINALLY();
	{
		while (done != NULL)
		{
			RlBatch    *b = done;

			done = b->next;
			MemoryContextDelete(b->cxt);
		}
		pfree(reqs);
		pfree(receipts);
	}
	PG_END_TRY();
}
