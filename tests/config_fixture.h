/* tests/config_fixture.h - helpers of the config tests (tests/test_config.c,
 * tests/test_config_load.c): a config loaded from text, that must load or
 * must fail naming what it should (and leave the config as it was), --set
 * that must apply or fail, validation that must fail, two configs compared
 * field by field, and the same job with every key off its default in JSON
 * and YAML. Test code only. */
#ifndef VITJOB_CONFIG_FIXTURE_H
#define VITJOB_CONFIG_FIXTURE_H

#include <criterion/criterion.h>
#include <string.h>

#include "config.h"

#define ERRLEN 512

/* ---------------------------------------------------------------- helpers */

static inline int load(vit_job_config *cfg, const char *text, const char *origin, char *err)
{
    return config_load_string(cfg, text, strlen(text), origin, err, ERRLEN);
}

/* Defaults, then `text`; the load must succeed. */
static inline vit_job_config load_ok(const char *text)
{
    vit_job_config cfg;
    char err[ERRLEN] = "";
    config_defaults(&cfg);
    int rc = load(&cfg, text, "test.yaml", err);
    cr_assert_eq(rc, 0, "load failed: %s", err);
    return cfg;
}

static inline void assert_config_eq(const vit_job_config *a, const vit_job_config *b)
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
static inline void expect_load_error(const char *text, const char *origin, const char *n1,
                                     const char *n2)
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

static inline void expect_load_error_exact(const char *text, const char *origin, const char *msg)
{
    vit_job_config cfg;
    char err[ERRLEN] = "";
    config_defaults(&cfg);
    cr_assert_eq(load(&cfg, text, origin, err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, msg);
}

static inline void expect_set_error(const char *assignment, const char *n1, const char *n2)
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

static inline void expect_invalid(const vit_job_config *cfg, const char *n1, const char *n2)
{
    char err[ERRLEN] = "";
    cr_assert_eq(config_validate(cfg, err, sizeof err), VJ_ERR_CONFIG, "validated");
    cr_assert(strchr(err, '\n') == NULL, "message spans lines: %s", err);
    cr_assert(strstr(err, n1) != NULL, "message [%s] lacks [%s]", err, n1);
    if (n2)
        cr_assert(strstr(err, n2) != NULL, "message [%s] lacks [%s]", err, n2);
}

static inline void set_ok(vit_job_config *cfg, const char *assignment)
{
    char err[ERRLEN] = "";
    cr_assert_eq(config_set(cfg, assignment, err, sizeof err), 0, "%s: %s", assignment, err);
}

/* The same job, every key with a non-default value, in three spellings. */
static const char *const FULL_JSON =
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

static const char *const FULL_YAML =
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

static inline void assert_is_full(const vit_job_config *c)
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

#endif
