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
static inline void
bucket_rescale(RlBucketState *s, int64 per, bool round_up)
{
	if (s->per != per)
	{
		/* tokens owed (a charge past the limit) round the other way */
		bool		owed = s->scaled < 0;
		int128		x = owed ? -s->scaled : s->scaled;

		/* split first: content * per alone could overflow 128 bits */
		int128		whole = x / s->per;
		int128		part = (x % s->per) * per;

		if (owed)
			round_up = !round_up;
		x = whole * per + (round_up ? rl_ceil_div128(part, s->per) :
						   part / s->per);
		s->scaled = owed ? -x : x;
		s->per = per;
	}
}

/*
 * token_bucket's content at t: a new key's is full; otherwise refilled at
 * r since last, up to B.  A charge past the limit leaves it below zero
 * (tokens owed), down to -(2^63 - 1) tokens.  However long the key was
 * idle the refill is exact: times are within 2^60 us of the epoch (about
 * 36,500 years either way: "at", the clock and the state file's are
 * bounded so), so t - last < 2^61 and times L < 2^124, and the content
 * stays within +-2^63 * W < 2^116 before the cap: no overflow of the
 * 128 bits, for a key idle 200 years or 70,000.
 */
static void
token_fill(RlBucketState *s, bool fresh, int64 t, int64 last,
		   const RlParams *p)
{
	int128		capacity = (int128) p->burst * p->per;

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
}

/* leaky_bucket's level at t: a new key's is empty; otherwise drained. */
static void
leaky_drain(RlBucketState *s, bool fresh, int64 t, int64 last,
			const RlParams *p)
{
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
}

/*
 * rl_token_bucket in 64-bit arithmetic: the same outcome and state, bit
 * for bit, when every value it computes fits in 64 bits and the content is
 * already in the call's W (limits and windows of ordinary size: nearly
 * every call), without int128's library calls and wide registers.  Returns
 * false, having written nothing, when something would not fit: the caller
 * then takes the exact path.
 */
static inline bool
token_bucket64(RlBucketState *s, bool fresh, int64 t, int64 last,
			   const RlParams *p, RlOutcome *d)
{
	int64		capacity;
	int64		need;
	int64		charge;
	int64		scaled;
	int64		flow;
	int64		missing = 0;
	int64		room;
	bool		allowed;

	if (pg_mul_s64_overflow(p->burst, p->per, &capacity) ||
		pg_add_s64_overflow(p->cost, p->headroom, &need) ||
		pg_mul_s64_overflow(need, p->per, &need) ||
		pg_mul_s64_overflow(p->cost, p->per, &charge))
		return false;
	if (fresh)
		scaled = capacity;
	else
	{
		/* token_fill without a rescale */
		if (s->per != p->per ||
			s->scaled < PG_INT64_MIN || s->scaled > PG_INT64_MAX ||
			pg_mul_s64_overflow(t - last, p->limit, &flow) ||
			pg_add_s64_overflow((int64) s->scaled, flow, &scaled))
			return false;
		if (scaled > capacity)
			scaled = capacity;
	}
	allowed = scaled >= need;
	if ((allowed && pg_sub_s64_overflow(scaled, charge, &scaled)) ||
		(!allowed && pg_sub_s64_overflow(need, scaled, &missing)) ||
		pg_sub_s64_overflow(capacity, scaled, &room))
		return false;

	s->scaled = scaled;
	s->per = p->per;
	d->allowed = allowed;
	d->remaining = scaled <= 0 ? 0 : scaled / p->per;
	d->retry_after = allowed ? 0.0 : rl_seconds64(missing, p->limit);
	d->reset_at = rl_time_after64(t, room, p->limit);
	d->delay = 0.0;
	return true;
}

/*
 * rl_token_bucket in exact 128-bit arithmetic, for what token_bucket64
 * cannot take: out of line, so that the common path does not carry its
 * frame.
 */
static pg_noinline void
token_bucket128(RlBucketState *s, bool fresh, int64 t, int64 last,
				const RlParams *p, RlOutcome *d)
{
	int128		capacity = (int128) p->burst * p->per;
	int128		need = (int128) (p->cost + p->headroom) * p->per;

	token_fill(s, fresh, t, last, p);
	d->allowed = s->scaled >= need;
	if (d->allowed)
		s->scaled -= (int128) p->cost * p->per;
	d->remaining = rl_units(s->scaled, p->per);
	d->retry_after = d->allowed ? 0.0 :
		rl_seconds(need - s->scaled, p->limit);
	d->reset_at = rl_time_after(t, capacity - s->scaled, p->limit);
	d->delay = 0.0;
}

/*
 * token_bucket: a new key starts full (B tokens); tokens refill at r up to
 * B; allowed iff tokens >= c + h (h the headroom), then c are taken.
 */
bool
rl_token_bucket(RlState *state, bool fresh, int64 t, int64 last,
				const RlParams *p, RlOutcome *d, RlChain *chain)
{
	if (unlikely(!token_bucket64(&state->bucket, fresh, t, last, p, d)))
		token_bucket128(&state->bucket, fresh, t, last, p, d);
	return true;
}

/*
 * leaky_bucket: a queue of capacity B draining at r; a new key starts
 * empty; allowed iff level + c + h <= B (h the headroom), and the admitted
 * call, which queues c, is told to wait until the queue ahead of it has
 * drained.  The level may be above B: a charge past the capacity
 * (rl_adjust) leaves it so on purpose, and so may a burst lowered since, or
 * a state file (whose images are bounded as a charge's, image_valid): it is
 * not clamped, every call is denied (remaining 0) until it has drained to
 * B - c - h, and retry_after says when.
 */
