/* kernels/attention_scratch.h - the layout of the CUDA attention's scratch
 * (attention.cu): byte offsets of its nine parts and its size, for a given
 * floatX width. Header-only C (and C++), so that the CUDA kernels carve the
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

#endif
