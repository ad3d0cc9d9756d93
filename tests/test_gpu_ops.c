/* tests/test_gpu_ops.c - every CUDA op against the CPU op, on fresh random
 * inputs, for the three CUDA tables: "cuda" (fp32; suite `cuda`),
 * "cuda-bf16" (bf16-mixed; suite `cuda_bf16`) and "cuda-fp16" (fp16-mixed;
 * suite `cuda_fp16`: everything said of bf16 below holds for it with IEEE
 * half in place of bf16, round_fp16_cpu for round_bf16_cpu, and the same
 * TOL_BF16, which half's 10 mantissa bits meet with room to spare). Every
 * test skips, saying why, where ops_cuda() finds no GPU (or this build has
 * no CUDA backend).
 *
 * How a check works:
 *   - inputs are random host fp32 values; on the bf16 table they are rounded
 *     to bf16 first (round_bf16_cpu), so that the GPU (which stores floatX
 *     inputs as bf16) and the CPU read exactly the same values;
 *   - outputs are poisoned with NaN before the GPU op (an upload, plus
 *     to_floatx for floatX), so an element the op forgets to write fails;
 *     outputs that ACCUMULATE (ops.h) start from the same random values on
 *     both sides instead;
 *   - after every op, ops->status must be 0;
 *   - the error is normwise: max|gpu - cpu| / max|cpu| (any NaN or infinity
 *     fails), against
 *       TOL_FP32 = 1e-5 on the fp32 table, and on either table for outputs
 *         that are fp32 and computed from identical values by fp32 math
 *         in our own kernels (LayerNorm statistics and gradients, embedding
 *         and bias-gradient sums, cross-entropy, AdamW): ops.h keeps those
 *         fp32 in bf16-mixed, so bf16 rounding there is a bug;
 *       TOL_BF16 = 1e-2 on the bf16 table for floatX outputs and for
 *         anything that goes through a bf16 GEMM (tensor cores accumulate in
 *         fp32 but not necessarily in the CPU's order or rounding);
 *       exact equality for data movement and single IEEE operations per
 *         element (patchify, embed_forward's one add, the dpatch copy,
 *         gather/scatter of the class token, zero, scale, to_floatx/to_float).
 * Reference per op on the bf16 table: the fp32 CPU op on the same
 * (bf16-valued) inputs, unless a comment says otherwise. The GPU rounds a
 * floatX output once, to nearest: against the unrounded fp32 value that is
 * at most half a bf16 ulp, 2^-8 = 0.39% of max|cpu| normwise, leaving the
 * rest of the 1% for the op's own arithmetic. The cpu-bf16 table (the same
 * value rounded) agrees on most elements but differs by a whole ulp (up to
 * 2^-7 = 0.78%) wherever the two fp32 values straddle a rounding midpoint,
 * so it is the closer reference only for exact checks of data movement.
 * (With the CPU tables standing in for the CUDA ones, cpu-bf16 for
 * cuda-bf16, every 1e-2 check here measured at most 0.0034.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_scratch.h"
#include "ops.h"
#include "rng.h"

#define TOL_FP32 1e-5
#define TOL_BF16 1e-2

enum { F32 = 0, FX = 1 }; /* a device buffer of fp32, or of floatX (bf16 on cuda-bf16) */

static rng_state R;

/* The CUDA table (storage: OPS_FP32, OPS_BF16, OPS_FP16), or skip the test
 * saying why. */
static const vit_ops *gpu_or_skip(int storage)
{
    static char why[512];
    why[0] = '\0';
    const vit_ops *g = ops_cuda(storage, why, sizeof why);
    if (!g) cr_skip_test("%s", why);
    rng_seed(&R, 20240601u + (uint64_t)storage, 0x6770, 0);
    ops_cpu_set_threads(2);
    return g;
}

/* Tolerance for floatX outputs and bf16 GEMMs on this table (see above). */
static double tol_x(const vit_ops *g) { return g->bf16 ? TOL_BF16 : TOL_FP32; }

/* out (n) = in as this table's floatX holds it: rounded to bf16 or half, or
 * as it is (fp32). out may be in. */
static void round_lp(const vit_ops *g, float *out, const float *in, size_t n)
{
    if (g->fp16)
        round_fp16_cpu(out, in, n);
    else if (g->bf16)
        round_bf16_cpu(out, in, n);
    else if (out != in)
        memcpy(out, in, n * sizeof(float));
}

/* ---- buffers: every test's host and device buffers, freed by release_all
 * (at the end of each case, and as the tests' .fini after a failure) ---- */

enum { MAX_BUFS = 96 };
static void *host_bufs[MAX_BUFS], *dev_bufs[MAX_BUFS];
static int n_host, n_dev;
static const vit_ops *dev_ops; /* the table dev_bufs came from */

static void release_all(void)
{
    for (int i = 0; i < n_host; i++) free(host_bufs[i]);
    for (int i = 0; i < n_dev; i++) dev_ops->release(dev_bufs[i]);
    n_host = n_dev = 0;
}

static void *hbuf_bytes(size_t bytes)
{
    cr_assert(n_host < MAX_BUFS, "test bug: more than %d host buffers", MAX_BUFS);
    void *p = malloc(bytes ? bytes : 1);
    cr_assert(p != NULL, "out of host memory (%zu bytes)", bytes);
    host_bufs[n_host++] = p;
    return p;
}
static float *hbuf(size_t n) { return hbuf_bytes(n * sizeof(float)); }

static void status_ok(const vit_ops *g, const char *what)
{
    char err[512] = "";
    int rc = g->status(err, sizeof err);
    cr_assert(rc == 0, "%s: %s failed: %s", g->name, what, err);
}

/* Zeroed device memory for n elements of kind F32 or FX. */
static void *dev_alloc(const vit_ops *g, size_t n, int kind)
{
    cr_assert(n_dev < MAX_BUFS, "test bug: more than %d device buffers", MAX_BUFS);
    size_t bytes = n * (kind == FX ? g->floatx_bytes : sizeof(float));
    void *p = g->alloc(bytes);
    cr_assert(p != NULL, "%s: alloc of %zu bytes failed", g->name, bytes);
    dev_ops = g;
    dev_bufs[n_dev++] = p;
    return p;
}

/* dev (n elements of kind) = host (fp32): upload, and to_floatx for FX
 * (exact when host holds bf16 values, or on the fp32 table). */
static void dev_write(const vit_ops *g, void *dev, const float *host, size_t n, int kind)
{
    if (kind == F32) {
        g->upload(dev, host, n * sizeof(float));
        status_ok(g, "upload");
        return;
    }
    float *tmp = g->alloc(n * sizeof(float));
    cr_assert(tmp != NULL, "%s: alloc of a staging buffer failed", g->name);
    g->upload(tmp, host, n * sizeof(float));
    g->to_floatx(dev, tmp, n);
    g->release(tmp);
    status_ok(g, "upload + to_floatx");
}

/* A new device buffer holding host[0..n) as kind. */
static void *dev_from_host(const vit_ops *g, const float *host, size_t n, int kind)
{
    void *d = dev_alloc(g, n, kind);
    dev_write(g, d, host, n, kind);
    return d;
}

/* A new host fp32 copy of a device buffer (to_float first for FX). */
static float *host_from_dev(const vit_ops *g, const void *dev, size_t n, int kind)
{
    float *h = hbuf(n);
    if (kind == F32) {
        g->download(h, dev, n * sizeof(float));
    } else {
        float *tmp = g->alloc(n * sizeof(float));
        cr_assert(tmp != NULL, "%s: alloc of a staging buffer failed", g->name);
        g->to_float(tmp, dev, n);
        g->download(h, tmp, n * sizeof(float));
        g->release(tmp);
    }
    status_ok(g, "to_float + download");
    return h;
}

/* Fills a device buffer with NaN, so that unwritten elements fail. */
static void poison(const vit_ops *g, void *dev, size_t n, int kind)
{
    float *nan = malloc(n * sizeof(float));
    cr_assert(nan != NULL);
    for (size_t i = 0; i < n; i++) nan[i] = NAN;
    dev_write(g, dev, nan, n, kind);
    free(nan);
}

/* A new poisoned device output. */
static void *dev_out(const vit_ops *g, size_t n, int kind)
{
    void *d = dev_alloc(g, n, kind);
    poison(g, d, n, kind);
    return d;
}

/* n host values offset + scale * N(0,1), bf16-representable on the bf16
 * table (both sides then read the same values). */
static float *rnd_in(const vit_ops *g, size_t n, float scale, float offset)
{
    float *x = hbuf(n);
    for (size_t i = 0; i < n; i++) x[i] = offset + scale * rng_normal(&R);
    round_lp(g, x, x, n);
    return x;
}

static float *copy_of(const float *x, size_t n)
{
    float *y = hbuf(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* max|gpu - cpu| / max(max|cpu|, floor) (absolute when both are zero);
 * infinity if either side has a NaN or infinity. *worst: the index that
 * decided it; *maxref (may be NULL): max|cpu|. */
static double rel_err_floor(const float *gpu, const float *cpu, size_t n, double floor,
                            size_t *worst, double *maxref_out)
{
    double maxref = 0, maxdiff = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i]) || !isfinite(cpu[i])) {
            *worst = i;
            return INFINITY;
        }
        double d = fabs((double)gpu[i] - (double)cpu[i]);
        if (fabs((double)cpu[i]) > maxref) maxref = fabs((double)cpu[i]);
        if (d > maxdiff) maxdiff = d, *worst = i;
    }
    if (maxref_out) *maxref_out = maxref;
    const double den = maxref > floor ? maxref : floor;
    return maxdiff / (den > 0 ? den : 1.0);
}

/* max|gpu - cpu| / max|cpu| (absolute when cpu is all zero) */
static double rel_err(const float *gpu, const float *cpu, size_t n, size_t *worst)
{
    return rel_err_floor(gpu, cpu, n, 0.0, worst, NULL);
}

static void expect_close(const vit_ops *g, const char *what, const float *gpu, const float *cpu,
                         size_t n, double tol)
{
    size_t at;
    double e = rel_err(gpu, cpu, n, &at);
    cr_assert(e <= tol,
              "%s %s: normwise relative error %.3g > %.3g (worst at [%zu] of %zu: gpu %.9g, "
              "cpu %.9g)",
              g->name, what, e, tol, at, n, gpu[at], cpu[at]);
}

/* The first element whose bits differ (NaN never equals anything), or n. */
static size_t first_diff(const float *gpu, const float *cpu, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(gpu[i] == cpu[i] && signbit(gpu[i]) == signbit(cpu[i]))) return i;
    return n;
}

/* Bit-exact equality. */
static void expect_same(const vit_ops *g, const char *what, const float *gpu, const float *cpu,
                        size_t n)
{
    const size_t i = first_diff(gpu, cpu, n);
    cr_assert(i == n, "%s %s: element [%zu] of %zu is %.9g, want exactly %.9g", g->name, what, i,
              n, i < n ? gpu[i] : 0.0f, i < n ? cpu[i] : 0.0f);
}

/* The CPU table that rounds floatX outputs as the GPU table stores them
 * (used only for the exact checks of data movement). */
static const vit_ops *cpu_like(const vit_ops *g)
{
    return g->fp16 ? ops_cpu_fp16() : g->bf16 ? ops_cpu_bf16() : ops_cpu();
}

/* Three tests per check: one per CUDA table. */
#define GPU_TESTS(name, check)                                                   \
    Test(cuda, name, .fini = release_all) { check(gpu_or_skip(OPS_FP32)); }     \
    Test(cuda_bf16, name, .fini = release_all) { check(gpu_or_skip(OPS_BF16)); } \
    Test(cuda_fp16, name, .fini = release_all) { check(gpu_or_skip(OPS_FP16)); }

/* Matrix shapes (N, IC, OC): two with dims that are not multiples of 8
 * (vector widths, cuBLASLt alignment), one a ViT-S-ish qkv projection. */
static const int MM_SHAPES[][3] = {{37, 24, 40}, {50, 72, 10}, {394, 192, 576}};
#define N_MM_SHAPES (sizeof MM_SHAPES / sizeof MM_SHAPES[0])

/* ------------------------------------------------------------------------ */
/* patchify: a permutation of the image (rounded to floatX): exact. Reference
 * the cpu-like table (cpu-bf16 rounds the patches as the GPU stores them). */

