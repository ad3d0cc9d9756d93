/* lib/http.h - a small HTTPS client on one libcurl easy handle.
 *
 * Owns: one CURL easy handle per client (so connections are kept alive and
 * reused between requests), TLS material handed over as in-memory PEM blobs,
 * per-request timeouts, and streaming responses to a callback.
 * Must not: log request headers or bodies (they carry bearer tokens), retry,
 * or know anything about Kubernetes. Not thread-safe: one client per thread,
 * and never re-entered from its own stream callback.
 * Signals: handles run with CURLOPT_NOSIGNAL (safe in threads), so a program
 * using this module must ignore SIGPIPE (signal(SIGPIPE, SIG_IGN)) in main:
 * a peer that dies mid-write must not kill the process.
 */
#ifndef VITJOB_HTTP_H
#define VITJOB_HTTP_H

#include <signal.h>
#include <stddef.h>

typedef struct http_client http_client;

typedef struct {
    /* PEM blobs; borrowed: copied by http_client_new (NULL/0 = not set). */
    const char *ca_pem;      size_t ca_len;    /* trust only this CA (else the system store) */
    const char *cert_pem;    size_t cert_len;  /* client certificate */
    const char *key_pem;     size_t key_len;   /* client key */
    int insecure;                              /* skip server certificate verification */
    long connect_timeout_ms;                   /* 0 = 10000 */
} http_options;

typedef struct {
    long status;  /* HTTP status code; 0 if no response */
    char *body;   /* NUL-terminated (len excludes the NUL); caller frees with http_response_free */
    size_t len;
} http_response;

/* curl_global_init, once per process (pthread_once); http_client_new calls it. */
int http_global_init(char *err, size_t errlen);

/* 0 on success (*out owned by the caller, free with http_client_free), -1 with err filled. */
int http_client_new(const http_options *opts, http_client **out, char *err, size_t errlen);
void http_client_free(http_client *c); /* accepts NULL */

/* New connections the last request had to open (0 = a kept-alive one was reused). */
long http_client_last_connects(http_client *c);

/* One request. headers: NULL-terminated array of "Name: value" (borrowed; may be
 * NULL). body may be NULL. timeout_ms bounds the whole request (0 = 30000).
 * Returns 0 when a response arrived (any status; resp filled, caller frees it),
 * or -1 on a transport error with err filled ("curl error N: ...") and resp
 * untouched. */
int http_request(http_client *c, const char *method, const char *url, const char *const *headers,
                 const char *body, size_t body_len, long timeout_ms, http_response *resp,
                 char *err, size_t errlen);

void http_response_free(http_response *r); /* frees r->body; accepts NULL */

/* Streaming GET. For a 2xx response each received chunk goes to cb as it
 * arrives (data borrowed for the call); cb returns nonzero to stop the
 * transfer. A non-2xx response is collected into *error_body instead (caller
 * frees with free(); may be NULL). stop: polled while waiting for data (about
 * every second or on each chunk); when *stop becomes nonzero the transfer ends.
 * Returns 0 when the stream ended normally (server closed it, status in
 * *status), 1 when cb or *stop ended it, -1 on a transport error (err filled). */
typedef int (*http_chunk_cb)(const char *data, size_t len, void *user);
int http_stream(http_client *c, const char *url, const char *const *headers, long timeout_ms,
                http_chunk_cb cb, void *user, const volatile sig_atomic_t *stop, long *status,
                char **error_body, char *err, size_t errlen);

#endif
