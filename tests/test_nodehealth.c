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
