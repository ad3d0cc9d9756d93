/* tests/ref/xf_check.c - the C side of the transform checks against torch and
 * torchvision (a test tool, not part of the product).
 *
 * Owns: running worker/data/transform.c on inputs that
 * tests/ref/transform_torch.py chose, and writing what it gives, for that
 * script to compare. Must not: compute anything itself beyond reading the
 * inputs and writing the outputs (it calls the loader's code).
 *
 * usage:
 *   xf_check resample MANIFEST
 *       one resample per line:
 *       IMG W H X Y BW BH BOUNDS S INTERP CH FLIP OUT
 *       IMG: raw RGB bytes (H*W*3); BOUNDS: box (xf_resample) or image
 *       (xf_resample_ex, bounds = the whole image); INTERP: bilinear|bicubic;
 *       mean 0, std 1; OUT: CH*S*S float32, CHW. All calls share one
 *       xf_scratch, so its reuse across sizes is exercised too.
 *   xf_check center W H SIZE CROP_PCT
 *       prints xf_center_crop_box's box: X Y W H (%.17g)
 *   xf_check rrc W H SCALE0 SCALE1 RATIO0 RATIO1 SEED N
 *       N boxes of xf_random_resized_crop from one stream, rng_seed(SEED, 0,
 *       0): one "X Y W H" line each
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "stdfds.h"
#include "transform.h"

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "xf_check: %s: %s\n", what, why);
    return 1;
}

static int resample(const char *manifest)
{
    FILE *m = fopen(manifest, "r");
    if (!m) return fail(manifest, "cannot open");
    xf_scratch *s = xf_scratch_new();
    if (!s) return fail(manifest, "out of memory");
    static const float zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
    char img[1024], bounds[16], interp[16], outp[1024], line[4096];
    int rc = 0, lineno = 0;
    while (!rc && fgets(line, sizeof line, m)) {
        lineno++;
        int w, h, size, ch, flip;
        xf_box b;
        if (sscanf(line, "%1023s %d %d %lf %lf %lf %lf %15s %d %15s %d %d %1023s", img, &w, &h,
                   &b.x, &b.y, &b.w, &b.h, bounds, &size, interp, &ch, &flip, outp) != 13) {
            rc = fail(manifest, "a line is not IMG W H X Y BW BH BOUNDS S INTERP CH FLIP OUT");
            break;
        }
        size_t n = (size_t)w * h * 3, no = (size_t)ch * size * size;
        uint8_t *rgb = malloc(n ? n : 1);
        float *out = malloc(sizeof(float) * (no ? no : 1));
        FILE *f = fopen(img, "rb");
        if (!rgb || !out || !f || fread(rgb, 1, n, f) != n) rc = fail(img, "cannot read the image");
        if (f) fclose(f);
        if (!rc) {
            xf_params p = {size, ch, strcmp(interp, "bicubic") ? XF_BILINEAR : XF_BICUBIC, zero,
                           one};
            xf_box whole = {0, 0, w, h};
            char err[512];
            if (xf_resample_ex(rgb, w, h, b, strcmp(bounds, "image") ? NULL : &whole, flip, &p, s,
                               out, err, sizeof err))
                rc = fail(img, err);
        }
        if (!rc) {
            FILE *o = fopen(outp, "wb");
            if (!o || fwrite(out, sizeof(float), no, o) != no) rc = fail(outp, "cannot write");
            if (o && fclose(o)) rc = fail(outp, "cannot write");
        }
        free(rgb);
        free(out);
    }
    xf_scratch_free(s);
    fclose(m);
    return rc;
}

int main(int argc, char **argv)
{
    stdfds_ensure("xf_check", 1);
    if (argc == 3 && !strcmp(argv[1], "resample")) return resample(argv[2]);
    if (argc == 6 && !strcmp(argv[1], "center")) {
        xf_box b = xf_center_crop_box(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atof(argv[5]));
        printf("%.17g %.17g %.17g %.17g\n", b.x, b.y, b.w, b.h);
        return 0;
    }
    if (argc == 10 && !strcmp(argv[1], "rrc")) {
        int w = atoi(argv[2]), h = atoi(argv[3]);
        double scale[2] = {atof(argv[4]), atof(argv[5])}, ratio[2] = {atof(argv[6]), atof(argv[7])};
        rng_state r;
        rng_seed(&r, strtoull(argv[8], NULL, 10), 0, 0);
        long n = atol(argv[9]);
        for (long i = 0; i < n; i++) {
            xf_box b = xf_random_resized_crop(w, h, scale, ratio, &r);
            printf("%.17g %.17g %.17g %.17g\n", b.x, b.y, b.w, b.h);
        }
        return 0;
    }
    fprintf(stderr, "usage: xf_check resample MANIFEST | center W H SIZE CROP_PCT |"
                    " rrc W H SCALE0 SCALE1 RATIO0 RATIO1 SEED N\n");
    return 2;
}