bool
rl_leaky_bucket(RlState *state, bool fresh, int64 t, int64 last,
				const RlParams *p, RlOutcome *d, RlChain *chain)
{
	RlBucketState *s = &state->bucket;
	int128		capacity = (int128) p->burst * p->per;
	int128		need = (int128) (p->cost + p->headroom) * p->per;

	leaky_drain(s, fresh, t, last, p);
	d->allowed = s->scaled + need <= capacity;
	if (d->allowed)
	{
		d->delay = rl_seconds(s->scaled, p->limit);
		s->scaled += (int128) p->cost * p->per;
		d->retry_after = 0.0;
	}
	else
	{
		d->delay = 0.0;
		d->retry_after = rl_seconds(s->scaled + need - capacity, p->limit);
	}
	d->remaining = rl_units(capacity - s->scaled, p->per);
	d->reset_at = rl_time_after(t, s->scaled, p->limit);
	return true;
}

/*
 * token_bucket: the tokens go back, up to the capacity (a bucket that
 * refilled meanwhile has nothing left to give back).
 */
void
rl_token_bucket_refund(RlState *state, int64 t, const RlParams *p,
					   int64 cost, RlChain *chain)
{
	RlBucketState *s = &state->bucket;
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
rl_leaky_bucket_refund(RlState *state, int64 t, const RlParams *p,
					   int64 cost, RlChain *chain)
{
	RlBucketState *s = &state->bucket;

	bucket_rescale(s, p->per, true);
	s->scaled -= (int128) cost * p->per;
	if (s->scaled < 0)
		s->scaled = 0;
}

/*
 * token_bucket's charge: tokens taken whatever is left, what is missing
 * owed (the bucket below zero), or given back up to B; then a look.
 */
bool
rl_token_bucket_charge(RlState *state, bool fresh, int64 t, int64 last,
					   const RlParams *p, RlOutcome *o, RlChain *chain)
{
	RlBucketState *s = &state->bucket;
	int128		capacity = (int128) p->burst * p->per;
	int128		lowest = -(int128) PG_INT64_MAX * p->per;
	RlParams	look = *p;

	token_fill(s, fresh, t, last, p);
	s->scaled -= (int128) p->cost * p->per;
	if (s->scaled > capacity)
		s->scaled = capacity;
	if (s->scaled < lowest)
		s->scaled = lowest;
	look.cost = 0;
	return rl_token_bucket(state, false, t, t, &look, o, chain);
}

/*
 * leaky_bucket's charge: the units join the queue past its capacity if
 * so, or leave it (never below empty); then a look.
 */
bool
rl_leaky_bucket_charge(RlState *state, bool fresh, int64 t, int64 last,
					   const RlParams *p, RlOutcome *o, RlChain *chain)
{
	RlBucketState *s = &state->bucket;
	int128		highest = (int128) PG_INT64_MAX * p->per;
	RlParams	look = *p;

	leaky_drain(s, fresh, t, last, p);
	s->scaled += (int128) p->cost * p->per;
	if (s->scaled < 0)
		s->scaled = 0;
	if (s->scaled > highest)
		s->scaled = highest;
	look.cost = 0;
	return rl_leaky_bucket(state, false, t, t, &look, o, chain);
}

/*
 * token_bucket's lease lasts one window W: tokens spent later than taken
 * let the bucket refill meanwhile, by at most the lease (docs/redis.md).
 */
int64
rl_token_bucket_lease_end(const RlParams *p, int64 now, const RlOutcome *o)
{
	return now + p->per;
}

/*
 * A saved bucket: a window greater than zero and at most 100 years, and a
 * content from lowest to the largest count, times the window.
 */
static bool
bucket_image_within(const RlStateImage *img, int64 lowest)
{
	const RlBucketState *b = &img->state.bucket;

	return img->nlog == 0 && b->per > 0 && b->per <= RL_MAX_PER &&
		b->scaled >= (int128) lowest * b->per &&
		b->scaled <= (int128) PG_INT64_MAX * b->per;
}

/*
 * A saved token bucket: tokens, or tokens owed after a charge past the
 * limit (rl_adjust) down to -(2^63 - 1).  Its burst is not saved, so the
 * state cannot tell how long it takes to refill: its idle time is bounded
 * by RL_IDLE_MAX after the latest call.
 */
bool
rl_token_bucket_image_valid(RlStateImage *img)
{
	if (!bucket_image_within(img, -PG_INT64_MAX))
		return false;
	rl_idle_bound(img, img->last, RL_IDLE_MAX);
	return true;
}

/*
 * A saved leaky bucket: a level from zero up (past the burst after a
 * charge, rl_adjust).  Its queue drains at L >= 1 unit per W, so a level
 * of "scaled" (units times W) has drained within "scaled" microseconds of
 * the latest call: the idle time is bounded by that.
 */
bool
rl_leaky_bucket_image_valid(RlStateImage *img)
{
	const RlBucketState *b = &img->state.bucket;

	if (!bucket_image_within(img, 0))
		return false;
	rl_idle_bound(img, img->last,
				  b->scaled < RL_IDLE_MAX ? (int64) b->scaled : RL_IDLE_MAX);
	return true;
}
