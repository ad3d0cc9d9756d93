/* tests/test_heartbeat.c - worker/gang/heartbeat.c: ranks (this process and
 * forked ones) meet at rank 0's store on loopback and heartbeat; a peer
 * killed is lost with evidence closed, one frozen (SIGSTOP) with evidence
 * heartbeat, rank 0's loss reaches the others, rank 0 tells every rank which
 * peer it lost; a rank woken from a freeze is stale and hb_ok says so at its
 * first call; a clean stop, a rank busy for longer than the timeout and rank
 * 0's end are no verdict (judged on a clock the test moves, so that a
 * rank stalled by a loaded machine is no verdict); another generation is
 * refused. Deadlines are generous; what is asserted is the verdict, never
 * how fast it came. With a clock the test moves (hb_options.clock): a
 * silent peer is lost after the timeout and within one period past it, and
 * a rank woken from a freeze is stale at once although its last answer is
 * recent. */
#include "heartbeat.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rank_fixture.h"
#include "util.h"
#include "wire.h"

TestSuite(heartbeat, .timeout = 120);

/* The heartbeat timeouts of these tests, seconds (each real-time test uses
 * one; the injected-clock ones below have their own):
 * T_LONG where a loss shows some other way (a closed connection) or none
 * may come while the test looks: never reached, so that a rank stalled by
 * a loaded machine is no verdict. P_LONG, its period, lets heartbeats flow
 * while the test looks.
 * T_SHORT where silence itself is the evidence (a frozen rank): the test
 * waits it out; 10 s, so that the ranks that must not be judged may stall
 * for most of it (a process is stale after T_SHORT - its period, 8 s). */
#define T_LONG 30.0
#define P_LONG 0.5
#define T_SHORT 10.0
/* the judge's timeout and period in the no-verdict tests (on its injected
 * clock; the other rank's are T_LONG, real) */
#define TV 20.0
#define PV 2.0

