/* kernels/attention.c - CPU reference: non-causal multi-head self-attention.
 * Owns: scores = q k^T * hd^-0.5, row softmax (max subtracted), out = p v, on
 * timm's qkv layout (see ops.h), and the backward through all three.
 * Must not: project q, k, v or the output (those are matmuls in the model).
 *
 * Plain loops, parallel over (batch, head). Each head's keys (and, in the
 * backward, values) are first copied transposed, (hd, T), so that every
 * inner loop runs over contiguous memory without a reduction and vectorises.
 * Each output element is written by one thread in a fixed order, so results
 * are deterministic and independent of the thread count. */
#include "ops.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

size_t ops_cpu_attention_scratch_floats(int T)
{
#ifdef _OPENMP
    return (size_t)T * T * (size_t)omp_get_max_threads();
#else
    return (size_t)T * T;
#endif
}

/* dst (hd, T) = src rows j (stride C3), columns 0..hd-1 */
static void transpose_head(float *dst, const float *src, int T, int hd, int C3)
{
    for (int j = 0; j < T; j++)
        for (int e = 0; e < hd; e++) dst[(size_t)e * T + j] = src[(size_t)j * C3 + e];
}

// qkv (B,T,3D) -> out (B,T,D), att (B,NH,T,T)
void attention_forward_cpu(float *out, float *att, const float *qkv, int B, int T, int D, int NH)
{
    const int hd = D / NH, C3 = 3 * D;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float kt[hd * T]; /* this head's keys, (hd, T) */
            const float *base = qkv + (size_t)b * T * C3 + h * hd;
            transpose_head(kt, base + D, T, hd, C3);
            float *p = att + ((size_t)b * NH + h) * T * T;
            for (int i = 0; i < T; i++) {
                const float *q = base + (size_t)i * C3;
                float *row = p + (size_t)i * T;
                for (int j = 0; j < T; j++) row[j] = 0.0f;
                for (int e = 0; e < hd; e++) {
                    const float qe = q[e] * scale, *k = kt + (size_t)e * T;
                    for (int j = 0; j < T; j++) row[j] += qe * k[j];
                }
                float maxv = -INFINITY;
                for (int j = 0; j < T; j++) maxv = row[j] > maxv ? row[j] : maxv;
                float sum = 0.0f;
                for (int j = 0; j < T; j++) {
                    row[j] = expf(row[j] - maxv);
                    sum += row[j];
                }
                const float inv = 1.0f / sum;
                for (int j = 0; j < T; j++) row[j] *= inv;
                float *o = out + ((size_t)b * T + i) * D + h * hd;
                for (int e = 0; e < hd; e++) o[e] = 0.0f;
                for (int j = 0; j < T; j++) {
                    const float *v = base + (size_t)j * C3 + 2 * D;
                    const float pj = row[j];
                    for (int e = 0; e < hd; e++) o[e] += pj * v[e];
                }
            }
        }
    }
}

// dout (B,T,D), qkv, att -> dqkv (B,T,3D) overwritten; scratch T*T per thread
void attention_backward_cpu(float *dqkv, float *scratch, const float *dout, const float *qkv,
                            const float *att, int B, int T, int D, int NH)
{
    const int hd = D / NH, C3 = 3 * D;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
#ifdef _OPENMP
            float *ds = scratch + (size_t)omp_get_thread_num() * T * T;
#else
            float *ds = scratch;
#endif
            float vt[hd * T]; /* this head's values, (hd, T) */
            const float *base = qkv + (size_t)b * T * C3 + h * hd;
            float *dbase = dqkv + (size_t)b * T * C3 + h * hd;
            const float *p = att + ((size_t)b * NH + h) * T * T;
            transpose_head(vt, base + 2 * D, T, hd, C3);
            for (int i = 0; i < T; i++) {
                memset(dbase + (size_t)i * C3, 0, sizeof(float) * hd);          /* dq */
                memset(dbase + (size_t)i * C3 + D, 0, sizeof(float) * hd);      /* dk */
                memset(dbase + (size_t)i * C3 + 2 * D, 0, sizeof(float) * hd);  /* dv */
            }
            for (int i = 0; i < T; i++) {
                const float *dout_i = dout + ((size_t)b * T + i) * D + h * hd;
                const float *prow = p + (size_t)i * T;
                float *dsrow = ds + (size_t)i * T;
                /* dp_ij = dout_i . v_j */
                for (int j = 0; j < T; j++) dsrow[j] = 0.0f;
                for (int e = 0; e < hd; e++) {
                    const float de = dout_i[e], *v = vt + (size_t)e * T;
                    for (int j = 0; j < T; j++) dsrow[j] += de * v[j];
                }
                /* dv_j += p_ij dout_i */
                for (int j = 0; j < T; j++) {
                    float *dv = dbase + (size_t)j * C3 + 2 * D;
                    const float pj = prow[j];
                    for (int e = 0; e < hd; e++) dv[e] += pj * dout_i[e];
                }
                /* softmax backward, with the score scale folded in */
                float dot = 0.0f;
                for (int j = 0; j < T; j++) dot += dsrow[j] * prow[j];
                for (int j = 0; j < T; j++) dsrow[j] = prow[j] * (dsrow[j] - dot) * scale;
            }
            for (int i = 0; i < T; i++) {
                const float *q = base + (size_t)i * C3;
                float *dq = dbase + (size_t)i * C3;
                const float *dsrow = ds + (size_t)i * T;
                for (int j = 0; j < T; j++) {
                    const float *k = base + (size_t)j * C3 + D;
                    float *dk = dbase + (size_t)j * C3 + D;
                    const float s = dsrow[j];
                    for (int e = 0; e < hd; e++) {
                        dq[e] += s * k[e];
                        dk[e] += s * q[e];
                    }
                }
            }
        }
    }
}
