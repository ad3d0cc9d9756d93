/* kernels/gelu.cu - CUDA: exact (erf) GELU and its derivative.
 * Owns: the GPU versions of kernels/gelu.c: gelu(x) = x Phi(x),
 * Phi(x) = 0.5 (1 + erf(x / sqrt 2)) with erff, gelu'(x) = Phi(x) + x phi(x),
 * phi(x) = exp(-x^2/2) / sqrt(2 pi); fp32 math on X storage.
 * Where every pointer is 16-byte aligned, each thread moves 16 bytes at a
 * time (8 bf16/half or 4 floats; the profile had the scalar kernels at about
 * a third of the H100's bandwidth) and a scalar launch does the last n % 8;
 * every element gets the same fp32 math either way, so the results are the
 * same bits.
 * Must not: use the tanh form; assume dinp and dout are distinct (the backward
 * runs in place).
 */
#include "cuda_common.cuh"

#define GELU_INV_SQRT2 0.70710678118654752440f
#define GELU_INV_SQRT_2PI 0.39894228040143267794f

static __device__ __forceinline__ float gelu_of(float x)
{
    return x * (0.5f * (1.0f + erff(x * GELU_INV_SQRT2)));
}

static __device__ __forceinline__ float gelu_grad_of(float x, float dy)
{
    const float cdf = 0.5f * (1.0f + erff(x * GELU_INV_SQRT2));
    const float pdf = GELU_INV_SQRT_2PI * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
}

template <typename X>
static __global__ void gelu_forward_kernel(X *out, const X *inp, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = stx<X>(gelu_of(ldx(inp[i])));
}

/* 16 bytes per thread and iteration: nv vectors of 16 / sizeof(X) elements */
template <typename X>
static __global__ void gelu_forward_vec_kernel(int4 *out, const int4 *inp, size_t nv)
{
    constexpr int V = 16 / sizeof(X);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv;
         i += (size_t)gridDim.x * blockDim.x) {
        const int4 a = inp[i];
        int4 o;
        const X *xs = reinterpret_cast<const X *>(&a);
        X *os = reinterpret_cast<X *>(&o);
#pragma unroll
        for (int j = 0; j < V; j++) os[j] = stx<X>(gelu_of(ldx(xs[j])));
        out[i] = o;
    }
}

// dinp may be dout: each element is read, then written, by one thread
template <typename X>
static __global__ void gelu_backward_kernel(X *dinp, const X *inp, const X *dout, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = stx<X>(gelu_grad_of(ldx(inp[i]), ldx(dout[i])));
}

// the same, 16 bytes of each operand per thread and iteration
template <typename X>
static __global__ void gelu_backward_vec_kernel(int4 *dinp, const int4 *inp, const int4 *dout,
                                                size_t nv)
{
    constexpr int V = 16 / sizeof(X);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv;
         i += (size_t)gridDim.x * blockDim.x) {
        const int4 a = inp[i], d = dout[i];
        int4 o;
        const X *xs = reinterpret_cast<const X *>(&a);
        const X *ds = reinterpret_cast<const X *>(&d);
        X *os = reinterpret_cast<X *>(&o);
#pragma unroll
        for (int j = 0; j < V; j++) os[j] = stx<X>(gelu_grad_of(ldx(xs[j]), ldx(ds[j])));
        dinp[i] = o;
    }
}

template <typename X> void gelu_forward_cuda(floatX *out, const floatX *inp, size_t n)
{
    CU_GUARD();
    if (n == 0) return;
    const unsigned threads = 256;
    constexpr size_t V = 16 / sizeof(X);
    size_t done = 0;
    if (cuda_aligned(out, 16) && cuda_aligned(inp, 16) && n >= V) {
        const size_t nv = n / V;
        gelu_forward_vec_kernel<X><<<cuda_blocks(nv, threads), threads, 0, g_cuda.stream>>>(
            (int4 *)out, (const int4 *)inp, nv);
        if (CU_LAUNCHED()) return;
        done = nv * V;
    }
    if (done < n) {
        gelu_forward_kernel<X><<<cuda_blocks(n - done, threads), threads, 0, g_cuda.stream>>>(
            (X *)out + done, (const X *)inp + done, n - done);
        CU_LAUNCHED();
    }
}

template <typename X>
void gelu_backward_cuda(floatX *dinp, const floatX *inp, const floatX *dout, size_t n)
{
    CU_GUARD();
    if (n == 0) return;
    const unsigned threads = 256;
    constexpr size_t V = 16 / sizeof(X);
    size_t done = 0;
    if (cuda_aligned(dinp, 16) && cuda_aligned(inp, 16) && cuda_aligned(dout, 16) && n >= V) {
        const size_t nv = n / V;
        gelu_backward_vec_kernel<X><<<cuda_blocks(nv, threads), threads, 0, g_cuda.stream>>>(
            (int4 *)dinp, (const int4 *)inp, (const int4 *)dout, nv);
        if (CU_LAUNCHED()) return;
        done = nv * V;
    }
    if (done < n) {
        gelu_backward_kernel<X><<<cuda_blocks(n - done, threads), threads, 0, g_cuda.stream>>>(
            (X *)dinp + done, (const X *)inp + done, (const X *)dout + done, n - done);
        CU_LAUNCHED();
    }
}

template void gelu_forward_cuda<float>(floatX *, const floatX *, size_t);
template void gelu_forward_cuda<bf16>(floatX *, const floatX *, size_t);
template void gelu_forward_cuda<f16>(floatX *, const floatX *, size_t);
template void gelu_backward_cuda<float>(floatX *, const floatX *, const floatX *, size_t);
template void gelu_backward_cuda<bf16>(floatX *, const floatX *, const floatX *, size_t);
template void gelu_backward_cuda<f16>(floatX *, const floatX *, const floatX *, size_t);
