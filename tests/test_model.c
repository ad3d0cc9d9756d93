/* tests/test_model.c - worker/train/model.c: the gradient of every tensor against
 * finite differences of the loss (tests/fd.h), timm's names, shapes and
 * decay groups, activation checkpointing (identical gradients, less memory)
 * and bf16-mixed (bf16 activations and weight copies; gradients that track
 * fp32); the loss against soft targets and drop path (finite differences
 * under a fixed mask, identical under checkpointing, one forward only). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fd.h"
#include "model.h"
#include "ops.h"

/* ---- the whole model ---- */
typedef struct { vit_model *m; float *img; int *t; int B; float loss; } md_ctx;
static void md_fwd(void *p)
{
    md_ctx *c = p;
    c->loss = model_forward(c->m, c->img, c->t, c->B);
}

Test(model, model_gradient_of_every_tensor_matches_finite_differences_of_the_loss,
     .init = setup)
{
    model_config mc = {.image_size = 8, .patch_size = 4, .channels = 2, .dim = 8, .depth = 2,
                       .heads = 2, .mlp_ratio = 2.0, .num_classes = 3};
    char err[256];
    md_ctx c = {.B = 3};
    cr_assert_eq(model_new(&c.m, &mc, 3, NULL, ops_cpu(), err, sizeof err), 0, "%s", err);
    float *p = model_params(c.m);
    for (size_t i = 0; i < model_num_params(c.m); i++) p[i] = 0.3f * rng_normal(&R);
    c.img = rnd(3 * 2 * 64, 1);
    int t[3] = {0, 2, 1};
    c.t = t;
    md_fwd(&c);
    model_zero_grads(c.m);
    model_backward(c.m, 1.0f / 3);
    float one = 1.0f;
    for (int i = 0; i < model_num_tensors(c.m); i++) {
        const model_tensor *tt = model_tensor_at(c.m, i);
        check_fd(tt->name, p + tt->offset, tt->numel, model_grads(c.m) + tt->offset, md_fwd, &c,
                 &c.loss, &one, 1, 1e-2f, 1e-2f);
    }
    model_free(c.m);
    free(c.img);
}

Test(model, model_layout_uses_timm_names_shapes_and_decay_groups)
{
    model_config mc = {.image_size = 28, .patch_size = 7, .channels = 1, .dim = 16, .depth = 2,
                       .heads = 2, .mlp_ratio = 4.0, .num_classes = 10};
    char err[256];
    vit_model *m;
    cr_assert_eq(model_new(&m, &mc, 2, NULL, ops_cpu(), err, sizeof err), 0);
    cr_assert_eq(model_num_tensors(m), 4 + 12 * 2 + 4);
    cr_assert_str_eq(model_tensor_at(m, 0)->name, "cls_token");
    cr_assert_str_eq(model_tensor_at(m, 1)->name, "pos_embed");
    cr_assert_eq(model_tensor_at(m, 1)->shape[1], 17);
    int i = model_find_tensor(m, "blocks.1.mlp.fc1.weight");
    cr_assert(i > 0 && model_tensor_at(m, i)->shape[0] == 64 && model_tensor_at(m, i)->decay);
    cr_assert_eq(model_tensor_at(m, model_find_tensor(m, "blocks.0.attn.qkv.bias"))->decay, 0);
    cr_assert_eq(model_tensor_at(m, model_find_tensor(m, "pos_embed"))->decay, 0);
    cr_assert_eq(model_tensor_at(m, model_find_tensor(m, "patch_embed.proj.weight"))->decay, 1);
    const model_tensor *last = model_tensor_at(m, model_num_tensors(m) - 1);
    cr_assert_str_eq(last->name, "head.bias");
    cr_assert_eq(last->offset + last->numel, model_num_params(m));
    model_free(m);
}

