/* tests/test_comm.c - worker/gang/comm.c, comm_gloo.cc and comm_nccl.c (with
 * comm_rdzv.c): the CPU collectives across ranks (forked processes on
 * loopback, meeting through a store kept in a temporary directory) give
 * exact, rank-ordered, repeatable results, and a dead peer fails the
 * others' next collective instead of hanging; the NCCL communicator fails
 * with the loader's reason where no GPU is usable, and where one is, gives
 * the same exact results on device buffers, ordered with the compute
 * stream's ops (the GPU tests skip, saying why, without a GPU). */
#include "comm.h"
#include "comm_nccl.h"
#include "ops.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TestSuite(comm, .timeout = 90);

static char dir[64];

/* ---- a store in a directory: set = write + rename, get = poll ---- */
static void key_path(char *out, size_t n, const char *key)
{
    char k[600];
    snprintf(k, sizeof k, "%s", key);
    for (char *p = k; *p; p++)
        if (*p == '/') *p = '_';
    snprintf(out, n, "%s/%s", dir, k);
}

static int fs_set(void *ctx, const char *key, const void *val, size_t len, char *err,
                  size_t errlen)
{
    (void)ctx;
    char p[700], tmp[720];
    key_path(p, sizeof p, key);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", p, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(val, 1, len, f) != len || fclose(f) != 0 || rename(tmp, p) != 0) {
        snprintf(err, errlen, "set %s failed", key);
        return -1;
    }
    return 0;
}

