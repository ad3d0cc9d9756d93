/* tests/test_admission.c - operator/admission.c: which jobs are planned
 * before their pods, and the GPU kind a product label names. (vj_admit's
 * API calls and the real planner: tests/cluster/test_admission.py.) */
#include "admission.h"

#include <criterion/criterion.h>

#include <stdio.h>

static cJSON *job(int gpus, const char *status)
{
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"metadata\": {\"name\": \"j\", \"generation\": 3}, \"spec\": {\"replicas\": 2, "
             "\"gpusPerReplica\": %d}, \"status\": %s}", gpus, status);
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "%s", buf);
    return j;
}

Test(admission, a_gpu_job_without_pods_whose_generation_was_not_planned_is_planned)
{
    cJSON *none = cJSON_CreateArray();
    cJSON *j = job(8, "{}");
    cr_assert_eq(vj_admission_wanted(j, none), 1);
    cJSON_Delete(j);
    j = job(8, "{\"phase\": \"Pending\", \"plannedGeneration\": 2}");
    cr_assert_eq(vj_admission_wanted(j, none), 1, "the spec changed since its plan");
    cJSON_Delete(j);
    cJSON_Delete(none);
}

Test(admission, cpu_jobs_planned_generations_finished_jobs_and_jobs_with_pods_are_not)
{
    static const struct { int gpus, with_pods; const char *status, *why; } cases[] = {
        {0, 0, "{}", "a CPU job"},
        {8, 0, "{\"plannedGeneration\": 3}", "this generation is planned"},
        {8, 0, "{\"phase\": \"Failed\"}", "failed"},
        {8, 0, "{\"phase\": \"Succeeded\"}", "succeeded"},
        {8, 1, "{}", "its pods exist: it was admitted"},
    };
    cJSON *none = cJSON_CreateArray();
    cJSON *pods = cJSON_Parse("[{\"metadata\": {\"name\": \"j-worker-0-r0\"}}]");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *j = job(cases[i].gpus, cases[i].status);
        cr_assert_eq(vj_admission_wanted(j, cases[i].with_pods ? pods : none), 0, "%s",
                     cases[i].why);
        cJSON_Delete(j);
    }
    cJSON_Delete(pods);
    cJSON_Delete(none);
}

Test(admission, gpu_feature_discoverys_product_names_map_to_the_planners_kinds)
{
    cr_assert_str_eq(vj_admission_gpu_kind("NVIDIA-H100-80GB-HBM3"), "h100");
    cr_assert_str_eq(vj_admission_gpu_kind("NVIDIA-H200"), "h200");
    cr_assert_str_eq(vj_admission_gpu_kind("NVIDIA-A100-SXM4-80GB"), "a100");
    cr_assert_str_eq(vj_admission_gpu_kind("Tesla-V100-SXM2-32GB"), "v100");
    cr_assert_null(vj_admission_gpu_kind("NVIDIA-L4"));
    cr_assert_null(vj_admission_gpu_kind(NULL));
}
