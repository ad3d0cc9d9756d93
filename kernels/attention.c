/* kernels/attention.c - CPU reference: non-causal multi-head self-attention.
 * Owns: scores = q k^T * hd^-0.5, row softmax (max subtracted), out = p v, on
 * timm's qkv layout (see ops.h), and the backward through all three.
 * Must not: project q, k, v or the output (those are matmuls in the model).
 *
 * Each (batch, head) is five small products, written as what they are:
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

/* Per thread: the softmax gradient of one head, (T, T). */
size_t ops_cpu_attention_scratch_bytes(int B, int T, int D, int NH)
{
    (void)B, (void)D, (void)NH;
#ifdef _OPENMP
    return (size_t)T * T * (size_t)omp_get_max_threads() * sizeof(float);
#else
    return (size_t)T * T * sizeof(float);
#endif
}

/* row[0..n) = softmax(row): the max subtracted, exp, then scaled by 1 / sum.
 * exp comes from SLEEF's vector function (1.0 ULP) where simd.h has a vector
 * type, as in gelu.c; libm's expf for the tail and elsewhere. */
static void softmax_row(float *row, int n)
{
    float maxv = -INFINITY, sum = 0.0f;
    for (int j = 0; j < n; j++) maxv = row[j] > maxv ? row[j] : maxv;
    int j = 0;
#if VF_WIDTH
    const vf m = vf_set1(maxv);
    vf acc = vf_zero();
    for (; j + VF_WIDTH <= n; j += VF_WIDTH) {
        vf e = vf_exp(vf_sub(vf_load(row + j), m));
        vf_store(row + j, e);
        acc = vf_add(acc, e);
    }
    sum = vf_sum(acc);
#endif
    for (; j < n; j++) {
        row[j] = expf(row[j] - maxv);
        sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (j = 0; j < n; j++) row[j] *= inv;
}

/* C (m, n) = alpha * op(A) op(B), row-major, overwritten */
static void gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
}

// qkv (B,T,3D) -> out (B,T,D), att (B,NH,T,T)
void attention_forward_cpu(float *out, float *att, void *scratch, const float *qkv, int B, int T,
                           int D, int NH)
{
    (void)scratch;
    const int hd = D / NH, C3 = 3 * D;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hd, *k = q + D, *v = q + 2 * D;
            float *p = att + ((size_t)b * NH + h) * T * T;
            gemm(0, 1, T, T, hd, scale, q, C3, k, C3, p, T); /* scores = q k^T * scale */
            for (int i = 0; i < T; i++) softmax_row(p + (size_t)i * T, T);
            gemm(0, 0, T, hd, T, 1.0f, p, T, v, C3, out + (size_t)b * T * D + h * hd, D); /* p v */
        }
    }
}

// dout (B,T,D), qkv, att -> dqkv (B,T,3D) overwritten
void attention_backward_cpu(float *dqkv, void *scratch, const float *dout, const float *qkv,
                            const float *att, int B, int T, int D, int NH)
{
    const int hd = D / NH, C3 = 3 * D;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float *ds = (float *)scratch + (size_t)T * T * (size_t)thread_id();
            const float *q = qkv + (size_t)b * T * C3 + h * hd, *k = q + D, *v = q + 2 * D;
            const float *dO = dout + (size_t)b * T * D + h * hd;
            const float *p = att + ((size_t)b * NH + h) * T * T;
            float *dq = dqkv + (size_t)b * T * C3 + h * hd, *dk = dq + D, *dv = dq + 2 * D;
            gemm(0, 1, T, T, hd, 1.0f, dO, D, v, C3, ds, T); /* dp = dout v^T */
            for (int i = 0; i < T; i++) {
                /* softmax backward, with the score scale folded in */
                const float *prow = p + (size_t)i * T;
                float *row = ds + (size_t)i * T, dot = 0.0f;
                for (int j = 0; j < T; j++) dot += row[j] * prow[j];
                for (int j = 0; j < T; j++) row[j] = prow[j] * (row[j] - dot) * scale;
            }
            gemm(1, 0, T, hd, T, 1.0f, p, T, dO, D, dv, C3);  /* dv = p^T dout */
            gemm(1, 0, T, hd, T, 1.0f, ds, T, q, C3, dk, C3); /* dk = ds^T q */
            gemm(0, 0, T, hd, T, 1.0f, ds, T, k, C3, dq, C3); /* dq = ds k */
        }
    }
}
