/* kernels/cuda_common.cuh - what every CUDA kernel file shares.
 *
 * Owns: the backend's one context (stream, cuBLAS/cuBLASLt handles, the
 * workspace, the sticky error), the error-recording wrappers around
 * CUDA_CHECK / CUBLAS_CHECK (lib/check.h), the floatX element types (float
 * for the fp32 backend, __nv_bfloat16 for bf16-mixed) with their load/store
 * helpers, and the declarations of every CUDA op (templates on the element
 * type X, instantiated for both in their own .cu file).
 * Must not: hold tensors or know about the model; an op's buffers all come
 * from its caller, and only the workspace below is the backend's own.
 *
 * Errors: an op returns void, so a failing CUDA/cuBLAS call is recorded in
 * the context (file, line, the library's message) and every later op does
 * nothing; the caller reads it through vit_ops.status and stops.
 */
#ifndef VITJOB_CUDA_COMMON_CUH
#define VITJOB_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "check.h"
#include "ops.h"
}

typedef __nv_bfloat16 bf16;
typedef __half f16;

struct cuda_ctx {
    int device, sm_count;
    int cc_major, cc_minor;    /* the GPU's compute capability */
    int smem_optin;            /* shared memory a block may ask for, bytes */
    cudaStream_t stream;       /* every op runs on it, in order */
    cublasHandle_t blas;       /* batched GEMMs (attention) */
    cublasLtHandle_t lt;       /* linear layers */
    void *lt_workspace;        /* cuBLASLt's workspace, fixed size */
    size_t lt_workspace_bytes;
    void *scratch;             /* reduction partials etc., see cuda_scratch */
    size_t scratch_bytes;
    unsigned long waits;       /* host waits for the stream (ops.h: host_waits) */
    int failed;                /* sticky: the first error is in err */
    char err[512];
};
extern cuda_ctx g_cuda;

/* The host waits for every op queued on the stream, counted (ops.h:
 * host_waits); the check's result. */
int cuda_wait_stream(void);
/* Records a non-zero check result (the first one wins); returns rc. */
int cuda_note(int rc);
/* Wrap a cudaError_t / cublasStatus_t expression: records a failure in
 * g_cuda and evaluates to non-zero on failure. */
#define CU_ERRBUF (g_cuda.failed ? NULL : g_cuda.err), (g_cuda.failed ? 0 : sizeof g_cuda.err)
#define CU_APPLY(macro, ...) macro(__VA_ARGS__)
#define CU_TRY(expr) cuda_note(CU_APPLY(CUDA_CHECK, expr, CU_ERRBUF))
#define CUBLAS_TRY(expr) cuda_note(CU_APPLY(CUBLAS_CHECK, expr, CU_ERRBUF))
/* After a kernel launch: records a launch error. */
#define CU_LAUNCHED() CU_TRY(cudaGetLastError())
/* At the top of every op: do nothing once the backend has failed. */
#define CU_GUARD()                 \
    do {                           \
        if (g_cuda.failed) return; \
    } while (0)

/* Device scratch of at least `bytes`, the backend's own (for reduction
 * partials). Grown (synchronously) the first time a larger size is asked
 * for, so a training loop allocates it once; NULL with the error recorded
 * when out of memory. Valid until the next cuda_scratch call: an op uses it
 * within its own kernels only. */
void *cuda_scratch(size_t bytes);

/* Whether p is aligned to `bytes` (a power of two): the vector paths'
 * check on their pointers. */
static inline int cuda_aligned(const void *p, size_t bytes)
{
    return ((uintptr_t)p & (uintptr_t)(bytes - 1)) == 0;
}

/* Blocks for a grid-stride kernel over n elements. */
static inline unsigned cuda_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    size_t cap = (size_t)(g_cuda.sm_count > 0 ? g_cuda.sm_count : 80) * 32;
    return (unsigned)(b < 1 ? 1 : (b > cap ? cap : b));
}

/* Element types: X is float (fp32 backend), bf16 (bf16-mixed) or f16
 * (fp16-mixed, IEEE half). Loads give fp32; stores round to nearest even
 * (half: overflow to infinity, subnormals kept, as round_fp16_cpu). */
