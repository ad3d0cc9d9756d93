/* kernels/gelu.c - CPU reference: exact (erf) GELU, as nn.GELU() and timm.
 * Owns: the GELU formula and its derivative. Must not: use the tanh form.
 *
 * erf is evaluated as PyTorch's own vectorised CPU kernel does, with
 * Abramowitz & Stegun 7.1.26: erf(z) = 1 - t (a1 + t (a2 + ... a5)) e^{-z^2},
 * t = 1 / (1 + p z), absolute error below 1.5e-7 (gelu values then agree with
 * the libm form to ~1e-7 relative). With z = x / sqrt 2, e^{-z^2} is also the
 * Gaussian density's exponential, so the backward needs one exp and no erf.
 * exp comes from SLEEF's vector function (1.0 ULP) on AVX2 + FMA machines,
 * from libm elsewhere; both paths use the same formula. */
#include "ops.h"

#include <math.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <sleef.h>
#define GELU_SIMD 1
#endif

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f
#define AS_P 0.3275911f
#define AS_A1 0.254829592f
#define AS_A2 -0.284496736f
#define AS_A3 1.421413741f
#define AS_A4 -1.453152027f
#define AS_A5 1.061405429f
#define CHUNK 1024 /* elements per parallel work item, a multiple of 8 */

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

#ifdef GELU_SIMD
static inline __m256 cdf_and_gauss8(__m256 x, __m256 *g)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    __m256 z = _mm256_mul_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(INV_SQRT2));
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(AS_P), z, one));
    __m256 poly = _mm256_fmadd_ps(t, _mm256_set1_ps(AS_A5), _mm256_set1_ps(AS_A4));
    poly = _mm256_fmadd_ps(t, poly, _mm256_set1_ps(AS_A3));
    poly = _mm256_fmadd_ps(t, poly, _mm256_set1_ps(AS_A2));
    poly = _mm256_fmadd_ps(t, poly, _mm256_set1_ps(AS_A1));
    poly = _mm256_mul_ps(t, poly);
    *g = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(z, z)));
    __m256 erf_abs = _mm256_fnmadd_ps(poly, *g, one);
    __m256 erf = _mm256_or_ps(erf_abs, _mm256_and_ps(sign, x));
    return _mm256_mul_ps(_mm256_set1_ps(0.5f), _mm256_add_ps(one, erf));
}
#endif

static void gelu_fwd_range(float *out, const float *inp, size_t lo, size_t hi)
{
    size_t i = lo;
#ifdef GELU_SIMD
    for (; i + 8 <= hi; i += 8) {
        __m256 x = _mm256_loadu_ps(inp + i), g;
        _mm256_storeu_ps(out + i, _mm256_mul_ps(x, cdf_and_gauss8(x, &g)));
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
#ifdef GELU_SIMD
    const __m256 c = _mm256_set1_ps(INV_SQRT_2PI);
    for (; i + 8 <= hi; i += 8) {
        __m256 x = _mm256_loadu_ps(inp + i), g;
        __m256 cdf = cdf_and_gauss8(x, &g);
        __m256 d = _mm256_fmadd_ps(x, _mm256_mul_ps(c, g), cdf); /* Phi + x phi */
        _mm256_storeu_ps(dinp + i, _mm256_mul_ps(_mm256_loadu_ps(dout + i), d));
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
