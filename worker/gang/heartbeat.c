/* worker/gang/heartbeat.c - see heartbeat.h.
 *
 * Protocol, on a connection handed off by rank 0's store (rdzv_handoff_connect),
 * frames as the store's: u32 length | u8 type | payload (length counts type +
 * payload), little-endian.
 *   handoff payload  "vjhb1", u32 rank, u32 world, i64 generation
 *   its answer       the store's response: u8 status 0 (ok) | an rdzv_error + text
 *   rank -> rank 0   PING u64 seq  |  BYE (a clean stop)
 *   rank 0 -> rank   PONG u64 seq  |  LOST u32 rank, u8 evidence, u32 silent_ms  |  END
 * One thread per process does all the I/O of its connections (rank 0's also
 * takes the handed-off ones from the store's thread through `pending`);
 * hb_ok reads two atomic times and a flag, from any thread.
 */
#define _GNU_SOURCE
#include "heartbeat.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
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

enum { F_PING = 1, F_BYE = 2, F_PONG = 1, F_LOST = 3, F_END = 4 };
#define MAGIC "vjhb1"
#define MAGIC_LEN 5
#define HELLO_LEN (MAGIC_LEN + 16)
#define FRAME_MAX 32

enum { P_WAITING = 0, P_CONNECTED, P_LEFT, P_LOST };

typedef struct {
    int fd; /* -1: none */
    int state;
    unsigned char in[2 * FRAME_MAX];
    size_t got;
    double last; /* rank 0: its last ping (mono seconds); others: rank 0's last answer */
} peer;

struct hb {
    rdzv *store;
    int rank, world;
    long gen;
    double timeout, period, connect_timeout, limit;
    hb_verdict_fn on_verdict;
    void *ctx;
    double (*clock)(void *);
    void *clock_ctx;
    pthread_t thread;
    int wake[2];

    /* the thread's own (hb_stop's once the thread ended) */
    peer *peers; /* rank 0: one per rank (0 unused); others: [0], rank 0's connection */
    uint64_t seq;
    double last_tick, next_ping;

    /* hb_ok's, any thread */
    _Atomic long long tick_us, answer_us;
    atomic_int bad, ended;

    pthread_mutex_t mu; /* guards what follows */
    pthread_cond_t cv;
    int stopping, acting, departed;
    hb_verdict verdict;
    int *pending;           /* rank 0: a handed-off connection per rank, -1 none */
    unsigned char *claimed; /* rank 0: the rank's connection was taken */
};

const char *hb_evidence_name(hb_evidence e)
{
    return e == HB_EVIDENCE_CLOSED ? "closed" : e == HB_EVIDENCE_HEARTBEAT ? "heartbeat" : "";
}


static long long us_of(double t) { return (long long)(t * 1e6); }

/* The time every judgment reads: hb_options.clock's, else the monotonic clock. */
static double now_of(const hb *h) { return h->clock ? h->clock(h->clock_ctx) : mono_seconds(); }

/* One frame, never waiting: 0 sent, 1 skipped (the peer's buffer is full:
 * it does not read), -1 the connection is broken. */
static int send_frame(int fd, int type, const void *payload, size_t n)
{
    unsigned char b[FRAME_MAX + 5];
    if (fd < 0 || n > FRAME_MAX) return -1;
    wire_put_u32(b, (uint32_t)(n + 1));
    b[4] = (unsigned char)type;
    if (n) memcpy(b + 5, payload, n);
    for (;;) {
        ssize_t w = send(fd, b, n + 5, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w == (ssize_t)(n + 5)) return 0;
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
        return -1; /* an error, or part of a frame: the stream is out of step */
    }
}

/* Reads what arrived on p and hands each whole frame to fn. Returns 0, or
 * -1 when the connection closed, broke or spoke out of turn (after the
 * frames that came before). */