static void msleep(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------ a clock the test moves */

/* hb_options.clock: the time is the test's; each read is counted (the
 * test waits for the heartbeat thread's reads, not for time), and while
 * `hold` is up every thread but the test's waits at its read. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double t;
    long reads;
    int hold;
    pthread_t owner;
} test_clock;

static double clock_read(void *ctx)
{
    test_clock *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->reads++;
    pthread_cond_broadcast(&c->cv);
    while (c->hold && !pthread_equal(pthread_self(), c->owner))
        pthread_cond_wait(&c->cv, &c->mu);
    double t = c->t;
    pthread_mutex_unlock(&c->mu);
    return t;
}

static void clock_init(test_clock *c, double t)
{
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->t = t;
    c->reads = 0;
    c->hold = 0;
    c->owner = pthread_self();
}

static void clock_set(test_clock *c, double t, int hold)
{
    pthread_mutex_lock(&c->mu);
    c->t = t;
    c->hold = hold;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Waits until another thread read the clock n more times: the heartbeat's
 * thread reads it once an iteration, before it judges, so after two reads
 * one whole iteration judged at the time set. (A limit far above what it
 * takes: the thread reads it every period / 2 at least.) */
static void clock_wait_reads(test_clock *c, long n)
{
    pthread_mutex_lock(&c->mu);
    const long want = c->reads + n;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    while (c->reads < want)
        cr_assert_eq(pthread_cond_timedwait(&c->cv, &c->mu, &until), 0,
                     "the heartbeat thread stopped reading its clock");
    pthread_mutex_unlock(&c->mu);
}

/* A verdict handler of a forked rank: the verdict to the test, then exit 7
 * (a stale one once the main loop reported its first hb_ok after waking,
 * or after about a minute). */
static int verdict_fd = -1;
static atomic_int woke_reported;
static void child_verdict(void *ctx, const hb_verdict *v)
{
    (void)ctx;
    for (int i = 0; v->kind == HB_STALE && i < 60000 && !atomic_load(&woke_reported); i++)
        msleep(1);
    char b[1 + sizeof *v];
    b[0] = 'V';
    memcpy(b + 1, v, sizeof *v);
    (void)!write(verdict_fd, b, sizeof b);
    _exit(7);
}

enum { RUN, STOP_AFTER, BUSY };

/* Forks rank `rank` of world joining ep (generation gen) with a heartbeat
 * (timeout, period: 0 the default; generation hb_gen). It writes 'R' to
 * its pipe (*rd) once the heartbeat runs, 'V' + the verdict when one comes
 * (then exits 7), and (RUN) 'Z' + the first hb_ok after a gap in its own
 * loop of over the heartbeat's freeze limit, timeout - period (it was
 * frozen: by SIGSTOP until rank 0's verdict, at least that, then 1 s). STOP_AFTER: hb_stop after
 * `secs`, 'S', then it lingers (alive, silent) until *rel closes, and exits
 * 0. BUSY: its main thread waits for *rel to close without a call, then
 * hb_stop, 'S', exit 0. */
static pid_t fork_rank(const char *ep, int rank, int world, long gen, int mode, double secs,
                       double timeout, double period, int *rd, int *rel)
{
    int p[2], r[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(pipe(r), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid > 0) {
        close(p[1]);
        close(r[0]);
        *rd = p[0];
        *rel = r[1];
        return pid;
    }
    close(p[0]);
    close(r[1]);
    verdict_fd = p[1];
    rdzv_options o = {.endpoint = ep, .rank = rank, .world_size = world, .generation = gen,
                      .timeout_s = 30};
    rdzv *z = NULL;
    char err[512];
    if (rdzv_new(&z, &o, NULL, err, sizeof err) != 0) _exit(100);
    hb *h = NULL;
    hb_options ho = {.store = z, .generation = gen, .timeout_s = timeout, .period_s = period,
                     .connect_timeout_s = 30, .on_verdict = child_verdict};
    if (hb_start(&h, &ho, NULL, err, sizeof err) != 0) _exit(101);
    (void)!write(p[1], "R", 1);
    if (mode == STOP_AFTER || mode == BUSY) {
        char c;
        if (mode == STOP_AFTER) msleep((long)(secs * 1000));
        else
            while (read(r[0], &c, 1) > 0) {
            } /* busy: no call until released */
        hb_stop(h);
        (void)!write(p[1], "S", 1);
        while (read(r[0], &c, 1) > 0) {
        } /* released (also when the test's process is gone) */
        rdzv_free(z);
        _exit(0);
    }
    const double limit = timeout - (period > 0 ? period : timeout / 5);
    double last = mono_seconds();
    for (;;) {
        double now = mono_seconds(); /* before the call: a freeze after it shows next time */
        int ok = hb_ok(h);
        if (now - last > limit && !atomic_load(&woke_reported)) {
            /* woken from a freeze: what did this first call say? */
            char b[2] = {'Z', (char)('0' + ok)};
            (void)!write(p[1], b, 2);
            atomic_store(&woke_reported, 1);
        }
        last = now;
        msleep(1);
    }
}

/* Reads one tagged message from fd within timeout_s: 'R', 'S', 'Z' (then
 * *ok) or 'V' (then *v). Returns the tag, or 0 when fd closed or nothing
 * came. */
static char read_msg(int fd, double timeout_s, hb_verdict *v, int *ok)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, (int)(timeout_s * 1000)) <= 0) return 0;
    char tag;
    if (read(fd, &tag, 1) != 1) return 0;
    if (tag == 'V') {
        char b[sizeof *v];
        size_t got = 0;
        while (got < sizeof b) {
            ssize_t n = read(fd, b + got, sizeof b - got);
            if (n <= 0) return 0;
            got += (size_t)n;
        }
        memcpy(v, b, sizeof b);
    } else if (tag == 'Z') {
        char c;
        if (read(fd, &c, 1) != 1) return 0;
        *ok = c - '0';
    }
    return tag;
}

