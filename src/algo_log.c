/*-------------------------------------------------------------------------
 *
 * algo_log.c
 *		sliding_window_log: an exact log of (time, cost) entries.
 *
 * An entry is live while its time is after t - W.  Entries are appended at
 * the tail in time order (the caller clamps t so time never runs backwards
 * for a key) and expire from the head, so the chain of blocks is a queue.
 * Calls at the same microsecond merge into one entry.  Pure: no locks, no
 * allocation (the caller lends a spare block), no errors.
 *
 * This file is the only one that knows how a log lies in its chain of
 * blocks: the store lends its pool (RlChain) and gets emptied blocks back,
 * and walks, appends and releases logs through the functions below.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "algo.h"
#include "algo_common.h"

/* The oldest and the newest entry; the log must not be empty. */
#define LOG_OLDEST(s, m)	(&(m)->blocks[(s)->head].entries[(s)->head_pos])
#define LOG_NEWEST(s, m)	(&(m)->blocks[(s)->tail].entries[(s)->tail_len - 1])

/* Number of entries used in the block, given the log's bookkeeping. */
static inline int
block_end(const RlLogState *s, uint32 block)
{
	return block == s->tail ? s->tail_len : (int) RL_LOG_PER_BLOCK;
}

/*
 * Drop the entries no longer live at t, handing emptied blocks to the
 * caller through m->freed_*.
 */
static void
log_expire(RlLogState *s, RlChain *m, int64 t, int64 per)
{
	while (s->head != RL_NIL && LOG_OLDEST(s, m)->time <= t - per)
	{
		s->sum -= LOG_OLDEST(s, m)->cost;
		if (++s->head_pos < block_end(s, s->head))
			continue;

		/* the head block is empty: give it back */
		if (m->nfreed++ == 0)
			m->freed_first = s->head;
		m->freed_last = s->head;
		s->nblocks--;
		if (s->head == s->tail)
			s->head = s->tail = RL_NIL;
		else
			s->head = m->next[s->head];
		s->head_pos = 0;
	}
}

/*
 * Record cost at t, the log's newest time or later.  Returns false,
 * changing nothing, if that needs a block and the caller lent none.
 */
static inline bool
log_append(RlLogState *s, RlChain *m, int64 t, int64 cost)
{
	RlLogEntry *entry;

	if (s->tail != RL_NIL && LOG_NEWEST(s, m)->time == t)
	{
		LOG_NEWEST(s, m)->cost += cost;
		s->sum += cost;
		return true;
	}
	if (s->tail == RL_NIL || s->tail_len == RL_LOG_PER_BLOCK)
	{
		uint32		block = m->spare;

		if (block == RL_NIL)
			return false;
		m->spare = RL_NIL;
		m->next[block] = RL_NIL;
		if (s->tail == RL_NIL)
		{
			s->head = block;
			s->head_pos = 0;
		}
		else
			m->next[s->tail] = block;
		s->tail = block;
		s->tail_len = 0;
		s->nblocks++;
	}
	entry = &m->blocks[s->tail].entries[s->tail_len++];
	entry->time = t;
	entry->cost = cost;
	s->sum += cost;
	return true;
}

/*
 * Drop the newest entry (its cost spent), and its block if that empties,
 * handing the block back through m->freed_*, after any handed back
 * already.
 */
static void
log_drop_newest(RlLogState *s, RlChain *m)
{
	uint32		block = s->tail;
	uint32		before = s->head;

	if (--s->tail_len > (s->tail == s->head ? s->head_pos : 0))
		return;
	if (m->nfreed++ == 0)
		m->freed_first = block;
	else
		m->next[m->freed_last] = block;
	m->freed_last = block;
	s->nblocks--;
	if (block == s->head)
	{
		s->head = s->tail = RL_NIL;
		return;
	}
	while (m->next[before] != block)
		before = m->next[before];
	s->tail = before;
	s->tail_len = RL_LOG_PER_BLOCK;
	m->next[before] = RL_NIL;
}

