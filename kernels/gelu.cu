/* kernels/gelu.cu - CUDA: exact (erf) GELU and its derivative.
 * Owns: the GPU versions of kernels/gelu.c: gelu(x) = x Phi(x),
 * Phi(x) = 0.5 (1 + erf(x / sqrt 2)) with erff, gelu'(x) = Phi(x) + x phi(x),
 * phi(x) = exp(-x^2/2) / sqrt(2 pi); fp32 math on X storage.
 * Must not: use the tanh form; assume dinp and dout are distinct (the backward
 * runs in place).
 */
#include "cuda_common.cuh"

#define GELU_INV_SQRT2 0.70710678118654752440f
#define GELU_INV_SQRT_2PI 0.39894228040143267794f

template <typename X>
static __global__ void gelu_forward_kernel(X *out, const X *inp, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float x = ldx(inp[i]);
        const float cdf = 0.5f * (1.0f + erff(x * GELU_INV_SQRT2));
        out[i] = stx<X>(x * cdf);
    }
}

// dinp may be dout: each element is read, then written, by one thread
template <typename X>
static __global__ void gelu_backward_kernel(X *dinp, const X *inp, const X *dout, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float x = ldx(inp[i]);
        const float cdf = 0.5f * (1.0f + erff(x * GELU_INV_SQRT2));
        const float pdf = GELU_INV_SQRT_2PI * expf(-0.5f * x * x);
        const float dy = ldx(dout[i]);
        dinp[i] = stx<X>(dy * (cdf + x * pdf));
    }
}

template <typename X> void gelu_forward_cuda(floatX *out, const floatX *inp, size_t n)
{
    CU_GUARD();
    if (n == 0) return;
    const unsigned threads = 256;
    gelu_forward_kernel<X><<<cuda_blocks(n, threads), threads, 0, g_cuda.stream>>>(
        (X *)out, (const X *)inp, n);
    CU_LAUNCHED();
}

template <typename X>
void gelu_backward_cuda(floatX *dinp, const floatX *inp, const floatX *dout, size_t n)
{
    CU_GUARD();
    if (n == 0) return;
    const unsigned threads = 256;
    gelu_backward_kernel<X><<<cuda_blocks(n, threads), threads, 0, g_cuda.stream>>>(
        (X *)dinp, (const X *)inp, (const X *)dout, n);
    CU_LAUNCHED();
}

template void gelu_forward_cuda<float>(floatX *, const floatX *, size_t);
template void gelu_forward_cuda<bf16>(floatX *, const floatX *, size_t);
template void gelu_forward_cuda<f16>(floatX *, const floatX *, size_t);
template void gelu_backward_cuda<float>(floatX *, const floatX *, const floatX *, size_t);
template void gelu_backward_cuda<bf16>(floatX *, const floatX *, const floatX *, size_t);
template void gelu_backward_cuda<f16>(floatX *, const floatX *, const floatX *, size_t);
