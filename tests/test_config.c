/* tests/test_config.c - api/config.c: loading JSON and YAML, manifests,
 * presets, --set overrides, type and range errors, validation, to_json, and
 * the CRD (manifests/00-crd.yaml) agreeing with the spec table. */
#include "config.h"

#include "buf.h"
#include "file.h"
#include "yaml_json.h"

#include <criterion/criterion.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ERRLEN 512

/* ---------------------------------------------------------------- helpers */

static int load(vit_job_config *cfg, const char *text, const char *origin, char *err)
{
    return config_load_string(cfg, text, strlen(text), origin, err, ERRLEN);
}

/* Defaults, then `text`; the load must succeed. */
static vit_job_config load_ok(const char *text)
{
    vit_job_config cfg;
    char err[ERRLEN] = "";
    config_defaults(&cfg);
    int rc = load(&cfg, text, "test.yaml", err);
    cr_assert_eq(rc, 0, "load failed: %s", err);
    return cfg;
}

static void assert_config_eq(const vit_job_config *a, const vit_job_config *b)
{
#define EQ_NUM(f) cr_assert(a->f == b->f, #f " differs")
#define EQ_STR(f) cr_assert_str_eq(a->f, b->f, #f " differs")
    EQ_STR(model.preset);
    EQ_NUM(model.image_size);
    EQ_NUM(model.patch_size);
    EQ_NUM(model.channels);
    EQ_NUM(model.dim);
    EQ_NUM(model.depth);
    EQ_NUM(model.heads);
    EQ_NUM(model.mlp_ratio);
    EQ_NUM(model.num_classes);
    EQ_STR(model.init);
    EQ_NUM(data.format);
    EQ_STR(data.uri);
    EQ_STR(data.test_uri);
    EQ_STR(data.endpoint);
    EQ_NUM(data.augment);
    EQ_NUM(data.mean_n);
    EQ_NUM(data.std_n);
    for (int i = 0; i < CONFIG_DATA_CHANNELS_MAX; i++) {
        EQ_NUM(data.mean[i]);
        EQ_NUM(data.std[i]);
    }
    EQ_NUM(data.scale_min);
    EQ_NUM(data.scale_max);
    EQ_NUM(data.ratio_min);
    EQ_NUM(data.ratio_max);
    EQ_NUM(data.interpolation);
    EQ_NUM(data.crop_pct);
    EQ_NUM(data.workers);
    EQ_NUM(data.prefetch_batches);
    EQ_NUM(data.shuffle_buffer);
    EQ_NUM(data.max_pixels);
    EQ_NUM(data.max_bad_fraction);
    EQ_NUM(data.mixup);
    EQ_NUM(data.cutmix);
    EQ_NUM(data.cutmix_minmax_n);
    EQ_NUM(data.cutmix_minmax[0]);
    EQ_NUM(data.cutmix_minmax[1]);
    EQ_NUM(data.mixup_prob);
    EQ_NUM(data.mixup_switch_prob);
    EQ_NUM(data.mixup_mode);
    EQ_NUM(training.steps);
    EQ_NUM(training.epochs);
    EQ_NUM(training.global_batch_size);
    EQ_NUM(training.micro_batch_size);
    EQ_NUM(training.precision);
    EQ_NUM(training.sharding);
    EQ_NUM(training.activation_checkpointing);
    EQ_NUM(training.optimizer.name);
    EQ_NUM(training.optimizer.lr);
    EQ_NUM(training.optimizer.weight_decay);
    EQ_NUM(training.optimizer.beta1);
    EQ_NUM(training.optimizer.beta2);
    EQ_NUM(training.optimizer.eps);
    EQ_NUM(training.optimizer.warmup_steps);
    EQ_NUM(training.optimizer.schedule);
    EQ_NUM(training.optimizer.min_lr);
    EQ_NUM(training.optimizer.grad_clip);
    EQ_NUM(training.seed);
    EQ_NUM(training.device);
    EQ_NUM(training.rendezvous_timeout_seconds);
    EQ_NUM(training.collective_timeout_seconds);
    EQ_NUM(training.threads);
    EQ_NUM(training.log_interval);
    EQ_NUM(training.report_interval_seconds);
    EQ_NUM(training.eval_interval);
    EQ_STR(training.export_path);
    EQ_STR(checkpoint.uri);
    EQ_NUM(checkpoint.interval_steps);
    EQ_NUM(checkpoint.keep);
    EQ_STR(checkpoint.endpoint);
    EQ_STR(checkpoint.credentials_secret);
    EQ_NUM(world_size);
#undef EQ_NUM
#undef EQ_STR
}

/* The load must fail with VJ_ERR_CONFIG, a one-line message containing
 * each of `needles`, and leave the config exactly as it was. */
static void expect_load_error(const char *text, const char *origin, const char *n1, const char *n2)
{
    vit_job_config cfg, before;
    char err[ERRLEN] = "";
    config_defaults(&cfg);
    cfg.training.steps = 77; /* a non-default value that a partial load could clobber */
    before = cfg;
    int rc = load(&cfg, text, origin, err);
    cr_assert_eq(rc, VJ_ERR_CONFIG, "rc=%d for:\n%s", rc, text);
    cr_assert(strchr(err, '\n') == NULL, "message spans lines: %s", err);
    cr_assert(strstr(err, n1) != NULL, "message [%s] lacks [%s]", err, n1);
    if (n2)
        cr_assert(strstr(err, n2) != NULL, "message [%s] lacks [%s]", err, n2);
    assert_config_eq(&cfg, &before);
}

static void expect_load_error_exact(const char *text, const char *origin, const char *msg)
{
    vit_job_config cfg;
    char err[ERRLEN] = "";
    config_defaults(&cfg);
    cr_assert_eq(load(&cfg, text, origin, err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, msg);
}

static void expect_set_error(const char *assignment, const char *n1, const char *n2)
{
    vit_job_config cfg, before;
    char err[ERRLEN] = "";
    config_defaults(&cfg);
    before = cfg;
    int rc = config_set(&cfg, assignment, err, sizeof err);
    cr_assert_eq(rc, VJ_ERR_CONFIG, "rc=%d for %s", rc, assignment);
    cr_assert(strstr(err, n1) != NULL, "message [%s] lacks [%s]", err, n1);
    if (n2)
        cr_assert(strstr(err, n2) != NULL, "message [%s] lacks [%s]", err, n2);
    assert_config_eq(&cfg, &before);
}

static void expect_invalid(const vit_job_config *cfg, const char *n1, const char *n2)
{
    char err[ERRLEN] = "";
    cr_assert_eq(config_validate(cfg, err, sizeof err), VJ_ERR_CONFIG, "validated");
    cr_assert(strchr(err, '\n') == NULL, "message spans lines: %s", err);
    cr_assert(strstr(err, n1) != NULL, "message [%s] lacks [%s]", err, n1);
    if (n2)
        cr_assert(strstr(err, n2) != NULL, "message [%s] lacks [%s]", err, n2);
}

static void set_ok(vit_job_config *cfg, const char *assignment)
{
    char err[ERRLEN] = "";
    cr_assert_eq(config_set(cfg, assignment, err, sizeof err), 0, "%s: %s", assignment, err);
}

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
    const char *file = __FILE__; /* ".../tests/test_config.c" or "tests/test_config.c" */
    const char *tail = strstr(file, "tests/test_config.c");
    if (tail == NULL)
        snprintf(out, n, "../examples/%s", name); /* compiled from inside tests/ */
    else if (tail == file)
        snprintf(out, n, "examples/%s", name);
    else
        snprintf(out, n, "%.*sexamples/%s", (int)(tail - file), file, name);
}

/* The same job, every key with a non-default value, in three spellings. */
static const char *FULL_JSON =
    "{\"model\": {\"preset\": \"fmnist_small\", \"imageSize\": 28, \"patchSize\": 4, \"channels\": 1,"
    "  \"dim\": 96, \"depth\": 3, \"heads\": 6, \"mlpRatio\": 2.5, \"numClasses\": 10,"
    "  \"init\": \"/tmp/init.safetensors\"},"
    " \"data\": {\"format\": \"fashion-mnist\", \"uri\": \"/data/fmnist\", \"testUri\": \"/data/fmnist-test\","
    "  \"endpoint\": \"https://minio:9000\", \"augment\": false, \"mean\": [0.25], \"std\": [0.125, 0.5, 0.75],"
    "  \"scale\": [0.25, 0.75], \"ratio\": [0.5, 2], \"interpolation\": \"bilinear\", \"cropPct\": 0.9,"
    "  \"workers\": 6, \"prefetchBatches\": 4, \"shuffleBuffer\": 5000, \"maxPixels\": 1000000,"
    "  \"maxBadFraction\": 0.01},"
    " \"training\": {\"steps\": 300, \"epochs\": 0, \"globalBatchSize\": 256, \"microBatchSize\": 32,"
    "  \"precision\": \"bf16-mixed\", \"sharding\": \"grad-op\", \"activationCheckpointing\": true,"
    "  \"optimizer\": {\"name\": \"adamw\", \"lr\": 0.0003, \"weightDecay\": 0.1, \"betas\": [0.9, 0.95],"
    "   \"eps\": 1e-6, \"warmupSteps\": 20, \"schedule\": \"constant\", \"minLr\": 0.00001, \"gradClip\": 0.5},"
    "  \"seed\": 42, \"device\": \"cpu\", \"rendezvousTimeoutSeconds\": 60, \"threads\": 4,"
    "  \"logInterval\": 10, \"evalInterval\": 100, \"exportPath\": \"out.safetensors\"},"
    " \"checkpoint\": {\"uri\": \"s3://bucket/ckpt/job\", \"intervalSteps\": 50, \"keep\": 2,"
    "  \"endpoint\": \"https://s3.example:9000\", \"credentialsSecret\": \"s3-creds\"}}";

