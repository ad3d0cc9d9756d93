/* worker/train.h - the training loop of one worker.
 *
 * Owns: the loop (micro-batches with gradient accumulation, optimizer steps,
 * progress lines, evaluation, the final summary and export).
 * Must not: parse configs or command lines (main.c), or do math itself.
 */
#ifndef VITJOB_TRAIN_H
#define VITJOB_TRAIN_H

#include <signal.h>
#include <stddef.h>

#include "config.h"
#include "ops.h"

typedef struct {
    const char *metrics_path; /* NULL, or a JSON-lines file of per-step metrics */
    volatile sig_atomic_t *stop_flag; /* set by a signal handler; checked between steps
                                         and between evaluation batches */
} train_options;

/* The op table for training.device and training.precision: cpu is the CPU
 * backend; cuda the GPU's, or VITJOB_EXIT_CONFIG with one line saying why
 * none is usable; auto the GPU's when one is usable, else the CPU's (logged).
 * *out is borrowed (static lifetime). */
int train_pick_backend(const vit_ops **out, const training_config *tc, char *err,
                       size_t errlen);

/* Trains as cfg says (already validated) on the backend train_pick_backend
 * picks. Prints progress to stderr and a one-line JSON summary to stdout.
 * Returns a VITJOB_EXIT_* code; on failure the message is in err. */
int train_run(const vit_job_config *cfg, const train_options *opt, char *err, size_t errlen);


#endif
