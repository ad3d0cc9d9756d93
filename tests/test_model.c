/* tests/test_model.c - worker/train/model.c: the gradient of every tensor against
 * finite differences of the loss (tests/fd.h), timm's names, shapes and
 * decay groups, activation checkpointing (identical gradients, less memory)
 * and bf16-mixed (bf16 activations and weight copies; gradients that track
 * fp32). */
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
