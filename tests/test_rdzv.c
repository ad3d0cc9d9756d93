/* tests/test_rdzv.c - worker/gang/rdzv.h, its server and client together
 * (rdzv_server.c, rdzv_client.c): ranks (forked processes) meet at rank
 * 0's store on loopback; the store's operations work across them; every
 * failure (a missing rank, an older generation, a duplicate rank, a lost
 * rank, a bad endpoint) ends with its error kind and a message naming it,
 * within the deadline given. */
#include "rdzv.h"
#include "util.h"

#include <criterion/criterion.h>

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rank_fixture.h"

TestSuite(rdzv, .timeout = 60);

static void msleep(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef int (*rank_fn)(rdzv *r, int rank, int world);

/* Runs world ranks as processes (rank 0 in a child too); each joins with
 * generation gens[rank] (NULL: 0) and runs fn. Returns each rank's exit
 * status in st (fn's result; 100 + the rdzv_error when joining failed). */
static void run_ranks(int world, const long *gens, double timeout_s, rank_fn fn, int *st,
                      char msgs[][512])
{
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    int pipes[16][2];
    pid_t pids[16];
    for (int r = 0; r < world; r++) {
        cr_assert_eq(pipe(pipes[r]), 0);
        pids[r] = fork();
        if (pids[r] == 0) {
            close(pipes[r][0]);
            rdzv_options o = {.endpoint = ep, .rank = r, .world_size = world,
                              .generation = gens ? gens[r] : 0, .timeout_s = timeout_s};
            rdzv *z = NULL;
            rdzv_error k = RDZV_OK;
            char err[512] = "";
            int code;
            if (rdzv_new(&z, &o, &k, err, sizeof err) != 0) {
                code = 100 + (int)k;
            } else {
                code = fn ? fn(z, r, world) : 0;
                rdzv_free(z);
            }
            (void)!write(pipes[r][1], err, strlen(err));
            close(pipes[r][1]);
            _exit(code);
        }
        close(pipes[r][1]);
        if (r == 0) msleep(100); /* the others may also come first: see late_rank_0 */
    }
    for (int r = 0; r < world; r++) {
        int s;
        cr_assert_eq(waitpid(pids[r], &s, 0), pids[r]);
        st[r] = WIFEXITED(s) ? WEXITSTATUS(s) : 200 + WTERMSIG(s);
        if (msgs) {
            ssize_t n = read(pipes[r][0], msgs[r], 511);
            msgs[r][n > 0 ? n : 0] = '\0';
        }
        close(pipes[r][0]);
    }
}

static int store_ops(rdzv *z, int rank, int world)
{
    char err[512], key[32], want[32];
    /* every rank publishes, every rank reads every other's (waiting for it) */
    snprintf(key, sizeof key, "addr/%d", rank);
    snprintf(want, sizeof want, "rank %d here", rank);
    if (rdzv_set(z, key, want, strlen(want), NULL, err, sizeof err)) return 1;
    for (int q = 0; q < world; q++) {
        void *v = NULL;
        size_t n = 0;
        snprintf(key, sizeof key, "addr/%d", q);
        snprintf(want, sizeof want, "rank %d here", q);
        if (rdzv_get(z, key, 10, &v, &n, NULL, err, sizeof err)) return 2;
        int ok = n == strlen(want) && memcmp(v, want, n) == 0;
        free(v);
        if (!ok) return 3;
    }
    long sum = 0;
    if (rdzv_add(z, "counter", rank + 1, &sum, NULL, err, sizeof err)) return 4;
    if (rdzv_barrier(z, "after-add", 10, NULL, err, sizeof err)) return 5;
    if (rdzv_add(z, "counter", 0, &sum, NULL, err, sizeof err)) return 6;
    if (sum != (long)world * (world + 1) / 2) return 7;
    /* compare-and-set: exactly one rank wins the absent key */
    int swapped = 0;
    char me = (char)('0' + rank);
    if (rdzv_cas(z, "leader", NULL, 0, &me, 1, &swapped, NULL, err, sizeof err)) return 8;
    if (swapped && rdzv_set(z, "winner", &me, 1, NULL, err, sizeof err)) return 9;
    /* a barrier name reused: each use counted apart */
    for (int i = 0; i < 3; i++)
        if (rdzv_barrier(z, "loop", 10, NULL, err, sizeof err)) return 10;
    void *w = NULL;
    size_t wn = 0;
    if (rdzv_get(z, "winner", 10, &w, &wn, NULL, err, sizeof err)) return 11;
    void *l = NULL;
    size_t ln = 0;
    if (rdzv_get(z, "leader", 10, &l, &ln, NULL, err, sizeof err)) return 12;
    int same = wn == 1 && ln == 1 && *(char *)w == *(char *)l;
    free(w);
    free(l);
    if (!same) return 13;
    /* cas with the right and the wrong expected value */
    if (rank == 0) {
        if (rdzv_cas(z, "k", NULL, 0, "a", 1, &swapped, NULL, err, sizeof err) || !swapped)
            return 14;
        if (rdzv_cas(z, "k", "b", 1, "c", 1, &swapped, NULL, err, sizeof err) || swapped)
            return 15;
        if (rdzv_cas(z, "k", "a", 1, "c", 1, &swapped, NULL, err, sizeof err) || !swapped)
            return 16;
    }
    return rdzv_barrier(z, "end", 10, NULL, err, sizeof err) ? 17 : 0;
}

Test(rdzv, four_ranks_join_and_share_set_get_add_cas_and_reused_barriers)
{
    int st[4];
    run_ranks(4, NULL, 20, store_ops, st, NULL);
    for (int r = 0; r < 4; r++) cr_assert_eq(st[r], 0, "rank %d: step %d failed", r, st[r]);
}

static int late_get(rdzv *z, int rank, int world)
{
    (void)world;
    char err[512];
    void *v = NULL;
    size_t n = 0;
    if (rank == 1) {
        msleep(300);
        return rdzv_set(z, "late", "v", 1, NULL, err, sizeof err) ? 1 : 0;
    }
    rdzv_error k;
    int rc = rdzv_get(z, "late", 10, &v, &n, &k, err, sizeof err);
    free(v);
    if (rc) return 2;
    /* a key nobody sets: a timeout, not a hang */
    rc = rdzv_get(z, "never", 0.5, &v, &n, &k, err, sizeof err);
    return rc == -1 && k == RDZV_TIMEOUT && strstr(err, "never") ? 0 : 3;
}

Test(rdzv, get_waits_for_a_later_set_and_times_out_on_a_key_never_set)
{
    int st[2];
    run_ranks(2, NULL, 20, late_get, st, NULL);
    cr_assert_eq(st[0], 0, "rank 0: %d", st[0]);
    cr_assert_eq(st[1], 0);
}

Test(rdzv, a_rank_that_never_arrives_times_out_every_other_rank_naming_it)
{
    /* world 3 but only ranks 0 and 1 started: run them as a world of 3 by
     * starting 2 processes that claim world 3. The timeout is the outcome
     * (the test lasts that long), but both ranks must have joined rank 0's
     * store within it, or the message names rank 1 or the connection: 8 s,
     * for a loaded machine that is slow to fork and schedule rank 0. */
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    pid_t p = fork();
    if (p == 0) {
        rdzv_options o = {.endpoint = ep, .rank = 0, .world_size = 3, .timeout_s = 8};
        rdzv *z;
        rdzv_error k;
        char err[512];
        int rc = rdzv_new(&z, &o, &k, err, sizeof err);
        _exit(rc == -1 && k == RDZV_TIMEOUT && strstr(err, "rank(s) 2 of 3 never arrived") ? 0
                                                                                            : 1);
    }
    msleep(100);
    rdzv_options o = {.endpoint = ep, .rank = 1, .world_size = 3, .timeout_s = 8};
    rdzv *z = NULL;
    rdzv_error k = RDZV_OK;
    char err[512] = "";
    cr_assert_eq(rdzv_new(&z, &o, &k, err, sizeof err), -1);
    cr_assert_eq(k, RDZV_TIMEOUT, "%d: %s", k, err);
    cr_assert(strstr(err, "rank(s) 2 of 3 never arrived within 8 s"), "%s", err);
    int s;
    cr_assert_eq(waitpid(p, &s, 0), p);
    cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0, "rank 0 did not name rank 2");
}

