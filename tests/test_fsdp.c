/* tests/test_fsdp.c - worker/train/fsdp.c: ranks (forked processes meeting at
 * rank 0's store on loopback, gloo collectives) hold shards of units whose
 * lengths divide by no world size; each unit arrives whole for the forward
 * and the backward in any order the model asks (prefetched or not), every
 * rank's gradients are summed into the owner's shard and accumulate over
 * micro-batches, an optimizer-style update of the shard shows in the next
 * gather, read gathers the whole vector, and a lost peer fails the shard
 * within the collective timeout, naming the unit. */
#include "fsdp.h"

#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "ops.h"
#include "rank_fixture.h"
#include "rdzv.h"

TestSuite(fsdp, .timeout = 90);

/* units of 5, 13, 8, 1 and 11 values: the stem, three blocks, the head */
static const size_t bounds[] = {0, 5, 18, 26, 27, 38};
enum { UNITS = 5, TOTAL = 38 };

typedef int (*rank_fn)(fsdp *f, int rank, int world);

/* world ranks as processes, each with a shard; returns their exit codes. */
static void run(int world, double timeout_s, rank_fn fn, int *st)
{
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    setenv("VITJOB_COMM_HOST", "127.0.0.1", 1);
    pid_t pids[8];
    for (int r = 0; r < world; r++) {
        if ((pids[r] = fork()) == 0) {
            signal(SIGPIPE, SIG_IGN); /* as the worker: a dead peer is EPIPE */
            rdzv_options o = {.endpoint = ep, .rank = r, .world_size = world, .timeout_s = 30};
            rdzv *z = NULL;
            comm *c = NULL;
            fsdp *f = NULL;
            char err[512];
            if (rdzv_new(&z, &o, NULL, err, sizeof err) != 0 ||
                comm_new_cpu(&c, z, timeout_s, err, sizeof err) != 0 ||
                fsdp_new(&f, c, ops_cpu(), bounds, UNITS, err, sizeof err) != 0) {
                fprintf(stderr, "rank %d: %s\n", r, err);
                _exit(99);
            }
            int code = fn(f, r, world);
            fsdp_free(f);
            comm_free(c);
            rdzv_free(z);
            _exit(code);
        }
    }
    for (int r = 0; r < world; r++) {
        int s;
        cr_assert_eq(waitpid(pids[r], &s, 0), pids[r]);
        st[r] = WIFEXITED(s) ? WEXITSTATUS(s) : 200 + WTERMSIG(s);
    }
}

static void expect_all_zero(int world, const int *st)
{
    for (int r = 0; r < world; r++) cr_assert_eq(st[r], 0, "rank %d failed at check %d", r, st[r]);
}

static float value(size_t i) { return 0.5f * (float)i + 1.0f; }

/* unit u as the hooks give it equals the flat vector's range, plus add */
static int unit_is(fsdp *f, int u, int backward, float add)
{
    const model_shard *h = fsdp_hooks(f);
    const float *p = h->params(h->ctx, u, backward);
    for (size_t j = 0; j < bounds[u + 1] - bounds[u]; j++)
        if (p[j] != value(bounds[u] + j) + add) return 0;
    return 1;
}

static void write_values(fsdp *f)
{
    float host[TOTAL];
    for (size_t i = 0; i < TOTAL; i++) host[i] = value(i);
    fsdp_hooks(f)->write(fsdp_hooks(f)->ctx, host);
}

static int gathers(fsdp *f, int rank, int world)
{
    (void)rank, (void)world;
    write_values(f);
    /* two micro-batches' forward and backward, then an out-of-order ask */
    for (int mb = 0; mb < 2; mb++) {
        for (int u = 0; u < UNITS; u++)
            if (!unit_is(f, u, 0, 0)) return 10 + u;
        for (int u = UNITS - 1; u >= 0; u--)
            if (!unit_is(f, u, 1, 0)) return 20 + u;
    }
    if (!unit_is(f, 3, 0, 0) || !unit_is(f, 1, 1, 0) || !unit_is(f, 3, 1, 0)) return 30;
    float all[TOTAL];
    const model_shard *h = fsdp_hooks(f);
    if (h->read(h->ctx, all) != 0) return 31;
    for (size_t i = 0; i < TOTAL; i++)
        if (all[i] != value(i)) return 32;
    char err[256];
    return fsdp_sync(f, err, sizeof err) == 0 ? 0 : 33;
}

