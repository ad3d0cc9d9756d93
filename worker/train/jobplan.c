/* worker/train/jobplan.c - see jobplan.h. Sizes come from the code that
 * allocates (dp_plan, model_memory_plan, ld_queue_bytes,
 * att_scratch_layout); what this file adds is the sum, the FLOP count, the
 * rates and the order of the suggestions. */
#include "jobplan.h"

#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "attention_scratch.h"
#include "cuda_buffers.h"
#include "comm.h"
#include "dp.h"
#include "feed.h"
#include "loader.h"
#include "model.h"
#include "optim.h"
#include "rdzv.h"
#include "sysres.h"
#include "util.h"

/* ---- a GPU backend's sizes, without the backend ---- */

static size_t att_bytes_x4(int B, int T, int D, int NH)
{
    size_t off[9];
    return att_scratch_layout(off, B, T, D, NH, 4);
}
static size_t att_bytes_x2(int B, int T, int D, int NH)
{
    size_t off[9];
    return att_scratch_layout(off, B, T, D, NH, 2);
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

static const vit_ops *cpu_ops(precision_mode p)
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

/* ---- time ---- */

/* One image's forward FLOPs per unit of the model (model_unit_bounds):
 * the stem's patch embedding, a block's matmuls (qkv, proj, the MLP) and
 * its attention's two products, the head. */
typedef struct {
    double stem, block_mm, block_att, head;
} unit_flops;

static unit_flops forward_flops(const model_config *mc)
{
    const double S = mc->image_size, P = mc->patch_size, C = mc->channels, D = mc->dim,
                 H = config_mlp_hidden(mc), K = mc->num_classes;
    const double N = floor(S / P) * floor(S / P), T = N + 1;
    return (unit_flops){.stem = 2 * N * (C * P * P) * D,
                        .block_mm = 2 * T * (3 * D * D + D * D + 2 * D * H),
                        .block_att = 2 * 2 * T * T * D,
                        .head = 2 * D * K};
}

/* One image's training-step FLOPs, split: the matmuls' and the
 * attention's; 3 x the forward, plus the blocks' forward again when
 * checkpointed. */
static void flops_per_image(const model_config *mc, int ckpt, double *matmul, double *attention)
{
    const unit_flops f = forward_flops(mc);
    const double passes = ckpt ? 4 : 3; /* of the blocks */
    *matmul = 3 * (f.stem + f.head) + passes * mc->depth * f.block_mm;
    *attention = passes * mc->depth * f.block_att;
}

double jobplan_flops_per_image(const model_config *mc, int ckpt)
{
    double mm, att;
    flops_per_image(mc, ckpt, &mm, &att);
    return mm + att;
}

typedef struct {
    const char *kind;
    double memory;   /* bytes */
    double peak;     /* dense 16-bit tensor FLOP/s, published */
    double peak32;   /* fp32 FLOP/s without tensor cores (vitjob's fp32: no TF32) */
    double mem_bw;   /* device memory bandwidth, bytes/s, published */
    double nvlink;   /* all-reduce bus bandwidth inside a node, bytes/s (published) */
    double network;  /* across nodes, per GPU (a 400/200/100 Gb/s NIC each) */
} gpu_row;

/* Published figures (SXM parts). The step's rates below were measured on
 * the H100, the first row (gpu_step scales from it); another GPU's are
 * those scaled by its peaks (matmuls, attention) and its memory bandwidth
 * (the memory-bound kernels). */
static const gpu_row gpus[] = {
    {"h100", 80e9, 989.4e12, 66.9e12, 3.35e12, 360e9, 50e9},
    {"h200", 141e9, 989.4e12, 66.9e12, 4.8e12, 360e9, 50e9},
    {"a100", 80e9, 312e12, 19.5e12, 2.04e12, 230e9, 25e9},
    {"v100", 32e9, 125e12, 15.7e12, 0.9e12, 130e9, 12.5e9},
};
/* vitjob's own step on an H100 80GB HBM3 (bench/NOTES.md: `make bench-gpu`'s
 * per-op profile of vit_b16 and vit_l16, and "The plan on a GPU": training
 * runs of fmnist_tiny to vit_l16 against this model). Per micro-batch of B
 * images, T tokens, width D, depth L:
 * - matmuls (cuBLASLt), 16-bit: 747 TFLOP/s x D / (D + 291), the curve
 *   through the profile's 542 (D 768) and 582 (D 1024); fp32: 50 TFLOP/s;
 * - attention (unfused, the (T, T) probabilities in memory): 21 TFLOP/s
 *   16-bit, 15 fp32;
 * - the memory-bound kernels (LayerNorm, GELU, casts): 64 ps per element
 *   of B x T x D x L (16-bit; fp32 100), a third more with checkpointing;
 * - launches: 4.5 us each, 45 per block and micro-batch (60 with
 *   checkpointing) and 25 more, one per parameter tensor in the optimizer;
 * - the batch's upload from pageable memory: 7.5 GB/s;
 * - the optimizer step (zeroing, clipping's norm, AdamW): 32 ps per
 *   parameter; and 0.3 ms a step of host work (the loss's and the norm's
 *   reads). */
#define H100_MM_MAX 747e12
#define H100_MM_HALF_DIM 291.0
#define H100_MM_FP32 50e12
#define H100_ATT 21e12
#define H100_ATT_FP32 15e12
#define H100_ELEM_S 64e-12
#define H100_ELEM_S_FP32 100e-12
#define GPU_LAUNCH_S 4.5e-6
#define GPU_LAUNCHES_BLOCK 45
#define GPU_LAUNCHES_BLOCK_CKPT 60
#define GPU_LAUNCHES_MICRO 25
#define GPU_UPLOAD_BPS 7.5e9
#define H100_OPTIM_S_PER_PARAM 32e-12
#define GPU_STEP_HOST_S 0.3e-3
/* bench/NOTES.md: the CPU collectives' bus bandwidth, 2 ranks on loopback
 * on the development machine (reduce-scatter, 16-64 MiB) */
#define CPU_BUS_NOTES 1.1e9

/* A step's compute on GPU g at the rates above, per rank: p's gpu_* parts,
 * compute_s (their sum over the accumulation, and the host's share) and
 * optim_s. */
static void gpu_step(const model_config *mc, const gpu_row *g, precision_mode prec, int ckpt,
                     jobplan *p)
{
    const double S = mc->image_size, P = mc->patch_size, C = mc->channels, D = mc->dim,
                 L = mc->depth, B = p->micro;
    const double T = floor(S / P) * floor(S / P) + 1;
    const gpu_row *h100 = &gpus[0]; /* the rates were measured there */
    const int fp32 = prec == PRECISION_FP32;
    const double mm_rate = fp32 ? H100_MM_FP32 * g->peak32 / h100->peak32
                                : H100_MM_MAX * D / (D + H100_MM_HALF_DIM) * g->peak / h100->peak;
    const double att_rate = (fp32 ? H100_ATT_FP32 * g->peak32 / h100->peak32
                                  : H100_ATT * g->peak / h100->peak);
    const double bw = h100->mem_bw / g->mem_bw; /* > 1: slower than the H100's memory */
    /* one micro-batch's FLOPs, split (jobplan_flops_per_image's count) */
    double mm, att;
    flops_per_image(mc, ckpt, &mm, &att);
    mm *= B, att *= B;
    const double elem = (fp32 ? H100_ELEM_S_FP32 : H100_ELEM_S) * B * T * D * L *
                        (ckpt ? 4.0 / 3 : 1) * bw;
    const double launches = L * (ckpt ? GPU_LAUNCHES_BLOCK_CKPT : GPU_LAUNCHES_BLOCK) +
                            GPU_LAUNCHES_MICRO;
    const double tensors = model_tensor_names(mc, NULL, 0); /* one AdamW launch each */
    p->gpu_matmul_s = p->accum * mm / mm_rate;
    p->gpu_attention_s = p->accum * att / att_rate;
    p->gpu_memory_s = p->accum * elem;
    p->gpu_launch_s = p->accum * launches * GPU_LAUNCH_S;
    p->gpu_upload_s = p->accum * B * C * S * S * sizeof(float) / GPU_UPLOAD_BPS;
    p->gpu_host_s = GPU_STEP_HOST_S;
    p->compute_s = p->gpu_matmul_s + p->gpu_attention_s + p->gpu_memory_s + p->gpu_launch_s +
                   p->gpu_upload_s + p->gpu_host_s;
    p->optim_s_per_param = H100_OPTIM_S_PER_PARAM * bw;
    p->optim_s = (double)p->optim_params * p->optim_s_per_param + tensors * GPU_LAUNCH_S;
}

static const gpu_row *gpu_of(const char *kind)
{
    if (!kind || !*kind) kind = "h100";
    for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++)
        if (strcmp(gpus[i].kind, kind) == 0) return &gpus[i];
    return NULL;
}