Test(rdzv, a_process_of_an_older_generation_is_refused_as_stale)
{
    long gens[2] = {5, 4};
    int st[2];
    char msgs[2][512];
    /* rank 0's timeout is the outcome (the test lasts that long); its store
     * must still be up when rank 1 reaches it, or rank 1 is refused by a
     * closed port instead: 8 s, for a loaded machine */
    run_ranks(2, gens, 8, NULL, st, msgs);
    cr_assert_eq(st[1], 100 + RDZV_STALE, "rank 1: %d %s", st[1], msgs[1]);
    cr_assert(strstr(msgs[1], "serves restart generation 5; this process is of generation 4"),
              "%s", msgs[1]);
    cr_assert_eq(st[0], 100 + RDZV_TIMEOUT, "rank 0 waits for a rank 1 of its own generation");
}

/* Forks a rank of world 2 joining ep with generation gen; its stderr goes
 * to log_fd (-1: inherited), its error message to msg_fd; it exits with 0
 * or 100 + the rdzv_error. */
static pid_t fork_rank(const char *ep, int rank, long gen, double timeout_s, int log_fd,
                       int msg_fd)
{
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p > 0) return p;
    if (log_fd >= 0) dup2(log_fd, 2);
    rdzv_options o = {.endpoint = ep, .rank = rank, .world_size = 2, .generation = gen,
                      .timeout_s = timeout_s};
    rdzv *z = NULL;
    rdzv_error k = RDZV_OK;
    char err[512] = "";
    int code = rdzv_new(&z, &o, &k, err, sizeof err) == 0 ? 0 : 100 + (int)k;
    rdzv_free(z);
    (void)!write(msg_fd, err, strlen(err));
    _exit(code);
}

