/* tests/test_pos_resample.c - worker/train/pos_resample.c: the grid of a
 * pos_embed resampled as torch's interpolate(mode="bicubic", antialias=True,
 * align_corners=False): values pinned from torch 1.13 for an upscale and a
 * downscale, the same grid unchanged, constants kept, 2x2 -> 1x1 the mean,
 * channels independent. (tests/ref/finetune_torch.py compares it with torch
 * itself on larger grids: 7x7 -> 8x8, 14x14 -> 16x16, 16x16 -> 14x14.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "pos_resample.h"

TestSuite(pos_resample, .timeout = 60);

/* a 3x3 grid of 2 channels, token-major, as the torch values below were made */
static void grid3(float *x)
{
    for (int i = 0; i < 9; i++)
        for (int c = 0; c < 2; c++) x[i * 2 + c] = (float)(i * i % 7) - 3.0f + 0.25f * c;
}

static void expect_near(const float *got, const float *want, int n, double tol, const char *what)
{
    for (int i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= tol, "%s: value %d is %.8f, torch %.8f", what, i,
                  got[i], want[i]);
}

Test(pos_resample, a_3x3_grid_upscaled_to_4x4_and_downscaled_to_2x2_equals_torch_within_1e_6)
{
    /* torch.nn.functional.interpolate(x.reshape(1,3,3,2).permute(0,3,1,2), size=(n,n),
     * mode="bicubic", antialias=True, align_corners=False).permute(0,2,3,1) */
    static const float up[32] = {
        -3.1594453f, -2.9094453f, -2.6591249f, -2.4091249f, -0.8391787f, -0.5891789f,
        1.1594454f,  1.4094454f,  -1.6994959f, -1.4494959f, -1.5698540f, -1.3198540f,
        -0.2898279f, -0.0398279f, 1.3381177f,  1.5881177f,  -1.2097650f, -0.9597650f,
        -1.6200430f, -1.3700430f, -1.1264490f, -0.8764490f, -0.0384234f, 0.2115767f,
        -1.9972711f, -1.7472711f, -2.7782278f, -2.5282278f, -2.8245535f, -2.5745535f,
        -2.1072066f, -1.8572065f};
    static const float down[8] = {-2.1264684f, -1.8764683f, 0.2067254f,  0.4567253f,
                                   -1.8639008f, -1.6139007f, -1.4362595f, -1.1862595f};
    float x[18], y[32];
    grid3(x);
    cr_assert_eq(pos_resample_bicubic_aa(x, 3, 3, 2, y, 4, 4), 0);
    expect_near(y, up, 32, 1e-6, "3x3 -> 4x4");
    cr_assert_eq(pos_resample_bicubic_aa(x, 3, 3, 2, y, 2, 2), 0);
    expect_near(y, down, 8, 1e-6, "3x3 -> 2x2");
}

Test(pos_resample, the_same_grid_is_returned_unchanged)
{
    float x[18], y[18];
    grid3(x);
    cr_assert_eq(pos_resample_bicubic_aa(x, 3, 3, 2, y, 3, 3), 0);
    expect_near(y, x, 18, 0.0, "3x3 -> 3x3");
}

Test(pos_resample, a_constant_grid_stays_constant_up_and_down)
{
    const int D = 3, sizes[][2] = {{7, 8}, {8, 7}, {14, 16}, {16, 14}, {5, 1}, {1, 6}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int a = sizes[s][0], b = sizes[s][1];
        float *x = malloc(sizeof(float) * a * a * D), *y = malloc(sizeof(float) * b * b * D);
        cr_assert(x && y);
        for (int i = 0; i < a * a; i++)
            for (int d = 0; d < D; d++) x[i * D + d] = 0.5f * (float)(d + 1);
        cr_assert_eq(pos_resample_bicubic_aa(x, a, a, D, y, b, b), 0);
        for (int i = 0; i < b * b; i++)
            for (int d = 0; d < D; d++)
                cr_assert(fabs(y[i * D + d] - 0.5f * (float)(d + 1)) < 1e-6,
                          "%dx%d -> %dx%d: token %d channel %d is %.8f", a, a, b, b, i, d,
                          y[i * D + d]);
        free(x);
        free(y);
    }
}

Test(pos_resample, halving_a_2x2_grid_gives_its_mean)
{
    const float x[4] = {1.0f, 2.0f, 3.0f, 10.0f};
    float y;
    cr_assert_eq(pos_resample_bicubic_aa(x, 2, 2, 1, &y, 1, 1), 0);
    cr_assert(fabs(y - 4.0f) < 1e-6, "%.8f", y);
}

Test(pos_resample, a_non_square_grid_resamples_each_axis_by_its_own_scale)
{
    /* values that vary along x only stay independent of y: a 2x4 ramp to 3x2 */
    float x[8], y[6];
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++) x[r * 4 + c] = (float)c;
    cr_assert_eq(pos_resample_bicubic_aa(x, 2, 4, 1, y, 3, 2), 0);
    for (int r = 1; r < 3; r++)
        for (int c = 0; c < 2; c++)
            cr_assert(fabs(y[r * 2 + c] - y[c]) < 1e-6, "row %d col %d", r, c);
    cr_assert(y[0] < y[1], "the ramp still rises: %.6f %.6f", y[0], y[1]);
}