static void check_ckpt_identical(const vit_ops *ops)
{
    model_config mc = {.image_size = 8, .patch_size = 2, .channels = 1, .dim = 16, .depth = 3,
                       .heads = 2, .mlp_ratio = 4.0, .num_classes = 5};
    char err[256];
    vit_model *plain, *ckpt;
    cr_assert_eq(model_new(&plain, &mc, 4, NULL, ops, err, sizeof err), 0);
    cr_assert_eq(model_new(&ckpt, &mc, 4, &(model_options){.activation_checkpointing = 1}, ops,
                           err, sizeof err), 0);
    model_init_random(plain, 3);
    model_write_params(ckpt, model_params(plain));
    float *img = rnd(4 * 64, 1);
    int t[4] = {0, 4, 2, 1};
    vit_model *ms[2] = {plain, ckpt};
    float loss[2];
    for (int i = 0; i < 2; i++) {
        model_zero_grads(ms[i]);
        loss[i] = model_forward(ms[i], img, t, 4);
        model_backward(ms[i], 0.25f);
    }
    cr_assert(loss[0] == loss[1], "%s: loss %.9g vs %.9g", ops->name, loss[0], loss[1]);
    cr_assert(memcmp(model_grads(plain), model_grads(ckpt),
                     model_num_params(plain) * sizeof(float)) == 0,
              "%s: gradients differ with activation checkpointing", ops->name);
    cr_assert(model_activation_bytes(ckpt) < model_activation_bytes(plain), "%zu vs %zu",
              model_activation_bytes(ckpt), model_activation_bytes(plain));
    model_free(plain);
    model_free(ckpt);
    free(img);
}

Test(model, activation_checkpointing_gives_identical_gradients_with_less_memory, .init = setup)
{
    check_ckpt_identical(ops_cpu());
}

Test(model, activation_checkpointing_gives_identical_gradients_in_bf16_mixed, .init = setup)
{
    check_ckpt_identical(ops_cpu_bf16());
}

Test(model, cpu_bf16_stores_every_floatx_activation_as_a_bf16_value, .init = setup)
{
    model_config mc = {.image_size = 8, .patch_size = 2, .channels = 1, .dim = 16, .depth = 2,
                       .heads = 2, .mlp_ratio = 4.0, .num_classes = 5};
    char err[256];
    vit_model *m;
    cr_assert_eq(model_new(&m, &mc, 4, NULL, ops_cpu_bf16(), err, sizeof err), 0);
    model_init_random(m, 9);
    float *img = rnd(4 * 64, 1);
    int t[4] = {0, 4, 2, 1};
    model_forward(m, img, t, 4);
    const float *z = model_logits(m);
    float r[20];
    round_bf16_cpu(r, z, 20);
    cr_assert(memcmp(r, z, sizeof r) == 0, "logits are not bf16 values");
    float fp = 0;
    for (int i = 0; i < 20; i++) fp += fabsf(z[i]);
    cr_assert(fp > 0, "logits are all zero");
    /* the matmuls' copy of a weight is the rounded master */
    int w = model_find_tensor(m, "blocks.0.mlp.fc1.weight");
    const model_tensor *tw = model_tensor_at(m, w);
    const float *lp = model_params_lp(m, w);
    cr_assert(lp != NULL);
    cr_assert_null(model_params_lp(m, model_find_tensor(m, "blocks.0.norm1.weight")));
    float *want = malloc(sizeof(float) * tw->numel);
    round_bf16_cpu(want, model_params(m) + tw->offset, tw->numel);
    cr_assert(memcmp(want, lp, sizeof(float) * tw->numel) == 0);
    cr_assert(memcmp(want, model_params(m) + tw->offset, sizeof(float) * tw->numel) != 0,
              "the master weights are not fp32 any more");
    free(want);
    free(img);
    model_free(m);
}

