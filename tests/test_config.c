/* tests/test_config.c - api/config.c: defaults and presets, validation
 * (every field's own checks again, and the rules between keys), to_json,
 * and the keys that span them (precision, mixup, ema, freeze). Loading and
 * --set: tests/test_config_load.c; the table's rows against the CRD and
 * the README: tests/test_config_keys.c. */
#include "config.h"

#include "config_fixture.h"

#include <criterion/criterion.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---------------------------------------------------------------- defaults never refuse */

/* Valid values of a row of the table (config_describe), as --set writes
 * them: its bounds (just inside an open one), its default and some between;
 * each choice of an enum; both booleans; ordered pairs. Free strings and
 * lists of strings: none (no rule ties them to another key). */
static int valid_values(const cJSON *row, char out[][64], int cap)
{
    int n = 0;
    const char *type = cJSON_GetObjectItem(row, "type")->valuestring;
    const cJSON *e = cJSON_GetObjectItem(row, "enum");
    if (e) {
        const cJSON *c;
        cJSON_ArrayForEach(c, e) if (n < cap) snprintf(out[n++], 64, "%s", c->valuestring);
        return n;
    }
    if (strcmp(type, "boolean") == 0) {
        snprintf(out[n++], 64, "true");
        snprintf(out[n++], 64, "false");
        return n;
    }
    const cJSON *mn = cJSON_GetObjectItem(row, "minimum"), *mx = cJSON_GetObjectItem(row, "maximum");
    if (!mn || !mx)
        return 0;
    const int integer = strcmp(type, "integer") == 0;
    double lo = mn->valuedouble, hi = mx->valuedouble;
    if (cJSON_IsTrue(cJSON_GetObjectItem(row, "exclusiveMinimum")))
        lo = integer ? lo + 1 : lo + (hi - lo) * 1e-6;
    if (cJSON_IsTrue(cJSON_GetObjectItem(row, "exclusiveMaximum")))
        hi = integer ? hi - 1 : hi - (hi - lo) * 1e-6;
    if (strcmp(type, "array") == 0) {
        const int items = (int)cJSON_GetObjectItem(row, "minItems")->valuedouble;
        if (items == 2) { /* a [min, max] pair */
            snprintf(out[n++], 64, "%.17g,%.17g", lo, hi);
            snprintf(out[n++], 64, "%.17g,%.17g", lo + (hi - lo) / 4, lo + 3 * (hi - lo) / 4);
        } else {
            snprintf(out[n++], 64, "%.17g", lo);
            snprintf(out[n++], 64, "%.17g", hi);
        }
        return n;
    }
    static const double between[] = {1e-4, 0.25, 0.5, 1, 2, 3, 5, 7, 10, 20, 50, 96, 97, 100,
                                     1000, 4096};
    double cand[2 + sizeof between / sizeof between[0] + 1];
    int m = 0;
    cand[m++] = lo;
    cand[m++] = hi;
    const cJSON *d = cJSON_GetObjectItem(row, "default");
    if (cJSON_IsNumber(d))
        cand[m++] = d->valuedouble;
    for (size_t i = 0; i < sizeof between / sizeof between[0]; i++)
        cand[m++] = between[i];
    for (int i = 0; i < m && n < cap; i++)
        if (cand[i] >= lo && cand[i] <= hi && (!integer || cand[i] == floor(cand[i])))
            snprintf(out[n++], 64, "%.17g", cand[i]);
    return n;
}

/* Does the refusal `err` of a spec that set only `path` blame another key's
 * default? It names another key of the table, other than those that say
 * what is trained rather than how: data.format (its default is the demo's
 * Fashion-MNIST, whose 28x28x1 images the image-only keys and other model
 * sizes do not fit) and the model dims of model.preset (a dim given alone
 * must fit the preset's others, as timm asserts dim % heads) and
 * training.steps for training.epochs=0 (unset steps are the epochs', so the
 * run is the user's zero epochs). A refusal of the value alone (a mode not
 * implemented) names no other key. */
static int names_a_default(const cJSON *table, const char *path, const char *err)
{
    const cJSON *row;
    cJSON_ArrayForEach(row, table) {
        const char *other = cJSON_GetObjectItem(row, "path")->valuestring;
        if (strcmp(other, path) == 0 || strcmp(other, "data.format") == 0 ||
            strcmp(other, "model.preset") == 0 ||
            strcmp(cJSON_GetObjectItem(row, "defaultFrom")->valuestring, "preset") == 0 ||
            (strcmp(path, "training.epochs") == 0 && strcmp(other, "training.steps") == 0))
            continue;
        for (const char *at = strstr(err, other); at; at = strstr(at + 1, other)) {
            const char after = at[strlen(other)];
            if (!(after == '.' || after == '_' || (after >= 'a' && after <= 'z') ||
                  (after >= 'A' && after <= 'Z') || (after >= '0' && after <= '9')))
                return 1;
        }
    }
    return 0;
}

/* Each key alone on the defaults (Fashion-MNIST), and again on an image
 * folder's spec, whose image-only keys then apply. */
