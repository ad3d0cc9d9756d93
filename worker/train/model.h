/* worker/train/model.h - the Vision Transformer: parameters, activations, forward
 * and backward, written once against the op table (kernels/ops.h).
 *
 * Owns: the flat parameter layout (one fp32 buffer, tensors in timm's
 * state_dict order, block by block: cls_token, pos_embed, patch_embed.*,
 * blocks.0.* ... blocks.L-1.*, norm.*, head.*), the same layout for the
 * gradients, the activation buffers, and the order of ops.
 * Must not: know about data, optimizers, files or processes.
 *
 * Architecture: timm's VisionTransformer exactly (pre-norm blocks, qkv bias,
 * LayerNorm eps 1e-6, class-token pooling, exact GELU, no dropout), so that
 * weights move between the two unchanged; in training, optionally timm's
 * drop path on each residual branch (model_set_drop_path) and a loss
 * against soft targets (model_forward_soft).
 */
#ifndef VITJOB_MODEL_H
#define VITJOB_MODEL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "ops.h"

#define MODEL_MAX_NAME 48

typedef struct {
    char name[MODEL_MAX_NAME]; /* timm's parameter name */
    int ndim;
    int shape[4];
    size_t offset;             /* in floats, into the flat buffer */
    size_t numel;
    int decay;                 /* 1: AdamW weight decay applies (timm's groups) */
    int frozen;                /* 1: training.freeze (model_set_frozen): no gradient */
} model_tensor;

typedef struct vit_model vit_model;

/* Where the parameters live under sharding=full (worker/train/fsdp.h): not in
 * the model but in shards, one unit at a time. A unit is a contiguous
 * range of the flat vector (model_unit_bounds): unit 0 the stem (cls_token,
 * pos_embed, patch_embed), units 1..L the blocks, unit L+1 the final norm
 * and head. The model computes one unit at a time and asks for it: */
typedef struct {
    void *ctx;
    /* Unit u's whole fp32 parameters, laid out as in the flat vector from
     * the unit's first value, for the forward (backward 0) or backward pass
     * (1): borrowed, valid until the next call. Never NULL; after a failed
     * collective its values are stale, and status reports the failure. */
    float *(*params)(void *ctx, int unit, int backward);
    /* A zeroed buffer for unit u's gradients (the same layout), valid until
     * grads_done(u), which hands the gradients of this micro-batch back. */
    float *(*grads)(void *ctx, int unit);
    void (*grads_done)(void *ctx, int unit);
    /* Every parameter into host (n_params floats), from every rank's shard:
     * a collective. 0, or -1 (a collective failed; see status). */
    int (*read)(void *ctx, float *host);
    /* This rank's shard from host (n_params floats): local. */
    void (*write)(void *ctx, const float *host);
} model_shard;

typedef struct {
    int activation_checkpointing; /* keep block inputs only; recompute in backward */
    /* NULL, or a flag (set by a signal handler) checked between blocks:
     * once set, forward and backward return at the next block boundary and
     * model_abandoned says so; the gradients are then partial. */
    const volatile sig_atomic_t *stop;
    /* The flat parameter and gradient buffers hold a multiple of this many
     * floats (the world size), zero beyond n_params, so that collectives
     * can split them into equal chunks. 0 or 1: exactly n_params. */
    int pad_multiple;
    /* NULL, or sharding=full: the parameters and gradients are the shard's
     * (borrowed; outlives the model); the model holds neither, and
     * model_params, model_grads and model_params_lp return NULL. */
    const model_shard *shard;
    /* 1: the model may drop residual branches (model_set_drop_path); it
     * keeps one more (B,T,D) fp32 buffer and the scales. 0: it never does. */
    int drop_path;
} model_options;

/* Builds a model for batches of at most max_batch images, on the backend
 * `ops` (borrowed; it outlives the model): parameters, gradients and
 * activations live in the backend's memory. Parameters and gradients are
 * zeroed; call model_init_random or model_load_safetensors.
 * opts may be NULL (all activations kept). With activation_checkpointing,
 * only each block's input is kept from the forward pass and the backward
 * recomputes the block (one block's activations are allocated instead of
 * depth's); gradients are identical.
 * Precision is the backend's (ops->bf16). In bf16-mixed (FAIR's recipe) the
 * fp32 parameters are the master weights; matmuls read a bf16 copy of their
 * weights and biases (the two matmuls that end a residual branch add their
 * bias in fp32, fused with the residual add); LayerNorm weights and
 * statistics, cls_token, pos_embed, the residual stream and its gradient,
 * parameter gradients and the loss stay fp32; every other activation and
 * activation gradient is floatX (ops.h), i.e. bf16. fp16-mixed (ops->fp16)
 * is the same with IEEE half for bf16; its loss scaling is the loop's.
 * On success *out is the caller's, freed with model_free. Returns 0, or
 * VJ_ERR_TOO_LARGE (the backend could not allocate it; the message gives
 * the bytes) or VJ_ERR_OUT_OF_MEMORY with a message in err. */
