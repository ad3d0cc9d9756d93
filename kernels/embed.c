/* kernels/embed.c - CPU reference: class token, position embedding, and the
 * class-token pooling at the end of the network.
 * Owns: token 0 = class token; tokens 1..N = patches (timm's order).
 * Must not: touch the patch projection (matmul) or the head. */
#include "ops.h"

#include <string.h>

// patch_out (B,T-1,D), cls (D), pos (T,D) -> x (B,T,D)
void embed_forward_cpu(float *x, const float *patch_out, const float *cls, const float *pos,
                       int B, int T, int D)
{
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        float *xb = x + (size_t)b * T * D;
        for (int i = 0; i < D; i++) xb[i] = cls[i] + pos[i];
        const float *pb = patch_out + (size_t)b * (T - 1) * D;
        for (int t = 1; t < T; t++) {
            const float *src = pb + (size_t)(t - 1) * D, *p = pos + (size_t)t * D;
            float *dst = xb + (size_t)t * D;
            for (int i = 0; i < D; i++) dst[i] = src[i] + p[i];
        }
    }
}

// dx (B,T,D) -> dpatch_out (B,T-1,D) overwritten, dcls (D) +=, dpos (T,D) +=
void embed_backward_cpu(float *dpatch_out, float *dcls, float *dpos, const float *dx,
                        int B, int T, int D)
{
    for (int b = 0; b < B; b++) {
        const float *db = dx + (size_t)b * T * D;
        memcpy(dpatch_out + (size_t)b * (T - 1) * D, db + D, sizeof(float) * (size_t)(T - 1) * D);
        for (int i = 0; i < D; i++) dcls[i] += db[i];
        for (size_t j = 0; j < (size_t)T * D; j++) dpos[j] += db[j];
    }
}

// x (B,T,D) -> out (B,D) = x[:,0,:]
void gather_cls_cpu(float *out, const float *x, int B, int T, int D)
{
    for (int b = 0; b < B; b++)
        memcpy(out + (size_t)b * D, x + (size_t)b * T * D, sizeof(float) * D);
}

// dcls (B,D) -> dx[:,0,:] +=
void scatter_cls_backward_cpu(float *dx, const float *dcls, int B, int T, int D)
{
    for (int b = 0; b < B; b++) {
        float *dst = dx + (size_t)b * T * D;
        const float *src = dcls + (size_t)b * D;
        for (int i = 0; i < D; i++) dst[i] += src[i];
    }
}
