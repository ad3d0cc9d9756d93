/* tests/test_mixup.c - worker/data/mixup.c: timm's Mixup and CutMix in batch
 * mode, on their own.
 *
 * Owns: the properties that need no torch: the Beta sampler's mean and
 * variance, the mixing and switch probabilities, cutmix's area-corrected
 * lambda against the pixels actually pasted, timm's box rule at known
 * points, the targets (rows sum to 1, smoothed one-hot), determinism of a
 * stream and independence of two, mixupProb = 0 leaving the batch as it
 * was, and the refusal of a label outside the classes. Fixed seeds: every
 * outcome is the same every run. Equality with the torch reference is
 * tests/mixup.bats's (tests/ref/mixup_torch.py).
 * Must not: depend on the network, on Python, or on time.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixup.h"
#include "rng.h"

TestSuite(mixup, .timeout = 120);

static mixup_params params(double mixup, double cutmix, double prob, double switch_prob,
                           double smoothing, int K)
{
    mixup_params p;
    memset(&p, 0, sizeof p);
    p.mixup_alpha = mixup;
    p.cutmix_alpha = cutmix;
    p.prob = prob;
    p.switch_prob = switch_prob;
    p.smoothing = smoothing;
    p.num_classes = K;
    return p;
}

static float *random_images(size_t n, uint64_t seed)
{
    rng_state r;
    rng_seed(&r, seed, 3, 4);
    float *x = malloc(sizeof(float) * n);
    cr_assert(x);
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&r);
    return x;
}

Test(mixup, beta_draws_have_the_mean_and_variance_of_beta_a_b)
{
    const double ab[][2] = {{0.2, 0.2}, {0.8, 0.8}, {1.0, 1.0}, {2.5, 2.5}, {2.0, 5.0},
                            {0.5, 3.0}};
    const int N = 200000;
    for (size_t t = 0; t < sizeof ab / sizeof ab[0]; t++) {
        const double a = ab[t][0], b = ab[t][1];
        rng_state r;
        rng_seed(&r, 42 + t, 0, 0);
        double s = 0, s2 = 0;
        for (int i = 0; i < N; i++) {
            double x = mixup_beta(&r, a, b);
            cr_assert(x >= 0.0 && x <= 1.0, "Beta(%g, %g) drew %.17g", a, b, x);
            s += x;
            s2 += x * x;
        }
        const double mean = s / N, var = s2 / N - mean * mean;
        const double m = a / (a + b), v = a * b / ((a + b) * (a + b) * (a + b + 1));
        /* 5 standard errors of the mean; the variance within 3% */
        cr_expect(fabs(mean - m) < 5 * sqrt(v / N), "Beta(%g, %g): mean %.5f, expected %.5f", a,
                  b, mean, m);
        cr_expect(fabs(var - v) < 0.03 * v, "Beta(%g, %g): variance %.5f, expected %.5f", a, b,
                  var, v);
    }
}

Test(mixup, tiny_and_large_alphas_draw_finite_values_in_0_1)
{
    const double alphas[] = {1e-3, 0.01, 100.0, 1000.0};
    for (size_t t = 0; t < sizeof alphas / sizeof alphas[0]; t++) {
        rng_state r;
        rng_seed(&r, 9, t, 0);
        for (int i = 0; i < 20000; i++) {
            double x = mixup_beta(&r, alphas[t], alphas[t]);
            cr_assert(isfinite(x) && x >= 0.0 && x <= 1.0, "Beta(%g) drew %.17g", alphas[t], x);
        }
    }
}

/* fraction of n draws of p whose kind is k */
static double kind_share(const mixup_params *p, mixup_kind k, int n, uint64_t seed)
{
    int hits = 0;
    for (int i = 0; i < n; i++) {
        rng_state r;
        mixup_stream(&r, seed, i, 0);
        mixup_draw d;
        mixup_draw_batch(p, 28, 28, &r, &d);
        hits += d.kind == k;
    }
    return (double)hits / n;
}