static const char *FULL_YAML =
    "# comment\n"
    "model:\n"
    "  preset: fmnist_small\n"
    "  imageSize: 28\n"
    "  patchSize: 4\n"
    "  channels: 1\n"
    "  dim: 96\n"
    "  depth: 3\n"
    "  heads: 6\n"
    "  mlpRatio: 2.5\n"
    "  numClasses: 10\n"
    "  init: /tmp/init.safetensors\n"
    "data:\n"
    "  format: fashion-mnist\n"
    "  uri: \"/data/fmnist\"\n"
    "  testUri: /data/fmnist-test\n"
    "  endpoint: 'https://minio:9000'\n"
    "  augment: no\n"
    "  mean: [.25]\n"
    "  std:\n"
    "    - 0.125\n"
    "    - 0.5\n"
    "    - 0.75\n"
    "  scale: [0.25, 0.75]\n"
    "  ratio: [0.5, 2]\n"
    "  interpolation: bilinear\n"
    "  cropPct: 0.9\n"
    "  workers: 6\n"
    "  prefetchBatches: 4\n"
    "  shuffleBuffer: 5000\n"
    "  maxPixels: 1000000\n"
    "  maxBadFraction: 0.01\n"
    "training:\n"
    "  steps: 300\n"
    "  epochs: 0\n"
    "  globalBatchSize: 256\n"
    "  microBatchSize: 32\n"
    "  precision: bf16-mixed\n"
    "  sharding: 'grad-op'\n"
    "  activationCheckpointing: True\n"
    "  optimizer:\n"
    "    name: adamw\n"
    "    lr: 3e-4\n"
    "    weightDecay: 0.1\n"
    "    betas:\n"
    "      - 0.9\n"
    "      - 0.95\n"
    "    eps: 1.0e-6\n"
    "    warmupSteps: 20\n"
    "    schedule: constant\n"
    "    minLr: 1e-5\n"
    "    gradClip: .5\n"
    "  seed: 42\n"
    "  device: cpu\n"
    "  rendezvousTimeoutSeconds: 60\n"
    "  threads: 4\n"
    "  logInterval: 10\n"
    "  evalInterval: 100\n"
    "  exportPath: out.safetensors\n"
    "checkpoint:\n"
    "  uri: s3://bucket/ckpt/job\n"
    "  intervalSteps: 50\n"
    "  keep: 2\n"
    "  endpoint: https://s3.example:9000\n"
    "  credentialsSecret: s3-creds\n";

static void assert_is_full(const vit_job_config *c)
{
    cr_assert_str_eq(c->model.preset, "fmnist_small");
    cr_assert_eq(c->model.dim, 96);
    cr_assert_eq(c->model.heads, 6);
    cr_assert_eq(c->model.depth, 3);
    cr_assert(c->model.mlp_ratio == 2.5);
    cr_assert_str_eq(c->model.init, "/tmp/init.safetensors");
    cr_assert_str_eq(c->data.uri, "/data/fmnist");
    cr_assert_str_eq(c->data.test_uri, "/data/fmnist-test");
    cr_assert_str_eq(c->data.endpoint, "https://minio:9000");
    cr_assert_eq(c->data.augment, 0);
    cr_assert_eq(c->data.mean_n, 1);
    cr_assert(c->data.mean[0] == 0.25 && c->data.mean[1] == 0 && c->data.mean[2] == 0);
    cr_assert_eq(c->data.std_n, 3);
    cr_assert(c->data.std[0] == 0.125 && c->data.std[1] == 0.5 && c->data.std[2] == 0.75);
    cr_assert(c->data.scale_min == 0.25 && c->data.scale_max == 0.75);
    cr_assert(c->data.ratio_min == 0.5 && c->data.ratio_max == 2.0);
    cr_assert_eq(c->data.interpolation, INTERP_BILINEAR);
    cr_assert(c->data.crop_pct == 0.9);
    cr_assert_eq(c->data.workers, 6);
    cr_assert_eq(c->data.prefetch_batches, 4);
    cr_assert_eq(c->data.shuffle_buffer, 5000);
    cr_assert_eq(c->data.max_pixels, 1000000ULL);
    cr_assert(c->data.max_bad_fraction == 0.01);
    cr_assert_eq(c->training.steps, 300);
    cr_assert_eq(c->training.epochs, 0);
    cr_assert_eq(c->training.global_batch_size, 256);
    cr_assert_eq(c->training.micro_batch_size, 32);
    cr_assert_eq(c->training.precision, PRECISION_BF16_MIXED);
    cr_assert_eq(c->training.sharding, SHARDING_GRAD_OP);
    cr_assert_eq(c->training.activation_checkpointing, 1);
    cr_assert(c->training.optimizer.lr == 3e-4);
    cr_assert(c->training.optimizer.beta2 == 0.95);
    cr_assert(c->training.optimizer.eps == 1e-6);
    cr_assert(c->training.optimizer.min_lr == 1e-5);
    cr_assert(c->training.optimizer.grad_clip == 0.5);
    cr_assert_eq(c->training.optimizer.schedule, SCHEDULE_CONSTANT);
    cr_assert_eq(c->training.seed, 42);
    cr_assert_eq(c->training.device, DEVICE_CPU);
    cr_assert_eq(c->training.threads, 4);
    cr_assert_str_eq(c->checkpoint.uri, "s3://bucket/ckpt/job");
    cr_assert_str_eq(c->checkpoint.credentials_secret, "s3-creds");
    cr_assert_eq(c->checkpoint.keep, 2);
}

/* ---------------------------------------------------------------- defaults, presets */

Test(config, defaults_validate_cleanly)
{
    vit_job_config cfg;
    char err[ERRLEN] = "";
    config_defaults(&cfg);
    cr_assert_eq(config_validate(&cfg, err, sizeof err), 0, "%s", err);
}

Test(config, defaults_are_the_documented_values)
{
    vit_job_config c;
    config_defaults(&c);
    cr_assert_str_eq(c.model.preset, "fmnist_tiny");
    cr_assert_eq(c.model.image_size, 28);
    cr_assert_eq(c.model.patch_size, 7);
    cr_assert_eq(c.model.channels, 1);
    cr_assert_eq(c.model.dim, 64);
    cr_assert_eq(c.model.num_classes, 10);
    cr_assert_eq(c.data.format, DATA_FASHION_MNIST);
    cr_assert_str_eq(c.data.uri, "file:///usr/share/datasets/fashion-mnist");
    cr_assert_str_eq(c.data.test_uri, "");
    cr_assert_str_eq(c.data.endpoint, "");
    cr_assert_eq(c.data.augment, 0);
    cr_assert_eq(c.data.mean_n, 0, "unset: the default of the channels");
    cr_assert_eq(c.data.std_n, 0);
    cr_assert(c.data.scale_min == 0.08 && c.data.scale_max == 1.0);
    cr_assert(c.data.ratio_min == 0.75 && c.data.ratio_max == 4.0 / 3.0);
    cr_assert_eq(c.data.interpolation, INTERP_BICUBIC);
    cr_assert(c.data.crop_pct == 0.875);
    cr_assert_eq(c.data.workers, 0);
    cr_assert_eq(c.data.prefetch_batches, 2);
    cr_assert_eq(c.data.shuffle_buffer, 1000);
    cr_assert_eq(c.data.max_pixels, 89478485ULL);
    cr_assert(c.data.max_bad_fraction == 0.001);
    cr_assert_eq(c.training.steps, 0);
    cr_assert_eq(c.training.epochs, 2);
    cr_assert_eq(c.training.global_batch_size, 128);
    cr_assert_eq(c.training.micro_batch_size, 64);
    cr_assert_eq(c.training.precision, PRECISION_FP32);
    cr_assert_eq(c.training.sharding, SHARDING_NONE);
    cr_assert_eq(c.training.activation_checkpointing, 0);
    cr_assert_eq(c.training.optimizer.name, OPTIMIZER_ADAMW);
    cr_assert(c.training.optimizer.lr == 3e-3);
    cr_assert(c.training.optimizer.weight_decay == 0.05);
    cr_assert(c.training.optimizer.beta1 == 0.9 && c.training.optimizer.beta2 == 0.999);
    cr_assert(c.training.optimizer.eps == 1e-8);
    cr_assert_eq(c.training.optimizer.warmup_steps, 50);
    cr_assert_eq(c.training.optimizer.schedule, SCHEDULE_COSINE);
    cr_assert(c.training.optimizer.min_lr == 0.0);
    cr_assert(c.training.optimizer.grad_clip == 1.0);
    cr_assert_eq(c.training.seed, 1234);
    cr_assert_eq(c.training.device, DEVICE_AUTO);
    cr_assert_eq(c.training.rendezvous_timeout_seconds, 300);
    cr_assert_eq(c.training.threads, 0);
    cr_assert_eq(c.training.log_interval, 50);
    cr_assert_eq(c.training.eval_interval, 0);
    cr_assert_str_eq(c.training.export_path, "model.safetensors");
    cr_assert_str_eq(c.checkpoint.uri, "");
    cr_assert_eq(c.checkpoint.keep, 3);
    cr_assert_eq(c.checkpoint.interval_steps, 500);
    cr_assert_eq(c.world_size, 1);
}

