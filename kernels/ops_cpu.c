/* kernels/ops_cpu.c - the CPU backend's op table and thread control.
 * Owns: which function fills each slot of vit_ops for the CPU, in fp32
 * ("cpu"), in bf16-mixed emulation ("cpu-bf16": the same ops, each floatX
 * output rounded to bf16) and in fp16-mixed emulation ("cpu-fp16": rounded
 * to IEEE half), host memory for the ops, and the thread count of
 * OpenBLAS and OpenMP. Must not: contain math beyond those roundings. */
#include "ops.h"
#include "sysres.h"

#include <cblas.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* OpenBLAS's own API (declared in its cblas.h on Debian, repeated here so that
 * a CBLAS without it fails at link time, not silently). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);

const char *ops_cpu_blas(void) { return openblas_get_config(); }

int ops_cpu_set_threads(int n)
{
    if (n <= 0) n = sysres_cpus("", 0, NULL, 0);
    openblas_set_num_threads(n);
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    return n;
}

/* ---- memory: host memory ---- */

/* What the backend holds now and at most (ops_cpu_peak_bytes): the
 * allocator's usable size of each block, counted at alloc and release. */
static size_t live_bytes, peak_bytes;

static void *cpu_alloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) {
        size_t now = __atomic_add_fetch(&live_bytes, malloc_usable_size(p), __ATOMIC_RELAXED);
        size_t was = __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED);
        while (now > was && !__atomic_compare_exchange_n(&peak_bytes, &was, now, 1,
                                                         __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    return p;
}
static void cpu_release(void *p)
{
    if (p) __atomic_sub_fetch(&live_bytes, malloc_usable_size(p), __ATOMIC_RELAXED);
    free(p);
}
size_t ops_cpu_peak_bytes(void) { return __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED); }
size_t ops_cpu_live_bytes(void) { return __atomic_load_n(&live_bytes, __ATOMIC_RELAXED); }
/* The host waits a GPU would make (ops.h: host_waits), counted where the
 * CUDA backend's would be, so that a CPU test holds a step to none. */
static unsigned long waits;
static void waited(void) { __atomic_add_fetch(&waits, 1, __ATOMIC_RELAXED); }
static unsigned long cpu_host_waits(void) { return __atomic_load_n(&waits, __ATOMIC_RELAXED); }

static void *cpu_alloc_counted(size_t bytes)
{
    waited(); /* CUDA's alloc zeroes the memory and waits */
    return cpu_alloc(bytes);
}
static void cpu_release_counted(void *p)
{
    if (p) waited(); /* CUDA's waits for the ops that may still read it */
    cpu_release(p);
}

static void cpu_upload(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src) memcpy(dst, src, bytes);
}
static void cpu_download(void *dst, const void *src, size_t bytes)
{
    waited();
    if (bytes && dst != src) memcpy(dst, src, bytes);
}

/* host memory is the ops' memory: nothing to page-lock; pin notes the range
 * (and host_alloc its own) so that download_async waits where CUDA's would */
#define MAX_PINNED 32
static struct {
    const char *p;
    size_t bytes;
} pinned[MAX_PINNED];

