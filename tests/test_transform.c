/* tests/test_transform.c - worker/data/transform.c: the crop boxes and the
 * resampler, on their own.
 *
 * Owns: the properties that need no torch: random boxes stay inside the
 * image and are whole pixels, the fallback for extreme aspect ratios, timm's
 * evaluation box for known sizes (Python's half-to-even round), the identity
 * resample, the flip, PIL's "L" weights, the normalisation, the refusals,
 * and a fuzz run of fractional boxes with a reused scratch (also under ASan +
 * UBSan, tests/run.sh). Equality with torch and torchvision is
 * tests/transform.bats's (tests/ref/transform_torch.py).
 * Must not: depend on the network, on Python, or on time.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "transform.h"

TestSuite(transform, .timeout = 120);

static const double SCALE[2] = {0.08, 1.0}, RATIO[2] = {3.0 / 4.0, 4.0 / 3.0};
static const float ZERO[3] = {0, 0, 0}, ONE[3] = {1, 1, 1};

static uint8_t *random_image(int w, int h, uint64_t seed)
{
    rng_state r;
    rng_seed(&r, seed, 1, 2);
    uint8_t *img = malloc((size_t)w * h * 3);
    cr_assert(img);
    for (size_t i = 0; i < (size_t)w * h * 3; i++) img[i] = (uint8_t)rng_u64(&r);
    return img;
}

Test(transform, random_resized_crop_boxes_are_whole_pixels_inside_the_image)
{
    rng_state sizes;
    rng_seed(&sizes, 7, 0, 0);
    for (int k = 0; k < 400; k++) {
        int w = 1 + (int)rng_below(&sizes, 1200), h = 1 + (int)rng_below(&sizes, 1200);
        rng_state r;
        rng_seed(&r, 1000 + k, 3, 4);
        for (int d = 0; d < 50; d++) {
            xf_box b = xf_random_resized_crop(w, h, SCALE, RATIO, &r);
            cr_assert(b.x == floor(b.x) && b.y == floor(b.y) && b.w == floor(b.w) &&
                          b.h == floor(b.h),
                      "%dx%d: box %g %g %g %g not whole", w, h, b.x, b.y, b.w, b.h);
            cr_assert(b.x >= 0 && b.y >= 0 && b.w >= 1 && b.h >= 1 && b.x + b.w <= w &&
                          b.y + b.h <= h,
                      "%dx%d: box %g %g %g %g outside", w, h, b.x, b.y, b.w, b.h);
        }
    }
}

Test(transform, random_resized_crop_is_a_function_of_the_stream)
{
    rng_state a, b;
    rng_seed(&a, 99, 5, 6);
    rng_seed(&b, 99, 5, 6);
    for (int d = 0; d < 1000; d++) {
        xf_box x = xf_random_resized_crop(500, 375, SCALE, RATIO, &a);
        xf_box y = xf_random_resized_crop(500, 375, SCALE, RATIO, &b);
        cr_assert(!memcmp(&x, &y, sizeof x));
    }
}

Test(transform, extreme_aspect_ratios_take_the_fallback_centered_crop)
{
    rng_state r;
    rng_seed(&r, 1, 0, 0);
    for (int d = 0; d < 200; d++) {
        /* no draw fits 10 pixels of height: the whole height, width 10 * 4/3 rounded */
        xf_box b = xf_random_resized_crop(1000, 10, SCALE, RATIO, &r);
        cr_assert(b.x == 493 && b.y == 0 && b.w == 13 && b.h == 10, "%g %g %g %g", b.x, b.y, b.w,
                  b.h);
        b = xf_random_resized_crop(10, 1000, SCALE, RATIO, &r);
        cr_assert(b.x == 0 && b.y == 493 && b.w == 10 && b.h == 13, "%g %g %g %g", b.x, b.y, b.w,
                  b.h);
    }
    /* inside the ratio range the fallback is the whole image: scale above 1
     * makes every draw too big */
    const double big[2] = {1.5, 2.0};
    xf_box b = xf_random_resized_crop(640, 480, big, RATIO, &r);
    cr_assert(b.x == 0 && b.y == 0 && b.w == 640 && b.h == 480, "%g %g %g %g", b.x, b.y, b.w, b.h);
}