Test(config, presets_set_timm_dims_and_keep_init)
{
    model_config m;
    memset(&m, 0, sizeof m);
    snprintf(m.init, sizeof m.init, "/w/vit_b16.safetensors");
    cr_assert_eq(config_preset(&m, "vit_b16"), 0);
    cr_assert_str_eq(m.preset, "vit_b16");
    cr_assert_eq(m.image_size, 224);
    cr_assert_eq(m.patch_size, 16);
    cr_assert_eq(m.channels, 3);
    cr_assert_eq(m.dim, 768);
    cr_assert_eq(m.depth, 12);
    cr_assert_eq(m.heads, 12);
    cr_assert(m.mlp_ratio == 4.0);
    cr_assert_eq(m.num_classes, 1000);
    cr_assert_str_eq(m.init, "/w/vit_b16.safetensors");

    static const struct { const char *name; int img, patch, ch, dim, depth, heads, hidden, classes; } want[] = {
        {"vit_ti16", 224, 16, 3, 192, 12, 3, 768, 1000},   {"vit_s16", 224, 16, 3, 384, 12, 6, 1536, 1000},
        {"vit_l16", 224, 16, 3, 1024, 24, 16, 4096, 1000}, {"vit_h14", 224, 14, 3, 1280, 32, 16, 5120, 1000},
        {"vit_g14", 224, 14, 3, 1408, 40, 16, 6144, 1000}, {"fmnist_tiny", 28, 7, 1, 64, 4, 4, 256, 10},
        {"fmnist_small", 28, 4, 1, 128, 6, 4, 512, 10},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cr_assert_eq(config_preset(&m, want[i].name), 0, "%s", want[i].name);
        cr_assert_str_eq(m.preset, want[i].name);
        cr_assert(m.image_size == want[i].img && m.patch_size == want[i].patch &&
                      m.channels == want[i].ch && m.dim == want[i].dim && m.depth == want[i].depth &&
                      m.heads == want[i].heads && m.num_classes == want[i].classes,
                  "%s dims", want[i].name);
        cr_assert_eq(config_mlp_hidden(&m), want[i].hidden, "%s hidden", want[i].name);
    }
}

Test(config, unknown_preset_returns_minus_one_and_leaves_model_untouched)
{
    model_config m, before;
    vit_job_config c;
    config_defaults(&c);
    m = c.model;
    before = m;
    cr_assert_eq(config_preset(&m, "vit_x99"), -1);
    cr_assert_eq(memcmp(&m, &before, sizeof m), 0);
}

Test(config, mlp_hidden_rounds_dim_times_ratio)
{
    model_config m = {.dim = 10, .mlp_ratio = 2.45};
    cr_assert_eq(config_mlp_hidden(&m), 25); /* 24.5 rounds away from zero */
    m.mlp_ratio = 2.44;
    cr_assert_eq(config_mlp_hidden(&m), 24);
}

Test(config, accum_steps_divide_global_by_micro_times_world)
{
    vit_job_config c;
    config_defaults(&c);
    cr_assert_eq(config_accum_steps(&c), 2); /* 128 / 64 */
    c.training.global_batch_size = 4096;
    c.training.micro_batch_size = 64;
    c.world_size = 4;
    cr_assert_eq(config_accum_steps(&c), 16);
}

/* ---------------------------------------------------------------- loading */

Test(config, json_and_yaml_of_the_same_content_give_identical_configs)
{
    vit_job_config j = load_ok(FULL_JSON);
    vit_job_config y = load_ok(FULL_YAML);
    assert_is_full(&j);
    assert_config_eq(&j, &y);
    char err[ERRLEN] = "";
    cr_assert_eq(config_validate(&j, err, sizeof err), 0, "%s", err);
}

Test(config, json_is_detected_by_content_not_by_name)
{
    vit_job_config a, b;
    char err[ERRLEN] = "";
    config_defaults(&a);
    config_defaults(&b);
    cr_assert_eq(load(&a, FULL_JSON, "looks-like.yaml", err), 0, "%s", err);
    cr_assert_eq(load(&b, FULL_YAML, "looks-like.json", err), 0, "%s", err);
    assert_config_eq(&a, &b);
}

Test(config, yaml_flow_mapping_starting_with_brace_is_accepted)
{
    vit_job_config c = load_ok("  {model: {dim: 32, heads: 2}, training: {steps: 5}}");
    cr_assert_eq(c.model.dim, 32);
    cr_assert_eq(c.model.heads, 2);
    cr_assert_eq(c.training.steps, 5);
}

Test(config, manifest_form_uses_spec_and_ignores_metadata_status_and_operator_keys)
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

Test(config, bare_spec_may_carry_operator_only_keys)
{
    vit_job_config c = load_ok("replicas: 2\ngpusPerReplica: 0\nimage: x\ntraining: {steps: 9}\n");
    cr_assert_eq(c.training.steps, 9);
}

Test(config, preset_is_applied_before_explicit_model_keys_whatever_the_order)
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

Test(config, later_document_preset_overrides_earlier_dims_but_keeps_init)
{
    vit_job_config c = load_ok("model: {dim: 96, init: /w/a.safetensors}\n");
    char err[ERRLEN] = "";
    cr_assert_eq(load(&c, "model: {preset: vit_b16}\n", "second.yaml", err), 0, "%s", err);
    cr_assert_eq(c.model.dim, 768);
    cr_assert_str_eq(c.model.init, "/w/a.safetensors");
}

Test(config, yaml_plain_scalars_resolve_as_yaml_1_1)
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

Test(config, null_section_is_empty_but_null_value_is_an_error)
{
    vit_job_config c = load_ok("checkpoint:\ntraining:\n  steps: 3\n");
    cr_assert_eq(c.training.steps, 3);
    expect_load_error("training:\n  steps:\n", "t.yaml", "training.steps: expected an integer, got null", NULL);
    expect_load_error("training:\n  steps: ~\n", "t.yaml", "training.steps: expected an integer, got null", NULL);
}

Test(config, integer_is_accepted_for_a_double_field)
{
    vit_job_config c = load_ok("{\"training\": {\"optimizer\": {\"lr\": 1, \"gradClip\": 0, \"betas\": [0, 0.5]}}}");
    cr_assert(c.training.optimizer.lr == 1.0);
    cr_assert(c.training.optimizer.grad_clip == 0.0);
    cr_assert(c.training.optimizer.beta1 == 0.0);
}

Test(config, empty_preset_keeps_the_current_dims)
{
    vit_job_config c = load_ok("model: {dim: 96, preset: \"\"}\n");
    cr_assert_str_eq(c.model.preset, "");
    cr_assert_eq(c.model.dim, 96);
    cr_assert_eq(c.model.image_size, 28);
}

Test(config, load_file_reads_yaml_and_json_from_disk)
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

Test(config, examples_load_validate_and_describe_the_same_job)
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

Test(config, the_imagenet_example_validates_at_its_world_size_with_deits_lr_rule)
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

Test(config, unknown_key_is_rejected_naming_the_key)
{
    expect_load_error("training:\n  stpes: 10\n", "job.yaml", "job.yaml: unknown key 'training.stpes'",
                      "did you mean 'training.steps'");
    expect_load_error("{\"modle\": {}}", "job.json", "job.json: unknown key 'modle'", NULL);
    expect_load_error("training: {optimizer: {momentum: 0.9}}\n", "t.yaml",
                      "unknown key 'training.optimizer.momentum'", NULL);
}

Test(config, operator_keys_are_only_ignored_at_spec_level)
{
    expect_load_error("model: {replicas: 2}\n", "t.yaml", "unknown key 'model.replicas'", NULL);
}

Test(config, unknown_key_suggests_the_intended_key)
{
    expect_load_error("model: {image_size: 28}\n", "t.yaml", "unknown key 'model.image_size'",
                      "did you mean 'model.imageSize'");
    expect_load_error("training: {lr: 0.1}\n", "t.yaml", "unknown key 'training.lr'",
                      "did you mean 'training.optimizer.lr'");
}

Test(config, dotted_key_in_a_file_is_rejected)
{
    expect_load_error("{\"training.steps\": 5}", "t.json", "unknown key 'training.steps'", "nested");
}

Test(config, unknown_key_at_manifest_top_level_is_rejected)
{
    expect_load_error("apiVersion: vitjob.dev/v1alpha1\nkind: ViTJob\nspec: {}\nextra: 1\n", "m.yaml",
                      "m.yaml: unknown key 'extra'", NULL);
    expect_load_error("apiVersion: vitjob.dev/v1alpha1\nkind: ViTJob\n", "m.yaml", "no spec", NULL);
    expect_load_error("kind: ViTJob\nspec: [1]\n", "m.yaml", "spec: expected an object, got array", NULL);
}

Test(config, duplicate_key_is_rejected)
{
    expect_load_error("training:\n  steps: 1\n  steps: 2\n", "t.yaml", "duplicate key 'training.steps'", NULL);
    expect_load_error("{\"training\": {\"steps\": 1}, \"training\": {\"epochs\": 2}}", "t.json",
                      "duplicate key 'training'", NULL);
}

