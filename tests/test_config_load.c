/* tests/test_config_load.c - api/config_load.c: loading JSON and YAML (the
 * bare spec and manifests, files and strings), presets applied first, the
 * load errors (unknown, dotted and duplicate keys and their suggestions,
 * type and range errors, invalid documents), and --set overrides. */
#include "config.h"

#include "config_fixture.h"

#include <criterion/criterion.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes text to a fresh temp file (no extension: the format is found by
 * content); returns its path (static buffer). */
static const char *temp_file(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/vitjob-test-config-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0, "mkstemp failed");
    size_t n = strlen(text);
    cr_assert_eq(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

/* <repo>/examples/<name>, found from this file's path. */
static void example_path(char *out, size_t n, const char *name)
{
    const char *file = __FILE__; /* ".../tests/test_config_load.c" or "tests/test_config_load.c" */
    const char *tail = strstr(file, "tests/test_config_load.c");
    if (tail == NULL)
        snprintf(out, n, "../examples/%s", name); /* compiled from inside tests/ */
    else if (tail == file)
        snprintf(out, n, "examples/%s", name);
    else
        snprintf(out, n, "%.*sexamples/%s", (int)(tail - file), file, name);
}


/* ---------------------------------------------------------------- loading */

Test(config_load, json_and_yaml_of_the_same_content_give_identical_configs)
{
    vit_job_config j = load_ok(FULL_JSON);
    vit_job_config y = load_ok(FULL_YAML);
    assert_is_full(&j);
    assert_config_eq(&j, &y);
    char err[ERRLEN] = "";
    cr_assert_eq(config_validate(&j, err, sizeof err), 0, "%s", err);
}

Test(config_load, json_is_detected_by_content_not_by_name)
{
    vit_job_config a, b;
    char err[ERRLEN] = "";
    config_defaults(&a);
    config_defaults(&b);
    cr_assert_eq(load(&a, FULL_JSON, "looks-like.yaml", err), 0, "%s", err);
    cr_assert_eq(load(&b, FULL_YAML, "looks-like.json", err), 0, "%s", err);
    assert_config_eq(&a, &b);
}

Test(config_load, yaml_flow_mapping_starting_with_brace_is_accepted)
{
    vit_job_config c = load_ok("  {model: {dim: 32, heads: 2}, training: {steps: 5}}");
    cr_assert_eq(c.model.dim, 32);
    cr_assert_eq(c.model.heads, 2);
    cr_assert_eq(c.training.steps, 5);
}

Test(config_load, manifest_form_uses_spec_and_ignores_metadata_status_and_operator_keys)
{
    const char *yaml = "apiVersion: vitjob.dev/v1alpha1\n"
                       "kind: ViTJob\n"
                       "metadata:\n"
                       "  name: demo\n"
                       "  labels: {team: vision}\n"
                       "  unknownToUs: 1\n"
                       "spec:\n"
                       "  replicas: 4\n"
                       "  gpusPerReplica: 1\n"
                       "  image: ghcr.io/x/vitjob-worker:1\n"
                       "  runPolicy: {backoffLimit: 3, cleanPodPolicy: Running}\n"
                       "  suspend: false\n"
                       "  template: {nodeSelector: {gpu: h100}}\n"
                       "  model: {preset: fmnist_small}\n"
                       "  training: {steps: 123, microBatchSize: 32}\n"
                       "status:\n"
                       "  phase: Running\n"
                       "  progress: {step: 7}\n";
    vit_job_config c = load_ok(yaml);
    cr_assert_str_eq(c.model.preset, "fmnist_small");
    cr_assert_eq(c.model.dim, 128);
    cr_assert_eq(c.training.steps, 123);
    cr_assert_eq(c.training.micro_batch_size, 32);

    const char *json = "{\"apiVersion\": \"vitjob.dev/v1alpha1\", \"kind\": \"ViTJob\","
                       " \"metadata\": {\"name\": \"demo\"},"
                       " \"spec\": {\"replicas\": 2, \"training\": {\"steps\": 123, \"microBatchSize\": 32},"
                       " \"model\": {\"preset\": \"fmnist_small\"}}}";
    vit_job_config j = load_ok(json);
    assert_config_eq(&c, &j);
}

Test(config_load, bare_spec_may_carry_operator_only_keys)
{
    vit_job_config c = load_ok("replicas: 2\ngpusPerReplica: 0\nimage: x\ntraining: {steps: 9}\n");
    cr_assert_eq(c.training.steps, 9);
}

Test(config_load, preset_is_applied_before_explicit_model_keys_whatever_the_order)
{
    const char *docs[] = {
        "model:\n  dim: 96\n  preset: vit_s16\n  heads: 4\n",
        "model:\n  preset: vit_s16\n  dim: 96\n  heads: 4\n",
        "{\"model\": {\"dim\": 96, \"heads\": 4, \"preset\": \"vit_s16\"}}",
        "{\"model\": {\"preset\": \"vit_s16\", \"dim\": 96, \"heads\": 4}}",
    };
    for (size_t i = 0; i < 4; i++) {
        vit_job_config c = load_ok(docs[i]);
        cr_assert_str_eq(c.model.preset, "vit_s16", "doc %zu", i);
        cr_assert_eq(c.model.dim, 96, "doc %zu: explicit dim lost", i);
        cr_assert_eq(c.model.heads, 4, "doc %zu: explicit heads lost", i);
        cr_assert_eq(c.model.image_size, 224, "doc %zu: preset not applied", i);
        cr_assert_eq(c.model.depth, 12, "doc %zu: preset not applied", i);
    }
}

Test(config_load, later_document_preset_overrides_earlier_dims_but_keeps_init)
{
    vit_job_config c = load_ok("model: {dim: 96, init: /w/a.safetensors}\n");
    char err[ERRLEN] = "";
    cr_assert_eq(load(&c, "model: {preset: vit_b16}\n", "second.yaml", err), 0, "%s", err);
    cr_assert_eq(c.model.dim, 768);
    cr_assert_str_eq(c.model.init, "/w/a.safetensors");
}

Test(config_load, yaml_plain_scalars_resolve_as_yaml_1_1)
{
    vit_job_config c = load_ok("data: {augment: off}\ntraining: {activationCheckpointing: yes}\n");
    cr_assert_eq(c.data.augment, 0);
    cr_assert_eq(c.training.activation_checkpointing, 1);
    c = load_ok("data: {augment: False}\ntraining: {activationCheckpointing: on, steps: +12}\n");
    cr_assert_eq(c.data.augment, 0);
    cr_assert_eq(c.training.activation_checkpointing, 1);
    cr_assert_eq(c.training.steps, 12);
    /* 0123 is octal in YAML 1.1 and decimal in 1.2: refused rather than guessed */
    expect_load_error("training: {steps: 0123}\n", "t.yaml", "training.steps: expected an integer, got string \"0123\"", NULL);
    c = load_ok("training: {steps: 0, optimizer: {lr: 0.5}}\n");
    cr_assert(c.training.optimizer.lr == 0.5);
    /* !!str forces a string even for a plain scalar */
    expect_load_error("training: {steps: !!str 12}\n", "t.yaml", "training.steps: expected an integer, got string \"12\"", NULL);
}

Test(config_load, null_section_is_empty_but_null_value_is_an_error)
{
    vit_job_config c = load_ok("checkpoint:\ntraining:\n  steps: 3\n");
    cr_assert_eq(c.training.steps, 3);
    expect_load_error("training:\n  steps:\n", "t.yaml", "training.steps: expected an integer, got null", NULL);
    expect_load_error("training:\n  steps: ~\n", "t.yaml", "training.steps: expected an integer, got null", NULL);
}

Test(config_load, integer_is_accepted_for_a_double_field)
{
    vit_job_config c = load_ok("{\"training\": {\"optimizer\": {\"lr\": 1, \"gradClip\": 0, \"betas\": [0, 0.5]}}}");
    cr_assert(c.training.optimizer.lr == 1.0);
    cr_assert(c.training.optimizer.grad_clip == 0.0);
    cr_assert(c.training.optimizer.beta1 == 0.0);
}

Test(config_load, empty_preset_keeps_the_current_dims)
{
    vit_job_config c = load_ok("model: {dim: 96, preset: \"\"}\n");
    cr_assert_str_eq(c.model.preset, "");
    cr_assert_eq(c.model.dim, 96);
    cr_assert_eq(c.model.image_size, 28);
}

Test(config_load, load_file_reads_yaml_and_json_from_disk)
{
    vit_job_config a, b;
    char err[ERRLEN] = "";
    config_defaults(&a);
    config_defaults(&b);
    const char *p = temp_file(FULL_YAML);
    int rc = config_load_file(&a, p, err, sizeof err);
    unlink(p);
    cr_assert_eq(rc, 0, "%s", err);
    p = temp_file(FULL_JSON);
    rc = config_load_file(&b, p, err, sizeof err);
    unlink(p);
    cr_assert_eq(rc, 0, "%s", err);
    assert_is_full(&a);
    assert_config_eq(&a, &b);
}

Test(config_load, examples_load_validate_and_describe_the_same_job)
{
    char yp[PATH_MAX], jp[PATH_MAX], err[ERRLEN] = "";
    vit_job_config y, j;
    example_path(yp, sizeof yp, "fmnist.yaml");
    example_path(jp, sizeof jp, "fmnist.json");
    config_defaults(&y);
    config_defaults(&j);
    cr_assert_eq(config_load_file(&y, yp, err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_load_file(&j, jp, err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_validate(&y, err, sizeof err), 0, "%s", err);
    assert_config_eq(&y, &j);
    cr_assert_str_eq(y.model.preset, "fmnist_tiny");
    cr_assert_eq(y.data.format, DATA_FASHION_MNIST);
    cr_assert_gt(y.training.steps, 0);
}

Test(config_load, the_imagenet_example_validates_at_its_world_size_with_deits_lr_rule)
{
    char path[PATH_MAX], err[ERRLEN] = "";
    vit_job_config c;
    example_path(path, sizeof path, "imagenet-vitb16.yaml");
    config_defaults(&c);
    cr_assert_eq(config_load_file(&c, path, err, sizeof err), 0, "%s", err);
    c.world_size = 4 * 8; /* its replicas x gpusPerReplica */
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(c.model.preset, "vit_b16");
    cr_assert_eq(c.data.format, DATA_WEBDATASET);
    cr_assert_str_eq(c.data.uri, "s3://imagenet/train-{000000..001023}.tar");
    cr_assert_str_eq(c.data.test_uri, "s3://imagenet/val-{000000..000063}.tar");
    cr_assert_eq(c.data.augment, 1);
    cr_assert_eq(c.data.interpolation, INTERP_BICUBIC);
    cr_assert(c.data.crop_pct == 0.875);
    /* DeiT's augmentation and regularisation */
    cr_assert_str_eq(c.data.rand_augment, "rand-m9-mstd0.5-inc1");
    cr_assert(c.data.random_erasing == 0.25);
    cr_assert(c.data.mixup == 0.8 && c.data.cutmix == 1.0);
    cr_assert(c.training.drop_path == 0.1 && c.training.label_smoothing == 0.1);
    cr_assert_eq(c.training.precision, PRECISION_BF16_MIXED);
    cr_assert_eq(c.training.sharding, SHARDING_FULL);
    cr_assert_eq(c.training.activation_checkpointing, 1);
    cr_assert_eq(c.training.optimizer.schedule, SCHEDULE_COSINE);
    cr_assert(c.training.optimizer.weight_decay == 0.05);
    cr_assert(fabs(c.training.optimizer.lr - 5e-4 * c.training.global_batch_size / 512) < 1e-12,
              "lr %g is not 5e-4 x batch %d / 512", c.training.optimizer.lr,
              c.training.global_batch_size);
    cr_assert_gt(c.training.optimizer.warmup_steps, 0);
    /* the explicit normalisation is the default one, written out */
    double mean[3], std[3];
    cr_assert_eq(config_data_norm(&c, mean, std), 3);
    cr_assert(mean[0] == 0.485 && mean[2] == 0.406 && std[1] == 0.224);
    c.data.mean_n = c.data.std_n = 0;
    double dmean[3], dstd[3];
    cr_assert_eq(config_data_norm(&c, dmean, dstd), 3);
    cr_assert(memcmp(mean, dmean, sizeof mean) == 0 && memcmp(std, dstd, sizeof std) == 0);
}

/* ---------------------------------------------------------------- load errors */

Test(config_load, unknown_key_is_rejected_naming_the_key)
{
    expect_load_error("training:\n  stpes: 10\n", "job.yaml", "job.yaml: unknown key 'training.stpes'",
                      "did you mean 'training.steps'");
    expect_load_error("{\"modle\": {}}", "job.json", "job.json: unknown key 'modle'", NULL);
    expect_load_error("training: {optimizer: {momentum: 0.9}}\n", "t.yaml",
                      "unknown key 'training.optimizer.momentum'", NULL);
}

Test(config_load, operator_keys_are_only_ignored_at_spec_level)
{
    expect_load_error("model: {replicas: 2}\n", "t.yaml", "unknown key 'model.replicas'", NULL);
}

Test(config_load, unknown_key_suggests_the_intended_key)
{
    expect_load_error("model: {image_size: 28}\n", "t.yaml", "unknown key 'model.image_size'",
                      "did you mean 'model.imageSize'");
    expect_load_error("training: {lr: 0.1}\n", "t.yaml", "unknown key 'training.lr'",
                      "did you mean 'training.optimizer.lr'");
}

Test(config_load, dotted_key_in_a_file_is_rejected)
{
    expect_load_error("{\"training.steps\": 5}", "t.json", "unknown key 'training.steps'", "nested");
}

Test(config_load, unknown_key_at_manifest_top_level_is_rejected)
{
    expect_load_error("apiVersion: vitjob.dev/v1alpha1\nkind: ViTJob\nspec: {}\nextra: 1\n", "m.yaml",
                      "m.yaml: unknown key 'extra'", NULL);
    expect_load_error("apiVersion: vitjob.dev/v1alpha1\nkind: ViTJob\n", "m.yaml", "no spec", NULL);
    expect_load_error("kind: ViTJob\nspec: [1]\n", "m.yaml", "spec: expected an object, got array", NULL);
}

Test(config_load, duplicate_key_is_rejected)
{
    expect_load_error("training:\n  steps: 1\n  steps: 2\n", "t.yaml", "duplicate key 'training.steps'", NULL);
    expect_load_error("{\"training\": {\"steps\": 1}, \"training\": {\"epochs\": 2}}", "t.json",
                      "duplicate key 'training'", NULL);
}

Test(config_load, string_for_an_integer_field_is_rejected_naming_key_and_value)
{
    expect_load_error_exact("{\"training\": {\"steps\": \"ten\"}}", "job.json",
                            "job.json: training.steps: expected an integer, got string \"ten\"");
}

Test(config_load, quoted_number_in_yaml_is_a_string_and_rejected_for_an_integer_field)
{
    expect_load_error_exact("training:\n  microBatchSize: \"64\"\n", "job.yaml",
                            "job.yaml: training.microBatchSize: expected an integer, got string \"64\"");
    expect_load_error("training:\n  microBatchSize: '64'\n", "job.yaml",
                      "training.microBatchSize: expected an integer, got string \"64\"", NULL);
    expect_load_error("training: {optimizer: {lr: \"0.1\"}}\n", "job.yaml",
                      "training.optimizer.lr: expected a number, got string \"0.1\"", NULL);
}

Test(config_load, float_for_an_integer_field_is_rejected)
{
    expect_load_error("training: {steps: 1.5}\n", "t.yaml", "training.steps: expected an integer, got number 1.5", NULL);
    expect_load_error("{\"model\": {\"dim\": 64.25}}", "t.json", "model.dim: expected an integer, got number 64.25", NULL);
}

Test(config_load, boolean_field_needs_a_real_boolean)
{
    expect_load_error("data: {augment: 1}\n", "t.yaml", "data.augment: expected a boolean", "got number 1");
    expect_load_error("data: {augment: \"true\"}\n", "t.yaml", "data.augment: expected a boolean", "got string \"true\"");
}

Test(config_load, string_field_needs_a_string_that_fits)
{
    expect_load_error("data: {uri: 5}\n", "t.yaml", "data.uri: expected a string, got number 5", NULL);
    char doc[1024];
    char longv[600];
    memset(longv, 'a', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    snprintf(doc, sizeof doc, "model: {init: %s}\n", longv);
    expect_load_error(doc, "t.yaml", "model.init: a string of 599 bytes is too long (at most 511)", NULL);
}

Test(config_load, out_of_range_value_is_rejected_with_the_bounds)
{
    expect_load_error_exact("training:\n  microBatchSize: 0\n", "job.yaml",
                            "job.yaml: training.microBatchSize=0 is out of range [1, 65536]");
    expect_load_error("training: {threads: 2000}\n", "t.yaml", "training.threads=2000 is out of range [0, 1024]", NULL);
    expect_load_error("training: {steps: -1}\n", "t.yaml", "training.steps=-1 is out of range [0, 1000000000000]", NULL);
    expect_load_error("model: {dim: 1e300}\n", "t.yaml", "model.dim=1e+300 is out of range [1, 65536]", NULL);
}

Test(config_load, open_bounds_exclude_their_endpoint)
{
    expect_load_error("training: {optimizer: {lr: 0}}\n", "t.yaml", "training.optimizer.lr=0 is out of range (0, 10]", NULL);
    expect_load_error("training: {optimizer: {lr: .inf}}\n", "t.yaml", "training.optimizer.lr=inf is out of range (0, 10]", NULL);
    expect_load_error("training: {optimizer: {lr: .nan}}\n", "t.yaml", "training.optimizer.lr=nan is out of range", NULL);
    vit_job_config c = load_ok("training: {optimizer: {lr: 10}}\n");
    cr_assert(c.training.optimizer.lr == 10.0);
}

Test(config_load, bad_enum_value_lists_the_allowed_values)
{
    expect_load_error_exact("training:\n  precision: fp16\n", "job.yaml",
                            "job.yaml: training.precision=\"fp16\" is not one of fp32, bf16-mixed, fp16-mixed");
    expect_load_error("training: {sharding: zero3}\n", "t.yaml",
                      "training.sharding=\"zero3\" is not one of none, grad-op, full", NULL);
    expect_load_error("training: {device: 3}\n", "t.yaml", "training.device: expected a string, got number 3", NULL);
}

Test(config_load, unknown_preset_in_a_file_names_the_value_and_lists_the_presets)
{
    expect_load_error("model: {preset: vit_x99, dim: 64}\n", "t.yaml", "model.preset=\"vit_x99\" is not one of",
                      "vit_ti16, vit_s16, vit_b16, vit_l16, vit_h14, vit_g14, fmnist_tiny, fmnist_small");
}

Test(config_load, non_object_section_is_rejected)
{
    expect_load_error("training: 5\n", "t.yaml", "t.yaml: training: expected an object, got number 5", NULL);
    expect_load_error("training:\n  optimizer: [1, 2]\n", "t.yaml", "training.optimizer: expected an object, got array", NULL);
    expect_load_error("model: fmnist_tiny\n", "t.yaml", "model: expected an object, got string \"fmnist_tiny\"", NULL);
}

Test(config_load, top_level_must_be_an_object)
{
    expect_load_error("- a\n- b\n", "t.yaml", "expected an object", "got array");
    expect_load_error("just words\n", "t.yaml", "expected an object", "got string \"just words\"");
    expect_load_error("", "t.yaml", "t.yaml: the config is empty", NULL);
    expect_load_error("# only a comment\n", "t.yaml", "the config is empty", NULL);
}

Test(config_load, betas_must_be_two_numbers_below_one)
{
    expect_load_error("training: {optimizer: {betas: [0.9]}}\n", "t.yaml",
                      "training.optimizer.betas: expected an array of 2 numbers, got an array of 1", NULL);
    expect_load_error("training: {optimizer: {betas: [0.9, 0.99, 0.999]}}\n", "t.yaml",
                      "expected an array of 2 numbers, got an array of 3", NULL);
    expect_load_error("training: {optimizer: {betas: 0.9}}\n", "t.yaml",
                      "training.optimizer.betas: expected an array of 2 numbers, got number 0.9", NULL);
    expect_load_error("training: {optimizer: {betas: [0.9, x]}}\n", "t.yaml",
                      "training.optimizer.betas[1]: expected a number, got string \"x\"", NULL);
    expect_load_error("training: {optimizer: {betas: [0.9, 1.0]}}\n", "t.yaml",
                      "training.optimizer.betas[1]=1 is out of range [0, 1)", NULL);
}

Test(config_load, missing_file_reports_the_path_and_strerror)
{
    vit_job_config c, before;
    char err[ERRLEN] = "";
    config_defaults(&c);
    before = c;
    cr_assert_eq(config_load_file(&c, "/nonexistent-vitjob/job.yaml", err, sizeof err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, "/nonexistent-vitjob/job.yaml: cannot read config: No such file or directory");
    cr_assert_eq(config_load_file(&c, "/tmp", err, sizeof err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, "/tmp: cannot read config: is a directory, not a regular file");
    assert_config_eq(&c, &before);
}

Test(config_load, invalid_yaml_reports_line_and_column)
{
    const char *doc = "model:\n  dim: 64\n   heads: 4\n";
    expect_load_error(doc, "bad.yaml", "bad.yaml: invalid YAML at line 3 column ", NULL);
    expect_load_error("training: {steps: 1\n", "bad.yaml", "bad.yaml: invalid YAML at line 2 column 1: ", NULL);
}

Test(config_load, invalid_json_reports_the_byte_offset)
{
    expect_load_error("{\"model\": {\"dim\": 64}", "bad.json", "bad.json: invalid JSON near byte ", NULL);
    expect_load_error_exact("{\"model\": {\"dim\": 64}} trailing", "bad.json", "bad.json: invalid JSON near byte 23");
}

Test(config_load, yaml_aliases_and_second_documents_are_rejected)
{
    expect_load_error("base: &b {steps: 1}\ntraining: *b\n", "t.yaml", "invalid YAML at line 2", "aliases");
    expect_load_error("training: {steps: 1}\n---\ntraining: {steps: 2}\n", "t.yaml", "invalid YAML at line 2",
                      "one document");
}

Test(config_load, nul_byte_in_the_document_is_rejected)
{
    vit_job_config c;
    char err[ERRLEN] = "";
    config_defaults(&c);
    static const char doc[] = "training: {steps: 1}\0junk";
    cr_assert_eq(config_load_string(&c, doc, sizeof doc - 1, "nul.yaml", err, sizeof err), VJ_ERR_CONFIG);
    cr_assert(strstr(err, "NUL byte at byte 20") != NULL, "%s", err);
}

Test(config_load, errors_fit_small_buffers_and_tolerate_a_null_buffer)
{
    vit_job_config c;
    char tiny[8];
    config_defaults(&c);
    cr_assert_eq(config_load_string(&c, "training: {stpes: 1}", 20, "t.yaml", tiny, sizeof tiny),
                 VJ_ERR_CONFIG);
    cr_assert_str_eq(tiny, "t.yaml:");
    cr_assert_eq(config_load_string(&c, "training: {stpes: 1}", 20, "t.yaml", NULL, 0), VJ_ERR_CONFIG);
    cr_assert_eq(config_set(&c, "nope=1", NULL, 0), VJ_ERR_CONFIG);
}

/* ---------------------------------------------------------------- --set */

Test(config_load, set_overrides_an_int_a_long_and_a_u64)
{
    vit_job_config c;
    config_defaults(&c);
    set_ok(&c, "training.microBatchSize=32");
    set_ok(&c, "training.steps=1000000000000");
    set_ok(&c, "training.seed=9007199254740991");
    set_ok(&c, " model.dim = 128 ");
    cr_assert_eq(c.training.micro_batch_size, 32);
    cr_assert_eq(c.training.steps, 1000000000000L);
    cr_assert_eq(c.training.seed, 9007199254740991ULL);
    cr_assert_eq(c.model.dim, 128);
}

Test(config_load, set_overrides_a_double_and_a_bool)
{
    vit_job_config c;
    config_defaults(&c);
    set_ok(&c, "training.optimizer.lr=3e-4");
    set_ok(&c, "model.mlpRatio=2");
    set_ok(&c, "data.augment=false");
    set_ok(&c, "training.activationCheckpointing=true");
    cr_assert(c.training.optimizer.lr == 3e-4);
    cr_assert(c.model.mlp_ratio == 2.0);
    cr_assert_eq(c.data.augment, 0);
    cr_assert_eq(c.training.activation_checkpointing, 1);
}

Test(config_load, set_overrides_a_string_as_is_and_an_enum)
{
    vit_job_config c;
    config_defaults(&c);
    set_ok(&c, "data.uri=s3://bucket/prefix?a=b");
    set_ok(&c, "checkpoint.credentialsSecret= spaced ");
    set_ok(&c, "training.precision=bf16-mixed");
    set_ok(&c, "training.exportPath=");
    cr_assert_str_eq(c.data.uri, "s3://bucket/prefix?a=b");
    cr_assert_str_eq(c.checkpoint.credentials_secret, " spaced ");
    cr_assert_eq(c.training.precision, PRECISION_BF16_MIXED);
    cr_assert_str_eq(c.training.export_path, "");
}

Test(config_load, set_overrides_betas_in_both_spellings)
{
    vit_job_config c;
    config_defaults(&c);
    set_ok(&c, "training.optimizer.betas=0.8,0.95");
    cr_assert(c.training.optimizer.beta1 == 0.8 && c.training.optimizer.beta2 == 0.95);
    set_ok(&c, "training.optimizer.betas=[0.85, 0.99]");
    cr_assert(c.training.optimizer.beta1 == 0.85 && c.training.optimizer.beta2 == 0.99);
    expect_set_error("training.optimizer.betas=0.9", "--set: training.optimizer.betas: expected an array of 2 numbers",
                     "got an array of 1");
    expect_set_error("training.optimizer.betas=0.9,a", "training.optimizer.betas[1]: expected a number", "\"a\"");
    expect_set_error("training.optimizer.betas=[0.9,1]", "training.optimizer.betas[1]=1 is out of range [0, 1)", NULL);
}

Test(config_load, set_overrides_mean_and_std_with_one_to_three_numbers_and_empty_resets_them)
{
    vit_job_config c;
    config_defaults(&c);
    set_ok(&c, "data.mean=[0.5]");
    cr_assert(c.data.mean_n == 1 && c.data.mean[0] == 0.5);
    set_ok(&c, "data.mean=0.4,0.5,0.6");
    cr_assert(c.data.mean_n == 3 && c.data.mean[0] == 0.4 && c.data.mean[2] == 0.6);
    set_ok(&c, "data.std=[0.2, 0.25, 0.3]");
    cr_assert(c.data.std_n == 3 && c.data.std[1] == 0.25);
    set_ok(&c, "data.mean=0.45");
    cr_assert(c.data.mean_n == 1 && c.data.mean[0] == 0.45 && c.data.mean[1] == 0);
    set_ok(&c, "data.mean=");
    cr_assert_eq(c.data.mean_n, 0);
    set_ok(&c, "data.std=null");
    cr_assert_eq(c.data.std_n, 0);
    expect_set_error("data.mean=0.1,0.2,0.3,0.4", "--set: data.mean: expected an array of 1 to 3 numbers",
                     "got an array of 4");
    expect_set_error("data.std=[0.2, 0]", "--set: data.std[1]=0 is out of range (0, 1]", NULL);
    expect_set_error("data.mean=[]", "data.mean: expected an array of 1 to 3 numbers, got an array of 0", NULL);
    expect_set_error("data.mean=[0.5,]", "data.mean[1]: expected a number, got string \"\"", NULL);
    expect_set_error("data.scale=[ ]", "data.scale: expected an array of 2 numbers, got an array of 0", NULL);
}

Test(config_load, set_overrides_the_other_data_keys)
{
    vit_job_config c;
    config_defaults(&c);
    set_ok(&c, "data.format=webdataset");
    set_ok(&c, "data.uri=s3://b/train-{000000..000009}.tar");
    set_ok(&c, "data.testUri=s3://b/val-{0..1}.tar");
    set_ok(&c, "data.endpoint=https://minio:9000");
    set_ok(&c, "data.scale=[0.35, 1]");
    set_ok(&c, "data.ratio=0.5,2");
    set_ok(&c, "data.interpolation=bilinear");
    set_ok(&c, "data.cropPct=0.95");
    set_ok(&c, "data.workers=12");
    set_ok(&c, "data.prefetchBatches=8");
    set_ok(&c, "data.shuffleBuffer=20000");
    set_ok(&c, "data.maxPixels=178956970");
    set_ok(&c, "data.maxBadFraction=0");
    cr_assert_eq(c.data.format, DATA_WEBDATASET);
    cr_assert_str_eq(c.data.uri, "s3://b/train-{000000..000009}.tar");
    cr_assert_str_eq(c.data.test_uri, "s3://b/val-{0..1}.tar");
    cr_assert_str_eq(c.data.endpoint, "https://minio:9000");
    cr_assert(c.data.scale_min == 0.35 && c.data.scale_max == 1.0);
    cr_assert(c.data.ratio_min == 0.5 && c.data.ratio_max == 2.0);
    cr_assert_eq(c.data.interpolation, INTERP_BILINEAR);
    cr_assert(c.data.crop_pct == 0.95);
    cr_assert_eq(c.data.workers, 12);
    cr_assert_eq(c.data.prefetch_batches, 8);
    cr_assert_eq(c.data.shuffle_buffer, 20000);
    cr_assert_eq(c.data.max_pixels, 178956970ULL);
    cr_assert(c.data.max_bad_fraction == 0.0);
    set_ok(&c, "data.format=imagefolder");
    cr_assert_eq(c.data.format, DATA_IMAGEFOLDER);
    expect_set_error("data.interpolation=area", "data.interpolation=\"area\" is not one of bilinear, bicubic", NULL);
    expect_set_error("data.workers=many", "data.workers: expected an integer, got string \"many\"", NULL);
}

Test(config_load, set_preset_overwrites_model_dims)
{
    vit_job_config c;
    config_defaults(&c);
    set_ok(&c, "model.dim=32");
    set_ok(&c, "model.init=/w/b16.safetensors");
    set_ok(&c, "model.preset=vit_b16");
    cr_assert_str_eq(c.model.preset, "vit_b16");
    cr_assert_eq(c.model.dim, 768);
    cr_assert_eq(c.model.image_size, 224);
    cr_assert_str_eq(c.model.init, "/w/b16.safetensors");
    expect_set_error("model.preset=vit_x", "--set: model.preset=\"vit_x\" is not one of", "fmnist_small");
}

Test(config_load, set_rejects_bad_values_with_the_file_messages)
{
    vit_job_config c;
    char err[ERRLEN] = "";
    config_defaults(&c);
    cr_assert_eq(config_set(&c, "training.steps=ten", err, sizeof err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, "--set: training.steps: expected an integer, got string \"ten\"");
    cr_assert_eq(config_set(&c, "training.microBatchSize=0", err, sizeof err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, "--set: training.microBatchSize=0 is out of range [1, 65536]");
    expect_set_error("training.steps=1.5", "training.steps: expected an integer, got number 1.5", NULL);
    expect_set_error("training.steps=0x10", "expected an integer, got string \"0x10\"", NULL);
    expect_set_error("training.steps=99999999999999999999", "training.steps=1e+20 is out of range", NULL);
    expect_set_error("data.augment=yes", "data.augment: expected a boolean", "\"yes\"");
    expect_set_error("training.device=gpu", "training.device=\"gpu\" is not one of cpu, cuda, auto", NULL);
    expect_set_error("training.optimizer.lr=nan", "training.optimizer.lr: expected a number, got string \"nan\"", NULL);
}

Test(config_load, set_rejects_unknown_keys_sections_and_missing_equals)
{
    expect_set_error("training.stpes=1", "--set: unknown key 'training.stpes'", "did you mean 'training.steps'");
    expect_set_error("replicas=2", "--set: unknown key 'replicas'", NULL);
    expect_set_error("training.optimizer=adamw", "--set: training.optimizer is a section", NULL);
    expect_set_error("training.steps", "--set: expected key=value, got \"training.steps\"", NULL);
}
