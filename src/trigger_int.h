/*-------------------------------------------------------------------------
 *
 * trigger_int.h
 *		What the quota trigger's files share (trigger.c, trigger_cost.c):
 *		one rl_enforce call as its error reports see it, and the functions
 *		of its expressions over the row (cost, priority).
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
 * The query an expression over the row runs in: the row is $1, its
 * columns are in scope by name (trigger_cost.c adds the rest, the cast to
 * the expression's type first).  The expression has been parsed alone
 * first, so it is one expression.
 */
#define COST_QUERY_PREFIX	"SELECT ("

/* The expressions over the row a quota trigger may have */
typedef enum RlRowExpr
{
	RL_EXPR_COST,				/* "cost=": the row's cost (bigint) */
	RL_EXPR_PRIORITY,			/* "priority=": its priority (text, shed.c) */
	RL_NUM_EXPRS
} RlRowExpr;

/* Where a call is in an expression, for its error reports */
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
	RlRowExpr	expr;			/* while phase is not COST_NONE: which */
	const char *cost_expr;		/* and its text */
} RlTriggerCall;

extern const char *rl_row_expr_name(RlRowExpr which);
extern const char *rl_row_expr_default(RlRowExpr which);
extern char *rl_cost_argument(const char *arg, RlRowExpr *which);
extern SPIPlanPtr rl_cost_prepare(RlTriggerCall *call, RlRowExpr which,
								  const char *expr);
extern int64 rl_row_cost(RlTriggerCall *call, const char *expr,
						 SPIPlanPtr plan, HeapTuple tuple);
extern uint8 rl_row_priority(RlTriggerCall *call, const char *expr,
							 SPIPlanPtr plan, HeapTuple tuple);

#endif							/* RL_TRIGGER_INT_H */