/* ---- the plan ---- */

static int plan_threads(const vit_job_config *cfg, const jobplan_target *t)
{
    if (t->threads > 0) return t->threads;
    if (cfg->training.threads > 0) return cfg->training.threads;
    int cpus = sysres_cpus("", 0, NULL, 0) / (t->local_ranks > 0 ? t->local_ranks : 1);
    return cpus < 1 ? 1 : cpus;
}

static vj_err mem_for(const vit_job_config *cfg, const jobplan_target *t, jobplan_mem *m, char *err,
                      size_t errlen)
{
    const int world = t->replicas * t->local_ranks, threads = plan_threads(cfg, t);
    const vit_ops *ops = t->gpu ? jobplan_gpu_ops(cfg->training.precision)
                                : cpu_ops(cfg->training.precision);
    /* the CPU attention's scratch is per thread: as many as a rank runs */
    if (!t->gpu) ops_cpu_set_threads(threads);
    return jobplan_memory(cfg, ops, world, 0, 0, threads, m, err, errlen);
}

static int divides(const vit_job_config *cfg, int world)
{
    long long per = (long long)cfg->training.micro_batch_size * world;
    return per > 0 && cfg->training.global_batch_size % per == 0;
}

static void add_change(jobplan *p, const char *what, const jobplan_mem *m)
{
    if (p->n_changes >= JOBPLAN_MAX_CHANGES) return;
    jobplan_change *c = &p->changes[p->n_changes++];
    snprintf(c->what, sizeof c->what, "%s", what);
    c->total_bytes = m->total_bytes;
    c->fits = (double)m->total_bytes <= p->device_bytes;
    if (c->fits && p->suggestion < 0) p->suggestion = p->n_changes - 1;
}

/* Each change on top of the ones before: checkpointing, grad-op, full,
 * halving the micro-batch (more accumulation), doubling the replicas. */
