/* worker/data/source.c - see source.h. Files read in the caller's thread;
 * S3 objects fetched ahead by one thread per stream into a ring buffer.
 *
 * Owns: the URI schemes, the pool of lib/s3 clients (one attempt each: the
 * retries are this file's, so that a dropped range resumes where it broke),
 * the ring between a stream's fetch thread and its reader, and the messages
 * that name the URI.
 * Must not: parse what the bytes hold, retry what cannot pass, or let a
 * stream hold more than its ring.
 *
 * The ring: cap = max(ahead, chunk) bytes (less for a small object). The
 * fetcher starts a range only when it fits whole beside what the reader has
 * not yet taken, so that received bytes never wait for room (a GET that
 * stalls on a slow reader could be dropped by the server). Bytes are copied
 * outside the lock: the fetcher writes only at [fetched, ...) and the reader
 * reads only [consumed, fetched), which never overlap while
 * fetched - consumed + (the rest of the range) <= cap.
 */
#include "source.h"

#include "file.h"
#include "log.h"
#include "s3.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SRC_DEFAULT_CHUNK ((size_t)8 << 20)
#define SRC_ERRLEN 1024
#define SRC_BUCKET_MAX 64
#define SRC_KEY_MAX 1025

struct src_client {
    char *endpoint;  /* NULL = AWS */
    char *ca_bundle; /* $AWS_CA_BUNDLE at src_client_new, or NULL */
    size_t chunk, ahead;
    src_tuning t;    /* resolved: no zero fields */
    pthread_mutex_t mu;
    s3_client **idle; /* the pool: clients not in use */
    size_t nidle, cap;
};

typedef enum { KIND_FILE, KIND_S3 } src_kind;

struct src_stream {
    src_client *c;
    src_kind kind;
    char *uri;
    uint64_t size;
    char rerr[SRC_ERRLEN]; /* the reader's message (src_error) */
    /* file */
    int fd;
    uint64_t pos, advised;
    /* S3 */
    char bucket[SRC_BUCKET_MAX];
    char key[SRC_KEY_MAX];
    s3_client *s3;
    unsigned char *ring;
    size_t ring_cap;
    uint64_t start;    /* the offset opened at */
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    uint64_t fetched;  /* absolute offset of the next byte the fetcher receives */
    uint64_t consumed; /* absolute offset of the next byte the reader takes */
    int stop, failed;
    char ferr[SRC_ERRLEN]; /* the fetcher's message, once failed */
};

/* ------------------------------------------------------------ helpers */

static int is_s3(const char *uri) { return strncmp(uri, "s3://", 5) == 0; }

/* The path of a file URI or bare path (borrowed from uri), or NULL with err. */
static const char *file_path(const char *uri, char *err, size_t errlen)
{
    if (strncmp(uri, "file://", 7) == 0) {
        if (uri[7] != '/') {
            err_printf(err, errlen, "%s: a file:// URI takes an absolute path (file:///...)", uri);
            return NULL;
        }
        return uri + 7;
    }
    if (strstr(uri, "://")) {
        err_printf(err, errlen, "%s: not a data URI (s3://, file:// or a path)", uri);
        return NULL;
    }
    if (!*uri) {
        err_printf(err, errlen, "an empty data URI");
        return NULL;
    }
    return uri;
}

/* s3://bucket/key into its parts; the key must name an object. */
static int s3_object(const char *uri, char *bucket, char *key, char *err, size_t errlen)
{
    char why[512];
    if (s3_parse_uri(uri, bucket, SRC_BUCKET_MAX, key, SRC_KEY_MAX, why, sizeof why) != 0) {
        err_printf(err, errlen, "%s", why);
        return -1;
    }
    size_t n = strlen(key);
    if (n == 0 || key[n - 1] == '/') {
        err_printf(err, errlen, "%s: names no object (the key is empty or ends in '/')", uri);
        return -1;
    }
    return 0;
}

/* lib/s3's "; gave up after 1 attempt in 0.0 s": our clients make one
 * attempt each, and this file says how many it made. */
static void strip_attempts(char *msg)
{
    char *p = strstr(msg, "; gave up after 1 attempt in ");
    if (p) *p = '\0';
}

