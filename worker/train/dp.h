/* worker/train/dp.h - data parallelism as a strategy: how the ranks of a job
 * share the parameters, gradients and optimizer state of one model, and the
 * collectives that keep them one model (training.sharding).
 *
 * Owns: the choice of strategy (dp.c's table) and, through it, the layout
 * of the state across ranks and everything that depends on it: the model
 * options the layout needs (padding, the shard hooks), the memory it takes,
 * the optimizer state of this rank's spans, the collectives after backward
 * (all-reduce, reduce-scatter) and after the update (all-gather), sums over
 * ranks, the range of the flat vector this rank saves in a checkpoint and
 * the state it loads back, what its collectives cost per step (for the
 * planner, worker/plan/), and the moving average of the weights
 * (training.ema, ema.h), which each rank keeps for the parameters whose
 * AdamW state it holds. Three strategies, one file each:
 *   none     (dp_none.c, DDP): every rank holds everything; gradients are
 *            all-reduced and every rank takes the same step;
 *   grad-op  (dp_grad_op.c, ZeRO-2): gradients are reduce-scattered, each
 *            rank updates its slice of the fp32 parameters and AdamW state,
 *            the updated slices are all-gathered;
 *   full     (dp_full.c over fsdp.c, FSDP): each rank holds a shard of the
 *            parameters, gradients and state; units are gathered when the
 *            model computes them and their gradients reduce-scattered.
 * Device-agnostic: every buffer comes from the op table's allocator and every
 * collective from the communicator, gloo on the CPU, NCCL on the GPU.
 * Must not: run the training loop (train.c), compute (model.c, the ops),
 * or touch storage (ckpt/).
 *
 * Without a communicator (one process) the strategy is none, whatever the
 * mode; with one, the mode is honoured at every world size, one included (a
 * single NCCL rank runs every strategy through the same code as many).
 */
#ifndef VITJOB_DP_H
#define VITJOB_DP_H

#include <stddef.h>

#include "ckpt.h"
#include "comm.h"
#include "config.h"
#include "ema.h"
#include "exitcode.h"
#include "model.h"
#include "ops.h"
#include "optim.h"

typedef struct dp dp;

typedef struct {
    comm *comm;                 /* borrowed; NULL: one process alone */
    const vit_ops *ops;         /* the backend the model runs on (borrowed) */
    const model_config *mc;     /* borrowed, outlives the strategy */
    const optimizer_config *oc; /* borrowed, outlives the strategy */
    long total_steps;           /* for the learning-rate schedule */
    sharding_mode mode;         /* training.sharding */
    const ema_config *ema;      /* training.ema (borrowed, outlives the strategy); NULL or
                                 * decay 0: no EMA */
    int freeze_planned;         /* dp_plan only: training.freeze lists tensors */
} dp_options;

/* Memory one rank's state takes, in backend bytes: the fp32 parameters
 * and gradients this rank holds (with the strategy's buffers), its AdamW
 * state and its EMA (0 without); own_bytes is the part the strategy
 * allocates itself, beyond what model_memory_bytes counts for the model
 * options dp_new filled. */
typedef struct {
    size_t param_bytes, grad_bytes, optim_bytes, own_bytes, ema_bytes;
    /* full: of param_bytes + grad_bytes, the slots of gathered units (fsdp.h) */
    size_t unit_bytes;
    /* dp_prepare's staging of the sums over ranks; grad-op with
     * training.freeze: at most this much for the packing (its exact size
     * needs the frozen runs, known at dp_attach) */
    size_t stage_bytes, pack_bytes;
} dp_memory;

/* A step's schedule for dp_probe_schedule: `accum` micro-batches, each
 * unit u of the model (model_unit_bounds) computing fwd_s[u] seconds in
 * the forward and bwd_s[u] in the backward (checkpointing's recompute
 * included), as spins of the calling thread. */
typedef struct {
    int n_units, accum;
    const double *fwd_s, *bwd_s;
    double seconds; /* steps for about this long (at least 3 timed) */
} dp_probe;

/* Whether o->mode's strategy has a schedule of its own for
 * dp_probe_schedule (full: its communication thread overlaps the
 * compute); none and grad-op call on the training thread. */
int dp_has_schedule(sharding_mode mode);

