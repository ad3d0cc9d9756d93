/* tests/test_cache.c - the informer cache: put/get/remove by namespace/name,
 * copies not aliases, label lookups sorted by name, relist replacement that
 * reports what disappeared, and concurrent readers and writers. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cache.h"

static cJSON *pod(const char *ns, const char *name, const char *job, const char *rv)
{
    char text[512];
    snprintf(text, sizeof text,
             "{\"metadata\":{\"namespace\":\"%s\",\"name\":\"%s\",\"resourceVersion\":\"%s\","
             "\"labels\":{\"vitjob.dev/job-name\":\"%s\"}}}",
             ns, name, rv, job);
    return cJSON_Parse(text);
}

static const char *rv_of(const cJSON *o)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(o, "metadata"), "resourceVersion")->valuestring;
}

Test(cache, put_then_get_returns_a_copy_of_the_latest_version)
{
    obj_cache *c = cache_new();
    cr_assert_eq(cache_put(c, pod("a", "p", "j", "1")), 0);
    cr_assert_eq(cache_put(c, pod("a", "p", "j", "2")), 0);
    cr_assert_eq(cache_len(c), 1);
    cJSON *got = cache_get(c, "a", "p");
    cr_assert_str_eq(rv_of(got), "2");
    cJSON_Delete(got); /* a copy: the cache still has its own */
    got = cache_get(c, "a", "p");
    cr_assert_not_null(got);
    cJSON_Delete(got);
    cr_assert_null(cache_get(c, "b", "p"), "another namespace must not match");
    cache_remove(c, "a", "p");
    cr_assert_null(cache_get(c, "a", "p"));
    cache_free(c);
}

Test(cache, nameless_objects_are_refused_and_freed)
{
    obj_cache *c = cache_new();
    cr_assert_eq(cache_put(c, cJSON_Parse("{\"metadata\":{}}")), -1);
    cr_assert_eq(cache_len(c), 0);
    cache_free(c);
}

Test(cache, list_by_label_filters_by_namespace_and_value_sorted_by_name)
{
    obj_cache *c = cache_new();
    cache_put(c, pod("a", "j1-worker-1", "j1", "1"));
    cache_put(c, pod("a", "j1-worker-0", "j1", "1"));
    cache_put(c, pod("a", "j2-worker-0", "j2", "1"));
    cache_put(c, pod("b", "j1-worker-0", "j1", "1"));
    cJSON *l = cache_list(c, "a", "vitjob.dev/job-name", "j1");
    cr_assert_eq(cJSON_GetArraySize(l), 2);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(l, 0), "metadata"),
                                         "name")->valuestring, "j1-worker-0");
    cJSON_Delete(l);
    l = cache_list(c, NULL, NULL, NULL);
    cr_assert_eq(cJSON_GetArraySize(l), 4);
    cJSON_Delete(l);
    cache_free(c);
}

Test(cache, replace_after_relist_reports_the_objects_that_disappeared)
{
    obj_cache *c = cache_new();
    cache_put(c, pod("a", "keep", "j", "1"));
    cache_put(c, pod("a", "gone", "j", "1"));
    cJSON *items = cJSON_CreateArray();
    cJSON_AddItemToArray(items, pod("a", "keep", "j", "5"));
    cJSON_AddItemToArray(items, pod("a", "new", "j", "6"));
    cJSON *removed = NULL;
    cr_assert_eq(cache_replace(c, items, &removed), 0);
    cr_assert_eq(cJSON_GetArraySize(removed), 1);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(removed, 0), "metadata"),
                                         "name")->valuestring, "gone");
    cJSON_Delete(removed);
    cr_assert_eq(cache_len(c), 2);
    cJSON *k = cache_get(c, "a", "keep");
    cr_assert_str_eq(rv_of(k), "5");
    cJSON_Delete(k);
    cache_free(c);
}

Test(cache, a_relist_of_one_namespace_keeps_the_objects_of_the_others)
{
    /* one cache, an informer per watched namespace: a's relist must not
     * drop b's objects (nor "ab"'s, whose name a is a prefix of) */
    obj_cache *c = cache_new();
    cache_put(c, pod("a", "gone", "j", "1"));
    cache_put(c, pod("b", "other", "j", "2"));
    cache_put(c, pod("ab", "prefix", "j", "3"));
    cJSON *items = cJSON_CreateArray();
    cJSON_AddItemToArray(items, pod("a", "new", "j", "4"));
    cJSON *removed = NULL;
    cr_assert_eq(cache_replace_ns(c, "a", items, &removed), 0);
    cr_assert_eq(cJSON_GetArraySize(removed), 1, "only a's vanished object is reported");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(removed, 0), "metadata"),
                                         "name")->valuestring, "gone");
    cJSON_Delete(removed);
    cr_assert_eq(cache_len(c), 3);
    cJSON *k = cache_get(c, "b", "other");
    cr_assert_not_null(k, "b's object survives a's relist");
    cJSON_Delete(k);
    k = cache_get(c, "ab", "prefix");
    cr_assert_not_null(k, "ab is not in a's scope");
    cJSON_Delete(k);
    k = cache_get(c, "a", "new");
    cr_assert_not_null(k);
    cJSON_Delete(k);
    cache_free(c);
}

static obj_cache *shared;

static void *writer(void *arg)
{
    int id = (int)(long)arg;
    for (int i = 0; i < 2000; i++) {
        char name[32], rv[16];
        snprintf(name, sizeof name, "p%d-%d", id, i % 50);
        snprintf(rv, sizeof rv, "%d", i);
        cache_put(shared, pod("ns", name, "j", rv));
        if (i % 7 == 0) cache_remove(shared, "ns", name);
    }
    return NULL;
}

static void *reader(void *arg)
{
    (void)arg;
    for (int i = 0; i < 500; i++) {
        cJSON *l = cache_list(shared, "ns", "vitjob.dev/job-name", "j");
        cr_assert_not_null(l);
        cJSON_Delete(l);
    }
    return NULL;
}

Test(cache, concurrent_writers_and_readers_stay_consistent)
{
    shared = cache_new();
    pthread_t t[4];
    pthread_create(&t[0], NULL, writer, (void *)0L);
    pthread_create(&t[1], NULL, writer, (void *)1L);
    pthread_create(&t[2], NULL, reader, NULL);
    pthread_create(&t[3], NULL, reader, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    cr_assert(cache_len(shared) <= 100);
    cJSON *l = cache_list(shared, NULL, NULL, NULL);
    cr_assert_eq((size_t)cJSON_GetArraySize(l), cache_len(shared));
    cJSON_Delete(l);
    cache_free(shared);
}