static double backoff(const src_client *c, int failures, uint64_t *seed)
{
    double cap = c->t.backoff_s * (double)(1u << (failures < 20 ? failures - 1 : 19));
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    return cap * ((double)(*seed >> 11) / 9007199254740992.0);
}

static uint64_t new_seed(const void *p)
{
    return (uint64_t)(mono_seconds() * 1e9) ^ (uint64_t)(uintptr_t)p ^ 0x9e3779b97f4a7c15ULL;
}

static void sleep_s(double s)
{
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* ------------------------------------------------------------ the client */

int src_client_new(src_client **out, const char *endpoint, size_t chunk_bytes, size_t ahead_bytes,
                   char *err, size_t errlen)
{
    *out = NULL;
    src_client *c = calloc(1, sizeof *c);
    if (!c) goto nomem;
    if (endpoint && *endpoint && !(c->endpoint = strdup(endpoint))) goto nomem;
    const char *ca = getenv("AWS_CA_BUNDLE");
    if (ca && *ca && !(c->ca_bundle = strdup(ca))) goto nomem;
    c->chunk = chunk_bytes ? chunk_bytes : SRC_DEFAULT_CHUNK;
    c->ahead = ahead_bytes ? ahead_bytes : 2 * c->chunk;
    if (c->ahead < c->chunk) c->ahead = c->chunk;
    src_client_tune(c, NULL);
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return 0;
nomem:
    if (c) {
        free(c->endpoint);
        free(c->ca_bundle);
        free(c);
    }
    err_printf(err, errlen, "data: out of memory");
    return -1;
}

void src_client_tune(src_client *c, const src_tuning *t)
{
    src_tuning z = {0};
    if (t) z = *t;
    c->t.attempts = z.attempts > 0 ? z.attempts : 5;
    c->t.backoff_s = z.backoff_s > 0 ? z.backoff_s : 0.5;
    c->t.timeout_s = z.timeout_s > 0 ? z.timeout_s : 30;
    c->t.list_page_size = z.list_page_size > 0 ? z.list_page_size : 1000;
}

void src_client_free(src_client *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->nidle; i++) s3_free(c->idle[i]);
    free(c->idle);
    pthread_mutex_destroy(&c->mu);
    free(c->endpoint);
    free(c->ca_bundle);
    free(c);
}

/* An S3 client from the pool, or a new one (credentials read now). */
static s3_client *pool_get(src_client *c, const char *uri, char *err, size_t errlen)
{
    pthread_mutex_lock(&c->mu);
    s3_client *s = c->nidle ? c->idle[--c->nidle] : NULL;
    pthread_mutex_unlock(&c->mu);
    if (s) return s;
    s3_options o = {.endpoint = c->endpoint, .ca_bundle = c->ca_bundle, .max_attempts = 1,
                    .timeout_s = c->t.timeout_s, .list_page_size = c->t.list_page_size};
    char why[512];
    if (s3_new(&o, &s, why, sizeof why) != S3_OK) {
        err_printf(err, errlen, "%s: %s", uri, why);
        return NULL;
    }
    return s;
}

static void pool_put(src_client *c, s3_client *s)
{
    if (!s) return;
    pthread_mutex_lock(&c->mu);
    if (c->nidle == c->cap) {
        size_t nc = c->cap ? 2 * c->cap : 8;
        s3_client **p = realloc(c->idle, nc * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&c->mu);
            s3_free(s);
            return;
        }
        c->idle = p;
        c->cap = nc;
    }
    c->idle[c->nidle++] = s;
    pthread_mutex_unlock(&c->mu);
}

/* Sleeps before the next try of a request that failed with st (the
 * failures-th failure in a row) and returns 1, or returns 0 when it must
 * not be tried again. */
static int retry_wait(const src_client *c, s3_status st, int failures, uint64_t *seed,
                      const char *uri, const char *op, const char *why)
{
    if (!s3_status_retryable(st) || failures >= c->t.attempts) return 0;
    double w = backoff(c, failures, seed);
    LOG_WARN("data", "event=s3_retry op=%s uri=%s attempt=%d retry_in=%.3fs err=%s", LOGV(op),
             LOGV(uri), failures, w, LOGV(why));
    sleep_s(w);
    return 1;
}