Test(model, bf16_mixed_gradients_track_fp32_within_bf16_precision, .init = setup)
{
    model_config mc = {.image_size = 8, .patch_size = 2, .channels = 1, .dim = 16, .depth = 2,
                       .heads = 2, .mlp_ratio = 4.0, .num_classes = 5};
    char err[256];
    vit_model *f32, *b16;
    cr_assert_eq(model_new(&f32, &mc, 4, NULL, ops_cpu(), err, sizeof err), 0);
    cr_assert_eq(model_new(&b16, &mc, 4, NULL, ops_cpu_bf16(), err, sizeof err), 0);
    model_init_random(f32, 4);
    model_init_random(b16, 4);
    float *img = rnd(4 * 64, 1);
    int t[4] = {0, 4, 2, 1};
    vit_model *ms[2] = {f32, b16};
    float loss[2];
    for (int i = 0; i < 2; i++) {
        model_zero_grads(ms[i]);
        loss[i] = model_forward(ms[i], img, t, 4);
        model_backward(ms[i], 0.25f);
    }
    size_t n = model_num_params(f32);
    double diff = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)model_grads(f32)[i] - model_grads(b16)[i];
        diff += d * d;
        ref += (double)model_grads(f32)[i] * model_grads(f32)[i];
    }
    double rel = sqrt(diff / ref);
    cr_assert(fabsf(loss[0] - loss[1]) < 0.02f * loss[0], "loss %g vs %g", loss[0], loss[1]);
    cr_assert(rel < 0.05, "bf16 gradients are %.3g away from fp32 (relative)", rel);
    cr_assert(rel > 1e-5, "bf16-mixed changed nothing (relative difference %.3g)", rel);
    model_free(f32);
    model_free(b16);
    free(img);
}

/* Relative L2 distance of lp's gradients (the loss gradient's seed times
 * scale, then unscaled in fp32 as GradScaler does) from fp32's; *dloss the
 * losses' relative difference. */
static double grads_rel_to_fp32(const vit_ops *lp, float scale, double *dloss)
{
    model_config mc = {.image_size = 8, .patch_size = 2, .channels = 1, .dim = 16, .depth = 2,
                       .heads = 2, .mlp_ratio = 4.0, .num_classes = 5};
    char err[256];
    vit_model *f32, *x;
    cr_assert_eq(model_new(&f32, &mc, 4, NULL, ops_cpu(), err, sizeof err), 0);
    cr_assert_eq(model_new(&x, &mc, 4, NULL, lp, err, sizeof err), 0);
    model_init_random(f32, 4);
    model_init_random(x, 4);
    float *img = rnd(4 * 64, 1);
    int t[4] = {0, 4, 2, 1};
    model_zero_grads(f32);
    model_zero_grads(x);
    float l0 = model_forward(f32, img, t, 4), l1 = model_forward(x, img, t, 4);
    model_backward(f32, 0.25f);
    model_backward(x, 0.25f * scale);
    size_t n = model_num_params(f32);
    double diff = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        double g = (double)(model_grads(x)[i] * (1.0f / scale));
        double d = (double)model_grads(f32)[i] - g;
        diff += d * d;
        ref += (double)model_grads(f32)[i] * model_grads(f32)[i];
    }
    *dloss = fabs((double)l0 - l1) / l0;
    model_free(f32);
    model_free(x);
    free(img);
    return sqrt(diff / ref);
}

Test(model, cpu_fp16_stores_logits_and_the_matmul_weights_as_half_values, .init = setup)
{
    model_config mc = {.image_size = 8, .patch_size = 2, .channels = 1, .dim = 16, .depth = 2,
                       .heads = 2, .mlp_ratio = 4.0, .num_classes = 5};
    char err[256];
    vit_model *m;
    cr_assert_eq(model_new(&m, &mc, 4, NULL, ops_cpu_fp16(), err, sizeof err), 0);
    model_init_random(m, 9);
    float *img = rnd(4 * 64, 1);
    int t[4] = {0, 4, 2, 1};
    model_forward(m, img, t, 4);
    const float *z = model_logits(m);
    float r[20], b[20];
    round_fp16_cpu(r, z, 20);
    round_bf16_cpu(b, z, 20);
    cr_assert(memcmp(r, z, sizeof r) == 0, "logits are not half values");
    cr_assert(memcmp(b, z, sizeof b) != 0, "logits are bf16 values");
    int w = model_find_tensor(m, "blocks.0.mlp.fc1.weight");
    const model_tensor *tw = model_tensor_at(m, w);
    const float *lp = model_params_lp(m, w);
    cr_assert(lp != NULL, "no 16-bit copy of the matmul weights");
    float *want = malloc(sizeof(float) * tw->numel);
    round_fp16_cpu(want, model_params(m) + tw->offset, tw->numel);
    cr_assert(memcmp(want, lp, sizeof(float) * tw->numel) == 0);
    free(want);
    free(img);
    model_free(m);
}

