/* tools/cuda_emu/cuda_emu.h - what the CPU emulators of the hand-written
 * kernels (tools/flash_emu: the flash attention; tools/ln_emu: LayerNorm's
 * one-pass backward) share: stand-ins for CUDA and for cuda_common.cuh
 * (threadIdx, blockIdx, blockDim, gridDim, __syncthreads, __shfl_xor_sync,
 * warp_sum, __fmul_rn, float2/float4, bf16 and half storage with ldx/stx),
 * and a scheduler that runs each block's threads as ucontexts, each until
 * it reaches a barrier (a warp's shuffle is one), blocks one after another
 * from the last.
 * Owns: that scheduler and those stand-ins; two hooks for a tool's own
 * checks (emu_at_thread_end: when a thread ends; emu_at_launch: before a
 * grid's first block).
 * Must not: know any kernel; be built into the product. Include it (C++17)
 * before the kernels' .cuh, which then compiles as host C++. Shared memory:
 * `__shared__` is empty (a tool gives an `extern __shared__` array its
 * storage; one with static __shared__ arrays redefines it as `static`,
 * which is block-wide while blocks run one at a time).
 */
#ifndef VITJOB_CUDA_EMU_H
#define VITJOB_CUDA_EMU_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#define EMU_MAX_THREADS 1024
/* a tool's checks (NULL: none) */
static void (*emu_at_thread_end)(void);
static void (*emu_at_launch)(void);

/* ---- stand-ins for cuda_common.cuh ---- */
#define VITJOB_CUDA_COMMON_CUH /* the real one is skipped */
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

struct bf16 { uint16_t bits; };
struct f16 { uint16_t bits; };
struct uint4 { unsigned x, y, z, w; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
    return uint4{x, y, z, w};
}
struct emu_dim3 { unsigned x, y, z; };
static emu_dim3 emu_tidx, emu_bidx, emu_bdim, emu_gdim;
#define threadIdx emu_tidx
#define blockIdx emu_bidx
#define blockDim emu_bdim
#define gridDim emu_gdim

static inline float bits_to_float(bf16 v)
{
    uint32_t u = (uint32_t)v.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float bits_to_float(f16 v)
{
    _Float16 h;
    memcpy(&h, &v.bits, 2);
    return (float)h;
}
static inline uint16_t to_bits(float f, bf16 *)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (std::isnan(f)) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u); /* nearest even */
    return (uint16_t)(u >> 16);
}
static inline uint16_t to_bits(float f, f16 *)
{
    _Float16 h = (_Float16)f; /* GCC: nearest even */
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}
static inline float ldx(bf16 v) { return bits_to_float(v); }
static inline float ldx(f16 v) { return bits_to_float(v); }
static inline float ldx(float v) { return v; }
/* stx<X>: a float stored as X, rounded to nearest even (cuda_common.cuh's) */
template <typename X> inline X stx(float v);
template <> inline float stx<float>(float v) { return v; }
template <> inline bf16 stx<bf16>(float v) { return bf16{to_bits(v, (bf16 *)0)}; }
template <> inline f16 stx<f16>(float v) { return f16{to_bits(v, (f16 *)0)}; }

/* ---- the scheduler: a block's threads as ucontexts ---- */
struct emu_bar {
    int count, need;
    unsigned gen;
};
struct emu_thread {
    ucontext_t ctx;
    int done;
};
static ucontext_t emu_sched;
static std::vector<emu_thread> emu_threads;
static std::vector<char> emu_stacks;
static int emu_cur;
static emu_bar emu_block_bar, emu_warp_bar[32];
static std::function<void()> emu_body;
static long emu_spins;

static inline void emu_yield(void)
{
    if (++emu_spins > 100000000L) {
        fprintf(stderr, "cuda_emu: deadlock (a barrier some threads never reach)\n");
        exit(3);
    }
    swapcontext(&emu_threads[emu_cur].ctx, &emu_sched);
}
static inline void emu_wait(emu_bar *b)
{
    unsigned g = b->gen;
    if (++b->count == b->need) {
        b->count = 0;
        b->gen++;
        emu_spins = 0;
    } else {
        while (b->gen == g) emu_yield();
    }
}
static inline void __syncthreads(void) { emu_wait(&emu_block_bar); }
/* warps are made of consecutive linear thread ids (x fastest), as on a GPU */
static inline int emu_warp(void) { return emu_cur / 32; }
static inline int emu_lane(void) { return emu_cur % 32; }

