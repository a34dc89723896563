/*-------------------------------------------------------------------------
 *
 * trigger_int.h
 *		What the quota trigger's files share (trigger.c, trigger_cost.c):
 *		one rl_enforce call as its error reports see it, and the cost
 *		expression's functions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_TRIGGER_INT_H
#define RL_TRIGGER_INT_H

#include "access/htup.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "utils/relcache.h"

/*
 * The query a cost expression runs in: the row is $1, its columns are in
 * scope by name.  The expression has been parsed alone first, so it is one
 * expression; the newline ends a "--" comment at its end.
 */
#define COST_QUERY_PREFIX	"SELECT ("
#define COST_QUERY_SUFFIX	"\n)::bigint FROM (SELECT ($1).*) AS row"

/* Where a call is in the cost expression, for its error reports */
typedef enum RlCostPhase
{
	COST_NONE,					/* elsewhere */
	COST_PARSE,					/* parsing the expression alone */
	COST_PREPARE,				/* preparing the query around it */
	COST_RUN					/* computing a row's cost */
} RlCostPhase;

/* One rl_enforce call, as its error context callback sees it */
typedef struct RlTriggerCall
{
	Trigger    *tg;
	Relation	rel;
	RlCostPhase phase;
	const char *cost_expr;		/* while phase is not COST_NONE */
} RlTriggerCall;

extern char *rl_cost_argument(const char *arg);
extern SPIPlanPtr rl_cost_prepare(RlTriggerCall *call, const char *expr);
extern int64 rl_row_cost(RlTriggerCall *call, const char *expr,
						 SPIPlanPtr plan, HeapTuple tuple);

#endif							/* RL_TRIGGER_INT_H */
