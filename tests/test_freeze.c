/* tests/test_freeze.c - worker/train/freeze.c and what training.freeze does
 * to the model and the optimizer: prefixes match timm names at a '.' (or
 * whole); a prefix matching nothing and a list freezing everything are
 * config errors naming training.freeze; the linear probe's list leaves only
 * the head; the runs of frozen and trainable parameters; the checkpoint's
 * model JSON records the list. With a freeze list the trainable
 * parameters' gradients are those of the run without it, bit for bit on
 * the CPU (and the frozen ones are not computed: they stay zero), the
 * AdamW state covers only the trainable ones, and steps leave the frozen
 * weights as they were, bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "freeze.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "rng.h"

TestSuite(freeze, .timeout = 120);

Test(freeze, a_prefix_matches_the_whole_name_or_at_a_dot)
{
    cr_assert(freeze_match("blocks", "blocks.3.attn.qkv.weight"));
    cr_assert(freeze_match("blocks.3", "blocks.3.attn.qkv.weight"));
    cr_assert(freeze_match("blocks.3.attn", "blocks.3.attn.qkv.weight"));
    cr_assert(freeze_match("blocks.3.attn.qkv.weight", "blocks.3.attn.qkv.weight"));
    cr_assert(freeze_match("cls_token", "cls_token"));
    cr_assert(freeze_match("norm", "norm.weight"));
    cr_assert(freeze_match("head", "head.bias"));
    /* never inside a component */
    cr_assert(!freeze_match("blocks.1", "blocks.10.norm1.weight"));
    cr_assert(!freeze_match("blocks.3.at", "blocks.3.attn.qkv.weight"));
    cr_assert(!freeze_match("norm", "blocks.0.norm1.weight"));
    cr_assert(!freeze_match("pos", "pos_embed"));
    cr_assert(!freeze_match("blocks.", "blocks.0.norm1.weight"));
    cr_assert(!freeze_match("", "head.weight"));
    cr_assert(!freeze_match("head.weight.x", "head.weight"));
}

/* fmnist_tiny's 56 tensors (depth 4) */
static model_config tiny(void)
{
    vit_job_config cfg;
    config_defaults(&cfg);
    cr_assert_eq(config_preset(&cfg.model, "fmnist_tiny"), 0);
    return cfg.model;
}

static training_config with_freeze(const char *const *prefixes, int n)
{
    vit_job_config cfg;
    config_defaults(&cfg);
    for (int i = 0; i < n; i++) snprintf(cfg.training.freeze[i], CONFIG_FREEZE_LEN, "%s", prefixes[i]);
    cfg.training.freeze_n = n;
    return cfg.training;
}

static const char *const probe[] = {"cls_token", "pos_embed", "patch_embed", "blocks", "norm"};

Test(freeze, the_linear_probe_list_freezes_all_but_the_head)
{
    model_config mc = tiny();
    int n = model_tensor_names(&mc, NULL, 0);
    cr_assert_eq(n, 6 + 12 * mc.depth + 4 - 2, "%d tensors", n);
    model_tensor *ts = calloc((size_t)n, sizeof *ts);
    const char **names = calloc((size_t)n, sizeof *names);
    unsigned char *frozen = calloc((size_t)n, 1);
    cr_assert_eq(model_tensor_names(&mc, ts, n), n);
    for (int i = 0; i < n; i++) names[i] = ts[i].name;
    char err[512] = "";
    cr_assert_eq(freeze_resolve(probe, 5, names, n, frozen, err, sizeof err), VJ_OK, "%s", err);
    for (int i = 0; i < n; i++) {
        int head = strncmp(names[i], "head.", 5) == 0;
        cr_assert_eq(frozen[i], !head, "%s: frozen=%d", names[i], frozen[i]);
    }
    /* blocks.1.attn: just its four tensors */
    const char *const attn[] = {"blocks.1.attn"};
    cr_assert_eq(freeze_resolve(attn, 1, names, n, frozen, err, sizeof err), VJ_OK, "%s", err);
    int k = 0;
    for (int i = 0; i < n; i++) {
        k += frozen[i];
        if (frozen[i]) cr_assert(strncmp(names[i], "blocks.1.attn.", 14) == 0, "%s", names[i]);
    }
    cr_assert_eq(k, 4);
    free(ts);
    free(names);
    free(frozen);
}

