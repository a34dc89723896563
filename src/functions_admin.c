/*-------------------------------------------------------------------------
 *
 * functions_admin.c
 *		The SQL-callable functions that administer and observe: resets,
 *		the engines' figures, the store's owners and keys, the decision
 *		counters.  Argument checks and results; the state is reached
 *		through the dispatcher.
 *
 * Results are filled by column name where a function's columns changed
 * between versions of the SQL definitions (the engines' figures), or by
 * position where a version only added columns at the end (rl_keys), so
 * this library serves a database whatever version it is at.  The one
 * function whose arguments changed, rl_reset, has a C entry point per
 * version (as pg_stat_statements does): rl_reset_0_3 for 0.3.0's
 * definition, and rl_reset, which the frozen 0.1.0 (key, algo) and 0.2.0
 * (key, algo, policy) scripts name, for databases not updated yet: the
 * only place that tells definitions apart by their number of arguments.
 * No shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "args.h"
#include "dispatch.h"
#include "policy.h"
#include "policy_limit.h"
#include "stats.h"

PG_FUNCTION_INFO_V1(rl_reset);
PG_FUNCTION_INFO_V1(rl_reset_0_3);
PG_FUNCTION_INFO_V1(rl_reset_all);
PG_FUNCTION_INFO_V1(rl_store_info);
PG_FUNCTION_INFO_V1(rl_redis_info);
PG_FUNCTION_INFO_V1(rl_owners);
PG_FUNCTION_INFO_V1(rl_stats);
PG_FUNCTION_INFO_V1(rl_stats_reset);
PG_FUNCTION_INFO_V1(rl_stats_info);
PG_FUNCTION_INFO_V1(rl_keys);
PG_FUNCTION_INFO_V1(rl_slots);
PG_FUNCTION_INFO_V1(rl_held);

/* ---- administration ---- */

/*
 * Drop the key's state for one algorithm, all of them, or one policy (when
 * has_policy: the third argument), in this database; in Redis too when the
 * key's backend is Redis's.
 */
static Datum
reset_key(FunctionCallInfo fcinfo, bool has_policy)
{
	RlRequest	req;
	bool		all_algos;

	rl_require_store();
	rl_arg_not_null(fcinfo, 0, "key");
	if (has_policy && !PG_ARGISNULL(2))
	{
		if (!PG_ARGISNULL(1))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pass either \"algo\" or \"policy\", not both")));
		rl_policy_args(fcinfo, NULL, NULL, 0, 2, -1, -1, &req);
		all_algos = false;
	}
	else
	{
		rl_request_init(&req);
		req.dbid = MyDatabaseId;
		rl_arg_key(PG_GETARG_DATUM(0), &req.key, &req.keylen);
		all_algos = PG_ARGISNULL(1);
		if (!all_algos)
			req.algo = rl_arg_algo(PG_GETARG_TEXT_PP(1), true);
	}
	/* under a policy, each of its limits */
	PG_RETURN_INT64(req.policy != NULL ? rl_reset_policy(&req) :
					rl_reset_key(&req, all_algos));
}

/*
 * rl_reset(key, algo DEFAULT NULL, policy DEFAULT NULL) returns bigint
 * (0.3.0's definition).
 */
Datum
rl_reset_0_3(PG_FUNCTION_ARGS)
{
	return reset_key(fcinfo, true);
}

/*
 * rl_reset as the frozen scripts define it: (key, algo) in 0.1.0, (key,
 * algo, policy) in 0.2.0, both under this symbol.  Kept for databases not
 * yet updated to 0.3.0, which points at rl_reset_0_3.
 */
Datum
rl_reset(PG_FUNCTION_ARGS)
{
	return reset_key(fcinfo, PG_NARGS() > 2);
}

/*
 * rl_reset_all(all_databases DEFAULT false) returns bigint: drop every
 * state of this database, or of the whole cluster; in Redis too when
 * ratelimit.backend or a policy of this database uses it.
 */
Datum
rl_reset_all(PG_FUNCTION_ARGS)
{
	bool		all_databases = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	Oid			dbid;
	int64		dropped;

	rl_require_store();
	/* EXECUTE is granted per database; the others are not its to reset */
	if (all_databases && !superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to reset the limits of every database"),
				 errhint("Only superusers may pass all_databases => true.")));
	dbid = all_databases ? InvalidOid : MyDatabaseId;
	dropped = rl_reset_database(dbid, rl_policy_any_remote());
	PG_RETURN_INT64(dropped);
}

