/* operator/runner.c - see runner.h.
 *
 * Owns: informers, caches, the work queue and the worker threads.
 * Must not: know what it reconciles.
 */
#include "runner.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "log.h"
#include "util.h"
#include "workqueue.h"

#define MAX_SOURCES 16

struct runner {
    runner_opts o;
    ns_list ns;                   /* a copy of o.namespaces (n = 0: all) */
    obj_cache *cache[MAX_SOURCES];
    informer **inf;               /* n_inf: per source, one per namespace (one for an
                                   * extra source), in the order of the sources */
    int *inf_src;                 /* the source of each informer */
    int n_inf;
    wq *queue;
    pthread_t *workers;
    int n_workers;
    metrics_counter *m_reconcile;
    metrics_histogram *m_duration;
    metrics_gauge *m_depth;
};

void runner_enqueue(runner *r, const char *ns, const char *name)
{
    if (!ns || !name || !ns_list_contains(&r->ns, ns)) return; /* not ours to reconcile */
    char key[512];
    snprintf(key, sizeof key, "%s/%s", ns, name);
    wq_add(r->queue, key);
}

static void on_primary(void *user, const char *type, const cJSON *obj)
{
    (void)type;
    runner_enqueue(user, kube_meta_str(obj, "namespace"), kube_meta_str(obj, "name"));
}

/* An owned object changed: its primary is the key (the label says which). */
static void on_owned(void *user, const char *type, const cJSON *obj)
{
    (void)type;
    runner *r = user;
    const char *owner = json_str(json_at(obj, "metadata", "labels"), r->o.owner_label);
    if (owner) runner_enqueue(r, kube_meta_str(obj, "namespace"), owner);
}

/* Source i is an extra one: watched whole, its changes to its own callback. */
static int extra(const runner_opts *o, int i)
{
    return i > 0 && o->sources[i].on_change != NULL;
}

static void *worker(void *arg)
{
    runner *r = arg;
    kube_client *k = NULL;
    kube_status st;
    while (!*r->o.stop && !wq_shutting_down(r->queue)) {
        if (!k && r->o.factory(r->o.factory_user, &k, &st) != KUBE_OK) {
            LOG_ERROR("reconcile", "msg=%s", LOGVF("cannot make a client: %s", st.message));
            struct timespec ts = {1, 0};
            nanosleep(&ts, NULL);
            continue;
        }
        /* Never decide on half-filled caches: an empty pod cache would read
         * as "every pod was lost" and restart a running gang. */
        if (!runner_synced(r)) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        char *key = NULL;
        if (wq_get(r->queue, &key, 0.5) != 0 || !key) continue;
        char ns[256], name[256];
        const char *slash = strchr(key, '/');
        run_result res = RUN_TERMINAL;
        double t0 = mono_seconds(), requeue = 0;
        if (slash) {
            snprintf(ns, sizeof ns, "%.*s", (int)(slash - key), key);
            snprintf(name, sizeof name, "%s", slash + 1);
            if (ns_list_contains(&r->ns, ns))
                res = r->o.reconcile(r->o.user, k, ns, name, &requeue);
        }
        metrics_histogram_observe(r->m_duration, mono_seconds() - t0);
        static const char *const names[] = {"done", "requeue", "error", "terminal"};
        metrics_counter_add(r->m_reconcile, 1, names[res]);
        if (res == RUN_ERROR) {
            double delay = 0;
            wq_add_rate_limited(r->queue, key, &delay);
        } else {
            wq_forget(r->queue, key);
            if (res == RUN_REQUEUE) wq_add_after(r->queue, key, requeue);
            if (res == RUN_TERMINAL)
                LOG_ERROR("reconcile", "key=%s event=terminal msg=\"not retried until it changes\"",
                          LOGV(key));
        }
        wq_done(r->queue, key);
        metrics_gauge_set(r->m_depth, (double)wq_len(r->queue));
        free(key);
    }
    kube_client_free(k);
    return NULL;
}

