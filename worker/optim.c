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
    size_t n;
    float *m, *v;
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
    optim *o = calloc(1, sizeof *o);
    if (o) {
        o->ops = model_ops(m);
        o->oc = *oc;
        o->total_steps = total_steps;
        o->n = model_num_params(m);
        o->m = o->ops->alloc(o->n * sizeof(float));
        o->v = o->ops->alloc(o->n * sizeof(float));
    }
    if (!o || !o->m || !o->v) {
        snprintf(err, errlen, "optimizer: AdamW state of %zu parameters needs %zu bytes of %s "
                 "memory and the backend could not allocate them", model_num_params(m),
                 optim_memory_bytes(model_num_params(m)), model_ops(m)->gpu ? "GPU" : "host");
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

optim_result optim_step(optim *o, vit_model *m, const vit_ops *ops, long step)
{
    optim_result r;
    float *g = model_grads(m), *p = model_params(m);
    r.grad_norm = sqrt(ops->sum_squares(g, o->n));
    if (o->oc.grad_clip > 0) {
        double coef = o->oc.grad_clip / (r.grad_norm + 1e-6);
        if (coef < 1.0) ops->scale(g, (float)coef, o->n);
    }
    r.lr = optim_lr_at(&o->oc, step, o->total_steps);
    for (int i = 0; i < model_num_tensors(m); i++) {
        const model_tensor *t = model_tensor_at(m, i);
        /* the bf16 copy of the matmul weights is written in the same pass */
        ops->adamw_update(p + t->offset, model_params_lp(m, i), o->m + t->offset,
                          o->v + t->offset, g + t->offset, t->numel, (float)r.lr,
                          (float)o->oc.beta1, (float)o->oc.beta2, (float)o->oc.eps,
                          t->decay ? (float)o->oc.weight_decay : 0.0f, step + 1);
    }
    return r;
}
