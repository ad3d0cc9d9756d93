/* kernels/flash_attention.cuh - the flash-attention kernels (FlashAttention-2
 * tiling on tensor cores), device code only; launched by
 * kernels/flash_attention.cu.
 *
 * Owns: the forward (one pass over K/V per query tile, online softmax, out
 * and the row log-sum-exp written straight into (B,T,D) and (B,NH,T)), and
 * the backward's three kernels: D_i = dout_i . out_i per row; dK and dV per
 * K/V tile looping over the query tiles; dQ per query tile looping over the
 * K/V tiles (each output element is written once, by one thread: no atomics,
 * the same bits on every run); and the fused backward, for the A/B against
 * those two (the dK/dV kernel with DQ_PARTS: one pass per K/V tile making
 * dK, dV and each query tile's part of dQ; a kernel that adds the parts in
 * a fixed order). All of
 * them read q, k, v in place from the
 * qkv activation (B,T,3D) by stride and write dq, dk, dv straight into
 * dqkv (B,T,3D), head h at columns h*hd of each third (ops.h's layout).
 * X is bf16 or f16 (the 16-bit floatX of bf16- and fp16-mixed); every
 * product is an mma.sync m16n8k16 with fp32 accumulation; softmax math and
 * the statistics are fp32.
 * Must not: allocate, launch, or include anything beyond cuda_common.cuh
 * (tools/flash_emu runs these kernels on the CPU with its own stand-in for
 * cuda_common.cuh and for the hardware primitives fa_mma, fa_pack, fa_ldsm
 * and fa_ldsm_t,
 * so everything else here must be plain CUDA C++ that also compiles as
 * host C++).
 *
 * Shapes: hd = D/NH a multiple of 8 in [8, 128]; HDP = hd rounded up to 16
 * (the k-step of the mma): Q, K, V and dO tiles sit in shared memory as
 * 64 x HDP with columns hd..HDP zero, so a head dim of 80 or 72 runs as 80,
 * and results are stored for columns < hd only. T is anything >= 1: rows
 * of a tile at or past T are loaded as zeros and never stored; keys at or
 * past T get probability 0.
 *
 * Work split (every kernel): 4 warps, 128 threads, a tile of 64 rows (query
 * rows or keys) per block, 16 per warp. A warp's 16 x 64 block of scores
 * lives in registers as 8 mma accumulators of 16 x 8: s[n][0..3] holds rows
 * (g, g, g+8, g+8) and columns n*8 + 2*t4 + (0, 1, 0, 1), g = lane/4,
 * t4 = lane%4 (the PTX fragment layout of m16n8k16's C). The same registers
 * are the A operand of the next product (P V, dS K, ...), packed to X two
 * columns at a time: A's k-step kk takes column blocks 2kk and 2kk+1.
 *
 * Pipeline (every kernel's loop over the tiles it streams: K/V, or Q/dO
 * with their rows' lse and D): two shared-memory buffers per streamed
 * tile. Iteration i waits for tile i's copies, meets the others at one
 * barrier (tile i is then in shared memory for every warp, and every warp
 * is done with tile i-1), starts tile i+1's copies into the buffers tile
 * i-1 used, and computes on tile i while they fly. ASYNC (what the tables
 * run) copies with cp.async, global to shared memory without a register
 * in between; !ASYNC (ops_cuda's OPS_FLASH_SYNC_LOADS table, for the
 * benchmark and the tests) copies through registers before the compute,
 * as the kernels did before the pipeline. Both do the same arithmetic on
 * the same values: the same bits.
 */
#ifndef VITJOB_FLASH_ATTENTION_CUH
#define VITJOB_FLASH_ATTENTION_CUH

#include "cuda_common.cuh"

#define FA_ROWS 64                /* rows of a tile: queries or keys */
#define FA_WARPS 4                /* 16 rows of the tile each */
#define FA_THREADS (32 * FA_WARPS)
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

/* Blocks per SM each kernel is compiled to fit in registers at HDP 64 (the
 * head dim of ViT-Ti to ViT-L), the second argument of __launch_bounds__
 * (at most 65536 / (128 x n) registers a thread): the occupancy each had
 * before the pipeline (ptxas: the forward 121 registers, 4 blocks; dK/dV
 * 156, 3; dQ 128, 4), which the pipeline's addressing would otherwise
 * cost (dK/dV 191: 2 blocks; dQ 156: 3). Now 127, 159 and 128, no spills.
 * Other head dims: 0, ptxas's choice. */
template <int HDP> struct fa_fit {
    static const int FORWARD = HDP == 64 ? 4 : 0, DKDV = HDP == 64 ? 3 : 0,
                     DQ = HDP == 64 ? 4 : 0;
};

/* Shared-memory row stride (elements) of a 64 x HDP tile: 8 elements (16
 * bytes) more than HDP, so that the 8 rows a fragment load touches start in
 * 8 different bank quads (conflict-free 32-bit fragment loads). */
template <int HDP> struct fa_tile {
    static const int LD = HDP + 8;
    static const int ELEMS = FA_ROWS * LD;
};

