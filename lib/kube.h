/* lib/kube.h - a Kubernetes API client: typed-less REST on cJSON objects.
 *
 * Owns: building API paths and queries (names and selectors escaped), the
 * bearer token on every request (re-read when its file rotates), request
 * timeouts, turning non-2xx answers into a kube_status from the API's Status
 * object, list pagination (limit/continue) and one kept-alive connection per
 * client.
 * Must not: log or report the token (requests are logged at debug level as
 * method, path, status and milliseconds only); retry writes; cache objects.
 * Not thread-safe: one kube_client per thread.
 *
 * Errors: every fallible function returns KUBE_OK (0) or a kube_err code and
 * fills *st: http_code (0 when no response arrived), reason (the Status
 * reason, e.g. "NotFound", "Conflict", "Invalid", or "Transport"), message.
 * Outputs are written only on success.
 */
#ifndef VITJOB_KUBE_H
#define VITJOB_KUBE_H

#include <cjson/cJSON.h>
#include <signal.h>
#include <stddef.h>

#include "http.h"
#include "kubeconfig.h"

typedef enum {
    KUBE_OK = 0,
    KUBE_ERR_HTTP = 1,      /* the API answered with a non-2xx status (st->http_code) */
    KUBE_ERR_TRANSPORT = 2, /* no answer: connect, TLS, timeout (st->http_code == 0) */
    KUBE_ERR_INVALID = 3,   /* bad argument, unparsable response, out of memory */
    KUBE_WATCH_GONE = 4,    /* watch: resourceVersion too old (410); relist and watch again */
    KUBE_WATCH_STOPPED = 5, /* watch: the stop flag or the callback ended it */
} kube_err;

typedef struct {
    int http_code;     /* 0 when no HTTP response arrived */
    char reason[64];   /* Status.reason ("NotFound", "Conflict", "AlreadyExists", "Invalid",
                          "Unauthorized", "Expired", ...), or "Transport" / "Invalid" */
    char message[512]; /* what failed, for logs: "METHOD PATH: CODE REASON: " + Status.message,
                          or the transport error; never holds the token */
    char server_message[400]; /* Status.message alone, as the server wrote it ("" if none),
                                 e.g. for a condition a user reads */
} kube_status;

typedef struct kube_client kube_client;

/* Takes ownership of cfg, on success and on failure. *out: caller frees with
 * kube_client_free. */
int kube_client_new(kube_config *cfg, kube_client **out, kube_status *st);
void kube_client_free(kube_client *c); /* accepts NULL; frees the config too */

kube_config *kube_client_config(kube_client *c);   /* borrowed, valid until kube_client_free */
const char *kube_client_namespace(const kube_client *c); /* the config's namespace (borrowed) */
void kube_client_set_timeout(kube_client *c, long timeout_ms); /* per request; default 30000 */

/* --- paths ------------------------------------------------------------------ */

/* buf = prefix [/namespaces/NS] /resource [/NAME [/SUB]], ns, name and sub
 * percent-escaped. prefix is "/api/v1" or "/apis/GROUP/VERSION"; ns, name,
 * sub may be NULL. Returns 0, or -1 if buf is too small. */
int kube_path(char *buf, size_t buflen, const char *prefix, const char *ns, const char *resource,
              const char *name, const char *sub);
/* Appends "?key=value" or "&key=value" (value percent-escaped). 0, or -1 if too small. */
int kube_query_add(char *buf, size_t buflen, const char *key, const char *value);

/* --- requests ----------------------------------------------------------------
 * path: an API path built with kube_path (may carry a query). *out (may be
 * NULL to discard) is a new cJSON tree the caller frees with cJSON_Delete. */

int kube_get(kube_client *c, const char *path, cJSON **out, kube_status *st);
int kube_create(kube_client *c, const char *path, const cJSON *obj, cJSON **out, kube_status *st);
/* PUT; obj's metadata.resourceVersion, when set, makes it conditional (409 if stale). */
int kube_update(kube_client *c, const char *path, const cJSON *obj, cJSON **out, kube_status *st);
int kube_merge_patch(kube_client *c, const char *path, const cJSON *patch, cJSON **out,
                     kube_status *st);
/* ops: a JSON array of RFC 6902 operations. */
int kube_json_patch(kube_client *c, const char *path, const cJSON *ops, cJSON **out,
                    kube_status *st);
/* grace_seconds < 0: the object's default; propagation NULL, "Background",
 * "Foreground" or "Orphan". *out: the deleted object or a Status. */
int kube_delete(kube_client *c, const char *path, long grace_seconds, const char *propagation,
                cJSON **out, kube_status *st);
/* Any method; content_type and body may be NULL. */
int kube_request(kube_client *c, const char *method, const char *path, const char *content_type,
                 const char *body, cJSON **out, kube_status *st);

typedef struct {
    const char *label_selector; /* NULL = everything */
    const char *field_selector;
    long limit;                 /* page size; 0 = one page with everything */
} kube_list_opts;

/* Lists path (a collection), following `continue` until the last page.
 * *items: a new cJSON array of every object (caller frees with cJSON_Delete);
 * rv: the list's resourceVersion, to start a watch from. opts may be NULL. */
int kube_list(kube_client *c, const char *path, const kube_list_opts *opts, cJSON **items,
              char *rv, size_t rvlen, kube_status *st);

/* Takes each listed object (ownership passes: fn frees it), or NULL when the
 * list starts again from its first page (the continue token expired): every
 * object handed so far is then to be forgotten. Nonzero stops the list. */
typedef int (*kube_list_item_fn)(void *user, cJSON *item);
/* As kube_list, but each object goes to fn as its page arrives, and each page
 * is freed before the next is fetched: a caller that keeps less than the
 * whole object (a cache with a transform) never holds the whole list parsed,
 * only one page. Returns KUBE_OK or an error (fn's refusal: KUBE_ERR_INVALID). */
int kube_list_each(kube_client *c, const char *path, const kube_list_opts *opts,
                   kube_list_item_fn fn, void *user, char *rv, size_t rvlen, kube_status *st);

/* Called after every request and every watch connection of every client in
 * the process, with the method and the HTTP status (0: no answer), e.g. to
 * count API requests by code. Set it once, before clients are used; fn must
 * be thread-safe. NULL removes it. */
typedef void (*kube_observer_fn)(void *user, const char *method, int http_code);
void kube_set_observer(kube_observer_fn fn, void *user);

/* obj.metadata.<field> when it is a string, else NULL (borrowed from obj). */
const char *kube_meta_str(const cJSON *obj, const char *field);

/* True for a 404 (controller-runtime: NotFound is success for deletes). */
int kube_is_not_found(const kube_status *st);
/* True for an answer that sending the same request again cannot change: a
 * 4xx other than 401, 404, 408, 409 and 429 (a 400 or 422 for an invalid
 * object, a 403 from admission or authorization). */
int kube_is_permanent(const kube_status *st);

/* --- for kube_watch.c --------------------------------------------------------- */

/* A new HTTP client with this client's TLS settings (caller frees with http_client_free). */
int kube_client_http_new(kube_client *c, http_client **out, kube_status *st);
/* Streams GET path on h, sending the current token; as http_stream. Returns
 * KUBE_OK when the stream ended normally, KUBE_WATCH_STOPPED when cb or *stop
 * ended it, else an error with st filled (a non-2xx answer gives KUBE_ERR_HTTP). */
int kube_stream(kube_client *c, http_client *h, const char *path, long timeout_ms,
                http_chunk_cb cb, void *user, const volatile sig_atomic_t *stop, kube_status *st);

#endif
