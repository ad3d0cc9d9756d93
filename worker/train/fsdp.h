/* worker/train/fsdp.h - fully sharded data parallelism (training.sharding=full,
 * FSDP as in the FAIR large-ViT recipe): this rank's shard of the
 * parameters and gradients, and the collectives that bring one unit
 * (model.h: the stem, a block, the head) whole when the model computes it.
 *
 * Owns: the shard layout (every unit padded to a multiple of the world
 * size and cut into equal chunks; rank r holds chunk r of every unit, the
 * chunks concatenated: its shard of fp32 master parameters and of
 * gradients), two parameter slots and two gradient slots the size of the
 * largest unit, and one communication thread that runs the gathers and
 * reduce-scatters in the order they were asked for, so that the next
 * unit's gather (prefetch) and the last unit's reduce-scatter overlap the
 * current unit's compute. The model reaches it through model_shard (the
 * hooks fsdp_hooks returns).
 * Must not: compute (model.c), update weights (optim.c, on the shard's
 * buffers), or call the communicator from two threads at once: between
 * fsdp_sync and the next forward, the caller may use the communicator.
 *
 * Schedule: parameters are gathered for the forward and again for the
 * backward of each unit (reshard after forward), except that the unit a
 * pass ends with is kept for the pass that starts with it (the head from
 * forward to backward, the stem from one micro-batch's backward to the
 * next one's forward), until fsdp_params_changed. Each unit's gradients are
 * reduce-scattered as soon as its backward is done and added into the
 * gradient shard, so that micro-batches accumulate there. All ranks issue
 * the same collectives in the same order; sums are in a fixed order.
 * Device-agnostic: the shard and the slots are the backend's memory (alloc,
 * zeroed), moved and added by its ops (copy, add, zero, upload, download),
 * and the collectives are the communicator's (gloo on host memory, NCCL on
 * device memory; on the GPU every op queued after a collective waits for
 * it, so a collective "finished" on the communication thread is one queued
 * in order before the ops that use its result).
 */
#ifndef VITJOB_FSDP_H
#define VITJOB_FSDP_H

#include <stddef.h>

#include "comm.h"
#include "model.h"
#include "ops.h"

typedef struct fsdp fsdp;

/* A shard for this rank of comm's ranks, of n_units units with the bounds
 * model_unit_bounds gives (n_units + 1 values, copied). Starts the
 * communication thread. *out is the caller's (fsdp_free). Returns 0, or
 * VJ_ERR_TOO_LARGE / VJ_ERR_OUT_OF_MEMORY with a message in err. */
int fsdp_new(fsdp **out, comm *c, const vit_ops *ops, const size_t *bounds, int n_units,
             char *err, size_t errlen);
/* Waits for the communication thread to finish what it runs (each
 * collective ends within the collective timeout) and frees. Accepts NULL. */
void fsdp_free(fsdp *f);

/* The model's hooks (model_options.shard): borrowed, valid until fsdp_free. */
const model_shard *fsdp_hooks(fsdp *f);

/* Backend bytes fsdp_new allocates for these bounds and world size, split
 * into parameters (shard and slots) and gradients (shard and slots). */
void fsdp_memory_bytes(const size_t *bounds, int n_units, int world, size_t *param_bytes,
                       size_t *grad_bytes);
/* Of those, the two parameter and two gradient slots that hold gathered
 * units (the largest unit, padded), all four together. */
size_t fsdp_slot_bytes(const size_t *bounds, int n_units, int world);
/* The shard's length in floats for these bounds and world size (what
 * fsdp_shard_len will say), before any fsdp_new. */
size_t fsdp_planned_shard_len(const size_t *bounds, int n_units, int world);

/* The shard: its length in floats, and the spans of the flat vector it
 * holds (one per unit, without the padding), for optim_new_spans: fills
 * lo, hi, at of n_units spans (arrays of the caller's). */
size_t fsdp_shard_len(const fsdp *f);
void fsdp_shard_spans(const fsdp *f, size_t *lo, size_t *hi, size_t *at);
/* The shard's fp32 parameters and accumulated gradients (borrowed). */
float *fsdp_params(fsdp *f);
float *fsdp_grads(fsdp *f);

/* Zeroes the gradient shard (waits for reduce-scatters in flight first). */
void fsdp_zero_grads(fsdp *f);
/* The shard's parameters changed (an optimizer step): gathered units are
 * stale. */
void fsdp_params_changed(fsdp *f);
/* Waits until every collective asked for has finished. 0, or -1 with the
 * first failure in err (the shard is then unusable: every later call
 * fails the same way). */
int fsdp_sync(fsdp *f, char *err, size_t errlen);

#endif