/* Reads fd until its text holds want or it closes; 1 if seen. */
static int read_until(int fd, const char *want)
{
    char buf[8192] = "";
    size_t have = 0;
    for (;;) {
        if (strstr(buf, want)) return 1;
        if (have + 1 >= sizeof buf) { /* keep the tail: the marker may straddle */
            memmove(buf, buf + have / 2, have - have / 2 + 1);
            have -= have / 2;
        }
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n <= 0) return 0;
        have += (size_t)n;
        buf[have] = '\0';
    }
}

/* Deterministic: rank 0's old store stays up until rank 1 has logged its
 * answer, and only then goes (so rank 1's later attempts are refused):
 * the message must still carry what the store said, not the refusal. */
Test(rdzv, a_newer_generation_times_out_naming_the_old_store_it_met_not_its_last_refusal)
{
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    int m0[2], m1[2], log1[2];
    cr_assert_eq(pipe(m0), 0);
    cr_assert_eq(pipe(m1), 0);
    cr_assert_eq(pipe(log1), 0);
    pid_t p0 = fork_rank(ep, 0, 1, 120, -1, m0[1]);
    pid_t p1 = fork_rank(ep, 1, 2, 8, log1[1], m1[1]);
    close(m0[1]);
    close(m1[1]);
    close(log1[1]);
    int seen = read_until(log1[0], "event=waiting reason=older_generation");
    kill(p0, SIGKILL);
    int s0, s1;
    cr_assert_eq(waitpid(p0, &s0, 0), p0);
    char msg[512] = "";
    ssize_t n = read(m1[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = '\0';
    cr_assert_eq(waitpid(p1, &s1, 0), p1);
    close(m0[0]);
    close(m1[0]);
    close(log1[0]);
    cr_assert(seen, "rank 1 never logged the old store's answer: %s", msg);
    cr_assert(WIFEXITED(s1) && WEXITSTATUS(s1) == 100 + RDZV_TIMEOUT, "rank 1: %s", msg);
    cr_assert(strstr(msg, "within 8 s: rank 0's store"), "%s", msg);
    cr_assert(strstr(msg, "serves the older generation 1; this process is of generation 2 "
                          "(this gang is being replaced)"), "%s", msg);
    cr_assert(strstr(msg, "(last: connect: Connection refused)"), "%s", msg);
}

/* Nothing listens: the refusal is all there is to report, once. */
Test(rdzv, a_rank_whose_store_never_listens_times_out_naming_the_refusal)
{
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    int m[2];
    cr_assert_eq(pipe(m), 0);
    pid_t p = fork_rank(ep, 1, 0, 1, -1, m[1]);
    close(m[1]);
    char msg[512] = "";
    ssize_t n = read(m[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = '\0';
    close(m[0]);
    int s;
    cr_assert_eq(waitpid(p, &s, 0), p);
    cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 100 + RDZV_TIMEOUT, "%s", msg);
    cr_assert(strstr(msg, "within 1 s: connect: Connection refused"), "%s", msg);
    cr_assert(!strstr(msg, "last:"), "%s", msg);
}

Test(rdzv, a_late_rank_0_is_waited_for)
{
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    pid_t p = fork();
    if (p == 0) {
        rdzv_options o = {.endpoint = ep, .rank = 1, .world_size = 2, .timeout_s = 15};
        rdzv *z;
        char err[512];
        int rc = rdzv_new(&z, &o, NULL, err, sizeof err);
        if (rc == 0) rdzv_free(z);
        _exit(rc == 0 ? 0 : 1);
    }
    msleep(700); /* rank 1 is retrying: connection refused */
    rdzv_options o = {.endpoint = ep, .rank = 0, .world_size = 2, .timeout_s = 15};
    rdzv *z = NULL;
    char err[512] = "";
    cr_assert_eq(rdzv_new(&z, &o, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rdzv_rank(z), 0);
    cr_assert_eq(rdzv_world_size(z), 2);
    rdzv_free(z);
    int s;
    cr_assert_eq(waitpid(p, &s, 0), p);
    cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0);
}

Test(rdzv, a_rank_that_dies_mid_barrier_fails_the_others_naming_it_and_the_store_remembers_it)
{
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    pid_t kids[2];
    for (int r = 1; r <= 2; r++) {
        kids[r - 1] = fork();
        if (kids[r - 1] == 0) {
            rdzv_options o = {.endpoint = ep, .rank = r, .world_size = 3, .timeout_s = 15};
            rdzv *z;
            char err[512];
            if (rdzv_new(&z, &o, NULL, err, sizeof err)) _exit(1);
            if (r == 2) _exit(9); /* dies without a goodbye */
            rdzv_error k;
            int rc = rdzv_barrier(z, "b", 30, &k, err, sizeof err);
            if (rc != -1 || k != RDZV_LOST || !strstr(err, "rank 2 was lost")) _exit(2);
            _exit(rdzv_lost_rank(z, 5) == 2 ? 0 : 3); /* and the store names it later too */
        }
    }
    rdzv_options o = {.endpoint = ep, .rank = 0, .world_size = 3, .timeout_s = 15};
    rdzv *z = NULL;
    char err[512] = "";
    cr_assert_eq(rdzv_new(&z, &o, NULL, err, sizeof err), 0, "%s", err);
    rdzv_error k = RDZV_OK;
    /* 30 s allowed: the loss must end it long before (the suite's 60 s
     * timeout fails the test if the barrier waited for its deadline twice) */
    cr_assert_eq(rdzv_barrier(z, "b", 30, &k, err, sizeof err), -1);
    cr_assert_eq(k, RDZV_LOST, "%d: %s", k, err);
    cr_assert(strstr(err, "rank 2 was lost"), "%s", err);
    cr_assert_eq(rdzv_lost_rank(z, 5), 2);
    int s;
    cr_assert_eq(waitpid(kids[0], &s, 0), kids[0]);
    cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0, "rank 1: %d", WEXITSTATUS(s));
    waitpid(kids[1], &s, 0);
    rdzv_free(z);
}

static int lost_none(rdzv *z, int rank, int world)
{
    (void)rank, (void)world;
    if (rdzv_barrier(z, "all", 10, NULL, NULL, 0) != 0) return 1;
    return rdzv_lost_rank(z, 0.3) == -1 ? 0 : 2; /* nobody lost: unknown after the wait */
}

Test(rdzv, no_rank_lost_is_minus_1)
{
    int st[2];
    char msgs[2][512];
    run_ranks(2, NULL, 10, lost_none, st, msgs);
    for (int r = 0; r < 2; r++) cr_assert_eq(st[r], 0, "rank %d: %d %s", r, st[r], msgs[r]);
}

/* what the store holds under rdzv/lost is a rank only if it is one of this
 * world's: 0 .. world-1 */
static int lost_range(rdzv *z, int rank, int world)
{
    char err[256], v[16];
    if (rank == 0) {
        snprintf(v, sizeof v, "%d", world);
        if (rdzv_set(z, "rdzv/lost", v, strlen(v), NULL, err, sizeof err)) return 1;
    }
    if (rdzv_barrier(z, "w", 10, NULL, NULL, 0)) return 2;
    if (rdzv_lost_rank(z, 0.3) != -1) return 3; /* the world size is no rank */
    if (rdzv_barrier(z, "r", 10, NULL, NULL, 0)) return 4;
    if (rank == 0) {
        snprintf(v, sizeof v, "%d", world - 1);
        if (rdzv_set(z, "rdzv/lost", v, strlen(v), NULL, err, sizeof err)) return 5;
    }
    if (rdzv_barrier(z, "w2", 10, NULL, NULL, 0)) return 6;
    return rdzv_lost_rank(z, 0.3) == world - 1 ? 0 : 7; /* the last rank is */
}

Test(rdzv, a_lost_rank_outside_the_world_is_no_rank)
{
    int st[2];
    char msgs[2][512];
    run_ranks(2, NULL, 10, lost_range, st, msgs);
    for (int r = 0; r < 2; r++) cr_assert_eq(st[r], 0, "rank %d: %d %s", r, st[r], msgs[r]);
}

/* Reads want bytes from fd, waiting at most cap_s seconds in all; returns
 * how many came (fewer: EOF or the cap). */
static int read_bytes(int fd, int want, double cap_s)
{
    const double until = mono_seconds() + cap_s;
    int have = 0;
    while (have < want) {
        double left = until - mono_seconds();
        if (left <= 0) break;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0) continue; /* EINTR, or the cap */
        char c[16];
        ssize_t n = read(fd, c, (size_t)(want - have) < sizeof c ? (size_t)(want - have)
                                                                    : sizeof c);
        if (n <= 0) break;
        have += (int)n;
    }
    return have;
}

/* In a forked child: a rank of world 2 that joins ep, writes one byte to
 * ready_fd once rdzv_new returned, and stays (its store, for rank 0, up;
 * its rank, for rank 1, joined) until release_fd closes. Exits 0, or 1 if
 * it did not join. */
static _Noreturn void staying_rank(const char *ep, int rank, int ready_fd, int release_fd)
{
    rdzv_options o = {.endpoint = ep, .rank = rank, .world_size = 2, .timeout_s = 30};
    rdzv *z;
    char err[512];
    if (rdzv_new(&z, &o, NULL, err, sizeof err) != 0) _exit(1);
    (void)!write(ready_fd, "j", 1);
    char c;
    while (read(release_fd, &c, 1) != 0) {
    } /* EOF: released (also when the test process is gone) */
    rdzv_free(z);
    _exit(0);
}

Test(rdzv, the_same_rank_twice_or_a_world_size_mismatch_is_invalid)
{
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    int ready[2], release[2];
    cr_assert_eq(pipe(ready), 0);
    cr_assert_eq(pipe(release), 0);
    /* the children keep only ready[1] and release[0] */
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p == 0) {
        close(ready[0]);
        close(release[1]);
        staying_rank(ep, 0, ready[1], release[0]);
    }
    /* both refusals below are the store's answers, not timeouts: 30 s to
     * reach a store that a loaded machine starts late */
    rdzv_options o = {.endpoint = ep, .rank = 0, .world_size = 2, .timeout_s = 30};
    /* rank 0 again, as a client: the server of this process cannot bind,
     * so ask as rank 1 of another world size first */
    o.rank = 1;
    o.world_size = 3;
    rdzv *z = NULL;
    rdzv_error k = RDZV_OK;
    char err[512] = "";
    cr_assert_eq(rdzv_new(&z, &o, &k, err, sizeof err), -1);
    cr_assert_eq(k, RDZV_INVALID, "%d: %s", k, err);
    cr_assert(strstr(err, "world size 3 does not fit this store's world size 2"), "%s", err);
    /* the server's own rank 0 has joined: a second rank 0 client is refused.
     * (Sent as rank 0 it would start a second server, so the duplicate is
     * rank 1 twice.) */
    pid_t q = fork();
    cr_assert(q >= 0);
    if (q == 0) {
        close(ready[0]);
        close(release[1]);
        staying_rank(ep, 1, ready[1], release[0]);
    }
    close(ready[1]);
    close(release[0]);
    /* ranks 0 and 1 both met (rank 1 joined, rank 0's store still up) */
    int got = read_bytes(ready[0], 2, 30);
    cr_assert_eq(got, 2, "only %d of ranks 0 and 1 joined within 30 s", got);
    o.world_size = 2;
    cr_assert_eq(rdzv_new(&z, &o, &k, err, sizeof err), -1);
    cr_assert_eq(k, RDZV_INVALID, "%d: %s", k, err);
    cr_assert(strstr(err, "rank 1 already joined"), "%s", err);
    close(release[1]); /* the ranks leave */
    close(ready[0]);
    int s;
    cr_assert_eq(waitpid(q, &s, 0), q);
    cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0);
    cr_assert_eq(waitpid(p, &s, 0), p);
    cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0);
}