static vj_err suggest(const vit_job_config *cfg0, const jobplan_target *t0, jobplan *p, char *err,
                      size_t errlen)
{
    static vit_job_config cfg;
    cfg = *cfg0;
    jobplan_target t = *t0;
    jobplan_mem m;
    char what[160];
    vj_err rc;
    p->suggestion = -1;
    /* the changes are config assignments, applied as --set would apply them:
     * checkpointing, then each mode that shards more than the job's, least
     * first (dp.h's table), each with checkpointing */
    static const char ckpt[] = "training.activationCheckpointing=true";
    sharding_mode more[4];
    const int n_more = dp_modes_sharding_more(cfg.training.sharding, more, 4);
    for (int i = -1; i < n_more; i++) {
        if (i < 0 && cfg.training.activation_checkpointing) continue;
        if (i < 0)
            snprintf(what, sizeof what, "%s", ckpt);
        else
            snprintf(what, sizeof what, "training.sharding=%s", dp_mode_name(more[i]));
        if ((rc = config_set(&cfg, what, err, errlen)) != VJ_OK ||
            (rc = config_set(&cfg, ckpt, err, errlen)) != VJ_OK ||
            (rc = mem_for(&cfg, &t, &m, err, errlen)))
            return rc;
        add_change(p, what, &m);
        if (p->suggestion >= 0) return VJ_OK;
    }
    const int world = t.replicas * t.local_ranks;
    while (cfg.training.micro_batch_size > 1) {
        int micro = cfg.training.micro_batch_size / 2;
        cfg.training.micro_batch_size = micro;
        if (!divides(&cfg, world)) continue;
        if ((rc = mem_for(&cfg, &t, &m, err, errlen))) return rc;
        if ((double)m.total_bytes <= p->device_bytes || micro == 1) {
            snprintf(what, sizeof what, "training.microBatchSize=%d (accumulation %d)", micro,
                     cfg.training.global_batch_size / (micro * world));
            add_change(p, what, &m);
            if (p->suggestion >= 0) return VJ_OK;
            break;
        }
    }
    for (int k = 0; k < 10; k++) {
        t.replicas *= 2;
        if (!divides(&cfg, t.replicas * t.local_ranks)) break;
        if ((rc = mem_for(&cfg, &t, &m, err, errlen))) return rc;
        if ((double)m.total_bytes <= p->device_bytes) {
            snprintf(what, sizeof what, "replicas=%d", t.replicas);
            add_change(p, what, &m);
            return VJ_OK;
        }
    }
    return VJ_OK;
}

vj_err jobplan_make(const vit_job_config *cfg, const jobplan_target *t, jobplan *p, char *err,
                    size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->suggestion = -1;
    const int world = t->replicas * t->local_ranks;
    if (t->replicas < 1 || t->local_ranks < 1) {
        snprintf(err, errlen, "--replicas %d --local-ranks %d: both must be at least 1",
                 t->replicas, t->local_ranks);
        return VJ_ERR_CONFIG;
    }
    if (!divides(cfg, world)) {
        snprintf(err, errlen, "training.globalBatchSize=%d is not a multiple of "
                 "training.microBatchSize=%d x %d ranks", cfg->training.global_batch_size,
                 cfg->training.micro_batch_size, world);
        return VJ_ERR_CONFIG;
    }
    const gpu_row *g = NULL;
    if (t->gpu && !(g = gpu_of(t->gpu_kind))) {
        snprintf(err, errlen, "--gpu %s: not one of h100, h200, a100, v100", t->gpu_kind);
        return VJ_ERR_CONFIG;
    }
    vj_err rc = mem_for(cfg, t, &p->mem, err, errlen);
    if (rc) return rc;
    const training_config *tc = &cfg->training;
    p->world = world;
    p->micro = tc->micro_batch_size;
    p->global_batch = tc->global_batch_size;
    p->accum = tc->global_batch_size / (tc->micro_batch_size * world);
    /* memory per rank */
    if (t->device_bytes > 0) {
        p->device_bytes = t->device_bytes;
    } else if (g) {
        p->device_bytes = g->memory;
    } else {
        long long avail = sysres_memory_available("", NULL, 0);
        p->device_bytes = avail > 0 ? (double)avail / t->local_ranks : 0;
    }
    if (g)
        snprintf(p->device, sizeof p->device, "cuda %s, %.0f GB per rank", g->kind,
                 p->device_bytes / 1e9);
    else
        snprintf(p->device, sizeof p->device, "cpu, %.2f GB per rank (%s)", p->device_bytes / 1e9,
                 t->device_bytes > 0 ? "given" : "available to this process / local ranks");
    p->fits = p->device_bytes <= 0 || (double)p->mem.total_bytes <= p->device_bytes;
    /* time */
    p->flops_per_step = jobplan_flops_per_image(&cfg->model, tc->activation_checkpointing) *
                        tc->global_batch_size;
    if (t->bus_bytes_per_s > 0) {
        p->bus_bytes_per_s = t->bus_bytes_per_s;
        snprintf(p->bus_source, sizeof p->bus_source, "given");
    } else if (g) {
        int inside = t->replicas == 1 && world <= 8;
        p->bus_bytes_per_s = inside ? g->nvlink : g->network;
        snprintf(p->bus_source, sizeof p->bus_source, "published, %s (not measured here)",
                 inside ? "NVLink inside a node" : "one NIC per GPU across nodes");
    } else {
        p->bus_bytes_per_s = CPU_BUS_NOTES;
        snprintf(p->bus_source, sizeof p->bus_source, "bench/NOTES.md loopback, 2 ranks");
    }
    /* the strategy's collectives, as it makes them (dp_step_cost) */
    const dp_step shape = {.world = world, .accum = p->accum,
                           .units = cfg->model.depth + 2, /* model_unit_bounds: stem, blocks,
                                                           * head */
                           .spans = tc->freeze_n > 0 ? 2 : 1, .n_params = p->mem.n_params};
    const dp_cost cost = dp_step_cost(p->mem.strategy, &shape);
    p->comm_thread = cost.own_schedule;
    p->comm_bytes = cost.bus_bytes;
    p->comm_bw_s = p->bus_bytes_per_s > 0 ? p->comm_bytes / p->bus_bytes_per_s : 0;
    p->comm_calls = cost.calls;
    p->call_s = t->call_s > 0 ? t->call_s : 0;
    p->comm_lat_s = cost.call_units * p->call_s;
    /* a call on the strategy's own thread is timed with its bytes (full:
     * an all-gather of a unit's chunk): the calls' term is what they take
     * beyond the bytes' */
    if (p->comm_thread)
        p->comm_lat_s = p->comm_lat_s > p->comm_bw_s ? p->comm_lat_s - p->comm_bw_s : 0;
    p->comm_s = p->comm_bw_s + p->comm_lat_s;
    /* the optimizer updates the parameters whose AdamW state this rank
     * holds (optim_memory_bytes: the sizes the strategy allocates) */
    p->optim_params = p->mem.optim_bytes / optim_memory_bytes(1);
    snprintf(p->call_source, sizeof p->call_source, "%s",
             p->call_s > 0 ? "given" : g ? "not counted (GPU)" : "not counted: run with --measure");
    if (g && t->flops_per_s <= 0) {
        /* the step's parts at the H100's measured rates (gpu_step) */
        gpu_step(&cfg->model, g, tc->precision, tc->activation_checkpointing, p);
        p->flops_per_s = p->compute_s > 0 ? p->flops_per_step / world / p->compute_s : 0;
        if (strcmp(g->kind, "h100") == 0)
            snprintf(p->rate_source, sizeof p->rate_source,
                     "bench/NOTES.md: the H100's measured rates per op");
        else
            snprintf(p->rate_source, sizeof p->rate_source,
                     "the H100's measured rates per op, scaled by the %s's published peaks", g->kind);
        snprintf(p->optim_source, sizeof p->optim_source,
                 "bench/NOTES.md: the H100's measured rate");
    } else {
        if (t->flops_per_s > 0) {
            p->flops_per_s = t->flops_per_s;
            snprintf(p->rate_source, sizeof p->rate_source, "given");
        } else {
            snprintf(p->rate_source, sizeof p->rate_source, "none: run with --measure");
        }
        /* each rank computes its micro-batches, accum of them */
        if (p->flops_per_s > 0) p->compute_s = p->flops_per_step / world / p->flops_per_s;
        snprintf(p->optim_source, sizeof p->optim_source, "%s",
                 t->optim_s_per_param > 0 ? "given" : "not counted: run with --measure");
    }
    if (t->optim_s_per_param > 0) {
        p->optim_s_per_param = t->optim_s_per_param;
        p->optim_s = (double)p->optim_params * p->optim_s_per_param;
        snprintf(p->optim_source, sizeof p->optim_source, "given");
    }
    if (p->compute_s > 0) {
        /* on a GPU a strategy's own communication thread (full's)
         * overlaps the compute; on the CPU the collectives take the same
         * cores; the optimizer follows both */
        p->step_s = (g && p->comm_thread ? fmax(p->compute_s, p->comm_s)
                                         : p->compute_s + p->comm_s) +
                    p->optim_s;
        p->images_per_s = p->step_s > 0 ? tc->global_batch_size / p->step_s : 0;
    }
    if (!p->fits && (rc = suggest(cfg, t, p, err, errlen))) return rc;
    return VJ_OK;
}