static void expect_center(int w, int h, int size, double pct, int nw, int nh, int left, int top)
{
    xf_box b = xf_center_crop_box(w, h, size, pct);
    double sx = (double)w / nw, sy = (double)h / nh;
    cr_assert(fabs(b.x - left * sx) < 1e-9 && fabs(b.y - top * sy) < 1e-9 &&
                  fabs(b.w - size * sx) < 1e-9 && fabs(b.h - size * sy) < 1e-9,
              "%dx%d size %d pct %g: box %.9g %.9g %.9g %.9g, want %dx%d crop at %d,%d", w, h, size,
              pct, b.x, b.y, b.w, b.h, nw, nh, left, top);
}

Test(transform, center_crop_box_is_timms_resize_then_center_crop)
{
    /* 256 = 224 / 0.875 on the short side, 341 = int(256 * 500 / 375); left
     * round(58.5) = 58 (half to even), top 16 */
    expect_center(500, 375, 224, 0.875, 341, 256, 58, 16);
    expect_center(375, 500, 224, 0.875, 256, 341, 16, 58);
    /* floor(224 / 0.9) = 248; int(248 * 640 / 427) = 371; round(73.5) = 74 */
    expect_center(640, 427, 224, 0.9, 371, 248, 74, 12);
    /* crop_pct 1: the short side is the crop */
    expect_center(224, 224, 224, 1.0, 224, 224, 0, 0);
    expect_center(300, 224, 224, 1.0, 300, 224, 38, 0);
    /* Python's round: round(0.5) = 0, round(2.5) = 2 (half up would say 1 and 3) */
    expect_center(225, 224, 224, 1.0, 225, 224, 0, 0);
    expect_center(229, 224, 224, 1.0, 229, 224, 2, 0);
    expect_center(224, 229, 224, 1.0, 224, 229, 0, 2);
    /* the short side scaled up: 100 -> 256, 150 -> int(256 * 150 / 100) = 384 */
    expect_center(150, 100, 224, 0.875, 384, 256, 80, 16);
}

static xf_params params(int size, int ch, xf_interp in)
{
    return (xf_params){size, ch, in, ZERO, ONE};
}

Test(transform, the_whole_image_at_its_own_size_gives_its_pixels)
{
    int w = 37, h = 37;
    uint8_t *img = random_image(w, h, 11);
    float *out = malloc(sizeof(float) * 3 * w * h);
    char err[256];
    for (int in = 0; in < 2; in++) {
        xf_params p = params(w, 3, in ? XF_BICUBIC : XF_BILINEAR);
        cr_assert_eq(xf_resample(img, w, h, (xf_box){0, 0, w, h}, 0, &p, out, err, sizeof err), 0,
                     "%s", err);
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < w * h; i++) {
                float v = out[c * w * h + i] * 255.0f, want = img[3 * i + c];
                cr_assert(fabsf(v - want) < 1e-3f, "interp %d channel %d pixel %d: %g, want %g", in,
                          c, i, v, want);
            }
    }
    free(out);
    free(img);
}

Test(transform, flip_mirrors_each_row)
{
    int w = 120, h = 90, S = 33;
    uint8_t *img = random_image(w, h, 12);
    float *a = malloc(sizeof(float) * 3 * S * S), *b = malloc(sizeof(float) * 3 * S * S);
    char err[256];
    xf_box box = {10.25, 7.5, 93.0, 61.75};
    for (int in = 0; in < 2; in++) {
        xf_params p = params(S, 3, in ? XF_BICUBIC : XF_BILINEAR);
        cr_assert_eq(xf_resample(img, w, h, box, 0, &p, a, err, sizeof err), 0, "%s", err);
        cr_assert_eq(xf_resample(img, w, h, box, 1, &p, b, err, sizeof err), 0, "%s", err);
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++)
                    cr_assert(a[(c * S + y) * S + x] == b[(c * S + y) * S + S - 1 - x],
                              "c %d y %d x %d", c, y, x);
    }
    free(a);
    free(b);
    free(img);
}