/* HEAD with retries: the object's size; a 404 told apart into no object
 * and no bucket with a one-byte GET (a HEAD's 404 has no body to say). */
static int s3_size(src_client *c, s3_client *s3, const char *uri, const char *bucket,
                   const char *key, uint64_t *size, char *err, size_t errlen)
{
    char why[SRC_ERRLEN];
    uint64_t seed = new_seed(size);
    s3_status st;
    for (int failures = 1;; failures++) {
        st = s3_head(s3, bucket, key, size, why, sizeof why);
        if (st == S3_OK) return 0;
        strip_attempts(why);
        if (!retry_wait(c, st, failures, &seed, uri, "HEAD", why)) {
            if (failures > 1)
                snprintf(why + strlen(why), sizeof why - strlen(why), "; gave up after %d attempts",
                         failures);
            break;
        }
    }
    if (st == S3_NOT_FOUND) {
        char b[1], w2[SRC_ERRLEN];
        size_t got;
        if (s3_get(s3, bucket, key, 0, 1, b, &got, w2, sizeof w2) == S3_NO_BUCKET) {
            err_printf(err, errlen, "%s: no such bucket %s", uri, bucket);
            return -1;
        }
        err_printf(err, errlen, "%s: no such object", uri);
        return -1;
    }
    if (st == S3_NO_BUCKET) {
        err_printf(err, errlen, "%s: no such bucket %s", uri, bucket);
        return -1;
    }
    err_printf(err, errlen, "%s: %s", uri, why);
    return -1;
}

/* ------------------------------------------------------------ files */

static int file_open_at(src_stream *s, const char *path, uint64_t offset, char *err,
                        size_t errlen)
{
    char why[SRC_ERRLEN];
    off_t size = 0;
    s->fd = file_open_regular(path, &size, why, sizeof why);
    if (s->fd < 0) {
        err_printf(err, errlen, "%s: %s", s->uri, file_reason(why, path));
        return -1;
    }
    s->size = (uint64_t)size;
    if (offset > s->size) {
        err_printf(err, errlen, "%s: offset %" PRIu64 " is past its end (%" PRIu64 " bytes)",
                   s->uri, offset, s->size);
        return -1;
    }
    s->pos = offset;
    /* the kernel's read-ahead: doubled for a sequential reader, and the
     * first window asked for now (advice only: failures do not matter) */
    (void)posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    uint64_t n = s->c->ahead < s->size - offset ? s->c->ahead : s->size - offset;
    if (n) (void)posix_fadvise(s->fd, (off_t)offset, (off_t)n, POSIX_FADV_WILLNEED);
    s->advised = offset + n;
    return 0;
}

static ssize_t file_read_some(src_stream *s, void *buf, size_t n)
{
    while (s->advised < s->size && s->pos + s->c->ahead > s->advised) {
        uint64_t k = s->c->chunk < s->size - s->advised ? s->c->chunk : s->size - s->advised;
        (void)posix_fadvise(s->fd, (off_t)s->advised, (off_t)k, POSIX_FADV_WILLNEED);
        s->advised += k;
    }
    for (;;) {
        ssize_t got = pread(s->fd, buf, n, (off_t)s->pos);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            snprintf(s->rerr, sizeof s->rerr, "%s: read at byte %" PRIu64 ": %s", s->uri, s->pos,
                     strerror(errno));
            return -1;
        }
        if (got == 0 && s->pos < s->size) {
            snprintf(s->rerr, sizeof s->rerr, "%s: ends at byte %" PRIu64 " of the %" PRIu64
                     " it had when opened (it shrank while read)", s->uri, s->pos, s->size);
            return -1;
        }
        s->pos += (uint64_t)got;
        return got;
    }
}

/* ------------------------------------------------------------ S3 streams */

/* one GET's state, for the sink */
typedef struct {
    src_stream *s;
    size_t want; /* bytes this request asked for */
    size_t got;  /* bytes of it taken into the ring */
    int too_many;
} attempt;

