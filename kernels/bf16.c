/* kernels/bf16.c - CPU storage ops: bf16 emulation, copies, zeroing.
 * Owns: rounding fp32 values to the nearest bf16 (8 exponent bits, 7
 * mantissa bits), ties to even, as the GPU's __float2bfloat16_rn does; NaN
 * stays NaN, infinities stay infinite, values past bf16's range round to
 * infinity. Values keep their fp32 storage.
 * Must not: decide where bf16 is stored (the op table's floatX arguments
 * do, ops.h; the cpu-bf16 table in ops_cpu.c applies it). */
#include "ops.h"

#include <stdint.h>
#include <string.h>

static inline float round_one(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) {
        if (u & 0x007fffffu) u |= 0x00400000u; /* NaN: keep it a (quiet) NaN */
    } else {
        u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    }
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

// in (n) -> out (n) = bf16(in); out may be in
void round_bf16_cpu(float *out, const float *in, size_t n)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] = round_one(in[i]);
}

// x (n) = 0
void zero_cpu(float *x, size_t n) { memset(x, 0, sizeof(float) * n); }

// in (n) -> out (n); out may be in
void copy_cpu(float *out, const float *in, size_t n)
{
    if (out != in) memmove(out, in, sizeof(float) * n);
}
