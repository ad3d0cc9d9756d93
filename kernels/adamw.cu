/* kernels/adamw.cu - CUDA: AdamW on fp32 master weights and state.
 * Owns: the GPU version of kernels/adamw.c with its precision choices: bias
 * corrections in double on the host (pow of the float betas promoted to
 * double), step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2),
 * decay = 1 - lr*wd in float; per element fp32 with every operation rounded
 * on its own (__f*_rn: no fused multiply-adds, as the CPU's ISO C build), so
 * the result matches the CPU's bits. With p_lp the new p is also stored as X.
 * Must not: decide which tensors decay or the learning rate (the trainer).
 */
#include "cuda_common.cuh"

#include <math.h>

template <typename X>
static __global__ void adamw_kernel(float *p, X *p_lp, float *m, float *v, const float *g,
                                    size_t n, float beta1, float beta2, float eps,
                                    float step_size, float bc2_sqrt, float decay)
{
    const float one_m_b1 = __fsub_rn(1.0f, beta1), one_m_b2 = __fsub_rn(1.0f, beta2);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float gi = g[i];
        /* mi = beta1 * m + (1 - beta1) * g; vi = beta2 * v + (1 - beta2) * g * g */
        const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(one_m_b1, gi));
        const float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(one_m_b2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        /* denom = sqrt(vi) / bc2_sqrt + eps; p = p * decay - step_size * mi / denom */
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        const float pi =
            __fsub_rn(__fmul_rn(p[i], decay), __fdiv_rn(__fmul_rn(step_size, mi), denom));
        p[i] = pi;
        if (p_lp) p_lp[i] = stx<X>(pi);
    }
}

template <typename X>
void adamw_update_cuda(float *p, floatX *p_lp, float *m, float *v, const float *g, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay, long t)
{
    CU_GUARD();
    if (n == 0) return;
    const double bc1 = 1.0 - pow((double)beta1, (double)t);
    const double bc2 = 1.0 - pow((double)beta2, (double)t);
    const float step_size = (float)((double)lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float lr_wd = lr * weight_decay; /* float, as the CPU: two roundings */
    const float decay = 1.0f - lr_wd;
    const unsigned threads = 256;
    adamw_kernel<X><<<cuda_blocks(n, threads), threads, 0, g_cuda.stream>>>(
        p, (X *)p_lp, m, v, g, n, beta1, beta2, eps, step_size, bc2_sqrt, decay);
    CU_LAUNCHED();
}

template void adamw_update_cuda<float>(float *, floatX *, float *, float *, const float *, size_t,
                                       float, float, float, float, float, long);
template void adamw_update_cuda<bf16>(float *, floatX *, float *, float *, const float *, size_t,
                                      float, float, float, float, float, long);
template void adamw_update_cuda<f16>(float *, floatX *, float *, float *, const float *, size_t,
                                     float, float, float, float, float, long);