Test(freeze, a_prefix_that_matches_nothing_or_freezing_everything_is_a_config_error)
{
    model_config mc = tiny();
    const char *const bad[] = {"head", "blocks.4"}; /* depth 4: blocks.0 .. blocks.3 */
    training_config tc = with_freeze(bad, 2);
    char err[512] = "";
    cr_assert_eq(freeze_check(&tc, &mc, err, sizeof err), VJ_ERR_CONFIG);
    cr_assert(strstr(err, "training.freeze[1]=blocks.4 matches no parameter"), "%s", err);
    const char *const dot[] = {"blocks."};
    tc = with_freeze(dot, 1);
    cr_assert_eq(freeze_check(&tc, &mc, err, sizeof err), VJ_ERR_CONFIG);
    cr_assert(strstr(err, "training.freeze[0]=blocks. matches no parameter"), "%s", err);
    const char *const all[] = {"cls_token", "pos_embed", "patch_embed", "blocks", "norm", "head"};
    tc = with_freeze(all, 6);
    cr_assert_eq(freeze_check(&tc, &mc, err, sizeof err), VJ_ERR_CONFIG);
    cr_assert(strstr(err, "training.freeze freezes every parameter"), "%s", err);
    tc = with_freeze(probe, 5);
    cr_assert_eq(freeze_check(&tc, &mc, err, sizeof err), VJ_OK, "%s", err);
    tc = with_freeze(NULL, 0);
    cr_assert_eq(freeze_check(&tc, &mc, err, sizeof err), VJ_OK, "%s", err);
}

Test(freeze, the_checkpoints_model_json_records_the_list)
{
    model_config mc = tiny();
    training_config tc = with_freeze(probe, 5);
    char plain[512], frozen[512];
    training_config none = with_freeze(NULL, 0);
    freeze_model_json(&mc, &none, plain, sizeof plain);
    freeze_model_json(&mc, &tc, frozen, sizeof frozen);
    cr_assert(strstr(plain, "freeze") == NULL, "%s", plain);
    cr_assert(strstr(frozen, ",\"freeze\":[\"cls_token\",\"pos_embed\",\"patch_embed\","
                             "\"blocks\",\"norm\"]}"), "%s", frozen);
    cr_assert_eq(strncmp(plain, frozen, strlen(plain) - 1), 0, "%s vs %s", plain, frozen);
    /* too long for the buffer: a hash, still valid JSON, still telling lists apart */
    char small[150], small2[150];
    freeze_model_json(&mc, &tc, small, sizeof small);
    cr_assert(strstr(small, "\"freeze\":\"fnv1a64:"), "%s", small);
    training_config other = with_freeze(probe, 4);
    freeze_model_json(&mc, &other, small2, sizeof small2);
    cr_assert(strstr(small2, "\"freeze\":\"fnv1a64:") && strcmp(small, small2) != 0, "%s", small2);
}

/* A tiny model (fmnist_tiny's dims, depth 2) with random weights and a
 * fixed batch. */
