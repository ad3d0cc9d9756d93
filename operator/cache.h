/* operator/cache.h - an informer's local cache of one resource.
 *
 * Owns: the latest copy of each object (cJSON), keyed by "namespace/name",
 * and the lookups reconcile needs (by key, by label). Thread-safe: informer
 * threads write, reconcile workers read copies.
 * Must not: talk to the API server (operator/informer.c fills it), or hand out
 * pointers into itself: every read returns a deep copy the caller frees.
 * The cache is only a cache: it can always be rebuilt by a relist.
 */
#ifndef VITJOB_CACHE_H
#define VITJOB_CACHE_H

#include <stddef.h>

#include <cjson/cJSON.h>

typedef struct obj_cache obj_cache;

/* A transform, as client-go's cache.TransformFunc: edits an object in place
 * as it enters the cache (cache_put, cache_replace*), so the cache keeps only
 * what the reconcile reads. The objects a watch hands to informer callbacks
 * are not transformed; after a list they are the cached copies. */
typedef void (*cache_transform_fn)(cJSON *obj);

/* Returns a new empty cache (caller frees with cache_free), or NULL. Its
 * transform is cache_strip_meta. */
obj_cache *cache_new(void);
void cache_free(obj_cache *c); /* accepts NULL */
/* Sets the cache's transform (NULL: none); call before filling it. */
void cache_set_transform(obj_cache *c, cache_transform_fn fn);

/* Drops what no reconcile reads from any object: metadata.managedFields
 * (the server's field ownership, often the largest part of an object) and
 * the annotation kubectl.kubernetes.io/last-applied-configuration (a copy of
 * the object as `kubectl apply` last sent it). */
void cache_strip_meta(cJSON *obj);
/* cache_strip_meta, then what decide_pods.c does not read of a pod: of its
 * spec (rendered by the operator) all but nodeName (the lost-pod rule) and
 * schedulingGates (Kueue's admission gate), and of its status all but
 * phase, reason, conditions[].{type, status, reason, message,
 * lastTransitionTime} and containerStatuses[].{name, state.terminated,
 * lastState.terminated}. */
void cache_trim_pod(cJSON *obj);

/* What the elastic rule reads of a Node (operator/nodehealth.h,
 * vj_node_ready_since): metadata.{name, creationTimestamp},
 * spec.unschedulable and the Ready condition's {type, status,
 * lastTransitionTime}; nothing else (a real Node carries images, labels,
 * addresses and capacity: kilobytes each, thousands of nodes). */
void cache_trim_node(cJSON *obj);

/* Inserts or replaces the object under its metadata.namespace/name. Takes
 * ownership of obj (freed on error). Returns 0, or -1 if obj has no name. */
int cache_put(obj_cache *c, cJSON *obj);
/* Removes ns/name if present. */
void cache_remove(obj_cache *c, const char *ns, const char *name);
/* Replaces the whole contents with `items` (a cJSON array, ownership taken),
 * as after a relist. If removed is not NULL, it receives a cJSON array of the
 * objects that were cached but are not in items (caller frees), so that
 * their owners can be re-queued. Returns 0 or -1 (out of memory). */
int cache_replace(obj_cache *c, cJSON *items, cJSON **removed);
/* As cache_replace, but only for namespace ns (NULL = all, as cache_replace):
 * objects cached in other namespaces are kept, so that one cache can be
 * filled by an informer per watched namespace, each relisting its own. */
int cache_replace_ns(obj_cache *c, const char *ns, cJSON *items, cJSON **removed);

/* A relist taken in object by object (as kube_list_each hands them out), so
 * that no whole list is ever held parsed: each object is transformed and
 * kept as the cache keeps it as it arrives, and the batch then replaces the
 * cache's contents in one step, as cache_replace_ns does. */
typedef struct cache_batch cache_batch;
/* A new empty batch with c's transform (caller frees with cache_batch_free
 * or hands it to cache_replace_batch), or NULL. */
cache_batch *cache_batch_new(obj_cache *c);
void cache_batch_free(cache_batch *b); /* accepts NULL */
/* Takes ownership of obj: transformed and added (a nameless one is dropped);
 * NULL empties the batch (the list started again). Returns 0, or -1 when out
 * of memory. */
int cache_batch_add(cache_batch *b, cJSON *obj);
/* As cache_replace_ns, with the batch's objects as the list; frees b. */
int cache_replace_batch(obj_cache *c, const char *ns, cache_batch *b, cJSON **removed);

/* A deep copy of ns/name, or NULL if absent. Caller frees with cJSON_Delete. */
cJSON *cache_get(obj_cache *c, const char *ns, const char *name);
/* Deep copies of the objects in namespace ns (NULL = all) whose label `key`
 * equals `value` (NULL = every object), as a cJSON array sorted by name.
 * Caller frees. NULL only when out of memory. */
cJSON *cache_list(obj_cache *c, const char *ns, const char *key, const char *value);
/* Calls fn for each object in namespace ns (NULL = all), in no set order,
 * with a copy parsed for that call alone (borrowed: freed after fn returns),
 * so that a walk over every object never holds more than one parsed copy,
 * where cache_list holds them all at once. Runs under the cache's read lock:
 * fn must not call into this cache. Returns the number of objects visited. */
typedef void (*cache_each_fn)(void *user, const cJSON *obj);
size_t cache_each(obj_cache *c, const char *ns, cache_each_fn fn, void *user);
size_t cache_len(obj_cache *c);

#endif
