/* tests/test_nodehealth.c - operator/nodehealth.c: when the operator judges a
 * node lost from its Node and its Lease. */
#include "nodehealth.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#define NOW 1700000000LL /* 2023-11-14T22:13:20Z */

static cJSON *node_ready(const char *status)
{
    char buf[512];
    snprintf(buf, sizeof buf, "{\"metadata\":{\"name\":\"n1\"},\"status\":{\"conditions\":["
             "{\"type\":\"MemoryPressure\",\"status\":\"False\"},{\"type\":\"Ready\",\"status\":\"%s\","
             "\"reason\":\"NodeStatusUnknown\",\"lastTransitionTime\":\"2023-11-14T22:13:00Z\"}]}}",
             status);
    cJSON *n = cJSON_Parse(buf);
    cr_assert_not_null(n);
    return n;
}

static cJSON *lease(const char *renew, int duration)
{
    char buf[256];
    snprintf(buf, sizeof buf, "{\"spec\":{\"holderIdentity\":\"n1\",\"leaseDurationSeconds\":%d,"
             "\"renewTime\":\"%s\"}}", duration, renew);
    cJSON *l = cJSON_Parse(buf);
    cr_assert_not_null(l);
    return l;
}

Test(nodehealth, a_ready_node_with_a_fresh_lease_is_not_lost)
{
    cJSON *n = node_ready("True"), *l = lease("2023-11-14T22:13:10.123456Z", 40);
    vj_node_health h;
    vj_node_judge("n1", n, l, NOW, &h);
    cr_assert_eq(h.lost, 0, "%s", h.why);
    cr_assert_str_eq(h.name, "n1");
    vj_node_judge("n1", n, NULL, NOW, &h);
    cr_assert_eq(h.lost, 0, "an unreadable lease is no evidence");
    cJSON_Delete(n);
    cJSON_Delete(l);
}

Test(nodehealth, ready_unknown_or_false_is_lost_and_says_so)
{
    vj_node_health h;
    const char *st[] = {"Unknown", "False"};
    for (int i = 0; i < 2; i++) {
        cJSON *n = node_ready(st[i]);
        vj_node_judge("n1", n, NULL, NOW, &h);
        cr_assert_eq(h.lost, 1, "%s", st[i]);
        cr_assert(strstr(h.why, st[i]) && strstr(h.why, "NodeStatusUnknown") &&
                  strstr(h.why, "2023-11-14T22:13:00Z"), "%s", h.why);
        cJSON_Delete(n);
    }
}

Test(nodehealth, a_lease_not_renewed_for_its_duration_is_lost)
{
    cJSON *n = node_ready("True"), *l = lease("2023-11-14T22:12:39Z", 40); /* 41 s ago */
    vj_node_health h;
    vj_node_judge("n1", n, l, NOW, &h);
    cr_assert_eq(h.lost, 1);
    cr_assert(strstr(h.why, "41 s ago"), "%s", h.why);
    vj_node_judge("n1", n, l, NOW - 1, &h); /* exactly its duration: still valid */
    cr_assert_eq(h.lost, 0);
    cJSON_Delete(n);
    cJSON_Delete(l);
}

Test(nodehealth, a_deleted_node_is_lost)
{
    vj_node_health h;
    vj_node_judge("gone", NULL, NULL, NOW, &h);
    cr_assert_eq(h.lost, 1);
    cr_assert(strstr(h.why, "no longer exists"));
}

/* A node's JSON: Ready `status` since `ready_at`, created at `created`,
 * spec.unschedulable `cordoned`. */
static cJSON *node_at(const char *status, const char *ready_at, const char *created, int cordoned)
{
    char buf[512];
    snprintf(buf, sizeof buf, "{\"metadata\":{\"name\":\"n1\",\"creationTimestamp\":\"%s\"},"
             "\"spec\":{\"unschedulable\":%s},\"status\":{\"conditions\":["
             "{\"type\":\"MemoryPressure\",\"status\":\"False\",\"lastTransitionTime\":"
             "\"2030-01-01T00:00:00Z\"},{\"type\":\"Ready\",\"status\":\"%s\","
             "\"lastTransitionTime\":\"%s\"}]}}", created, cordoned ? "true" : "false", status,
             ready_at);
    cJSON *n = cJSON_Parse(buf);
    cr_assert_not_null(n);
    return n;
}

Test(nodehealth, a_node_is_ready_for_pods_since_the_later_of_ready_and_creation_if_schedulable)
{
    static const struct {
        const char *what, *status, *ready_at, *created;
        int cordoned;
        long long want;
    } cases[] = {
        {"Ready after its creation: its Ready time", "True", "2023-11-14T22:13:20Z",
         "2023-11-14T22:00:00Z", 0, NOW},
        {"created after its Ready time: its creation", "True", "2023-11-14T22:00:00Z",
         "2023-11-14T22:13:20Z", 0, NOW},
        {"not Ready: never", "False", "2023-11-14T22:13:20Z", "2023-11-14T22:00:00Z", 0, 0},
        {"Ready Unknown: never", "Unknown", "2023-11-14T22:13:20Z", "2023-11-14T22:00:00Z", 0, 0},
        {"cordoned: never", "True", "2023-11-14T22:13:20Z", "2023-11-14T22:00:00Z", 1, 0},
        {"no readable Ready time: never", "True", "soon", "2023-11-14T22:00:00Z", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *n = node_at(cases[i].status, cases[i].ready_at, cases[i].created, cases[i].cordoned);
        cr_assert_eq(vj_node_ready_since(n), cases[i].want, "%s: %lld", cases[i].what,
                     vj_node_ready_since(n));
        cJSON_Delete(n);
    }
    cr_assert_eq(vj_node_ready_since(NULL), 0, "no node");
    cJSON *bare = cJSON_Parse("{\"metadata\":{\"name\":\"n1\"}}");
    cr_assert_eq(vj_node_ready_since(bare), 0, "no conditions yet");
    cJSON_Delete(bare);
}
