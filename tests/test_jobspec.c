/* tests/test_jobspec.c - operator/jobspec.c: a ViTJob whose name or template
 * a real API server would refuse in the job's children is invalid, naming
 * the field; the worker's own checks of its keys run in the operator too. */
#include "jobspec.h"

#include "buf.h"
#include "file.h"
#include "yaml_json.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

static int validate(const char *name, const char *spec_extra, char *err, size_t errlen)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"team1\",\"uid\":\"u\"},"
             "\"spec\":{\"replicas\":2,\"image\":\"img:1\",\"model\":{\"preset\":\"fmnist_tiny\"},"
             "\"training\":{\"steps\":10,\"globalBatchSize\":128,\"microBatchSize\":64,"
             "\"optimizer\":{\"warmupSteps\":1}}%s%s}}",
             name, spec_extra ? "," : "", spec_extra ? spec_extra : "");
    cJSON *job = cJSON_Parse(buf);
    cr_assert_not_null(job);
    vj_jobspec js;
    err[0] = '\0';
    int rc = vj_jobspec_parse(job, &js, err, errlen);
    if (rc == 0)
        rc = vj_jobspec_validate(&js, err, errlen);
    cJSON_Delete(job);
    return rc;
}

Test(jobspec, names_valid_for_a_vitjob_but_not_for_its_service_fail_naming_metadata_name)
{
    char err[512];
    const char *bad[] = {"1job", "my.job"};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(validate(bad[i], NULL, err, sizeof err), -1, "%s accepted", bad[i]);
        char want[64];
        snprintf(want, sizeof want, "metadata.name=\"%s\"", bad[i]);
        cr_assert(strstr(err, want), "%s", err);
        cr_assert(strstr(err, "DNS-1035"), "%s", err);
    }
    cr_assert_eq(validate("job1", NULL, err, sizeof err), 0, "%s", err);
}

Test(jobspec, template_values_are_validated_up_front)
{
    char err[512];
    cr_assert_eq(validate("j", "\"template\":{\"resources\":{\"requests\":{\"cpu\":\"lots\"}}}", err,
                          sizeof err), -1);
    cr_assert(strstr(err, "spec.template.resources.requests.cpu=\"lots\""), "%s", err);
}

Test(jobspec, a_service_account_named_in_the_template_is_the_pods_identity)
{
    cJSON *job = cJSON_Parse("{\"metadata\":{\"name\":\"j\"},\"spec\":{\"template\":"
                             "{\"serviceAccountName\":\"team-sa\"}}}");
    vj_jobspec js;
    char err[128];
    cr_assert_eq(vj_jobspec_parse(job, &js, err, sizeof err), 0);
    cr_assert_str_eq(js.service_account, "team-sa");
    cJSON_Delete(job);
    job = cJSON_Parse("{\"metadata\":{\"name\":\"j\"},\"spec\":{}}");
    cr_assert_eq(vj_jobspec_parse(job, &js, err, sizeof err), 0);
    cr_assert_null(js.service_account);
    cJSON_Delete(job);
}

Test(jobspec, scheduling_policy_defaults_to_no_gang_and_min_available_to_replicas)
{
    cJSON *job = cJSON_Parse("{\"metadata\":{\"name\":\"j\"},\"spec\":{\"replicas\":3,"
                             "\"runPolicy\":{\"schedulingPolicy\":{\"gang\":\"coscheduling\"}}}}");
    vj_jobspec js;
    char err[128];
    cr_assert_eq(vj_jobspec_parse(job, &js, err, sizeof err), 0);
    cr_assert_eq(js.gang, VJ_GANG_COSCHEDULING);
    cr_assert_eq(js.min_available, 3);
    cr_assert_null(js.queue);
    cr_assert_eq(js.schedule_timeout, -1);
    cr_assert_str_eq(vj_gang_api_version(js.gang), "scheduling.x-k8s.io/v1alpha1");
    cJSON_Delete(job);
    job = cJSON_Parse("{\"metadata\":{\"name\":\"j\"},\"spec\":{\"replicas\":3}}");
    cr_assert_eq(vj_jobspec_parse(job, &js, err, sizeof err), 0);
    cr_assert_eq(js.gang, VJ_GANG_NONE);
    cr_assert_str_eq(js.gang_name, "none");
    cJSON_Delete(job);
}