static void patchify_case(const vit_ops *g, int B, int C, int S, int P)
{
    char what[96];
    snprintf(what, sizeof what, "patchify B=%d C=%d S=%d P=%d", B, C, S, P);
    size_t nimg = (size_t)B * C * S * S, npat = nimg; /* P divides S: same count */
    float *img = rnd_in(g, nimg, 1, 0), *want = hbuf(npat);
    cpu_like(g)->patchify(want, img, B, C, S, P);
    float *d_img = dev_from_host(g, img, nimg, F32);
    floatX *d_pat = dev_out(g, npat, FX);
    g->patchify(d_pat, d_img, B, C, S, P);
    status_ok(g, what);
    expect_same(g, what, host_from_dev(g, d_pat, npat, FX), want, npat);
    release_all();
}

static void check_patchify(const vit_ops *g)
{
    patchify_case(g, 2, 3, 32, 4);
    patchify_case(g, 3, 1, 28, 7);
    patchify_case(g, 1, 3, 224, 16);
}
GPU_TESTS(patchify_writes_exactly_the_cpu_patches, check_patchify)

/* ------------------------------------------------------------------------ */
/* matmul_forward: out (floatX) = inp @ w^T [+ bias]; the bf16 GEMM rounds
 * once at the end: fp32 CPU reference, tol_x. */

static void matmul_forward_case(const vit_ops *g, int N, int IC, int OC, int with_bias)
{
    char what[96];
    snprintf(what, sizeof what, "matmul_forward N=%d IC=%d OC=%d %s", N, IC, OC,
             with_bias ? "bias" : "no bias");
    size_t no = (size_t)N * OC;
    float *inp = rnd_in(g, (size_t)N * IC, 1, 0);
    float *w = rnd_in(g, (size_t)OC * IC, 1.0f / sqrtf((float)IC), 0);
    float *bias = with_bias ? rnd_in(g, OC, 0.5f, 0) : NULL;
    float *want = hbuf(no);
    matmul_forward_cpu(want, inp, w, bias, N, IC, OC);
    floatX *d_out = dev_out(g, no, FX);
    g->matmul_forward(d_out, dev_from_host(g, inp, (size_t)N * IC, FX),
                      dev_from_host(g, w, (size_t)OC * IC, FX),
                      bias ? dev_from_host(g, bias, OC, FX) : NULL, N, IC, OC);
    status_ok(g, what);
    expect_close(g, what, host_from_dev(g, d_out, no, FX), want, no, tol_x(g));
    release_all();
}

static void check_matmul_forward(const vit_ops *g)
{
    for (size_t s = 0; s < N_MM_SHAPES; s++)
        for (int bias = 0; bias <= 1; bias++)
            matmul_forward_case(g, MM_SHAPES[s][0], MM_SHAPES[s][1], MM_SHAPES[s][2], bias);
}
GPU_TESTS(matmul_forward_matches_cpu_with_and_without_bias, check_matmul_forward)

/* ------------------------------------------------------------------------ */
/* matmul_forward_residual: out (fp32) = res + inp @ w^T [+ bias (fp32)],
 * out == res in place or a separate (poisoned) out, in which case res must
 * be untouched. fp32 output but a bf16 GEMM: tol_x. */

static void matmul_residual_case(const vit_ops *g, int N, int IC, int OC, int with_bias,
                                 int in_place)
{
    char what[128];
    snprintf(what, sizeof what, "matmul_forward_residual N=%d IC=%d OC=%d %s %s", N, IC, OC,
             with_bias ? "bias" : "no bias", in_place ? "out == res" : "out != res");
    size_t no = (size_t)N * OC;
    float *inp = rnd_in(g, (size_t)N * IC, 1, 0);
    float *w = rnd_in(g, (size_t)OC * IC, 1.0f / sqrtf((float)IC), 0);
    float *bias = with_bias ? rnd_in(g, OC, 0.5f, 0) : NULL;
    float *res = rnd_in(g, no, 1, 0), *want = hbuf(no);
    matmul_forward_residual_cpu(want, inp, w, bias, res, N, IC, OC);
    float *d_res = dev_from_host(g, res, no, F32);
    float *d_out = in_place ? d_res : dev_out(g, no, F32);
    g->matmul_forward_residual(d_out, dev_from_host(g, inp, (size_t)N * IC, FX),
                               dev_from_host(g, w, (size_t)OC * IC, FX),
                               bias ? dev_from_host(g, bias, OC, F32) : NULL, d_res, N, IC, OC);
    status_ok(g, what);
    expect_close(g, what, host_from_dev(g, d_out, no, F32), want, no, tol_x(g));
    if (!in_place) {
        char sub[160];
        snprintf(sub, sizeof sub, "%s: res must be untouched", what);
        expect_same(g, sub, host_from_dev(g, d_res, no, F32), res, no);
    }
    release_all();
}

static void check_matmul_residual(const vit_ops *g)
{
    for (size_t s = 0; s < N_MM_SHAPES; s++)
        for (int bias = 0; bias <= 1; bias++)
            for (int in_place = 0; in_place <= 1; in_place++)
                matmul_residual_case(g, MM_SHAPES[s][0], MM_SHAPES[s][1], MM_SHAPES[s][2], bias,
                                     in_place);
}
GPU_TESTS(matmul_forward_residual_matches_cpu_in_place_and_out_of_place, check_matmul_residual)

/* ------------------------------------------------------------------------ */
/* matmul_backward: dinp (floatX, overwritten: poisoned) = dout @ w; dw
 * (fp32, GEMM) += dout^T @ inp; dbias (fp32, a column sum of dout in our
 * own kernel) += sum_rows dout. Variants: everything; dinp NULL (dw and
 * dbias still right); dbias NULL (left untouched). */

enum { MB_ALL, MB_NO_DINP, MB_NO_DBIAS };

static void matmul_backward_case(const vit_ops *g, int N, int IC, int OC, int variant)
{
    static const char *vname[] = {"dinp+dw+dbias", "dinp NULL", "dbias NULL"};
    char what[128];
    snprintf(what, sizeof what, "matmul_backward N=%d IC=%d OC=%d %s", N, IC, OC,
             vname[variant]);
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC;
    float *dout = rnd_in(g, (size_t)N * OC, 1, 0), *inp = rnd_in(g, ni, 1, 0);
    float *w = rnd_in(g, nw, 1.0f / sqrtf((float)IC), 0);
    float *dw0 = rnd_in(g, nw, 1, 0), *db0 = rnd_in(g, OC, 1, 0);
    float *want_dinp = hbuf(ni), *want_dw = copy_of(dw0, nw), *want_db = copy_of(db0, OC);
    matmul_backward_cpu(variant == MB_NO_DINP ? NULL : want_dinp, want_dw,
                        variant == MB_NO_DBIAS ? NULL : want_db, dout, inp, w, N, IC, OC);
    floatX *d_dinp = variant == MB_NO_DINP ? NULL : dev_out(g, ni, FX);
    float *d_dw = dev_from_host(g, dw0, nw, F32), *d_db = dev_from_host(g, db0, OC, F32);
    g->matmul_backward(d_dinp, d_dw, variant == MB_NO_DBIAS ? NULL : d_db,
                       dev_from_host(g, dout, (size_t)N * OC, FX), dev_from_host(g, inp, ni, FX),
                       dev_from_host(g, w, nw, FX), N, IC, OC);
    status_ok(g, what);
    char sub[160];
    if (d_dinp) {
        snprintf(sub, sizeof sub, "%s: dinp", what);
        expect_close(g, sub, host_from_dev(g, d_dinp, ni, FX), want_dinp, ni, tol_x(g));
    }
    snprintf(sub, sizeof sub, "%s: dw (accumulated)", what);
    expect_close(g, sub, host_from_dev(g, d_dw, nw, F32), want_dw, nw, tol_x(g));
    snprintf(sub, sizeof sub, "%s: dbias (accumulated)", what);
    if (variant == MB_NO_DBIAS)
        expect_same(g, sub, host_from_dev(g, d_db, OC, F32), db0, OC);
    else
        expect_close(g, sub, host_from_dev(g, d_db, OC, F32), want_db, OC, TOL_FP32);
    release_all();
}

static void check_matmul_backward(const vit_ops *g)
{
    for (size_t s = 0; s < N_MM_SHAPES; s++)
        for (int v = MB_ALL; v <= MB_NO_DBIAS; v++)
            matmul_backward_case(g, MM_SHAPES[s][0], MM_SHAPES[s][1], MM_SHAPES[s][2], v);
}
GPU_TESTS(matmul_backward_matches_cpu_and_accumulates_dw_dbias_also_with_null_dinp,
          check_matmul_backward)

/* The same cases on the candidate kernels' table (OPS_CANDIDATE_KERNELS):
 * dbias from the dW product's BGRADB epilogue, added to the dbias given,
 * where cuBLASLt has an algorithm (else the column sums, as the default). */
static const vit_ops *candidates_of(const vit_ops *g);
static void check_matmul_backward_bgradb(const vit_ops *g)
{
    check_matmul_backward(candidates_of(g));
}
GPU_TESTS(matmul_backward_with_bias_gradients_from_the_bgradb_epilogue_matches_cpu_and_accumulates,
          check_matmul_backward_bgradb)

/* ------------------------------------------------------------------------ */
/* Embeddings. embed_forward: one fp32 add per element (patch_out's floatX
 * values are exact in fp32): exact. embed_backward: dpatch_out is a copy of
 * dx rows (rounded to floatX; the inputs are bf16 values, so exact; cpu-like
 * reference), dcls and dpos sums over the batch in fp32: TOL_FP32. */

static const int EMB_SHAPES[][3] = {{2, 197, 64}, {3, 5, 7}, {32, 65, 64}};
#define N_EMB_SHAPES (sizeof EMB_SHAPES / sizeof EMB_SHAPES[0])

static void check_embed_forward(const vit_ops *g)
{
    for (size_t s = 0; s < N_EMB_SHAPES; s++) {
        int B = EMB_SHAPES[s][0], T = EMB_SHAPES[s][1], D = EMB_SHAPES[s][2];
        char what[96];
        snprintf(what, sizeof what, "embed_forward B=%d T=%d D=%d", B, T, D);
        size_t nx = (size_t)B * T * D, np = (size_t)B * (T - 1) * D;
        float *po = rnd_in(g, np, 1, 0), *cls = rnd_in(g, D, 1, 0);
        float *pos = rnd_in(g, (size_t)T * D, 0.5f, 0), *want = hbuf(nx);
        embed_forward_cpu(want, po, cls, pos, B, T, D);
        float *d_x = dev_out(g, nx, F32);
        g->embed_forward(d_x, dev_from_host(g, po, np, FX), dev_from_host(g, cls, D, F32),
                         dev_from_host(g, pos, (size_t)T * D, F32), B, T, D);
        status_ok(g, what);
        expect_same(g, what, host_from_dev(g, d_x, nx, F32), want, nx);
        release_all();
    }
}
GPU_TESTS(embed_forward_adds_class_token_and_positions_exactly, check_embed_forward)

static void check_embed_backward(const vit_ops *g)
{
    for (size_t s = 0; s < N_EMB_SHAPES; s++) {
        int B = EMB_SHAPES[s][0], T = EMB_SHAPES[s][1], D = EMB_SHAPES[s][2];
        char what[96], sub[128];
        snprintf(what, sizeof what, "embed_backward B=%d T=%d D=%d", B, T, D);
        size_t nx = (size_t)B * T * D, np = (size_t)B * (T - 1) * D, npos = (size_t)T * D;
        float *dx = rnd_in(g, nx, 1, 0), *dcls0 = rnd_in(g, D, 1, 0);
        float *dpos0 = rnd_in(g, npos, 1, 0);
        float *want_dp = hbuf(np), *want_dcls = copy_of(dcls0, D);
        float *want_dpos = copy_of(dpos0, npos);
        cpu_like(g)->embed_backward(want_dp, want_dcls, want_dpos, dx, B, T, D);
        floatX *d_dp = dev_out(g, np, FX);
        float *d_dcls = dev_from_host(g, dcls0, D, F32), *d_dpos = dev_from_host(g, dpos0, npos, F32);
        g->embed_backward(d_dp, d_dcls, d_dpos, dev_from_host(g, dx, nx, F32), B, T, D);
        status_ok(g, what);
        snprintf(sub, sizeof sub, "%s: dpatch_out", what);
        expect_same(g, sub, host_from_dev(g, d_dp, np, FX), want_dp, np);
        snprintf(sub, sizeof sub, "%s: dcls (accumulated)", what);
        expect_close(g, sub, host_from_dev(g, d_dcls, D, F32), want_dcls, D, TOL_FP32);
        snprintf(sub, sizeof sub, "%s: dpos (accumulated)", what);
        expect_close(g, sub, host_from_dev(g, d_dpos, npos, F32), want_dpos, npos, TOL_FP32);
        release_all();
    }
}
GPU_TESTS(embed_backward_copies_dpatch_and_accumulates_dcls_dpos, check_embed_backward)