Test(fsdp, every_unit_arrives_whole_in_both_passes_at_2_3_and_4_ranks)
{
    for (int w = 2; w <= 4; w++) {
        int st[4];
        run(w, 20, gathers, st);
        expect_all_zero(w, st);
    }
}

static int gradients(fsdp *f, int rank, int world)
{
    const model_shard *h = fsdp_hooks(f);
    char err[256];
    write_values(f);
    for (int step = 0; step < 2; step++) {
        fsdp_zero_grads(f);
        for (int mb = 1; mb <= 2; mb++) { /* micro-batches 1 and 2: weights 1 + 2 = 3 */
            for (int u = 0; u < UNITS; u++) h->params(h->ctx, u, 0);
            for (int u = UNITS - 1; u >= 0; u--) {
                h->params(h->ctx, u, 1);
                float *g = h->grads(h->ctx, u);
                for (size_t j = 0; j < bounds[u + 1] - bounds[u]; j++)
                    g[j] = (float)((rank + 1) * mb) * (float)(j + 1);
                h->grads_done(h->ctx, u);
            }
        }
        if (fsdp_sync(f, err, sizeof err) != 0) return 1;
        size_t lo[UNITS], hi[UNITS], at[UNITS];
        fsdp_shard_spans(f, lo, hi, at);
        const float ranks_sum = (float)(world * (world + 1) / 2);
        size_t held = 0;
        for (int u = 0; u < UNITS; u++) {
            for (size_t i = lo[u]; i < hi[u]; i++)
                if (fsdp_grads(f)[at[u] + (i - lo[u])] != 3.0f * ranks_sum * (float)(i - bounds[u] + 1))
                    return 2 + u;
            held += hi[u] - lo[u];
        }
        /* the spans of all ranks partition the vector: each holds its share */
        if (held > TOTAL / (size_t)world + UNITS || fsdp_shard_len(f) < held) return 8;
    }
    /* an update of every shard shows in the next gather, everywhere */
    for (size_t i = 0; i < fsdp_shard_len(f); i++) fsdp_params(f)[i] += 1.0f;
    fsdp_params_changed(f);
    for (int u = 0; u < UNITS; u++) {
        const float *p = h->params(h->ctx, u, 0);
        for (size_t j = 0; j < bounds[u + 1] - bounds[u]; j++)
            if (p[j] != value(bounds[u] + j) + 1.0f) return 9;
    }
    return fsdp_sync(f, err, sizeof err) == 0 ? 0 : 10;
}

Test(fsdp, gradients_of_every_rank_sum_into_the_owners_shard_and_accumulate)
{
    for (int w = 2; w <= 4; w += 2) {
        int st[4];
        run(w, 20, gradients, st);
        expect_all_zero(w, st);
    }
}

/* both ranks gather the stem (so that each is past its set-up: a rank that
 * left while the other was still connecting would fail the set-up instead),
 * then rank 1 leaves; rank 0's next gather fails, and says which unit */
static int lose_peer(fsdp *f, int rank, int world)
{
    (void)world;
    const model_shard *h = fsdp_hooks(f);
    h->params(h->ctx, 0, 0);
    char err[512] = "";
    if (fsdp_sync(f, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: the stem's gather failed: %s\n", rank, err);
        return 4;
    }
    if (rank == 1) _exit(0);
    h->params(h->ctx, 2, 0); /* returns: stale values, the failure is sticky */
    if (fsdp_sync(f, err, sizeof err) == 0) return 1;
    if (!strstr(err, "sharding full: gathering the parameters of block 1")) {
        fprintf(stderr, "message: %s\n", err);
        return 2;
    }
    /* and stays failed */
    char again[512] = "";
    return fsdp_sync(f, again, sizeof again) != 0 && strcmp(err, again) == 0 ? 0 : 3;
}

Test(fsdp, a_lost_peer_fails_the_shard_naming_the_unit)
{
    int st[2];
    /* the loss shows by rank 1's closed sockets: a timeout as long as the
     * other tests' (never reached), so that a stalled rank fails nothing */
    run(2, 30, lose_peer, st);
    expect_all_zero(2, st);
}