static float emu_fx[32][32];
static inline float __shfl_xor_sync(unsigned mask, float v, int o)
{
    (void)mask;
    const int w = emu_warp(), l = emu_lane();
    emu_fx[w][l] = v;
    emu_wait(&emu_warp_bar[w]);
    const float r = emu_fx[w][l ^ o];
    emu_wait(&emu_warp_bar[w]);
    return r;
}
static inline float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static inline float __fmul_rn(float a, float b)
{
    volatile float r = a * b; /* rounded once, never fused */
    return r;
}

/* A kernel's static __shared__ arrays (a tool that defines __shared__ as
 * `static` registers each with emu_shared where the kernel declares it):
 * filled with all ones (NaN as float, bf16 and half) at the start of every
 * block, as a GPU's shared memory holds whatever it held, so that a read
 * of an element no thread of the block wrote shows. */
static std::vector<std::pair<void *, size_t>> emu_shared_arrays;
static inline void emu_shared(void *p, size_t n)
{
    for (const auto &a : emu_shared_arrays)
        if (a.first == p) return;
    emu_shared_arrays.push_back({p, n});
    memset(p, 0xff, n); /* the first block that declares it: its first thread is here first */
}

static inline void emu_entry(void)
{
    emu_body();
    if (emu_at_thread_end) emu_at_thread_end();
    emu_threads[emu_cur].done = 1;
    swapcontext(&emu_threads[emu_cur].ctx, &emu_sched);
}

/* Runs one block (emu_bidx) of emu_body's kernel to completion. */
static __attribute__((noinline)) void emu_run_block(unsigned threads, size_t stack)
{
    if (threads > EMU_MAX_THREADS) {
        fprintf(stderr, "cuda_emu: a block of %u threads (at most %d)\n", threads, EMU_MAX_THREADS);
        exit(3);
    }
    emu_block_bar = emu_bar{0, (int)threads, 0};
    for (int w = 0; w < 32; w++) emu_warp_bar[w] = emu_bar{0, 32, 0};
    for (const auto &a : emu_shared_arrays) memset(a.first, 0xff, a.second);
    /* a tool's own shared memory (flash_emu's fa_smem) keeps what the block
     * before left in it: as undefined as a GPU's, but not poisoned again */
    for (unsigned i = 0; i < threads; i++) {
        emu_thread *t = &emu_threads[i];
        t->done = 0;
        getcontext(&t->ctx);
        t->ctx.uc_stack.ss_sp = &emu_stacks[i * stack];
        t->ctx.uc_stack.ss_size = stack;
        t->ctx.uc_link = NULL;
        makecontext(&t->ctx, emu_entry, 0);
    }
    for (unsigned left = threads; left > 0;) {
        left = 0;
        for (unsigned i = 0; i < threads; i++) {
            if (emu_threads[i].done) continue;
            emu_cur = (int)i;
            emu_tidx = emu_dim3{i % emu_bdim.x, i / emu_bdim.x, 0};
            swapcontext(&emu_sched, &emu_threads[i].ctx);
            if (!emu_threads[i].done) left++;
        }
    }
}

/* Runs kernel(args...) over grid (gx, gy) x blocks of (tx, ty) threads,
 * one block after another: the last block first, so that a block writing
 * into its neighbour's rows is not hidden by the neighbour overwriting
 * them. */
template <typename F, typename... A>
static inline void emu_launch_2d(F kernel, unsigned gx, unsigned gy, unsigned tx, unsigned ty,
                                 A... args)
{
    const size_t stack = 256 * 1024;
    const unsigned threads = tx * ty;
    emu_body = [&]() { kernel(args...); };
    emu_bdim = emu_dim3{tx, ty, 1};
    emu_gdim = emu_dim3{gx, gy, 1};
    emu_threads.assign(threads, emu_thread{});
    emu_stacks.assign(threads * stack, 0);
    if (emu_at_launch) emu_at_launch();
    for (unsigned by = gy; by-- > 0;)
        for (unsigned bx = gx; bx-- > 0;) {
            emu_bidx = emu_dim3{bx, by, 0};
            emu_run_block(threads, stack);
        }
}
/* The same with one-dimensional blocks of `threads` */
template <typename F, typename... A>
static inline void emu_launch(F kernel, unsigned gx, unsigned gy, unsigned threads, A... args)
{
    emu_launch_2d(kernel, gx, gy, threads, 1u, args...);
}

#endif