Test(mixup, both_alphas_choose_cutmix_with_the_switch_probability)
{
    const int N = 40000;
    const double sw[] = {0.0, 0.3, 0.5, 1.0};
    for (size_t t = 0; t < sizeof sw / sizeof sw[0]; t++) {
        mixup_params p = params(0.8, 1.0, 1.0, sw[t], 0.0, 10);
        double cut = kind_share(&p, MIXUP_CUTMIX, N, 5), mix = kind_share(&p, MIXUP_MIXUP, N, 5);
        cr_expect(fabs(cut - sw[t]) <= 5 * sqrt(sw[t] * (1 - sw[t]) / N) + 1e-12,
                  "switch %.2f: cutmix share %.4f", sw[t], cut);
        /* every draw mixes (lambda 1 or an empty box aside, both rare) */
        cr_expect(cut + mix > 0.99, "switch %.2f: mixed share %.4f", sw[t], cut + mix);
    }
    /* one alpha: that one only, whatever the switch probability says */
    mixup_params only_mixup = params(0.8, 0.0, 1.0, 1.0, 0.0, 10);
    cr_expect_eq(kind_share(&only_mixup, MIXUP_CUTMIX, 2000, 6), 0.0);
    mixup_params only_cutmix = params(0.0, 1.0, 1.0, 0.0, 0.0, 10);
    cr_expect_eq(kind_share(&only_cutmix, MIXUP_MIXUP, 2000, 6), 0.0);
    /* cutmixMinMax turns cutmix on (alpha 1, as timm forces) */
    mixup_params minmax = params(0.8, 0.0, 1.0, 1.0, 0.0, 10);
    minmax.has_minmax = 1;
    minmax.minmax[0] = 0.2;
    minmax.minmax[1] = 0.8;
    cr_expect_eq(kind_share(&minmax, MIXUP_CUTMIX, 2000, 6), 1.0);
}

Test(mixup, a_batch_mixes_with_the_mixup_probability)
{
    const int N = 40000;
    const double pr[] = {0.0, 0.25, 0.6, 1.0};
    for (size_t t = 0; t < sizeof pr / sizeof pr[0]; t++) {
        mixup_params p = params(0.8, 1.0, pr[t], 0.5, 0.1, 10);
        double none = kind_share(&p, MIXUP_NONE, N, 8);
        cr_expect(fabs((1 - none) - pr[t]) <= 5 * sqrt(pr[t] * (1 - pr[t]) / N) + 0.002,
                  "prob %.2f: mixed share %.4f", pr[t], 1 - none);
    }
}

Test(mixup, cutmix_lambda_is_exactly_the_fraction_not_pasted)
{
    const int B = 6, C = 3;
    const int sizes[][2] = {{28, 28}, {20, 28}, {9, 17}, {224, 224}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int H = sizes[s][0], W = sizes[s][1];
        const size_t img = (size_t)C * H * W;
        float *x = malloc(sizeof(float) * B * img);
        cr_assert(x);
        for (int t = 0; t < 400; t++) {
            mixup_params p = params(0.0, t % 3 ? 1.0 : 0.3, 1.0, 0.5, 0.0, 10);
            if (t % 4 == 3) {
                p.has_minmax = 1;
                p.minmax[0] = 0.25;
                p.minmax[1] = 0.75;
            }
            for (int b = 0; b < B; b++) /* each sample its own value, per channel */
                for (size_t k = 0; k < img; k++) x[(size_t)b * img + k] = (float)(b * 10 + k / (H * W));
            rng_state r;
            mixup_stream(&r, 77 + s, t, 1);
            mixup_draw d;
            mixup_draw_batch(&p, H, W, &r, &d);
            if (d.kind == MIXUP_NONE) continue; /* a Beta draw of exactly 1 */
            cr_assert_eq(d.kind, MIXUP_CUTMIX);
            cr_assert(0 <= d.yl && d.yl <= d.yh && d.yh <= H && 0 <= d.xl && d.xl <= d.xh &&
                      d.xh <= W, "box rows [%d, %d) columns [%d, %d) outside %dx%d", d.yl, d.yh,
                      d.xl, d.xh, H, W);
            mixup_apply(&d, x, B, C, H, W);
            for (int b = 0; b < B; b++) {
                long own = 0, other = 0;
                for (int c = 0; c < C; c++)
                    for (int k = 0; k < H * W; k++) {
                        float v = x[(size_t)b * img + (size_t)c * H * W + k];
                        own += v == (float)(b * 10 + c);
                        other += v == (float)((B - 1 - b) * 10 + c);
                    }
                cr_assert_eq(own + other, (long)C * H * W); /* channels never mixed up */
                cr_assert_eq(d.lam, 1.0 - (double)(other / C) / (double)(H * W),
                             "sample %d: lambda %.17g, pasted %ld of %d pixels", b, d.lam,
                             other / C, H * W);
            }
        }
        free(x);
    }
}

