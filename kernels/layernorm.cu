/* kernels/layernorm.cu - CUDA: LayerNorm over the last dim and its backward.
 * Owns: the GPU versions of kernels/layernorm.c: fp32 statistics, two passes
 * over a row (mean, then the variance of x - mean), rstd = 1/sqrtf(var+eps);
 * the backward that accumulates into the residual-stream gradient (and
 * writes, where asked, its floatX copy in the same pass); dw and db
 * summed deterministically without atomics (rows in fixed chunks chosen from
 * N alone, each chunk summed in a fixed order per column into cuda_scratch,
 * then the chunk partials added in chunk order). The forward keeps a row in
 * registers and moves 16 bytes at a time where C % 4 == 0 (up to 1280) and
 * the pointers are aligned; so does the backward's dinp kernel. (A one-pass
 * backward, dinp and the partials in one kernel over 256 row chunks, ran
 * 1.9x slower than these three kernels on the H200: bench/NOTES.md.)
 * Must not: fuse the residual add; use float atomics.
 */
#include "cuda_buffers.h"
#include "cuda_common.cuh"
#include "layernorm_onepass.cuh"

#define LN_THREADS 256          /* 8 warps, one row each */
#define LN_ROWS (LN_THREADS / 32)
#define LN_COL_THREADS 128
static_assert(LN1_THREADS == LN_THREADS, "the one-pass backward's blocks are the dinp kernel's");

