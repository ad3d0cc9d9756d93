/* worker/optim.c - see optim.h. */
#include "optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define M_PI_VALUE 3.14159265358979323846

struct optim {
    const vit_ops *ops; /* m and v live in its memory */
    optimizer_config oc;
    long total_steps;
    size_t lo, hi;      /* the slice of the flat vector this state covers */
    size_t n;           /* hi - lo */
    float *m, *v;       /* n each: m[i] belongs to parameter lo + i */
};

double optim_lr_at(const optimizer_config *oc, long step, long total)
{
    if (step < oc->warmup_steps) return oc->lr * (double)(step + 1) / oc->warmup_steps;
    if (oc->schedule == SCHEDULE_COSINE) {
        long span = total - oc->warmup_steps;
        double progress = (double)(step - oc->warmup_steps) / (double)(span > 1 ? span : 1);
        if (progress > 1.0) progress = 1.0;
        return oc->min_lr + 0.5 * (oc->lr - oc->min_lr) * (1.0 + cos(M_PI_VALUE * progress));
    }
    return oc->lr;
}

size_t optim_memory_bytes(size_t n) { return 2 * n * sizeof(float); }

int optim_new(optim **out, const vit_model *m, const optimizer_config *oc, long total_steps,
              char *err, size_t errlen)
{
    return optim_new_slice(out, m, oc, total_steps, 0, model_num_params(m), err, errlen);
}

int optim_new_slice(optim **out, const vit_model *m, const optimizer_config *oc,
                    long total_steps, size_t lo, size_t hi, char *err, size_t errlen)
{
    if (hi > model_num_params(m)) hi = model_num_params(m); /* the padding has no state */
    if (lo > hi) lo = hi;
    optim *o = calloc(1, sizeof *o);
    if (o) {
        o->ops = model_ops(m);
        o->oc = *oc;
        o->total_steps = total_steps;
        o->lo = lo;
        o->hi = hi;
        o->n = hi - lo;
        o->m = o->ops->alloc(o->n * sizeof(float));
        o->v = o->ops->alloc(o->n * sizeof(float));
    }
    if (!o || !o->m || !o->v) {
        snprintf(err, errlen, "optimizer: AdamW state of %zu parameters needs %zu bytes of %s "
                 "memory and the backend could not allocate them", hi - lo,
                 optim_memory_bytes(hi - lo), model_ops(m)->gpu ? "GPU" : "host");
        optim_free(o);
        return VJ_ERR_TOO_LARGE;
    }
    *out = o;
    return 0;
}

void optim_free(optim *o)
{
    if (!o) return;
    if (o->ops) {
        o->ops->release(o->m);
        o->ops->release(o->v);
    }
    free(o);
}

float *optim_m(optim *o) { return o->m; }
float *optim_v(optim *o) { return o->v; }

double optim_grad_sq(const optim *o, vit_model *m)
{
    return o->n ? o->ops->sum_squares(model_grads(m) + o->lo, o->n) : 0.0;
}

optim_result optim_step(optim *o, vit_model *m, const vit_ops *ops, long step)
{
    return optim_step_norm(o, m, ops, step, sqrt(optim_grad_sq(o, m)));
}

optim_result optim_step_norm(optim *o, vit_model *m, const vit_ops *ops, long step,
                             double grad_norm)
{
    optim_result r;
    float *g = model_grads(m), *p = model_params(m);
    r.grad_norm = grad_norm;
    if (o->oc.grad_clip > 0 && o->n) {
        double coef = o->oc.grad_clip / (r.grad_norm + 1e-6);
        if (coef < 1.0) ops->scale(g + o->lo, (float)coef, o->n);
    }
    r.lr = optim_lr_at(&o->oc, step, o->total_steps);
    for (int i = 0; i < model_num_tensors(m); i++) {
        const model_tensor *t = model_tensor_at(m, i);
        /* the part of tensor t inside [lo, hi) */
        size_t a = t->offset > o->lo ? t->offset : o->lo;
        size_t b = t->offset + t->numel < o->hi ? t->offset + t->numel : o->hi;
        if (a >= b) continue;
        floatX *lp = model_params_lp(m, i);
        /* the bf16 copy of the matmul weights is written in the same pass */
        ops->adamw_update(p + a, lp ? lp + (a - t->offset) : NULL, o->m + (a - o->lo),
                          o->v + (a - o->lo), g + a, b - a, (float)r.lr, (float)o->oc.beta1,
                          (float)o->oc.beta2, (float)o->oc.eps,
                          t->decay ? (float)o->oc.weight_decay : 0.0f, step + 1);
    }
    return r;
}
