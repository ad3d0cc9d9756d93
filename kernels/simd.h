/* kernels/simd.h - the CPU kernels' vector type: AVX-512 where the compiler
 * targets it, else AVX2 + FMA, else none (VF_WIDTH 0: callers keep a scalar
 * loop, which also handles every tail).
 * Owns: the mapping of a handful of float-vector operations, and exp, onto
 * intrinsics and SLEEF's vector exp (1.0 ULP), so that a kernel writes its
 * formula once for every width. Must not: hold any kernel's formula. */
#ifndef VJ_KERNELS_SIMD_H
#define VJ_KERNELS_SIMD_H

#if defined(__AVX512F__)
#include <immintrin.h>
#include <stdint.h>
#include <sleef.h>
#define VF_WIDTH 16
typedef __m512 vf;
#define vf_load _mm512_loadu_ps
#define vf_store _mm512_storeu_ps
#define vf_set1 _mm512_set1_ps
#define vf_add _mm512_add_ps
#define vf_sub _mm512_sub_ps
#define vf_mul _mm512_mul_ps
#define vf_div _mm512_div_ps
#define vf_fmadd _mm512_fmadd_ps   /* a b + c */
#define vf_fnmadd _mm512_fnmadd_ps /* c - a b */
#define vf_exp Sleef_expf16_u10avx512f
static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline float vf_sum(vf x) { return _mm512_reduce_add_ps(x); }
/* |x| and x's sign bit, through the integer unit (AVX-512F has no float and) */
static inline vf vf_abs(vf x)
{
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}
/* magnitude |m| with the sign of s (m non-negative) */
static inline vf vf_with_sign(vf m, vf s)
{
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32(INT32_MIN));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(m), sign));
}
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <sleef.h>
#define VF_WIDTH 8
typedef __m256 vf;
#define vf_load _mm256_loadu_ps
#define vf_store _mm256_storeu_ps
#define vf_set1 _mm256_set1_ps
#define vf_add _mm256_add_ps
#define vf_sub _mm256_sub_ps
#define vf_mul _mm256_mul_ps
#define vf_div _mm256_div_ps
#define vf_fmadd _mm256_fmadd_ps
#define vf_fnmadd _mm256_fnmadd_ps
#define vf_exp Sleef_expf8_u10avx2
static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline float vf_sum(vf x)
{
    float part[8], s = 0.0f;
    _mm256_storeu_ps(part, x);
    for (int k = 0; k < 8; k++) s += part[k];
    return s;
}
static inline vf vf_abs(vf x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
static inline vf vf_with_sign(vf m, vf s)
{
    return _mm256_or_ps(m, _mm256_and_ps(_mm256_set1_ps(-0.0f), s));
}
#else
#define VF_WIDTH 0
#endif

#endif