static vit_model *small_model(model_config *mc)
{
    *mc = tiny();
    mc->depth = 2;
    char err[512];
    vit_model *m = NULL;
    cr_assert_eq(model_new(&m, mc, 4, NULL, ops_cpu(), err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_init_random(m, 7), 0);
    return m;
}

static void batch(float *img, int *lab, int B, int n)
{
    rng_state r;
    rng_seed(&r, 11, 0, 0);
    for (int i = 0; i < B * n; i++) img[i] = rng_uniform(&r);
    for (int b = 0; b < B; b++) lab[b] = b % 10;
}

static unsigned char *resolve(vit_model *m, const char *const *prefixes, int np)
{
    int n = model_num_tensors(m);
    const char **names = calloc((size_t)n, sizeof *names);
    unsigned char *f = calloc((size_t)n, 1);
    for (int i = 0; i < n; i++) names[i] = model_tensor_at(m, i)->name;
    char err[512] = "";
    cr_assert_eq(freeze_resolve(prefixes, np, names, n, f, err, sizeof err), VJ_OK, "%s", err);
    free(names);
    return f;
}

/* The gradients of one forward and backward, host copy (malloc'd). */
static float *grads_of(vit_model *m, const float *img, const int *lab, int B)
{
    float *g = malloc(sizeof(float) * model_num_params(m));
    model_zero_grads(m);
    model_forward(m, img, lab, B);
    model_backward(m, 1.0f / (float)B);
    model_read_grads(m, g);
    return g;
}

/* frozen_zero: the frozen tensors' slots must stay zero (not where a
 * LayerNorm is half frozen, whose op computes both or neither: model.h) */
static void grads_match(const char *const *prefixes, int np, int expect_frozen_params,
                        int frozen_zero)
{
    model_config mc;
    vit_model *m = small_model(&mc);
    const int B = 4, n_img = model_image_floats(m);
    float *img = malloc(sizeof(float) * (size_t)(B * n_img));
    int lab[4];
    batch(img, lab, B, n_img);
    float *want = grads_of(m, img, lab, B);
    unsigned char *f = resolve(m, prefixes, np);
    model_set_frozen(m, f);
    float *got = grads_of(m, img, lab, B);
    size_t frozen_params = 0;
    for (int t = 0; t < model_num_tensors(m); t++) {
        const model_tensor *x = model_tensor_at(m, t);
        cr_assert_eq(x->frozen, f[t]);
        for (size_t i = x->offset; i < x->offset + x->numel; i++) {
            if (x->frozen && frozen_zero) {
                cr_assert_eq(got[i], 0.0f, "%s[%zu]: a frozen gradient computed: %g", x->name,
                             i - x->offset, got[i]);
            } else if (!x->frozen) {
                cr_assert_eq(memcmp(&got[i], &want[i], sizeof(float)), 0,
                             "%s[%zu]: %.9g with freeze, %.9g without", x->name, i - x->offset,
                             got[i], want[i]);
                cr_assert(want[i] != 0.0f || x->ndim == 1 || i > x->offset); /* not all zero */
            }
        }
        if (x->frozen) frozen_params += x->numel;
    }
    if (expect_frozen_params >= 0) cr_assert_eq(frozen_params, (size_t)expect_frozen_params);
    free(img);
    free(want);
    free(got);
    free(f);
    model_free(m);
}

Test(freeze, linear_probe_head_gradients_equal_the_unfrozen_runs_bit_for_bit)
{
    model_config mc = tiny();
    mc.depth = 2;
    /* everything but head.weight (K x D) and head.bias (K) */
    vit_model *m = small_model(&mc);
    int expect = (int)model_num_params(m) - (mc.num_classes * mc.dim + mc.num_classes);
    model_free(m);
    grads_match(probe, 5, expect, 1);
}

Test(freeze, partial_freezes_leave_the_other_gradients_bit_for_bit)
{
    const char *const stem[] = {"cls_token", "pos_embed", "patch_embed"};
    grads_match(stem, 3, -1, 1);
    const char *const low[] = {"patch_embed", "blocks.0", "blocks.1.attn"};
    grads_match(low, 3, -1, 1);
    const char *const mid[] = {"blocks.1.mlp.fc1", "norm", "head"};
    grads_match(mid, 3, -1, 1);
    const char *const norms[] = {"blocks.0.norm1", "blocks.1.norm2", "norm"};
    grads_match(norms, 3, -1, 1);
    const char *const halves[] = {"blocks.0.norm1.bias", "blocks.1.norm2.weight", "norm.bias"};
    grads_match(halves, 3, -1, 0);
}

Test(freeze, the_backward_stops_below_the_lowest_trainable_layer)
{
    /* only blocks.1.mlp.fc2 and the head train: the backward must end at
     * fc2's weight gradient, without fc2's input gradient. fc1's weights are
     * made NaN between the forward and the backward: a backward that went
     * on through fc1 would carry NaN down the residual stream to the stem,
     * whose embed_backward writes cls_token's and pos_embed's slots */
    model_config mc;
    vit_model *m = small_model(&mc);
    const int B = 4, n_img = model_image_floats(m);
    float *img = malloc(sizeof(float) * (size_t)(B * n_img));
    int lab[4];
    batch(img, lab, B, n_img);
    const char *const head_and_fc2[] = {"cls_token", "pos_embed", "patch_embed", "blocks.0",
                                        "blocks.1.norm1", "blocks.1.attn", "blocks.1.norm2",
                                        "blocks.1.mlp.fc1", "norm"};
    unsigned char *f = resolve(m, head_and_fc2, 9);
    model_set_frozen(m, f);
    /* fc1's weights NaN in the backward only: the forward read them already */
    float *p = malloc(sizeof(float) * model_num_params(m));
    model_read_params(m, p);
    model_zero_grads(m);
    float loss = model_forward(m, img, lab, B);
    cr_assert(isfinite(loss));
    const model_tensor *fc2 = model_tensor_at(m, model_find_tensor(m, "blocks.1.mlp.fc2.weight"));
    const model_tensor *fc1 = model_tensor_at(m, model_find_tensor(m, "blocks.1.mlp.fc1.weight"));
    for (size_t i = 0; i < fc1->numel; i++) p[fc1->offset + i] = NAN;
    model_write_params(m, p);
    model_backward(m, 1.0f / (float)B);
    float *g = malloc(sizeof(float) * model_num_params(m));
    model_read_grads(m, g);
    int nonzero = 0;
    for (size_t i = 0; i < model_num_params(m); i++) {
        cr_assert(isfinite(g[i]), "gradient %zu is %g: the backward went below fc2", i, g[i]);
        int trainable = (i >= fc2->offset && i < fc2->offset + fc2->numel + (size_t)mc.dim) ||
                        i >= model_tensor_at(m, model_find_tensor(m, "head.weight"))->offset;
        if (!trainable) cr_assert_eq(g[i], 0.0f, "frozen gradient %zu = %g", i, g[i]);
        nonzero += g[i] != 0.0f;
    }
    cr_assert(nonzero > 0);
    free(p);
    free(g);
    free(img);
    free(f);
    model_free(m);
}

Test(freeze, adamw_keeps_no_state_for_frozen_tensors_and_never_changes_them)
{
    model_config mc;
    vit_model *m = small_model(&mc);
    const int B = 4, n_img = model_image_floats(m);
    const size_t n = model_num_params(m);
    float *img = malloc(sizeof(float) * (size_t)(B * n_img));
    int lab[4];
    batch(img, lab, B, n_img);
    const char *const some[] = {"cls_token", "pos_embed", "blocks.0", "norm"};
    unsigned char *f = resolve(m, some, 4);
    model_set_frozen(m, f);
    size_t trainable = 0;
    for (int t = 0; t < model_num_tensors(m); t++)
        if (!f[t]) trainable += model_tensor_at(m, t)->numel;
    optimizer_config oc = {.lr = 1e-2, .weight_decay = 0.5, .beta1 = 0.9, .beta2 = 0.999,
                           .eps = 1e-8, .grad_clip = 1.0};
    optim *o = NULL;
    char err[512];
    cr_assert_eq(optim_new(&o, m, &oc, 10, err, sizeof err), 0, "%s", err);
    cr_assert_eq(optim_num_params(o), trainable, "state of %zu parameters, %zu train",
                 optim_num_params(o), trainable);
    for (int i = 0; i < optim_num_spans(o); i++) { /* no span reaches a frozen tensor */
        size_t so;
        optim_span sp = optim_span_at(o, i, &so);
        for (int t = 0; t < model_num_tensors(m); t++) {
            const model_tensor *x = model_tensor_at(m, t);
            if (f[t]) cr_assert(sp.hi <= x->offset || sp.lo >= x->offset + x->numel, "%s", x->name);
        }
    }
    float *before = malloc(sizeof(float) * n), *after = malloc(sizeof(float) * n);
    model_read_params(m, before);
    for (int s = 0; s < 3; s++) {
        model_zero_grads(m);
        model_forward(m, img, lab, B);
        model_backward(m, 1.0f / (float)B);
        optim_step(o, m, ops_cpu(), s);
    }
    model_read_params(m, after);
    int changed = 0;
    for (int t = 0; t < model_num_tensors(m); t++) {
        const model_tensor *x = model_tensor_at(m, t);
        int same = memcmp(before + x->offset, after + x->offset, sizeof(float) * x->numel) == 0;
        if (f[t]) cr_assert(same, "frozen %s changed", x->name);
        changed += !same;
    }
    int n_trainable = 0;
    for (int t = 0; t < model_num_tensors(m); t++) n_trainable += !f[t];
    cr_assert_eq(changed, n_trainable, "%d tensors changed, %d train", changed, n_trainable);
    optim_free(o);
    free(before);
    free(after);
    free(img);
    free(f);
    model_free(m);
}

Test(freeze, runs_split_a_range_into_frozen_and_trainable_parts)
{
    model_config mc;
    vit_model *m = small_model(&mc);
    const char *const some[] = {"pos_embed", "blocks.1"};
    unsigned char *f = resolve(m, some, 2);
    model_set_frozen(m, f);
    size_t lo[64], hi[64];
    const model_tensor *pos = model_tensor_at(m, model_find_tensor(m, "pos_embed"));
    const model_tensor *b1 = model_tensor_at(m, model_find_tensor(m, "blocks.1.norm1.weight"));
    const model_tensor *nw = model_tensor_at(m, model_find_tensor(m, "norm.weight"));
    const size_t n = model_num_params(m);
    int k = freeze_runs(m, 0, n, 1, lo, hi, 64);
    cr_assert_eq(k, 2);
    cr_assert(lo[0] == pos->offset && hi[0] == pos->offset + pos->numel);
    cr_assert(lo[1] == b1->offset && hi[1] == nw->offset);
    k = freeze_runs(m, 0, n, 0, lo, hi, 64);
    cr_assert_eq(k, 3);
    cr_assert(lo[0] == 0 && hi[0] == pos->offset);
    cr_assert(lo[1] == pos->offset + pos->numel && hi[1] == b1->offset);
    cr_assert(lo[2] == nw->offset && hi[2] == n);
    /* a window inside a run, and the padding beyond the parameters is frozen */
    k = freeze_runs(m, pos->offset + 1, pos->offset + 3, 1, lo, hi, 64);
    cr_assert(k == 1 && lo[0] == pos->offset + 1 && hi[0] == pos->offset + 3);
    k = freeze_runs(m, n - 2, n + 5, 1, lo, hi, 64);
    cr_assert(k == 1 && lo[0] == n && hi[0] == n + 5);
    free(f);
    model_free(m);
}
