/*-------------------------------------------------------------------------
 *
 * redis_reply.c
 *		Replies from Redis read within bounds, whatever answers at
 *		ratelimit.redis_nodes.
 *
 * Nothing Redis sends is trusted to be small.  hiredis 0.14's reader has
 * no limits of its own: it allocates what a reply's headers announce (an
 * array of 2^31 elements is a 16 GB calloc) and buffers a bulk string
 * until all of it has arrived; hiredis 1.x bounds arrays (maxelements) but
 * not strings.  Every context reads through reply-object functions of ours
 * (rl_redis_reply_bound) that count what a reply holds before hiredis
 * allocates it, and after each read the item hiredis waits for is checked
 * from its header (rl_redis_reply_within_bounds: a bulk string's length is
 * refused before its data arrives).  A reply beyond the bounds below stops
 * the reader with an error, and rl_redis_reply_refused says why.
 *
 * No shared state: the counts are this backend's, for the one reply it
 * reads at a time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "redis_int.h"

/*
 * Bounds on one reply (docs/redis.md, "Failures").  The largest replies
 * ratelimit asks for are CLUSTER SLOTS (at most 16384 slot ranges of a few
 * nodes each: about 400,000 elements if every slot were its own range,
 * arrays nested 4 deep) and SCAN with COUNT 1000 (about a thousand keys of
 * at most 4.2 kB); a decision's reply is a few short strings per call.
 */
#define RL_REDIS_MAX_ELEMENTS	1000000 /* array elements, all levels */
#define RL_REDIS_MAX_DEPTH		6		/* levels of arrays, the reply's own
										 * included */
#define RL_REDIS_MAX_BULK		(1024 * 1024)	/* bytes of one bulk string */
#define RL_REDIS_MAX_STRINGS	(32 * 1024 * 1024)	/* bytes of all the
													 * strings of a reply */
#define RL_REDIS_MAX_LINE		(64 * 1024) /* bytes of a status, error or
											 * integer line, or a header */
#define RL_REDIS_MAX_HEADER		24		/* characters of a bulk string's
										 * length: a sign and 20 digits fit */

/*
 * The reader's layout, which rl_redis_reply_within_bounds looks into:
 * hiredis 0.14 keeps its tasks in an array of structs, 1.x in an array of
 * pointers, and passes array sizes as size_t.
 */
#if HIREDIS_MAJOR >= 1
#define READER_TASK_TYPE(r)		((r)->task[(r)->ridx]->type)
typedef size_t RlArraySize;
#elif HIREDIS_MINOR >= 14
#define READER_TASK_TYPE(r)		((r)->rstack[(r)->ridx].type)
typedef int RlArraySize;
#else
#error "ratelimit needs hiredis 0.14 or later"
#endif

/*
 * What the reply being read holds so far (one reply is read at a time in a
 * backend), counted by the reply-object functions before hiredis allocates
 * anything for it, and why it was refused.
 */
static int64 reply_elements = 0;
static int64 reply_bytes = 0;
static char reply_refused[160];

/* hiredis's own reply-object functions, which ours wrap. */
static redisReplyObjectFunctions *hiredis_functions = NULL;

/* A new exchange: no reply refused yet. */
void
rl_redis_reply_begin(void)
{
	reply_refused[0] = '\0';
}

/* Why the reply being read was refused, or NULL if it was not. */
const char *
rl_redis_reply_refused(void)
{
	return reply_refused[0] != '\0' ? reply_refused : NULL;
}

static void reply_refuse(const char *fmt,...) pg_attribute_printf(1, 2);

/*
 * Refuse the reply being read, saying why.  The reply-object function that
 * refuses then returns NULL, which hiredis takes for a failed allocation:
 * the reader stops with an error, and rl_redis_reply_refused says why.
 */
static void
reply_refuse(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(reply_refused, sizeof(reply_refused), fmt, ap);
	va_end(ap);
}

/* A reply's first object, its root, starts the counts afresh. */
static void
reply_count_start(const redisReadTask *task)
{
	if (task->parent == NULL)
	{
		reply_elements = 0;
		reply_bytes = 0;
	}
}

/*
 * createArray (and with hiredis 1.x the other aggregates: maps, sets):
 * called as soon as an array's header is parsed, before hiredis allocates
 * its elements.  Refuses arrays nested too deep and more elements in one
 * reply than RL_REDIS_MAX_ELEMENTS.
 */
