/* worker/train/optim.h - the optimizer step: learning-rate schedule, global
 * gradient-norm clipping and AdamW over the flat parameter buffer.
 *
 * Owns: the fp32 AdamW state (m, v) laid out like the parameters, timm's
 * weight-decay groups (per tensor flag from model.h), the schedule formula,
 * each tensor's lr scale (layerDecay: layer_decay.h), and the table of
 * pieces (each span's part of each tensor: its lr scale, weight decay and
 * bf16 copy) that one adamw_multi call per step updates, made once with the
 * state, with the loss scale's unscale and the clipping coefficient folded
 * in (the gradients are read, not rewritten).
 * Must not: run forward or backward, or know about data.
 */
#ifndef VITJOB_OPTIM_H
#define VITJOB_OPTIM_H

#include <stddef.h>

#include "config.h"
#include "model.h"

typedef struct optim optim;

/* Learning rate of 0-based optimizer step `step` out of `total`:
 * linear warmup base*(step+1)/warmup for step < warmup, then cosine from base
 * to minLr over the remaining steps (or constant). */
double optim_lr_at(const optimizer_config *oc, long step, long total);

/* State for model m; zeroed. *out is the caller's, freed with optim_free.
 * Returns 0 or VJ_ERR_TOO_LARGE (its state cannot be allocated) with a
 * message in err. The state is optim_memory_bytes(n) bytes of backend memory. */
/* Backend bytes of the optimizer state of n parameters (AdamW m and v). */
size_t optim_memory_bytes(size_t n);
int optim_new(optim **out, const vit_model *m, const optimizer_config *oc, long total_steps,
              char *err, size_t errlen);
/* Parameters [lo, hi) of the flat vector, stored from index at of the
 * buffers a step is given: a data-parallel strategy's part (dp.h: grad-op
 * one slice of the model's buffers, full one span per unit of the shard,
 * concatenated). */
typedef struct {
    size_t lo, hi, at;
} optim_span;
/* State for n spans (ascending, disjoint, within the parameter count):
 * the AdamW state is the spans' lengths, concatenated. Frozen tensors
 * (model_set_frozen, before this call) are left out: the state's spans
 * (optim_span_at) are the trainable runs of the spans given, and a frozen
 * parameter has no state, no weight decay and no update. */
int optim_new_spans(optim **out, const vit_model *m, const optimizer_config *oc,
                    long total_steps, const optim_span *spans, int n, char *err, size_t errlen);
/* The number of parameters the state covers. */
size_t optim_num_params(const optim *o);
/* Its spans (checkpoints save and load the state span by span): the count,
 * and span i with where its AdamW state starts in optim_m / optim_v. */
int optim_num_spans(const optim *o);
optim_span optim_span_at(const optim *o, int i, size_t *state_off);
void optim_free(optim *o); /* accepts NULL */

typedef struct {
    double lr;
    double grad_norm; /* before clipping (of the unscaled gradients); NAN while
                       * readback is set */
    int skipped;      /* loss scaling on: the gradients held an inf or a NaN, no update */
    int readback;     /* > 0: grad_norm is still on its way (optim_step_collect) */
} optim_result;

/* fp16-mixed (loss_scale.h), before each step: the gradients hold values
 * scaled by 1/inv_scale; the step multiplies them by inv_scale (fp32, as
 * GradScaler's unscale_) before the clipping, and skips the update
 * (optim_result.skipped; parameters, AdamW state and the low-precision copy
 * untouched) when the global norm it is given is not finite, i.e. any
 * gradient of any rank is inf or NaN after their reduction. AdamW's step
 * count leaves out the `skipped` steps skipped before (torch.optim.AdamW
 * counts the steps it takes). Off (fp32, bf16-mixed) until called: a
 * non-finite gradient is applied, and the loss diverges. */
void optim_set_loss_scale(optim *o, float inv_scale, long skipped);
/* Step `step` (0-based): clip the model's gradients to gradClip (as
 * torch.nn.utils.clip_grad_norm_: coef = clip/(norm+1e-6), at most 1), then
 * AdamW with the scheduled lr. The clipping (and fp16-mixed's unscale)
 * applies to the gradients the update reads: the buffer keeps the values
 * the backward left. m is the model the state was made for.
 *
 * optim_step_queue queues it without waiting for the device: the global sum
 * of squares is summed into backend memory, the clipping coefficient is
 * derived there by the update (ops.h adamw_multi), and the norm comes back
 * to pinned memory; the result's grad_norm is then NAN with readback set,
 * until optim_step_collect(o, &result) waits for that copy and fills it
 * (one step later is fine: two steps' readbacks may be in flight, the
 * third's reuses the first's slot). With loss scaling the verdict decides
 * the step: the norm is read at once (a host wait, as GradScaler's
 * found_inf) and the result is complete. optim_step is the two together. */
optim_result optim_step_queue(optim *o, vit_model *m, const vit_ops *ops, long step);
void optim_step_collect(optim *o, optim_result *r);
optim_result optim_step(optim *o, vit_model *m, const vit_ops *ops, long step);
/* The sum of squares of the gradients of this state's spans in g (the
 * buffer the spans' `at` index; waits for it), and the step with the
 * global sum of squares given (summed over every rank's spans: its norm is
 * the result's at once): clips and updates only the spans, in p and g (the
 * model's buffers, or a shard's); the bf16 copy is written where the model
 * has one (model_params_lp). */
double optim_grad_sq_in(const optim *o, const float *g);
optim_result optim_step_in(optim *o, vit_model *m, const vit_ops *ops, long step, double norm_sq,
                           float *p, float *g);

/* The group tensor t of m is in, as the step applies it: its lr scale
 * (layer_decay_scale; 1 without layerDecay) and its weight decay
 * (weightDecay, or 0 for tensors model.h flags as not decayed). */
void optim_tensor_hparams(const optim *o, const vit_model *m, int t, double *lr_scale,
                          double *weight_decay);

/* The AdamW state, borrowed (for checkpoints). */
float *optim_m(optim *o);
float *optim_v(optim *o);

#endif