static int note_pinned(const void *host, size_t bytes)
{
    for (int i = 0; i < MAX_PINNED; i++) {
        if (pinned[i].p) continue;
        pinned[i].p = (const char *)host;
        pinned[i].bytes = bytes;
        return 0;
    }
    return 1;
}
static void forget_pinned(const void *host)
{
    for (int i = 0; i < MAX_PINNED; i++)
        if (host && pinned[i].p == host) pinned[i].p = NULL;
}
static int is_pinned(const void *host, size_t bytes)
{
    const char *h = (const char *)host;
    for (int i = 0; i < MAX_PINNED; i++)
        if (pinned[i].p && h >= pinned[i].p && bytes <= pinned[i].bytes &&
            (size_t)(h - pinned[i].p) <= pinned[i].bytes - bytes)
            return 1;
    return 0;
}
static int cpu_pin(void *host, size_t bytes)
{
    if (!host || bytes == 0) return 1;
    return note_pinned(host, bytes);
}
static void cpu_unpin(void *host)
{
    for (int i = 0; i < MAX_PINNED; i++) {
        if (!host || pinned[i].p != host) continue; /* as CUDA's: the range pin took */
        waited(); /* CUDA's waits for the DMAs that may still read it */
        pinned[i].p = NULL;
        return;
    }
}
static void *cpu_host_alloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (p && note_pinned(p, bytes ? bytes : 1) != 0) {
        free(p);
        return NULL;
    }
    return p;
}
static void cpu_host_free(void *host)
{
    forget_pinned(host);
    free(host);
}
static void cpu_download_async(void *dst, const void *src, size_t bytes)
{
    if (!is_pinned(dst, bytes ? bytes : 1)) waited();
    if (bytes && dst != src) memcpy(dst, src, bytes);
}
static void cpu_wait_host(const void *host) { (void)host; }
/* ops run when called: the batch is copied in its place, read before now */
static void cpu_consumed(const void *dst) { (void)dst; }
static int cpu_status(char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    return 0; /* the CPU ops cannot fail */
}
static void cpu_synchronize(void) { waited(); }
static double cpu_sum_squares(const float *g, size_t n)
{
    waited(); /* CUDA's returns the sum to the host */
    return sum_squares_cpu(g, n);
}

/* ---- bf16-mixed and fp16-mixed emulation: every floatX output rounded
 * where the GPU stores bf16 or half (inputs already are: they were outputs,
 * or the rounded copy of the weights); inside the attention, P and dS too
 * (attention.c's rounding hook, ops.h's attention precision). LOWP(pfx,
 * RND) makes the wrappers of one storage type. ---- */

