/*-------------------------------------------------------------------------
 *
 * trigger_key.c
 *		A quota trigger's view of its table's types: a row's key (the key
 *		columns' values as bytes, joined with ':', a NULL contributing an
 *		empty part), and the types the table is made of.
 *
 * A key must not depend on the session that writes the row: if a row's
 * key followed DateStyle, TimeZone, bytea_output and the like (which any
 * role may SET), one row would be charged to a different key, each with a
 * fresh quota, in each session setting them differently.  So each type
 * has one canonical text (docs/reference.md lists them), written here
 * directly for the common types, without the output function and without
 * allocating: integers and oid in decimal, booleans t or f, text, varchar
 * and char(n) as their bytes, uuid in lower-case hex with dashes, real and
 * double precision in their shortest exact form, numeric as numeric_out
 * writes it, date as YYYY-MM-DD, timestamp as YYYY-MM-DD HH:MI:SS[.ffffff],
 * timestamptz the same in UTC followed by +00, bytea as \x and lower-case
 * hex.  These are the output of a session with the default settings, but
 * for timestamptz, which the default output writes in the server's time
 * zone.  Every other type (a domain counts as its base type) goes through
 * its output function with the settings that change outputs fixed for the
 * call (fixed_settings), as a function's SET clause would.
 *
 * A table's columns can change without an invalidation of the table:
 * ALTER TYPE of a composite type used by a column sends one for the
 * type's own relation, ALTER DOMAIN one of pg_type's syscache.  The
 * trigger's cache lists the types its table is made of (RlTypeDeps) and
 * follows those too.
 *
 * No shared state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"
#include "utils/uuid.h"

#include "args.h"
#include "trigger_key.h"

/*
 * The settings an output function may follow, and the values a key is
 * written with (those of a new session, but TimeZone: UTC; search_path:
 * pg_catalog, so that names such as regclass's come out qualified).
 */
static const char *const fixed_settings[][2] = {
	{"DateStyle", "ISO, YMD"},
	{"IntervalStyle", "postgres"},
	{"TimeZone", "UTC"},
	{"bytea_output", "hex"},
	{"extra_float_digits", "1"},
	{"lc_monetary", "C"},
	{"search_path", "pg_catalog"},
};

/* Decide how a value of type typid becomes key bytes. */
void
rl_key_column(Oid typid, RlKeyColumn *col)
{
	bool		isvarlena;

	col->output = InvalidOid;
	switch (getBaseType(typid))
	{
		case INT2OID:
			col->kind = RL_KEY_INT2;
			break;
		case INT4OID:
			col->kind = RL_KEY_INT4;
			break;
		case INT8OID:
			col->kind = RL_KEY_INT8;
			break;
		case OIDOID:
			col->kind = RL_KEY_OID;
			break;
		case BOOLOID:
			col->kind = RL_KEY_BOOL;
			break;
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
			col->kind = RL_KEY_TEXT;
			break;
		case NAMEOID:
			col->kind = RL_KEY_NAME;
			break;
		case UUIDOID:
			col->kind = RL_KEY_UUID;
			break;
		case FLOAT4OID:
			col->kind = RL_KEY_FLOAT4;
			break;
		case FLOAT8OID:
			col->kind = RL_KEY_FLOAT8;
			break;
		case NUMERICOID:
			col->kind = RL_KEY_NUMERIC;
			break;
		case DATEOID:
			col->kind = RL_KEY_DATE;
			break;
		case TIMESTAMPOID:
			col->kind = RL_KEY_TIMESTAMP;
			break;
		case TIMESTAMPTZOID:
			col->kind = RL_KEY_TIMESTAMPTZ;
			break;
		case BYTEAOID:
			col->kind = RL_KEY_BYTEA;
			break;
		default:
			col->kind = RL_KEY_OTHER;
			getTypeOutputInfo(typid, &col->output, &isvarlena);
			break;
	}
}

/* Append n bytes to the key, counting those past its room. */
static inline void
key_add(RlKeyBuf *kb, const char *bytes, int n)
{
	if (n <= RL_MAX_KEY_LEN - kb->len)
		memcpy(kb->data + kb->len, bytes, n);
	kb->len += n;
}

/* Append n bytes in lower-case hex. */
static void
key_add_hex(RlKeyBuf *kb, const unsigned char *bytes, int n)
{
	static const char digits[] = "0123456789abcdef";
	int			i;

	for (i = 0; i < n; i++)
	{
		char		pair[2];

		pair[0] = digits[bytes[i] >> 4];
		pair[1] = digits[bytes[i] & 0x0f];
		key_add(kb, pair, 2);
	}
}

