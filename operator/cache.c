/* operator/cache.c - see cache.h. A uthash table of compact JSON texts under
 * a read-write lock. */
#include "cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "kube.h"

/* An object is kept as its compact JSON text, which takes a fifth of the
 * memory of its cJSON tree (a node per value, a malloc per key and string),
 * and parsed again when read: every read returns a fresh tree anyway. */
typedef struct {
    char *key;       /* "namespace/name" */
    size_t ns_len;   /* of the namespace part of key */
    char *text;      /* the object (after the transform), cJSON_PrintUnformatted */
    char *labels;    /* its metadata.labels the same way, or NULL when none */
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
    /* lastTransitionTime: how long a pod has been unschedulable (spec.elastic);
     * message: Kueue's words on an eviction (TerminationTarget) */
    static const char *const cond_keep[] = {"type", "status", "reason", "message",
                                            "lastTransitionTime", NULL};
    static const char *const cs_keep[] = {"name", "state", "lastState", NULL};
    static const char *const state_keep[] = {"terminated", NULL};
    /* nodeName: the lost-pod rule; schedulingGates: Kueue's admission gate */
    static const char *const spec_keep[] = {"nodeName", "schedulingGates", NULL};
    cache_strip_meta(obj);
    keep_only(cJSON_GetObjectItemCaseSensitive(obj, "spec"), spec_keep);
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

void cache_trim_node(cJSON *obj)
{
    static const char *const top_keep[] = {"metadata", "spec", "status", NULL};
    static const char *const meta_keep[] = {"name", "creationTimestamp", NULL};
    static const char *const spec_keep[] = {"unschedulable", NULL};
    static const char *const status_keep[] = {"conditions", NULL};
    static const char *const cond_keep[] = {"type", "status", "lastTransitionTime", NULL};
    keep_only(obj, top_keep);
    keep_only(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), meta_keep);
    keep_only(cJSON_GetObjectItemCaseSensitive(obj, "spec"), spec_keep);
    cJSON *st = cJSON_GetObjectItemCaseSensitive(obj, "status");
    keep_only(st, status_keep);
    cJSON *conds = cJSON_GetObjectItemCaseSensitive(st, "conditions");
    for (cJSON *it = conds ? conds->child : NULL, *next; it; it = next) {
        next = it->next;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "Ready") != 0)
            cJSON_Delete(cJSON_DetachItemViaPointer(conds, it));
        else
            keep_only(it, cond_keep);
    }
}

static void free_entry(entry *e)
{
    free(e->text);
    free(e->labels);
    free(e->key);
    free(e);
}

/* Empties a hash table of entries (the cache's, or a batch's fresh one). */
static void free_entries(entry **table)
{
    entry *e, *tmp;
    HASH_ITER(hh, *table, e, tmp) {
        HASH_DEL(*table, e);
        free_entry(e);
    }
}

void cache_free(obj_cache *c)
{
    if (!c) return;
    free_entries(&c->table);
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

/* The entry of obj (which stays the caller's), or NULL: nameless or no memory. */
static entry *new_entry(const cJSON *obj)
{
    const char *name = kube_meta_str(obj, "name"), *ns = kube_meta_str(obj, "namespace");
    if (!name) return NULL;
    entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->key = make_key(ns, name);
    e->ns_len = strlen(ns ? ns : "");
    e->text = cJSON_PrintUnformatted(obj);
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "labels");
    if (cJSON_IsObject(labels) && labels->child) e->labels = cJSON_PrintUnformatted(labels);
    if (!e->key || !e->text || (cJSON_IsObject(labels) && labels->child && !e->labels)) {
        free_entry(e);
        return NULL;
    }
    return e;
}

