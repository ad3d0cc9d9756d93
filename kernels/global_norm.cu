/* kernels/global_norm.cu - CUDA: global gradient norm and clipping.
 * Owns: a deterministic sum of squares: a FIXED grid (SS_BLOCKS blocks of
 * SS_THREADS, whatever the GPU) of grid-stride partial sums in double, a
 * shared-memory tree per block in a fixed order, one double per block in
 * cuda_scratch, then one block adding those in a fixed tree; the result is
 * copied to the host and waited for (sum_squares), or stored or added in
 * device memory, queued (sum_squares_into: the step's norm, which
 * adamw_multi reads on the device). Also g *= s and y += x.
 * Must not: decide the clip threshold (the trainer does); use atomics.
 */
#include "cuda_buffers.h"
#include "cuda_common.cuh"

#define SS_THREADS 256

// g (n) -> partial[blockIdx.x] = sum of g^2 over this block's grid-stride share
static __global__ void sum_squares_partial_kernel(double *partial, const float *g, size_t n)
{
    __shared__ double sh[SS_THREADS];
    const int tid = threadIdx.x;
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * SS_THREADS + tid; i < n;
         i += (size_t)SS_BLOCKS * SS_THREADS) {
        const double v = (double)g[i];
        acc += v * v;
    }
    sh[tid] = acc;
    __syncthreads();
    for (int s = SS_THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) sh[tid] += sh[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = sh[0];
}

// partial (SS_BLOCKS) -> *out = their sum (add: *out += their sum); one
// block of SS_BLOCKS threads
static __global__ void sum_squares_final_kernel(double *out, const double *partial, int add)
{
    __shared__ double sh[SS_BLOCKS];
    const int tid = threadIdx.x;
    sh[tid] = partial[tid];
    __syncthreads();
    for (int s = SS_BLOCKS / 2; s > 0; s >>= 1) {
        if (tid < s) sh[tid] += sh[tid + s];
        __syncthreads();
    }
    if (tid == 0) *out = add ? __dadd_rn(*out, sh[0]) : sh[0];
}

static __global__ void scale_kernel(float *g, float s, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        g[i] *= s;
}

static __global__ void add_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

/* Queues the two kernels: *out = (or +=) the sum of squares of g. */
static int sum_squares_queue(double *out, const float *g, size_t n, int add)
{
    double *partial = (double *)cuda_scratch(cuda_ss_scratch_bytes());
    if (!partial) return -1;
    sum_squares_partial_kernel<<<SS_BLOCKS, SS_THREADS, 0, g_cuda.stream>>>(partial, g, n);
    if (CU_LAUNCHED()) return -1;
    sum_squares_final_kernel<<<1, SS_BLOCKS, 0, g_cuda.stream>>>(out, partial, add);
    return CU_LAUNCHED();
}

double sum_squares_cuda(const float *g, size_t n)
{
    if (g_cuda.failed) return 0.0; /* CU_GUARD() returns void */
    if (n == 0) return 0.0;
    double *partial = (double *)cuda_scratch(cuda_ss_scratch_bytes());
    if (!partial) return 0.0;
    double *total = partial + SS_BLOCKS;
    if (sum_squares_queue(total, g, n, 0)) return 0.0;
    double result = 0.0;
    if (CU_TRY(cudaMemcpyAsync(&result, total, sizeof(double), cudaMemcpyDeviceToHost,
                               g_cuda.stream)) ||
        cuda_wait_stream())
        return 0.0;
    return result;
}

void sum_squares_into_cuda(double *acc, const float *g, size_t n, int add)
{
    CU_GUARD();
    if (n == 0) { /* the sum is 0: stored, or 0 added (a no-op) */
        if (!add) CU_TRY(cudaMemsetAsync(acc, 0, sizeof(double), g_cuda.stream));
        return;
    }
    (void)sum_squares_queue(acc, g, n, add);
}

void scale_cuda(float *g, float s, size_t n)
{
    CU_GUARD();
    if (n == 0) return;
    const unsigned threads = 256;
    scale_kernel<<<cuda_blocks(n, threads), threads, 0, g_cuda.stream>>>(g, s, n);
    CU_LAUNCHED();
}

void add_cuda(float *y, const float *x, size_t n)
{
    CU_GUARD();
    if (n == 0) return;
    const unsigned threads = 256;
    add_kernel<<<cuda_blocks(n, threads), threads, 0, g_cuda.stream>>>(y, x, n);
    CU_LAUNCHED();
}