typedef void (*frame_fn)(hb *h, int from, int type, const unsigned char *p, size_t n);
static int read_frames(hb *h, int from, peer *p, frame_fn fn)
{
    int closed = 0;
    for (;;) {
        ssize_t r = recv(p->fd, p->in + p->got, sizeof p->in - p->got, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (r <= 0) {
            closed = 1;
            break;
        }
        p->got += (size_t)r;
        while (p->got >= 4) {
            size_t len = wire_get_u32(p->in);
            if (len < 1 || len > FRAME_MAX + 1) return -1;
            if (p->got < 4 + len) break;
            fn(h, from, p->in[4], p->in + 5, len - 1);
            memmove(p->in, p->in + 4 + len, p->got - 4 - len);
            p->got -= 4 + len;
        }
        if (p->got == sizeof p->in) return -1;
    }
    return closed ? -1 : 0;
}

/* The first verdict: kept, signalled, and handed to on_verdict (on this,
 * the heartbeat's thread). Later ones, and any once hb_stop began, are
 * dropped. */
static void deliver(hb *h, const hb_verdict *v)
{
    pthread_mutex_lock(&h->mu);
    if (h->verdict.kind != HB_NONE || h->stopping) {
        pthread_mutex_unlock(&h->mu);
        return;
    }
    h->verdict = *v;
    atomic_store(&h->bad, 1);
    pthread_cond_broadcast(&h->cv);
    int act = h->on_verdict != NULL;
    h->acting = act;
    pthread_mutex_unlock(&h->mu);
    LOG_DEBUG("hb", "event=verdict kind=%s rank=%d evidence=%s noticed_by=%d silent_s=%.2f",
              LOGV(v->kind == HB_STALE ? "stale" : "lost"), v->rank,
              LOGV(hb_evidence_name(v->evidence)),
              v->noticed_by, v->silent_s);
    if (!act) return;
    h->on_verdict(h->ctx, v);
    pthread_mutex_lock(&h->mu);
    h->acting = 0;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* After each wait: a gap of most of the timeout since the last means this
 * process did not run (frozen): its peers may have declared it lost. The
 * flag goes up before the tick moves, so that hb_ok, which reads the tick
 * first, never sees a fresh tick without it. Returns the gap when stale. */
static double tick(hb *h, double now)
{
    double gap = now - h->last_tick;
    if (gap > h->limit) atomic_store(&h->bad, 1);
    h->last_tick = now;
    atomic_store(&h->tick_us, us_of(now));
    if (h->rank == 0) atomic_store(&h->answer_us, us_of(now));
    return gap > h->limit ? gap : 0;
}

static void stale(hb *h, double silent, int told)
{
    hb_verdict v = {.kind = HB_STALE, .self = h->rank, .rank = h->rank, .silent_s = silent,
                    .told = told};
    deliver(h, &v);
}

/* ------------------------------------------------------------- rank 0 */

/* Rank 0 declares rank r lost: every rank hears it first (r too, should it
 * wake), then the verdict. */
static void lost_here(hb *h, int r, hb_evidence ev, double silent)
{
    h->peers[r].state = P_LOST;
    unsigned char b[9];
    wire_put_u32(b, (uint32_t)r);
    b[4] = (unsigned char)ev;
    wire_put_u32(b + 5, (uint32_t)(silent * 1000));
    for (int q = 1; q < h->world; q++)
        if (h->peers[q].fd >= 0) send_frame(h->peers[q].fd, F_LOST, b, sizeof b);
    hb_verdict v = {.kind = HB_LOST, .self = 0, .rank = r, .evidence = ev, .noticed_by = 0,
                    .silent_s = silent};
    deliver(h, &v);
}

static void server_frame(hb *h, int from, int type, const unsigned char *p, size_t n)
{
    peer *pe = &h->peers[from];
    if (type == F_PING && n == 8) {
        pe->last = now_of(h);
        if (pe->state == P_CONNECTED) send_frame(pe->fd, F_PONG, p, 8);
    } else if (type == F_BYE) {
        pe->state = P_LEFT;
        pthread_mutex_lock(&h->mu);
        h->departed = 1;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        LOG_DEBUG("hb", "event=goodbye rank=%d", from);
    }
}

static void server_close(peer *pe)
{
    if (pe->fd >= 0) close(pe->fd);
    pe->fd = -1;
}

/* The store's thread hands a connection over (under the store's lock):
 * check, answer, publish. */
static void on_handoff(void *ctx, int fd, const void *payload, size_t len)
{
    hb *h = ctx;
    const unsigned char *p = payload;
    char msg[256] = "";
    int status = 0, rank = -1;
    if (len != HELLO_LEN || memcmp(p, MAGIC, MAGIC_LEN) != 0) {
        status = RDZV_INVALID;
        snprintf(msg, sizeof msg, "not a heartbeat connection");
    } else {
        rank = (int)wire_get_u32(p + MAGIC_LEN);
        int world = (int)wire_get_u32(p + MAGIC_LEN + 4);
        long gen = (long)wire_get_u64(p + MAGIC_LEN + 8);
        if (gen != h->gen) {
            status = gen < h->gen ? RDZV_STALE : RDZV_LOST;
            snprintf(msg, sizeof msg, "rank 0's heartbeats are of generation %ld; this process "
                     "is of generation %ld", h->gen, gen);
        } else if (world != h->world || rank < 1 || rank >= h->world) {
            status = RDZV_INVALID;
            snprintf(msg, sizeof msg, "rank %d of world size %d does not fit world size %d",
                     rank, world, h->world);
        } else {
            pthread_mutex_lock(&h->mu);
            if (h->claimed[rank] || h->stopping) {
                status = RDZV_INVALID;
                snprintf(msg, sizeof msg, "rank %d already heartbeats", rank);
            } else {
                h->claimed[rank] = 1;
            }
            pthread_mutex_unlock(&h->mu);
        }
    }
    unsigned char b[5 + sizeof msg];
    size_t n = strlen(msg);
    wire_put_u32(b, (uint32_t)(n + 1));
    b[4] = (unsigned char)status;
    memcpy(b + 5, msg, n);
    int sent = send(fd, b, n + 5, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)(n + 5);
    if (status != 0 || !sent) {
        if (status != 0)
            LOG_WARN("hb", "event=refused rank=%d msg=%s", rank, LOGV(msg));
        close(fd);
        if (status == 0) { /* it will retry */
            pthread_mutex_lock(&h->mu);
            h->claimed[rank] = 0;
            pthread_mutex_unlock(&h->mu);
        }
        return;
    }
    pthread_mutex_lock(&h->mu);
    h->pending[rank] = fd;
    pthread_mutex_unlock(&h->mu);
    (void)!write(h->wake[1], "h", 1);
}

static void serve(hb *h)
{
    struct pollfd *pf = calloc((size_t)h->world + 1, sizeof *pf);
    int *who = calloc((size_t)h->world + 1, sizeof *who);
    if (!pf || !who) {
        LOG_ERROR("hb", "event=heartbeat_off reason=\"out of memory\"");
        free(pf);
        free(who);
        return;
    }
    for (;;) {
        size_t np = 0;
        pf[np].fd = h->wake[0];
        pf[np++].events = POLLIN;
        for (int q = 1; q < h->world; q++)
            if (h->peers[q].fd >= 0) {
                who[np] = q;
                pf[np].fd = h->peers[q].fd;
                pf[np++].events = POLLIN;
            }
        int pr = poll(pf, (nfds_t)np, (int)(h->period * 500) + 1);
        double now = now_of(h);
        double gap = tick(h, now);
        if (gap > 0) stale(h, gap, 0); /* this process was frozen: judge no one */
        pthread_mutex_lock(&h->mu);
        int stopping = h->stopping;
        for (int q = 1; q < h->world; q++)
            if (h->pending[q] >= 0) {
                peer *pe = &h->peers[q];
                pe->fd = h->pending[q];
                h->pending[q] = -1;
                pe->state = P_CONNECTED;
                pe->last = now;
                pe->got = 0;
                fcntl(pe->fd, F_SETFL, fcntl(pe->fd, F_GETFL) | O_NONBLOCK);
            }
        pthread_mutex_unlock(&h->mu);
        if (stopping) break;
        if (pr > 0 && (pf[0].revents & POLLIN)) {
            char b[64];
            (void)!read(h->wake[0], b, sizeof b);
        }
        for (size_t i = 1; pr > 0 && i < np; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            peer *pe = &h->peers[who[i]];
            if (pe->fd != pf[i].fd) continue;
            if (read_frames(h, who[i], pe, server_frame) != 0) {
                server_close(pe);
                if (pe->state == P_CONNECTED) lost_here(h, who[i], HB_EVIDENCE_CLOSED, 0);
            } else if (pe->state == P_LEFT) {
                server_close(pe);
            }
        }
        if (gap > 0) continue;
        for (int q = 1; q < h->world; q++) {
            peer *pe = &h->peers[q];
            if ((pe->state == P_WAITING || pe->state == P_CONNECTED) && now - pe->last > h->timeout)
                lost_here(h, q, HB_EVIDENCE_HEARTBEAT, now - pe->last);
        }
    }
    free(pf);
    free(who);
}

/* ------------------------------------------------------------- others */

static void client_frame(hb *h, int from, int type, const unsigned char *p, size_t n)
{
    (void)from;
    double now = now_of(h);
    if (type == F_PONG && n == 8) {
        h->peers[0].last = now;
        atomic_store(&h->answer_us, us_of(now));
    } else if (type == F_LOST && n == 9) {
        int r = (int)wire_get_u32(p);
        if (r == h->rank) { /* rank 0 declared this process lost: it is stale */
            stale(h, now - h->peers[0].last, 1);
            return;
        }
        hb_verdict v = {.kind = HB_LOST, .self = h->rank, .rank = r,
                        .evidence = p[4] == HB_EVIDENCE_HEARTBEAT ? HB_EVIDENCE_HEARTBEAT
                                                                  : HB_EVIDENCE_CLOSED,
                        .noticed_by = 0, .silent_s = wire_get_u32(p + 5) / 1000.0};
        deliver(h, &v);
    } else if (type == F_END) {
        atomic_store(&h->ended, 1);
        pthread_mutex_lock(&h->mu);
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
}

static int have_verdict(hb *h)
{
    pthread_mutex_lock(&h->mu);
    int v = h->verdict.kind != HB_NONE || h->stopping;
    pthread_mutex_unlock(&h->mu);
    return v;
}

static void ping(hb *h)
{
    peer *pe = &h->peers[0];
    double now = now_of(h);
    for (;;) {
        if (now >= h->next_ping) {
            unsigned char b[8];
            wire_put_u64(b, ++h->seq);
            send_frame(pe->fd, F_PING, b, 8); /* a broken connection shows as a read below */
            h->next_ping = now + h->period;
        }
        double wait = h->next_ping - now;
        if (wait > h->period / 2) wait = h->period / 2;
        struct pollfd pf[2] = {{.fd = h->wake[0], .events = POLLIN},
                               {.fd = pe->fd, .events = POLLIN}};
        int pr = poll(pf, 2, (int)(wait * 1000) + 1);
        now = now_of(h);
        double gap = tick(h, now);
        if (gap > 0) { /* frozen: whatever rank 0 says now, this process is stale */
            stale(h, now - pe->last, 0);
            return;
        }
        if (have_verdict(h)) return;
        if (pr > 0 && (pf[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            int rc = read_frames(h, 0, pe, client_frame);
            if (atomic_load(&h->ended) || have_verdict(h)) return;
            if (rc != 0) {
                hb_verdict v = {.kind = HB_LOST, .self = h->rank, .rank = 0,
                                .evidence = HB_EVIDENCE_CLOSED, .noticed_by = h->rank};
                deliver(h, &v);
                return;
            }
        }
        if (now - pe->last > h->timeout) {
            hb_verdict v = {.kind = HB_LOST, .self = h->rank, .rank = 0,
                            .evidence = HB_EVIDENCE_HEARTBEAT, .noticed_by = h->rank,
                            .silent_s = now - pe->last};
            deliver(h, &v);
            return;
        }
    }
}

static void *run(void *arg)
{
    hb *h = arg;
    if (h->rank == 0) serve(h);
    else ping(h);
    return NULL;
}

/* -------------------------------------------------------------- public */

static void hb_free(hb *h)
{
    if (!h) return;
    if (h->peers) {
        int n = h->rank == 0 ? h->world : 1;
        for (int q = 0; q < n; q++)
            if (h->peers[q].fd >= 0) close(h->peers[q].fd);
    }
    if (h->pending)
        for (int q = 0; q < h->world; q++)
            if (h->pending[q] >= 0) close(h->pending[q]);
    free(h->peers);
    free(h->pending);
    free(h->claimed);
    if (h->wake[0] >= 0) close(h->wake[0]);
    if (h->wake[1] >= 0) close(h->wake[1]);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}

int hb_start(hb **out, const hb_options *o, rdzv_error *kind, char *err, size_t errlen)
{
    *out = NULL;
    if (kind) *kind = RDZV_INVALID;
    if (!o->store || !(o->timeout_s > 0)) {
        snprintf(err, errlen, "heartbeat: needs a joined store and a timeout above 0");
        return -1;
    }
    hb *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "heartbeat: out of memory");
        return -1;
    }
    h->wake[0] = h->wake[1] = -1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    h->store = o->store;
    h->rank = rdzv_rank(o->store);
    h->world = rdzv_world_size(o->store);
    h->gen = o->generation;
    h->timeout = o->timeout_s;
    h->period = o->period_s > 0 ? o->period_s : o->timeout_s / 5;
    if (h->period > o->timeout_s / 2) h->period = o->timeout_s / 2;
    h->limit = h->timeout - h->period; /* a freeze past this: a peer may have judged */
    h->connect_timeout = o->connect_timeout_s > 0 ? o->connect_timeout_s : 60;
    h->on_verdict = o->on_verdict;
    h->ctx = o->ctx;
    h->clock = o->clock;
    h->clock_ctx = o->clock_ctx;
    int n = h->rank == 0 ? h->world : 1;
    h->peers = calloc((size_t)n, sizeof *h->peers);
    if (!h->peers || pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, errlen, "heartbeat: %s", h->peers ? strerror(errno) : "out of memory");
        hb_free(h);
        return -1;
    }
    const double start = now_of(h);
    for (int q = 0; q < n; q++) {
        h->peers[q].fd = -1;
        /* a rank not connected yet has the connect timeout before it counts as silent */
        h->peers[q].last = start + (h->rank == 0 ? h->connect_timeout : 0);
    }
    if (h->rank == 0) {
        h->pending = malloc(sizeof *h->pending * (size_t)h->world);
        h->claimed = calloc((size_t)h->world, 1);
        if (!h->pending || !h->claimed) {
            snprintf(err, errlen, "heartbeat: out of memory");
            hb_free(h);
            return -1;
        }
        for (int q = 0; q < h->world; q++) h->pending[q] = -1;
        rdzv_set_handoff(h->store, on_handoff, h);
    } else {
        unsigned char hello[HELLO_LEN];
        memcpy(hello, MAGIC, MAGIC_LEN);
        wire_put_u32(hello + MAGIC_LEN, (uint32_t)h->rank);
        wire_put_u32(hello + MAGIC_LEN + 4, (uint32_t)h->world);
        wire_put_u64(hello + MAGIC_LEN + 8, (uint64_t)h->gen);
        char e2[700];
        if (rdzv_handoff_connect(h->store, hello, sizeof hello, h->connect_timeout,
                                 &h->peers[0].fd, kind, e2, sizeof e2) != 0) {
            snprintf(err, errlen, "heartbeat of rank %d: %s", h->rank, e2);
            hb_free(h);
            return -1;
        }
        h->peers[0].state = P_CONNECTED;
        h->peers[0].last = now_of(h);
    }
    h->last_tick = now_of(h);
    atomic_store(&h->tick_us, us_of(h->last_tick));
    atomic_store(&h->answer_us, us_of(h->last_tick));
    if (pthread_create(&h->thread, NULL, run, h) != 0) {
        if (h->rank == 0) rdzv_set_handoff(h->store, NULL, NULL);
        snprintf(err, errlen, "heartbeat: cannot start a thread");
        hb_free(h);
        return -1;
    }
    LOG_INFO("hb", "event=heartbeat rank=%d world=%d generation=%ld timeout_s=%g period_s=%g",
             h->rank, h->world, h->gen, h->timeout, h->period);
    if (kind) *kind = RDZV_OK;
    *out = h;
    return 0;
}

int hb_ok(const hb *h)
{
    if (!h) return 1;
    hb *m = (hb *)h; /* atomics are read, never written, here */
    long long tick = atomic_load(&m->tick_us), answer = atomic_load(&m->answer_us);
    if (atomic_load(&m->bad)) return 0;
    if (atomic_load(&m->ended)) return 1;
    long long now = us_of(now_of(h));
    return now - tick <= us_of(h->limit) && now - answer <= us_of(h->timeout);
}

int hb_verdict_get(hb *h, hb_verdict *out)
{
    if (!h) return 0;
    pthread_mutex_lock(&h->mu);
    hb_verdict v = h->verdict;
    pthread_mutex_unlock(&h->mu);
    if (out) *out = v;
    return v.kind != HB_NONE;
}

int hb_await(hb *h, double timeout_s, hb_verdict *out)
{
    if (!h) return 0;
    double until = mono_seconds() + timeout_s;
    pthread_mutex_lock(&h->mu);
    while (h->verdict.kind == HB_NONE && !h->departed && !atomic_load(&h->ended)) {
        double now = mono_seconds();
        if (now >= until) break;
        struct timespec ts = {.tv_sec = (time_t)until,
                              .tv_nsec = (long)((until - (double)(time_t)until) * 1e9)};
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    hb_verdict v = h->verdict;
    pthread_mutex_unlock(&h->mu);
    if (out) *out = v;
    return v.kind != HB_NONE;
}

void hb_stop(hb *h)
{
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    while (h->acting) pthread_cond_wait(&h->cv, &h->mu); /* forever, if it exits the process */
    h->stopping = 1;
    int clean = h->verdict.kind == HB_NONE;
    pthread_mutex_unlock(&h->mu);
    if (h->rank == 0) rdzv_set_handoff(h->store, NULL, NULL);
    (void)!write(h->wake[1], "s", 1);
    pthread_join(h->thread, NULL);
    if (h->rank == 0) {
        for (int q = 1; q < h->world; q++) {
            if (h->pending[q] >= 0) { /* answered, never adopted */
                h->peers[q].fd = h->pending[q];
                h->pending[q] = -1;
            }
            if (h->peers[q].fd >= 0) send_frame(h->peers[q].fd, F_END, NULL, 0);
        }
    } else if (clean && !atomic_load(&h->ended)) {
        send_frame(h->peers[0].fd, F_BYE, NULL, 0);
    }
    LOG_DEBUG("hb", "event=heartbeat_stopped rank=%d clean=%d", h->rank, clean);
    hb_free(h);
}
