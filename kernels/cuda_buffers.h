/* kernels/cuda_buffers.h - the sizes of the CUDA backend's own buffers,
 * beside the model's: cuBLASLt's workspace and the one shared scratch
 * (cuda_scratch: at least 1 MiB, grown to the largest ask) that the bias
 * gradients' column sums (matmul.cu), LayerNorm's dw/db partials
 * (layernorm.cu) and the gradient norm's partials (global_norm.cu) borrow.
 * Header-only C (and C++), so that the kernels size their asks with it and
 * the planner (worker/plan/plan_memory.c) counts these bytes without loading
 * the CUDA backend: one formula for both, as attention_scratch.h is for the
 * attention's scratch.
 * Must not: allocate, or include anything beyond <stddef.h>.
 */
#ifndef VITJOB_CUDA_BUFFERS_H
#define VITJOB_CUDA_BUFFERS_H

#include <stddef.h>

/* cuBLASLt's workspace: what its heuristics ask for on sm_90 at ViT sizes. */
#define CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20)
/* the shared scratch is never smaller than this */
#define CUDA_SCRATCH_MIN_BYTES ((size_t)1 << 20)

/* column sums: row chunks of at least COLSUM_MIN_ROWS, at most COLSUM_MAX_CHUNKS */
#define COLSUM_MAX_CHUNKS 256
#define COLSUM_MIN_ROWS 32
/* LayerNorm's backward: at most LN_MAX_CHUNKS row chunks of dw/db partials */
#define LN_MAX_CHUNKS 256
/* the sum of squares: one double per block, and the total */
#define SS_BLOCKS 512

/* The chunks a column sum of N rows takes (0 for N <= 0). */
static inline int cuda_colsum_chunks(int N)
{
    if (N <= 0) return 0;
    int G = N / COLSUM_MIN_ROWS + (N % COLSUM_MIN_ROWS != 0);
    return G > COLSUM_MAX_CHUNKS ? COLSUM_MAX_CHUNKS : G;
}
/* scratch bytes of a column sum of an (N, C) fp32 result */
static inline size_t cuda_colsum_scratch_bytes(int N, int C)
{
    return C > 0 ? (size_t)cuda_colsum_chunks(N) * (size_t)C * sizeof(float) : 0;
}
/* LayerNorm's backward over N rows: rows per chunk, and chunks */
static inline int cuda_ln_rows_per_chunk(int N) { return (N - 1) / LN_MAX_CHUNKS + 1; }
static inline int cuda_ln_chunks(int N) { return N > 0 ? (N - 1) / cuda_ln_rows_per_chunk(N) + 1 : 0; }
/* scratch bytes of LayerNorm's backward on (N, C): dw and db partials */
static inline size_t cuda_ln_scratch_bytes(int N, int C)
{
    return C > 0 ? sizeof(float) * 2 * (size_t)cuda_ln_chunks(N) * (size_t)C : 0;
}
/* LayerNorm's one-pass backward (the candidate, layernorm.cu): 8 warps a
 * block, each warp LN1_MIN_ROWS_PER_WARP rows or more, so that there are at
 * most LN1_MAX_BLOCKS blocks, each writing one dw and one db partial row */
#define LN1_WARPS 8
#define LN1_MIN_ROWS_PER_WARP 4
#define LN1_MAX_BLOCKS 1024
static inline int cuda_ln1_rows_per_warp(int N)
{
    const int per_block = LN1_WARPS * LN1_MAX_BLOCKS;
    const int r = N > 0 ? (N - 1) / per_block + 1 : 1;
    return r > LN1_MIN_ROWS_PER_WARP ? r : LN1_MIN_ROWS_PER_WARP;
}
static inline int cuda_ln1_blocks(int N)
{
    const int rows = LN1_WARPS * cuda_ln1_rows_per_warp(N);
    return N > 0 ? (N - 1) / rows + 1 : 0;
}
/* scratch bytes of the one-pass backward on (N, C): each block's dw and db partials */
static inline size_t cuda_ln1_scratch_bytes(int N, int C)
{
    return C > 0 ? sizeof(float) * 2 * (size_t)cuda_ln1_blocks(N) * (size_t)C : 0;
}
/* scratch bytes of the sum of squares */
static inline size_t cuda_ss_scratch_bytes(void) { return sizeof(double) * (SS_BLOCKS + 1); }
/* what cuda_scratch holds after an ask of `bytes` */
static inline size_t cuda_scratch_size(size_t bytes)
{
    return bytes < CUDA_SCRATCH_MIN_BYTES ? CUDA_SCRATCH_MIN_BYTES : bytes;
}

#endif
