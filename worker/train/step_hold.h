/* worker/train/step_hold.h - tests only: optimizer steps the training loop
 * waits before while a file exists, so that a test holds a job at a step it
 * chose instead of racing its training (tests/cluster/test_elastic.py: a
 * job that must still be running when a node returns).
 *
 * Owns: VITJOB_TEST_HOLD="STEP:PATH[,STEP:PATH...]" (1-based optimizer
 * steps, as the log prints them; PATH absolute, without a comma), parsed
 * once at the start, a malformed entry refused by name; the wait: before
 * step STEP runs, while PATH exists, polled every 20 ms, between the lines
 * event=test_hold and event=test_released. Every rank given the variable
 * waits at the same step, so that a gang holds together (its heartbeat,
 * another thread, goes on).
 * Must not: change what any step computes or in which order; wait once the
 * stop flag is set (a SIGTERM while held is honoured as it is without the
 * hold: the step runs and the loop stops as it would have); cost more than
 * one getenv when the variable is unset. Never set it in a job.
 */
#ifndef VITJOB_STEP_HOLD_H
#define VITJOB_STEP_HOLD_H

#include <signal.h>
#include <stddef.h>

#include "exitcode.h"

#define STEP_HOLD_ENV "VITJOB_TEST_HOLD"

typedef struct step_hold step_hold;

/* The holds of spec into *out (the caller frees it with step_hold_free);
 * spec NULL or "": *out = NULL and VJ_OK. A malformed entry (no step >= 1,
 * no ':', a relative or empty path): VJ_ERR_ENVIRONMENT, err naming
 * STEP_HOLD_ENV and the entry, *out NULL. */
vj_err step_hold_parse(step_hold **out, const char *spec, char *err, size_t errlen);
/* Whether h (NULL: none) holds step (1-based) now: a hold of that step
 * whose file exists. */
int step_hold_due(const step_hold *h, long step);
/* Waits before step (1-based) while a hold of that step's file exists and
 * stop (NULL: never) is 0, calling tick(ctx) (NULL: none) at each poll, so
 * that the caller goes on reporting what completes meanwhile (a checkpoint
 * stored in the background); logs event=test_hold once and
 * event=test_released (with waited_s and why: file_removed or stop) when it
 * waited. */
void step_hold_wait(const step_hold *h, long step, int rank, volatile sig_atomic_t *stop,
                    void (*tick)(void *ctx), void *ctx);
void step_hold_free(step_hold *h);

#endif
