/* operator/informer.c - see informer.h. */
#include "informer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube_watch.h"
#include "log.h"

struct informer {
    informer_opts o;
    char *name, *path, *selector, *ns, *optional;
    pthread_t thread;
    atomic_int synced, lists;
};

/* Sleeps s seconds in 0.1 s slices, returning early when *stop is set. */
static void sleep_s(const informer *inf, double s)
{
    for (double left = s; left > 0 && !*inf->o.stop; left -= 0.1) {
        struct timespec ts = {0, (long)((left < 0.1 ? left : 0.1) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static int on_event(const char *type, const cJSON *obj, void *user)
{
    informer *inf = user;
    if (strcmp(type, "BOOKMARK") == 0) return 0;
    if (strcmp(type, "DELETED") == 0) {
        const char *name = kube_meta_str(obj, "name");
        if (name) cache_remove(inf->o.cache, kube_meta_str(obj, "namespace"), name);
    } else {
        cJSON *copy = cJSON_Duplicate(obj, 1);
        if (copy) cache_put(inf->o.cache, copy);
    }
    if (inf->o.on_change) inf->o.on_change(inf->o.user, type, obj);
    return 0;
}

/* Objects per list page (-DINFORMER_PAGE=n to measure another). */
#ifndef INFORMER_PAGE
#define INFORMER_PAGE 100
#endif

/* A list in progress: its objects go into the batch as they arrive. */
typedef struct {
    cache_batch *batch;
    int n; /* objects taken in (since the list last started again) */
} listing;

static int take_item(void *user, cJSON *item)
{
    listing *ls = user;
    ls->n = item ? ls->n + 1 : 0;
    return cache_batch_add(ls->batch, item);
}

static void notify_added(void *user, const cJSON *obj)
{
    informer *inf = user;
    inf->o.on_change(inf->o.user, "ADDED", obj);
}

/* An optional informer's list or watch the server refused (401, 403: its
 * RBAC): logged once while it lasts, then a slow retry. Returns 1 when so
 * (after the wait), else 0. */
static int optional_refused(informer *inf, const char *event, const kube_status *st, int *refused)
{
    if (!inf->o.optional || (st->http_code != 401 && st->http_code != 403)) return 0;
    if (!*refused)
        LOG_WARN("informer", "resource=%s event=%s code=%d msg=%s without=%s retry_s=%d",
                 LOGV(inf->name), LOGV(event), st->http_code,
                 LOGV(st->server_message[0] ? st->server_message : st->message),
                 LOGV(inf->o.optional), INFORMER_REFUSED_RETRY_S);
    *refused = 1;
    sleep_s(inf, INFORMER_REFUSED_RETRY_S);
    return 1;
}

static void *run(void *arg)
{
    informer *inf = arg;
    kube_client *c = NULL;
    kube_status st;
    double backoff = 0.2;
    int list_refused = 0, watch_refused = 0; /* an optional informer's: logged once */
    while (!*inf->o.stop) {
        if (!c && inf->o.factory(inf->o.factory_user, &c, &st) != KUBE_OK) {
            LOG_ERROR("informer", "resource=%s msg=%s", LOGV(inf->name),
                      LOGVF("cannot make a client: %s", st.message));
            sleep_s(inf, backoff);
            backoff = backoff * 2 > 30 ? 30 : backoff * 2;
            continue;
        }
        /* list */
        /* The list goes into the cache a page at a time (each object
         * transformed as it arrives), and the ADDED calls are made from the
         * cache afterwards, one object parsed at a time: no whole list is
         * ever held parsed (issue 28: at 5,000 jobs that was the peak of
         * the operator's memory at a start). Pages of 100: one page parsed
         * is a few MiB even of pods as a real server writes them. */
        kube_list_opts lo = {.label_selector = inf->selector, .field_selector = NULL,
                             .limit = INFORMER_PAGE};
        char rv[64] = "";
        listing ls = {cache_batch_new(inf->o.cache), 0};
        if (!ls.batch ||
            kube_list_each(c, inf->path, &lo, take_item, &ls, rv, sizeof rv, &st) != KUBE_OK) {
            if (!ls.batch) snprintf(st.message, sizeof st.message, "out of memory");
            cache_batch_free(ls.batch);
            if (ls.batch && optional_refused(inf, "list_refused", &st, &list_refused)) continue;
            LOG_WARN("informer", "resource=%s event=list_failed code=%d msg=%s retry_s=%.1f",
                     LOGV(inf->name), ls.batch ? st.http_code : 0, LOGV(st.message), backoff);
            sleep_s(inf, backoff);
            backoff = backoff * 2 > 30 ? 30 : backoff * 2;
            continue;
        }
        int n_items = ls.n;
        list_refused = 0;
        cJSON *removed = NULL;
        cache_replace_batch(inf->o.cache, inf->ns, ls.batch, &removed);
        atomic_fetch_add(&inf->lists, 1);
        atomic_store(&inf->synced, 1);
        LOG_INFO("informer", "resource=%s event=listed items=%d rv=%s namespace=%s",
                 LOGV(inf->name), n_items, LOGV(rv), LOGV(inf->ns ? inf->ns : "(all)"));
        if (inf->o.on_change) {
            cJSON *o;
            cJSON_ArrayForEach(o, removed) inf->o.on_change(inf->o.user, "DELETED", o);
            cache_each(inf->o.cache, inf->ns, notify_added, inf);
        }
        cJSON_Delete(removed);
        /* watch until 410 Gone (relist) or stop */
        kube_watch_opts wo = {.label_selector = inf->selector, .timeout_seconds = 300};
        int rc = kube_watch_run(c, inf->path, &wo, rv, sizeof rv, on_event, inf, inf->o.stop, &st);
        if (rc == KUBE_WATCH_GONE || rc == KUBE_OK) {
            backoff = 0.2;
            watch_refused = 0;
        }
        if (rc == KUBE_WATCH_GONE)
            LOG_INFO("informer", "resource=%s event=relist reason=\"resourceVersion too old\"",
                     LOGV(inf->name));
        else if (rc != KUBE_WATCH_STOPPED && optional_refused(inf, "watch_refused", &st, &watch_refused))
            continue;
        else if (rc != KUBE_WATCH_STOPPED) {
            /* e.g. 403 on watch while list works: relist, but not in a hot loop */
            LOG_WARN("informer", "resource=%s event=watch_ended code=%d msg=%s retry_s=%.1f",
                     LOGV(inf->name), st.http_code, LOGV(st.message), backoff);
            sleep_s(inf, backoff);
            backoff = backoff * 2 > 30 ? 30 : backoff * 2;
        }
    }
    kube_client_free(c);
    return NULL;
}

int informer_start(const informer_opts *opts, informer **out)
{
    informer *inf = calloc(1, sizeof *inf);
    if (!inf) return -1;
    inf->o = *opts;
    inf->name = strdup(opts->name);
    inf->path = strdup(opts->path);
    inf->selector = opts->label_selector ? strdup(opts->label_selector) : NULL;
    inf->ns = opts->namespace ? strdup(opts->namespace) : NULL;
    inf->optional = opts->optional ? strdup(opts->optional) : NULL;
    inf->o.optional = inf->optional;
    if (!inf->name || !inf->path || (opts->label_selector && !inf->selector) ||
        (opts->namespace && !inf->ns) || (opts->optional && !inf->optional) ||
        pthread_create(&inf->thread, NULL, run, inf) != 0) {
        free(inf->optional);
        free(inf->ns);
        free(inf->name);
        free(inf->path);
        free(inf->selector);
        free(inf);
        return -1;
    }
    *out = inf;
    return 0;
}

int informer_synced(const informer *inf) { return atomic_load(&((informer *)inf)->synced); }
int informer_lists(const informer *inf) { return atomic_load(&((informer *)inf)->lists); }

void informer_join(informer *inf)
{
    if (!inf) return;
    pthread_join(inf->thread, NULL);
    free(inf->name);
    free(inf->path);
    free(inf->selector);
    free(inf->ns);
    free(inf->optional);
    free(inf);
}
