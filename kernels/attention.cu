/* kernels/attention.cu - CUDA non-causal multi-head self-attention.
 *
 * Owns: scores = q k^T * hd^-0.5, the row log-sum-exp (max subtracted, fp32
 * math), P = exp(scores - lse), out = P v on timm's qkv layout (see ops.h),
 * and the backward through all three from out and lse, for fp32, bf16-mixed
 * and fp16-mixed (X). llm.c's plan: split the heads out of qkv into
 * contiguous (B,NH,T,hd) tensors, do every product as one cuBLAS
 * strided-batched GEMM over the B*NH heads, and the softmax (and its
 * backward) as one warp per row. What the forward keeps is ops.h's: out and
 * lse (B,NH,T) fp32; the backward recomputes S with the forward's GEMM and
 * P with the forward's formula, exp(s - lse), so the same bits
 * (FlashAttention-2's backward, unfused).
 * Which path runs: attention_forward_cuda / attention_backward_cuda take
 * the flash kernels (flash_attention.cu: one pass over K/V, nothing
 * (T,T) in memory) where attention_scratch.h's att_flash_head_dim accepts
 * the head dim and floatX width and the GPU is sm_80 or newer: bf16- and
 * fp16-mixed with hd in 32..128, a multiple of 8, where the GPU gives a
 * block the kernels' shared memory (flash_attention_smem_bytes; not hd
 * 113..128 on sm_86/89). Everything else (fp32,
 * small or odd head dims) takes the unfused path below, which stays
 * callable on its own as the *_unfused_cuda functions (the tables
 * ops_cuda(storage | OPS_UNFUSED_ATTENTION) gives: the tests compare the
 * two, the benchmark times both). attention_scratch_bytes_cuda answers for
 * the path the same shape takes.
 * Must not: project q, k, v or the output (matmuls in the model), allocate
 * (everything lives in the caller's scratch, attention_scratch_bytes_cuda),
 * keep anything in scratch between forward and backward (the backward
 * recomputes its own copies from qkv, out and lse), or use float atomics.
 *
 * Unfused scratch layout (attention_scratch.h, one layout for forward and backward;
 * every sub-buffer starts at a multiple of 256 bytes from the scratch base;
 * E = B*T*D elements = B*NH*T*hd, S = B*NH*T*T elements):
 *   q   X[E]      (B,NH,T,hd)   both
 *   k   X[E]      (B,NH,T,hd)   both
 *   v   X[E]      (B,NH,T,hd)   both
 *   y   X[E]      (B,NH,T,hd)   forward: P @ v; backward: dy (dout split)
 *   s32 float[S]  (B,NH,T,T)    both: scaled scores; backward then dP = dy v^T
 *   sX  X[S]      (B,NH,T,T)    both: P; backward then dS = P (dP - D_i), in place
 *   dq  X[E], dk X[E], dv X[E]  (B,NH,T,hd)  backward
 *
 * P and dS are stored as X (bf16 in bf16-mixed), not fp32: cublasGemmStridedBatchedEx
 * needs A and B of one type, and y = P v, dV = P^T dy, dQ = dS k, dK = dS^T q
 * multiply them with the 16-bit v, dy, k and q; fp32 copies would need fp32
 * GEMMs. Rounding P and dS to bf16 costs a relative 2^-9 per element, far
 * inside bf16's tolerance, and is what llm.c (and bf16 autocast) do; ops.h
 * states it as the contract, and the cpu-bf16 and cpu-fp16 tables round at
 * the same places. In fp32 it is fp32. The score scale is applied as the
 * GEMMs' alpha (scores, dQ, dK) rather than folded into q or dS; the same
 * math as kernels/attention.c.
 */
#include "cuda_common.cuh"
#include "attention_scratch.h"

#include <math.h>
#include <stdio.h>

#define ATT_THREADS 256 /* 8 warps: 8 softmax rows per block */

