/* operator/httpd.h - the operator's HTTP endpoint (libmicrohttpd): Prometheus
 * metrics and the Kubernetes liveness and readiness probes.
 *
 *   GET /metrics  200, text/plain; version=0.0.4 (metrics_render of the registry)
 *   GET /healthz  200 "ok" while the main loop's heartbeat is fresh;
 *                 500 "heartbeat stale: ..." once it is older than the threshold
 *   GET /readyz   200 "ok" when the readiness callback says ready (e.g. the
 *                 informer caches have synced), else 503 with its reason
 *   other paths   404;  methods other than GET and HEAD: 405 (Allow: GET, HEAD)
 *
 * Owns: the listening socket and libmicrohttpd's one internal polling thread,
 * which runs the handlers (and so the readiness callback and metrics_render).
 * Must not: touch operator state other than through the registry and the
 * callback, or block the main loop (httpd_heartbeat is a single atomic store).
 */
#ifndef VITJOB_HTTPD_H
#define VITJOB_HTTPD_H

#include <stddef.h>

#include "metrics.h"

typedef struct httpd httpd;

/* Called on the HTTP thread for each /readyz; must be thread-safe and quick.
 * Returns nonzero when ready; may write a short reason to why (NUL-terminated,
 * at most whylen bytes) when not. */
typedef int (*httpd_ready_fn)(void *arg, char *why, size_t whylen);

typedef struct httpd_config {
    /* "host:port", ":port" (all IPv4 interfaces), "[v6addr]:port"; port 0
     * picks a free port (see httpd_port). */
    const char *addr;
    /* Borrowed; must outlive the server. NULL: /metrics answers 404. */
    metrics_registry *metrics;
    /* NULL: always ready. */
    httpd_ready_fn ready;
    void *ready_arg;
    /* /healthz fails once the last httpd_heartbeat is older than this;
     * <= 0 disables the check (always 200). */
    double liveness_timeout_s;
} httpd_config;

/* Binds, listens and starts serving. On success returns 0 and sets *out (caller
 * frees with httpd_stop); on failure returns -1, writes a message naming the
 * address to err, and leaves *out untouched. Counts as a first heartbeat. */
int httpd_start(httpd **out, const httpd_config *cfg, char *err, size_t errlen);
/* The bound TCP port (the real one when port 0 was asked). */
int httpd_port(const httpd *h);
/* Records that the main loop is alive. Safe from any thread. Accepts NULL. */
void httpd_heartbeat(httpd *h);
/* Stops serving, waits for in-flight requests, closes the socket, frees.
 * Accepts NULL. */
void httpd_stop(httpd *h);

#endif
