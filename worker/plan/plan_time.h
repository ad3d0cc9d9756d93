/* worker/plan/plan_time.h - the time of one optimizer step in the plan.
 *
 * Owns: the model's FLOPs (bench/NOTES.md's count), the table of GPUs
 * (memory, published peaks and bandwidths) and the per-op model of a step
 * at the rates measured on an H100 (other GPUs scaled by their peaks), the
 * collectives' bytes and calls per step as the strategy that runs states
 * them (dp_step_cost) at the bus bandwidth and the seconds per call the
 * target gives, and the optimizer step over this rank's parameters.
 * Must not: measure (the probes' rates come in through the target,
 * plan_probe.h), size memory (plan_memory.h), or tell the strategies apart
 * (dp.h's table does).
 */
#ifndef VITJOB_PLAN_TIME_H
#define VITJOB_PLAN_TIME_H

#include "config.h"
#include "jobplan.h"

/* One image's forward FLOPs per unit of the model (model_unit_bounds):
 * the stem's patch embedding, a block's matmuls (qkv, proj, the MLP) and
 * its attention's two products, the head. */
typedef struct {
    double stem, block_mm, block_att, head;
} jobplan_unit_flops;

jobplan_unit_flops jobplan_forward_flops(const model_config *mc);

/* Model FLOPs of one image's training step: 3 x the forward's matmul and
 * attention FLOPs (bench/NOTES.md's count), plus the blocks' forward again
 * with activation checkpointing (ckpt 1). */
double jobplan_flops_per_image(const model_config *mc, int ckpt);

/* A GPU of the table: published figures (SXM parts). */
typedef struct {
    const char *kind;
    double memory;   /* bytes */
    double peak;     /* dense 16-bit tensor FLOP/s, published */
    double peak32;   /* fp32 FLOP/s without tensor cores (vitjob's fp32: no TF32) */
    double mem_bw;   /* device memory bandwidth, bytes/s, published */
    double nvlink;   /* all-reduce bus bandwidth inside a node, bytes/s (published) */
    double network;  /* across nodes, per GPU (a 400/200/100 Gb/s NIC each) */
} jobplan_gpu;

/* The row of kind ("h100", "h200", "a100", "v100"; NULL or "": h100), or
 * NULL when the table has none. Static. */
const jobplan_gpu *jobplan_gpu_of(const char *kind);

/* The time part of p, per optimizer step, on t (g: its GPU's row, NULL on
 * the CPU), once jobplan_make has set p's memory, world, micro-batch and
 * accumulation: the FLOPs, the compute (g's per-op model, or the FLOPs at
 * t's rate), the bus bandwidth, the collectives' bytes and calls, the
 * optimizer step, the step and images per second, and where each rate
 * came from. */
void jobplan_time(const vit_job_config *cfg, const jobplan_target *t, const jobplan_gpu *g,
                  jobplan *p);

#endif