/* ---- probes ---- */

#define PROBE_MIN_PASSES 5
#define PROBE_MAX_PASSES 4096

/* One copy of the step probe, in this process: the forward and backward's
 * FLOP rate, then the optimizer step's seconds per parameter. */
static int probe_one(const vit_job_config *cfg, int threads, double seconds, double *flops_per_s,
                     double *optim_s_per_param, char *err, size_t errlen)
{
    const model_config *mc = &cfg->model;
    const training_config *tc = &cfg->training;
    const vit_ops *ops = cpu_ops(tc->precision);
    ops_cpu_set_threads(threads);
    const int B = tc->micro_batch_size;
    model_options mo = {.activation_checkpointing = tc->activation_checkpointing};
    vit_model *m = NULL;
    optim *o = NULL;
    vj_err rc = model_new(&m, mc, B, &mo, ops, err, errlen);
    if (rc) return -1;
    if (optim_new(&o, m, &tc->optimizer, tc->steps, err, errlen) != 0) {
        model_free(m);
        return -1;
    }
    const size_t img = (size_t)model_image_floats(m) * (size_t)B;
    float *images = malloc(img * sizeof(float));
    int *labels = malloc((size_t)B * sizeof(int));
    if (!images || !labels || model_init_random(m, 1) != 0) {
        free(images), free(labels), optim_free(o), model_free(m);
        snprintf(err, errlen, "compute probe: out of host memory");
        return -1;
    }
    for (size_t i = 0; i < img; i++) images[i] = (float)((i * 7919) % 97) * 2e-2f - 0.97f;
    for (int b = 0; b < B; b++) labels[b] = b % mc->num_classes;
    const double per_pass = jobplan_flops_per_image(mc, tc->activation_checkpointing) * B;
    /* pass 0, untimed, warms the threads and the caches (and the
     * optimizer's state); then passes for about `seconds` (at least
     * PROBE_MIN_PASSES, at most PROBE_MAX_PASSES), and the rate of the
     * median pass: a run's steady rate is a median too (its log
     * intervals'), and a burst of other work on the machine moves a mean */
    double pass_s[PROBE_MAX_PASSES], t0 = mono_seconds();
    int passes = 0;
    for (int pass = 0; pass == 0 || ((mono_seconds() - t0 < seconds || passes < PROBE_MIN_PASSES) &&
                                     passes < PROBE_MAX_PASSES);
         pass++) {
        if (pass == 1) t0 = mono_seconds();
        const double p0 = mono_seconds();
        model_zero_grads(m);
        model_forward(m, images, labels, B);
        model_backward(m, 1.0f / B);
        if (pass == 0) optim_step(o, m, ops, 0);
        if (pass > 0) pass_s[passes++] = mono_seconds() - p0;
    }
    const double mid = median_of(pass_s, passes);
    *flops_per_s = mid > 0 ? per_pass / mid : 0;
    /* the optimizer's part of a step, on the last gradients: the zeroing
     * comes back each step, so the gradients are computed once */
    int steps = 0;
    double opt = 0;
    float *keep = malloc(model_num_params(m) * sizeof(float));
    const float *g = model_grads(m);
    if (keep && g) memcpy(keep, g, model_num_params(m) * sizeof(float));
    while (keep && g && (steps < 2 || opt < seconds / 4)) {
        const double s0 = mono_seconds();
        model_zero_grads(m);
        const double s1 = mono_seconds();
        ops->upload(model_grads(m), keep, model_num_params(m) * sizeof(float));
        const double s2 = mono_seconds();
        optim_step(o, m, ops, 1 + steps);
        opt += (s1 - s0) + (mono_seconds() - s2); /* the zeroing and the step, not the copy */
        steps++;
    }
    *optim_s_per_param = steps ? opt / steps / (double)model_num_params(m) : 0;
    free(keep), free(images), free(labels), optim_free(o), model_free(m);
    if (*flops_per_s <= 0 || *optim_s_per_param <= 0) {
        snprintf(err, errlen, "compute probe: nothing timed");
        return -1;
    }
    return 0;
}

