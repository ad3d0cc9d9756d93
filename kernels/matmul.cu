/* kernels/matmul.cu - CUDA linear layers through cuBLASLt, fp32 and bf16-mixed.
 *
 * Owns: out = inp @ w^T + bias (PyTorch's nn.Linear layout, w (OC,IC)), the
 * fused residual variant out = res + inp @ w^T + bias in fp32, the backward
 * (dinp overwritten, dw and dbias accumulated), the deterministic column sum
 * used for bias gradients (colsum_add_cuda), or for OPS_CANDIDATE_KERNELS'
 * tables the dW product's BGRADB epilogue in its place where cuBLASLt has
 * an algorithm for it, and a small cache of cuBLASLt
 * descriptors and heuristic picks per problem so a training loop does not
 * re-run the heuristic every step.
 * Must not: allocate tensors (the only memory used is g_cuda's cuBLASLt
 * workspace and cuda_scratch for the column-sum partials), use float atomics,
 * or use TF32 (the fp32 backend computes in pure fp32: CUBLAS_COMPUTE_32F).
 *
 * Row-major to column-major: a row-major (R,C) matrix with row stride ld is,
 * read by cuBLAS, the column-major (C,R) matrix with leading dimension ld (its
 * transpose). So every row-major product below is computed as its transpose:
 *
 *   forward   out^T (OC x N, ld OC) = op_T(w: IC x OC, ld IC) . (inp: IC x N, ld IC)
 *             m = OC, n = N, k = IC; epilogue bias has length m = OC.
 *   dinp      dinp^T (IC x N, ld IC) = (w: IC x OC, ld IC) . (dout: OC x N, ld OC)
 *             m = IC, n = N, k = OC.
 *   dw        dw^T (IC x OC, ld IC) += (inp: IC x N, ld IC) . op_T(dout: OC x N, ld OC)
 *             m = IC, n = OC, k = N.
 */
#include "cuda_buffers.h"
#include "cuda_common.cuh"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Column sums (bias gradients), deterministic without atomics.             */

#define COLSUM_THREADS 128

/* partials[g][c] = sum of in[r][c] for the rows r of chunk g, in row order.
 * Grid: x over columns (consecutive threads take consecutive columns, so
 * every row read is coalesced), y over the chunks. */
template <typename X>
static __global__ void colsum_partial_kernel(float *partials, const X *in, int N, int C,
                                             int rows_per_chunk)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int g = blockIdx.y;
    if (c >= C) return;
    const long long r0 = (long long)g * rows_per_chunk;
    const long long r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    float s = 0.0f;
    for (long long r = r0; r < r1; r++) s += ldx(in[(size_t)r * C + c]);
    partials[(size_t)g * C + c] = s; /* written even for an empty chunk (0) */
}

/* out[c] += sum over g of partials[g][c], g in order. */
static __global__ void colsum_finish_kernel(float *out, const float *partials, int G, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int g = 0; g < G; g++) s += partials[(size_t)g * C + c];
    out[c] += s;
}

template <typename X> void colsum_add_cuda(float *out, const X *in, int N, int C)
{
    CU_GUARD();
    if (N <= 0 || C <= 0) return;
    /* The partition depends on N only: the same inputs give the same bits. */
    const int G = cuda_colsum_chunks(N);
    const int rows_per_chunk = N / G + (N % G != 0); /* G chunks cover all N rows */
    float *partials = (float *)cuda_scratch(cuda_colsum_scratch_bytes(N, C));
    if (!partials) return; /* cuda_scratch recorded the error */
    const unsigned cblocks = (unsigned)((C + COLSUM_THREADS - 1) / COLSUM_THREADS);
    colsum_partial_kernel<X><<<dim3(cblocks, (unsigned)G), COLSUM_THREADS, 0, g_cuda.stream>>>(
        partials, in, N, C, rows_per_chunk);
    if (CU_LAUNCHED()) return;
    colsum_finish_kernel<<<cblocks, COLSUM_THREADS, 0, g_cuda.stream>>>(out, partials, G, C);
    CU_LAUNCHED();
}

/* out (N,OC) = bias broadcast to every row, plus res (fp32) when res is
 * non-NULL; elementwise, so out may be res. The bias epilogue's stand-in for
 * a bias pointer that is not 16-byte aligned (see lt_matmul). */
template <typename O, typename Bt>
static __global__ void bias_rows_kernel(O *out, const Bt *bias, const float *res, size_t total,
                                        int OC)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = ldx(bias[i % (size_t)OC]);
        if (res) v = res[i] + v;
        out[i] = stx<O>(v);
    }
}