/* The error of a date or time the calendar cannot write. */
static void
time_out_of_range(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
			 errmsg("timestamp out of range")));
}

/*
 * A timestamp (kind timestamp or timestamptz) in ISO form; a timestamptz
 * is written in UTC, with its offset, +00.
 */
static void
key_add_timestamp(RlKeyBuf *kb, Timestamp ts, bool with_tz)
{
	char		buf[MAXDATELEN + 1];
	struct pg_tm tm;
	fsec_t		fsec;

	if (TIMESTAMP_NOT_FINITE(ts))
		EncodeSpecialTimestamp(ts, buf);
	else if (timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) == 0)
	{
		/* UTC's fields: its offset is known (0), and printed if with_tz */
		tm.tm_isdst = 0;
		EncodeDateTime(&tm, fsec, with_tz, 0, NULL, USE_ISO_DATES, buf);
	}
	else
		time_out_of_range();
	key_add(kb, buf, strlen(buf));
}

/*
 * Append one non-null value of a column of a canonical kind other than
 * the integers (key_add_value's).
 */
static pg_noinline void
key_add_other(RlKeyBuf *kb, const RlKeyColumn *col, Datum value)
{
	char		buf[Max(MAXDATELEN + 1, DOUBLE_SHORTEST_DECIMAL_LEN)];
	struct varlena *v;
	DateADT		date;
	struct pg_tm tm;
	char	   *s;

	switch (col->kind)
	{
		case RL_KEY_BOOL:
			key_add(kb, DatumGetBool(value) ? "t" : "f", 1);
			break;
		case RL_KEY_TEXT:
		case RL_KEY_BYTEA:
			v = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(value));
			if (col->kind == RL_KEY_TEXT)
				key_add(kb, VARDATA_ANY(v), VARSIZE_ANY_EXHDR(v));
			else
			{
				key_add(kb, "\\x", 2);
				key_add_hex(kb, (const unsigned char *) VARDATA_ANY(v),
							VARSIZE_ANY_EXHDR(v));
			}
			break;
		case RL_KEY_NAME:
			s = NameStr(*DatumGetName(value));
			key_add(kb, s, strlen(s));
			break;
		case RL_KEY_UUID:
			{
				const unsigned char *u = DatumGetUUIDP(value)->data;

				key_add_hex(kb, u, 4);
				key_add(kb, "-", 1);
				key_add_hex(kb, u + 4, 2);
				key_add(kb, "-", 1);
				key_add_hex(kb, u + 6, 2);
				key_add(kb, "-", 1);
				key_add_hex(kb, u + 8, 2);
				key_add(kb, "-", 1);
				key_add_hex(kb, u + 10, 6);
			}
			break;
		case RL_KEY_FLOAT4:
			key_add(kb, buf,
					float_to_shortest_decimal_bufn(DatumGetFloat4(value), buf));
			break;
		case RL_KEY_FLOAT8:
			key_add(kb, buf,
					double_to_shortest_decimal_bufn(DatumGetFloat8(value), buf));
			break;
		case RL_KEY_NUMERIC:
			/* numeric_out follows no setting */
			s = DatumGetCString(DirectFunctionCall1(numeric_out, value));
			key_add(kb, s, strlen(s));
			pfree(s);
			break;
		case RL_KEY_DATE:
			date = DatumGetDateADT(value);
			if (DATE_NOT_FINITE(date))
				EncodeSpecialDate(date, buf);
			else
			{
				j2date(date + POSTGRES_EPOCH_JDATE,
					   &tm.tm_year, &tm.tm_mon, &tm.tm_mday);
				EncodeDateOnly(&tm, USE_ISO_DATES, buf);
			}
			key_add(kb, buf, strlen(buf));
			break;
		case RL_KEY_TIMESTAMP:
		case RL_KEY_TIMESTAMPTZ:
			key_add_timestamp(kb, DatumGetTimestamp(value),
							  col->kind == RL_KEY_TIMESTAMPTZ);
			break;
		case RL_KEY_OTHER:
			s = OidOutputFunctionCall(col->output, value);
			key_add(kb, s, strlen(s));
			pfree(s);
			break;
		case RL_KEY_INT2:
		case RL_KEY_INT4:
		case RL_KEY_INT8:
		case RL_KEY_OID:
			Assert(false);		/* key_add_value's */
			break;
	}
}

/*
 * Append one non-null value of a column of a canonical kind: an integer
 * here (the usual tenant key), without key_add_other's frame (#9).
 */