Test(jobspec, bad_scheduling_policy_values_fail_naming_the_field)
{
    static const struct {
        const char *policy, *want;
    } cases[] = {
        {"{\"gang\":\"kueue\"}",
         "spec.runPolicy.schedulingPolicy.gang=\"kueue\": must be one of none, volcano, "
         "coscheduling"},
        {"{\"gang\":\"volcano\",\"minAvailable\":3}",
         "spec.runPolicy.schedulingPolicy.minAvailable=3: must be in [1, spec.replicas=2]"},
        {"{\"gang\":\"volcano\",\"minAvailable\":0}",
         "spec.runPolicy.schedulingPolicy.minAvailable=0: must be in [1, spec.replicas=2]"},
        {"{\"gang\":\"coscheduling\",\"scheduleTimeoutSeconds\":0}",
         "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds=0: must be >= 1"},
        {"{\"gang\":\"volcano\",\"queue\":\"Research Q\"}",
         "spec.runPolicy.schedulingPolicy.queue=\"Research Q\""},
        {"{\"gang\":\"volcano\",\"priorityClass\":\"High_Prio\"}",
         "spec.runPolicy.schedulingPolicy.priorityClass=\"High_Prio\""},
    };
    char err[512], extra[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(extra, sizeof extra, "\"runPolicy\":{\"schedulingPolicy\":%s}", cases[i].policy);
        cr_assert_eq(validate("j", extra, err, sizeof err), -1, "%s accepted", cases[i].policy);
        cr_assert(strstr(err, cases[i].want), "%s: %s", cases[i].policy, err);
    }
    snprintf(extra, sizeof extra, "\"runPolicy\":{\"schedulingPolicy\":{\"gang\":\"volcano\","
             "\"minAvailable\":2,\"queue\":\"research\",\"priorityClass\":\"high\","
             "\"scheduleTimeoutSeconds\":30}}");
    cr_assert_eq(validate("j", extra, err, sizeof err), 0, "%s", err);
}

Test(jobspec, the_workers_data_checks_fail_the_spec_naming_the_key)
{
    char err[512];
    cr_assert_eq(validate("j", "\"data\":{\"format\":\"imagefolder\",\"uri\":\"s3://b/train\"}",
                          err, sizeof err), -1);
    cr_assert(strstr(err, "data.uri=\"s3://b/train\": imagefolder reads a local folder"), "%s", err);
    cr_assert_eq(validate("j", "\"data\":{\"format\":\"webdataset\",\"uri\":\"s3://b/t-{0..9}.tar\","
                               "\"mean\":[0.5,0.5,0.5]}", err, sizeof err), -1);
    cr_assert(strstr(err, "data.mean has 3 numbers but model.channels=1"), "%s", err);
    cr_assert_eq(validate("j", "\"data\":{\"format\":\"shards\"}", err, sizeof err), -1);
    cr_assert(strstr(err, "data.format=\"shards\" is not one of"), "%s", err);
    cr_assert_eq(validate("j", "\"data\":{\"format\":\"webdataset\",\"uri\":\"s3://b/t-{0..9}.tar\"}",
                          err, sizeof err), 0, "%s", err);
}

Test(jobspec, the_imagenet_example_passes_the_operators_checks)
{
    buf text = {0};
    cr_assert_eq(file_read(&text, "examples/imagenet-vitb16.yaml", NULL, 0), 0,
                 "run from the repository root");
    cJSON *job = NULL;
    char err[512] = "";
    const yaml_json_opts typed = {.typed_scalars = 1};
    cr_assert_eq(yaml_json_parse(text.data, text.len, &typed, &job, err, sizeof err), 0, "%s", err);
    buf_free(&text);
    vj_jobspec js;
    cr_assert_eq(vj_jobspec_parse(job, &js, err, sizeof err), 0, "%s", err);
    cr_assert_eq(vj_jobspec_validate(&js, err, sizeof err), 0, "%s", err);
    cr_assert_eq(js.world_size, 32);
    cJSON_Delete(job);
}