int cache_put(obj_cache *c, cJSON *obj)
{
    if (c->transform && obj) c->transform(obj);
    entry *e = new_entry(obj);
    cJSON_Delete(obj);
    if (!e) return -1;
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

/* A relist's objects as entries, before they replace the cache's. */
struct cache_batch {
    cache_transform_fn transform;
    entry *fresh;
};

cache_batch *cache_batch_new(obj_cache *c)
{
    cache_batch *b = calloc(1, sizeof *b);
    if (b) b->transform = c->transform;
    return b;
}

void cache_batch_free(cache_batch *b)
{
    if (!b) return;
    free_entries(&b->fresh);
    free(b);
}

int cache_batch_add(cache_batch *b, cJSON *obj)
{
    if (!obj) {
        free_entries(&b->fresh);
        return 0;
    }
    if (b->transform) b->transform(obj);
    entry *n = new_entry(obj), *dup = NULL;
    int nameless = !kube_meta_str(obj, "name");
    cJSON_Delete(obj);
    if (!n) return nameless ? 0 : -1; /* nameless objects cannot be cached; skip them */
    HASH_REPLACE_STR(b->fresh, key, n, dup);
    if (dup) free_entry(dup);
    return 0;
}

int cache_replace_batch(obj_cache *c, const char *ns, cache_batch *b, cJSON **removed)
{
    entry *e, *tmp;
    int rc = -1;
    if (removed) *removed = NULL;
    cJSON *gone = removed ? cJSON_CreateArray() : NULL;
    if (removed && !gone) goto out;
    pthread_rwlock_wrlock(&c->lock);
    /* drop what was cached in the scope (keeping what was not relisted to
     * report as gone), then add the fresh list: other namespaces stay */
    HASH_ITER(hh, c->table, e, tmp) {
        if (!in_scope(e->key, ns)) continue;
        entry *f = NULL;
        HASH_FIND_STR(b->fresh, e->key, f);
        HASH_DEL(c->table, e);
        if (!f && gone) {
            cJSON *o = cJSON_Parse(e->text);
            if (o) cJSON_AddItemToArray(gone, o);
        }
        free_entry(e);
    }
    HASH_ITER(hh, b->fresh, e, tmp) {
        entry *old = NULL;
        HASH_DEL(b->fresh, e);
        HASH_REPLACE_STR(c->table, key, e, old);
        if (old) free_entry(old);
    }
    pthread_rwlock_unlock(&c->lock);
    if (removed) *removed = gone;
    gone = NULL;
    rc = 0;
out:
    cJSON_Delete(gone);
    cache_batch_free(b);
    return rc;
}

int cache_replace_ns(obj_cache *c, const char *ns, cJSON *items, cJSON **removed)
{
    cache_batch *b = cache_batch_new(c);
    if (removed) *removed = NULL;
    if (!b) {
        cJSON_Delete(items);
        return -1;
    }
    while (cJSON_GetArraySize(items) > 0) cache_batch_add(b, cJSON_DetachItemFromArray(items, 0));
    cJSON_Delete(items);
    return cache_replace_batch(c, ns, b, removed);
}

cJSON *cache_get(obj_cache *c, const char *ns, const char *name)
{
    char *k = make_key(ns, name);
    if (!k) return NULL;
    cJSON *copy = NULL;
    pthread_rwlock_rdlock(&c->lock);
    entry *e = NULL;
    HASH_FIND_STR(c->table, k, e);
    if (e) copy = cJSON_Parse(e->text);
    pthread_rwlock_unlock(&c->lock);
    free(k);
    return copy;
}

/* The text to look for in an entry's labels for key (=value): "key": or
 * "key":"value", escaped as cJSON prints them; caller frees. */
static char *label_pattern(const char *key, const char *value)
{
    cJSON *k = cJSON_CreateString(key), *v = value ? cJSON_CreateString(value) : NULL;
    char *ks = k ? cJSON_PrintUnformatted(k) : NULL, *vs = v ? cJSON_PrintUnformatted(v) : NULL;
    char *out = NULL;
    if (ks && (!value || vs)) {
        size_t n = strlen(ks) + (vs ? strlen(vs) : 0) + 2;
        out = malloc(n);
        if (out) snprintf(out, n, "%s:%s", ks, vs ? vs : "");
    }
    free(ks);
    free(vs);
    cJSON_Delete(k);
    cJSON_Delete(v);
    return out;
}

/* Whether labels text (a flat JSON object of strings, as cJSON prints it)
 * holds pattern as a whole member: after { or , and, with a value, before ,
 * or }. Exact: inside a printed string every quote is escaped. */
static int label_matches(const char *labels, const char *pattern, int with_value)
{
    if (!pattern) return 1;
    if (!labels) return 0;
    size_t n = strlen(pattern);
    for (const char *p = labels; (p = strstr(p, pattern)) != NULL; p++) {
        if (p == labels || (p[-1] != '{' && p[-1] != ',')) continue;
        if (!with_value || p[n] == ',' || p[n] == '}') return 1;
    }
    return 0;
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
    size_t n = 0, ns_len = ns ? strlen(ns) : 0;
    char *pattern = key ? label_pattern(key, value) : NULL;
    if (!out || (key && !pattern)) {
        cJSON_Delete(out);
        free(pattern);
        return NULL;
    }
    pthread_rwlock_rdlock(&c->lock);
    picked = malloc(sizeof *picked * (HASH_COUNT(c->table) + 1));
    if (picked) {
        entry *e, *tmp;
        HASH_ITER(hh, c->table, e, tmp) {
            if (ns && (e->ns_len == 0 || e->ns_len != ns_len || strncmp(e->key, ns, ns_len) != 0))
                continue;
            if (!label_matches(e->labels, pattern, value != NULL)) continue;
            cJSON *copy = cJSON_Parse(e->text);
            if (copy) picked[n++] = copy;
        }
    }
    pthread_rwlock_unlock(&c->lock);
    free(pattern);
    if (!picked) {
        cJSON_Delete(out);
        return NULL;
    }
    qsort(picked, n, sizeof *picked, by_name);
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(out, picked[i]);
    free(picked);
    return out;
}

size_t cache_each(obj_cache *c, const char *ns, cache_each_fn fn, void *user)
{
    size_t n = 0, ns_len = ns ? strlen(ns) : 0;
    entry *e, *tmp;
    pthread_rwlock_rdlock(&c->lock);
    HASH_ITER(hh, c->table, e, tmp) {
        if (ns && (e->ns_len != ns_len || strncmp(e->key, ns, ns_len) != 0)) continue;
        cJSON *copy = cJSON_Parse(e->text);
        if (!copy) continue; /* out of memory: the next walk sees it */
        fn(user, copy);
        cJSON_Delete(copy);
        n++;
    }
    pthread_rwlock_unlock(&c->lock);
    return n;
}

size_t cache_len(obj_cache *c)
{
    pthread_rwlock_rdlock(&c->lock);
    size_t n = HASH_COUNT(c->table);
    pthread_rwlock_unlock(&c->lock);
    return n;
}
