/* tests/test_optim.c - worker/train/optim.c: the learning-rate schedule (linear
 * warmup, then cosine to minLr, or constant), and the AdamW step itself
 * (clipping, bias correction, weight decay by group, layerDecay's lr scale per
 * tensor) against torch's formula. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "model.h"
#include "ops.h"
#include "optim.h"

Test(optim, lr_schedule_warms_up_linearly_then_follows_the_cosine)
{
    optimizer_config oc = {.lr = 1.0, .warmup_steps = 4, .min_lr = 0.1, .schedule = SCHEDULE_COSINE};
    cr_assert_float_eq(optim_lr_at(&oc, 0, 14), 0.25, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 3, 14), 1.0, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 4, 14), 1.0, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 9, 14), 0.55, 1e-12);
    cr_assert(optim_lr_at(&oc, 13, 14) > 0.1 && optim_lr_at(&oc, 13, 14) < 0.13);
    oc.schedule = SCHEDULE_CONSTANT;
    cr_assert_float_eq(optim_lr_at(&oc, 9, 14), 1.0, 1e-12);
}

Test(optim, lr_stays_at_min_lr_on_and_after_the_last_step)
{
    /* a resumed run may go past the steps it planned: the cosine must not
     * come back up */
    optimizer_config oc = {.lr = 1.0, .warmup_steps = 4, .min_lr = 0.1, .schedule = SCHEDULE_COSINE};
    cr_assert_float_eq(optim_lr_at(&oc, 14, 14), 0.1, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 20, 14), 0.1, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 1000, 14), 0.1, 1e-12);
}

/* torch.nn.utils.clip_grad_norm_(max_norm=clip) then torch.optim.AdamW, in
 * double: g is clipped in place; returns the norm before clipping. */
static double ref_step(double *p, double *m, double *v, double *g, const int *decay,
                       const double *lr_scale, size_t n, const optimizer_config *oc, long t)
{
    double sq = 0.0;
    for (size_t i = 0; i < n; i++) sq += g[i] * g[i];
    const double norm = sqrt(sq);
    if (oc->grad_clip > 0) {
        const double c = oc->grad_clip / (norm + 1e-6);
        if (c < 1.0)
            for (size_t i = 0; i < n; i++) g[i] *= c;
    }
    const double bc1 = 1.0 - pow(oc->beta1, (double)t), bc2 = 1.0 - pow(oc->beta2, (double)t);
    for (size_t i = 0; i < n; i++) {
        const double lr = oc->lr * lr_scale[i]; /* timm: the group's lr x its lr_scale */
        p[i] *= 1.0 - lr * (decay[i] ? oc->weight_decay : 0.0);
        m[i] = oc->beta1 * m[i] + (1.0 - oc->beta1) * g[i];
        v[i] = oc->beta2 * v[i] + (1.0 - oc->beta2) * g[i] * g[i];
        p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + oc->eps);
    }
    return norm;
}

/* The lr scale timm's param_groups_layer_decay gives a parameter of a
 * depth-1 ViT (layers: stem 0, blocks.0 and the final norm 1, head 2),
 * written out here by hand. */
static double depth1_lr_scale(const char *name, double decay)
{
    if (decay == 0.0) return 1.0;
    if (strncmp(name, "head.", 5) == 0) return 1.0;
    if (strncmp(name, "blocks.0.", 9) == 0 || strncmp(name, "norm.", 5) == 0) return decay;
    return decay * decay; /* cls_token, pos_embed, patch_embed.* */
}

/* Three AdamW steps of a tiny ViT's flat parameters, gradient norms about
 * 0.7 x scales[s], under gradClip=clip and layerDecay=layer_decay: the
 * weights after each step match the reference within float rounding. */
