/* worker/data/mixup.c - see mixup.h. Written from timm's documented Mixup
 * behaviour (timm/data/mixup.py: Mixup in mode 'batch', mixup_target,
 * rand_bbox, rand_bbox_minmax, cutmix_bbox_and_lam). */
#include "mixup.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The stream's tag: mixup's draws never coincide with another stream's. */
#define MIXUP_STREAM 0x3170c5ull

int mixup_enabled(const data_config *dc)
{
    return dc->mixup > 0.0 || dc->cutmix > 0.0 || dc->cutmix_minmax_n > 0;
}

void mixup_params_from_config(mixup_params *p, const data_config *dc, int num_classes,
                              double smoothing)
{
    memset(p, 0, sizeof *p);
    p->mixup_alpha = dc->mixup;
    p->cutmix_alpha = dc->cutmix;
    p->has_minmax = dc->cutmix_minmax_n == 2;
    if (p->has_minmax) {
        p->minmax[0] = dc->cutmix_minmax[0];
        p->minmax[1] = dc->cutmix_minmax[1];
    }
    p->prob = dc->mixup_prob;
    p->switch_prob = dc->mixup_switch_prob;
    p->smoothing = smoothing;
    p->num_classes = num_classes;
}

void mixup_stream(rng_state *r, uint64_t seed, long step, long micro)
{
    rng_seed(r, seed ^ MIXUP_STREAM, (uint64_t)step, (uint64_t)micro);
}

/* Uniform in [0, 1) with 53 bits (numpy's random() resolution). */
static double uniform53(rng_state *r) { return (double)(rng_u64(r) >> 11) * 0x1p-53; }

/* Uniform in (0, 1], for logarithms. */
static double uniform53_open0(rng_state *r)
{
    return ((double)(rng_u64(r) >> 11) + 1.0) * 0x1p-53;
}

/* A standard normal in double (Box-Muller, one of the pair). */
static double normal(rng_state *r)
{
    double u1 = uniform53_open0(r), u2 = uniform53(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586477 * u2);
}

/* log of a Gamma(shape, 1) draw, shape > 0: Marsaglia and Tsang (2000); a
 * shape below 1 boosted (Gamma(shape + 1) U^(1/shape)), in logs. */
static double log_gamma_draw(rng_state *r, double shape)
{
    if (shape < 1.0) return log_gamma_draw(r, shape + 1.0) + log(uniform53_open0(r)) / shape;
    const double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal(r), v = 1.0 + c * x;
        if (v <= 0.0) continue;
        v = v * v * v;
        double u = uniform53_open0(r), x2 = x * x;
        if (u < 1.0 - 0.0331 * x2 * x2 || log(u) < 0.5 * x2 + d * (1.0 - v + log(v)))
            return log(d) + log(v);
    }
}

double mixup_beta(rng_state *r, double a, double b)
{
    double lx = log_gamma_draw(r, a), ly = log_gamma_draw(r, b);
    /* X / (X + Y) = 1 / (1 + Y/X) */
    return 1.0 / (1.0 + exp(ly - lx));
}