/*
 * One row of an engine's figures, each column filled from the figure of
 * its name (NULL when the engine has none of that name).
 */
static Datum
engine_info_datum(FunctionCallInfo fcinfo, RlEngineId engine)
{
	static const Oid types[] = {
		[RL_INFO_BIGINT] = INT8OID,
		[RL_INFO_INTEGER] = INT4OID,
		[RL_INFO_BOOL] = BOOLOID,
		[RL_INFO_TIME] = TIMESTAMPTZOID,
		[RL_INFO_TEXT] = TEXTOID,
	};
	RlInfoItem	items[RL_MAX_INFO_ITEMS];
	TupleDesc	tupdesc;
	Datum	   *values;
	bool	   *nulls;
	int			n;
	int			i;
	int			j;

	rl_require_store();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	n = rl_engine_info(engine, items);
	values = palloc(sizeof(Datum) * tupdesc->natts);
	nulls = palloc(sizeof(bool) * tupdesc->natts);
	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, i);
		const RlInfoItem *it = NULL;

		for (j = 0; j < n && !att->attisdropped; j++)
			if (strcmp(NameStr(att->attname), items[j].name) == 0)
				it = &items[j];
		nulls[i] = it == NULL || it->isnull;
		values[i] = (Datum) 0;
		if (it == NULL)
			continue;
		if (att->atttypid != types[it->type])
			elog(ERROR, "column \"%s\" has type %u, expected %u",
				 it->name, att->atttypid, types[it->type]);
		if (it->isnull)
			continue;
		switch (it->type)
		{
			case RL_INFO_BIGINT:
				values[i] = Int64GetDatum(it->value);
				break;
			case RL_INFO_INTEGER:
				values[i] = Int32GetDatum((int32) it->value);
				break;
			case RL_INFO_BOOL:
				values[i] = BoolGetDatum(it->value != 0);
				break;
			case RL_INFO_TIME:
				values[i] = TimestampTzGetDatum(rl_clock_timestamptz(it->value));
				break;
			case RL_INFO_TEXT:
				values[i] = CStringGetTextDatum(it->text);
				break;
		}
	}
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

/*
 * rl_store_info() returns one row of store-wide figures.
 */
Datum
rl_store_info(PG_FUNCTION_ARGS)
{
	PG_RETURN_DATUM(engine_info_datum(fcinfo, RL_ENGINE_STORE));
}

/*
 * rl_redis_info() returns one row: the Redis engine's circuit breaker and
 * counters, for the whole server.
 */
Datum
rl_redis_info(PG_FUNCTION_ARGS)
{
	PG_RETURN_DATUM(engine_info_datum(fcinfo, RL_ENGINE_REDIS));
}

/*
 * rl_owners() returns setof (dbid, roleid, keys, pool_blocks, refused,
 * role_keys, role_pool_blocks, database_keys, database_pool_blocks): what
 * each owner of the store's entries holds, in every database, with what
 * its role holds across databases and what its database holds (what the
 * caps, ratelimit.role_share and ratelimit.database_share, bound).  An
 * overflow owner has a NULL roleid (a database's) or NULL dbid and roleid
 * (the store's).
 */