/* ------------------------------------------------------------------------ */
/* LayerNorm. Forward: out floatX (tol_x), mean and rstd fp32 (TOL_FP32);
 * inputs with a mean offset of 3 so that a one-pass variance would show.
 * Backward: every output fp32 from fp32 math (dout's floatX values are
 * exact): TOL_FP32, dinp/dw/db accumulated onto random values. Widths below
 * a warp, odd, ViT-sized and wider than 8 warps' worth. */

/* the register kernels (the forward's and the backward's dinp) take C % 4
 * == 0 up to 1280 in steps of 256 (ViT-B's 768 over many rows, a C that is
 * not a multiple of 32, ViT-H's 1280; 192, 24, 1000, 64 too), others the
 * scalar kernels (7, 1500); the backward's row chunks hold several rows
 * from N = 257 on; the one-pass backward (the candidates' table) gives a
 * warp more than 4 rows from N = 32769 on (the last shape: 5) */
static const int LN_SHAPES[][2] = {{394, 192}, {37, 24}, {5, 7}, {3, 1000}, {64, 1500},
                                   {3000, 768}, {300, 520}, {520, 1280}, {33000, 64}};
#define N_LN_SHAPES (sizeof LN_SHAPES / sizeof LN_SHAPES[0])

static void check_layernorm_forward(const vit_ops *g)
{
    for (size_t s = 0; s < N_LN_SHAPES; s++) {
        int N = LN_SHAPES[s][0], C = LN_SHAPES[s][1];
        char what[96], sub[128];
        snprintf(what, sizeof what, "layernorm_forward N=%d C=%d", N, C);
        size_t n = (size_t)N * C;
        float *inp = rnd_in(g, n, 2, 3), *w = rnd_in(g, C, 0.2f, 1), *b = rnd_in(g, C, 0.2f, 0);
        float *want = hbuf(n), *want_mean = hbuf(N), *want_rstd = hbuf(N);
        layernorm_forward_cpu(want, want_mean, want_rstd, inp, w, b, N, C);
        floatX *d_out = dev_out(g, n, FX);
        float *d_mean = dev_out(g, N, F32), *d_rstd = dev_out(g, N, F32);
        g->layernorm_forward(d_out, d_mean, d_rstd, dev_from_host(g, inp, n, F32),
                             dev_from_host(g, w, C, F32), dev_from_host(g, b, C, F32), N, C);
        status_ok(g, what);
        snprintf(sub, sizeof sub, "%s: out", what);
        expect_close(g, sub, host_from_dev(g, d_out, n, FX), want, n, tol_x(g));
        snprintf(sub, sizeof sub, "%s: mean", what);
        expect_close(g, sub, host_from_dev(g, d_mean, N, F32), want_mean, N, TOL_FP32);
        snprintf(sub, sizeof sub, "%s: rstd", what);
        expect_close(g, sub, host_from_dev(g, d_rstd, N, F32), want_rstd, N, TOL_FP32);
        release_all();
    }
}
GPU_TESTS(layernorm_forward_matches_cpu_output_mean_and_rstd, check_layernorm_forward)

static void check_layernorm_backward(const vit_ops *g)
{
    for (size_t s = 0; s < N_LN_SHAPES; s++) {
        int N = LN_SHAPES[s][0], C = LN_SHAPES[s][1];
        char what[96], sub[128];
        snprintf(what, sizeof what, "layernorm_backward N=%d C=%d", N, C);
        size_t n = (size_t)N * C;
        float *inp = rnd_in(g, n, 2, 3), *w = rnd_in(g, C, 0.2f, 1), *b = rnd_in(g, C, 0.2f, 0);
        float *out = hbuf(n), *mean = hbuf(N), *rstd = hbuf(N);
        layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C); /* statistics both sides use */
        float *dout = rnd_in(g, n, 1, 0);
        float *dinp0 = rnd_in(g, n, 1, 0), *dw0 = rnd_in(g, C, 1, 0), *db0 = rnd_in(g, C, 1, 0);
        float *want_dinp = copy_of(dinp0, n), *want_dw = copy_of(dw0, C), *want_db = copy_of(db0, C);
        layernorm_backward_cpu(want_dinp, NULL, want_dw, want_db, dout, inp, w, mean, rstd, N,
                               C);
        float *d_dinp = dev_from_host(g, dinp0, n, F32), *d_dw = dev_from_host(g, dw0, C, F32);
        float *d_db = dev_from_host(g, db0, C, F32);
        g->layernorm_backward(d_dinp, NULL, d_dw, d_db, dev_from_host(g, dout, n, FX),
                              dev_from_host(g, inp, n, F32), dev_from_host(g, w, C, F32),
                              dev_from_host(g, mean, N, F32), dev_from_host(g, rstd, N, F32), N,
                              C);
        status_ok(g, what);
        snprintf(sub, sizeof sub, "%s: dinp (accumulated)", what);
        expect_close(g, sub, host_from_dev(g, d_dinp, n, F32), want_dinp, n, TOL_FP32);
        snprintf(sub, sizeof sub, "%s: dw (accumulated)", what);
        expect_close(g, sub, host_from_dev(g, d_dw, C, F32), want_dw, C, TOL_FP32);
        snprintf(sub, sizeof sub, "%s: db (accumulated)", what);
        float *db1 = host_from_dev(g, d_db, C, F32);
        expect_close(g, sub, db1, want_db, C, TOL_FP32);
        float *dinp1 = host_from_dev(g, d_dinp, n, F32), *dw1 = host_from_dev(g, d_dw, C, F32);
        /* again from the same start: the same bits */
        float *d_dout = dev_from_host(g, dout, n, FX), *d_inp = dev_from_host(g, inp, n, F32);
        float *d_w = dev_from_host(g, w, C, F32), *d_mean = dev_from_host(g, mean, N, F32);
        float *d_rstd = dev_from_host(g, rstd, N, F32);
        dev_write(g, d_dinp, dinp0, n, F32);
        dev_write(g, d_dw, dw0, C, F32);
        dev_write(g, d_db, db0, C, F32);
        floatX *d_x = dev_out(g, n, FX);
        g->layernorm_backward(d_dinp, d_x, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
        status_ok(g, what);
        /* with the floatX copy: dinp, dw, db the same bits as without it,
         * the copy to_floatx's bits of that dinp */
        floatX *d_want_x = dev_out(g, n, FX);
        g->to_floatx(d_want_x, d_dinp, n);
        snprintf(sub, sizeof sub, "%s: dinp_x, to_floatx's bits", what);
        expect_same(g, sub, host_from_dev(g, d_x, n, FX), host_from_dev(g, d_want_x, n, FX), n);
        snprintf(sub, sizeof sub, "%s: dinp, again", what);
        expect_same(g, sub, host_from_dev(g, d_dinp, n, F32), dinp1, n);
        snprintf(sub, sizeof sub, "%s: dw, again", what);
        expect_same(g, sub, host_from_dev(g, d_dw, C, F32), dw1, C);
        snprintf(sub, sizeof sub, "%s: db, again", what);
        expect_same(g, sub, host_from_dev(g, d_db, C, F32), db1, C);
        /* a frozen LayerNorm: dw and db NULL, dinp only */
        float *want_frozen = copy_of(dinp0, n);
        layernorm_backward_cpu(want_frozen, NULL, NULL, NULL, dout, inp, w, mean, rstd, N, C);
        dev_write(g, d_dinp, dinp0, n, F32);
        g->layernorm_backward(d_dinp, NULL, NULL, NULL, d_dout, d_inp, d_w, d_mean, d_rstd, N,
                              C);
        status_ok(g, what);
        snprintf(sub, sizeof sub, "%s: dinp, frozen", what);
        expect_close(g, sub, host_from_dev(g, d_dinp, n, F32), want_frozen, n, TOL_FP32);
        release_all();
    }
}
GPU_TESTS(layernorm_backward_matches_cpu_accumulates_the_same_bits_twice_and_writes_dinp_as_to_floatx,
          check_layernorm_backward)

/* The same cases on the candidate kernels' table (OPS_CANDIDATE_KERNELS):
 * the one-pass backward where the register kernels apply, with its own
 * dw/db partials in another order (the default's kernels elsewhere) */
static void check_layernorm_backward_onepass(const vit_ops *g)
{
    check_layernorm_backward(candidates_of(g));
}
GPU_TESTS(layernorm_backward_in_one_pass_matches_cpu_the_same_bits_twice_and_dinp_x_as_to_floatx,
          check_layernorm_backward_onepass)

/* ------------------------------------------------------------------------ */
/* Attention, ViT-S/16-ish (B=2, T=197, D=64, NH=4) and odd (B=3, T=5, D=8,
 * NH=2: T below a warp, hd=4). Scratch from the GPU table's own
 * attention_scratch_bytes. ops.h's contract: the forward keeps out and the
 * row log-sum-exp lse, the backward recomputes P from them. Forward: out
 * floatX and lse fp32, tol_x against the fp32 CPU op (out: the GPU's P.V
 * reads the 16-bit probabilities, the CPU's fp32 ones, a 2^-9 relative
 * perturbation per term; lse: fp32 math, but its scores come from a
 * 16-bit GEMM on the 16-bit tables). Backward: the same out (the CPU's,
 * rounded as the GPU stores it) and lse go to both sides; dqkv floatX,
 * tol_x (the GPU also rounds P and dS to 16 bits, 2^-9 per term). Both
 * ops twice on the same inputs: the same bits. */

static const int ATT_SHAPES[][4] = {{2, 197, 64, 4}, {3, 5, 8, 2}};
#define N_ATT_SHAPES (sizeof ATT_SHAPES / sizeof ATT_SHAPES[0])

static void check_attention_forward(const vit_ops *g)
{
    for (size_t s = 0; s < N_ATT_SHAPES; s++) {
        int B = ATT_SHAPES[s][0], T = ATT_SHAPES[s][1], D = ATT_SHAPES[s][2];
        int NH = ATT_SHAPES[s][3];
        char what[96], sub[128];
        snprintf(what, sizeof what, "attention_forward B=%d T=%d D=%d NH=%d", B, T, D, NH);
        size_t nq = (size_t)B * T * 3 * D, no = (size_t)B * T * D, nl = (size_t)B * NH * T;
        float *qkv = rnd_in(g, nq, 1, 0), *want = hbuf(no), *want_lse = hbuf(nl);
        void *cpu_scratch = hbuf_bytes(ops_cpu_attention_scratch_bytes(B, T, D, NH));
        attention_forward_cpu(want, want_lse, cpu_scratch, qkv, B, T, D, NH);
        size_t sb = g->attention_scratch_bytes(B, T, D, NH);
        void *scratch = dev_alloc(g, sb / sizeof(float) + 1, F32);
        floatX *d_qkv = dev_from_host(g, qkv, nq, FX);
        floatX *d_out = dev_out(g, no, FX);
        float *d_lse = dev_out(g, nl, F32);
        g->attention_forward(d_out, d_lse, scratch, d_qkv, B, T, D, NH);
        status_ok(g, what);
        float *out1 = host_from_dev(g, d_out, no, FX), *lse1 = host_from_dev(g, d_lse, nl, F32);
        snprintf(sub, sizeof sub, "%s: out", what);
        expect_close(g, sub, out1, want, no, tol_x(g));
        snprintf(sub, sizeof sub, "%s: lse", what);
        expect_close(g, sub, lse1, want_lse, nl, tol_x(g));
        g->attention_forward(d_out, d_lse, scratch, d_qkv, B, T, D, NH);
        status_ok(g, what);
        snprintf(sub, sizeof sub, "%s: out, again", what);
        expect_same(g, sub, host_from_dev(g, d_out, no, FX), out1, no);
        snprintf(sub, sizeof sub, "%s: lse, again", what);
        expect_same(g, sub, host_from_dev(g, d_lse, nl, F32), lse1, nl);
        release_all();
    }
}
GPU_TESTS(attention_forward_matches_cpu_output_and_log_sum_exp, check_attention_forward)

