/* lib/kube_watch.h - Kubernetes watch streams.
 *
 * Owns: splitting a chunked stream into lines at arbitrary chunk boundaries
 * (kube_lines), and the watch loop: watch=1&allowWatchBookmarks=true from a
 * resourceVersion, events to a callback, the resourceVersion tracked on every
 * event and bookmark, 410 Gone reported to the caller (who relists), and
 * reconnection with capped exponential backoff and jitter after stream ends
 * and transport errors.
 * Must not: relist or cache objects itself (that is the informer's job), log
 * the token, or block past the stop flag for more than about a second.
 */
#ifndef VITJOB_KUBE_WATCH_H
#define VITJOB_KUBE_WATCH_H

#include <cjson/cJSON.h>
#include <signal.h>
#include <stddef.h>

#include "kube.h"

/* ---------------------------------------------------------------- lines */

typedef struct kube_lines kube_lines;

/* line: borrowed for the call, without its '\n' (a trailing '\r' is dropped
 * too), NUL-terminated. Return nonzero to stop feeding. Blank lines are skipped. */
typedef int (*kube_line_cb)(const char *line, size_t len, void *user);

/* max_line: longest line accepted (0 = 64 MiB). *out: free with kube_lines_free. */
int kube_lines_new(size_t max_line, kube_lines **out);
void kube_lines_free(kube_lines *l); /* accepts NULL */
/* Feeds one chunk; calls cb for every line it completes. Returns 0, the
 * callback's nonzero value (the rest of the chunk is dropped), or -1 when a
 * line exceeds max_line or memory runs out. */
int kube_lines_feed(kube_lines *l, const char *data, size_t len, kube_line_cb cb, void *user);
size_t kube_lines_pending(const kube_lines *l); /* bytes of an unfinished line held */
void kube_lines_reset(kube_lines *l);            /* drops an unfinished line */

/* ---------------------------------------------------------------- watch */

/* type: "ADDED", "MODIFIED", "DELETED" or "BOOKMARK" (the object then carries
 * only metadata.resourceVersion; ignore it if you do not care). object is
 * borrowed for the call (cJSON_Duplicate to keep it). Return nonzero to end
 * the watch (kube_watch_run returns KUBE_WATCH_STOPPED). */
typedef int (*kube_watch_cb)(const char *type, const cJSON *object, void *user);

typedef struct {
    const char *label_selector;  /* NULL = all */
    const char *field_selector;
    int timeout_seconds;         /* server-side length of one connection; 0 = 300 */
    long backoff_initial_ms;     /* 0 = 200 */
    long backoff_max_ms;         /* 0 = 30000 */
} kube_watch_opts;

/* Watches path (a collection) from *rv ("" = the current state, as ADDED
 * events) until stopped. rv (rvlen bytes) is updated after every event and
 * bookmark, so a later call resumes where this one ended.
 * Returns KUBE_WATCH_STOPPED (*stop became nonzero or cb returned nonzero),
 * KUBE_WATCH_GONE (rv is too old: relist, then watch from the list's rv), or
 * KUBE_ERR_HTTP for answers that retrying cannot fix (400, 401, 403, 404),
 * with st filled. Stream ends, transport errors, other statuses and ERROR
 * events are retried with backoff. stop may be NULL; opts may be NULL. */
int kube_watch_run(kube_client *c, const char *path, const kube_watch_opts *opts, char *rv,
                   size_t rvlen, kube_watch_cb cb, void *user, const volatile sig_atomic_t *stop,
                   kube_status *st);

#endif
