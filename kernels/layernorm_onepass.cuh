/* kernels/layernorm_onepass.cuh - LayerNorm's one-pass backward (the
 * candidate kernels' slot, kernels/ops.h OPS_CANDIDATE_KERNELS), device code
 * only; launched by kernels/layernorm.cu (layernorm_backward_onepass_cuda),
 * run on the CPU by tools/ln_emu against the CPU twin.
 * Owns: the 16-byte row vector ln_x4 and the V4 switch (LN_V4_SWITCH)
 * that layernorm.cu's register kernels share; the one-pass kernel (dinp, its floatX copy and per-block dw/db
 * partials) and the kernel that adds the partials.
 * Must not: allocate, launch, or include anything beyond cuda_common.cuh
 * and cuda_buffers.h (tools/ln_emu compiles it as host C++ with its own
 * stand-in for cuda_common.cuh).
 */
#ifndef VITJOB_LAYERNORM_ONEPASS_CUH
#define VITJOB_LAYERNORM_ONEPASS_CUH

#include "cuda_buffers.h"
#include "cuda_common.cuh"

#define LN1_THREADS (32 * LN1_WARPS)
/* where a kernel declares a static shared array: nothing on a GPU; the
 * emulator (tools/ln_emu) poisons the array at each block's start */
#ifndef LN1_EMU_SHARED
#define LN1_EMU_SHARED(a)
#endif

/* four X of a row, moved as one 8- or 16-byte access */
template <typename X> struct __align__(4 * sizeof(X)) ln_x4 {
    X v[4];
};

/* Four columns of a row: xhat = (x - mean) * rstd, dxhat = dout * w. */
template <typename X>
__device__ __forceinline__ void ln_row4(float4 &xh, float4 &dxh, float4 xv, float4 ww,
                                        ln_x4<X> d, float m, float s)
{
    xh = make_float4((xv.x - m) * s, (xv.y - m) * s, (xv.z - m) * s, (xv.w - m) * s);
    dxh = make_float4(ldx(d.v[0]) * ww.x, ldx(d.v[1]) * ww.y, ldx(d.v[2]) * ww.z,
                      ldx(d.v[3]) * ww.w);
}
/* Four columns of dinp, o, plus rstd * (dxhat - mean(dxhat) - xhat *
 * mean(dxhat * xhat)) (a and b: those two means); stored 16 bytes at once,
 * and as floatX 4 X at once where dinp_x is not NULL. */
template <typename X>
__device__ __forceinline__ void ln_dinp4(float4 *dx, X *dinp_x, int i, float4 xh, float4 dxh,
                                         float s, float a, float b)
{
    float4 o = dx[i];
    o.x += s * (dxh.x - a - xh.x * b);
    o.y += s * (dxh.y - a - xh.y * b);
    o.z += s * (dxh.z - a - xh.z * b);
    o.w += s * (dxh.w - a - xh.w * b);
    dx[i] = o;
    if (dinp_x) {
        ln_x4<X> ox;
        ox.v[0] = stx<X>(o.x), ox.v[1] = stx<X>(o.y), ox.v[2] = stx<X>(o.z), ox.v[3] = stx<X>(o.w);
        ((ln_x4<X> *)dinp_x)[i] = ox;
    }
}

/* The one-pass backward (the candidate: kernels/ops.h OPS_CANDIDATE_KERNELS,
 * waiting for a GPU's measurement against the three kernels above). The
 * dinp kernel's work per row, and in the same pass over dout and inp each
 * warp adds its rows' dout * xhat and dout to dw and db partials kept in
 * registers for its columns: R rows a warp (cuda_ln1_rows_per_warp: 4, or
 * more for N > 32768), warp v of block b taking rows b*8R + 8j + v, j < R,
 * so that a block's 8 warps read 8 neighbouring rows at a time. Then the
 * block adds its 8 warps' partials in warp order through shared memory and
 * writes one dw and one db row into part (gridDim.x rows each); a second
 * kernel adds those rows, 16 interleaved groups of blocks in block order
 * and the groups in order, onto dw and db. Fixed orders throughout: the
 * same bits on every run (not the three kernels' bits: another order).
 * Against the three kernels: dout and inp are read once, not twice (about
 * a quarter of the backward's bytes at ViT-B), and the partials number
 * about N/32 rows with many warps each (the one-pass kernel that was
 * reverted had 256 chunks of a dozen rows a warp: too little parallelism).
 * Same conditions as the dinp vec kernel (C % 4 == 0, C <= 1280, aligned);
 * otherwise the three kernels run. */