Test(rdzv, bad_endpoints_and_ranks_are_invalid_and_an_unresolvable_name_times_out)
{
    const char *bad[] = {"nohost", "host:0", "host:99999", "host:", ":80", "[::1]80"};
    rdzv *z = NULL;
    rdzv_error k;
    char err[512];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rdzv_options o = {.endpoint = bad[i], .rank = 1, .world_size = 2, .timeout_s = 1};
        cr_assert_eq(rdzv_new(&z, &o, &k, err, sizeof err), -1, "%s", bad[i]);
        cr_assert_eq(k, RDZV_INVALID, "%s", bad[i]);
        cr_assert(strstr(err, "is not host:port"), "%s: %s", bad[i], err);
    }
    rdzv_options o = {.endpoint = "127.0.0.1:5", .rank = 2, .world_size = 2, .timeout_s = 1};
    cr_assert_eq(rdzv_new(&z, &o, &k, err, sizeof err), -1);
    cr_assert_eq(k, RDZV_INVALID);
    rdzv_options u = {.endpoint = "no-such-host.invalid:29400", .rank = 1, .world_size = 2,
                      .timeout_s = 1};
    cr_assert_eq(rdzv_new(&z, &u, &k, err, sizeof err), -1);
    cr_assert_eq(k, RDZV_TIMEOUT, "%s", err);
    cr_assert(strstr(err, "could not reach the rendezvous store at no-such-host.invalid:29400"),
              "%s", err);
}

