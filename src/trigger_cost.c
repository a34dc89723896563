/*-------------------------------------------------------------------------
 *
 * trigger_cost.c
 *		A quota trigger's expressions over the row (rl_enforce's "cost="
 *		and "priority=" arguments): recognised, checked to be one
 *		expression, prepared once as a kept plan over the row, and computed
 *		per row.
 *
 * No shared state; the plans are kept by the trigger's info (trigger.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "parser/scansup.h"
#include "utils/rel.h"

#include "shed.h"
#include "trigger_int.h"

/* each expression's name (its argument's form), type, what its absence means */
static const struct
{
	const char *name;
	const char *type;
	const char *absent;
}			row_exprs[RL_NUM_EXPRS] =
{
	[RL_EXPR_COST] = {"cost", "bigint", "to use the policy's cost"},
	[RL_EXPR_PRIORITY] = {"priority", "text", "for rows without a priority"},
};

/* An expression's name, as its argument spells it ("cost", "priority"). */
const char *
rl_row_expr_name(RlRowExpr which)
{
	return row_exprs[which].name;
}

/* What leaving an expression out means, for a hint ("to use ..."). */
const char *
rl_row_expr_default(RlRowExpr which)
{
	return row_exprs[which].absent;
}

/*
 * If the argument has an expression's form (its name, "=", any case,
 * blanks around them: "cost=n", "Priority = p"), the expression without
 * the blanks around it, in the current memory context, and which one in
 * *which; otherwise NULL.
 */
char *
rl_cost_argument(const char *arg, RlRowExpr *which)
{
	const char *p = arg;
	char	   *expr;
	int			len;
	int			i;

	while (scanner_isspace(*p))
		p++;
	for (i = 0; i < RL_NUM_EXPRS; i++)
		if (pg_strncasecmp(p, row_exprs[i].name,
						   strlen(row_exprs[i].name)) == 0)
			break;
	if (i == RL_NUM_EXPRS)
		return NULL;
	*which = (RlRowExpr) i;
	p += strlen(row_exprs[i].name);
	while (scanner_isspace(*p))
		p++;
	if (*p != '=')
		return NULL;
	p++;
	while (scanner_isspace(*p))
		p++;
	expr = pstrdup(p);
	len = strlen(expr);
	while (len > 0 && scanner_isspace(expr[len - 1]))
		expr[--len] = '\0';
	return expr;
}

/*
 * Refuse an expression that is not one expression (a list, an alias, "*",
 * or clauses such as FROM): parsed alone, it must be a SELECT of one
 * target and nothing else.
 */
static void
cost_check_syntax(RlTriggerCall *call, const char *expr)
{
	List	   *stmts;
	SelectStmt *sel;
	SelectStmt *bare;
	ResTarget  *target = NULL;

	call->phase = COST_PARSE;
	stmts = raw_parser(expr, RAW_PARSE_PLPGSQL_EXPR);
	sel = (SelectStmt *) linitial_node(RawStmt, stmts)->stmt;
	bare = copyObject(sel);
	bare->targetList = NIL;
	if (list_length(sel->targetList) == 1)
		target = linitial_node(ResTarget, sel->targetList);
	if (target == NULL || target->name != NULL ||
		(IsA(target->val, ColumnRef) &&
		 IsA(llast(castNode(ColumnRef, target->val)->fields), A_Star)) ||
		!equal(bare, makeNode(SelectStmt)))
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("%s expression \"%s\" of trigger \"%s\" on table \"%s\" is not a single expression",
						row_exprs[call->expr].name, expr, call->tg->tgname,
						RelationGetRelationName(call->rel)),
				 errhint("Write one expression over the row's columns, without a list, an alias or clauses such as FROM.")));
}

/*
 * The kept plan computing an expression over a row of the trigger's table,
 * cast to its type.  The newline ends a "--" comment at its end.
 */
SPIPlanPtr
rl_cost_prepare(RlTriggerCall *call, RlRowExpr which, const char *expr)
{
	Oid			argtype = RelationGetDescr(call->rel)->tdtypeid;
	char	   *query;
	SPIPlanPtr	plan;

	call->expr = which;
	call->cost_expr = expr;
	cost_check_syntax(call, expr);

	call->phase = COST_PREPARE;
	query = psprintf(COST_QUERY_PREFIX "%s\n)::%s FROM (SELECT ($1).*) AS row",
					 expr, row_exprs[which].type);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(query, 1, &argtype);
	if (plan == NULL)
		elog(ERROR, "could not prepare the %s expression: %s",
			 row_exprs[which].name, SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	SPI_finish();
	pfree(query);
	call->phase = COST_NONE;
	return plan;
}

/*
 * The value for the row of expression expr (which one: which), prepared as
 * plan: a cost, or a priority (RL_PRIORITY_*, checked while the
 * expression's error context is in force), into *value.  Returns false,
 * *value unset, if it is null.
 */
static bool
row_value(RlTriggerCall *call, RlRowExpr which, const char *expr,
		  SPIPlanPtr plan, HeapTuple tuple, int64 *value)
{
	Datum		row = heap_copy_tuple_as_datum(tuple,
											   RelationGetDescr(call->rel));
	Datum		datum;
	bool		isnull;

	call->phase = COST_RUN;
	call->expr = which;
	call->cost_expr = expr;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_plan(plan, &row, NULL, true, 1) !=
		SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not evaluate the %s expression",
			 row_exprs[which].name);
	datum = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
						  &isnull);
	if (!isnull)
		*value = which == RL_EXPR_COST ? DatumGetInt64(datum) :
			rl_shed_priority(DatumGetTextPP(datum));
	SPI_finish();
	call->phase = COST_NONE;
	return !isnull;
}

/* The row's cost by the cost expression expr, prepared as plan. */
int64
rl_row_cost(RlTriggerCall *call, const char *expr, SPIPlanPtr plan,
			HeapTuple tuple)
{
	int64		value = 0;

	if (!row_value(call, RL_EXPR_COST, expr, plan, tuple, &value))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("cost expression \"%s\" of trigger \"%s\" on table \"%s\" is null for this row",
						expr, call->tg->tgname,
						RelationGetRelationName(call->rel)),
				 errhint("Use coalesce() in the expression to give such rows a cost.")));
	return value;
}

/*
 * The row's priority (RL_PRIORITY_*) by the priority expression expr,
 * prepared as plan: none for a null.
 */
uint8
rl_row_priority(RlTriggerCall *call, const char *expr, SPIPlanPtr plan,
				HeapTuple tuple)
{
	int64		value = RL_PRIORITY_NONE;

	(void) row_value(call, RL_EXPR_PRIORITY, expr, plan, tuple, &value);
	return (uint8) value;
}
