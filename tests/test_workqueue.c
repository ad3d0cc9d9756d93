/* tests/test_workqueue.c - operator/workqueue.c: de-duplication, the dirty-
 * while-processing rule, delayed adds, per-key exponential backoff, shutdown,
 * and a multi-threaded stress test of "every add is seen by a later reconcile,
 * never two workers on one key". */
#include "workqueue.h"

#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- helpers */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Gets a key (waiting up to `timeout`), checks it is `want`, marks it done. */
static void expect_get(wq *q, const char *want, double timeout)
{
    char *key = NULL;
    int rc = wq_get(q, &key, timeout);
    cr_assert_eq(rc, WQ_OK, "wq_get for \"%s\": rc=%d", want, rc);
    cr_assert_str_eq(key, want);
    wq_done(q, key);
    free(key);
}

static void expect_empty(wq *q)
{
    char *key = NULL;
    int rc = wq_get(q, &key, 0);
    cr_assert_eq(rc, WQ_TIMEOUT, "expected nothing ready, got rc=%d key=%s", rc,
                 rc == WQ_OK ? key : "-");
}

/* Nothing may be ready before `due` seconds after t0 (taken before the
 * delayed adds): a key handed out by a get that returned earlier came out
 * early. A get that returns later proves nothing, whatever it returns: on a
 * slow machine this check can only miss a bug, never fail a correct queue. */
static void expect_empty_before(wq *q, double t0, double due)
{
    char *key = NULL;
    int rc = wq_get(q, &key, 0);
    double at = now_s() - t0;
    if (rc == WQ_OK) {
        cr_assert_geq(at, due, "%s came out at %.3fs, due at %.3fs", key, at, due);
        wq_add(q, key); /* back, for the caller's gets */
        wq_done(q, key);
        free(key);
    }
}

/* Upper bounds on waits: far below the delay a bug would show (3600 s, a
 * getter that never wakes), far above any pause of a loaded machine. */
#define LATE_S 30.0

/* ---------------------------------------------------------------- de-duplication */

Test(workqueue, adding_a_queued_key_again_does_not_queue_it_twice)
{
    wq *q = wq_new();
    cr_assert_not_null(q);
    cr_assert_eq(wq_add(q, "ns/a"), WQ_OK);
    cr_assert_eq(wq_add(q, "ns/a"), WQ_OK);
    cr_assert_eq(wq_add(q, "ns/b"), WQ_OK);
    cr_assert_eq(wq_add(q, "ns/a"), WQ_OK);
    cr_assert_eq(wq_len(q), 2);
    expect_get(q, "ns/a", 0);
    expect_get(q, "ns/b", 0);
    expect_empty(q);
    cr_assert_eq(wq_len(q), 0);
    wq_free(q);
}

Test(workqueue, keys_come_out_in_the_order_first_added)
{
    wq *q = wq_new();
    const char *keys[] = {"x/3", "x/1", "x/2", "x/0"};
    for (int i = 0; i < 4; i++) wq_add(q, keys[i]);
    wq_add(q, "x/1"); /* de-duplicated: keeps its place */
    for (int i = 0; i < 4; i++) expect_get(q, keys[i], 0);
    wq_free(q);
}

Test(workqueue, key_added_while_processing_is_not_handed_out_until_done_then_once)
{
    wq *q = wq_new();
    wq_add(q, "ns/a");
    char *key = NULL;
    cr_assert_eq(wq_get(q, &key, 0), WQ_OK);
    cr_assert_str_eq(key, "ns/a");

    /* Added three times while a worker holds it: not ready, not counted. */
    wq_add(q, "ns/a");
    wq_add(q, "ns/a");
    wq_add(q, "ns/a");
    cr_assert_eq(wq_len(q), 0);
    expect_empty(q);

    wq_done(q, key);
    free(key);
    cr_assert_eq(wq_len(q), 1, "dirty key is re-queued exactly once after done");
    expect_get(q, "ns/a", 0);
    expect_empty(q);
    wq_free(q);
}

