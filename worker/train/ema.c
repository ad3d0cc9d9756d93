/* worker/train/ema.c - see ema.h. */
#include "ema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "exitcode.h"

#define EMA_WARMUP_GAMMA 1.0
#define EMA_WARMUP_POWER (2.0 / 3.0)

struct ema {
    const optim *opt; /* the spans */
    const vit_ops *ops;
    ema_config ec;
    float *values;    /* optim_num_params(opt), span after span */
};

int ema_enabled(const ema_config *ec) { return ec && ec->decay > 0.0; }

double ema_decay_at(const ema_config *ec, long n)
{
    if (!ec->warmup) return ec->decay;
    const double s = n > 1 ? (double)(n - 1) : 0.0; /* timm: max(0, step - 1) */
    if (s <= 0.0) return 0.0;
    double d = 1.0 - pow(1.0 + s / EMA_WARMUP_GAMMA, -EMA_WARMUP_POWER);
    if (d > ec->decay) d = ec->decay;
    return d < 0.0 ? 0.0 : d;
}

size_t ema_memory_bytes(size_t n) { return n * sizeof(float); }

int ema_new(ema **out, const optim *o, const vit_ops *ops, const ema_config *ec, char *err,
            size_t errlen)
{
    const size_t n = optim_num_params(o);
    ema *e = calloc(1, sizeof *e);
    if (e) {
        e->opt = o;
        e->ops = ops;
        e->ec = *ec;
        e->values = ops->alloc(ema_memory_bytes(n));
    }
    if (!e || !e->values) {
        snprintf(err, errlen, "training.ema: the EMA of %zu parameters needs %zu bytes of %s "
                 "memory and the backend could not allocate them", n, ema_memory_bytes(n),
                 ops->gpu ? "GPU" : "host");
        ema_free(e);
        return VJ_ERR_TOO_LARGE;
    }
    *out = e;
    return 0;
}

void ema_free(ema *e)
{
    if (!e) return;
    if (e->values) e->ops->release(e->values);
    free(e);
}

float *ema_values(ema *e) { return e->values; }

void ema_reset(ema *e, const float *p)
{
    for (int i = 0; i < optim_num_spans(e->opt); i++) {
        size_t so;
        optim_span sp = optim_span_at(e->opt, i, &so);
        if (sp.hi > sp.lo) e->ops->copy(e->values + so, p + sp.at, sp.hi - sp.lo);
    }
}

void ema_update(ema *e, const float *p, long step)
{
    /* the lerp weight 1 - decay in double, then fp32 (as torch takes a
     * Python float for an fp32 tensor) */
    const float w = (float)(1.0 - ema_decay_at(&e->ec, step + 1));
    for (int i = 0; i < optim_num_spans(e->opt); i++) {
        size_t so;
        optim_span sp = optim_span_at(e->opt, i, &so);
        if (sp.hi > sp.lo) e->ops->ema_update(e->values + so, p + sp.at, sp.hi - sp.lo, w);
    }
}

void ema_swap(ema *e, float *p)
{
    for (int i = 0; i < optim_num_spans(e->opt); i++) {
        size_t so;
        optim_span sp = optim_span_at(e->opt, i, &so);
        if (sp.hi > sp.lo) e->ops->swap(e->values + so, p + sp.at, sp.hi - sp.lo);
    }
}
