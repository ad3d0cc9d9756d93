/* worker/gang/rdzv_client.c - every rank's connection to the rendezvous
 * store (rdzv.h): the endpoint parsed, connect with retries, backoff and
 * jitter while rank 0's pod is starting (rank 0 first starts the server,
 * rdzv_server.c), the hello and the join of all ranks, and the store
 * operations as requests of rdzv_proto.h; the handoff of a fresh
 * connection to another service on the store's port.
 *
 * Owns: struct rdzv, the requests' encoding and the answers' decoding, the
 * causes of a failed join (the strongest one reported), the checks of keys
 * and values before they are sent.
 * Must not: hold the store's table or answer a request (rdzv_server.c);
 * wait without a deadline.
 */
#define _GNU_SOURCE
#include "rdzv.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "rdzv_proto.h"
#include "rdzv_server.h"
#include "util.h"
#include "wire.h"

static int failed(rdzv_error *kind, rdzv_error k)
{
    if (kind) *kind = k;
    return -1;
}

/* Fails a call: the message into err (lib/util.h's err_printf), then *kind
 * (may be NULL) = k; -1. */
#define FAIL(kind, k, err, errlen, ...) \
    (err_printf((err), (errlen), __VA_ARGS__), failed((kind), (k)))

static int key_ok(const char *key)
{
    size_t n = strlen(key);
    if (n == 0 || n > MAX_KEY) return 0;
    for (size_t i = 0; i < n; i++)
        if (key[i] < 0x21 || key[i] > 0x7e) return 0;
    return 1;
}

struct rdzv {
    int fd, rank, world;
    long generation;
    char endpoint[300];
    rdzv_server *srv; /* rank 0 */
    const volatile sig_atomic_t *stop; /* rdzv_options.stop until the join; then NULL */
};

/* host and port of "host:port" or "[v6]:port". */
static int parse_endpoint(const char *ep, char *host, size_t hostlen, int *port)
{
    const char *colon;
    if (ep[0] == '[') {
        const char *close = strchr(ep, ']');
        if (!close || close[1] != ':') return -1;
        if ((size_t)(close - ep - 1) >= hostlen) return -1;
        memcpy(host, ep + 1, (size_t)(close - ep - 1));
        host[close - ep - 1] = '\0';
        colon = close + 1;
    } else {
        colon = strrchr(ep, ':');
        if (!colon || colon == ep || (size_t)(colon - ep) >= hostlen) return -1;
        memcpy(host, ep, (size_t)(colon - ep));
        host[colon - ep] = '\0';
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || p < 1 || p > 65535) return -1;
    *port = (int)p;
    return 0;
}

/* Sends a request and reads its response before deadline. *status and the
 * payload (malloc'd, NUL-terminated for convenience) on success. */
static int call(rdzv *r, const unsigned char *req, size_t len, double deadline, int *status,
                unsigned char **payload, size_t *plen, rdzv_error *kind, char *err, size_t errlen)
{
    unsigned char hdr[5];
    wire_put_u32(hdr, (uint32_t)len);
    int rc = rdzv_io_all(r->fd, hdr, 4, deadline, 1, r->stop);
    if (rc == 0) rc = rdzv_io_all(r->fd, (void *)req, len, deadline, 1, r->stop);
    if (rc == 0) rc = rdzv_io_all(r->fd, hdr, 5, deadline, 0, r->stop);
    if (rc != 0)
        goto broken;
    size_t n = wire_get_u32(hdr);
    if (n < 1 || n > MAX_MSG) {
        rc = -1;
        goto broken;
    }
    *status = hdr[4];
    unsigned char *p = malloc(n);
    if (!p) return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    if ((rc = rdzv_io_all(r->fd, p, n - 1, deadline, 0, r->stop)) != 0) {
        free(p);
        goto broken;
    }
    p[n - 1] = '\0';
    *payload = p;
    *plen = n - 1;
    return 0;
broken:
    if (rc == -3)
        return FAIL(kind, RDZV_STOPPED, err, errlen, "stopped by signal while waiting for the "
                    "rendezvous store %s", r->endpoint);
    if (rc == -2)
        return FAIL(kind, RDZV_TIMEOUT, err, errlen, "rendezvous store %s did not answer in time",
                    r->endpoint);
    return FAIL(kind, RDZV_LOST, err, errlen, "rendezvous store %s: connection lost",
                r->endpoint);
}