Test(config, string_for_an_integer_field_is_rejected_naming_key_and_value)
{
    expect_load_error_exact("{\"training\": {\"steps\": \"ten\"}}", "job.json",
                            "job.json: training.steps: expected an integer, got string \"ten\"");
}

Test(config, quoted_number_in_yaml_is_a_string_and_rejected_for_an_integer_field)
{
    expect_load_error_exact("training:\n  microBatchSize: \"64\"\n", "job.yaml",
                            "job.yaml: training.microBatchSize: expected an integer, got string \"64\"");
    expect_load_error("training:\n  microBatchSize: '64'\n", "job.yaml",
                      "training.microBatchSize: expected an integer, got string \"64\"", NULL);
    expect_load_error("training: {optimizer: {lr: \"0.1\"}}\n", "job.yaml",
                      "training.optimizer.lr: expected a number, got string \"0.1\"", NULL);
}

Test(config, float_for_an_integer_field_is_rejected)
{
    expect_load_error("training: {steps: 1.5}\n", "t.yaml", "training.steps: expected an integer, got number 1.5", NULL);
    expect_load_error("{\"model\": {\"dim\": 64.25}}", "t.json", "model.dim: expected an integer, got number 64.25", NULL);
}

Test(config, boolean_field_needs_a_real_boolean)
{
    expect_load_error("data: {augment: 1}\n", "t.yaml", "data.augment: expected a boolean", "got number 1");
    expect_load_error("data: {augment: \"true\"}\n", "t.yaml", "data.augment: expected a boolean", "got string \"true\"");
}

