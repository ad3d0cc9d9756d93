/* kernels/patch_embed.cu - CUDA: images to patch rows (im2col, no overlap).
 * Owns: the GPU version of patchify_cpu (kernels/patch_embed.c): the same
 * patch order (n = py*(S/P)+px) and column order (c*P*P + ky*P + kx, Conv2d
 * weight order), stored as X.
 * Must not: do the projection itself (a plain matmul, kernels/matmul.cu).
 */
#include "cuda_common.cuh"

// img (B,C,S,S) fp32 -> patches (B*N, C*P*P) as X; one thread per output element
template <typename X>
static __global__ void patchify_kernel(X *patches, const float *img, size_t total, int C, int S,
                                       int P)
{
    const int G = S / P, N = G * G, PP = P * P, CPP = C * PP;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / (size_t)CPP; /* b*N + n */
        const int col = (int)(i % (size_t)CPP);
        const size_t b = row / (size_t)N;
        const int n = (int)(row % (size_t)N);
        const int py = n / G, px = n % G;
        const int c = col / PP, r = col % PP;
        const int ky = r / P, kx = r % P;
        const float v =
            img[((b * C + c) * S + (size_t)(py * P + ky)) * S + (size_t)(px * P + kx)];
        patches[i] = stx<X>(v);
    }
}

template <typename X>
void patchify_cuda(floatX *patches, const float *img, int B, int C, int S, int P)
{
    CU_GUARD();
    if (B <= 0 || C <= 0 || P <= 0 || S < P) return;
    const int G = S / P;
    const size_t total = (size_t)B * G * G * C * P * P;
    const unsigned threads = 256;
    patchify_kernel<X><<<cuda_blocks(total, threads), threads, 0, g_cuda.stream>>>(
        (X *)patches, img, total, C, S, P);
    CU_LAUNCHED();
}

template void patchify_cuda<float>(floatX *, const float *, int, int, int, int);
template void patchify_cuda<bf16>(floatX *, const float *, int, int, int, int);
template void patchify_cuda<f16>(floatX *, const float *, int, int, int, int);