#define LOWP(pfx, RND)                                                                        \
    static void pfx##_patchify(float *patches, const float *img, int B, int C, int S, int P)    \
    {                                                                                           \
        patchify_cpu(patches, img, B, C, S, P);                                                 \
        RND(patches, patches, (size_t)B * (S / P) * (S / P) * C * P * P);                     \
    }                                                                                           \
    static void pfx##_matmul_forward(float *out, const float *inp, const float *w,             \
                                     const float *bias, int N, int IC, int OC)                  \
    {                                                                                           \
        matmul_forward_cpu(out, inp, w, bias, N, IC, OC);                                       \
        RND(out, out, (size_t)N * OC);                                                        \
    }                                                                                           \
    static void pfx##_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,  \
                                      const float *inp, const float *w, int N, int IC, int OC)  \
    {                                                                                           \
        matmul_backward_cpu(dinp, dw, dbias, dout, inp, w, N, IC, OC);                          \
        if (dinp) RND(dinp, dinp, (size_t)N * IC);                                            \
    }                                                                                           \
    static void pfx##_embed_backward(float *dpatch_out, float *dcls, float *dpos,              \
                                     const float *dx, int B, int T, int D)                      \
    {                                                                                           \
        embed_backward_cpu(dpatch_out, dcls, dpos, dx, B, T, D);                                \
        RND(dpatch_out, dpatch_out, (size_t)B * (T - 1) * D);                                 \
    }                                                                                           \
    static void pfx##_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, \
                                        const float *w, const float *b, int N, int C)          \
    {                                                                                           \
        layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C);                                \
        RND(out, out, (size_t)N * C);                                                         \
    }                                                                                           \
    static void pfx##_layernorm_backward(float *dinp, float *dinp_x, float *dw, float *db,     \
                                         const float *dout, const float *inp, const float *w,   \
                                         const float *mean, const float *rstd, int N, int C)    \
    {                                                                                           \
        layernorm_backward_cpu(dinp, dinp_x, dw, db, dout, inp, w, mean, rstd, N, C);           \
        if (dinp_x) RND(dinp_x, dinp_x, (size_t)N * C);                                       \
    }                                                                                           \
    static void pfx##_attention_forward(float *out, float *lse, void *scratch, const float *qkv,\
                                        int B, int T, int D, int NH)                            \
    {                                                                                           \
        attention_forward_cpu_lowp(out, lse, scratch, qkv, B, T, D, NH, RND);                   \
        RND(out, out, (size_t)B * T * D);                                                     \
    }                                                                                           \
    static void pfx##_attention_backward(float *dqkv, void *scratch, const float *dout,        \
                                         const float *qkv, const float *out, const float *lse,  \
                                         int B, int T, int D, int NH)                           \
    {                                                                                           \
        attention_backward_cpu_lowp(dqkv, scratch, dout, qkv, out, lse, B, T, D, NH, RND);      \
        RND(dqkv, dqkv, (size_t)B * T * 3 * D);                                               \
    }                                                                                           \
    static void pfx##_gelu_forward(float *out, const float *inp, size_t n)                     \
    {                                                                                           \
        gelu_forward_cpu(out, inp, n);                                                          \
        RND(out, out, n);                                                                     \
    }                                                                                           \
    static void pfx##_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)\
    {                                                                                           \
        gelu_backward_cpu(dinp, inp, dout, n);                                                  \
        RND(dinp, dinp, n);                                                                   \
    }                                                                                           \
    static void pfx##_crossentropy_backward(float *dlogits, const float *probs,                \
                                            const int *targets, float dloss, int B, int K)      \
    {                                                                                           \
        crossentropy_backward_cpu(dlogits, probs, targets, dloss, B, K);                        \
        RND(dlogits, dlogits, (size_t)B * K);                                                 \
    }                                                                                           \
    static void pfx##_crossentropy_soft_backward(float *dlogits, const float *probs,           \
                                                 const float *targets, float dloss, int B,      \
                                                 int K)                                         \
    {                                                                                           \
        crossentropy_soft_backward_cpu(dlogits, probs, targets, dloss, B, K);                   \
        RND(dlogits, dlogits, (size_t)B * K);                                                 \
    }                                                                                           \
    static void pfx##_droppath_backward(float *dbranch, const float *dout, const float *scale, \
                                        int B, size_t n)                                        \
    {                                                                                           \
        droppath_backward_cpu(dbranch, dout, scale, B, n);                                      \
        RND(dbranch, dbranch, (size_t)B * n);                                                 \
    }                                                                                           \
    static void pfx##_adamw_update(float *p, float *p_lp, float *m, float *v, const float *g,  \
                                   size_t n, float lr, float beta1, float beta2, float eps,     \
                                   float weight_decay, long t)                                  \
    {                                                                                           \
        adamw_update_cpu(p, p_lp, m, v, g, n, lr, beta1, beta2, eps, weight_decay, t);          \
        if (p_lp) RND(p_lp, p_lp, n);                                                         \
    }                                                                                           \
    static void pfx##_adamw_multi(float *p, float *m, float *v, const float *g,                \
                                  const adamw_piece *pieces, int np, size_t total, double lr,   \
                                  float unscale, const double *norm_sq, double grad_clip,       \
                                  float beta1, float beta2, float eps, long t)                  \
    {                                                                                           \
        const float clip = norm_sq ? adamw_clip_factor(*norm_sq, unscale, grad_clip) : 1.0f;    \
        adamw_multi_cpu(p, m, v, g, pieces, np, total, lr, unscale, clip, beta1, beta2, eps, t, \
                        RND);                                                                   \
    }

/* The fp32 table's adamw_multi: p_lp holds the fp32 value. */
static void cpu_adamw_multi(float *p, float *m, float *v, const float *g,
                            const adamw_piece *pieces, int np, size_t total, double lr,
                            float unscale, const double *norm_sq, double grad_clip, float beta1,
                            float beta2, float eps, long t)
{
    const float clip = norm_sq ? adamw_clip_factor(*norm_sq, unscale, grad_clip) : 1.0f;
    adamw_multi_cpu(p, m, v, g, pieces, np, total, lr, unscale, clip, beta1, beta2, eps, t, NULL);
}

LOWP(bf, round_bf16_cpu)
LOWP(hf, round_fp16_cpu)

