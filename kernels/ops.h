/* kernels/ops.h - the math of the ViT, one table of ops.
 *
 * Owns: the signature of every op the model calls. The model code
 * (worker/model.c) is written once against `vit_ops`; each backend fills the
 * table: the CPU reference (kernels/NAME.c, C + CBLAS) now, CUDA (kernels/NAME.cu)
 * with the same names and argument order.
 * Must not: allocate memory; every buffer is passed in by the caller.
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

typedef struct vit_ops {
    const char *name;

    /* Patches of a batch of images, as rows for a matmul (im2col without
     * overlap). img (B,C,S,S) -> patches (B*N, C*P*P), N = (S/P)^2, patch
     * index n = py*(S/P)+px, column c*P*P + ky*P + kx (Conv2d weight order). */
    void (*patchify)(float *patches, const float *img, int B, int C, int S, int P);

    /* out (N,OC) = inp (N,IC) @ w^T (w is (OC,IC)) + bias (OC, may be NULL). */
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias,
                           int N, int IC, int OC);
    /* dinp (N,IC) = dout @ w (overwritten; skipped if dinp is NULL),
     * dw (OC,IC) += dout^T @ inp, dbias (OC) += sum_rows dout (if non-NULL). */
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC);

    /* x (B,T,D): x[b,0] = cls + pos[0]; x[b,1+n] = patch_out[b,n] + pos[1+n].
     * patch_out (B,T-1,D), cls (D), pos (T,D). */
    void (*embed_forward)(float *x, const float *patch_out, const float *cls, const float *pos,
                          int B, int T, int D);
    /* dpatch_out (B,T-1,D) overwritten; dcls (D), dpos (T,D) accumulated. */
    void (*embed_backward)(float *dpatch_out, float *dcls, float *dpos, const float *dx,
                           int B, int T, int D);

    /* LayerNorm over the last dim, eps VIT_LN_EPS, fp32 statistics.
     * inp (N,C) -> out (N,C), mean (N), rstd (N); w, b (C). */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    /* dinp (N,C) +=, dw (C) +=, db (C) +=. */
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);

    /* Non-causal multi-head self-attention on timm's qkv layout:
     * qkv (B,T,3D) with q at [0,D), k at [D,2D), v at [2D,3D), head h at
     * columns h*hd..h*hd+hd-1 of each, hd = D/NH, scale hd^-0.5.
     * out (B,T,D) (heads concatenated), att (B,NH,T,T) softmax probabilities.
     * scratch: ops_cpu_attention_scratch_floats(T, hd) floats (the CPU
     * backend's per-thread transposes; kept off the threads' stacks). */
    void (*attention_forward)(float *out, float *att, float *scratch, const float *qkv, int B,
                              int T, int D, int NH);
    /* dqkv (B,T,3D) overwritten; scratch as for the forward. */
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int D, int NH);

    /* Exact GELU: 0.5 x (1 + erf(x / sqrt 2)), elementwise over n. */
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    /* dinp = dout * gelu'(inp), overwritten. */
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);

    /* x (n) = 0. */
    void (*zero)(float *x, size_t n);

    /* bf16 storage: out (n) = bf16(in), round to nearest even (NaN and Inf
     * kept); out may be in. The CPU emulates it on fp32 storage; a backend
     * that stores bf16 tensors natively rounds in its stores (and copies). */
    void (*round_bf16)(float *out, const float *in, size_t n);

    /* out = a + b, elementwise over n. */
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n);

    /* Rows of a strided tensor: out (B,D) = x[b, 0, :] for x (B,T,D). */
    void (*gather_cls)(float *out, const float *x, int B, int T, int D);
    /* dx (B,T,D): dx[b,0,:] += dcls[b,:], other rows untouched. */
    void (*scatter_cls_backward)(float *dx, const float *dcls, int B, int T, int D);

    /* Softmax cross-entropy. logits (B,K), targets (B) in [0,K) ->
     * losses (B) = -log softmax(logits)[target], probs (B,K). */
    void (*crossentropy_forward)(float *losses, float *probs, const float *logits,
                                 const int *targets, int B, int K);
    /* dlogits (B,K) = (probs - onehot(target)) * dloss, overwritten;
     * dloss is d(total loss)/d(each sample's loss), e.g. 1/global_batch. */
    void (*crossentropy_backward)(float *dlogits, const float *probs, const int *targets,
                                  float dloss, int B, int K);

    /* Sum of squares of g (n), deterministic (fixed chunking, double partials). */
    double (*sum_squares)(const float *g, size_t n);
    /* g *= s, elementwise. */
    void (*scale)(float *g, float s, size_t n);

    /* One AdamW step on fp32 master params (PyTorch's torch.optim.AdamW):
     * p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps).
     * t is the 1-based step count. */
    void (*adamw_update)(float *p, float *m, float *v, const float *g, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, long t);
} vit_ops;

/* The CPU reference backend; borrowed, static lifetime. */
const vit_ops *ops_cpu(void);

/* Sets the CPU backend's thread count (OpenBLAS and OpenMP); 0 = all cores.
 * Returns the count in force. */
int ops_cpu_set_threads(int n);

/* Floats of attention scratch the CPU backend needs for T tokens and head
 * width hd, for all its threads (call after ops_cpu_set_threads). */
size_t ops_cpu_attention_scratch_floats(int T, int hd);

/* The CPU ops, exported so that tests can call them one by one. */
void patchify_cpu(float *patches, const float *img, int B, int C, int S, int P);
void matmul_forward_cpu(float *out, const float *inp, const float *w, const float *bias,
                        int N, int IC, int OC);
void matmul_backward_cpu(float *dinp, float *dw, float *dbias, const float *dout,
                         const float *inp, const float *w, int N, int IC, int OC);
void embed_forward_cpu(float *x, const float *patch_out, const float *cls, const float *pos,
                       int B, int T, int D);
void embed_backward_cpu(float *dpatch_out, float *dcls, float *dpos, const float *dx,
                        int B, int T, int D);
void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C);
void layernorm_backward_cpu(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C);
void attention_forward_cpu(float *out, float *att, float *scratch, const float *qkv, int B, int T,
                           int D, int NH);
void attention_backward_cpu(float *dqkv, float *scratch, const float *dout, const float *qkv,
                            const float *att, int B, int T, int D, int NH);
void gelu_forward_cpu(float *out, const float *inp, size_t n);
void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n);
void zero_cpu(float *x, size_t n);
void round_bf16_cpu(float *out, const float *in, size_t n);
void residual_forward_cpu(float *out, const float *a, const float *b, size_t n);
void gather_cls_cpu(float *out, const float *x, int B, int T, int D);
void scatter_cls_backward_cpu(float *dx, const float *dcls, int B, int T, int D);
void crossentropy_forward_cpu(float *losses, float *probs, const float *logits,
                              const int *targets, int B, int K);
void crossentropy_backward_cpu(float *dlogits, const float *probs, const int *targets,
                               float dloss, int B, int K);
double sum_squares_cpu(const float *g, size_t n);
void scale_cpu(float *g, float s, size_t n);
void adamw_update_cpu(float *p, float *m, float *v, const float *g, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, long t);

#endif