/* One optimizer step as the planner sees it, for dp_step_cost. */
typedef struct {
    int world;       /* ranks */
    int accum;       /* micro-batches per rank and step */
    int units;       /* the model's units (model_unit_bounds) */
    int spans;       /* the optimizer's trainable spans: 1, or 2 with training.freeze (a
                      * bound) */
    size_t n_params; /* the model's parameters */
} dp_step;

/* What one rank's collectives cost per optimizer step under a strategy,
 * as the strategy makes them: the planner's time model
 * (worker/plan/plan_time.c). Each strategy states its own (dp_impl's
 * cost); no bytes and no calls at one rank. */
typedef struct {
    /* the bytes one rank moves, what a collective at bus bandwidth B takes
     * bytes / B for: an all-reduce 2 (W-1)/W of its buffer, a
     * reduce-scatter or an all-gather (W-1)/W */
    double bus_bytes;
    double calls; /* the collective calls, each paying a latency whatever its bytes */
    /* their latency in calls of the kind the planner's call_s is: without
     * a schedule of its own an all-reduce on the training thread (a ring
     * all-reduce is 2 (W-1) steps around the ring, a reduce-scatter or an
     * all-gather W-1, gloo's rings, comm_gloo.cc: half of one); with one,
     * what one of its calls (bytes included) costs beyond the compute it
     * overlaps, each call one */
    double call_units;
    /* dp_has_schedule: the calls run on the strategy's communication thread
     * while the next unit computes (on a GPU the step is then the longer of
     * the compute and the collectives; call_s, timed with the bytes, counts
     * only beyond the bytes' time) */
    int own_schedule;
} dp_cost;

/* The cost of step s's collectives under mode's strategy. */
dp_cost dp_step_cost(sharding_mode mode, const dp_step *s);

/* The name of mode's strategy as training.sharding spells it (static). */
const char *dp_mode_name(sharding_mode mode);
/* The modes whose strategies shard more of a rank's state than mode's,
 * least first (the planner's suggestions): at most max into out; returns
 * how many. */
int dp_modes_sharding_more(sharding_mode mode, sharding_mode *out, int max);

/* The planner's probe (worker/plan/plan_probe.c) of the strategy's own
 * schedule on o->comm (every rank calls it): the strategy's buffers for
 * o->mc and its collectives asked as the model asks them over steps of
 * pr's schedule, the compute spun; then its sync and the loss's and the
 * norm's all-gathers. *exposed_s: the median step's seconds beyond the spins
 * (after one untimed step). 1 when timed, 0 when the strategy has no
 * schedule of its own, -1 with a message. */
int dp_probe_schedule(const dp_options *o, const dp_probe *pr, double *exposed_s, char *err,
                      size_t errlen);

/* Plans the strategy for o and fills the model options it needs
 * (pad_multiple, and under full a placeholder shard: the model then plans
 * no parameters of its own); allocates nothing of the backend's. *out is
 * the caller's (dp_free). VJ_ERR_OUT_OF_MEMORY with a message. */
vj_err dp_new(dp **out, const dp_options *o, model_options *mo, char *err, size_t errlen);
/* Frees the strategy, its buffers and its optimizer state (not the model).
 * Accepts NULL. */
void dp_free(dp *d);

/* The strategy's name as training.sharding spells it ("none", "grad-op",
 * "full"): what a checkpoint records. Static string. */
const char *dp_name(const dp *d);
/* What this rank's state takes, for n_params parameters (planned: valid
 * after dp_new). */
dp_memory dp_memory_of(const dp *d, size_t n_params);

/* The plan of rank `rank` of `world` ranks, without a communicator and
 * without allocating anything of the backend's: the strategy o->mode would
 * run (with honour_mode 0 and world 1, none, as a process without a
 * communicator runs), the model options it fills into *mo (whose other
 * fields the caller set, as for dp_new), the model's memory under them at
 * max_batch (model_memory_plan) and the strategy's (dp_memory_of, with
 * stage_bytes and pack_bytes). The same code as dp_new, dp_prepare and
 * dp_memory_of: the planner's and the memory check's source
 * (worker/plan/plan_memory.h). *mode: the mode whose strategy that is
 * (dp_mode_name, dp_step_cost). VJ_ERR_OUT_OF_MEMORY or VJ_ERR_CONFIG with
 * a message. */