static int on_bytes(void *ctx, uint64_t pos, const void *data, size_t n)
{
    attempt *a = ctx;
    src_stream *s = a->s;
    const unsigned char *d = data;
    if (pos > a->got) return 1; /* a gap: cannot happen with one attempt per call */
    if (pos < a->got) {         /* a restart's repeat of bytes already taken: skip them */
        size_t dup = (size_t)(a->got - pos);
        if (dup >= n) return 0;
        d += dup;
        n -= dup;
    }
    if (n > a->want - a->got) {
        a->too_many = 1;
        return 1;
    }
    /* the room was made before the request started: no lock for the copy */
    size_t at = (size_t)(s->fetched % s->ring_cap); /* fetched is written by this thread only */
    size_t first = s->ring_cap - at < n ? s->ring_cap - at : n;
    memcpy(s->ring + at, d, first);
    memcpy(s->ring, d + first, n - first);
    pthread_mutex_lock(&s->mu);
    int stop = s->stop;
    s->fetched += n;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    a->got += n;
    return stop;
}

/* Waits up to secs unless the stream is stopped; returns 1 when stopped. */
static int wait_or_stop(src_stream *s, double secs)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + secs;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
    pthread_mutex_lock(&s->mu);
    while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT) {}
    int stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    return stop;
}

