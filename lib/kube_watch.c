/* lib/kube_watch.c - see kube_watch.h. Owns the line buffer and one HTTP
 * client per kube_watch_run (kept alive across reconnects); must not log the
 * token (kube_stream keeps it inside kube.c). */
#include "kube_watch.h"
#include "buf.h"
#include "util.h"

#include "log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- lines */

struct kube_lines {
    buf b; /* the line so far; b.max caps it */
};

int kube_lines_new(size_t max_line, kube_lines **out)
{
    kube_lines *l = calloc(1, sizeof *l);
    if (!l) return -1;
    l->b.max = max_line ? max_line : (size_t)64 << 20;
    *out = l;
    return 0;
}

void kube_lines_free(kube_lines *l)
{
    if (!l) return;
    buf_free(&l->b);
    free(l);
}

size_t kube_lines_pending(const kube_lines *l) { return l->b.len; }
void kube_lines_reset(kube_lines *l) { buf_clear(&l->b); }

static int emit(kube_lines *l, kube_line_cb cb, void *user)
{
    size_t n = l->b.len;
    char *line = l->b.data;
    int r = 0;
    if (n > 0 && line[n - 1] == '\r') n--;
    size_t i = 0;
    while (i < n && (line[i] == ' ' || line[i] == '\t')) i++;
    if (i < n) {
        line[n] = '\0';
        r = cb(line, n, user);
    }
    buf_clear(&l->b);
    return r;
}

int kube_lines_feed(kube_lines *l, const char *data, size_t len, kube_line_cb cb, void *user)
{
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) : len;
        if (buf_append(&l->b, data, take)) {
            buf_clear(&l->b);
            return -1;
        }
        if (!nl) break;
        data += take + 1;
        len -= take + 1;
        int r = emit(l, cb, user);
        if (r) return r;
    }
    return 0;
}

/* ---------------------------------------------------------------- watch */

typedef struct {
    kube_lines *lines;
    kube_watch_cb cb;
    void *user;
    char *rv;
    size_t rvlen;
    int events;      /* events (bookmarks included) on this connection */
    int gone;        /* ERROR 410 */
    int error_event; /* another ERROR, or a line we could not parse */
    int cb_stop;     /* the callback asked to stop */
    kube_status err; /* details of gone / error_event */
} watch_state;

static void set_rv(watch_state *w, const cJSON *obj)
{
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *rv = cJSON_GetObjectItemCaseSensitive(meta, "resourceVersion");
    if (cJSON_IsString(rv) && rv->valuestring[0])
        snprintf(w->rv, w->rvlen, "%s", rv->valuestring);
}

static int on_line(const char *line, size_t len, void *user)
{
    watch_state *w = user;
    cJSON *ev = cJSON_ParseWithLength(line, len);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ev, "type");
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(ev, "object");
    int r = 0;
    if (!cJSON_IsString(type) || !cJSON_IsObject(obj)) {
        w->error_event = 1;
        snprintf(w->err.reason, sizeof w->err.reason, "Invalid");
        snprintf(w->err.message, sizeof w->err.message, "watch event is not {type, object}: %.200s",
                 line);
        r = 1;
        goto out;
    }
    if (strcmp(type->valuestring, "ERROR") == 0) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(obj, "code");
        const cJSON *reason = cJSON_GetObjectItemCaseSensitive(obj, "reason");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(obj, "message");
        w->err.http_code = cJSON_IsNumber(code) ? code->valueint : 0;
        snprintf(w->err.reason, sizeof w->err.reason, "%s",
                 cJSON_IsString(reason) ? reason->valuestring : "Unknown");
        snprintf(w->err.message, sizeof w->err.message, "watch ERROR event: %s",
                 cJSON_IsString(msg) ? msg->valuestring : "(no message)");
        if (w->err.http_code == 410)
            w->gone = 1;
        else
            w->error_event = 1;
        r = 1;
        goto out;
    }
    w->events++;
    if (w->cb(type->valuestring, obj, w->user)) {
        w->cb_stop = 1;
        r = 1;
    }
    set_rv(w, obj); /* the event was delivered: resume after it */
out:
    cJSON_Delete(ev);
    return r;
}

static int on_chunk(const char *data, size_t len, void *user)
{
    watch_state *w = user;
    int r = kube_lines_feed(w->lines, data, len, on_line, w);
    if (r < 0) {
        w->error_event = 1;
        snprintf(w->err.reason, sizeof w->err.reason, "Invalid");
        snprintf(w->err.message, sizeof w->err.message, "watch event line too long");
    }
    return r != 0;
}