/* ------------------------------------------------------------------------ */
/* The hardware primitives (tools/flash_emu supplies its own).              */

#ifndef FA_EMU
/* c (16x8 fp32) += a (16x16 X, row-major) . b (16x8 X, column-major): one
 * warp-wide mma.sync m16n8k16. Fragments as PTX lays them out: with
 * g = lane/4, t4 = lane%4, a[0] = A[g][2t4..2t4+1], a[1] = A[g+8][2t4..],
 * a[2] = A[g][2t4+8..], a[3] = A[g+8][2t4+8..]; b[0] = B[2t4..2t4+1][g],
 * b[1] = B[2t4+8..2t4+9][g]; c = C[g][2t4], C[g][2t4+1], C[g+8][2t4],
 * C[g+8][2t4+1]. In each 32-bit register the lower 16 bits hold the
 * element with the smaller k. */
template <typename X>
__device__ __forceinline__ void fa_mma(float c[4], const uint32_t a[4], const uint32_t b[2]);
template <>
__device__ __forceinline__ void fa_mma<bf16>(float c[4], const uint32_t a[4], const uint32_t b[2])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)c, (void)a, (void)b;
    __trap(); /* attention.cu dispatches here only on sm_80 and newer */
#endif
}
template <>
__device__ __forceinline__ void fa_mma<f16>(float c[4], const uint32_t a[4], const uint32_t b[2])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)c, (void)a, (void)b;
    __trap();
#endif
}

/* Two fp32 values rounded to X (nearest even), lo in the lower 16 bits. */
template <typename X> __device__ __forceinline__ uint32_t fa_pack(float lo, float hi);
template <> __device__ __forceinline__ uint32_t fa_pack<bf16>(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x = lo: the lower address */
    return *(uint32_t *)&v;
}
template <> __device__ __forceinline__ uint32_t fa_pack<f16>(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* Four 8 x 8 matrices of 16-bit elements from shared memory in one
 * warp-wide ldmatrix: lane L gives the address of row L%8 of matrix L/8
 * (16-byte aligned). fa_ldsm: r[i] of lane L holds matrix i's elements
 * (L/4, 2(L%4)) in the lower and (L/4, 2(L%4)+1) in the upper 16 bits, the
 * layout of an mma fragment register; fa_ldsm_t (.trans) holds the
 * transpose's: (2(L%4), L/4) lower, (2(L%4)+1, L/4) upper. */
template <bool TRANS> __device__ __forceinline__ void fa_ldsm_x4(uint32_t r[4], const void *row)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
#define FA_LDSM(OP)                                                    \
    asm volatile(OP " {%0,%1,%2,%3}, [%4];\n"                          \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) \
                 : "r"(a)                                              \
                 : "memory")
    if constexpr (TRANS)
        FA_LDSM("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16");
    else
        FA_LDSM("ldmatrix.sync.aligned.m8n8.x4.shared.b16");
#undef FA_LDSM
#else
    (void)r, (void)row;
    __trap();
#endif
}
__device__ __forceinline__ void fa_ldsm(uint32_t r[4], const void *row) { fa_ldsm_x4<false>(r, row); }
__device__ __forceinline__ void fa_ldsm_t(uint32_t r[4], const void *row) { fa_ldsm_x4<true>(r, row); }

/* 16 bytes from global memory (src, 16-byte aligned) to shared memory
 * (dst, 16-byte aligned), queued: cp.async.cg (through L2 only, no
 * register). They are there once this thread's fa_cp_wait_all returns,
 * and for the other threads of the block after a barrier that follows it. */
__device__ __forceinline__ void fa_cp16(void *dst, const void *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src) : "memory");
#else
    (void)dst, (void)src;
    __trap();
#endif
}
/* The same for 4 bytes (cp.async.ca: the 16-byte .cg takes no less). */
__device__ __forceinline__ void fa_cp4(void *dst, const void *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(a), "l"(src) : "memory");
#else
    (void)dst, (void)src;
    __trap();
#endif
}
/* Waits for every fa_cp16 and fa_cp4 this thread has queued. */
__device__ __forceinline__ void fa_cp_wait_all(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#else
    __trap();
#endif
}
#endif /* FA_EMU */

/* ------------------------------------------------------------------------ */
/* Shared-memory tiles and fragments.                                       */

/* dst (64 x HDP, row stride LD) = rows r0..r0+63 of one head's (T x hd)
 * matrix src (row t at src + t*ld) - a Q, K, V or dO tile from global to
 * shared memory; rows >= T and columns >= hd are zero. Copied in 16-byte
 * chunks of 8 elements (hd, ld and src's offset are multiples of 8
 * elements and the buffers 16-byte aligned: flash_attention.cu checks).
 * All FA_THREADS threads of the block take part, thread i copying chunks
 * i, i + FA_THREADS, ... in row-major order (HDP/8 chunks a row), so that
 * neighbouring threads read neighbouring 16 bytes of a row. ASYNC: the
 * real chunks with fa_cp16 (the caller waits with fa_cp_wait_all), the
 * zeros stored at once; else every chunk through a register. No barrier:
 * the caller syncs before the tile is read. */
