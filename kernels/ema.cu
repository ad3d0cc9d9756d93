/* kernels/ema.cu - CUDA: the exponential moving average of the weights and
 * the exchange of two fp32 vectors.
 * Owns: the GPU version of kernels/ema.c with the same precision choices:
 * torch's lerp (w < 0.5: ema + w (p - ema); else p - (p - ema)(1 - w), 1 - w
 * in float on the host), every operation rounded on its own (__f*_rn: no
 * fused multiply-adds), so that the result matches the CPU's bits; and swap.
 * Must not: decide the decay or its warmup (worker/train/ema.c).
 */
#include "cuda_common.cuh"

static __global__ void ema_lerp_kernel(float *ema, const float *p, size_t n, float w,
                                       float one_minus_w, int small)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float e = ema[i], x = p[i];
        ema[i] = small ? __fadd_rn(e, __fmul_rn(w, __fsub_rn(x, e)))
                       : __fsub_rn(x, __fmul_rn(__fsub_rn(x, e), one_minus_w));
    }
}

static __global__ void swap_kernel(float *a, float *b, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

void ema_update_cuda(float *ema, const float *p, size_t n, float w)
{
    CU_GUARD();
    if (n == 0) return;
    const unsigned threads = 256;
    const float one_minus_w = 1.0f - w; /* float, as the CPU */
    ema_lerp_kernel<<<cuda_blocks(n, threads), threads, 0, g_cuda.stream>>>(
        ema, p, n, w, one_minus_w, w < 0.5f);
    CU_LAUNCHED();
}

void swap_cuda(float *a, float *b, size_t n)
{
    CU_GUARD();
    if (n == 0) return;
    const unsigned threads = 256;
    swap_kernel<<<cuda_blocks(n, threads), threads, 0, g_cuda.stream>>>(a, b, n);
    CU_LAUNCHED();
}
