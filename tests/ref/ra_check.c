/* tests/ref/ra_check.c - the C side of the RandAugment and random erasing
 * checks against PIL and torch (a test tool, not part of the product).
 *
 * Owns: running worker/data/randaug.c, erasing.c and transform.c's 8-bit
 * helpers on inputs that tests/ref/randaug_torch.py chose, and writing what
 * they give, for that script to compare. Must not: compute anything itself
 * beyond reading the inputs and writing the outputs (it calls the loader's
 * code).
 *
 * usage (each MANIFEST holds one call per line; images are raw bytes, HWC
 * RGB; tensors float32 CHW):
 *   ra_check ops MANIFEST
 *       NAME ARG RESAMPLE FILLR FILLG FILLB W H IN OUT: ra_op_apply(NAME, ARG)
 *       (RESAMPLE nearest|bilinear|bicubic). All lines share one ra_scratch.
 *   ra_check args < LINES
 *       NAME MAGNITUDE NEGATE per line: prints ra_op_arg's value (%.17g)
 *   ra_check apply MANIFEST
 *       SPEC SEED RESAMPLE FILLR FILLG FILLB W H IN OUT: ra_apply(SPEC) drawing
 *       from rng_seed(SEED, 0, 0); prints per line "K" and then, per chosen
 *       op, "NAME APPLIED MAGNITUDE ARG" (%.17g)
 *   ra_check erase MANIFEST
 *       PROB MODE SEED C H W IN OUT: er_apply drawing from rng_seed(SEED, 0,
 *       0); prints "box TOP LEFT H W" or "none" per line
 *   ra_check u8 MANIFEST
 *       IMG W H X Y BW BH S INTERP FLIP OUT: xf_resample_u8 (bounds = the
 *       box), S x S x 3 bytes out
 *   ra_check norm MANIFEST
 *       IN S CH MEAN0 MEAN1 MEAN2 STD0 STD1 STD2 OUT: xf_normalize_u8
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "erasing.h"
#include "randaug.h"
#include "randaug_spec.h"
#include "rng.h"
#include "stdfds.h"
#include "transform.h"

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "ra_check: %s: %s\n", what, why);
    return 1;
}

static void *read_all(const char *path, size_t n)
{
    void *b = malloc(n ? n : 1);
    FILE *f = fopen(path, "rb");
    int ok = b && f && fread(b, 1, n, f) == n;
    if (f) fclose(f);
    if (!ok) {
        free(b);
        return NULL;
    }
    return b;
}

static int write_all(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f && fclose(f)) ok = 0;
    return ok ? 0 : fail(path, "cannot write");
}

static int resample_of(const char *s, ra_resample *r)
{
    if (!strcmp(s, "nearest")) *r = RA_NEAREST;
    else if (!strcmp(s, "bilinear")) *r = RA_BILINEAR;
    else if (!strcmp(s, "bicubic")) *r = RA_BICUBIC;
    else return -1;
    return 0;
}

static int ops(const char *manifest)
{
    FILE *m = fopen(manifest, "r");
    if (!m) return fail(manifest, "cannot open");
    ra_scratch *s = ra_scratch_new();
    char name[64], rs[16], in[1024], out[1024], line[4096];
    int rc = 0;
    while (!rc && fgets(line, sizeof line, m)) {
        double arg;
        int fr, fg, fb, w, h;
        ra_params p;
        if (sscanf(line, "%63s %lf %15s %d %d %d %d %d %1023s %1023s", name, &arg, rs, &fr, &fg,
                   &fb, &w, &h, in, out) != 10 ||
            resample_of(rs, &p.resample)) {
            rc = fail(manifest, "a line is not NAME ARG RESAMPLE FILLR FILLG FILLB W H IN OUT");
            break;
        }
        int op = ra_op_from_name(name);
        if (op < 0) {
            rc = fail(name, "no such op");
            break;
        }
        p.fill[0] = (uint8_t)fr;
        p.fill[1] = (uint8_t)fg;
        p.fill[2] = (uint8_t)fb;
        size_t n = (size_t)w * h * 3;
        uint8_t *img = read_all(in, n);
        if (!img) {
            rc = fail(in, "cannot read the image");
            break;
        }
        if (ra_op_apply((ra_op)op, arg, &p, img, w, h, s)) rc = fail(name, "ra_op_apply failed");
        if (!rc) rc = write_all(out, img, n);
        free(img);
    }
    ra_scratch_free(s);
    fclose(m);
    return rc;
}

static int args(void)
{
    char name[64], line[256];
    while (fgets(line, sizeof line, stdin)) {
        double mag;
        int neg;
        if (sscanf(line, "%63s %lf %d", name, &mag, &neg) != 3)
            return fail("stdin", "a line is not NAME MAGNITUDE NEGATE");
        int op = ra_op_from_name(name);
        if (op < 0) return fail(name, "no such op");
        printf("%.17g\n", ra_op_arg((ra_op)op, mag, neg));
    }
    return 0;
}

static int apply(const char *manifest)
{
    FILE *m = fopen(manifest, "r");
    if (!m) return fail(manifest, "cannot open");
    ra_scratch *s = ra_scratch_new();
    char spec_s[256], rs[16], in[1024], out[1024], line[4096], err[1024];
    int rc = 0;
    while (!rc && fgets(line, sizeof line, m)) {
        unsigned long long seed;
        int fr, fg, fb, w, h;
        ra_params p;
        randaug_spec spec;
        if (sscanf(line, "%255s %llu %15s %d %d %d %d %d %1023s %1023s", spec_s, &seed, rs, &fr,
                   &fg, &fb, &w, &h, in, out) != 10 ||
            resample_of(rs, &p.resample)) {
            rc = fail(manifest, "a line is not SPEC SEED RESAMPLE FILLR FILLG FILLB W H IN OUT");
            break;
        }
        if (randaug_spec_parse(spec_s, "spec", &spec, err, sizeof err)) {
            rc = fail(spec_s, err);
            break;
        }
        p.fill[0] = (uint8_t)fr;
        p.fill[1] = (uint8_t)fg;
        p.fill[2] = (uint8_t)fb;
        size_t n = (size_t)w * h * 3;
        uint8_t *img = read_all(in, n);
        if (!img) {
            rc = fail(in, "cannot read the image");
            break;
        }
        rng_state r;
        rng_seed(&r, seed, 0, 0);
        ra_trace t;
        if (ra_apply(&spec, &p, img, w, h, &r, s, &t)) rc = fail(spec_s, "ra_apply failed");
        if (!rc) {
            printf("%d\n", t.n);
            for (int i = 0; i < t.n; i++)
                printf("%s %d %.17g %.17g\n", ra_op_name(t.op[i]), t.applied[i], t.magnitude[i],
                       t.arg[i]);
            rc = write_all(out, img, n);
        }
        free(img);
    }
    ra_scratch_free(s);
    fclose(m);
    return rc;
}

static int erase(const char *manifest)
{
    FILE *m = fopen(manifest, "r");
    if (!m) return fail(manifest, "cannot open");
    char mode[16], in[1024], out[1024], line[4096];
    int rc = 0;
    while (!rc && fgets(line, sizeof line, m)) {
        er_params p;
        unsigned long long seed;
        int c, h, w;
        if (sscanf(line, "%lf %15s %llu %d %d %d %1023s %1023s", &p.probability, mode, &seed, &c,
                   &h, &w, in, out) != 8) {
            rc = fail(manifest, "a line is not PROB MODE SEED C H W IN OUT");
            break;
        }
        p.mode = !strcmp(mode, "pixel") ? ER_PIXEL : !strcmp(mode, "rand") ? ER_RAND : ER_CONST;
        size_t n = (size_t)c * h * w * sizeof(float);
        float *img = read_all(in, n);
        if (!img) {
            rc = fail(in, "cannot read the tensor");
            break;
        }
        rng_state r;
        rng_seed(&r, seed, 0, 0);
        er_box b;
        if (er_apply(&p, img, c, h, w, &r, &b))
            printf("box %d %d %d %d\n", b.top, b.left, b.h, b.w);
        else
            printf("none\n");
        rc = write_all(out, img, n);
        free(img);
    }
    fclose(m);
    return rc;
}

static int u8(const char *manifest)
{
    FILE *m = fopen(manifest, "r");
    if (!m) return fail(manifest, "cannot open");
    xf_scratch *s = xf_scratch_new();
    static const float zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
    char img[1024], interp[16], outp[1024], line[4096], err[512];
    int rc = 0;
    while (!rc && fgets(line, sizeof line, m)) {
        int w, h, size, flip;
        xf_box b;
        if (sscanf(line, "%1023s %d %d %lf %lf %lf %lf %d %15s %d %1023s", img, &w, &h, &b.x, &b.y,
                   &b.w, &b.h, &size, interp, &flip, outp) != 11) {
            rc = fail(manifest, "a line is not IMG W H X Y BW BH S INTERP FLIP OUT");
            break;
        }
        uint8_t *rgb = read_all(img, (size_t)w * h * 3);
        size_t no = (size_t)size * size * 3;
        uint8_t *out = malloc(no);
        float *tmp = malloc(no * sizeof(float));
        if (!rgb || !out || !tmp) rc = fail(img, "cannot read the image");
        xf_params p = {size, 3, strcmp(interp, "bicubic") ? XF_BILINEAR : XF_BICUBIC, zero, one};
        if (!rc && xf_resample_u8(rgb, w, h, b, NULL, flip, &p, s, tmp, out, err, sizeof err))
            rc = fail(img, err);
        if (!rc) rc = write_all(outp, out, no);
        free(rgb);
        free(out);
        free(tmp);
    }
    xf_scratch_free(s);
    fclose(m);
    return rc;
}

static int norm(const char *manifest)
{
    FILE *m = fopen(manifest, "r");
    if (!m) return fail(manifest, "cannot open");
    char in[1024], outp[1024], line[4096];
    int rc = 0;
    while (!rc && fgets(line, sizeof line, m)) {
        int size, ch;
        float mean[3], std[3];
        if (sscanf(line, "%1023s %d %d %f %f %f %f %f %f %1023s", in, &size, &ch, &mean[0],
                   &mean[1], &mean[2], &std[0], &std[1], &std[2], outp) != 10) {
            rc = fail(manifest, "a line is not IN S CH MEAN0 MEAN1 MEAN2 STD0 STD1 STD2 OUT");
            break;
        }
        uint8_t *px = read_all(in, (size_t)size * size * 3);
        size_t no = (size_t)ch * size * size;
        float *out = malloc(no * sizeof(float));
        if (!px || !out) rc = fail(in, "cannot read the image");
        xf_params p = {size, ch, XF_BILINEAR, mean, std};
        if (!rc) {
            xf_normalize_u8(px, &p, out);
            rc = write_all(outp, out, no * sizeof(float));
        }
        free(px);
        free(out);
    }
    fclose(m);
    return rc;
}

int main(int argc, char **argv)
{
    stdfds_ensure("ra_check", 1);
    if (argc == 3 && !strcmp(argv[1], "ops")) return ops(argv[2]);
    if (argc == 2 && !strcmp(argv[1], "args")) return args();
    if (argc == 3 && !strcmp(argv[1], "apply")) return apply(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "erase")) return erase(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "u8")) return u8(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "norm")) return norm(argv[2]);
    fprintf(stderr, "usage: ra_check ops|apply|erase|u8|norm MANIFEST | args < LINES\n");
    return 2;
}