/* The SIGTERM handler's flag, set from another thread while the rank waits
 * (rdzv_options.stop): the wait ends with RDZV_STOPPED, long before its
 * one-hour deadline (the suite's 60 s limit fails a rank that ignores it). */
static volatile sig_atomic_t stop_flag;

static void *set_stop_later(void *arg)
{
    (void)arg;
    msleep(300);
    stop_flag = SIGTERM;
    return NULL;
}

static void stopped_while(const char *endpoint, int rank, const char *what)
{
    stop_flag = 0;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, set_stop_later, NULL), 0);
    rdzv_options o = {.endpoint = endpoint, .rank = rank, .world_size = 2, .timeout_s = 3600,
                      .stop = &stop_flag};
    rdzv *z = NULL;
    rdzv_error k = RDZV_OK;
    char err[512] = "";
    int rc = rdzv_new(&z, &o, &k, err, sizeof err);
    pthread_join(t, NULL);
    cr_assert_eq(rc, -1, "%s: joined", what);
    cr_assert_eq(k, RDZV_STOPPED, "%s: kind %d: %s", what, (int)k, err);
    cr_assert(strstr(err, "stopped by signal"), "%s: %s", what, err);
}

Test(rdzv, a_stop_flag_ends_the_wait_for_a_peer_and_for_a_store_that_never_answers)
{
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    stopped_while(ep, 0, "rank 0 waiting for rank 1");
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    stopped_while(ep, 1, "rank 1 retrying a store that is not there");
}

Test(rdzv, once_met_the_store_serves_a_stopping_run_whatever_the_stop_flag_says)
{
    char ep[64], err[512] = "";
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    stop_flag = 0;
    rdzv_options o = {.endpoint = ep, .rank = 0, .world_size = 1, .timeout_s = 30,
                      .stop = &stop_flag};
    rdzv *z = NULL;
    rdzv_error k = RDZV_OK;
    cr_assert_eq(rdzv_new(&z, &o, &k, err, sizeof err), 0, "%s", err);
    stop_flag = SIGTERM; /* the run agrees on its last step and checkpoints through the store */
    cr_assert_eq(rdzv_set(z, "last", "7", 1, &k, err, sizeof err), 0, "%s", err);
    void *v = NULL;
    size_t n = 0;
    cr_assert_eq(rdzv_get(z, "last", 5, &v, &n, &k, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 1);
    cr_assert_eq(memcmp(v, "7", 1), 0);
    free(v);
    cr_assert_eq(rdzv_barrier(z, "saved", 5, &k, err, sizeof err), 0, "%s", err);
    rdzv_free(z);
}