static void steps_match_the_reference(double clip, const double scales[3], double layer_decay)
{
    model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.image_size = 8;
    mc.patch_size = 4;
    mc.channels = 1;
    mc.dim = 8;
    mc.depth = 1;
    mc.heads = 2;
    mc.mlp_ratio = 2.0;
    mc.num_classes = 3;
    vit_job_config cfg;
    config_defaults(&cfg);
    optimizer_config oc = cfg.training.optimizer;
    oc.lr = 0.01;
    oc.weight_decay = 0.1;
    oc.warmup_steps = 0;
    oc.schedule = SCHEDULE_CONSTANT;
    oc.grad_clip = clip;
    oc.layer_decay = layer_decay;
    model_options mo = {0};
    vit_model *mdl = NULL;
    optim *o = NULL;
    char err[512] = "";
    cr_assert_eq(model_new(&mdl, &mc, 1, &mo, ops_cpu(), err, sizeof err), 0, "%s", err);
    cr_assert_eq(optim_new(&o, mdl, &oc, 3, err, sizeof err), 0, "%s", err);
    const size_t n = model_num_params(mdl);
    double *p = calloc(n, sizeof *p), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v),
           *g = calloc(n, sizeof *g);
    int *decay = calloc(n, sizeof *decay);
    double *lrs = calloc(n, sizeof *lrs);
    cr_assert(p && m && v && g && decay && lrs);
    int groups[2] = {0, 0};
    for (int k = 0; k < model_num_tensors(mdl); k++) {
        const model_tensor *t = model_tensor_at(mdl, k);
        for (size_t j = t->offset; j < t->offset + t->numel; j++) {
            decay[j] = t->decay;
            lrs[j] = depth1_lr_scale(t->name, layer_decay);
        }
        groups[t->decay != 0]++;
        double scale, wd;
        optim_tensor_hparams(o, mdl, k, &scale, &wd);
        cr_assert_float_eq(scale, depth1_lr_scale(t->name, layer_decay), 1e-15, "%s", t->name);
        cr_assert_float_eq(wd, t->decay ? oc.weight_decay : 0.0, 0.0, "%s", t->name);
    }
    cr_assert(groups[0] > 0 && groups[1] > 0, "both weight-decay groups are present");
    float *mp = model_params(mdl), *mg = model_grads(mdl);
    for (size_t i = 0; i < n; i++) p[i] = mp[i] = (float)(1.0 + 0.001 * (double)(i % 7));
    for (int s = 0; s < 3; s++) {
        for (size_t i = 0; i < n; i++)
            g[i] = mg[i] = (float)(scales[s] * sin(0.37 * (double)i + s) / sqrt((double)n));
        const double norm = ref_step(p, m, v, g, decay, lrs, n, &oc, s + 1);
        optim_result r = optim_step(o, mdl, ops_cpu(), s);
        cr_assert_float_eq(r.grad_norm, norm, 1e-5 * norm, "step %d: norm %g, want %g", s,
                           r.grad_norm, norm);
        cr_assert_float_eq(r.lr, 0.01, 1e-12);
        for (size_t i = 0; i < n; i++)
            cr_assert(fabs(mp[i] - p[i]) < 1e-5, "step %d, parameter %zu (decay %d): %.8f, want %.8f",
                      s, i, decay[i], mp[i], p[i]);
    }
    free(p);
    free(m);
    free(v);
    free(g);
    free(decay);
    free(lrs);
    optim_free(o);
    model_free(mdl);
}

Test(optim, adamw_matches_torch_with_bias_correction_and_weight_decay_only_on_the_decay_group)
{
    /* gradClip=0 is off: the gradients are used as they are */
    const double scales[3] = {20.0, 0.05, 5.0};
    steps_match_the_reference(0.0, scales, 0.0);
}

Test(optim, gradients_over_grad_clip_are_scaled_down_to_it_and_smaller_ones_are_left_alone)
{
    /* steps 0 and 2 are clipped to norm 1, step 1 (norm about 0.035) is not */
    const double scales[3] = {20.0, 0.05, 5.0};
    steps_match_the_reference(1.0, scales, 0.0);
}

