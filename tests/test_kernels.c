/* tests/test_kernels.c - every CPU op's backward against central finite
 * differences, forward properties, accumulation semantics of ops.h, and the
 * whole model's gradient against finite differences of its loss.
 *
 * The scalar probed is L = sum(out * R) for a fixed random R, accumulated in
 * double; the analytic gradient is the op's backward with dout = R. Ops are
 * fp32, so steps are 1e-2..1e-3 and tolerances are relative to the largest
 * gradient (the PyTorch check, tests/ref, is the 1e-4 one). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "ops.h"
#include "optim.h"
#include "rng.h"

static rng_state R;

static float *rnd(size_t n, float scale)
{
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(&R);
    return x;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static float max_abs(const float *x, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* A forward closure: recompute `out` from the current inputs. */
typedef void (*forward_fn)(void *ctx);

/* Compares ana (n) with the central difference of L = <out, r> w.r.t. x,
 * on up to 48 evenly spread elements. */
static void check_fd(const char *what, float *x, size_t n, const float *ana, forward_fn f,
                     void *ctx, const float *out, const float *r, size_t nout, float eps,
                     float tol)
{
    float scale = max_abs(ana, n);
    if (scale < 1e-3f) scale = 1e-3f;
    size_t stride = n > 48 ? n / 48 : 1;
    for (size_t i = 0; i < n; i += stride) {
        float keep = x[i];
        x[i] = keep + eps;
        f(ctx);
        double lp = dot(out, r, nout);
        x[i] = keep - eps;
        f(ctx);
        double lm = dot(out, r, nout);
        x[i] = keep;
        double num = (lp - lm) / (2.0 * eps);
        cr_assert(fabs(num - ana[i]) <= tol * scale,
                  "%s[%zu]: finite difference %.6g vs backward %.6g (scale %.3g)", what, i, num,
                  ana[i], scale);
    }
    f(ctx);
}


static void setup(void)
{
    rng_seed(&R, 42, 0, 0);
    ops_cpu_set_threads(2);
}

/* ---- matmul ---- */
typedef struct { float *out, *inp, *w, *b; int N, IC, OC; } mm_ctx;
static void mm_fwd(void *p)
{
    mm_ctx *c = p;
    matmul_forward_cpu(c->out, c->inp, c->w, c->b, c->N, c->IC, c->OC);
}

Test(kernels, matmul_backward_matches_finite_differences, .init = setup)
{
    mm_ctx c = {.N = 7, .IC = 5, .OC = 6};
    c.inp = rnd(35, 1), c.w = rnd(30, 0.5f), c.b = rnd(6, 0.5f), c.out = rnd(42, 1);
    float *r = rnd(42, 1), *dinp = rnd(35, 1), *dw = calloc(30, 4), *db = calloc(6, 4);
    mm_fwd(&c);
    matmul_backward_cpu(dinp, dw, db, r, c.inp, c.w, c.N, c.IC, c.OC);
    check_fd("dinp", c.inp, 35, dinp, mm_fwd, &c, c.out, r, 42, 1e-2f, 2e-3f);
    check_fd("dw", c.w, 30, dw, mm_fwd, &c, c.out, r, 42, 1e-2f, 2e-3f);
    check_fd("dbias", c.b, 6, db, mm_fwd, &c, c.out, r, 42, 1e-2f, 2e-3f);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(r), free(dinp), free(dw), free(db);
}

Test(kernels, matmul_backward_accumulates_weight_grads_and_overwrites_dinp, .init = setup)
{
    float *inp = rnd(12, 1), *w = rnd(6, 1), *dout = rnd(8, 1);
    float dinp1[12], dinp2[12], dw1[6] = {0}, dw2[6] = {0}, db1[2] = {0}, db2[2] = {0};
    matmul_backward_cpu(dinp1, dw1, db1, dout, inp, w, 4, 3, 2);
    for (int i = 0; i < 12; i++) dinp2[i] = 1e6f; /* garbage must be overwritten */
    matmul_backward_cpu(dinp2, dw2, db2, dout, inp, w, 4, 3, 2);
    matmul_backward_cpu(dinp2, dw2, db2, dout, inp, w, 4, 3, 2);
    for (int i = 0; i < 12; i++) cr_assert_float_eq(dinp2[i], dinp1[i], 1e-6);
    for (int i = 0; i < 6; i++) cr_assert_float_eq(dw2[i], 2 * dw1[i], 1e-5);
    for (int i = 0; i < 2; i++) cr_assert_float_eq(db2[i], 2 * db1[i], 1e-5);
    free(inp), free(w), free(dout);
}

