/* operator/cache.c - see cache.h. A uthash table under a read-write lock. */
#include "cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "kube.h"

typedef struct {
    char *key;       /* "namespace/name" */
    cJSON *obj;
    UT_hash_handle hh;
} entry;

struct obj_cache {
    pthread_rwlock_t lock;
    entry *table;
    cache_transform_fn transform;
};

obj_cache *cache_new(void)
{
    obj_cache *c = calloc(1, sizeof *c);
    if (c && pthread_rwlock_init(&c->lock, NULL) != 0) {
        free(c);
        return NULL;
    }
    if (c) c->transform = cache_strip_meta;
    return c;
}

void cache_set_transform(obj_cache *c, cache_transform_fn fn) { c->transform = fn; }

/* ---- transforms ----------------------------------------------------------- */

#define LAST_APPLIED "kubectl.kubernetes.io/last-applied-configuration"

void cache_strip_meta(cJSON *obj)
{
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    if (!cJSON_IsObject(meta)) return;
    cJSON_DeleteItemFromObjectCaseSensitive(meta, "managedFields");
    cJSON *ann = cJSON_GetObjectItemCaseSensitive(meta, "annotations");
    cJSON_DeleteItemFromObjectCaseSensitive(ann, LAST_APPLIED);
    if (cJSON_IsObject(ann) && !ann->child) cJSON_DeleteItemFromObjectCaseSensitive(meta, "annotations");
}

/* Keeps in object o only the members named in keep (NULL-terminated). */
static void keep_only(cJSON *o, const char *const *keep)
{
    if (!cJSON_IsObject(o)) return;
    cJSON *it = o->child;
    while (it) {
        cJSON *next = it->next;
        int kept = 0;
        for (const char *const *k = keep; *k && !kept; k++) kept = it->string && strcmp(it->string, *k) == 0;
        if (!kept) cJSON_Delete(cJSON_DetachItemViaPointer(o, it));
        it = next;
    }
}

void cache_trim_pod(cJSON *obj)
{
    static const char *const status_keep[] = {"phase", "reason", "conditions", "containerStatuses",
                                              NULL};
    static const char *const cond_keep[] = {"type", "status", "reason", NULL};
    static const char *const cs_keep[] = {"name", "state", "lastState", NULL};
    static const char *const state_keep[] = {"terminated", NULL};
    cache_strip_meta(obj);
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "spec");
    cJSON *st = cJSON_GetObjectItemCaseSensitive(obj, "status");
    keep_only(st, status_keep);
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(st, "conditions")) keep_only(it, cond_keep);
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(st, "containerStatuses")) {
        keep_only(it, cs_keep);
        keep_only(cJSON_GetObjectItemCaseSensitive(it, "state"), state_keep);
        keep_only(cJSON_GetObjectItemCaseSensitive(it, "lastState"), state_keep);
    }
}

static void free_entry(entry *e)
{
    cJSON_Delete(e->obj);
    free(e->key);
    free(e);
}

static void clear(obj_cache *c)
{
    entry *e, *tmp;
    HASH_ITER(hh, c->table, e, tmp) {
        HASH_DEL(c->table, e);
        free_entry(e);
    }
}

void cache_free(obj_cache *c)
{
    if (!c) return;
    clear(c);
    pthread_rwlock_destroy(&c->lock);
    free(c);
}

/* "ns/name" (cluster-scoped objects: "/name"); caller frees. */
static char *make_key(const char *ns, const char *name)
{
    size_t n = strlen(ns ? ns : "") + strlen(name) + 2;
    char *k = malloc(n);
    if (k) snprintf(k, n, "%s/%s", ns ? ns : "", name);
    return k;
}

static entry *new_entry(cJSON *obj)
{
    const char *name = kube_meta_str(obj, "name");
    if (!name) return NULL;
    entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->key = make_key(kube_meta_str(obj, "namespace"), name);
    if (!e->key) {
        free(e);
        return NULL;
    }
    e->obj = obj;
    return e;
}

int cache_put(obj_cache *c, cJSON *obj)
{
    if (c->transform && obj) c->transform(obj);
    entry *e = new_entry(obj);
    if (!e) {
        cJSON_Delete(obj);
        return -1;
    }
    pthread_rwlock_wrlock(&c->lock);
    entry *old = NULL;
    HASH_REPLACE_STR(c->table, key, e, old);
    pthread_rwlock_unlock(&c->lock);
    if (old) free_entry(old);
    return 0;
}

void cache_remove(obj_cache *c, const char *ns, const char *name)
{
    char *k = make_key(ns, name);
    if (!k) return;
    pthread_rwlock_wrlock(&c->lock);
    entry *e = NULL;
    HASH_FIND_STR(c->table, k, e);
    if (e) HASH_DEL(c->table, e);
    pthread_rwlock_unlock(&c->lock);
    if (e) free_entry(e);
    free(k);
}

