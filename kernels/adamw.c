/* kernels/adamw.c - CPU reference: AdamW on fp32 master weights and state.
 * Owns: the update formula, identical to torch.optim.AdamW (decoupled weight
 * decay applied before the Adam step, bias corrections), for one tensor
 * (adamw_update) and for a table of pieces in one pass (adamw_multi: each
 * piece's lr from the scheduled lr and its scale, the gradient read times
 * the loss scale's unscale and the clipping coefficient, never written).
 * Must not: decide which tensors decay or the learning rate (the trainer
 * calls it per tensor with wd = 0 for biases, norms, pos_embed, cls_token,
 * or builds the table of pieces). */
#include "ops.h"

#include <math.h>
#include <omp.h>

/* The per-tensor constants of one step: float, as torch's fp32 AdamW. */
typedef struct {
    float step_size; /* (float)(lr / (1 - beta1^t)), the quotient in double */
    float bc2_sqrt;  /* (float)sqrt(1 - beta2^t) */
    float decay;     /* 1 - lr * wd, in float: two roundings */
} adamw_consts;

static adamw_consts consts_of(float lr, float weight_decay, double bc1, float bc2_sqrt)
{
    return (adamw_consts){(float)(lr / bc1), bc2_sqrt, 1.0f - lr * weight_decay};
}

/* One element: m, v and p updated in place from the gradient gi; returns the new p. */
static inline float adamw_one(float *p, float *m, float *v, float gi, float beta1, float beta2,
                              float eps, adamw_consts c)
{
    float mi = beta1 * *m + (1.0f - beta1) * gi;
    float vi = beta2 * *v + (1.0f - beta2) * gi * gi;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / c.bc2_sqrt + eps;
    return *p = *p * c.decay - c.step_size * mi / denom;
}

float adamw_clip_factor(double norm_sq, float unscale, double grad_clip)
{
    if (!(grad_clip > 0)) return 1.0f;
    const double norm = sqrt(norm_sq) * (double)unscale;
    const double sum = norm + 1e-6; /* separate statements: no contraction */
    const double coef = grad_clip / sum;
    return coef < 1.0 ? (float)coef : 1.0f;
}

// p, m, v, g (n): one step, t 1-based; p_lp (n, may be NULL) = the new p
void adamw_update_cpu(float *p, float *p_lp, float *m, float *v, const float *g, size_t n,
                      float lr, float beta1, float beta2, float eps, float weight_decay, long t)
{
    const double bc1 = 1.0 - pow(beta1, (double)t);
    const adamw_consts c =
        consts_of(lr, weight_decay, bc1, (float)sqrt(1.0 - pow(beta2, (double)t)));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float pi = adamw_one(&p[i], &m[i], &v[i], g[i], beta1, beta2, eps, c);
        if (p_lp) p_lp[i] = pi;
    }
}

/* Every piece is split evenly over the threads of one parallel region (no
 * fork per tensor); each thread updates its part of a piece and rounds that
 * part of p_lp while it is in cache. Elementwise: any split gives the same
 * bits. */
void adamw_multi_cpu(float *p, float *m, float *v, const float *g, const adamw_piece *pieces,
                     int np, size_t total, double lr, float unscale, float clip, float beta1,
                     float beta2, float eps, long t, ops_round_fn rnd)
{
    const double bc1 = 1.0 - pow(beta1, (double)t);
    const float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)t));
#pragma omp parallel if (total > 65536)
    {
        const size_t nth = (size_t)omp_get_num_threads(), me = (size_t)omp_get_thread_num();
        for (int k = 0; k < np; k++) {
            const adamw_piece *pc = &pieces[k];
            const size_t lo = pc->n * me / nth, hi = pc->n * (me + 1) / nth;
            if (lo >= hi) continue;
            const adamw_consts c =
                consts_of((float)(lr * pc->lr_scale), pc->weight_decay, bc1, bc2_sqrt);
            float *pp = p + pc->at, *pm = m + pc->state, *pv = v + pc->state;
            const float *pg = g + pc->at;
            for (size_t i = lo; i < hi; i++) {
                const float gi = (pg[i] * unscale) * clip; /* two roundings, as two passes */
                const float pi = adamw_one(&pp[i], &pm[i], &pv[i], gi, beta1, beta2, eps, c);
                if (pc->p_lp) pc->p_lp[i] = pi;
            }
            if (pc->p_lp && rnd) rnd(pc->p_lp + lo, pc->p_lp + lo, hi - lo);
        }
    }
}
