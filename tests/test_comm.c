/* tests/test_comm.c - worker/comm_gloo.cc (and comm_rdzv.c): the CPU
 * collectives across ranks (forked processes on loopback, meeting through
 * a store kept in a temporary directory) give exact, rank-ordered,
 * repeatable results, and a dead peer fails the others' next collective
 * instead of hanging. */
#include "comm.h"

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

/* world ranks as processes; returns each one's exit code in st. */
static void run(int world, double timeout_s, rank_fn fn, int *st)
{
    snprintf(dir, sizeof dir, "/tmp/test_comm_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    setenv("VITJOB_COMM_HOST", "127.0.0.1", 1);
    pid_t pids[8];
    for (int r = 0; r < world; r++) {
        if ((pids[r] = fork()) == 0) {
            comm *c = NULL;
            char err[512];
            if (comm_new_cpu_store(&c, &store, r, world, timeout_s, err, sizeof err) != 0) {
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
    run(3, 5, dies, st);
    expect_all_zero(3, st);
}
