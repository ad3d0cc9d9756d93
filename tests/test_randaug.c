/* tests/test_randaug.c - worker/data/randaug.c: RandAugment's ops and draws,
 * on their own.
 *
 * Owns: the properties that need no PIL: the op sets and names, the
 * magnitude noise clipped to [0, mmax or 10], the same stream giving the
 * same image and ops, p = 0 and n = 0 leaving the image (and the stream)
 * alone, the identities of each op (rotate by 0, shear and translate by 0,
 * enhance by 1, solarize at 256, posterize to 8 bits, invert twice), what
 * the fill colour fills, and a run of every op at many arguments and sizes
 * with a reused scratch (also under ASan + UBSan, tests/run.sh). Equality
 * with PIL and timm is tests/randaug.bats's (tests/ref/randaug_torch.py).
 * Must not: depend on the network, on Python, or on time.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "randaug.h"
#include "rng.h"

TestSuite(randaug, .timeout = 120);

static const ra_params GREY = {{128, 128, 128}, RA_BILINEAR};

static uint8_t *random_image(int w, int h, uint64_t seed)
{
    rng_state r;
    rng_seed(&r, seed, 5, 6);
    uint8_t *img = malloc((size_t)w * h * 3);
    cr_assert(img);
    for (size_t i = 0; i < (size_t)w * h * 3; i++) img[i] = (uint8_t)rng_u64(&r);
    return img;
}

static randaug_spec spec_of(const char *s)
{
    randaug_spec r;
    char err[512];
    cr_assert_eq(randaug_spec_parse(s, "data.randAugment", &r, err, sizeof err), 0, "%s", err);
    return r;
}

Test(randaug, the_two_sets_are_timms_15_ops_and_names_round_trip)
{
    int n;
    const ra_op *inc = ra_op_set(1, &n);
    cr_assert_eq(n, 15);
    const char *want_inc[15] = {"AutoContrast", "Equalize", "Invert", "Rotate",
                                "PosterizeIncreasing", "SolarizeIncreasing", "SolarizeAdd",
                                "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
                                "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel",
                                "TranslateYRel"};
    for (int i = 0; i < 15; i++) cr_assert_str_eq(ra_op_name(inc[i]), want_inc[i]);
    const ra_op *def = ra_op_set(0, &n);
    cr_assert_eq(n, 15);
    cr_assert_str_eq(ra_op_name(def[4]), "Posterize");
    cr_assert_str_eq(ra_op_name(def[7]), "Color");
    for (int i = 0; i < RA_N_OPS; i++) cr_assert_eq(ra_op_from_name(ra_op_name((ra_op)i)), i);
    cr_assert_eq(ra_op_from_name("Cutout"), -1);
    cr_assert_null(ra_op_name(RA_N_OPS));
}

Test(randaug, magnitude_noise_is_clipped_to_0_and_10_or_mmax)
{
    uint8_t *img = random_image(16, 16, 1);
    ra_scratch *s = ra_scratch_new();
    const char *specs[2] = {"rand-m9-mstd8-n100-p1", "rand-m20-mmax30-mstd15-n100-p1-inc1"};
    const double upper[2] = {10.0, 30.0};
    for (int k = 0; k < 2; k++) {
        randaug_spec sp = spec_of(specs[k]);
        int at_low = 0, at_high = 0, inside = 0;
        for (int seed = 0; seed < 20; seed++) {
            rng_state r;
            rng_seed(&r, 40 + seed, 0, 0);
            ra_trace t;
            cr_assert_eq(ra_apply(&sp, &GREY, img, 16, 16, &r, s, &t), 0);
            cr_assert_eq(t.n, 100);
            for (int i = 0; i < t.n; i++) {
                cr_assert(t.applied[i]);
                cr_assert(t.magnitude[i] >= 0.0 && t.magnitude[i] <= upper[k], "%s: %g", specs[k],
                          t.magnitude[i]);
                at_low += t.magnitude[i] == 0.0;
                at_high += t.magnitude[i] == upper[k];
                inside += t.magnitude[i] > 0.0 && t.magnitude[i] < upper[k];
            }
        }
        /* the noise reaches past both ends (clipped there) and varies inside */
        cr_assert(at_low > 10 && at_high > 10 && inside > 500, "%s: %d at 0, %d at the top, %d inside",
                  specs[k], at_low, at_high, inside);
    }
    /* mstd 0: the magnitude as given, every time */
    randaug_spec sp = spec_of("rand-m7-n50-p1");
    rng_state r;
    rng_seed(&r, 3, 0, 0);
    ra_trace t;
    cr_assert_eq(ra_apply(&sp, &GREY, img, 16, 16, &r, s, &t), 0);
    for (int i = 0; i < t.n; i++) cr_assert_eq(t.magnitude[i], 7.0);
    /* mstd > 100: uniform in [0, m] */
    sp = spec_of("rand-m8-n100-p1-mstd200");
    rng_seed(&r, 4, 0, 0);
    cr_assert_eq(ra_apply(&sp, &GREY, img, 16, 16, &r, s, &t), 0);
    double lo = 99, hi = -1;
    for (int i = 0; i < t.n; i++) {
        lo = fmin(lo, t.magnitude[i]);
        hi = fmax(hi, t.magnitude[i]);
    }
    cr_assert(lo >= 0 && lo < 1 && hi <= 8 && hi > 7, "uniform magnitudes in [%g, %g]", lo, hi);
    ra_scratch_free(s);
    free(img);
}