// inp (N,C) -> out (N,C) as X, mean (N), rstd (N); one warp per row
template <typename X>
static __global__ void layernorm_forward_kernel(X *out, float *mean, float *rstd,
                                                const float *inp, const float *w, const float *b,
                                                int N, int C)
{
    const int row = blockIdx.x * LN_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return; /* whole warps leave together: the shuffles stay full */
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) s += x[i];
    const float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        const float d = x[i] - m;
        v += d * d;
    }
    const float var = warp_sum(v) / (float)C;
    const float rs = 1.0f / sqrtf(var + VIT_LN_EPS);
    X *y = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) y[i] = stx<X>((x[i] - m) * rs * w[i] + b[i]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

// The same with the row in registers: C a multiple of 4 up to 128 * V4,
// inp, w and b 16-byte aligned, out aligned to 4 elements; each lane loads
// float4s (columns 4(lane + 32k)..) once and stores 4 X at a time. Two
// passes over the registers (mean, then the variance of x - mean), as the
// scalar kernel's two passes over memory.
template <typename X, int V4>
static __global__ void __launch_bounds__(LN_THREADS)
    layernorm_forward_vec_kernel(X *out, float *mean, float *rstd, const float *inp,
                                 const float *w, const float *b, int N, int C)
{
    const int row = blockIdx.x * LN_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return; /* whole warps leave together */
    const int C4 = C / 4;
    const float4 *x = (const float4 *)(inp + (size_t)row * C);
    float4 v[V4];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V4; k++) {
        const int i = lane + 32 * k;
        v[k] = i < C4 ? x[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    const float m = warp_sum(s) / (float)C;
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < V4; k++) {
        if (lane + 32 * k < C4) {
            const float a = v[k].x - m, bq = v[k].y - m, c = v[k].z - m, d = v[k].w - m;
            var += (a * a + bq * bq) + (c * c + d * d);
        }
    }
    const float rs = 1.0f / sqrtf(warp_sum(var) / (float)C + VIT_LN_EPS);
    ln_x4<X> *y = (ln_x4<X> *)(out + (size_t)row * C);
#pragma unroll
    for (int k = 0; k < V4; k++) {
        const int i = lane + 32 * k;
        if (i < C4) {
            const float4 ww = ((const float4 *)w)[i], bb = ((const float4 *)b)[i];
            ln_x4<X> o;
            o.v[0] = stx<X>((v[k].x - m) * rs * ww.x + bb.x);
            o.v[1] = stx<X>((v[k].y - m) * rs * ww.y + bb.y);
            o.v[2] = stx<X>((v[k].z - m) * rs * ww.z + bb.z);
            o.v[3] = stx<X>((v[k].w - m) * rs * ww.w + bb.w);
            y[i] = o;
        }
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

// dout (N,C) X -> dinp (N,C) +=, and dinp_x (N,C) = the new dinp as X unless
// NULL; one warp per row
template <typename X>
static __global__ void layernorm_backward_dinp_kernel(float *dinp, X *dinp_x, const X *dout,
                                                      const float *inp, const float *w,
                                                      const float *mean, const float *rstd,
                                                      int N, int C)
{
    const int row = blockIdx.x * LN_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    const X *dy = dout + (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    /* dxhat = dy * w; dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
    for (int i = lane; i < C; i += 32) {
        const float xhat = (x[i] - m) * s, dxhat = ldx(dy[i]) * w[i];
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
    }
    sum_dxhat = warp_sum(sum_dxhat) / (float)C;
    sum_dxhat_xhat = warp_sum(sum_dxhat_xhat) / (float)C;
    float *dx = dinp + (size_t)row * C;
    X *dxx = dinp_x ? dinp_x + (size_t)row * C : NULL;
    for (int i = lane; i < C; i += 32) {
        const float xhat = (x[i] - m) * s, dxhat = ldx(dy[i]) * w[i];
        const float v = dx[i] + s * (dxhat - sum_dxhat - xhat * sum_dxhat_xhat);
        dx[i] = v;
        if (dxx) dxx[i] = stx<X>(v);
    }
}

// The same with the row in registers, under the forward vec kernel's
// conditions (C a multiple of 4 up to 128 * V4; inp, w and dinp 16-byte
// aligned, dout aligned to 4 elements): each lane loads its float4s of x
// and w and 4 X of dout once, keeps xhat and dxhat, and adds into dinp 16
// bytes at a time: one pass over memory where the scalar kernel makes two;
// dinp_x (unless NULL, aligned to 4 X) 4 X at a time.
template <typename X, int V4>
static __global__ void __launch_bounds__(LN_THREADS)
    layernorm_backward_dinp_vec_kernel(float *dinp, X *dinp_x, const X *dout, const float *inp,
                                       const float *w, const float *mean, const float *rstd,
                                       int N, int C)
{
    const int row = blockIdx.x * LN_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return; /* whole warps leave together */
    const int C4 = C / 4;
    const float4 *x = (const float4 *)(inp + (size_t)row * C), *w4 = (const float4 *)w;
    const ln_x4<X> *dy = (const ln_x4<X> *)(dout + (size_t)row * C);
    const float m = mean[row], s = rstd[row];
    float4 xh[V4], dxh[V4];
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#pragma unroll
    for (int k = 0; k < V4; k++) {
        const int i = lane + 32 * k;
        xh[k] = dxh[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < C4) {
            ln_row4<X>(xh[k], dxh[k], x[i], w4[i], dy[i], m, s);
            sum_dxhat += (dxh[k].x + dxh[k].y) + (dxh[k].z + dxh[k].w);
            sum_dxhat_xhat += (dxh[k].x * xh[k].x + dxh[k].y * xh[k].y) +
                              (dxh[k].z * xh[k].z + dxh[k].w * xh[k].w);
        }
    }
    sum_dxhat = warp_sum(sum_dxhat) / (float)C;
    sum_dxhat_xhat = warp_sum(sum_dxhat_xhat) / (float)C;
    float4 *dx = (float4 *)(dinp + (size_t)row * C);
    X *dxx = dinp_x ? dinp_x + (size_t)row * C : NULL;
#pragma unroll
    for (int k = 0; k < V4; k++) {
        const int i = lane + 32 * k;
        if (i < C4) ln_dinp4<X>(dx, dxx, i, xh[k], dxh[k], s, sum_dxhat, sum_dxhat_xhat);
    }
}

// per (chunk, column): pw[chunk*C + c] = sum over the chunk's rows, in order, of
// dout*(x-mean)*rstd; pb likewise of dout. grid (ceil(C/LN_COL_THREADS), nchunks)
template <typename X>
static __global__ void layernorm_backward_partials_kernel(float *pw, float *pb, const X *dout,
                                                          const float *inp, const float *mean,
                                                          const float *rstd, int N, int C,
                                                          int rows_per_chunk)
{
    const int c = blockIdx.x * LN_COL_THREADS + threadIdx.x, chunk = blockIdx.y;
    if (c >= C) return;
    const int r0 = chunk * rows_per_chunk;
    const int r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    float acc_w = 0.0f, acc_b = 0.0f;
    for (int r = r0; r < r1; r++) {
        const size_t k = (size_t)r * C + c;
        const float dy = ldx(dout[k]);
        acc_w += dy * (inp[k] - mean[r]) * rstd[r];
        acc_b += dy;
    }
    pw[(size_t)chunk * C + c] = acc_w;
    pb[(size_t)chunk * C + c] = acc_b;
}

// dw (C) +=, db (C) += the chunk partials, chunks in order; one thread per column
static __global__ void layernorm_backward_reduce_kernel(float *dw, float *db, const float *pw,
                                                        const float *pb, int nchunks, int C)
{
    const int c = blockIdx.x * LN_COL_THREADS + threadIdx.x;
    if (c >= C) return;
    float acc_w = dw[c], acc_b = db[c];
    for (int k = 0; k < nchunks; k++) {
        acc_w += pw[(size_t)k * C + c];
        acc_b += pb[(size_t)k * C + c];
    }
    dw[c] = acc_w;
    db[c] = acc_b;
}


/* Whether the backward's register kernels take these buffers: C a multiple
 * of 4 up to 1280, inp, w and dinp 16-byte aligned, dout and dinp_x (unless
 * NULL) aligned to 4 X. */
template <typename X>
static int ln_backward_vec_ok(const float *dinp, const X *dinp_x, const X *dout, const float *inp,
                              const float *w, int C)
{
    return C % 4 == 0 && C <= 1280 && cuda_aligned(inp, 16) && cuda_aligned(w, 16) &&
           cuda_aligned(dinp, 16) && cuda_aligned(dout, 4 * sizeof(X)) &&
           (!dinp_x || cuda_aligned(dinp_x, 4 * sizeof(X)));
}

template <typename X>
void layernorm_forward_cuda(floatX *out, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, int N, int C)
{
    CU_GUARD();
    if (N <= 0 || C <= 0) return;
    const unsigned blocks = (unsigned)((N - 1) / LN_ROWS + 1);
    if (C % 4 == 0 && C <= 1280 && cuda_aligned(inp, 16) && cuda_aligned(w, 16) &&
        cuda_aligned(b, 16) && cuda_aligned(out, 4 * sizeof(X))) {
#define LN_FWD_VEC(V4)                                                               \
    layernorm_forward_vec_kernel<X, V4><<<blocks, LN_THREADS, 0, g_cuda.stream>>>( \
        (X *)out, mean, rstd, inp, w, b, N, C)
        LN_V4_SWITCH(C, LN_FWD_VEC);
#undef LN_FWD_VEC
        CU_LAUNCHED();
        return;
    }
    layernorm_forward_kernel<X><<<blocks, LN_THREADS, 0, g_cuda.stream>>>(
        (X *)out, mean, rstd, inp, w, b, N, C);
    CU_LAUNCHED();
}

template <typename X>
void layernorm_backward_cuda(float *dinp, floatX *dinp_x, float *dw, float *db,
                             const floatX *dout, const float *inp, const float *w,
                             const float *mean, const float *rstd, int N, int C)
{
    CU_GUARD();
    if (N <= 0 || C <= 0) return;
    const X *dy = (const X *)dout;
    X *dx_x = (X *)dinp_x;
    /* the chunking depends on N only: the same bits for the same inputs */
    const int rows_per_chunk = cuda_ln_rows_per_chunk(N);
    const int nchunks = cuda_ln_chunks(N); /* <= LN_MAX_CHUNKS */
    float *pw = (float *)cuda_scratch(cuda_ln_scratch_bytes(N, C));
    if (!pw) return;
    float *pb = pw + (size_t)nchunks * C;

    const unsigned row_blocks = (unsigned)((N - 1) / LN_ROWS + 1);
    if (ln_backward_vec_ok<X>(dinp, dx_x, dy, inp, w, C)) {
#define LN_BWD_VEC(V4)                                                                        \
    layernorm_backward_dinp_vec_kernel<X, V4><<<row_blocks, LN_THREADS, 0, g_cuda.stream>>>( \
        dinp, dx_x, dy, inp, w, mean, rstd, N, C)
        LN_V4_SWITCH(C, LN_BWD_VEC);
#undef LN_BWD_VEC
    } else {
        layernorm_backward_dinp_kernel<X><<<row_blocks, LN_THREADS, 0, g_cuda.stream>>>(
            dinp, dx_x, dy, inp, w, mean, rstd, N, C);
    }
    if (CU_LAUNCHED() || (!dw && !db)) return; /* a frozen LayerNorm (training.freeze) */

    const unsigned col_blocks = (unsigned)((C - 1) / LN_COL_THREADS + 1);
    const dim3 grid(col_blocks, (unsigned)nchunks);
    layernorm_backward_partials_kernel<X><<<grid, LN_COL_THREADS, 0, g_cuda.stream>>>(
        pw, pb, dy, inp, mean, rstd, N, C, rows_per_chunk);
    if (CU_LAUNCHED()) return;
    layernorm_backward_reduce_kernel<<<col_blocks, LN_COL_THREADS, 0, g_cuda.stream>>>(
        dw, db, pw, pb, nchunks, C);
    CU_LAUNCHED();
}

template <typename X>
void layernorm_backward_onepass_cuda(float *dinp, floatX *dinp_x, float *dw, float *db,
                                     const floatX *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int N, int C)
{
    CU_GUARD();
    if (N <= 0 || C <= 0) return;
    const X *dy = (const X *)dout;
    X *dx_x = (X *)dinp_x;
    static_assert(4 * LN1_MAX_C4 == 1280, "the one-pass kernel takes the register kernels' C");
    if (!ln_backward_vec_ok<X>(dinp, dx_x, dy, inp, w, C)) {
        layernorm_backward_cuda<X>(dinp, dinp_x, dw, db, dout, inp, w, mean, rstd, N, C);
        return;
    }
    const int want = dw || db; /* a frozen LayerNorm (training.freeze): dinp only */
    const int R = cuda_ln1_rows_per_warp(N), nblk = cuda_ln1_blocks(N);
    float *part = NULL;
    if (want && !(part = (float *)cuda_scratch(cuda_ln1_scratch_bytes(N, C))))
        return; /* cuda_scratch recorded the error */
#define LN1_BWD(V4)                                                                              layernorm_backward_onepass_kernel<X, V4><<<nblk, LN_THREADS, 0, g_cuda.stream>>>(              dinp, dx_x, part, dy, inp, w, mean, rstd, N, C, R)
    LN_V4_SWITCH(C, LN1_BWD);
#undef LN1_BWD
    if (CU_LAUNCHED() || !want) return;
    layernorm_backward_onepass_reduce_kernel<<<dim3((unsigned)((C + 31) / 32), 2),
                                               dim3(32, LN1_RED_GROUPS), 0, g_cuda.stream>>>(
        dw, db, part, nblk, C);
    CU_LAUNCHED();
}

template void layernorm_forward_cuda<float>(floatX *, float *, float *, const float *,
                                            const float *, const float *, int, int);
template void layernorm_forward_cuda<bf16>(floatX *, float *, float *, const float *,
                                           const float *, const float *, int, int);
template void layernorm_forward_cuda<f16>(floatX *, float *, float *, const float *,
                                          const float *, const float *, int, int);
template void layernorm_backward_cuda<float>(float *, floatX *, float *, float *, const floatX *,
                                             const float *, const float *, const float *,
                                             const float *, int, int);
template void layernorm_backward_cuda<bf16>(float *, floatX *, float *, float *, const floatX *,
                                            const float *, const float *, const float *,
                                            const float *, int, int);
template void layernorm_backward_cuda<f16>(float *, floatX *, float *, float *, const floatX *,
                                           const float *, const float *, const float *,
                                           const float *, int, int);
template void layernorm_backward_onepass_cuda<float>(float *, floatX *, float *, float *,
                                                     const floatX *, const float *,
                                                     const float *, const float *,
                                                     const float *, int, int);
template void layernorm_backward_onepass_cuda<bf16>(float *, floatX *, float *, float *,
                                                    const floatX *, const float *, const float *,
                                                    const float *, const float *, int, int);
template void layernorm_backward_onepass_cuda<f16>(float *, floatX *, float *, float *,
                                                   const floatX *, const float *, const float *,
                                                   const float *, const float *, int, int);
