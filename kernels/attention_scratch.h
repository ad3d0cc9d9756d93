/* kernels/attention_scratch.h - the CUDA attention's scratch: which path
 * runs (flash or unfused, attention.cu), the unfused path's layout (byte
 * offsets of its nine parts) and either path's size, for a given floatX
 * width. Header-only C (and C++), so that the CUDA kernels carve the
 * scratch with it and the planner (worker/plan/plan_memory.c) sizes a GPU
 * run's scratch without loading the CUDA backend: one formula for both.
 * Must not: allocate, or include anything beyond <stddef.h>.
 */
#ifndef VITJOB_ATTENTION_SCRATCH_H
#define VITJOB_ATTENTION_SCRATCH_H

#include <stddef.h>

static inline size_t att_scratch_align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* off[0..8]: q, k, v, y/dy (B,T,D floatX each), s32 (B,NH,T,T fp32: the
 * scores, then dP), sX (B,NH,T,T floatX: P, then dS), dq, dk, dv; returns
 * the total bytes (xbytes: one floatX element). 0 for non-positive shapes.
 * The probabilities live here only during a call: what the forward keeps
 * is out and lse (ops.h), the caller's. */
static inline size_t att_scratch_layout(size_t off[9], int B, int T, int D, int NH,
                                        size_t xbytes)
{
    for (int i = 0; i < 9; i++) off[i] = 0;
    if (B <= 0 || T <= 0 || D <= 0 || NH <= 0) return 0;
    const size_t E = (size_t)B * T * D;              /* = B*NH*T*hd */
    const size_t S = (size_t)B * NH * T * (size_t)T; /* B*NH*T*T */
    const size_t ex = att_scratch_align256(E * xbytes);
    size_t at = 0;
    off[0] = at, at += ex;                                      /* q */
    off[1] = at, at += ex;                                      /* k */
    off[2] = at, at += ex;                                      /* v */
    off[3] = at, at += ex;                                      /* y / dy */
    off[4] = at, at += att_scratch_align256(S * sizeof(float)); /* s32 */
    off[5] = at, at += att_scratch_align256(S * xbytes);        /* sX */
    off[6] = at, at += ex;                                      /* dq */
    off[7] = at, at += ex;                                      /* dk */
    off[8] = at, at += ex;                                      /* dv */
    return at;
}

/* Whether the CUDA attention runs the flash kernels (flash_attention.cu)
 * for head dim hd and floatX elements of xbytes bytes: 16-bit floatX
 * (bf16- and fp16-mixed), hd a multiple of 8 in [32, 128]. The backend
 * also needs a GPU of compute capability 8.0 or newer (mma.sync on bf16);
 * below it the unfused path runs, and the planner, which assumes one, plans
 * too little scratch (no such GPU runs bf16-mixed; fp16-mixed on a T4 would
 * take the unfused path's size from the backend itself). */
static inline int att_flash_head_dim(int hd, size_t xbytes)
{
    return xbytes == 2 && hd >= 32 && hd <= 128 && hd % 8 == 0;
}

/* The flash path's scratch: the backward's D_i = dout_i . out_i, one fp32
 * per row (B,NH,T); the forward needs none. */
static inline size_t att_flash_scratch_bytes(int B, int T, int NH)
{
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    return att_scratch_align256((size_t)B * NH * T * sizeof(float));
}

/* The fused backward's parts of dQ (flash_attention.cuh, the
 * OPS_CANDIDATE_KERNELS tables): one fp32 (T x hd) part per K/V tile of 64
 * keys, per head, for the heads of one launch: nkt * T * hd * 4 bytes a
 * head, which grows as T^2. A launch takes the heads whose parts fit in
 * ATT_FUSED_PART_BYTES; where those make fewer than ATT_FUSED_MIN_BLOCKS
 * blocks (a few waves on an H100's 132 SMs at 3 blocks each, so that a
 * launch's last wave is a small part of it), more, up to that many blocks
 * or ATT_FUSED_PART_MAX bytes, whichever comes first; always at least one
 * head and at most all B*NH. The launches reuse the parts one after
 * another. vit_b16 b128 (T 197, hd 64): 512 heads, 99.7 MiB; T 577: 181
 * heads, 256 MiB; T 4096 (64 MiB a head): 4 heads. att_flash_fused_heads: the
 * heads a launch takes (0 for non-positive shapes). */
#define ATT_FUSED_PART_BYTES ((size_t)64 << 20)
#define ATT_FUSED_PART_MAX ((size_t)256 << 20)
#define ATT_FUSED_MIN_BLOCKS 2048
/* One head's parts: its K/V tiles of 64 keys, times T x hd floats. */
static inline size_t att_flash_fused_head_bytes(int T, int hd)
{
    return ((size_t)T + 63) / 64 * (size_t)T * (size_t)hd * sizeof(float);
}
static inline int att_flash_fused_heads(int B, int T, int D, int NH)
{
    if (B <= 0 || T <= 0 || D <= 0 || NH <= 0 || D % NH != 0) return 0;
    const size_t nkt = ((size_t)T + 63) / 64, per = att_flash_fused_head_bytes(T, D / NH);
    const size_t all = (size_t)B * NH;
    size_t n = ATT_FUSED_PART_BYTES / per;
    const size_t least = (ATT_FUSED_MIN_BLOCKS + nkt - 1) / nkt;
    if (n < least) {
        n = least;
        if (n * per > ATT_FUSED_PART_MAX) n = ATT_FUSED_PART_MAX / per;
    }
    if (n < 1) n = 1;
    if (n > all) n = all;
    return (int)n;
}
/* Its scratch: the D_i of att_flash_scratch_bytes, then the parts (at
 * att_flash_scratch_bytes' offset, 256-byte aligned). */
static inline size_t att_flash_fused_scratch_bytes(int B, int T, int D, int NH)
{
    const int heads = att_flash_fused_heads(B, T, D, NH);
    if (heads <= 0) return 0;
    return att_flash_scratch_bytes(B, T, NH) +
           att_scratch_align256((size_t)heads * att_flash_fused_head_bytes(T, D / NH));
}

/* The CUDA backend's attention_scratch_bytes on a GPU of compute capability
 * 8.0+: the flash path's where it runs, the unfused layout's elsewhere. */
static inline size_t att_scratch_bytes(int B, int T, int D, int NH, size_t xbytes)
{
    size_t off[9];
    if (B <= 0 || T <= 0 || D <= 0 || NH <= 0) return 0;
    if (D % NH == 0 && att_flash_head_dim(D / NH, xbytes))
        return att_flash_scratch_bytes(B, T, NH);
    return att_scratch_layout(off, B, T, D, NH, xbytes);
}

#endif
