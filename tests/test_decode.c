/* tests/test_decode.c - worker/data/decode.c: JPEG and PNG bytes to RGB.
 *
 * Owns: the decoder against PIL (Debian's python3-pil): tests/ref/
 * decode_images.py makes every image here with PIL (nothing downloaded) and
 * writes what PIL's convert("RGB") gives; the scaled sizes; the bomb limit;
 * refusals naming the input; a deterministic fuzz run (mutations and
 * truncations of small valid files) that must never crash or leak (it runs
 * under ASan + UBSan too, tests/run.sh).
 * Must not: depend on the network or on files outside the temp directory.
 */
#include <criterion/criterion.h>
#include <spng.h>
#include <turbojpeg.h>

#include "check.h"
#include "decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char ref_dir[64];

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    snprintf(ref_dir, sizeof ref_dir, "/tmp/vitjob-decode-XXXXXX");
    if (!mkdtemp(ref_dir)) return;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/ref/decode_images.py '%s'", ref_dir);
    if (system(cmd) != 0) return;
    setenv("VITJOB_TEST_DECODE_REFS", ref_dir, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    if (!ref_dir[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ref_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", ref_dir);
}

/* the whole file at DIR/name, malloc'd; fails the test when missing */
static uint8_t *slurp(const char *name, size_t *len)
{
    const char *dir = getenv("VITJOB_TEST_DECODE_REFS");
    cr_assert(dir, "tests/ref/decode_images.py did not run (python3-pil and jpegtran installed?)");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    cr_assert(b);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Decodes NAME.ext and compares with ref (PIL's RGB); returns the largest
 * absolute difference of any sample, failing on a size mismatch. */
static int max_diff_vs(const char *file, const char *ref, const decode_opts *o, decode_image *img)
{
    size_t len = 0, rlen = 0;
    uint8_t *data = slurp(file, &len), *r = slurp(ref, &rlen);
    char err[512] = "";
    cr_assert_eq(decode_image_rgb(data, len, file, o, img, err, sizeof err), 0, "%s", err);
    /* "W H\n" then the samples (scanf's "\n" would eat samples that look like spaces) */
    const uint8_t *nl = memchr(r, '\n', rlen < 32 ? rlen : 32);
    cr_assert(nl, "%s: no header line", ref);
    int w = 0, h = 0, skip = (int)(nl - r) + 1;
    cr_assert_eq(sscanf((char *)r, "%d %d", &w, &h), 2);
    cr_assert_eq(img->width, w, "%s: width %d, PIL's %d", file, img->width, w);
    cr_assert_eq(img->height, h, "%s: height %d, PIL's %d", file, img->height, h);
    cr_assert_eq(rlen - (size_t)skip, (size_t)w * h * 3);
    int worst = 0;
    for (size_t i = 0; i < (size_t)w * h * 3; i++) {
        int d = abs((int)img->rgb[i] - (int)r[skip + i]);
        if (d > worst) worst = d;
    }
    free(data);
    free(r);
    return worst;
}

static void patch_jpeg_size(uint8_t *b, size_t len, int w, int h);

/* the bound for every case against PIL: exact (the same libjpeg-turbo with
 * the same IDCT and upsampling, the same PNG arithmetic) */
static void equals_pil(const char *name, decode_format fmt)
{
    char file[128], ref[128];
    snprintf(file, sizeof file, "%s.%s", name, fmt == DECODE_JPEG ? "jpg" : "png");
    snprintf(ref, sizeof ref, "%s.ref", name);
    decode_image img;
    int d = max_diff_vs(file, ref, NULL, &img);
    cr_expect_eq(img.format, fmt);
    cr_expect_eq(img.scale_num, 1);
    cr_expect_eq(img.scale_denom, 1);
    cr_expect_eq(d, 0, "%s: max abs diff vs PIL %d", name, d);
    decode_image_free(&img);
}

Test(decode, baseline_420_jpeg_equals_pil_exactly) { equals_pil("jpeg_baseline_420", DECODE_JPEG); }
Test(decode, baseline_422_jpeg_equals_pil_exactly) { equals_pil("jpeg_baseline_422", DECODE_JPEG); }
Test(decode, baseline_444_jpeg_equals_pil_exactly) { equals_pil("jpeg_baseline_444", DECODE_JPEG); }
Test(decode, progressive_jpeg_equals_pil_exactly) { equals_pil("jpeg_progressive", DECODE_JPEG); }
Test(decode, optimized_huffman_jpeg_equals_pil_exactly) { equals_pil("jpeg_optimized", DECODE_JPEG); }
Test(decode, grayscale_jpeg_expands_to_pils_rgb_exactly) { equals_pil("jpeg_grayscale", DECODE_JPEG); }
Test(decode, cmyk_jpeg_converts_as_pils_adobe_cmyk_to_rgb) { equals_pil("jpeg_cmyk", DECODE_JPEG); }
Test(decode, restart_marker_jpeg_equals_pil_exactly) { equals_pil("jpeg_restart", DECODE_JPEG); }
Test(decode, rgb8_png_equals_pil) { equals_pil("png_rgb8", DECODE_PNG); }
Test(decode, gray8_png_expands_as_pil) { equals_pil("png_gray8", DECODE_PNG); }
Test(decode, gray1_png_expands_as_pil) { equals_pil("png_gray1", DECODE_PNG); }
Test(decode, rgba8_png_drops_alpha_as_pil) { equals_pil("png_rgba8", DECODE_PNG); }
Test(decode, la8_png_drops_alpha_as_pil) { equals_pil("png_la8", DECODE_PNG); }
Test(decode, palette_png_expands_as_pil) { equals_pil("png_palette", DECODE_PNG); }
Test(decode, palette_png_with_trns_ignores_it_as_pil) { equals_pil("png_palette_trns", DECODE_PNG); }
Test(decode, palette_4bit_png_expands_as_pil) { equals_pil("png_palette_4bit", DECODE_PNG); }
Test(decode, rgb16_png_keeps_the_high_byte_as_pil) { equals_pil("png_rgb16", DECODE_PNG); }
Test(decode, rgba16_png_keeps_the_high_byte_and_drops_alpha_as_pil) { equals_pil("png_rgba16", DECODE_PNG); }
Test(decode, la16_png_keeps_the_high_byte_and_drops_alpha_as_pil) { equals_pil("png_la16", DECODE_PNG); }

/* the documented exception (decode.h): PIL clips 16-bit gray to 255 */
Test(decode, gray16_png_keeps_the_high_byte_where_pil_clips)
{
    decode_image img;
    cr_expect_eq(max_diff_vs("png_gray16.png", "png_gray16_highbyte.ref", NULL, &img), 0);
    decode_image_free(&img);
    cr_expect_gt(max_diff_vs("png_gray16.png", "png_gray16.ref", NULL, &img), 100,
                 "PIL no longer clips 16-bit gray: decode.h's exception can go");
    decode_image_free(&img);
}

/* the format comes from the bytes: a PNG named .jpg is a PNG */
Test(decode, format_comes_from_magic_bytes_not_the_name)
{
    size_t len;
    uint8_t *png = slurp("png_rgb8.png", &len);
    decode_image img;
    char err[256];
    cr_assert_eq(decode_image_rgb(png, len, "shard-0.tar:photo.jpg", NULL, &img, err, sizeof err),
                 0, "%s", err);
    cr_expect_eq(img.format, DECODE_PNG);
    cr_expect_str_eq(decode_format_name(img.format), "png");
    decode_image_free(&img);
    free(png);
}

/* DCT scaling: the smallest factor whose output is still >= the minimum;
 * pixels as PIL's draft() gives at the same scale */
static void scaled(int min_w, int min_h, int num, int denom, int w, int h, const char *ref)
{
    decode_opts o = {.min_width = min_w, .min_height = min_h};
    decode_image img;
    char rf[64];
    snprintf(rf, sizeof rf, "%s.ref", ref);
    int d = max_diff_vs("jpeg_scaled_full.jpg", rf, &o, &img);
    cr_expect_eq(img.scale_num * denom, num * img.scale_denom, "min %dx%d: scale %d/%d, want %d/%d",
                 min_w, min_h, img.scale_num, img.scale_denom, num, denom);
    cr_expect_eq(img.width, w);
    cr_expect_eq(img.height, h);
    cr_expect_eq(img.src_width, 200);
    cr_expect_eq(img.src_height, 120);
    cr_expect_eq(d, 0, "min %dx%d: max abs diff vs PIL's draft %d", min_w, min_h, d);
    decode_image_free(&img);
}

Test(decode, scaled_jpeg_picks_the_smallest_scale_still_covering_the_minimum)
{
    scaled(0, 0, 1, 1, 200, 120, "jpeg_scaled_full");     /* no minimum: full */
    scaled(100, 60, 1, 2, 100, 60, "jpeg_scaled_half");   /* exactly half */
    scaled(50, 1, 1, 4, 50, 30, "jpeg_scaled_quarter");   /* width decides */
    scaled(1, 30, 1, 4, 50, 30, "jpeg_scaled_quarter");   /* height decides */
    scaled(25, 15, 1, 8, 25, 15, "jpeg_scaled_eighth");
    scaled(1, 1, 1, 8, 25, 15, "jpeg_scaled_eighth");     /* nothing below 1/8 */
    scaled(400, 10, 1, 1, 200, 120, "jpeg_scaled_full");  /* larger than the image: full */
}

Test(decode, scaled_jpeg_uses_non_power_of_two_factors)
{
    size_t len;
    uint8_t *jpg = slurp("jpeg_scaled_full.jpg", &len);
    struct { int min_w, num, denom, w, h; } cases[] = {
        {26, 1, 4, 50, 30},    /* 1/8 = 25 < 26 */
        {51, 3, 8, 75, 45},    /* 1/4 = 50 < 51 */
        {175, 7, 8, 175, 105}, /* exactly 7/8 */
        {176, 1, 1, 200, 120}, /* 7/8 = 175 < 176 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        decode_opts o = {.min_width = cases[i].min_w};
        decode_image img;
        char err[256];
        cr_assert_eq(decode_image_rgb(jpg, len, "big", &o, &img, err, sizeof err), 0, "%s", err);
        cr_expect_eq(img.scale_num * cases[i].denom, cases[i].num * img.scale_denom,
                     "min width %d: scale %d/%d, want %d/%d", cases[i].min_w, img.scale_num,
                     img.scale_denom, cases[i].num, cases[i].denom);
        cr_expect_eq(img.width, cases[i].w, "min width %d", cases[i].min_w);
        cr_expect_eq(img.height, cases[i].h, "min width %d", cases[i].min_w);
        decode_image_free(&img);
    }
    free(jpg);
}

/* PNGs are never scaled */
Test(decode, png_ignores_the_scale_minimum)
{
    decode_opts o = {.min_width = 1, .min_height = 1};
    decode_image img;
    cr_expect_eq(max_diff_vs("png_rgb8.png", "png_rgb8.ref", &o, &img), 0);
    cr_expect_eq(img.scale_num, 1);
    cr_expect_eq(img.scale_denom, 1);
    decode_image_free(&img);
}

/* libjpeg-turbo's scaled IDCTs other than 1/2, 1/4, 1/8 are slower than
 * the full decode: fast_scales skips them; a region's box is scaled
 * exactly, not rounded up as the whole image's size is */
Test(decode, fast_scales_picks_only_pils_draft_factors_and_a_box_scales_exactly)
{
    size_t len;
    uint8_t *jpg = slurp("jpeg_scaled_full.jpg", &len); /* 200 x 120 */
    struct { int fast, min_w, crop_w, num, denom; } cases[] = {
        {0, 60, 0, 3, 8},   /* 3/8 = 75 >= 60, 1/4 = 50 < 60 */
        {1, 60, 0, 1, 2},   /* 3/8 left out: 1/2 */
        {1, 50, 0, 1, 4},
        {1, 101, 0, 1, 1},  /* 7/8 .. 5/8 left out: 1/1 */
        {0, 30, 100, 3, 8}, /* a region: 100 * 3/8 = 37.5 >= 30 */
        {1, 30, 100, 1, 2},
        {0, 50, 99, 5, 8},  /* 99 / 2 = 49.5 < 50, not rounded up: 5/8 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        decode_opts o = {.min_width = cases[i].min_w, .fast_scales = cases[i].fast,
                         .crop_w = cases[i].crop_w, .crop_h = cases[i].crop_w ? 50 : 0};
        decode_image img;
        char err[256];
        cr_assert_eq(decode_image_rgb(jpg, len, "f", &o, &img, err, sizeof err), 0, "%s", err);
        cr_expect_eq(img.scale_num * cases[i].denom, cases[i].num * img.scale_denom,
                     "case %zu: scale %d/%d, want %d/%d", i, img.scale_num, img.scale_denom,
                     cases[i].num, cases[i].denom);
        decode_image_free(&img);
    }
    free(jpg);
}

/* ---- regions (decode_opts.crop_*) ---- */

/* The bound on the outermost decoded column of a cropped side (decode.h):
 * libjpeg's fancy upsampling gives (3 c0 + c1) / 4 where the crop gives c0,
 * a chroma difference of at most 255 / 4 = 64 (rounded up), times 1.772
 * (Cb into B), plus one for rounding. */
#define REGION_EDGE_BOUND 115

/* ceil of v >= 0, without libm */
static int ceil_pos(double v)
{
    int i = (int)v;
    return i + (v > i);
}

/* the decode must succeed */
static void decode_ok(const uint8_t *data, size_t len, const char *name, const decode_opts *o,
                      decode_image *img)
{
    char err[512] = "";
    cr_assert_eq(decode_image_rgb(data, len, name, o, img, err, sizeof err), 0, "%s", err);
}

/* Random boxes of one file at scale k/8: every pixel inside the box equals
 * the full decode's at that scale, every row is exact, only the outermost
 * decoded column of a cropped side may differ (by at most the bound);
 * returns the largest difference seen in those columns. */
static int region_vs_full(const char *file, int k, uint64_t *seed)
{
    size_t len;
    uint8_t *jpg = slurp(file, &len);
    decode_image full;
    tjscalingfactor f = {k, 8};
    decode_opts fo = {.min_width = TJSCALED(203, f)};
    decode_ok(jpg, len, file, &fo, &full);
    cr_assert_eq(full.scale_num * 8, k * full.scale_denom, "%s: full decode at %d/8", file, k);
    int worst_edge = 0;
    for (int t = 0; t < 24; t++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = *seed >> 16;
        int bw = 24 + (int)(r % 180), bh = 1 + (int)((r >> 8) % 131);
        if (t == 0) bw = 203, bh = 131; /* the whole image */
        int bx = (int)((r >> 16) % (uint64_t)(203 - bw + 1));
        int by = (int)((r >> 24) % (uint64_t)(131 - bh + 1));
        if (t == 1) bx = 32;  /* on an iMCU boundary at 1/1: the cut column is the box's */
        if (bx + bw > 203) bw = 203 - bx;
        decode_opts o = {.crop_x = bx, .crop_y = by, .crop_w = bw, .crop_h = bh,
                         .min_width = bw * k / 8};
        decode_image img;
        decode_ok(jpg, len, file, &o, &img);
        cr_assert_eq(img.scale_num * 8, k * img.scale_denom, "%s box %dx%d: scale %d/%d, want %d/8",
                     file, bw, bh, img.scale_num, img.scale_denom, k);
        cr_assert_eq(img.scaled_width, full.width);
        cr_assert_eq(img.scaled_height, full.height);
        double box[4] = {bx, by, bw, bh};
        decode_box_in_image(&img, box);
        /* the box's pixels, outward (box[0] and box[1] are >= 0) */
        int c0 = (int)box[0], c1 = ceil_pos(box[0] + box[2]);
        int r0 = (int)box[1], r1 = ceil_pos(box[1] + box[3]);
        if (c1 > img.width) c1 = img.width;
        if (r1 > img.height) r1 = img.height;
        /* the rows are the box's, exactly; the columns one more on each
         * side than the box, then the left one down to an iMCU boundary */
        cr_assert_eq(r0, 0, "%s: region starts %d rows above the box", file, -r0);
        cr_assert_eq(r1, img.height, "%s: region ends %d rows below the box", file,
                     img.height - r1);
        cr_assert_geq(c0, img.x > 0 ? 1 : 0, "%s: no extra column left of the box", file);
        cr_assert_lt(c0, 1 + 2 * k, "%s: %d columns left of the box, more than an iMCU", file, c0);
        cr_assert_eq(img.width - c1, img.x + c1 < img.scaled_width ? 1 : 0,
                     "%s: %d columns right of the box", file, img.width - c1);
        for (int y = 0; y < img.height; y++)
            for (int x = 0; x < img.width; x++)
                for (int ch = 0; ch < 3; ch++) {
                    int a = img.rgb[((size_t)y * img.width + x) * 3 + ch];
                    int b = full.rgb[((size_t)(img.y + y) * full.width + img.x + x) * 3 + ch];
                    int d = abs(a - b);
                    int cut = (x == 0 && img.x > 0) ||
                              (x == img.width - 1 && img.x + img.width < img.scaled_width);
                    if (cut && !(x >= c0 && x < c1)) {
                        if (d > worst_edge) worst_edge = d;
                        cr_assert_leq(d, REGION_EDGE_BOUND, "%s %d/8: cut column differs by %d",
                                      file, k, d);
                    } else {
                        cr_assert_eq(d, 0,
                                     "%s %d/8 box %d,%d %dx%d: pixel %d,%d of the region (%d,%d "
                                     "scaled) differs from the full decode by %d",
                                     file, k, bx, by, bw, bh, x, y, img.x + x, img.y + y, d);
                    }
                }
        decode_image_free(&img);
    }
    decode_image_free(&full);
    free(jpg);
    return worst_edge;
}

Test(decode, region_box_pixels_equal_the_full_decode_at_every_scale_and_kind_of_jpeg)
{
    const char *files[] = {"jpeg_region_420",       "jpeg_region_422",
                           "jpeg_region_444",       "jpeg_region_progressive",
                           "jpeg_region_grayscale", "jpeg_region_cmyk",
                           "jpeg_region_restart"};
    uint64_t seed = 7;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char file[64];
        snprintf(file, sizeof file, "%s.jpg", files[i]);
        int edge[9] = {0};
        for (int k = 1; k <= 8; k++) edge[k] = region_vs_full(file, k, &seed);
        cr_log_info("%s: largest difference in a cut column, 1/8..8/8: %d %d %d %d %d %d %d %d",
                    files[i], edge[1], edge[2], edge[3], edge[4], edge[5], edge[6], edge[7],
                    edge[8]);
        /* what decode.h states: only horizontally upsampled chroma (4:2:0
         * at 1/1, 4:2:2 at 7/8..1/4 too) makes the cut column inexact */
        int h2 = strstr(file, "444") == NULL && strstr(file, "gray") == NULL &&
                 strstr(file, "cmyk") == NULL;
        int is422 = strstr(file, "422") != NULL;
        for (int k = 1; k <= 8; k++) {
            int may = h2 && (k == 8 || (is422 && k >= 2));
            if (!may) cr_expect_eq(edge[k], 0, "%s at %d/8: cut column off by %d", file, k, edge[k]);
        }
        if (h2)
            cr_expect_gt(edge[8], 0, "%s: the cut column is now exact at 1/1: libjpeg-turbo "
                         "changed, decode.h's exactness note (and the extra column) can go",
                         file);
    }
}

/* the region path's own settings are PIL's: a box covering the image
 * decodes to PIL's convert("RGB") exactly */
Test(decode, region_covering_the_whole_image_equals_pil_exactly)
{
    const char *names[] = {"jpeg_baseline_420",  "jpeg_baseline_422", "jpeg_baseline_444",
                           "jpeg_progressive",   "jpeg_optimized",    "jpeg_grayscale",
                           "jpeg_cmyk",          "jpeg_restart",      "jpeg_region_420",
                           "jpeg_region_422",    "jpeg_region_cmyk",  "jpeg_region_progressive"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char file[64], ref[64];
        snprintf(file, sizeof file, "%s.jpg", names[i]);
        snprintf(ref, sizeof ref, "%s.ref", names[i]);
        decode_opts o = {.crop_w = 1000, .crop_h = 1000}; /* clipped to the image */
        decode_image img;
        int d = max_diff_vs(file, ref, &o, &img);
        cr_expect_eq(d, 0, "%s: whole-image region differs from PIL by %d", names[i], d);
        cr_expect_eq(img.x, 0);
        cr_expect_eq(img.y, 0);
        cr_expect_eq(img.scaled_width, img.width);
        decode_image_free(&img);
    }
}

/* the scale comes from the box, and the scaled region is PIL's draft() */
Test(decode, region_scale_comes_from_the_box_and_equals_pils_draft)
{
    size_t len, rlen;
    uint8_t *jpg = slurp("jpeg_scaled_full.jpg", &len); /* 200 x 120 */
    uint8_t *ref = slurp("jpeg_scaled_half.ref", &rlen); /* PIL's draft at 1/2: 100 x 60 */
    const uint8_t *px = memchr(ref, '\n', 32) + 1;
    decode_opts o = {.crop_x = 37, .crop_y = 21, .crop_w = 100, .crop_h = 61,
                     .min_width = 50, .min_height = 30};
    decode_image img;
    decode_ok(jpg, len, "s", &o, &img);
    cr_assert_eq(img.scale_num * 2, img.scale_denom, "scale %d/%d, want 1/2 (the whole image "
                 "would allow 1/4)", img.scale_num, img.scale_denom);
    cr_expect_eq(img.scaled_width, 100);
    cr_expect_eq(img.scaled_height, 60);
    cr_expect_eq(img.y, 10);     /* floor(21 / 2) */
    cr_expect_eq(img.height, 31); /* rows 10 .. ceil(82 / 2) = 41 */
    cr_expect_leq(img.x, 17);    /* floor(37 / 2) = 18, less one column */
    cr_expect_geq(img.x + img.width, 69); /* ceil(137 / 2) = 69, plus one column */
    double box[4] = {37, 21, 100, 61};
    decode_box_in_image(&img, box);
    cr_expect_float_eq(box[0], 18.5 - img.x, 1e-12);
    cr_expect_float_eq(box[1], 0.5, 1e-12);
    cr_expect_float_eq(box[2], 50, 1e-12);
    cr_expect_float_eq(box[3], 30.5, 1e-12);
    int worst = 0;
    for (int y = 0; y < img.height; y++)
        for (int x = 18 - img.x; x < 69 - img.x; x++)
            for (int c = 0; c < 3; c++) {
                int d = abs((int)img.rgb[((size_t)y * img.width + x) * 3 + c] -
                            (int)px[((size_t)(img.y + y) * 100 + img.x + x) * 3 + c]);
                if (d > worst) worst = d;
            }
    cr_expect_eq(worst, 0, "region at 1/2 differs from PIL's draft by %d", worst);
    decode_image_free(&img);
    free(ref);
    free(jpg);
}

Test(decode, region_is_clipped_to_the_image_and_refused_outside_it_naming_it)
{
    size_t len;
    uint8_t *jpg = slurp("jpeg_scaled_full.jpg", &len); /* 200 x 120 */
    decode_opts o = {.crop_x = -5, .crop_y = 100, .crop_w = 15, .crop_h = 50};
    decode_image img;
    decode_ok(jpg, len, "c", &o, &img);
    cr_expect_eq(img.x, 0);
    cr_expect_eq(img.y, 100);
    cr_expect_eq(img.height, 20);
    cr_expect_geq(img.width, 11);
    decode_image_free(&img);
    char err[512] = "";
    o = (decode_opts){.crop_x = 200, .crop_y = 0, .crop_w = 10, .crop_h = 10};
    cr_assert_eq(decode_image_rgb(jpg, len, "s.tar:k.jpg", &o, &img, err, sizeof err), -1);
    cr_expect_null(img.rgb);
    cr_expect_str_eq(err, "s.tar:k.jpg: region x=200 y=0 w=10 h=10 is outside the 200x120 image");
    free(jpg);
}

/* decode.h: with a region, nothing past its last row is read */
Test(decode, region_of_a_truncated_jpeg_fails_only_where_it_reaches_the_cut)
{
    size_t len;
    uint8_t *jpg = slurp("jpeg_region_420.jpg", &len); /* 203 x 131 */
    size_t cut = len * 2 / 3;
    uint8_t *part = malloc(cut);
    cr_assert(part);
    memcpy(part, jpg, cut);
    decode_opts top = {.crop_x = 50, .crop_y = 3, .crop_w = 100, .crop_h = 20};
    decode_image img;
    decode_ok(part, cut, "top", &top, &img);
    decode_image_free(&img);
    decode_opts bottom = {.crop_x = 50, .crop_y = 110, .crop_w = 100, .crop_h = 20};
    char err[512] = "";
    cr_assert_eq(decode_image_rgb(part, cut, "s.tar:cut.jpg", &bottom, &img, err, sizeof err), -1);
    cr_expect_null(img.rgb);
    cr_expect_str_eq(err, "image file is truncated: s.tar:cut.jpg");
    free(part);
    free(jpg);
}

Test(decode, region_bomb_header_is_refused_before_decoding)
{
    size_t len;
    uint8_t *jpg = slurp("jpeg_baseline_420.jpg", &len);
    patch_jpeg_size(jpg, len, 65000, 65000);
    decode_opts o = {.crop_w = 10, .crop_h = 10};
    decode_image img;
    char err[512] = "";
    cr_assert_eq(decode_image_rgb(jpg, len, "bomb.jpg", &o, &img, err, sizeof err), -1);
    cr_expect(strstr(err, "bomb.jpg: jpeg header says 65000x65000 = 4225000000 pixels"), "%s",
              err);
    free(jpg);
}

/* the header's size without decoding, as the decode reports it */
Test(decode, probe_gives_the_format_and_the_headers_size)
{
    const char *files[] = {"jpeg_region_420.jpg", "jpeg_progressive.jpg", "jpeg_cmyk.jpg",
                           "png_rgb8.png", "png_palette_4bit.png"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        size_t len;
        uint8_t *b = slurp(files[i], &len);
        decode_format f;
        int w = -1, h = -1;
        char err[256] = "";
        cr_assert_eq(decode_probe(b, len, files[i], &f, &w, &h, err, sizeof err), 0, "%s", err);
        decode_image img;
        decode_ok(b, len, files[i], NULL, &img);
        cr_expect_eq(f, img.format, "%s", files[i]);
        cr_expect_eq(w, img.src_width, "%s", files[i]);
        cr_expect_eq(h, img.src_height, "%s", files[i]);
        decode_image_free(&img);
        cr_expect_eq(decode_probe(b, 20, "cut", &f, &w, &h, err, sizeof err), -1, "%s", files[i]);
        cr_expect(strstr(err, "cut"), "%s: %s", files[i], err);
        free(b);
    }
    decode_format f;
    int w, h;
    char err[256] = "";
    cr_assert_eq(decode_probe("GIF89a", 6, "k.gif", &f, &w, &h, err, sizeof err), -1);
    cr_expect_eq(f, DECODE_UNKNOWN);
    cr_expect_str_eq(err, "k.gif: not a JPEG or PNG (6 bytes starting 47 49 46 38 39 61)");
}

Test(decode, png_ignores_the_region)
{
    decode_opts o = {.crop_x = 5, .crop_y = 5, .crop_w = 10, .crop_h = 10};
    decode_image img;
    cr_expect_eq(max_diff_vs("png_rgb8.png", "png_rgb8.ref", &o, &img), 0);
    cr_expect_eq(img.x, 0);
    cr_expect_eq(img.y, 0);
    decode_image_free(&img);
}

/* the first SOFn marker's height and width set to h, w */
static void patch_jpeg_size(uint8_t *b, size_t len, int w, int h)
{
    for (size_t i = 2; i + 9 < len; i++) {
        if (b[i] == 0xff && b[i + 1] >= 0xc0 && b[i + 1] <= 0xc2) {
            b[i + 5] = (uint8_t)(h >> 8), b[i + 6] = (uint8_t)h;
            b[i + 7] = (uint8_t)(w >> 8), b[i + 8] = (uint8_t)w;
            return;
        }
    }
    cr_assert_fail("no SOF marker");
}

Test(decode, bomb_jpeg_header_is_refused_before_decoding_naming_both_numbers)
{
    size_t len;
    uint8_t *jpg = slurp("jpeg_baseline_420.jpg", &len);
    patch_jpeg_size(jpg, len, 65000, 65000); /* 4,225,000,000 pixels claimed */
    decode_image img;
    char err[512] = "";
    cr_assert_eq(decode_image_rgb(jpg, len, "shard-3.tar:bomb.jpg", NULL, &img, err, sizeof err),
                 -1);
    cr_expect_null(img.rgb);
    cr_expect(strstr(err, "shard-3.tar:bomb.jpg: "), "%s", err);
    cr_expect(strstr(err, "65000x65000 = 4225000000 pixels"), "%s", err);
    cr_expect(strstr(err, "limit of 89478485"), "%s", err);
    free(jpg);
}

Test(decode, bomb_png_header_is_refused_before_decoding_naming_both_numbers)
{
    size_t len;
    uint8_t *png = slurp("png_rgb8.png", &len);
    /* IHDR's width and height at bytes 16..23, then its CRC at 29..32 */
    const uint8_t wh[8] = {0, 0, 0xfd, 0xe8, 0, 0, 0xfd, 0xe8}; /* 65000 x 65000 */
    memcpy(png + 16, wh, 8);
    uint32_t crc = 0xffffffffu; /* CRC-32 of "IHDR" + data, so libspng reads the header */
    for (size_t i = 12; i < 29; i++) {
        crc ^= png[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
    }
    crc ^= 0xffffffffu;
    png[29] = (uint8_t)(crc >> 24), png[30] = (uint8_t)(crc >> 16);
    png[31] = (uint8_t)(crc >> 8), png[32] = (uint8_t)crc;
    decode_image img;
    char err[512] = "";
    cr_assert_eq(decode_image_rgb(png, len, "bomb.png", NULL, &img, err, sizeof err), -1);
    cr_expect(strstr(err, "bomb.png: png header says 65000x65000 = 4225000000 pixels, more than "
                          "the limit of 89478485"), "%s", err);
    free(png);
}

Test(decode, max_pixels_option_refuses_a_real_image_just_over_it)
{
    size_t len;
    uint8_t *jpg = slurp("jpeg_baseline_420.jpg", &len); /* 67 x 45 = 3015 */
    decode_image img;
    char err[512] = "";
    decode_opts o = {.max_pixels = 3014};
    cr_assert_eq(decode_image_rgb(jpg, len, "a", &o, &img, err, sizeof err), -1);
    cr_expect(strstr(err, "67x45 = 3015 pixels, more than the limit of 3014"), "%s", err);
    o.max_pixels = 3015;
    cr_assert_eq(decode_image_rgb(jpg, len, "a", &o, &img, err, sizeof err), 0, "%s", err);
    decode_image_free(&img);
    free(jpg);
}

Test(decode, truncated_jpeg_says_image_file_is_truncated_naming_the_input)
{
    size_t len;
    uint8_t *jpg = slurp("jpeg_baseline_420.jpg", &len);
    decode_image img;
    char err[512] = "";
    cr_assert_eq(decode_image_rgb(jpg, len * 2 / 3, "s.tar:cut.jpg", NULL, &img, err, sizeof err),
                 -1);
    cr_expect_null(img.rgb);
    cr_expect_str_eq(err, "image file is truncated: s.tar:cut.jpg");
    free(jpg);
}

/* documented choice (decode.h): libjpeg warnings PIL lets through are
 * refused. Here the scan is cut short but the file still ends with EOI: PIL
 * keeps the gray-filled picture, libjpeg warns "premature end of data
 * segment". */
Test(decode, jpeg_with_corrupt_data_warning_is_refused)
{
    size_t len;
    uint8_t *jpg = slurp("jpeg_baseline_420.jpg", &len);
    size_t cut = len * 2 / 3;
    uint8_t *bad = malloc(cut + 2);
    cr_assert(bad);
    memcpy(bad, jpg, cut);
    memcpy(bad + cut, "\xff\xd9", 2);
    decode_image img;
    char err[512] = "";
    cr_assert_eq(decode_image_rgb(bad, cut + 2, "x.jpg", NULL, &img, err, sizeof err), -1);
    cr_expect_str_eq(err, "image file cannot be decoded (libjpeg: warning: Corrupt JPEG data: "
                          "premature end of data segment): x.jpg");
    free(bad);
    free(jpg);
}

Test(decode, truncated_png_says_image_file_is_truncated_without_a_source_location)
{
    size_t len;
    uint8_t *png = slurp("png_rgb8.png", &len);
    decode_image img;
    char err[512] = "";
    cr_assert_eq(decode_image_rgb(png, len / 2, "s.tar:cut.png", NULL, &img, err, sizeof err), -1);
    cr_expect_null(img.rgb);
    cr_expect_str_eq(err, "image file is truncated: s.tar:cut.png");
    free(png);
}

/* a byte changed in IHDR's CRC (bytes 29..32): not a truncation,
 * libspng's own reason in parentheses, no source file or library call */
Test(decode, corrupt_png_cannot_be_decoded_with_libspngs_reason_and_no_source_location)
{
    size_t len;
    uint8_t *png = slurp("png_rgb8.png", &len);
    png[29] ^= 0xff;
    decode_image img;
    char err[512] = "";
    cr_assert_eq(decode_image_rgb(png, len, "d/bad.png", NULL, &img, err, sizeof err), -1);
    char want[512];
    snprintf(want, sizeof want, "image file cannot be decoded (libspng: %s): d/bad.png",
             spng_strerror(SPNG_ECHUNK_CRC));
    cr_expect_str_eq(err, want);
    cr_expect_null(strstr(err, ".c:"), "%s", err);
    free(png);
}

Test(decode, neither_jpeg_nor_png_is_refused_showing_its_first_bytes)
{
    decode_image img;
    char err[256] = "";
    cr_assert_eq(decode_image_rgb("GIF89a\x01\x00", 8, "k.gif", NULL, &img, err, sizeof err), -1);
    cr_expect_str_eq(err, "k.gif: not a JPEG or PNG (8 bytes starting 47 49 46 38 39 61 01 00)");
    cr_assert_eq(decode_image_rgb("", 0, "empty", NULL, &img, err, sizeof err), -1);
    cr_expect_str_eq(err, "empty: empty (0 bytes): not a JPEG or PNG");
    cr_assert_eq(decode_image_rgb("\xff\xd8\xff", 3, "tiny.jpg", NULL, &img, err, sizeof err), -1);
    cr_expect(strstr(err, ": tiny.jpg"), "%s", err);
}

/* xorshift64*: the fuzz run's mutations, the same every run */
static uint64_t rnd_state;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * 2685821657736338717ull;
}

/* Some thousands of mutations and truncations of small valid files: every
 * decode returns 0 with a whole image or -1 with a message naming the
 * input; none crashes, reads out of bounds or leaks (ASan + UBSan build). */
Test(decode, mutated_and_truncated_files_never_crash_or_leak, .timeout = 300)
{
    const char *seeds[] = {"jpeg_baseline_420.jpg", "jpeg_progressive.jpg", "jpeg_restart.jpg",
                           "jpeg_cmyk.jpg",         "jpeg_grayscale.jpg",   "png_rgb8.png",
                           "png_palette.png",       "png_rgba16.png"};
    int ok = 0, refused = 0;
    rnd_state = 0x9e3779b97f4a7c15ull;
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        size_t len;
        uint8_t *orig = slurp(seeds[s], &len);
        for (int k = 0; k < 500; k++) {
            uint8_t *b = malloc(len);
            cr_assert(b);
            memcpy(b, orig, len);
            size_t n = len;
            switch (k % 4) {
            case 0: /* a few random bytes */
                for (int j = 1 + (int)(rnd() % 4); j > 0; j--) b[rnd() % n] = (uint8_t)rnd();
                break;
            case 1: /* truncated: every prefix of up to 63 bytes, then anywhere */
                n = k < 256 ? (size_t)k / 4 : (size_t)(rnd() % len);
                break;
            case 2: /* bits flipped in the headers (the first 200 bytes) */
                for (int j = 1 + (int)(rnd() % 3); j > 0; j--)
                    b[rnd() % (n < 200 ? n : 200)] ^= (uint8_t)(1u << (rnd() % 8));
                break;
            default: /* a byte changed and the end cut */
                b[rnd() % n] = (uint8_t)rnd();
                n = n / 2 + (size_t)(rnd() % (n / 2));
                break;
            }
            /* a copy of exactly n bytes, so that ASan sees any read past it */
            uint8_t *exact = malloc(n ? n : 1);
            cr_assert(exact);
            memcpy(exact, b, n);
            free(b);
            decode_opts o = {.max_pixels = 1u << 20, .min_width = (k % 3) * 20};
            if (k % 5 >= 3) /* a region, half the time scaled */
                o = (decode_opts){.max_pixels = 1u << 20, .min_width = (k % 2) * 10,
                                  .crop_x = (int)(rnd() % 60), .crop_y = (int)(rnd() % 40),
                                  .crop_w = 1 + (int)(rnd() % 60), .crop_h = 1 + (int)(rnd() % 40)};
            decode_image img;
            char err[512] = "";
            char name[96];
            snprintf(name, sizeof name, "%s#%d", seeds[s], k);
            if (decode_image_rgb(exact, n, name, &o, &img, err, sizeof err) == 0) {
                cr_assert(img.rgb && img.width > 0 && img.height > 0);
                /* touch every byte: the buffer is as large as it says */
                unsigned sum = 0;
                for (size_t i = 0; i < (size_t)img.width * img.height * 3; i++) sum += img.rgb[i];
                (void)sum;
                decode_image_free(&img);
                ok++;
            } else {
                cr_assert_null(img.rgb);
                cr_assert(strstr(err, name), "message without the name: %s", err);
                refused++;
            }
            free(exact);
        }
        free(orig);
    }
    cr_log_info("fuzz: %d decoded, %d refused", ok, refused);
    cr_expect_gt(refused, 0);
    cr_expect_gt(ok, 0);
}

/* the check macros carry the library's own strings */
Test(decode, check_macros_report_the_librarys_own_error_string)
{
    char err[512] = "";
    cr_expect_eq(SPNG_CHECK(SPNG_EOF, err, sizeof err), SPNG_EOF);
    cr_expect(strstr(err, spng_strerror(SPNG_EOF)), "%s", err);
    cr_expect(strstr(err, "SPNG_EOF: spng error"), "%s", err);
    tjhandle h = tjInitDecompress();
    cr_assert(h);
    int w, ht, ss, cs;
    cr_expect_eq(TJ_CHECK(tjDecompressHeader3(h, (const unsigned char *)"\x00\x00\x00\x00", 4, &w,
                                              &ht, &ss, &cs),
                          h, err, sizeof err),
                 -1);
    cr_expect(strstr(err, "tjDecompressHeader3"), "%s", err);
    cr_expect(strstr(err, "turbojpeg error -1: Not a JPEG file"), "%s", err);
    tjDestroy(h);
    cr_expect_eq(SPNG_CHECK(0, err, sizeof err), 0);
}
