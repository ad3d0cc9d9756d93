/* tests/test_template.c - operator/template.c: spec.template values that a
 * real API server would refuse in a pod are refused up front, naming the
 * field; what it accepts passes. */
#include "template.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

static int check(const char *json, int gpus, char *err, size_t errlen)
{
    cJSON *t = cJSON_Parse(json);
    cr_assert_not_null(t, "bad JSON: %s", json);
    err[0] = '\0';
    int rc = vj_template_validate(t, gpus, err, errlen);
    cJSON_Delete(t);
    return rc;
}

static void refused(const char *json, int gpus, const char *expect)
{
    char err[512];
    cr_assert_eq(check(json, gpus, err, sizeof err), -1, "accepted: %s", json);
    cr_assert(strstr(err, expect), "%s: message \"%s\" lacks \"%s\"", json, err, expect);
}

Test(template, a_full_valid_template_passes)
{
    char err[512];
    cr_assert_eq(check("{\"resources\":{\"requests\":{\"cpu\":\"4\",\"memory\":\"16Gi\",\"nvidia.com/gpu\":8},"
                       "\"limits\":{\"memory\":\"32Gi\",\"nvidia.com/gpu\":\"8\",\"cpu\":8}},"
                       "\"nodeSelector\":{\"nvidia.com/gpu.product\":\"NVIDIA-H100-80GB-HBM3\"},"
                       "\"tolerations\":[{\"key\":\"nvidia.com/gpu\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"},"
                       "{\"operator\":\"Exists\"},{\"key\":\"k\",\"value\":\"v\",\"effect\":\"NoExecute\","
                       "\"tolerationSeconds\":30}],"
                       "\"schedulerName\":\"volcano\",\"priorityClassName\":\"training-high\","
                       "\"terminationGracePeriodSeconds\":120,\"serviceAccountName\":\"team-sa\","
                       "\"securityContext\":{\"runAsUser\":1000,\"runAsNonRoot\":true,"
                       "\"seccompProfile\":{\"type\":\"RuntimeDefault\"},\"supplementalGroups\":[5]},"
                       "\"containerSecurityContext\":{\"allowPrivilegeEscalation\":false,"
                       "\"capabilities\":{\"drop\":[\"ALL\"]}}}", 8, err, sizeof err), 0, "%s", err);
}

Test(template, a_quantity_that_is_not_one_is_refused_with_the_servers_regex)
{
    refused("{\"resources\":{\"requests\":{\"cpu\":\"lots\"}}}", 0,
            "spec.template.resources.requests.cpu=\"lots\": quantities must match the regular expression");
    refused("{\"resources\":{\"limits\":{\"memory\":true}}}", 0, "spec.template.resources.limits.memory");
    refused("{\"resources\":{\"limits\":{\"cpu\":\"-1\"}}}", 0, "must be greater than or equal to 0");
}

Test(template, requests_above_limits_and_uneven_extended_resources_are_refused)
{
    refused("{\"resources\":{\"requests\":{\"cpu\":\"2\"},\"limits\":{\"cpu\":\"1500m\"}}}", 0,
            "spec.template.resources.requests.cpu: must be less than or equal to the cpu limit");
    refused("{\"resources\":{\"requests\":{\"example.com/fpga\":1}}}", 0,
            "spec.template.resources.limits.example.com/fpga: required");
    refused("{\"resources\":{\"requests\":{\"example.com/fpga\":1},\"limits\":{\"example.com/fpga\":2}}}", 0,
            "must be equal to the example.com/fpga limit");
    refused("{\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"0.5\"}}}", 0, "must be an integer");
    refused("{\"resources\":{\"limits\":{\"gpu\":\"1\"}}}", 0, "must be a standard resource");
    /* with gpusPerReplica the operator sets nvidia.com/gpu itself */
    char err[512];
    cr_assert_eq(check("{\"resources\":{\"requests\":{\"nvidia.com/gpu\":1}}}", 2, err, sizeof err), 0, "%s", err);
}

Test(template, tolerations_node_selectors_and_names_are_checked_as_in_a_pod)
{
    refused("{\"tolerations\":[{\"key\":\"k\",\"operator\":\"Exists\",\"value\":\"v\"}]}", 0,
            "spec.template.tolerations[0].value=\"v\": must be empty when operator is Exists");
    refused("{\"tolerations\":[{\"operator\":\"Equal\",\"value\":\"v\"}]}", 0,
            "spec.template.tolerations[0].operator=\"Equal\": must be Exists when key is empty");
    refused("{\"tolerations\":[{\"key\":\"k\",\"effect\":\"NoSchedule\",\"tolerationSeconds\":5}]}", 0,
            "must be NoExecute when tolerationSeconds is set");
    refused("{\"tolerations\":[{\"key\":\"k\",\"operator\":\"Maybe\"}]}", 0,
            "spec.template.tolerations[0].operator=\"Maybe\": unsupported value");
    refused("{\"tolerations\":[{\"key\":\"k\",\"effect\":\"NoRun\"}]}", 0, "tolerations[0].effect");
    refused("{\"nodeSelector\":{\"bad key!\":\"x\"}}", 0, "spec.template.nodeSelector: key \"bad key!\"");
    refused("{\"nodeSelector\":{\"zone\":\"not a value\"}}", 0, "spec.template.nodeSelector.zone=\"not a value\"");
    refused("{\"nodeSelector\":{\"zone\":3}}", 0, "spec.template.nodeSelector: wrong type");
    refused("{\"priorityClassName\":\"High Priority\"}", 0, "spec.template.priorityClassName=\"High Priority\"");
    refused("{\"terminationGracePeriodSeconds\":-1}", 0,
            "spec.template.terminationGracePeriodSeconds=-1: must be greater than or equal to 0");
    refused("{\"serviceAccountName\":\"Team_SA\"}", 0, "spec.template.serviceAccountName");
}

Test(template, unknown_keys_and_wrong_types_in_security_contexts_are_named)
{
    refused("{\"hostNetwork\":true}", 0, "spec.template.hostNetwork: unknown key");
    refused("{\"securityContext\":{\"runAsUser\":\"root\"}}", 0,
            "spec.template.securityContext.runAsUser: wrong type (expected an integer)");
    refused("{\"securityContext\":{\"seccompProfile\":{\"type\":\"Loose\"}}}", 0,
            "spec.template.securityContext.seccompProfile.type=\"Loose\": unsupported value");
    refused("{\"containerSecurityContext\":{\"capabilities\":{\"drop\":\"ALL\"}}}", 0,
            "spec.template.containerSecurityContext.capabilities.drop: wrong type (expected a list of strings)");
    refused("{\"containerSecurityContext\":{\"privilged\":true}}", 0,
            "spec.template.containerSecurityContext.privilged: unknown key");
}
