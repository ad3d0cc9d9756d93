/* worker/plan/plan_memory.c - see plan_memory.h. Sizes come from the code
 * that allocates (dp_plan, model_memory_plan, ld_queue_bytes,
 * att_scratch_bytes, the cuda_buffers.h sizes); what this file adds is
 * the sum and the allowances nothing counts.
 * Must not: compute a size a second way where the allocating code has one,
 * or time anything (plan_time.c, plan_probe.c). */
#include "plan_memory.h"

#include <string.h>

#include "attention_scratch.h"
#include "cuda_buffers.h"
#include "dp.h"
#include "feed.h"
#include "loader.h"
#include "model.h"
#include "sysres.h"

/* ---- a GPU backend's sizes, without the backend ---- */

static size_t att_bytes_x4(int B, int T, int D, int NH)
{
    return att_scratch_bytes(B, T, D, NH, 4);
}
static size_t att_bytes_x2(int B, int T, int D, int NH)
{
    return att_scratch_bytes(B, T, D, NH, 2);
}

/* nothing is allocated through these tables; a planned model is freed */
static void no_release(void *p) { (void)p; }

static const vit_ops gpu_fp32 = {.name = "cuda (planned)", .gpu = 1, .floatx_bytes = 4,
                                 .release = no_release, .attention_scratch_bytes = att_bytes_x4};
static const vit_ops gpu_bf16 = {.name = "cuda-bf16 (planned)", .gpu = 1, .bf16 = 1,
                                 .floatx_bytes = 2, .release = no_release,
                                 .attention_scratch_bytes = att_bytes_x2};
static const vit_ops gpu_fp16 = {.name = "cuda-fp16 (planned)", .gpu = 1, .bf16 = 1, .fp16 = 1,
                                 .floatx_bytes = 2, .release = no_release,
                                 .attention_scratch_bytes = att_bytes_x2};

const vit_ops *jobplan_gpu_ops(precision_mode p)
{
    return p == PRECISION_BF16_MIXED ? &gpu_bf16 : p == PRECISION_FP16_MIXED ? &gpu_fp16 : &gpu_fp32;
}

const vit_ops *jobplan_cpu_ops(precision_mode p)
{
    return p == PRECISION_BF16_MIXED ? ops_cpu_bf16() : p == PRECISION_FP16_MIXED ? ops_cpu_fp16()
                                                                                    : ops_cpu();
}

/* The CUDA context and NCCL's buffers: an allowance, not measured by the
 * backend's counter (which counts cuBLASLt's workspace and the scratch:
 * gpu_buffers below). */
#define GPU_RESERVE_BYTES ((size_t)1 << 30)

/* Fashion-MNIST's two files in memory (data.c keeps 8-bit pixels and labels). */
#define FMNIST_SAMPLES 70000

/* ---- memory ---- */

/* The CUDA backend's own buffers for a model at micro-batch B: cuBLASLt's
 * workspace, and the shared scratch at the largest ask of a step (the bias
 * gradients' column sums: patch embedding, qkv, proj, fc1, fc2, head;
 * LayerNorm's backward; the gradient norm). Measured on an H100 against
 * ops_cuda_peak_bytes: bench/NOTES.md, "The plan on a GPU". */
static size_t gpu_buffers(const model_config *mc, int B)
{
    const int np = (mc->image_size / mc->patch_size) * (mc->image_size / mc->patch_size);
    const int rows = B * (np + 1), D = mc->dim, H = config_mlp_hidden(mc);
    const size_t asks[] = {cuda_colsum_scratch_bytes(B * np, D),
                           cuda_colsum_scratch_bytes(rows, 3 * D),
                           cuda_colsum_scratch_bytes(rows, D),
                           cuda_colsum_scratch_bytes(rows, H),
                           cuda_colsum_scratch_bytes(B, mc->num_classes),
                           cuda_ln_scratch_bytes(rows, D),
                           cuda_ss_scratch_bytes()};
    size_t most = 0;
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++)
        if (asks[i] > most) most = asks[i];
    return CUDA_LT_WORKSPACE_BYTES + cuda_scratch_size(most);
}