template <typename X, int HDP, bool ASYNC>
__device__ __forceinline__ void fa_load_tile(X *dst, const X *src, size_t ld, int r0, int T,
                                             int hd)
{
    const int LD = fa_tile<HDP>::LD, CH = HDP / 8; /* 8-element chunks per row */
    for (int i = threadIdx.x; i < FA_ROWS * CH; i += FA_THREADS) {
        const int r = i / CH, c = (i % CH) * 8;
        X *d = dst + r * LD + c;
        if (r0 + r < T && c < hd) {
            const X *from = src + (size_t)(r0 + r) * ld + c;
            if constexpr (ASYNC)
                fa_cp16(d, from);
            else
                *(uint4 *)d = *(const uint4 *)from;
        } else {
            *(uint4 *)d = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

/* The lse (natural log, as the forward wrote it) and D of query rows
 * q0..q0+63 into shared memory (64 floats each), rows past T as lse
 * +inf, D 0 (so P = 0 there); threads 0..63 one row each, ASYNC as
 * fa_load_tile. */
template <bool ASYNC>
__device__ __forceinline__ void fa_load_rows(float *slse, float *sd, const float *lseh,
                                             const float *dh, int q0, int T)
{
    const int r = threadIdx.x;
    if (r >= FA_ROWS) return;
    if (q0 + r < T) {
        if constexpr (ASYNC) {
            fa_cp4(slse + r, lseh + q0 + r);
            fa_cp4(sd + r, dh + q0 + r);
        } else {
            slse[r] = lseh[q0 + r];
            sd[r] = dh[q0 + r];
        }
    } else {
        slse[r] = INFINITY;
        sd[r] = 0.0f;
    }
}

/* The barrier at the top of a pipelined loop (the comment at the top):
 * this thread's copies are in, then every thread's are. */
template <bool ASYNC> __device__ __forceinline__ void fa_tile_barrier(void)
{
    if constexpr (ASYNC) fa_cp_wait_all();
    __syncthreads();
}

/* Row stride (elements) of the fused backward's dS^T tile (64 keys x 64
 * queries in shared memory): 8 more than 64, as fa_tile's. */
#define FA_DS_LD (FA_ROWS + 8)

/* A fragment (16 x 16) of the row-major matrix m (row stride ld): rows
 * r0..r0+15, columns c0..c0+15; one ldmatrix: matrix i (lanes 8i..8i+7)
 * is rows r0 + 8(i%2).., columns c0 + 8(i/2).., a[i] in the mma's order. */
template <typename X>
__device__ __forceinline__ void fa_frag_a(uint32_t a[4], const X *m, int ld, int r0, int c0)
{
    const int lane = threadIdx.x & 31, i = lane >> 3, j = lane & 7;
    fa_ldsm(a, m + (r0 + j + 8 * (i & 1)) * ld + c0 + 8 * (i >> 1));
}

/* The A fragment (16 x 16) of the transpose of the row-major matrix m (row
 * stride ld): A[i][j] = m[k0 + j][r0 + i] (A's rows are m's columns r0..,
 * A's k m's rows k0..). One ldmatrix.trans: matrix i is m's rows
 * k0 + 8(i/2).., columns r0 + 8(i%2).., its transpose a[i] in the mma's
 * order. */
template <typename X>
__device__ __forceinline__ void fa_frag_a_t(uint32_t a[4], const X *m, int ld, int k0, int r0)
{
    const int lane = threadIdx.x & 31, i = lane >> 3, j = lane & 7;
    fa_ldsm_t(a, m + (k0 + j + 8 * (i >> 1)) * ld + r0 + 8 * (i & 1));
}

/* Two B fragments (16 x 8 each) with B[k][n] = m[n0+n][k0+k]: B is the
 * transpose of rows n0..n0+7 (b0) and n0+8..n0+15 (b1) of m (row stride
 * ld), k along m's rows (K in Q K^T). One ldmatrix: matrix i is rows
 * n0 + 8(i/2).., columns k0 + 8(i%2).., already in B's register layout. */
template <typename X>
__device__ __forceinline__ void fa_frag_b_t2(uint32_t b0[2], uint32_t b1[2], const X *m, int ld,
                                             int n0, int k0)
{
    const int lane = threadIdx.x & 31, i = lane >> 3, j = lane & 7;
    uint32_t r[4];
    fa_ldsm(r, m + (n0 + j + 8 * (i >> 1)) * ld + k0 + 8 * (i & 1));
    b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}

/* Two B fragments (16 x 8 each) with B[k][n] = m[k0+k][n0+n]: rows
 * k0..k0+15 of m, columns n0..n0+7 (b0) and n0+8..n0+15 (b1) (V in P V).
 * One ldmatrix.trans: matrix i is rows k0 + 8(i%2).., columns n0 + 8(i/2)..;
 * the transpose puts the pair (k, k+1) of one column in one register. */
template <typename X>
__device__ __forceinline__ void fa_frag_b2(uint32_t b0[2], uint32_t b1[2], const X *m, int ld,
                                           int k0, int n0)
{
    const int lane = threadIdx.x & 31, i = lane >> 3, j = lane & 7;
    uint32_t r[4];
    fa_ldsm_t(r, m + (k0 + j + 8 * (i & 1)) * ld + n0 + 8 * (i >> 1));
    b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}

/* The A fragment of k-step kk (columns 16kk..16kk+15) of a warp's 16 x 64
 * accumulator block s (layout at the top), rounded to X. */
template <typename X>
__device__ __forceinline__ void fa_acc_to_a(uint32_t a[4], const float (*s)[4], int kk)
{
    a[0] = fa_pack<X>(s[2 * kk][0], s[2 * kk][1]);
    a[1] = fa_pack<X>(s[2 * kk][2], s[2 * kk][3]);
    a[2] = fa_pack<X>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = fa_pack<X>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

/* acc[0..N-1][0..3] = 0: a warp's N accumulator blocks of 16 x 8. */
template <int N> __device__ __forceinline__ void fa_zero(float (*acc)[4])
{
#pragma unroll
    for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

/* acc (16 x 64: 8 blocks of 16 x 8) = rows r0..r0+15 of a (row-major, HDP
 * columns) times the transpose of b's 64 rows: acc[i][j] = a_i . b_j over
 * the padded head dim. Both tiles in shared memory with row stride LD.
 * Only b's first lim rows are real (the rest are past T): column blocks
 * from lim on are left at 0 (pairs of blocks: a pair that starts below lim
 * is computed whole). */
template <typename X, int HDP>
__device__ __forceinline__ void fa_rows_dot_rows(float (*acc)[4], const X *a_tile, int r0,
                                                 const X *b_tile, int lim)
{
    const int LD = fa_tile<HDP>::LD;
    fa_zero<FA_ROWS / 8>(acc);
#pragma unroll
    for (int kk = 0; kk < HDP / 16; kk++) {
        uint32_t a[4];
        fa_frag_a(a, a_tile, LD, r0, kk * 16);
#pragma unroll
        for (int n = 0; n < FA_ROWS / 8; n += 2) {
            if (n * 8 >= lim) break; /* warp-uniform */
            uint32_t b0[2], b1[2];
            fa_frag_b_t2(b0, b1, b_tile, LD, n * 8, kk * 16);
            fa_mma<X>(acc[n], a, b0);
            fa_mma<X>(acc[n + 1], a, b1);
        }
    }
}

/* out (16 x HDP: HDP/8 blocks of 16 x 8) += p (a warp's 16 x 64 block in
 * registers, rounded to X) times the tile m (64 x HDP, shared memory).
 * Only m's first lim rows are real: the k-steps from lim on are skipped
 * (p is 0 there). */
template <typename X, int HDP>
__device__ __forceinline__ void fa_acc_times_tile(float (*out)[4], const float (*p)[4],
                                                  const X *m, int lim)
{
    const int LD = fa_tile<HDP>::LD;
#pragma unroll
    for (int kk = 0; kk < FA_ROWS / 16; kk++) {
        if (kk * 16 >= lim) break; /* warp-uniform */
        uint32_t a[4];
        fa_acc_to_a<X>(a, p, kk);
#pragma unroll
        for (int d = 0; d < HDP / 8; d += 2) { /* HDP / 8 is even */
            uint32_t b0[2], b1[2];
            fa_frag_b2(b0, b1, m, LD, kk * 16, d * 8);
            fa_mma<X>(out[d], a, b0);
            fa_mma<X>(out[d + 1], a, b1);
        }
    }
}

/* Row r (0..15) of a warp's 16-row block: the global row index of this
 * lane's row half (0: row g, 1: row g+8), and the row's local tile row. */
static __device__ __forceinline__ int fa_row(int half)
{
    return (threadIdx.x >> 5) * 16 + ((threadIdx.x & 31) >> 2) + 8 * half;
}
/* Column of element c (0..3) of accumulator block n. */
static __device__ __forceinline__ int fa_col(int n, int c)
{
    return n * 8 + 2 * (threadIdx.x & 3) + (c & 1);
}

/* Stores a warp's 16 x HDP accumulator acc, times mul, as X into the rows
 * r0 + fa_row(.) < T of dst (row t at dst + t*ld), columns < hd. */
template <typename X, int HDP>
__device__ __forceinline__ void fa_store_rows(X *dst, size_t ld, const float (*acc)[4], int r0,
                                              int T, int hd, const float mul[2])
{
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = r0 + fa_row(half);
        if (row >= T) continue;
        X *o = dst + (size_t)row * ld;
#pragma unroll
        for (int d = 0; d < HDP / 8; d++)
            if (d * 8 < hd)
                *(uint32_t *)(o + fa_col(d, 0)) =
                    fa_pack<X>(acc[d][2 * half] * mul[half], acc[d][2 * half + 1] * mul[half]);
    }
}

/* ------------------------------------------------------------------------ */
/* Forward.                                                                 */

/* Block (bh, qt): head bh = b*NH + h, query rows qt*64... Q tile loaded
 * once; for each K/V tile (pipelined, two buffers each): S = Q K^T (fp32),
 * scaled to log2 units, keys past T at -inf; the running row max m and sum
 * l (each lane sums its own columns; the 4 lanes of a row agree on m, so
 * their partial sums add up at the end); O = O * exp2(m_old - m_new) + P V
 * with P rounded to X. At the end O / l into out, and lse = (m + log2 l)
 * ln 2 (natural log, as ops.h). Every K/V tile has a key < T (tiles cover
 * 0..T-1), so m is finite after the first tile and exp2(-inf - m) = 0
 * never meets -inf - -inf. */
template <typename X, int HDP, bool ASYNC>
__global__ void __launch_bounds__(FA_THREADS, fa_fit<HDP>::FORWARD)
    flash_forward_kernel(X *out, float *lse, const X *qkv, int T, int NH, int hd,
                         float scale_log2)
{
    extern __shared__ __align__(16) unsigned char fa_smem[];
    const int NS = FA_ROWS / 8, ND = HDP / 8, E = fa_tile<HDP>::ELEMS;
    /* Q, then K's two buffers, then V's: buffer i of K at sk + i * E */
    X *sq = (X *)fa_smem, *sk = sq + E, *sv = sq + 3 * E;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, q0 = blockIdx.y * FA_ROWS;
    const int D = NH * hd, r0 = (threadIdx.x >> 5) * 16;
    const size_t ld = 3 * (size_t)D;
    const X *qh = qkv + (size_t)b * T * ld + (size_t)h * hd, *kh = qh + D, *vh = qh + 2 * D;

    fa_load_tile<X, HDP, ASYNC>(sq, qh, ld, q0, T, hd);
    fa_load_tile<X, HDP, ASYNC>(sk, kh, ld, 0, T, hd);
    fa_load_tile<X, HDP, ASYNC>(sv, vh, ld, 0, T, hd);
    float o[ND][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    fa_zero<ND>(o);

    /* a warp whose 16 rows are all past T (the last tile at T = 197: three
     * of four) loads and syncs with the others but computes nothing */
    const bool busy = q0 + r0 < T;
    for (int k0 = 0, i = 0; k0 < T; k0 += FA_ROWS, i ^= 1) {
        fa_tile_barrier<ASYNC>();
        if (k0 + FA_ROWS < T) { /* the next K, V into the buffers the last one used */
            fa_load_tile<X, HDP, ASYNC>(sk + (i ^ 1) * E, kh, ld, k0 + FA_ROWS, T, hd);
            fa_load_tile<X, HDP, ASYNC>(sv + (i ^ 1) * E, vh, ld, k0 + FA_ROWS, T, hd);
        }
        if (!busy) continue;
        const int kv = T - k0; /* real keys in this tile (all 64 but in the last) */

        /* S (16 x 64) = Q_w K^T */
        float s[NS][4];
        fa_rows_dot_rows<X, HDP>(s, sq, r0, sk + i * E, kv);

        /* to log2 units, mask keys past T, the new row max (over the quad) */
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const float v = k0 + fa_col(n, c) < T ? s[n][c] * scale_log2 : -INFINITY;
                s[n][c] = v;
                mx[c >> 1] = fmaxf(mx[c >> 1], v);
            }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            corr[r] = exp2f(m[r] - mx[r]); /* 0 on the first tile */
            m[r] = mx[r];
            l[r] *= corr[r];
        }

        /* P = exp2(S - m), this lane's part of the row sums; rescale O */
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                s[n][c] = exp2f(s[n][c] - m[c >> 1]);
                l[c >> 1] += s[n][c];
            }
#pragma unroll
        for (int d = 0; d < ND; d++)
#pragma unroll
            for (int c = 0; c < 4; c++) o[d][c] *= corr[c >> 1];

        /* O += P V */
        fa_acc_times_tile<X, HDP>(o, s, sv + i * E, kv);
    }

    /* the row sums over the quad; out = O / l, lse */
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.0f / l[r];
        const int row = q0 + fa_row(r);
        if (row < T && (threadIdx.x & 3) == 0)
            lse[(size_t)bh * T + row] = (m[r] + log2f(l[r])) * FA_LN2;
    }
    fa_store_rows<X, HDP>(out + (size_t)b * T * D + (size_t)h * hd, D, o, q0, T, hd, inv);
}

/* ------------------------------------------------------------------------ */
/* Backward.                                                                */

/* dvec[(b*NH + h)*T + t] = sum_e dout[b,t,h*hd+e] out[b,t,h*hd+e], fp32:
 * FlashAttention-2's D_i = rowsum(dO * O). One warp per row, a fixed
 * shuffle tree. */
template <typename X>
__global__ void flash_backward_dot_kernel(float *dvec, const X *dout, const X *out, int B, int T,
                                          int NH, int hd)
{
    const size_t rows = (size_t)B * NH * T;
    const size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return; /* warp-uniform */
    const size_t t = row % T, bh = row / T, h = bh % NH, b = bh / NH;
    const size_t at = (b * T + t) * (size_t)NH * hd + h * hd;
    float d = 0.0f;
    for (int e = lane; e < hd; e += 32) d += ldx(dout[at + e]) * ldx(out[at + e]);
    d = warp_sum(d);
    if (lane == 0) dvec[row] = d;
}

/* The fused backward's (DQ_PARTS) part of dQ for a warp's 16 query rows
 * q0 + r0.. of one query tile: dS (16 queries x the keys < kv of the tile,
 * from the dS^T tile sds by ldmatrix.trans; the k-steps of warps whose
 * keys are all past T, which wrote no rows, are skipped) times the K tile
 * sk (row stride LD), stored as fp32 into this block's part (T x hd), rows
 * < T and columns < hd, two columns a store (8-byte aligned: hd and the
 * column are even, the part's start a multiple of 8 floats). */
template <typename X, int HDP>
__device__ __forceinline__ void fa_dq_part(float *mine, const X *sds, const X *sk, int r0, int q0,
                                           int kv, int T, int hd, int LD)
{
    const int ND = HDP / 8;
    float dq[ND][4];
    fa_zero<ND>(dq);
#pragma unroll
    for (int kk = 0; kk < FA_ROWS / 16; kk++) {
        if (kk * 16 >= kv) break; /* block-uniform */
        uint32_t a[4];
        fa_frag_a_t(a, sds, FA_DS_LD, kk * 16, r0);
#pragma unroll
        for (int d = 0; d < ND; d += 2) {
            uint32_t b0[2], b1[2];
            fa_frag_b2(b0, b1, sk, LD, kk * 16, d * 8);
            fa_mma<X>(dq[d], a, b0);
            fa_mma<X>(dq[d + 1], a, b1);
        }
    }
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = q0 + fa_row(half);
        if (row >= T) continue;
        float *o = mine + (size_t)row * hd;
#pragma unroll
        for (int d = 0; d < ND; d++)
            if (d * 8 < hd)
                *(float2 *)(o + fa_col(d, 0)) = make_float2(dq[d][2 * half], dq[d][2 * half + 1]);
    }
}

