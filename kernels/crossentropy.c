/* kernels/crossentropy.c - CPU reference: softmax cross-entropy on logits.
 * Owns: numerically stable log-softmax (max subtracted) and the fused
 * gradient (probs - onehot) * dloss. Must not: average over the batch; the
 * caller chooses the scale (1 / global batch) through dloss. */
#include "ops.h"

#include <math.h>

// logits (B,K), targets (B) -> losses (B), probs (B,K)
void crossentropy_forward_cpu(float *losses, float *probs, const float *logits,
                              const int *targets, int B, int K)
{
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * K;
        float *p = probs + (size_t)b * K;
        float maxv = z[0];
        for (int k = 1; k < K; k++) maxv = z[k] > maxv ? z[k] : maxv;
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            p[k] = expf(z[k] - maxv);
            sum += p[k];
        }
        float inv = (float)(1.0 / sum);
        for (int k = 0; k < K; k++) p[k] *= inv;
        losses[b] = (float)(log(sum) - (double)(z[targets[b]] - maxv));
    }
}

// probs (B,K), targets (B) -> dlogits (B,K), overwritten
void crossentropy_backward_cpu(float *dlogits, const float *probs, const int *targets,
                               float dloss, int B, int K)
{
    for (int b = 0; b < B; b++) {
        const float *p = probs + (size_t)b * K;
        float *d = dlogits + (size_t)b * K;
        for (int k = 0; k < K; k++) d[k] = (p[k] - (k == targets[b] ? 1.0f : 0.0f)) * dloss;
    }
}