Datum
rl_owners(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlOwnerImage *owners;
	int			n;
	int			i;

	rl_require_store();
	n = rl_owners_list(&owners);
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < n; i++)
	{
		Datum		values[9];
		bool		nulls[9] = {0};

		values[0] = ObjectIdGetDatum(owners[i].dbid);
		nulls[0] = !OidIsValid(owners[i].dbid);
		values[1] = ObjectIdGetDatum(owners[i].roleid);
		nulls[1] = !OidIsValid(owners[i].roleid);
		values[2] = Int64GetDatum(owners[i].keys);
		values[3] = Int64GetDatum(owners[i].pool_blocks);
		values[4] = Int64GetDatum(owners[i].refused);
		values[5] = Int64GetDatum(owners[i].role_keys);
		values[6] = Int64GetDatum(owners[i].role_pool_blocks);
		values[7] = Int64GetDatum(owners[i].database_keys);
		values[8] = Int64GetDatum(owners[i].database_pool_blocks);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* ---- text written in other databases ---- */

/*
 * A database whose keys and policy names a listing returns: its encoding
 * (-1 if it no longer exists) and the conversion from it to this
 * database's encoding (InvalidOid if none is needed or none exists).
 */
typedef struct RlSourceDb
{
	Oid			dbid;			/* hash key */
	int			encoding;
	Oid			proc;
} RlSourceDb;

/*
 * The source database dbid, looked up once per call in *cache (created in
 * the current memory context on first use).
 */
static const RlSourceDb *
source_db(Oid dbid, HTAB **cache)
{
	RlSourceDb *db;
	bool		found;

	if (*cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(RlSourceDb);
		ctl.hcxt = CurrentMemoryContext;
		*cache = hash_create("ratelimit source databases", 16, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	db = hash_search(*cache, &dbid, HASH_ENTER, &found);
	if (found)
		return db;

	db->encoding = -1;
	db->proc = InvalidOid;
	if (dbid == MyDatabaseId)
		db->encoding = GetDatabaseEncoding();
	else
	{
		HeapTuple	tuple;

		tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dbid));
		if (HeapTupleIsValid(tuple))
		{
			db->encoding = ((Form_pg_database) GETSTRUCT(tuple))->encoding;
			ReleaseSysCache(tuple);
		}
	}
	if (db->encoding > PG_SQL_ASCII && db->encoding != GetDatabaseEncoding() &&
		GetDatabaseEncoding() != PG_SQL_ASCII)
		db->proc = FindDefaultConversionProc(db->encoding,
											 GetDatabaseEncoding());
	return db;
}

/*
 * Bytes written as text in a source database, as text valid in this
 * database's encoding, or NULL when they cannot be represented in it.
 * ASCII is the same in every server encoding.  Bytes from an SQL_ASCII
 * database, from a dropped one (whose encoding is unknown), or read in an
 * SQL_ASCII database are taken as they are (PostgreSQL's own rule for
 * SQL_ASCII), if valid here.  Others are converted with the default
 * conversion, whole or not at all.
 */
static text *
text_from_db(const RlSourceDb *db, const char *bytes, int len)
{
	int			encoding = GetDatabaseEncoding();
	unsigned char *src;
	unsigned char *buf;
	int			size;
	int			i;
	text	   *result;

	for (i = 0; i < len; i++)
		if (IS_HIGHBIT_SET(bytes[i]) || bytes[i] == '\0')
			break;
	if (i == len)
		return cstring_to_text_with_len(bytes, len);

	if (db->encoding <= PG_SQL_ASCII || db->encoding == encoding ||
		encoding == PG_SQL_ASCII)
		return pg_verify_mbstr(encoding, bytes, len, true) ?
			cstring_to_text_with_len(bytes, len) : NULL;
	if (!OidIsValid(db->proc) ||
		!pg_verify_mbstr(db->encoding, bytes, len, true))
		return NULL;

	size = len * MAX_CONVERSION_GROWTH + 1;
	buf = palloc(size);
	src = (unsigned char *) unconstify(char *, bytes);
	if (pg_do_encoding_conversion_buf(db->proc, db->encoding, encoding,
									  src, len, buf, size, true) != len)
		result = NULL;
	else
		result = cstring_to_text((char *) buf);
	pfree(buf);
	return result;
}

/* Bytes as a bytea datum. */
static Datum
bytea_datum(const char *bytes, int len)
{
	bytea	   *result = palloc(VARHDRSZ + len);

	SET_VARSIZE(result, VARHDRSZ + len);
	memcpy(VARDATA(result), bytes, len);
	return PointerGetDatum(result);
}

/* ---- observability ---- */

/*
 * rl_stats(all_databases DEFAULT false) returns setof (dbid, algo, policy,
 * allowed, denied, near_limit, failed_open, failed_closed, shadow_denied,
 * shed).
 * A policy name of another database is converted to this database's
 * encoding, or NULL if it cannot be represented in it.
 */
Datum
rl_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		all_databases = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	HTAB	   *dbs = NULL;
	RlStatsRow *rows;
	int			n;
	int			i;

	rl_require_store();
	rows = palloc(sizeof(RlStatsRow) * rl_stats_capacity());
	n = rl_stats_read(all_databases ? InvalidOid : MyDatabaseId, rows);

	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < n; i++)
	{
		Datum		values[3 + RL_NSTATS];
		bool		nulls[3 + RL_NSTATS];
		int			c;

		memset(nulls, 0, sizeof(nulls));
		values[0] = ObjectIdGetDatum(rows[i].dbid);
		nulls[0] = rows[i].algo < 0;
		if (rows[i].algo >= 0)
			values[1] = CStringGetTextDatum(rl_algo_name((RlAlgo) rows[i].algo));
		else
			nulls[1] = true;
		nulls[2] = true;
		if (rows[i].policy[0] != '\0')
		{
			text	   *policy = text_from_db(source_db(rows[i].dbid, &dbs),
											  rows[i].policy,
											  strlen(rows[i].policy));

			values[2] = PointerGetDatum(policy);
			nulls[2] = policy == NULL;
		}
		/* a database on 0.2.0's definition has no "shed" column */
		for (c = 0; c < RL_NSTATS && 3 + c < rsinfo->setDesc->natts; c++)
			values[3 + c] = Int64GetDatum((int64) rows[i].counters[c]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * rl_stats_reset() zeroes the decision counters and frees every slot:
 * identities claim one again at their next decision.
 */
Datum
rl_stats_reset(PG_FUNCTION_ARGS)
{
	rl_require_store();
	rl_stats_clear();
	PG_RETURN_VOID();
}

/*
 * rl_stats_info() returns one row: the slots of the counter table, how
 * many are held, and the decisions counted under "(other)" since the last
 * reset.
 */
Datum
rl_stats_info(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	RlStatsFigures f;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	rl_require_store();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "rl_stats_info must return a composite type");
	tupdesc = BlessTupleDesc(tupdesc);
	rl_stats_figures(&f);

	values[0] = Int32GetDatum(f.slots);
	values[1] = Int32GetDatum(f.used);
	values[2] = Int64GetDatum((int64) f.overflow);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

static void keys_slots(const RlKeyImage *img, int64 now, Datum *values,
					   bool *nulls);

/*
 * rl_keys(all_databases DEFAULT false) returns setof (dbid, algo, policy,
 * key, last_seen, reset_at, remaining, key_bytes, policy_bytes, in_flight,
 * waiting, longest_hold): the keys whose state is not yet back to a new
 * key's.  For keys used through a
 * policy of this database, remaining and reset_at are what a call of cost
 * 0 would report now; for direct calls (whose parameters are not stored)
 * remaining is NULL.  key and policy are text valid in this database's
 * encoding (text_from_db), NULL where the bytes cannot be represented;
 * key_bytes and policy_bytes are the bytes as stored.  A concurrency
 * limit's key has its slots held and waited for, and how long the
 * longest-held one is held (as rl_slots sees it); others have NULLs there.
 * Each entry is read under its partition's shared lock, one at a time.
 */
Datum
rl_keys(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		all_databases = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	RlKeyImage *img = palloc(sizeof(RlKeyImage));
	HTAB	   *dbs = NULL;
	int64		now = rl_clock_now();
	uint64		cursor = 0;

	rl_require_store();
	InitMaterializedSRF(fcinfo, 0);
	while (rl_scan_keys(all_databases ? InvalidOid : MyDatabaseId, &cursor,
						img))
	{
		Datum		values[12];
		bool		nulls[12] = {false, false, true, false, false, false, true,
		false, true, true, true, true};
		const RlSourceDb *db;
		text	   *text_value;
		char	   *nul;
		const char *key;
		int			keylen;
		int64		reset_at;

		if (img->idle_at <= now)
			continue;

		db = source_db(img->dbid, &dbs);
		key = img->key;
		keylen = img->keylen;
		reset_at = img->idle_at;
		nul = memchr(img->key, '\0', img->keylen);
		if (nul != NULL)
		{
			const RlPolicy *pol = NULL;
			RlRequest	req;
			RlOutcome	out;
			int			namelen = (int) (nul - img->key);

			text_value = text_from_db(db, img->key, namelen);
			values[2] = PointerGetDatum(text_value);
			nulls[2] = text_value == NULL;
			values[8] = bytea_datum(img->key, namelen);
			nulls[8] = false;
			key = nul + 1;
			keylen = img->keylen - (int) (key - img->key);
			if (img->dbid == MyDatabaseId)
				pol = rl_policy_find(img->key, namelen);
			/* not a limit's or a penalty box's (key_bytes start with NUL) */
			if (pol != NULL && pol->algo == img->algo &&
				(keylen == 0 || key[0] != '\0'))
			{
				rl_policy_request(pol, cstring_to_text_with_len(key, keylen),
								  &req);
				if (rl_peek(&req, now, &out))
				{
					values[6] = Int64GetDatum(out.remaining);
					nulls[6] = false;
					reset_at = out.reset_at;
				}
			}
		}
		values[0] = ObjectIdGetDatum(img->dbid);
		values[1] = CStringGetTextDatum(rl_algo_name(img->algo));
		text_value = text_from_db(db, key, keylen);
		values[3] = PointerGetDatum(text_value);
		nulls[3] = text_value == NULL;
		values[4] = TimestampTzGetDatum(rl_clock_timestamptz(img->last));
		values[5] = TimestampTzGetDatum(rl_clock_timestamptz(reset_at));
		values[7] = bytea_datum(key, keylen);
		if (rl_algo_holds(img->algo))
			keys_slots(img, now, &values[9], &nulls[9]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * A concurrency limit's columns of rl_keys: in_flight, waiting and
 * longest_hold (NULL when no noted slot is held: each backend's first
 * RL_HOLDS_SHOWN are noted).
 */
static void
keys_slots(const RlKeyImage *img, int64 now, Datum *values, bool *nulls)
{
	values[0] = Int64GetDatum(img->state.slots.held);
	nulls[0] = false;
	values[1] = Int64GetDatum(img->state.slots.waiting);
	nulls[1] = false;
	if (img->held_since != RL_NO_TIME)
	{
		Interval   *iv = palloc0(sizeof(Interval));

		iv->time = Max(now - img->held_since, 0);
		values[2] = IntervalPGetDatum(iv);
		nulls[2] = false;
	}
}

/*
 * Split a stored key into its policy's name (NULL for a direct call) and
 * the key, as text of the database db (text_from_db).
 */
static void
stored_key_values(const RlSourceDb *db, const char *bytes, int len,
				  Datum *values, bool *nulls)
{
	const char *nul = memchr(bytes, '\0', len);
	text	   *t;

	nulls[0] = true;
	if (nul != NULL)
	{
		t = text_from_db(db, bytes, (int) (nul - bytes));
		values[0] = PointerGetDatum(t);
		nulls[0] = t == NULL;
		len -= (int) (nul + 1 - bytes);
		bytes = nul + 1;
	}
	t = text_from_db(db, bytes, len);
	values[1] = PointerGetDatum(t);
	nulls[1] = t == NULL;
}

/*
 * rl_slots(all_databases DEFAULT false) returns setof (dbid, policy, key,
 * in_flight, waiting, held_since): the keys of concurrency limits whose
 * slots are held or waited for, and since when the longest-held slot is
 * held, each read under its partition's shared lock.
 */
Datum
rl_slots(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		all_databases = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	RlKeyImage *img = palloc(sizeof(RlKeyImage));
	HTAB	   *dbs = NULL;
	uint64		cursor = 0;

	rl_require_store();
	InitMaterializedSRF(fcinfo, 0);
	while (rl_scan_keys(all_databases ? InvalidOid : MyDatabaseId, &cursor,
						img))
	{
		Datum		values[6];
		bool		nulls[6] = {false, false, false, false, false, true};

		if (!rl_algo_holds(img->algo) || rl_slots_idle(&img->state.slots))
			continue;
		values[0] = ObjectIdGetDatum(img->dbid);
		stored_key_values(source_db(img->dbid, &dbs), img->key, img->keylen,
						  &values[1], &nulls[1]);
		values[3] = Int64GetDatum(img->state.slots.held);
		values[4] = Int64GetDatum(img->state.slots.waiting);
		if (img->held_since != RL_NO_TIME)
		{
			values[5] = TimestampTzGetDatum(rl_clock_timestamptz(img->held_since));
			nulls[5] = false;
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * rl_held() returns setof (policy, key, hold, since): the slots this
 * session holds, 'transaction' or 'session', and since when.
 */
Datum
rl_held(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlHeldSlot *held;
	HTAB	   *dbs = NULL;
	int			n;
	int			i;

	rl_require_store();
	InitMaterializedSRF(fcinfo, 0);
	n = rl_held_slots(&held);
	for (i = 0; i < n; i++)
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};

		stored_key_values(source_db(MyDatabaseId, &dbs), held[i].key,
						  held[i].keylen, values, nulls);
		values[2] = CStringGetTextDatum(held[i].session ? "session" :
										"transaction");
		values[3] = TimestampTzGetDatum(rl_clock_timestamptz(held[i].since));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
