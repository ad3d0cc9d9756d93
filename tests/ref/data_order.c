/* tests/ref/data_order.c - the order in which the trainer takes Fashion-MNIST's
 * training samples (a test and bench tool, not part of the product).
 *
 * Owns: writing, for a data set of N samples, training.seed SEED and a
 * global batch of G, the sample indices of each of STEPS optimizer steps, as
 * worker/data/data.c's loader hands them to worker/train/feed.c (a new
 * epoch's permutation when fewer than G are left; the global batch is G
 * consecutive positions, rank r taking the r-th part of it), so that a
 * reference (tests/ref/bf16_vs_torch.py) trains on the same batches in the
 * same order. Must not: reimplement the permutation (it calls data.c's
 * loader) or read any image.
 *
 * usage:  data_order N SEED G STEPS OUT
 *         OUT: STEPS*G little-endian int32 sample indices, step by step
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "stdfds.h"

static int parse(const char *what, const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "data_order: %s: %s is not a number in %lld..%lld\n", what, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    stdfds_ensure("data_order", 1);
    if (argc != 6) {
        fprintf(stderr, "usage: data_order N SEED G STEPS OUT\n");
        return 2;
    }
    long long n, seed, g, steps;
    if (parse("N", argv[1], 1, 1 << 30, &n) || parse("SEED", argv[2], 0, INT64_MAX, &seed) ||
        parse("G", argv[3], 1, n, &g) || parse("STEPS", argv[4], 1, 1 << 24, &steps))
        return 2;
    /* the loader's order needs only the count: no pixels are read */
    dataset d = {.n = (int)n};
    data_loader l;
    if (data_loader_init(&l, &d, (uint64_t)seed, 0)) {
        fprintf(stderr, "data_order: out of memory\n");
        return 1;
    }
    FILE *f = fopen(argv[5], "wb");
    if (!f) {
        fprintf(stderr, "data_order: %s: %s\n", argv[5], strerror(errno));
        data_loader_free(&l);
        return 1;
    }
    int ok = 1;
    for (long long s = 0; s < steps && ok; s++) {
        data_loader_begin_step(&l, (int)g);
        for (long long i = 0; i < g && ok; i++) {
            int32_t v = l.perm[l.index + i];
            ok = fwrite(&v, sizeof v, 1, f) == 1; /* x86-64 and aarch64: little-endian */
        }
        data_loader_skip(&l, (long)g);
    }
    if (fclose(f) != 0) ok = 0;
    data_loader_free(&l);
    if (!ok) {
        fprintf(stderr, "data_order: %s: write failed\n", argv[5]);
        return 1;
    }
    return 0;
}
