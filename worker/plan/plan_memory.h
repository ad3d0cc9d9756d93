/* worker/plan/plan_memory.h - the memory one rank of a job needs: the
 * planner's (`vitjob-worker plan`) and the run's memory check's (train.c)
 * one sum.
 *
 * Owns: adding up one rank's memory from the code that sizes the real
 * allocations (dp_plan: the strategy's plan and memory, the model's
 * model_memory_plan under the options it fills; the loader's queue,
 * ld_queue_bytes; the CUDA attention scratch's layout,
 * kernels/attention_scratch.h; the CUDA backend's own buffers,
 * kernels/cuda_buffers.h) and the allowances nothing counts (the CUDA
 * context, Fashion-MNIST in memory); the op tables of sizes that stand in
 * for a GPU backend when planning, and the CPU backend's table for a
 * precision.
 * Must not: allocate the backend's memory, time anything, or read the
 * environment the operator sets. The one header of plan/ that train/
 * includes (train.c's memory check): it must not pull in the rest of the
 * planner.
 */
#ifndef VITJOB_PLAN_MEMORY_H
#define VITJOB_PLAN_MEMORY_H

#include <stddef.h>

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

/* The CPU backend's table for training.precision (ops_cpu, ops_cpu_bf16,
 * ops_cpu_fp16). Borrowed, static. */
const vit_ops *jobplan_cpu_ops(precision_mode p);

#endif
