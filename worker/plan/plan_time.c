/* worker/plan/plan_time.c - see plan_time.h. The rates are constants with
 * where they were measured or published (bench/NOTES.md); the
 * collectives' bytes and calls are the strategy's (dp_step_cost).
 * Must not: time anything itself (plan_probe.c measures, the target
 * carries its rates), or tell the strategies apart (dp.h's table does). */
#include "plan_time.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attention_scratch.h"
#include "dp.h"
#include "model.h"
#include "optim.h"

jobplan_unit_flops jobplan_forward_flops(const model_config *mc)
{
    const double S = mc->image_size, P = mc->patch_size, C = mc->channels, D = mc->dim,
                 H = config_mlp_hidden(mc), K = mc->num_classes;
    const double N = floor(S / P) * floor(S / P), T = N + 1;
    return (jobplan_unit_flops){.stem = 2 * N * (C * P * P) * D,
                        .block_mm = 2 * T * (3 * D * D + D * D + 2 * D * H),
                                .block_att = 2 * 2 * T * T * D,
                                .head = 2 * D * K};
}

/* One image's training-step FLOPs, split: the matmuls' and the
 * attention's; 3 x the forward, plus the blocks' forward again when
 * checkpointed. */
static void flops_per_image(const model_config *mc, int ckpt, double *matmul, double *attention)
{
    const jobplan_unit_flops f = jobplan_forward_flops(mc);
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

/* Published figures (SXM parts). The step's rates below were measured on
 * the H100, the first row (gpu_step scales from it); another GPU's are
 * those scaled by its peaks (matmuls, attention) and its memory bandwidth
 * (the memory-bound kernels). */
static const jobplan_gpu gpus[] = {
    {"h100", 80e9, 989.4e12, 66.9e12, 3.35e12, 360e9, 50e9},
    {"h200", 141e9, 989.4e12, 66.9e12, 4.8e12, 360e9, 50e9},
    {"a100", 80e9, 312e12, 19.5e12, 2.04e12, 230e9, 25e9},
    {"v100", 32e9, 125e12, 15.7e12, 0.9e12, 130e9, 12.5e9},
};
/* vitjob's own step on an H100 80GB HBM3 (bench/NOTES.md: `make bench-gpu`'s
 * per-op profile of vit_b16 and vit_l16, and "The plan on a GPU": training
 * runs of fmnist_tiny to vit_l16 against this model), updated from the
 * H200's per-op profiles of issue 42's engine ("The GPU engine with flash
 * attention..."). Per micro-batch of B images, T tokens, width D, depth L:
 * - matmuls (cuBLASLt), 16-bit: 747 TFLOP/s x D / (D + 291), the curve
 *   through the profile's 542 (D 768) and 582 (D 1024); fp32: 50 TFLOP/s;
 * - attention, 16-bit with a head dim the flash kernels take: 141.5
 *   TFLOP/s x T / (T + 257), the curve through the H200's 61.4 (T 197)
 *   and 97.9 (T 577), forward and backward (the H100 has the same peak;
 *   the unfused path there and on the H200 ran at the same 21-22);
 *   otherwise unfused, the (T, T) probabilities in memory: 21 TFLOP/s
 *   16-bit, 15 fp32;
 * - the memory-bound kernels (LayerNorm, GELU, casts): 50 ps per element
 *   of B x T x D x L 16-bit (the H100's 64 for the kernels of then, times
 *   0.777, what the 16-byte GELU and the register LayerNorm forward took
 *   of the old kernels' time on the H200), fp32 100; a third more with
 *   checkpointing; without it, the backward's two LayerNorm recomputes
 *   per block (model.c keeps no LayerNorm output): 6.2 ps per element
 *   more, fp32 12.4 (the H200's register LayerNorm forward, 1.00 ms for
 *   vit_b16's 25 at batch 128, at the H100's memory bandwidth);
 * - launches: 4.5 us each, 47 per block and micro-batch (60 with
 *   checkpointing), 25 more, and 3 for the optimizer (zeroing, the norm,
 *   one multi-tensor AdamW);
 * - the batch's upload from the trainer's pinned buffer, one DMA: 53.6
 *   GB/s (the H200's PCIe Gen5, as the H100 SXM's);
 * - the optimizer step (zeroing, clipping's norm, AdamW): 17 ps per
 *   parameter (the H200's 12, a memory-bound pass, at the H100's memory
 *   bandwidth); and 0.3 ms a step of host work (the loss's and the norm's
 *   reads). */
#define H100_MM_MAX 747e12
#define H100_MM_HALF_DIM 291.0
#define H100_MM_FP32 50e12
#define H100_FLASH_MAX 141.5e12
#define H100_FLASH_HALF_T 257.0
#define H100_ATT 21e12
#define H100_ATT_FP32 15e12
#define H100_ELEM_S 50e-12
#define H100_ELEM_S_FP32 100e-12
#define H100_LN_RECOMPUTE_S 6.2e-12
#define GPU_LAUNCH_S 4.5e-6
#define GPU_LAUNCHES_BLOCK 47
#define GPU_LAUNCHES_BLOCK_CKPT 60
#define GPU_LAUNCHES_MICRO 25
#define GPU_LAUNCHES_OPTIM 3
#define GPU_UPLOAD_BPS 53.6e9
#define H100_OPTIM_S_PER_PARAM 17e-12
#define GPU_STEP_HOST_S 0.3e-3
/* bench/NOTES.md: the CPU collectives' bus bandwidth, 2 ranks on loopback
 * on the development machine (reduce-scatter, 16-64 MiB) */
#define CPU_BUS_NOTES 1.1e9

/* A step's compute on GPU g at the rates above, per rank: p's gpu_* parts,
 * compute_s (their sum over the accumulation, and the host's share) and
 * optim_s. */
static void gpu_step(const model_config *mc, const jobplan_gpu *g, precision_mode prec, int ckpt,
                     jobplan *p)
{
    const double S = mc->image_size, P = mc->patch_size, C = mc->channels, D = mc->dim,
                 L = mc->depth, B = p->micro;
    const double T = floor(S / P) * floor(S / P) + 1;
    const jobplan_gpu *h100 = &gpus[0]; /* the rates were measured there */
    const int fp32 = prec == PRECISION_FP32;
    const double mm_rate = fp32 ? H100_MM_FP32 * g->peak32 / h100->peak32
                                : H100_MM_MAX * D / (D + H100_MM_HALF_DIM) * g->peak / h100->peak;
    const int flash = !fp32 && mc->heads > 0 && mc->dim % mc->heads == 0 &&
                      att_flash_head_dim(mc->dim / mc->heads, 2);
    const double att_rate = fp32    ? H100_ATT_FP32 * g->peak32 / h100->peak32
                            : flash ? H100_FLASH_MAX * T / (T + H100_FLASH_HALF_T) * g->peak /
                                          h100->peak
                                    : H100_ATT * g->peak / h100->peak;
    const double bw = h100->mem_bw / g->mem_bw; /* > 1: slower than the H100's memory */
    /* one micro-batch's FLOPs, split (jobplan_flops_per_image's count) */
    double mm, att;
    flops_per_image(mc, ckpt, &mm, &att);
    mm *= B, att *= B;
    const double elem = (fp32 ? H100_ELEM_S_FP32 : H100_ELEM_S) * B * T * D * L *
                            (ckpt ? 4.0 / 3 : 1) * bw +
                        (ckpt ? 0.0 : (fp32 ? 2 : 1) * H100_LN_RECOMPUTE_S * B * T * D * L * bw);
    const double launches = L * (ckpt ? GPU_LAUNCHES_BLOCK_CKPT : GPU_LAUNCHES_BLOCK) +
                            GPU_LAUNCHES_MICRO;
    p->gpu_matmul_s = p->accum * mm / mm_rate;
    p->gpu_attention_s = p->accum * att / att_rate;
    p->gpu_memory_s = p->accum * elem;
    p->gpu_launch_s = p->accum * launches * GPU_LAUNCH_S;
    p->gpu_upload_s = p->accum * B * C * S * S * sizeof(float) / GPU_UPLOAD_BPS;
    p->gpu_host_s = GPU_STEP_HOST_S;
    p->compute_s = p->gpu_matmul_s + p->gpu_attention_s + p->gpu_memory_s + p->gpu_launch_s +
                   p->gpu_upload_s + p->gpu_host_s;
    p->optim_s_per_param = H100_OPTIM_S_PER_PARAM * bw;
    p->optim_s = (double)p->optim_params * p->optim_s_per_param + GPU_LAUNCHES_OPTIM * GPU_LAUNCH_S;
}

const jobplan_gpu *jobplan_gpu_of(const char *kind)
{
    if (!kind || !*kind) kind = "h100";
    for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++)
        if (strcmp(gpus[i].kind, kind) == 0) return &gpus[i];
    return NULL;
}

void jobplan_time(const vit_job_config *cfg, const jobplan_target *t, const jobplan_gpu *g,
                  jobplan *p)
{
    const training_config *tc = &cfg->training;
    const int world = p->world;
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
                 "bench/NOTES.md: the H200's measured rate, scaled by memory bandwidth");
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
}
