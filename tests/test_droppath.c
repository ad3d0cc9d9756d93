/* tests/test_droppath.c - worker/train/droppath.c: drop path's rule (timm's
 * linear rates over the blocks, the 1/(1-p) scale of a kept branch, 0 for a
 * dropped one, never a drop where the rate is 0) and its draw (a pure
 * function of seed, step, the sample's place in the step, block and branch:
 * deterministic, the same however the step is cut into micro-batches, and
 * independent per sample and per branch, at the rate's frequency). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "droppath.h"

#define IDX(l, br, b, B) ((size_t)((l) * 2 + (br)) * (B) + (b))

Test(droppath, rates_rise_linearly_from_zero_at_the_first_block_to_the_rate_at_the_last)
{
    /* torch.linspace(0, 0.1, 12) */
    for (int l = 0; l < 12; l++)
        cr_assert(fabs(droppath_rate(0.1, l, 12) - 0.1 * l / 11.0) < 1e-15, "block %d", l);
    cr_assert_eq(droppath_rate(0.3, 0, 4), 0.0);
    cr_assert(fabs(droppath_rate(0.3, 3, 4) - 0.3) < 1e-15);
    cr_assert(fabs(droppath_rate(0.3, 1, 4) - 0.1) < 1e-15);
    cr_assert_eq(droppath_rate(0.5, 0, 1), 0.0, "one block: linspace(0, r, 1) is [0]");
}

Test(droppath, kept_branches_scale_by_one_over_keep_probability_and_dropped_ones_by_zero)
{
    enum { L = 3, B = 4 };
    float keep[L * 2 * B], scale[L * 2 * B];
    for (int i = 0; i < L * 2 * B; i++) keep[i] = (float)(i % 3 != 0);
    droppath_scales(scale, keep, 0.4, L, B);
    for (int l = 0; l < L; l++)
        for (int br = 0; br < 2; br++)
            for (int b = 0; b < B; b++) {
                size_t i = IDX(l, br, b, B);
                float want = l == 0 ? 1.0f /* rate 0: never dropped, whatever the mask */
                                    : keep[i] ? (float)(1.0 / (1.0 - 0.2 * l)) : 0.0f;
                cr_assert(scale[i] == want, "block %d branch %d sample %d: %g, want %g", l, br,
                          b, scale[i], want);
            }
}

Test(droppath, the_draw_is_deterministic_and_keyed_by_seed_step_and_place_in_the_step)
{
    enum { L = 6, B = 16, N = L * 2 * B };
    float a[N], b[N], keep[N];
    droppath_draw(a, keep, 0.5, L, B, 7, 3, 32);
    droppath_draw(b, NULL, 0.5, L, B, 7, 3, 32);
    cr_assert(memcmp(a, b, sizeof a) == 0, "the same key drew other masks");
    /* the scales are the rule's on the keep mask it reports */
    float s[N];
    droppath_scales(s, keep, 0.5, L, B);
    cr_assert(memcmp(a, s, sizeof a) == 0);
    /* another seed, step or place: other masks */
    const struct { uint64_t seed; long step, first; } other[] = {{8, 3, 32}, {7, 4, 32}, {7, 3, 48}};
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
        droppath_draw(b, NULL, 0.5, L, B, other[k].seed, other[k].step, other[k].first);
        cr_assert(memcmp(a, b, sizeof a) != 0, "case %zu drew the same masks", k);
    }
}

Test(droppath, micro_batches_of_a_step_draw_what_the_whole_step_draws)
{
    /* 2 ranks x 2 micro-batches of 4 = one process's 16 samples */
    enum { L = 4, G = 16, M = 4 };
    float whole[L * 2 * G], part[L * 2 * M];
    droppath_draw(whole, NULL, 0.3, L, G, 11, 5, 0);
    for (int first = 0; first < G; first += M) {
        droppath_draw(part, NULL, 0.3, L, M, 11, 5, first);
        for (int i = 0; i < L * 2; i++)
            for (int b = 0; b < M; b++)
                cr_assert(part[(size_t)i * M + b] == whole[(size_t)i * G + first + b],
                          "micro-batch at %d, row %d, sample %d", first, i, b);
    }
}

Test(droppath, samples_and_branches_drop_independently_at_the_blocks_rate)
{
    enum { L = 4, B = 20000 };
    float *scale = malloc(sizeof(float) * L * 2 * B), *keep = malloc(sizeof(float) * L * 2 * B);
    droppath_draw(scale, keep, 0.6, L, B, 2024, 1, 0);
    for (int l = 0; l < L; l++) {
        const double p = droppath_rate(0.6, l, L);
        long dropped[2] = {0, 0}, both = 0, next = 0;
        for (int b = 0; b < B; b++) {
            const int d0 = keep[IDX(l, 0, b, B)] == 0.0f, d1 = keep[IDX(l, 1, b, B)] == 0.0f;
            dropped[0] += d0, dropped[1] += d1, both += d0 && d1;
            if (b + 1 < B) next += d0 && keep[IDX(l, 0, b + 1, B)] == 0.0f;
            for (int br = 0; br < 2; br++) {
                const float s = scale[IDX(l, br, b, B)];
                cr_assert(s == (keep[IDX(l, br, b, B)] ? (float)(1.0 / (1.0 - p)) : 0.0f));
            }
        }
        /* frequencies within 5 standard deviations of Bernoulli(p) */
        const double sd = sqrt(p * (1 - p) / B) + 1e-12;
        for (int br = 0; br < 2; br++)
            cr_assert(fabs((double)dropped[br] / B - p) <= 5 * sd, "block %d branch %d: %.4f, rate %.4f",
                      l, br, (double)dropped[br] / B, p);
        /* independent: P(both) = p^2 across branches, and across neighbouring samples */
        const double sd2 = sqrt(p * p * (1 - p * p) / B) + 1e-12;
        cr_assert(fabs((double)both / B - p * p) <= 5 * sd2, "block %d: branches together %.4f, want %.4f",
                  l, (double)both / B, p * p);
        cr_assert(fabs((double)next / (B - 1) - p * p) <= 5 * sd2, "block %d: neighbours %.4f, want %.4f",
                  l, (double)next / (B - 1), p * p);
        if (l == 0) cr_assert_eq(dropped[0] + dropped[1], 0, "the first block dropped");
    }
    free(scale);
    free(keep);
}