/*
 * Seconds until a call of the given cost (and headroom) fits: the time at
 * which the oldest entry j expires such that the live entries newer than j
 * plus the cost and the headroom fit in the limit.
 */
static double
log_retry_after(const RlLogState *s, const RlChain *m, int64 t,
				const RlParams *p)
{
	uint32		block = s->head;
	int			pos = s->head_pos;
	int128		newer = s->sum;

	while (block != RL_NIL)
	{
		const RlLogEntry *entry = &m->blocks[block].entries[pos];

		newer -= entry->cost;
		if (newer + p->cost + p->headroom <= p->limit)
			return rl_seconds64(entry->time + p->per - t, 1);
		if (++pos == block_end(s, block))
		{
			block = block == s->tail ? RL_NIL : m->next[block];
			pos = 0;
		}
	}
	return 0.0;					/* not reached: c + h <= L fits an empty log */
}

/* The rest of a decision's outcome, once allowed is known. */
static void
log_outcome(const RlLogState *s, const RlChain *m, int64 t,
			const RlParams *p, RlOutcome *d)
{
	d->remaining = Max(p->limit - s->sum, 0);
	d->retry_after = d->allowed ? 0.0 : log_retry_after(s, m, t, p);
	d->reset_at = s->tail == RL_NIL ? t : LOG_NEWEST(s, m)->time + p->per;
	d->delay = 0.0;
}

/*
 * Give back cost units logged at time t, if that entry is still in the log.
 * An entry that drops to zero is removed when it is the newest (the usual
 * case: a refund soon after the call), so reset_at is as if the call had
 * never been made; an older one stays with cost 0 until it expires.  A
 * block emptied that way is handed back through m->freed_*.
 */
void
rl_sliding_window_log_refund(RlState *state, int64 t, const RlParams *p,
							 int64 cost, RlChain *m)
{
	RlLogState *s = &state->log;
	uint32		block = s->head;
	int			pos = s->head_pos;

	m->nfreed = 0;
	m->freed_first = m->freed_last = RL_NIL;
	while (block != RL_NIL)
	{
		RlLogEntry *entry = &m->blocks[block].entries[pos];

		if (entry->time == t)
		{
			int64		given = Min(cost, entry->cost);

			entry->cost -= given;
			s->sum -= given;
			break;
		}
		if (entry->time > t)
			return;
		if (++pos == block_end(s, block))
		{
			block = block == s->tail ? RL_NIL : m->next[block];
			pos = 0;
		}
	}
	if (block != RL_NIL && block == s->tail && pos == s->tail_len - 1 &&
		LOG_NEWEST(s, m)->cost == 0)
		log_drop_newest(s, m);
}

/*
 * Make the state an empty log (a new key).
 */
void
rl_log_init(RlLogState *s)
{
	memset(s, 0, sizeof(*s));
	s->head = s->tail = RL_NIL;
}

/*
 * sliding_window_log: allowed iff the live costs plus c and the headroom fit
 * in L; then a call with c > 0 is logged (c alone).  A state not fresh must
 * have been set up by rl_log_init.  Returns false if the call had to be logged
 * but no block was lent; only expired entries have then been dropped.
 */
bool
rl_sliding_window_log(RlState *state, bool fresh, int64 t, int64 last,
					  const RlParams *p, RlOutcome *d, RlChain *m)
{
	RlLogState *s = &state->log;

	if (fresh)
		rl_log_init(s);
	m->nfreed = 0;
	m->freed_first = m->freed_last = RL_NIL;
	log_expire(s, m, t, p->per);

	d->allowed = p->cost + p->headroom <= p->limit - s->sum;
	if (d->allowed && p->cost > 0 && !log_append(s, m, t, p->cost))
		return false;
	log_outcome(s, m, t, p, d);
	return true;
}