/* Block (bh0 + x, kt): keys kt*64.., each warp 16 of them. K, V tiles
 * loaded once; for each query tile (pipelined: Q, dO, and the rows' lse and
 * D in two buffers each of shared memory; rows past T get lse = +inf, so
 * P = 0 there):
 *   S^T (16 keys x 64 queries) = K_w Q^T;  P^T = exp2(S^T scale log2e - lse log2e)
 *   dV_w += P^T dO                         (P^T rounded to X)
 *   dP^T = V_w dO^T;  dS^T = P^T (dP^T - D)  (fp32 P)
 *   dK_w += dS^T Q                         (dS^T rounded to X)
 * then dK * scale and dV into dqkv's k and v thirds, keys < T only. The
 * scores of keys past T (zero rows of K) only reach those keys' own rows.
 * lse is in natural-log units in shared memory (the copy is raw), taken
 * to log2 units where P is made.
 *
 * DQ_PARTS (the fused backward of ops_cuda's OPS_CANDIDATE_KERNELS tables;
 * the trainer's tables run this kernel without it and the dQ kernel
 * below): S and dP are then computed once where the two kernels compute
 * them twice. Per query tile, after dK_w += dS^T Q, dS^T rounded to X goes
 * into one more shared-memory tile (64 keys x 64 queries; keys past T as
 * 0: their rows of K are zero, but their P is not, and is inf where lse <
 * -88), a barrier, then each warp its 16 query rows: dQ_part = dS K over
 * the keys < T (ldmatrix.trans of dS^T, K's tile as B), stored as fp32
 * into part[(x * gridDim.y + kt) * T * hd + t * hd + d], rows < T, cols
 * < hd. No atomics: flash_backward_dq_sum_kernel adds a head's parts in kt
 * order. The barrier at the loop's top keeps the next tile's dS^T from
 * landing before every warp has read this one's. dK and dV are the same
 * arithmetic either way: the same bits. Without DQ_PARTS, part is unused
 * and bh0 is 0. */