static void check_attention_backward(const vit_ops *g)
{
    for (size_t s = 0; s < N_ATT_SHAPES; s++) {
        int B = ATT_SHAPES[s][0], T = ATT_SHAPES[s][1], D = ATT_SHAPES[s][2];
        int NH = ATT_SHAPES[s][3];
        char what[96], sub[128];
        snprintf(what, sizeof what, "attention_backward B=%d T=%d D=%d NH=%d", B, T, D, NH);
        size_t nq = (size_t)B * T * 3 * D, no = (size_t)B * T * D, nl = (size_t)B * NH * T;
        float *qkv = rnd_in(g, nq, 1, 0), *dout = rnd_in(g, no, 1, 0);
        float *out = hbuf(no), *lse = hbuf(nl), *want = hbuf(nq);
        void *cpu_scratch = hbuf_bytes(ops_cpu_attention_scratch_bytes(B, T, D, NH));
        attention_forward_cpu(out, lse, cpu_scratch, qkv, B, T, D, NH);
        round_lp(g, out, out, no);
        attention_backward_cpu(want, cpu_scratch, dout, qkv, out, lse, B, T, D, NH);
        size_t sb = g->attention_scratch_bytes(B, T, D, NH);
        void *scratch = dev_alloc(g, sb / sizeof(float) + 1, F32);
        floatX *d_dqkv = dev_out(g, nq, FX), *d_dout = dev_from_host(g, dout, no, FX);
        floatX *d_qkv = dev_from_host(g, qkv, nq, FX), *d_out = dev_from_host(g, out, no, FX);
        float *d_lse = dev_from_host(g, lse, nl, F32);
        g->attention_backward(d_dqkv, scratch, d_dout, d_qkv, d_out, d_lse, B, T, D, NH);
        status_ok(g, what);
        float *got = host_from_dev(g, d_dqkv, nq, FX);
        expect_close(g, what, got, want, nq, tol_x(g));
        g->attention_backward(d_dqkv, scratch, d_dout, d_qkv, d_out, d_lse, B, T, D, NH);
        status_ok(g, what);
        snprintf(sub, sizeof sub, "%s: again", what);
        expect_same(g, sub, host_from_dev(g, d_dqkv, nq, FX), got, nq);
        release_all();
    }
}
GPU_TESTS(attention_backward_from_out_and_lse_matches_cpu_dqkv, check_attention_backward)

/* ------------------------------------------------------------------------ */
/* Flash attention (kernels/flash_attention.cu), the path the 16-bit tables
 * take for hd in 32..128, a multiple of 8 (attention_scratch.h): against
 * the fp32 CPU twin at the head dims ViTs use (32, 64, 80: not a multiple
 * of 16, 128) and the sequence lengths that leave partial tiles (1, 7 and
 * 197, 257, 577 = 3, 4, 9 full 64-row tiles plus 5, 1, 1 rows), out, lse,
 * dq, dk and dv each on its own, tol_x as the unfused path above (the
 * flash forward also rounds P to 16 bits before P.V, and its backward
 * rounds dS before dQ and dK, as ops.h's contract says); against the
 * unfused CUDA path (the OPS_UNFUSED_ATTENTION table) on the same inputs,
 * tol_x; forward plus backward run twice: the same bits (no atomics); and
 * the same bits again with the tiles copied through registers instead of
 * cp.async (the OPS_FLASH_SYNC_LOADS table: the pipeline changes no value).
 * The scratch is the table's own attention_scratch_bytes, which must be
 * the planner's (att_scratch_bytes) and a single row vector (B,NH,T).
 * The fused backward (OPS_CANDIDATE_KERNELS' table) on the same inputs: dq,
 * dk, dv against the CPU (tol_x), dk and dv the same bits as the two
 * kernels', twice the same bits, its scratch attention_scratch.h's. */

/* g's storage with one of ops_cuda's variant flags (ops.h): the table
 * the test compares g's with. */
static const vit_ops *variant_of(const vit_ops *g, int flag, const char *what)
{
    char why[512];
    const vit_ops *v = ops_cuda((g->fp16 ? OPS_FP16 : g->bf16 ? OPS_BF16 : OPS_FP32) | flag, why,
                                sizeof why);
    cr_assert(v != NULL, "%s: no %s table: %s", g->name, what, why);
    return v;
}
/* the unfused attention; the flash kernels' tiles copied through
 * registers; the candidate kernels (the fused flash backward, bias
 * gradients from the BGRADB epilogue) */
static const vit_ops *unfused_of(const vit_ops *g)
{
    return variant_of(g, OPS_UNFUSED_ATTENTION, "unfused-attention");
}
static const vit_ops *sync_loads_of(const vit_ops *g)
{
    return variant_of(g, OPS_FLASH_SYNC_LOADS, "flash-sync");
}
static const vit_ops *candidates_of(const vit_ops *g)
{
    return variant_of(g, OPS_CANDIDATE_KERNELS, "candidates");
}

/* The q, k or v third (part 0, 1, 2) of a (B*T, 3D) matrix, as (B*T, D). */
static float *third(const float *qkv, size_t rows, int D, int part)
{
    float *o = hbuf(rows * (size_t)D);
    for (size_t r = 0; r < rows; r++)
        memcpy(o + r * D, qkv + r * 3 * (size_t)D + (size_t)part * D, (size_t)D * sizeof(float));
    return o;
}

/* max|gpu - cpu| / max(max|cpu|, floor), checked with cr_expect: the flash
 * attention's cases go on after a failure, so that one GPU run reports every
 * case that fails. */
static void expect_close_soft(const vit_ops *g, const char *what, const float *gpu,
                              const float *cpu, size_t n, double tol, double floor)
{
    size_t at;
    double maxref = 0;
    const double e = rel_err_floor(gpu, cpu, n, floor, &at, &maxref);
    cr_expect(e <= tol,
              "%s %s: error %.3g of max(max|cpu| %.3g, floor %.3g) > %.3g (worst at [%zu] of "
              "%zu: gpu %.9g, cpu %.9g)",
              g->name, what, e, maxref, floor, tol, at, n, gpu[at], cpu[at]);
}

/* Bit-exact equality, as a cr_expect. */
static void expect_same_soft(const vit_ops *g, const char *what, const float *gpu,
                             const float *cpu, size_t n)
{
    const size_t i = first_diff(gpu, cpu, n);
    cr_expect(i == n, "%s %s: element [%zu] of %zu is %.9g, want exactly %.9g", g->name, what, i,
              n, i < n ? gpu[i] : 0.0f, i < n ? cpu[i] : 0.0f);
}

/* dq, dk and dv each against the reference, each judged against the largest
 * of the three at least (FLASH_FLOOR of it): at T = 1 the softmax is the
 * constant 1, dq and dk are exactly zero in exact arithmetic, and both
 * sides hold only rounding noise of about 1e-7, which a relative error
 * against that noise would call a 100% error. */
#define FLASH_FLOOR 0.05
static void expect_dqkv_close(const vit_ops *g, const char *what, const float *got,
                              const float *want, size_t rows, int D, double tol)
{
    static const char *names[3] = {"dq", "dk", "dv"};
    char sub[160];
    double all = 0;
    for (size_t i = 0; i < rows * 3 * (size_t)D; i++)
        if (fabs((double)want[i]) > all) all = fabs((double)want[i]);
    for (int p = 0; p < 3; p++) {
        snprintf(sub, sizeof sub, "%s: %s", what, names[p]);
        expect_close_soft(g, sub, third(got, rows, D, p), third(want, rows, D, p),
                          rows * (size_t)D, tol, FLASH_FLOOR * all);
    }
}

static void flash_case(const vit_ops *g, int B, int T, int hd, int NH)
{
    const int D = hd * NH;
    char what[128], sub[160];
    snprintf(what, sizeof what, "flash attention B=%d T=%d hd=%d NH=%d", B, T, hd, NH);
    const size_t nq = (size_t)B * T * 3 * D, no = (size_t)B * T * D, nl = (size_t)B * NH * T;
    const size_t rows = (size_t)B * T;
    float *qkv = rnd_in(g, nq, 1, 0), *dout = rnd_in(g, no, 1, 0);
    float *want = hbuf(no), *want_lse = hbuf(nl), *want_d = hbuf(nq);
    void *cpu_scratch = hbuf_bytes(ops_cpu_attention_scratch_bytes(B, T, D, NH));
    attention_forward_cpu(want, want_lse, cpu_scratch, qkv, B, T, D, NH);
    float *out_x = copy_of(want, no);
    round_lp(g, out_x, out_x, no); /* the backward's out, as the GPU stores it */
    attention_backward_cpu(want_d, cpu_scratch, dout, qkv, out_x, want_lse, B, T, D, NH);

    const size_t sb = g->attention_scratch_bytes(B, T, D, NH);
    cr_assert_eq(sb, att_scratch_bytes(B, T, D, NH, g->floatx_bytes),
                 "%s %s: scratch %zu bytes, the planner's formula says %zu", g->name, what, sb,
                 att_scratch_bytes(B, T, D, NH, g->floatx_bytes));
    cr_assert_eq(sb, att_flash_scratch_bytes(B, T, NH), "%s %s: not the flash path's scratch",
                 g->name, what);
    void *scratch = dev_alloc(g, sb / sizeof(float) + 1, F32);
    floatX *d_qkv = dev_from_host(g, qkv, nq, FX), *d_dout = dev_from_host(g, dout, no, FX);
    floatX *d_out = dev_out(g, no, FX), *d_dqkv = dev_out(g, nq, FX);
    float *d_lse = dev_out(g, nl, F32);

    /* forward: against the CPU */
    g->attention_forward(d_out, d_lse, scratch, d_qkv, B, T, D, NH);
    status_ok(g, what);
    float *out1 = host_from_dev(g, d_out, no, FX), *lse1 = host_from_dev(g, d_lse, nl, F32);
    snprintf(sub, sizeof sub, "%s: out", what);
    expect_close_soft(g, sub, out1, want, no, tol_x(g), 0);
    snprintf(sub, sizeof sub, "%s: lse", what);
    expect_close_soft(g, sub, lse1, want_lse, nl, tol_x(g), 0);

    /* backward from the CPU's out and lse: against the CPU */
    floatX *d_outc = dev_from_host(g, out_x, no, FX);
    float *d_lsec = dev_from_host(g, want_lse, nl, F32);
    g->attention_backward(d_dqkv, scratch, d_dout, d_qkv, d_outc, d_lsec, B, T, D, NH);
    status_ok(g, what);
    float *dqkv1 = host_from_dev(g, d_dqkv, nq, FX);
    expect_dqkv_close(g, what, dqkv1, want_d, rows, D, tol_x(g));

    /* the unfused CUDA path on the same inputs */
    const vit_ops *u = unfused_of(g);
    void *uscratch = dev_alloc(u, u->attention_scratch_bytes(B, T, D, NH) / sizeof(float) + 1,
                               F32);
    floatX *u_out = dev_out(u, no, FX), *u_dqkv = dev_out(u, nq, FX);
    float *u_lse = dev_out(u, nl, F32);
    u->attention_forward(u_out, u_lse, uscratch, d_qkv, B, T, D, NH);
    status_ok(u, what);
    snprintf(sub, sizeof sub, "%s: out against %s", what, u->name);
    expect_close_soft(g, sub, out1, host_from_dev(u, u_out, no, FX), no, tol_x(g), 0);
    snprintf(sub, sizeof sub, "%s: lse against %s", what, u->name);
    expect_close_soft(g, sub, lse1, host_from_dev(u, u_lse, nl, F32), nl, tol_x(g), 0);
    u->attention_backward(u_dqkv, uscratch, d_dout, d_qkv, d_outc, d_lsec, B, T, D, NH);
    status_ok(u, what);
    snprintf(sub, sizeof sub, "%s against %s", what, u->name);
    expect_dqkv_close(g, sub, dqkv1, host_from_dev(u, u_dqkv, nq, FX), rows, D, tol_x(g));

    /* forward and backward again: the same bits; then with the tiles copied
     * through registers (OPS_FLASH_SYNC_LOADS) instead of cp.async: the
     * same bits too */
    const vit_ops *runs[2] = {g, sync_loads_of(g)};
    for (int k = 0; k < 2; k++) {
        const vit_ops *t = runs[k];
        const char *how = k ? t->name : "again";
        poison(g, d_out, no, FX);
        poison(g, d_lse, nl, F32);
        poison(g, d_dqkv, nq, FX);
        t->attention_forward(d_out, d_lse, scratch, d_qkv, B, T, D, NH);
        t->attention_backward(d_dqkv, scratch, d_dout, d_qkv, d_outc, d_lsec, B, T, D, NH);
        status_ok(t, what);
        snprintf(sub, sizeof sub, "%s: out, %s", what, how);
        expect_same_soft(g, sub, host_from_dev(g, d_out, no, FX), out1, no);
        snprintf(sub, sizeof sub, "%s: lse, %s", what, how);
        expect_same_soft(g, sub, host_from_dev(g, d_lse, nl, F32), lse1, nl);
        snprintf(sub, sizeof sub, "%s: dqkv, %s", what, how);
        expect_same_soft(g, sub, host_from_dev(g, d_dqkv, nq, FX), dqkv1, nq);
    }

    /* the fused backward (OPS_CANDIDATE_KERNELS), from a NaN-poisoned
     * scratch of its own size: dq, dk, dv against the CPU; dk and dv the
     * two kernels' bits; a second run the same bits */
    const vit_ops *f = candidates_of(g);
    const size_t fb = f->attention_scratch_bytes(B, T, D, NH);
    cr_assert_eq(fb, att_flash_fused_scratch_bytes(B, T, D, NH),
                 "%s %s: scratch %zu bytes, attention_scratch.h says %zu", f->name, what, fb,
                 att_flash_fused_scratch_bytes(B, T, D, NH));
    void *fscratch = dev_alloc(f, fb / sizeof(float) + 1, F32);
    float *fd[2];
    for (int k = 0; k < 2; k++) {
        poison(f, fscratch, fb / sizeof(float), F32);
        poison(f, d_dqkv, nq, FX);
        f->attention_backward(d_dqkv, fscratch, d_dout, d_qkv, d_outc, d_lsec, B, T, D, NH);
        status_ok(f, what);
        fd[k] = host_from_dev(f, d_dqkv, nq, FX);
    }
    snprintf(sub, sizeof sub, "%s, %s", what, f->name);
    expect_dqkv_close(g, sub, fd[0], want_d, rows, D, tol_x(g));
    for (int p = 1; p < 3; p++) {
        snprintf(sub, sizeof sub, "%s: %s, %s against %s", what, p == 1 ? "dk" : "dv", f->name,
                 g->name);
        expect_same_soft(g, sub, third(fd[0], rows, D, p), third(dqkv1, rows, D, p), no);
    }
    snprintf(sub, sizeof sub, "%s: dqkv, %s again", what, f->name);
    expect_same_soft(g, sub, fd[1], fd[0], nq);
    release_all();
}