static int fs_get(void *ctx, const char *key, double timeout_s, void **val, size_t *len,
                  char *err, size_t errlen)
{
    (void)ctx;
    char p[700];
    key_path(p, sizeof p, key);
    for (double waited = 0; waited <= timeout_s; waited += 0.01) {
        FILE *f = fopen(p, "rb");
        if (f) {
            fseek(f, 0, SEEK_END);
            long n = ftell(f);
            fseek(f, 0, SEEK_SET);
            *val = malloc(n > 0 ? (size_t)n : 1);
            *len = fread(*val, 1, (size_t)n, f);
            fclose(f);
            return 0;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    snprintf(err, errlen, "get %s: timed out", key);
    return -1;
}

static const comm_store store = {.ctx = NULL, .set = fs_set, .get = fs_get};

typedef int (*rank_fn)(comm *c, int rank, int world);

enum { CPU, GPU };

/* One GPU per rank (NCCL refuses two ranks of a communicator on one
 * device): the rank-th of CUDA_VISIBLE_DEVICES, or of all devices. */
static void pin_gpu(int rank)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    char dev[64];
    snprintf(dev, sizeof dev, "%d", rank);
    if (vis && *vis) {
        const char *p = vis;
        for (int i = 0; i < rank && p; i++)
            if ((p = strchr(p, ','))) p++;
        if (p) snprintf(dev, sizeof dev, "%.*s", (int)strcspn(p, ","), p);
    }
    setenv("CUDA_VISIBLE_DEVICES", dev, 1);
}

/* world ranks as processes, on the CPU (gloo) or the GPU (NCCL); returns
 * each one's exit code in st. */
static void run_on(int backend, int world, double timeout_s, rank_fn fn, int *st)
{
    snprintf(dir, sizeof dir, "/tmp/test_comm_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    setenv("VITJOB_COMM_HOST", "127.0.0.1", 1);
    pid_t pids[8];
    for (int r = 0; r < world; r++) {
        if ((pids[r] = fork()) == 0) {
            signal(SIGPIPE, SIG_IGN); /* as the worker: a dead peer is EPIPE */
            comm *c = NULL;
            char err[512];
            int rc;
            if (backend == GPU) {
                if (world > 1) pin_gpu(r);
                rc = comm_new_nccl_store(&c, &store, r, world, timeout_s, err, sizeof err);
            } else {
                rc = comm_new_cpu_store(&c, &store, r, world, timeout_s, err, sizeof err);
            }
            if (rc != 0) {
                fprintf(stderr, "rank %d: %s\n", r, err);
                _exit(99);
            }
            int code = fn(c, r, world);
            comm_free(c);
            _exit(code);
        }
    }
    for (int r = 0; r < world; r++) {
        int s;
        cr_assert_eq(waitpid(pids[r], &s, 0), pids[r]);
        st[r] = WIFEXITED(s) ? WEXITSTATUS(s) : 200 + WTERMSIG(s);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static void run(int world, double timeout_s, rank_fn fn, int *st)
{
    run_on(CPU, world, timeout_s, fn, st);
}

static void expect_all_zero(int world, const int *st)
{
    for (int r = 0; r < world; r++) cr_assert_eq(st[r], 0, "rank %d failed at check %d", r, st[r]);
}

enum { N = 1003 }; /* not a multiple of anything */

static int ops(comm *c, int rank, int world)
{
    char err[512];
    /* all-reduce of integers: exact */
    float a[N];
    for (int i = 0; i < N; i++) a[i] = (float)(rank + 1) * (float)i;
    if (comm_allreduce_sum(c, a, N, err, sizeof err)) return 1;
    float tri = (float)(world * (world + 1) / 2);
    for (int i = 0; i < N; i++)
        if (a[i] != tri * (float)i) return 2;
    /* reduce-scatter: this rank's chunk of the sum, in place */
    float rs[4 * 250];
    for (int i = 0; i < world * 250; i++) rs[i] = (float)(i % 97) + (float)rank;
    if (comm_reduce_scatter_sum(c, rs, 250, err, sizeof err)) return 3;
    for (int i = rank * 250; i < (rank + 1) * 250; i++)
        if (rs[i] != (float)world * (float)(i % 97) + tri - (float)world) return 4;
    /* all-gather f32 in place and bf16 from a separate buffer */
    float g[4 * 7];
    for (int i = 0; i < 7; i++) g[rank * 7 + i] = (float)(100 * rank + i);
    if (comm_allgather(c, g + rank * 7, g, 7, COMM_F32, err, sizeof err)) return 5;
    for (int q = 0; q < world; q++)
        for (int i = 0; i < 7; i++)
            if (g[q * 7 + i] != (float)(100 * q + i)) return 6;
    uint16_t mine[5], all[4 * 5];
    for (int i = 0; i < 5; i++) mine[i] = (uint16_t)(0x3f80 + rank * 8 + i);
    if (comm_allgather(c, mine, all, 5, COMM_BF16, err, sizeof err)) return 7;
    for (int q = 0; q < world; q++)
        for (int i = 0; i < 5; i++)
            if (all[q * 5 + i] != 0x3f80 + q * 8 + i) return 8;
    /* broadcast from the last rank */
    float b[3] = {(float)rank, (float)rank, (float)rank};
    if (comm_broadcast(c, b, 3, COMM_F32, world - 1, err, sizeof err)) return 9;
    if (b[0] != (float)(world - 1) || b[2] != (float)(world - 1)) return 10;
    if (comm_barrier(c, err, sizeof err)) return 11;
    return comm_failed(c) ? 12 : 0;
}

Test(comm, two_three_and_four_ranks_get_exact_sums_their_chunk_and_gathers_in_rank_order)
{
    for (int world = 2; world <= 4; world++) {
        int st[4];
        run(world, 20, ops, st);
        expect_all_zero(world, st);
    }
}

Test(comm, one_rank_is_local_copies_and_no_ops)
{
    comm *c = NULL;
    char err[512];
    cr_assert_eq(comm_new_cpu_store(&c, NULL, 0, 1, 1, err, sizeof err), 0);
    cr_assert_eq(comm_world_size(c), 1);
    int st = ops(c, 0, 1);
    cr_assert_eq(st, 0, "check %d", st);
    comm_free(c);
}

Test(comm, one_rank_gathers_exactly_its_bf16_or_f32_values_and_nothing_past_them)
{
    comm *c = NULL;
    char err[512];
    cr_assert_eq(comm_new_cpu_store(&c, NULL, 0, 1, 1, err, sizeof err), 0, "%s", err);
    /* bf16: 2 bytes a value; the gather writes 5 of them and leaves the rest */
    uint16_t in[8] = {0x3f80, 0x3f81, 0x3f82, 0x3f83, 0x3f84, 0xdead, 0xdead, 0xdead};
    uint16_t out[8];
    for (int i = 0; i < 8; i++) out[i] = 0xbeef;
    cr_assert_eq(comm_allgather(c, in, out, 5, COMM_BF16, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < 5; i++) cr_assert_eq(out[i], 0x3f80 + i, "value %d", i);
    for (int i = 5; i < 8; i++) cr_assert_eq(out[i], 0xbeef, "byte pair %d past the count written", i);
    /* f32: 4 bytes a value */
    float fin[3] = {1.5f, -2.0f, 3.25f}, fout[4] = {0, 0, 0, 7.0f};
    cr_assert_eq(comm_allgather(c, fin, fout, 3, COMM_F32, err, sizeof err), 0, "%s", err);
    cr_assert(fout[0] == 1.5f && fout[1] == -2.0f && fout[2] == 3.25f && fout[3] == 7.0f);
    comm_free(c);
}

/* reduce-scatter and all-reduce over the sizes that change the rings'
 * segmenting (one element; fewer elements than the two segments a chunk
 * has at least; two; three segments of 4 MiB and a ragged one), each call on a freshly allocated buffer (a
 * backend must not keep a caller's pointer), with the other chunks left
 * as scratch; integer values, so the sums are exact */
static int sizes(comm *c, int rank, int world)
{
    static const size_t counts[] = {1, 3, 262145, 3 * 1048576 + 5};
    char err[512];
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        const size_t n = counts[k], all = n * (size_t)world;
        for (int pass = 0; pass < 2; pass++) {
            float *v = malloc(sizeof(float) * all);
            if (!v) return 1;
            for (size_t i = 0; i < all; i++) v[i] = (float)(i % 1013) + (float)(rank * 3 + pass);
            if (comm_reduce_scatter_sum(c, v, n, err, sizeof err)) return 2;
            /* sum over q of (i % 1013) + 3q + pass */
            const float add = (float)(3 * world * (world - 1) / 2 + world * pass);
            for (size_t i = (size_t)rank * n; i < (size_t)(rank + 1) * n; i++)
                if (v[i] != (float)world * (float)(i % 1013) + add) return 3;
            for (size_t i = 0; i < all; i++) v[i] = (float)(i % 511) * (float)(rank + 1);
            if (comm_allreduce_sum(c, v, all, err, sizeof err)) return 4;
            for (size_t i = 0; i < all; i++)
                if (v[i] != (float)(i % 511) * (float)(world * (world + 1) / 2)) return 5;
            free(v);
        }
    }
    return comm_failed(c) ? 6 : 0;
}

Test(comm, reduce_scatter_and_all_reduce_are_exact_at_every_size_on_fresh_buffers)
{
    for (int world = 2; world <= 4; world++) {
        int st[4];
        run(world, 30, sizes, st);
        expect_all_zero(world, st);
    }
}

/* random floats: the sum is the same bits on every rank and in every run */
static int random_sum(comm *c, int rank, int world)
{
    (void)world;
    enum { M = 100000 };
    float *x = malloc(sizeof(float) * M);
    unsigned s = 12345u + (unsigned)rank;
    for (int i = 0; i < M; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    char err[512];
    if (comm_allreduce_sum(c, x, M, err, sizeof err)) return 1;
    char p[128];
    snprintf(p, sizeof p, "%s.sum%d", dir, rank);
    FILE *f = fopen(p, "wb");
    fwrite(x, sizeof(float), M, f);
    fclose(f);
    free(x);
    return 0;
}

Test(comm, an_all_reduce_of_random_floats_is_bit_identical_on_every_rank_and_run)
{
    char snap[3][64];
    for (int run_no = 0; run_no < 2; run_no++) {
        int st[3];
        run(3, 20, random_sum, st);
        expect_all_zero(3, st);
        for (int r = 0; r < 3; r++) {
            char p[128], cmd[1024];
            snprintf(p, sizeof p, "%s.sum%d", dir, r);
            if (run_no == 0) {
                snprintf(snap[r], sizeof snap[r], "/tmp/test_comm_sum_%d_%d", (int)getpid(), r);
                snprintf(cmd, sizeof cmd, "mv %s %s", p, snap[r]);
            } else {
                snprintf(cmd, sizeof cmd, "cmp -s %s %s && cmp -s %s %s.sum0 && rm -f %s", p,
                         snap[r], p, dir, snap[r]);
            }
            cr_assert_eq(system(cmd), 0, "rank %d, run %d", r, run_no);
        }
        if (run_no == 1) {
            char cmd[512];
            snprintf(cmd, sizeof cmd, "rm -f %s.sum0 %s.sum1 %s.sum2", dir, dir, dir);
            (void)!system(cmd);
        }
    }
}

static int dies(comm *c, int rank, int world)
{
    (void)world;
    char err[512];
    float x[16] = {0};
    if (comm_allreduce_sum(c, x, 16, err, sizeof err)) return 1;
    if (rank == 1) _exit(0); /* gone without a word */
    int rc = comm_allreduce_sum(c, x, 16, err, sizeof err);
    if (rc != -1 || !comm_failed(c)) return 2;
    if (!strstr(err, "all-reduce: peer lost or collective timed out")) return 3;
    /* unusable afterwards, at once */
    if (comm_barrier(c, err, sizeof err) != -1 || !strstr(err, "failed earlier")) return 4;
    return 0;
}

Test(comm, a_dead_peer_fails_the_others_next_collective_and_marks_the_communicator_failed)
{
    int st[3];
    /* the loss shows by rank 1's closed sockets: a timeout as long as the
     * other tests' (never reached), so that a stalled rank fails nothing */
    run(3, 30, dies, st);
    expect_all_zero(3, st);
}

/* ---- NCCL ---- */

Test(comm, without_a_usable_gpu_an_nccl_communicator_fails_with_the_loaders_reason)
{
    char why[512] = "", err[512] = "";
    if (ops_cuda(0, why, sizeof why))
        cr_skip_test("a CUDA GPU is usable here: the no-GPU path is checked where there is none");
    for (int world = 1; world <= 2; world++) {
        comm *c = (comm *)&err; /* must be set to NULL */
        cr_assert_eq(comm_new_nccl_store(&c, &store, 0, world, 1, err, sizeof err), -1);
        cr_assert_null(c);
        cr_assert(strstr(err, why) != NULL, "'%s' does not give the loader's reason '%s'", err,
                  why);
        cr_assert(strncmp(err, "NCCL communicator: ", 19) == 0, "%s", err);
        cr_assert(strchr(err, '\n') == NULL, "not one line: %s", err);
    }
}

/* How many GPUs NCCL can use here (0: none, the reason in why), asked in a
 * child process: CUDA initialised in this one would not survive the forks
 * of the ranks. */
static int usable_gpus(char *why, size_t len)
{
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    pid_t p = fork();
    cr_assert_neq(p, -1);
    if (p == 0) {
        close(fd[0]);
        char e[512] = "", msg[600];
        const vitjob_nccl_ops *t = ops_cuda_nccl(e, sizeof e);
        int n = snprintf(msg, sizeof msg, "%d %s", t ? t->device_count() : 0, e);
        (void)!write(fd[1], msg, (size_t)n);
        _exit(0);
    }
    close(fd[1]);
    char msg[600] = "";
    size_t got = 0;
    ssize_t k;
    while (got < sizeof msg - 1 && (k = read(fd[0], msg + got, sizeof msg - 1 - got)) > 0)
        got += (size_t)k;
    close(fd[0]);
    int s = 0;
    cr_assert_eq(waitpid(p, &s, 0), p);
    int n = 0, off = 0;
    if (sscanf(msg, "%d %n", &n, &off) < 1) {
        snprintf(why, len, "the GPU probe process died (wait status %d)", s);
        return 0;
    }
    snprintf(why, len, "%s", msg + off);
    return n;
}

static void need_gpus(int n)
{
    static char why[600];
    int have = usable_gpus(why, sizeof why);
    if (have == 0) cr_skip_test("%s", why);
    if (have < n)
        cr_skip_test("%d ranks need %d GPUs (NCCL refuses two ranks on one device); this "
                     "machine has %d", n, n, have);
}

/* ops()'s checks on device buffers, with the compute stream's ops queued
 * right before and after collectives (no host wait between): each must see
 * the other's result. */
static int gpu_ops(comm *c, int rank, int world)
{
    char err[512];
    const vit_ops *g = ops_cuda(0, err, sizeof err);
    if (!g) return 90;
    int code = 0;
    float *h = malloc(sizeof(float) * 4 * N);
    float *d = g->alloc(sizeof(float) * 4 * N);
    uint16_t *db = g->alloc(2 * 4 * 5), *dmine = g->alloc(2 * 5);
    if (!h || !d || !db || !dmine) {
        code = 91;
        goto out;
    }
    /* all-reduce: x2 on the compute stream, sum, x0.5, sum again */
    for (int i = 0; i < N; i++) h[i] = (float)(rank + 1) * (float)i;
    g->upload(d, h, sizeof(float) * N);
    g->scale(d, 2.0f, N);
    if (comm_allreduce_sum(c, d, N, err, sizeof err)) {
        code = 1;
        goto out;
    }
    g->scale(d, 0.5f, N);
    if (comm_allreduce_sum(c, d, N, err, sizeof err)) {
        code = 1;
        goto out;
    }
    g->download(h, d, sizeof(float) * N);
    float tri = (float)(world * (world + 1) / 2);
    for (int i = 0; i < N; i++)
        if (h[i] != (float)world * tri * (float)i) {
            code = 2;
            goto out;
        }
    /* reduce-scatter in place: this rank's chunk at its offset */
    for (int i = 0; i < world * 250; i++) h[i] = (float)(i % 97) + (float)rank;
    g->upload(d, h, sizeof(float) * (size_t)world * 250);
    if (comm_reduce_scatter_sum(c, d, 250, err, sizeof err)) {
        code = 3;
        goto out;
    }
    g->download(h, d, sizeof(float) * (size_t)world * 250);
    for (int i = rank * 250; i < (rank + 1) * 250; i++)
        if (h[i] != (float)world * (float)(i % 97) + tri - (float)world) {
            code = 4;
            goto out;
        }
    /* all-gather f32 in place (the other chunks poisoned), bf16 apart */
    for (int i = 0; i < world * 7; i++) h[i] = -1.0f;
    for (int i = 0; i < 7; i++) h[rank * 7 + i] = (float)(100 * rank + i);
    g->upload(d, h, sizeof(float) * (size_t)world * 7);
    if (comm_allgather(c, d + rank * 7, d, 7, COMM_F32, err, sizeof err)) {
        code = 5;
        goto out;
    }
    g->download(h, d, sizeof(float) * (size_t)world * 7);
    for (int q = 0; q < world; q++)
        for (int i = 0; i < 7; i++)
            if (h[q * 7 + i] != (float)(100 * q + i)) {
                code = 6;
                goto out;
            }
    uint16_t mine[5], all[4 * 5];
    for (int i = 0; i < 5; i++) mine[i] = (uint16_t)(0x3f80 + rank * 8 + i);
    g->upload(dmine, mine, sizeof mine);
    if (comm_allgather(c, dmine, db, 5, COMM_BF16, err, sizeof err)) {
        code = 7;
        goto out;
    }
    g->download(all, db, 2 * (size_t)world * 5);
    for (int q = 0; q < world; q++)
        for (int i = 0; i < 5; i++)
            if (all[q * 5 + i] != 0x3f80 + q * 8 + i) {
                code = 8;
                goto out;
            }
    /* broadcast from the last rank */
    float b[3] = {(float)rank, (float)rank, (float)rank};
    g->upload(d, b, sizeof b);
    if (comm_broadcast(c, d, 3, COMM_F32, world - 1, err, sizeof err)) {
        code = 9;
        goto out;
    }
    g->download(b, d, sizeof b);
    if (b[0] != (float)(world - 1) || b[2] != (float)(world - 1)) {
        code = 10;
        goto out;
    }
    if (comm_barrier(c, err, sizeof err)) {
        code = 11;
        goto out;
    }
    if (comm_failed(c)) code = 12;
    else if (g->status(err, sizeof err)) code = 13;
out:
    if (code) fprintf(stderr, "rank %d: check %d: %s\n", rank, code, code == 2 ? "" : err);
    g->release(d);
    g->release(db);
    g->release(dmine);
    free(h);
    return code;
}

Test(comm, nccl_one_rank_gives_the_exact_results_on_device_buffers)
{
    need_gpus(1);
    int st[1];
    run_on(GPU, 1, 60, gpu_ops, st);
    expect_all_zero(1, st);
}

Test(comm, nccl_two_ranks_get_exact_sums_their_chunk_and_gathers_in_rank_order)
{
    need_gpus(2);
    int st[2];
    run_on(GPU, 2, 60, gpu_ops, st);
    expect_all_zero(2, st);
}

Test(comm, an_nccl_rank_whose_peer_never_comes_fails_at_the_timeout_saying_so)
{
    need_gpus(1);
    snprintf(dir, sizeof dir, "/tmp/test_comm_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t p = fork();
    if (p == 0) {
        close(fd[0]);
        comm *c = NULL;
        char err[512] = "";
        /* rank 0 of 2, alone: NCCL's init must give up at the timeout */
        int rc = comm_new_nccl_store(&c, &store, 0, 2, 3, err, sizeof err);
        (void)!write(fd[1], err, strlen(err));
        comm_free(c);
        _exit(rc == -1 && c == NULL ? 0 : 1);
    }
    close(fd[1]);
    char err[600] = "";
    size_t got = 0;
    ssize_t k;
    while (got < sizeof err - 1 && (k = read(fd[0], err + got, sizeof err - 1 - got)) > 0)
        got += (size_t)k;
    close(fd[0]);
    int s = 0;
    cr_assert_eq(waitpid(p, &s, 0), p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0, "the lone rank connected, or crashed (%d): %s",
              s, err);
    cr_assert(strstr(err, "not all connected within the timeout (3 s)") != NULL, "%s", err);
    cr_assert(took >= 3 && took < 40, "gave up after %.1f s (timeout 3 s)", took);
}