template <typename X, int HDP, bool ASYNC, bool DQ_PARTS>
__global__ void __launch_bounds__(FA_THREADS, fa_fit<HDP>::DKDV)
    flash_backward_dkdv_kernel(X *dqkv, float *part, const X *qkv, const X *dout,
                               const float *lse, const float *dvec, int bh0, int T, int NH,
                               int hd, float scale, float scale_log2)
{
    extern __shared__ __align__(16) unsigned char fa_smem[];
    const int NS = FA_ROWS / 8, ND = HDP / 8, E = fa_tile<HDP>::ELEMS, LD = fa_tile<HDP>::LD;
    /* K, V, then Q's two buffers, dO's, [DQ_PARTS: dS^T,] lse's and D's
     * (64 floats each): buffer i of Q at sq + i * E, of lse at slse + i *
     * FA_ROWS */
    X *sk = (X *)fa_smem, *sv = sk + E, *sq = sv + E, *sdo = sv + 3 * E, *sds = sv + 5 * E;
    float *slse = (float *)(sds + (DQ_PARTS ? FA_ROWS * FA_DS_LD : 0)), *sd = slse + 2 * FA_ROWS;
    const int bh = bh0 + blockIdx.x, b = bh / NH, h = bh % NH, k0 = blockIdx.y * FA_ROWS;
    const int D = NH * hd, r0 = (threadIdx.x >> 5) * 16;
    const size_t ld = 3 * (size_t)D;
    const X *qh = qkv + (size_t)b * T * ld + (size_t)h * hd, *kh = qh + D, *vh = qh + 2 * D;
    const X *doh = dout + (size_t)b * T * D + (size_t)h * hd;
    const float *lseh = lse + (size_t)bh * T, *dh = dvec + (size_t)bh * T;

    fa_load_tile<X, HDP, ASYNC>(sk, kh, ld, k0, T, hd);
    fa_load_tile<X, HDP, ASYNC>(sv, vh, ld, k0, T, hd);
    fa_load_tile<X, HDP, ASYNC>(sq, qh, ld, 0, T, hd);
    fa_load_tile<X, HDP, ASYNC>(sdo, doh, D, 0, T, hd);
    fa_load_rows<ASYNC>(slse, sd, lseh, dh, 0, T);
    float dk[ND][4], dv[ND][4];
    fa_zero<ND>(dk);
    fa_zero<ND>(dv);

    const int kv = T - k0;         /* real keys in this tile */
    const bool busy = k0 + r0 < T; /* some of this warp's 16 keys are real */
    for (int q0 = 0, i = 0; q0 < T; q0 += FA_ROWS, i ^= 1) {
        fa_tile_barrier<ASYNC>();
        const int qn = q0 + FA_ROWS; /* the next tile's first row */
        if (qn < T) { /* the next Q, dO, lse, D into the buffers the last one used */
            fa_load_tile<X, HDP, ASYNC>(sq + (i ^ 1) * E, qh, ld, qn, T, hd);
            fa_load_tile<X, HDP, ASYNC>(sdo + (i ^ 1) * E, doh, D, qn, T, hd);
            fa_load_rows<ASYNC>(slse + (i ^ 1) * FA_ROWS, sd + (i ^ 1) * FA_ROWS, lseh, dh, qn,
                                T);
        }
        const int qv = T - q0; /* real queries in this tile */
        if (busy) {
            const float *tl = slse + i * FA_ROWS, *td = sd + i * FA_ROWS;

            /* P^T (16 keys x 64 queries); queries past T: lse +inf, P 0 */
            float p[NS][4];
            fa_rows_dot_rows<X, HDP>(p, sk, r0, sq + i * E, qv);
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    p[n][c] = exp2f(p[n][c] * scale_log2 - __fmul_rn(tl[fa_col(n, c)], FA_LOG2E));

            /* dV_w += P^T dO */
            fa_acc_times_tile<X, HDP>(dv, p, sdo + i * E, qv);

            /* dS^T = P^T (V_w dO^T - D) */
            float ds[NS][4];
            fa_rows_dot_rows<X, HDP>(ds, sv, r0, sdo + i * E, qv);
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int c = 0; c < 4; c++) ds[n][c] = p[n][c] * (ds[n][c] - td[fa_col(n, c)]);

            /* dK_w += dS^T Q */
            fa_acc_times_tile<X, HDP>(dk, ds, sq + i * E, qv);

            if constexpr (DQ_PARTS) { /* dS^T into shared memory, two queries a word */
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int key = fa_row(half);
                    const bool real = k0 + key < T;
#pragma unroll
                    for (int n = 0; n < NS; n++)
                        *(uint32_t *)(sds + key * FA_DS_LD + fa_col(n, 0)) =
                            real ? fa_pack<X>(ds[n][2 * half], ds[n][2 * half + 1]) : 0u;
                }
            }
        }
        if constexpr (DQ_PARTS) {
            __syncthreads(); /* every warp's rows of dS^T are in */
            if (q0 + r0 < T) /* some of this warp's 16 query rows are real */
                fa_dq_part<X, HDP>(part + ((size_t)blockIdx.x * gridDim.y + blockIdx.y) *
                                              (size_t)T * hd,
                                   sds, sk, r0, q0, kv, T, hd, LD);
        }
    }

    const float one[2] = {1.0f, 1.0f}, sc[2] = {scale, scale};
    fa_store_rows<X, HDP>(dqkv + (size_t)b * T * ld + (size_t)h * hd + D, ld, dk, k0, T, hd, sc);
    fa_store_rows<X, HDP>(dqkv + (size_t)b * T * ld + (size_t)h * hd + 2 * D, ld, dv, k0, T, hd,
                          one);
}