Test(jobspec, gpu_memory_must_be_a_positive_quantity_and_is_read_in_bytes)
{
    char err[512];
    cr_assert_eq(validate("j", "\"gpuMemory\":\"lots\"", err, sizeof err), -1);
    cr_assert(strstr(err, "spec.gpuMemory=\"lots\""), "%s", err);
    cr_assert_eq(validate("j", "\"gpuMemory\":\"0\"", err, sizeof err), -1);
    cr_assert(strstr(err, "spec.gpuMemory=\"0\""), "%s", err);
    cr_assert_eq(validate("j", "\"gpuMemory\":\"80Gi\"", err, sizeof err), 0, "%s", err);
    cJSON *job = cJSON_Parse("{\"metadata\":{\"name\":\"j\"},\"spec\":{\"gpuMemory\":\"141G\"}}");
    vj_jobspec js;
    cr_assert_eq(vj_jobspec_parse(job, &js, err, sizeof err), 0);
    cr_assert_float_eq(js.gpu_memory_bytes, 141e9, 1);
    cJSON_Delete(job);
}

/* A job of `replicas` pods with `training` (the training object's inside)
 * and `extra` appended to the spec, parsed and validated. */
static int validate_elastic(int replicas, const char *training, const char *extra, vj_jobspec *out,
                            char *err, size_t errlen)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"j\",\"namespace\":\"team1\",\"uid\":\"u\"},"
             "\"spec\":{\"replicas\":%d,\"image\":\"img:1\",\"model\":{\"preset\":\"fmnist_tiny\"},"
             "\"training\":{\"steps\":10,\"optimizer\":{\"warmupSteps\":1}%s%s}%s%s}}",
             replicas, training ? "," : "", training ? training : "", extra ? "," : "",
             extra ? extra : "");
    cJSON *job = cJSON_Parse(buf);
    cr_assert_not_null(job, "%s", buf);
    vj_jobspec js;
    err[0] = '\0';
    int rc = vj_jobspec_parse(job, &js, err, errlen);
    if (rc == 0)
        rc = vj_jobspec_validate(&js, err, errlen);
    if (out)
        *out = js;
    cJSON_Delete(job);
    return rc;
}

Test(jobspec, elastic_is_read_with_its_defaults_and_min_replicas_is_the_podgroups_min_member)
{
    char err[512];
    vj_jobspec js;
    cr_assert_eq(validate_elastic(3, "\"globalBatchSize\":12", "\"elastic\":{\"minReplicas\":2},"
                                  "\"runPolicy\":{\"schedulingPolicy\":{\"gang\":\"volcano\"}}",
                                  &js, err, sizeof err), 0, "%s", err);
    cr_assert(js.elastic);
    cr_assert_eq(js.min_replicas, 2);
    cr_assert_eq(js.pending_timeout, VJ_ELASTIC_PENDING_TIMEOUT_S);
    cr_assert_eq(js.grow_check, VJ_ELASTIC_GROW_CHECK_S);
    cr_assert_eq(js.min_available, 2, "the PodGroup follows minReplicas");
    cr_assert_eq(validate_elastic(3, "\"globalBatchSize\":12", NULL, &js, err, sizeof err), 0);
    cr_assert(!js.elastic);
    cr_assert_eq(js.min_available, 3, "without elastic: replicas, as before");
}

Test(jobspec, elastic_bounds_and_times_fail_naming_the_field)
{
    char err[512];
    static const struct { const char *extra, *want; } cases[] = {
        {"\"elastic\":{\"minReplicas\":0}", "spec.elastic.minReplicas=0: must be in [1, spec.replicas=3]"},
        {"\"elastic\":{\"minReplicas\":4}", "spec.elastic.minReplicas=4: must be in [1, spec.replicas=3]"},
        {"\"elastic\":{\"pendingTimeoutSeconds\":0}", "spec.elastic.pendingTimeoutSeconds=0"},
        {"\"elastic\":{\"growCheckSeconds\":0}", "spec.elastic.growCheckSeconds=0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(validate_elastic(3, "\"globalBatchSize\":12", cases[i].extra, NULL, err,
                                      sizeof err), -1, "%s accepted", cases[i].extra);
        cr_assert(strstr(err, cases[i].want), "%s: %s", cases[i].extra, err);
    }
}

