/* operator/kueue.c - see kueue.h. */
#include "kueue.h"

#include "json.h"

#include <stdio.h>
#include <string.h>

int vj_kueue_group_name(char *buf, size_t len, const char *job, int gen)
{
    int n = snprintf(buf, len, "%s-r%d", job, gen);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int vj_kueue_label_pod(cJSON *labels, cJSON *annotations, const char *job, const char *queue,
                       const char *priority_class, int gen, int count)
{
    char group[320], n[16];
    snprintf(n, sizeof n, "%d", count);
    if (labels == NULL || annotations == NULL || vj_kueue_group_name(group, sizeof group, job, gen) != 0 ||
        !cJSON_AddStringToObject(labels, VJ_KUEUE_QUEUE_LABEL, queue) ||
        (priority_class && !cJSON_AddStringToObject(labels, VJ_KUEUE_PRIORITY_LABEL, priority_class)) ||
        !cJSON_AddStringToObject(labels, VJ_KUEUE_GROUP_LABEL, group) ||
        !cJSON_AddStringToObject(annotations, VJ_KUEUE_COUNT_ANNOTATION, n) ||
        !cJSON_AddStringToObject(annotations, VJ_KUEUE_RETRIABLE_ANNOTATION, "false"))
        return -1;
    return 0;
}

int vj_kueue_gated(const cJSON *pod)
{
    const cJSON *g;
    cJSON_ArrayForEach(g, json_get(json_get(pod, "spec"), "schedulingGates"))
    {
        const char *name = json_str(g, "name");
        if (name && strcmp(name, VJ_KUEUE_GATE) == 0)
            return 1;
    }
    return 0;
}

int vj_kueue_evicted(const cJSON *pod, const char **reason, const char **message)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, json_get(json_get(pod, "status"), "conditions"))
    {
        const char *type = json_str(c, "type"), *status = json_str(c, "status");
        if (type && status && strcmp(type, VJ_KUEUE_EVICTION_CONDITION) == 0 &&
            strcmp(status, "True") == 0) {
            *reason = json_str(c, "reason");
            *message = json_str(c, "message");
            return 1;
        }
    }
    return 0;
}
