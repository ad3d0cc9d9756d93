/* operator/workqueue.c - see workqueue.h.
 *
 * Owns: one entry per key known to the queue (a chained hash table), the FIFO
 * of ready entries, and the min-heap of delayed entries, all under one mutex.
 * Must not: call anything outside libc/pthreads while holding the mutex, or
 * hand the same key to two workers at once.
 *
 * An entry's state is four independent facts; it is freed when all are clear:
 *   dirty       the key must be reconciled (again); it sits in the ready FIFO
 *               exactly when dirty && !processing
 *   processing  a worker holds the key (between wq_get and wq_done)
 *   heap_idx    >= 0 while the key waits in the delayed heap
 *   failures    the rate limiter's count for the key
 */
#include "workqueue.h"
#include "util.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct entry {
    char *key;
    uint64_t hash;
    struct entry *next; /* hash chain */
    int dirty;
    int processing;
    int failures;
    long heap_idx;      /* -1: not delayed */
    double due;         /* monotonic seconds, while delayed */
    uint64_t seq;       /* ties in `due` come out in insertion order */
};

struct wq {
    pthread_mutex_t mu;
    pthread_cond_t cond;

    struct entry **buckets;
    size_t n_buckets;   /* a power of two */
    size_t n_entries;

    struct entry **fifo; /* ring buffer of ready entries */
    size_t fifo_cap, fifo_head, fifo_len;

    struct entry **heap; /* delayed entries, min by (due, seq) */
    size_t heap_cap, heap_len;
    uint64_t seq;

    double backoff_base, backoff_cap;
    int shutting_down;
};

/* ---------------------------------------------------------------- time */

static struct timespec to_timespec(double t)
{
    struct timespec ts;
    if (t > 4e9) t = 4e9; /* "forever" enough, and no overflow */
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    if (ts.tv_nsec < 0) ts.tv_nsec = 0;
    return ts;
}

/* ---------------------------------------------------------------- entries */

static uint64_t hash_key(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static struct entry *find(wq *q, const char *key)
{
    uint64_t h = hash_key(key);
    for (struct entry *e = q->buckets[h & (q->n_buckets - 1)]; e; e = e->next)
        if (e->hash == h && strcmp(e->key, key) == 0) return e;
    return NULL;
}

static int grow_buckets(wq *q)
{
    size_t n = q->n_buckets * 2;
    struct entry **b = calloc(n, sizeof *b);
    if (!b) return -1;
    for (size_t i = 0; i < q->n_buckets; i++) {
        struct entry *e = q->buckets[i];
        while (e) {
            struct entry *next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(q->buckets);
    q->buckets = b;
    q->n_buckets = n;
    return 0;
}

static struct entry *find_or_create(wq *q, const char *key)
{
    struct entry *e = find(q, key);
    if (e) return e;
    if (q->n_entries >= q->n_buckets && grow_buckets(q) != 0) return NULL;
    e = calloc(1, sizeof *e);
    if (!e) return NULL;
    size_t len = strlen(key);
    e->key = malloc(len + 1);
    if (!e->key) {
        free(e);
        return NULL;
    }
    memcpy(e->key, key, len + 1);
    e->hash = hash_key(key);
    e->heap_idx = -1;
    size_t b = e->hash & (q->n_buckets - 1);
    e->next = q->buckets[b];
    q->buckets[b] = e;
    q->n_entries++;
    return e;
}

/* Frees `e` if nothing refers to it any more. */
static void maybe_release(wq *q, struct entry *e)
{
    if (e->dirty || e->processing || e->heap_idx >= 0 || e->failures > 0) return;
    struct entry **pp = &q->buckets[e->hash & (q->n_buckets - 1)];
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
    q->n_entries--;
    free(e->key);
    free(e);
}

/* ---------------------------------------------------------------- ready FIFO */

static int fifo_push(wq *q, struct entry *e)
{
    if (q->fifo_len == q->fifo_cap) {
        size_t cap = q->fifo_cap ? q->fifo_cap * 2 : 16;
        struct entry **f = malloc(cap * sizeof *f);
        if (!f) return -1;
        for (size_t i = 0; i < q->fifo_len; i++)
            f[i] = q->fifo[(q->fifo_head + i) % q->fifo_cap];
        free(q->fifo);
        q->fifo = f;
        q->fifo_cap = cap;
        q->fifo_head = 0;
    }
    q->fifo[(q->fifo_head + q->fifo_len) % q->fifo_cap] = e;
    q->fifo_len++;
    return 0;
}

static struct entry *fifo_pop(wq *q)
{
    struct entry *e = q->fifo[q->fifo_head];
    q->fifo_head = (q->fifo_head + 1) % q->fifo_cap;
    q->fifo_len--;
    return e;
}

/* ---------------------------------------------------------------- delayed heap */

static int heap_less(const struct entry *a, const struct entry *b)
{
    return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void heap_set(wq *q, size_t i, struct entry *e)
{
    q->heap[i] = e;
    e->heap_idx = (long)i;
}

static void heap_up(wq *q, size_t i)
{
    struct entry *e = q->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(e, q->heap[p])) break;
        heap_set(q, i, q->heap[p]);
        i = p;
    }
    heap_set(q, i, e);
}

static void heap_down(wq *q, size_t i)
{
    struct entry *e = q->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->heap_len) break;
        if (c + 1 < q->heap_len && heap_less(q->heap[c + 1], q->heap[c])) c++;
        if (!heap_less(q->heap[c], e)) break;
        heap_set(q, i, q->heap[c]);
        i = c;
    }
    heap_set(q, i, e);
}

