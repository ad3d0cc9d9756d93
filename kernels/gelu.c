/* kernels/gelu.c - CPU reference: exact (erf) GELU, as nn.GELU() and timm.
 * Owns: the GELU formula and its derivative. Must not: use the tanh form. */
#include "ops.h"

#include <math.h>

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

// inp (n) -> out (n)
void gelu_forward_cpu(float *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + erff(x * INV_SQRT2));
    }
}

// dout (n) -> dinp (n) = dout * (Phi(x) + x * phi(x)), overwritten
void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cdf = 0.5f * (1.0f + erff(x * INV_SQRT2));
        float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
        dinp[i] = dout[i] * (cdf + x * pdf);
    }
}
