/* kernels/patch_embed.c - CPU reference: images to patch rows.
 * Owns: the patch order and the column order of the patch embedding (they
 * match timm's Conv2d(C, D, P, stride=P) + flatten(2).transpose(1, 2)).
 * Must not: do the projection itself; that is a plain matmul
 * (matmul_forward with the conv weight viewed as (D, C*P*P)). */
#include "ops.h"

// img (B,C,S,S) -> patches (B*N, C*P*P), N = (S/P)^2
void patchify_cpu(float *patches, const float *img, int B, int C, int S, int P)
{
    const int G = S / P, N = G * G, CPP = C * P * P;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int n = 0; n < N; n++) {
            const int py = n / G, px = n % G;
            float *row = patches + ((size_t)b * N + n) * CPP;
            for (int c = 0; c < C; c++) {
                const float *plane = img + ((size_t)b * C + c) * S * S;
                for (int ky = 0; ky < P; ky++) {
                    const float *src = plane + (size_t)(py * P + ky) * S + px * P;
                    float *dst = row + (c * P + ky) * P;
                    for (int kx = 0; kx < P; kx++) dst[kx] = src[kx];
                }
            }
        }
    }
}