/* Block (bh, qt): query rows qt*64.., each warp 16 of them. Q and dO tiles
 * loaded once, this lane's two rows' lse and D in registers; for each K/V
 * tile (pipelined, two buffers each):
 *   S = Q_w K^T;  P = exp2(S scale log2e - lse log2e), 0 for keys past T
 *   dS = P (dO_w V^T - D)
 *   dQ_w += dS K   (dS rounded to X)
 * then dQ * scale into dqkv's q third, rows < T only. The recomputation of
 * S and dP that the dK/dV kernel also does is the price of no atomics. */
template <typename X, int HDP, bool ASYNC>
__global__ void __launch_bounds__(FA_THREADS, fa_fit<HDP>::DQ)
    flash_backward_dq_kernel(X *dqkv, const X *qkv, const X *dout, const float *lse,
                             const float *dvec, int T, int NH, int hd, float scale,
                             float scale_log2)
{
    extern __shared__ __align__(16) unsigned char fa_smem[];
    const int NS = FA_ROWS / 8, ND = HDP / 8, E = fa_tile<HDP>::ELEMS;
    /* Q, dO, then K's two buffers and V's: buffer i of K at sk + i * E */
    X *sq = (X *)fa_smem, *sdo = sq + E, *sk = sq + 2 * E, *sv = sq + 4 * E;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, q0 = blockIdx.y * FA_ROWS;
    const int D = NH * hd, r0 = (threadIdx.x >> 5) * 16;
    const size_t ld = 3 * (size_t)D;
    const X *qh = qkv + (size_t)b * T * ld + (size_t)h * hd, *kh = qh + D, *vh = qh + 2 * D;
    const X *doh = dout + (size_t)b * T * D + (size_t)h * hd;

    fa_load_tile<X, HDP, ASYNC>(sq, qh, ld, q0, T, hd);
    fa_load_tile<X, HDP, ASYNC>(sdo, doh, D, q0, T, hd);
    fa_load_tile<X, HDP, ASYNC>(sk, kh, ld, 0, T, hd);
    fa_load_tile<X, HDP, ASYNC>(sv, vh, ld, 0, T, hd);
    float lse2[2], drow[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = q0 + fa_row(r);
        lse2[r] = row < T ? lse[(size_t)bh * T + row] * FA_LOG2E : INFINITY;
        drow[r] = row < T ? dvec[(size_t)bh * T + row] : 0.0f;
    }
    float dq[ND][4];
    fa_zero<ND>(dq);

    const bool busy = q0 + r0 < T; /* some of this warp's 16 rows are real */
    for (int k0 = 0, i = 0; k0 < T; k0 += FA_ROWS, i ^= 1) {
        fa_tile_barrier<ASYNC>();
        if (k0 + FA_ROWS < T) { /* the next K, V into the buffers the last one used */
            fa_load_tile<X, HDP, ASYNC>(sk + (i ^ 1) * E, kh, ld, k0 + FA_ROWS, T, hd);
            fa_load_tile<X, HDP, ASYNC>(sv + (i ^ 1) * E, vh, ld, k0 + FA_ROWS, T, hd);
        }
        if (!busy) continue;
        const int kv = T - k0; /* real keys in this tile */

        /* P (16 x 64) */
        float p[NS][4];
        fa_rows_dot_rows<X, HDP>(p, sq, r0, sk + i * E, kv);
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                p[n][c] = k0 + fa_col(n, c) < T
                              ? exp2f(p[n][c] * scale_log2 - lse2[c >> 1])
                              : 0.0f;

        /* dS = P (dO_w V^T - D) */
        float ds[NS][4];
        fa_rows_dot_rows<X, HDP>(ds, sdo, r0, sv + i * E, kv);
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int c = 0; c < 4; c++) ds[n][c] = p[n][c] * (ds[n][c] - drow[c >> 1]);

        /* dQ_w += dS K */
        fa_acc_times_tile<X, HDP>(dq, ds, sk + i * E, kv);
    }

    const float sc[2] = {scale, scale};
    fa_store_rows<X, HDP>(dqkv + (size_t)b * T * ld + (size_t)h * hd, ld, dq, q0, T, hd, sc);
}