/* This process as rank `rank` of world (with the others already forked):
 * its store, and its heartbeat (ho: timeout, period, clock) keeping
 * verdicts (no handler). */
static hb *join_here(const char *ep, int rank, int world, hb_options ho, rdzv **z)
{
    rdzv_options o = {.endpoint = ep, .rank = rank, .world_size = world, .timeout_s = 30};
    char err[512];
    cr_assert_eq(rdzv_new(z, &o, NULL, err, sizeof err), 0, "%s", err);
    hb *h = NULL;
    ho.store = *z;
    ho.connect_timeout_s = 30;
    cr_assert_eq(hb_start(&h, &ho, NULL, err, sizeof err), 0, "%s", err);
    return h;
}

static void endpoint(char *ep, size_t n) { snprintf(ep, n, "127.0.0.1:%d", free_port()); }

static void reap(pid_t p)
{
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
}

/* Two ranks of generation 0: `here` in this process (heartbeat options
 * mine), the other forked (its pid p, its pipe rd, its release rel) in
 * `mode` for `secs` with timeout and period theirs; started once its
 * heartbeat runs. */
typedef struct {
    pid_t p;
    int rd, rel;
    rdzv *z;
    hb *h;
} two_ranks;

static void two_ranks_start(two_ranks *g, int here, int mode, double secs, hb_options mine,
                            double their_timeout, double their_period)
{
    char ep[64];
    endpoint(ep, sizeof ep);
    g->p = fork_rank(ep, 1 - here, 2, 0, mode, secs, their_timeout, their_period, &g->rd,
                     &g->rel);
    g->h = join_here(ep, here, 2, mine, &g->z);
    hb_verdict none;
    cr_assert_eq(read_msg(g->rd, 30, &none, NULL), 'R', "rank %d's heartbeat never started",
                 1 - here);
}

/* Stops this rank; the forked one is reaped (or was waited for) by the test. */
static void two_ranks_end(two_ranks *g)
{
    close(g->rd);
    if (g->rel >= 0) close(g->rel);
    hb_stop(g->h);
    rdzv_free(g->z);
}

/* The real-time tests' heartbeat here: timeout t, period p (0: default). */
static hb_options real_hb(double t, double p)
{
    return (hb_options){.timeout_s = t, .period_s = p};
}

/* rank 0 here, rank 1 forked, both with timeout t; sig ends or freezes
 * rank 1 once it runs */
static void lose_rank_1(int sig, double t, hb_verdict *v, double *after)
{
    two_ranks g;
    double p = t == T_LONG ? P_LONG : 0;
    two_ranks_start(&g, 0, RUN, 0, real_hb(t, p), t, p);
    msleep(2000); /* heartbeats flow (no verdict may come: a stall that long is no freeze) */
    cr_assert(hb_ok(g.h), "no verdict while both run");
    cr_assert_eq(hb_verdict_get(g.h, NULL), 0);
    double t0 = mono_seconds();
    kill(g.p, sig);
    cr_assert_eq(hb_await(g.h, 60, v), 1, "no verdict within 60 s");
    *after = mono_seconds() - t0;
    cr_assert_eq(hb_ok(g.h), 0, "a verdict: no more writes");
    reap(g.p);
    two_ranks_end(&g);
}

Test(heartbeat, a_killed_rank_is_lost_with_evidence_closed)
{
    hb_verdict v;
    double after;
    lose_rank_1(SIGKILL, T_LONG, &v, &after); /* long before the timeout: by the closed socket */
    cr_log_info("SIGKILL of rank 1: rank 0 noticed it after %.3f s", after);
    cr_assert_eq(v.kind, HB_LOST);
    cr_assert_eq(v.rank, 1);
    cr_assert_eq(v.evidence, HB_EVIDENCE_CLOSED, "evidence %s", hb_evidence_name(v.evidence));
    cr_assert_eq(v.noticed_by, 0);
    cr_assert_str_eq(hb_evidence_name(v.evidence), "closed");
}

