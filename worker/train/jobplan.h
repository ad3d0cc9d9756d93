/* worker/train/jobplan.h - the plan of a job before it runs (`vitjob-worker
 * plan`): the memory one rank needs, the time a step takes, and what to
 * change when it does not fit.
 *
 * Owns: adding up one rank's memory from the code that sizes the real
 * allocations (dp_plan: the strategy's plan and memory, the model's
 * model_memory_plan under the options it fills; the loader's queue,
 * ld_queue_bytes; the CUDA attention scratch's layout,
 * kernels/attention_scratch.h; the CUDA backend's own buffers,
 * kernels/cuda_buffers.h), which the run's memory check
 * (train.c) calls too; the model's FLOPs; the rate tables for GPUs and the
 * CPU probes (the model's forward and backward of one micro-batch on the
 * backend, a loopback all-reduce through the collectives); the suggestions; the table
 * and the JSON.
 * Must not: allocate the backend's memory for the run, train, or read
 * the environment the operator sets (main.c passes replicas and local
 * ranks).
 */
#ifndef VITJOB_JOBPLAN_H
#define VITJOB_JOBPLAN_H

#include <stddef.h>
#include <stdio.h>

#include "config.h"
#include "exitcode.h"
#include "ops.h"

/* One rank's memory, in bytes. The backend parts add up to backend_bytes,
 * what the run's backend allocates (its measured peak:
 * ops_cpu_peak_bytes / ops_cuda_peak_bytes, logged as event=memory). */
typedef struct {
    size_t n_params;
    sharding_mode strategy;  /* the strategy that runs (dp_plan's: none for one process) */
    const char *sharding;    /* its name (dp_mode_name) */
    int world, rank;
    /* the backend's (device memory on a GPU) */
    size_t param_bytes;      /* fp32 parameters this rank holds: all (none, grad-op) or
                              * its shard (full), padded */
    size_t grad_bytes;       /* their gradients, likewise */
    size_t optim_bytes;      /* AdamW's m and v of this rank's spans */
    size_t ema_bytes;        /* training.ema of those spans (0 without) */
    size_t lowp_bytes;       /* bf16/fp16-mixed: the 16-bit copy of the matmul weights
                              * (full: one unit's) */
    size_t unit_bytes;       /* full: the slots of gathered units (two of parameters,
                              * two of gradients, the largest unit each) */
    size_t activation_bytes; /* kept for backward, at the micro-batch, as configured */
    size_t activation_ckpt_bytes, activation_nockpt_bytes; /* with and without
                              * training.activationCheckpointing */
    size_t workspace_bytes;  /* the backward's scratch and the attention's */
    size_t collective_bytes; /* the sums' staging; grad-op's packing with a freeze
                              * (bound) */
    size_t gpu_buffer_bytes; /* GPU: cuBLASLt's workspace and the shared scratch
                              * (kernels/cuda_buffers.h); 0 on the CPU */
    size_t backend_bytes;    /* the sum of the above */
    /* the host's */
    size_t batch_bytes;      /* the micro-batch's images and labels, and the staging copy
                              * of the parameters at init (the memory check's) */
    size_t loader_bytes;     /* the loader's queue of decoded samples; Fashion-MNIST: the
                              * data set in memory */
    size_t reserve_bytes;    /* GPU: the CUDA context and NCCL's buffers (a stated
                              * allowance, not counted by the backend); 0 on the CPU */
    size_t check_bytes;      /* what the run's memory check compares with the memory
                              * available: backend + batch (the data is loaded by then) */
    size_t total_bytes;      /* everything one rank needs from the device's memory:
                              * on the CPU backend + batch + loader; on a GPU backend +
                              * reserve (the host parts are listed, not counted) */
} jobplan_mem;

/* One rank's memory for cfg (its model, batch, precision, sharding,
 * checkpointing, EMA, freeze, data) on the backend ops, as rank `rank` of
 * `world` (cfg->world_size is not read); honour_mode as dp_plan. The run's
 * memory check and the planner both call it. VJ_ERR_OUT_OF_MEMORY or
 * VJ_ERR_CONFIG with a message. */
vj_err jobplan_memory(const vit_job_config *cfg, const vit_ops *ops, int world, int rank,
                      int honour_mode, int threads, jobplan_mem *out, char *err, size_t errlen);

/* A table of memory sizes only (no ops run), standing in for a GPU backend
 * when planning: the CUDA backend's floatX width and attention scratch for
 * training.precision. Borrowed, static. */
const vit_ops *jobplan_gpu_ops(precision_mode p);

/* Model FLOPs of one image's training step: 3 x the forward's matmul and
 * attention FLOPs (bench/NOTES.md's count), plus the blocks' forward again
 * with activation checkpointing (ckpt 1). */
double jobplan_flops_per_image(const model_config *mc, int ckpt);

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

/* The plan of cfg on t. VJ_ERR_CONFIG (a world size the batch does not
 * divide, an unknown GPU kind) or VJ_ERR_OUT_OF_MEMORY with a message. */
vj_err jobplan_make(const vit_job_config *cfg, const jobplan_target *t, jobplan *out,
                    char *err, size_t errlen);

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

/* The human table, and the JSON (stable keys; malloc'd, the caller frees;
 * NULL out of memory). */
void jobplan_print(FILE *to, const jobplan *p);
char *jobplan_json(const jobplan *p);

#endif