Test(config, string_field_needs_a_string_that_fits)
{
    expect_load_error("data: {uri: 5}\n", "t.yaml", "data.uri: expected a string, got number 5", NULL);
    char doc[1024];
    char longv[600];
    memset(longv, 'a', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    snprintf(doc, sizeof doc, "model: {init: %s}\n", longv);
    expect_load_error(doc, "t.yaml", "model.init: a string of 599 bytes is too long (at most 511)", NULL);
}

Test(config, out_of_range_value_is_rejected_with_the_bounds)
{
    expect_load_error_exact("training:\n  microBatchSize: 0\n", "job.yaml",
                            "job.yaml: training.microBatchSize=0 is out of range [1, 65536]");
    expect_load_error("training: {threads: 2000}\n", "t.yaml", "training.threads=2000 is out of range [0, 1024]", NULL);
    expect_load_error("training: {steps: -1}\n", "t.yaml", "training.steps=-1 is out of range [0, 1000000000000]", NULL);
    expect_load_error("model: {dim: 1e300}\n", "t.yaml", "model.dim=1e+300 is out of range [1, 65536]", NULL);
}

Test(config, open_bounds_exclude_their_endpoint)
{
    expect_load_error("training: {optimizer: {lr: 0}}\n", "t.yaml", "training.optimizer.lr=0 is out of range (0, 10]", NULL);
    expect_load_error("training: {optimizer: {lr: .inf}}\n", "t.yaml", "training.optimizer.lr=inf is out of range (0, 10]", NULL);
    expect_load_error("training: {optimizer: {lr: .nan}}\n", "t.yaml", "training.optimizer.lr=nan is out of range", NULL);
    vit_job_config c = load_ok("training: {optimizer: {lr: 10}}\n");
    cr_assert(c.training.optimizer.lr == 10.0);
}

Test(config, bad_enum_value_lists_the_allowed_values)
{
    expect_load_error_exact("training:\n  precision: fp16\n", "job.yaml",
                            "job.yaml: training.precision=\"fp16\" is not one of fp32, bf16-mixed, fp16-mixed");
    expect_load_error("training: {sharding: zero3}\n", "t.yaml",
                      "training.sharding=\"zero3\" is not one of none, grad-op, full", NULL);
    expect_load_error("training: {device: 3}\n", "t.yaml", "training.device: expected a string, got number 3", NULL);
}

Test(config, unknown_preset_in_a_file_names_the_value_and_lists_the_presets)
{
    expect_load_error("model: {preset: vit_x99, dim: 64}\n", "t.yaml", "model.preset=\"vit_x99\" is not one of",
                      "vit_ti16, vit_s16, vit_b16, vit_l16, vit_h14, vit_g14, fmnist_tiny, fmnist_small");
}

Test(config, non_object_section_is_rejected)
{
    expect_load_error("training: 5\n", "t.yaml", "t.yaml: training: expected an object, got number 5", NULL);
    expect_load_error("training:\n  optimizer: [1, 2]\n", "t.yaml", "training.optimizer: expected an object, got array", NULL);
    expect_load_error("model: fmnist_tiny\n", "t.yaml", "model: expected an object, got string \"fmnist_tiny\"", NULL);
}

Test(config, top_level_must_be_an_object)
{
    expect_load_error("- a\n- b\n", "t.yaml", "expected an object", "got array");
    expect_load_error("just words\n", "t.yaml", "expected an object", "got string \"just words\"");
    expect_load_error("", "t.yaml", "t.yaml: the config is empty", NULL);
    expect_load_error("# only a comment\n", "t.yaml", "the config is empty", NULL);
}

Test(config, betas_must_be_two_numbers_below_one)
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

Test(config, missing_file_reports_the_path_and_strerror)
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

Test(config, invalid_yaml_reports_line_and_column)
{
    const char *doc = "model:\n  dim: 64\n   heads: 4\n";
    expect_load_error(doc, "bad.yaml", "bad.yaml: invalid YAML at line 3 column ", NULL);
    expect_load_error("training: {steps: 1\n", "bad.yaml", "bad.yaml: invalid YAML at line 2 column 1: ", NULL);
}

Test(config, invalid_json_reports_the_byte_offset)
{
    expect_load_error("{\"model\": {\"dim\": 64}", "bad.json", "bad.json: invalid JSON near byte ", NULL);
    expect_load_error_exact("{\"model\": {\"dim\": 64}} trailing", "bad.json", "bad.json: invalid JSON near byte 23");
}

Test(config, yaml_aliases_and_second_documents_are_rejected)
{
    expect_load_error("base: &b {steps: 1}\ntraining: *b\n", "t.yaml", "invalid YAML at line 2", "aliases");
    expect_load_error("training: {steps: 1}\n---\ntraining: {steps: 2}\n", "t.yaml", "invalid YAML at line 2",
                      "one document");
}

Test(config, nul_byte_in_the_document_is_rejected)
{
    vit_job_config c;
    char err[ERRLEN] = "";
    config_defaults(&c);
    static const char doc[] = "training: {steps: 1}\0junk";
    cr_assert_eq(config_load_string(&c, doc, sizeof doc - 1, "nul.yaml", err, sizeof err), VJ_ERR_CONFIG);
    cr_assert(strstr(err, "NUL byte at byte 20") != NULL, "%s", err);
}

Test(config, errors_fit_small_buffers_and_tolerate_a_null_buffer)
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

/* ---------------------------------------------------------------- validation */

Test(config, dim_not_divisible_by_heads_fails_validation)
{
    vit_job_config c = load_ok("model: {dim: 100, heads: 3}\n");
    char err[ERRLEN] = "";
    cr_assert_eq(config_validate(&c, err, sizeof err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, "model.dim=100 is not divisible by model.heads=3");
}

Test(config, image_not_divisible_by_patch_fails_validation)
{
    vit_job_config c = load_ok("model: {patchSize: 5}\n");
    expect_invalid(&c, "model.imageSize=28 is not divisible by model.patchSize=5", NULL);
}

Test(config, global_batch_not_divisible_by_micro_times_world_fails_validation)
{
    vit_job_config c = load_ok("training: {globalBatchSize: 100, microBatchSize: 64}\n");
    expect_invalid(&c, "training.globalBatchSize=100", "training.microBatchSize=64");
    expect_invalid(&c, "world size 1", NULL);

    c = load_ok("training: {globalBatchSize: 128, microBatchSize: 64}\n");
    c.world_size = 3;
    expect_invalid(&c, "training.globalBatchSize=128", "world size 3");
    c.world_size = 2;
    char err[ERRLEN] = "";
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_accum_steps(&c), 1);
    c.world_size = 0;
    expect_invalid(&c, "world size 0", NULL);
}

Test(config, zero_steps_and_zero_epochs_fail_validation)
{
    vit_job_config c = load_ok("training: {steps: 0, epochs: 0}\n");
    expect_invalid(&c, "training.steps=0", "training.epochs=0");
}

Test(config, warmup_longer_than_steps_fails_validation)
{
    vit_job_config c = load_ok("training: {steps: 50, optimizer: {warmupSteps: 100}}\n");
    expect_invalid(&c, "training.optimizer.warmupSteps=100", "training.steps=50");
    c.training.steps = 0; /* epochs decide: warmup is not compared */
    char err[ERRLEN] = "";
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
}

Test(config, min_lr_above_lr_fails_validation)
{
    vit_job_config c = load_ok("training: {optimizer: {lr: 0.001, minLr: 0.01}}\n");
    expect_invalid(&c, "training.optimizer.minLr=0.01", "training.optimizer.lr=0.001");
}

Test(config, warmup_equal_to_steps_and_min_lr_equal_to_lr_are_valid)
{
    /* "must not exceed": the equal values are the edge of what is allowed */
    vit_job_config c = load_ok("training: {steps: 50, optimizer: {warmupSteps: 50}}\n");
    char err[ERRLEN] = "";
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    c = load_ok("training: {optimizer: {lr: 0.001, minLr: 0.001}}\n");
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
}

Test(config, shards_is_no_longer_a_format_and_is_refused_naming_the_formats)
{
    expect_load_error_exact("data: {format: shards}\n", "job.yaml",
                            "job.yaml: data.format=\"shards\" is not one of fashion-mnist, "
                            "webdataset, imagefolder");
    expect_set_error("data.format=shards", "--set: data.format=\"shards\" is not one of", NULL);
}

static void expect_valid(const vit_job_config *cfg)
{
    char err[ERRLEN] = "";
    cr_assert_eq(config_validate(cfg, err, sizeof err), 0, "%s", err);
}

/* vit_ti16 (224x224x3) on webdataset shards, valid as it is, then `extra`
 * (a second document: its keys override, its sections merge). */
static vit_job_config wds(const char *extra)
{
    vit_job_config c = load_ok("model: {preset: vit_ti16}\n"
                               "data: {format: webdataset, uri: \"s3://b/train-{0..9}.tar\"}\n");
    char err[ERRLEN] = "";
    if (extra)
        cr_assert_eq(load(&c, extra, "extra.yaml", err), 0, "%s", err);
    return c;
}

Test(config, webdataset_and_imagefolder_take_rgb_or_grayscale_of_any_size)
{
    vit_job_config c = wds(NULL);
    expect_valid(&c);
    c = wds("data: {format: imagefolder, uri: /data/train, testUri: /data/val}\n");
    expect_valid(&c);
    c = load_ok("model: {preset: vit_ti16, channels: 1, imageSize: 64, patchSize: 8, numClasses: 2}\n"
                "data: {format: webdataset, uri: \"/data/train-{0..3}.tar\"}\n");
    expect_valid(&c);
}

Test(config, webdataset_and_imagefolder_need_one_or_three_channels)
{
    vit_job_config c = wds("model: {channels: 2}\n");
    expect_invalid(&c, "model.channels=2 does not fit data.format=webdataset", "must be 3 or 1");
    c = load_ok("model: {preset: vit_ti16, channels: 4}\ndata: {format: imagefolder, uri: /d}\n");
    expect_invalid(&c, "model.channels=4 does not fit data.format=imagefolder", NULL);
}

Test(config, mean_and_std_when_given_need_one_number_per_channel)
{
    vit_job_config c = wds("data: {mean: [0.5]}\n");
    expect_invalid(&c, "data.mean has 1 number but model.channels=3", "leave data.mean out");
    c = wds("data: {std: [0.2, 0.2]}\n");
    expect_invalid(&c, "data.std has 2 numbers but model.channels=3", NULL);
    c = wds("model: {channels: 1}\ndata: {mean: [0.4, 0.5, 0.6]}\n");
    expect_invalid(&c, "data.mean has 3 numbers but model.channels=1", NULL);
    c = wds("data: {mean: [0.4, 0.5, 0.6], std: [0.2, 0.25, 0.3]}\n");
    expect_valid(&c);
    c = wds("model: {channels: 1}\ndata: {mean: [0.4], std: [0.3]}\n");
    expect_valid(&c);
}

Test(config, fashion_mnist_ignores_the_image_keys)
{
    /* three numbers for its one channel: not read, so not refused */
    vit_job_config c = load_ok("data: {mean: [0.4, 0.5, 0.6], std: [0.2], interpolation: bilinear,"
                               " cropPct: 0.5, workers: 3}\n");
    expect_valid(&c);
}

Test(config, imagefolder_refuses_s3_uris_naming_the_key_and_the_way_to_s3)
{
    vit_job_config c = wds("data: {format: imagefolder, uri: \"s3://b/train\"}\n");
    expect_invalid(&c, "data.uri=\"s3://b/train\": imagefolder reads a local folder or mounted volume",
                   "write webdataset shards with vitjob-worker shards for S3");
    c = wds("data: {format: imagefolder, uri: /d/train, testUri: \"s3://b/val\"}\n");
    expect_invalid(&c, "data.testUri=\"s3://b/val\": imagefolder reads a local folder", NULL);
    c = wds("data: {testUri: \"s3://b/val-{0..3}.tar\"}\n");
    expect_valid(&c); /* webdataset reads S3 */
}

Test(config, scale_and_ratio_need_min_at_most_max)
{
    vit_job_config c = wds("data: {scale: [0.9, 0.5]}\n");
    expect_invalid(&c, "data.scale=[0.9, 0.5]: the minimum 0.9 exceeds the maximum 0.5", NULL);
    c = wds("data: {ratio: [2, 0.5]}\n");
    expect_invalid(&c, "data.ratio=[2, 0.5]: the minimum 2 exceeds the maximum 0.5", NULL);
    c = load_ok("data: {ratio: [2, 0.5]}\n"); /* a value malformed in itself, whatever the format */
    expect_invalid(&c, "data.ratio=[2, 0.5]", NULL);
    c = wds("data: {scale: [1, 1], ratio: [1, 1]}\n"); /* equal: a fixed crop */
    expect_valid(&c);
}

Test(config, data_keys_refuse_values_out_of_their_bounds)
{
    expect_load_error("data: {workers: 257}\n", "t.yaml", "data.workers=257 is out of range [0, 256]", NULL);
    expect_load_error("data: {workers: -1}\n", "t.yaml", "data.workers=-1 is out of range [0, 256]", NULL);
    expect_load_error("data: {prefetchBatches: 0}\n", "t.yaml", "data.prefetchBatches=0 is out of range [1, 64]", NULL);
    expect_load_error("data: {prefetchBatches: 65}\n", "t.yaml", "data.prefetchBatches=65 is out of range [1, 64]", NULL);
    expect_load_error("data: {shuffleBuffer: 0}\n", "t.yaml", "data.shuffleBuffer=0 is out of range [1, 1000000]", NULL);
    expect_load_error("data: {shuffleBuffer: 1000001}\n", "t.yaml", "data.shuffleBuffer=1000001 is out of range", NULL);
    expect_load_error("data: {maxPixels: 0}\n", "t.yaml", "data.maxPixels=0 is out of range [1, 9007199254740991]", NULL);
    expect_load_error("data: {maxPixels: 1.5}\n", "t.yaml", "data.maxPixels: expected an integer", NULL);
    expect_load_error("data: {maxBadFraction: 1.5}\n", "t.yaml", "data.maxBadFraction=1.5 is out of range [0, 1]", NULL);
    expect_load_error("data: {maxBadFraction: -0.1}\n", "t.yaml", "data.maxBadFraction=-0.1 is out of range [0, 1]", NULL);
    expect_load_error("data: {cropPct: 0}\n", "t.yaml", "data.cropPct=0 is out of range (0, 1]", NULL);
    expect_load_error("data: {cropPct: 1.01}\n", "t.yaml", "data.cropPct=1.01 is out of range (0, 1]", NULL);
    expect_load_error("data: {scale: [0, 1]}\n", "t.yaml", "data.scale[0]=0 is out of range (0, 1]", NULL);
    expect_load_error("data: {scale: [0.5, 1.5]}\n", "t.yaml", "data.scale[1]=1.5 is out of range (0, 1]", NULL);
    expect_load_error("data: {scale: [0.5]}\n", "t.yaml", "data.scale: expected an array of 2 numbers, got an array of 1", NULL);
    expect_load_error("data: {ratio: [0, 1]}\n", "t.yaml", "data.ratio[0]=0 is out of range (0, 100]", NULL);
    expect_load_error("data: {ratio: [1, 101]}\n", "t.yaml", "data.ratio[1]=101 is out of range (0, 100]", NULL);
    expect_load_error("data: {interpolation: nearest}\n", "t.yaml",
                      "data.interpolation=\"nearest\" is not one of bilinear, bicubic", NULL);
    expect_load_error("data: {testUri: 3}\n", "t.yaml", "data.testUri: expected a string, got number 3", NULL);
    char doc[700];
    snprintf(doc, sizeof doc, "data: {endpoint: \"%0600d\"}\n", 0);
    expect_load_error(doc, "t.yaml", "data.endpoint: a string of 600 bytes is too long (at most 511)", NULL);
}

Test(config, mean_and_std_are_one_to_three_numbers_in_bounds)
{
    expect_load_error("data: {mean: []}\n", "t.yaml",
                      "data.mean: expected an array of 1 to 3 numbers, got an array of 0", NULL);
    expect_load_error("data: {mean: [0.1, 0.2, 0.3, 0.4]}\n", "t.yaml",
                      "data.mean: expected an array of 1 to 3 numbers, got an array of 4", NULL);
    expect_load_error("data: {mean: 0.5}\n", "t.yaml",
                      "data.mean: expected an array of 1 to 3 numbers, got number 0.5", NULL);
    expect_load_error("data: {mean: [0.5, x]}\n", "t.yaml", "data.mean[1]: expected a number, got string \"x\"", NULL);
    expect_load_error("data: {mean: [123.675]}\n", "t.yaml", "data.mean[0]=123.675 is out of range [0, 1]", NULL);
    expect_load_error("data: {mean: [-0.1]}\n", "t.yaml", "data.mean[0]=-0.1 is out of range [0, 1]", NULL);
    expect_load_error("data: {std: [0.2, 0]}\n", "t.yaml", "data.std[1]=0 is out of range (0, 1]", NULL);
    expect_load_error("data: {std: [58.395]}\n", "t.yaml", "data.std[0]=58.395 is out of range (0, 1]", NULL);
    vit_job_config c = load_ok("data: {mean: [0], std: [1]}\n"); /* the closed ends */
    cr_assert(c.data.mean_n == 1 && c.data.mean[0] == 0.0 && c.data.std[0] == 1.0);
}

Test(config, a_null_mean_or_std_is_the_default_and_a_later_one_replaces_the_earlier)
{
    vit_job_config c = load_ok("data: {mean: [0.1, 0.2, 0.3], std: [0.4, 0.5, 0.6]}\n");
    char err[ERRLEN] = "";
    cr_assert_eq(load(&c, "data: {mean: [0.7]}\n", "t2.yaml", err), 0, "%s", err);
    cr_assert(c.data.mean_n == 1 && c.data.mean[0] == 0.7, "the later array, whole");
    cr_assert(c.data.mean[1] == 0 && c.data.mean[2] == 0, "no number of the earlier left behind");
    cr_assert_eq(load(&c, "data:\n  std:\n", "t3.yaml", err), 0, "%s", err);
    cr_assert_eq(c.data.std_n, 0);
    cr_assert(c.data.std[0] == 0 && c.data.std[2] == 0);
    cr_assert_eq(load(&c, "{\"data\": {\"mean\": null}}", "t.json", err), 0, "%s", err);
    cr_assert_eq(c.data.mean_n, 0);
}

Test(config, data_norm_is_the_given_numbers_or_the_channels_default)
{
    double mean[CONFIG_DATA_CHANNELS_MAX], std[CONFIG_DATA_CHANNELS_MAX];
    vit_job_config c = wds(NULL);
    cr_assert_eq(config_data_norm(&c, mean, std), 3);
    cr_assert(mean[0] == 0.485 && mean[1] == 0.456 && mean[2] == 0.406);
    cr_assert(std[0] == 0.229 && std[1] == 0.224 && std[2] == 0.225);
    c = wds("data: {mean: [0.1, 0.2, 0.3]}\n");
    cr_assert_eq(config_data_norm(&c, mean, std), 3);
    cr_assert(mean[0] == 0.1 && mean[1] == 0.2 && mean[2] == 0.3);
    cr_assert(std[0] == 0.229, "std not given: still the default");
    c = wds("model: {channels: 1}\n");
    cr_assert_eq(config_data_norm(&c, mean, std), 1);
    cr_assert(mean[0] == 0.5 && std[0] == 0.5);
    c = wds("model: {channels: 1}\ndata: {std: [0.25]}\n");
    cr_assert_eq(config_data_norm(&c, mean, std), 1);
    cr_assert(mean[0] == 0.5 && std[0] == 0.25);
    c = wds("model: {channels: 5}\n");
    mean[0] = -1;
    cr_assert_eq(config_data_norm(&c, mean, std), 0);
    cr_assert(mean[0] == -1, "nothing written");
}

Test(config, fashion_mnist_needs_28x28x1_images_and_10_classes)
{
    vit_job_config c = load_ok("model: {preset: vit_b16}\n");
    expect_invalid(&c, "model.imageSize=224", "28x28x1");
    c = load_ok("model: {channels: 3}\n");
    expect_invalid(&c, "model.channels=3", "28x28x1");
    c = load_ok("model: {numClasses: 5}\n");
    expect_invalid(&c, "model.numClasses=5", "10");
}

Test(config, mlp_hidden_of_zero_fails_validation)
{
    vit_job_config c = load_ok("model: {dim: 1, heads: 1, mlpRatio: 0.1}\n");
    expect_invalid(&c, "model.mlpRatio=0.1", "MLP hidden width of 0");
}

Test(config, checkpoint_uri_needs_a_known_scheme)
{
    vit_job_config c = load_ok("checkpoint: {uri: \"http://x/y\"}\n");
    expect_invalid(&c, "checkpoint.uri=\"http://x/y\"", "s3:// or file://");
}

Test(config, validate_rechecks_fields_that_code_set_directly)
{
    vit_job_config c;
    config_defaults(&c);
    c.training.micro_batch_size = 0;
    expect_invalid(&c, "training.microBatchSize=0 is out of range [1, 65536]", NULL);
    config_defaults(&c);
    c.training.device = (device_kind)7; /* no such value */
    expect_invalid(&c, "training.device=\"?\" is not one of cpu, cuda, auto", NULL);
    config_defaults(&c);
    memset(c.model.init, 'x', sizeof c.model.init);
    expect_invalid(&c, "model.init: string is not NUL-terminated", NULL);
    config_defaults(&c);
    c.data.mean_n = 4;
    expect_invalid(&c, "data.mean: expected an array of 1 to 3 numbers", NULL);
    config_defaults(&c);
    c.data.std_n = 1; /* std[0] still 0 */
    expect_invalid(&c, "data.std[0]=0 is out of range (0, 1]", NULL);
    config_defaults(&c);
    c.data.scale_max = 0.01;
    expect_invalid(&c, "data.scale=[0.08, 0.01]", NULL);
}

/* ---------------------------------------------------------------- --set */

Test(config, set_overrides_an_int_a_long_and_a_u64)
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

Test(config, set_overrides_a_double_and_a_bool)
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

Test(config, set_overrides_a_string_as_is_and_an_enum)
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

Test(config, set_overrides_betas_in_both_spellings)
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

Test(config, set_overrides_mean_and_std_with_one_to_three_numbers_and_empty_resets_them)
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

Test(config, set_overrides_the_other_data_keys)
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

Test(config, set_preset_overwrites_model_dims)
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

Test(config, set_rejects_bad_values_with_the_file_messages)
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

Test(config, set_rejects_unknown_keys_sections_and_missing_equals)
{
    expect_set_error("training.stpes=1", "--set: unknown key 'training.stpes'", "did you mean 'training.steps'");
    expect_set_error("replicas=2", "--set: unknown key 'replicas'", NULL);
    expect_set_error("training.optimizer=adamw", "--set: training.optimizer is a section", NULL);
    expect_set_error("training.steps", "--set: expected key=value, got \"training.steps\"", NULL);
}

/* ---------------------------------------------------------------- to_json */

static void assert_round_trip(const vit_job_config *orig)
{
    char *json = config_to_json(orig);
    cr_assert_not_null(json);
    cr_assert(strchr(json, '\n') == NULL, "to_json is not one line");
    vit_job_config back;
    char err[ERRLEN] = "";
    config_defaults(&back);
    /* start from something different, so that every field must come from the JSON */
    cr_assert_eq(config_preset(&back.model, "vit_h14"), 0);
    back.training.optimizer.lr = 7;
    snprintf(back.checkpoint.uri, sizeof back.checkpoint.uri, "s3://other");
    back.world_size = orig->world_size; /* not a config key: comes from the environment */
    int rc = config_load_string(&back, json, strlen(json), "to_json", err, sizeof err);
    cr_assert_eq(rc, 0, "%s\n%s", err, json);
    assert_config_eq(orig, &back);
    free(json);
}

Test(config, to_json_round_trips_through_load)
{
    vit_job_config c = load_ok(FULL_JSON);
    assert_round_trip(&c);
    config_defaults(&c);
    assert_round_trip(&c);
}

Test(config, to_json_round_trips_awkward_doubles_and_large_integers_exactly)
{
    vit_job_config c;
    config_defaults(&c);
    cr_assert_eq(config_preset(&c.model, "vit_g14"), 0); /* mlpRatio 48/11 */
    c.training.optimizer.lr = 0.1 + 0.2;                 /* 0.30000000000000004 */
    c.training.optimizer.beta2 = 1.0 - 1e-12;
    c.training.optimizer.eps = 4.9406564584124654e-324;  /* smallest subnormal */
    c.training.seed = 9007199254740991ULL;
    c.training.steps = 999999999999L;
    c.data.mean_n = 3;
    c.data.mean[0] = 0.1 + 0.2;
    c.data.mean[1] = 1.0 / 3.0;
    c.data.mean[2] = 0.485;
    c.data.std_n = 1;
    c.data.std[0] = 0.229;
    c.data.ratio_max = 4.0 / 3.0;
    c.data.max_pixels = 9007199254740991ULL;
    assert_round_trip(&c);
}

Test(config, to_json_writes_an_unset_mean_as_null_and_a_given_one_as_its_numbers)
{
    vit_job_config c;
    config_defaults(&c);
    char *json = config_to_json(&c);
    cr_assert_not_null(json);
    cr_assert(strstr(json, "\"mean\":null,\"std\":null,\"scale\":[0.08,1],") != NULL, "%s", json);
    cr_assert(strstr(json, "\"interpolation\":\"bicubic\"") != NULL, "%s", json);
    free(json);
    set_ok(&c, "data.mean=[0.5]");
    json = config_to_json(&c);
    cr_assert(strstr(json, "\"mean\":[0.5],\"std\":null") != NULL, "%s", json);
    free(json);
}

Test(config, to_json_nests_keys_by_section_with_file_names)
{
    vit_job_config c;
    config_defaults(&c);
    char *json = config_to_json(&c);
    cr_assert_not_null(json);
    cr_assert(strstr(json, "\"training\":{\"steps\":0,\"epochs\":2,\"globalBatchSize\":128") != NULL, "%s", json);
    cr_assert(strstr(json, "\"optimizer\":{\"name\":\"adamw\",\"lr\":0.003") != NULL, "%s", json);
    cr_assert(strstr(json, "\"betas\":[0.9,0.999]") != NULL, "%s", json);
    cr_assert(strstr(json, "\"model\":{\"preset\":\"fmnist_tiny\"") != NULL, "%s", json);
    free(json);
}

/* ---------------------------------------------------- the CRD agrees ---- */

static const cJSON *crd_property(const cJSON *node, const char *path)
{
    char part[128];
    for (const char *p = path; node && *p;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(part, sizeof part, "%.*s", (int)n, p);
        node = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(node, "properties"),
                                                part);
        p += n + (dot != NULL);
    }
    return node;
}