static vj_err plan_once(const vit_job_config *cfg, const vit_ops *ops, int world, int rank,
                        int honour_mode, int ckpt, model_memory *mm, dp_memory *dm,
                        sharding_mode *runs, char *err, size_t errlen)
{
    const training_config *tc = &cfg->training;
    model_options mo = {.activation_checkpointing = ckpt, .drop_path = tc->drop_path > 0};
    dp_options dpo = {.ops = ops, .mc = &cfg->model, .oc = &tc->optimizer, .total_steps = 1,
                      .mode = tc->sharding, .ema = &tc->ema, .freeze_planned = tc->freeze_n > 0};
    return dp_plan(&dpo, world, rank, honour_mode, tc->micro_batch_size, &mo, mm, dm, runs, err,
                   errlen);
}

vj_err jobplan_memory(const vit_job_config *cfg, const vit_ops *ops, int world, int rank,
                      int honour_mode, int threads, jobplan_mem *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const training_config *tc = &cfg->training;
    const model_config *mc = &cfg->model;
    model_memory mm, other;
    dp_memory dm, dm2;
    sharding_mode runs, runs2;
    vj_err rc = plan_once(cfg, ops, world, rank, honour_mode, tc->activation_checkpointing, &mm,
                          &dm, &runs, err, errlen);
    if (rc == VJ_OK)
        rc = plan_once(cfg, ops, world, rank, honour_mode, !tc->activation_checkpointing, &other,
                       &dm2, &runs2, err, errlen);
    if (rc) return rc;
    out->n_params = mm.n_params;
    out->strategy = runs;
    out->sharding = dp_mode_name(runs);
    out->world = world;
    out->rank = rank;
    if (mm.param_bytes) { /* the model holds them (none, grad-op) */
        out->param_bytes = mm.param_bytes;
        out->grad_bytes = mm.grad_bytes;
    } else { /* the shard holds them, and the slots of gathered units */
        out->param_bytes = dm.param_bytes - dm.unit_bytes / 2;
        out->grad_bytes = dm.grad_bytes - dm.unit_bytes / 2;
        out->unit_bytes = dm.unit_bytes;
    }
    out->optim_bytes = dm.optim_bytes;
    out->ema_bytes = dm.ema_bytes;
    out->lowp_bytes = mm.lowp_bytes;
    out->activation_bytes = mm.activation_bytes;
    out->activation_ckpt_bytes = tc->activation_checkpointing ? mm.activation_bytes
                                                              : other.activation_bytes;
    out->activation_nockpt_bytes = tc->activation_checkpointing ? other.activation_bytes
                                                                : mm.activation_bytes;
    out->workspace_bytes = mm.workspace_bytes;
    out->collective_bytes = dm.stage_bytes + dm.pack_bytes;
    /* the model's total and the strategy's own: what the backend allocates */
    out->gpu_buffer_bytes = ops->gpu ? gpu_buffers(mc, tc->micro_batch_size) : 0;
    out->backend_bytes = mm.total_bytes + dm.own_bytes + out->collective_bytes +
                         out->gpu_buffer_bytes;
    const size_t img = (size_t)mc->channels * mc->image_size * mc->image_size;
    out->batch_bytes = (sizeof(float) * img + sizeof(int)) * (size_t)tc->micro_batch_size +
                       mm.n_params * sizeof(float);
    if (cfg->data.format == DATA_FASHION_MNIST) {
        out->loader_bytes = (size_t)FMNIST_SAMPLES * (img + 1);
    } else {
        int t = threads > 0 ? threads : sysres_cpus("", 0, NULL, 0);
        int workers = cfg->data.workers > 0 ? cfg->data.workers : feed_default_workers(t);
        out->loader_bytes = ld_queue_bytes(tc->micro_batch_size, cfg->data.prefetch_batches,
                                           workers, mc->channels, mc->image_size);
    }
    out->check_bytes = out->backend_bytes + out->batch_bytes;
    if (ops->gpu) {
        out->reserve_bytes = GPU_RESERVE_BYTES;
        out->total_bytes = out->backend_bytes + out->reserve_bytes;
    } else {
        out->total_bytes = out->backend_bytes + out->batch_bytes + out->loader_bytes;
    }
    return VJ_OK;
}
