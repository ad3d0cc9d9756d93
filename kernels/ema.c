/* kernels/ema.c - CPU reference: the exponential moving average of the
 * weights (training.ema) and the exchange of two fp32 vectors.
 * Owns: the update formula, torch.Tensor.lerp_ as PyTorch's CPU kernel
 * computes it (what timm's ModelEmaV3 calls with weight = 1 - decay), and
 * swap (the EMA weights in and out of the parameter buffer for evaluation).
 * Must not: decide the decay or its warmup (worker/train/ema.c does), nor
 * which values a rank averages (the data-parallel strategies). */
#include "ops.h"

// ema (n) = lerp(ema, p, w): w < 0.5: ema + w (p - ema); else p - (p - ema)(1 - w)
// (each operation rounded to fp32 on its own: no fused multiply-adds, as
// the ISO C build; w = 1 gives p exactly, w = 0 leaves ema)
void ema_update_cpu(float *ema, const float *p, size_t n, float w)
{
    const float one_minus_w = 1.0f - w;
    if (w < 0.5f) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) ema[i] = ema[i] + w * (p[i] - ema[i]);
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) ema[i] = p[i] - (p[i] - ema[i]) * one_minus_w;
    }
}

// a (n) <-> b (n), buffers that do not overlap
void swap_cpu(float *a, float *b, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}