Test(randaug, the_same_stream_gives_the_same_image_and_ops_another_does_not)
{
    randaug_spec sp = spec_of("rand-m9-mstd0.5-inc1-n4");
    const int w = 40, h = 30;
    uint8_t *src = random_image(w, h, 2);
    uint8_t *a = malloc((size_t)w * h * 3), *b = malloc((size_t)w * h * 3);
    ra_scratch *s = ra_scratch_new();
    int differ = 0;
    for (int seed = 0; seed < 30; seed++) {
        memcpy(a, src, (size_t)w * h * 3);
        memcpy(b, src, (size_t)w * h * 3);
        rng_state r1, r2;
        rng_seed(&r1, seed, 9, 9);
        rng_seed(&r2, seed, 9, 9);
        ra_trace t1, t2;
        memset(&t1, 0, sizeof t1);
        memset(&t2, 0, sizeof t2);
        cr_assert_eq(ra_apply(&sp, &GREY, a, w, h, &r1, s, &t1), 0);
        cr_assert_eq(ra_apply(&sp, &GREY, b, w, h, &r2, NULL, &t2), 0); /* scratch or none */
        cr_assert_eq(memcmp(a, b, (size_t)w * h * 3), 0, "seed %d", seed);
        cr_assert_eq(memcmp(&t1, &t2, sizeof t1), 0);
        cr_assert_eq(memcmp(&r1, &r2, sizeof r1), 0, "the streams end in the same state");
        memcpy(b, src, (size_t)w * h * 3);
        rng_seed(&r2, seed + 1000, 9, 9);
        cr_assert_eq(ra_apply(&sp, &GREY, b, w, h, &r2, s, &t2), 0);
        differ += memcmp(a, b, (size_t)w * h * 3) != 0;
    }
    cr_assert(differ >= 25, "only %d of 30 other streams gave another image", differ);
    ra_scratch_free(s);
    free(src);
    free(a);
    free(b);
}

Test(randaug, p0_n0_and_off_leave_the_image_and_the_stream_alone)
{
    const int w = 24, h = 24;
    uint8_t *src = random_image(w, h, 3), *img = malloc((size_t)w * h * 3);
    const char *specs[3] = {"rand-m9-mstd0.5-inc1-p0-n8", "rand-m9-n0", ""};
    for (int k = 0; k < 3; k++) {
        randaug_spec sp = spec_of(specs[k]);
        for (int seed = 0; seed < 200; seed++) {
            memcpy(img, src, (size_t)w * h * 3);
            rng_state r;
            rng_seed(&r, seed, 1, 1);
            ra_trace t;
            cr_assert_eq(ra_apply(&sp, &GREY, img, w, h, &r, NULL, &t), 0);
            cr_assert_eq(memcmp(img, src, (size_t)w * h * 3), 0, "\"%s\" changed the image", specs[k]);
            for (int i = 0; i < t.n; i++) cr_assert_eq(t.applied[i], 0);
            if (k > 0) { /* n = 0 and off draw nothing: the crop's stream continues as it was */
                rng_state fresh;
                rng_seed(&fresh, seed, 1, 1);
                cr_assert_eq(memcmp(&r, &fresh, sizeof r), 0);
            }
        }
    }
    free(src);
    free(img);
}

Test(randaug, p1_applies_every_chosen_op_and_picks_every_op_of_the_set)
{
    randaug_spec sp = spec_of("rand-m5-n2-p1-inc1");
    uint8_t *img = random_image(12, 12, 4);
    int seen[RA_N_OPS] = {0};
    for (int seed = 0; seed < 400; seed++) {
        rng_state r;
        rng_seed(&r, seed, 0, 0);
        ra_trace t;
        cr_assert_eq(ra_apply(&sp, &GREY, img, 12, 12, &r, NULL, &t), 0);
        cr_assert_eq(t.n, 2);
        for (int i = 0; i < 2; i++) {
            cr_assert(t.applied[i]);
            seen[t.op[i]]++;
        }
    }
    int n;
    const ra_op *set = ra_op_set(1, &n);
    for (int i = 0; i < n; i++)
        cr_assert(seen[set[i]] > 20, "%s chosen %d times of 800", ra_op_name(set[i]), seen[set[i]]);
    cr_assert_eq(seen[RA_POSTERIZE] + seen[RA_SOLARIZE] + seen[RA_COLOR], 0,
                 "the increasing set has none of the plain ones");
    free(img);
}

