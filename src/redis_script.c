/*-------------------------------------------------------------------------
 *
 * redis_script.c
 *		The Redis engine's scripts: their text and SHA1s, assembled from
 *		the algorithm table's Lua (src/lua/), the names of the keys they
 *		touch, their arguments, and their replies.
 *
 * A script deciding or refunding one call is the prelude, single.lua, the
 * algorithm's setup and its decision or refund; charging one (rl_adjust), the
 * same with its charge, then its setup and decision again (a look at the state
 * the charge left, lua/prelude.lua's charged); the all-or-nothing script is
 * the prelude, each algorithm's decision and refund as functions decide[code]
 * and refund[code], then all.lua.  src/lua/prelude.lua describes KEYS, ARGV and
 * the replies; docs/redis.md the key layout.
 *
 * No shared state: the scripts are built once per backend, in
 * TopMemoryContext.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha1.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "algo_common.h"
#include "lua_scripts.h"		/* generated from src/lua by the Makefile */
#include "redis_int.h"

/* TTL slack after the state is back to a new key's (see docs/redis.md) */
#define RL_REDIS_SLACK_CLOCK	"1000"	/* ms: calls on a real clock */
#define RL_REDIS_SLACK_AT		"3600000"	/* ms: calls with "at" */

/* digits of a number in a script's reply: 10^38 - 1 fits an int128 */
#define RL_REPLY_MAX_DIGITS		38

char	   *rl_redis_namespace = NULL;
int			rl_redis_clock = RL_REDIS_CLOCK_SERVER;

static const struct config_enum_entry redis_clock_options[] = {
	{"server", RL_REDIS_CLOCK_SERVER, false},
	{"client", RL_REDIS_CLOCK_CLIENT, false},
	{NULL, 0, false}
};

/* The scripts, built on first use. */
static RlRedisScript scripts[RL_NUM_SCRIPTS][RL_NUM_ALGOS];
static RlRedisScript script_all;

/*
 * ratelimit.redis_namespace: becomes part of every key name, where ':', '{'
 * and '}' would make names ambiguous or move the hash tag.
 */
static bool
check_redis_namespace(char **newval, void **extra, GucSource source)
{
	if (strpbrk(*newval, ":{}") != NULL)
	{
		GUC_check_errdetail("The namespace must not contain ':', '{' or '}'.");
		return false;
	}
	return true;
}

/* Other key names: start afresh, as for the connection's settings. */
static void
assign_redis_namespace(const char *newval, void *extra)
{
	rl_redis_conn_invalidate();
}

/* The scripts' settings (from rl_redis_init). */
void
rl_redis_script_init(void)
{
	DefineCustomStringVariable("ratelimit.redis_namespace",
							   "Replaces the database OID in Redis key names.",
							   "Servers or databases with the same namespace share their limits. Empty: the database OID.",
							   &rl_redis_namespace,
							   "",
							   PGC_SUSET, 0,
							   check_redis_namespace, assign_redis_namespace,
							   NULL);

	DefineCustomEnumVariable("ratelimit.redis_clock",
							 "Clock of calls without \"at\": Redis TIME (server) or this server's (client).",
							 NULL,
							 &rl_redis_clock,
							 RL_REDIS_CLOCK_SERVER, redis_clock_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
}

/* A script's text, copied to TopMemoryContext, and its SHA1 in hex. */
static void
script_finish(const StringInfo text, RlRedisScript *script)
{
	pg_cryptohash_ctx *ctx;
	uint8		digest[SHA1_DIGEST_LENGTH];
	int			i;

	ctx = pg_cryptohash_create(PG_SHA1);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) text->data, text->len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute the SHA1 of a ratelimit script");
	pg_cryptohash_free(ctx);
	for (i = 0; i < SHA1_DIGEST_LENGTH; i++)
		sprintf(&script->sha[i * 2], "%02x", digest[i]);
	script->text = MemoryContextStrdup(TopMemoryContext, text->data);
}

/*
 * Assemble the scripts and their SHA1s (once per backend), from the
 * algorithm table's Lua.
 */
static void
scripts_build(void)
{
	StringInfoData all;
	int			k;
	int			a;

	initStringInfo(&all);
	appendStringInfoString(&all, rl_lua_prelude);
	appendStringInfoString(&all, "local decide, refund = {}, {}\n");
	for (k = 0; k < RL_NUM_SCRIPTS; k++)
		for (a = 0; a < RL_NUM_ALGOS; a++)
		{
			const RlAlgoRoutine *algo = rl_algo((RlAlgo) a);
			const char *body = k == RL_SCRIPT_DECIDE ? algo->lua_decide :
				k == RL_SCRIPT_REFUND ? algo->lua_refund : algo->lua_charge;
			StringInfoData text;

			initStringInfo(&text);
			appendStringInfo(&text, "%s%s%s%s", rl_lua_prelude, rl_lua_single,
							 algo->lua_setup, body);
			/* a charge ends with a look: the decision, at cost 0 */
			if (k == RL_SCRIPT_CHARGE)
				appendStringInfo(&text, "%s%s", algo->lua_setup,
								 algo->lua_decide);
			script_finish(&text, &scripts[k][a]);
			pfree(text.data);

			if (k != RL_SCRIPT_CHARGE)
				appendStringInfo(&all, "%s.%s = function()\n%s%send\n",
								 k == RL_SCRIPT_DECIDE ? "decide" : "refund",
								 algo->code, algo->lua_setup, body);
		}
	appendStringInfoString(&all, rl_lua_all);
	script_finish(&all, &script_all);
	pfree(all.data);
}