/* ------------------------------------------------------------------------ */
/* Kernels.                                                                 */

/* Where element i of a (B,NH,T,hd) tensor lives in a (B,T,ld) one whose
 * head h is at columns h*hd..h*hd+hd-1: (b*T + t)*ld + h*hd + e. */
static __device__ __forceinline__ size_t head_offset(size_t i, int T, int NH, int hd, int ld)
{
    const size_t e = i % hd;
    size_t r = i / hd;
    const size_t t = r % T;
    r /= T;
    const size_t h = r % NH;
    const size_t b = r / NH;
    return (b * T + t) * (size_t)ld + h * hd + e;
}

/* Split heads: for each (b,h,t,e) with D = NH*hd,
 *   q[b,h,t,e] = src[(b*T + t)*ld + h*hd + e]
 *   k[...]     = src[... + D]       (when k != NULL)
 *   v[...]     = src[... + 2D]      (when v != NULL)
 * qkv (B,T,3D): ld = 3D with q, k, v; dout (B,T,D): ld = D with q only. */
template <typename X>
static __global__ void split_heads_kernel(X *q, X *k, X *v, const X *src, int B, int T, int NH,
                                          int hd, int ld)
{
    const size_t n = (size_t)B * NH * T * hd;
    const size_t D = (size_t)NH * hd;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t o = head_offset(i, T, NH, hd, ld);
        q[i] = src[o];
        if (k) k[i] = src[o + D];
        if (v) v[i] = src[o + 2 * D];
    }
}

/* Merge heads, the inverse: dst[(b*T + t)*ld + h*hd + e] = q[b,h,t,e], and
 * at +D, +2D from k, v when non-NULL. Over all (b,h,t,e) this writes every
 * column of dst's rows: [0,D) from q, [D,2D) from k, [2D,3D) from v. */
template <typename X>
static __global__ void merge_heads_kernel(X *dst, const X *q, const X *k, const X *v, int B,
                                          int T, int NH, int hd, int ld)
{
    const size_t n = (size_t)B * NH * T * hd;
    const size_t D = (size_t)NH * hd;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t o = head_offset(i, T, NH, hd, ld);
        dst[o] = q[i];
        if (k) dst[o + D] = k[i];
        if (v) dst[o + 2 * D] = v[i];
    }
}

/* p[0..T) = exp(x - l): the probabilities of one row, the one formula of
 * both passes (the backward's P is the forward's, bit for bit, given the
 * same S). */
template <typename X>
static __device__ __forceinline__ void row_probs(X *p, const float *x, float l, int lane, int T)
{
    for (int j = lane; j < T; j += 32) p[j] = stx<X>(expf(x[j] - l));
}

/* One warp per row (rows = B*NH*T): lse[row] = m + log(sum_j exp(s_j - m)),
 * m = max_j s_j, and p[row, :] = exp(s[row, :] - lse[row]). fp32 math. */
template <typename X>
static __global__ void softmax_forward_kernel(X *p, float *lse, const float *s, size_t rows,
                                              int T)
{
    const size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return; /* warp-uniform: whole warps leave together */
    const float *x = s + row * (size_t)T;
    float m = -INFINITY;
    for (int j = lane; j < T; j += 32) m = fmaxf(m, x[j]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int j = lane; j < T; j += 32) sum += expf(x[j] - m);
    sum = warp_sum(sum);
    const float l = m + logf(sum); /* sum >= 1: the max term is exp(0) */
    if (lane == 0) lse[row] = l;
    row_probs<X>(p + row * (size_t)T, x, l, lane, T);
}

/* The backward's P, one warp per row: p[row, :] = exp(s[row, :] - lse[row]). */
template <typename X>
static __global__ void softmax_recompute_kernel(X *p, const float *s, const float *lse,
                                                size_t rows, int T)
{
    const size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    row_probs<X>(p + row * (size_t)T, s + row * (size_t)T, lse[row], lane, T);
}

