/* worker/train/dp_impl.h - what the strategies of dp.h share: the handle's
 * fields and the table each strategy fills. Included by dp.c and dp_*.c
 * only.
 * Must not: be included by the loop (train.c) or anything outside the
 * strategies: the handle is opaque to them.
 */
#ifndef VITJOB_DP_IMPL_H
#define VITJOB_DP_IMPL_H

#include "dp.h"
#include "fsdp.h"

typedef struct dp_impl {
    const char *name; /* as training.sharding spells it */
    /* how much of a rank's state it splits over the ranks, for the
     * planner's order of suggestions: 0 nothing, 1 the gradients and the
     * optimizer state, 2 the parameters too */
    int shards;
    /* dp_new (may be NULL: the model padded to the world size is all): the
     * layout, the model options it needs; nothing allocated */
    vj_err (*plan)(dp *d, model_options *mo, char *err, size_t errlen);
    dp_memory (*memory)(const dp *d, size_t n_params);
    /* dp_prepare (may be NULL): the buffers, the model's hooks */
    vj_err (*prepare)(dp *d, model_options *mo, char *err, size_t errlen);
    /* dp_attach: the optimizer state of this rank's spans */
    vj_err (*attach)(dp *d, char *err, size_t errlen);
    void (*zero_grads)(dp *d);                             /* may be NULL */
    vj_err (*sync)(dp *d, char *err, size_t errlen);       /* may be NULL */
    vj_err (*update)(dp *d, long step, optim_result *res, char *err, size_t errlen);
    /* the range [lo, hi) of the flat vector this rank saves */
    void (*save_range)(const dp *d, size_t *lo, size_t *hi);
    /* the buffer the optimizer spans' `at` index (backend memory); NULL:
     * the model's parameters */
    float *(*params)(dp *d);
    /* the parameters of this rank's spans changed outside a step (the EMA
     * swapped in or out): whatever brings every rank's model up to date */
    vj_err (*refresh)(dp *d, char *err, size_t errlen);
    vj_err (*export_part)(dp *d, char *err, size_t errlen); /* may be NULL */
    void (*free)(dp *d);                                    /* may be NULL */
    /* dp_probe_schedule (may be NULL: the strategy's calls are on the
     * training thread, with nothing of its own to time) */
    int (*probe)(const dp_options *o, const dp_probe *pr, double *exposed_s, char *err,
                 size_t errlen);
    /* dp_step_cost at s->world > 1: the bytes and calls of its collectives
     * (own_schedule is dp.c's, from probe) */
    dp_cost (*cost)(const dp_step *s);
} dp_impl;

extern const dp_impl dp_none, dp_grad_op, dp_full;

struct dp {
    const dp_impl *impl;
    comm *comm; /* a local communicator of world 1 when none was given */
    int own_comm;
    int rank, world;
    const vit_ops *ops;
    const model_config *mc;
    const optimizer_config *oc;
    long total_steps;
    vit_model *model; /* dp_attach's */
    optim *opt;
    /* the spans of the flat vector this rank's strategy gives it (what it
     * saves in a checkpoint), frozen parameters included; the optimizer's
     * spans are their trainable runs (training.freeze) */
    optim_span *own;
    int n_own;
    int freeze_planned;   /* dp_plan's: training.freeze lists tensors (dp_options) */
    const ema_config *ec; /* NULL: no EMA */
    ema *ema;             /* the EMA of the optimizer's spans (dp_attach's), or NULL */
    int ema_in;           /* dp_use_ema: the EMA is in the parameters, the weights in ema */
    double *stage;      /* dp_sum's world x 8 doubles, backend memory */
    double *stage_host; /* ... and their host copy */
    /* grad-op: this rank's slice [lo, lo + slice) of the padded flat vector */
    size_t slice, lo;
    struct dp_pack *pack; /* grad-op with training.freeze: the trainable runs' packing */
    /* full: the shard, and the model's units (model_unit_bounds) */
    fsdp *fsdp;
    size_t *bounds;
    int units;
};

/* The optimizer state of this rank's spans (copied into d->own): what each
 * strategy's attach calls. */
vj_err dp_optim_new(dp *d, const optim_span *spans, int n, char *err, size_t errlen);

/* The buffer the optimizer spans' `at` index: the shard's, or the model's. */
float *dp_params(dp *d);

/* The sum of squares of every rank's gradients over its spans (g: the
 * buffer the spans' `at` index), summed over ranks: the global norm's
 * square (read on the host: a wait). */
vj_err dp_global_sq(dp *d, const float *g, double *sq, char *err, size_t errlen);

#endif