/* An algorithm's decision, refund or charge script. */
const RlRedisScript *
rl_redis_script(RlScript kind, RlAlgo algo)
{
	if (script_all.text == NULL)
		scripts_build();
	return &scripts[kind][algo];
}

/* The all-or-nothing script. */
const RlRedisScript *
rl_redis_script_all(void)
{
	if (script_all.text == NULL)
		scripts_build();
	return &script_all;
}

/* The leases' script (lua/lease.lua), built once per backend. */
const RlRedisScript *
rl_redis_lease_script(void)
{
	static RlRedisScript lease;

	if (lease.text == NULL)
	{
		StringInfoData text;

		initStringInfo(&text);
		appendStringInfoString(&text, rl_lua_lease);
		script_finish(&text, &lease);
		pfree(text.data);
	}
	return &lease;
}

/*
 * The names of a state's keys, in fresh StringInfos: the hash
 * rl:{<namespace>:<code>:<key>} (the namespace is the database OID unless
 * ratelimit.redis_namespace is set; the code is the algorithm table's),
 * and the sliding log's entry list, that name plus ":log".
 */
void
rl_redis_key_names(StringInfo hash, StringInfo log, Oid dbid, RlAlgo algo,
				   const char *key, int keylen)
{
	initStringInfo(hash);
	appendStringInfoString(hash, "rl:{");
	if (rl_redis_namespace[0] != '\0')
		appendStringInfoString(hash, rl_redis_namespace);
	else
		appendStringInfo(hash, "%u", dbid);
	appendStringInfo(hash, ":%s:", rl_algo(algo)->code);
	appendBinaryStringInfo(hash, key, keylen);
	appendStringInfoChar(hash, '}');
	initStringInfo(log);
	appendBinaryStringInfo(log, hash->data, hash->len);
	appendStringInfoString(log, ":log");
}

/* How many keys an algorithm's script touches: a log has its list too. */
int
rl_redis_nkeys(RlAlgo algo)
{
	return rl_algo(algo)->state == RL_STATE_LOG ? 2 : 1;
}

/*
 * A calendar period's bounds for the script (prelude.lua, window()): the
 * starts of the windows before, of and after the one holding the time the
 * call is expected at, and the end of the last.  The time is the refunded
 * call's, the explicit "at", or this server's clock: Redis's TIME, when it
 * decides the time, is within a period of it.
 */
static void
script_bounds(const RlRequest *req, const RlParams *p, const RlReceipt *r,
			  RlScriptArgs *a)
{
	int64		t = r != NULL ? r->time :
		req->at != RL_NO_TIME ? req->at : rl_clock_now();
	int64		b[4];
	int64		unused;
	int			i;

	rl_window_bounds(p, t, &b[1], &b[2]);
	rl_window_bounds(p, b[1] - 1, &b[0], &unused);
	rl_window_bounds(p, b[2], &unused, &b[3]);
	for (i = 0; i < 4; i++)
	{
		snprintf(a->num[6 + i], 24, INT64_FORMAT, b[i]);
		a->argv[a->argc++] = a->num[6 + i];
	}
}

/*
 * Fill a call's script arguments, with the parameters p.  For a refund (r
 * not NULL), "at" is the refunded call's time and the incarnation follows;
 * otherwise "at" is the request's own time: its explicit "at", the
 * PostgreSQL clock with ratelimit.redis_clock = client, or '' for Redis's
 * TIME, and the headroom follows when there is one (or a calendar
 * period's bounds come after it: '' for none).
 */
