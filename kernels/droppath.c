/* kernels/droppath.c - CPU reference: drop path (stochastic depth) on a
 * residual branch, per sample.
 * Owns: the residual add with each sample's branch scaled (timm's
 * DropPath: x + branch * mask / keep_prob, the factor given per sample),
 * and its backward to the branch. Must not: draw masks or know rates (the
 * caller's, worker/train/droppath.c), or touch the residual's own gradient
 * (the residual add passes it through unchanged). */
#include "ops.h"

// res (B,n), branch (B,n), scale (B) -> out (B,n) = res + scale[b] * branch
void droppath_forward_cpu(float *out, const float *res, const float *branch, const float *scale,
                          int B, size_t n)
{
    for (int b = 0; b < B; b++) {
        const float s = scale[b];
        const size_t o = (size_t)b * n;
        for (size_t i = 0; i < n; i++) {
            const float t = s * branch[o + i]; /* rounded, then added: as torch */
            out[o + i] = res[o + i] + t;
        }
    }
}

// dout (B,n), scale (B) -> dbranch (B,n) = scale[b] * dout, overwritten
void droppath_backward_cpu(float *dbranch, const float *dout, const float *scale, int B,
                           size_t n)
{
    for (int b = 0; b < B; b++) {
        const float s = scale[b];
        const size_t o = (size_t)b * n;
        for (size_t i = 0; i < n; i++) dbranch[o + i] = s * dout[o + i];
    }
}
