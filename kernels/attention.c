/* kernels/attention.c - CPU reference: non-causal multi-head self-attention.
 * Owns: scores = q k^T * hd^-0.5, row softmax (max subtracted), out = p v, on
 * timm's qkv layout (see ops.h), and the backward through all three.
 * Must not: project q, k, v or the output (those are matmuls in the model).
 *
 * Every product here is a weighted sum of rows (`weighted_sum`), which keeps
 * eight accumulators in one vector register while it walks the rows. Keys
 * (forward) and values (backward) are first copied transposed, (hd, T), so
 * that a score row is a weighted sum of their rows too. Parallel over
 * (batch, head); each output element is written by one thread in a fixed
 * order, so results are deterministic and independent of the thread count. */
#include "ops.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Per thread: the softmax gradient (T, T), a transposed head (hd, T), a
 * scaled query (hd). */
static size_t per_thread(int T, int hd) { return (size_t)T * T + (size_t)hd * T + (size_t)hd; }

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

size_t ops_cpu_attention_scratch_bytes(int B, int T, int D, int NH)
{
    (void)B;
    const int hd = D / NH;
#ifdef _OPENMP
    return per_thread(T, hd) * (size_t)omp_get_max_threads() * sizeof(float);
#else
    return per_thread(T, hd) * sizeof(float);
#endif
}

/* out[c] = sum_r w[r * wstride] * rows[r * rstride + c], for c < width */
static void weighted_sum(float *out, const float *w, size_t wstride, const float *rows,
                         size_t rstride, int n, int width)
{
    int c0 = 0;
    for (; c0 + 8 <= width; c0 += 8) {
        float acc[8] = {0};
        for (int r = 0; r < n; r++) {
            const float wr = w[r * wstride], *x = rows + r * rstride + c0;
            for (int k = 0; k < 8; k++) acc[k] += wr * x[k];
        }
        for (int k = 0; k < 8; k++) out[c0 + k] = acc[k];
    }
    for (; c0 < width; c0++) {
        float acc = 0.0f;
        for (int r = 0; r < n; r++) acc += w[r * wstride] * rows[r * rstride + c0];
        out[c0] = acc;
    }
}

/* dst (hd, T) = src rows j (stride C3), columns 0..hd-1 */
static void transpose_head(float *dst, const float *src, int T, int hd, int C3)
{
    for (int j = 0; j < T; j++)
        for (int e = 0; e < hd; e++) dst[(size_t)e * T + j] = src[(size_t)j * C3 + e];
}

// qkv (B,T,3D) -> out (B,T,D), att (B,NH,T,T)
void attention_forward_cpu(float *out, float *att, void *scratch, const float *qkv, int B, int T,
                           int D, int NH)
{
    const int hd = D / NH, C3 = 3 * D;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float *mine = (float *)scratch + per_thread(T, hd) * (size_t)thread_id();
            float *kt = mine + (size_t)T * T, *qs = kt + (size_t)hd * T; /* keys (hd, T); query */
            const float *base = qkv + (size_t)b * T * C3 + h * hd;
            transpose_head(kt, base + D, T, hd, C3);
            float *p = att + ((size_t)b * NH + h) * T * T;
            for (int i = 0; i < T; i++) {
                const float *q = base + (size_t)i * C3;
                float *row = p + (size_t)i * T;
                for (int e = 0; e < hd; e++) qs[e] = q[e] * scale;
                weighted_sum(row, qs, 1, kt, (size_t)T, hd, T); /* scores q.k_j */
                float maxv = -INFINITY;
                for (int j = 0; j < T; j++) maxv = row[j] > maxv ? row[j] : maxv;
                float sum = 0.0f;
                for (int j = 0; j < T; j++) {
                    row[j] = expf(row[j] - maxv);
                    sum += row[j];
                }
                const float inv = 1.0f / sum;
                for (int j = 0; j < T; j++) row[j] *= inv;
                /* out_i = sum_j p_ij v_j */
                weighted_sum(out + ((size_t)b * T + i) * D + h * hd, row, 1, base + 2 * D,
                             (size_t)C3, T, hd);
            }
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
            float *ds = (float *)scratch + per_thread(T, hd) * (size_t)thread_id();
            float *vt = ds + (size_t)T * T; /* this head's values, (hd, T) */
            const float *base = qkv + (size_t)b * T * C3 + h * hd;
            const float *dbase_out = dout + (size_t)b * T * D + h * hd;
            float *dbase = dqkv + (size_t)b * T * C3 + h * hd;
            const float *p = att + ((size_t)b * NH + h) * T * T;
            transpose_head(vt, base + 2 * D, T, hd, C3);
            for (int i = 0; i < T; i++) {
                const float *prow = p + (size_t)i * T;
                float *dsrow = ds + (size_t)i * T;
                /* dp_ij = dout_i . v_j */
                weighted_sum(dsrow, dbase_out + (size_t)i * D, 1, vt, (size_t)T, hd, T);
                /* softmax backward, with the score scale folded in */
                float dot = 0.0f;
                for (int j = 0; j < T; j++) dot += dsrow[j] * prow[j];
                for (int j = 0; j < T; j++) dsrow[j] = prow[j] * (dsrow[j] - dot) * scale;
            }
            for (int j = 0; j < T; j++) {
                /* dv_j = sum_i p_ij dout_i; dk_j = sum_i ds_ij q_i */
                weighted_sum(dbase + (size_t)j * C3 + 2 * D, p + j, (size_t)T, dbase_out,
                             (size_t)D, T, hd);
                weighted_sum(dbase + (size_t)j * C3 + D, ds + j, (size_t)T, base, (size_t)C3, T,
                             hd);
            }
            for (int i = 0; i < T; i++) /* dq_i = sum_j ds_ij k_j */
                weighted_sum(dbase + (size_t)i * C3, ds + (size_t)i * T, 1, base + D, (size_t)C3,
                             T, hd);
        }
    }
}
