/* kernels/adamw.cu - CUDA: AdamW on fp32 master weights and state.
 * Owns: the GPU version of kernels/adamw.c with its precision choices: bias
 * corrections in double on the host (pow of the float betas promoted to
 * double), step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2),
 * decay = 1 - lr*wd in float; per element fp32 with every operation rounded
 * on its own (__f*_rn: no fused multiply-adds, as the CPU's ISO C build), so
 * the result matches the CPU's bits. With p_lp the new p is also stored as X.
 * adamw_multi: the whole table of pieces in one launch. The grid covers the
 * pieces' concatenation (their `start` prefix sums) in chunks of
 * MULTI_CHUNK elements, one block per chunk; a block finds the piece its
 * chunk begins in by binary search and walks the pieces the chunk covers.
 * Each piece's lr, step_size and decay are computed on the device with the
 * host's formulas (double multiply and divide, float rounding: IEEE on both
 * sides, the same bits), and the clipping coefficient from the norm in
 * device memory (one thread per block, clip_factor_dev: the host's formula).
 * Must not: decide which tensors decay or the learning rate (the trainer).
 */
#include "cuda_common.cuh"

#include <math.h>

/* One element: the AdamW update from gradient gi, each operation rounded on its own. */
static __device__ __forceinline__ float adamw_elem(float *p, float *m, float *v, float gi,
                                                   float beta1, float beta2, float eps,
                                                   float step_size, float bc2_sqrt, float decay)
{
    const float one_m_b1 = __fsub_rn(1.0f, beta1), one_m_b2 = __fsub_rn(1.0f, beta2);
    /* mi = beta1 * m + (1 - beta1) * g; vi = beta2 * v + (1 - beta2) * g * g */
    const float mi = __fadd_rn(__fmul_rn(beta1, *m), __fmul_rn(one_m_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(beta2, *v), __fmul_rn(__fmul_rn(one_m_b2, gi), gi));
    *m = mi;
    *v = vi;
    /* denom = sqrt(vi) / bc2_sqrt + eps; p = p * decay - step_size * mi / denom */
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    const float pi = __fsub_rn(__fmul_rn(*p, decay), __fdiv_rn(__fmul_rn(step_size, mi), denom));
    *p = pi;
    return pi;
}

template <typename X>
static __global__ void adamw_kernel(float *p, X *p_lp, float *m, float *v, const float *g,
                                    size_t n, float beta1, float beta2, float eps,
                                    float step_size, float bc2_sqrt, float decay)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float pi =
            adamw_elem(&p[i], &m[i], &v[i], g[i], beta1, beta2, eps, step_size, bc2_sqrt, decay);
        if (p_lp) p_lp[i] = stx<X>(pi);
    }
}

/* Bias corrections of step t, as the CPU's (double, then the float sqrt). */
static void bias_corrections(float beta1, float beta2, long t, double *bc1, float *bc2_sqrt)
{
    *bc1 = 1.0 - pow((double)beta1, (double)t);
    *bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, (double)t));
}

template <typename X>
void adamw_update_cuda(float *p, floatX *p_lp, float *m, float *v, const float *g, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay, long t)
{
    CU_GUARD();
    if (n == 0) return;
    double bc1;
    float bc2_sqrt;
    bias_corrections(beta1, beta2, t, &bc1, &bc2_sqrt);
    const float step_size = (float)((double)lr / bc1);
    const float lr_wd = lr * weight_decay; /* float, as the CPU: two roundings */
    const float decay = 1.0f - lr_wd;
    const unsigned threads = 256;
    adamw_kernel<X><<<cuda_blocks(n, threads), threads, 0, g_cuda.stream>>>(
        p, (X *)p_lp, m, v, g, n, beta1, beta2, eps, step_size, bc2_sqrt, decay);
    CU_LAUNCHED();
}

/* Elements of the concatenation one block updates: 8 per thread. */
#define MULTI_THREADS 256
#define MULTI_CHUNK (MULTI_THREADS * 8)

/* adamw_clip_factor (kernels/adamw.c) on the device: the same operations,
 * each rounded on its own (no fused multiply-add), so the same bits. */