/* cuBLASLt's alignment preferences cover A, B, C and D but not the epilogue's
 * bias pointer, and kernels assuming a 16-byte aligned bias have been seen to
 * fault ("misaligned address") on a bias sliced from a larger buffer, as the
 * model's are (aligned only when the dims are multiples of 8). */
#define LT_BIAS_ALIGN 16

/* ------------------------------------------------------------------------ */
/* cuBLASLt plans: descriptor, layouts and the heuristic's algorithm.       */

enum lt_kind {
    LT_FWD = 0,     /* out (X) = inp @ w^T [+ bias (X)] */
    LT_FWD_RES = 1, /* out (fp32) = res (fp32) + inp @ w^T [+ bias (fp32)] */
    LT_DINP = 2,    /* dinp (X) = dout @ w */
    LT_DW = 3,      /* dw (fp32) += dout^T @ inp [and, with bias, the BGRADB epilogue:
                     * bias (fp32) = the column sums of dout, overwritten] */
};
static const char *const lt_kind_name[] = {"forward", "forward_residual", "backward_dinp",
                                           "backward_dw"};

struct lt_plan {
    /* key */
    int kind;
    cudaDataType_t xtype; /* A and B element type */
    int N, IC, OC;
    int has_bias;
    unsigned align[5]; /* A, B, C, D, bias pointer alignment (bytes, <= 256) */
    /* value */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, cd; /* C and D share one layout (same type and shape) */
    cublasLtMatmulAlgo_t algo;
    int none; /* an optional epilogue (LT_DW's BGRADB) with no algorithm: the caller
               * does without it (nothing else is built) */
};

#define LT_CACHE_SIZE 128
static lt_plan g_lt_cache[LT_CACHE_SIZE];
static int g_lt_cached;

/* Largest power of two (<= 256) dividing the address; cuBLASLt's heuristic
 * assumes 256 unless told otherwise, so a plan is keyed by it too. */
static unsigned ptr_align(const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    unsigned r = 256;
    while (r > 1 && (a & (uintptr_t)(r - 1)) != 0) r >>= 1;
    return r;
}

/* Records a failure that is not a plain library return code (no algorithm
 * found), in check.h's format, with the problem in the message. */
static void lt_fail(int code, const char *what, const lt_plan *p, int line)
{
    char expr[192];
    snprintf(expr, sizeof expr, "%s for %s N=%d IC=%d OC=%d %s%s", what, lt_kind_name[p->kind],
             p->N, p->IC, p->OC, p->xtype == CUDA_R_16BF ? "bf16" : p->xtype == CUDA_R_16F ? "fp16" : "fp32",
             p->has_bias ? " bias" : "");
    if (!g_cuda.failed)
        check_report(code, "cublas", cublasGetStatusString((cublasStatus_t)code), expr, __FILE__,
                     line, g_cuda.err, sizeof g_cuda.err);
    cuda_note(code);
    if (!g_cuda.failed) g_cuda.failed = 1;
}

static void lt_plan_destroy(lt_plan *p)
{
    /* Destroy calls on NULL handles are no-ops in cuBLASLt; they are only
     * skipped to keep a failed build's cleanup quiet. */
    if (p->cd) cublasLtMatrixLayoutDestroy(p->cd);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    p->cd = p->b = p->a = NULL;
    p->desc = NULL;
}

/* Builds descriptor, layouts and algorithm for the key already in p. The
 * bias pointer is set here too (the heuristic may read its alignment; the
 * ops only pass 16-byte aligned ones, LT_BIAS_ALIGN) and again before every
 * run. Returns 0 on success; on failure the error is recorded
 * and p holds nothing to destroy; LT_DW with a bias (BGRADB, optional) that
 * the heuristic has no algorithm for: -2, nothing recorded, p->none set
 * and nothing to destroy. */
