/* kernels/layernorm.c - CPU reference: LayerNorm over the last dim.
 * Owns: fp32 statistics (mean, 1/std with eps 1e-6 as timm's ViT), and the
 * backward that accumulates into the residual-stream gradient.
 * Must not: fuse the residual add (a backend may; the reference stays plain). */
#include "ops.h"

#include <math.h>
#include <string.h>

// inp (N,C), w (C), b (C) -> out (N,C), mean (N), rstd (N)
void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = 0.0f;
#pragma omp simd reduction(+ : m)
        for (int i = 0; i < C; i++) m += x[i];
        m /= (float)C;
        float var = 0.0f;
#pragma omp simd reduction(+ : var)
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            var += d * d;
        }
        var /= (float)C;
        float s = 1.0f / sqrtf(var + VIT_LN_EPS);
        float *y = out + (size_t)n * C;
        for (int i = 0; i < C; i++) y[i] = (x[i] - m) * s * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

// dout (N,C) -> dinp (N,C) +=, dw (C) +=, db (C) += (both skipped if both are NULL);
// dinp_x (N,C), unless NULL, = dinp's new value (fp32 storage: the low-precision
// tables round it, ops_cpu.c)
void layernorm_backward_cpu(float *dinp, float *dinp_x, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        const float m = mean[n], s = rstd[n];
        /* dxhat = dy * w; dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
        float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * s, dxhat = dy[i] * w[i];
            sum_dxhat += dxhat;
            sum_dxhat_xhat += dxhat * xhat;
        }
        sum_dxhat /= (float)C;
        sum_dxhat_xhat /= (float)C;
        float *dx = dinp + (size_t)n * C;
        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * s, dxhat = dy[i] * w[i];
            dx[i] += s * (dxhat - sum_dxhat - xhat * sum_dxhat_xhat);
        }
        if (dinp_x) memcpy(dinp_x + (size_t)n * C, dx, sizeof(float) * (size_t)C);
    }
    /* Parameter gradients: rows in order, so the sum is the same every run. */
    for (int n = 0; n < N && (dw || db); n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        const float m = mean[n], s = rstd[n];
        for (int i = 0; i < C; i++) {
            dw[i] += dy[i] * (x[i] - m) * s;
            db[i] += dy[i];
        }
    }
}