static void fetch_fail(src_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fetch_fail(src_stream *s, const char *fmt, ...)
{
    char m[SRC_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s->mu);
    snprintf(s->ferr, sizeof s->ferr, "%s", m);
    s->failed = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The bytes [off, off + len) into the ring, resuming after dropped
 * connections. Returns 0, 1 when stopped, or -1 (the stream failed). */
static int fetch_range(src_stream *s, uint64_t off, size_t len, uint64_t *seed)
{
    src_client *c = s->c;
    char why[SRC_ERRLEN];
    int failures = 0, total = 0;
    size_t done = 0; /* bytes of the range received */
    while (done < len) {
        attempt t = {.s = s, .want = len - done};
        uint64_t at = off + done;
        size_t got = 0;
        s3_status st = s3_get_stream(s->s3, s->bucket, s->key, at, t.want, on_bytes, &t, &got,
                                     why, sizeof why);
        done += t.got;
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) return 1;
        if (t.too_many) {
            fetch_fail(s, "%s: at byte %" PRIu64 ": more bytes than the %zu asked for (the "
                       "object changed while read, or the server ignored the Range)", s->uri, at,
                       t.want);
            return -1;
        }
        if (st == S3_OK) {
            if (t.got < t.want) {
                fetch_fail(s, "%s: at byte %" PRIu64 ": the object ends there, not at the %"
                           PRIu64 " bytes it had when opened (it changed while read)", s->uri,
                           at + t.got, s->size);
                return -1;
            }
            break;
        }
        strip_attempts(why);
        failures = t.got > 0 ? 1 : failures + 1; /* bytes came: a new count, after them */
        total++;
        if (total >= 4 * c->t.attempts || !s3_status_retryable(st) ||
            failures >= c->t.attempts) {
            if (s3_status_retryable(st))
                fetch_fail(s, "%s: at byte %" PRIu64 " of %" PRIu64 ": %s; gave up after %d "
                           "attempts (%d in a row without a byte)", s->uri, off + done, s->size,
                           why, total, failures);
            else
                fetch_fail(s, "%s: at byte %" PRIu64 " of %" PRIu64 ": %s", s->uri, off + done,
                           s->size, why);
            return -1;
        }
        double w = backoff(c, failures, seed);
        LOG_WARN("data", "event=s3_retry op=GET uri=%s offset=%" PRIu64 " received=%zu "
                 "attempt=%d retry_in=%.3fs err=%s", LOGV(s->uri), off + done, t.got, failures,
                 w, LOGV(why));
        if (wait_or_stop(s, w)) return 1;
    }
    return 0;
}

static void *fetcher(void *arg)
{
    src_stream *s = arg;
    uint64_t seed = new_seed(s);
    uint64_t f = s->start;
    while (f < s->size) {
        uint64_t left = s->size - f;
        size_t len = s->c->chunk < left ? s->c->chunk : (size_t)left;
        if (len > s->ring_cap) len = s->ring_cap;
        pthread_mutex_lock(&s->mu);
        while (!s->stop && (f - s->consumed) + len > s->ring_cap)
            pthread_cond_wait(&s->cv, &s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        if (fetch_range(s, f, len, &seed) != 0) break;
        f += len;
    }
    return NULL;
}

static int s3_open_at(src_stream *s, uint64_t offset, char *err, size_t errlen)
{
    src_client *c = s->c;
    if (s3_object(s->uri, s->bucket, s->key, err, errlen)) return -1;
    if (!(s->s3 = pool_get(c, s->uri, err, errlen))) return -1;
    if (s3_size(c, s->s3, s->uri, s->bucket, s->key, &s->size, err, errlen)) return -1;
    if (offset > s->size) {
        err_printf(err, errlen, "%s: offset %" PRIu64 " is past its end (%" PRIu64 " bytes)",
                   s->uri, offset, s->size);
        return -1;
    }
    s->start = s->fetched = s->consumed = offset;
    uint64_t left = s->size - offset;
    s->ring_cap = c->ahead;
    if (left < s->ring_cap) s->ring_cap = left ? (size_t)left : 1;
    if (!(s->ring = malloc(s->ring_cap))) {
        err_printf(err, errlen, "%s: out of memory for its %zu-byte read-ahead", s->uri,
                   s->ring_cap);
        return -1;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->th_started = 1; /* the mutex and condition exist: src_close destroys them */
    int rc = pthread_create(&s->th, NULL, fetcher, s);
    if (rc != 0) {
        s->th_started = 0;
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        err_printf(err, errlen, "%s: cannot start its fetch thread: %s", s->uri, strerror(rc));
        return -1;
    }
    return 0;
}

static ssize_t s3_read_some(src_stream *s, void *buf, size_t n)
{
    pthread_mutex_lock(&s->mu);
    while (s->consumed == s->fetched && !s->failed && s->fetched < s->size)
        pthread_cond_wait(&s->cv, &s->mu);
    uint64_t avail = s->fetched - s->consumed;
    if (avail == 0) {
        ssize_t rc = 0;
        if (s->fetched < s->size) {
            snprintf(s->rerr, sizeof s->rerr, "%s", s->ferr);
            rc = -1;
        }
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    pthread_mutex_unlock(&s->mu);
    size_t k = avail < n ? (size_t)avail : n;
    size_t at = (size_t)(s->consumed % s->ring_cap);
    size_t first = s->ring_cap - at < k ? s->ring_cap - at : k;
    memcpy(buf, s->ring + at, first);
    memcpy((unsigned char *)buf + first, s->ring, k - first);
    pthread_mutex_lock(&s->mu);
    s->consumed += k;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return (ssize_t)k;
}

/* ------------------------------------------------------------ streams */

int src_open(src_client *c, const char *uri, uint64_t offset, src_stream **out, char *err,
             size_t errlen)
{
    *out = NULL;
    src_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->uri = strdup(uri))) {
        free(s);
        err_printf(err, errlen, "%s: out of memory", uri);
        return -1;
    }
    s->c = c;
    s->fd = -1;
    int rc;
    if (is_s3(uri)) {
        s->kind = KIND_S3;
        rc = s3_open_at(s, offset, err, errlen);
    } else {
        s->kind = KIND_FILE;
        const char *path = file_path(uri, err, errlen);
        rc = path ? file_open_at(s, path, offset, err, errlen) : -1;
    }
    if (rc != 0) {
        src_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

ssize_t src_read(void *stream, void *buf, size_t n)
{
    src_stream *s = stream;
    if (n == 0) return 0;
    return s->kind == KIND_FILE ? file_read_some(s, buf, n) : s3_read_some(s, buf, n);
}

const char *src_error(const src_stream *s) { return s->rerr; }

uint64_t src_size(const src_stream *s) { return s->size; }

void src_close(src_stream *s)
{
    if (!s) return;
    if (s->th_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
    }
    pool_put(s->c, s->s3);
    if (s->fd >= 0) close(s->fd);
    free(s->ring);
    free(s->uri);
    free(s);
}

/* ------------------------------------------------------------ whole objects */

static int too_big(char *err, size_t errlen, const char *uri, uint64_t size, size_t max)
{
    err_printf(err, errlen, "%s: %" PRIu64 " bytes, more than the %zu allowed", uri, size, max);
    return -1;
}

static int file_read_whole(const char *uri, const char *path, size_t max, unsigned char **out,
                           size_t *len, char *err, size_t errlen)
{
    char why[SRC_ERRLEN];
    off_t size = 0;
    int fd = file_open_regular(path, &size, why, sizeof why);
    if (fd < 0) {
        err_printf(err, errlen, "%s: %s", uri, file_reason(why, path));
        return -1;
    }
    if ((uint64_t)size > max) {
        close(fd);
        return too_big(err, errlen, uri, (uint64_t)size, max);
    }
    /* one byte more than the size, to see a file that grew */
    size_t cap = (size_t)size + 1, n = 0;
    unsigned char *b = malloc(cap + 1);
    if (!b) {
        close(fd);
        err_printf(err, errlen, "%s: out of memory for %zu bytes", uri, cap);
        return -1;
    }
    for (;;) {
        ssize_t got = read(fd, b + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            err_printf(err, errlen, "%s: read at byte %zu: %s", uri, n, strerror(errno));
            goto fail;
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n == cap) {
            if (n > max) {
                struct stat st;
                uint64_t now = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : n;
                too_big(err, errlen, uri, now > n ? now : n, max);
                goto fail;
            }
            size_t nc = cap * 2 < max + 1 ? cap * 2 : max + 1;
            unsigned char *nb = realloc(b, nc + 1);
            if (!nb) {
                err_printf(err, errlen, "%s: out of memory for %zu bytes", uri, nc);
                goto fail;
            }
            b = nb;
            cap = nc;
        }
    }
    close(fd);
    b[n] = '\0';
    *out = b;
    *len = n;
    return 0;
fail:
    close(fd);
    free(b);
    return -1;
}

static int s3_read_whole(src_client *c, const char *uri, size_t max, unsigned char **out,
                         size_t *len, char *err, size_t errlen)
{
    char bucket[SRC_BUCKET_MAX], key[SRC_KEY_MAX], why[SRC_ERRLEN];
    if (s3_object(uri, bucket, key, err, errlen)) return -1;
    s3_client *s3 = pool_get(c, uri, err, errlen);
    if (!s3) return -1;
    uint64_t seed = new_seed(out);
    s3_status st;
    int rc = -1;
    for (int failures = 1;; failures++) {
        void *d = NULL;
        st = s3_get_all(s3, bucket, key, max, &d, len, why, sizeof why);
        if (st == S3_OK) {
            *out = d;
            rc = 0;
            goto out;
        }
        strip_attempts(why);
        if (!retry_wait(c, st, failures, &seed, uri, "GET", why)) {
            if (failures > 1)
                snprintf(why + strlen(why), sizeof why - strlen(why), "; gave up after %d attempts",
                         failures);
            break;
        }
    }
    if (st == S3_INVALID || st == S3_NOT_FOUND || st == S3_NO_BUCKET) {
        /* too large (S3_INVALID), or missing: the size or the reason from a HEAD */
        uint64_t size = 0;
        if (s3_size(c, s3, uri, bucket, key, &size, err, errlen) != 0) goto out;
        if (size > max) {
            too_big(err, errlen, uri, size, max);
            goto out;
        }
    }
    err_printf(err, errlen, "%s: %s", uri, why);
out:
    pool_put(c, s3);
    return rc;
}

int src_read_all(src_client *c, const char *uri, size_t max, unsigned char **out, size_t *len,
                 char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    if (is_s3(uri)) return s3_read_whole(c, uri, max, out, len, err, errlen);
    const char *path = file_path(uri, err, errlen);
    if (!path) return -1;
    return file_read_whole(uri, path, max, out, len, err, errlen);
}

/* ------------------------------------------------------------ listing */

void src_names_free(char **names, size_t n)
{
    if (!names) return;
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

typedef struct {
    char **v;
    size_t n, cap;
} names;

/* Appends base + '/' (unless base ends in one) + name. */
static int names_add(names *l, const char *base, const char *name)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 64;
        char **v = realloc(l->v, nc * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = nc;
    }
    size_t bl = strlen(base), nl = strlen(name);
    int slash = bl > 0 && base[bl - 1] != '/';
    char *s = malloc(bl + slash + nl + 1);
    if (!s) return -1;
    memcpy(s, base, bl);
    if (slash) s[bl] = '/';
    memcpy(s + bl + slash, name, nl + 1);
    l->v[l->n++] = s;
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_dir(const char *uri, const char *path, const char *suffix, names *l, char *err,
                    size_t errlen)
{
    DIR *d = opendir(path);
    if (!d) {
        err_printf(err, errlen, "%s: cannot list it: %s", uri, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno) {
                err_printf(err, errlen, "%s: cannot list it: %s", uri, strerror(errno));
                rc = -1;
            }
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (!ends_with(e->d_name, suffix)) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
        if (names_add(l, uri, e->d_name)) {
            err_printf(err, errlen, "%s: out of memory listing it", uri);
            rc = -1;
            break;
        }
    }
    closedir(d);
    return rc;
}

static int list_s3(src_client *c, const char *uri, const char *suffix, names *l, char *err,
                   size_t errlen)
{
    char bucket[SRC_BUCKET_MAX], prefix[SRC_KEY_MAX + 1], why[SRC_ERRLEN];
    if (s3_parse_uri(uri, bucket, sizeof bucket, prefix, SRC_KEY_MAX, why, sizeof why) != 0) {
        err_printf(err, errlen, "%s", why);
        return -1;
    }
    size_t pl = strlen(prefix);
    if (pl > 0 && prefix[pl - 1] != '/') {
        prefix[pl++] = '/';
        prefix[pl] = '\0';
    }
    s3_client *s3 = pool_get(c, uri, err, errlen);
    if (!s3) return -1;
    uint64_t seed = new_seed(l);
    s3_listing ls = {0};
    s3_status st;
    for (int failures = 1;; failures++) {
        st = s3_list(s3, bucket, prefix, "/", &ls, why, sizeof why);
        if (st == S3_OK) break;
        strip_attempts(why);
        if (!retry_wait(c, st, failures, &seed, uri, "LIST", why)) {
            if (failures > 1)
                snprintf(why + strlen(why), sizeof why - strlen(why), "; gave up after %d attempts",
                         failures);
            break;
        }
    }
    pool_put(c, s3);
    if (st != S3_OK) {
        if (st == S3_NO_BUCKET) err_printf(err, errlen, "%s: no such bucket %s", uri, bucket);
        else err_printf(err, errlen, "%s: %s", uri, why);
        return -1;
    }
    /* "s3://bucket/" + the key */
    char base[SRC_BUCKET_MAX + 8];
    snprintf(base, sizeof base, "s3://%s/", bucket);
    int rc = 0;
    for (size_t i = 0; i < ls.n; i++) {
        const char *k = ls.items[i].key;
        if (ls.items[i].is_prefix || strncmp(k, prefix, pl) != 0) continue;
        const char *name = k + pl;
        if (!*name || strchr(name, '/') || !ends_with(name, suffix)) continue;
        if (names_add(l, base, k)) {
            err_printf(err, errlen, "%s: out of memory listing it", uri);
            rc = -1;
            break;
        }
    }
    s3_listing_free(&ls);
    return rc;
}

int src_list(src_client *c, const char *uri, const char *suffix, char ***out, size_t *n,
             char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    if (!suffix) suffix = "";
    names l = {0};
    int rc;
    if (is_s3(uri)) {
        rc = list_s3(c, uri, suffix, &l, err, errlen);
    } else {
        const char *path = file_path(uri, err, errlen);
        rc = path ? list_dir(uri, path, suffix, &l, err, errlen) : -1;
    }
    if (rc != 0) {
        src_names_free(l.v, l.n);
        return -1;
    }
    if (l.n > 1) qsort(l.v, l.n, sizeof *l.v, cmp_names);
    *out = l.v;
    *n = l.n;
    return 0;
}
