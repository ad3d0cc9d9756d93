/* kernels/adamw.c - CPU reference: AdamW on fp32 master weights and state.
 * Owns: the update formula, identical to torch.optim.AdamW (decoupled weight
 * decay applied before the Adam step, bias corrections).
 * Must not: decide which tensors decay or the learning rate (the trainer
 * calls it per tensor with wd = 0 for biases, norms, pos_embed, cls_token). */
#include "ops.h"

#include <math.h>

// p, m, v, g (n): one step, t 1-based; p_lp (n, may be NULL) = the new p
void adamw_update_cpu(float *p, float *p_lp, float *m, float *v, const float *g, size_t n,
                      float lr, float beta1, float beta2, float eps, float weight_decay, long t)
{
    const double bc1 = 1.0 - pow(beta1, (double)t);
    const double bc2 = 1.0 - pow(beta2, (double)t);
    const float step_size = (float)(lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay - step_size * mi / denom;
        if (p_lp) p_lp[i] = p[i];
    }
}