static int lt_plan_build(lt_plan *p, const void *bias)
{
    const int N = p->N, IC = p->IC, OC = p->OC;
    const cudaDataType_t xt = p->xtype;
    const cudaDataType_t ct = (p->kind == LT_FWD_RES || p->kind == LT_DW) ? CUDA_R_32F : xt;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    /* stored (column-major) shapes: A ar x ac ld ar, B br x bc ld br, C/D cr x cc ld cr */
    uint64_t ar = 0, ac = 0, br = 0, bc = 0, cr = 0, cc = 0;
    switch (p->kind) {
    case LT_FWD:
    case LT_FWD_RES: /* D (OC x N) = op_T(w: IC x OC) . inp (IC x N) */
        ta = CUBLAS_OP_T;
        ar = IC, ac = OC, br = IC, bc = N, cr = OC, cc = N;
        break;
    case LT_DINP: /* D (IC x N) = w (IC x OC) . dout (OC x N) */
        ar = IC, ac = OC, br = OC, bc = N, cr = IC, cc = N;
        break;
    default: /* LT_DW: D (IC x OC) = inp (IC x N) . op_T(dout: OC x N) */
        tb = CUBLAS_OP_T;
        ar = IC, ac = N, br = OC, bc = N, cr = IC, cc = OC;
        break;
    }
    p->desc = NULL;
    p->a = p->b = p->cd = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const int optional = p->kind == LT_DW && p->has_bias;
    const cublasLtEpilogue_t epi = !p->has_bias ? CUBLASLT_EPILOGUE_DEFAULT
                                   : optional   ? CUBLASLT_EPILOGUE_BGRADB
                                                : CUBLASLT_EPILOGUE_BIAS;
    const uint64_t ws = (uint64_t)g_cuda.lt_workspace_bytes;
    const uint32_t al_a = p->align[0], al_b = p->align[1], al_c = p->align[2], al_d = p->align[3];
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);

    if (CUBLAS_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F))) goto fail;
    if (CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                  sizeof ta)))
        goto fail;
    if (CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                  sizeof tb)))
        goto fail;
    if (CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                  sizeof epi)))
        goto fail;
    if (p->has_bias) {
        if (p->kind == LT_FWD_RES || p->kind == LT_DW) {
            /* fp32 bias with bf16 or fp16 A/B: D's type, said explicitly */
            const int32_t bt = (int32_t)CUDA_R_32F;
            if (CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
                    p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt)))
                goto fail;
        } /* LT_FWD: the default bias type, D's (X) */
        if (CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof bias)))
            goto fail;
    }
    if (CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->a, xt, ar, ac, (int64_t)ar))) goto fail;
    if (CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->b, xt, br, bc, (int64_t)br))) goto fail;
    if (CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->cd, ct, cr, cc, (int64_t)cr))) goto fail;

    if (CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref))) goto fail;
    if (CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)))
        goto fail;
    if (CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a)))
        goto fail;
    if (CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b)))
        goto fail;
    if (CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c)))
        goto fail;
    if (CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d)))
        goto fail;
    {
        /* Not CUBLAS_TRY: a failure here says which problem had no algorithm. */
        const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
            g_cuda.lt, p->desc, p->a, p->b, p->cd, p->cd, pref, 1, &res, &found);
        /* the optional epilogue: any refusal (a status, or no algorithm)
         * means going without it */
        if (optional && (st != CUBLAS_STATUS_SUCCESS || found < 1 ||
                         res.state != CUBLAS_STATUS_SUCCESS)) {
            cublasLtMatmulPreferenceDestroy(pref);
            lt_plan_destroy(p);
            p->none = 1;
            return -2;
        }
        if (st != CUBLAS_STATUS_SUCCESS) {
            lt_fail((int)st, "cublasLtMatmulAlgoGetHeuristic", p, __LINE__);
            goto fail;
        }
        if (found < 1 || res.state != CUBLAS_STATUS_SUCCESS) {
            lt_fail((int)CUBLAS_STATUS_NOT_SUPPORTED,
                    "cublasLtMatmulAlgoGetHeuristic: no algorithm", p, __LINE__);
            goto fail;
        }
    }
    p->algo = res.algo;
    if (CUBLAS_TRY(cublasLtMatmulPreferenceDestroy(pref))) {
        lt_plan_destroy(p);
        return -1;
    }
    return 0;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    lt_plan_destroy(p);
    return -1;
}

/* D = alpha * op(A) op(B) + beta * C [+ bias] for the plan of (kind, X, N,
 * IC, OC, bias?, alignments): cached, or built, used and destroyed when the
 * cache is full. LT_DW with bias: D as without it, and bias = the column
 * sums of B's rows (BGRADB). Returns 0; -1 with the error recorded; -2 when
 * LT_DW's bias epilogue has no algorithm for this problem (nothing queued,
 * nothing recorded: the caller goes without it; remembered in the cache). */
