/* worker/train/ema.h - the exponential moving average of the weights
 * (training.ema), as timm keeps it: ModelEmaV2 without warmup, ModelEmaV3's
 * decay warmup with it.
 *
 * Owns: the decay schedule, and the fp32 EMA values of the parameters an
 * optimizer state covers, laid out like its AdamW m and v (optim.h: span
 * after span), in the backend's memory; their update after a step, their
 * reset to the weights, and their exchange with the weights.
 * Must not: decide which parameters a rank averages (the optimizer's spans,
 * which the data-parallel strategies choose), communicate, or touch storage.
 *
 * The schedule (n: the optimizer steps done, this one included, 1-based):
 *   warmup off: decay_n = decay; the EMA starts from the weights before the
 *               first step (timm's ModelEmaV2, a copy of the model at
 *               creation, updated with its constant decay);
 *   warmup on:  decay_n = min(decay, 1 - (1 + (n - 1) / gamma)^(-power)) with
 *               gamma = 1, power = 2/3, i.e. min(decay, 1 - n^(-2/3)):
 *               timm's ModelEmaV3(use_warmup=True) with its defaults
 *               (warmup_gamma 1, warmup_power 2/3, min_decay 0,
 *               update_after_step 0) updated with step = n, as timm's
 *               train.py calls it (num_updates counted before the call). The
 *               first update has decay 0: the EMA becomes the weights.
 * The update is ema = lerp(ema, w, 1 - decay_n) (the op ema_update, ops.h),
 * which is decay_n ema + (1 - decay_n) w up to rounding.
 */
#ifndef VITJOB_EMA_H
#define VITJOB_EMA_H

#include <stddef.h>

#include "config.h"
#include "ops.h"
#include "optim.h"

typedef struct ema ema;

/* Whether the config turns the EMA on (decay > 0). */
int ema_enabled(const ema_config *ec);
/* The decay of update n (1-based), as above. */
double ema_decay_at(const ema_config *ec, long n);

/* Backend bytes of the EMA of n parameters. */
size_t ema_memory_bytes(size_t n);
/* The EMA of the parameters o covers (o borrowed: it outlives the EMA),
 * zeroed, in o's backend memory. *out is the caller's (ema_free). Returns 0,
 * or VJ_ERR_TOO_LARGE with a message in err. */
int ema_new(ema **out, const optim *o, const vit_ops *ops, const ema_config *ec, char *err,
            size_t errlen);
void ema_free(ema *e); /* accepts NULL */

/* The EMA values, laid out like optim_m (borrowed, backend memory). */
float *ema_values(ema *e);

/* In each of these, p is the buffer the optimizer's spans' `at` index (the
 * model's parameters, or a shard's), backend memory. */
/* ema = p over the spans (the start, or a checkpoint without an EMA). */
void ema_reset(ema *e, const float *p);
/* After optimizer step `step` (0-based): the update with decay_{step + 1}. */
void ema_update(ema *e, const float *p, long step);
/* Exchanges the EMA and p over the spans; twice restores both, bit for bit. */
void ema_swap(ema *e, float *p);

#endif