int runner_start(const runner_opts *o, runner **out, char *err, size_t errlen)
{
    if (o->n_sources < 1 || o->n_sources > MAX_SOURCES) {
        snprintf(err, errlen, "runner: %d sources (1..%d)", o->n_sources, MAX_SOURCES);
        return -1;
    }
    runner *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    r->o = *o;
    *out = r; /* before any thread runs: the reconciler may look into it */
    r->queue = wq_new();
    int n_ns = o->namespaces ? o->namespaces->n : 0;
    if (n_ns > 0) {
        r->ns.names = calloc((size_t)n_ns, sizeof *r->ns.names);
        for (int j = 0; r->ns.names && j < n_ns; j++) {
            if (!(r->ns.names[r->ns.n] = strdup(o->namespaces->names[j]))) break;
            r->ns.n++;
        }
        if (r->ns.n != n_ns) {
            snprintf(err, errlen, "runner: out of memory");
            r->ns.n = n_ns; /* keeps an all-namespaces list from standing in */
            goto fail;
        }
    }
    int per_source = n_ns > 0 ? n_ns : 1, max_inf = 0;
    for (int i = 0; i < o->n_sources; i++) max_inf += extra(o, i) ? 1 : per_source;
    r->inf = calloc((size_t)max_inf, sizeof *r->inf);
    r->inf_src = calloc((size_t)max_inf, sizeof *r->inf_src);
    r->n_inf = r->inf && r->inf_src ? max_inf : 0;
    int k = 0; /* the next informer */
    char merr[256] = "";
    r->m_reconcile = metrics_counter_new(o->metrics, "vitjob_reconcile_total",
                                         "Reconciles by result.", merr, sizeof merr, 1, "result");
    r->m_duration = metrics_histogram_new(o->metrics, "vitjob_reconcile_duration_seconds",
                                          "Time spent in one reconcile.", NULL, 0, merr,
                                          sizeof merr, 0);
    r->m_depth = metrics_gauge_new(o->metrics, "vitjob_workqueue_depth",
                                   "Keys waiting in the work queue.", merr, sizeof merr, 0);
    if (!r->queue || !r->inf || !r->inf_src || !r->m_reconcile || !r->m_duration || !r->m_depth) {
        snprintf(err, errlen, "runner: cannot set up queue or metrics: %s", merr);
        goto fail;
    }
    for (int i = 0; i < o->n_sources; i++) {
        r->cache[i] = cache_new();
        if (!r->cache[i]) {
            snprintf(err, errlen, "runner: out of memory");
            goto fail;
        }
        const runner_source *src = &o->sources[i];
        if (src->transform) cache_set_transform(r->cache[i], src->transform);
        int whole = extra(o, i);
        for (int j = 0; j < (whole ? 1 : per_source); j++) {
            const char *ns = n_ns > 0 && !whole ? r->ns.names[j] : NULL;
            char path[512];
            if (kube_path(path, sizeof path, src->prefix, ns, src->resource, NULL, NULL)) {
                snprintf(err, errlen, "runner: path too long for the %s informer", src->resource);
                goto fail;
            }
            int owned = i > 0 && !whole;
            informer_opts io = {.name = src->resource, .path = path, .namespace = ns,
                                .label_selector = owned ? o->owner_label : NULL,
                                .cache = r->cache[i],
                                .on_change = whole ? src->on_change : owned ? on_owned : on_primary,
                                .user = whole ? src->on_change_user : r, .factory = o->factory,
                                .factory_user = o->factory_user, .stop = o->stop,
                                .optional = src->optional};
            r->inf_src[k] = i;
            if (informer_start(&io, &r->inf[k++]) != 0) {
                snprintf(err, errlen, "runner: cannot start the %s informer", src->resource);
                goto fail;
            }
        }
    }
    int n_workers = o->workers > 0 ? o->workers : 1;
    r->workers = calloc((size_t)n_workers, sizeof *r->workers);
    if (!r->workers) {
        snprintf(err, errlen, "runner: out of memory");
        goto fail;
    }
    for (int i = 0; i < n_workers; i++) {
        r->n_workers = i + 1;
        if (pthread_create(&r->workers[i], NULL, worker, r) != 0) {
            r->n_workers = i;
            snprintf(err, errlen, "runner: cannot start worker %d", i);
            goto fail;
        }
    }
    return 0;
fail:
    /* the caller's stop flag ends the threads we started */
    *(volatile sig_atomic_t *)o->stop = 1;
    *out = NULL;
    runner_join(r);
    return -1;
}

obj_cache *runner_cache(runner *r, int i)
{
    return (i >= 0 && i < r->o.n_sources) ? r->cache[i] : NULL;
}

int runner_synced(const runner *r)
{
    if (r->n_inf == 0) return 0;
    for (int i = 0; i < r->n_inf; i++)
        if (!r->o.sources[r->inf_src[i]].optional && (!r->inf[i] || !informer_synced(r->inf[i])))
            return 0;
    return 1;
}

void runner_join(runner *r)
{
    if (!r) return;
    if (r->queue) wq_shutdown(r->queue);
    for (int i = 0; i < r->n_workers; i++) pthread_join(r->workers[i], NULL);
    free(r->workers);
    for (int i = 0; i < r->n_inf; i++) informer_join(r->inf[i]);
    free(r->inf);
    free(r->inf_src);
    for (int i = 0; i < r->o.n_sources; i++) cache_free(r->cache[i]);
    ns_list_free(&r->ns);
    wq_free(r->queue);
    free(r);
}
