/* bench/ckpt_bench.c - checkpoint save and restore through the worker's own
 * path (worker/ckpt/ckpt_writer.c and ckpt_reader.c on worker/ckpt/ckpt_store.c) for a state of a given size
 * (default: timm's vit_base_patch16_224, 86,567,656 parameters, so 12 bytes
 * each of fp32 parameters, AdamW m and v: 991 MiB), one rank.
 * Prints key=value lines that bench/ckpt_bench.py puts in its table:
 *   save:    stall (what ckpt_save held the caller: the host copy), the
 *            host copy alone, and the whole save until stored (MiB/s), of
 *            a run's second checkpoint (the first maps the host buffer; its
 *            stall and save are printed too);
 *   restore: what a resume does: ckpt_find_candidate (lists, reads the
 *            manifest) and ckpt_read_range of the whole vector, which checks
 *            every block's CRC as it reads (MiB/s); and ckpt_find alone (a
 *            verifying pass over every block, as `vitjob-worker
 *            checkpoints` and `export` do).
 * Must not: assert anything (a benchmark prints; tests check behaviour).
 *
 * usage: ckpt_bench --uri URI [--endpoint URL] [--params N] [--pause]
 *   --pause: after the saves, print "saved" and wait for a line on stdin
 *   before the restore (the caller drops the page cache meanwhile)
 */
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "ckpt_store.h"
#include "log.h"
#include "ops.h"
#include "stdfds.h"
#include "util.h"

static void die(const char *what, const char *err)
{
    fprintf(stderr, "ckpt_bench: %s: %s\n", what, err);
    exit(1);
}

int main(int argc, char **argv)
{
    stdfds_ensure("ckpt_bench", 1);
    const char *uri = NULL, *endpoint = "";
    size_t n = 86567656;
    int pause = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--uri") == 0 && i + 1 < argc)
            uri = argv[++i];
        else if (strcmp(argv[i], "--endpoint") == 0 && i + 1 < argc)
            endpoint = argv[++i];
        else if (strcmp(argv[i], "--pause") == 0)
            pause = 1;
        else if (strcmp(argv[i], "--params") == 0 && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: ckpt_bench --uri URI [--endpoint URL] [--params N] [--pause]\n");
            return 2;
        }
    }
    if (!uri || n == 0) {
        fprintf(stderr, "usage: ckpt_bench --uri URI [--endpoint URL] [--params N] [--pause]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    log_set_level_name("warn");

    float *state = malloc(3 * n * sizeof(float)), *back = malloc(3 * n * sizeof(float));
    if (!state || !back) die("memory", "cannot allocate the state");
    /* A resume loads into the model's arrays, which exist and are mapped:
     * touch the destination first, so load does not time its page faults. */
    memset(back, 0xff, 3 * n * sizeof(float));
    uint64_t x = 0x9E3779B97F4A7C15ull; /* xorshift: incompressible values */
    for (size_t i = 0; i < 3 * n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        state[i] = (float)(int32_t)(x >> 32) * 0x1p-31f;
    }
    const double mib = 3.0 * (double)n * sizeof(float) / (1024.0 * 1024.0);

    char err[1024];
    ckpt_store *store = NULL;
    if (ckpt_store_open(&store, uri, endpoint, err, sizeof err)) die("open", err);
    ckpt_writer *w = NULL;
    if (ckpt_writer_new(&w, store, NULL, 0, 1, 2, 600, err, sizeof err)) die("writer", err);
    ckpt_meta meta = {.step = 1, .world_size = 1, .n_params = n};
    snprintf(meta.sharding, sizeof meta.sharding, "none");
    snprintf(meta.model, sizeof meta.model, "{\"bench\":%zu}", n);
    ckpt_segment seg = {0, n, state, state + n, state + 2 * n, NULL};

    /* The first save of a run maps the writer's host buffer (page faults);
     * every later one reuses it, which is what training sees: save twice,
     * time the second, and print the first's too. */
    double t0 = mono_seconds();
    if (ckpt_save(w, &meta, &seg, 1, ops_cpu(), err, sizeof err)) die("save", err);
    double first_stall = mono_seconds() - t0;
    if (ckpt_wait(w, NULL, err, sizeof err)) die("save", err);
    double first_save = mono_seconds() - t0;
    meta.step = 2;
    t0 = mono_seconds();
    if (ckpt_save(w, &meta, &seg, 1, ops_cpu(), err, sizeof err)) die("save", err);
    double t_stall = mono_seconds() - t0, copy_s = ckpt_copy_seconds(w);
    if (ckpt_wait(w, NULL, err, sizeof err)) die("save", err);
    double t_save = mono_seconds() - t0;
    ckpt_writer_free(w);

    /* a cold restore reads from the disk, not the page cache: the caller
     * may drop the caches between the save and this line (--pause) */
    if (pause) {
        printf("saved\n");
        fflush(stdout);
        int c = getchar();
        (void)c;
    }
    t0 = mono_seconds();
    ckpt_manifest *man = NULL;
    if (ckpt_find_candidate(store, LONG_MAX, &man, err, sizeof err)) die("find", err);
    double t_find = mono_seconds() - t0;
    t0 = mono_seconds();
    if (ckpt_read_range(store, man, 0, n, back, back + n, back + 2 * n, err, sizeof err))
        die("read", err);
    double t_read = mono_seconds() - t0;
    ckpt_manifest *again = NULL;
    t0 = mono_seconds();
    if (ckpt_find(store, &again, err, sizeof err)) die("verify", err);
    double t_verify = mono_seconds() - t0;
    ckpt_manifest_free(again);
    int same = memcmp(state, back, 3 * n * sizeof(float)) == 0;

    printf("uri=%s params=%zu mib=%.1f\n", uri, n, mib);
    printf("stall_s=%.4f copy_s=%.4f\n", t_stall, copy_s);
    printf("save_s=%.3f save_mibs=%.1f\n", t_save, mib / t_save);
    printf("first_stall_s=%.4f first_save_s=%.3f\n", first_stall, first_save);
    printf("verify_s=%.3f verify_mibs=%.1f\n", t_verify, mib / t_verify);
    printf("find_s=%.4f load_s=%.3f load_mibs=%.1f\n", t_find, t_read, mib / t_read);
    printf("restore_s=%.3f restore_mibs=%.1f identical=%d\n", t_find + t_read,
           mib / (t_find + t_read), same);
    ckpt_manifest_free(man);
    ckpt_store_free(store);
    free(state);
    free(back);
    return same ? 0 : 1;
}