/* 1 when key ("ns/name") lies in namespace ns (NULL: every key does). */
static int in_scope(const char *key, const char *ns)
{
    if (!ns) return 1;
    size_t n = strlen(ns);
    return strncmp(key, ns, n) == 0 && key[n] == '/';
}

int cache_replace(obj_cache *c, cJSON *items, cJSON **removed)
{
    return cache_replace_ns(c, NULL, items, removed);
}

int cache_replace_ns(obj_cache *c, const char *ns, cJSON *items, cJSON **removed)
{
    entry *fresh = NULL, *e, *tmp;
    int rc = -1;
    if (removed) *removed = NULL;
    cJSON *gone = removed ? cJSON_CreateArray() : NULL;
    if (removed && !gone) goto out;
    while (cJSON_GetArraySize(items) > 0) {
        cJSON *obj = cJSON_DetachItemFromArray(items, 0);
        if (c->transform) c->transform(obj);
        entry *n = new_entry(obj), *dup = NULL;
        if (!n) { /* nameless objects cannot be cached; skip them */
            cJSON_Delete(obj);
            continue;
        }
        HASH_REPLACE_STR(fresh, key, n, dup);
        if (dup) free_entry(dup);
    }
    pthread_rwlock_wrlock(&c->lock);
    /* drop what was cached in the scope (keeping what was not relisted to
     * report as gone), then add the fresh list: other namespaces stay */
    HASH_ITER(hh, c->table, e, tmp) {
        if (!in_scope(e->key, ns)) continue;
        entry *f = NULL;
        HASH_FIND_STR(fresh, e->key, f);
        HASH_DEL(c->table, e);
        if (!f && gone) {
            cJSON_AddItemToArray(gone, e->obj);
            e->obj = NULL;
        }
        free_entry(e);
    }
    HASH_ITER(hh, fresh, e, tmp) {
        entry *old = NULL;
        HASH_DEL(fresh, e);
        HASH_REPLACE_STR(c->table, key, e, old);
        if (old) free_entry(old);
    }
    pthread_rwlock_unlock(&c->lock);
    if (removed) *removed = gone;
    gone = NULL;
    rc = 0;
out:
    HASH_ITER(hh, fresh, e, tmp) {
        HASH_DEL(fresh, e);
        free_entry(e);
    }
    cJSON_Delete(gone);
    cJSON_Delete(items);
    return rc;
}

cJSON *cache_get(obj_cache *c, const char *ns, const char *name)
{
    char *k = make_key(ns, name);
    if (!k) return NULL;
    cJSON *copy = NULL;
    pthread_rwlock_rdlock(&c->lock);
    entry *e = NULL;
    HASH_FIND_STR(c->table, k, e);
    if (e) copy = cJSON_Duplicate(e->obj, 1);
    pthread_rwlock_unlock(&c->lock);
    free(k);
    return copy;
}

static int label_matches(const cJSON *obj, const char *key, const char *value)
{
    if (!key) return 1;
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "labels");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(labels, key);
    return cJSON_IsString(v) && (!value || strcmp(v->valuestring, value) == 0);
}

static int by_name(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    const char *nx = kube_meta_str(x, "name"), *ny = kube_meta_str(y, "name");
    return strcmp(nx ? nx : "", ny ? ny : "");
}

cJSON *cache_list(obj_cache *c, const char *ns, const char *key, const char *value)
{
    cJSON *out = cJSON_CreateArray();
    cJSON **picked = NULL;
    size_t n = 0;
    if (!out) return NULL;
    pthread_rwlock_rdlock(&c->lock);
    picked = malloc(sizeof *picked * (HASH_COUNT(c->table) + 1));
    if (picked) {
        entry *e, *tmp;
        HASH_ITER(hh, c->table, e, tmp) {
            const char *ons = kube_meta_str(e->obj, "namespace");
            if (ns && (!ons || strcmp(ons, ns) != 0)) continue;
            if (!label_matches(e->obj, key, value)) continue;
            cJSON *copy = cJSON_Duplicate(e->obj, 1);
            if (copy) picked[n++] = copy;
        }
    }
    pthread_rwlock_unlock(&c->lock);
    if (!picked) {
        cJSON_Delete(out);
        return NULL;
    }
    qsort(picked, n, sizeof *picked, by_name);
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(out, picked[i]);
    free(picked);
    return out;
}

size_t cache_len(obj_cache *c)
{
    pthread_rwlock_rdlock(&c->lock);
    size_t n = HASH_COUNT(c->table);
    pthread_rwlock_unlock(&c->lock);
    return n;
}
