/* worker/plan/jobplan.h - the plan of a job before it runs (`vitjob-worker
 * plan`): the memory one rank needs against the device's, the time a step
 * takes, and what to change when it does not fit.
 *
 * Owns: the target (the device and its rates), the plan's record, and
 * jobplan_make: the target's checks, the device's memory and the fit, and
 * the suggestions (each change applied as --set would apply it, then
 * planned again); an elastic job's plan at each size it may shrink to
 * (jobplan_elastic_make). The memory comes from plan_memory.h, the time from
 * plan_time.h; the rates a target may carry from the probes
 * (plan_probe.h); the table and the JSON are plan_output.h's.
 * Must not: allocate the backend's memory for the run, train, or read
 * the environment the operator sets (main.c passes replicas and local
 * ranks); tell the strategies apart (dp.h's table does).
 */
#ifndef VITJOB_JOBPLAN_H
#define VITJOB_JOBPLAN_H

#include <stddef.h>

#include "config.h"
#include "exitcode.h"
#include "plan_memory.h"

/* The device a plan is for and its rates. */
typedef struct {
    int replicas, local_ranks; /* world = replicas x local_ranks */
    int gpu;                   /* 1: CUDA */
    const char *gpu_kind;      /* "h100", "h200", "a100", "v100" (NULL: h100) */
    double device_bytes;       /* memory per rank: > 0 given (--gpu-memory); 0: the
                                * table's (GPU) or what this process may take divided
                                * by the local ranks (CPU) */
    double flops_per_s;        /* per rank; 0: the table's per-op rates (GPU) or the
                                * probe's (CPU); given, it replaces the GPU's per-op
                                * model with FLOPs / rate */
    double bus_bytes_per_s;    /* collectives' bus bandwidth; 0: the table's or probe's */
    int threads;               /* CPU: training threads per rank (0: as the run picks) */
    double optim_s_per_param;  /* the optimizer step (zeroing, clipping's norm, AdamW) per
                                * parameter it updates, in seconds; 0: the H100's measured
                                * rate (GPU), not counted (CPU without the probe) */
    double call_s;             /* seconds per collective call: for none and grad-op an
                                * all-reduce's latency, without its bytes; for full
                                * what its calls take, bytes included, beyond the
                                * compute they overlap, per call (jobplan_probe_schedule's
                                * step / its calls), the calls' term then being what
                                * they take beyond the bytes' time; 0: not counted */
} jobplan_target;

/* One suggested change and what it leads to. */
typedef struct {
    char what[160];            /* e.g. "training.sharding=full" */
    size_t total_bytes;
    int fits;
} jobplan_change;

#define JOBPLAN_MAX_CHANGES 8

typedef struct {
    jobplan_mem mem;
    double device_bytes;       /* per rank */
    char device[96];           /* e.g. "cuda h100 (80 GB, bench/NOTES.md rate)" */
    int fits;
    /* time, per optimizer step */
    int world, micro, accum, global_batch;
    double flops_per_step;     /* the whole global batch's */
    double flops_per_s, bus_bytes_per_s;
    char rate_source[96], bus_source[96];
    double compute_s, comm_bytes, comm_s, step_s, images_per_s;
    /* comm_s = comm_bw_s (comm_bytes at the bus bandwidth) + comm_lat_s
     * (comm_calls per step, each an all-reduce's call_s, or half of it for
     * a reduce-scatter or an all-gather: a ring's W-1 steps of 2 (W-1)) */
    double comm_bw_s, comm_calls, call_s, comm_lat_s;
    /* the strategy's calls run on its own communication thread (full's:
     * dp_cost.own_schedule), overlapping the compute */
    int comm_thread;
    /* the optimizer step: optim_params (this rank's: all of them, or its
     * shard) x optim_s_per_param */
    size_t optim_params;
    double optim_s_per_param, optim_s;
    char optim_source[96], call_source[160];
    /* on a GPU at the table's rates: compute_s's parts per step (matmuls,
     * attention, the memory-bound kernels, launches, the batch's upload,
     * the host's work); 0 otherwise */
    double gpu_matmul_s, gpu_attention_s, gpu_memory_s, gpu_launch_s, gpu_upload_s, gpu_host_s;
    /* when it does not fit: each change on top of the ones before, in
     * order; suggestion: the first that fits, or -1 */
    jobplan_change changes[JOBPLAN_MAX_CHANGES];
    int n_changes, suggestion;
} jobplan;

/* One world size an elastic job (spec.elastic, issue 44) may be shrunk to:
 * the plan at that many replicas, globalBatchSize kept. */
typedef struct {
    int replicas, world, micro, accum;
    size_t total_bytes;        /* the plan's peak per rank (jobplan_mem.total_bytes) */
    int fits;                  /* as jobplan.fits */
    double images_per_s;
} jobplan_size;

#define JOBPLAN_MAX_SIZES 64

typedef struct {
    int min_replicas, replicas;
    /* the allowed sizes in [min_replicas, replicas - 1] (the batch divides
     * into whole micro-batches per rank, as config_finish checks at that
     * world size), smallest first, at most JOBPLAN_MAX_SIZES of them */
    jobplan_size sizes[JOBPLAN_MAX_SIZES];
    int n_sizes;
    int not_evaluated;         /* allowed sizes beyond the first JOBPLAN_MAX_SIZES */
    /* the fewest replicas from which every evaluated size up to replicas
     * fits (replicas itself when the smallest size below does not, 0 when
     * not even the replicas plan fits) */
    int smallest_fitting;
} jobplan_elastic;

/* The plan of cfg on t. VJ_ERR_CONFIG (a world size the batch does not
 * divide, an unknown GPU kind) or VJ_ERR_OUT_OF_MEMORY with a message. */
vj_err jobplan_make(const vit_job_config *cfg, const jobplan_target *t, jobplan *out,
                    char *err, size_t errlen);

/* An elastic job's sizes below at's: unfinished is the job's config before
 * config_finish (a default that follows the world size, microBatchSize's,
 * follows it at each size, as in the run), t the target of the plan at
 * replicas, at that plan. Each allowed size is planned as jobplan_make
 * plans it, with t's rates. VJ_ERR_CONFIG when min_replicas is not in
 * [1, t->replicas]. */
vj_err jobplan_elastic_make(const vit_job_config *unfinished, const jobplan_target *t,
                            const jobplan *at, int min_replicas, jobplan_elastic *out, char *err,
                            size_t errlen);

#endif
