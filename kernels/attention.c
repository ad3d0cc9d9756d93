/* kernels/attention.c - CPU reference: non-causal multi-head self-attention.
 * Owns: scores = q k^T * hd^-0.5, the row log-sum-exp lse (max
 * subtracted), P = exp(scores - lse), out = P v, on timm's qkv layout (see
 * ops.h), and the backward through all three from out and lse
 * (FlashAttention-2's: P recomputed, the same bits, D_i = dout_i . out_i);
 * with an optional rounding of P and dS where the GPU stores them as
 * floatX (the cpu-bf16 and cpu-fp16 tables).
 * Must not: project q, k, v or the output (those are matmuls in the model),
 * or keep the probabilities past a call (they live in the scratch).
 *
 * Each (batch, head) is a few small products, written as what they are:
 * OpenBLAS sgemm calls reading q, k and v in place through their row stride
 * (3D), with the softmax and its backward as row loops between them. Parallel
 * over (batch, head) with OpenMP; inside a parallel region (and at these
 * sizes anyway) OpenBLAS runs each call on the calling thread, and each output
 * element is written by one call in a fixed order, so results are
 * deterministic and independent of the thread count. */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "simd.h"

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Per thread: two (T, T) fp32 matrices, the scores and probabilities of one
 * head, and in the backward its dP and dS. */
size_t ops_cpu_attention_scratch_bytes(int B, int T, int D, int NH)
{
    (void)B, (void)D, (void)NH;
#ifdef _OPENMP
    const size_t threads = (size_t)omp_get_max_threads();
#else
    const size_t threads = 1;
#endif
    return 2 * (size_t)T * T * threads * sizeof(float);
}

/* The log-sum-exp of row[0..n): max + log(sum exp(row - max)). exp comes
 * from SLEEF's vector function (1.0 ULP) where simd.h has a vector type, as
 * in gelu.c; libm's expf for the tail and elsewhere. */
static float row_lse(const float *row, int n)
{
    float maxv = -INFINITY, sum = 0.0f;
    for (int j = 0; j < n; j++) maxv = row[j] > maxv ? row[j] : maxv;
    int j = 0;
#if VF_WIDTH
    const vf m = vf_set1(maxv);
    vf acc = vf_zero();
    for (; j + VF_WIDTH <= n; j += VF_WIDTH) acc = vf_add(acc, vf_exp(vf_sub(vf_load(row + j), m)));
    sum = vf_sum(acc);
#endif
    for (; j < n; j++) sum += expf(row[j] - maxv);
    return maxv + logf(sum); /* sum >= 1: the max term is exp(0) */
}

/* x[0..n) = exp(x), in place (SLEEF's vector exp, libm's for the tail) */
static void exp_inplace(float *x, size_t n)
{
    size_t j = 0;
#if VF_WIDTH
    for (; j + VF_WIDTH <= n; j += VF_WIDTH) vf_store(x + j, vf_exp(vf_load(x + j)));
#endif
    for (; j < n; j++) x[j] = expf(x[j]);
}

/* C (m, n) = alpha * op(A) op(B), row-major, overwritten */
static void gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
}

/* p (T,T) = the probabilities of head (q, k): s = scale q k^T, then
 * exp(s - lse) with each row's lse computed into lse_out (the forward) or
 * read from lse_in (the backward). One formula, one code path for both
 * passes, so the backward's P is the forward's, bit for bit: the rows'
 * lse subtracted, then the whole (T,T) block through one vector exp loop
 * (small T's rows alone would leave much of it to the scalar tail). */
static void head_probs(float *p, float *lse_out, const float *lse_in, const float *q,
                       const float *k, int T, int hd, int C3, float scale, ops_round_fn rnd)
{
    gemm(0, 1, T, T, hd, scale, q, C3, k, C3, p, T); /* s = q k^T * scale */
    if (lse_out) {
        for (int i = 0; i < T; i++) lse_out[i] = row_lse(p + (size_t)i * T, T);
        lse_in = lse_out;
    }
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) p[(size_t)i * T + j] -= lse_in[i];
    exp_inplace(p, (size_t)T * T);
    if (rnd) rnd(p, p, (size_t)T * T); /* P as the GPU stores it (floatX) */
}

// qkv (B,T,3D) -> out (B,T,D), lse (B,NH,T)
void attention_forward_cpu_lowp(float *out, float *lse, void *scratch, const float *qkv, int B,
                                int T, int D, int NH, ops_round_fn rnd)
{
    const int hd = D / NH, C3 = 3 * D;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float *p = (float *)scratch + 2 * (size_t)T * T * (size_t)thread_id();
            const float *q = qkv + (size_t)b * T * C3 + h * hd, *k = q + D, *v = q + 2 * D;
            head_probs(p, lse + ((size_t)b * NH + h) * T, NULL, q, k, T, hd, C3, scale, rnd);
            gemm(0, 0, T, hd, T, 1.0f, p, T, v, C3, out + (size_t)b * T * D + h * hd, D); /* p v */
        }
    }
}

void attention_forward_cpu(float *out, float *lse, void *scratch, const float *qkv, int B, int T,
                           int D, int NH)
{
    attention_forward_cpu_lowp(out, lse, scratch, qkv, B, T, D, NH, NULL);
}

// dout (B,T,D), qkv, out, lse -> dqkv (B,T,3D) overwritten
void attention_backward_cpu_lowp(float *dqkv, void *scratch, const float *dout, const float *qkv,
                                 const float *out, const float *lse, int B, int T, int D, int NH,
                                 ops_round_fn rnd)
{
    const int hd = D / NH, C3 = 3 * D;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float *p = (float *)scratch + 2 * (size_t)T * T * (size_t)thread_id();
            float *ds = p + (size_t)T * T;
            const float *q = qkv + (size_t)b * T * C3 + h * hd, *k = q + D, *v = q + 2 * D;
            const float *dO = dout + (size_t)b * T * D + h * hd;
            const float *o = out + (size_t)b * T * D + h * hd;
            float *dq = dqkv + (size_t)b * T * C3 + h * hd, *dk = dq + D, *dv = dq + 2 * D;
            head_probs(p, NULL, lse + ((size_t)b * NH + h) * T, q, k, T, hd, C3, scale, rnd);
            gemm(1, 0, T, hd, T, 1.0f, p, T, dO, D, dv, C3); /* dv = p^T dout */
            gemm(0, 1, T, T, hd, 1.0f, dO, D, v, C3, ds, T); /* dp = dout v^T */
            for (int i = 0; i < T; i++) {
                /* softmax backward: ds = p (dp - D_i), D_i = dout_i . out_i */
                const float *prow = p + (size_t)i * T, *dOi = dO + (size_t)i * D,
                            *oi = o + (size_t)i * D;
                float *row = ds + (size_t)i * T, di = 0.0f;
                for (int e = 0; e < hd; e++) di += dOi[e] * oi[e];
                for (int j = 0; j < T; j++) row[j] = prow[j] * (row[j] - di);
            }
            if (rnd) rnd(ds, ds, (size_t)T * T); /* dS as the GPU stores it (floatX) */
            gemm(1, 0, T, hd, T, scale, ds, T, q, C3, dk, C3); /* dk = scale ds^T q */
            gemm(0, 0, T, hd, T, scale, ds, T, k, C3, dq, C3); /* dq = scale ds k */
        }
    }
}

void attention_backward_cpu(float *dqkv, void *scratch, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int D, int NH)
{
    attention_backward_cpu_lowp(dqkv, scratch, dout, qkv, out, lse, B, T, D, NH, NULL);
}