Test(transform, one_channel_is_pils_L)
{
    /* PIL 9.4's convert("L") of pure red, green, blue, a brown and white, and
     * of three colours whose L changes if any weight moves by 1/65536 or the
     * rounding constant goes */
    static const uint8_t rgb[][3] = {{255, 0, 0},     {0, 255, 0},     {0, 0, 255},
                                     {128, 64, 32},   {255, 255, 255}, {102, 8, 222},
                                     {163, 215, 154}, {112, 239, 173}};
    static const int L[] = {76, 150, 29, 79, 255, 61, 192, 194};
    int w = 9, h = 7, S = 5;
    uint8_t *img = malloc((size_t)w * h * 3);
    float out[25];
    char err[256];
    for (size_t k = 0; k < sizeof L / sizeof *L; k++) {
        for (int i = 0; i < w * h; i++) memcpy(img + 3 * i, rgb[k], 3);
        xf_params p = params(S, 1, XF_BICUBIC);
        cr_assert_eq(xf_resample(img, w, h, (xf_box){1, 1, 7, 5}, 0, &p, out, err, sizeof err), 0,
                     "%s", err);
        for (int i = 0; i < S * S; i++)
            cr_assert(fabsf(out[i] * 255.0f - L[k]) < 1e-3f, "colour %zu: %g, want L %d", k,
                      out[i] * 255.0f, L[k]);
    }
    free(img);
}

Test(transform, normalises_per_channel)
{
    int w = 16, h = 16, S = 8;
    uint8_t *img = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++) img[3 * i] = 51, img[3 * i + 1] = 102, img[3 * i + 2] = 204;
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    xf_params p = {S, 3, XF_BILINEAR, mean, std};
    float out[3 * 64];
    char err[256];
    cr_assert_eq(xf_resample(img, w, h, (xf_box){0, 0, w, h}, 0, &p, out, err, sizeof err), 0, "%s",
                 err);
    for (int c = 0; c < 3; c++) {
        float want = ((c == 0 ? 51 : c == 1 ? 102 : 204) / 255.0f - mean[c]) / std[c];
        for (int i = 0; i < S * S; i++)
            cr_assert(fabsf(out[c * S * S + i] - want) < 1e-5f, "c %d: %g", c, out[c * 64 + i]);
    }
    free(img);
}

static void refused(xf_box box, const xf_params *p, const char *why)
{
    uint8_t img[20 * 10 * 3] = {0};
    float out[3 * 16 * 16];
    char err[256] = "";
    cr_assert_eq(xf_resample(img, 20, 10, box, 0, p, out, err, sizeof err), -1,
                 "box %g %g %g %g accepted", box.x, box.y, box.w, box.h);
    cr_assert(strstr(err, why), "'%s' not in: %s", why, err);
}

Test(transform, boxes_outside_the_image_or_empty_and_bad_parameters_are_refused)
{
    xf_params p = params(16, 3, XF_BILINEAR);
    refused((xf_box){-1, 0, 5, 5}, &p, "outside the 20x10 image");
    refused((xf_box){0, -0.01, 5, 5}, &p, "outside the 20x10 image");
    refused((xf_box){16, 0, 5, 5}, &p, "outside the 20x10 image");
    refused((xf_box){0, 5, 5, 5.5}, &p, "outside the 20x10 image");
    refused((xf_box){25, 0, 1, 1}, &p, "outside the 20x10 image");
    refused((xf_box){0, 0, 0, 5}, &p, "empty box");
    refused((xf_box){0, 0, 5, -1}, &p, "empty box");
    refused((xf_box){NAN, 0, 5, 5}, &p, "empty box");
    refused((xf_box){0, 0, INFINITY, 5}, &p, "empty box");
    xf_params q = params(16, 2, XF_BILINEAR);
    refused((xf_box){0, 0, 5, 5}, &q, "channels 2");
    q = params(0, 3, XF_BILINEAR);
    refused((xf_box){0, 0, 5, 5}, &q, "out_size 0");
    static const float zstd[3] = {1, 0, 1};
    q = (xf_params){16, 3, XF_BICUBIC, ZERO, zstd};
    refused((xf_box){0, 0, 5, 5}, &q, "channel 1");

    /* a box past the image by rounding noise (a scaled box) is fine */
    uint8_t img[20 * 10 * 3] = {0};
    float out[3 * 16 * 16];
    char err[256] = "";
    cr_assert_eq(
        xf_resample(img, 20, 10, (xf_box){15, 5, 5 + 1e-9, 5 + 1e-9}, 0, &p, out, err, sizeof err),
        0, "%s", err);
    /* bounds must hold the box */
    xf_box bounds = {0, 0, 10, 10};
    cr_assert_eq(xf_resample_ex(img, 20, 10, (xf_box){5, 0, 10, 10}, &bounds, 0, &p, NULL, out, err,
                                sizeof err),
                 -1);
    cr_assert(strstr(err, "outside its bounds"), "%s", err);
}