Test(mixup, the_box_is_timms_rand_bbox_at_known_points)
{
    mixup_draw d;
    /* lam 0.75: sqrt(0.25) = 0.5, cut 14 of 28, half 7 */
    mixup_box(28, 28, 0.75, 14, 14, &d);
    cr_expect(d.yl == 7 && d.yh == 21 && d.xl == 7 && d.xh == 21);
    cr_expect_eq(d.lam, 1.0 - 196.0 / 784.0);
    mixup_box(28, 28, 0.75, 0, 27, &d); /* clipped at the top and the right */
    cr_expect(d.yl == 0 && d.yh == 7 && d.xl == 20 && d.xh == 28);
    cr_expect_eq(d.lam, 1.0 - 56.0 / 784.0);
    /* an odd cut: int(28 * sqrt(0.5)) = 19, half 9: 18 pixels, not 19 */
    mixup_box(28, 28, 0.5, 14, 14, &d);
    cr_expect(d.yl == 5 && d.yh == 23 && d.xl == 5 && d.xh == 23);
    /* lambda near 1: cut 0, an empty box, lambda corrected to 1 */
    mixup_box(28, 28, 0.999, 3, 3, &d);
    cr_expect(d.yh == d.yl && d.lam == 1.0);
    /* non-square: rows from H, columns from W */
    mixup_box(20, 40, 0.75, 10, 20, &d);
    cr_expect(d.yl == 5 && d.yh == 15 && d.xl == 10 && d.xh == 30);
    int lo, hi;
    mixup_minmax_range(28, (const double[2]){0.2, 0.8}, &lo, &hi);
    cr_expect(lo == 5 && hi == 22);
    mixup_box_minmax(28, 28, 10, 6, 3, 20, &d);
    cr_expect(d.yl == 3 && d.yh == 13 && d.xl == 20 && d.xh == 26 && d.lam == 1.0 - 60.0 / 784.0);
}

Test(mixup, mixup_blends_each_sample_with_its_mirror)
{
    const int B = 4, C = 2, H = 3, W = 5;
    const size_t img = (size_t)C * H * W;
    float *x = random_images(B * img, 1), *orig = malloc(sizeof(float) * B * img);
    cr_assert(orig);
    memcpy(orig, x, sizeof(float) * B * img);
    mixup_draw d = {MIXUP_MIXUP, 0.3, 0, 0, 0, 0};
    mixup_apply(&d, x, B, C, H, W);
    for (int b = 0; b < B; b++)
        for (size_t k = 0; k < img; k++) {
            float want = 0.3f * orig[b * img + k] + 0.7f * orig[(B - 1 - b) * img + k];
            cr_assert_float_eq(x[b * img + k], want, 1e-6);
        }
    free(x);
    free(orig);
}

Test(mixup, targets_rows_sum_to_1_and_are_the_smoothed_mix)
{
    const int Ks[] = {2, 10, 1000};
    const double smooth[] = {0.0, 0.1, 0.3}, lams[] = {1.0, 0.0, 0.5, 0.123456789};
    const int B = 8;
    int labels[8];
    char err[256];
    for (size_t ki = 0; ki < 3; ki++) {
        const int K = Ks[ki];
        float *t = malloc(sizeof(float) * B * K);
        cr_assert(t);
        for (int b = 0; b < B; b++) labels[b] = (b * 7 + 3) % K;
        for (size_t si = 0; si < 3; si++)
            for (size_t li = 0; li < 4; li++) {
                const double s = smooth[si], lam = lams[li];
                cr_assert_eq(mixup_targets(labels, B, K, s, lam, t, err, sizeof err), 0);
                const double off = s / K, on = 1 - s + off;
                for (int b = 0; b < B; b++) {
                    double sum = 0;
                    for (int k = 0; k < K; k++) {
                        double want = lam * (k == labels[b] ? on : off) +
                                      (1 - lam) * (k == labels[B - 1 - b] ? on : off);
                        cr_assert(fabs(t[b * K + k] - want) <= 1e-7 * fabs(want) + 1e-12,
                                  "K %d s %g lam %g row %d class %d: %.9g, want %.9g", K, s, lam,
                                  b, k, t[b * K + k], want);
                        sum += t[b * K + k];
                    }
                    cr_assert(fabs(sum - 1.0) < 1e-6, "K %d s %g lam %g row %d sums to %.9g", K,
                              s, lam, b, sum);
                }
            }
        free(t);
    }
    /* no smoothing, lambda 1: exactly the one-hot */
    float t[4 * 3];
    int l[4] = {2, 0, 1, 2};
    cr_assert_eq(mixup_targets(l, 4, 3, 0.0, 1.0, t, err, sizeof err), 0);
    for (int b = 0; b < 4; b++)
        for (int k = 0; k < 3; k++) cr_expect_eq(t[b * 3 + k], k == l[b] ? 1.0f : 0.0f);
}