/* Softmax backward, one warp per row (b,h,t): ds_j = p_j (dp_j - D), D =
 * sum_e dy[b,h,t,e] out[b,t,h*hd+e] (= sum_j p_j dp_j), p as stored (the
 * rounded 16-bit values in bf16- and fp16-mixed), fp32 math. ds may be p
 * (each element is read, then written, by one lane). */
template <typename X>
static __global__ void softmax_backward_kernel(X *ds, const float *dp, const X *p, const X *dy,
                                               const X *out, size_t rows, int T, int NH, int hd)
{
    const size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const size_t t = row % T, bh = row / T, h = bh % NH, b = bh / NH;
    const X *dyr = dy + row * (size_t)hd;
    const X *outr = out + (b * T + t) * (size_t)NH * hd + h * hd;
    float d = 0.0f;
    for (int e = lane; e < hd; e += 32) d += ldx(dyr[e]) * ldx(outr[e]);
    d = warp_sum(d);
    const X *pr = p + row * (size_t)T;
    const float *g = dp + row * (size_t)T;
    X *o = ds + row * (size_t)T;
    for (int j = lane; j < T; j += 32) o[j] = stx<X>(ldx(pr[j]) * (g[j] - d));
}

/* ------------------------------------------------------------------------ */
/* Row-major strided-batched GEMM on g_cuda.blas (bound to g_cuda.stream).  */

/* For each batch i < batch (A_i = A + i*sA elements, likewise B, C):
 *   C_i (M,N) = alpha * op(A_i) (M,K) . op(B_i) (K,N) + beta * C_i,
 * all row-major: A_i is stored (M,K) with row stride lda when !ta, (K,M)
 * when ta; B_i is stored (K,N) with row stride ldb when !tb, (N,K) when tb;
 * C_i is (M,N) with row stride ldc.
 *
 * cuBLAS is column-major, and a row-major (R,C) matrix with row stride ld is
 * exactly the column-major (C,R) matrix with leading dimension ld, i.e. its
 * transpose. So cuBLAS computes C^T (N,M) = op(B)^T (N,K) . op(A)^T (K,M):
 *   - first operand is B: its column-major view is B^T when !tb (op N gives
 *     op(B)^T = B^T) and the stored (N,K)'s transpose, op(B), when tb (op T
 *     gives op(B)^T); so transa = tb, lda' = ldb;
 *   - second operand is A, likewise: transb = ta, ldb' = lda;
 *   - m' = N, n' = M, k' = K, ldc' = ldc.
 * The leading dimensions satisfy cuBLAS's bounds exactly when the row-major
 * ones are at least the row lengths (lda >= K or M, ldb >= N or K, ldc >= N).
 * A and B have type xt, C type ct; fp32 scalars and accumulation
 * (CUBLAS_COMPUTE_32F: pure fp32 for fp32 inputs, no TF32). */
