/* kernels/fp16.c - CPU storage op: IEEE half emulation.
 * Owns: rounding fp32 values to the nearest IEEE binary16 value (5 exponent
 * bits, 10 mantissa bits), ties to even, as the GPU's __float2half_rn does:
 * values from 65520 up round to infinity, values below 2^-14 to the
 * subnormal grid of 2^-24 (below 2^-25 to zero, 2^-25 itself to zero: its
 * even neighbour), NaN stays NaN, infinities stay infinite, the sign is
 * kept (a negative value that rounds to zero gives -0). Values keep their
 * fp32 storage.
 * Must not: decide where half is stored (the op table's floatX arguments
 * do, ops.h; the cpu-fp16 table in ops_cpu.c applies it).
 */
#include "ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float round_one(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) { /* inf stays inf; NaN stays a (quiet) NaN */
        if (a > 0x7f800000u) u |= 0x00400000u;
    } else if (a >= 0x38800000u) { /* |x| >= 2^-14: a normal half, 10 mantissa bits */
        u += 0xfffu + ((u >> 13) & 1u); /* round to nearest, ties to even */
        u &= 0xffffe000u;
        if ((u & 0x7fffffffu) >= 0x47800000u) /* >= 2^16: past 65504, infinity */
            u = (u & 0x80000000u) | 0x7f800000u;
    } else { /* the subnormal grid: multiples of 2^-24 (exact scalings; the
              * current rounding mode, nearest even; the sign kept, -0 too) */
        return nearbyintf(x * 16777216.0f) * (1.0f / 16777216.0f);
    }
    memcpy(&x, &u, sizeof x);
    return x;
}

// in (n) -> out (n) = half(in); out may be in
void round_fp16_cpu(float *out, const float *in, size_t n)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] = round_one(in[i]);
}