static int same_json_value(const cJSON *a, const cJSON *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        return fabs(a->valuedouble - b->valuedouble) <= 1e-12 * fmax(1, fabs(a->valuedouble));
    if (cJSON_IsArray(a) && cJSON_IsArray(b)) {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
            return 0;
        for (int i = 0; i < cJSON_GetArraySize(a); i++)
            if (!same_json_value(cJSON_GetArrayItem(a, i), cJSON_GetArrayItem(b, i)))
                return 0;
        return 1;
    }
    return cJSON_Compare(a, b, 1);
}

/* Every CRD leaf under model, data, training and checkpoint, dotted. */
static void crd_leaves(const cJSON *node, const char *prefix, char (*out)[128], int *n)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(node, "properties");
    if (props == NULL) {
        snprintf(out[(*n)++], 128, "%s", prefix);
        return;
    }
    for (const cJSON *p = props->child; p; p = p->next) {
        char path[128];
        snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", p->string);
        crd_leaves(p, path, out, n);
    }
}

Test(config, the_crds_keys_types_bounds_enums_and_defaults_agree_with_the_spec_table)
{
    buf text = {0};
    cr_assert_eq(file_read(&text, "manifests/00-crd.yaml", NULL, 0), 0, "run from the repository root");
    cJSON *crd = NULL;
    char err[256];
    cr_assert_eq(yaml_json_parse(text.data, text.len, NULL, &crd, err, sizeof err), 0, "%s", err);
    buf_free(&text);
    const cJSON *spec = crd_property(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(
            cJSON_GetObjectItem(cJSON_GetObjectItem(crd, "spec"), "versions"), 0), "schema"),
            "openAPIV3Schema"), "spec");
    cr_assert_not_null(spec);
    /* keys whose CRD schema has no default on purpose: the preset fills the
     * model's dimensions, and an unset checkpoint location means none */
    static const char *const no_default[] = {"model.imageSize", "model.patchSize", "model.channels",
                                             "model.dim", "model.depth", "model.heads",
                                             "model.mlpRatio", "model.numClasses", "data.endpoint",
                                             "data.mean", "data.std", "checkpoint.uri",
                                             "checkpoint.endpoint", "checkpoint.credentialsSecret",
                                             "data.cutmixMinMax", "training.freeze", NULL};
    cJSON *table = config_describe();
    cr_assert_not_null(table);
    /* ... which are the table's keys whose default is not their own */
    int own = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, table) {
        const char *path = cJSON_GetObjectItem(r, "path")->valuestring;
        int listed = 0;
        for (const char *const *e = no_default; *e; e++)
            listed |= strcmp(*e, path) == 0;
        int from_key = strcmp(cJSON_GetObjectItem(r, "defaultFrom")->valuestring, "key") == 0;
        cr_assert_neq(listed, from_key, "%s: defaultFrom %s", path,
                      cJSON_GetObjectItem(r, "defaultFrom")->valuestring);
        own += from_key;
    }
    cr_assert_eq(own + 16, cJSON_GetArraySize(table));
    cr_assert_not_null(table);
    const cJSON *row;
    int rows = 0;
    cJSON_ArrayForEach(row, table) {
        rows++;
        const char *path = cJSON_GetObjectItem(row, "path")->valuestring;
        const cJSON *prop = crd_property(spec, path);
        cr_assert_not_null(prop, "%s: in the spec table, not in the CRD", path);
        cr_assert_str_eq(cJSON_GetObjectItem(prop, "type")->valuestring,
                         cJSON_GetObjectItem(row, "type")->valuestring, "%s: type", path);
        const cJSON *bounds = strcmp(cJSON_GetObjectItem(row, "type")->valuestring, "array") == 0
                                  ? cJSON_GetObjectItem(prop, "items") : prop;
        static const char *const nums[] = {"minimum", "maximum"};
        for (int i = 0; i < 2 && cJSON_GetObjectItem(row, nums[i]); i++)
            cr_assert(same_json_value(cJSON_GetObjectItem(bounds, nums[i]), cJSON_GetObjectItem(row, nums[i])),
                      "%s: %s differs between the CRD and the spec table", path, nums[i]);
        static const char *const excl[] = {"exclusiveMinimum", "exclusiveMaximum"};
        for (int i = 0; i < 2 && cJSON_GetObjectItem(row, excl[i]); i++)
            cr_assert_eq(cJSON_IsTrue(cJSON_GetObjectItem(bounds, excl[i])),
                         cJSON_IsTrue(cJSON_GetObjectItem(row, excl[i])), "%s: %s", path, excl[i]);
        static const char *const counts[] = {"minItems", "maxItems"};
        for (int i = 0; i < 2; i++)
            cr_assert(same_json_value(cJSON_GetObjectItem(prop, counts[i]), cJSON_GetObjectItem(row, counts[i])),
                      "%s: %s differs between the CRD and the spec table", path, counts[i]);
        cr_assert(same_json_value(cJSON_GetObjectItem(prop, "enum"), cJSON_GetObjectItem(row, "enum")),
                  "%s: the allowed values differ between the CRD and the spec table", path);
        const cJSON *dflt = cJSON_GetObjectItem(prop, "default");
        int exempt = 0;
        for (const char *const *e = no_default; *e; e++)
            exempt |= strcmp(*e, path) == 0;
        if (exempt)
            cr_assert_null(dflt, "%s: a CRD default would override the preset", path);
        else
            cr_assert(dflt && same_json_value(dflt, cJSON_GetObjectItem(row, "default")),
                      "%s: the CRD's default differs from the spec table's", path);
    }
    /* and the other way: the CRD has no key the worker would refuse */
    static char leaves[128][128];
    int n = 0;
    static const char *const sections[] = {"model", "data", "training", "checkpoint"};
    for (int i = 0; i < 4; i++)
        crd_leaves(crd_property(spec, sections[i]), sections[i], leaves, &n);
    cr_assert_eq(n, rows, "the CRD has %d keys for the worker, the spec table %d", n, rows);
    cJSON_Delete(table);
    cJSON_Delete(crd);
}