/* dQ of heads bh0 .. bh0 + heads - 1 from the fused kernel's parts:
 * dq[b,t,h*hd+d] (dqkv's q third) = X(scale * sum over kt = 0..nkt-1 of
 * part[(x * nkt + kt) * T * hd + t * hd + d]), in kt order, fp32: the same
 * bits on every run. One thread per two neighbouring elements. */
template <typename X>
__global__ void flash_backward_dq_sum_kernel(X *dqkv, const float *part, int bh0, int heads,
                                             int nkt, int T, int NH, int hd, float scale)
{
    const size_t per = (size_t)T * hd, pairs = (size_t)heads * per / 2;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < pairs;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t x = 2 * i / per, e = 2 * i % per;
        const float *src = part + x * nkt * per + e;
        float s0 = 0.0f, s1 = 0.0f;
        for (int kt = 0; kt < nkt; kt++) {
            const float2 v = *(const float2 *)(src + (size_t)kt * per);
            s0 += v.x;
            s1 += v.y;
        }
        const int bh = bh0 + (int)x, b = bh / NH, h = bh % NH, t = (int)(e / hd),
                  d = (int)(e % hd);
        X *o = dqkv + ((size_t)b * T + t) * 3 * (size_t)NH * hd + (size_t)h * hd + d;
        *(uint32_t *)o = fa_pack<X>(s0 * scale, s1 * scale);
    }
}

#endif
