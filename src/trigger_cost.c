/*-------------------------------------------------------------------------
 *
 * trigger_cost.c
 *		A quota trigger's cost expression (rl_enforce's "cost=" argument):
 *		recognised, checked to be one expression, prepared once as a kept
 *		plan over the row, and computed per row.
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

#include "trigger_int.h"

/*
 * If the argument has the cost form ("cost", "=", any case, blanks around
 * them), its expression without the blanks around it, in the current
 * memory context; otherwise NULL.
 */
char *
rl_cost_argument(const char *arg)
{
	const char *p = arg;
	char	   *expr;
	int			len;

	while (scanner_isspace(*p))
		p++;
	if (pg_strncasecmp(p, "cost", 4) != 0)
		return NULL;
	p += 4;
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
 * Refuse a cost expression that is not one expression (a list, an alias,
 * "*", or clauses such as FROM): parsed alone, it must be a SELECT of one
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
				 errmsg("cost expression \"%s\" of trigger \"%s\" on table \"%s\" is not a single expression",
						expr, call->tg->tgname,
						RelationGetRelationName(call->rel)),
				 errhint("Write one expression over the row's columns, without a list, an alias or clauses such as FROM.")));
}

/*
 * The kept plan computing a cost expression over a row of the trigger's
 * table.
 */
SPIPlanPtr
rl_cost_prepare(RlTriggerCall *call, const char *expr)
{
	Oid			argtype = RelationGetDescr(call->rel)->tdtypeid;
	char	   *query;
	SPIPlanPtr	plan;

	call->cost_expr = expr;
	cost_check_syntax(call, expr);

	call->phase = COST_PREPARE;
	query = psprintf(COST_QUERY_PREFIX "%s" COST_QUERY_SUFFIX, expr);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(query, 1, &argtype);
	if (plan == NULL)
		elog(ERROR, "could not prepare the cost expression: %s",
			 SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	SPI_finish();
	pfree(query);
	call->phase = COST_NONE;
	return plan;
}

/* The value for the row of the cost expression expr, prepared as plan. */
int64
rl_row_cost(RlTriggerCall *call, const char *expr, SPIPlanPtr plan,
			HeapTuple tuple)
{
	Datum		row = heap_copy_tuple_as_datum(tuple,
											   RelationGetDescr(call->rel));
	Datum		value;
	bool		isnull;

	call->phase = COST_RUN;
	call->cost_expr = expr;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_plan(plan, &row, NULL, true, 1) !=
		SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not evaluate the cost expression");
	value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
						  &isnull);
	SPI_finish();
	call->phase = COST_NONE;
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("cost expression \"%s\" of trigger \"%s\" on table \"%s\" is null for this row",
						expr, call->tg->tgname,
						RelationGetRelationName(call->rel)),
				 errhint("Use coalesce() in the expression to give such rows a cost.")));
	return DatumGetInt64(value);
}
