/* kernels/ops.h - the math of the ViT, one table of ops.
 *
 * Owns: the signature of every op the model calls. The model code
 * (worker/train/model.c) is written once against `vit_ops`; each backend fills the
 * table: the CPU reference (kernels/NAME.c, C + CBLAS) and CUDA (kernels/NAME.cu,
 * cuBLASLt + kernels), each in fp32, bf16-mixed and fp16-mixed, with the same
 * names and argument order. The model never touches memory the ops own except through
 * alloc/upload/download.
 * Must not: allocate memory inside an op; every buffer is passed in by the
 * caller, through the backend's alloc (a backend may keep a fixed workspace
 * of its own, e.g. cuBLASLt's).
 *
 * Conventions (llm.c's): outputs first, then const inputs, then sizes.
 * Shapes are in the comments, row-major. B = batch, T = tokens (1 + N
 * patches), D = width, NH = heads, H = MLP hidden, K = classes.
 * Gradient semantics, fixed for every backend:
 *   - parameter gradients (dw, db, ...) are ACCUMULATED (+=), so micro-batches
 *     add up without extra work;
 *   - `layernorm_backward` ACCUMULATES into dinp (the residual-stream
 *     gradient; the residual add's own backward is that shared buffer);
 *   - every other input gradient is OVERWRITTEN.
 * Reductions are deterministic: the same inputs and thread count give the
 * same bits.
 */
#ifndef VITJOB_OPS_H
#define VITJOB_OPS_H

#include <stddef.h>

#define VIT_LN_EPS 1e-6f

/* floatX: a tensor that bf16-mixed stores in bf16 and fp16-mixed in IEEE
 * half (matmul inputs and outputs, q/k/v, the attention's output, GELU in
 * and out, logits and the activation gradients between them). Declared
 * float, the CPU's storage: the CPU backends keep fp32 storage (cpu-bf16
 * rounds every floatX it writes to bf16, cpu-fp16 to half, nearest even);
 * the cuda-bf16 backend stores __nv_bfloat16 at the address, cuda-fp16
 * __half. So never index a floatX buffer outside a backend: offsets and
 * sizes go through vit_ops.floatx_bytes. Tensors declared float are fp32 on
 * every backend (the residual stream, LayerNorm statistics and weights,
 * master parameters, gradients, optimizer state, losses). */
typedef float floatX;

/* One piece of adamw_multi's table: a run of parameters with one lr scale
 * and one weight decay (a tensor, or the part of it inside an optimizer
 * span). Indices are elements of the flat fp32 arrays the call is given. */
typedef struct {
    size_t start;       /* the sum of the lengths of the pieces before it */
    size_t n;           /* its length (0: nothing to do) */
    size_t at;          /* p[at], g[at]: its first parameter and gradient */
    size_t state;       /* m[state], v[state]: its first AdamW moments */
    floatX *p_lp;       /* its first parameter's floatX copy, or NULL: none */
    double lr_scale;    /* its lr is (float)(lr * lr_scale), in double, as
                         * timm's group lr x lr_scale handed to torch */
    float weight_decay; /* decoupled: 0 for the no-decay group */
} adamw_piece;

