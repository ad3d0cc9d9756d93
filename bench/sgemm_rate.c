/* bench/sgemm_rate.c - the machine's OpenBLAS sgemm rate, the ceiling the CPU
 * engine's achieved FLOP rate is compared against in `make bench`.
 * Owns: timing C = A B^T for square n x n fp32 matrices (the engine's matmul
 * orientation) after a warm-up call, best of `reps`, on `threads` threads.
 * usage: sgemm_rate [n=1024] [threads=0 (all)] [reps=10]; prints GFLOP/s. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ops.h"
#include "stdfds.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    stdfds_ensure("sgemm_rate", 1);
    int n = argc > 1 ? atoi(argv[1]) : 1024, threads = argc > 2 ? atoi(argv[2]) : 0,
        reps = argc > 3 ? atoi(argv[3]) : 10;
    if (n < 1 || reps < 1) {
        fprintf(stderr, "usage: sgemm_rate [n] [threads] [reps]\n");
        return 2;
    }
    threads = ops_cpu_set_threads(threads);
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    if (!a || !b || !c) return 1;
    for (size_t i = 0; i < nn; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t = now() - t;
        best = t < best ? t : best;
    }
    printf("{\"n\":%d,\"threads\":%d,\"gflops\":%.2f}\n", n, threads, 2.0 * n * nn / best / 1e9);
    free(a), free(b), free(c);
    return 0;
}
