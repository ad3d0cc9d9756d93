/* operator/informer.h - list + watch of one resource into a cache.
 *
 * Owns: one thread per resource that lists the collection (pages followed),
 * replaces the cache (its namespace's part of it) with the result, then watches from the list's
 * resourceVersion, applying every event to the cache; on 410 Gone it relists;
 * transport errors and stream ends are retried by kube_watch_run with backoff.
 * After every change it calls on_change, which only enqueues keys: watches
 * never reconcile, the work queue's workers do (docs/design.md, "Operator and
 * worker": the informers all feed one work queue).
 * Must not: share its kube_client (clients are not thread-safe: it makes its
 * own through the factory) or decide anything about the objects.
 */
#ifndef VITJOB_INFORMER_H
#define VITJOB_INFORMER_H

#include <signal.h>

#include "cache.h"
#include "kube.h"

/* Makes a new client for a thread (caller of the factory frees it). */
typedef int (*kube_client_factory)(void *user, kube_client **out, kube_status *st);

/* type: "ADDED", "MODIFIED", "DELETED" (also for objects gone at a relist);
 * obj is borrowed for the call. After a list, the ADDED calls are made with
 * the cached (transformed) copies, under the cache's read lock: on_change
 * must not call into the cache (it only enqueues keys). */
typedef void (*informer_change_fn)(void *user, const char *type, const cJSON *obj);

typedef struct {
    const char *name;             /* for logs: "vitjobs", "pods", ... */
    const char *path;             /* the collection, e.g. /api/v1/pods (all namespaces) */
    const char *namespace;        /* the path's namespace, NULL = all: a relist replaces
                                   * only that namespace's objects in the cache, which
                                   * may be shared with the informers of others */
    const char *label_selector;   /* NULL = all */
    obj_cache *cache;             /* borrowed; filled by the informer */
    informer_change_fn on_change;
    void *user;
    kube_client_factory factory;
    void *factory_user;
    const volatile sig_atomic_t *stop; /* set to end the thread */
    const char *optional;         /* NULL: the resource is needed. Else what the operator
                                   * does without it, for the log: a list the server
                                   * refuses (401, 403: RBAC) is logged once, with these
                                   * words, and retried every INFORMER_REFUSED_RETRY_S in
                                   * silence (the next success logs event=listed) */
} informer_opts;

/* How often an optional informer whose list was refused tries again. */
#define INFORMER_REFUSED_RETRY_S 300

typedef struct informer informer;

/* Starts the thread. Strings in opts are copied. *out: caller ends it with
 * informer_join (after setting *stop). Returns 0 or -1. */
int informer_start(const informer_opts *opts, informer **out);
/* 1 once the first list has been cached (never, for an optional informer
 * while its list is refused). */
int informer_synced(const informer *inf);
/* Number of lists done (1 + relists). */
int informer_lists(const informer *inf);
/* Waits for the thread (set *stop first) and frees it. Accepts NULL. */
void informer_join(informer *inf);

#endif
