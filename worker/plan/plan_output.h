/* worker/plan/plan_output.h - the plan as `vitjob-worker plan` prints it.
 *
 * Owns: the human table (memory by part, the time's terms, the changes and
 * the suggestion) and the JSON, whose keys are stable: the operator's
 * admission reads them (operator/planner.h).
 * Must not: compute anything of the plan (jobplan.h).
 */
#ifndef VITJOB_PLAN_OUTPUT_H
#define VITJOB_PLAN_OUTPUT_H

#include <stdio.h>

#include "jobplan.h"

/* The human table, and the JSON (stable keys; malloc'd, the caller frees;
 * NULL out of memory). */
void jobplan_print(FILE *to, const jobplan *p);
char *jobplan_json(const jobplan *p);


#endif