int model_new(vit_model **out, const model_config *mc, int max_batch,
              const model_options *opts, const vit_ops *ops, char *err, size_t errlen);
/* The backend bytes model_new would allocate, by part, without allocating
 * them: the planner's (worker/plan/plan_memory.h) and the memory check's one
 * source. */
typedef struct {
    size_t n_params;
    size_t param_bytes;      /* fp32 master parameters, padded (0 under a shard) */
    size_t grad_bytes;       /* their gradients (0 under a shard) */
    size_t lowp_bytes;       /* bf16-mixed's 16-bit copy: every matmul weight, or one
                              * unit's under a shard (floatx_bytes each); 0 in fp32 */
    size_t activation_bytes; /* what the forward keeps for the backward (the batch,
                              * residual streams, every block's activations or, with
                              * checkpointing, one block's, the head) */
    size_t workspace_bytes;  /* the backward's scratch and the attention's */
    size_t total_bytes;      /* the sum: what model_new allocates */
} model_memory;
/* 0, or -1 when out of host memory. */
int model_memory_plan(const model_config *mc, int max_batch, const model_options *opts,
                      const vit_ops *ops, model_memory *out);
/* The backend bytes model_new would allocate (parameters, gradients, the
 * bf16 copy, activations: model_memory_plan's total), and the parameter
 * count in *n_params (may be NULL), without allocating them; 0 when out
 * of host memory. */
size_t model_memory_bytes(const model_config *mc, int max_batch, const model_options *opts,
                          const vit_ops *ops, size_t *n_params);
/* The unit layout of the model mc describes: fills bounds[0..L+2] (unit u
 * is [bounds[u], bounds[u+1]) of the flat vector) when max >= L+3 and
 * returns the number of units, L+2; 0 when out of host memory or max is
 * too small. */
int model_unit_bounds(const model_config *mc, size_t *bounds, int max);
/* The parameter tensors of the model mc describes, without building it:
 * fills out[0..n) (names, shapes, offsets; none frozen) when max >= n and
 * returns n, the tensor count; with out NULL only counts; 0 when out of
 * host memory. */
int model_tensor_names(const model_config *mc, model_tensor *out, int max);
/* NULL, or where the last forward or backward stopped part-way
 * (opts->stop), e.g. "forward pass, before block 3 of 12": borrowed. */
const char *model_abandoned(const vit_model *m);
void model_free(vit_model *m); /* accepts NULL */

/* Dims (borrowed views). */
int model_tokens(const vit_model *m);      /* T = 1 + (S/P)^2 */
int model_num_classes(const vit_model *m);
int model_image_floats(const vit_model *m); /* C*S*S per image */
size_t model_num_params(const vit_model *m);
size_t model_activation_bytes(const vit_model *m);
const vit_ops *model_ops(const vit_model *m);

/* The flat fp32 buffers, in the backend's memory (host memory only on the
 * CPU backends): borrowed, valid until model_free. Hand them to the ops;
 * read or write them from the host through the three copies below. */
float *model_params(vit_model *m);
float *model_grads(vit_model *m);
/* The bf16 copy of tensor t that matmuls read, or NULL (fp32 precision, or
 * a tensor that stays fp32): borrowed, for the optimizer's fused write. */
floatX *model_params_lp(vit_model *m, int t);
/* n_params rounded up to pad_multiple (model_options): the length of the
 * flat buffers, whose tail beyond n_params stays zero. */
size_t model_padded_params(const vit_model *m);
/* Re-derives the bf16 copy from the fp32 parameters (after another rank's
 * updates were gathered into them); nothing on fp32. */
void model_params_refreshed(vit_model *m);
/* Host copies of all n_params values; write_params refreshes the bf16 copy.
 * Under sharding=full read_params is a collective every rank must call
 * (0, or -1 when it failed) and read_grads gives zeros (the gradients are
 * in the shards). */
