/* tests/test_fp16.c - the IEEE half emulation (kernels/fp16.c) and the
 * cpu-fp16 op table (kernels/ops_cpu.c): every finite half is kept exactly;
 * every midpoint between two neighbouring halves goes to the even one, and
 * a hair off it to the nearer one (all 2 x 31743 gaps, subnormals
 * included); overflow from 65520 to infinity, underflow to (signed) zero at
 * 2^-25 and below, NaN and infinities kept. The cpu-fp16 table rounds its
 * floatX outputs to half, and only those. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"

TestSuite(fp16, .timeout = 60);

/* the value of half bits h (finite), decoded exactly */
static float half_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e ? ldexpf((float)(1024 + m), e - 25) : ldexpf((float)m, -24);
    return (h & 0x8000) ? -v : v;
}

static float r16(float x)
{
    float y;
    round_fp16_cpu(&y, &x, 1);
    return y;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

Test(fp16, every_finite_half_is_kept_exactly)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        if (((h >> 10) & 0x1f) == 0x1f) continue; /* inf, NaN */
        float v = half_value((uint16_t)h);
        cr_assert(same_bits(r16(v), v), "half 0x%04x (%a) became %a", h, (double)v,
                  (double)r16(v));
    }
}

Test(fp16, midpoints_round_to_the_even_half_and_a_hair_off_them_to_the_nearer)
{
    for (int sign = 0; sign < 2; sign++)
        for (uint32_t h = 0; h < 0x7bff; h++) { /* a = half h, b = the next one up */
            uint16_t ha = (uint16_t)(h | (sign ? 0x8000 : 0)), hb = (uint16_t)(ha + 1);
            float a = half_value(ha), b = half_value(hb);
            float mid = (a + b) / 2; /* exact: 12 significant bits */
            float even = (h & 1) ? b : a;
            cr_assert(same_bits(r16(mid), even), "midpoint %a of 0x%04x: %a, not %a",
                      (double)mid, ha, (double)r16(mid), (double)even);
            float toward_a = nextafterf(mid, a), toward_b = nextafterf(mid, b);
            cr_assert(same_bits(r16(toward_a), a), "%a: %a, not %a", (double)toward_a,
                      (double)r16(toward_a), (double)a);
            cr_assert(same_bits(r16(toward_b), b), "%a: %a, not %a", (double)toward_b,
                      (double)r16(toward_b), (double)b);
        }
}

Test(fp16, overflow_goes_to_infinity_from_65520_and_underflow_to_signed_zero)
{
    cr_assert(r16(65504.0f) == 65504.0f);
    cr_assert(r16(nextafterf(65520.0f, 0.0f)) == 65504.0f);
    cr_assert(isinf(r16(65520.0f)) && r16(65520.0f) > 0, "65520 is half-way to 2^16: even, inf");
    cr_assert(isinf(r16(1e10f)) && r16(-1e10f) < 0);
    cr_assert(isinf(r16(-65520.0f)) && r16(-65520.0f) < 0);
    cr_assert(isinf(r16(3e38f)));
    cr_assert(r16(0x1p-24f) == 0x1p-24f, "the smallest subnormal");
    cr_assert(same_bits(r16(0x1p-25f), 0.0f), "half-way to the smallest subnormal: even, 0");
    cr_assert(r16(nextafterf(0x1p-25f, 1.0f)) == 0x1p-24f);
    cr_assert(same_bits(r16(-0x1p-26f), -0.0f), "the sign of a value rounded to zero is kept");
    cr_assert(same_bits(r16(-0.0f), -0.0f));
    cr_assert(same_bits(r16(1e-30f), 0.0f));
    cr_assert(r16(1.0f + 0x1p-11f) == 1.0f, "tie to even at 1");
    cr_assert(r16(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f, "tie to even upward");
    cr_assert(r16(0.1f) == 0x1.998p-4f, "0.1 in half is 0x2e66");
    cr_assert(isinf(r16(INFINITY)) && r16(-INFINITY) < 0);
    cr_assert(isnan(r16(NAN)));
    float in[3] = {1.0f / 3, 70000.0f, 1e-6f}, out[3];
    round_fp16_cpu(out, in, 3);
    cr_assert(out[0] == 0x1.554p-2f && isinf(out[1]) && out[2] == 17 * 0x1p-24f,
              "%a %a %a", (double)out[0], (double)out[1], (double)out[2]);
    round_fp16_cpu(in, in, 3); /* in place */
    cr_assert(memcmp(in, out, sizeof in) == 0);
}

Test(fp16, the_cpu_fp16_table_rounds_its_floatx_outputs_to_half_and_nothing_else)
{
    const vit_ops *h = ops_cpu_fp16();
    cr_assert_str_eq(h->name, "cpu-fp16");
    cr_assert(h->fp16 && h->bf16 && !h->gpu, "a 16-bit floatX, half");
    cr_assert(!ops_cpu_bf16()->fp16 && !ops_cpu()->fp16);
    enum { B = 3, K = 5 };
    float probs[B * K], d32[B * K], d16[B * K], want[B * K];
    for (int i = 0; i < B * K; i++) probs[i] = 1.0f / K + 0.01f * (float)(i % K) - 0.02f;
    int t[B] = {0, 3, 4};
    crossentropy_backward_cpu(d32, probs, t, 1000.0f / 3, B, K);
    h->crossentropy_backward(d16, probs, t, 1000.0f / 3, B, K);
    round_fp16_cpu(want, d32, B * K);
    cr_assert(memcmp(d16, want, sizeof want) == 0, "dlogits are not rounded to half");
    cr_assert(memcmp(d16, d32, sizeof want) != 0, "the rounding changed nothing");
    float x[4] = {1.0f / 3, 2.0f / 3, 70000.0f, -1e-9f}, y[4];
    h->to_floatx(y, x, 4);
    cr_assert(y[0] == 0x1.554p-2f && isinf(y[2]) && same_bits(y[3], -0.0f));
    /* fp32 ops stay fp32: the forward of drop path, the sums */
    cr_assert(h->droppath_forward == droppath_forward_cpu);
    cr_assert(h->to_float == copy_cpu);
}