static int gemm_rm(bool ta, bool tb, int M, int N, int K, float alpha, const void *A, int lda,
                   long long sA, const void *B, int ldb, long long sB, float beta, void *C,
                   int ldc, long long sC, int batch, cudaDataType_t xt, cudaDataType_t ct)
{
    return CUBLAS_TRY(cublasGemmStridedBatchedEx(
        g_cuda.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
        &alpha, B, xt, ldb, sB, A, xt, lda, sA, &beta, C, ct, ldc, sC, batch, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
}

/* ------------------------------------------------------------------------ */
/* Scratch.                                                                 */

template <typename X> struct att_scratch {
    X *q, *k, *v, *y;
    float *s32;
    X *sX;
    X *dq, *dk, *dv;
};

/* Byte offsets of the layout above (attention_scratch.h, shared with the
 * planner); returns the total. */
template <typename X> static size_t att_offsets(size_t off[9], int B, int T, int D, int NH)
{
    return att_scratch_layout(off, B, T, D, NH, sizeof(X));
}

template <typename X>
static void att_carve(att_scratch<X> *L, void *scratch, int B, int T, int D, int NH)
{
    size_t off[9];
    att_offsets<X>(off, B, T, D, NH);
    char *base = (char *)scratch;
    L->q = (X *)(base + off[0]);
    L->k = (X *)(base + off[1]);
    L->v = (X *)(base + off[2]);
    L->y = (X *)(base + off[3]);
    L->s32 = (float *)(base + off[4]);
    L->sX = (X *)(base + off[5]);
    L->dq = (X *)(base + off[6]);
    L->dk = (X *)(base + off[7]);
    L->dv = (X *)(base + off[8]);
}

template <typename X> size_t attention_scratch_bytes_unfused_cuda(int B, int T, int D, int NH)
{
    if (B <= 0 || T <= 0 || D <= 0 || NH <= 0) return 0;
    size_t off[9];
    return att_offsets<X>(off, B, T, D, NH);
}

/* Shapes and scratch the kernels rely on; records an error otherwise.
 * Returns 0 when there is nothing to do or an error, 1 to go on. */
static int att_check(const char *op, void *scratch, int B, int T, int D, int NH)
{
    if (B <= 0 || T <= 0) return 0;
    const char *why = NULL;
    if (NH <= 0 || D <= 0 || D % NH != 0) why = "D must be a positive multiple of NH";
    else if (!scratch) why = "scratch is NULL";
    if (!why) return 1;
    if (!g_cuda.failed)
        snprintf(g_cuda.err, sizeof g_cuda.err, "%s:%d: %s(B=%d T=%d D=%d NH=%d): %s", __FILE__,
                 __LINE__, op, B, T, D, NH, why);
    cuda_note((int)cudaErrorInvalidValue);
    if (!g_cuda.failed) g_cuda.failed = 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The ops.                                                                 */

// qkv (B,T,3D) -> out (B,T,D), lse (B,NH,T)
template <typename X>
void attention_forward_unfused_cuda(floatX *out_, float *lse, void *scratch, const floatX *qkv_,
                                    int B, int T, int D, int NH)
{
    CU_GUARD();
    if (!att_check("attention_forward", scratch, B, T, D, NH)) return;
    X *out = (X *)out_;
    const X *qkv = (const X *)qkv_;
    const int hd = D / NH, BH = B * NH;
    const long long sh = (long long)T * hd, ss = (long long)T * T; /* per-head strides */
    const size_t E = (size_t)B * T * D, rows = (size_t)BH * T;
    const float scale = 1.0f / sqrtf((float)hd);
    const cudaDataType_t xt = cuda_type<X>::value;
    cudaStream_t st = g_cuda.stream;
    att_scratch<X> L;
    att_carve<X>(&L, scratch, B, T, D, NH);

    /* q, k, v (B,NH,T,hd) from qkv (B,T,3D) */
    split_heads_kernel<X><<<cuda_blocks(E, ATT_THREADS), ATT_THREADS, 0, st>>>(
        L.q, L.k, L.v, qkv, B, T, NH, hd, 3 * D);
    if (CU_LAUNCHED()) return;
    /* s32 (T,T) = scale * q (T,hd) . k^T, fp32 out */
    if (gemm_rm(false, true, T, T, hd, scale, L.q, hd, sh, L.k, hd, sh, 0.0f, L.s32, T, ss, BH,
                xt, CUDA_R_32F))
        return;
    /* lse per row of s32; P (sX) = exp(s32 - lse) */
    softmax_forward_kernel<X><<<(unsigned)((rows + 7) / 8), ATT_THREADS, 0, st>>>(L.sX, lse,
                                                                                   L.s32, rows, T);
    if (CU_LAUNCHED()) return;
    /* y (T,hd) = P (T,T) . v (T,hd) */
    if (gemm_rm(false, false, T, hd, T, 1.0f, L.sX, T, ss, L.v, hd, sh, 0.0f, L.y, hd, sh, BH, xt,
                xt))
        return;
    /* out (B,T,D), head h at columns h*hd.. */
    merge_heads_kernel<X><<<cuda_blocks(E, ATT_THREADS), ATT_THREADS, 0, st>>>(
        out, L.y, (const X *)NULL, (const X *)NULL, B, T, NH, hd, D);
    CU_LAUNCHED();
}

// dout (B,T,D), qkv, out, lse -> dqkv (B,T,3D) overwritten
template <typename X>
void attention_backward_unfused_cuda(floatX *dqkv_, void *scratch, const floatX *dout_,
                                     const floatX *qkv_, const floatX *out_, const float *lse,
                                     int B, int T, int D, int NH)
{
    CU_GUARD();
    if (!att_check("attention_backward", scratch, B, T, D, NH)) return;
    X *dqkv = (X *)dqkv_;
    const X *dout = (const X *)dout_, *qkv = (const X *)qkv_, *out = (const X *)out_;
    const int hd = D / NH, BH = B * NH;
    const long long sh = (long long)T * hd, ss = (long long)T * T;
    const size_t E = (size_t)B * T * D, rows = (size_t)BH * T;
    const float scale = 1.0f / sqrtf((float)hd);
    const cudaDataType_t xt = cuda_type<X>::value;
    cudaStream_t st = g_cuda.stream;
    att_scratch<X> L;
    att_carve<X>(&L, scratch, B, T, D, NH);
    X *dy = L.y;

    /* q, k, v from qkv; dy (B,NH,T,hd) from dout (B,T,D) */
    split_heads_kernel<X><<<cuda_blocks(E, ATT_THREADS), ATT_THREADS, 0, st>>>(
        L.q, L.k, L.v, qkv, B, T, NH, hd, 3 * D);
    if (CU_LAUNCHED()) return;
    split_heads_kernel<X><<<cuda_blocks(E, ATT_THREADS), ATT_THREADS, 0, st>>>(
        dy, (X *)NULL, (X *)NULL, dout, B, T, NH, hd, D);
    if (CU_LAUNCHED()) return;
    /* s32 (T,T) = scale * q . k^T, the forward's GEMM; P (sX) = exp(s32 - lse) */
    if (gemm_rm(false, true, T, T, hd, scale, L.q, hd, sh, L.k, hd, sh, 0.0f, L.s32, T, ss, BH,
                xt, CUDA_R_32F))
        return;
    softmax_recompute_kernel<X><<<(unsigned)((rows + 7) / 8), ATT_THREADS, 0, st>>>(
        L.sX, L.s32, lse, rows, T);
    if (CU_LAUNCHED()) return;
    /* dV (T,hd) = P^T (T,T) . dy (T,hd); P stored (T,T), row stride T */
    if (gemm_rm(true, false, T, hd, T, 1.0f, L.sX, T, ss, dy, hd, sh, 0.0f, L.dv, hd, sh, BH, xt,
                xt))
        return;
    /* dP (T,T) = dy (T,hd) . v^T, fp32 out, over the scores */
    if (gemm_rm(false, true, T, T, hd, 1.0f, dy, hd, sh, L.v, hd, sh, 0.0f, L.s32, T, ss, BH, xt,
                CUDA_R_32F))
        return;
    /* dS = P (dP - D_i), D_i = dy_i . out_i, over P */
    softmax_backward_kernel<X><<<(unsigned)((rows + 7) / 8), ATT_THREADS, 0, st>>>(
        L.sX, L.s32, L.sX, dy, out, rows, T, NH, hd);
    if (CU_LAUNCHED()) return;
    /* dQ (T,hd) = scale * dS (T,T) . k (T,hd) */
    if (gemm_rm(false, false, T, hd, T, scale, L.sX, T, ss, L.k, hd, sh, 0.0f, L.dq, hd, sh, BH,
                xt, xt))
        return;
    /* dK (T,hd) = scale * dS^T (T,T) . q (T,hd) */
    if (gemm_rm(true, false, T, hd, T, scale, L.sX, T, ss, L.q, hd, sh, 0.0f, L.dk, hd, sh, BH,
                xt, xt))
        return;
    /* dqkv (B,T,3D): every element, from dq, dk, dv */
    merge_heads_kernel<X><<<cuda_blocks(E, ATT_THREADS), ATT_THREADS, 0, st>>>(
        dqkv, L.dq, L.dk, L.dv, B, T, NH, hd, 3 * D);
    CU_LAUNCHED();
}

/* ------------------------------------------------------------------------ */
/* The dispatch: flash where it runs, else unfused.                         */

template <typename X> static bool att_flash(int D, int NH)
{
    return g_cuda.cc_major >= 8 && NH > 0 && D > 0 && D % NH == 0 &&
           att_flash_head_dim(D / NH, sizeof(X)) &&
           flash_attention_smem_bytes(D / NH) <= (size_t)g_cuda.smem_optin;
}

template <typename X> size_t attention_scratch_bytes_cuda(int B, int T, int D, int NH)
{
    if (att_flash<X>(D, NH)) return att_flash_scratch_bytes(B, T, NH);
    return attention_scratch_bytes_unfused_cuda<X>(B, T, D, NH);
}

/* The flash calls are compiled for 16-bit X only (flash_attention.cu has
 * no float kernels; att_flash is false for float anyway). ASYNC: the flash
 * kernels' tile copies (cp.async, or through registers). */
template <typename X, bool ASYNC>
static void att_forward(floatX *out, float *lse, void *scratch, const floatX *qkv, int B, int T,
                        int D, int NH)
{
    if constexpr (sizeof(X) == 2) {
        if (att_flash<X>(D, NH)) {
            flash_attention_forward_cuda<X, ASYNC>((X *)out, lse, (const X *)qkv, B, T, D, NH);
            return;
        }
    }
    attention_forward_unfused_cuda<X>(out, lse, scratch, qkv, B, T, D, NH);
}

template <typename X, bool ASYNC>
static void att_backward(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                         const floatX *out, const float *lse, int B, int T, int D, int NH)
{
    if constexpr (sizeof(X) == 2) {
        if (att_flash<X>(D, NH)) {
            CU_GUARD();
            if (!att_check("attention_backward", scratch, B, T, D, NH)) return;
            flash_attention_backward_cuda<X, ASYNC>((X *)dqkv, (float *)scratch,
                                                    (const X *)dout, (const X *)qkv,
                                                    (const X *)out, lse, B, T, D, NH);
            return;
        }
    }
    attention_backward_unfused_cuda<X>(dqkv, scratch, dout, qkv, out, lse, B, T, D, NH);
}

template <typename X>
void attention_forward_cuda(floatX *out, float *lse, void *scratch, const floatX *qkv, int B,
                            int T, int D, int NH)
{
    att_forward<X, true>(out, lse, scratch, qkv, B, T, D, NH);
}

template <typename X>
void attention_backward_cuda(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                             const floatX *out, const float *lse, int B, int T, int D, int NH)
{
    att_backward<X, true>(dqkv, scratch, dout, qkv, out, lse, B, T, D, NH);
}

/* OPS_FLASH_SYNC_LOADS: the flash kernels with their tiles copied through
 * registers (the same bits; the benchmark's and the tests' other side). */
template <typename X> size_t attention_scratch_bytes_flash_sync_cuda(int B, int T, int D, int NH)
{
    return attention_scratch_bytes_cuda<X>(B, T, D, NH);
}

template <typename X>
void attention_forward_flash_sync_cuda(floatX *out, float *lse, void *scratch, const floatX *qkv,
                                       int B, int T, int D, int NH)
{
    att_forward<X, false>(out, lse, scratch, qkv, B, T, D, NH);
}

template <typename X>
void attention_backward_flash_sync_cuda(floatX *dqkv, void *scratch, const floatX *dout,
                                        const floatX *qkv, const floatX *out, const float *lse,
                                        int B, int T, int D, int NH)
{
    att_backward<X, false>(dqkv, scratch, dout, qkv, out, lse, B, T, D, NH);
}

/* OPS_CANDIDATE_KERNELS: the flash forward, and the fused backward
 * (flash_attention.cuh: S and dP once, dQ's parts added in order) where
 * the flash path runs and the GPU gives a block its shared memory; else
 * as the default tables. Its scratch holds the dQ parts too. */
template <typename X> static bool att_fused(int D, int NH)
{
    return att_flash<X>(D, NH) &&
           flash_attention_fused_smem_bytes(D / NH) <= (size_t)g_cuda.smem_optin;
}

template <typename X> size_t attention_scratch_bytes_flash_fused_cuda(int B, int T, int D, int NH)
{
    if (att_fused<X>(D, NH)) return att_flash_fused_scratch_bytes(B, T, D, NH);
    return attention_scratch_bytes_cuda<X>(B, T, D, NH);
}

template <typename X>
void attention_forward_flash_fused_cuda(floatX *out, float *lse, void *scratch,
                                        const floatX *qkv, int B, int T, int D, int NH)
{
    att_forward<X, true>(out, lse, scratch, qkv, B, T, D, NH);
}

template <typename X>
void attention_backward_flash_fused_cuda(floatX *dqkv, void *scratch, const floatX *dout,
                                         const floatX *qkv, const floatX *out, const float *lse,
                                         int B, int T, int D, int NH)
{
    if constexpr (sizeof(X) == 2) {
        if (att_fused<X>(D, NH)) {
            CU_GUARD();
            if (!att_check("attention_backward", scratch, B, T, D, NH)) return;
            flash_attention_backward_fused_cuda<X>((X *)dqkv, (float *)scratch, (const X *)dout,
                                                   (const X *)qkv, (const X *)out, lse, B, T, D,
                                                   NH);
            return;
        }
    }
    att_backward<X, true>(dqkv, scratch, dout, qkv, out, lse, B, T, D, NH);
}

#define ATT_INSTANTIATE(NAME)                                                                   \
    template size_t attention_scratch_bytes##NAME##cuda<float>(int, int, int, int);             \
    template size_t attention_scratch_bytes##NAME##cuda<bf16>(int, int, int, int);              \
    template size_t attention_scratch_bytes##NAME##cuda<f16>(int, int, int, int);               \
    template void attention_forward##NAME##cuda<float>(floatX *, float *, void *,               \
                                                       const floatX *, int, int, int, int);     \
    template void attention_forward##NAME##cuda<bf16>(floatX *, float *, void *, const floatX *, \
                                                      int, int, int, int);                      \
    template void attention_forward##NAME##cuda<f16>(floatX *, float *, void *, const floatX *,  \
                                                     int, int, int, int);                       \
    template void attention_backward##NAME##cuda<float>(floatX *, void *, const floatX *,        \
                                                        const floatX *, const floatX *,          \
                                                        const float *, int, int, int, int);      \
    template void attention_backward##NAME##cuda<bf16>(floatX *, void *, const floatX *,         \
                                                       const floatX *, const floatX *,           \
                                                       const float *, int, int, int, int);       \
    template void attention_backward##NAME##cuda<f16>(floatX *, void *, const floatX *,          \
                                                      const floatX *, const floatX *,            \
                                                      const float *, int, int, int, int);
ATT_INSTANTIATE(_)
ATT_INSTANTIATE(_flash_sync_)
ATT_INSTANTIATE(_flash_fused_)
ATT_INSTANTIATE(_unfused_)