Test(model, fp16_mixed_gradients_with_the_loss_scale_track_fp32_as_closely_as_bf16_mixed,
     .init = setup)
{
    double lb, lh;
    const double bf = grads_rel_to_fp32(ops_cpu_bf16(), 1.0f, &lb);
    const double hf = grads_rel_to_fp32(ops_cpu_fp16(), 65536.0f, &lh);
    cr_log_info("relative gradient distance to fp32: bf16-mixed %.3g, fp16-mixed (scale 2^16) "
                "%.3g; loss: %.3g, %.3g", bf, hf, lb, lh);
    /* the bf16 test's bounds (0.05 gradients, 2% loss), and at least as close */
    cr_assert(hf < 0.05 && lh < 0.02, "fp16 gradients %.3g, loss %.3g from fp32", hf, lh);
    cr_assert(hf <= bf, "fp16-mixed (%.3g) is further from fp32 than bf16-mixed (%.3g)", hf, bf);
    cr_assert(hf > 1e-6, "fp16-mixed changed nothing (relative difference %.3g)", hf);
}

/* ---- issue 27: the loss against soft targets, drop path ---- */

static const model_config REG_MC = {.image_size = 8, .patch_size = 2, .channels = 1, .dim = 16,
                                    .depth = 3, .heads = 2, .mlp_ratio = 4.0, .num_classes = 5};

/* Forward (soft targets when t is NULL) and backward with fresh gradients,
 * scales set first when given; returns the loss. */
static float step_of(vit_model *m, const float *img, const int *labels, const float *rows,
                     const float *scale, int B)
{
    if (scale) cr_assert_eq(model_set_drop_path(m, scale, B), 0);
    model_zero_grads(m);
    float loss = rows ? model_forward_soft(m, img, rows, B) : model_forward(m, img, labels, B);
    model_backward(m, 1.0f / B);
    return loss;
}

static int same_grads(vit_model *a, vit_model *b)
{
    return memcmp(model_grads(a), model_grads(b), model_num_params(a) * sizeof(float)) == 0;
}

Test(model, soft_targets_of_one_hot_rows_give_the_integer_labels_loss_and_gradients_bit_for_bit,
     .init = setup)
{
    char err[256];
    vit_model *m;
    cr_assert_eq(model_new(&m, &REG_MC, 4, NULL, ops_cpu(), err, sizeof err), 0);
    model_init_random(m, 5);
    float *img = rnd(4 * 64, 1), rows[20] = {0};
    int t[4] = {0, 4, 2, 1};
    for (int b = 0; b < 4; b++) rows[b * 5 + t[b]] = 1.0f;
    size_t n = model_num_params(m);
    float *g = malloc(n * sizeof(float));
    float hard = step_of(m, img, t, NULL, NULL, 4);
    memcpy(g, model_grads(m), n * sizeof(float));
    float soft = step_of(m, img, NULL, rows, NULL, 4);
    cr_assert(hard == soft, "loss %.9g vs %.9g", hard, soft);
    cr_assert(memcmp(g, model_grads(m), n * sizeof(float)) == 0, "gradients differ");
    /* other rows: another loss; the integer path afterwards is the plain one again */
    for (int i = 0; i < 20; i++) rows[i] = 0.2f;
    cr_assert(step_of(m, img, NULL, rows, NULL, 4) != hard);
    cr_assert(step_of(m, img, t, NULL, NULL, 4) == hard);
    cr_assert(memcmp(g, model_grads(m), n * sizeof(float)) == 0);
    free(g);
    free(img);
    model_free(m);
}

typedef struct { vit_model *m; float *img; float *rows; const float *scale; float loss; } dpm_ctx;
static void dpm_fwd(void *p)
{
    dpm_ctx *c = p;
    model_set_drop_path(c->m, c->scale, 3);
    c->loss = model_forward_soft(c->m, c->img, c->rows, 3);
}