Test(workqueue, done_without_a_new_add_does_not_requeue)
{
    wq *q = wq_new();
    wq_add(q, "ns/a");
    expect_get(q, "ns/a", 0);
    cr_assert_eq(wq_len(q), 0);
    wq_done(q, "ns/a"); /* a second done, and done of unknown keys, are no-ops */
    wq_done(q, "ns/unknown");
    expect_empty(q);
    wq_free(q);
}

/* ---------------------------------------------------------------- delayed adds */

Test(workqueue, delayed_adds_come_out_in_due_order_and_not_before)
{
    wq *q = wq_new();
    double t0 = now_s();
    wq_add_after(q, "d/c", 0.15);
    wq_add_after(q, "d/a", 0.05);
    wq_add_after(q, "d/b", 0.10);
    cr_assert_eq(wq_len(q), 0);
    cr_assert_eq(wq_len_delayed(q), 3);
    expect_empty_before(q, t0, 0.05);

    const char *want[] = {"d/a", "d/b", "d/c"};
    const double due[] = {0.05, 0.10, 0.15};
    for (int i = 0; i < 3; i++) {
        char *key = NULL;
        cr_assert_eq(wq_get(q, &key, LATE_S), WQ_OK);
        double t = now_s() - t0;
        cr_assert_str_eq(key, want[i]);
        cr_assert_geq(t, due[i], "%s came out at %.3fs, due at %.3fs", key, t, due[i]);
        cr_assert_lt(t, due[i] + LATE_S, "%s came out late: %.3fs", key, t);
        wq_done(q, key);
        free(key);
    }
    cr_assert_eq(wq_len_delayed(q), 0);
    wq_free(q);
}

Test(workqueue, add_after_of_a_waiting_key_keeps_the_earlier_due_time)
{
    wq *q = wq_new();
    double t0 = now_s();
    wq_add_after(q, "d/k", 3600.0);
    wq_add_after(q, "d/k", 0.05);   /* earlier wins */
    wq_add_after(q, "d/k", 1800.0); /* later is ignored */
    cr_assert_eq(wq_len_delayed(q), 1);
    expect_get(q, "d/k", LATE_S);
    cr_assert_lt(now_s() - t0, LATE_S);
    cr_assert_eq(wq_len_delayed(q), 0, "one heap entry per key");
    expect_empty(q);
    wq_free(q);
}

Test(workqueue, add_after_zero_or_negative_is_an_immediate_add)
{
    wq *q = wq_new();
    wq_add_after(q, "d/zero", 0);
    wq_add_after(q, "d/neg", -1);
    cr_assert_eq(wq_len(q), 2);
    cr_assert_eq(wq_len_delayed(q), 0);
    wq_free(q);
}

struct getter {
    wq *q;
    double timeout;
    int rc;
    char *key;
    double at;
};

static void *getter_main(void *arg)
{
    struct getter *g = arg;
    g->rc = wq_get(g->q, &g->key, g->timeout);
    g->at = now_s();
    return NULL;
}

Test(workqueue, blocked_getter_wakes_when_an_earlier_delayed_key_is_added)
{
    wq *q = wq_new();
    wq_add_after(q, "d/late", 3600.0); /* the getter first sleeps until t+3600 s */
    struct getter g = {.q = q, .timeout = -1};
    pthread_t t;
    pthread_create(&t, NULL, getter_main, &g);
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    double t0 = now_s();
    wq_add_after(q, "d/soon", 0.05);
    pthread_join(t, NULL);
    cr_assert_eq(g.rc, WQ_OK);
    cr_assert_str_eq(g.key, "d/soon");
    cr_assert_geq(g.at - t0, 0.05);
    cr_assert_lt(g.at - t0, LATE_S);
    wq_done(q, g.key);
    free(g.key);
    wq_free(q); /* frees the still-delayed d/late */
}

