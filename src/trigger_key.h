/*-------------------------------------------------------------------------
 *
 * trigger_key.h
 *		A quota trigger's key: the key columns' values as bytes, the same
 *		in every session whatever its settings.
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

extern void rl_key_column(Oid typid, RlKeyColumn *col);
extern void rl_key_build(const RlKeyColumn *cols, int ncols, HeapTuple tuple,
						 TupleDesc tupdesc, RlKeyBuf *kb);

#endif							/* RL_TRIGGER_KEY_H */