void
rl_redis_script_args(const RlRequest *req, const RlParams *p,
					 const RlReceipt *r, RlScriptArgs *a)
{
	int64		values[4] = {p->limit, p->per, p->cost, p->burst};
	int			i;

	if (r != NULL)
		snprintf(a->num[0], 24, INT64_FORMAT, r->time);
	else if (req->at != RL_NO_TIME)
		snprintf(a->num[0], 24, INT64_FORMAT, req->at);
	else if (rl_redis_clock == RL_REDIS_CLOCK_CLIENT)
		snprintf(a->num[0], 24, INT64_FORMAT, rl_clock_now());
	else
		a->num[0][0] = '\0';
	for (i = 0; i < 4; i++)
		snprintf(a->num[i + 1], 24, INT64_FORMAT, values[i]);
	for (i = 0; i < 5; i++)
		a->argv[i] = a->num[i];
	a->argv[5] = req->at != RL_NO_TIME ? RL_REDIS_SLACK_AT :
		RL_REDIS_SLACK_CLOCK;
	a->argc = 6;
	if (r != NULL)
		snprintf(a->num[5], 24, UINT64_FORMAT, r->incarnation);
	else if (p->headroom > 0)
		snprintf(a->num[5], 24, INT64_FORMAT, p->headroom);
	else
		a->num[5][0] = '\0';
	if (r != NULL || p->headroom > 0 || rl_period_is_calendar(&p->period))
		a->argv[a->argc++] = a->num[5];
	if (rl_period_is_calendar(&p->period))
		script_bounds(req, p, r, a);
	for (i = 0; i < a->argc; i++)
		a->len[i] = strlen(a->argv[i]);
	snprintf(a->nargs, sizeof(a->nargs), "%d", a->argc);
}

/*
 * The command that runs a script on one request: EVALSHA, the SHA1, the
 * number of keys, the keys (the state's hash, and a log's list), the
 * arguments; into argv and argvlen (RL_SCRIPT_ARGV places).  Returns the
 * number of arguments.  argv points into hkey, lkey and args.
 */
int
rl_redis_script_command(const RlRedisScript *script, RlAlgo algo,
						const StringInfoData *hkey,
						const StringInfoData *lkey,
						const RlScriptArgs *args, const char **argv,
						size_t *argvlen)
{
	int			argc = 0;
	int			i;

	argv[argc] = "EVALSHA";
	argvlen[argc++] = 7;
	argv[argc] = script->sha;
	argvlen[argc++] = strlen(script->sha);
	argv[argc] = rl_redis_nkeys(algo) == 2 ? "2" : "1";
	argvlen[argc++] = 1;
	argv[argc] = hkey->data;
	argvlen[argc++] = hkey->len;
	if (rl_redis_nkeys(algo) == 2)
	{
		argv[argc] = lkey->data;
		argvlen[argc++] = lkey->len;
	}
	for (i = 0; i < args->argc; i++)
	{
		argv[argc] = args->argv[i];
		argvlen[argc++] = args->len[i];
	}
	Assert(argc <= RL_SCRIPT_ARGV);
	return argc;
}

/*
 * Parse a decimal integer reply element (an optional '-', then digits);
 * false if it is not one.  At most RL_REPLY_MAX_DIGITS digits: any such
 * number fits an int128 (10^38 - 1 < 2^127 - 1), so the arithmetic below
 * cannot overflow whatever Redis sends, and a longer number (no script
 * sends one: their values are below 2^64) is not a reply of ours.
 */
static bool
reply_int128(const redisReply *r, int128 *v)
{
	const char *s = r->str;
	const char *end = r->str + r->len;
	bool		neg = false;
	int128		x = 0;

	if (r->type != REDIS_REPLY_STRING)
		return false;
	if (s < end && *s == '-')
	{
		neg = true;
		s++;
	}
	if (s == end || end - s > RL_REPLY_MAX_DIGITS)
		return false;
	for (; s < end; s++)
	{
		if (*s < '0' || *s > '9')
			return false;
		x = x * 10 + (*s - '0');
	}
	*v = neg ? -x : x;
	return true;
}

static int64
clamp64(int128 v)
{
	return v > PG_INT64_MAX ? PG_INT64_MAX :
		v < PG_INT64_MIN ? PG_INT64_MIN : (int64) v;
}

/*
 * Turn a decision script's reply into an outcome, converting the fractions
 * with the same function as the C algorithms, and the time the call was
 * decided at and the state's incarnation.  False if the reply is not one.
 */
bool
rl_redis_reply_outcome(const redisReply *r, RlOutcome *out, int64 *time,
					   uint64 *incarnation)
{
	int128		v[8];
	int			i;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 9 ||
		r->element[0]->type != REDIS_REPLY_INTEGER)
		return false;
	for (i = 0; i < 8; i++)
		if (!reply_int128(r->element[i + 1], &v[i]))
			return false;
	if (v[3] <= 0 || v[5] <= 0 || v[2] < 0 || v[4] < 0 ||
		v[6] < PG_INT64_MIN || v[6] > PG_INT64_MAX ||
		v[7] < 0 || v[7] > PG_UINT64_MAX)
		return false;
	out->allowed = r->element[0]->integer != 0;
	out->remaining = clamp64(v[0]);
	out->reset_at = clamp64(v[1]);
	out->retry_after = rl_seconds(v[2], v[3]);
	out->delay = rl_seconds(v[4], v[5]);
	*time = (int64) v[6];
	*incarnation = (uint64) v[7];
	return true;
}
