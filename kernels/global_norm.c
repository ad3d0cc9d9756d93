/* kernels/global_norm.c - CPU reference: global gradient norm and clipping,
 * and the other elementwise ops on gradient vectors (g *= s, y += x).
 * Owns: a deterministic sum of squares: fixed chunks of 4096 elements, each
 * summed in double, chunks added in order; the result does not depend on the
 * thread count; sum_squares_into stores or adds it where the update reads
 * it (kernels/adamw.c derives the clipping coefficient from it). Must not:
 * decide the clip threshold (the trainer does). */
#include "ops.h"

#include <stdlib.h>

#define NORM_CHUNK 4096

// g (n) -> sum of g^2
double sum_squares_cpu(const float *g, size_t n)
{
    size_t nchunks = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    double total = 0.0;
    double small[64];
    double *partial = nchunks <= 64 ? small : malloc(sizeof(double) * nchunks);
    if (!partial) { /* fall back to a serial pass: same chunk order, same result */
        for (size_t c = 0; c < nchunks; c++) {
            double s = 0.0;
            size_t end = (c + 1) * NORM_CHUNK < n ? (c + 1) * NORM_CHUNK : n;
            for (size_t i = c * NORM_CHUNK; i < end; i++) s += (double)g[i] * g[i];
            total += s;
        }
        return total;
    }
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        double s = 0.0;
        size_t end = (c + 1) * NORM_CHUNK < n ? (c + 1) * NORM_CHUNK : n;
        for (size_t i = c * NORM_CHUNK; i < end; i++) s += (double)g[i] * g[i];
        partial[c] = s;
    }
    for (size_t c = 0; c < nchunks; c++) total += partial[c];
    if (partial != small) free(partial);
    return total;
}

// *acc = (add ? *acc : 0) + sum of g^2 (the trainer's norm over spans)
void sum_squares_into_cpu(double *acc, const float *g, size_t n, int add)
{
    const double s = sum_squares_cpu(g, n);
    *acc = add ? *acc + s : s;
}

// g (n) *= s
void scale_cpu(float *g, float s, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) g[i] *= s;
}

// y (n) += x; serial: it runs beside the compute threads (fsdp's
// communication thread adds each reduce-scattered chunk while the model
// computes), and it is bound by memory, not by arithmetic
void add_cpu(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}