static int heap_push(wq *q, struct entry *e)
{
    if (q->heap_len == q->heap_cap) {
        size_t cap = q->heap_cap ? q->heap_cap * 2 : 16;
        struct entry **h = realloc(q->heap, cap * sizeof *h);
        if (!h) return -1;
        q->heap = h;
        q->heap_cap = cap;
    }
    e->seq = q->seq++;
    q->heap[q->heap_len] = e;
    heap_up(q, q->heap_len++);
    return 0;
}

static struct entry *heap_pop(wq *q)
{
    struct entry *top = q->heap[0];
    top->heap_idx = -1;
    if (--q->heap_len > 0) {
        q->heap[0] = q->heap[q->heap_len];
        heap_down(q, 0);
    }
    return top;
}

/* ---------------------------------------------------------------- core, under mu */

/* Puts `e` in the heap for `due`, or moves it earlier if it waits for later. */
static int delay_locked(wq *q, struct entry *e, double due)
{
    if (e->heap_idx >= 0) {
        if (!(due < e->due)) return WQ_OK;
        e->due = due;
        heap_up(q, (size_t)e->heap_idx);
    } else {
        e->due = due;
        if (heap_push(q, e) != 0) return WQ_ENOMEM;
    }
    /* A getter may be sleeping until a later due time. */
    if (q->heap[0] == e) pthread_cond_broadcast(&q->cond);
    return WQ_OK;
}

/* client-go's Add. */
static int add_locked(wq *q, struct entry *e)
{
    if (e->dirty) return WQ_OK;
    if (!e->processing && fifo_push(q, e) != 0) return WQ_ENOMEM;
    e->dirty = 1;
    if (!e->processing) pthread_cond_signal(&q->cond);
    return WQ_OK;
}

/* Moves every due delayed entry to the ready FIFO. */
static void promote_due(wq *q, double now)
{
    while (q->heap_len > 0 && q->heap[0]->due <= now) {
        struct entry *e = heap_pop(q);
        if (add_locked(q, e) != WQ_OK) {
            /* Out of memory: leave it delayed a little longer rather than lose it. */
            if (delay_locked(q, e, now + 0.01) != WQ_OK) maybe_release(q, e);
            return;
        }
    }
}

static int add_after_locked(wq *q, const char *key, double seconds)
{
    if (q->shutting_down) return WQ_OK;
    struct entry *e = find_or_create(q, key);
    if (!e) return WQ_ENOMEM;
    int rc = WQ_OK;
    if (!(seconds > 0)) { /* NaN too */
        rc = add_locked(q, e);
    } else {
        rc = delay_locked(q, e, mono_seconds() + seconds);
    }
    maybe_release(q, e);
    return rc;
}

/* ---------------------------------------------------------------- public */

wq *wq_new(void)
{
    wq *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->n_buckets = 64;
    q->buckets = calloc(q->n_buckets, sizeof *q->buckets);
    if (!q->buckets) goto fail;
    q->backoff_base = WQ_BACKOFF_BASE_S;
    q->backoff_cap = WQ_BACKOFF_CAP_S;
    if (pthread_mutex_init(&q->mu, NULL) != 0) goto fail;
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) goto fail_mu;
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&q->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) goto fail_mu;
    return q;
fail_mu:
    pthread_mutex_destroy(&q->mu);
fail:
    free(q->buckets);
    free(q);
    return NULL;
}