typedef struct vit_ops {
    const char *name;     /* "cpu", "cpu-bf16", "cpu-fp16", "cuda", "cuda-bf16",
                           * "cuda-fp16" */
    int gpu;              /* 1: the ops run on a GPU and alloc gives device memory */
    int bf16;             /* floatX tensors hold 16-bit values (bf16, or IEEE half
                           * where fp16 is set): the model keeps a 16-bit copy of
                           * the matmul weights */
    int fp16;             /* floatX tensors hold IEEE half values (fp16-mixed: the
                           * loop scales the loss, worker/train/loss_scale.h) */
    size_t floatx_bytes;  /* bytes of one floatX element: 4, or 2 on cuda-bf16 and
                           * cuda-fp16 */

    /* Memory the ops read and write: host memory on the CPU, device memory on
     * CUDA. alloc returns zeroed memory or NULL (out of memory); the caller
     * owns it and gives it back with release (which accepts NULL). upload and
     * download copy to and from host memory. upload returns when the caller
     * may reuse host_src, except from pinned memory (below); the copy into
     * dst is ordered like an op (after the ops queued before it, before
     * those queued after it), and on CUDA it may still be under way (pinned
     * staging, kernels/ops_cuda.cu). download returns when the data is
     * there (it waits for the ops queued before it). */
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    /* Page-locks host memory that is uploaded from again and again (the
     * trainer's batch buffer), so that an upload from it is one DMA with no
     * staging copy; unpin it before freeing it. pin returns 0, or non-zero
     * when it could not (uploads from it then go the usual way: not an
     * error); unpin of memory that pin did not take does nothing, so a
     * caller unpins what it asked to pin either way. On the CPU, pin only
     * notes the range (the CPU twin of the rules below). */
    int (*pin)(void *host, size_t bytes);
    void (*unpin)(void *host);
    /* Pinned host memory of its own (page-locked on a GPU), zeroed, or NULL
     * (out of memory); the caller owns it and gives it back with host_free
     * (which accepts NULL). Small readbacks (a step's losses, its gradient
     * norm) land there without a wait. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *host);
    /* Copies that do not wait for the device (a step queues its work and
     * reads its results one step later):
     *   - an upload from pinned memory (pin, host_alloc) is queued and
     *     returns at once; the copy reads that memory later, so before
     *     writing it again the caller calls wait_host on it;
     *   - an upload from other memory is staged (copied into the backend's
     *     own pinned buffers) and never waits for queued ops either;
     *   - download_async(host_dst, src, bytes) is download queued like an
     *     op: with host_dst in pinned memory it returns at once, and the
     *     bytes are there once wait_host(host_dst) returns; with other
     *     memory it is download (it waits);
     *   - wait_host(host) returns when no copy queued so far reads or
     *     writes the pinned range holding host (at once for other memory,
     *     and always on the CPU, whose copies are done when they return).
     * download, synchronize, sum_squares and a download_async to memory
     * that is not pinned make the host wait for every op queued before
     * them (on CUDA a cudaStreamSynchronize), as do alloc and unpin;
     * host_waits counts those waits since the process started, on every
     * backend alike (the CPU's ops count where CUDA's would wait), so a
     * test can hold a training step to none. */
    void (*download_async)(void *host_dst, const void *src, size_t bytes);
    void (*wait_host)(const void *host);
    unsigned long (*host_waits)(void);
    /* The next batch's upload beside the present step's work:
     *   - upload_ahead(dst, host_src, bytes) is upload, except that on CUDA
     *     the copy runs on a copy engine of its own: it starts once the ops
     *     queued before the last consumed(dst) have finished (at once when
     *     there was none), so it overlaps the ops queued after that, and the
     *     ops queued after upload_ahead see the new bytes. From pinned memory
     *     it returns at once (wait_host before writing host_src again); from
     *     other memory it is upload;
     *   - consumed(dst) says that no op queued after it reads dst's present
     *     bytes (the model calls it after patchify, its input's one reader).
     * On the CPU they are upload and nothing. CUDA keeps UPLOAD_AHEAD_MAX
     * destinations; upload_ahead to another one is upload. */
    void (*upload_ahead)(void *dst, const void *host_src, size_t bytes);
    void (*consumed)(const void *dst);
    /* Sticky error: 0 while every op has succeeded; else non-zero with the
     * first failure (file, line, the library's own message) in err. After a
     * failure the ops do nothing; the caller stops and exits. */
    int (*status)(char *err, size_t errlen);
    /* Waits until every op queued so far has finished (timing, profiling). */
    void (*synchronize)(void);
    /* Bytes of attention scratch for (B,T,D,NH). */
    size_t (*attention_scratch_bytes)(int B, int T, int D, int NH);

    /* Patches of a batch of images, as rows for a matmul (im2col without
     * overlap). img (B,C,S,S) fp32 -> patches (B*N, C*P*P), N = (S/P)^2, patch
     * index n = py*(S/P)+px, column c*P*P + ky*P + kx (Conv2d weight order). */
    void (*patchify)(floatX *patches, const float *img, int B, int C, int S, int P);

    /* out (N,OC) = inp (N,IC) @ w^T (w is (OC,IC)) + bias (OC, may be NULL). */
    void (*matmul_forward)(floatX *out, const floatX *inp, const floatX *w, const floatX *bias,
                           int N, int IC, int OC);
    /* out (N,OC) = res (N,OC) + inp @ w^T + bias, all in fp32 (the product is
     * not rounded before the residual add); bias (OC) fp32, may be NULL;
     * out may be res. The residual branch's last matmul fused with the add. */
    void (*matmul_forward_residual)(float *out, const floatX *inp, const floatX *w,
                                    const float *bias, const float *res, int N, int IC, int OC);
    /* dinp (N,IC) = dout @ w (overwritten; skipped if dinp is NULL),
     * dw (OC,IC) += dout^T @ inp, dbias (OC) += sum_rows dout (each skipped
     * if NULL: a frozen parameter, training.freeze). */
    void (*matmul_backward)(floatX *dinp, float *dw, float *dbias, const floatX *dout,
                            const floatX *inp, const floatX *w, int N, int IC, int OC);

    /* x (B,T,D): x[b,0] = cls + pos[0]; x[b,1+n] = patch_out[b,n] + pos[1+n].
     * patch_out (B,T-1,D), cls (D), pos (T,D). */
    void (*embed_forward)(float *x, const floatX *patch_out, const float *cls, const float *pos,
                          int B, int T, int D);
    /* dpatch_out (B,T-1,D) overwritten; dcls (D), dpos (T,D) accumulated. */
    void (*embed_backward)(floatX *dpatch_out, float *dcls, float *dpos, const float *dx,
                           int B, int T, int D);

    /* LayerNorm over the last dim, eps VIT_LN_EPS, fp32 statistics.
     * inp (N,C) -> out (N,C), mean (N), rstd (N); w, b (C). */
    void (*layernorm_forward)(floatX *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    /* dinp (N,C) +=, dw (C) +=, db (C) +=; dw and db both NULL: only dinp
     * (a frozen LayerNorm, training.freeze). dinp_x (N,C), unless NULL:
     * overwritten with dinp's new value as floatX, the bits to_floatx would
     * give from it (the residual gradient as the next matmul backward reads
     * it, written in the same pass instead of a to_floatx pass of its own). */
    void (*layernorm_backward)(float *dinp, floatX *dinp_x, float *dw, float *db,
                               const floatX *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C);

    /* Non-causal multi-head self-attention on timm's qkv layout:
     * qkv (B,T,3D) with q at [0,D), k at [D,2D), v at [2D,3D), head h at
     * columns h*hd..h*hd+hd-1 of each, hd = D/NH, scale hd^-0.5. What it
     * keeps for the backward is FlashAttention's: the output and one fp32
     * log-sum-exp per query row, never the (T,T) probabilities.
     * out (B,T,D) floatX (heads concatenated); lse (B,NH,T) fp32, row
     * (b,h,i): m + log(sum_j exp(s_j - m)), s_j = scale q_i.k_j, m = max_j s_j.
     * The probabilities are P_ij = exp(s_ij - lse_i) in both passes (the
     * forward's P.V and the backward's recomputation, from the same S
     * product, the same formula: the backward's P is the forward's).
     * Precision, on every backend: S, lse, the row sums, dP and D_i are
     * fp32; P is used as floatX (rounded to bf16 or half where floatX is:
     * the forward's P.V, the backward's dV and dS read that rounded P), and
     * dS is rounded to floatX before dQ and dK (the GPU's GEMMs take 16-bit
     * operands); the score scale is the dQ and dK products' factor, applied
     * after that rounding. The CUDA flash kernels (bf16- and fp16-mixed,
     * hd 32..128 a multiple of 8: kernels/flash_attention.cuh) keep this
     * within floatX rounding, not bit for bit: the forward's online softmax
     * rounds exp(s - m) with the running row max m for P.V and divides by
     * the row sum at the end, and the backward forms dS from the fp32 P
     * (P rounded to floatX only for dV).
     * scratch: attention_scratch_bytes(B,T,D,NH) bytes, the backend's own;
     * nothing in it outlives a call. */
    void (*attention_forward)(floatX *out, float *lse, void *scratch, const floatX *qkv, int B,
                              int T, int D, int NH);
    /* dqkv (B,T,3D) overwritten, from dout (B,T,D) and the forward's out
     * and lse (FlashAttention-2's backward): P recomputed as above, D_i =
     * sum_e dout_ie out_ie (= rowsum(P * dP)), dV = P^T dout, dP = dout V^T,
     * dS = P * (dP - D_i), dQ = scale dS K, dK = scale dS^T Q. Deterministic,
     * no float atomics; scratch as for the forward. */
    void (*attention_backward)(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                               const floatX *out, const float *lse, int B, int T, int D, int NH);

    /* Exact GELU: 0.5 x (1 + erf(x / sqrt 2)), elementwise over n. */
    void (*gelu_forward)(floatX *out, const floatX *inp, size_t n);
    /* dinp = dout * gelu'(inp), overwritten; dinp may be dout. */
    void (*gelu_backward)(floatX *dinp, const floatX *inp, const floatX *dout, size_t n);

    /* x (n) = 0. */
    void (*zero)(float *x, size_t n);
    /* out (n) = in stored as floatX (rounded to bf16 or half where floatX is). */
    void (*to_floatx)(floatX *out, const float *in, size_t n);
    /* out (n) = in as fp32 (exact). */
    void (*to_float)(float *out, const floatX *in, size_t n);

    /* Rows of a strided tensor: out (B,D) = x[b, 0, :] for x (B,T,D). */
    void (*gather_cls)(float *out, const float *x, int B, int T, int D);
    /* dx (B,T,D): dx[b,0,:] += dcls[b,:], other rows untouched. */
    void (*scatter_cls_backward)(float *dx, const float *dcls, int B, int T, int D);

    /* Softmax cross-entropy in fp32. logits (B,K), targets (B) in [0,K) ->
     * losses (B) = -log softmax(logits)[target], probs (B,K). */
    void (*crossentropy_forward)(float *losses, float *probs, const floatX *logits,
                                 const int *targets, int B, int K);
    /* dlogits (B,K) = (probs - onehot(target)) * dloss, overwritten;
     * dloss is d(total loss)/d(each sample's loss), e.g. 1/global_batch. */
    void (*crossentropy_backward)(floatX *dlogits, const float *probs, const int *targets,
                                  float dloss, int B, int K);

    /* Sum of squares of g (n), deterministic (fixed partition, double
     * partials, no atomics); waits for the result. */
    double (*sum_squares)(const float *g, size_t n);
    /* The same sum, queued, into *acc (one double of this backend's
     * memory): add 0 stores it, add 1 adds it to *acc (a gradient norm over
     * several spans, in span order: 0.0 + s0 + s1 ..., the host loop's
     * bits). Never waits. */
    void (*sum_squares_into)(double *acc, const float *g, size_t n, int add);
    /* g *= s, elementwise. */
    void (*scale)(float *g, float s, size_t n);
    /* dst (n) = src, fp32, buffers of this backend that do not overlap
     * (a shard's chunk into a unit buffer). */
    void (*copy)(float *dst, const float *src, size_t n);
    /* y (n) += x, elementwise, fp32 (a reduce-scattered chunk into the
     * gradient shard). */
    void (*add)(float *y, const float *x, size_t n);

    /* One AdamW step on fp32 master params (PyTorch's torch.optim.AdamW):
     * p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps).
     * t is the 1-based step count. With p_lp non-NULL the new p is also
     * stored there as floatX (the matmuls' bf16 copy), in the same pass. */
    void (*adamw_update)(float *p, floatX *p_lp, float *m, float *v, const float *g, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         long t);

    /* Softmax cross-entropy against soft targets (mixup, cutmix, label
     * smoothing), fp32. logits (B,K), targets (B,K) fp32, each row a
     * distribution (>= 0, summing to 1) -> losses (B) = -sum_k
     * targets[b,k] log softmax(logits)[b,k], probs (B,K). */
    void (*crossentropy_soft_forward)(float *losses, float *probs, const floatX *logits,
                                      const float *targets, int B, int K);
    /* dlogits (B,K) = (probs - targets) * dloss, overwritten (the gradient
     * of the loss above where each target row sums to 1). */
    void (*crossentropy_soft_backward)(floatX *dlogits, const float *probs, const float *targets,
                                       float dloss, int B, int K);

    /* Drop path (stochastic depth) on a residual branch, per sample, fp32:
     * out (B,n) = res + scale[b] * branch (the product rounded to fp32, then
     * added), scale (B) = mask / keep probability; out may be res. */
    void (*droppath_forward)(float *out, const float *res, const float *branch,
                             const float *scale, int B, size_t n);
    /* dbranch (B,n) = scale[b] * dout (the residual's gradient), stored as
     * floatX, overwritten. */
    void (*droppath_backward)(floatX *dbranch, const float *dout, const float *scale, int B,
                              size_t n);
    /* The moving average of the weights (training.ema): ema (n) =
     * lerp(ema, p, w) as torch.Tensor.lerp_ computes it in fp32 (timm's
     * ModelEmaV3 calls it with w = 1 - decay): w < 0.5: ema + w (p - ema);
     * else p - (p - ema) (1 - w); each operation rounded on its own, the same
     * bits on every backend. w = 1 copies p; w = 0 leaves ema. */
    void (*ema_update)(float *ema, const float *p, size_t n, float w);
    /* a (n) <-> b (n), fp32 buffers of this backend that do not overlap (the
     * EMA weights into the parameters for an evaluation, and back). */
    void (*swap)(float *a, float *b, size_t n);

    /* adamw_update over a table of pieces, in one pass (one launch on a
     * GPU): for each piece, AdamW on p[at..at+n), m and v[state..state+n)
     * with lr (float)(lr * lr_scale), its weight decay and its p_lp, every
     * per-element operation as adamw_update's. The gradient used is
     * (g * unscale) * clip, each product rounded to fp32 (the old in-place
     * passes: the loss scale's unscale_, then the clipping coefficient); g
     * itself is only read. The clipping coefficient is derived on the
     * device from the global sum of squares *norm_sq (this backend's
     * memory, e.g. sum_squares_into's; NULL or grad_clip <= 0: clip = 1)
     * as adamw_clip_factor below computes it, so the host never reads the
     * norm before the update. pieces (np) is a table in this backend's
     * memory (alloc, upload: made once, it holds no step's values), sorted
     * by start, start the prefix sum of n, total the sum of every n. Pieces
     * do not overlap in p, m, v or p_lp. t as adamw_update. */
    void (*adamw_multi)(float *p, float *m, float *v, const float *g, const adamw_piece *pieces,
                        int np, size_t total, double lr, float unscale, const double *norm_sq,
                        double grad_clip, float beta1, float beta2, float eps, long t);
} vit_ops;

/* The CPU reference backend (fp32); borrowed, static lifetime. */
const vit_ops *ops_cpu(void);
/* The CPU backend emulating bf16-mixed: the same ops, every floatX output
 * rounded to bf16 (nearest even) where the GPU stores bf16. Borrowed. */
const vit_ops *ops_cpu_bf16(void);
/* The CPU backend emulating fp16-mixed: the same ops, every floatX output
 * rounded to IEEE half (nearest even, subnormals, overflow to infinity)
 * where the GPU stores __half. Borrowed. */
const vit_ops *ops_cpu_fp16(void);
/* Storage of the floatX tensors: what ops_cuda is asked for. */
enum { OPS_FP32 = 0, OPS_BF16 = 1, OPS_FP16 = 2 };
/* OR-ed into ops_cuda's storage: the table whose attention is always the
 * unfused cuBLAS path, never the flash kernels (kernels/attention.cu), with
 * that path's scratch size; for tests and benchmarks that compare the two
 * (its name ends in "-unfused"). */
enum { OPS_UNFUSED_ATTENTION = 16 };
/* OR-ed into ops_cuda's storage instead: the table whose flash kernels copy
 * their tiles through registers, not with cp.async (the same bits; for the
 * benchmark that times the two and the test that compares them; its name
 * ends in "-flash-sync"; fp32, which has no flash path, gets its table). */
enum { OPS_FLASH_SYNC_LOADS = 32 };
/* Or instead: the table of the candidate kernels, written and waiting for
 * a GPU's measurement before the trainer takes them (the default tables
 * keep what was measured), for the benchmark and the tests that set them
 * against the default's; its name ends in "-candidates". They differ from
 * the default table in three slots:
 *   - attention_backward: the fused flash backward (kernels/
 *     flash_attention.cuh: S and dP once per tile pair, dQ's per-tile parts
 *     added in a fixed order; dK and dV the default's bits, dQ within
 *     rounding; its scratch, attention_scratch_bytes, holds the parts);
 *     fp32, which has no flash path, keeps the default's;
 *   - matmul_backward: dbias from the dW product's BGRADB epilogue
 *     (cuBLASLt's column sums of dout, added to dbias) where cuBLASLt has
 *     an algorithm for the problem, instead of the column-sum kernels'
 *     second read of dout; within rounding of the default's;
 *   - layernorm_backward: one pass over dout and inp making dinp (and its
 *     floatX copy) and per-block dw/db partials, then their sum, instead of
 *     the dinp kernel and a second read for the partials (kernels/
 *     layernorm.cu), where the register kernels apply; dinp the default's
 *     arithmetic, dw and db within rounding (another summation order). */
enum { OPS_CANDIDATE_KERNELS = 64 };
/* The CUDA backend (kernels/ops_cuda.cu) on the process's current GPU,
 * fp32, bf16-mixed or fp16-mixed (storage: OPS_FP32, OPS_BF16, OPS_FP16,
 * optionally | one of OPS_UNFUSED_ATTENTION, OPS_FLASH_SYNC_LOADS,
 * OPS_CANDIDATE_KERNELS); initialised
 * on first call. NULL,
 * with one line saying why in err, when this build has no CUDA backend or
 * no usable GPU exists.
 * Borrowed, static lifetime. */
const vit_ops *ops_cuda(int storage, char *err, size_t errlen);
/* Peak bytes the CUDA backend has had allocated through alloc (0 on CPU). */
size_t ops_cuda_peak_bytes(void);
/* A step as a CUDA graph, for the benchmark that measures what graphs would
 * save (bench/gpu_bench.c --graph; the trainer does not use it: a captured
 * step keeps its learning rate and bias corrections, adamw_multi's
 * arguments, and its small uploads' ring slots as they were):
 *   OPS_GRAPH_BEGIN   what the ops queue on the compute stream from now on
 *                     is captured, not run (upload_ahead goes in line; an
 *                     upload of 1 MiB or more from unpinned memory fails;
 *                     no host-side event is recorded, so the caller
 *                     synchronizes after each replay and queues nothing
 *                     between the capture and its replays);
 *   OPS_GRAPH_END     ends the capture, instantiates the graph, *nodes (if
 *                     not NULL) its node count;
 *   OPS_GRAPH_REPLAY  queues the captured work again (the same host
 *                     sources, the same pointers);
 *   OPS_GRAPH_FREE    drops the graph.
 * Returns 0, or non-zero with why in err (the op that broke the capture, as
 * the backend recorded it). Without a CUDA backend: non-zero, saying so. */
typedef enum { OPS_GRAPH_BEGIN, OPS_GRAPH_END, OPS_GRAPH_REPLAY, OPS_GRAPH_FREE } ops_graph_op;
int ops_cuda_graph(ops_graph_op op, size_t *nodes, char *err, size_t errlen);
/* The same for the CPU backends (every table of ops_cpu*, together): the
 * bytes their alloc has handed out and not yet released, at most so far
 * (peak) and now (live); the allocator's usable sizes, so a little above
 * what was asked for. */
size_t ops_cpu_peak_bytes(void);
size_t ops_cpu_live_bytes(void);
/* The BLAS the CPU backend runs on, as OpenBLAS describes its build
 * (static string). */
const char *ops_cpu_blas(void);
/* What this build has for GPUs, for --version, without loading anything:
 * "cuda, nccl (plugin PATH)", the plugin missing, or not built. */
void ops_cuda_describe(char *out, size_t len);

/* Sets the CPU backend's thread count (OpenBLAS and OpenMP); 0 = as many
 * as the process may keep busy (lib/sysres.h: affinity and cgroup quota).
 * Returns the count in force. */
int ops_cpu_set_threads(int n);

/* Bytes of attention scratch the CPU backend needs, for all its threads
 * (call after ops_cpu_set_threads). */
size_t ops_cpu_attention_scratch_bytes(int B, int T, int D, int NH);

/* The CPU ops, exported so that tests can call them one by one (fp32). */
void patchify_cpu(float *patches, const float *img, int B, int C, int S, int P);
void matmul_forward_cpu(float *out, const float *inp, const float *w, const float *bias,
                        int N, int IC, int OC);
void matmul_forward_residual_cpu(float *out, const float *inp, const float *w,
                                 const float *bias, const float *res, int N, int IC, int OC);
void matmul_backward_cpu(float *dinp, float *dw, float *dbias, const float *dout,
                         const float *inp, const float *w, int N, int IC, int OC);
void embed_forward_cpu(float *x, const float *patch_out, const float *cls, const float *pos,
                       int B, int T, int D);
void embed_backward_cpu(float *dpatch_out, float *dcls, float *dpos, const float *dx,
                        int B, int T, int D);
void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C);
void layernorm_backward_cpu(float *dinp, float *dinp_x, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C);
void attention_forward_cpu(float *out, float *lse, void *scratch, const float *qkv, int B, int T,
                           int D, int NH);
