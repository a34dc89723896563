/*-------------------------------------------------------------------------
 *
 * keyhash.h
 *		A cheap 64-bit hash of a key's bytes, and their comparison, for the
 *		hot path (#9).
 *
 * A decision's keys are short (a tenant id, a user name, an address):
 * PostgreSQL's hash_bytes_extended costs about 80 instructions on one of
 * five bytes, most of it set-up for long inputs.  This one reads the key
 * eight bytes at a time (a short tail as two overlapping loads, so no loop
 * over single bytes and no call of memcpy of a variable length), mixes
 * each word with a multiplication, and ends with a finalizer that spreads
 * every input bit over the whole result, the low bits (a partition, a
 * backend-local table's bucket) as much as the high ones (the store's
 * bucket).  About 25 instructions on a short key.
 *
 * Only for tables in memory: its values depend on the machine's byte
 * order, so they are never written to disk (the state file holds keys,
 * whose hashes are computed again as they are read).  Inline and without
 * state, so that any file may use it without depending on another.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_KEYHASH_H
#define RL_KEYHASH_H

/* odd constants with their bits spread (from the golden ratio and pi) */
#define RL_KEYHASH_M1	UINT64CONST(0x9e3779b97f4a7c15)
#define RL_KEYHASH_M2	UINT64CONST(0xc2b2ae3d27d4eb4f)
#define RL_KEYHASH_M3	UINT64CONST(0x243f6a8885a308d3)

/* Eight bytes of a key as a word (unaligned). */
static inline uint64
rl_keyhash_word(const char *p)
{
	uint64		w;

	memcpy(&w, p, sizeof(w));
	return w;
}

/* Four bytes of a key as a word (unaligned). */
static inline uint64
rl_keyhash_half(const char *p)
{
	uint32		w;

	memcpy(&w, p, sizeof(w));
	return w;
}

/* One word mixed into the running hash. */
static inline uint64
rl_keyhash_mix(uint64 h, uint64 w)
{
	h = (h ^ w) * RL_KEYHASH_M1;
	return h ^ (h >> 32);
}

/*
 * The hash of len bytes of key under a seed (what else tells two keys of
 * the same bytes apart: a database, an algorithm).  Keys of different
 * lengths differ by the length mixed in first.
 */
static inline uint64
rl_key_hash(const char *key, int len, uint64 seed)
{
	uint64		h = (seed ^ ((uint64) len << 56)) * RL_KEYHASH_M2;

	for (; len >= 8; key += 8, len -= 8)
		h = rl_keyhash_mix(h, rl_keyhash_word(key));
	if (len >= 4)
		h = rl_keyhash_mix(h, rl_keyhash_half(key) |
						   (rl_keyhash_half(key + len - 4) << 32));
	else if (len > 0)
		h = rl_keyhash_mix(h, (uint64) (unsigned char) key[0] |
						   ((uint64) (unsigned char) key[len / 2] << 8) |
						   ((uint64) (unsigned char) key[len - 1] << 16));
	/* the finalizer: every bit of h reaches every bit of the result */
	h ^= h >> 31;
	h *= RL_KEYHASH_M3;
	h ^= h >> 29;
	h *= RL_KEYHASH_M1;
	return h ^ (h >> 32);
}

/*
 * The hash of a state's key: its bytes under its database and algorithm.
 * The store's slot and the refund tracker's targets are both found by it.
 */
static inline uint64
rl_state_hash(Oid dbid, int algo, const char *key, int len)
{
	return rl_key_hash(key, len, ((uint64) dbid << 8) | (uint64) algo);
}

/*
 * The hash of a 64-bit identity (the refund tracker's of a state the store
 * names by its entry and incarnation): both halves reach every bit.
 */
static inline uint64
rl_id_hash(uint64 id)
{
	id *= RL_KEYHASH_M1;
	id ^= id >> 32;
	id *= RL_KEYHASH_M2;
	return id ^ (id >> 29);
}

/*
 * Are len bytes at a and b the same?  memcmp inline for short keys (#9: a
 * call of the library's memcmp cost about 40 instructions on a short key,
 * and a decision compares its key once or twice): words, the tail read
 * as an overlapping word, never a byte past either end.
 */
static inline bool
rl_key_equal(const char *a, const char *b, int len)
{
	if (len >= 8)
	{
		int			i;

		/* whole words up to the last, which may overlap the one before */
		for (i = 0; i + 8 < len; i += 8)
			if (rl_keyhash_word(a + i) != rl_keyhash_word(b + i))
				return false;
		return rl_keyhash_word(a + len - 8) == rl_keyhash_word(b + len - 8);
	}
	if (len >= 4)
		return rl_keyhash_half(a) == rl_keyhash_half(b) &&
			rl_keyhash_half(a + len - 4) == rl_keyhash_half(b + len - 4);
	for (; len > 0; len--)
		if (a[len - 1] != b[len - 1])
			return false;
	return true;
}

#endif							/* RL_KEYHASH_H */