/* ---- layernorm ---- */
typedef struct { float *out, *mean, *rstd, *inp, *w, *b; int N, C; } ln_ctx;
static void ln_fwd(void *p)
{
    ln_ctx *c = p;
    layernorm_forward_cpu(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
}

Test(kernels, layernorm_backward_matches_finite_differences_and_accumulates, .init = setup)
{
    ln_ctx c = {.N = 5, .C = 16};
    size_t n = 80;
    c.inp = rnd(n, 2), c.w = rnd(16, 1), c.b = rnd(16, 1), c.out = rnd(n, 1);
    c.mean = calloc(5, 4), c.rstd = calloc(5, 4);
    float *r = rnd(n, 1), *dinp = calloc(n, 4), *dw = calloc(16, 4), *db = calloc(16, 4);
    float *base = rnd(n, 1), *dinp2 = malloc(n * 4);
    memcpy(dinp2, base, n * 4);
    ln_fwd(&c);
    layernorm_backward_cpu(dinp, dw, db, r, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    float dw2[16] = {0}, db2[16] = {0};
    layernorm_backward_cpu(dinp2, dw2, db2, r, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    for (size_t i = 0; i < n; i++) cr_assert_float_eq(dinp2[i], base[i] + dinp[i], 1e-5);
    check_fd("dinp", c.inp, n, dinp, ln_fwd, &c, c.out, r, n, 1e-2f, 5e-3f);
    check_fd("dw", c.w, 16, dw, ln_fwd, &c, c.out, r, n, 1e-2f, 5e-3f);
    check_fd("db", c.b, 16, db, ln_fwd, &c, c.out, r, n, 1e-2f, 5e-3f);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(r);
    free(dinp), free(dw), free(db), free(base), free(dinp2);
}

Test(kernels, layernorm_output_has_zero_mean_unit_variance_with_unit_affine, .init = setup)
{
    float *x = rnd(3 * 32, 5), out[96], mean[3], rstd[3], w[32], b[32];
    for (int i = 0; i < 32; i++) w[i] = 1, b[i] = 0;
    layernorm_forward_cpu(out, mean, rstd, x, w, b, 3, 32);
    for (int n = 0; n < 3; n++) {
        double m = 0, v = 0;
        for (int i = 0; i < 32; i++) m += out[n * 32 + i];
        m /= 32;
        for (int i = 0; i < 32; i++) v += (out[n * 32 + i] - m) * (out[n * 32 + i] - m);
        cr_assert(fabs(m) < 1e-5 && fabs(v / 32 - 1) < 1e-3, "row %d mean %g var %g", n, m, v / 32);
    }
    free(x);
}

/* ---- attention ---- */
typedef struct { float *out, *att, *scratch, *qkv; int B, T, D, NH; } at_ctx;
static void at_fwd(void *p)
{
    at_ctx *c = p;
    attention_forward_cpu(c->out, c->att, c->scratch, c->qkv, c->B, c->T, c->D, c->NH);
}

Test(kernels, attention_backward_matches_finite_differences, .init = setup)
{
    at_ctx c = {.B = 2, .T = 5, .D = 8, .NH = 2};
    size_t nq = 2 * 5 * 24, no = 2 * 5 * 8;
    c.qkv = rnd(nq, 1), c.out = calloc(no, 4), c.att = calloc(2 * 2 * 25, 4);
    float *r = rnd(no, 1), *dqkv = rnd(nq, 1);
    float *scratch = calloc(ops_cpu_attention_scratch_bytes(1, 5, 4, 1), 1);
    c.scratch = scratch;
    at_fwd(&c);
    attention_backward_cpu(dqkv, scratch, r, c.qkv, c.att, c.B, c.T, c.D, c.NH);
    check_fd("dqkv", c.qkv, nq, dqkv, at_fwd, &c, c.out, r, no, 1e-2f, 5e-3f);
    free(c.qkv), free(c.out), free(c.att), free(r), free(dqkv), free(scratch);
}

Test(kernels, attention_rows_are_probabilities_and_non_causal, .init = setup)
{
    int B = 1, T = 6, D = 4, NH = 2;
    float *qkv = rnd(B * T * 3 * D, 2), out[24], att[72];
    float *scratch = calloc(ops_cpu_attention_scratch_bytes(B, T, D, NH), 1);
    attention_forward_cpu(out, att, scratch, qkv, B, T, D, NH);
    free(scratch);
    for (int row = 0; row < NH * T; row++) {
        double s = 0;
        for (int j = 0; j < T; j++) s += att[row * T + j];
        cr_assert(fabs(s - 1) < 1e-5, "row %d sums to %g", row, s);
        cr_assert(att[row * T + T - 1] > 0, "row %d does not see the last token", row);
    }
    free(qkv);
}

/* ---- gelu ---- */
typedef struct { float *out, *inp; size_t n; } ge_ctx;
static void ge_fwd(void *p)
{
    ge_ctx *c = p;
    gelu_forward_cpu(c->out, c->inp, c->n);
}

Test(kernels, gelu_is_the_exact_erf_form_and_backward_matches_finite_differences, .init = setup)
{
    ge_ctx c = {.n = 64};
    c.inp = rnd(64, 3), c.out = calloc(64, 4);
    float *r = rnd(64, 1), *d = calloc(64, 4);
    ge_fwd(&c);
    /* nn.GELU() at 1.0 is 0.8413447; the tanh approximation gives 0.8411920 */
    float one = 1.0f, g;
    gelu_forward_cpu(&g, &one, 1);
    cr_assert_float_eq(g, 0.84134475f, 2e-7);
    /* over the whole range, against erf in double precision (both code
     * paths: 19 elements = two vectors of 8 and a scalar tail of 3) */
    float xs[19], ys[19];
    for (int k = -60; k <= 60; k += 19) {
        for (int j = 0; j < 19; j++) xs[j] = 0.1f * (float)(k + j) - 0.05f;
        gelu_forward_cpu(ys, xs, 19);
        for (int j = 0; j < 19; j++) {
            double want = 0.5 * xs[j] * (1.0 + erf(xs[j] / sqrt(2.0)));
            cr_assert(fabs(ys[j] - want) <= 1e-6 * fmax(1.0, fabs(xs[j])),
                      "gelu(%g) = %.9g, want %.9g", xs[j], ys[j], want);
        }
    }
    gelu_backward_cpu(d, c.inp, r, 64);
    check_fd("dinp", c.inp, 64, d, ge_fwd, &c, c.out, r, 64, 1e-2f, 2e-3f);
    free(c.inp), free(c.out), free(r), free(d);
}

/* ---- embeddings ---- */
typedef struct { float *x, *po, *cls, *pos; int B, T, D; } em_ctx;
static void em_fwd(void *p)
{
    em_ctx *c = p;
    embed_forward_cpu(c->x, c->po, c->cls, c->pos, c->B, c->T, c->D);
}

Test(kernels, embed_backward_matches_finite_differences, .init = setup)
{
    em_ctx c = {.B = 3, .T = 4, .D = 5};
    c.po = rnd(45, 1), c.cls = rnd(5, 1), c.pos = rnd(20, 1), c.x = calloc(60, 4);
    float *r = rnd(60, 1), *dpo = rnd(45, 1), *dcls = calloc(5, 4), *dpos = calloc(20, 4);
    em_fwd(&c);
    embed_backward_cpu(dpo, dcls, dpos, r, c.B, c.T, c.D);
    check_fd("dpatch", c.po, 45, dpo, em_fwd, &c, c.x, r, 60, 1e-2f, 1e-3f);
    check_fd("dcls", c.cls, 5, dcls, em_fwd, &c, c.x, r, 60, 1e-2f, 1e-3f);
    check_fd("dpos", c.pos, 20, dpos, em_fwd, &c, c.x, r, 60, 1e-2f, 1e-3f);
    free(c.po), free(c.cls), free(c.pos), free(c.x), free(r), free(dpo), free(dcls), free(dpos);
}

Test(kernels, patchify_then_matmul_equals_a_strided_convolution, .init = setup)
{
    int B = 2, C = 3, S = 8, P = 4, D = 5, G = S / P, N = G * G, CPP = C * P * P;
    float *img = rnd((size_t)B * C * S * S, 1), *w = rnd((size_t)D * CPP, 1), *bias = rnd(D, 1);
    float *patches = malloc(sizeof(float) * B * N * CPP), *out = malloc(sizeof(float) * B * N * D);
    patchify_cpu(patches, img, B, C, S, P);
    matmul_forward_cpu(out, patches, w, bias, B * N, CPP, D);
    for (int b = 0; b < B; b++)
        for (int d = 0; d < D; d++)
            for (int py = 0; py < G; py++)
                for (int px = 0; px < G; px++) {
                    double s = bias[d];
                    for (int c = 0; c < C; c++)
                        for (int ky = 0; ky < P; ky++)
                            for (int kx = 0; kx < P; kx++)
                                s += (double)w[((d * C + c) * P + ky) * P + kx] *
                                     img[((b * C + c) * S + py * P + ky) * S + px * P + kx];
                    float got = out[((size_t)b * N + py * G + px) * D + d];
                    cr_assert(fabs(got - s) < 1e-4, "b%d d%d (%d,%d): %g vs conv %g", b, d, py,
                              px, got, s);
                }
    free(img), free(w), free(bias), free(patches), free(out);
}

/* ---- cross-entropy ---- */
typedef struct { float *losses, *probs, *logits; int *t; int B, K; } ce_ctx;
static void ce_fwd(void *p)
{
    ce_ctx *c = p;
    crossentropy_forward_cpu(c->losses, c->probs, c->logits, c->t, c->B, c->K);
}

Test(kernels, crossentropy_matches_log_softmax_and_finite_differences, .init = setup)
{
    int t[4] = {0, 3, 2, 1};
    ce_ctx c = {.B = 4, .K = 5, .t = t};
    c.logits = rnd(20, 3), c.losses = calloc(4, 4), c.probs = calloc(20, 4);
    ce_fwd(&c);
    for (int b = 0; b < 4; b++) {
        double s = 0;
        for (int k = 0; k < 5; k++) s += exp(c.logits[b * 5 + k]);
        cr_assert(fabs(c.losses[b] - (log(s) - c.logits[b * 5 + t[b]])) < 1e-5);
    }
    float r[4] = {0.25f, 0.25f, 0.25f, 0.25f}, d[20];
    crossentropy_backward_cpu(d, c.probs, t, 0.25f, 4, 5);
    check_fd("dlogits", c.logits, 20, d, ce_fwd, &c, c.losses, r, 4, 1e-2f, 2e-3f);
    free(c.logits), free(c.losses), free(c.probs);
}

/* ---- norms, AdamW, schedule ---- */
Test(kernels, sum_squares_is_exact_and_independent_of_thread_count, .init = setup)
{
    size_t n = 100003;
    float *g = rnd(n, 1);
    double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (double)g[i] * g[i];
    ops_cpu_set_threads(1);
    double one = sum_squares_cpu(g, n);
    ops_cpu_set_threads(2);
    double two = sum_squares_cpu(g, n);
    cr_assert(one == two, "1 thread %.17g vs 2 threads %.17g", one, two);
    cr_assert(fabs(one - ref) < 1e-9 * ref);
    free(g);
}

Test(kernels, adamw_matches_torch_formula_on_known_values)
{
    /* One step of torch.optim.AdamW(lr=0.1, betas=(0.9,0.999), eps=1e-8,
     * weight_decay=0.5) from p=1, g=0.2: p = 1*(1-0.05) - 0.1*sign = 0.85
     * (m_hat = g, sqrt(v_hat) = |g|). */
    float p = 1.0f, m = 0, v = 0, g = 0.2f, p_lp = -1;
    adamw_update_cpu(&p, &p_lp, &m, &v, &g, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 1);
    cr_assert_float_eq(p, 0.85f, 1e-6);
    cr_assert_eq(p_lp, p, "the low-precision copy is written in the same pass");
    cr_assert_float_eq(m, 0.02f, 1e-7);
    cr_assert_float_eq(v, 0.00004f, 1e-9);
}

Test(kernels, lr_schedule_warms_up_linearly_then_follows_the_cosine)
{
    optimizer_config oc = {.lr = 1.0, .warmup_steps = 4, .min_lr = 0.1, .schedule = "cosine"};
    cr_assert_float_eq(optim_lr_at(&oc, 0, 14), 0.25, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 3, 14), 1.0, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 4, 14), 1.0, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 9, 14), 0.55, 1e-12);
    cr_assert(optim_lr_at(&oc, 13, 14) > 0.1 && optim_lr_at(&oc, 13, 14) < 0.13);
    strcpy(oc.schedule, "constant");
    cr_assert_float_eq(optim_lr_at(&oc, 9, 14), 1.0, 1e-12);
}

