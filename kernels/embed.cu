/* kernels/embed.cu - CUDA: class token, position embedding, class-token
 * pooling, and their backwards.
 * Owns: the GPU versions of kernels/embed.c: token 0 = class token, tokens
 * 1..T-1 = patches; dcls and dpos accumulated over the batch in batch order
 * (one thread per (t,d) looping b), so the sums are deterministic and the
 * same bits as the CPU's.
 * Must not: touch the patch projection (matmul) or the head; use atomics.
 */
#include "cuda_common.cuh"

// patch_out (B,T-1,D) X, cls (D), pos (T,D) -> x (B,T,D); one thread per element of x
template <typename X>
static __global__ void embed_forward_kernel(float *x, const X *patch_out, const float *cls,
                                            const float *pos, size_t total, int T, int D)
{
    const size_t TD = (size_t)T * D;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / TD, j = i % TD; /* j = t*D + d */
        const int t = (int)(j / (size_t)D), d = (int)(j % (size_t)D);
        float v;
        if (t == 0)
            v = cls[d] + pos[d];
        else
            v = ldx(patch_out[b * (TD - D) + (j - D)]) + pos[j];
        x[i] = v;
    }
}

// dx (B,T,D) -> dpatch_out (B,T-1,D) = dx[:,1:,:] as X, dcls (D) +=, dpos (T,D) +=;
// one thread per (t,d), b in order (the CPU's order: bitwise the same sums)
template <typename X>
static __global__ void embed_backward_kernel(X *dpatch_out, float *dcls, float *dpos,
                                             const float *dx, int B, int T, int D)
{
    const size_t TD = (size_t)T * D;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < TD;
         j += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(j / (size_t)D), d = (int)(j % (size_t)D);
        float acc_pos = dpos[j];
        float acc_cls = t == 0 ? dcls[d] : 0.0f;
        for (int b = 0; b < B; b++) {
            const float v = dx[(size_t)b * TD + j];
            acc_pos += v;
            if (t == 0)
                acc_cls += v;
            else
                dpatch_out[(size_t)b * (TD - D) + (j - D)] = stx<X>(v);
        }
        dpos[j] = acc_pos;
        if (t == 0) dcls[d] = acc_cls;
    }
}

// x (B,T,D) -> out (B,D) = x[:,0,:]
static __global__ void gather_cls_kernel(float *out, const float *x, size_t total, int T, int D)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / (size_t)D, d = i % (size_t)D;
        out[i] = x[b * T * D + d];
    }
}

// dcls (B,D) -> dx[:,0,:] +=
static __global__ void scatter_cls_backward_kernel(float *dx, const float *dcls, size_t total,
                                                   int T, int D)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / (size_t)D, d = i % (size_t)D;
        dx[b * T * D + d] += dcls[i];
    }
}

template <typename X>
void embed_forward_cuda(float *x, const floatX *patch_out, const float *cls, const float *pos,
                        int B, int T, int D)
{
    CU_GUARD();
    if (B <= 0 || T <= 0 || D <= 0) return;
    const size_t total = (size_t)B * T * D;
    const unsigned threads = 256;
    embed_forward_kernel<X><<<cuda_blocks(total, threads), threads, 0, g_cuda.stream>>>(
        x, (const X *)patch_out, cls, pos, total, T, D);
    CU_LAUNCHED();
}

template <typename X>
void embed_backward_cuda(floatX *dpatch_out, float *dcls, float *dpos, const float *dx, int B,
                         int T, int D)
{
    CU_GUARD();
    if (B <= 0 || T <= 0 || D <= 0) return;
    const size_t td = (size_t)T * D;
    const unsigned threads = 256;
    embed_backward_kernel<X><<<cuda_blocks(td, threads), threads, 0, g_cuda.stream>>>(
        (X *)dpatch_out, dcls, dpos, dx, B, T, D);
    CU_LAUNCHED();
}

void gather_cls_cuda(float *out, const float *x, int B, int T, int D)
{
    CU_GUARD();
    if (B <= 0 || T <= 0 || D <= 0) return;
    const size_t total = (size_t)B * D;
    const unsigned threads = 256;
    gather_cls_kernel<<<cuda_blocks(total, threads), threads, 0, g_cuda.stream>>>(out, x, total,
                                                                                  T, D);
    CU_LAUNCHED();
}

void scatter_cls_backward_cuda(float *dx, const float *dcls, int B, int T, int D)
{
    CU_GUARD();
    if (B <= 0 || T <= 0 || D <= 0) return;
    const size_t total = (size_t)B * D;
    const unsigned threads = 256;
    scatter_cls_backward_kernel<<<cuda_blocks(total, threads), threads, 0, g_cuda.stream>>>(
        dx, dcls, total, T, D);
    CU_LAUNCHED();
}

template void embed_forward_cuda<float>(float *, const floatX *, const float *, const float *,
                                        int, int, int);
template void embed_forward_cuda<bf16>(float *, const floatX *, const float *, const float *,
                                       int, int, int);
template void embed_forward_cuda<f16>(float *, const floatX *, const float *, const float *,
                                      int, int, int);
template void embed_backward_cuda<float>(floatX *, float *, float *, const float *, int, int,
                                         int);
template void embed_backward_cuda<bf16>(floatX *, float *, float *, const float *, int, int,
                                        int);
template void embed_backward_cuda<f16>(floatX *, float *, float *, const float *, int, int,
                                       int);