Test(optim, layer_decay_scales_each_tensors_lr_by_timms_layer_and_keeps_its_weight_decay)
{
    /* stem x0.25, blocks.0 and the final norm x0.5, head x1; clipped and not */
    const double scales[3] = {20.0, 0.05, 5.0};
    steps_match_the_reference(1.0, scales, 0.5);
}

/* fp16-mixed's loss scaling (optim_set_loss_scale): a model whose gradients
 * are the plain ones times 2^16 (exact), unscaled by the step, takes bit for
 * bit the steps of one without scaling, clipped by the unscaled norm; a step
 * with an inf or a NaN among its gradients is skipped (parameters and AdamW
 * state untouched, skipped = 1) and AdamW's count leaves it out, as
 * GradScaler and torch.optim.AdamW do. */
Test(optim, loss_scaled_gradients_are_unscaled_before_clipping_and_an_overflow_skips_the_step)
{
    model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.image_size = 8, mc.patch_size = 4, mc.channels = 1, mc.dim = 8, mc.depth = 1;
    mc.heads = 2, mc.mlp_ratio = 2.0, mc.num_classes = 3;
    vit_job_config cfg;
    config_defaults(&cfg);
    optimizer_config oc = cfg.training.optimizer;
    oc.lr = 0.01, oc.weight_decay = 0.1, oc.warmup_steps = 0;
    oc.schedule = SCHEDULE_CONSTANT, oc.grad_clip = 1.0;
    model_options mo = {0};
    vit_model *a = NULL, *b = NULL;
    optim *oa = NULL, *ob = NULL;
    char err[512] = "";
    cr_assert_eq(model_new(&a, &mc, 1, &mo, ops_cpu(), err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_new(&b, &mc, 1, &mo, ops_cpu(), err, sizeof err), 0, "%s", err);
    cr_assert_eq(optim_new(&oa, a, &oc, 6, err, sizeof err), 0, "%s", err);
    cr_assert_eq(optim_new(&ob, b, &oc, 6, err, sizeof err), 0, "%s", err);
    const size_t n = model_num_params(a);
    for (size_t i = 0; i < n; i++)
        model_params(a)[i] = model_params(b)[i] = (float)(1.0 + 0.001 * (double)(i % 7));
    const float S = 65536.0f;
    const double scales[6] = {20.0, 0.05, 5.0, 3.0, 0.5, 7.0};
    const int overflow[6] = {0, 0, 1, 0, 1, 0}; /* steps 2 and 4: inf, then NaN */
    long skipped = 0, taken = 0;
    float *pb_before = malloc(sizeof(float) * n), *mb_before = malloc(sizeof(float) * n);
    for (int s = 0; s < 6; s++) {
        for (size_t i = 0; i < n; i++) {
            float g = (float)(scales[s] * sin(0.37 * (double)i + s) / sqrt((double)n));
            model_grads(a)[i] = g;
            model_grads(b)[i] = g * S;
        }
        if (overflow[s]) model_grads(b)[n / 2] = s == 2 ? INFINITY : NAN;
        memcpy(pb_before, model_params(b), sizeof(float) * n);
        memcpy(mb_before, optim_m(ob), sizeof(float) * n);
        optim_set_loss_scale(ob, 1.0f / S, skipped);
        optim_result rb = optim_step(ob, b, ops_cpu(), s);
        if (overflow[s]) {
            cr_assert_eq(rb.skipped, 1, "step %d: not skipped", s);
            cr_assert(!isfinite(rb.grad_norm));
            cr_assert(memcmp(pb_before, model_params(b), sizeof(float) * n) == 0,
                      "step %d: a skipped step changed the parameters", s);
            cr_assert(memcmp(mb_before, optim_m(ob), sizeof(float) * n) == 0,
                      "step %d: a skipped step changed AdamW's state", s);
            skipped++;
            continue;
        }
        /* a takes the same step as its taken-th (AdamW's count), the lr constant */
        optim_result ra = optim_step(oa, a, ops_cpu(), taken++);
        cr_assert_eq(rb.skipped, 0);
        cr_assert(ra.grad_norm == rb.grad_norm, "step %d: norm %.17g, unscaled %.17g", s,
                  ra.grad_norm, rb.grad_norm);
        cr_assert(memcmp(model_params(a), model_params(b), sizeof(float) * n) == 0,
                  "step %d: the loss-scaled step differs from the plain one", s);
        cr_assert(memcmp(optim_v(oa), optim_v(ob), sizeof(float) * n) == 0);
    }
    cr_assert_eq(taken, 4);
    free(pb_before);
    free(mb_before);
    optim_free(oa);
    optim_free(ob);
    model_free(a);
    model_free(b);
}

/* The step as optim.c took it before adamw_multi, spelled out: the
 * gradients unscaled in place (ops->scale), clipped in place, then one
 * adamw_update per tensor part of each span, lr (float)(lr x scale). p, g,
 * m, v are the reference's own buffers (the spans' `at` and the state's
 * concatenation); lp its model's bf16 copy. */
static void per_tensor_step(vit_model *ref, const optim *o, const vit_ops *ops,
                            const optimizer_config *oc, const optim_span *sp, int nsp, long step,
                            float inv_scale, double norm, float *p, float *g, float *m, float *v)
{
    const double lr = optim_lr_at(oc, step, 6), coef = oc->grad_clip / (norm + 1e-6);
    size_t state = 0;
    for (int i = 0; i < nsp; i++) {
        const optim_span *s = &sp[i];
        ops->scale(g + s->at, inv_scale, s->hi - s->lo);
        if (coef < 1.0) ops->scale(g + s->at, (float)coef, s->hi - s->lo);
        for (int k = 0; k < model_num_tensors(ref); k++) {
            const model_tensor *t = model_tensor_at(ref, k);
            size_t a = t->offset > s->lo ? t->offset : s->lo;
            size_t b = t->offset + t->numel < s->hi ? t->offset + t->numel : s->hi;
            if (a >= b) continue;
            floatX *lp = model_params_lp(ref, k);
            double scale, wd;
            optim_tensor_hparams(o, ref, k, &scale, &wd);
            ops->adamw_update(p + s->at + (a - s->lo), lp ? lp + (a - t->offset) : NULL,
                              m + state + (a - s->lo), v + state + (a - s->lo),
                              g + s->at + (a - s->lo), b - a, (float)(lr * scale),
                              (float)oc->beta1, (float)oc->beta2, (float)oc->eps, (float)wd,
                              step + 1);
        }
        state += s->hi - s->lo;
    }
}

/* optim_step_in's one adamw_multi call over two spans that cut tensors
 * mid-way, stored in a shard-like buffer (`at` not `lo`), takes bit for bit
 * the steps of the per-tensor sequence above, on cpu (fp32), cpu-bf16 and
 * cpu-fp16 (their bf16/half copy of the matmul weights included): layer
 * decay's lr scales, both weight-decay groups, a warmup lr that changes
 * every step, loss scaling on (2^16), clipped and unclipped steps. The
 * gradient buffer is left as the backward wrote it. */
Test(optim, one_multi_tensor_call_takes_the_per_tensor_steps_bit_for_bit_and_leaves_g_alone)
{
    const vit_ops *tables[3] = {ops_cpu(), ops_cpu_bf16(), ops_cpu_fp16()};
    model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.image_size = 8, mc.patch_size = 4, mc.channels = 1, mc.dim = 8, mc.depth = 2;
    mc.heads = 2, mc.mlp_ratio = 2.0, mc.num_classes = 3;
    vit_job_config cfg;
    config_defaults(&cfg);
    optimizer_config oc = cfg.training.optimizer;
    oc.lr = 0.01, oc.weight_decay = 0.1, oc.warmup_steps = 3, oc.layer_decay = 0.5;
    oc.schedule = SCHEDULE_COSINE, oc.grad_clip = 1.0;
    for (int tb = 0; tb < 3; tb++) {
        const vit_ops *ops = tables[tb];
        vit_model *a = NULL, *b = NULL;
        optim *o = NULL;
        char err[512] = "";
        model_options mo = {0};
        cr_assert_eq(model_new(&a, &mc, 1, &mo, ops, err, sizeof err), 0, "%s", err);
        cr_assert_eq(model_new(&b, &mc, 1, &mo, ops, err, sizeof err), 0, "%s", err);
        const size_t n = model_num_params(a);
        /* [3, 70) at 0 and [101, n - 9) at 67: both start and end inside tensors */
        const optim_span sp[2] = {{3, 70, 0}, {101, n - 9, 67}};
        const size_t len = 67 + (n - 9 - 101);
        cr_assert_eq(optim_new_spans(&o, a, &oc, 6, sp, 2, err, sizeof err), 0, "%s", err);
        cr_assert_eq(optim_num_params(o), len);
        float *pa = calloc(len, 4), *ga = calloc(len, 4), *pb = calloc(len, 4),
              *gb = calloc(len, 4), *mb = calloc(len, 4), *vb = calloc(len, 4),
              *g0 = calloc(len, 4);
        cr_assert(pa && ga && pb && gb && mb && vb && g0);
        for (size_t i = 0; i < len; i++) pa[i] = pb[i] = (float)(1.0 + 0.001 * (double)(i % 7));
        const float S = 65536.0f;
        const double scales[4] = {20.0, 0.05, 5.0, 0.3};
        int clipped = 0;
        for (int s = 0; s < 4; s++) {
            for (size_t i = 0; i < len; i++)
                g0[i] = (float)(scales[s] * sin(0.37 * (double)i + s) / sqrt((double)len)) * S;
            memcpy(ga, g0, len * 4);
            memcpy(gb, g0, len * 4);
            optim_set_loss_scale(o, 1.0f / S, 0);
            const double sq = optim_grad_sq_in(o, ga);
            optim_result r = optim_step_in(o, a, ops, s, sq, pa, ga);
            cr_assert_eq(r.skipped, 0);
            per_tensor_step(b, o, ops, &oc, sp, 2, s, 1.0f / S, r.grad_norm, pb, gb, mb, vb);
            clipped += oc.grad_clip / (r.grad_norm + 1e-6) < 1.0;
            cr_assert(memcmp(ga, g0, len * 4) == 0, "%s step %d: the gradients were rewritten",
                      ops->name, s);
            for (size_t i = 0; i < len; i++) {
                cr_assert(memcmp(&pa[i], &pb[i], 4) == 0, "%s step %d: p[%zu] %.9g, per tensor %.9g",
                          ops->name, s, i, pa[i], pb[i]);
                cr_assert(memcmp(&optim_m(o)[i], &mb[i], 4) == 0,
                          "%s step %d: m[%zu] %.9g, per tensor %.9g", ops->name, s, i,
                          optim_m(o)[i], mb[i]);
                cr_assert(memcmp(&optim_v(o)[i], &vb[i], 4) == 0, "%s step %d: v[%zu]",
                          ops->name, s, i);
            }
            int copies = 0;
            for (int k = 0; k < model_num_tensors(a); k++) {
                const floatX *la = model_params_lp(a, k), *lb = model_params_lp(b, k);
                cr_assert_eq(la == NULL, lb == NULL);
                if (!la) continue;
                copies++;
                cr_assert(memcmp(la, lb, model_tensor_at(a, k)->numel * sizeof(float)) == 0,
                          "%s step %d: the low-precision copy of %s differs", ops->name, s,
                          model_tensor_at(a, k)->name);
            }
            cr_assert(ops->bf16 ? copies > 0 : copies == 0);
        }
        cr_assert_eq(clipped, 2, "steps 0 and 2 are clipped, 1 and 3 are not");
        free(pa), free(ga), free(pb), free(gb), free(mb), free(vb), free(g0);
        optim_free(o);
        model_free(a);
        model_free(b);
    }
}
