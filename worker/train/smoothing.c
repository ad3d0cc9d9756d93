/* worker/train/smoothing.c - see smoothing.h. */
#include "smoothing.h"

#include <stddef.h>

void smoothing_targets(float *out, const int *labels, int B, int K, double s)
{
    const double off = s / K, on = 1.0 - s + off;
    for (int b = 0; b < B; b++) {
        float *row = out + (size_t)b * K;
        for (int k = 0; k < K; k++) row[k] = (float)off;
        row[labels[b]] = (float)on;
    }
}
