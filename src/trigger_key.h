/*-------------------------------------------------------------------------
 *
 * trigger_key.h
 *		A quota trigger's view of its table's types: the key columns'
 *		values as bytes, the same in every session whatever its settings,
 *		and the types a table is made of.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_TRIGGER_KEY_H
#define RL_TRIGGER_KEY_H

#include "access/tupdesc.h"
#include "executor/tuptable.h"
#include "port/pg_bitutils.h"

#include "engine.h"

/* How a key column's value becomes bytes (trigger_key.c) */
typedef enum RlKeyKind
{
	/* the integer kinds first (rl_key_build's test) */
	RL_KEY_INT2,
	RL_KEY_INT4,
	RL_KEY_INT8,
	RL_KEY_OID,
	RL_KEY_BOOL,
	RL_KEY_TEXT,				/* text, varchar, char(n): the bytes */
	RL_KEY_NAME,
	RL_KEY_UUID,
	RL_KEY_FLOAT4,
	RL_KEY_FLOAT8,
	RL_KEY_NUMERIC,
	RL_KEY_DATE,
	RL_KEY_TIMESTAMP,
	RL_KEY_TIMESTAMPTZ,			/* in UTC */
	RL_KEY_BYTEA,				/* hex */
	RL_KEY_OTHER				/* the output function, under fixed settings */
} RlKeyKind;

/* One key column, resolved once per trigger. */
typedef struct RlKeyColumn
{
	AttrNumber	attnum;
	RlKeyKind	kind;
	Oid			output;			/* RL_KEY_OTHER: the type's output function */
} RlKeyColumn;

/*
 * A row's key as it is built: where its bytes go (RL_MAX_KEY_LEN of room,
 * the caller's: a quota trigger writes them in place, after the stored
 * key's policy name, #9), and how many there would be.
 */
typedef struct RlKeyBuf
{
	int			len;			/* may pass RL_MAX_KEY_LEN: then too long */
	char	   *data;
} RlKeyBuf;

/*
 * The types a table's columns are made of, all the way down (a domain's
 * base type, an array's elements, a composite's attributes): what can
 * change under a table without an invalidation of the table itself.
 */
typedef struct RlTypeDep
{
	Oid			type;
	Oid			rel;			/* a composite's relation, or InvalidOid */
	uint32		hash;			/* the type's pg_type syscache hash value */
} RlTypeDep;

typedef struct RlTypeDeps
{
	int			n;
	int			max;
	RlTypeDep  *items;
} RlTypeDeps;

extern void rl_key_column(Oid typid, RlKeyColumn *col);
extern void rl_type_deps_add(RlTypeDeps *deps, Oid typid);
extern bool rl_type_deps_have_rel(const RlTypeDeps *deps, Oid relid);
extern bool rl_type_deps_have_hash(const RlTypeDeps *deps, uint32 hash);
extern void rl_key_build_columns(const RlKeyColumn *cols, int ncols,
								 TupleTableSlot *slot, RlKeyBuf *kb);

/*
 * Append an integer in decimal (as int8out writes it), straight into the
 * key: its digits counted first, then written from the last, two at a
 * time from a table (#9: a quota trigger's integer key column is written
 * on every row, and one division per digit, then a copy, cost about 100
 * instructions on a five-digit id), in unsigned arithmetic so that the
 * smallest value has its digits too.
 */
static inline void
rl_key_add_int(RlKeyBuf *kb, int64 value)
{
	static const char pairs[] =
		"0001020304050607080910111213141516171819"
		"2021222324252627282930313233343536373839"
		"4041424344454647484950515253545556575859"
		"6061626364656667686970717273747576777879"
		"8081828384858687888990919293949596979899";
	static const uint64 powers[20] = {
		UINT64CONST(1), UINT64CONST(10), UINT64CONST(100),
		UINT64CONST(1000), UINT64CONST(10000), UINT64CONST(100000),
		UINT64CONST(1000000), UINT64CONST(10000000),
		UINT64CONST(100000000), UINT64CONST(1000000000),
		UINT64CONST(10000000000), UINT64CONST(100000000000),
		UINT64CONST(1000000000000), UINT64CONST(10000000000000),
		UINT64CONST(100000000000000), UINT64CONST(1000000000000000),
		UINT64CONST(10000000000000000), UINT64CONST(100000000000000000),
		UINT64CONST(1000000000000000000), UINT64CONST(10000000000000000000)
	};
	uint64		u = value < 0 ? -(uint64) value : (uint64) value;
	uint64		v = u | 1;		/* as many digits, and not zero */
	int			n;
	char	   *p;

	/*
	 * Digits (1 to 20) without a loop (#9): bits * log10(2) (1233 / 4096
	 * from below) is the count of digits of 2^(bits - 1) or one less, the
	 * powers of ten tell which.
	 */
	n = ((pg_leftmost_one_pos64(v) + 1) * 1233) >> 12;
	n += v >= powers[n];
	if (value < 0)
		n++;
	if (n > RL_MAX_KEY_LEN - kb->len)
	{
		kb->len += n;			/* too long: counted, not written */
		return;
	}
	kb->len += n;
	p = kb->data + kb->len;
	while (u >= 100)
	{
		p -= 2;
		memcpy(p, &pairs[(u % 100) * 2], 2);
		u /= 100;
	}
	if (u >= 10)
	{
		p -= 2;
		memcpy(p, &pairs[u * 2], 2);
	}
	else
		*--p = (char) ('0' + u);
	if (value < 0)
		*--p = '-';
}

/* A value of an integer kind (RL_KEY_INT2 to RL_KEY_OID) as an int64. */
static inline int64
rl_key_int(RlKeyKind kind, Datum value)
{
	switch (kind)
	{
		case RL_KEY_INT2:
			return DatumGetInt16(value);
		case RL_KEY_INT4:
			return DatumGetInt32(value);
		case RL_KEY_INT8:
			return DatumGetInt64(value);
		default:
			return DatumGetObjectId(value);
	}
}

/*
 * Build the key of a row from its key columns, in order, joined with ':'
 * (a NULL giving an empty part), into kb (its data set by the caller); a
 * key longer than RL_MAX_KEY_LEN is refused (22001).  Inline, and a key of
 * one integer column (the usual tenant id: at most 20 bytes) without a
 * call (#9: a quota trigger builds one per row); the others in
 * rl_key_build_columns.
 */
static pg_attribute_always_inline void
rl_key_build(const RlKeyColumn *cols, int ncols, TupleTableSlot *slot,
			 RlKeyBuf *kb)
{
	Datum		value;
	bool		isnull;

	if (unlikely(ncols != 1 || cols[0].kind > RL_KEY_OID))
	{
		rl_key_build_columns(cols, ncols, slot, kb);
		return;
	}
	kb->len = 0;
	value = slot_getattr(slot, cols[0].attnum, &isnull);
	if (!isnull)
		rl_key_add_int(kb, rl_key_int(cols[0].kind, value));
}

#endif							/* RL_TRIGGER_KEY_H */