Test(workqueue, blocked_getter_wakes_on_add)
{
    wq *q = wq_new();
    struct getter g = {.q = q, .timeout = 3600.0}; /* woken, or it waits an hour */
    pthread_t t;
    pthread_create(&t, NULL, getter_main, &g);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    double t0 = now_s();
    wq_add(q, "ns/a");
    pthread_join(t, NULL);
    cr_assert_eq(g.rc, WQ_OK);
    cr_assert_str_eq(g.key, "ns/a");
    cr_assert_lt(g.at - t0, LATE_S);
    free(g.key);
    wq_free(q);
}

Test(workqueue, get_returns_timeout_after_the_timeout_when_nothing_is_ready)
{
    wq *q = wq_new();
    double t0 = now_s();
    char *key = NULL;
    cr_assert_eq(wq_get(q, &key, 0.05), WQ_TIMEOUT);
    double t = now_s() - t0;
    cr_assert_geq(t, 0.05);
    cr_assert_lt(t, LATE_S);
    cr_assert_null(key, "key untouched on timeout");
    wq_free(q);
}

/* ---------------------------------------------------------------- rate limiting */

Test(workqueue, rate_limited_backoff_doubles_per_failure_and_forget_resets_it)
{
    wq *q = wq_new();
    const double want[] = {0.005, 0.010, 0.020, 0.040, 0.080};
    for (int i = 0; i < 5; i++) {
        double d = -1;
        cr_assert_eq(wq_add_rate_limited(q, "r/a", &d), WQ_OK);
        cr_assert_float_eq(d, want[i], 1e-12, "failure %d: delay %g, want %g", i, d, want[i]);
        cr_assert_eq(wq_num_requeues(q, "r/a"), i + 1);
    }
    /* Per key: another key starts at the base. */
    double d = -1;
    wq_add_rate_limited(q, "r/b", &d);
    cr_assert_float_eq(d, 0.005, 1e-12);

    wq_forget(q, "r/a");
    cr_assert_eq(wq_num_requeues(q, "r/a"), 0);
    wq_add_rate_limited(q, "r/a", &d);
    cr_assert_float_eq(d, 0.005, 1e-12, "after forget the backoff starts again at the base");
    cr_assert_eq(wq_num_requeues(q, "r/b"), 1, "forget touches only its key");
    wq_free(q);
}

Test(workqueue, backoff_is_capped_like_client_go_default)
{
    cr_assert_float_eq(wq_backoff_delay(WQ_BACKOFF_BASE_S, WQ_BACKOFF_CAP_S, 0), 0.005, 1e-15);
    cr_assert_float_eq(wq_backoff_delay(WQ_BACKOFF_BASE_S, WQ_BACKOFF_CAP_S, 10), 5.12, 1e-12);
    cr_assert_float_eq(wq_backoff_delay(WQ_BACKOFF_BASE_S, WQ_BACKOFF_CAP_S, 17), 655.36, 1e-9);
    cr_assert_float_eq(wq_backoff_delay(WQ_BACKOFF_BASE_S, WQ_BACKOFF_CAP_S, 18), 1000.0, 0);
    cr_assert_float_eq(wq_backoff_delay(WQ_BACKOFF_BASE_S, WQ_BACKOFF_CAP_S, 1 << 30), 1000.0, 0);

    wq *q = wq_new();
    cr_assert_eq(wq_set_backoff(q, 0.001, 0.004), WQ_OK);
    const double want[] = {0.001, 0.002, 0.004, 0.004, 0.004};
    for (int i = 0; i < 5; i++) {
        double d = -1;
        wq_add_rate_limited(q, "r/cap", &d);
        cr_assert_float_eq(d, want[i], 1e-12);
    }
    cr_assert_eq(wq_set_backoff(q, 0, 1), WQ_EINVAL);
    cr_assert_eq(wq_set_backoff(q, 2, 1), WQ_EINVAL);
    wq_free(q);
}

Test(workqueue, a_cap_equal_to_the_base_is_a_constant_backoff)
{
    wq *q = wq_new();
    cr_assert_eq(wq_set_backoff(q, 0.002, 0.002), WQ_OK, "cap == base is allowed");
    for (int i = 0; i < 4; i++) {
        double d = -1;
        cr_assert_eq(wq_add_rate_limited(q, "r/const", &d), WQ_OK);
        cr_assert_float_eq(d, 0.002, 1e-12, "failure %d", i);
    }
    wq_free(q);
}

