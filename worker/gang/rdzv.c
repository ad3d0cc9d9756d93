/* worker/gang/rdzv.c - see rdzv.h.
 *
 * Protocol (TCP, little-endian, one request in flight per client):
 *   request  = u32 length | u8 op | payload        (length counts op + payload)
 *   response = u32 length | u8 status | payload    (status: ST_OK or an rdzv_error)
 *   HELLO   u32 rank, u32 world, i64 generation          -> ok | STALE/INVALID + text
 *   SET     u16 klen, key, value                         -> ok
 *   GET     u32 timeout_ms, u16 klen, key                -> ok + value | TIMEOUT
 *   ADD     i64 delta, u16 klen, key                     -> ok + i64 new value
 *   CAS     u32 elen (0xffffffff: absent), expected, u16 klen, key, desired -> ok + u8 swapped
 *   JOIN    u32 timeout_ms                               -> ok once all ranks said HELLO |
 *                                                          TIMEOUT/LOST + text naming ranks
 *   BARRIER u32 timeout_ms, u16 nlen, name               -> ok once every rank arrived at its
 *                                                          n-th use of name | TIMEOUT/LOST
 *   HANDOFF payload (on a fresh connection, instead of HELLO) -> the connection leaves the
 *                                                          store for rdzv_set_handoff's handler,
 *                                                          which answers it | TIMEOUT "not ready"
 * Waiting requests are parked on the server with their deadline and answered when
 * the store changes, a rank is lost, or the deadline passes. One client handle is
 * used by one thread at a time.
 */
#define _GNU_SOURCE
#include "rdzv.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"
#include "wire.h"

enum { OP_HELLO = 1, OP_SET, OP_GET, OP_ADD, OP_CAS, OP_JOIN, OP_BARRIER, OP_HANDOFF };
#define ST_OK 0
#define MAX_KEY 512
#define MAX_VALUE (64u << 20)
#define MAX_MSG (MAX_VALUE + 2 * MAX_KEY + 64)

/* ------------------------------------------------------------ helpers */

