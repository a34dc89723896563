/*-------------------------------------------------------------------------
 *
 * algo_bucket.c
 *		token_bucket and leaky_bucket.
 *
 * A bucket drains or refills continuously at r = L / W units per second.
 * Its content is kept multiplied by W (in microseconds) so that elapsed
 * microseconds times L is an exact integer amount; the W the content is
 * expressed in is stored with it.  Pure functions: no locks, allocation
 * or errors.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "algo.h"
#include "algo_common.h"

/*
 * Bring the stored content to the call's W.  Rescaling rounds toward
 * round_up's choice (down for tokens, up for a leaky level): at most one
 * microsecond's worth of flow, in the caller's disfavour.
 */
static void
bucket_rescale(RlBucketState *s, int64 per, bool round_up)
{
	if (s->per != per)
	{
		/* split first: content * per alone could overflow 128 bits */
		int128		whole = s->scaled / s->per;
		int128		part = (s->scaled % s->per) * per;

		s->scaled = whole * per + (round_up ? rl_ceil_div128(part, s->per) :
								   part / s->per);
		s->per = per;
	}
}

/*
 * token_bucket: a new key starts full (B tokens); tokens refill at r up to
 * B; allowed iff tokens >= c.
 */
void
rl_token_bucket(RlBucketState *s, bool fresh, int64 t, int64 last,
				const RlParams *p, RlDecision *d)
{
	int128		capacity = (int128) p->burst * p->per;
	int128		cost = (int128) p->cost * p->per;

	if (fresh)
	{
		s->scaled = capacity;
		s->per = p->per;
	}
	else
	{
		bucket_rescale(s, p->per, false);
		s->scaled += (int128) (t - last) * p->limit;
		if (s->scaled > capacity)
			s->scaled = capacity;
	}

	d->allowed = s->scaled >= cost;
	if (d->allowed)
		s->scaled -= cost;
	d->remaining = rl_units(s->scaled, p->per);
	d->retry_after = d->allowed ? 0.0 :
		rl_seconds(cost - s->scaled, p->limit);
	d->reset_at = rl_time_after(t, capacity - s->scaled, p->limit);
	d->delay = 0.0;
}

/*
 * leaky_bucket: a queue of capacity B draining at r; a new key starts
 * empty; allowed iff level + c <= B, and the admitted call is told to wait
 * until the queue ahead of it has drained.
 */
void
rl_leaky_bucket(RlBucketState *s, bool fresh, int64 t, int64 last,
				const RlParams *p, RlDecision *d)
{
	int128		capacity = (int128) p->burst * p->per;
	int128		cost = (int128) p->cost * p->per;

	if (fresh)
	{
		s->scaled = 0;
		s->per = p->per;
	}
	else
	{
		bucket_rescale(s, p->per, true);
		s->scaled -= (int128) (t - last) * p->limit;
		if (s->scaled < 0)
			s->scaled = 0;
	}

	d->allowed = s->scaled + cost <= capacity;
	if (d->allowed)
	{
		d->delay = rl_seconds(s->scaled, p->limit);
		s->scaled += cost;
		d->retry_after = 0.0;
	}
	else
	{
		d->delay = 0.0;
		d->retry_after = rl_seconds(s->scaled + cost - capacity, p->limit);
	}
	d->remaining = rl_units(capacity - s->scaled, p->per);
	d->reset_at = rl_time_after(t, s->scaled, p->limit);
}

/*
 * token_bucket: the tokens go back, up to the capacity (a bucket that
 * refilled meanwhile has nothing left to give back).
 */
void
rl_token_bucket_refund(RlBucketState *s, const RlParams *p, int64 cost)
{
	int128		capacity = (int128) p->burst * p->per;

	bucket_rescale(s, p->per, false);
	s->scaled += (int128) cost * p->per;
	if (s->scaled > capacity)
		s->scaled = capacity;
}

/*
 * leaky_bucket: the units leave the queue (what already drained is gone).
 */
void
rl_leaky_bucket_refund(RlBucketState *s, const RlParams *p, int64 cost)
{
	bucket_rescale(s, p->per, true);
	s->scaled -= (int128) cost * p->per;
	if (s->scaled < 0)
		s->scaled = 0;
}