Test(workqueue, rate_limited_key_is_handed_out_after_its_backoff_not_before)
{
    wq *q = wq_new();
    wq_set_backoff(q, 0.05, 10);
    double t0 = now_s();
    double d = 0;
    wq_add_rate_limited(q, "r/a", &d);
    expect_empty_before(q, t0, 0.05);
    expect_get(q, "r/a", LATE_S);
    cr_assert_geq(now_s() - t0, 0.05);
    /* The failure count survives the delivery until forget. */
    cr_assert_eq(wq_num_requeues(q, "r/a"), 1);
    wq_forget(q, "r/a");
    cr_assert_eq(wq_num_requeues(q, "r/a"), 0);
    wq_free(q);
}

/* ---------------------------------------------------------------- shutdown */

Test(workqueue, shutdown_wakes_every_blocked_getter_with_shutdown)
{
    wq *q = wq_new();
    struct getter g[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        g[i] = (struct getter){.q = q, .timeout = -1};
        pthread_create(&t[i], NULL, getter_main, &g[i]);
    }
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    double t0 = now_s();
    wq_shutdown(q);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(g[i].rc, WQ_SHUTDOWN);
        cr_assert_null(g[i].key);
        cr_assert_lt(g[i].at - t0, LATE_S);
    }
    cr_assert(wq_shutting_down(q));
    wq_free(q);
}

Test(workqueue, shutdown_hands_out_queued_keys_then_reports_shutdown_and_ignores_adds)
{
    wq *q = wq_new();
    wq_add(q, "s/a");
    wq_add(q, "s/b");
    wq_add(q, "s/p");
    char *held = NULL;
    cr_assert_eq(wq_get(q, &held, 0), WQ_OK); /* s/a in progress */
    wq_add(q, "s/a");                         /* dirty */
    wq_add_after(q, "s/delayed", 3600);       /* dropped by shutdown */
    wq_add_rate_limited(q, "s/limited", NULL);
    wq_shutdown(q);
    cr_assert_eq(wq_len_delayed(q), 0);
    cr_assert_eq(wq_add(q, "s/new"), WQ_OK);
    cr_assert_eq(wq_add_after(q, "s/new2", 0.01), WQ_OK);
    expect_get(q, "s/b", 0);
    expect_get(q, "s/p", 0);
    wq_done(q, held); /* the dirty key is still re-queued */
    free(held);
    expect_get(q, "s/a", 0);
    char *key = NULL;
    cr_assert_eq(wq_get(q, &key, 1.0), WQ_SHUTDOWN);
    cr_assert_eq(wq_get(q, &key, -1), WQ_SHUTDOWN, "never blocks after shutdown");
    wq_free(q);
}

Test(workqueue, free_releases_keys_in_every_state)
{
    wq *q = wq_new();
    for (int i = 0; i < 200; i++) { /* grows the hash table and the FIFO */
        char k[32];
        snprintf(k, sizeof k, "f/%d", i);
        wq_add(q, k);
    }
    char *held = NULL;
    wq_get(q, &held, 0);
    wq_add(q, held);
    free(held);
    wq_add_after(q, "f/delayed", 60);
    wq_add_rate_limited(q, "f/limited", NULL);
    wq_free(q); /* LeakSanitizer checks the rest */
    wq_free(NULL);
}

Test(workqueue, bad_arguments_are_rejected)
{
    wq *q = wq_new();
    cr_assert_eq(wq_add(q, NULL), WQ_EINVAL);
    cr_assert_eq(wq_add(q, ""), WQ_EINVAL);
    cr_assert_eq(wq_add(NULL, "a"), WQ_EINVAL);
    cr_assert_eq(wq_add_after(q, "", 1), WQ_EINVAL);
    cr_assert_eq(wq_add_rate_limited(q, NULL, NULL), WQ_EINVAL);
    cr_assert_eq(wq_get(q, NULL, 0), WQ_EINVAL);
    cr_assert_eq(wq_len(q), 0);
    wq_free(q);
}