Test(model, drop_path_gradients_match_finite_differences_under_a_fixed_mask, .init = setup)
{
    model_config mc = {.image_size = 8, .patch_size = 4, .channels = 2, .dim = 8, .depth = 3,
                       .heads = 2, .mlp_ratio = 2.0, .num_classes = 3};
    char err[256];
    dpm_ctx c = {0};
    cr_assert_eq(model_new(&c.m, &mc, 3, &(model_options){.drop_path = 1}, ops_cpu(), err,
                           sizeof err), 0, "%s", err);
    float *p = model_params(c.m);
    for (size_t i = 0; i < model_num_params(c.m); i++) p[i] = 0.3f * rng_normal(&R);
    c.img = rnd(3 * 2 * 64, 1);
    float rows[9] = {0.7f, 0.2f, 0.1f, 0.0f, 0.5f, 0.5f, 0.1f, 0.1f, 0.8f};
    c.rows = rows;
    /* (block, branch, sample): every dropping block has a kept and a dropped sample */
    const float scale[18] = {1, 1, 1, 1, 1, 1, 0, 1.25f, 1.25f, 1.25f, 0, 1.25f,
                             2.0f, 0, 2.0f, 0, 0, 2.0f};
    c.scale = scale;
    dpm_fwd(&c);
    model_zero_grads(c.m);
    model_backward(c.m, 1.0f / 3);
    float one = 1.0f;
    for (int i = 0; i < model_num_tensors(c.m); i++) {
        const model_tensor *tt = model_tensor_at(c.m, i);
        check_fd(tt->name, p + tt->offset, tt->numel, model_grads(c.m) + tt->offset, dpm_fwd, &c,
                 &c.loss, &one, 1, 1e-2f, 1e-2f);
    }
    model_free(c.m);
    free(c.img);
}

/* Drop path with checkpointing and without gives the same bits; scales of
 * 1 everywhere are no drop path at all; the scales last one forward. */
static void check_drop_path_model(const vit_ops *ops)
{
    char err[256];
    vit_model *plain, *dp, *dpck;
    cr_assert_eq(model_new(&plain, &REG_MC, 4, NULL, ops, err, sizeof err), 0);
    cr_assert_eq(model_set_drop_path(plain, (float[24]){0}, 4), -1,
                 "a model without model_options.drop_path took scales");
    cr_assert_eq(model_new(&dp, &REG_MC, 4, &(model_options){.drop_path = 1}, ops, err,
                           sizeof err), 0);
    cr_assert_eq(model_new(&dpck, &REG_MC, 4,
                           &(model_options){.drop_path = 1, .activation_checkpointing = 1}, ops,
                           err, sizeof err), 0);
    model_init_random(plain, 6);
    model_write_params(dp, model_params(plain));
    model_write_params(dpck, model_params(plain));
    float *img = rnd(4 * 64, 1);
    int t[4] = {0, 4, 2, 1};
    float ones[24], scale[24];
    for (int i = 0; i < 24; i++) ones[i] = 1.0f;
    for (int i = 0; i < 24; i++) scale[i] = i < 8 ? 1.0f : (i % 3 ? 1.5f : 0.0f);

    float l0 = step_of(plain, img, t, NULL, NULL, 4);
    float l1 = step_of(dp, img, t, NULL, ones, 4);
    cr_assert(l0 == l1 && same_grads(plain, dp), "%s: scales of 1 changed the bits", ops->name);
    float l2 = step_of(dp, img, t, NULL, scale, 4);
    cr_assert(l2 != l0, "%s: drop path changed nothing", ops->name);
    float l3 = step_of(dpck, img, t, NULL, scale, 4);
    cr_assert(l2 == l3 && same_grads(dp, dpck),
              "%s: with activation checkpointing the gradients differ (loss %.9g vs %.9g)",
              ops->name, l2, l3);
    /* the next forward without scales drops nothing; one of another size neither */
    float l4 = step_of(dpck, img, t, NULL, NULL, 4);
    cr_assert(l4 == l0 && same_grads(plain, dpck), "%s: the scales outlived their forward",
              ops->name);
    cr_assert_eq(model_set_drop_path(dp, scale, 4), 0);
    cr_assert(step_of(dp, img, t, NULL, NULL, 2) == step_of(plain, img, t, NULL, NULL, 2));
    model_free(plain);
    model_free(dp);
    model_free(dpck);
    free(img);
}

