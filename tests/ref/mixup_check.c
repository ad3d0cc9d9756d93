/* tests/ref/mixup_check.c - the C side of the mixup and cutmix checks
 * against torch (a test tool, not part of the product).
 *
 * Owns: running worker/data/mixup.c on inputs and draws that
 * tests/ref/mixup_torch.py chose, and writing what it gives, for that script
 * to compare. Must not: compute anything itself beyond reading the inputs
 * and writing the outputs (it calls mixup.c).
 *
 * usage:
 *   mixup_check apply MANIFEST
 *       one case per line:
 *       IMAGES LABELS B C H W K SMOOTHING KIND LAM CY CX CUT_H CUT_W TOP LEFT OUTIMG OUTTGT
 *       IMAGES: B*C*H*W float32; LABELS: B int32; KIND: none, mixup (LAM
 *       the lambda), cutmix (mixup_box(H, W, LAM, CY, CX)) or minmax
 *       (mixup_box_minmax(H, W, CUT_H, CUT_W, TOP, LEFT)); writes the mixed
 *       images (OUTIMG, float32) and the targets (OUTTGT, B*K float32), and
 *       prints "LAM YL YH XL XH" (lambda %.17g) per case.
 *   mixup_check beta A B SEED N
 *       N draws of mixup_beta(A, B) from one stream, rng_seed(SEED, 0, 0),
 *       one per line (%.17g)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixup.h"
#include "rng.h"
#include "stdfds.h"

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "mixup_check: %s: %s\n", what, why);
    return 1;
}

static int read_file(const char *path, void *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    int ok = f && fread(buf, 1, n, f) == n;
    if (f) fclose(f);
    return ok ? 0 : fail(path, "cannot read");
}

static int write_file(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    if (f && fclose(f)) ok = 0;
    return ok ? 0 : fail(path, "cannot write");
}

static int apply(const char *manifest)
{
    FILE *m = fopen(manifest, "r");
    if (!m) return fail(manifest, "cannot open");
    char imgp[1024], lblp[1024], kind[16], outi[1024], outt[1024], line[8192];
    int rc = 0;
    while (!rc && fgets(line, sizeof line, m)) {
        int B, C, H, W, K, cy, cx, ch, cw, top, left;
        double s, lam;
        if (sscanf(line, "%1023s %1023s %d %d %d %d %d %lf %15s %lf %d %d %d %d %d %d %1023s %1023s",
                   imgp, lblp, &B, &C, &H, &W, &K, &s, kind, &lam, &cy, &cx, &ch, &cw, &top,
                   &left, outi, outt) != 18) {
            rc = fail(manifest, "a line is not IMAGES LABELS B C H W K SMOOTHING KIND LAM CY CX "
                                "CUT_H CUT_W TOP LEFT OUTIMG OUTTGT");
            break;
        }
        size_t ni = (size_t)B * C * H * W, nt = (size_t)B * K;
        float *img = malloc(sizeof(float) * ni), *tgt = malloc(sizeof(float) * nt);
        int *lbl = malloc(sizeof(int) * (size_t)B);
        if (!img || !tgt || !lbl) rc = fail(manifest, "out of memory");
        if (!rc) rc = read_file(imgp, img, sizeof(float) * ni);
        if (!rc) rc = read_file(lblp, lbl, sizeof(int) * (size_t)B);
        mixup_draw d = {MIXUP_NONE, 1.0, 0, 0, 0, 0};
        if (!rc) {
            if (strcmp(kind, "mixup") == 0) {
                d.kind = MIXUP_MIXUP;
                d.lam = lam;
            } else if (strcmp(kind, "cutmix") == 0) {
                mixup_box(H, W, lam, cy, cx, &d);
            } else if (strcmp(kind, "minmax") == 0) {
                mixup_box_minmax(H, W, ch, cw, top, left, &d);
            } else if (strcmp(kind, "none") != 0) {
                rc = fail(kind, "KIND is none, mixup, cutmix or minmax");
            }
        }
        char err[256];
        if (!rc) {
            mixup_apply(&d, img, B, C, H, W);
            if (mixup_targets(lbl, B, K, s, d.lam, tgt, err, sizeof err)) rc = fail(lblp, err);
        }
        if (!rc) rc = write_file(outi, img, sizeof(float) * ni);
        if (!rc) rc = write_file(outt, tgt, sizeof(float) * nt);
        if (!rc) printf("%.17g %d %d %d %d\n", d.lam, d.yl, d.yh, d.xl, d.xh);
        free(img);
        free(tgt);
        free(lbl);
    }
    fclose(m);
    return rc;
}

static int beta(int argc, char **argv)
{
    if (argc != 6) return fail("beta", "usage: mixup_check beta A B SEED N");
    double a = strtod(argv[2], NULL), b = strtod(argv[3], NULL);
    unsigned long long seed = strtoull(argv[4], NULL, 10);
    long n = strtol(argv[5], NULL, 10);
    rng_state r;
    rng_seed(&r, seed, 0, 0);
    for (long i = 0; i < n; i++) printf("%.17g\n", mixup_beta(&r, a, b));
    return 0;
}

int main(int argc, char **argv)
{
    stdfds_ensure("mixup_check", 1);
    if (argc == 3 && strcmp(argv[1], "apply") == 0) return apply(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "beta") == 0) return beta(argc, argv);
    fprintf(stderr, "usage: mixup_check apply MANIFEST | beta A B SEED N\n");
    return 2;
}