void attention_backward_cpu(float *dqkv, void *scratch, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int D, int NH);
/* A rounding of n floats, out may be in: round_bf16_cpu, round_fp16_cpu. */
typedef void (*ops_round_fn)(float *out, const float *in, size_t n);
/* The two above with P and dS rounded by rnd where the GPU stores them as
 * floatX (ops.h's attention precision; rnd NULL: fp32, the ops above):
 * the attention of cpu-bf16 and cpu-fp16, whose wrappers round out and
 * dqkv. */
void attention_forward_cpu_lowp(float *out, float *lse, void *scratch, const float *qkv, int B,
                                int T, int D, int NH, ops_round_fn rnd);
void attention_backward_cpu_lowp(float *dqkv, void *scratch, const float *dout, const float *qkv,
                                 const float *out, const float *lse, int B, int T, int D, int NH,
                                 ops_round_fn rnd);
void gelu_forward_cpu(float *out, const float *inp, size_t n);
void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n);
void zero_cpu(float *x, size_t n);
void copy_cpu(float *out, const float *in, size_t n);
void round_bf16_cpu(float *out, const float *in, size_t n);
/* out (n) = in rounded to IEEE half (kernels/fp16.c); out may be in. */
void round_fp16_cpu(float *out, const float *in, size_t n);
void gather_cls_cpu(float *out, const float *x, int B, int T, int D);
void scatter_cls_backward_cpu(float *dx, const float *dcls, int B, int T, int D);
void crossentropy_forward_cpu(float *losses, float *probs, const float *logits,
                              const int *targets, int B, int K);