static int lt_matmul(int kind, cudaDataType_t xt, int N, int IC, int OC, const void *A,
                     const void *B, const void *C, void *D, const void *bias, float beta)
{
    lt_plan key;
    memset(&key, 0, sizeof key);
    key.kind = kind;
    key.xtype = xt;
    key.N = N, key.IC = IC, key.OC = OC;
    key.has_bias = bias != NULL;
    key.align[0] = ptr_align(A), key.align[1] = ptr_align(B);
    key.align[2] = ptr_align(C), key.align[3] = ptr_align(D);
    key.align[4] = bias ? ptr_align(bias) : 0;

    lt_plan *p = NULL;
    for (int i = 0; i < g_lt_cached && !p; i++) {
        lt_plan *q = &g_lt_cache[i];
        if (q->kind == key.kind && q->xtype == key.xtype && q->N == key.N && q->IC == key.IC &&
            q->OC == key.OC && q->has_bias == key.has_bias &&
            memcmp(q->align, key.align, sizeof key.align) == 0)
            p = q;
    }
    int uncached = 0, rc = 0;
    if (p && p->none) return -2;
    if (!p) {
        const int built = lt_plan_build(&key, bias);
        if (built == -2 && g_lt_cached < LT_CACHE_SIZE) g_lt_cache[g_lt_cached++] = key;
        if (built) return built;
        if (g_lt_cached < LT_CACHE_SIZE) {
            g_lt_cache[g_lt_cached] = key;
            p = &g_lt_cache[g_lt_cached++];
        } else {
            p = &key;
            uncached = 1;
        }
    }
    if (bias) { /* the pointer differs between layers of the same shape */
        if (CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof bias))) {
            rc = -1;
            goto out;
        }
    }
    {
        const float alpha = 1.0f;
        if (CUBLAS_TRY(cublasLtMatmul(g_cuda.lt, p->desc, &alpha, A, p->a, B, p->b, &beta, C,
                                      p->cd, D, p->cd, &p->algo, g_cuda.lt_workspace,
                                      g_cuda.lt_workspace_bytes, g_cuda.stream)))
            rc = -1;
    }
out:
    /* Descriptors are host objects read at call time: safe to destroy now. */
    if (uncached) lt_plan_destroy(p);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The ops.                                                                 */

template <typename X>
void matmul_forward_cuda(floatX *out, const floatX *inp, const floatX *w, const floatX *bias,
                         int N, int IC, int OC)
{
    CU_GUARD();
    if (N <= 0 || OC <= 0 || IC <= 0) return;
    if (bias && ptr_align(bias) < LT_BIAS_ALIGN) {
        /* out = bias rows, then out += product (C = D = out, beta 1): one
         * rounding to X, as the epilogue */
        const size_t total = (size_t)N * OC;
        bias_rows_kernel<X, X><<<cuda_blocks(total, 256), 256, 0, g_cuda.stream>>>(
            (X *)out, (const X *)bias, (const float *)NULL, total, OC);
        if (CU_LAUNCHED()) return;
        lt_matmul(LT_FWD, cuda_type<X>::value, N, IC, OC, (const void *)w, (const void *)inp,
                  (const void *)out, (void *)out, NULL, 1.0f);
        return;
    }
    /* D = out (X), C = out with beta 0 (not read). */
    lt_matmul(LT_FWD, cuda_type<X>::value, N, IC, OC, (const void *)w, (const void *)inp,
              (const void *)out, (void *)out, (const void *)bias, 0.0f);
}

template <typename X>
void matmul_forward_residual_cuda(float *out, const floatX *inp, const floatX *w,
                                  const float *bias, const float *res, int N, int IC, int OC)
{
    CU_GUARD();
    if (N <= 0 || OC <= 0 || IC <= 0) return;
    if (bias && ptr_align(bias) < LT_BIAS_ALIGN) {
        /* out = res + bias rows (fp32), then out += product (C = D = out) */
        const size_t total = (size_t)N * OC;
        bias_rows_kernel<float, float><<<cuda_blocks(total, 256), 256, 0, g_cuda.stream>>>(
            out, bias, res, total, OC);
        if (CU_LAUNCHED()) return;
        lt_matmul(LT_FWD_RES, cuda_type<X>::value, N, IC, OC, (const void *)w,
                  (const void *)inp, (const void *)out, (void *)out, NULL, 1.0f);
        return;
    }
    /* D = out (fp32) = res (C, fp32, beta 1) + w^T-product + bias (fp32).
     * out == res is cuBLASLt's in-place case (same layout for C and D). */
    lt_matmul(LT_FWD_RES, cuda_type<X>::value, N, IC, OC, (const void *)w, (const void *)inp,
              (const void *)res, (void *)out, (const void *)bias, 1.0f);
}

/* out[c] += in[c]: the BGRADB epilogue's overwritten sums into the
 * accumulated bias gradient. */
static __global__ void bias_grad_add_kernel(float *out, const float *in, int n)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < n) out[c] += in[c];
}