static const int FLASH_HD[] = {32, 64, 80, 128};
static const int FLASH_T[] = {1, 7, 197, 257, 577};

static void check_flash_attention(const vit_ops *g)
{
    for (size_t i = 0; i < sizeof FLASH_HD / sizeof FLASH_HD[0]; i++)
        for (size_t j = 0; j < sizeof FLASH_T / sizeof FLASH_T[0]; j++)
            flash_case(g, FLASH_T[j] < 100 ? 3 : 2, FLASH_T[j], FLASH_HD[i], 2);
    /* the other padded head dims (hd % 16 == 8 and the rest), and one
     * head: every HDP the kernels are built for */
    static const int more[][2] = {{40, 3}, {48, 1}, {56, 2}, {72, 1}, {88, 2}, {96, 1},
                                  {104, 1}, {112, 2}, {120, 1}};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) flash_case(g, 1, 67, more[i][0],
                                                                       more[i][1]);
}
Test(cuda_bf16,
     flash_attention_matches_cpu_and_unfused_and_repeats_bit_for_bit_with_either_tile_copy,
     .fini = release_all)
{
    check_flash_attention(gpu_or_skip(OPS_BF16));
}
Test(cuda_fp16,
     flash_attention_matches_cpu_and_unfused_and_repeats_bit_for_bit_with_either_tile_copy,
     .fini = release_all)
{
    check_flash_attention(gpu_or_skip(OPS_FP16));
}

/* The fused backward in several launches (att_flash_fused_heads heads
 * each, the parts reused): B=18 NH=12 at T=577, hd 64 (216 heads, 181 a
 * launch), against the default tables' two kernels on the same inputs:
 * dk and dv the same bits, dq within tol_x; a second run the same bits. */
static void check_fused_launches(const vit_ops *g)
{
    const int B = 18, T = 577, NH = 12, hd = 64, D = NH * hd;
    const size_t nq = (size_t)B * T * 3 * D, no = (size_t)B * T * D, nl = (size_t)B * NH * T;
    const size_t rows = (size_t)B * T;
    const vit_ops *f = candidates_of(g);
    cr_assert_lt(att_flash_fused_heads(B, T, D, NH), B * NH, "one launch would take every head");
    floatX *d_qkv = dev_from_host(g, rnd_in(g, nq, 1, 0), nq, FX);
    floatX *d_dout = dev_from_host(g, rnd_in(g, no, 1, 0), no, FX);
    floatX *d_out = dev_out(g, no, FX), *d_dqkv = dev_out(g, nq, FX);
    float *d_lse = dev_out(g, nl, F32);
    void *scratch = dev_alloc(g, g->attention_scratch_bytes(B, T, D, NH) / sizeof(float) + 1, F32);
    const size_t fb = f->attention_scratch_bytes(B, T, D, NH);
    void *fscratch = dev_alloc(f, fb / sizeof(float) + 1, F32);
    g->attention_forward(d_out, d_lse, scratch, d_qkv, B, T, D, NH);
    g->attention_backward(d_dqkv, scratch, d_dout, d_qkv, d_out, d_lse, B, T, D, NH);
    status_ok(g, "fused launches: the two kernels");
    float *want = host_from_dev(g, d_dqkv, nq, FX), *got[2];
    for (int k = 0; k < 2; k++) {
        poison(f, fscratch, fb / sizeof(float), F32);
        poison(f, d_dqkv, nq, FX);
        f->attention_backward(d_dqkv, fscratch, d_dout, d_qkv, d_out, d_lse, B, T, D, NH);
        status_ok(f, "fused launches");
        got[k] = host_from_dev(f, d_dqkv, nq, FX);
    }
    expect_dqkv_close(g, "fused launches against the two kernels", got[0], want, rows, D,
                      tol_x(g));
    expect_same_soft(g, "fused launches: dk", third(got[0], rows, D, 1), third(want, rows, D, 1),
                     no);
    expect_same_soft(g, "fused launches: dv", third(got[0], rows, D, 2), third(want, rows, D, 2),
                     no);
    expect_same_soft(g, "fused launches: again", got[1], got[0], nq);
}
Test(cuda_bf16, flash_fused_backward_in_several_launches_matches_the_two_kernels,
     .fini = release_all)
{
    check_fused_launches(gpu_or_skip(OPS_BF16));
}
Test(cuda_fp16, flash_fused_backward_in_several_launches_matches_the_two_kernels,
     .fini = release_all)
{
    check_fused_launches(gpu_or_skip(OPS_FP16));
}

/* ------------------------------------------------------------------------ */
/* GELU (exact erf form), floatX in and out: tol_x. Sizes that are not
 * multiples of any vector width. Backward both into a separate dinp and in
 * place (dinp == dout, which ops.h allows). */

static const size_t GELU_SIZES[] = {4099, 65539};

static void check_gelu_forward(const vit_ops *g)
{
    for (size_t s = 0; s < 2; s++) {
        size_t n = GELU_SIZES[s];
        char what[64];
        snprintf(what, sizeof what, "gelu_forward n=%zu", n);
        float *inp = rnd_in(g, n, 3, 0), *want = hbuf(n);
        gelu_forward_cpu(want, inp, n);
        floatX *d_out = dev_out(g, n, FX);
        g->gelu_forward(d_out, dev_from_host(g, inp, n, FX), n);
        status_ok(g, what);
        expect_close(g, what, host_from_dev(g, d_out, n, FX), want, n, tol_x(g));
        release_all();
    }
}
GPU_TESTS(gelu_forward_matches_cpu, check_gelu_forward)

static void check_gelu_backward(const vit_ops *g)
{
    for (size_t s = 0; s < 2; s++) {
        for (int in_place = 0; in_place <= 1; in_place++) {
            size_t n = GELU_SIZES[s];
            char what[80];
            snprintf(what, sizeof what, "gelu_backward n=%zu %s", n,
                     in_place ? "dinp == dout" : "dinp != dout");
            float *inp = rnd_in(g, n, 3, 0), *dout = rnd_in(g, n, 1, 0), *want = hbuf(n);
            gelu_backward_cpu(want, inp, dout, n);
            floatX *d_dout = dev_from_host(g, dout, n, FX);
            floatX *d_dinp = in_place ? d_dout : dev_out(g, n, FX);
            g->gelu_backward(d_dinp, dev_from_host(g, inp, n, FX), d_dout, n);
            status_ok(g, what);
            expect_close(g, what, host_from_dev(g, d_dinp, n, FX), want, n, tol_x(g));
            release_all();
        }
    }
}
GPU_TESTS(gelu_backward_matches_cpu_in_place_and_not, check_gelu_backward)

/* ------------------------------------------------------------------------ */
/* to_floatx then to_float: on bf16 exactly round_bf16_cpu (nearest even,
 * ties, overflow to infinity, subnormals kept, NaN stays NaN), on fp32 the
 * same bits. Random values over a wide exponent range, exact ties, and the
 * special values. Not through dev_from_host (that uses the ops under test). */

static void check_floatx_round_trip(const vit_ops *g)
{
    const size_t n = 100003;
    float *x = hbuf(n), *want = hbuf(n), *got = hbuf(n);
    const float ulp1 = 1.0f / 128; /* bf16 spacing at 1 */
    const float special[] = {0.0f, -0.0f, 1.0f, 1.0f + ulp1 / 2, 1.0f + 3 * ulp1 / 2,
                             -(1.0f + 3 * ulp1 / 2), 1.0f + ulp1 / 2 + ulp1 / 64, 3.4e38f,
                             -3.4e38f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f, 1.17549435e-38f,
                             0.1f, 65504.0f, 1e-45f};
    const size_t ns = sizeof special / sizeof special[0];
    for (size_t i = 0; i < n; i++) {
        if (i < ns) {
            x[i] = special[i];
        } else if (i % 3 == 0) { /* an exact tie: the 16 dropped bits are 0x8000 */
            uint32_t u = (uint32_t)rng_u64(&R);
            u = (u & 0xffff0000u) | 0x8000u;
            if (((u >> 23) & 0xff) == 0xff) u &= ~(1u << 30); /* not inf/NaN */
            memcpy(&x[i], &u, 4);
        } else {
            /* 2^-140 .. 2^126: subnormals, and a few overflows to infinity */
            x[i] = rng_normal(&R) * ldexpf(1.0f, (int)rng_below(&R, 267) - 140);
        }
    }
    round_lp(g, want, x, n);
    float *d_in = dev_alloc(g, n, F32), *d_back = dev_alloc(g, n, F32);
    floatX *d_x = dev_alloc(g, n, FX);
    g->upload(d_in, x, n * sizeof(float));
    g->to_floatx(d_x, d_in, n);
    status_ok(g, "to_floatx");
    g->to_float(d_back, d_x, n);
    status_ok(g, "to_float");
    g->download(got, d_back, n * sizeof(float));
    status_ok(g, "download");
    for (size_t i = 0; i < n; i++) {
        uint32_t a, b, in;
        memcpy(&a, &got[i], 4);
        memcpy(&b, &want[i], 4);
        memcpy(&in, &x[i], 4);
        if (isnan(want[i]))
            cr_assert(isnan(got[i]), "%s to_floatx/to_float [%zu]: NaN became %.9g", g->name, i,
                      got[i]);
        else
            cr_assert(a == b,
                      "%s to_floatx/to_float [%zu]: %.9g (0x%08x) gave %.9g (0x%08x), want %.9g "
                      "(0x%08x)",
                      g->name, i, x[i], (unsigned)in, got[i], (unsigned)a,
                      want[i], (unsigned)b);
    }
    release_all();
}
GPU_TESTS(to_floatx_then_to_float_equals_round_bf16_cpu_bit_for_bit, check_floatx_round_trip)

