/* operator/httpd.c - see httpd.h.
 *
 * Owns: the listening socket (opened here so that bind errors can be reported
 * precisely, then handed to libmicrohttpd, which closes it on stop), the
 * MHD daemon, and the heartbeat timestamp.
 * Must not: hold any lock of its own while calling metrics_render or the
 * readiness callback, or serve anything but the three read-only paths.
 */
#include "httpd.h"

#include "util.h"

#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct httpd {
    struct MHD_Daemon *daemon;
    httpd_config cfg;
    char addr[256];
    int port;
    _Atomic int64_t heartbeat_ns; /* CLOCK_MONOTONIC */
};

static const char *const metrics_content_type = "text/plain; version=0.0.4; charset=utf-8";
static const char *const text_content_type = "text/plain; charset=utf-8";

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}


/* ---------------------------------------------------------------- socket */

/* Splits "host:port", ":port", "[v6]:port" into host (maybe "") and port. */
static int split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon[1] == '\0') return -1;
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    } else if (memchr(h, ':', hl)) {
        return -1; /* a bare IPv6 address needs brackets */
    }
    size_t pl = strlen(colon + 1);
    if (hl >= hostlen || pl >= portlen || pl > 5) return -1;
    for (size_t i = 0; i < pl; i++)
        if (colon[1 + i] < '0' || colon[1 + i] > '9') return -1;
    if (atoi(colon + 1) > 65535) return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    memcpy(port, colon + 1, pl + 1);
    return 0;
}

/* A bound, listening, non-blocking, close-on-exec socket, or -1. */
static int listen_on(const char *addr, int *port_out, char *err, size_t errlen)
{
    char host[200], port[8];
    if (!addr || split_addr(addr, host, sizeof host, port, sizeof port) != 0) {
        err_printf(err, errlen, "httpd: bad listen address \"%s\" (want host:port or :port)",
               addr ? addr : "(null)");
        return -1;
    }
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = host[0] ? AF_UNSPEC : AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (gai != 0) {
        err_printf(err, errlen, "httpd: resolving \"%s\": %s", addr, gai_strerror(gai));
        return -1;
    }
    int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    if (fd < 0) {
        err_printf(err, errlen, "httpd: socket for \"%s\": %s", addr, strerror(errno));
        freeaddrinfo(res);
        return -1;
    }
    int one = 1;
    const char *step = "setsockopt";
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) goto fail;
    step = "fcntl";
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) goto fail;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) goto fail;
    step = "bind";
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0) goto fail;
    step = "listen";
    if (listen(fd, 64) != 0) goto fail;
    step = "getsockname";
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) goto fail;
    *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    freeaddrinfo(res);
    return fd;
fail:
    err_printf(err, errlen, "httpd: %s \"%s\": %s", step, addr, strerror(errno));
    close(fd);
    freeaddrinfo(res);
    return -1;
}

/* ---------------------------------------------------------------- handlers */

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             const char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE) free((void *)body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status, const char *text)
{
    return reply(c, status, text_content_type, text, strlen(text), MHD_RESPMEM_MUST_COPY);
}

static enum MHD_Result serve_metrics(httpd *h, struct MHD_Connection *c)
{
    if (!h->cfg.metrics) return reply_text(c, MHD_HTTP_NOT_FOUND, "no metrics registry\n");
    char *text = metrics_render(h->cfg.metrics);
    if (!text) return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    return reply(c, MHD_HTTP_OK, metrics_content_type, text, strlen(text), MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result serve_healthz(httpd *h, struct MHD_Connection *c)
{
    double age = (double)(now_ns() - atomic_load(&h->heartbeat_ns)) * 1e-9;
    double limit = h->cfg.liveness_timeout_s;
    if (limit > 0 && age > limit) {
        char body[128];
        snprintf(body, sizeof body, "heartbeat stale: last %.1fs ago (limit %gs)\n", age, limit);
        return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, body);
    }
    return reply_text(c, MHD_HTTP_OK, "ok");
}

static enum MHD_Result serve_readyz(httpd *h, struct MHD_Connection *c)
{
    char why[256] = "";
    if (!h->cfg.ready || h->cfg.ready(h->cfg.ready_arg, why, sizeof why))
        return reply_text(c, MHD_HTTP_OK, "ok");
    why[sizeof why - 1] = '\0';
    char body[300];
    snprintf(body, sizeof body, "not ready%s%s\n", why[0] ? ": " : "", why);
    return reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, body);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)con_cls;
    httpd *h = cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        *upload_data_size = 0; /* answered before any body; MHD discards it */
        return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    if (strcmp(url, "/metrics") == 0) return serve_metrics(h, c);
    if (strcmp(url, "/healthz") == 0) return serve_healthz(h, c);
    if (strcmp(url, "/readyz") == 0) return serve_readyz(h, c);
    return reply_text(c, MHD_HTTP_NOT_FOUND, "not found\n");
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = '\0';
    LOG_WARN("httpd", "msg=%s", LOGVF("libmicrohttpd: %s", msg));
}

/* ---------------------------------------------------------------- public */

int httpd_start(httpd **out, const httpd_config *cfg, char *err, size_t errlen)
{
    if (!out || !cfg) {
        err_printf(err, errlen, "httpd: NULL argument");
        return -1;
    }
    httpd *h = calloc(1, sizeof *h);
    if (!h) {
        err_printf(err, errlen, "httpd: out of memory");
        return -1;
    }
    h->cfg = *cfg;
    snprintf(h->addr, sizeof h->addr, "%s", cfg->addr ? cfg->addr : "");
    h->cfg.addr = h->addr;
    atomic_store(&h->heartbeat_ns, now_ns());
    int fd = listen_on(cfg->addr, &h->port, err, errlen);
    if (fd < 0) {
        free(h);
        return -1;
    }
    h->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
                                 NULL, handle, h,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                                 MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)10,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned int)64,
                                 MHD_OPTION_END);
    if (!h->daemon) {
        err_printf(err, errlen, "httpd: starting libmicrohttpd on \"%s\" failed", h->addr);
        close(fd);
        free(h);
        return -1;
    }
    LOG_INFO("httpd", "msg=\"serving /metrics /healthz /readyz\" addr=%s port=%d", LOGV(h->addr),
             h->port);
    *out = h;
    return 0;
}

int httpd_port(const httpd *h)
{
    return h ? h->port : -1;
}

void httpd_heartbeat(httpd *h)
{
    if (h) atomic_store(&h->heartbeat_ns, now_ns());
}

void httpd_stop(httpd *h)
{
    if (!h) return;
    MHD_stop_daemon(h->daemon); /* joins its thread and closes the listen socket */
    free(h);
}
