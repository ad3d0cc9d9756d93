/* kernels/gelu.c - CPU reference: exact (erf) GELU, as nn.GELU() and timm.
 * Owns: the GELU formula and its derivative. Must not: use the tanh form.
 *
 * erf is evaluated as PyTorch's own vectorised CPU kernel does, with
 * Abramowitz & Stegun 7.1.26: erf(z) = 1 - t (a1 + t (a2 + ... a5)) e^{-z^2},
 * t = 1 / (1 + p z), absolute error below 1.5e-7 (gelu values then agree with
 * the libm form to ~1e-7 relative). With z = x / sqrt 2, e^{-z^2} is also the
 * Gaussian density's exponential, so the backward needs one exp and no erf.
 * exp comes from SLEEF's vector function (1.0 ULP) where simd.h has a vector
 * type (AVX-512, or AVX2 + FMA), from libm elsewhere and in the tails; every
 * path uses the same formula. */
#include "ops.h"

#include <math.h>

#include "simd.h"

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f
#define AS_P 0.3275911f
#define AS_A1 0.254829592f
#define AS_A2 -0.284496736f
#define AS_A3 1.421413741f
#define AS_A4 -1.453152027f
#define AS_A5 1.061405429f
#define CHUNK 1024 /* elements per parallel work item, a multiple of 16 */

/* Phi(x) = 0.5 (1 + erf(x / sqrt 2)) and g = exp(-x^2 / 2), scalar */
static inline float cdf_and_gauss(float x, float *g)
{
    float z = fabsf(x) * INV_SQRT2;
    float t = 1.0f / (1.0f + AS_P * z);
    float poly = t * (AS_A1 + t * (AS_A2 + t * (AS_A3 + t * (AS_A4 + t * AS_A5))));
    *g = expf(-z * z);
    float erf_abs = 1.0f - poly * *g;
    return 0.5f * (1.0f + copysignf(erf_abs, x));
}

#if VF_WIDTH
/* the same, VF_WIDTH lanes at a time */
static inline vf cdf_and_gauss_v(vf x, vf *g)
{
    const vf one = vf_set1(1.0f);
    vf z = vf_mul(vf_abs(x), vf_set1(INV_SQRT2));
    vf t = vf_div(one, vf_fmadd(vf_set1(AS_P), z, one));
    vf poly = vf_fmadd(t, vf_set1(AS_A5), vf_set1(AS_A4));
    poly = vf_fmadd(t, poly, vf_set1(AS_A3));
    poly = vf_fmadd(t, poly, vf_set1(AS_A2));
    poly = vf_fmadd(t, poly, vf_set1(AS_A1));
    poly = vf_mul(t, poly);
    *g = vf_exp(vf_sub(vf_zero(), vf_mul(z, z)));
    vf erf = vf_with_sign(vf_fnmadd(poly, *g, one), x);
    return vf_mul(vf_set1(0.5f), vf_add(one, erf));
}
#endif

static void gelu_fwd_range(float *out, const float *inp, size_t lo, size_t hi)
{
    size_t i = lo;
#if VF_WIDTH
    for (; i + VF_WIDTH <= hi; i += VF_WIDTH) {
        vf x = vf_load(inp + i), g;
        vf_store(out + i, vf_mul(x, cdf_and_gauss_v(x, &g)));
    }
#endif
    for (; i < hi; i++) {
        float g;
        out[i] = inp[i] * cdf_and_gauss(inp[i], &g);
    }
}

static void gelu_bwd_range(float *dinp, const float *inp, const float *dout, size_t lo, size_t hi)
{
    size_t i = lo;
#if VF_WIDTH
    const vf c = vf_set1(INV_SQRT_2PI);
    for (; i + VF_WIDTH <= hi; i += VF_WIDTH) {
        vf x = vf_load(inp + i), g;
        vf cdf = cdf_and_gauss_v(x, &g);
        vf d = vf_fmadd(x, vf_mul(c, g), cdf); /* Phi + x phi */
        vf_store(dinp + i, vf_mul(vf_load(dout + i), d));
    }
#endif
    for (; i < hi; i++) {
        float g, cdf = cdf_and_gauss(inp[i], &g);
        dinp[i] = dout[i] * (cdf + inp[i] * INV_SQRT_2PI * g);
    }
}

// inp (n) -> out (n) = x Phi(x)
void gelu_forward_cpu(float *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < n; c += CHUNK) gelu_fwd_range(out, inp, c, c + CHUNK < n ? c + CHUNK : n);
}

// dout (n) -> dinp (n) = dout * (Phi(x) + x * phi(x)), overwritten
void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < n; c += CHUNK)
        gelu_bwd_range(dinp, inp, dout, c, c + CHUNK < n ? c + CHUNK : n);
}