static void sleep_ms_stoppable(long ms, const volatile sig_atomic_t *stop)
{
    while (ms > 0 && !(stop && *stop)) {
        long step = ms < 50 ? ms : 50;
        struct timespec ts = {0, step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

static _Thread_local uint64_t jitter_state; /* per thread: informers watch in parallel */

/* A uniform fraction in [0.5, 1): "equal jitter" keeps some backoff always. */
static double jitter(void)
{
    if (!jitter_state) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        jitter_state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ 0x9E3779B97F4A7C15ull;
    }
    jitter_state ^= jitter_state << 13;
    jitter_state ^= jitter_state >> 7;
    jitter_state ^= jitter_state << 17;
    return 0.5 + 0.5 * (double)(jitter_state >> 11) / 9007199254740992.0;
}

int kube_watch_run(kube_client *c, const char *path, const kube_watch_opts *opts, char *rv,
                   size_t rvlen, kube_watch_cb cb, void *user, const volatile sig_atomic_t *stop,
                   kube_status *st)
{
    kube_watch_opts o = opts ? *opts : (kube_watch_opts){0};
    if (o.timeout_seconds <= 0) o.timeout_seconds = 300;
    if (o.backoff_initial_ms <= 0) o.backoff_initial_ms = 200;
    if (o.backoff_max_ms <= 0) o.backoff_max_ms = 30000;
    http_client *h = NULL;
    kube_lines *lines = NULL;
    int rc = kube_client_http_new(c, &h, st);
    if (rc) return rc;
    if (kube_lines_new(0, &lines)) {
        http_client_free(h);
        snprintf(st->reason, sizeof st->reason, "Invalid");
        snprintf(st->message, sizeof st->message, "out of memory");
        st->http_code = 0;
        return KUBE_ERR_INVALID;
    }
    long backoff = o.backoff_initial_ms;
    int attempt = 0;
    for (;;) {
        if (stop && *stop) {
            st->http_code = 0;
            snprintf(st->reason, sizeof st->reason, "Stopped");
            snprintf(st->message, sizeof st->message, "watch stopped");
            rc = KUBE_WATCH_STOPPED;
            break;
        }
        char url[8192], tmo[32];
        snprintf(tmo, sizeof tmo, "%d", o.timeout_seconds);
        if (snprintf(url, sizeof url, "%s", path) >= (int)sizeof url ||
            kube_query_add(url, sizeof url, "watch", "1") ||
            kube_query_add(url, sizeof url, "allowWatchBookmarks", "true") ||
            kube_query_add(url, sizeof url, "timeoutSeconds", tmo) ||
            (rv[0] && kube_query_add(url, sizeof url, "resourceVersion", rv)) ||
            (o.label_selector && o.label_selector[0] &&
             kube_query_add(url, sizeof url, "labelSelector", o.label_selector)) ||
            (o.field_selector && o.field_selector[0] &&
             kube_query_add(url, sizeof url, "fieldSelector", o.field_selector))) {
            st->http_code = 0;
            snprintf(st->reason, sizeof st->reason, "Invalid");
            snprintf(st->message, sizeof st->message, "watch %s: path too long", path);
            rc = KUBE_ERR_INVALID;
            break;
        }
        watch_state w = {.lines = lines, .cb = cb, .user = user, .rv = rv, .rvlen = rvlen};
        kube_lines_reset(lines);
        double t0 = 1e3 * mono_seconds();
        LOG_DEBUG("kube", "msg=\"watch connecting\" path=%s rv=%s attempt=%d", LOGV(path), LOGV(rv),
                  attempt);
        /* The server ends the stream after timeout_seconds; give it slack. */
        rc = kube_stream(c, h, url, (o.timeout_seconds + 30) * 1000L, on_chunk, &w, stop, st);
        if (w.cb_stop) {
            rc = KUBE_WATCH_STOPPED;
            snprintf(st->reason, sizeof st->reason, "Stopped");
            snprintf(st->message, sizeof st->message, "watch stopped by its callback");
            break;
        }
        if (w.gone || (rc == KUBE_ERR_HTTP && st->http_code == 410)) {
            if (w.gone) *st = w.err;
            LOG_INFO("kube", "msg=\"watch resourceVersion expired, relist needed\" path=%s "
                     "rv=%s", LOGV(path), LOGV(rv));
            rc = KUBE_WATCH_GONE;
            break;
        }
        /* an ERROR event or a bad line ends the stream from our side too:
         * that is a failure to retry with backoff, not a requested stop */
        if (rc == KUBE_WATCH_STOPPED && !w.error_event) break;
        if (rc == KUBE_ERR_HTTP && (st->http_code == 400 || st->http_code == 401 ||
                                    st->http_code == 403 || st->http_code == 404)) {
            LOG_WARN("kube", "msg=\"watch failed\" path=%s code=%d reason=%s", LOGV(path),
                     st->http_code, LOGV(st->reason));
            break;
        }
        if (rc == KUBE_ERR_INVALID) break;
        /* Retry. A healthy stream that simply ended reconnects at once. */
        int healthy = rc == KUBE_OK && !w.error_event &&
                      (w.events > 0 || 1e3 * mono_seconds() - t0 >= 1000.0);
        if (healthy) {
            backoff = o.backoff_initial_ms;
            attempt = 0;
            LOG_DEBUG("kube", "msg=\"watch stream ended, reconnecting\" path=%s rv=%s",
                      LOGV(path), LOGV(rv));
            continue;
        }
        const char *why = w.error_event ? w.err.message : rc == KUBE_OK ? "stream ended early"
                                                                          : st->message;
        long wait = (long)(backoff * jitter());
        attempt++;
        LOG_WARN("kube", "msg=\"watch interrupted, reconnecting\" path=%s rv=%s "
                 "attempt=%d wait_ms=%ld error=%s", LOGV(path), LOGV(rv), attempt, wait, LOGV(why));
        sleep_ms_stoppable(wait, stop);
        backoff = backoff * 2 > o.backoff_max_ms ? o.backoff_max_ms : backoff * 2;
    }
    kube_lines_free(lines);
    http_client_free(h);
    return rc;
}