Test(mixup, the_same_stream_gives_the_same_bits_and_another_micro_batch_another_draw)
{
    const int B = 8, C = 1, H = 28, W = 28, K = 10;
    const size_t n = (size_t)B * C * H * W;
    int labels[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    mixup_params p = params(0.8, 1.0, 1.0, 0.5, 0.1, K);
    float t1[8 * 10], t2[8 * 10];
    char err[256];
    int differ = 0;
    for (long step = 0; step < 50; step++) {
        float *x1 = random_images(n, 11), *x2 = random_images(n, 11);
        rng_state r1, r2;
        mixup_stream(&r1, 1234, step, 3);
        mixup_stream(&r2, 1234, step, 3);
        mixup_draw d1, d2;
        cr_assert_eq(mixup_batch(&p, &r1, x1, labels, B, C, H, W, t1, &d1, err, sizeof err), 0);
        cr_assert_eq(mixup_batch(&p, &r2, x2, labels, B, C, H, W, t2, &d2, err, sizeof err), 0);
        cr_assert_eq(memcmp(x1, x2, sizeof(float) * n), 0);
        cr_assert_eq(memcmp(t1, t2, sizeof t1), 0);
        cr_assert_eq(memcmp(&d1, &d2, sizeof d1), 0);
        /* the next micro-batch of the same step, and another seed: other draws */
        rng_state r3, r4;
        mixup_stream(&r3, 1234, step, 4);
        mixup_stream(&r4, 1235, step, 3);
        mixup_draw d3, d4;
        mixup_draw_batch(&p, H, W, &r3, &d3);
        mixup_draw_batch(&p, H, W, &r4, &d4);
        differ += memcmp(&d3, &d1, sizeof d1) != 0 && memcmp(&d4, &d1, sizeof d1) != 0;
        free(x1);
        free(x2);
    }
    cr_expect_eq(differ, 50, "%d of 50 draws differ", differ);
}

Test(mixup, mixup_prob_0_leaves_the_images_and_gives_the_smoothed_one_hot)
{
    const int B = 6, C = 3, H = 8, W = 8, K = 5;
    const size_t n = (size_t)B * C * H * W;
    int labels[6] = {4, 0, 1, 1, 3, 2};
    mixup_params p = params(0.8, 1.0, 0.0, 0.5, 0.1, K);
    float *x = random_images(n, 2), *orig = random_images(n, 2);
    float t[6 * 5];
    char err[256];
    for (long step = 0; step < 200; step++) {
        rng_state r;
        mixup_stream(&r, 1, step, 0);
        mixup_draw d;
        cr_assert_eq(mixup_batch(&p, &r, x, labels, B, C, H, W, t, &d, err, sizeof err), 0);
        cr_assert_eq(d.kind, MIXUP_NONE);
        cr_assert_eq(d.lam, 1.0);
        cr_assert_eq(memcmp(x, orig, sizeof(float) * n), 0);
        for (int b = 0; b < B; b++)
            for (int k = 0; k < K; k++)
                cr_assert_eq(t[b * K + k], (float)(k == labels[b] ? 1 - 0.1 + 0.1 / K : 0.1 / K));
    }
    free(x);
    free(orig);
}

Test(mixup, a_label_outside_the_classes_is_refused_naming_it)
{
    int labels[4] = {0, 1, 10, 2};
    float t[4 * 10];
    char err[256] = "";
    cr_assert_eq(mixup_targets(labels, 4, 10, 0.1, 0.5, t, err, sizeof err), -1);
    cr_expect(strstr(err, "label 10") && strstr(err, "[0, 10)"), "%s", err);
    labels[2] = -1;
    cr_assert_eq(mixup_targets(labels, 4, 10, 0.1, 0.5, t, err, sizeof err), -1);
}