/* Fractional boxes of every size on images of every size through one reused
 * scratch: the same values as with a fresh scratch, finite, and - bilinear
 * weights being non-negative - inside the pixel range. ASan + UBSan watch the
 * reads at the edges. */
Test(transform, fractional_boxes_with_a_reused_scratch_stay_in_range)
{
    rng_state r;
    rng_seed(&r, 31337, 0, 0);
    xf_scratch *s = xf_scratch_new();
    cr_assert(s);
    char err[256];
    for (int k = 0; k < 300; k++) {
        int w = 1 + (int)rng_below(&r, 300), h = 1 + (int)rng_below(&r, 300);
        int S = 1 + (int)rng_below(&r, k % 10 == 0 ? 400 : 64), ch = rng_below(&r, 4) ? 3 : 1;
        xf_interp in = rng_below(&r, 2) ? XF_BICUBIC : XF_BILINEAR;
        double bw = w * (0.001 + 0.999 * rng_uniform(&r)),
               bh = h * (0.001 + 0.999 * rng_uniform(&r));
        xf_box box = {(w - bw) * rng_uniform(&r), (h - bh) * rng_uniform(&r), bw, bh};
        uint8_t *img = random_image(w, h, (uint64_t)k);
        size_t n = (size_t)ch * S * S;
        float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
        xf_params p = params(S, ch, in);
        xf_box whole = {0, 0, w, h};
        int flip = (int)rng_below(&r, 2), wide = (int)rng_below(&r, 2);
        cr_assert_eq(
            xf_resample_ex(img, w, h, box, wide ? &whole : NULL, flip, &p, s, a, err, sizeof err),
            0, "%dx%d box %g %g %g %g: %s", w, h, box.x, box.y, box.w, box.h, err);
        cr_assert_eq(xf_resample_ex(img, w, h, box, wide ? &whole : NULL, flip, &p, NULL, b, err,
                                    sizeof err),
                     0, "%s", err);
        cr_assert(!memcmp(a, b, sizeof(float) * n),
                  "%dx%d box %g %g %g %g to %d: scratch reuse changed the output", w, h, box.x,
                  box.y, box.w, box.h, S);
        for (size_t i = 0; i < n; i++) {
            cr_assert(isfinite(a[i]), "%dx%d box %g %g %g %g to %d: value %zu not finite", w, h,
                      box.x, box.y, box.w, box.h, S, i);
            if (in == XF_BILINEAR)
                cr_assert(a[i] >= -1e-6f && a[i] <= 1.0f + 1e-6f, "%dx%d box %g %g %g %g to %d: %g",
                          w, h, box.x, box.y, box.w, box.h, S, a[i]);
        }
        free(a);
        free(b);
        free(img);
    }
    xf_scratch_free(s);
    xf_scratch_free(NULL);
}

/* a fractional box reads only the whole pixels it touches: pixels outside
 * [floor(x), ceil(x + w)) cannot change the output */
Test(transform, a_box_reads_only_the_pixels_it_touches)
{
    int w = 40, h = 30, S = 16;
    uint8_t *img = random_image(w, h, 5), *other = random_image(w, h, 6);
    xf_box box = {10.4, 5.6, 12.2, 15.1}; /* pixels 10..22, 5..20 */
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            if (x >= 10 && x <= 22 && y >= 5 && y <= 20)
                memcpy(other + 3 * (y * w + x), img + 3 * (y * w + x), 3);
    float a[3 * 256], b[3 * 256];
    char err[256];
    for (int in = 0; in < 2; in++) {
        xf_params p = params(S, 3, in ? XF_BICUBIC : XF_BILINEAR);
        cr_assert_eq(xf_resample(img, w, h, box, 0, &p, a, err, sizeof err), 0, "%s", err);
        cr_assert_eq(xf_resample(other, w, h, box, 0, &p, b, err, sizeof err), 0, "%s", err);
        cr_assert(!memcmp(a, b, sizeof a), "interp %d read outside the box", in);
    }
    free(img);
    free(other);
}