/* ---------------------------------------------------------------- stress */

#define N_KEYS 64
#define N_PRODUCERS 4
#define N_CONSUMERS 2
#define ADDS_PER_PRODUCER 20000

/* A key's "state" is its version. Producers bump the version, then add the key
 * (an informer updates its cache, then enqueues). A consumer reads the version
 * after wq_get. If the queue ever dropped an add, the last version would never
 * be seen; if it handed a key to two workers, `busy` would catch it. */
struct stress {
    wq *q;
    atomic_int version[N_KEYS];
    atomic_int seen[N_KEYS];
    atomic_int busy[N_KEYS];
    atomic_int overlaps;
    atomic_long processed;
    atomic_int seed;
};

static int key_index(const char *key)
{
    return atoi(key + 2);
}

static void *producer_main(void *arg)
{
    struct stress *s = arg;
    unsigned r = (unsigned)atomic_fetch_add(&s->seed, 1) * 2654435761u + 1;
    for (int i = 0; i < ADDS_PER_PRODUCER; i++) {
        r = r * 1103515245u + 12345u;
        int k = (int)((r >> 8) % N_KEYS);
        char key[16];
        snprintf(key, sizeof key, "s/%d", k);
        atomic_fetch_add(&s->version[k], 1);
        wq_add(s->q, key);
    }
    return NULL;
}

static void *consumer_main(void *arg)
{
    struct stress *s = arg;
    for (;;) {
        char *key = NULL;
        int rc = wq_get(s->q, &key, -1);
        if (rc == WQ_SHUTDOWN) break;
        if (rc != WQ_OK) continue;
        int k = key_index(key);
        if (atomic_exchange(&s->busy[k], 1) != 0) atomic_fetch_add(&s->overlaps, 1);
        int v = atomic_load(&s->version[k]);
        int prev = atomic_load(&s->seen[k]);
        while (prev < v && !atomic_compare_exchange_weak(&s->seen[k], &prev, v)) {
        }
        if ((atomic_fetch_add(&s->processed, 1) & 63) == 0) sched_yield();
        atomic_store(&s->busy[k], 0);
        wq_done(s->q, key);
        free(key);
    }
    return NULL;
}

Test(workqueue, stress_every_add_is_seen_by_a_later_get_and_no_key_is_processed_twice_at_once,
     .timeout = 30)
{
    static struct stress s; /* zeroed; atomics start at 0 */
    memset(&s, 0, sizeof s);
    s.q = wq_new();
    pthread_t prod[N_PRODUCERS], cons[N_CONSUMERS];
    for (int i = 0; i < N_CONSUMERS; i++) pthread_create(&cons[i], NULL, consumer_main, &s);
    for (int i = 0; i < N_PRODUCERS; i++) pthread_create(&prod[i], NULL, producer_main, &s);
    for (int i = 0; i < N_PRODUCERS; i++) pthread_join(prod[i], NULL);
    /* Every add has returned; shutdown still hands out what is queued and
     * what wq_done re-queues, so consumers drain everything before exiting. */
    wq_shutdown(s.q);
    for (int i = 0; i < N_CONSUMERS; i++) pthread_join(cons[i], NULL);

    cr_assert_eq(atomic_load(&s.overlaps), 0, "a key was processed by two workers at once");
    int total = 0;
    for (int k = 0; k < N_KEYS; k++) {
        int v = atomic_load(&s.version[k]), seen = atomic_load(&s.seen[k]);
        total += v;
        cr_assert_eq(seen, v, "key %d: last add (version %d) never processed (saw %d)", k, v,
                     seen);
    }
    cr_assert_eq(total, N_PRODUCERS * ADDS_PER_PRODUCER);
    long processed = atomic_load(&s.processed);
    cr_assert_leq(processed, (long)total, "de-duplication: never more gets than adds");
    cr_assert_geq(processed, (long)N_KEYS);
    cr_assert_eq(wq_len(s.q), 0);
    wq_free(s.q);
}
