/* kernels/crossentropy.cu - CUDA: softmax cross-entropy on logits.
 * Owns: the GPU versions of kernels/crossentropy.c: one block per row, fp32
 * max-subtracted exponentials, their sum in double (fixed reduction tree:
 * deterministic), probs = e * (float)(1/sum), loss = log(sum) - (z[t] - max)
 * in double; the fused gradient (probs - onehot) * dloss stored as X.
 * Against soft targets (crossentropy_soft_*): the same softmax, and the
 * loss log(sum) * sum_k t_k - sum_k t_k (z_k - max), both sums in double
 * over the same fixed tree; the gradient (probs - t) * dloss as X.
 * Must not: average over the batch (the caller's dloss does).
 */
#include "cuda_common.cuh"

#define CE_THREADS 256
#define CE_WARPS (CE_THREADS / 32)

static __device__ __forceinline__ double warp_sum_double(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// logits (B,K) X, targets (B) -> losses (B), probs (B,K); one block per row
template <typename X>
static __global__ void crossentropy_forward_kernel(float *losses, float *probs, const X *logits,
                                                   const int *targets, int K)
{
    __shared__ float s_max[CE_WARPS];
    __shared__ double s_sum[CE_WARPS];
    const int b = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const X *z = logits + (size_t)b * K;
    float *p = probs + (size_t)b * K;

    float mx = -INFINITY;
    for (int k = tid; k < K; k += CE_THREADS) mx = fmaxf(mx, ldx(z[k]));
    mx = warp_max(mx);
    if (lane == 0) s_max[warp] = mx;
    __syncthreads();
    mx = s_max[0];
    for (int i = 1; i < CE_WARPS; i++) mx = fmaxf(mx, s_max[i]);

    double sum = 0.0;
    for (int k = tid; k < K; k += CE_THREADS) {
        const float e = expf(ldx(z[k]) - mx);
        p[k] = e;
        sum += (double)e;
    }
    sum = warp_sum_double(sum);
    if (lane == 0) s_sum[warp] = sum;
    __syncthreads();
    sum = s_sum[0];
    for (int i = 1; i < CE_WARPS; i++) sum += s_sum[i]; /* every thread: the same order */

    const float inv = (float)(1.0 / sum);
    for (int k = tid; k < K; k += CE_THREADS) p[k] *= inv; /* this thread's own writes */
    if (tid == 0) {
        const int t = targets[b];
        losses[b] = (t >= 0 && t < K) ? (float)(log(sum) - (double)(ldx(z[t]) - mx))
                                      : __int_as_float(0x7fc00000); /* NaN: bad target */
    }
}

// probs (B,K), targets (B) -> dlogits (B,K) = (probs - onehot) * dloss as X
template <typename X>
static __global__ void crossentropy_backward_kernel(X *dlogits, const float *probs,
                                                    const int *targets, float dloss,
                                                    size_t total, int K)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / (size_t)K;
        const int k = (int)(i % (size_t)K);
        const float onehot = k == targets[b] ? 1.0f : 0.0f;
        dlogits[i] = stx<X>((probs[i] - onehot) * dloss);
    }
}

// The launch behind every op here: nothing once the backend has failed or for
// an empty (B,K); else kernel on the stream, one block of CE_THREADS a row
// (rows: the forward kernels) or 256-thread blocks over the B*K elements
// (the backward ones), checked.
template <typename... P, typename... A>
static void ce_launch(void (*kernel)(P...), bool rows, int B, int K, A... args)
{
    CU_GUARD();
    if (B <= 0 || K <= 0) return;
    const unsigned threads = rows ? CE_THREADS : 256;
    const unsigned blocks = rows ? (unsigned)B : cuda_blocks((size_t)B * K, threads);
    kernel<<<blocks, threads, 0, g_cuda.stream>>>(args...);
    CU_LAUNCHED();
}

template <typename X>
void crossentropy_forward_cuda(float *losses, float *probs, const floatX *logits,
                               const int *targets, int B, int K)
{
    ce_launch(crossentropy_forward_kernel<X>, true, B, K, losses, probs, (const X *)logits,
              targets, K);
}

template <typename X>
void crossentropy_backward_cuda(floatX *dlogits, const float *probs, const int *targets,
                                float dloss, int B, int K)
{
    ce_launch(crossentropy_backward_kernel<X>, false, B, K, (X *)dlogits, probs, targets, dloss,
              (size_t)B * K, K);
}

template void crossentropy_forward_cuda<float>(float *, float *, const floatX *, const int *,
                                               int, int);