Test(heartbeat, a_frozen_rank_is_lost_with_evidence_heartbeat_after_the_timeout)
{
    hb_verdict v;
    double after;
    lose_rank_1(SIGSTOP, T_SHORT, &v, &after);
    cr_log_info("SIGSTOP of rank 1: rank 0 noticed it after %.3f s (timeout %.1f s)", after,
                T_SHORT);
    cr_assert_eq(v.kind, HB_LOST);
    cr_assert_eq(v.rank, 1);
    cr_assert_eq(v.evidence, HB_EVIDENCE_HEARTBEAT, "evidence %s",
                 hb_evidence_name(v.evidence));
    cr_assert(v.silent_s > T_SHORT, "silent %.2f s: a loss by heartbeat needs the whole timeout",
              v.silent_s);
    cr_assert_str_eq(hb_evidence_name(v.evidence), "heartbeat");
}

/* rank 1 here, rank 0 forked, both with timeout t: its loss, by sig */
static void lose_rank_0(int sig, double t, hb_verdict *v)
{
    two_ranks g;
    double p = t == T_LONG ? P_LONG : 0;
    two_ranks_start(&g, 1, RUN, 0, real_hb(t, p), t, p);
    msleep(2000);
    cr_assert(hb_ok(g.h), "rank 0 answers");
    kill(g.p, sig);
    cr_assert_eq(hb_await(g.h, 60, v), 1, "no verdict within 60 s");
    cr_assert_eq(hb_ok(g.h), 0);
    reap(g.p);
    two_ranks_end(&g);
}

Test(heartbeat, rank_0_killed_is_lost_to_the_others_with_evidence_closed)
{
    hb_verdict v;
    lose_rank_0(SIGKILL, T_LONG, &v);
    cr_assert_eq(v.kind, HB_LOST);
    cr_assert_eq(v.rank, 0);
    cr_assert_eq(v.evidence, HB_EVIDENCE_CLOSED);
    cr_assert_eq(v.noticed_by, 1, "rank 1 noticed it itself");
}

Test(heartbeat, rank_0_frozen_is_lost_to_the_others_with_evidence_heartbeat)
{
    hb_verdict v;
    lose_rank_0(SIGSTOP, T_SHORT, &v);
    cr_assert_eq(v.kind, HB_LOST);
    cr_assert_eq(v.rank, 0);
    cr_assert_eq(v.evidence, HB_EVIDENCE_HEARTBEAT);
    cr_assert(v.silent_s > T_SHORT, "silent %.2f s", v.silent_s);
    cr_assert_eq(v.noticed_by, 1);
}

Test(heartbeat, rank_0_tells_every_rank_which_peer_it_lost)
{
    /* the loss is rank 2's closed connection: T_LONG, never reached */
    char ep[64];
    endpoint(ep, sizeof ep);
    int rd0, rd2, rel0, rel2;
    pid_t p0 = fork_rank(ep, 0, 3, 0, RUN, 0, T_LONG, P_LONG, &rd0, &rel0);
    pid_t p2 = fork_rank(ep, 2, 3, 0, RUN, 0, T_LONG, P_LONG, &rd2, &rel2);
    rdzv *z;
    hb *h = join_here(ep, 1, 3, real_hb(T_LONG, P_LONG), &z);
    hb_verdict v, rank0;
    cr_assert_eq(read_msg(rd0, 30, &v, NULL), 'R');
    cr_assert_eq(read_msg(rd2, 30, &v, NULL), 'R');
    msleep(2000); /* heartbeats flow */
    kill(p2, SIGKILL);
    cr_assert_eq(hb_await(h, 60, &v), 1, "no verdict within 60 s");
    cr_assert_eq(read_msg(rd0, 60, &rank0, NULL), 'V', "rank 0's verdict");
    cr_assert_eq(rank0.kind, HB_LOST);
    cr_assert_eq(rank0.rank, 2);
    cr_assert_eq(rank0.noticed_by, 0);
    cr_assert_eq(v.kind, HB_LOST);
    cr_assert_eq(v.rank, 2, "rank 1 names rank 2 (not rank 0, which ended after it): %d",
                 v.rank);
    cr_assert_eq(v.evidence, HB_EVIDENCE_CLOSED);
    cr_assert_eq(v.noticed_by, 0, "rank 0 noticed it and told rank 1");
    reap(p0);
    reap(p2);
    close(rd0);
    close(rd2);
    close(rel0);
    close(rel2);
    hb_stop(h);
    rdzv_free(z);
}

