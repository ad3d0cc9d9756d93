/* kernels/flash_attention.cu - launches the flash-attention kernels
 * (flash_attention.cuh) for bf16- and fp16-mixed.
 *
 * Owns: checking what the kernels rely on (16-byte aligned buffers, a head
 * dim attention_scratch.h's att_flash_head_dim accepts), picking the
 * kernels' padded head dim HDP (hd rounded up to 16: 32, 48, ..., 128), the
 * shared memory each kernel needs (above the 48 KiB default from HDP 80 on:
 * asked for once per kernel), and the grids: one block per (head, 64-row
 * tile), the head in x (B*NH may pass 65535), the tile in y.
 * ASYNC picks the tile copies (flash_attention.cuh's pipeline: cp.async,
 * or through registers for ops_cuda's OPS_FLASH_SYNC_LOADS table). The
 * fused backward (OPS_CANDIDATE_KERNELS' tables) in launches of
 * attention_scratch.h's att_flash_fused_heads heads, its dQ parts in the
 * caller's scratch after the D_i.
 * Must not: decide between the flash and the unfused path (attention.cu
 * does), allocate (the backward's D_i live in the caller's scratch), or
 * use float atomics.
 */
#include "flash_attention.cuh"
#include "attention_scratch.h"

#include <math.h>
#include <stdio.h>

/* Records a shape or pointer the kernels cannot take; returns 1 if it did. */
static int fa_refuse(const char *op, const char *why, int B, int T, int D, int NH)
{
    if (!g_cuda.failed)
        snprintf(g_cuda.err, sizeof g_cuda.err, "%s:%d: %s(B=%d T=%d D=%d NH=%d): %s", __FILE__,
                 __LINE__, op, B, T, D, NH, why);
    cuda_note((int)cudaErrorInvalidValue);
    return 1;
}

/* Dynamic shared memory of each kernel (bytes); a streamed tile has two
 * buffers (the pipeline, flash_attention.cuh). */
template <typename X, int HDP> static size_t fa_forward_smem(void)
{
    return 5 * (size_t)fa_tile<HDP>::ELEMS * sizeof(X); /* Q, K x 2, V x 2 */
}
template <typename X, int HDP> static size_t fa_dkdv_smem(void)
{
    /* K, V, Q x 2, dO x 2, then the query rows' lse x 2 and D x 2 */
    return 6 * (size_t)fa_tile<HDP>::ELEMS * sizeof(X) + 4 * FA_ROWS * sizeof(float);
}
template <typename X, int HDP> static size_t fa_dq_smem(void)
{
    return 6 * (size_t)fa_tile<HDP>::ELEMS * sizeof(X); /* Q, dO, K x 2, V x 2 */
}

template <typename X, int HDP> static size_t fa_fused_smem(void)
{
    /* the dK/dV kernel's, and the dS^T tile (64 x FA_DS_LD) */
    return fa_dkdv_smem<X, HDP>() + (size_t)FA_ROWS * FA_DS_LD * sizeof(X);
}

/* Lets kernel use smem bytes of dynamic shared memory (once per kernel:
 * *done remembers). Returns non-zero with the error recorded. */
template <typename K> static int fa_smem_attr(K kernel, size_t smem, bool *done)
{
    if (*done) return 0;
    if (CU_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem)))
        return 1;
    *done = true;
    return 0;
}

template <typename X, int HDP, bool ASYNC>
static void fa_forward(X *out, float *lse, const X *qkv, int B, int T, int D, int NH)
{
    static bool attr;
    const int hd = D / NH;
    const size_t smem = fa_forward_smem<X, HDP>();
    if (fa_smem_attr(flash_forward_kernel<X, HDP, ASYNC>, smem, &attr)) return;
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + FA_ROWS - 1) / FA_ROWS));
    flash_forward_kernel<X, HDP, ASYNC><<<grid, FA_THREADS, smem, g_cuda.stream>>>(
        out, lse, qkv, T, NH, hd, FA_LOG2E / sqrtf((float)hd));
    CU_LAUNCHED();
}

/* D_i = dout_i . out_i into dvec (B*NH*T floats), 8 rows (warps) a block:
 * the first kernel of both backwards. Returns non-zero with the error
 * recorded. */
template <typename X>
static int fa_backward_dvec(float *dvec, const X *dout, const X *out, int B, int T, int NH, int hd)
{
    const size_t rows = (size_t)B * NH * T;
    flash_backward_dot_kernel<X><<<(unsigned)((rows + 7) / 8), 256, 0, g_cuda.stream>>>(
        dvec, dout, out, B, T, NH, hd);
    return CU_LAUNCHED();
}