Test(config, fp16_mixed_is_a_precision_and_validates)
{
    vit_job_config c;
    char err[ERRLEN] = "";
    config_defaults(&c);
    set_ok(&c, "training.precision=fp16-mixed");
    cr_assert_eq(c.training.precision, PRECISION_FP16_MIXED);
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    expect_set_error("training.precision=fp16", "training.precision", "fp16-mixed");
}

Test(config, enum_values_have_their_spellings)
{
    cr_assert_str_eq(config_enum_name("training.precision", PRECISION_BF16_MIXED), "bf16-mixed");
    cr_assert_str_eq(config_enum_name("training.precision", PRECISION_FP16_MIXED), "fp16-mixed");
    cr_assert_str_eq(config_enum_name("training.device", DEVICE_AUTO), "auto");
    cr_assert_str_eq(config_enum_name("training.sharding", SHARDING_GRAD_OP), "grad-op");
    cr_assert_str_eq(config_enum_name("training.optimizer.schedule", SCHEDULE_CONSTANT), "constant");
    cr_assert_str_eq(config_enum_name("data.format", DATA_WEBDATASET), "webdataset");
    cr_assert_str_eq(config_enum_name("data.format", DATA_IMAGEFOLDER), "imagefolder");
    cr_assert_str_eq(config_enum_name("data.interpolation", INTERP_BILINEAR), "bilinear");
    cr_assert_str_eq(config_enum_name("training.device", 9), "?");
    cr_assert_str_eq(config_enum_name("training.steps", 0), "?", "not an enumerated key");
}

/* The backticked words of one column of a Markdown table row ("\|" is not
 * a column break), space-separated into out. */
static void column_words(const char *line, int col, char *out, size_t outlen)
{
    out[0] = '\0';
    int c = -1;
    for (const char *p = line; *p; p++) {
        if (*p == '|' && (p == line || p[-1] != '\\')) {
            c++;
            continue;
        }
        if (c != col || *p != '`')
            continue;
        const char *end = strchr(p + 1, '`');
        if (!end)
            break;
        size_t n = strlen(out);
        snprintf(out + n, outlen - n, "%s%.*s", n ? " " : "", (int)(end - p - 1), p + 1);
        p = end;
    }
}