static __device__ float clip_factor_dev(double norm_sq, float unscale, double grad_clip)
{
    if (!(grad_clip > 0)) return 1.0f;
    const double norm = __dmul_rn(__dsqrt_rn(norm_sq), (double)unscale);
    const double coef = __ddiv_rn(grad_clip, __dadd_rn(norm, 1e-6));
    return coef < 1.0 ? __double2float_rn(coef) : 1.0f;
}

template <typename X>
static __global__ void __launch_bounds__(MULTI_THREADS)
    adamw_multi_kernel(float *p, float *m, float *v, const float *g, const adamw_piece *pieces,
                       int np, size_t total, double lr, float unscale, const double *norm_sq,
                       double grad_clip, float beta1, float beta2, float eps, double bc1,
                       float bc2_sqrt)
{
    __shared__ float s_clip;
    if (threadIdx.x == 0)
        s_clip = norm_sq ? clip_factor_dev(*norm_sq, unscale, grad_clip) : 1.0f;
    __syncthreads();
    const float clip = s_clip;
    const size_t lo = (size_t)blockIdx.x * MULTI_CHUNK;
    const size_t hi = lo + MULTI_CHUNK < total ? lo + MULTI_CHUNK : total;
    /* the last piece starting at or before lo: the one holding element lo
     * (a piece of length 0 shares its start with the next and comes first) */
    int a = 0, b = np - 1;
    while (a < b) {
        const int mid = a + (b - a + 1) / 2;
        if (pieces[mid].start <= lo) a = mid;
        else b = mid - 1;
    }
    for (int k = a; k < np && pieces[k].start < hi; k++) {
        const adamw_piece pc = pieces[k];
        const size_t s = pc.start > lo ? pc.start : lo;
        const size_t e = pc.start + pc.n < hi ? pc.start + pc.n : hi;
        if (s >= e) continue;
        const float lr_k = (float)(lr * pc.lr_scale); /* double product, as the host's */
        const float step_size = (float)((double)lr_k / bc1);
        const float decay = __fsub_rn(1.0f, __fmul_rn(lr_k, pc.weight_decay));
        X *lp = (X *)pc.p_lp;
        for (size_t j = s + threadIdx.x; j < e; j += MULTI_THREADS) {
            const size_t i = j - pc.start;
            /* (g * unscale) * clip: the two in-place passes' roundings */
            const float gi = __fmul_rn(__fmul_rn(g[pc.at + i], unscale), clip);
            const float pi = adamw_elem(&p[pc.at + i], &m[pc.state + i], &v[pc.state + i], gi,
                                        beta1, beta2, eps, step_size, bc2_sqrt, decay);
            if (lp) lp[i] = stx<X>(pi);
        }
    }
}

template <typename X>
void adamw_multi_cuda(float *p, float *m, float *v, const float *g, const adamw_piece *pieces,
                      int np, size_t total, double lr, float unscale, const double *norm_sq,
                      double grad_clip, float beta1, float beta2, float eps, long t)
{
    CU_GUARD();
    if (np <= 0 || total == 0) return;
    double bc1;
    float bc2_sqrt;
    bias_corrections(beta1, beta2, t, &bc1, &bc2_sqrt);
    const size_t blocks = (total + MULTI_CHUNK - 1) / MULTI_CHUNK;
    adamw_multi_kernel<X><<<(unsigned)blocks, MULTI_THREADS, 0, g_cuda.stream>>>(
        p, m, v, g, pieces, np, total, lr, unscale, norm_sq, grad_clip, beta1, beta2, eps, bc1,
        bc2_sqrt);
    CU_LAUNCHED();
}

template void adamw_update_cuda<float>(float *, floatX *, float *, float *, const float *, size_t,
                                       float, float, float, float, float, long);
template void adamw_update_cuda<bf16>(float *, floatX *, float *, float *, const float *, size_t,
                                      float, float, float, float, float, long);
template void adamw_update_cuda<f16>(float *, floatX *, float *, float *, const float *, size_t,
                                     float, float, float, float, float, long);
#define ADAMW_MULTI_INST(X)                                                                     \
    template void adamw_multi_cuda<X>(float *, float *, float *, const float *,               \
                                      const adamw_piece *, int, size_t, double, float,        \
                                      const double *, double, float, float, float, long);
ADAMW_MULTI_INST(float)
ADAMW_MULTI_INST(bf16)
ADAMW_MULTI_INST(f16)
