/* operator/runner.h - the generic controller runner, as controller-runtime's
 * Controller: informers into caches, a de-duplicating rate-limited work queue
 * of "namespace/name" keys of the primary kind, and N worker threads calling
 * a reconciler.
 *
 * Owns: one cache per source, filled by one informer per watched namespace
 * (one for all namespaces when none is named) (sources[0] is the primary kind:
 * its changes enqueue its own key; the other sources are owned objects whose
 * `owner_label` names their primary, whose key they enqueue; an extra source
 * with its own on_change, e.g. cluster-scoped Nodes, has one informer and
 * may be optional: see runner_source), the queue, the
 * workers, waiting for synced caches before any reconcile, and what each
 * result means: done (forgotten), requeue after N seconds, error (requeued
 * with backoff), terminal (logged, forgotten, not requeued: retrying cannot
 * help until the object changes). The metrics vitjob_reconcile_total{result},
 * vitjob_reconcile_duration_seconds and vitjob_workqueue_depth.
 * Must not: know what it reconciles, or keep state that cannot be rebuilt by
 * relisting.
 */
#ifndef VITJOB_RUNNER_H
#define VITJOB_RUNNER_H

#include <signal.h>

#include "cache.h"
#include "informer.h"
#include "metrics.h"
#include "nslist.h"

typedef enum { RUN_DONE, RUN_REQUEUE, RUN_ERROR, RUN_TERMINAL } run_result;

typedef struct {
    const char *prefix;   /* "/api/v1" or "/apis/GROUP/VERSION" */
    const char *resource; /* plural: "pods" */
    cache_transform_fn transform; /* what its cache keeps; NULL = cache_strip_meta */
    /* An extra source (never sources[0]), e.g. Nodes: with on_change set,
     * its changes go to on_change(on_change_user, ...) (which may call
     * runner_enqueue) instead of enqueuing an owner; it is watched whole,
     * by one informer, without the owner label (cluster-scoped kinds) */
    informer_change_fn on_change;
    void *on_change_user;
    /* Non-NULL: the runner works without this source (informer_opts.optional:
     * what it does without it). It does not gate runner_synced, so a
     * reconcile may find its cache empty, or not yet full. */
    const char *optional;
} runner_source;

/* Reconciles ns/name with client k (the worker thread's own). *requeue_s is
 * read when RUN_REQUEUE is returned. */
typedef run_result (*runner_reconcile_fn)(void *user, kube_client *k, const char *ns,
                                          const char *name, double *requeue_s);

typedef struct {
    const runner_source *sources; /* borrowed; sources[0] is the primary kind */
    int n_sources;
    const char *owner_label;      /* label of owned objects naming their primary */
    runner_reconcile_fn reconcile;
    void *user;
    kube_client_factory factory;  /* a client per thread */
    void *factory_user;
    const ns_list *namespaces;    /* borrowed; NULL or empty = all namespaces; else an
                                   * informer per source per namespace, all feeding
                                   * the one queue, and keys of other namespaces are
                                   * never reconciled */
    int workers;                  /* reconcile threads, >= 1 */
    metrics_registry *metrics;    /* borrowed */
    const volatile sig_atomic_t *stop;
} runner_opts;

typedef struct runner runner;

/* Starts informers and workers. *out is set before any thread starts (the
 * reconciler may use it at once); the caller ends it with runner_join after
 * setting *stop. Returns 0, or -1 with a message in err and *out NULL. */
int runner_start(const runner_opts *opts, runner **out, char *err, size_t errlen);
/* The cache of source i (borrowed, valid until runner_join). */
obj_cache *runner_cache(runner *r, int i);
/* 1 when every informer of a source that is not optional has listed once. */
int runner_synced(const runner *r);
/* Queues ns/name for a reconcile (de-duplicated; dropped when ns is not
 * watched), as the informers do: for an extra source's on_change. */
void runner_enqueue(runner *r, const char *ns, const char *name);
/* Stops the queue, waits for workers and informers, frees. Accepts NULL. */
void runner_join(runner *r);

#endif