__device__ __forceinline__ float ldx(float v) { return v; }
__device__ __forceinline__ float ldx(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ldx(f16 v) { return __half2float(v); }
template <typename X> __device__ __forceinline__ X stx(float v);
template <> __device__ __forceinline__ float stx<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 stx<bf16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ f16 stx<f16>(float v) { return __float2half_rn(v); }

/* cuda data types of an element type, for cuBLAS. */
template <typename X> struct cuda_type;
template <> struct cuda_type<float> { static const cudaDataType_t value = CUDA_R_32F; };
template <> struct cuda_type<bf16> { static const cudaDataType_t value = CUDA_R_16BF; };
template <> struct cuda_type<f16> { static const cudaDataType_t value = CUDA_R_16F; };

/* Warp-level sums (fixed shuffle tree: deterministic). */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- the CUDA ops: same names and argument order as the CPU ones (ops.h);
 * floatX arguments hold X elements. Each is instantiated for X = float,
 * X = bf16 and X = f16 in its own file. ---- */

/* patch_embed.cu */
template <typename X>
void patchify_cuda(floatX *patches, const float *img, int B, int C, int S, int P);
/* matmul.cu (cuBLASLt) */
template <typename X>
void matmul_forward_cuda(floatX *out, const floatX *inp, const floatX *w, const floatX *bias,
                         int N, int IC, int OC);
template <typename X>
void matmul_forward_residual_cuda(float *out, const floatX *inp, const floatX *w,
                                  const float *bias, const float *res, int N, int IC, int OC);
template <typename X>
void matmul_backward_cuda(floatX *dinp, float *dw, float *dbias, const floatX *dout,
                          const floatX *inp, const floatX *w, int N, int IC, int OC);
/* The same with dbias from the dW product's BGRADB epilogue where cuBLASLt
 * has an algorithm for it (OPS_CANDIDATE_KERNELS' tables) */
template <typename X>
void matmul_backward_bgradb_cuda(floatX *dinp, float *dw, float *dbias, const floatX *dout,
                                 const floatX *inp, const floatX *w, int N, int IC, int OC);
/* embed.cu */
template <typename X>
void embed_forward_cuda(float *x, const floatX *patch_out, const float *cls, const float *pos,
                        int B, int T, int D);
template <typename X>
void embed_backward_cuda(floatX *dpatch_out, float *dcls, float *dpos, const float *dx, int B,
                         int T, int D);
void gather_cls_cuda(float *out, const float *x, int B, int T, int D);
void scatter_cls_backward_cuda(float *dx, const float *dcls, int B, int T, int D);
/* layernorm.cu */
template <typename X>
void layernorm_forward_cuda(floatX *out, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, int N, int C);
template <typename X>
void layernorm_backward_cuda(float *dinp, floatX *dinp_x, float *dw, float *db,
                             const floatX *dout, const float *inp, const float *w,
                             const float *mean, const float *rstd, int N, int C);
/* The same in one pass over dout and inp (OPS_CANDIDATE_KERNELS' tables),
 * where the register kernels apply; elsewhere the above */
template <typename X>
void layernorm_backward_onepass_cuda(float *dinp, floatX *dinp_x, float *dw, float *db,
                                     const floatX *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int N, int C);
/* attention.cu: the flash kernels where they run (16-bit floatX, hd in
 * 32..128 a multiple of 8, sm_80+), else the unfused path (cuBLAS
 * strided-batched GEMMs + softmax kernels); the _unfused functions always
 * take the unfused path (the tables ops_cuda gives for
 * OPS_UNFUSED_ATTENTION: tests and benchmarks). */
template <typename X> size_t attention_scratch_bytes_cuda(int B, int T, int D, int NH);
template <typename X>
void attention_forward_cuda(floatX *out, float *lse, void *scratch, const floatX *qkv, int B,
                            int T, int D, int NH);
template <typename X>
void attention_backward_cuda(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                             const floatX *out, const float *lse, int B, int T, int D, int NH);
/* OPS_FLASH_SYNC_LOADS's: the flash kernels with their tiles copied through
 * registers (else the same as the two above) */
template <typename X> size_t attention_scratch_bytes_flash_sync_cuda(int B, int T, int D, int NH);
template <typename X>
void attention_forward_flash_sync_cuda(floatX *out, float *lse, void *scratch, const floatX *qkv,
                                       int B, int T, int D, int NH);
template <typename X>
void attention_backward_flash_sync_cuda(floatX *dqkv, void *scratch, const floatX *dout,
                                        const floatX *qkv, const floatX *out, const float *lse,
                                        int B, int T, int D, int NH);
/* OPS_CANDIDATE_KERNELS': the flash forward and the fused backward
 * (its scratch holds dQ's parts; else the same as the first three) */
template <typename X> size_t attention_scratch_bytes_flash_fused_cuda(int B, int T, int D, int NH);
template <typename X>
void attention_forward_flash_fused_cuda(floatX *out, float *lse, void *scratch,
                                        const floatX *qkv, int B, int T, int D, int NH);
template <typename X>
void attention_backward_flash_fused_cuda(floatX *dqkv, void *scratch, const floatX *dout,
                                         const floatX *qkv, const floatX *out, const float *lse,
                                         int B, int T, int D, int NH);
template <typename X> size_t attention_scratch_bytes_unfused_cuda(int B, int T, int D, int NH);
template <typename X>
void attention_forward_unfused_cuda(floatX *out, float *lse, void *scratch, const floatX *qkv,
                                    int B, int T, int D, int NH);
template <typename X>
void attention_backward_unfused_cuda(floatX *dqkv, void *scratch, const floatX *dout,
                                     const floatX *qkv, const floatX *out, const float *lse, int B,
                                     int T, int D, int NH);
/* flash_attention.cu (X = bf16 or f16; attention.cu checks the shape):
 * the forward writes out and lse; the backward overwrites dqkv, with dvec
 * (B*NH*T floats) its own scratch for D_i. ASYNC: the tiles copied with
 * cp.async (what the tables run); false: through registers (the same bits;
 * OPS_FLASH_SYNC_LOADS). */
/* The most dynamic shared memory the flash kernels ask for at head dim hd
 * (0: no kernel for hd); attention.cu takes the unfused path where the GPU
 * gives a block less (sm_86/89 give 99 KiB: hd 113..128 needs 103 KiB). */
size_t flash_attention_smem_bytes(int hd);
template <typename X, bool ASYNC>
void flash_attention_forward_cuda(X *out, float *lse, const X *qkv, int B, int T, int D, int NH);
template <typename X, bool ASYNC>
void flash_attention_backward_cuda(X *dqkv, float *dvec, const X *dout, const X *qkv,
                                   const X *out, const float *lse, int B, int T, int D, int NH);
/* The fused backward (OPS_CANDIDATE_KERNELS): overwrites dqkv as the one
 * above; scratch is attention_scratch.h's att_flash_fused_scratch_bytes
 * (the D_i, then dQ's parts). flash_attention_fused_smem_bytes: its
 * kernel's dynamic shared memory at head dim hd (0: no kernel for hd). */
size_t flash_attention_fused_smem_bytes(int hd);
template <typename X>
void flash_attention_backward_fused_cuda(X *dqkv, float *scratch, const X *dout, const X *qkv,
                                         const X *out, const float *lse, int B, int T, int D,
                                         int NH);
/* gelu.cu */
template <typename X> void gelu_forward_cuda(floatX *out, const floatX *inp, size_t n);
template <typename X>
void gelu_backward_cuda(floatX *dinp, const floatX *inp, const floatX *dout, size_t n);
/* bf16.cu: conversions, zero and copy */
void zero_cuda(float *x, size_t n);
void copy_cuda(float *dst, const float *src, size_t n);
template <typename X> void to_floatx_cuda(floatX *out, const float *in, size_t n);
template <typename X> void to_float_cuda(float *out, const floatX *in, size_t n);
/* crossentropy.cu */
template <typename X>
void crossentropy_forward_cuda(float *losses, float *probs, const floatX *logits,
                               const int *targets, int B, int K);
template <typename X>
void crossentropy_backward_cuda(floatX *dlogits, const float *probs, const int *targets,
                                float dloss, int B, int K);
template <typename X>
void crossentropy_soft_forward_cuda(float *losses, float *probs, const floatX *logits,
                                    const float *targets, int B, int K);
template <typename X>
void crossentropy_soft_backward_cuda(floatX *dlogits, const float *probs, const float *targets,
                                     float dloss, int B, int K);
/* droppath.cu */
void droppath_forward_cuda(float *out, const float *res, const float *branch, const float *scale,
                           int B, size_t n);
template <typename X>
void droppath_backward_cuda(floatX *dbranch, const float *dout, const float *scale, int B,
                            size_t n);
/* global_norm.cu */
double sum_squares_cuda(const float *g, size_t n);
void sum_squares_into_cuda(double *acc, const float *g, size_t n, int add);
void scale_cuda(float *g, float s, size_t n);
void add_cuda(float *y, const float *x, size_t n);
/* adamw.cu */
template <typename X>
void adamw_update_cuda(float *p, floatX *p_lp, float *m, float *v, const float *g, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay, long t);
template <typename X>
void adamw_multi_cuda(float *p, float *m, float *v, const float *g, const adamw_piece *pieces,
                      int np, size_t total, double lr, float unscale, const double *norm_sq,
                      double grad_clip, float beta1, float beta2, float eps, long t);
/* ema.cu */
void ema_update_cuda(float *ema, const float *p, size_t n, float w);
void swap_cuda(float *a, float *b, size_t n);

/* Column sums, deterministic: out (C) += sum over rows of in (N,C), rows in
 * a fixed partition and order (matmul.cu; used for bias gradients). */
template <typename X> void colsum_add_cuda(float *out, const X *in, int N, int C);

#endif