/* op(arg) leaves a random image as it is */
static void identity(ra_op op, double arg, ra_resample rs)
{
    const int w = 19, h = 13;
    uint8_t *src = random_image(w, h, 5 + op), *img = malloc((size_t)w * h * 3);
    memcpy(img, src, (size_t)w * h * 3);
    ra_params p = {{1, 2, 3}, rs};
    cr_assert_eq(ra_op_apply(op, arg, &p, img, w, h, NULL), 0);
    cr_assert_eq(memcmp(img, src, (size_t)w * h * 3), 0, "%s(%g) changed the image", ra_op_name(op),
                 arg);
    free(src);
    free(img);
}

Test(randaug, the_ops_at_their_neutral_arguments_change_nothing)
{
    for (int rs = RA_NEAREST; rs <= RA_BICUBIC; rs++) {
        identity(RA_ROTATE, 0.0, (ra_resample)rs);
        identity(RA_ROTATE, -0.0, (ra_resample)rs);
        identity(RA_ROTATE, 360.0, (ra_resample)rs);
        identity(RA_SHEAR_X, 0.0, (ra_resample)rs);
        identity(RA_SHEAR_Y, 0.0, (ra_resample)rs);
        identity(RA_TRANSLATE_X_REL, 0.0, (ra_resample)rs);
        identity(RA_TRANSLATE_Y_REL, 0.0, (ra_resample)rs);
    }
    for (ra_op op = RA_COLOR; op <= RA_SHARPNESS_INCREASING; op++) identity(op, 1.0, RA_BICUBIC);
    identity(RA_SOLARIZE, 256, RA_BICUBIC);
    identity(RA_SOLARIZE_ADD, 0, RA_BICUBIC);
    identity(RA_POSTERIZE, 8, RA_BICUBIC);
    identity(RA_POSTERIZE_INCREASING, 9, RA_BICUBIC);

    const int w = 8, h = 5;
    uint8_t *src = random_image(w, h, 6), *img = malloc((size_t)w * h * 3);
    memcpy(img, src, (size_t)w * h * 3);
    cr_assert_eq(ra_op_apply(RA_INVERT, 0, &GREY, img, w, h, NULL), 0);
    for (int i = 0; i < w * h * 3; i++) cr_assert_eq(img[i], 255 - src[i]);
    cr_assert_eq(ra_op_apply(RA_INVERT, 0, &GREY, img, w, h, NULL), 0);
    cr_assert_eq(memcmp(img, src, (size_t)w * h * 3), 0);
    cr_assert_eq(ra_op_apply(RA_POSTERIZE, 0, &GREY, img, w, h, NULL), 0);
    for (int i = 0; i < w * h * 3; i++) cr_assert_eq(img[i], 0, "posterize to 0 bits is black");
    free(src);
    free(img);
}

Test(randaug, what_moves_out_of_the_image_is_filled_with_the_fill_colour)
{
    const int w = 10, h = 6;
    uint8_t *img = random_image(w, h, 7);
    ra_params p = {{124, 116, 104}, RA_BICUBIC};
    /* translated right by half the width: the left half is the fill */
    cr_assert_eq(ra_op_apply(RA_TRANSLATE_X_REL, -0.5, &p, img, w, h, NULL), 0);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w / 2; x++)
            for (int c = 0; c < 3; c++)
                cr_assert_eq(img[(y * w + x) * 3 + c], p.fill[c], "(%d, %d)", x, y);
    /* translated a whole height: all fill */
    cr_assert_eq(ra_op_apply(RA_TRANSLATE_Y_REL, 1.0, &p, img, w, h, NULL), 0);
    for (int i = 0; i < w * h; i++)
        for (int c = 0; c < 3; c++) cr_assert_eq(img[i * 3 + c], p.fill[c]);
    free(img);
}

Test(randaug, every_op_at_many_arguments_and_sizes_with_a_reused_scratch)
{
    ra_scratch *s = ra_scratch_new();
    rng_state r;
    rng_seed(&r, 11, 0, 0);
    const int sizes[][2] = {{1, 1}, {2, 3}, {3, 3}, {17, 1}, {1, 9}, {31, 20}, {64, 64}};
    for (int k = 0; k < 7; k++) {
        int w = sizes[k][0], h = sizes[k][1];
        uint8_t *img = random_image(w, h, 100 + k);
        for (int op = 0; op < RA_N_OPS; op++)
            for (int j = 0; j < 12; j++) {
                double m = 30.0 * rng_uniform(&r);
                ra_params p = {{(uint8_t)rng_u64(&r), 0, 255}, (ra_resample)(j % 3)};
                double arg = ra_op_arg((ra_op)op, m, j & 1);
                cr_assert_eq(ra_op_apply((ra_op)op, arg, &p, img, w, h, s), 0);
            }
        free(img);
    }
    ra_scratch_free(s);
}