/* ------------------------------------------------------------------------ */
/* upload: the bytes arrive exactly, in order, whatever the size (big ones go
 * through two pinned staging buffers in 32 MiB pieces, and the host does not
 * wait for the DMA), and the host buffer may be reused the moment upload
 * returns. Sizes around the piece and the per-thread cuts, odd byte counts,
 * two uploads into one buffer (the second wins), and kernels between. */

/* n random bytes from the tests' generator R: each call a new pattern */
static void fill_bytes(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t u = rng_u64(&R);
        memcpy(p + i, &u, n - i < 8 ? n - i : 8);
    }
}

static void check_upload(const vit_ops *g)
{
    const size_t M = (size_t)1 << 20;
    const size_t sizes[] = {1, 4097, M - 1, M, 4 * M + 3, 32 * M, 32 * M + 1, 96 * M + 12345};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const size_t n = sizes[s];
        unsigned char *h = hbuf_bytes(n), *want1 = hbuf_bytes(n), *want2 = hbuf_bytes(n),
                      *got = hbuf_bytes(n);
        void *d1 = dev_alloc(g, n / 4 + 1, F32), *d2 = dev_alloc(g, n / 4 + 1, F32);
        /* d1 gets pattern 1, then the host buffer is overwritten at once and
         * d2 gets pattern 2, then d1 again pattern 2 over pattern 1 */
        fill_bytes(h, n);
        memcpy(want1, h, n);
        g->upload(d1, h, n);
        fill_bytes(h, n);
        memcpy(want2, h, n);
        g->upload(d2, h, n);
        memset(h, 0xA5, n);
        g->download(got, d2, n);
        status_ok(g, "upload");
        cr_assert(memcmp(got, want2, n) == 0, "%s upload of %zu bytes: the second buffer differs",
                  g->name, n);
        g->download(got, d1, n);
        cr_assert(memcmp(got, want1, n) == 0, "%s upload of %zu bytes: the first buffer differs",
                  g->name, n);
        g->upload(d1, want2, n);
        g->upload(d1, want1, n); /* the later upload wins */
        g->download(got, d1, n);
        status_ok(g, "upload twice");
        cr_assert(memcmp(got, want1, n) == 0,
                  "%s two uploads of %zu bytes into one buffer: not the second's bytes", g->name,
                  n);
        release_all();
    }
    /* small uploads (the ring of pinned slots): many more than the ring
     * holds, each host buffer rewritten at once, none waiting for the
     * stream; every one lands */
    {
        const size_t n = 700001, k = 29;
        unsigned char *h = hbuf_bytes(n), *want = hbuf_bytes(n * k), *got = hbuf_bytes(n * k);
        unsigned char *d = (unsigned char *)dev_alloc(g, n * k / 4 + 1, F32);
        g->synchronize();
        const unsigned long w = g->host_waits();
        for (size_t i = 0; i < k; i++) {
            fill_bytes(h, n);
            memcpy(want + i * n, h, n);
            g->upload(d + i * n, h, n);
            memset(h, 0x3C, n);
        }
        const unsigned long waited = g->host_waits() - w;
        g->download(got, d, n * k);
        status_ok(g, "small uploads");
        cr_expect(waited == 0, "%s: %zu small uploads waited for the stream %lu times", g->name,
                  k, waited);
        for (size_t i = 0; i < k; i++)
            cr_assert(memcmp(got + i * n, want + i * n, n) == 0,
                      "%s: small upload %zu of %zu (%zu bytes each) differs", g->name, i, k, n);
        release_all();
    }
    /* from pinned host memory (the trainer's batch buffer): the same bytes,
     * whole and from an offset inside it, and after unpin the usual way */
    {
        const size_t n = 40 * M + 5;
        unsigned char *h = hbuf_bytes(n), *want = hbuf_bytes(n), *got = hbuf_bytes(n);
        void *d = dev_alloc(g, n / 4 + 1, F32);
        cr_assert(g->pin(h, n) == 0, "%s: pin of %zu bytes failed", g->name, n);
        for (int round = 0; round < 3; round++) {
            fill_bytes(h, n);
            memcpy(want, h, n);
            const size_t off = round == 1 ? 4097 : 0;
            if (round == 2) g->unpin(h);
            const unsigned long w = g->host_waits();
            g->upload(d, h + off, n - off); /* pinned: queued, read by the DMA later */
            cr_expect(round == 2 || g->host_waits() == w,
                      "%s: an upload from pinned memory waited for the stream", g->name);
            g->wait_host(h + off); /* before writing it again (ops.h) */
            memset(h, 0x5A, n);
            g->download(got, d, n - off);
            status_ok(g, "upload from pinned memory");
            cr_assert(memcmp(got, want + off, n - off) == 0,
                      "%s upload of %zu bytes from %s host memory (offset %zu): bytes differ",
                      g->name, n - off, round == 2 ? "unpinned" : "pinned", off);
        }
        release_all();
    }
    /* an op queued after a big upload sees its bytes: scale reads them */
    const size_t n = 9 * M + 7; /* floats: 36 MB, two pieces */
    float *x = hbuf(n), *want = hbuf(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)(i % 1000) - 500.0f;
    for (size_t i = 0; i < n; i++) want[i] = x[i] * 0.5f;
    float *d = dev_alloc(g, n, F32);
    g->upload(d, x, n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = NAN; /* reused at once */
    g->scale(d, 0.5f, n);
    expect_same(g, "upload then scale", host_from_dev(g, d, n, F32), want, n);
    release_all();
}
GPU_TESTS(upload_delivers_exact_bytes_in_order_and_frees_the_host_buffer_at_once_pinned_or_not,
          check_upload)

/* upload_ahead: the next batch's copy on the copy engine, ordered by
 * consumed. Batch A lands, three queued readers sum its squares, consumed
 * says they were its last; batch B (written into the same pinned buffer once
 * wait_host allows) goes in ahead, and a reader queued after it sums B: the
 * first sums are A's, the last B's, bit for bit the plain upload's, and no
 * host wait on the way (64 MiB: the copy outlasts the reads queued before
 * consumed, so a copy that did not wait for them would change their sums).
 * From unpinned memory it is upload. */
static void check_upload_ahead(const vit_ops *g)
{
    const size_t n = (size_t)16 << 20; /* floats */
    float *h = hbuf(n), *a = hbuf(n), *b = hbuf(n);
    for (size_t i = 0; i < n; i++) a[i] = (float)(i % 977) * 0.25f - 60.0f;
    for (size_t i = 0; i < n; i++) b[i] = (float)(i % 613) * -0.5f + 7.0f;
    float *d = dev_alloc(g, n, F32);
    double *acc = (double *)dev_alloc(g, 8, F32), *out = (double *)g->host_alloc(4 * sizeof(double));
    cr_assert(out, "%s: host_alloc", g->name);
    g->upload(d, a, n * sizeof(float));
    const double want_a = g->sum_squares(d, n);
    g->upload(d, b, n * sizeof(float));
    const double want_b = g->sum_squares(d, n);
    cr_assert(g->pin(h, n * sizeof(float)) == 0, "%s: pin", g->name);
    memcpy(h, a, n * sizeof(float));
    g->synchronize();
    const unsigned long w = g->host_waits();
    g->upload_ahead(d, h, n * sizeof(float));
    for (int k = 0; k < 3; k++) g->sum_squares_into(acc + k, d, n, 0);
    g->consumed(d);
    g->wait_host(h); /* A's copy has read h */
    memcpy(h, b, n * sizeof(float));
    g->upload_ahead(d, h, n * sizeof(float));
    g->sum_squares_into(acc + 3, d, n, 0);
    g->consumed(d);
    g->download_async(out, acc, 4 * sizeof(double));
    const unsigned long waited = g->host_waits() - w;
    g->wait_host(out);
    status_ok(g, "upload_ahead");
    cr_expect(waited == 0, "%s: upload_ahead and its readers waited %lu times", g->name, waited);
    for (int k = 0; k < 3; k++)
        cr_assert(memcmp(&out[k], &want_a, sizeof want_a) == 0,
                  "%s: reader %d before consumed saw %.17g, batch A's sum is %.17g (B's %.17g)",
                  g->name, k, out[k], want_a, want_b);
    cr_assert(memcmp(&out[3], &want_b, sizeof want_b) == 0,
              "%s: the reader after upload_ahead saw %.17g, batch B's sum is %.17g", g->name, out[3],
              want_b);
    g->unpin(h);
    g->upload_ahead(d, a, n * sizeof(float)); /* not pinned: upload */
    const double again = g->sum_squares(d, n);
    status_ok(g, "upload_ahead from unpinned memory");
    cr_assert(memcmp(&again, &want_a, sizeof again) == 0, "%s: unpinned upload_ahead: %.17g vs %.17g",
              g->name, again, want_a);
    g->host_free(out);
    release_all();
}
GPU_TESTS(upload_ahead_lands_after_the_readers_before_consumed_and_before_those_after_it,
          check_upload_ahead)

/* ------------------------------------------------------------------------ */
/* zero, gather_cls, scatter_cls_backward, scale: fp32 data movement or one
 * rounding per element, the same kernels on both tables: exact. */

static void check_zero(const vit_ops *g)
{
    const size_t n = 100003;
    float *d = dev_out(g, n, F32);
    g->zero(d, n);
    status_ok(g, "zero");
    float *got = host_from_dev(g, d, n, F32), *want = hbuf(n);
    zero_cpu(want, n);
    expect_same(g, "zero n=100003", got, want, n);
    release_all();
}
GPU_TESTS(zero_writes_positive_zero_everywhere, check_zero)

static void check_gather_cls(const vit_ops *g)
{
    for (size_t s = 0; s < N_EMB_SHAPES; s++) {
        int B = EMB_SHAPES[s][0], T = EMB_SHAPES[s][1], D = EMB_SHAPES[s][2];
        char what[96];
        snprintf(what, sizeof what, "gather_cls B=%d T=%d D=%d", B, T, D);
        size_t nx = (size_t)B * T * D, no = (size_t)B * D;
        float *x = rnd_in(g, nx, 1, 0), *want = hbuf(no);
        gather_cls_cpu(want, x, B, T, D);
        float *d_out = dev_out(g, no, F32);
        g->gather_cls(d_out, dev_from_host(g, x, nx, F32), B, T, D);
        status_ok(g, what);
        expect_same(g, what, host_from_dev(g, d_out, no, F32), want, no);
        release_all();
    }
}
GPU_TESTS(gather_cls_copies_token_zero_exactly, check_gather_cls)

static void check_scatter_cls(const vit_ops *g)
{
    for (size_t s = 0; s < N_EMB_SHAPES; s++) {
        int B = EMB_SHAPES[s][0], T = EMB_SHAPES[s][1], D = EMB_SHAPES[s][2];
        char what[96];
        snprintf(what, sizeof what, "scatter_cls_backward B=%d T=%d D=%d", B, T, D);
        size_t nx = (size_t)B * T * D, nc = (size_t)B * D;
        float *dx0 = rnd_in(g, nx, 1, 0), *dcls = rnd_in(g, nc, 1, 0), *want = copy_of(dx0, nx);
        scatter_cls_backward_cpu(want, dcls, B, T, D);
        float *d_dx = dev_from_host(g, dx0, nx, F32);
        g->scatter_cls_backward(d_dx, dev_from_host(g, dcls, nc, F32), B, T, D);
        status_ok(g, what);
        expect_same(g, what, host_from_dev(g, d_dx, nx, F32), want, nx);
        release_all();
    }
}
GPU_TESTS(scatter_cls_backward_adds_to_token_zero_only, check_scatter_cls)

static void check_scale(const vit_ops *g)
{
    const size_t n = 100003;
    const float s = 0.37f;
    float *x = rnd_in(g, n, 1, 0), *want = copy_of(x, n);
    scale_cpu(want, s, n);
    float *d = dev_from_host(g, x, n, F32);
    g->scale(d, s, n);
    status_ok(g, "scale");
    expect_same(g, "scale n=100003", host_from_dev(g, d, n, F32), want, n);
    release_all();
}
GPU_TESTS(scale_multiplies_every_element_exactly, check_scale)

/* ------------------------------------------------------------------------ */
/* Cross-entropy. Forward: losses and probs fp32 from floatX logits by fp32
 * math: TOL_FP32 on both tables. Backward: dlogits floatX: tol_x, from the
 * CPU's probabilities on both sides. Targets live in device memory. Shapes
 * with K below, at and far above a warp. */

static const int CE_SHAPES[][2] = {{32, 10}, {7, 1000}, {5, 37}};
#define N_CE_SHAPES (sizeof CE_SHAPES / sizeof CE_SHAPES[0])