/*
 * sliding_window_log's charge: logged at t past the limit if so (the sum
 * stays within 64 bits), or given back from the newest entries, which go
 * once spent; then a look.  False as for a decision.
 */
bool
rl_sliding_window_log_charge(RlState *state, bool fresh, int64 t,
							 int64 last, const RlParams *p, RlOutcome *d,
							 RlChain *m)
{
	RlLogState *s = &state->log;
	RlParams	look = *p;

	if (fresh)
		rl_log_init(s);
	m->nfreed = 0;
	m->freed_first = m->freed_last = RL_NIL;
	log_expire(s, m, t, p->per);
	if (p->cost > 0)
	{
		int64		taken = Min(p->cost, PG_INT64_MAX - s->sum);

		if (taken > 0 && !log_append(s, m, t, taken))
			return false;
	}
	else
	{
		int64		units = p->cost == PG_INT64_MIN ? PG_INT64_MAX : -p->cost;

		while (units > 0 && s->tail != RL_NIL)
		{
			RlLogEntry *newest = LOG_NEWEST(s, m);
			int64		given = Min(units, newest->cost);

			newest->cost -= given;
			s->sum -= given;
			units -= given;
			if (newest->cost == 0)
				log_drop_newest(s, m);
		}
	}
	look.cost = 0;
	d->allowed = 0 <= p->limit - s->sum;
	log_outcome(s, m, t, &look, d);
	return true;
}

/*
 * Copy the entries that still have a cost, oldest first, into out (room
 * for max); returns how many there are (an entry a refund left at cost 0
 * changes no decision).
 */
int
rl_log_walk(const RlLogState *s, const RlChain *m, RlLogEntry *out, int max)
{
	uint32		block = s->head;
	int			pos = s->head_pos;
	int			n = 0;

	while (block != RL_NIL)
	{
		for (; pos < block_end(s, block); pos++)
		{
			const RlLogEntry *entry = &m->blocks[block].entries[pos];

			if (entry->cost == 0)
				continue;
			if (n < max)
				out[n] = *entry;
			n++;
		}
		block = block == s->tail ? RL_NIL : m->next[block];
		pos = 0;
	}
	return n;
}

/* The number of entries rl_log_walk copies. */
int
rl_log_length(const RlLogState *s, const RlChain *m)
{
	return rl_log_walk(s, m, NULL, 0);
}

/*
 * Empty the log, handing all its blocks back through m->freed_*.
 */
void
rl_log_release(RlLogState *s, RlChain *m)
{
	m->nfreed = s->nblocks;
	m->freed_first = s->nblocks > 0 ? s->head : RL_NIL;
	m->freed_last = s->nblocks > 0 ? s->tail : RL_NIL;
	rl_log_init(s);
}

/*
 * A saved log: entries in strictly increasing time, within one longest
 * window before the key's latest time and not after it, costs greater
 * than zero, and their total the saved sum, within 64 bits.  Its state is
 * a new key's once its newest entry has expired (W at most 100 years
 * later), at once if it is empty: the idle time is bounded by that.
 */
bool
rl_log_image_valid(RlStateImage *img)
{
	int128		total = 0;
	int64		prev = PG_INT64_MIN;
	int			i;

	for (i = 0; i < img->nlog; i++)
	{
		const RlLogEntry *entry = &img->log[i];

		if (entry->cost <= 0 || entry->time <= prev ||
			entry->time > img->last || entry->time <= img->last - RL_MAX_PER)
			return false;
		prev = entry->time;
		total += entry->cost;
		if (total > PG_INT64_MAX)
			return false;
	}
	if (total != img->state.log.sum)
		return false;
	if (img->nlog > 0)
		rl_idle_bound(img, img->log[img->nlog - 1].time, RL_MAX_PER);
	else
		rl_idle_bound(img, img->last, 0);
	return true;
}

/* log_append, for the store restoring a saved log. */
bool
rl_log_append(RlLogState *s, RlChain *m, int64 t, int64 cost)
{
	return log_append(s, m, t, cost);
}