int jobplan_probe_step(const vit_job_config *cfg, int threads, int copies, double seconds,
                       jobplan_step_probe *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (copies < 1) copies = 1;
    int fds[2] = {-1, -1};
    pid_t kids[64];
    int n = 0;
    if (copies > 64) copies = 64;
    if (copies > 1 && pipe(fds) != 0) {
        snprintf(err, errlen, "compute probe: no pipe for %d copies", copies);
        return -1;
    }
    fflush(NULL);
    for (; n < copies - 1; n++) { /* the others, started together */
        pid_t pid = fork();
        if (pid < 0) break;
        if (pid == 0) {
            double r[2] = {0, 0};
            char e[256];
            close(fds[0]);
            int bad = probe_one(cfg, threads, seconds, &r[0], &r[1], e, sizeof e);
            ssize_t w = write(fds[1], r, sizeof r);
            _exit(bad || w != (ssize_t)sizeof r ? 1 : 0);
        }
        kids[n] = pid;
    }
    if (fds[1] >= 0) close(fds[1]);
    double rate = 0, opt = 0;
    int bad = probe_one(cfg, threads, seconds, &rate, &opt, err, errlen);
    int got = bad ? 0 : 1;
    for (int i = 0; i < n; i++) {
        double r[2];
        if (read(fds[0], r, sizeof r) == (ssize_t)sizeof r && r[0] > 0 && r[1] > 0) {
            rate += r[0], opt += r[1], got++;
        }
    }
    for (int i = 0; i < n; i++) waitpid(kids[i], NULL, 0);
    if (fds[0] >= 0) close(fds[0]);
    if (bad) return -1;
    if (got < copies) {
        snprintf(err, errlen, "compute probe: %d of %d copies timed nothing (fork or memory)",
                 copies - got, copies);
        return -1;
    }
    out->flops_per_s = rate / got;
    out->optim_s_per_param = opt / got;
    out->copies = got;
    return 0;
}

int jobplan_probe_compute(const vit_job_config *cfg, int threads, double seconds,
                          double *flops_per_s, char *err, size_t errlen)
{
    jobplan_step_probe pr;
    if (jobplan_probe_step(cfg, threads, 1, seconds, &pr, err, errlen) != 0) return -1;
    *flops_per_s = pr.flops_per_s;
    return 0;
}

/* A loopback port nobody listens on now, below the ephemeral range. */
static int free_port(void)
{
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 200; tries++) {
        seed = seed * 1103515245u + 12345u;
        int port = 20000 + (int)((seed >> 8) % 12000);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return -1;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok) return port;
    }
    return -1;
}

/* One rank's part of a loopback probe, on its communicator; rank 0's
 * results go into arg (the forked ranks' copies are dropped). */
typedef int (*loopback_fn)(comm *c, int rank, void *arg, char *err, size_t errlen);

static int loopback_rank(const char *endpoint, int rank, int world, loopback_fn fn, void *arg,
                         char *err, size_t errlen)
{
    rdzv *rv = NULL;
    comm *c = NULL;
    rdzv_error kind;
    rdzv_options ro = {.endpoint = endpoint, .rank = rank, .world_size = world, .timeout_s = 30};
    int bad = rdzv_new(&rv, &ro, &kind, err, errlen) != 0 ||
              comm_new_cpu(&c, rv, 30, err, errlen) != 0 || fn(c, rank, arg, err, errlen) != 0;
    comm_free(c);
    rdzv_free(rv);
    return bad ? -1 : 0;
}

/* `ranks` (2 to 64) processes meeting on loopback (this one rank 0, ranks
 * - 1 forked: call it before this process has run OpenMP threads), each
 * running fn on its communicator. 0, or -1 with a message starting with
 * `what`. */
