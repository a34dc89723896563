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

#include "access/htup.h"
#include "access/tupdesc.h"

#include "engine.h"

/* How a key column's value becomes bytes (trigger_key.c) */
typedef enum RlKeyKind
{
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

/* A row's key as it is built: the bytes, and how many there would be. */
typedef struct RlKeyBuf
{
	int			len;			/* may pass RL_MAX_KEY_LEN: then too long */
	char		data[RL_MAX_KEY_LEN];
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
extern void rl_key_build(const RlKeyColumn *cols, int ncols, HeapTuple tuple,
						 TupleDesc tupdesc, RlKeyBuf *kb);

#endif							/* RL_TRIGGER_KEY_H */