Test(jobspec, elastic_needs_a_given_global_batch_and_a_size_below_replicas_that_divides_it)
{
    char err[512];
    /* the default global batch follows the world size: refused */
    cr_assert_eq(validate_elastic(3, "\"microBatchSize\":4", "\"elastic\":{\"minReplicas\":2}",
                                  NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "spec.elastic needs spec.training.globalBatchSize"), "%s", err);
    /* 24 over 3 pods of micro-batch 8: 2 pods would need 12 per rank, no whole micro-batch */
    cr_assert_eq(validate_elastic(3, "\"globalBatchSize\":24,\"microBatchSize\":8",
                                  "\"elastic\":{\"minReplicas\":2}", NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "spec.elastic.minReplicas=2: no world size in [2, 2]"), "%s", err);
    /* down to 1: 24 = 3 x 8 on one pod */
    cr_assert_eq(validate_elastic(3, "\"globalBatchSize\":24,\"microBatchSize\":8",
                                  "\"elastic\":{\"minReplicas\":1}", NULL, err, sizeof err), 0,
                 "%s", err);
    /* minReplicas = replicas: nothing to shrink to, nothing refused */
    cr_assert_eq(validate_elastic(3, "\"globalBatchSize\":24,\"microBatchSize\":8",
                                  "\"elastic\":{\"minReplicas\":3}", NULL, err, sizeof err), 0,
                 "%s", err);
}

Test(jobspec, elastic_with_a_gang_refuses_a_min_available_above_min_replicas)
{
    char err[512];
    cr_assert_eq(validate_elastic(3, "\"globalBatchSize\":12",
                                  "\"elastic\":{\"minReplicas\":2},\"runPolicy\":{\"schedulingPolicy\":"
                                  "{\"gang\":\"coscheduling\",\"minAvailable\":3}}", NULL, err,
                                  sizeof err), -1);
    cr_assert(strstr(err, "spec.runPolicy.schedulingPolicy.minAvailable=3: with spec.elastic"), "%s", err);
    cr_assert_eq(validate_elastic(3, "\"globalBatchSize\":12",
                                  "\"elastic\":{\"minReplicas\":2},\"runPolicy\":{\"schedulingPolicy\":"
                                  "{\"gang\":\"coscheduling\",\"minAvailable\":1}}", NULL, err,
                                  sizeof err), 0, "%s", err);
}

Test(jobspec, world_sizes_follow_the_workers_batch_rule)
{
    char err[512];
    vj_jobspec js;
    cr_assert_eq(validate_elastic(6, "\"globalBatchSize\":24,\"microBatchSize\":2",
                                  "\"elastic\":{\"minReplicas\":1}", &js, err, sizeof err), 0, "%s", err);
    unsigned char ok[6];
    /* js borrowed the job validate_elastic freed: parse again to use it */
    cJSON *job = cJSON_Parse("{\"metadata\":{\"name\":\"j\"},\"spec\":{\"replicas\":6,\"image\":\"i\","
                             "\"model\":{\"preset\":\"fmnist_tiny\"},\"training\":{\"steps\":10,"
                             "\"globalBatchSize\":24,\"microBatchSize\":2}}}");
    cr_assert_eq(vj_jobspec_parse(job, &js, err, sizeof err), 0);
    cr_assert_eq(vj_jobspec_world_sizes(&js, 1, 6, ok, err, sizeof err), 0, "%s", err);
    static const unsigned char want[6] = {1, 1, 1, 1, 0, 1}; /* 24 / (2 w): w = 1, 2, 3, 4, 6 */
    for (int w = 1; w <= 6; w++)
        cr_assert_eq(ok[w - 1], want[w - 1], "world %d", w);
    cJSON_Delete(job);
}
