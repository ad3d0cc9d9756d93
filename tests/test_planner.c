/* tests/test_planner.c - operator/planner.c: the planner's JSON read into
 * what decide needs, the suggestion in the spec's words, and the child
 * process run with its config on stdin, its failures and its time limit
 * (fake planners written by the test as shell scripts). */
#include "planner.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *PLAN_JSON =
    "{\"params\": 632000000, \"sharding\": \"none\", \"world\": 8, \"microBatchSize\": 128,"
    " \"device\": \"cuda h100 (80 GB)\", \"deviceMemoryBytes\": 85899345920, \"fits\": false,"
    " \"memoryPerRank\": {\"parameters\": 2528000000, \"gradients\": 2528000000,"
    "   \"optimizerState\": 5056000000, \"ema\": 0, \"activations\": 105226698752,"
    "   \"workspace\": 1300000000, \"reserve\": 1000000000, \"total\": 119400000000},"
    " \"time\": {\"imagesPerSecond\": 912.34},"
    " \"changes\": [{\"change\": \"training.activationCheckpointing=true\","
    "   \"totalBytes\": 24051816448, \"fits\": true}], \"suggestion\": 0}";

Test(planner, the_plan_is_read_with_its_largest_parts_and_its_suggestion_in_the_specs_words)
{
    vj_admission a;
    char err[256] = "";
    cr_assert_eq(vj_planner_parse(PLAN_JSON, 85899345920.0, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.fits, 0);
    cr_assert_float_eq(a.memory_bytes, 119400000000.0, 1);
    cr_assert_float_eq(a.images_per_s, 912.34, 1e-9);
    cr_assert_str_eq(a.sharding, "none");
    cr_assert_eq(a.micro_batch, 128);
    cr_assert_str_eq(a.parts, "activations 98Gi, optimizer state 4.7Gi, parameters 2.4Gi, "
                              "gradients 2.4Gi");
    cr_assert_str_eq(a.suggestion, "spec.training.activationCheckpointing=true (22.4Gi per rank)");
}

Test(planner, with_the_gpu_memory_unknown_nothing_is_refused)
{
    vj_admission a;
    char err[256] = "";
    cr_assert_eq(vj_planner_parse(PLAN_JSON, 0, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.fits, 1);
    cr_assert_str_eq(a.suggestion, "");
}

Test(planner, the_suggestion_is_every_change_up_to_the_first_that_fits)
{
    const char *j =
        "{\"fits\": false, \"memoryPerRank\": {\"total\": 3e11}, \"time\": {\"imagesPerSecond\": 1},"
        " \"changes\": [{\"change\": \"training.activationCheckpointing=true\", \"totalBytes\": 2e11},"
        "  {\"change\": \"training.sharding=grad-op\", \"totalBytes\": 1.5e11},"
        "  {\"change\": \"training.sharding=full\", \"totalBytes\": 5e10}], \"suggestion\": 2}";
    vj_admission a;
    char err[256] = "";
    cr_assert_eq(vj_planner_parse(j, 8e10, &a, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(a.suggestion, "spec.training.activationCheckpointing=true and "
                                   "spec.training.sharding=grad-op and spec.training.sharding=full "
                                   "(46.6Gi per rank)");
}

Test(planner, output_that_is_not_a_plan_is_refused)
{
    vj_admission a;
    char err[256] = "";
    cr_assert_eq(vj_planner_parse("{\"fits\": true}", 0, &a, err, sizeof err), -1);
    cr_assert(strstr(err, "not a plan"), "%s", err);
    cr_assert_eq(vj_planner_parse("ts=... level=error", 0, &a, err, sizeof err), -1);
}

Test(planner, quantities_read_as_kubectl_prints_them)
{
    char q[32];
    vj_planner_quantity(q, sizeof q, 22.4 * 1073741824.0);
    cr_assert_str_eq(q, "22.4Gi");
    vj_planner_quantity(q, sizeof q, 80.0 * 1073741824.0);
    cr_assert_str_eq(q, "80Gi");
    vj_planner_quantity(q, sizeof q, 512.3 * 1048576.0);
    cr_assert_str_eq(q, "512.3Mi");
    vj_planner_quantity(q, sizeof q, 2010.0 * 1073741824.0);
    cr_assert_str_eq(q, "2Ti");
    vj_planner_quantity(q, sizeof q, 900);
    cr_assert_str_eq(q, "900");
}

/* A fake planner: a shell script in a temporary directory. */
static char *fake(const char *body)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/vj-planner-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    chmod(path, 0755);
    return path;
}

static cJSON *config(void)
{
    return cJSON_Parse("{\"model\": {\"preset\": \"vit_h14\"}, \"training\": {\"microBatchSize\": 128}}");
}

Test(planner, the_child_gets_the_config_on_stdin_and_the_world_gpu_and_memory_as_flags)
{
    char out[256];
    snprintf(out, sizeof out, "/tmp/vj-planner-args-%d", (int)getpid());
    char body[1024];
    snprintf(body, sizeof body,
             "{ echo \"$@\"; cat /dev/stdin; } > %s\n"
             "echo '{\"fits\": true, \"memoryPerRank\": {\"total\": 1e9}, \"time\": "
             "{\"imagesPerSecond\": 5}}'", out);
    char *prog = fake(body);
    cJSON *cfg = config();
    vj_planner_args a = {.program = prog, .replicas = 4, .local_ranks = 8, .gpu_kind = "h200",
                         .gpu_bytes = 141e9, .gpu_source = "node label"};
    vj_admission adm;
    char err[256] = "";
    cr_assert_eq(vj_planner_run(&a, cfg, &adm, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(adm.device_source, "node label");
    FILE *f = fopen(out, "r");
    char got[1024] = "";
    size_t n = fread(got, 1, sizeof got - 1, f);
    got[n] = 0;
    fclose(f);
    cr_assert(strstr(got, "plan --config - --replicas 4 --local-ranks 8 --device cuda "
                          "--gpu h200 --gpu-memory 141000000000 --json\n"), "%s", got);
    cr_assert(strstr(got, "\"preset\":\"vit_h14\""), "the config came on stdin: %s", got);
    unlink(out);
    unlink(prog);
    cJSON_Delete(cfg);
}

Test(planner, a_planner_that_fails_is_reported_with_its_exit_status_and_last_line)
{
    char *prog = fake("cat > /dev/null; echo 'level=error msg=\"training.sharding: bad\"' >&2; exit 2");
    cJSON *cfg = config();
    vj_planner_args a = {.program = prog, .replicas = 1, .local_ranks = 1};
    vj_admission adm;
    char err[512] = "";
    cr_assert_eq(vj_planner_run(&a, cfg, &adm, err, sizeof err), -1);
    cr_assert(strstr(err, "exit status 2") && strstr(err, "training.sharding: bad"), "%s", err);
    unlink(prog);
    cJSON_Delete(cfg);
}

Test(planner, a_planner_that_hangs_is_killed_at_its_time_limit)
{
    char *prog = fake("exec sleep 600");
    cJSON *cfg = config();
    vj_planner_args a = {.program = prog, .replicas = 1, .local_ranks = 1, .timeout_s = 1};
    vj_admission adm;
    char err[512] = "";
    cr_assert_eq(vj_planner_run(&a, cfg, &adm, err, sizeof err), -1);
    cr_assert(strstr(err, "no plan within 1 s"), "%s", err);
    unlink(prog);
    cJSON_Delete(cfg);
}

Test(planner, a_planner_that_is_missing_is_an_error_not_a_crash)
{
    cJSON *cfg = config();
    vj_planner_args a = {.program = "/nonexistent/vitjob-worker", .replicas = 1, .local_ranks = 1};
    vj_admission adm;
    char err[512] = "";
    cr_assert_eq(vj_planner_run(&a, cfg, &adm, err, sizeof err), -1);
    cr_assert(strstr(err, "/nonexistent/vitjob-worker"), "%s", err);
    cJSON_Delete(cfg);
}

Test(planner, an_elastic_plans_fewest_size_is_read_with_its_fit_and_the_smallest_size_that_fits)
{
    const char *j =
        "{\"fits\": true, \"sharding\": \"full\", \"memoryPerRank\": {\"total\": 6e10},"
        " \"time\": {\"imagesPerSecond\": 1}, \"changes\": [], \"suggestion\": -1,"
        " \"elastic\": {\"minReplicas\": 3, \"replicas\": 8, \"sizesNotPlanned\": 0,"
        "  \"smallestFittingReplicas\": 8, \"sizes\": ["
        "   {\"replicas\": 4, \"world\": 32, \"microBatchSize\": 8, \"accumulation\": 4,"
        "    \"totalBytes\": 9e10, \"fits\": false, \"imagesPerSecond\": 1}]}}";
    vj_admission a;
    char err[256] = "";
    cr_assert_eq(vj_planner_parse(j, 8e10, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.fits, 1);
    cr_assert_eq(a.elastic.min_replicas, 3);
    cr_assert_eq(a.elastic.replicas, 4, "the fewest allowed size, not minReplicas");
    cr_assert_eq(a.elastic.world, 32);
    cr_assert_eq(a.elastic.micro_batch, 8);
    cr_assert_eq(a.elastic.accumulation, 4);
    cr_assert_float_eq(a.elastic.memory_bytes, 9e10, 1);
    cr_assert_eq(a.elastic.fits, 0);
    cr_assert_eq(a.elastic.smallest_fitting, 8);
    /* the GPU memory unknown: nothing is said not to fit */
    cr_assert_eq(vj_planner_parse(j, 0, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.elastic.fits, 1);
    /* a plan without "elastic": none */
    cr_assert_eq(vj_planner_parse(PLAN_JSON, 8e10, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.elastic.min_replicas, 0);
}

Test(planner, an_elastic_job_is_planned_with_its_min_replicas_as_a_flag)
{
    char out[256];
    snprintf(out, sizeof out, "/tmp/vj-planner-minargs-%d", (int)getpid());
    char body[1024];
    snprintf(body, sizeof body,
             "echo \"$@\" > %s; cat > /dev/null\n"
             "echo '{\"fits\": true, \"memoryPerRank\": {\"total\": 1e9}, \"time\": "
             "{\"imagesPerSecond\": 5}}'", out);
    char *prog = fake(body);
    cJSON *cfg = config();
    vj_planner_args a = {.program = prog, .replicas = 4, .local_ranks = 8, .min_replicas = 2};
    vj_admission adm;
    char err[256] = "";
    cr_assert_eq(vj_planner_run(&a, cfg, &adm, err, sizeof err), 0, "%s", err);
    cr_assert_eq(adm.replicas, 4);
    FILE *f = fopen(out, "r");
    char got[512] = "";
    size_t n = fread(got, 1, sizeof got - 1, f);
    got[n] = 0;
    fclose(f);
    cr_assert(strstr(got, "plan --config - --replicas 4 --local-ranks 8 --min-replicas 2 "), "%s", got);
    unlink(out);
    unlink(prog);
    cJSON_Delete(cfg);
}
