/* kernels/droppath.cu - CUDA: drop path (stochastic depth) on a residual
 * branch, per sample.
 * Owns: the GPU versions of kernels/droppath.c, elementwise grid-stride
 * kernels: out = res + scale[b] * branch with the product and the sum each
 * rounded once (__fmul_rn, __fadd_rn: no fused multiply-add, so the bits
 * are the CPU reference's), and dbranch = scale[b] * dout stored as X.
 * Must not: draw masks or know rates (worker/train/droppath.c), or touch
 * the residual's own gradient.
 */
#include "cuda_common.cuh"

// res (B,n), branch (B,n), scale (B) -> out (B,n) = res + scale[b] * branch; out may be res
static __global__ void droppath_forward_kernel(float *out, const float *res, const float *branch,
                                               const float *scale, size_t n, size_t total)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __fadd_rn(res[i], __fmul_rn(scale[i / n], branch[i]));
}

// dout (B,n), scale (B) -> dbranch (B,n) = scale[b] * dout as X
template <typename X>
static __global__ void droppath_backward_kernel(X *dbranch, const float *dout,
                                                const float *scale, size_t n, size_t total)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        dbranch[i] = stx<X>(__fmul_rn(scale[i / n], dout[i]));
}

void droppath_forward_cuda(float *out, const float *res, const float *branch, const float *scale,
                           int B, size_t n)
{
    CU_GUARD();
    if (B <= 0 || n == 0) return;
    const size_t total = (size_t)B * n;
    const unsigned threads = 256;
    droppath_forward_kernel<<<cuda_blocks(total, threads), threads, 0, g_cuda.stream>>>(
        out, res, branch, scale, n, total);
    CU_LAUNCHED();
}

template <typename X>
void droppath_backward_cuda(floatX *dbranch, const float *dout, const float *scale, int B,
                            size_t n)
{
    CU_GUARD();
    if (B <= 0 || n == 0) return;
    const size_t total = (size_t)B * n;
    const unsigned threads = 256;
    droppath_backward_kernel<X><<<cuda_blocks(total, threads), threads, 0, g_cuda.stream>>>(
        (X *)dbranch, dout, scale, n, total);
    CU_LAUNCHED();
}

template void droppath_backward_cuda<float>(floatX *, const float *, const float *, int, size_t);
template void droppath_backward_cuda<bf16>(floatX *, const float *, const float *, int, size_t);
template void droppath_backward_cuda<f16>(floatX *, const float *, const float *, int, size_t);
