/* worker/train/train.h - the training loop of one worker.
 *
 * Owns: the loop (micro-batches with gradient accumulation, optimizer steps,
 * progress lines, evaluation, the final summary and export).
 * Must not: parse configs or command lines (main.c), or do math itself.
 */
#ifndef VITJOB_TRAIN_H
#define VITJOB_TRAIN_H

#include <signal.h>
#include <stddef.h>

#include "comm.h"
#include "config.h"
#include "exitcode.h"
#include "heartbeat.h"
#include "ops.h"

typedef struct {
    const char *metrics_path; /* NULL, or a JSON-lines file of per-step metrics */
    volatile sig_atomic_t *stop_flag; /* set by a signal handler; checked between
                                         micro-batches, between blocks and between
                                         evaluation batches */
    int rank, world;   /* this process's global rank and the world size (0, 1 alone) */
    comm *comm;        /* the ranks' communicator (borrowed); NULL alone */
    rdzv *rdzv;        /* the rendezvous store (borrowed; checkpoints and resume agree
                          through it); NULL alone */
    const hb *hb;      /* the heartbeat (borrowed); NULL alone: no checkpoint is saved and
                          no status written while hb_ok says no */
    const vit_ops *ops; /* the backend (train_pick_backend's; comm's buffers live in its
                           memory); NULL: train_run picks it */
    long generation;    /* VITJOB_RESTART (0 alone): checkpoints are fenced by it */
} train_options;

/* The op table for training.device and training.precision: cpu is the CPU
 * backend; cuda the GPU's, or VJ_ERR_NO_DEVICE with one line saying why
 * none is usable; auto the GPU's when one is usable, else the CPU's (logged).
 * *out is borrowed (static lifetime). */
vj_err train_pick_backend(const vit_ops **out, const training_config *tc, char *err,
                          size_t errlen);

/* Trains as cfg says (already validated, output paths already checked) on
 * the backend train_pick_backend picks, with the compute threads
 * training.threads sets or the CPU quota allows. Prints progress to stderr
 * and a one-line JSON summary to stdout. Returns VJ_OK or an error class
 * (api/exitcode.h) with the message in err; a stop request gives
 * VJ_ERR_STOPPED within one block's time. */
vj_err train_run(const vit_job_config *cfg, const train_options *opt, char *err, size_t errlen);


#endif