Test(heartbeat, a_rank_woken_from_a_freeze_is_stale_and_its_first_hb_ok_says_no)
{
    two_ranks g;
    two_ranks_start(&g, 0, RUN, 0, real_hb(T_SHORT, 0), T_SHORT, 0);
    hb_verdict v;
    msleep(2000);
    kill(g.p, SIGSTOP);
    cr_assert_eq(hb_await(g.h, 60, &v), 1, "rank 0 never declared rank 1 lost");
    cr_assert_eq(v.rank, 1);
    msleep(1000); /* the gang "moves on" */
    kill(g.p, SIGCONT);
    int ok = -1, got_z = 0, got_v = 0;
    hb_verdict stale;
    for (int i = 0; i < 2; i++) {
        char tag = read_msg(g.rd, 60, &stale, &ok);
        got_z |= tag == 'Z';
        got_v |= tag == 'V';
    }
    cr_assert(got_z, "the woken rank's main loop never reported");
    cr_assert_eq(ok, 0, "the first hb_ok after waking said 1: a checkpoint could be written");
    cr_assert(got_v, "the woken rank reached no verdict");
    cr_assert_eq(stale.kind, HB_STALE, "kind %d rank %d evidence %s", stale.kind, stale.rank,
                 hb_evidence_name(stale.evidence));
    cr_assert_eq(stale.rank, 1);
    cr_assert_eq(stale.told, 0, "it knew itself stale before reading rank 0's word");
    cr_assert(stale.silent_s > T_SHORT, "unanswered for %.2f s", stale.silent_s);
    int s;
    cr_assert_eq(waitpid(g.p, &s, 0), g.p);
    cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 7, "its handler ended it");
    two_ranks_end(&g);
}

/* Moves c from `from` to `to` in steps of at most `step` (below the
 * judge's freeze limit, TV - PV), each judged by h's thread (two reads);
 * stops early at a verdict of h. */
static void clock_advance(test_clock *c, hb *h, double from, double to, double step)
{
    for (double t = from; t < to && !hb_verdict_get(h, NULL);) {
        t = t + step < to ? t + step : to;
        clock_set(c, t, 0);
        clock_wait_reads(c, 2);
    }
}

/* The judge here (rank `here`) on a clock the test moves, from t0 (timeout
 * TV, period PV); the other rank forked in `mode` (real time, T_LONG: its
 * own heartbeat judges nothing here). */
static void two_ranks_on_clock(two_ranks *g, test_clock *c, double t0, int here, int mode,
                               double secs)
{
    clock_init(c, t0);
    hb_options mine = {.timeout_s = TV, .period_s = PV, .clock = clock_read, .clock_ctx = c};
    two_ranks_start(g, here, mode, secs, mine, T_LONG, 0.1);
}

/* Releases the forked rank and waits for it: exit 0, no verdict of its own. */
static void release_and_wait(two_ranks *g, const char *who)
{
    close(g->rel);
    g->rel = -1;
    int s;
    cr_assert_eq(waitpid(g->p, &s, 0), g->p);
    cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0, "%s exited %d", who, WEXITSTATUS(s));
}