/* A request whose answer is only a status; a non-OK status fails with its text. */
static int call_simple(rdzv *r, const unsigned char *req, size_t len, double deadline,
                       unsigned char **payload, size_t *plen, rdzv_error *kind, char *err,
                       size_t errlen)
{
    int status = ST_OK;
    unsigned char *p = NULL;
    size_t n = 0;
    if (call(r, req, len, deadline, &status, &p, &n, kind, err, errlen) != 0) return -1;
    if (status != ST_OK) {
        int rc = FAIL(kind, (rdzv_error)status, err, errlen, "rendezvous at %s: %s", r->endpoint,
                      (char *)p);
        free(p);
        return rc;
    }
    if (payload) {
        *payload = p;
        *plen = n;
    } else {
        free(p);
    }
    return 0;
}

/* Causes of a failed attempt to join, weakest first: a rank that times out
 * reports the strongest it saw while waiting (an old store's answer says why
 * it waited; a timeout that came after says nothing), and the last one too
 * where it differs. */
enum { CAUSE_NONE, CAUSE_TIMEOUT, CAUSE_SOCKET, CAUSE_ANSWER };

/* *cause is CAUSE_TIMEOUT when the connect did not finish in time,
 * CAUSE_SOCKET for every other failure (refused, unreachable, no name). */
static int connect_once(const char *host, int port, double deadline, int *out, char *why,
                        size_t whylen, int *cause)
{
    *cause = CAUSE_SOCKET;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g != 0) {
        snprintf(why, whylen, "cannot resolve %s: %s", host, gai_strerror(g));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            snprintf(why, whylen, "connect: %s", strerror(errno));
            close(fd);
            fd = -1;
            continue;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        double left = deadline - mono_seconds();
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (poll(&pfd, 1, left > 0 ? (int)(left * 1000) + 1 : 0) <= 0 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            snprintf(why, whylen, "connect: %s", soerr ? strerror(soerr) : "timed out");
            *cause = soerr ? CAUSE_SOCKET : CAUSE_TIMEOUT;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *out = fd;
    return 0;
}

int rdzv_new(rdzv **out, const rdzv_options *o, rdzv_error *kind, char *err, size_t errlen)
{
    char host[256];
    int port;
    *out = NULL;
    if (!o->endpoint || parse_endpoint(o->endpoint, host, sizeof host, &port) != 0)
        return FAIL(kind, RDZV_INVALID, err, errlen,
                    "rendezvous endpoint \"%s\" is not host:port with a port in [1, 65535]",
                    o->endpoint ? o->endpoint : "");
    if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size)
        return FAIL(kind, RDZV_INVALID, err, errlen, "rank %d is not in [0, %d)", o->rank,
                    o->world_size);
    rdzv *r = calloc(1, sizeof *r);
    if (!r) return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    r->fd = -1;
    r->rank = o->rank;
    r->world = o->world_size;
    r->generation = o->generation;
    r->stop = o->stop;
    snprintf(r->endpoint, sizeof r->endpoint, "%s", o->endpoint);
    if (o->rank == 0 &&
        rdzv_server_start(&r->srv, port, o->world_size, o->generation, err, errlen) != 0) {
        if (kind) *kind = RDZV_INVALID;
        free(r);
        return -1;
    }
    const double start = mono_seconds(), deadline = start + o->timeout_s;
    double backoff = 0.05;
    char why[700] = "no attempt", best[700] = "";
    int best_cause = CAUSE_NONE, cause = CAUSE_NONE, told_old = 0;
    unsigned seed = (unsigned)(getpid() ^ (o->rank * 2654435761u));
    for (;;) {
        if (r->stop && *r->stop) {
            FAIL(kind, RDZV_STOPPED, err, errlen, "rank %d: stopped by signal while reaching the "
                 "rendezvous store at %s", o->rank, o->endpoint);
            rdzv_free(r);
            return -1;
        }
        /* with a stop flag, an attempt lasts at most 2 s, so that it is seen */
        double attempt = r->stop && deadline - mono_seconds() > 2.0 ? mono_seconds() + 2.0
                                                                      : deadline;
        if (connect_once(host, port, attempt, &r->fd, why, sizeof why, &cause) == 0) {
            unsigned char req[17], *p = NULL;
            size_t n = 0;
            int status = ST_OK;
            req[0] = OP_HELLO;
            wire_put_u32(req + 1, (uint32_t)o->rank);
            wire_put_u32(req + 5, (uint32_t)o->world_size);
            wire_put_u64(req + 9, (uint64_t)o->generation);
            rdzv_error k = RDZV_OK;
            if (call(r, req, sizeof req, deadline, &status, &p, &n, &k, why, sizeof why) != 0) {
                if (k == RDZV_STOPPED) {
                    FAIL(kind, RDZV_STOPPED, err, errlen, "rank %d: %s", o->rank, why);
                    rdzv_free(r);
                    return -1;
                }
                cause = k == RDZV_TIMEOUT ? CAUSE_TIMEOUT : CAUSE_SOCKET;
            } else if (status == ST_OK) {
                free(p);
                break;
            } else if (status == RDZV_STALE || status == RDZV_INVALID) {
                snprintf(why, sizeof why, "rendezvous at %s: %s", o->endpoint, (char *)p);
                free(p);
                LOG_ERROR("rdzv", "event=refused rank=%d msg=%s", o->rank, LOGV(why));
                FAIL(kind, (rdzv_error)status, err, errlen, "%s", why);
                rdzv_free(r);
                return -1;
            } else { /* an older rank 0 still terminating: its store answered */
                snprintf(why, sizeof why, "rank 0's store %s: %s (this gang is being replaced)",
                         o->endpoint, (char *)p);
                cause = CAUSE_ANSWER;
                if (!told_old++)
                    LOG_WARN("rdzv", "event=waiting reason=older_generation rank=%d msg=%s",
                             o->rank, LOGV((char *)p));
                free(p);
            }
            close(r->fd);
            r->fd = -1;
        }
        if (cause >= best_cause) {
            best_cause = cause;
            snprintf(best, sizeof best, "%s", why);
        }
        /* the next attempt must start before the deadline, or it would
         * only report that the deadline passed */
        double jitter = backoff * (0.5 + (rand_r(&seed) % 1000) / 1000.0);
        if (mono_seconds() + jitter >= deadline) {
            if (strcmp(best, why) == 0)
                FAIL(kind, RDZV_TIMEOUT, err, errlen, "rank %d could not reach the rendezvous "
                     "store at %s within %.0f s: %s", o->rank, o->endpoint, o->timeout_s, best);
            else
                FAIL(kind, RDZV_TIMEOUT, err, errlen, "rank %d could not reach the rendezvous "
                     "store at %s within %.0f s: %s (last: %s)", o->rank, o->endpoint,
                     o->timeout_s, best, why);
            rdzv_free(r);
            return -1;
        }
        for (double until = mono_seconds() + jitter, left; !(r->stop && *r->stop) &&
                                                         (left = until - mono_seconds()) > 0;) {
            if (r->stop && left > 0.2) left = 0.2; /* naps, so that a stop is seen */
            struct timespec ts = {(time_t)left, (long)((left - (time_t)left) * 1e9)};
            nanosleep(&ts, NULL);
        }
        backoff = backoff * 2 > 2.0 ? 2.0 : backoff * 2;
    }
    /* all ranks of this generation */
    unsigned char req[5];
    req[0] = OP_JOIN;
    double left = deadline - mono_seconds();
    wire_put_u32(req + 1, (uint32_t)(left > 0 ? left * 1000 : 0));
    char e2[512];
    if (call_simple(r, req, sizeof req, deadline + 5, NULL, NULL, kind, e2, sizeof e2) != 0) {
        FAIL(kind, kind ? *kind : RDZV_TIMEOUT, err, errlen, "%s within %.0f s", e2, o->timeout_s);
        rdzv_free(r);
        return -1;
    }
    LOG_INFO("rdzv", "event=rendezvous rank=%d world=%d generation=%ld endpoint=%s seconds=%.2f",
             o->rank, o->world_size, o->generation, LOGV(o->endpoint), mono_seconds() - start);
    /* met: from here a stop is the run's to honour (a stopping run still
     * agrees on its last step and checkpoints through the store) */
    r->stop = NULL;
    *out = r;
    return 0;
}