static int *targets_for(const vit_ops *g, int B, int K, int **host)
{
    int *t = hbuf_bytes((size_t)B * sizeof(int));
    for (int b = 0; b < B; b++) t[b] = (int)rng_below(&R, (uint64_t)K);
    t[0] = 0, t[B - 1] = K - 1; /* both ends of the range */
    _Static_assert(sizeof(int) == sizeof(float), "targets are allocated as fp32 elements");
    int *d = dev_alloc(g, (size_t)B, F32);
    g->upload(d, t, (size_t)B * sizeof(int));
    status_ok(g, "upload targets");
    *host = t;
    return d;
}

static void check_crossentropy_forward(const vit_ops *g)
{
    for (size_t s = 0; s < N_CE_SHAPES; s++) {
        int B = CE_SHAPES[s][0], K = CE_SHAPES[s][1];
        char what[96], sub[128];
        snprintf(what, sizeof what, "crossentropy_forward B=%d K=%d", B, K);
        size_t nl = (size_t)B * K;
        int *t;
        int *d_t = targets_for(g, B, K, &t);
        float *logits = rnd_in(g, nl, 3, 0), *want_l = hbuf(B), *want_p = hbuf(nl);
        crossentropy_forward_cpu(want_l, want_p, logits, t, B, K);
        float *d_l = dev_out(g, B, F32), *d_p = dev_out(g, nl, F32);
        g->crossentropy_forward(d_l, d_p, dev_from_host(g, logits, nl, FX), d_t, B, K);
        status_ok(g, what);
        snprintf(sub, sizeof sub, "%s: losses", what);
        expect_close(g, sub, host_from_dev(g, d_l, B, F32), want_l, B, TOL_FP32);
        snprintf(sub, sizeof sub, "%s: probs", what);
        expect_close(g, sub, host_from_dev(g, d_p, nl, F32), want_p, nl, TOL_FP32);
        release_all();
    }
}
GPU_TESTS(crossentropy_forward_matches_cpu_losses_and_probs, check_crossentropy_forward)

static void check_crossentropy_backward(const vit_ops *g)
{
    for (size_t s = 0; s < N_CE_SHAPES; s++) {
        int B = CE_SHAPES[s][0], K = CE_SHAPES[s][1];
        char what[96];
        snprintf(what, sizeof what, "crossentropy_backward B=%d K=%d", B, K);
        size_t nl = (size_t)B * K;
        int *t;
        int *d_t = targets_for(g, B, K, &t);
        float *logits = rnd_in(g, nl, 3, 0), *losses = hbuf(B), *probs = hbuf(nl);
        crossentropy_forward_cpu(losses, probs, logits, t, B, K);
        const float dloss = 1.0f / (float)B;
        float *want = hbuf(nl);
        crossentropy_backward_cpu(want, probs, t, dloss, B, K);
        floatX *d_dl = dev_out(g, nl, FX);
        g->crossentropy_backward(d_dl, dev_from_host(g, probs, nl, F32), d_t, dloss, B, K);
        status_ok(g, what);
        expect_close(g, what, host_from_dev(g, d_dl, nl, FX), want, nl, tol_x(g));
        release_all();
    }
}
GPU_TESTS(crossentropy_backward_matches_cpu, check_crossentropy_backward)

/* Soft targets (issue 27): rows of a distribution, uneven, one exact zero
 * each. The same tolerances as the integer labels' (fp32 math on identical
 * values for the forward; dlogits floatX). */
static float *target_rows_for(int B, int K)
{
    float *t = hbuf((size_t)B * K);
    for (int b = 0; b < B; b++) {
        double sum = 0;
        for (int k = 0; k < K; k++)
            sum += t[(size_t)b * K + k] = k == b % K ? 0.0f : rng_uniform(&R);
        for (int k = 0; k < K; k++) t[(size_t)b * K + k] = (float)(t[(size_t)b * K + k] / sum);
    }
    return t;
}

static void check_crossentropy_soft(const vit_ops *g)
{
    for (size_t s = 0; s < N_CE_SHAPES; s++) {
        int B = CE_SHAPES[s][0], K = CE_SHAPES[s][1];
        char what[96], sub[128];
        snprintf(what, sizeof what, "crossentropy_soft B=%d K=%d", B, K);
        size_t nl = (size_t)B * K;
        float *t = target_rows_for(B, K), *d_t = dev_from_host(g, t, nl, F32);
        float *logits = rnd_in(g, nl, 3, 0), *want_l = hbuf(B), *want_p = hbuf(nl);
        crossentropy_soft_forward_cpu(want_l, want_p, logits, t, B, K);
        float *d_l = dev_out(g, B, F32), *d_p = dev_out(g, nl, F32);
        g->crossentropy_soft_forward(d_l, d_p, dev_from_host(g, logits, nl, FX), d_t, B, K);
        status_ok(g, what);
        snprintf(sub, sizeof sub, "%s: losses", what);
        expect_close(g, sub, host_from_dev(g, d_l, B, F32), want_l, B, TOL_FP32);
        snprintf(sub, sizeof sub, "%s: probs", what);
        expect_close(g, sub, host_from_dev(g, d_p, nl, F32), want_p, nl, TOL_FP32);
        const float dloss = 1.0f / (float)B;
        float *want = hbuf(nl);
        crossentropy_soft_backward_cpu(want, want_p, t, dloss, B, K);
        floatX *d_dl = dev_out(g, nl, FX);
        g->crossentropy_soft_backward(d_dl, dev_from_host(g, want_p, nl, F32), d_t, dloss, B, K);
        status_ok(g, what);
        snprintf(sub, sizeof sub, "%s: dlogits", what);
        expect_close(g, sub, host_from_dev(g, d_dl, nl, FX), want, nl, tol_x(g));
        release_all();
    }
}
GPU_TESTS(crossentropy_soft_matches_cpu_losses_probs_and_gradient, check_crossentropy_soft)

/* Drop path (issue 27): one product and one sum per element, each rounded
 * once on both sides (no FMA): exact; the gradient a product stored as
 * floatX: exact against the cpu-like table. Scales: kept, dropped, 1. */
static void check_droppath(const vit_ops *g)
{
    const int B = 5;
    const size_t n = 197 * 24; /* a sample's tokens x width */
    char what[96];
    snprintf(what, sizeof what, "droppath B=%d n=%zu", B, n);
    float scale[5] = {1.25f, 0.0f, 1.0f, 1.0f / 0.9f, 0.0f};
    float *res = rnd_in(g, B * n, 1, 0), *br = rnd_in(g, B * n, 1, 0), *want = hbuf(B * n);
    droppath_forward_cpu(want, res, br, scale, B, n);
    float *d_s = dev_from_host(g, scale, B, F32), *d_res = dev_from_host(g, res, B * n, F32);
    float *d_out = dev_out(g, B * n, F32);
    g->droppath_forward(d_out, d_res, dev_from_host(g, br, B * n, F32), d_s, B, n);
    status_ok(g, what);
    expect_same(g, what, host_from_dev(g, d_out, B * n, F32), want, B * n);
    /* in place: out = res */
    g->droppath_forward(d_res, d_res, dev_from_host(g, br, B * n, F32), d_s, B, n);
    status_ok(g, what);
    expect_same(g, what, host_from_dev(g, d_res, B * n, F32), want, B * n);
    float *want_d = hbuf(B * n);
    cpu_like(g)->droppath_backward(want_d, res, scale, B, n);
    floatX *d_db = dev_out(g, B * n, FX);
    g->droppath_backward(d_db, dev_from_host(g, res, B * n, F32), d_s, B, n);
    status_ok(g, what);
    expect_same(g, what, host_from_dev(g, d_db, B * n, FX), want_d, B * n);
    release_all();
}
GPU_TESTS(droppath_matches_cpu_exactly, check_droppath)

/* ------------------------------------------------------------------------ */
/* sum_squares: fp32 squares summed in double, in different orders on the
 * two sides: relative 1e-9 (double rounding over 1e6 terms is ~1e-12).
 * Deterministic: two GPU calls give the same bits. Sizes below a block,
 * odd, and many grids' worth. */

static void check_sum_squares(const vit_ops *g)
{
    const size_t sizes[] = {1, 37, 1000003};
    for (size_t s = 0; s < 3; s++) {
        size_t n = sizes[s];
        float *x = rnd_in(g, n, 1, 0);
        double want = sum_squares_cpu(x, n);
        float *d = dev_from_host(g, x, n, F32);
        double a = g->sum_squares(d, n);
        status_ok(g, "sum_squares");
        double b = g->sum_squares(d, n);
        status_ok(g, "sum_squares");
        cr_assert(fabs(a - want) <= 1e-9 * want,
                  "%s sum_squares n=%zu: %.17g vs cpu %.17g (relative %.3g)", g->name, n, a, want,
                  fabs(a - want) / want);
        cr_assert(memcmp(&a, &b, sizeof a) == 0,
                  "%s sum_squares n=%zu is not deterministic: %.17g then %.17g", g->name, n, a, b);
        release_all();
    }
}
GPU_TESTS(sum_squares_matches_cpu_to_1e_9_and_repeats_bit_for_bit, check_sum_squares)

/* sum_squares_into: queued, no host wait; stored then added over two cuts
 * it is 0.0 + sum_squares(first) + sum_squares(rest), bit for bit (the same
 * kernels); the result read back to host_alloc's memory by download_async,
 * there after wait_host; and none of it counted by host_waits. */
static void check_sum_squares_into(const vit_ops *g)
{
    const size_t n = 1000003, cut = 333331;
    float *x = rnd_in(g, n, 1, 0);
    float *d = dev_from_host(g, x, n, F32);
    double *acc = (double *)dev_alloc(g, 2, F32);
    double *host = (double *)g->host_alloc(sizeof(double));
    cr_assert(host, "%s: host_alloc", g->name);
    const double want = 0.0 + g->sum_squares(d, cut) + g->sum_squares(d + cut, n - cut);
    g->synchronize();
    const unsigned long w = g->host_waits();
    g->sum_squares_into(acc, d, cut, 0);
    g->sum_squares_into(acc, d + cut, n - cut, 1);
    g->download_async(host, acc, sizeof(double));
    const unsigned long queued = g->host_waits() - w;
    g->wait_host(host);
    status_ok(g, "sum_squares_into");
    cr_expect(queued == 0, "%s: sum_squares_into and download_async waited %lu times", g->name,
              queued);
    cr_assert(memcmp(host, &want, sizeof want) == 0, "%s: %.17g, the two sums added %.17g",
              g->name, *host, want);
    g->host_free(host);
    release_all();
}
GPU_TESTS(sum_squares_into_queues_without_a_wait_and_adds_in_order, check_sum_squares_into)

/* ------------------------------------------------------------------------ */
/* AdamW: p, m, v fp32 on both tables (the same kernel): TOL_FP32, and the
 * update p - p0 itself within 1e-3 normwise (the two sides' fp32 rounding of
 * p, |p| < ~5, is ~5e-7 against updates ~1e-2, so a wrong formula cannot
 * hide behind the size of p). With p_lp: it must hold exactly to_floatx(p)
 * of the GPU's new p (compared through to_float, and on the host with
 * round_bf16_cpu). Steps t = 1 and t = 7 (bias corrections). */