vj_err dp_plan(const dp_options *o, int world, int rank, int honour_mode, int max_batch,
               model_options *mo, model_memory *mm, dp_memory *dm, sharding_mode *mode,
               char *err, size_t errlen);

/* Allocates the strategy's buffers and sets the model options' hooks (full:
 * the shard); call after dp_new and before model_new. VJ_ERR_TOO_LARGE when
 * the backend cannot allocate them. */
vj_err dp_prepare(dp *d, model_options *mo, char *err, size_t errlen);
/* The model built with those options (borrowed; it outlives the strategy's
 * use of it) with its first weights: creates this rank's optimizer state
 * and, with training.ema, its EMA (starting from those weights), and logs
 * the layout (event=shard). */
vj_err dp_attach(dp *d, vit_model *m, char *err, size_t errlen);

/* Before a step's micro-batches: every gradient this rank accumulates into
 * is zeroed. */
void dp_zero_grads(dp *d);
/* After a step's or an evaluation's forward and backward passes: waits for
 * the collectives the model's passes started (full). VJ_ERR_PEER_LOST. */
vj_err dp_sync(dp *d, char *err, size_t errlen);
/* The update of optimizer step `step` (0-based) from the gradients of this
 * rank's micro-batches: the collectives that make them the global batch's,
 * the clipping by the global norm and AdamW over this rank's spans, and
 * whatever brings every rank's parameters up to date; then the EMA of this
 * rank's spans (no communication). VJ_ERR_PEER_LOST. */
vj_err dp_update(dp *d, long step, optim_result *res, char *err, size_t errlen);
/* The update is queued without a host wait where it can be (none, bf16 and
 * fp32: optim_step_queue): res->grad_norm may still be on its way
 * (res->readback); this waits for it and fills it. */
void dp_collect(dp *d, optim_result *res);
/* fp16-mixed: the loss scale of the next dp_update (optim_set_loss_scale:
 * the gradients are unscaled by inv_scale; a step whose reduced gradients
 * hold an inf or a NaN is skipped alike on every rank, res->skipped). */
void dp_set_loss_scale(dp *d, float inv_scale, long skipped);
/* v (n doubles, host memory) = the sum over ranks of every rank's v, in
 * rank order (bit-identical on every rank, and to v alone with one rank).
 * n <= 8. VJ_ERR_PEER_LOST or VJ_ERR_OUT_OF_MEMORY. */
vj_err dp_sum(dp *d, double *v, int n, char *err, size_t errlen);
/* all (world x n doubles, host memory) = every rank's v (n doubles), in rank
 * order; with one rank, v. n <= 8. VJ_ERR_PEER_LOST or VJ_ERR_OUT_OF_MEMORY. */
vj_err dp_gather(dp *d, const double *v, int n, double *all, char *err, size_t errlen);

/* Whether the strategy keeps an EMA of the weights (training.ema). */
int dp_has_ema(const dp *d);
/* on = 1: the EMA weights into the model, every rank's, in place of the
 * weights (for an evaluation or the export); on = 0: the weights back, bit
 * for bit. A collective under grad-op (every rank calls it); nothing without
 * an EMA or when already so. No step, checkpoint or load may come between
 * on and off. VJ_ERR_PEER_LOST. */
vj_err dp_use_ema(dp *d, int on, char *err, size_t errlen);

/* This rank's part of a checkpoint: the segments of the flat vector it
 * saves with where their parameters, AdamW state and EMA (NULL without)
 * are (every parameter is saved by exactly one rank). *segs malloc'd (the
 * caller frees); returns the count, or -1 out of memory. */
int dp_segments(dp *d, ckpt_segment **segs);
/* Loads this rank's state from a checkpoint step (ckpt_resume's loader):
 * every parameter (the model keeps what this rank needs), then the AdamW
 * state and EMA of this rank's spans, each block's CRC checked as it is
 * read. A step saved without an EMA starts the EMA from its weights
 * (logged, event=ema_from_weights). */
ckpt_status dp_load(dp *d, ckpt_store *store, const ckpt_manifest *man, char *err,
                    size_t errlen);
/* The ranks other than 0 at the export: whatever they must take part in
 * for rank 0 to read every parameter (full: the gathers). VJ_ERR_PEER_LOST
 * or VJ_ERR_OUT_OF_MEMORY. */
vj_err dp_export_part(dp *d, char *err, size_t errlen);

#endif