/* ---- the whole model ---- */
typedef struct { vit_model *m; float *img; int *t; int B; float loss; } md_ctx;
static void md_fwd(void *p)
{
    md_ctx *c = p;
    c->loss = model_forward(c->m, c->img, c->t, c->B);
}

Test(kernels, model_gradient_of_every_tensor_matches_finite_differences_of_the_loss,
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

Test(kernels, model_layout_uses_timm_names_shapes_and_decay_groups)
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

Test(kernels, activation_checkpointing_gives_identical_gradients_with_less_memory, .init = setup)
{
    check_ckpt_identical(ops_cpu());
}

Test(kernels, activation_checkpointing_gives_identical_gradients_in_bf16_mixed, .init = setup)
{
    check_ckpt_identical(ops_cpu_bf16());
}

Test(kernels, cpu_bf16_stores_every_floatx_activation_as_a_bf16_value, .init = setup)
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

Test(kernels, round_bf16_rounds_to_nearest_even_and_keeps_nan_and_inf)
{
    const float one = 1.0f, ulp = 1.0f / 128; /* bf16 spacing at 1 */
    float x[10] = {one,
                   one + ulp / 2,              /* tie: to even (1) */
                   one + 3 * ulp / 2,          /* tie: to even (1 + 2 ulp) */
                   one + ulp / 2 + ulp / 64,   /* above the tie: up */
                   -(one + 3 * ulp / 2),       /* sign symmetric */
                   3.4e38f,                    /* past bf16's largest: inf */
                   INFINITY, NAN, 1e-40f, 0.1f};
    round_bf16_cpu(x, x, 10);
    cr_assert_eq(x[0], one);
    cr_assert_eq(x[1], one);
    cr_assert_eq(x[2], one + 2 * ulp);
    cr_assert_eq(x[3], one + ulp);
    cr_assert_eq(x[4], -(one + 2 * ulp));
    cr_assert(isinf(x[5]) && x[5] > 0);
    cr_assert(isinf(x[6]));
    cr_assert(isnan(x[7]));
    cr_assert(x[8] > 0 && x[8] < 1e-39f, "denormals are kept, rounded: %g", x[8]);
    cr_assert_eq(x[9], 0.10009765625f); /* 0.1 in bf16 */
}

Test(kernels, bf16_mixed_gradients_track_fp32_within_bf16_precision, .init = setup)
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