static int clip(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void set_box(int H, int W, int yl, int yh, int xl, int xh, mixup_draw *d)
{
    d->kind = MIXUP_CUTMIX;
    d->yl = yl;
    d->yh = yh;
    d->xl = xl;
    d->xh = xh;
    /* timm: 1. - bbox_area / float(H * W), in double */
    d->lam = 1.0 - (double)((long)(yh - yl) * (xh - xl)) / (double)((long)H * W);
}

void mixup_box(int H, int W, double lam, int cy, int cx, mixup_draw *d)
{
    double ratio = sqrt(1.0 - lam);
    int cut_h = (int)(H * ratio), cut_w = (int)(W * ratio);
    set_box(H, W, clip(cy - cut_h / 2, 0, H), clip(cy + cut_h / 2, 0, H),
            clip(cx - cut_w / 2, 0, W), clip(cx + cut_w / 2, 0, W), d);
}

void mixup_box_minmax(int H, int W, int cut_h, int cut_w, int top, int left, mixup_draw *d)
{
    set_box(H, W, top, top + cut_h, left, left + cut_w, d);
}

void mixup_minmax_range(int side, const double minmax[2], int *lo, int *hi)
{
    *lo = (int)(side * minmax[0]);
    *hi = (int)(side * minmax[1]);
}

/* randint(lo, hi): [lo, hi); lo where the range is empty (the config
 * refuses that; numpy raises). */
static int randint(rng_state *r, int lo, int hi)
{
    return hi > lo ? lo + (int)rng_below(r, (uint64_t)(hi - lo)) : lo;
}

void mixup_draw_batch(const mixup_params *p, int H, int W, rng_state *r, mixup_draw *d)
{
    memset(d, 0, sizeof *d);
    d->kind = MIXUP_NONE;
    d->lam = 1.0;
    if (!(uniform53(r) < p->prob)) return;
    const double ma = p->mixup_alpha, ca = p->has_minmax ? 1.0 : p->cutmix_alpha;
    int cut;
    double lam;
    if (ma > 0.0 && ca > 0.0) {
        cut = uniform53(r) < p->switch_prob;
        lam = mixup_beta(r, cut ? ca : ma, cut ? ca : ma);
    } else if (ma > 0.0) {
        cut = 0;
        lam = mixup_beta(r, ma, ma);
    } else if (ca > 0.0) {
        cut = 1;
        lam = mixup_beta(r, ca, ca);
    } else {
        return; /* nothing on */
    }
    if (lam == 1.0) return; /* timm: a lambda of 1 mixes nothing */
    if (!cut) {
        d->kind = MIXUP_MIXUP;
        d->lam = lam;
        return;
    }
    if (p->has_minmax) {
        int hlo, hhi, wlo, whi;
        mixup_minmax_range(H, p->minmax, &hlo, &hhi);
        mixup_minmax_range(W, p->minmax, &wlo, &whi);
        int cut_h = randint(r, hlo, hhi), cut_w = randint(r, wlo, whi);
        int top = randint(r, 0, H - cut_h), left = randint(r, 0, W - cut_w);
        mixup_box_minmax(H, W, cut_h, cut_w, top, left, d);
        return;
    }
    int cy = randint(r, 0, H), cx = randint(r, 0, W);
    mixup_box(H, W, lam, cy, cx, d);
}

void mixup_apply(const mixup_draw *d, float *images, int B, int C, int H, int W)
{
    const size_t img = (size_t)C * H * W;
    if (d->kind == MIXUP_MIXUP) {
        /* torch: x.mul_(lam).add_(x.flip(0).mul_(1 - lam)), each factor a float */
        const float lf = (float)d->lam, of = (float)(1.0 - d->lam);
        for (int i = 0; i < (B + 1) / 2; i++) {
            float *a = images + (size_t)i * img, *b = images + (size_t)(B - 1 - i) * img;
            for (size_t k = 0; k < img; k++) {
                float x = a[k], y = b[k];
                float ax = lf * x, oy = of * y, by = lf * y, ox = of * x;
                a[k] = ax + oy;
                b[k] = by + ox; /* the middle sample of an odd batch: a == b, the same value */
            }
        }
    } else if (d->kind == MIXUP_CUTMIX) {
        for (int i = 0; i < B / 2; i++) { /* swap the box with the mirrored sample's */
            float *a = images + (size_t)i * img, *b = images + (size_t)(B - 1 - i) * img;
            for (int c = 0; c < C; c++)
                for (int y = d->yl; y < d->yh; y++) {
                    size_t at = ((size_t)c * H + y) * W;
                    for (int x = d->xl; x < d->xh; x++) {
                        float t = a[at + x];
                        a[at + x] = b[at + x];
                        b[at + x] = t;
                    }
                }
        }
    }
}

int mixup_targets(const int *labels, int B, int K, double smoothing, double lam, float *targets,
                  char *err, size_t errlen)
{
    for (int i = 0; i < B; i++)
        if (labels[i] < 0 || labels[i] >= K) {
            snprintf(err, errlen, "mixup: sample %d of the micro-batch has label %d, outside "
                     "[0, %d) (model.numClasses)", i, labels[i], K);
            return -1;
        }
    const double off = smoothing / K, on = 1.0 - smoothing + off;
    for (int i = 0; i < B; i++) {
        const int l1 = labels[i], l2 = labels[B - 1 - i];
        float *t = targets + (size_t)i * K;
        for (int k = 0; k < K; k++)
            t[k] = (float)(lam * (k == l1 ? on : off) + (1.0 - lam) * (k == l2 ? on : off));
    }
    return 0;
}

int mixup_batch(const mixup_params *p, rng_state *r, float *images, const int *labels, int B,
                int C, int H, int W, float *targets, mixup_draw *d, char *err, size_t errlen)
{
    mixup_draw own;
    if (!d) d = &own;
    mixup_draw_batch(p, H, W, r, d);
    mixup_apply(d, images, B, C, H, W);
    return mixup_targets(labels, B, p->num_classes, p->smoothing, d->lam, targets, err, errlen);
}
