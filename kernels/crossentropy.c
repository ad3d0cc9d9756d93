/* kernels/crossentropy.c - CPU reference: softmax cross-entropy on logits.
 * Owns: numerically stable log-softmax (max subtracted) and the fused
 * gradient (probs - onehot) * dloss; the same against soft targets (a
 * distribution per sample: mixup, cutmix, label smoothing), loss
 * -sum_k t_k log p_k and gradient (probs - t) * dloss. Must not: average
 * over the batch; the caller chooses the scale (1 / global batch) through
 * dloss. */
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

/* The softmax of one row into p (max subtracted, the sum in double);
 * returns the sum of exponentials and sets *maxv. */
static double softmax_row(float *p, const float *z, int K, float *maxv)
{
    float mx = z[0];
    for (int k = 1; k < K; k++) mx = z[k] > mx ? z[k] : mx;
    double sum = 0.0;
    for (int k = 0; k < K; k++) {
        p[k] = expf(z[k] - mx);
        sum += p[k];
    }
    float inv = (float)(1.0 / sum);
    for (int k = 0; k < K; k++) p[k] *= inv;
    *maxv = mx;
    return sum;
}

// logits (B,K), targets (B,K) -> losses (B) = -sum_k t log softmax, probs (B,K)
void crossentropy_soft_forward_cpu(float *losses, float *probs, const float *logits,
                                   const float *targets, int B, int K)
{
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * K, *t = targets + (size_t)b * K;
        float mx;
        const double lse = log(softmax_row(probs + (size_t)b * K, z, K, &mx));
        /* -sum t_k (z_k - max - lse) = lse * sum t_k - sum t_k (z_k - max) */
        double tsum = 0.0, tz = 0.0;
        for (int k = 0; k < K; k++) {
            tsum += (double)t[k];
            tz += (double)t[k] * (double)(z[k] - mx);
        }
        losses[b] = (float)(lse * tsum - tz);
    }
}

// probs (B,K), targets (B,K) -> dlogits (B,K) = (probs - targets) * dloss, overwritten
void crossentropy_soft_backward_cpu(float *dlogits, const float *probs, const float *targets,
                                    float dloss, int B, int K)
{
    const size_t n = (size_t)B * K;
    for (size_t i = 0; i < n; i++) dlogits[i] = (probs[i] - targets[i]) * dloss;
}
