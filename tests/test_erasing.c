/* tests/test_erasing.c - worker/data/erasing.c: timm's RandomErasing, on its
 * own.
 *
 * Owns: the properties that need no torch: the box inside the image and
 * within timm's area and aspect bounds (up to the rounding of its sides),
 * only the box changed, what each mode writes there, the probability
 * (0: never, 1: on a large image always, 0.25: a quarter of the draws), and
 * the same stream giving the same result. Equality with timm's algorithm
 * is tests/randaug.bats's (tests/ref/randaug_torch.py).
 * Must not: depend on the network, on Python, or on time.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "erasing.h"
#include "rng.h"

TestSuite(erasing, .timeout = 120);

static float *ramp(int c, int h, int w)
{
    float *x = malloc(sizeof(float) * (size_t)c * h * w);
    cr_assert(x);
    for (size_t i = 0; i < (size_t)c * h * w; i++) x[i] = 100.0f + (float)i; /* no normal gives these */
    return x;
}

Test(erasing, boxes_lie_inside_the_image_within_timms_area_and_aspect_and_only_they_change)
{
    const int dims[][3] = {{3, 224, 224}, {1, 28, 28}, {3, 40, 9}, {3, 9, 40}, {3, 4, 4}};
    for (int d = 0; d < 5; d++) {
        int C = dims[d][0], H = dims[d][1], W = dims[d][2];
        float *ref = ramp(C, H, W), *x = ramp(C, H, W);
        int erased = 0;
        for (int seed = 0; seed < 300; seed++) {
            memcpy(x, ref, sizeof(float) * (size_t)C * H * W);
            rng_state r;
            rng_seed(&r, seed, 2, 3);
            er_params p = {1.0, (er_mode)(seed % 3)};
            er_box b;
            if (!er_apply(&p, x, C, H, W, &r, &b)) continue;
            erased++;
            cr_assert(b.top >= 0 && b.left >= 0 && b.h >= 0 && b.w >= 0 && b.h < H && b.w < W &&
                          b.top + b.h <= H && b.left + b.w <= W,
                      "%dx%d: box %d %d %d %d", H, W, b.top, b.left, b.h, b.w);
            /* h = round(sqrt(t * a)), w = round(sqrt(t / a)): t = h * w and a = h / w
             * up to half a pixel on each side */
            double area = (double)H * W;
            double hmax = b.h + 0.5, hmin = fmax(b.h - 0.5, 0), wmax = b.w + 0.5, wmin = fmax(b.w - 0.5, 0);
            cr_assert(hmax * wmax >= 0.02 * area - 1e-9 && hmin * wmin <= area / 3.0 + 1e-9,
                      "%dx%d: %dx%d box outside [0.02, 1/3] of the area", H, W, b.h, b.w);
            if (b.h && b.w)
                cr_assert(hmax / wmin >= 0.3 - 1e-9 && hmin / wmax <= 1 / 0.3 + 1e-9,
                          "%dx%d: %dx%d box outside the aspect bounds", H, W, b.h, b.w);
            for (int c = 0; c < C; c++)
                for (int y = 0; y < H; y++)
                    for (int xx = 0; xx < W; xx++) {
                        size_t i = ((size_t)c * H + y) * W + xx;
                        int in = y >= b.top && y < b.top + b.h && xx >= b.left && xx < b.left + b.w;
                        if (!in) {
                            cr_assert_eq(x[i], ref[i], "outside the box changed");
                        } else if (p.mode == ER_CONST) {
                            cr_assert_eq(x[i], 0.0f);
                        } else {
                            cr_assert(x[i] != ref[i] && fabsf(x[i]) < 10.0f, "not a normal value");
                            if (p.mode == ER_RAND)
                                cr_assert_eq(x[i], x[((size_t)c * H + b.top) * W + b.left],
                                             "rand: one value per channel");
                        }
                    }
        }
        if (H >= 28 && W >= 28) cr_assert_eq(erased, 300, "%dx%d: %d of 300 erased", H, W, erased);
        free(ref);
        free(x);
    }
}

Test(erasing, pixel_mode_draws_a_value_per_element_rand_one_per_channel)
{
    const int C = 3, H = 64, W = 64;
    float *x = ramp(C, H, W);
    rng_state r;
    rng_seed(&r, 5, 0, 0);
    er_params p = {1.0, ER_PIXEL};
    er_box b;
    cr_assert(er_apply(&p, x, C, H, W, &r, &b));
    cr_assert(b.h > 1 && b.w > 1);
    int distinct = 0;
    for (int c = 0; c < C; c++)
        distinct += x[((size_t)c * H + b.top) * W + b.left] != x[((size_t)c * H + b.top) * W + b.left + 1];
    cr_assert_eq(distinct, 3);
    free(x);
}

Test(erasing, probability_0_never_erases_1_always_and_025_a_quarter_of_the_time)
{
    const int C = 3, H = 32, W = 32;
    float *ref = ramp(C, H, W), *x = ramp(C, H, W);
    int n25 = 0;
    for (int seed = 0; seed < 4000; seed++) {
        rng_state r;
        rng_seed(&r, seed, 7, 7);
        er_params p0 = {0.0, ER_PIXEL};
        cr_assert_eq(er_apply(&p0, x, C, H, W, &r, NULL), 0);
        rng_state fresh;
        rng_seed(&fresh, seed, 7, 7);
        cr_assert_eq(memcmp(&r, &fresh, sizeof r), 0, "probability 0 draws nothing");
        er_params p25 = {0.25, ER_CONST};
        n25 += er_apply(&p25, x, C, H, W, &r, NULL);
        memcpy(x, ref, sizeof(float) * (size_t)C * H * W);
    }
    cr_assert(n25 > 4000 * 0.22 && n25 < 4000 * 0.28, "%d of 4000 erased at 0.25", n25);
    free(ref);
    free(x);
}

Test(erasing, the_same_stream_erases_the_same_box_with_the_same_values)
{
    const int C = 3, H = 50, W = 70;
    float *a = ramp(C, H, W), *b = ramp(C, H, W);
    for (int seed = 0; seed < 50; seed++) {
        rng_state r1, r2;
        rng_seed(&r1, seed, 1, 2);
        rng_seed(&r2, seed, 1, 2);
        er_params p = {0.7, ER_PIXEL};
        er_box b1 = {0}, b2 = {0};
        int e1 = er_apply(&p, a, C, H, W, &r1, &b1), e2 = er_apply(&p, b, C, H, W, &r2, &b2);
        cr_assert_eq(e1, e2);
        cr_assert_eq(memcmp(&b1, &b2, sizeof b1), 0);
        cr_assert_eq(memcmp(a, b, sizeof(float) * (size_t)C * H * W), 0);
    }
    free(a);
    free(b);
}
