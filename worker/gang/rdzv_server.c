/* worker/gang/rdzv_server.c - rank 0's rendezvous store (rdzv_server.h):
 * one thread polls the listening socket and every connection, reads whole
 * requests (rdzv_proto.h), answers them from the key-value table, parks the
 * waiting ones (GET, JOIN, BARRIER) with their deadline and answers them
 * when the store changes, a rank is lost or the deadline passes, and hands
 * a HANDOFF connection to rdzv_set_handoff's handler.
 *
 * Owns: the table, the ranks that joined this generation, the first rank
 * lost ("rdzv/lost"), the refusal of another generation's or a duplicate
 * rank's hello.
 * Must not: connect anywhere or build a request (rdzv_client.c); block its
 * thread on one client (every answer has a deadline).
 */
#define _GNU_SOURCE
#include "rdzv_server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "rdzv_proto.h"
#include "util.h"
#include "wire.h"

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

struct rdzv_server {
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
};

static entry *kv_find(rdzv_server *s, const char *key)
{
    for (size_t i = 0; i < s->nkv; i++)
        if (strcmp(s->kv[i].key, key) == 0) return &s->kv[i];
    return NULL;
}

static int kv_put(rdzv_server *s, const char *key, const unsigned char *val, size_t len)
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

static long kv_long(rdzv_server *s, const char *key)
{
    entry *e = kv_find(s, key);
    if (!e || e->len != 8) return 0;
    return (long)wire_get_u64(e->val);
}

static void kv_set_long(rdzv_server *s, const char *key, long v)
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
    if (rdzv_io_all(c->fd, hdr, 5, deadline, 1, NULL) != 0 ||
        (len && rdzv_io_all(c->fd, (void *)payload, len, deadline, 1, NULL) != 0)) {
        /* the client will see its connection drop */
    }
}

static void reply_text(client *c, int status, const char *text)
{
    reply(c, status, text, strlen(text));
}

/* The missing ranks' list, for messages ("2, 3"). */
static void missing_list(rdzv_server *s, const char *prefix, char *out, size_t outlen,
                         int use_joined)
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
static int try_parked(rdzv_server *s, client *c, double now)
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
static int handle(rdzv_server *s, client *c, const unsigned char *m, size_t len, double now)
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

static void drop(rdzv_server *s, size_t i, int clean)
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
    rdzv_server *s = arg;
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

static void server_free(rdzv_server *s)
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

int rdzv_server_start(rdzv_server **out, int port, int world, long gen, char *err,
                      size_t errlen)
{
    rdzv_server *s = calloc(1, sizeof *s);
    if (!s) {
        err_printf(err, errlen, "rendezvous: out of memory");
        return -1;
    }
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
    err_printf(err, errlen, "rendezvous: cannot serve on port %d: %s", port, strerror(errno));
    server_free(s);
    return -1;
}

void rdzv_server_stop(rdzv_server *s)
{
    /* let the other ranks finish their last reads: wait until they left */
    double until = mono_seconds() + 5;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        size_t left = s->ncl;
        pthread_mutex_unlock(&s->mu);
        if (left == 0 || mono_seconds() > until) break;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    (void)!write(s->wake[1], "x", 1);
    pthread_join(s->thread, NULL);
    server_free(s);
}

void rdzv_server_set_handoff(rdzv_server *s, rdzv_handoff_fn fn, void *ctx)
{
    pthread_mutex_lock(&s->mu);
    s->handoff = fn;
    s->handoff_ctx = ctx;
    pthread_mutex_unlock(&s->mu);
}