static void *
bounded_array(const redisReadTask *task, RlArraySize elements)
{
	const redisReadTask *p;
	int			depth = 1;

	reply_count_start(task);
	for (p = task->parent; p != NULL; p = p->parent)
		depth++;
	if (depth > RL_REDIS_MAX_DEPTH)
	{
		reply_refuse("arrays nested more than %d deep", RL_REDIS_MAX_DEPTH);
		return NULL;
	}
	if ((int64) elements < 0 ||
		(int64) elements > RL_REDIS_MAX_ELEMENTS - reply_elements)
	{
		reply_refuse("an array of %lld elements (at most %d elements in one reply)",
					 (long long) elements, RL_REDIS_MAX_ELEMENTS);
		return NULL;
	}
	reply_elements += (int64) elements;
	return hiredis_functions->createArray(task, elements);
}

/*
 * createString (bulk strings, status and error lines): refuses more than
 * RL_REDIS_MAX_STRINGS bytes of strings in one reply.  Each one's own
 * length was bounded before it was buffered (reader_within_bounds).
 */
static void *
bounded_string(const redisReadTask *task, char *str, size_t len)
{
	reply_count_start(task);
	if (len > (size_t) (RL_REDIS_MAX_STRINGS - reply_bytes))
	{
		reply_refuse("more than %d bytes of strings in one reply",
					 RL_REDIS_MAX_STRINGS);
		return NULL;
	}
	reply_bytes += len;
	return hiredis_functions->createString(task, str, len);
}

/* createInteger: nothing to bound (its place was counted by its array). */
static void *
bounded_integer(const redisReadTask *task, long long value)
{
	reply_count_start(task);
	return hiredis_functions->createInteger(task, value);
}

/* createNil: likewise. */
static void *
bounded_nil(const redisReadTask *task)
{
	reply_count_start(task);
	return hiredis_functions->createNil(task);
}

#if HIREDIS_MAJOR >= 1
/* hiredis 1.x's RESP3 scalars (a double, a boolean): likewise. */
static void *
bounded_double(const redisReadTask *task, double value, char *str,
			   size_t len)
{
	reply_count_start(task);
	return hiredis_functions->createDouble(task, value, str, len);
}

static void *
bounded_bool(const redisReadTask *task, int value)
{
	reply_count_start(task);
	return hiredis_functions->createBool(task, value);
}
#endif

/* The reply-object functions of every context (hiredis's, bounded). */
static redisReplyObjectFunctions bounded_functions = {
	.createString = bounded_string,
	.createArray = bounded_array,
	.createInteger = bounded_integer,
#if HIREDIS_MAJOR >= 1
	.createDouble = bounded_double,
	.createBool = bounded_bool,
#endif
	.createNil = bounded_nil,
	.freeObject = freeReplyObject	/* hiredis's own freeObject */
};

/*
 * Make a new context read through bounded_functions, wrapping the
 * reader's default ones (hiredis's, the same for every context).  hiredis
 * 1.x's own bound on an array's elements (maxelements, 2^32 - 1) is left
 * as it is: ours is lower, and refuses first, saying which bound.
 */
void
rl_redis_reply_bound(redisContext *c)
{
	if (hiredis_functions == NULL)
		hiredis_functions = c->reader->fn;
	c->reader->fn = &bounded_functions;
}

/*
 * Is the item the reader waits for within bounds?  Called after each read,
 * once hiredis has parsed all it could: what is left in its buffer is the
 * beginning of one item, whose type character it has consumed.  A bulk
 * string ("$<length>\r\n<data>\r\n") is refused as soon as its length
 * shows it too long, before its data is buffered (hiredis would wait for
 * all of it); any other item (a status, error or integer line, an array's
 * header) once more of it is buffered than such a line may be long.
 */
bool
rl_redis_reply_within_bounds(const redisReader *r)
{
	const char *p;
	size_t		unread;
	size_t		i;
	int64		len = 0;

	if (r->ridx < 0 || r->buf == NULL || r->len <= r->pos)
		return true;
	p = r->buf + r->pos;
	unread = r->len - r->pos;
	if (READER_TASK_TYPE(r) != REDIS_REPLY_STRING)
	{
		if (unread <= RL_REDIS_MAX_LINE)
			return true;
		reply_refuse("a line of more than %d bytes", RL_REDIS_MAX_LINE);
		return false;
	}
	for (i = 0; i < unread && p[i] != '\r'; i++)
	{
		/* stop adding digits once too long: no overflow */
		if (p[i] >= '0' && p[i] <= '9' && len <= RL_REDIS_MAX_BULK)
			len = len * 10 + (p[i] - '0');
		if (i >= RL_REDIS_MAX_HEADER)
			break;
	}
	if (len > RL_REDIS_MAX_BULK)
	{
		reply_refuse("a bulk string of more than %d bytes",
					 RL_REDIS_MAX_BULK);
		return false;
	}
	if (i >= RL_REDIS_MAX_HEADER)
	{
		reply_refuse("a bulk string length of more than %d characters",
					 RL_REDIS_MAX_HEADER);
		return false;
	}
	return true;
}