void crossentropy_backward_cpu(float *dlogits, const float *probs, const int *targets,
                               float dloss, int B, int K);
void crossentropy_soft_forward_cpu(float *losses, float *probs, const float *logits,
                                   const float *targets, int B, int K);
void crossentropy_soft_backward_cpu(float *dlogits, const float *probs, const float *targets,
                                    float dloss, int B, int K);
void droppath_forward_cpu(float *out, const float *res, const float *branch, const float *scale,
                          int B, size_t n);
void droppath_backward_cpu(float *dbranch, const float *dout, const float *scale, int B,
                           size_t n);
double sum_squares_cpu(const float *g, size_t n);
void scale_cpu(float *g, float s, size_t n);
void add_cpu(float *y, const float *x, size_t n);
void adamw_update_cpu(float *p, float *p_lp, float *m, float *v, const float *g, size_t n,
                      float lr, float beta1, float beta2, float eps, float weight_decay, long t);
/* adamw_multi of the fp32 table; rnd non-NULL: each p_lp written is then
 * rounded by it (cpu-bf16, cpu-fp16: as their adamw_update). */
void adamw_multi_cpu(float *p, float *m, float *v, const float *g, const adamw_piece *pieces,
                     int np, size_t total, double lr, float unscale, float clip, float beta1,
                     float beta2, float eps, long t, ops_round_fn rnd);
/* torch.nn.utils.clip_grad_norm_'s coefficient, as the step applies it:
 * the norm sqrt(norm_sq) * unscale (fp16-mixed's unscaled norm; unscale 1
 * otherwise), coef = grad_clip / (norm + 1e-6) in double, then (float)coef
 * where it is below 1, else 1 (a norm of NaN: 1); grad_clip <= 0: 1. Each
 * operation rounded on its own; the CUDA adamw_multi computes the same bits
 * on the device (kernels/adamw.cu). */
float adamw_clip_factor(double norm_sq, float unscale, double grad_clip);
void sum_squares_into_cpu(double *acc, const float *g, size_t n, int add);
void ema_update_cpu(float *ema, const float *p, size_t n, float w);
void swap_cpu(float *a, float *b, size_t n);

#endif
