/* tests/test_kueue.c - operator/kueue.c: Kueue's plain-pod group contract. */
#include "kueue.h"

#include <criterion/criterion.h>

#include <string.h>

static const char *at(const cJSON *pod, const char *kind, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "metadata"), kind), key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

Test(kueue, a_pod_gets_its_queue_priority_and_group_per_generation_and_the_group_is_unretriable)
{
    cJSON *pod = cJSON_Parse("{\"metadata\":{\"name\":\"j-worker-1-r3\",\"labels\":{\"a\":\"b\"},"
                             "\"annotations\":{}}}");
    cJSON *meta = cJSON_GetObjectItem(pod, "metadata");
    cr_assert_eq(vj_kueue_label_pod(cJSON_GetObjectItem(meta, "labels"), cJSON_GetObjectItem(meta, "annotations"),
                                    "j", "team-a", "high", 3, 4), 0);
    cr_assert_str_eq(at(pod, "labels", "a"), "b", "its own labels stay");
    cr_assert_str_eq(at(pod, "labels", VJ_KUEUE_QUEUE_LABEL), "team-a");
    cr_assert_str_eq(at(pod, "labels", VJ_KUEUE_PRIORITY_LABEL), "high");
    cr_assert_str_eq(at(pod, "labels", VJ_KUEUE_GROUP_LABEL), "j-r3");
    cr_assert_str_eq(at(pod, "annotations", VJ_KUEUE_COUNT_ANNOTATION), "4");
    cr_assert_str_eq(at(pod, "annotations", VJ_KUEUE_RETRIABLE_ANNOTATION), "false");
    cJSON_Delete(pod);
    pod = cJSON_Parse("{\"metadata\":{\"name\":\"x\",\"labels\":{},\"annotations\":{}}}");
    meta = cJSON_GetObjectItem(pod, "metadata");
    cr_assert_eq(vj_kueue_label_pod(cJSON_GetObjectItem(meta, "labels"), cJSON_GetObjectItem(meta, "annotations"),
                                    "j", "q", NULL, 0, 1), 0);
    cr_assert_eq(vj_kueue_label_pod(NULL, cJSON_GetObjectItem(meta, "annotations"), "j", "q", NULL, 0, 1), -1,
                 "no labels object: refused, not dereferenced");
    cr_assert_null(at(pod, "labels", VJ_KUEUE_PRIORITY_LABEL), "no priority class: no label");
    cJSON_Delete(pod);
}

Test(kueue, a_group_name_that_does_not_fit_is_refused)
{
    char buf[8];
    cr_assert_eq(vj_kueue_group_name(buf, sizeof buf, "job", 12), 0);
    cr_assert_str_eq(buf, "job-r12");
    cr_assert_eq(vj_kueue_group_name(buf, sizeof buf, "job", 123), -1);
}

Test(kueue, only_kueues_own_gate_makes_a_pod_wait_in_the_queue)
{
    cJSON *pod = cJSON_Parse("{\"spec\":{\"schedulingGates\":[{\"name\":\"example.com/other\"}]}}");
    cr_assert_eq(vj_kueue_gated(pod), 0);
    cJSON_AddItemToArray(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "spec"), "schedulingGates"),
                         cJSON_Parse("{\"name\":\"" VJ_KUEUE_GATE "\"}"));
    cr_assert_eq(vj_kueue_gated(pod), 1);
    cJSON_Delete(pod);
}

Test(kueue, an_eviction_is_read_from_a_true_termination_target_condition_with_its_words)
{
    const char *reason = NULL, *msg = NULL;
    cJSON *pod = cJSON_Parse("{\"status\":{\"conditions\":[{\"type\":\"TerminationTarget\",\"status\":"
                             "\"False\"},{\"type\":\"DisruptionTarget\",\"status\":\"True\"}]}}");
    cr_assert_eq(vj_kueue_evicted(pod, &reason, &msg), 0, "False, or another type, is no eviction");
    cJSON_Delete(pod);
    pod = cJSON_Parse("{\"status\":{\"conditions\":[{\"type\":\"TerminationTarget\",\"status\":\"True\","
                      "\"reason\":\"WorkloadEvictedDueToPreempted\",\"message\":\"Preempted\"}]}}");
    cr_assert_eq(vj_kueue_evicted(pod, &reason, &msg), 1);
    cr_assert_str_eq(reason, "WorkloadEvictedDueToPreempted");
    cr_assert_str_eq(msg, "Preempted");
    cJSON_Delete(pod);
}