void rdzv_free(rdzv *r)
{
    if (!r) return;
    if (r->fd >= 0) {
        unsigned char bye[5];
        wire_put_u32(bye, 1);
        bye[4] = 0xff;
        rdzv_io_all(r->fd, bye, 5, mono_seconds() + 1, 1, NULL);
        close(r->fd);
    }
    if (r->srv) rdzv_server_stop(r->srv); /* once the other ranks left, or a grace */
    free(r);
}

int rdzv_lost_rank(rdzv *r, double timeout_s)
{
    void *v = NULL;
    size_t len = 0;
    rdzv_error k = RDZV_OK;
    char err[256];
    if (rdzv_get(r, "rdzv/lost", timeout_s, &v, &len, &k, err, sizeof err) != 0)
        return k == RDZV_LOST ? 0 : -1; /* the store is rank 0's: gone with it */
    char text[16] = "";
    memcpy(text, v, len < sizeof text - 1 ? len : sizeof text - 1);
    free(v);
    char *end;
    long rank = strtol(text, &end, 10);
    return *end == '\0' && rank >= 0 && rank < r->world ? (int)rank : -1;
}

int rdzv_exchange(rdzv *r, const char *prefix, const void *val, size_t len, double timeout_s,
                  char **vals, rdzv_error *kind, char *err, size_t errlen)
{
    char key[MAX_KEY + 1];
    if (vals)
        for (int q = 0; q < r->world; q++) vals[q] = NULL;
    if (snprintf(key, sizeof key, "%s/%d", prefix, r->rank) >= (int)sizeof key)
        return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous key prefix too long: %.40s...",
                    prefix);
    if (rdzv_set(r, key, val, len, kind, err, errlen) != 0) return -1;
    if (!vals) return 0;
    for (int q = 0; q < r->world; q++) {
        void *v = NULL;
        size_t n = len;
        char e2[512];
        if (q == r->rank) {
            v = malloc(len + 1);
            if (v) memcpy(v, val, len);
        } else {
            snprintf(key, sizeof key, "%s/%d", prefix, q);
            if (rdzv_get(r, key, timeout_s, &v, &n, kind, e2, sizeof e2) != 0) {
                rdzv_exchange_free(r, vals);
                return FAIL(kind, kind ? *kind : RDZV_TIMEOUT, err, errlen,
                            "waiting for rank %d's %s: %s", q, prefix, e2);
            }
            char *grown = realloc(v, n + 1);
            if (!grown) free(v);
            v = grown;
        }
        if (!v) {
            rdzv_exchange_free(r, vals);
            return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
        }
        ((char *)v)[n] = '\0';
        vals[q] = v;
    }
    return 0;
}