Test(config, the_readmes_config_reference_lists_each_enum_and_its_default_as_the_table)
{
    buf text = {0};
    cr_assert_eq(file_read(&text, "README.md", NULL, 0), 0, "run from the repository root");
    cJSON *table = config_describe();
    const cJSON *row;
    int enums = 0;
    cJSON_ArrayForEach(row, table) {
        const cJSON *e = cJSON_GetObjectItem(row, "enum");
        const char *path = cJSON_GetObjectItem(row, "path")->valuestring;
        if (!e || strcmp(path, "model.preset") == 0)
            continue;
        enums++;
        char head[160], want[256] = "", got[256], dflt[128];
        snprintf(head, sizeof head, "\n| `%s` |", path);
        const char *line = strstr(text.data, head);
        cr_assert_not_null(line, "README.md has no config reference row for %s", path);
        char one[512];
        snprintf(one, sizeof one, "%.*s", (int)(strchr(line + 1, '\n') - line - 1), line + 1);
        const cJSON *v;
        cJSON_ArrayForEach(v, e) {
            size_t n = strlen(want);
            snprintf(want + n, sizeof want - n, "%s%s", n ? " " : "", v->valuestring);
        }
        column_words(one, 1, got, sizeof got);
        cr_assert_str_eq(got, want, "README.md: the values of %s", path);
        column_words(one, 2, dflt, sizeof dflt);
        cr_assert_str_eq(dflt, cJSON_GetObjectItem(row, "default")->valuestring,
                         "README.md: the default of %s", path);
    }
    cr_assert_eq(enums, 10);
    cJSON_Delete(table);
    buf_free(&text);
}

Test(config, mixup_keys_are_off_by_default_and_bad_values_name_their_key)
{
    vit_job_config c;
    config_defaults(&c);
    cr_assert(c.data.mixup == 0 && c.data.cutmix == 0 && c.data.cutmix_minmax_n == 0);
    cr_assert(c.data.mixup_prob == 1.0 && c.data.mixup_switch_prob == 0.5);
    cr_assert_eq(c.data.mixup_mode, MIXUP_MODE_BATCH);
    expect_set_error("data.mixup=-0.2", "data.mixup=-0.2 is out of range [0, 1000]", NULL);
    expect_set_error("data.cutmix=-1", "data.cutmix=-1 is out of range [0, 1000]", NULL);
    expect_set_error("data.mixupProb=1.5", "data.mixupProb=1.5 is out of range [0, 1]", NULL);
    expect_set_error("data.mixupSwitchProb=-0.1", "data.mixupSwitchProb=-0.1 is out of range",
                     NULL);
    expect_set_error("data.cutmixMinMax=0.2,1.5", "data.cutmixMinMax[1]=1.5 is out of range",
                     NULL);
    expect_set_error("data.mixupMode=row", "data.mixupMode=\"row\" is not one of batch, pair, elem",
                     NULL);
    expect_load_error("data: {mixup: -0.8}\n", "job.yaml", "job.yaml: data.mixup=-0.8", NULL);

    /* timm's DeiT settings validate; cutmixMinMax reads back as given */
    c = load_ok("data: {mixup: 0.8, cutmix: 1.0, cutmixMinMax: [0.2, 0.8], mixupProb: 0.9, "
                "mixupSwitchProb: 0.25, mixupMode: batch}\n"
                "training: {microBatchSize: 8, globalBatchSize: 64}\n");
    cr_assert(c.data.mixup == 0.8 && c.data.cutmix == 1.0 && c.data.cutmix_minmax_n == 2 &&
              c.data.cutmix_minmax[0] == 0.2 && c.data.cutmix_minmax[1] == 0.8 &&
              c.data.mixup_prob == 0.9 && c.data.mixup_switch_prob == 0.25);
    expect_valid(&c);

    vit_job_config bad = c;
    set_ok(&bad, "data.mixupMode=pair");
    expect_invalid(&bad, "data.mixupMode=pair is not implemented", "only batch");
    bad = c;
    set_ok(&bad, "data.mixupMode=elem");
    expect_invalid(&bad, "data.mixupMode=elem is not implemented", NULL);
    bad = c;
    set_ok(&bad, "data.cutmixMinMax=0.8,0.2");
    expect_invalid(&bad, "data.cutmixMinMax=[0.8, 0.2]: the minimum 0.8 exceeds the maximum 0.2",
                   NULL);
    bad = c;
    set_ok(&bad, "data.cutmixMinMax=0.5,0.52"); /* 28 x: int 14 and int 14.56 */
    expect_invalid(&bad, "data.cutmixMinMax=[0.5, 0.52] leaves no box size at model.imageSize=28",
                   "[14, 14)");
    expect_set_error("data.cutmixMinMax=0.5",
                     "data.cutmixMinMax: expected an array of 2 numbers, got an array of 1", NULL);
    bad = c;
    set_ok(&bad, "training.microBatchSize=7");
    set_ok(&bad, "training.globalBatchSize=56");
    expect_invalid(&bad, "training.microBatchSize=7 is odd", "data.mixup");
    /* odd micro-batches are fine without mixing */
    set_ok(&bad, "data.mixup=0");
    set_ok(&bad, "data.cutmix=0");
    set_ok(&bad, "data.cutmixMinMax=null");
    expect_valid(&bad);
    cr_assert_str_eq(config_enum_name("data.mixupMode", MIXUP_MODE_ELEM), "elem");
}

Test(config, training_ema_decay_is_0_for_off_or_in_0_1_and_a_bad_value_names_its_key)
{
    vit_job_config c;
    config_defaults(&c);
    cr_assert_eq(c.training.ema.decay, 0.0, "off by default");
    cr_assert_eq(c.training.ema.warmup, 0);
    set_ok(&c, "training.ema.decay=0.9998");
    set_ok(&c, "training.ema.warmup=true");
    cr_assert_eq(c.training.ema.decay, 0.9998);
    cr_assert_eq(c.training.ema.warmup, 1);
    c = load_ok("training: {ema: {decay: 0.999, warmup: true}}\n");
    cr_assert_eq(c.training.ema.decay, 0.999);
    cr_assert_eq(c.training.ema.warmup, 1);
    expect_set_error("training.ema.decay=1.5", "training.ema.decay=1.5 is out of range [0, 1)",
                     NULL);
    expect_set_error("training.ema.decay=1", "training.ema.decay=1 is out of range [0, 1)", NULL);
    expect_set_error("training.ema.decay=-0.1", "training.ema.decay=-0.1 is out of range", NULL);
    expect_load_error("training: {ema: {decay: 1.5}}\n", "t.yaml",
                      "training.ema.decay=1.5 is out of range [0, 1)", NULL);
    expect_load_error("training: {ema: {warmup: 1}}\n", "t.yaml",
                      "training.ema.warmup: expected a boolean", NULL);
    expect_set_error("training.ema.decy=0.9", "training.ema.decy", "training.ema.decay");
}

Test(config, freeze_is_a_list_of_non_empty_prefixes_from_a_file_or_set)
{
    vit_job_config c = load_ok("training: {freeze: [cls_token, pos_embed, patch_embed, blocks, norm]}\n");
    cr_assert_eq(c.training.freeze_n, 5);
    cr_assert_str_eq(c.training.freeze[0], "cls_token");
    cr_assert_str_eq(c.training.freeze[4], "norm");
    set_ok(&c, "training.freeze=[blocks.0, head]");
    cr_assert_eq(c.training.freeze_n, 2);
    cr_assert_str_eq(c.training.freeze[0], "blocks.0");
    cr_assert_str_eq(c.training.freeze[1], "head");
    cr_assert_eq(c.training.freeze[2][0], '\0', "nothing of the earlier list left behind");
    set_ok(&c, "training.freeze=blocks.3.attn");
    cr_assert(c.training.freeze_n == 1 && strcmp(c.training.freeze[0], "blocks.3.attn") == 0);
    set_ok(&c, "training.freeze=[]");
    cr_assert_eq(c.training.freeze_n, 0);
    set_ok(&c, "training.freeze=norm,head");
    set_ok(&c, "training.freeze=");
    cr_assert_eq(c.training.freeze_n, 0);
    /* the effective config prints it back */
    set_ok(&c, "training.freeze=[patch_embed, blocks]");
    char *json = config_to_json(&c);
    cr_assert(strstr(json, "\"freeze\":[\"patch_embed\",\"blocks\"]"), "%s", json);
    free(json);
    expect_load_error("training: {freeze: blocks}\n", "t.yaml",
                      "training.freeze: expected an array of strings, got string \"blocks\"", NULL);
    expect_load_error("training: {freeze: [blocks, 3]}\n", "t.yaml",
                      "training.freeze[1]: expected a non-empty string, got number 3", NULL);
    expect_load_error("training: {freeze: [\"\"]}\n", "t.yaml",
                      "training.freeze[0]: expected a non-empty string, got string \"\"", NULL);
    char long_one[CONFIG_FREEZE_LEN + 40];
    snprintf(long_one, sizeof long_one, "training: {freeze: [%0*d]}\n", CONFIG_FREEZE_LEN, 7);
    expect_load_error(long_one, "t.yaml", "training.freeze[0]: a string of 64 bytes is too long (at most 63)", NULL);
    char many[4096] = "training: {freeze: [";
    for (int i = 0; i <= CONFIG_FREEZE_MAX; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%sblocks.%d", i ? ", " : "", i);
    snprintf(many + strlen(many), sizeof many - strlen(many), "]}\n");
    expect_load_error(many, "t.yaml", "training.freeze: expected at most 32 strings, got an array of 33", NULL);
}