Test(config, a_spec_that_sets_one_key_to_any_valid_value_is_accepted_at_1_2_and_3_ranks)
{
    static const char base_images[] = "data.format=imagefolder";
    cJSON *table = config_describe();
    cr_assert_not_null(table);
    static char failures[1 << 18];
    failures[0] = 0;
    size_t used = 0;
    int cases = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, table) {
        const char *path = cJSON_GetObjectItem(row, "path")->valuestring;
        char vals[32][64];
        const int nv = valid_values(row, vals, 32);
        for (int i = 0; i < nv * 2; i++)
            for (int world = 1; world <= 3; world++) {
                vit_job_config cfg;
                config_defaults(&cfg);
                char set[128], err[ERRLEN] = "";
                if (i >= nv && strcmp(path, "data.format") != 0) /* the other base: images */
                    cr_assert_eq(config_set(&cfg, base_images, err, sizeof err), 0, "%s", err);
                else if (i >= nv)
                    continue;
                snprintf(set, sizeof set, "%s=%s", path, vals[i % nv]);
                cr_assert_eq(config_set(&cfg, set, err, sizeof err), 0, "%s: %s", set, err);
                cfg.world_size = world;
                cases++;
                if (config_finish(&cfg, err, sizeof err) != 0 && names_a_default(table, path, err) &&
                    used < sizeof failures - 1)
                    used += (size_t)snprintf(failures + used, sizeof failures - used,
                                             "\n%s%s at %d ranks: %s", i >= nv ? "(images) " : "",
                                             set, world, err);
            }
    }
    cJSON_Delete(table);
    cr_assert(cases > 300, "%d cases", cases);
    cr_assert_str_empty(failures, "refused:%s", failures);
}

Test(config, unset_defaults_follow_the_keys_given_and_given_values_are_kept_and_checked)
{
    vit_job_config c;
    char err[ERRLEN] = "";
    config_defaults(&c);
    cr_assert_eq(config_set(&c, "training.steps=10", err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_finish(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.training.optimizer.warmup_steps, 10);
    cr_assert_eq(config_warmup_steps(&c, 10), 10);
    /* epochs-derived runs: the run's steps, given or not */
    config_defaults(&c);
    cr_assert_eq(config_warmup_steps(&c, 7), 7);
    cr_assert_eq(config_warmup_steps(&c, 700), 50);
    cr_assert_eq(config_set(&c, "training.optimizer.warmupSteps=60", err, sizeof err), 0);
    cr_assert_eq(config_warmup_steps(&c, 7), 60, "a given warmup is kept (and refused by train.c)");
    /* a given warmup above the steps is still refused */
    cr_assert_eq(config_set(&c, "training.steps=20", err, sizeof err), 0);
    cr_assert_eq(config_finish(&c, err, sizeof err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, "training.optimizer.warmupSteps=60 exceeds training.steps=20");
    /* lr follows minLr; a given pair is checked */
    config_defaults(&c);
    cr_assert_eq(config_set(&c, "training.optimizer.minLr=0.01", err, sizeof err), 0);
    cr_assert_eq(config_finish(&c, err, sizeof err), 0, "%s", err);
    cr_assert_float_eq(c.training.optimizer.lr, 0.01, 0);
    cr_assert_eq(config_set(&c, "training.optimizer.lr=0.005", err, sizeof err), 0);
    cr_assert_eq(config_finish(&c, err, sizeof err), VJ_ERR_CONFIG);
    /* the batch sizes follow each other and the world size */
    config_defaults(&c);
    c.world_size = 3;
    cr_assert_eq(config_finish(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.training.micro_batch_size, 64);
    cr_assert_eq(c.training.global_batch_size, 192);
    config_defaults(&c);
    cr_assert_eq(config_set(&c, "training.globalBatchSize=180", err, sizeof err), 0);
    cr_assert_eq(config_set(&c, "data.mixup=0.8", err, sizeof err), 0);
    c.world_size = 2;
    cr_assert_eq(config_finish(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.training.micro_batch_size, 30, "90 a rank: its largest even divisor up to 64 (45 is odd)");
    config_defaults(&c);
    cr_assert_eq(config_set(&c, "training.microBatchSize=48", err, sizeof err), 0);
    cr_assert_eq(config_finish(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.training.global_batch_size, 144);
    /* an unset augment is timm's training transform for images, off for fashion-mnist */
    config_defaults(&c);
    cr_assert_eq(config_finish(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.data.augment, 0);
    config_defaults(&c);
    cr_assert_eq(config_set(&c, "data.format=imagefolder", err, sizeof err), 0);
    cr_assert_eq(config_set(&c, "data.randAugment=rand-m9-mstd0.5-inc1", err, sizeof err), 0);
    cr_assert_eq(config_finish(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.data.augment, 1);
    cr_assert_eq(config_set(&c, "data.augment=false", err, sizeof err), 0);
    cr_assert_eq(config_finish(&c, err, sizeof err), VJ_ERR_CONFIG, "an explicit false is honoured");
    cr_assert(strstr(err, "needs data.augment=true"), "%s", err);
}