template <typename X, int HDP, bool ASYNC>
static void fa_backward(X *dqkv, float *dvec, const X *dout, const X *qkv, const X *out,
                        const float *lse, int B, int T, int D, int NH)
{
    static bool attr_dkdv, attr_dq;
    const int hd = D / NH;
    const float scale = 1.0f / sqrtf((float)hd), scale_log2 = scale * FA_LOG2E;
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + FA_ROWS - 1) / FA_ROWS));
    cudaStream_t st = g_cuda.stream;

    if (fa_backward_dvec<X>(dvec, dout, out, B, T, NH, hd)) return;
    /* dK, dV per K/V tile */
    const size_t s1 = fa_dkdv_smem<X, HDP>();
    if (fa_smem_attr(flash_backward_dkdv_kernel<X, HDP, ASYNC, false>, s1, &attr_dkdv)) return;
    flash_backward_dkdv_kernel<X, HDP, ASYNC, false><<<grid, FA_THREADS, s1, st>>>(
        dqkv, (float *)NULL, qkv, dout, lse, dvec, 0, T, NH, hd, scale, scale_log2);
    if (CU_LAUNCHED()) return;
    /* dQ per query tile */
    const size_t s2 = fa_dq_smem<X, HDP>();
    if (fa_smem_attr(flash_backward_dq_kernel<X, HDP, ASYNC>, s2, &attr_dq)) return;
    flash_backward_dq_kernel<X, HDP, ASYNC><<<grid, FA_THREADS, s2, st>>>(
        dqkv, qkv, dout, lse, dvec, T, NH, hd, scale, scale_log2);
    CU_LAUNCHED();
}

/* The fused backward (OPS_CANDIDATE_KERNELS): D_i as fa_backward, then
 * per launch of att_flash_fused_heads heads the fused kernel (dK, dV and
 * the parts of dQ, into the scratch after the D_i) and the sum of the
 * parts; the launches reuse the parts, in stream order. */
template <typename X, int HDP>
static void fa_backward_fused(X *dqkv, float *scratch, const X *dout, const X *qkv, const X *out,
                              const float *lse, int B, int T, int D, int NH)
{
    static bool attr;
    const int hd = D / NH, BH = B * NH, nkt = (T + FA_ROWS - 1) / FA_ROWS;
    const int heads = att_flash_fused_heads(B, T, D, NH); /* >= 1: B, T, D, NH checked */
    const float scale = 1.0f / sqrtf((float)hd), scale_log2 = scale * FA_LOG2E;
    float *dvec = scratch, *part = scratch + att_flash_scratch_bytes(B, T, NH) / sizeof(float);
    cudaStream_t st = g_cuda.stream;

    if (fa_backward_dvec<X>(dvec, dout, out, B, T, NH, hd)) return;
    const size_t smem = fa_fused_smem<X, HDP>();
    if (heads < 1 || fa_smem_attr(flash_backward_dkdv_kernel<X, HDP, true, true>, smem, &attr))
        return;
    for (int bh0 = 0; bh0 < BH; bh0 += heads) {
        const int n = BH - bh0 < heads ? BH - bh0 : heads;
        flash_backward_dkdv_kernel<X, HDP, true, true><<<dim3((unsigned)n, (unsigned)nkt),
                                                          FA_THREADS, smem, st>>>(
            dqkv, part, qkv, dout, lse, dvec, bh0, T, NH, hd, scale, scale_log2);
        if (CU_LAUNCHED()) return;
        const size_t pairs = (size_t)n * T * hd / 2;
        flash_backward_dq_sum_kernel<X><<<cuda_blocks(pairs, 256), 256, 0, st>>>(
            dqkv, part, bh0, n, nkt, T, NH, hd, scale);
        if (CU_LAUNCHED()) return;
    }
}

/* The padded head dims the kernels are built for: one case per HDP. */
#define FA_HDP_SWITCH(hd, CALL)      \
    switch (((hd) + 15) / 16 * 16) { \
    case 32: CALL(32); break;        \
    case 48: CALL(48); break;        \
    case 64: CALL(64); break;        \
    case 80: CALL(80); break;        \
    case 96: CALL(96); break;        \
    case 112: CALL(112); break;      \
    case 128: CALL(128); break;      \
    default: break;                  \
    }