Test(heartbeat, a_rank_that_stops_cleanly_is_no_verdict)
{
    /* rank 1 says goodbye after 1 s and stays, silent; rank 0's clock then
     * goes twice its timeout past it: no verdict */
    const double t0 = 1000;
    test_clock c;
    two_ranks g;
    two_ranks_on_clock(&g, &c, t0, 0, STOP_AFTER, 1);
    hb_verdict v;
    cr_assert_eq(read_msg(g.rd, 60, &v, NULL), 'S', "rank 1 never stopped its heartbeat");
    cr_assert_eq(hb_await(g.h, 60, &v), 0, "verdict: rank %d %s", v.rank,
                 hb_evidence_name(v.evidence)); /* returns at the goodbye */
    clock_advance(&c, g.h, t0, t0 + 2 * TV + PV, 8);
    cr_assert_eq(hb_verdict_get(g.h, &v), 0, "verdict: rank %d %s", v.rank,
                 hb_evidence_name(v.evidence));
    cr_assert(hb_ok(g.h));
    release_and_wait(&g, "rank 1");
    two_ranks_end(&g);
}

Test(heartbeat, a_rank_whose_main_thread_is_busy_past_the_timeout_still_heartbeats)
{
    /* rank 1's main thread makes no call while rank 0's clock goes twice
     * its timeout on, a second at a time: its heartbeat thread's pings
     * (every 0.1 s) keep rank 0 content. (A rank silent for 20 of those
     * steps would be lost: each step waits for two reads, which without
     * pings take PV / 2 s each.) */
    const double t0 = 1000;
    test_clock c;
    two_ranks g;
    two_ranks_on_clock(&g, &c, t0, 0, BUSY, 0);
    clock_advance(&c, g.h, t0, t0 + 2 * TV + PV, 1);
    hb_verdict v;
    cr_assert_eq(hb_verdict_get(g.h, &v), 0, "verdict: rank %d %s", v.rank,
                 hb_evidence_name(v.evidence));
    cr_assert(hb_ok(g.h));
    release_and_wait(&g, "rank 1"); /* it stops its heartbeat now, without a verdict */
    hb_verdict none;
    cr_assert_eq(read_msg(g.rd, 1, &none, NULL), 'S', "rank 1 did not stop cleanly");
    two_ranks_end(&g);
}

Test(heartbeat, rank_0_ending_cleanly_ends_the_others_heartbeat_without_a_verdict)
{
    /* rank 1 here on a clock the test moves; rank 0 ends its heartbeat
     * after 1 s, then its process ends; rank 1's clock then goes far past
     * its timeout: no verdict, and hb_ok still says yes (had the heartbeat
     * not ended, its thread would be 3 timeouts behind) */
    const double t0 = 1000;
    test_clock c;
    two_ranks g;
    two_ranks_on_clock(&g, &c, t0, 1, STOP_AFTER, 1);
    hb_verdict v;
    cr_assert_eq(read_msg(g.rd, 60, &v, NULL), 'S', "rank 0 never stopped its heartbeat");
    cr_assert_eq(hb_await(g.h, 60, &v), 0, "verdict: rank %d %s", v.rank,
                 hb_evidence_name(v.evidence)); /* returns at rank 0's end */
    release_and_wait(&g, "rank 0"); /* rank 0's process is gone now too */
    clock_set(&c, t0 + 3 * TV, 0);
    cr_assert_eq(hb_verdict_get(g.h, &v), 0, "verdict: rank %d %s", v.rank,
                 hb_evidence_name(v.evidence));
    cr_assert(hb_ok(g.h), "rank 0 ended the heartbeats: nothing to fence");
    two_ranks_end(&g);
}