#define LN1_MAX_C4 320 /* C <= 1280 */
template <typename X, int V4>
static __global__ void __launch_bounds__(LN1_THREADS)
    layernorm_backward_onepass_kernel(float *dinp, X *dinp_x, float *part, const X *dout,
                                      const float *inp, const float *w, const float *mean,
                                      const float *rstd, int N, int C, int R)
{
    __shared__ float4 red[LN1_WARPS * LN1_MAX_C4];
    LN1_EMU_SHARED(red);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, C4 = C / 4;
    const float4 *w4 = (const float4 *)w;
    float4 pw[V4], pb[V4];
#pragma unroll
    for (int k = 0; k < V4; k++) pw[k] = pb[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int base = blockIdx.x * LN1_WARPS * R;
    for (int j = 0; j < R; j++) {
        const int row = base + j * LN1_WARPS + warp;
        if (row >= N) break; /* the warp's later rows are past N too */
        const float4 *x = (const float4 *)(inp + (size_t)row * C);
        const ln_x4<X> *dy = (const ln_x4<X> *)(dout + (size_t)row * C);
        const float m = mean[row], s = rstd[row];
        float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#pragma unroll
        for (int k = 0; k < V4; k++) {
            const int i = lane + 32 * k;
            if (i < C4) {
                const ln_x4<X> d = dy[i];
                const float4 g = make_float4(ldx(d.v[0]), ldx(d.v[1]), ldx(d.v[2]), ldx(d.v[3]));
                float4 xh, dxh;
                ln_row4<X>(xh, dxh, x[i], w4[i], d, m, s);
                sum_dxhat += (dxh.x + dxh.y) + (dxh.z + dxh.w);
                sum_dxhat_xhat += (dxh.x * xh.x + dxh.y * xh.y) + (dxh.z * xh.z + dxh.w * xh.w);
                pw[k].x += g.x * xh.x, pw[k].y += g.y * xh.y, pw[k].z += g.z * xh.z,
                    pw[k].w += g.w * xh.w;
                pb[k].x += g.x, pb[k].y += g.y, pb[k].z += g.z, pb[k].w += g.w;
            }
        }
        sum_dxhat = warp_sum(sum_dxhat) / (float)C;
        sum_dxhat_xhat = warp_sum(sum_dxhat_xhat) / (float)C;
        /* the row again (from the cache: this warp just read it), so that
         * xhat and dxhat need no registers beside the partials */
        float4 *dx = (float4 *)(dinp + (size_t)row * C);
        X *dxx = dinp_x ? dinp_x + (size_t)row * C : NULL;
#pragma unroll
        for (int k = 0; k < V4; k++) {
            const int i = lane + 32 * k;
            if (i < C4) {
                float4 xh, dxh;
                ln_row4<X>(xh, dxh, x[i], w4[i], dy[i], m, s);
                ln_dinp4<X>(dx, dxx, i, xh, dxh, s, sum_dxhat, sum_dxhat_xhat);
            }
        }
    }
    if (!part) return; /* a frozen LayerNorm: the whole block leaves */
    for (int half = 0; half < 2; half++) { /* dw's partials, then db's */
#pragma unroll
        for (int k = 0; k < V4; k++) {
            const int i = lane + 32 * k;
            if (i < C4) red[warp * C4 + i] = half ? pb[k] : pw[k];
        }
        __syncthreads();
        float4 *out = (float4 *)part + ((size_t)half * gridDim.x + blockIdx.x) * C4;
        for (int i = threadIdx.x; i < C4; i += LN1_THREADS) {
            float4 a = red[i];
            for (int v = 1; v < LN1_WARPS; v++) {
                const float4 b = red[v * C4 + i];
                a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
            }
            out[i] = a;
        }
        __syncthreads(); /* red is written again */
    }
}

/* dw (C) += (blockIdx.y 0) or db (C) += (1) the one-pass kernel's nblk
 * partial rows: a block of 32 columns x LN1_RED_GROUPS groups, group g
 * adding rows g, g + 16, ... in order, then the groups in order. */
#define LN1_RED_GROUPS 16
static __global__ void layernorm_backward_onepass_reduce_kernel(float *dw, float *db,
                                                                const float *part, int nblk,
                                                                int C)
{
    __shared__ float sums[LN1_RED_GROUPS][32];
    LN1_EMU_SHARED(sums);
    const int c = blockIdx.x * 32 + threadIdx.x, g = threadIdx.y;
    const float *p = part + (size_t)blockIdx.y * nblk * C;
    float a = 0.0f;
    if (c < C)
        for (int b = g; b < nblk; b += LN1_RED_GROUPS) a += p[(size_t)b * C + c];
    sums[g][threadIdx.x] = a;
    __syncthreads();
    float *out = blockIdx.y ? db : dw;
    if (g == 0 && c < C && out) {
        float t = out[c];
        for (int v = 0; v < LN1_RED_GROUPS; v++) t += sums[v][threadIdx.x];
        out[c] = t;
    }
}

/* The register kernels' instance for C (a multiple of 4 up to 1280): V4
 * float4s a lane, C rounded up to 256 columns (2 float4s a lane each). */
#define LN_V4_SWITCH(C, CALL)        \
    switch (((C) + 255) / 256) {     \
    case 1: CALL(2); break;          \
    case 2: CALL(4); break;          \
    case 3: CALL(6); break;          \
    case 4: CALL(8); break;          \
    default: CALL(10); break;        \
    }

#endif