void rdzv_exchange_free(rdzv *r, char **vals)
{
    if (!vals) return;
    for (int q = 0; q < r->world; q++) {
        free(vals[q]);
        vals[q] = NULL;
    }
}

int rdzv_rank(const rdzv *r) { return r->rank; }
int rdzv_world_size(const rdzv *r) { return r->world; }

/* Builds op + fields + key (+ tail) into a new buffer. */
static unsigned char *build(size_t *len, const unsigned char *pre, size_t prelen, const char *key,
                            const void *tail, size_t taillen)
{
    size_t kl = strlen(key);
    *len = prelen + 2 + kl + taillen;
    unsigned char *b = malloc(*len);
    if (!b) return NULL;
    memcpy(b, pre, prelen);
    wire_put_u16(b + prelen, (uint16_t)kl);
    memcpy(b + prelen + 2, key, kl);
    if (taillen) memcpy(b + prelen + 2 + kl, tail, taillen);
    return b;
}

#define CHECK_KEY(key)                                                                     \
    do {                                                                                   \
        if (!key_ok(key))                                                                  \
            return FAIL(kind, RDZV_INVALID, err, errlen,                                   \
                        "rendezvous key must be 1 to %d printable characters", MAX_KEY);   \
    } while (0)

int rdzv_set(rdzv *r, const char *key, const void *val, size_t len, rdzv_error *kind, char *err,
             size_t errlen)
{
    CHECK_KEY(key);
    if (len > MAX_VALUE)
        return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous value of %zu bytes for %s is "
                    "over 64 MiB", len, key);
    unsigned char op = OP_SET;
    size_t n;
    unsigned char *b = build(&n, &op, 1, key, val, len);
    if (!b) return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    int rc = call_simple(r, b, n, mono_seconds() + 60, NULL, NULL, kind, err, errlen);
    free(b);
    return rc;
}

int rdzv_get(rdzv *r, const char *key, double timeout_s, void **val, size_t *len,
             rdzv_error *kind, char *err, size_t errlen)
{
    CHECK_KEY(key);
    unsigned char pre[5] = {OP_GET};
    wire_put_u32(pre + 1, (uint32_t)(timeout_s * 1000));
    size_t n;
    unsigned char *b = build(&n, pre, 5, key, NULL, 0);
    if (!b) return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    unsigned char *p = NULL;
    int rc = call_simple(r, b, n, mono_seconds() + timeout_s + 10, &p, len, kind, err, errlen);
    free(b);
    if (rc == 0) *val = p;
    return rc;
}

int rdzv_add(rdzv *r, const char *key, long delta, long *result, rdzv_error *kind, char *err,
             size_t errlen)
{
    CHECK_KEY(key);
    unsigned char pre[9] = {OP_ADD};
    wire_put_u64(pre + 1, (uint64_t)delta);
    size_t n, plen = 0;
    unsigned char *b = build(&n, pre, 9, key, NULL, 0), *p = NULL;
    if (!b) return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    int rc = call_simple(r, b, n, mono_seconds() + 60, &p, &plen, kind, err, errlen);
    free(b);
    if (rc == 0) {
        if (result) *result = plen == 8 ? (long)wire_get_u64(p) : 0;
        free(p);
    }
    return rc;
}