Test(heartbeat, a_heartbeat_of_an_older_generation_is_refused)
{
    char ep[64];
    endpoint(ep, sizeof ep);
    int rd, rel;
    pid_t p = fork_rank(ep, 0, 2, 4, RUN, 0, T_LONG, P_LONG, &rd, &rel);
    rdzv_options o = {.endpoint = ep, .rank = 1, .world_size = 2, .generation = 4,
                      .timeout_s = 30};
    rdzv *z;
    char err[512] = "";
    cr_assert_eq(rdzv_new(&z, &o, NULL, err, sizeof err), 0, "%s", err);
    hb_verdict v;
    cr_assert_eq(read_msg(rd, 30, &v, NULL), 'R');
    hb *h = NULL;
    rdzv_error k = RDZV_OK;
    /* the refusal is rank 0's answer: 30 s to get it from a loaded machine */
    hb_options ho = {.store = z, .generation = 3, .timeout_s = T_LONG, .connect_timeout_s = 30};
    cr_assert_neq(hb_start(&h, &ho, &k, err, sizeof err), 0);
    cr_assert_eq(k, RDZV_STALE, "%d: %s", k, err);
    cr_assert(strstr(err, "generation 4; this process is of generation 3"), "%s", err);
    reap(p);
    close(rd);
    close(rel);
    rdzv_free(z);
}

Test(heartbeat, evidence_names_are_those_of_status_lostPeer)
{
    cr_assert_str_eq(hb_evidence_name(HB_EVIDENCE_CLOSED), "closed");
    cr_assert_str_eq(hb_evidence_name(HB_EVIDENCE_HEARTBEAT), "heartbeat");
    cr_assert_str_eq(hb_evidence_name(HB_EVIDENCE_NONE), "");
    cr_assert_eq(hb_ok(NULL), 1, "one process: always");
}

/* ------------------------------------------------ two ranks in this process */

typedef struct {
    const char *ep;
    hb_options ho;
    rdzv *z;
    hb *h;
    int rc;
} rank_start;

/* rank 1 of 2, on a thread of this process (rdzv_new waits for rank 0) */
static void *start_rank_1(void *arg)
{
    rank_start *r = arg;
    rdzv_options o = {.endpoint = r->ep, .rank = 1, .world_size = 2, .timeout_s = 30};
    char err[512];
    r->rc = rdzv_new(&r->z, &o, NULL, err, sizeof err);
    r->ho.store = r->z;
    if (r->rc == 0 && r->ho.timeout_s > 0) r->rc = hb_start(&r->h, &r->ho, NULL, err, sizeof err);
    return NULL;
}

/* Rank 0 here with ho0, rank 1 on a thread with ho1 (both started). */
static void two_here(rank_start *r1, rdzv **z0, hb **h0, hb_options ho0, hb_options ho1,
                     char *ep, size_t n)
{
    endpoint(ep, n);
    *r1 = (rank_start){.ep = ep, .ho = ho1};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, start_rank_1, r1), 0);
    rdzv_options o = {.endpoint = ep, .rank = 0, .world_size = 2, .timeout_s = 30};
    char err[512];
    cr_assert_eq(rdzv_new(z0, &o, NULL, err, sizeof err), 0, "%s", err);
    ho0.store = *z0;
    cr_assert_eq(hb_start(h0, &ho0, NULL, err, sizeof err), 0, "%s", err);
    pthread_join(t, NULL);
    cr_assert_eq(r1->rc, 0, "rank 1 did not start");
}