static int loopback_ranks(const char *what, int ranks, loopback_fn fn, void *arg, char *err,
                          size_t errlen)
{
    if (ranks < 2 || ranks > 64) {
        snprintf(err, errlen, "%s: %d ranks, not 2 to 64", what, ranks);
        return -1;
    }
    int port = free_port();
    if (port < 0) {
        snprintf(err, errlen, "%s: no free port", what);
        return -1;
    }
    char endpoint[32];
    snprintf(endpoint, sizeof endpoint, "127.0.0.1:%d", port);
    pid_t kids[63];
    int n = 0, bad = 0;
    fflush(NULL);
    for (; n < ranks - 1; n++) {
        pid_t pid = fork();
        if (pid < 0) {
            snprintf(err, errlen, "%s: fork failed", what);
            bad = 1;
            break;
        }
        if (pid == 0) {
            char e[256];
            _exit(loopback_rank(endpoint, n + 1, ranks, fn, arg, e, sizeof e) ? 1 : 0);
        }
        kids[n] = pid;
    }
    if (!bad) bad = loopback_rank(endpoint, 0, ranks, fn, arg, err, errlen) != 0;
    int failed = 0;
    for (int i = 0; i < n; i++) {
        int st = 0;
        if (bad) kill(kids[i], SIGKILL);
        waitpid(kids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    if (!bad && failed) snprintf(err, errlen, "%s: another rank failed", what);
    return bad || failed ? -1 : 0;
}

#define CALL_FLOATS 64 /* the latency probe's all-reduce: its bytes cost nothing */

#define PROBE_BATCHES 5
#define PROBE_MAX_REPS 16

/* The collectives probe's numbers: what to run, and rank 0's results. */
typedef struct {
    size_t count;
    int reps, calls;
    double gap_s;
    double per, per_call; /* rank 0's */
} collectives_probe;

/* One rank of jobplan_probe_collectives: all-reduces `count` floats
 * `reps` (at most PROBE_MAX_REPS) times after one warm-up, then
 * CALL_FLOATS `calls` times after one, in PROBE_BATCHES batches, each call
 * after gap_s of spinning; the seconds per all-reduce of each in per and
 * per_call (medians: see below; the spinning not counted). */
static int collectives_rank(comm *c, int rank, void *arg, char *err, size_t errlen)
{
    collectives_probe *a = arg;
    (void)rank;
    float *buf = calloc(a->count > CALL_FLOATS ? a->count : CALL_FLOATS, sizeof(float));
    int bad = !buf;
    if (bad) snprintf(err, errlen, "loopback probe: out of host memory");
    /* after one untimed call each: the median of `reps` timed all-reduces
     * of the buffer, and the median of PROBE_BATCHES batches' mean call
     * time (a batch keeps the scheduler's occasional long waits, which a
     * training run's calls meet too; the median drops a batch that a
     * burst of other work on the machine took) */
    double t[PROBE_BATCHES > PROBE_MAX_REPS ? PROBE_BATCHES : PROBE_MAX_REPS];
    int n = 0;
    for (int i = 0; !bad && i <= a->reps && i <= PROBE_MAX_REPS; i++) {
        double t0 = mono_seconds();
        bad = comm_allreduce_sum(c, buf, a->count, err, errlen) != 0;
        if (i > 0) t[n++] = mono_seconds() - t0;
    }
    if (!bad) a->per = median_of(t, n);
    n = 0;
    for (int b = 0; !bad && a->calls > 0 && b < PROBE_BATCHES; b++) {
        const int each = a->calls / PROBE_BATCHES;
        if (b == 0) bad = comm_allreduce_sum(c, buf, CALL_FLOATS, err, errlen) != 0;
        double in_calls = 0;
        for (int i = 0; !bad && i < each; i++) {
            /* the run's compute between two calls, as a core kept busy */
            mono_spin(a->gap_s);
            const double c0 = mono_seconds();
            bad = comm_allreduce_sum(c, buf, CALL_FLOATS, err, errlen) != 0;
            in_calls += mono_seconds() - c0;
        }
        t[n++] = in_calls / each;
    }
    if (!bad && a->calls > 0) a->per_call = median_of(t, n);
    free(buf);
    return bad ? -1 : 0;
}

int jobplan_probe_collectives(size_t bytes, int ranks, double gap_s, double *bus_bytes_per_s,
                              double *call_s, char *err, size_t errlen)
{
    collectives_probe a = {.count = bytes / sizeof(float), .reps = 5, .gap_s = gap_s};
    /* 400 calls, or as many as about 1.5 s of gaps allows (at least 20) */
    if (call_s) {
        double fit = 1.5 / (gap_s + 2e-4);
        a.calls = fit >= 400 ? 400 : fit <= 4 * PROBE_BATCHES ? 4 * PROBE_BATCHES : (int)fit;
        a.calls -= a.calls % PROBE_BATCHES;
    }
    if (loopback_ranks("loopback probe", ranks, collectives_rank, &a, err, errlen) != 0)
        return -1;
    if (a.per <= 0) {
        snprintf(err, errlen, "loopback probe: nothing timed");
        return -1;
    }
    /* an all-reduce of W ranks moves 2 (W-1)/W buffers per rank */
    *bus_bytes_per_s = 2.0 * (ranks - 1) / ranks * (double)a.count * sizeof(float) / a.per;
    if (call_s) *call_s = a.per_call;
    return 0;
}

/* ---- a strategy's own schedule on loopback ---- */

/* One rank of jobplan_probe_schedule: times the strategy's schedule
 * (dp_probe_schedule) with each unit's compute, its FLOPs at the probed
 * rate (forward_flops' terms: the stem's patch embedding, the blocks,
 * the head; a third forward, two thirds backward, checkpointing's
 * recompute in the blocks' backward). */
typedef struct {
    const vit_job_config *cfg;
    double flops_per_s, seconds;
    double exposed; /* rank 0's */
} schedule_probe;

static int schedule_rank(comm *c, int rank, void *arg, char *err, size_t errlen)
{
    schedule_probe *a = arg;
    (void)rank;
    const model_config *mc = &a->cfg->model;
    const training_config *tc = &a->cfg->training;
    const int U = mc->depth + 2, B = tc->micro_batch_size;
    const int W = a->cfg->world_size > 0 ? a->cfg->world_size : comm_world_size(c); /* its accumulation */
    const int accum = tc->global_batch_size / (B * W) > 0 ? tc->global_batch_size / (B * W) : 1;
    double *fwd = calloc((size_t)U, sizeof *fwd), *bwd = calloc((size_t)U, sizeof *bwd);
    if (!fwd || !bwd) {
        free(fwd), free(bwd);
        snprintf(err, errlen, "schedule probe: out of host memory");
        return -1;
    }
    const unit_flops f = forward_flops(mc);
    for (int u = 0; u < U; u++) {
        const int blk = u > 0 && u < U - 1;
        const double ff = u == 0 ? f.stem : blk ? f.block_mm + f.block_att : f.head;
        fwd[u] = ff * B / a->flops_per_s;
        bwd[u] = (2 + (blk && tc->activation_checkpointing ? 1 : 0)) * ff * B / a->flops_per_s;
    }
    const dp_options o = {.comm = c, .ops = cpu_ops(tc->precision), .mc = mc,
                          .oc = &tc->optimizer, .total_steps = tc->steps, .mode = tc->sharding};
    const dp_probe pr = {.n_units = U, .accum = accum, .fwd_s = fwd, .bwd_s = bwd,
                         .seconds = a->seconds};
    const int rc = dp_probe_schedule(&o, &pr, &a->exposed, err, errlen);
    free(fwd), free(bwd);
    return rc == 1 ? 0 : -1;
}

int jobplan_probe_schedule(const vit_job_config *cfg, int ranks, double flops_per_s,
                           double seconds, double *exposed_s, char *err, size_t errlen)
{
    if (!dp_has_schedule(cfg->training.sharding)) return 0;
    if (flops_per_s <= 0) {
        snprintf(err, errlen, "schedule probe: a compute rate of %g FLOP/s", flops_per_s);
        return -1;
    }
    schedule_probe a = {.cfg = cfg, .flops_per_s = flops_per_s, .seconds = seconds,
                        .exposed = -1};
    if (loopback_ranks("schedule probe", ranks, schedule_rank, &a, err, errlen) != 0) return -1;
    *exposed_s = a.exposed > 0 ? a.exposed : 0;
    return 1;
}

int jobplan_probe_loopback(size_t bytes, double *bus_bytes_per_s, char *err, size_t errlen)
{
    return jobplan_probe_collectives(bytes, 2, 0, bus_bytes_per_s, NULL, err, errlen);
}

/* ---- output ---- */

static void line(FILE *to, const char *what, size_t bytes)
{
    fprintf(to, "  %-34s %12.1f MiB\n", what, bytes / 1048576.0);
}

void jobplan_print(FILE *to, const jobplan *p)
{
    const jobplan_mem *m = &p->mem;
    fprintf(to, "plan: %zu parameters, sharding %s, rank %d of %d, micro-batch %d x %d "
            "accumulation = global batch %d\n", m->n_params, m->sharding, m->rank, m->world,
            p->micro, p->accum, p->global_batch);
    fprintf(to, "memory per rank:\n");
    line(to, "parameters (fp32)", m->param_bytes);
    line(to, "gradients (fp32)", m->grad_bytes);
    line(to, "optimizer state (AdamW m, v)", m->optim_bytes);
    if (m->ema_bytes) line(to, "EMA of the weights", m->ema_bytes);
    if (m->lowp_bytes) line(to, "16-bit copy of the weights", m->lowp_bytes);
    if (m->unit_bytes) line(to, "gathered units (full)", m->unit_bytes);
    line(to, "activations (as configured)", m->activation_bytes);
    line(to, "  with checkpointing", m->activation_ckpt_bytes);
    line(to, "  without checkpointing", m->activation_nockpt_bytes);
    line(to, "workspace", m->workspace_bytes);
    line(to, "collective buffers", m->collective_bytes);
    if (m->gpu_buffer_bytes) line(to, "cuBLASLt workspace, scratch", m->gpu_buffer_bytes);
    line(to, "= backend", m->backend_bytes);
    line(to, "batch and staging (host)", m->batch_bytes);
    line(to, "data loader queue (host)", m->loader_bytes);
    if (m->reserve_bytes) line(to, "CUDA context, NCCL (allowance)", m->reserve_bytes);
    line(to, "total", m->total_bytes);
    fprintf(to, "  %-34s %12.1f MiB (%s)\n", "device memory", p->device_bytes / 1048576.0,
            p->device);
    fprintf(to, "  %s\n", p->fits ? "fits" : "does not fit");
    fprintf(to, "time per step:\n");
    fprintf(to, "  %-34s %12.4g GFLOP\n", "model FLOPs (global batch)", p->flops_per_step / 1e9);
    if (p->flops_per_s > 0)
        fprintf(to, "  %-34s %12.4g GFLOP/s per rank (%s)\n", "compute rate",
                p->flops_per_s / 1e9, p->rate_source);
    else
        fprintf(to, "  %-34s %s\n", "compute rate", p->rate_source);
    fprintf(to, "  %-34s %12.4g s (accumulation %d x micro-batch %d)\n", "compute", p->compute_s,
            p->accum, p->micro);
    if (p->gpu_host_s > 0) {
        fprintf(to, "  %-34s %12.4g s\n", "  matmuls", p->gpu_matmul_s);
        fprintf(to, "  %-34s %12.4g s\n", "  attention", p->gpu_attention_s);
        fprintf(to, "  %-34s %12.4g s\n", "  memory-bound kernels", p->gpu_memory_s);
        fprintf(to, "  %-34s %12.4g s\n", "  kernel launches", p->gpu_launch_s);
        fprintf(to, "  %-34s %12.4g s\n", "  batch upload", p->gpu_upload_s);
        fprintf(to, "  %-34s %12.4g s\n", "  host", p->gpu_host_s);
    }
    fprintf(to, "  %-34s %12.4g s (%zu parameters x %.3g ns; %s)\n", "optimizer step",
            p->optim_s, p->optim_params, p->optim_s_per_param * 1e9, p->optim_source);
    fprintf(to, "  %-34s %12.1f MiB per rank\n", "collective volume", p->comm_bytes / 1048576.0);
    fprintf(to, "  %-34s %12.4g GB/s (%s)\n", "bus bandwidth", p->bus_bytes_per_s / 1e9,
            p->bus_source);
    fprintf(to, "  %-34s %12.4g s\n", "  the bytes", p->comm_bw_s);
    if (p->comm_thread)
        fprintf(to, "  %-34s %12.4g s (%.0f calls on the communication thread, %.3g ms each with "
                "its bytes beyond the compute it overlaps, less the bytes above; %s)\n",
                "  the calls' latency", p->comm_lat_s, p->comm_calls, p->call_s * 1e3,
                p->call_source);
    else
        fprintf(to, "  %-34s %12.4g s (%.0f calls, %.3g ms an all-reduce, half that a gather or "
                "scatter; %s)\n", "  the calls' latency", p->comm_lat_s, p->comm_calls,
                p->call_s * 1e3, p->call_source);
    fprintf(to, "  %-34s %12.4g s\n", "collectives", p->comm_s);
    if (p->step_s > 0) {
        fprintf(to, "  %-34s %12.4g s\n", "step", p->step_s);
        fprintf(to, "  %-34s %12.1f\n", "images per second", p->images_per_s);
    }
    if (!p->fits) {
        fprintf(to, "changes, each on top of the ones before:\n");
        for (int i = 0; i < p->n_changes; i++)
            fprintf(to, "  %-46s total %10.1f MiB  %s\n", p->changes[i].what,
                    p->changes[i].total_bytes / 1048576.0, p->changes[i].fits ? "fits" : "does not fit");
        if (p->suggestion >= 0) {
            fprintf(to, "suggestion:");
            for (int i = 0; i <= p->suggestion; i++) fprintf(to, " %s", p->changes[i].what);
            fprintf(to, "\n");
        } else {
            fprintf(to, "suggestion: none of these fits\n");
        }
    }
}

#define NUM(obj, key, v) cJSON_AddNumberToObject(obj, key, (double)(v))

char *jobplan_json(const jobplan *p)
{
    const jobplan_mem *m = &p->mem;
    cJSON *o = cJSON_CreateObject(), *mem = cJSON_CreateObject(), *tm = cJSON_CreateObject(),
          *ch = cJSON_CreateArray();
    if (!o || !mem || !tm || !ch) {
        cJSON_Delete(o), cJSON_Delete(mem), cJSON_Delete(tm), cJSON_Delete(ch);
        return NULL;
    }
    NUM(o, "params", m->n_params);
    cJSON_AddStringToObject(o, "sharding", m->sharding);
    NUM(o, "world", m->world);
    NUM(o, "rank", m->rank);
    NUM(o, "microBatchSize", p->micro);
    NUM(o, "accumulation", p->accum);
    NUM(o, "globalBatchSize", p->global_batch);
    cJSON_AddStringToObject(o, "device", p->device);
    NUM(o, "deviceMemoryBytes", p->device_bytes);
    cJSON_AddBoolToObject(o, "fits", p->fits);
    NUM(mem, "parameters", m->param_bytes);
    NUM(mem, "gradients", m->grad_bytes);
    NUM(mem, "optimizerState", m->optim_bytes);
    NUM(mem, "ema", m->ema_bytes);
    NUM(mem, "lowPrecisionWeights", m->lowp_bytes);
    NUM(mem, "gatheredUnits", m->unit_bytes);
    NUM(mem, "activations", m->activation_bytes);
    NUM(mem, "activationsCheckpointed", m->activation_ckpt_bytes);
    NUM(mem, "activationsNotCheckpointed", m->activation_nockpt_bytes);
    NUM(mem, "workspace", m->workspace_bytes);
    NUM(mem, "collectiveBuffers", m->collective_bytes);
    NUM(mem, "gpuBuffers", m->gpu_buffer_bytes);
    NUM(mem, "backend", m->backend_bytes);
    NUM(mem, "batchAndStaging", m->batch_bytes);
    NUM(mem, "loaderQueue", m->loader_bytes);
    NUM(mem, "reserve", m->reserve_bytes);
    NUM(mem, "total", m->total_bytes);
    cJSON_AddItemToObject(o, "memoryPerRank", mem);
    NUM(tm, "flopsPerStep", p->flops_per_step);
    NUM(tm, "flopsPerSecondPerRank", p->flops_per_s);
    cJSON_AddStringToObject(tm, "rateSource", p->rate_source);
    NUM(tm, "computeSeconds", p->compute_s);
    if (p->gpu_host_s > 0) {
        cJSON *parts = cJSON_AddObjectToObject(tm, "gpuComputeSeconds");
        if (parts) {
            NUM(parts, "matmuls", p->gpu_matmul_s);
            NUM(parts, "attention", p->gpu_attention_s);
            NUM(parts, "memoryBound", p->gpu_memory_s);
            NUM(parts, "launches", p->gpu_launch_s);
            NUM(parts, "upload", p->gpu_upload_s);
            NUM(parts, "host", p->gpu_host_s);
        }
    }
    NUM(tm, "collectiveBytesPerRank", p->comm_bytes);
    NUM(tm, "busBytesPerSecond", p->bus_bytes_per_s);
    cJSON_AddStringToObject(tm, "busSource", p->bus_source);
    NUM(tm, "collectiveSeconds", p->comm_s);
    NUM(tm, "collectiveBandwidthSeconds", p->comm_bw_s);
    NUM(tm, "collectiveCalls", p->comm_calls);
    NUM(tm, "collectiveSecondsPerCall", p->call_s);
    cJSON_AddStringToObject(tm, "callSource", p->call_source);
    NUM(tm, "collectiveLatencySeconds", p->comm_lat_s);
    NUM(tm, "optimizerParamsPerRank", p->optim_params);
    NUM(tm, "optimizerSecondsPerParam", p->optim_s_per_param);
    cJSON_AddStringToObject(tm, "optimizerSource", p->optim_source);
    NUM(tm, "optimizerSeconds", p->optim_s);
    NUM(tm, "stepSeconds", p->step_s);
    NUM(tm, "imagesPerSecond", p->images_per_s);
    cJSON_AddItemToObject(o, "time", tm);
    for (int i = 0; i < p->n_changes; i++) {
        cJSON *c = cJSON_CreateObject();
        if (!c) continue;
        cJSON_AddStringToObject(c, "change", p->changes[i].what);
        NUM(c, "totalBytes", p->changes[i].total_bytes);
        cJSON_AddBoolToObject(c, "fits", p->changes[i].fits);
        cJSON_AddItemToArray(ch, c);
    }
    cJSON_AddItemToObject(o, "changes", ch);
    NUM(o, "suggestion", p->suggestion);
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}