/* The slots of a low-precision table: pfx's wrappers. */
#define LOWP_SLOTS(pfx, RND)                                          \
    .patchify = pfx##_patchify, .matmul_forward = pfx##_matmul_forward, \
    .matmul_backward = pfx##_matmul_backward,                           \
    .embed_backward = pfx##_embed_backward,                             \
    .layernorm_forward = pfx##_layernorm_forward,                       \
    .layernorm_backward = pfx##_layernorm_backward,                     \
    .attention_forward = pfx##_attention_forward,                       \
    .attention_backward = pfx##_attention_backward,                     \
    .gelu_forward = pfx##_gelu_forward, .gelu_backward = pfx##_gelu_backward, \
    .to_floatx = RND,                                                 \
    .crossentropy_backward = pfx##_crossentropy_backward,               \
    .crossentropy_soft_backward = pfx##_crossentropy_soft_backward,     \
    .droppath_backward = pfx##_droppath_backward,                       \
    .adamw_update = pfx##_adamw_update, .adamw_multi = pfx##_adamw_multi

#define CPU_COMMON                                        \
    .alloc = cpu_alloc_counted, .release = cpu_release_counted,\
    .upload = cpu_upload, .download = cpu_download,       \
    .pin = cpu_pin, .unpin = cpu_unpin,                   \
    .host_alloc = cpu_host_alloc, .host_free = cpu_host_free, \
    .download_async = cpu_download_async,                 \
    .wait_host = cpu_wait_host, .host_waits = cpu_host_waits, \
    .upload_ahead = cpu_upload, .consumed = cpu_consumed,     \
    .status = cpu_status, .synchronize = cpu_synchronize, \
    .attention_scratch_bytes = ops_cpu_attention_scratch_bytes, \
    .matmul_forward_residual = matmul_forward_residual_cpu, \
    .embed_forward = embed_forward_cpu,                   \
    .zero = zero_cpu,                                     \
    .to_float = copy_cpu,                                 \
    .gather_cls = gather_cls_cpu,                         \
    .scatter_cls_backward = scatter_cls_backward_cpu,     \
    .crossentropy_forward = crossentropy_forward_cpu,     \
    .crossentropy_soft_forward = crossentropy_soft_forward_cpu, \
    .droppath_forward = droppath_forward_cpu,             \
    .sum_squares = cpu_sum_squares,                       \
    .sum_squares_into = sum_squares_into_cpu,             \
    .scale = scale_cpu,                                   \
    .copy = copy_cpu,                                     \
    .add = add_cpu,                                       \
    .ema_update = ema_update_cpu,                         \
    .swap = swap_cpu

static const vit_ops cpu_ops = {
    .name = "cpu",
    .gpu = 0,
    .bf16 = 0,
    .floatx_bytes = sizeof(float),
    CPU_COMMON,
    .patchify = patchify_cpu,
    .matmul_forward = matmul_forward_cpu,
    .matmul_backward = matmul_backward_cpu,
    .embed_backward = embed_backward_cpu,
    .layernorm_forward = layernorm_forward_cpu,
    .layernorm_backward = layernorm_backward_cpu,
    .attention_forward = attention_forward_cpu,
    .attention_backward = attention_backward_cpu,
    .gelu_forward = gelu_forward_cpu,
    .gelu_backward = gelu_backward_cpu,
    .to_floatx = copy_cpu,
    .crossentropy_backward = crossentropy_backward_cpu,
    .crossentropy_soft_backward = crossentropy_soft_backward_cpu,
    .droppath_backward = droppath_backward_cpu,
    .adamw_update = adamw_update_cpu,
    .adamw_multi = cpu_adamw_multi,
};

static const vit_ops cpu_bf16_ops = {
    .name = "cpu-bf16",
    .gpu = 0,
    .bf16 = 1,
    .floatx_bytes = sizeof(float), /* fp32 storage holding bf16 values */
    CPU_COMMON,
    LOWP_SLOTS(bf, round_bf16_cpu),
};

static const vit_ops cpu_fp16_ops = {
    .name = "cpu-fp16",
    .gpu = 0,
    .bf16 = 1, /* 16-bit floatX */
    .fp16 = 1,
    .floatx_bytes = sizeof(float), /* fp32 storage holding half values */
    CPU_COMMON,
    LOWP_SLOTS(hf, round_fp16_cpu),
};

const vit_ops *ops_cpu(void) { return &cpu_ops; }
const vit_ops *ops_cpu_bf16(void) { return &cpu_bf16_ops; }
const vit_ops *ops_cpu_fp16(void) { return &cpu_fp16_ops; }