static int fail(rdzv_error *kind, rdzv_error k, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(rdzv_error *kind, rdzv_error k, char *err, size_t errlen, const char *fmt, ...)
{
    if (kind) *kind = k;
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int key_ok(const char *key)
{
    size_t n = strlen(key);
    if (n == 0 || n > MAX_KEY) return 0;
    for (size_t i = 0; i < n; i++)
        if (key[i] < 0x21 || key[i] > 0x7e) return 0;
    return 1;
}


/* Sends or receives exactly len bytes before deadline (mono seconds).
 * Returns 0, -1 on a closed or broken connection, -2 on the deadline. */
static int io_all(int fd, void *buf, size_t len, double deadline, int sending)
{
    unsigned char *p = buf;
    while (len > 0) {
        double left = deadline - mono_seconds();
        if (left <= 0) return -2;
        struct pollfd pfd = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
        int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -1;
        if (pr == 0) continue;
        ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ------------------------------------------------------------- server */

typedef struct {
    char *key;
    unsigned char *val;
    size_t len;
} entry;

typedef struct {
    int fd;
    int rank;       /* -1 before HELLO */
    char peer[64];
    unsigned char hdr[4];
    size_t hdr_got;
    unsigned char *msg; /* the request being read */
    size_t msg_len, msg_got;
    int parked;     /* a waiting request: op and its deadline */
    int park_op;
    double park_deadline;
    char *park_key; /* GET key, or BARRIER key */
} client;

typedef struct {
    int listen_fd, wake[2];
    int world;
    long generation;
    pthread_t thread;
    pthread_mutex_t mu;
    int stop;
    client *cl;
    size_t ncl, capcl;
    entry *kv;
    size_t nkv, capkv;
    unsigned char *joined; /* world flags */
    int lost_rank;         /* a rank whose connection dropped without a goodbye, or -1 */
    rdzv_handoff_fn handoff; /* takes OP_HANDOFF connections; NULL: none yet */
    void *handoff_ctx;
} server;

static entry *kv_find(server *s, const char *key)
{
    for (size_t i = 0; i < s->nkv; i++)
        if (strcmp(s->kv[i].key, key) == 0) return &s->kv[i];
    return NULL;
}

static int kv_put(server *s, const char *key, const unsigned char *val, size_t len)
{
    entry *e = kv_find(s, key);
    unsigned char *copy = malloc(len ? len : 1);
    if (!copy) return -1;
    memcpy(copy, val, len);
    if (e) {
        free(e->val);
        e->val = copy;
        e->len = len;
        return 0;
    }
    if (s->nkv == s->capkv) {
        size_t cap = s->capkv ? 2 * s->capkv : 64;
        entry *n = realloc(s->kv, cap * sizeof *n);
        if (!n) {
            free(copy);
            return -1;
        }
        s->kv = n;
        s->capkv = cap;
    }
    if (!(s->kv[s->nkv].key = strdup(key))) {
        free(copy);
        return -1;
    }
    s->kv[s->nkv].val = copy;
    s->kv[s->nkv].len = len;
    s->nkv++;
    return 0;
}

static long kv_long(server *s, const char *key)
{
    entry *e = kv_find(s, key);
    if (!e || e->len != 8) return 0;
    return (long)wire_get_u64(e->val);
}

static void kv_set_long(server *s, const char *key, long v)
{
    unsigned char b[8];
    wire_put_u64(b, (uint64_t)v);
    kv_put(s, key, b, 8);
}

static void reply(client *c, int status, const void *payload, size_t len)
{
    unsigned char hdr[5];
    wire_put_u32(hdr, (uint32_t)(len + 1));
    hdr[4] = (unsigned char)status;
    double deadline = mono_seconds() + 10;
    if (io_all(c->fd, hdr, 5, deadline, 1) != 0 || (len && io_all(c->fd, (void *)payload, len, deadline, 1) != 0)) {
        /* the client will see its connection drop */
    }
}

static void reply_text(client *c, int status, const char *text)
{
    reply(c, status, text, strlen(text));
}

/* The missing ranks' list, for messages ("2, 3"). */
static void missing_list(server *s, const char *prefix, char *out, size_t outlen, int use_joined)
{
    size_t used = 0;
    int shown = 0;
    out[0] = '\0';
    for (int r = 0; r < s->world; r++) {
        int present;
        if (use_joined) {
            present = s->joined[r];
        } else {
            char k[3 * MAX_KEY];
            snprintf(k, sizeof k, "%s%d", prefix, r);
            present = kv_find(s, k) != NULL;
        }
        if (present) continue;
        if (shown++ == 16) {
            used += (size_t)snprintf(out + used, used < outlen ? outlen - used : 0, ", ...");
            break;
        }
        if (used < outlen)
            used += (size_t)snprintf(out + used, outlen - used, "%s%d", shown > 1 ? ", " : "", r);
    }
}

/* Answers a parked request if it can be answered now (or its deadline
 * passed, or a rank was lost). Returns 1 when answered. */
static int try_parked(server *s, client *c, double now)
{
    char msg[512], list[256];
    switch (c->park_op) {
    case OP_GET: {
        entry *e = kv_find(s, c->park_key);
        if (e) {
            reply(c, ST_OK, e->val, e->len);
            return 1;
        }
        if (now >= c->park_deadline) {
            snprintf(msg, sizeof msg, "key %s did not appear in time", c->park_key);
            reply_text(c, RDZV_TIMEOUT, msg);
            return 1;
        }
        return 0;
    }
    case OP_JOIN: {
        int all = 1;
        for (int r = 0; r < s->world; r++) all &= s->joined[r];
        if (all) {
            reply(c, ST_OK, NULL, 0);
            return 1;
        }
        if (now >= c->park_deadline) {
            missing_list(s, NULL, list, sizeof list, 1);
            snprintf(msg, sizeof msg, "rank(s) %s of %d never arrived", list, s->world);
            reply_text(c, RDZV_TIMEOUT, msg);
            return 1;
        }
        return 0;
    }
    case OP_BARRIER: {
        /* park_key is "barrier/<name>#<n>/": the rank flags are park_key + rank */
        int all = 1;
        for (int r = 0; r < s->world && all; r++) {
            char k[3 * MAX_KEY];
            snprintf(k, sizeof k, "%s%d", c->park_key, r);
            all = kv_find(s, k) != NULL;
        }
        if (all) {
            reply(c, ST_OK, NULL, 0);
            return 1;
        }
        if (s->lost_rank >= 0) {
            snprintf(msg, sizeof msg, "rank %d was lost (its connection to the store broke)",
                     s->lost_rank);
            reply_text(c, RDZV_LOST, msg);
            return 1;
        }
        if (now >= c->park_deadline) {
            missing_list(s, c->park_key, list, sizeof list, 0);
            snprintf(msg, sizeof msg, "rank(s) %s of %d never reached the barrier", list,
                     s->world);
            reply_text(c, RDZV_TIMEOUT, msg);
            return 1;
        }
        return 0;
    }
    }
    return 1;
}

static void unpark(client *c)
{
    c->parked = 0;
    free(c->park_key);
    c->park_key = NULL;
}

/* Handles one whole request of c. Returns -1 to drop the client, 1 when
 * the connection was handed off (the store forgets it without closing it). */
static int handle(server *s, client *c, const unsigned char *m, size_t len, double now)
{
    if (len < 1) return -1;
    int op = m[0];
    const unsigned char *p = m + 1;
    size_t n = len - 1;
    char key[2 * MAX_KEY], msg[512];
    if (op == OP_HANDOFF && c->rank < 0) {
        if (!s->handoff) {
            reply_text(c, RDZV_TIMEOUT, "no handler for handed-off connections yet");
            return 0;
        }
        s->handoff(s->handoff_ctx, c->fd, p, n);
        return 1;
    }
    if (op != OP_HELLO && c->rank < 0) return -1;
    switch (op) {
    case OP_HELLO: {
        if (n < 16) return -1;
        int rank = (int)wire_get_u32(p), world = (int)wire_get_u32(p + 4);
        long gen = (long)wire_get_u64(p + 8);
        if (gen < s->generation) {
            snprintf(msg, sizeof msg, "this store serves restart generation %ld; this process "
                     "is of generation %ld (stale: a newer gang replaced it)", s->generation, gen);
            reply_text(c, RDZV_STALE, msg);
            LOG_WARN("rdzv", "event=refused reason=stale rank=%d generation=%ld peer=%s", rank,
                     gen, LOGV(c->peer));
            return 0;
        }
        if (gen > s->generation) {
            snprintf(msg, sizeof msg, "this store serves the older generation %ld; this process "
                     "is of generation %ld", s->generation, gen);
            reply_text(c, RDZV_LOST, msg); /* the client retries: rank 0 is being replaced */
            return 0;
        }
        if (world != s->world || rank < 0 || rank >= world) {
            snprintf(msg, sizeof msg, "rank %d of world size %d does not fit this store's "
                     "world size %d", rank, world, s->world);
            reply_text(c, RDZV_INVALID, msg);
            return 0;
        }
        if (s->joined[rank]) {
            snprintf(msg, sizeof msg, "rank %d already joined this generation", rank);
            reply_text(c, RDZV_INVALID, msg);
            return 0;
        }
        s->joined[rank] = 1;
        c->rank = rank;
        LOG_INFO("rdzv", "event=joined rank=%d world=%d generation=%ld peer=%s", rank, world,
                 gen, LOGV(c->peer));
        reply(c, ST_OK, NULL, 0);
        return 0;
    }
    case OP_SET: {
        if (n < 2) return -1;
        size_t kl = wire_get_u16(p);
        if (kl == 0 || kl > MAX_KEY || n < 2 + kl) return -1;
        memcpy(key, p + 2, kl);
        key[kl] = '\0';
        if (kv_put(s, key, p + 2 + kl, n - 2 - kl) != 0) return -1;
        reply(c, ST_OK, NULL, 0);
        return 0;
    }
    case OP_GET:
    case OP_BARRIER: {
        if (n < 6) return -1;
        uint32_t ms = wire_get_u32(p);
        size_t kl = wire_get_u16(p + 4);
        if (kl == 0 || kl > MAX_KEY || n < 6 + kl) return -1;
        memcpy(key, p + 6, kl);
        key[kl] = '\0';
        if (op == OP_BARRIER) {
            /* the n-th use of this name by this rank: count, flag, park */
            char cnt[3 * MAX_KEY], flag[3 * MAX_KEY];
            snprintf(cnt, sizeof cnt, "barrier-count/%d/%s", c->rank, key);
            long use = kv_long(s, cnt) + 1;
            kv_set_long(s, cnt, use);
            snprintf(key + kl, sizeof key - kl, "#%ld/", use);
            snprintf(flag, sizeof flag, "barrier/%s%d", key, c->rank);
            kv_put(s, flag, (const unsigned char *)"1", 1);
            snprintf(flag, sizeof flag, "barrier/%s", key);
            if (strlen(flag) >= sizeof key) return -1;
            memcpy(key, flag, strlen(flag) + 1);
        }
        c->parked = 1;
        c->park_op = op;
        c->park_deadline = now + ms / 1000.0;
        if (!(c->park_key = strdup(key))) return -1;
        return 0;
    }
    case OP_ADD: {
        if (n < 10) return -1;
        long delta = (long)wire_get_u64(p);
        size_t kl = wire_get_u16(p + 8);
        if (kl == 0 || kl > MAX_KEY || n < 10 + kl) return -1;
        memcpy(key, p + 10, kl);
        key[kl] = '\0';
        entry *e = kv_find(s, key);
        long v = 0;
        if (e) {
            char num[32];
            size_t l = e->len < sizeof num - 1 ? e->len : sizeof num - 1;
            memcpy(num, e->val, l);
            num[l] = '\0';
            v = strtol(num, NULL, 10);
        }
        v += delta;
        char num[32];
        int l = snprintf(num, sizeof num, "%ld", v);
        if (kv_put(s, key, (unsigned char *)num, (size_t)l) != 0) return -1;
        unsigned char out[8];
        wire_put_u64(out, (uint64_t)v);
        reply(c, ST_OK, out, 8);
        return 0;
    }
    case OP_CAS: {
        if (n < 4) return -1;
        uint32_t el = wire_get_u32(p);
        size_t off = 4 + (el == 0xffffffffu ? 0 : el);
        if (el != 0xffffffffu && el > MAX_VALUE) return -1;
        if (n < off + 2) return -1;
        size_t kl = wire_get_u16(p + off);
        if (kl == 0 || kl > MAX_KEY || n < off + 2 + kl) return -1;
        memcpy(key, p + off + 2, kl);
        key[kl] = '\0';
        entry *e = kv_find(s, key);
        int match = el == 0xffffffffu ? e == NULL
                                      : e && e->len == el && memcmp(e->val, p + 4, el) == 0;
        unsigned char swapped = 0;
        if (match) {
            if (kv_put(s, key, p + off + 2 + kl, n - off - 2 - kl) != 0) return -1;
            swapped = 1;
        }
        reply(c, ST_OK, &swapped, 1);
        return 0;
    }
    case OP_JOIN: {
        if (n < 4) return -1;
        c->parked = 1;
        c->park_op = OP_JOIN;
        c->park_deadline = now + wire_get_u32(p) / 1000.0;
        return 0;
    }
    }
    return -1;
}

static void drop(server *s, size_t i, int clean)
{
    client *c = &s->cl[i];
    if (c->rank >= 0 && !clean && s->lost_rank < 0) {
        s->lost_rank = c->rank;
        LOG_WARN("rdzv", "event=lost rank=%d peer=%s", c->rank, LOGV(c->peer));
        char v[16]; /* for rdzv_lost_rank: the survivors ask who it was */
        int n = snprintf(v, sizeof v, "%d", c->rank);
        kv_put(s, "rdzv/lost", (const unsigned char *)v, (size_t)n);
    }
    close(c->fd);
    free(c->msg);
    unpark(c);
    s->cl[i] = s->cl[--s->ncl];
}

static void *serve(void *arg)
{
    server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        double now = mono_seconds(), next = now + 0.2;
        for (size_t i = 0; i < s->ncl; i++)
            if (s->cl[i].parked && s->cl[i].park_deadline < next) next = s->cl[i].park_deadline;
        size_t np = s->ncl + 2;
        struct pollfd *pf = calloc(np, sizeof *pf);
        if (!pf) break;
        pf[0].fd = s->listen_fd;
        pf[0].events = POLLIN;
        pf[1].fd = s->wake[0];
        pf[1].events = POLLIN;
        for (size_t i = 0; i < s->ncl; i++) {
            pf[i + 2].fd = s->cl[i].fd;
            pf[i + 2].events = POLLIN;
        }
        int timeout = (int)((next - now) * 1000) + 1;
        int pr = poll(pf, (nfds_t)np, timeout < 1 ? 1 : timeout);
        now = mono_seconds();
        pthread_mutex_lock(&s->mu);
        if (pr > 0 && (pf[1].revents & POLLIN)) {
            char b[16];
            (void)!read(s->wake[0], b, sizeof b);
        }
        if (pr > 0 && (pf[0].revents & POLLIN)) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
            if (fd >= 0) {
                if (s->ncl == s->capcl) {
                    size_t cap = s->capcl ? 2 * s->capcl : 16;
                    client *n = realloc(s->cl, cap * sizeof *n);
                    if (!n) {
                        close(fd);
                        fd = -1;
                    } else {
                        s->cl = n;
                        s->capcl = cap;
                    }
                }
                if (fd >= 0) {
                    client *c = &s->cl[s->ncl];
                    memset(c, 0, sizeof *c);
                    c->fd = fd;
                    c->rank = -1;
                    char host[64] = "?";
                    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, NULL, 0,
                                NI_NUMERICHOST);
                    snprintf(c->peer, sizeof c->peer, "%s", host);
                    /* the descriptor array was sized before this client */
                    s->ncl++;
                }
            }
        }
        /* read what arrived; the new client (if any) is beyond np - 2 */
        for (size_t i = np - 2; pr > 0 && i-- > 0;) {
            if (!(pf[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            client *c = &s->cl[i];
            int dropped = 0;
            if (c->hdr_got < 4) {
                ssize_t r = recv(c->fd, c->hdr + c->hdr_got, 4 - c->hdr_got, 0);
                if (r <= 0) {
                    drop(s, i, 0); /* closed without a goodbye: the rank is lost */
                    continue;
                }
                c->hdr_got += (size_t)r;
                if (c->hdr_got == 4) {
                    c->msg_len = wire_get_u32(c->hdr);
                    if (c->msg_len == 0 || c->msg_len > MAX_MSG || !(c->msg = malloc(c->msg_len))) {
                        drop(s, i, 0);
                        continue;
                    }
                    c->msg_got = 0;
                }
                continue;
            }
            ssize_t r = recv(c->fd, c->msg + c->msg_got, c->msg_len - c->msg_got, 0);
            if (r <= 0) {
                drop(s, i, 0);
                continue;
            }
            c->msg_got += (size_t)r;
            if (c->msg_got < c->msg_len) continue;
            if (c->msg_len == 1 && c->msg[0] == 0xff) { /* goodbye */
                c->rank = -1;
                drop(s, i, 1);
                dropped = 1;
            } else {
                int h = c->parked ? -1 : handle(s, c, c->msg, c->msg_len, now);
                if (h == 1) { /* handed off: its descriptor is the handler's now */
                    free(c->msg);
                    s->cl[i] = s->cl[--s->ncl];
                    dropped = 1;
                } else if (h != 0) {
                    drop(s, i, 0);
                    dropped = 1;
                }
            }
            if (!dropped) {
                free(c->msg);
                c->msg = NULL;
                c->hdr_got = 0;
            }
        }
        free(pf);
        for (size_t i = 0; i < s->ncl; i++)
            if (s->cl[i].parked && try_parked(s, &s->cl[i], now)) unpark(&s->cl[i]);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

static void server_free(server *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->ncl; i++) {
        close(s->cl[i].fd);
        free(s->cl[i].msg);
        free(s->cl[i].park_key);
    }
    free(s->cl);
    for (size_t i = 0; i < s->nkv; i++) {
        free(s->kv[i].key);
        free(s->kv[i].val);
    }
    free(s->kv);
    free(s->joined);
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int server_start(server **out, int port, int world, long gen, char *err, size_t errlen)
{
    server *s = calloc(1, sizeof *s);
    if (!s) return fail(NULL, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    s->listen_fd = s->wake[0] = s->wake[1] = -1;
    s->world = world;
    s->generation = gen;
    s->lost_rank = -1;
    pthread_mutex_init(&s->mu, NULL);
    s->joined = calloc((size_t)world, 1);
    int one = 1;
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                              .sin6_addr = IN6ADDR_ANY_INIT};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (!s->joined || pipe2(s->wake, O_CLOEXEC) != 0) goto sys;
    /* IPv6 with v4-mapped addresses where the host has IPv6, else IPv4 */
    s->listen_fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd >= 0) {
        int zero = 0;
        setsockopt(s->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s->listen_fd, (struct sockaddr *)&a6, sizeof a6) != 0) {
            close(s->listen_fd);
            s->listen_fd = -1;
        }
    }
    if (s->listen_fd < 0) {
        s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s->listen_fd < 0) goto sys;
        setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s->listen_fd, (struct sockaddr *)&a4, sizeof a4) != 0) goto sys;
    }
    if (listen(s->listen_fd, 1024) != 0) goto sys;
    if (pthread_create(&s->thread, NULL, serve, s) != 0) goto sys;
    *out = s;
    return 0;
sys:
    fail(NULL, RDZV_INVALID, err, errlen, "rendezvous: cannot serve on port %d: %s", port,
         strerror(errno));
    server_free(s);
    return -1;
}

static void server_stop(server *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    (void)!write(s->wake[1], "x", 1);
    pthread_join(s->thread, NULL);
    server_free(s);
}

/* ------------------------------------------------------------- client */

struct rdzv {
    int fd, rank, world;
    long generation;
    char endpoint[300];
    server *srv; /* rank 0 */
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
    int rc = io_all(r->fd, hdr, 4, deadline, 1);
    if (rc == 0) rc = io_all(r->fd, (void *)req, len, deadline, 1);
    if (rc == 0) rc = io_all(r->fd, hdr, 5, deadline, 0);
    if (rc != 0)
        goto broken;
    size_t n = wire_get_u32(hdr);
    if (n < 1 || n > MAX_MSG) {
        rc = -1;
        goto broken;
    }
    *status = hdr[4];
    unsigned char *p = malloc(n);
    if (!p) return fail(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    if ((rc = io_all(r->fd, p, n - 1, deadline, 0)) != 0) {
        free(p);
        goto broken;
    }
    p[n - 1] = '\0';
    *payload = p;
    *plen = n - 1;
    return 0;
broken:
    if (rc == -2)
        return fail(kind, RDZV_TIMEOUT, err, errlen, "rendezvous store %s did not answer in time",
                    r->endpoint);
    return fail(kind, RDZV_LOST, err, errlen, "rendezvous store %s: connection lost",
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
        int rc = fail(kind, (rdzv_error)status, err, errlen, "rendezvous at %s: %s", r->endpoint,
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
        return fail(kind, RDZV_INVALID, err, errlen,
                    "rendezvous endpoint \"%s\" is not host:port with a port in [1, 65535]",
                    o->endpoint ? o->endpoint : "");
    if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size)
        return fail(kind, RDZV_INVALID, err, errlen, "rank %d is not in [0, %d)", o->rank,
                    o->world_size);
    rdzv *r = calloc(1, sizeof *r);
    if (!r) return fail(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    r->fd = -1;
    r->rank = o->rank;
    r->world = o->world_size;
    r->generation = o->generation;
    snprintf(r->endpoint, sizeof r->endpoint, "%s", o->endpoint);
    if (o->rank == 0 && server_start(&r->srv, port, o->world_size, o->generation, err, errlen) != 0) {
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
        if (connect_once(host, port, deadline, &r->fd, why, sizeof why, &cause) == 0) {
            unsigned char req[17], *p = NULL;
            size_t n = 0;
            int status = ST_OK;
            req[0] = OP_HELLO;
            wire_put_u32(req + 1, (uint32_t)o->rank);
            wire_put_u32(req + 5, (uint32_t)o->world_size);
            wire_put_u64(req + 9, (uint64_t)o->generation);
            rdzv_error k = RDZV_OK;
            if (call(r, req, sizeof req, deadline, &status, &p, &n, &k, why, sizeof why) != 0) {
                cause = k == RDZV_TIMEOUT ? CAUSE_TIMEOUT : CAUSE_SOCKET;
            } else if (status == ST_OK) {
                free(p);
                break;
            } else if (status == RDZV_STALE || status == RDZV_INVALID) {
                snprintf(why, sizeof why, "rendezvous at %s: %s", o->endpoint, (char *)p);
                free(p);
                LOG_ERROR("rdzv", "event=refused rank=%d msg=%s", o->rank, LOGV(why));
                fail(kind, (rdzv_error)status, err, errlen, "%s", why);
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
                fail(kind, RDZV_TIMEOUT, err, errlen, "rank %d could not reach the rendezvous "
                     "store at %s within %.0f s: %s", o->rank, o->endpoint, o->timeout_s, best);
            else
                fail(kind, RDZV_TIMEOUT, err, errlen, "rank %d could not reach the rendezvous "
                     "store at %s within %.0f s: %s (last: %s)", o->rank, o->endpoint,
                     o->timeout_s, best, why);
            rdzv_free(r);
            return -1;
        }
        struct timespec ts = {(time_t)jitter, (long)((jitter - (time_t)jitter) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 2.0 ? 2.0 : backoff * 2;
    }
    /* all ranks of this generation */
    unsigned char req[5];
    req[0] = OP_JOIN;
    double left = deadline - mono_seconds();
    wire_put_u32(req + 1, (uint32_t)(left > 0 ? left * 1000 : 0));
    char e2[512];
    if (call_simple(r, req, sizeof req, deadline + 5, NULL, NULL, kind, e2, sizeof e2) != 0) {
        fail(kind, kind ? *kind : RDZV_TIMEOUT, err, errlen, "%s within %.0f s", e2, o->timeout_s);
        rdzv_free(r);
        return -1;
    }
    LOG_INFO("rdzv", "event=rendezvous rank=%d world=%d generation=%ld endpoint=%s seconds=%.2f",
             o->rank, o->world_size, o->generation, LOGV(o->endpoint), mono_seconds() - start);
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
        io_all(r->fd, bye, 5, mono_seconds() + 1, 1);
        close(r->fd);
    }
    if (r->srv) {
        /* let the other ranks finish their last reads: wait until they left */
        double until = mono_seconds() + 5;
        for (;;) {
            pthread_mutex_lock(&r->srv->mu);
            size_t left = r->srv->ncl;
            pthread_mutex_unlock(&r->srv->mu);
            if (left == 0 || mono_seconds() > until) break;
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
        server_stop(r->srv);
    }
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
        return fail(kind, RDZV_INVALID, err, errlen, "rendezvous key prefix too long: %.40s...",
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
                return fail(kind, kind ? *kind : RDZV_TIMEOUT, err, errlen,
                            "waiting for rank %d's %s: %s", q, prefix, e2);
            }
            char *grown = realloc(v, n + 1);
            if (!grown) free(v);
            v = grown;
        }
        if (!v) {
            rdzv_exchange_free(r, vals);
            return fail(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
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
            return fail(kind, RDZV_INVALID, err, errlen,                                   \
                        "rendezvous key must be 1 to %d printable characters", MAX_KEY);   \
    } while (0)

int rdzv_set(rdzv *r, const char *key, const void *val, size_t len, rdzv_error *kind, char *err,
             size_t errlen)
{
    CHECK_KEY(key);
    if (len > MAX_VALUE)
        return fail(kind, RDZV_INVALID, err, errlen, "rendezvous value of %zu bytes for %s is "
                    "over 64 MiB", len, key);
    unsigned char op = OP_SET;
    size_t n;
    unsigned char *b = build(&n, &op, 1, key, val, len);
    if (!b) return fail(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
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
    if (!b) return fail(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
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
    if (!b) return fail(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
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
        return fail(kind, RDZV_INVALID, err, errlen, "rendezvous value over 64 MiB");
    size_t prelen = 5 + (expected ? elen : 0), n, plen = 0;
    unsigned char *pre = malloc(prelen), *p = NULL;
    if (!pre) return fail(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    pre[0] = OP_CAS;
    wire_put_u32(pre + 1, expected ? (uint32_t)elen : 0xffffffffu);
    if (expected && elen) memcpy(pre + 5, expected, elen);
    unsigned char *b = build(&n, pre, prelen, key, desired, dlen);
    free(pre);
    if (!b) return fail(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
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
        return fail(kind, RDZV_INVALID, err, errlen, "barrier name too long");
    unsigned char pre[5] = {OP_BARRIER};
    wire_put_u32(pre + 1, (uint32_t)(timeout_s * 1000));
    size_t n;
    unsigned char *b = build(&n, pre, 5, name, NULL, 0);
    if (!b) return fail(kind, RDZV_INVALID, err, errlen, "rendezvous: out of memory");
    int rc = call_simple(r, b, n, mono_seconds() + timeout_s + 10, NULL, NULL, kind, err, errlen);
    free(b);
    return rc;
}

/* ------------------------------------------------------------ handoff */

int rdzv_set_handoff(rdzv *r, rdzv_handoff_fn fn, void *ctx)
{
    if (!r || !r->srv) return -1;
    pthread_mutex_lock(&r->srv->mu);
    r->srv->handoff = fn;
    r->srv->handoff_ctx = ctx;
    pthread_mutex_unlock(&r->srv->mu);
    return 0;
}

int rdzv_handoff_connect(const rdzv *r, const void *payload, size_t len, double timeout_s,
                         int *fd, rdzv_error *kind, char *err, size_t errlen)
{
    char host[256], why[700] = "no attempt";
    int port, cause;
    *fd = -1;
    if (len > 4096 || parse_endpoint(r->endpoint, host, sizeof host, &port) != 0)
        return fail(kind, RDZV_INVALID, err, errlen, "handoff to %s: bad endpoint or payload",
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
            int rc = io_all(c, req, len + 5, deadline, 1);
            if (rc == 0) rc = io_all(c, hdr, 5, deadline, 0);
            size_t n = rc == 0 ? wire_get_u32(hdr) : 0;
            char text[512] = "";
            if (rc == 0 && (n < 1 || n > sizeof text)) rc = -1;
            if (rc == 0 && n > 1) rc = io_all(c, text, n - 1, deadline, 0);
            if (rc == 0) text[n - 1] = '\0';
            if (rc == 0 && hdr[4] == ST_OK) {
                *fd = c;
                return 0;
            }
            close(c);
            if (rc == 0 && hdr[4] != RDZV_TIMEOUT)
                return fail(kind, (rdzv_error)hdr[4], err, errlen, "handoff to %s: %s",
                            r->endpoint, text);
            if (rc == 0) snprintf(why, sizeof why, "%s", text);
            else snprintf(why, sizeof why, "the store closed the connection");
            k = rc == 0 ? RDZV_TIMEOUT : RDZV_LOST;
        }
        if (mono_seconds() + 0.05 >= deadline)
            return fail(kind, k, err, errlen, "handoff to %s within %.0f s: %s", r->endpoint,
                        timeout_s, why);
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
}