void wq_free(wq *q)
{
    if (!q) return;
    for (size_t i = 0; i < q->n_buckets; i++) {
        struct entry *e = q->buckets[i];
        while (e) {
            struct entry *next = e->next;
            free(e->key);
            free(e);
            e = next;
        }
    }
    free(q->buckets);
    free(q->fifo);
    free(q->heap);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

int wq_set_backoff(wq *q, double base_s, double cap_s)
{
    if (!q || !(base_s > 0) || !(cap_s >= base_s)) return WQ_EINVAL;
    pthread_mutex_lock(&q->mu);
    q->backoff_base = base_s;
    q->backoff_cap = cap_s;
    pthread_mutex_unlock(&q->mu);
    return WQ_OK;
}

double wq_backoff_delay(double base_s, double cap_s, int failures)
{
    double d = base_s;
    for (int i = 0; i < failures && d < cap_s; i++) d *= 2;
    return d < cap_s ? d : cap_s;
}

int wq_add(wq *q, const char *key)
{
    return wq_add_after(q, key, 0);
}

int wq_add_after(wq *q, const char *key, double seconds)
{
    if (!q || !key || !*key) return WQ_EINVAL;
    pthread_mutex_lock(&q->mu);
    int rc = add_after_locked(q, key, seconds);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int wq_add_rate_limited(wq *q, const char *key, double *delay_s)
{
    if (!q || !key || !*key) return WQ_EINVAL;
    pthread_mutex_lock(&q->mu);
    int rc = WQ_OK;
    if (q->shutting_down) goto out;
    struct entry *e = find_or_create(q, key);
    if (!e) {
        rc = WQ_ENOMEM;
        goto out;
    }
    double d = wq_backoff_delay(q->backoff_base, q->backoff_cap, e->failures);
    if (e->failures < (1 << 20)) e->failures++;
    rc = add_after_locked(q, key, d);
    if (rc == WQ_OK && delay_s) *delay_s = d;
out:
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void wq_forget(wq *q, const char *key)
{
    if (!q || !key) return;
    pthread_mutex_lock(&q->mu);
    struct entry *e = find(q, key);
    if (e) {
        e->failures = 0;
        maybe_release(q, e);
    }
    pthread_mutex_unlock(&q->mu);
}

int wq_num_requeues(wq *q, const char *key)
{
    if (!q || !key) return 0;
    pthread_mutex_lock(&q->mu);
    struct entry *e = find(q, key);
    int n = e ? e->failures : 0;
    pthread_mutex_unlock(&q->mu);
    return n;
}

int wq_get(wq *q, char **key, double timeout_s)
{
    if (!q || !key) return WQ_EINVAL;
    double deadline = timeout_s < 0 ? -1 : mono_seconds() + timeout_s;
    int rc;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        double now = mono_seconds();
        promote_due(q, now);
        if (q->fifo_len > 0) {
            struct entry *e = q->fifo[q->fifo_head];
            size_t len = strlen(e->key);
            char *copy = malloc(len + 1);
            if (!copy) {
                rc = WQ_ENOMEM; /* the key stays queued */
                break;
            }
            memcpy(copy, e->key, len + 1);
            fifo_pop(q);
            e->processing = 1;
            e->dirty = 0;
            *key = copy;
            rc = WQ_OK;
            break;
        }
        if (q->shutting_down) {
            rc = WQ_SHUTDOWN;
            break;
        }
        if (deadline >= 0 && now >= deadline) {
            rc = WQ_TIMEOUT;
            break;
        }
        double wake = deadline;
        if (q->heap_len > 0 && (wake < 0 || q->heap[0]->due < wake)) wake = q->heap[0]->due;
        if (wake < 0) {
            pthread_cond_wait(&q->cond, &q->mu);
        } else {
            struct timespec ts = to_timespec(wake);
            int w = pthread_cond_timedwait(&q->cond, &q->mu, &ts);
            (void)w; /* ETIMEDOUT or a wake-up: the loop re-checks either way */
        }
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void wq_done(wq *q, const char *key)
{
    if (!q || !key) return;
    pthread_mutex_lock(&q->mu);
    struct entry *e = find(q, key);
    if (e && e->processing) {
        e->processing = 0;
        if (e->dirty) {
            if (fifo_push(q, e) == 0) {
                pthread_cond_signal(&q->cond);
            } else {
                /* Out of memory: retry through the heap, whose promotion marks
                 * it dirty again (lost only if the heap cannot grow either). */
                e->dirty = 0;
                delay_locked(q, e, mono_seconds() + 0.01);
            }
        }
        maybe_release(q, e);
    }
    pthread_mutex_unlock(&q->mu);
}

size_t wq_len(wq *q)
{
    if (!q) return 0;
    pthread_mutex_lock(&q->mu);
    promote_due(q, mono_seconds());
    size_t n = q->fifo_len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t wq_len_delayed(wq *q)
{
    if (!q) return 0;
    pthread_mutex_lock(&q->mu);
    promote_due(q, mono_seconds());
    size_t n = q->heap_len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void wq_shutdown(wq *q)
{
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->shutting_down = 1;
    while (q->heap_len > 0) {
        struct entry *e = heap_pop(q);
        maybe_release(q, e);
    }
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->mu);
}

int wq_shutting_down(wq *q)
{
    if (!q) return 1;
    pthread_mutex_lock(&q->mu);
    int s = q->shutting_down;
    pthread_mutex_unlock(&q->mu);
    return s;
}
