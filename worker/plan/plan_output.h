/* worker/plan/plan_output.h - the plan as `vitjob-worker plan` prints it.
 *
 * Owns: the human table (memory by part, the time's terms, the changes and
 * the suggestion, an elastic job's sizes) and the JSON, whose keys are stable: the operator's
 * admission reads them (operator/planner.h).
 * Must not: compute anything of the plan (jobplan.h).
 */
#ifndef VITJOB_PLAN_OUTPUT_H
#define VITJOB_PLAN_OUTPUT_H

#include <stdio.h>

#include "jobplan.h"

/* The human table, and the JSON (stable keys; malloc'd, the caller frees;
 * NULL out of memory). e: an elastic job's sizes below p's (a line each, a
 * warning when the smallest does not fit; the JSON's "elastic"), or NULL. */
void jobplan_print(FILE *to, const jobplan *p, const jobplan_elastic *e);
char *jobplan_json(const jobplan *p, const jobplan_elastic *e);


#endif
