/* kernels/bf16.cu - CUDA: zeroing, fp32 copies and the fp32 <-> floatX
 * conversions.
 * Owns: zero_cuda, copy_cuda (device to device, on the compute stream), to_floatx_cuda (fp32 -> X, rounded to nearest even by
 * __float2bfloat16_rn, as round_bf16_cpu in kernels/bf16.c, or for X = f16
 * by __float2half_rn, as round_fp16_cpu in kernels/fp16.c: NaN stays NaN,
 * overflow goes to infinity), to_float_cuda (X -> fp32, exact). For X = float
 * both are device-to-device copies.
 * Must not: decide where bf16 or half is stored (the op table's floatX
 * arguments do, ops.h; the cuda-bf16 and cuda-fp16 tables in ops_cuda.cu
 * apply it).
 */
#include "cuda_common.cuh"

template <typename X> static __global__ void to_floatx_kernel(X *out, const float *in, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = stx<X>(in[i]);
}

template <typename X> static __global__ void to_float_kernel(float *out, const X *in, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = ldx(in[i]);
}

void zero_cuda(float *x, size_t n)
{
    CU_GUARD();
    if (n == 0) return;
    CU_TRY(cudaMemsetAsync(x, 0, sizeof(float) * n, g_cuda.stream));
}

void copy_cuda(float *dst, const float *src, size_t n)
{
    CU_GUARD();
    if (n == 0 || dst == src) return;
    CU_TRY(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, g_cuda.stream));
}

template <typename X> void to_floatx_cuda(floatX *out, const float *in, size_t n)
{
    CU_GUARD();
    if (n == 0) return;
    if (sizeof(X) == sizeof(float)) { /* X = float: a plain copy */
        if ((const void *)out != (const void *)in)
            CU_TRY(cudaMemcpyAsync(out, in, sizeof(float) * n, cudaMemcpyDeviceToDevice,
                                   g_cuda.stream));
        return;
    }
    const unsigned threads = 256;
    to_floatx_kernel<X><<<cuda_blocks(n, threads), threads, 0, g_cuda.stream>>>((X *)out, in, n);
    CU_LAUNCHED();
}

template <typename X> void to_float_cuda(float *out, const floatX *in, size_t n)
{
    CU_GUARD();
    if (n == 0) return;
    if (sizeof(X) == sizeof(float)) {
        if ((const void *)out != (const void *)in)
            CU_TRY(cudaMemcpyAsync(out, in, sizeof(float) * n, cudaMemcpyDeviceToDevice,
                                   g_cuda.stream));
        return;
    }
    const unsigned threads = 256;
    to_float_kernel<X><<<cuda_blocks(n, threads), threads, 0, g_cuda.stream>>>(out, (const X *)in,
                                                                              n);
    CU_LAUNCHED();
}

template void to_floatx_cuda<float>(floatX *, const float *, size_t);
template void to_floatx_cuda<bf16>(floatX *, const float *, size_t);
template void to_floatx_cuda<f16>(floatX *, const float *, size_t);
template void to_float_cuda<float>(float *, const floatX *, size_t);
template void to_float_cuda<bf16>(float *, const floatX *, size_t);
template void to_float_cuda<f16>(float *, const floatX *, size_t);