Test(model, drop_path_is_identical_with_activation_checkpointing_and_lasts_one_forward,
     .init = setup)
{
    check_drop_path_model(ops_cpu());
}

Test(model, drop_path_is_identical_with_activation_checkpointing_in_bf16_mixed, .init = setup)
{
    check_drop_path_model(ops_cpu_bf16());
}

Test(model, a_sample_with_every_branch_dropped_is_its_embedding_alone, .init = setup)
{
    char err[256];
    vit_model *m;
    cr_assert_eq(model_new(&m, &REG_MC, 2, &(model_options){.drop_path = 1}, ops_cpu(), err,
                           sizeof err), 0);
    model_init_random(m, 8);
    float *img = rnd(2 * 64, 1);
    float scale[12]; /* sample 0 drops everything, sample 1 keeps everything (x 2) */
    for (int i = 0; i < 12; i++) scale[i] = i % 2 ? 2.0f : 0.0f;
    float z[2][10];
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(model_set_drop_path(m, scale, 2), 0);
        model_forward(m, img, NULL, 2);
        memcpy(z[k], model_logits(m), sizeof z[k]);
        /* new block weights: sample 0 must not notice, sample 1 must */
        size_t n = model_num_params(m);
        float *p = malloc(n * sizeof(float));
        model_read_params(m, p);
        int t0 = model_find_tensor(m, "blocks.0.norm1.weight");
        int t1 = model_find_tensor(m, "norm.weight");
        for (size_t i = model_tensor_at(m, t0)->offset; i < model_tensor_at(m, t1)->offset; i++)
            p[i] += 0.1f * rng_normal(&R);
        model_write_params(m, p);
        free(p);
    }
    cr_assert(memcmp(z[0], z[1], 5 * sizeof(float)) == 0, "a dropped sample saw its blocks");
    cr_assert(memcmp(z[0] + 5, z[1] + 5, 5 * sizeof(float)) != 0, "a kept sample did not");
    model_free(m);
    free(img);
}

Test(model, bf16_mixed_drop_path_and_soft_targets_track_fp32, .init = setup)
{
    char err[256];
    vit_model *f32, *b16;
    const model_options o = {.drop_path = 1};
    cr_assert_eq(model_new(&f32, &REG_MC, 4, &o, ops_cpu(), err, sizeof err), 0);
    cr_assert_eq(model_new(&b16, &REG_MC, 4, &o, ops_cpu_bf16(), err, sizeof err), 0);
    model_init_random(f32, 4);
    model_init_random(b16, 4);
    float *img = rnd(4 * 64, 1), rows[20];
    for (int i = 0; i < 20; i++) rows[i] = (float)(1 + i % 5) / 15.0f;
    float scale[24];
    for (int i = 0; i < 24; i++) scale[i] = i < 8 ? 1.0f : (i % 3 ? 1.5f : 0.0f);
    float loss[2] = {step_of(f32, img, NULL, rows, scale, 4), step_of(b16, img, NULL, rows, scale, 4)};
    size_t n = model_num_params(f32);
    double diff = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)model_grads(f32)[i] - model_grads(b16)[i];
        diff += d * d;
        ref += (double)model_grads(f32)[i] * model_grads(f32)[i];
    }
    double rel = sqrt(diff / ref);
    cr_assert(fabsf(loss[0] - loss[1]) < 0.02f * loss[0], "loss %g vs %g", loss[0], loss[1]);
    cr_assert(rel < 0.05, "bf16 gradients are %.3g away from fp32 (relative)", rel);
    cr_assert(rel > 1e-5, "bf16-mixed changed nothing (relative difference %.3g)", rel);
    model_free(f32);
    model_free(b16);
    free(img);
}
