/* worker/train/droppath.h - drop path's (stochastic depth's) masks: which
 * samples drop which residual branch, and by how much the kept ones are
 * scaled (training.dropPath).
 *
 * Owns: the rule, timm's: block l of L drops each of its two residual
 * branches (attention, MLP) of each sample independently with probability
 * rate_l = dropPath * l / (L - 1) (timm's torch.linspace(0, dropPath, L)),
 * and scales a kept branch by 1 / (1 - rate_l); and the draw of the masks
 * from the worker's deterministic random numbers (worker/data/rng.h), a
 * pure function of (seed, step, the sample's place in the step's global
 * batch, block, branch), so that a run, its resume and the same run on
 * another number of ranks or micro-batches drop the same branches.
 * Must not: touch the model (model_set_drop_path takes the scales), read
 * the clock or any state.
 *
 * Layout of masks and scales: depth x 2 x B floats, index
 * (block * 2 + branch) * B + b, branch 0 the attention, 1 the MLP (as
 * model_set_drop_path takes them).
 */
#ifndef VITJOB_DROPPATH_H
#define VITJOB_DROPPATH_H

#include <stdint.h>

/* Block l's drop probability of depth blocks: rate * l / (depth - 1), 0 for
 * depth 1. */
double droppath_rate(double rate, int block, int depth);

/* The scales of given keep masks (keep[i] non-zero: kept): 1/(1 - rate_l)
 * as fp32 where kept, 0 where dropped; 1 wherever rate_l is 0, whatever the
 * mask says (such a branch is never dropped, as timm's Identity). */
void droppath_scales(float *scale, const float *keep, double rate, int depth, int B);

/* The keep masks of B samples, the first at place `first` of step `step`'s
 * global batch (sample b at first + b): sample b keeps branch br of block l
 * when a uniform draw in [0, 1) from the stream (seed, step, first + b, l,
 * br) is below 1 - rate_l. Fills keep (0 or 1) and scale (as
 * droppath_scales); keep may be NULL. */
void droppath_draw(float *scale, float *keep, double rate, int depth, int B, uint64_t seed,
                   long step, long first);

#endif
