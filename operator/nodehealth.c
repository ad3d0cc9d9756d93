/* operator/nodehealth.c - see nodehealth.h. */
#include "nodehealth.h"

#include "json.h"
#include "timefmt.h"

#include <stdio.h>
#include <string.h>

void vj_node_judge(const char *name, const cJSON *node, const cJSON *lease, long long now,
                   vj_node_health *h)
{
    memset(h, 0, sizeof *h);
    h->name = name;
    if (node == NULL) {
        h->lost = 1;
        snprintf(h->why, sizeof h->why, "the node no longer exists");
        return;
    }
    const cJSON *cond;
    cJSON_ArrayForEach(cond, json_get(json_get(node, "status"), "conditions"))
    {
        const char *type = json_str(cond, "type"), *status = json_str(cond, "status");
        if (type == NULL || strcmp(type, "Ready") != 0 || status == NULL)
            continue;
        if (strcmp(status, "True") != 0) {
            const char *reason = json_str(cond, "reason"), *since = json_str(cond, "lastTransitionTime");
            h->lost = 1;
            snprintf(h->why, sizeof h->why, "Ready is %s (%s) since %s", status,
                     reason ? reason : "no reason", since ? since : "?");
            return;
        }
    }
    const cJSON *spec = json_get(lease, "spec");
    const char *renew = json_str(spec, "renewTime");
    const cJSON *dur = json_get(spec, "leaseDurationSeconds");
    long long t;
    if (renew && cJSON_IsNumber(dur) && dur->valuedouble > 0 && timefmt_parse(renew, &t) == 0 &&
        now > t + (long long)dur->valuedouble) {
        h->lost = 1;
        snprintf(h->why, sizeof h->why, "its Lease was last renewed at %s, %lld s ago (duration %d s)",
                 renew, now - t, dur->valueint);
    }
}

long long vj_node_ready_since(const cJSON *node)
{
    if (cJSON_IsTrue(json_get(json_get(node, "spec"), "unschedulable")))
        return 0;
    long long ready = 0, created = 0;
    const cJSON *cond;
    cJSON_ArrayForEach(cond, json_get(json_get(node, "status"), "conditions"))
    {
        const char *type = json_str(cond, "type"), *status = json_str(cond, "status");
        if (type == NULL || strcmp(type, "Ready") != 0)
            continue;
        if (status == NULL || strcmp(status, "True") != 0)
            return 0;
        if (timefmt_parse(json_str(cond, "lastTransitionTime"), &ready) != 0)
            ready = 0;
        break;
    }
    if (ready == 0)
        return 0; /* no Ready=True condition */
    if (timefmt_parse(json_str(json_get(node, "metadata"), "creationTimestamp"), &created) != 0)
        created = 0;
    return created > ready ? created : ready;
}
