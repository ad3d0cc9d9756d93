/* worker/plan/plan_probe.h - the planner's measurements on this machine's
 * CPUs (`vitjob-worker plan --measure`): the rates a target carries
 * (jobplan.h) in place of the ones nobody measured.
 *
 * Owns: the step probe (the model's forward and backward and its optimizer
 * step on the CPU backend, in as many forked copies at once as there are
 * local ranks), the collectives on loopback (forked ranks meeting at a
 * rendezvous on 127.0.0.1: the bus bandwidth and the seconds per call),
 * and a strategy's own schedule run on loopback (dp_probe_schedule).
 * Must not: plan (jobplan.h), print, or run OpenMP threads before it forks
 * (the callers fork first).
 */
#ifndef VITJOB_PLAN_PROBE_H
#define VITJOB_PLAN_PROBE_H

#include <stddef.h>

#include "config.h"

/* CPU probes (--measure). The step probe: `copies` processes at once
 * (the ranks that share this machine's cores; 1: this process only), each
 * with `threads` threads, each building this model at
 * training.microBatchSize (its precision and checkpointing) on the CPU
 * backend and timing, after one untimed step, its forward and backward of
 * one micro-batch for about `seconds`, then its optimizer step (zeroing the
 * gradients, clipping's norm, AdamW over every parameter) for about a
 * quarter of that. Fork it before this process has run OpenMP threads. */
typedef struct {
    double flops_per_s;       /* model FLOPs of the forward and backward / their time,
                               * the mean over the copies */
    double optim_s_per_param; /* the optimizer step's time / the parameters, the mean */
    int copies;               /* how many ran at once */
} jobplan_step_probe;
int jobplan_probe_step(const vit_job_config *cfg, int threads, int copies, double seconds,
                       jobplan_step_probe *out, char *err, size_t errlen);
/* The forward and backward's rate alone, in this process (copies 1). */
int jobplan_probe_compute(const vit_job_config *cfg, int threads, double seconds,
                          double *flops_per_s, char *err, size_t errlen);
/* The collectives on loopback through the CPU collectives: `ranks` (2 to
 * 64) processes (this one and ranks - 1 forked), an all-reduce of `bytes`
 * timed for the bus bandwidth (bytes each rank moves / seconds; the median
 * of 5), and up to 400 of 64 floats for the seconds per call (the median
 * of 5 batches' means; call_s may be NULL), each call after gap_s of
 * spinning on every rank: the run's compute between two of its calls,
 * which keeps the cores busy when the collectives' threads must wake (on a
 * loaded machine that wait is most of a small call's time). 0, or -1 with
 * a message. */
int jobplan_probe_collectives(size_t bytes, int ranks, double gap_s, double *bus_bytes_per_s,
                              double *call_s, char *err, size_t errlen);
/* The strategy's own schedule of collectives, where it has one (full:
 * dp_has_schedule), as the job makes them: `ranks` (2 to 64) processes on
 * loopback, each running dp_probe_schedule (the strategy's buffers for this
 * model, its collectives asked as the model asks them over a step of the
 * job's micro-batches, its accumulation at cfg->world_size), each unit's
 * compute a spin of its FLOPs at flops_per_s (the step probe's rate).
 * *exposed_s: the seconds per step beyond the spins (the collectives'
 * bytes and latency the compute did not hide; the median step in about
 * `seconds`). 1, 0 when the strategy has no schedule of its own (nothing
 * run), or -1 with a message. */
int jobplan_probe_schedule(const vit_job_config *cfg, int ranks, double flops_per_s,
                           double seconds, double *exposed_s, char *err, size_t errlen);
/* 2 ranks, the bandwidth only. */
int jobplan_probe_loopback(size_t bytes, double *bus_bytes_per_s, char *err, size_t errlen);

#endif
