/* tests/test_gang.c - worker/gang/gang.c: forked ranks on loopback start
 * their gang (rendezvous, heartbeat, gloo collectives) and all-reduce
 * through it; a rank whose peer never comes fails with class rendezvous, a
 * bad endpoint with class environment, nothing left running; after a run
 * that lost a peer, gang_stop waits for the heartbeat's verdict and names
 * the lost rank. */
#include "gang.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rank_fixture.h"

TestSuite(gang, .timeout = 120);

static char ep[64];
static int verdicts; /* of this (forked) process */

static void count_verdict(void *ctx, const hb_verdict *v)
{
    (void)ctx, (void)v;
    verdicts++;
}

/* heartbeat timeout 30 s: never reached here (a rank stalled by a loaded
 * machine is no verdict); the loss below shows by its closed connection */
static gang_options options(int rank, int world)
{
    return (gang_options){.endpoint = ep, .rank = rank, .world_size = world,
                          .rendezvous_timeout_s = 30, .heartbeat_timeout_s = 30,
                          .collective_timeout_s = 30, .on_verdict = count_verdict};
}

/* Forks world ranks running body(rank); each one's exit status into st. */
static void run(int world, int (*body)(int rank, int world), int *st)
{
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    pid_t pids[8];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        cr_assert(pids[r] >= 0);
        if (pids[r] == 0) _exit(body(r, world));
    }
    for (int r = 0; r < world; r++) {
        int s = 0;
        waitpid(pids[r], &s, 0);
        st[r] = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
    }
}

static int sums(int rank, int world)
{
    char err[512] = "";
    gang_options o = options(rank, world);
    gang *g = NULL;
    if (gang_start(&g, &o, err, sizeof err) != VJ_OK) return 10;
    if (!gang_rdzv(g) || !gang_hb(g) || !gang_comm(g)) return 11;
    if (comm_rank(gang_comm(g)) != rank || comm_world_size(gang_comm(g)) != world) return 12;
    float x[4] = {1, 2, 3, (float)rank};
    if (comm_allreduce_sum(gang_comm(g), x, 4, err, sizeof err) != 0) return 13;
    if (x[0] != world || x[3] != world * (world - 1) / 2) return 14;
    gang_stop(g, 0, err, sizeof err);
    if (err[0]) return 15; /* nothing said of a run that lost no peer */
    gang_free(g);
    return verdicts ? 16 : 0;
}

Test(gang, ranks_meet_heartbeat_and_all_reduce_through_their_gang)
{
    int st[3];
    run(3, sums, st);
    for (int r = 0; r < 3; r++) cr_expect_eq(st[r], 0, "rank %d: %d", r, st[r]);
}

Test(gang, a_rank_whose_peer_never_comes_fails_with_class_rendezvous)
{
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    gang_options o = options(0, 2);
    o.rendezvous_timeout_s = 1;
    gang *g = (gang *)1;
    char err[512] = "";
    cr_assert_eq(gang_start(&g, &o, err, sizeof err), VJ_ERR_RENDEZVOUS, "%s", err);
    cr_assert_null(g);
    cr_assert(strstr(err, "never arrived"), "%s", err);
}

Test(gang, a_bad_endpoint_fails_with_class_environment)
{
    snprintf(ep, sizeof ep, "no-port-here");
    gang_options o = options(0, 2);
    gang *g = NULL;
    char err[512] = "";
    cr_assert_eq(gang_start(&g, &o, err, sizeof err), VJ_ERR_ENVIRONMENT, "%s", err);
    cr_assert_null(g);
    gang_stop(NULL, 1, err, sizeof err); /* NULL: nothing */
    gang_free(NULL);
}

/* rank 1 leaves without a word once the gang stands; rank 0's run "ended
 * with a peer lost": gang_stop waits for the verdict and names rank 1 */
static int one_leaves(int rank, int world)
{
    char err[512] = "";
    gang_options o = options(rank, world);
    gang *g = NULL;
    if (gang_start(&g, &o, err, sizeof err) != VJ_OK) return 10;
    if (comm_barrier(gang_comm(g), err, sizeof err) != 0) return 11;
    if (rank == 1) _exit(0);
    snprintf(err, sizeof err, "all-reduce: peer lost");
    gang_stop(g, 1, err, sizeof err);
    gang_free(g);
    if (verdicts != 1) return 12;
    return strcmp(err, "all-reduce: peer lost; lost: rank 1") == 0 ? 0 : 13;
}

Test(gang, after_a_peer_lost_the_stop_awaits_the_verdict_and_names_the_lost_rank)
{
    int st[2];
    run(2, one_leaves, st);
    cr_expect_eq(st[0], 0, "rank 0: %d", st[0]);
    cr_expect_eq(st[1], 0, "rank 1: %d", st[1]);
}