int rdzv_cas(rdzv *r, const char *key, const void *expected, size_t elen, const void *desired,
             size_t dlen, int *swapped, rdzv_error *kind, char *err, size_t errlen)
{
    CHECK_KEY(key);
    if (elen > MAX_VALUE || dlen > MAX_VALUE)
        return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous value over 64 MiB");
    size_t prelen = 5 + (expected ? elen : 0), n, plen = 0;
    unsigned char *pre = malloc(prelen), *p = NULL;
    if (!pre) return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    pre[0] = OP_CAS;
    wire_put_u32(pre + 1, expected ? (uint32_t)elen : 0xffffffffu);
    if (expected && elen) memcpy(pre + 5, expected, elen);
    unsigned char *b = build(&n, pre, prelen, key, desired, dlen);
    free(pre);
    if (!b) return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    int rc = call_simple(r, b, n, mono_seconds() + 60, &p, &plen, kind, err, errlen);
    free(b);
    if (rc == 0) {
        if (swapped) *swapped = plen == 1 && p[0] == 1;
        free(p);
    }
    return rc;
}

int rdzv_barrier(rdzv *r, const char *name, double timeout_s, rdzv_error *kind, char *err,
                 size_t errlen)
{
    CHECK_KEY(name);
    if (strlen(name) > MAX_KEY - 32)
        return FAIL(kind, RDZV_INVALID, err, errlen, "barrier name too long");
    unsigned char pre[5] = {OP_BARRIER};
    wire_put_u32(pre + 1, (uint32_t)(timeout_s * 1000));
    size_t n;
    unsigned char *b = build(&n, pre, 5, name, NULL, 0);
    if (!b) return FAIL(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    int rc = call_simple(r, b, n, mono_seconds() + timeout_s + 10, NULL, NULL, kind, err, errlen);
    free(b);
    return rc;
}

/* ------------------------------------------------------------ handoff */

int rdzv_set_handoff(rdzv *r, rdzv_handoff_fn fn, void *ctx)
{
    if (!r || !r->srv) return -1;
    rdzv_server_set_handoff(r->srv, fn, ctx);
    return 0;
}

int rdzv_handoff_connect(const rdzv *r, const void *payload, size_t len, double timeout_s,
                         int *fd, rdzv_error *kind, char *err, size_t errlen)
{
    char host[256], why[700] = "no attempt";
    int port, cause;
    *fd = -1;
    if (len > 4096 || parse_endpoint(r->endpoint, host, sizeof host, &port) != 0)
        return FAIL(kind, RDZV_INVALID, err, errlen, "handoff to %s: bad endpoint or payload",
                    r->endpoint);
    const double deadline = mono_seconds() + timeout_s;
    unsigned char req[4 + 1 + 4096], hdr[5];
    wire_put_u32(req, (uint32_t)(len + 1));
    req[4] = OP_HANDOFF;
    if (len) memcpy(req + 5, payload, len);
    rdzv_error k = RDZV_TIMEOUT;
    for (;;) {
        int c = -1;
        if (connect_once(host, port, deadline, &c, why, sizeof why, &cause) == 0) {
            int rc = rdzv_io_all(c, req, len + 5, deadline, 1, NULL);
            if (rc == 0) rc = rdzv_io_all(c, hdr, 5, deadline, 0, NULL);
            size_t n = rc == 0 ? wire_get_u32(hdr) : 0;
            char text[512] = "";
            if (rc == 0 && (n < 1 || n > sizeof text)) rc = -1;
            if (rc == 0 && n > 1) rc = rdzv_io_all(c, text, n - 1, deadline, 0, NULL);
            if (rc == 0) text[n - 1] = '\0';
            if (rc == 0 && hdr[4] == ST_OK) {
                *fd = c;
                return 0;
            }
            close(c);
            if (rc == 0 && hdr[4] != RDZV_TIMEOUT)
                return FAIL(kind, (rdzv_error)hdr[4], err, errlen, "handoff to %s: %s",
                            r->endpoint, text);
            if (rc == 0) snprintf(why, sizeof why, "%s", text);
            else snprintf(why, sizeof why, "the store closed the connection");
            k = rc == 0 ? RDZV_TIMEOUT : RDZV_LOST;
        }
        if (mono_seconds() + 0.05 >= deadline)
            return FAIL(kind, k, err, errlen, "handoff to %s within %.0f s: %s", r->endpoint,
                        timeout_s, why);
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
}