template void crossentropy_forward_cuda<bf16>(float *, float *, const floatX *, const int *, int,
                                              int);
template void crossentropy_forward_cuda<f16>(float *, float *, const floatX *, const int *, int,
                                             int);
template void crossentropy_backward_cuda<float>(floatX *, const float *, const int *, float, int,
                                                int);
template void crossentropy_backward_cuda<bf16>(floatX *, const float *, const int *, float, int,
                                               int);
template void crossentropy_backward_cuda<f16>(floatX *, const float *, const int *, float, int,
                                              int);

// logits (B,K) X, targets (B,K) -> losses (B) = -sum_k t log softmax, probs (B,K); one block
// per row
template <typename X>
static __global__ void crossentropy_soft_forward_kernel(float *losses, float *probs,
                                                        const X *logits, const float *targets,
                                                        int K)
{
    __shared__ float s_max[CE_WARPS];
    __shared__ double s_sum[CE_WARPS], s_tsum[CE_WARPS], s_tz[CE_WARPS];
    const int b = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const X *z = logits + (size_t)b * K;
    const float *t = targets + (size_t)b * K;
    float *p = probs + (size_t)b * K;

    float mx = -INFINITY;
    for (int k = tid; k < K; k += CE_THREADS) mx = fmaxf(mx, ldx(z[k]));
    mx = warp_max(mx);
    if (lane == 0) s_max[warp] = mx;
    __syncthreads();
    mx = s_max[0];
    for (int i = 1; i < CE_WARPS; i++) mx = fmaxf(mx, s_max[i]);

    double sum = 0.0, tsum = 0.0, tz = 0.0;
    for (int k = tid; k < K; k += CE_THREADS) {
        const float zk = ldx(z[k]) - mx;
        const float e = expf(zk);
        p[k] = e;
        sum += (double)e;
        tsum += (double)t[k];
        tz += (double)t[k] * (double)zk;
    }
    sum = warp_sum_double(sum);
    tsum = warp_sum_double(tsum);
    tz = warp_sum_double(tz);
    if (lane == 0) {
        s_sum[warp] = sum;
        s_tsum[warp] = tsum;
        s_tz[warp] = tz;
    }
    __syncthreads();
    sum = s_sum[0];
    tsum = s_tsum[0];
    tz = s_tz[0];
    for (int i = 1; i < CE_WARPS; i++) { /* every thread: the same order */
        sum += s_sum[i];
        tsum += s_tsum[i];
        tz += s_tz[i];
    }

    const float inv = (float)(1.0 / sum);
    for (int k = tid; k < K; k += CE_THREADS) p[k] *= inv; /* this thread's own writes */
    if (tid == 0) losses[b] = (float)(log(sum) * tsum - tz);
}

// probs (B,K), targets (B,K) -> dlogits (B,K) = (probs - targets) * dloss as X
template <typename X>
static __global__ void crossentropy_soft_backward_kernel(X *dlogits, const float *probs,
                                                         const float *targets, float dloss,
                                                         size_t total)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        dlogits[i] = stx<X>(__fmul_rn(__fsub_rn(probs[i], targets[i]), dloss));
}

template <typename X>
void crossentropy_soft_forward_cuda(float *losses, float *probs, const floatX *logits,
                                    const float *targets, int B, int K)
{
    ce_launch(crossentropy_soft_forward_kernel<X>, true, B, K, losses, probs, (const X *)logits,
              targets, K);
}

template <typename X>
void crossentropy_soft_backward_cuda(floatX *dlogits, const float *probs, const float *targets,
                                     float dloss, int B, int K)
{
    ce_launch(crossentropy_soft_backward_kernel<X>, false, B, K, (X *)dlogits, probs, targets,
              dloss, (size_t)B * K);
}

template void crossentropy_soft_forward_cuda<float>(float *, float *, const floatX *,
                                                    const float *, int, int);
template void crossentropy_soft_forward_cuda<bf16>(float *, float *, const floatX *,
                                                   const float *, int, int);
template void crossentropy_soft_forward_cuda<f16>(float *, float *, const floatX *,
                                                  const float *, int, int);
template void crossentropy_soft_backward_cuda<float>(floatX *, const float *, const float *,
                                                     float, int, int);
template void crossentropy_soft_backward_cuda<bf16>(floatX *, const float *, const float *, float,
                                                    int, int);
template void crossentropy_soft_backward_cuda<f16>(floatX *, const float *, const float *, float,
                                                   int, int);