int model_read_params(vit_model *m, float *host);
void model_write_params(vit_model *m, const float *host);
void model_read_grads(vit_model *m, float *host);
/* The backend's sticky error (ops.h): 0, or non-zero with the message in err. */
int model_status(const vit_model *m, char *err, size_t errlen);
int model_num_tensors(const vit_model *m);
const model_tensor *model_tensor_at(const vit_model *m, int i);
/* Index of a tensor by timm name, or -1. */
int model_find_tensor(const vit_model *m, const char *name);
/* training.freeze (worker/train/freeze.h): frozen[t] (one per tensor)
 * non-zero freezes tensor t from the next backward on. A frozen tensor's
 * gradient is not computed: its slot in the gradient buffer stays as it
 * was (zero after model_zero_grads), except that a LayerNorm whose weight
 * is frozen and bias not (or the reverse), and cls_token / pos_embed when
 * patch_embed trains, still get theirs written there (the optimizer and
 * the collectives ignore frozen slots). The backward stops where nothing
 * before it trains: no input gradient of the lowest layer that trains, no
 * pass at all through the layers below it. Under sharding=full a unit
 * whose tensors are all frozen asks for no gradient buffer (no
 * reduce-scatter). NULL unfreezes everything. */
void model_set_frozen(vit_model *m, const unsigned char *frozen);

/* timm's default init ('' mode): Linear weights trunc-normal std 0.02 and zero
 * bias, LayerNorm weight 1 bias 0, pos_embed trunc-normal 0.02, cls_token
 * normal 1e-6, patch conv like PyTorch's Conv2d default (uniform +-1/sqrt(fan_in)).
 * Deterministic in seed (the same values on every backend). Returns 0, or
 * -1 when host memory for the staging copy runs out. */
int model_init_random(vit_model *m, uint64_t seed);

/* Forward on B <= max_batch images (B,C,S,S), host memory (copied to the
 * backend). With targets (host), computes the per-sample losses and
 * returns their mean; without (NULL), returns 0 and only the logits are
 * valid. */
float model_forward(vit_model *m, const float *images, const int *targets, int B);
/* Forward as model_forward, with the loss against soft targets: targets
 * (host, B x num_classes fp32) holds one distribution per sample (each row
 * >= 0 and summing to 1: mixup, cutmix, label smoothing); sample b's loss is
 * -sum_k targets[b,k] log softmax(logits)[b,k]. Returns their mean over
 * the B samples (as model_forward), or with targets NULL 0 (logits only).
 * model_backward then takes the gradient (softmax - targets) * dloss. */
float model_forward_soft(vit_model *m, const float *images, const float *targets, int B);
/* The training step's forward, queued (ops.h): as model_forward (labels
 * `targets`) or model_forward_soft (rows `soft`), one of the two, with the
 * B per-sample losses copied to losses_to (pinned host memory, ops.h
 * host_alloc) without a wait: they are there once the backend's wait_host
 * on them returns, and model_mean_loss of them is what model_forward
 * returns. images may be pinned memory (pin): wait_host on it before
 * writing it again. */
void model_forward_queue(vit_model *m, const float *images, const int *targets,
                         const float *soft, int B, float *losses_to);
/* The mean of B per-sample losses, as model_forward returns it (summed in
 * double, in order, the quotient rounded to float). */
float model_mean_loss(const float *losses, int B);

/* Drop path (stochastic depth, timm's DropPath) for the next forward of B
 * images and its backward: scale (host, depth x 2 x B floats, index
 * (block * 2 + branch) * B + b, branch 0 the attention, 1 the MLP)
 * multiplies sample b's branch output before its residual add: 0 drops it,
 * 1/(1 - rate) keeps it (worker/train/droppath.h draws them). The scales
 * are copied; the backward and a checkpointed block's recompute use the
 * same ones. One forward only: the forward after it drops nothing unless
 * this is called again, and a forward of another batch size than B drops
 * nothing (evaluation never drops). scale NULL: nothing pending. Returns 0,
 * or -1 when the model was built without model_options.drop_path or B is
 * not in [1, max_batch]. */
int model_set_drop_path(vit_model *m, const float *scale, int B);

/* Logits (B,K) of the last forward, copied to host memory as fp32:
 * borrowed, valid until the next call. */
const float *model_logits(vit_model *m);
/* Per-sample losses (B) of the last forward with targets, host: borrowed. */
const float *model_losses(const vit_model *m);

/* Backward of the last forward (which must have had targets), with
 * d(total loss)/d(each sample loss) = dloss (1 / global batch for a mean).
 * ACCUMULATES into the gradients, so micro-batches add up. */
void model_backward(vit_model *m, float dloss);
void model_zero_grads(vit_model *m);

#endif