/* Shapes and pointers the kernels take; records why not and returns 0. */
size_t flash_attention_smem_bytes(int hd)
{
    size_t n = 0;
    /* both 16-bit types take the same bytes */
#define FA_SMEM(HDP)                                                                \
    n = fa_forward_smem<bf16, HDP>();                                              \
    if (fa_dkdv_smem<bf16, HDP>() > n) n = fa_dkdv_smem<bf16, HDP>();              \
    if (fa_dq_smem<bf16, HDP>() > n) n = fa_dq_smem<bf16, HDP>()
    FA_HDP_SWITCH(hd, FA_SMEM)
#undef FA_SMEM
    return n;
}

size_t flash_attention_fused_smem_bytes(int hd)
{
    size_t n = 0;
#define FA_SMEM(HDP) n = fa_fused_smem<bf16, HDP>()
    FA_HDP_SWITCH(hd, FA_SMEM)
#undef FA_SMEM
    return n;
}

template <typename X>
static int fa_check(const char *op, const void *const *ptrs, int nptrs, int B, int T, int D,
                    int NH)
{
    if (NH <= 0 || D <= 0 || D % NH != 0 || !att_flash_head_dim(D / NH, sizeof(X)))
        return !fa_refuse(op, "the flash kernels take a 16-bit floatX and hd in 32..128, a "
                              "multiple of 8", B, T, D, NH);
    for (int i = 0; i < nptrs; i++)
        if (!cuda_aligned(ptrs[i], 16))
            return !fa_refuse(op, "the flash kernels need 16-byte aligned buffers", B, T, D, NH);
    return 1;
}

template <typename X, bool ASYNC>
void flash_attention_forward_cuda(X *out, float *lse, const X *qkv, int B, int T, int D, int NH)
{
    CU_GUARD();
    if (B <= 0 || T <= 0) return;
    const void *p[] = {out, qkv};
    if (!fa_check<X>("flash_attention_forward", p, 2, B, T, D, NH)) return;
#define FA_FWD(HDP) fa_forward<X, HDP, ASYNC>(out, lse, qkv, B, T, D, NH)
    FA_HDP_SWITCH(D / NH, FA_FWD)
#undef FA_FWD
}

template <typename X, bool ASYNC>
void flash_attention_backward_cuda(X *dqkv, float *dvec, const X *dout, const X *qkv,
                                   const X *out, const float *lse, int B, int T, int D, int NH)
{
    CU_GUARD();
    if (B <= 0 || T <= 0) return;
    const void *p[] = {dqkv, dout, qkv};
    if (!fa_check<X>("flash_attention_backward", p, 3, B, T, D, NH)) return;
#define FA_BWD(HDP) fa_backward<X, HDP, ASYNC>(dqkv, dvec, dout, qkv, out, lse, B, T, D, NH)
    FA_HDP_SWITCH(D / NH, FA_BWD)
#undef FA_BWD
}

template <typename X>
void flash_attention_backward_fused_cuda(X *dqkv, float *scratch, const X *dout, const X *qkv,
                                         const X *out, const float *lse, int B, int T, int D,
                                         int NH)
{
    CU_GUARD();
    if (B <= 0 || T <= 0) return;
    const void *p[] = {dqkv, dout, qkv, scratch}; /* the parts take float2 stores */
    if (!fa_check<X>("flash_attention_backward_fused", p, 4, B, T, D, NH)) return;
#define FA_BWD(HDP) fa_backward_fused<X, HDP>(dqkv, scratch, dout, qkv, out, lse, B, T, D, NH)
    FA_HDP_SWITCH(D / NH, FA_BWD)
#undef FA_BWD
}
template void flash_attention_backward_fused_cuda<bf16>(bf16 *, float *, const bf16 *,
                                                        const bf16 *, const bf16 *, const float *,
                                                        int, int, int, int);
template void flash_attention_backward_fused_cuda<f16>(f16 *, float *, const f16 *, const f16 *,
                                                       const f16 *, const float *, int, int, int,
                                                       int);

#define FA_INSTANTIATE(X, ASYNC)                                                          \
    template void flash_attention_forward_cuda<X, ASYNC>(X *, float *, const X *, int, int, int, \
                                                         int);                                   \
    template void flash_attention_backward_cuda<X, ASYNC>(X *, float *, const X *, const X *,    \
                                                          const X *, const float *, int, int,    \
                                                          int, int);
FA_INSTANTIATE(bf16, true)
FA_INSTANTIATE(bf16, false)
FA_INSTANTIATE(f16, true)
FA_INSTANTIATE(f16, false)
