/* tests/test_smoothing.c - worker/train/smoothing.c: label smoothing's
 * targets are timm's: s/K off the label, 1 - s + s/K on it (rows summing to
 * 1), one-hot without smoothing. */
#include <criterion/criterion.h>
#include <math.h>

#include "smoothing.h"

Test(smoothing, rows_are_s_over_k_off_the_label_and_one_minus_s_plus_s_over_k_on_it)
{
    enum { B = 3, K = 10 };
    const int labels[B] = {0, 9, 4};
    float t[B * K];
    smoothing_targets(t, labels, B, K, 0.1);
    for (int b = 0; b < B; b++) {
        double sum = 0;
        for (int k = 0; k < K; k++) {
            const float want = k == labels[b] ? (float)(1.0 - 0.1 + 0.01) : (float)0.01;
            cr_assert(t[b * K + k] == want, "[%d,%d] = %.9g, want %.9g", b, k, t[b * K + k], want);
            sum += t[b * K + k];
        }
        cr_assert(fabs(sum - 1.0) < 1e-6, "row %d sums to %.9g", b, sum);
    }
}

Test(smoothing, no_smoothing_gives_one_hot_rows)
{
    const int labels[2] = {2, 0};
    float t[6];
    smoothing_targets(t, labels, 2, 3, 0.0);
    const float want[6] = {0, 0, 1, 1, 0, 0};
    for (int i = 0; i < 6; i++) cr_assert(t[i] == want[i], "element %d", i);
}