/* BGRADB: dbias from the dW product's own BGRADB epilogue (the column sums
 * of dout, into cuda_scratch, then added to dbias) where cuBLASLt has an
 * algorithm for it, instead of the column-sum kernels' second read of dout
 * (ops.h: OPS_CANDIDATE_KERNELS' tables). */
template <typename X, bool BGRADB>
static void mm_backward(floatX *dinp, float *dw, float *dbias, const floatX *dout,
                        const floatX *inp, const floatX *w, int N, int IC, int OC)
{
    CU_GUARD();
    if (N <= 0 || OC <= 0 || IC <= 0) return;
    const cudaDataType_t xt = cuda_type<X>::value;
    if (dinp) /* dinp (X) overwritten: beta 0 */
        lt_matmul(LT_DINP, xt, N, IC, OC, (const void *)w, (const void *)dout,
                  (const void *)dinp, (void *)dinp, NULL, 0.0f);
    if (g_cuda.failed) return;
    if (BGRADB && dw && dbias) {
        float *sums = (float *)cuda_scratch((size_t)OC * sizeof(float));
        if (!sums) return; /* cuda_scratch recorded the error */
        const int rc = lt_matmul(LT_DW, xt, N, IC, OC, (const void *)inp, (const void *)dout,
                                 (const void *)dw, (void *)dw, sums, 1.0f);
        if (rc == -1) return;
        if (rc == 0) {
            bias_grad_add_kernel<<<(unsigned)((OC + 255) / 256), 256, 0, g_cuda.stream>>>(
                dbias, sums, OC);
            CU_LAUNCHED();
            return;
        } /* -2: no algorithm with the epilogue: the product and the column sums */
    }
    if (dw) /* dw (fp32) accumulated in place: C = D = dw, beta 1 */
        lt_matmul(LT_DW, xt, N, IC, OC, (const void *)inp, (const void *)dout, (const void *)dw,
                  (void *)dw, NULL, 1.0f);
    if (g_cuda.failed) return;
    if (dbias) colsum_add_cuda<X>(dbias, (const X *)dout, N, OC);
}

template <typename X>
void matmul_backward_cuda(floatX *dinp, float *dw, float *dbias, const floatX *dout,
                          const floatX *inp, const floatX *w, int N, int IC, int OC)
{
    mm_backward<X, false>(dinp, dw, dbias, dout, inp, w, N, IC, OC);
}

template <typename X>
void matmul_backward_bgradb_cuda(floatX *dinp, float *dw, float *dbias, const floatX *dout,
                                 const floatX *inp, const floatX *w, int N, int IC, int OC)
{
    mm_backward<X, true>(dinp, dw, dbias, dout, inp, w, N, IC, OC);
}

template void colsum_add_cuda<float>(float *, const float *, int, int);
template void colsum_add_cuda<bf16>(float *, const bf16 *, int, int);
template void colsum_add_cuda<f16>(float *, const f16 *, int, int);
template void matmul_forward_cuda<float>(floatX *, const floatX *, const floatX *,
                                         const floatX *, int, int, int);
template void matmul_forward_cuda<bf16>(floatX *, const floatX *, const floatX *, const floatX *,
                                        int, int, int);
template void matmul_forward_cuda<f16>(floatX *, const floatX *, const floatX *, const floatX *,
                                       int, int, int);
template void matmul_forward_residual_cuda<float>(float *, const floatX *, const floatX *,
                                                  const float *, const float *, int, int, int);
template void matmul_forward_residual_cuda<bf16>(float *, const floatX *, const floatX *,
                                                 const float *, const float *, int, int, int);
template void matmul_forward_residual_cuda<f16>(float *, const floatX *, const floatX *,
                                                const float *, const float *, int, int, int);
template void matmul_backward_cuda<float>(floatX *, float *, float *, const floatX *,
                                          const floatX *, const floatX *, int, int, int);
template void matmul_backward_cuda<bf16>(floatX *, float *, float *, const floatX *,
                                         const floatX *, const floatX *, int, int, int);
template void matmul_backward_cuda<f16>(floatX *, float *, float *, const floatX *,
                                        const floatX *, const floatX *, int, int, int);
template void matmul_backward_bgradb_cuda<float>(floatX *, float *, float *, const floatX *,
                                                 const floatX *, const floatX *, int, int, int);
template void matmul_backward_bgradb_cuda<bf16>(floatX *, float *, float *, const floatX *,
                                                const floatX *, const floatX *, int, int, int);
template void matmul_backward_bgradb_cuda<f16>(floatX *, float *, float *, const floatX *,
                                               const floatX *, const floatX *, int, int, int);