static pg_attribute_always_inline void
key_add_value(RlKeyBuf *kb, const RlKeyColumn *col, Datum value)
{
	if (col->kind <= RL_KEY_OID)
		rl_key_add_int(kb, rl_key_int(col->kind, value));
	else
		key_add_other(kb, col, value);
}

/*
 * Fix the settings output functions follow, until fixed_settings_end
 * with the level this returns (an error on the way restores them with the
 * transaction or subtransaction it aborts).
 */
static int
fixed_settings_begin(void)
{
	int			level = NewGUCNestLevel();
	int			i;

	for (i = 0; i < lengthof(fixed_settings); i++)
		(void) set_config_option(fixed_settings[i][0], fixed_settings[i][1],
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
								 true, ERROR, false);
	return level;
}

/*
 * rl_key_build's general case: any number of columns of any kind; a key
 * past RL_MAX_KEY_LEN is refused (22001) once built.
 */
void
rl_key_build_columns(const RlKeyColumn *cols, int ncols,
					 TupleTableSlot *slot, RlKeyBuf *kb)
{
	int			level = -1;
	int			i;

	kb->len = 0;
	for (i = 0; i < ncols; i++)
	{
		Datum		value;
		bool		isnull;

		if (i > 0)
			key_add(kb, ":", 1);
		value = slot_getattr(slot, cols[i].attnum, &isnull);
		if (isnull)
			continue;
		if (cols[i].kind == RL_KEY_OTHER && level < 0)
			level = fixed_settings_begin();
		key_add_value(kb, &cols[i], value);
	}
	if (level >= 0)
		AtEOXact_GUC(true, level);
	if (kb->len > RL_MAX_KEY_LEN)
		rl_arg_key_too_long(kb->len);
}

/*
 * Add a type to the list, with the types it is made of in turn: a domain's
 * base type, an array's element type, a composite's attributes.  Built-in
 * types never change and are left out.  Allocates in the current memory
 * context.
 */
void
rl_type_deps_add(RlTypeDeps *deps, Oid typid)
{
	uint32		hash = GetSysCacheHashValue1(TYPEOID, ObjectIdGetDatum(typid));
	HeapTuple	tp;
	Form_pg_type typ;
	Oid			relid = InvalidOid;
	Oid			base = InvalidOid;
	Oid			elem;
	int			i;

	if (typid < FirstNormalObjectId)
		return;
	for (i = 0; i < deps->n; i++)
		if (deps->items[i].type == typid)
			return;
	tp = SearchSysCache1(TYPEOID, ObjectIdGetDatum(typid));
	if (!HeapTupleIsValid(tp))
		return;
	typ = (Form_pg_type) GETSTRUCT(tp);
	if (typ->typtype == TYPTYPE_COMPOSITE)
		relid = typ->typrelid;
	else if (typ->typtype == TYPTYPE_DOMAIN)
		base = typ->typbasetype;
	elem = typ->typelem;
	ReleaseSysCache(tp);

	if (deps->n == deps->max)
	{
		deps->max = Max(8, 2 * deps->max);
		deps->items = deps->items == NULL ?
			palloc(sizeof(RlTypeDep) * deps->max) :
			repalloc(deps->items, sizeof(RlTypeDep) * deps->max);
	}
	deps->items[deps->n].type = typid;
	deps->items[deps->n].rel = relid;
	deps->items[deps->n].hash = hash;
	deps->n++;

	if (OidIsValid(base))
		rl_type_deps_add(deps, base);
	if (OidIsValid(elem))
		rl_type_deps_add(deps, elem);
	if (OidIsValid(relid))
	{
		TupleDesc	desc = lookup_rowtype_tupdesc_copy(typid, -1);

		for (i = 0; i < desc->natts; i++)
			if (!TupleDescAttr(desc, i)->attisdropped)
				rl_type_deps_add(deps, TupleDescAttr(desc, i)->atttypid);
	}
}

/* Is relid the relation of a composite type of the list? */
bool
rl_type_deps_have_rel(const RlTypeDeps *deps, Oid relid)
{
	int			i;

	for (i = 0; i < deps->n; i++)
		if (deps->items[i].rel == relid)
			return true;
	return false;
}

/* Is hash the pg_type syscache hash value of a type of the list? */
bool
rl_type_deps_have_hash(const RlTypeDeps *deps, uint32 hash)
{
	int			i;

	for (i = 0; i < deps->n; i++)
		if (deps->items[i].hash == hash)
			return true;
	return false;
}