static void adamw_case(const vit_ops *g, long t, int with_lp)
{
    char what[96], sub[128];
    snprintf(what, sizeof what, "adamw_update t=%ld %s", t, with_lp ? "p_lp" : "p_lp NULL");
    const size_t n = 100003;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    float *p0 = rnd_in(g, n, 1, 0), *m0 = rnd_in(g, n, 0.1f, 0), *v0 = hbuf(n);
    float *grad = rnd_in(g, n, 0.1f, 0);
    for (size_t i = 0; i < n; i++) v0[i] = 0.01f * (0.5f + rng_uniform(&R));
    float *p = copy_of(p0, n), *m = copy_of(m0, n), *v = copy_of(v0, n);
    adamw_update_cpu(p, NULL, m, v, grad, n, lr, b1, b2, eps, wd, t);
    float *d_p = dev_from_host(g, p0, n, F32), *d_m = dev_from_host(g, m0, n, F32);
    float *d_v = dev_from_host(g, v0, n, F32);
    floatX *d_lp = with_lp ? dev_out(g, n, FX) : NULL;
    g->adamw_update(d_p, d_lp, d_m, d_v, dev_from_host(g, grad, n, F32), n, lr, b1, b2, eps, wd,
                    t);
    status_ok(g, what);
    float *gp = host_from_dev(g, d_p, n, F32);
    snprintf(sub, sizeof sub, "%s: p", what);
    expect_close(g, sub, gp, p, n, TOL_FP32);
    snprintf(sub, sizeof sub, "%s: m", what);
    expect_close(g, sub, host_from_dev(g, d_m, n, F32), m, n, TOL_FP32);
    snprintf(sub, sizeof sub, "%s: v", what);
    expect_close(g, sub, host_from_dev(g, d_v, n, F32), v, n, TOL_FP32);
    float *du_gpu = hbuf(n), *du_cpu = hbuf(n);
    for (size_t i = 0; i < n; i++) du_gpu[i] = gp[i] - p0[i], du_cpu[i] = p[i] - p0[i];
    snprintf(sub, sizeof sub, "%s: the update p - p0", what);
    expect_close(g, sub, du_gpu, du_cpu, n, 1e-3);
    if (with_lp) {
        floatX *d_conv = dev_alloc(g, n, FX);
        g->to_floatx(d_conv, d_p, n);
        status_ok(g, "to_floatx");
        float *lp = host_from_dev(g, d_lp, n, FX), *conv = host_from_dev(g, d_conv, n, FX);
        snprintf(sub, sizeof sub, "%s: p_lp vs to_floatx(p)", what);
        expect_same(g, sub, lp, conv, n);
        float *rounded = copy_of(gp, n);
        round_lp(g, rounded, rounded, n);
        snprintf(sub, sizeof sub, "%s: p_lp vs round_%s_cpu(p)", what, g->fp16 ? "fp16" : "bf16");
        expect_same(g, sub, lp, rounded, n);
    }
    release_all();
}

static void check_adamw(const vit_ops *g)
{
    adamw_case(g, 1, 0);
    adamw_case(g, 1, 1);
    adamw_case(g, 7, 0);
    adamw_case(g, 7, 1);
}
GPU_TESTS(adamw_update_matches_cpu_and_p_lp_is_to_floatx_of_p, check_adamw)

/* ------------------------------------------------------------------------ */
/* adamw_multi: one launch over a device table of pieces, against (a) the
 * same GPU's per-piece sequence it replaces (scale by the unscale, scale by
 * the clip coefficient, adamw_update): every bit of p, m, v and p_lp the
 * same, and (b) the CPU reference adamw_multi_cpu: p, m, v within TOL_FP32,
 * the update within 1e-3 (as adamw_case), p_lp exactly p rounded to floatX.
 * The table: 80 pieces, lengths 0 (several, the first one included) to
 * 100003, odd ones crossing the kernel's chunks of 2048, runs of tiny pieces
 * that share a chunk; spaced apart in p and g, every other one with a
 * low-precision copy; the gradients read and left as they were. */
static void adamw_multi_gpu_case(const vit_ops *g, long t, float b1, float unscale,
                                 float want_clip, float gmag)
{
    /* want_clip < 1: a sum of squares in device memory whose coefficient
     * (gradClip 1) is about that, derived by the op on the device; the
     * per-piece sequence and the CPU use adamw_clip_factor's */
    double norm_sq = 0.0, *d_sq = NULL;
    float clip = 1.0f;
    if (want_clip < 1.0f) {
        const double norm = (1.0 / want_clip - 1e-6) / (double)unscale;
        norm_sq = norm * norm;
        clip = adamw_clip_factor(norm_sq, unscale, 1.0);
        d_sq = (double *)dev_alloc(g, 2, F32);
        g->upload(d_sq, &norm_sq, sizeof norm_sq);
    }
    enum { NP = 80 };
    const size_t first[12] = {0, 1, 7, 2048, 2049, 3, 0, 100003, 511, 4097, 0, 2047};
    adamw_piece *pc = hbuf_bytes(NP * sizeof *pc);
    size_t total = 0, span = 0;
    for (int k = 0; k < NP; k++) {
        const size_t n = k < 12 ? first[k] : (size_t)(k * 7) % 13;
        pc[k] = (adamw_piece){.start = total, .n = n, .at = span + 5, .state = total,
                              .lr_scale = 1.0 / (1.0 + 0.1 * k),
                              .weight_decay = k % 3 ? 0.05f : 0.0f};
        total += n;
        span += n + 5;
    }
    char what[96], sub[160];
    snprintf(what, sizeof what, "adamw_multi t=%ld beta1=%g unscale=%g clip=%g", t, b1, unscale,
             clip);
    const double lr = 2e-3;
    const float b2 = 0.999f, eps = 1e-8f;
    float *p0 = rnd_in(g, span, 1, 0), *lp0 = rnd_in(g, span, 1, 0), *gr = hbuf(span);
    for (size_t i = 0; i < span; i++) gr[i] = gmag * rng_normal(&R); /* fp32 on every table */
    float *m0 = rnd_in(g, total, 0.1f, 0), *v0 = hbuf(total);
    for (size_t i = 0; i < total; i++) v0[i] = 0.01f * (0.5f + rng_uniform(&R));
    /* two device copies of everything: the multi-tensor launch and the per-piece sequence */
    float *d_p[2], *d_m[2], *d_v[2], *d_g[2];
    floatX *d_lp[2];
    for (int c = 0; c < 2; c++) {
        d_p[c] = dev_from_host(g, p0, span, F32), d_g[c] = dev_from_host(g, gr, span, F32);
        d_m[c] = dev_from_host(g, m0, total, F32), d_v[c] = dev_from_host(g, v0, total, F32);
        d_lp[c] = dev_from_host(g, lp0, span, FX);
    }
    adamw_piece *dpc = hbuf_bytes(NP * sizeof *dpc);
    for (int k = 0; k < NP; k++) {
        dpc[k] = pc[k];
        if (k % 2 == 0) dpc[k].p_lp = (floatX *)((char *)d_lp[0] + pc[k].at * g->floatx_bytes);
    }
    adamw_piece *d_tab = dev_alloc(g, (NP * sizeof *dpc + 3) / 4, F32);
    g->upload(d_tab, dpc, NP * sizeof *dpc);
    g->adamw_multi(d_p[0], d_m[0], d_v[0], d_g[0], d_tab, NP, total, lr, unscale, d_sq, 1.0, b1,
                   b2, eps, t);
    status_ok(g, what);
    for (int k = 0; k < NP; k++) {
        if (pc[k].n == 0) continue;
        float *gk = d_g[1] + pc[k].at;
        g->scale(gk, unscale, pc[k].n);
        g->scale(gk, clip, pc[k].n);
        floatX *lp = k % 2 ? NULL : (floatX *)((char *)d_lp[1] + pc[k].at * g->floatx_bytes);
        g->adamw_update(d_p[1] + pc[k].at, lp, d_m[1] + pc[k].state, d_v[1] + pc[k].state, gk,
                        pc[k].n, (float)(lr * pc[k].lr_scale), b1, b2, eps, pc[k].weight_decay,
                        t);
    }
    status_ok(g, "the per-piece sequence");
    float *gp = host_from_dev(g, d_p[0], span, F32), *gm = host_from_dev(g, d_m[0], total, F32);
    float *gv = host_from_dev(g, d_v[0], total, F32), *glp = host_from_dev(g, d_lp[0], span, FX);
    snprintf(sub, sizeof sub, "%s: the gradients after it", what);
    expect_same(g, sub, host_from_dev(g, d_g[0], span, F32), gr, span);
    snprintf(sub, sizeof sub, "%s: p vs the per-piece sequence", what);
    expect_same(g, sub, gp, host_from_dev(g, d_p[1], span, F32), span);
    snprintf(sub, sizeof sub, "%s: m vs the per-piece sequence", what);
    expect_same(g, sub, gm, host_from_dev(g, d_m[1], total, F32), total);
    snprintf(sub, sizeof sub, "%s: v vs the per-piece sequence", what);
    expect_same(g, sub, gv, host_from_dev(g, d_v[1], total, F32), total);
    snprintf(sub, sizeof sub, "%s: p_lp vs the per-piece sequence", what);
    expect_same(g, sub, glp, host_from_dev(g, d_lp[1], span, FX), span);
    /* the CPU reference, fp32 (p_lp checked against the GPU's own p below) */
    float *p = copy_of(p0, span), *m = copy_of(m0, total), *v = copy_of(v0, total);
    adamw_multi_cpu(p, m, v, gr, pc, NP, total, lr, unscale, clip, b1, b2, eps, t, NULL);
    snprintf(sub, sizeof sub, "%s: p vs cpu", what);
    expect_close(g, sub, gp, p, span, TOL_FP32);
    snprintf(sub, sizeof sub, "%s: m vs cpu", what);
    expect_close(g, sub, gm, m, total, TOL_FP32);
    snprintf(sub, sizeof sub, "%s: v vs cpu", what);
    expect_close(g, sub, gv, v, total, TOL_FP32);
    float *du_gpu = hbuf(span), *du_cpu = hbuf(span), *want_lp = copy_of(lp0, span);
    for (size_t i = 0; i < span; i++) du_gpu[i] = gp[i] - p0[i], du_cpu[i] = p[i] - p0[i];
    snprintf(sub, sizeof sub, "%s: the update p - p0 vs cpu", what);
    expect_close(g, sub, du_gpu, du_cpu, span, 1e-3);
    for (int k = 0; k < NP; k += 2) round_lp(g, want_lp + pc[k].at, gp + pc[k].at, pc[k].n);
    snprintf(sub, sizeof sub, "%s: p_lp vs the GPU's p rounded (elsewhere untouched)", what);
    expect_same(g, sub, glp, want_lp, span);
    release_all();
}

static void check_adamw_multi(const vit_ops *g)
{
    adamw_multi_gpu_case(g, 1, 0.9f, 1.0f / 65536, 0.37f, 0.1f * 65536); /* fp16-mixed, clipped */
    adamw_multi_gpu_case(g, 7, 0.9f, 1.0f, 1.0f, 0.1f);                  /* neither */
    adamw_multi_gpu_case(g, 3, 0.9f, 1.0f, 0.61f, 0.1f);                 /* clipped */
    /* unscaled into fp32's subnormals, where (g x 2^-16) x clip and
     * g x (2^-16 x clip) differ; beta1 = 0: m is the gradient used */
    adamw_multi_gpu_case(g, 2, 0.0f, 1.0f / 65536, 0.9f, 1e-34f);
}
GPU_TESTS(adamw_multi_is_the_per_piece_sequence_bit_for_bit_and_matches_cpu, check_adamw_multi)

/* ------------------------------------------------------------------------ */
/* ema_update (training.ema): fp32 on both tables, every operation rounded on
 * its own on both sides, so the GPU's EMA must be the CPU's bit for bit, in
 * both branches of the lerp (w < 0.5 and w >= 0.5), and w = 1 must copy p.
 * swap: data movement, exact, both buffers. */

static void check_ema(const vit_ops *g)
{
    const size_t n = 100003;
    const float ws[] = {2e-4f, 0.25f, 0.5f, 0.63f, 1.0f};
    for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) {
        char what[64];
        snprintf(what, sizeof what, "ema_update w=%g", (double)ws[k]);
        float *e0 = rnd_in(g, n, 1, 0), *p = rnd_in(g, n, 1, 0.5f), *want = copy_of(e0, n);
        ema_update_cpu(want, p, n, ws[k]);
        float *d_e = dev_from_host(g, e0, n, F32);
        g->ema_update(d_e, dev_from_host(g, p, n, F32), n, ws[k]);
        status_ok(g, what);
        float *got = host_from_dev(g, d_e, n, F32);
        expect_same(g, what, got, want, n);
        if (ws[k] == 1.0f) expect_same(g, "ema_update w=1 against p", got, p, n);
        release_all();
    }
    float *a = rnd_in(g, n, 1, 0), *b = rnd_in(g, n, 1, 2);
    float *d_a = dev_from_host(g, a, n, F32), *d_b = dev_from_host(g, b, n, F32);
    g->swap(d_a, d_b, n);
    status_ok(g, "swap");
    expect_same(g, "swap: a", host_from_dev(g, d_a, n, F32), b, n);
    expect_same(g, "swap: b", host_from_dev(g, d_b, n, F32), a, n);
    release_all();
}
GPU_TESTS(ema_update_matches_cpu_bit_for_bit_and_swap_exchanges_exactly, check_ema)