Test(heartbeat, a_silent_peer_is_lost_after_the_timeout_and_before_the_timeout_plus_one_period)
{
    /* The test is rank 1's heartbeat: it connects, pings once at 1000 and
     * reads rank 0's answer (so rank 0 has heard it at 1000), then is
     * silent; rank 0's clock moves by a period at a time (no step looks
     * like a freeze of rank 0 itself). */
    const double timeout = 1.0, period = 0.2, t0 = 1000;
    test_clock c0;
    clock_init(&c0, t0);
    hb_options ho0 = {.timeout_s = timeout, .period_s = period, .connect_timeout_s = 30,
                      .clock = clock_read, .clock_ctx = &c0};
    rank_start r1;
    rdzv *z0;
    hb *h0;
    char ep[64];
    two_here(&r1, &z0, &h0, ho0, (hb_options){0}, ep, sizeof ep);
    unsigned char hello[21], ping[13], pong[13];
    memcpy(hello, "vjhb1", 5); /* heartbeat.c's handoff: magic, rank, world, generation */
    wire_put_u32(hello + 5, 1);
    wire_put_u32(hello + 9, 2);
    wire_put_u64(hello + 13, 0);
    int fd = -1;
    char err[512];
    cr_assert_eq(rdzv_handoff_connect(r1.z, hello, sizeof hello, 30, &fd, NULL, err, sizeof err),
                 0, "%s", err);
    wire_put_u32(ping, 9); /* PING, seq 1 */
    ping[4] = 1;
    wire_put_u64(ping + 5, 1);
    cr_assert_eq(write(fd, ping, sizeof ping), (ssize_t)sizeof ping);
    size_t got = 0;
    while (got < sizeof pong) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        cr_assert_gt(poll(&pf, 1, 30000), 0, "no answer to the ping");
        ssize_t n = read(fd, pong + got, sizeof pong - got);
        cr_assert_gt(n, 0);
        got += (size_t)n;
    }
    cr_assert_eq(pong[4], 1, "a PONG");
    for (int i = 1; i <= 5; i++) { /* up to exactly the timeout: not yet */
        clock_set(&c0, t0 + i * period, 0);
        clock_wait_reads(&c0, 2);
        cr_assert_eq(hb_verdict_get(h0, NULL), 0, "a verdict after %.1f s of silence (timeout %.1f s)",
                     i * period, timeout);
    }
    clock_set(&c0, t0 + timeout + period * 0.95, 0); /* within one period past it */
    clock_wait_reads(&c0, 2);
    hb_verdict v;
    cr_assert_eq(hb_verdict_get(h0, &v), 1, "no verdict %.2f s into the silence (timeout %.1f s, "
                 "period %.1f s)", timeout + period * 0.95, timeout, period);
    cr_assert_eq(v.kind, HB_LOST);
    cr_assert_eq(v.rank, 1);
    cr_assert_eq(v.evidence, HB_EVIDENCE_HEARTBEAT);
    close(fd);
    hb_stop(h0);
    rdzv_free(r1.z);
    rdzv_free(z0);
}

Test(heartbeat, a_rank_woken_from_a_freeze_with_a_recent_answer_is_stale_before_its_thread_runs)
{
    /* rank 1's clock: rank 0 answered at 1000 (its start, then its pong);
     * the process "freezes" and wakes at 1000 + 0.9: past the freeze limit
     * (timeout - period = 0.8) while that answer is still within the timeout
     * (1.0). Its heartbeat thread is held at its clock, so it has not run
     * since: hb_ok must say no from the freeze alone. */
    const double timeout = 1.0, period = 0.2, t0 = 1000;
    test_clock c1;
    clock_init(&c1, t0);
    hb_options ho0 = {.timeout_s = 60, .connect_timeout_s = 30};
    hb_options ho1 = {.timeout_s = timeout, .period_s = period, .connect_timeout_s = 30,
                      .clock = clock_read, .clock_ctx = &c1};
    rank_start r1;
    rdzv *z0;
    hb *h0;
    char ep[64];
    two_here(&r1, &z0, &h0, ho0, ho1, ep, sizeof ep);
    clock_wait_reads(&c1, 2);
    cr_assert_eq(hb_ok(r1.h), 1, "running, answered at once: may write");
    clock_set(&c1, t0 + 0.9, 1); /* wakes; its thread waits at its next read */
    cr_assert_eq(hb_ok(r1.h), 0, "woken after 0.9 s with an answer 0.9 s old (timeout 1 s, "
                 "freeze limit 0.8 s): may not write");
    clock_set(&c1, t0 + 0.9, 0);
    hb_verdict v;
    cr_assert_eq(hb_await(r1.h, 30, &v), 1);
    cr_assert_eq(v.kind, HB_STALE, "its thread, once it runs, calls it stale too");
    hb_stop(r1.h);
    hb_stop(h0);
    rdzv_free(r1.z);
    rdzv_free(z0);
}
