/* tests/test_kernels.c - the CPU ops of kernels/: every CPU op's backward against
 * central finite differences (tests/fd.h), forward properties, the
 * accumulation semantics of ops.h, AdamW against torch's formula (and the
 * multi-tensor adamw_multi against adamw_update per piece, bit for bit), bf16
 * rounding, and the ops of issue 27: the cross-entropy against soft targets
 * and drop path's per-sample residual add. The whole model is
 * tests/test_model.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fd.h"
#include "ops.h"

/* ---- matmul ---- */
typedef struct { float *out, *inp, *w, *b; int N, IC, OC; } mm_ctx;
static void mm_fwd(void *p)
{
    mm_ctx *c = p;
    matmul_forward_cpu(c->out, c->inp, c->w, c->b, c->N, c->IC, c->OC);
}

Test(kernels, matmul_backward_matches_finite_differences, .init = setup)
{
    mm_ctx c = {.N = 7, .IC = 5, .OC = 6};
    c.inp = rnd(35, 1), c.w = rnd(30, 0.5f), c.b = rnd(6, 0.5f), c.out = rnd(42, 1);
    float *r = rnd(42, 1), *dinp = rnd(35, 1), *dw = calloc(30, 4), *db = calloc(6, 4);
    mm_fwd(&c);
    matmul_backward_cpu(dinp, dw, db, r, c.inp, c.w, c.N, c.IC, c.OC);
    check_fd("dinp", c.inp, 35, dinp, mm_fwd, &c, c.out, r, 42, 1e-2f, 2e-3f);
    check_fd("dw", c.w, 30, dw, mm_fwd, &c, c.out, r, 42, 1e-2f, 2e-3f);
    check_fd("dbias", c.b, 6, db, mm_fwd, &c, c.out, r, 42, 1e-2f, 2e-3f);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(r), free(dinp), free(dw), free(db);
}

Test(kernels, matmul_backward_accumulates_weight_grads_and_overwrites_dinp, .init = setup)
{
    float *inp = rnd(12, 1), *w = rnd(6, 1), *dout = rnd(8, 1);
    float dinp1[12], dinp2[12], dw1[6] = {0}, dw2[6] = {0}, db1[2] = {0}, db2[2] = {0};
    matmul_backward_cpu(dinp1, dw1, db1, dout, inp, w, 4, 3, 2);
    for (int i = 0; i < 12; i++) dinp2[i] = 1e6f; /* garbage must be overwritten */
    matmul_backward_cpu(dinp2, dw2, db2, dout, inp, w, 4, 3, 2);
    matmul_backward_cpu(dinp2, dw2, db2, dout, inp, w, 4, 3, 2);
    for (int i = 0; i < 12; i++) cr_assert_float_eq(dinp2[i], dinp1[i], 1e-6);
    for (int i = 0; i < 6; i++) cr_assert_float_eq(dw2[i], 2 * dw1[i], 1e-5);
    for (int i = 0; i < 2; i++) cr_assert_float_eq(db2[i], 2 * db1[i], 1e-5);
    free(inp), free(w), free(dout);
}

Test(kernels, matmul_and_layernorm_backward_skip_null_parameter_grads_keeping_dinp, .init = setup)
{
    /* training.freeze: a frozen weight's (and bias's) gradient is NULL; the
     * input gradient is the same bits */
    float *inp = rnd(12, 1), *w = rnd(6, 1), *dout = rnd(8, 1);
    float dinp1[12], dinp2[12], dw[6] = {0}, db[2] = {0};
    matmul_backward_cpu(dinp1, dw, db, dout, inp, w, 4, 3, 2);
    matmul_backward_cpu(dinp2, NULL, NULL, dout, inp, w, 4, 3, 2);
    cr_assert_eq(memcmp(dinp1, dinp2, sizeof dinp1), 0);
    float *x = rnd(20, 1), *g = rnd(5, 1), *b = rnd(5, 1), *dy = rnd(20, 1), out[20], mean[4],
          rstd[4], dx1[20] = {0}, dx2[20] = {0}, lw[5] = {0}, lb[5] = {0};
    layernorm_forward_cpu(out, mean, rstd, x, g, b, 4, 5);
    layernorm_backward_cpu(dx1, NULL, lw, lb, dy, x, g, mean, rstd, 4, 5);
    layernorm_backward_cpu(dx2, NULL, NULL, NULL, dy, x, g, mean, rstd, 4, 5);
    cr_assert_eq(memcmp(dx1, dx2, sizeof dx1), 0);
    free(inp), free(w), free(dout), free(x), free(g), free(b), free(dy);
}

Test(kernels, layernorm_backward_writes_the_new_dinp_as_floatx_as_to_floatx_rounds_it,
     .init = setup)
{
    /* ops.h: dinp_x = to_floatx(dinp after the add), on every CPU table;
     * dinp and the parameter gradients as without it */
    const vit_ops *tables[3] = {ops_cpu(), ops_cpu_bf16(), ops_cpu_fp16()};
    float *x = rnd(40, 1), *g = rnd(8, 1), *b = rnd(8, 1), *dy = rnd(40, 1), out[40], mean[5],
          rstd[5];
    layernorm_forward_cpu(out, mean, rstd, x, g, b, 5, 8);
    for (int t = 0; t < 3; t++) {
        const vit_ops *o = tables[t];
        float *base = rnd(40, 1), dx1[40], dx2[40], xx[40], want[40], lw1[8] = {0}, lb1[8] = {0},
              lw2[8] = {0}, lb2[8] = {0};
        memcpy(dx1, base, sizeof dx1);
        memcpy(dx2, base, sizeof dx2);
        o->layernorm_backward(dx1, NULL, lw1, lb1, dy, x, g, mean, rstd, 5, 8);
        o->layernorm_backward(dx2, xx, lw2, lb2, dy, x, g, mean, rstd, 5, 8);
        o->to_floatx(want, dx1, 40);
        cr_assert_eq(memcmp(dx2, dx1, sizeof dx1), 0, "%s: dinp changed", o->name);
        cr_assert_eq(memcmp(lw2, lw1, sizeof lw1), 0, "%s: dw changed", o->name);
        cr_assert_eq(memcmp(lb2, lb1, sizeof lb1), 0, "%s: db changed", o->name);
        cr_assert_eq(memcmp(xx, want, sizeof want), 0, "%s: dinp_x is not to_floatx(dinp)",
                     o->name);
        if (t > 0) cr_assert_neq(memcmp(xx, dx1, sizeof xx), 0, "%s: nothing rounded", o->name);
        free(base);
    }
    free(x), free(g), free(b), free(dy);
}

/* ---- layernorm ---- */
typedef struct { float *out, *mean, *rstd, *inp, *w, *b; int N, C; } ln_ctx;
static void ln_fwd(void *p)
{
    ln_ctx *c = p;
    layernorm_forward_cpu(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
}

Test(kernels, layernorm_backward_matches_finite_differences_and_accumulates, .init = setup)
{
    ln_ctx c = {.N = 5, .C = 16};
    size_t n = 80;
    c.inp = rnd(n, 2), c.w = rnd(16, 1), c.b = rnd(16, 1), c.out = rnd(n, 1);
    c.mean = calloc(5, 4), c.rstd = calloc(5, 4);
    float *r = rnd(n, 1), *dinp = calloc(n, 4), *dw = calloc(16, 4), *db = calloc(16, 4);
    float *base = rnd(n, 1), *dinp2 = malloc(n * 4);
    memcpy(dinp2, base, n * 4);
    ln_fwd(&c);
    layernorm_backward_cpu(dinp, NULL, dw, db, r, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    float dw2[16] = {0}, db2[16] = {0};
    layernorm_backward_cpu(dinp2, NULL, dw2, db2, r, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    for (size_t i = 0; i < n; i++) cr_assert_float_eq(dinp2[i], base[i] + dinp[i], 1e-5);
    check_fd("dinp", c.inp, n, dinp, ln_fwd, &c, c.out, r, n, 1e-2f, 5e-3f);
    check_fd("dw", c.w, 16, dw, ln_fwd, &c, c.out, r, n, 1e-2f, 5e-3f);
    check_fd("db", c.b, 16, db, ln_fwd, &c, c.out, r, n, 1e-2f, 5e-3f);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(r);
    free(dinp), free(dw), free(db), free(base), free(dinp2);
}

Test(kernels, layernorm_output_has_zero_mean_unit_variance_with_unit_affine, .init = setup)
{
    float *x = rnd(3 * 32, 5), out[96], mean[3], rstd[3], w[32], b[32];
    for (int i = 0; i < 32; i++) w[i] = 1, b[i] = 0;
    layernorm_forward_cpu(out, mean, rstd, x, w, b, 3, 32);
    for (int n = 0; n < 3; n++) {
        double m = 0, v = 0;
        for (int i = 0; i < 32; i++) m += out[n * 32 + i];
        m /= 32;
        for (int i = 0; i < 32; i++) v += (out[n * 32 + i] - m) * (out[n * 32 + i] - m);
        cr_assert(fabs(m) < 1e-5 && fabs(v / 32 - 1) < 1e-3, "row %d mean %g var %g", n, m, v / 32);
    }
    free(x);
}

/* ---- attention ---- */
typedef struct { float *out, *lse, *scratch, *qkv; int B, T, D, NH; } at_ctx;
static void at_fwd(void *p)
{
    at_ctx *c = p;
    attention_forward_cpu(c->out, c->lse, c->scratch, c->qkv, c->B, c->T, c->D, c->NH);
}

Test(kernels, attention_backward_matches_finite_differences, .init = setup)
{
    at_ctx c = {.B = 2, .T = 5, .D = 8, .NH = 2};
    size_t nq = 2 * 5 * 24, no = 2 * 5 * 8;
    c.qkv = rnd(nq, 1), c.out = calloc(no, 4), c.lse = calloc(2 * 2 * 5, 4);
    float *r = rnd(no, 1), *dqkv = rnd(nq, 1);
    float *scratch = calloc(ops_cpu_attention_scratch_bytes(1, 5, 4, 1), 1);
    c.scratch = scratch;
    at_fwd(&c);
    attention_backward_cpu(dqkv, scratch, r, c.qkv, c.out, c.lse, c.B, c.T, c.D, c.NH);
    check_fd("dqkv", c.qkv, nq, dqkv, at_fwd, &c, c.out, r, no, 1e-2f, 5e-3f);
    free(c.qkv), free(c.out), free(c.lse), free(r), free(dqkv), free(scratch);
}

Test(kernels, attention_rows_are_probabilities_and_non_causal, .init = setup)
{
    /* P = exp(scale q.k - lse), from the lse the forward keeps */
    int B = 1, T = 6, D = 4, NH = 2, hd = D / NH;
    float *qkv = rnd(B * T * 3 * D, 2), out[24], lse[12];
    float *scratch = calloc(ops_cpu_attention_scratch_bytes(B, T, D, NH), 1);
    attention_forward_cpu(out, lse, scratch, qkv, B, T, D, NH);
    free(scratch);
    for (int h = 0; h < NH; h++) {
        for (int i = 0; i < T; i++) {
            double s = 0, last = 0;
            for (int j = 0; j < T; j++) {
                double qk = 0;
                for (int e = 0; e < hd; e++)
                    qk += (double)qkv[i * 3 * D + h * hd + e] * qkv[j * 3 * D + D + h * hd + e];
                last = exp(qk / sqrt(hd) - lse[h * T + i]);
                s += last;
            }
            cr_assert(fabs(s - 1) < 1e-5, "head %d row %d sums to %g", h, i, s);
            cr_assert(last > 0, "head %d row %d does not see the last token", h, i);
        }
    }
    free(qkv);
}

/* The attention of (b,h) in double, as the op computed it before issue 42
 * kept the (T,T) probabilities: lse (T), out (T,D) at the head's columns,
 * and the backward through the probabilities, dS = P (dP - rowsum(P dP))
 * (dqkv (B,T,3D), head h's columns). */
static void attention_naive(double *out, double *lse, double *dqkv, const float *qkv,
                            const float *dout, int B, int T, int D, int NH)
{
    const int hd = D / NH, C3 = 3 * D;
    const double scale = 1.0 / sqrt((double)hd);
    double *p = malloc(sizeof(double) * T * T), *dp = malloc(sizeof(double) * T * T);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hd, *k = q + D, *v = q + 2 * D;
            const float *dO = dout + (size_t)b * T * D + h * hd;
            double *o = out + (size_t)b * T * D + h * hd, *L = lse + ((size_t)b * NH + h) * T;
            double *dq = dqkv + (size_t)b * T * C3 + h * hd, *dk = dq + D, *dv = dq + 2 * D;
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    double s = 0;
                    for (int e = 0; e < hd; e++) s += (double)q[i * C3 + e] * k[j * C3 + e];
                    p[i * T + j] = s * scale;
                    m = fmax(m, s * scale);
                }
                for (int j = 0; j < T; j++) sum += exp(p[i * T + j] - m);
                L[i] = m + log(sum);
                for (int j = 0; j < T; j++) p[i * T + j] = exp(p[i * T + j] - m) / sum;
                for (int e = 0; e < hd; e++) {
                    double y = 0;
                    for (int j = 0; j < T; j++) y += p[i * T + j] * v[j * C3 + e];
                    o[i * D + e] = y;
                }
            }
            for (int i = 0; i < T; i++) {
                double rowdot = 0;
                for (int j = 0; j < T; j++) {
                    double g = 0;
                    for (int e = 0; e < hd; e++) g += (double)dO[i * D + e] * v[j * C3 + e];
                    dp[i * T + j] = g;
                    rowdot += p[i * T + j] * g;
                }
                for (int j = 0; j < T; j++) dp[i * T + j] = p[i * T + j] * (dp[i * T + j] - rowdot);
            }
            for (int i = 0; i < T; i++) {
                for (int e = 0; e < hd; e++) {
                    double gq = 0, gk = 0, gv = 0;
                    for (int j = 0; j < T; j++) {
                        gq += dp[i * T + j] * k[j * C3 + e];
                        gk += dp[j * T + i] * q[j * C3 + e];
                        gv += p[j * T + i] * dO[j * D + e];
                    }
                    dq[i * C3 + e] = scale * gq, dk[i * C3 + e] = scale * gk, dv[i * C3 + e] = gv;
                }
            }
        }
    }
    free(p), free(dp);
}

/* max|got - want| / max|want| */
static double normwise(const float *got, const double *want, size_t n)
{
    double maxref = 0, maxdiff = 0;
    for (size_t i = 0; i < n; i++) {
        maxref = fmax(maxref, fabs(want[i]));
        maxdiff = fmax(maxdiff, fabs((double)got[i] - want[i]));
    }
    return maxdiff / (maxref > 0 ? maxref : 1);
}

Test(kernels, attention_keeps_lse_and_its_backward_is_the_probabilities_formula, .init = setup)
{
    /* T = 21: vector and scalar tails of the exp loops; hd = 6: a scale that
     * is not a power of two */
    enum { B = 2, T = 21, D = 12, NH = 2, nq = B * T * 3 * D, no = B * T * D, nl = B * NH * T };
    ops_cpu_set_threads(2);
    float *qkv = rnd(nq, 1.5f), *dout = rnd(no, 1), out[no], lse[nl], dqkv[nq];
    double want_out[no], want_lse[nl], want_dqkv[nq];
    void *scratch = calloc(ops_cpu_attention_scratch_bytes(B, T, D, NH), 1);
    attention_forward_cpu(out, lse, scratch, qkv, B, T, D, NH);
    attention_backward_cpu(dqkv, scratch, dout, qkv, out, lse, B, T, D, NH);
    attention_naive(want_out, want_lse, want_dqkv, qkv, dout, B, T, D, NH);
    double e_out = normwise(out, want_out, no), e_lse = normwise(lse, want_lse, nl),
           e_dqkv = normwise(dqkv, want_dqkv, nq);
    cr_assert(e_out < 1e-5, "out: normwise error %g", e_out);
    cr_assert(e_lse < 1e-6, "lse: normwise error %g", e_lse);
    cr_assert(e_dqkv < 1e-5, "dqkv: normwise error %g against dS = P (dP - rowsum(P dP))",
              e_dqkv);
    /* the same inputs and thread count: the same bits; and another count */
    for (int threads = 2; threads >= 1; threads--) {
        ops_cpu_set_threads(threads);
        float out2[no], lse2[nl], dqkv2[nq];
        void *s2 = calloc(ops_cpu_attention_scratch_bytes(B, T, D, NH), 1);
        attention_forward_cpu(out2, lse2, s2, qkv, B, T, D, NH);
        attention_backward_cpu(dqkv2, s2, dout, qkv, out2, lse2, B, T, D, NH);
        cr_assert(memcmp(out, out2, sizeof out) == 0, "out differs (%d threads)", threads);
        cr_assert(memcmp(lse, lse2, sizeof lse) == 0, "lse differs (%d threads)", threads);
        cr_assert(memcmp(dqkv, dqkv2, sizeof dqkv) == 0, "dqkv differs (%d threads)", threads);
        free(s2);
    }
    /* cpu-bf16: lse is fp32, the same bits as the fp32 op's (the same
     * scores); out and dqkv are bf16 values; P and dS are rounded inside */
    const vit_ops *bf = ops_cpu_bf16();
    float qb[nq], db[no], ob[no], lb[nl], gb[nq], l32[nl], o32[no];
    round_bf16_cpu(qb, qkv, nq);
    round_bf16_cpu(db, dout, no);
    attention_forward_cpu(o32, l32, scratch, qb, B, T, D, NH);
    bf->attention_forward(ob, lb, scratch, qb, B, T, D, NH);
    cr_assert(memcmp(lb, l32, sizeof lb) == 0, "cpu-bf16 rounds lse");
    bf->attention_backward(gb, scratch, db, qb, ob, lb, B, T, D, NH);
    float rb[nq];
    round_bf16_cpu(rb, ob, no);
    cr_assert(memcmp(rb, ob, no * sizeof(float)) == 0, "cpu-bf16's out is not bf16");
    round_bf16_cpu(rb, gb, nq);
    cr_assert(memcmp(rb, gb, sizeof rb) == 0, "cpu-bf16's dqkv is not bf16");
    double e_bf = 0, m_bf = 0; /* and close to fp32: the 16-bit roundings only */
    for (size_t i = 0; i < no; i++)
        e_bf = fmax(e_bf, fabs(ob[i] - o32[i])), m_bf = fmax(m_bf, fabs(o32[i]));
    cr_assert(e_bf / m_bf < 1e-2, "cpu-bf16 out: normwise error %g", e_bf / m_bf);
    free(qkv), free(dout), free(scratch);
}

/* ---- gelu ---- */
typedef struct { float *out, *inp; size_t n; } ge_ctx;
static void ge_fwd(void *p)
{
    ge_ctx *c = p;
    gelu_forward_cpu(c->out, c->inp, c->n);
}

Test(kernels, gelu_is_the_exact_erf_form_and_backward_matches_finite_differences, .init = setup)
{
    ge_ctx c = {.n = 64};
    c.inp = rnd(64, 3), c.out = calloc(64, 4);
    float *r = rnd(64, 1), *d = calloc(64, 4);
    ge_fwd(&c);
    /* nn.GELU() at 1.0 is 0.8413447; the tanh approximation gives 0.8411920 */
    float one = 1.0f, g;
    gelu_forward_cpu(&g, &one, 1);
    cr_assert_float_eq(g, 0.84134475f, 2e-7);
    /* over the whole range, against erf in double precision (both code
     * paths: 19 elements = two vectors of 8 and a scalar tail of 3) */
    float xs[19], ys[19];
    for (int k = -60; k <= 60; k += 19) {
        for (int j = 0; j < 19; j++) xs[j] = 0.1f * (float)(k + j) - 0.05f;
        gelu_forward_cpu(ys, xs, 19);
        for (int j = 0; j < 19; j++) {
            double want = 0.5 * xs[j] * (1.0 + erf(xs[j] / sqrt(2.0)));
            cr_assert(fabs(ys[j] - want) <= 1e-6 * fmax(1.0, fabs(xs[j])),
                      "gelu(%g) = %.9g, want %.9g", xs[j], ys[j], want);
        }
    }
    gelu_backward_cpu(d, c.inp, r, 64);
    check_fd("dinp", c.inp, 64, d, ge_fwd, &c, c.out, r, 64, 1e-2f, 2e-3f);
    free(c.inp), free(c.out), free(r), free(d);
}

/* ---- embeddings ---- */
typedef struct { float *x, *po, *cls, *pos; int B, T, D; } em_ctx;
static void em_fwd(void *p)
{
    em_ctx *c = p;
    embed_forward_cpu(c->x, c->po, c->cls, c->pos, c->B, c->T, c->D);
}

Test(kernels, embed_backward_matches_finite_differences, .init = setup)
{
    em_ctx c = {.B = 3, .T = 4, .D = 5};
    c.po = rnd(45, 1), c.cls = rnd(5, 1), c.pos = rnd(20, 1), c.x = calloc(60, 4);
    float *r = rnd(60, 1), *dpo = rnd(45, 1), *dcls = calloc(5, 4), *dpos = calloc(20, 4);
    em_fwd(&c);
    embed_backward_cpu(dpo, dcls, dpos, r, c.B, c.T, c.D);
    check_fd("dpatch", c.po, 45, dpo, em_fwd, &c, c.x, r, 60, 1e-2f, 1e-3f);
    check_fd("dcls", c.cls, 5, dcls, em_fwd, &c, c.x, r, 60, 1e-2f, 1e-3f);
    check_fd("dpos", c.pos, 20, dpos, em_fwd, &c, c.x, r, 60, 1e-2f, 1e-3f);
    free(c.po), free(c.cls), free(c.pos), free(c.x), free(r), free(dpo), free(dcls), free(dpos);
}

Test(kernels, patchify_then_matmul_equals_a_strided_convolution, .init = setup)
{
    int B = 2, C = 3, S = 8, P = 4, D = 5, G = S / P, N = G * G, CPP = C * P * P;
    float *img = rnd((size_t)B * C * S * S, 1), *w = rnd((size_t)D * CPP, 1), *bias = rnd(D, 1);
    float *patches = malloc(sizeof(float) * B * N * CPP), *out = malloc(sizeof(float) * B * N * D);
    patchify_cpu(patches, img, B, C, S, P);
    matmul_forward_cpu(out, patches, w, bias, B * N, CPP, D);
    for (int b = 0; b < B; b++)
        for (int d = 0; d < D; d++)
            for (int py = 0; py < G; py++)
                for (int px = 0; px < G; px++) {
                    double s = bias[d];
                    for (int c = 0; c < C; c++)
                        for (int ky = 0; ky < P; ky++)
                            for (int kx = 0; kx < P; kx++)
                                s += (double)w[((d * C + c) * P + ky) * P + kx] *
                                     img[((b * C + c) * S + py * P + ky) * S + px * P + kx];
                    float got = out[((size_t)b * N + py * G + px) * D + d];
                    cr_assert(fabs(got - s) < 1e-4, "b%d d%d (%d,%d): %g vs conv %g", b, d, py,
                              px, got, s);
                }
    free(img), free(w), free(bias), free(patches), free(out);
}

/* ---- cross-entropy ---- */
typedef struct { float *losses, *probs, *logits; int *t; int B, K; } ce_ctx;
static void ce_fwd(void *p)
{
    ce_ctx *c = p;
    crossentropy_forward_cpu(c->losses, c->probs, c->logits, c->t, c->B, c->K);
}

Test(kernels, crossentropy_matches_log_softmax_and_finite_differences, .init = setup)
{
    int t[4] = {0, 3, 2, 1};
    ce_ctx c = {.B = 4, .K = 5, .t = t};
    c.logits = rnd(20, 3), c.losses = calloc(4, 4), c.probs = calloc(20, 4);
    ce_fwd(&c);
    for (int b = 0; b < 4; b++) {
        double s = 0;
        for (int k = 0; k < 5; k++) s += exp(c.logits[b * 5 + k]);
        cr_assert(fabs(c.losses[b] - (log(s) - c.logits[b * 5 + t[b]])) < 1e-5);
    }
    float r[4] = {0.25f, 0.25f, 0.25f, 0.25f}, d[20];
    crossentropy_backward_cpu(d, c.probs, t, 0.25f, 4, 5);
    check_fd("dlogits", c.logits, 20, d, ce_fwd, &c, c.losses, r, 4, 1e-2f, 2e-3f);
    free(c.logits), free(c.losses), free(c.probs);
}

/* ---- cross-entropy against soft targets ---- */
typedef struct { float *losses, *probs, *logits, *t; int B, K; } sce_ctx;
static void sce_fwd(void *p)
{
    sce_ctx *c = p;
    crossentropy_soft_forward_cpu(c->losses, c->probs, c->logits, c->t, c->B, c->K);
}

/* B rows of K: uneven positive values, one exact zero per row, summing to 1. */
static float *target_rows(int B, int K)
{
    float *t = malloc(sizeof(float) * B * K);
    for (int b = 0; b < B; b++) {
        double sum = 0;
        for (int k = 0; k < K; k++) sum += t[b * K + k] = k == b % K ? 0.0f : rng_uniform(&R);
        for (int k = 0; k < K; k++) t[b * K + k] = (float)(t[b * K + k] / sum);
    }
    return t;
}

Test(kernels, crossentropy_soft_is_minus_sum_t_log_softmax_and_matches_finite_differences,
     .init = setup)
{
    sce_ctx c = {.B = 4, .K = 5};
    c.logits = rnd(20, 3), c.t = target_rows(4, 5), c.losses = calloc(4, 4), c.probs = calloc(20, 4);
    sce_fwd(&c);
    for (int b = 0; b < 4; b++) {
        double s = 0, want = 0;
        for (int k = 0; k < 5; k++) s += exp(c.logits[b * 5 + k]);
        for (int k = 0; k < 5; k++) want -= c.t[b * 5 + k] * (c.logits[b * 5 + k] - log(s));
        cr_assert(fabs(c.losses[b] - want) < 1e-5, "row %d: %.9g, want %.9g", b, c.losses[b],
                  want);
        for (int k = 0; k < 5; k++)
            cr_assert(fabs(c.probs[b * 5 + k] - exp(c.logits[b * 5 + k]) / s) < 1e-6);
    }
    /* (probs - t) * dloss is the loss's gradient where the rows sum to 1 */
    float r[4] = {0.25f, 0.25f, 0.25f, 0.25f}, d[20];
    crossentropy_soft_backward_cpu(d, c.probs, c.t, 0.25f, 4, 5);
    for (int i = 0; i < 20; i++)
        cr_assert(d[i] == (c.probs[i] - c.t[i]) * 0.25f, "element %d", i);
    check_fd("dlogits", c.logits, 20, d, sce_fwd, &c, c.losses, r, 4, 1e-2f, 2e-3f);
    free(c.logits), free(c.t), free(c.losses), free(c.probs);
}

Test(kernels, crossentropy_soft_with_one_hot_rows_gives_the_integer_labels_bits, .init = setup)
{
    enum { B = 6, K = 7 };
    int labels[B] = {0, 6, 3, 3, 1, 5};
    float *z = rnd(B * K, 4), t[B * K] = {0};
    for (int b = 0; b < B; b++) t[b * K + labels[b]] = 1.0f;
    float l1[B], l2[B], p1[B * K], p2[B * K], d1[B * K], d2[B * K];
    crossentropy_forward_cpu(l1, p1, z, labels, B, K);
    crossentropy_soft_forward_cpu(l2, p2, z, t, B, K);
    crossentropy_backward_cpu(d1, p1, labels, 1.0f / 3, B, K);
    crossentropy_soft_backward_cpu(d2, p2, t, 1.0f / 3, B, K);
    cr_assert(memcmp(l1, l2, sizeof l1) == 0, "losses differ");
    cr_assert(memcmp(p1, p2, sizeof p1) == 0, "probabilities differ");
    cr_assert(memcmp(d1, d2, sizeof d1) == 0, "gradients differ");
    /* the bf16 table rounds the gradient (a floatX output) and nothing else */
    const vit_ops *bf = ops_cpu_bf16();
    float d3[B * K], want[B * K];
    bf->crossentropy_soft_backward(d3, p2, t, 1.0f / 3, B, K);
    round_bf16_cpu(want, d2, B * K);
    cr_assert(memcmp(d3, want, sizeof want) == 0, "cpu-bf16 does not round dlogits to bf16");
    free(z);
}

/* ---- drop path ---- */
typedef struct { float *out, *res, *branch, *scale; int B; size_t n; } dp_ctx;
static void dp_fwd(void *p)
{
    dp_ctx *c = p;
    droppath_forward_cpu(c->out, c->res, c->branch, c->scale, c->B, c->n);
}

Test(kernels, droppath_adds_each_samples_scaled_branch_and_backward_matches_finite_differences,
     .init = setup)
{
    float scale[3] = {1.25f, 0.0f, 1.0f / 0.9f}; /* kept, dropped, kept */
    dp_ctx c = {.B = 3, .n = 10, .scale = scale};
    c.res = rnd(30, 1), c.branch = rnd(30, 1), c.out = calloc(30, 4);
    dp_fwd(&c);
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 10; i++) {
            const float prod = scale[b] * c.branch[b * 10 + i];
            cr_assert(c.out[b * 10 + i] == c.res[b * 10 + i] + prod, "[%d,%d]", b, i);
        }
    for (int i = 0; i < 10; i++) /* a dropped sample is its residual, bit for bit */
        cr_assert(c.out[10 + i] == c.res[10 + i]);
    /* backward: d branch = scale[b] * dout, overwritten; the residual passes it on */
    float *r = rnd(30, 1), d[30];
    for (int i = 0; i < 30; i++) d[i] = 1e6f;
    droppath_backward_cpu(d, r, scale, 3, 10);
    for (int i = 0; i < 10; i++) cr_assert(d[10 + i] == 0.0f, "a dropped sample has a gradient");
    check_fd("dbranch", c.branch, 30, d, dp_fwd, &c, c.out, r, 30, 1e-2f, 2e-3f);
    /* out may be res */
    float *io = malloc(30 * 4);
    memcpy(io, c.res, 30 * 4);
    droppath_forward_cpu(io, io, c.branch, scale, 3, 10);
    cr_assert(memcmp(io, c.out, 30 * 4) == 0, "in place differs");
    /* the bf16 table rounds dbranch (floatX); the forward is fp32 on both */
    float d2[30], want[30];
    ops_cpu_bf16()->droppath_backward(d2, r, scale, 3, 10);
    round_bf16_cpu(want, d, 30);
    cr_assert(memcmp(d2, want, sizeof want) == 0);
    cr_assert(ops_cpu_bf16()->droppath_forward == droppath_forward_cpu);
    free(c.res), free(c.branch), free(c.out), free(r), free(io);
}

/* ---- norms, AdamW ---- */
Test(kernels, sum_squares_is_exact_and_independent_of_thread_count, .init = setup)
{
    size_t n = 100003;
    float *g = rnd(n, 1);
    double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (double)g[i] * g[i];
    ops_cpu_set_threads(1);
    double one = sum_squares_cpu(g, n);
    ops_cpu_set_threads(2);
    double two = sum_squares_cpu(g, n);
    cr_assert(one == two, "1 thread %.17g vs 2 threads %.17g", one, two);
    cr_assert(fabs(one - ref) < 1e-9 * ref);
    free(g);
}

Test(kernels, sum_squares_into_stores_then_adds_in_span_order_as_the_host_loop_did,
     .init = setup)
{
    const size_t n = 70001, cut = 12345;
    float *g = rnd(n, 1);
    const vit_ops *tables[3] = {ops_cpu(), ops_cpu_bf16(), ops_cpu_fp16()};
    for (int tb = 0; tb < 3; tb++) {
        double acc = 123.0; /* a stale value: add 0 replaces it */
        tables[tb]->sum_squares_into(&acc, g, cut, 0);
        tables[tb]->sum_squares_into(&acc, g + cut, n - cut, 1);
        const double host = 0.0 + sum_squares_cpu(g, cut) + sum_squares_cpu(g + cut, n - cut);
        cr_assert(memcmp(&acc, &host, sizeof acc) == 0, "%s: %.17g, the host loop %.17g",
                  tables[tb]->name, acc, host);
        tables[tb]->sum_squares_into(&acc, g, 0, 0);
        cr_assert(acc == 0.0, "%s: the sum of nothing stored is %g", tables[tb]->name, acc);
    }
    free(g);
}

Test(kernels, adamw_clip_factor_is_clip_grad_norm_s_coefficient_from_the_sum_of_squares)
{
    /* norm 2: 1 / (2 + 1e-6) in double, then rounded to float */
    cr_assert_eq(adamw_clip_factor(4.0, 1.0f, 1.0), (float)(1.0 / (2.0 + 1e-6)));
    /* fp16-mixed: the norm of the unscaled gradients, sqrt(sq) x 2^-16 */
    cr_assert_eq(adamw_clip_factor(4.0 * 65536.0 * 65536.0, 1.0f / 65536, 0.5),
                 (float)(0.5 / (2.0 + 1e-6)));
    cr_assert_eq(adamw_clip_factor(0.25, 1.0f, 1.0), 1.0f, "a norm below the clip: 1");
    cr_assert_eq(adamw_clip_factor(1e6, 1.0f, 0.0), 1.0f, "gradClip 0 turns clipping off");
    cr_assert_eq(adamw_clip_factor(NAN, 1.0f, 1.0), 1.0f, "a NaN norm: 1, as before");
    cr_assert_eq(adamw_clip_factor(INFINITY, 1.0f, 1.0), 0.0f, "an infinite norm: 0");
}

Test(kernels, cpu_tables_count_the_host_waits_a_gpu_would_make)
{
    const vit_ops *o = ops_cpu_bf16();
    float *dev = o->alloc(64 * sizeof(float)), host[64] = {0};
    float *pinned = o->host_alloc(64 * sizeof(float));
    double *acc = o->alloc(sizeof(double));
    cr_assert(dev && pinned && acc);
    unsigned long w = o->host_waits();
    o->upload(dev, host, sizeof host);
    o->upload(dev, pinned, 64 * sizeof(float));
    pinned[3] = 7.0f;
    o->upload_ahead(dev, pinned, 64 * sizeof(float)); /* in place at once, on the CPU */
    cr_assert_eq(dev[3], 7.0f, "upload_ahead copies");
    o->consumed(dev);
    o->download_async(pinned, dev, 64 * sizeof(float));
    o->wait_host(pinned);
    o->sum_squares_into(acc, dev, 64, 0);
    cr_assert_eq(o->host_waits(), w, "uploads, upload_ahead, a readback to pinned memory, a queued norm");
    o->download_async(host, dev, sizeof host); /* not pinned: a download */
    cr_assert_eq(o->host_waits(), w + 1);
    o->download(host, dev, sizeof host);
    (void)o->sum_squares(dev, 64);
    o->synchronize();
    cr_assert_eq(o->host_waits(), w + 4, "download, sum_squares and synchronize wait");
    cr_assert_eq(o->pin(host, sizeof host), 0);
    o->download_async(host + 8, dev, 16 * sizeof(float)); /* inside the pinned range */
    cr_assert_eq(o->host_waits(), w + 4);
    o->unpin(host);
    cr_assert_eq(o->host_waits(), w + 5, "unpin waits for the copies that may read it");
    o->unpin(host); /* not pinned any more: nothing */
    o->download_async(host, dev, sizeof host);
    cr_assert_eq(o->host_waits(), w + 6, "a readback to memory no longer pinned waits");
    o->release(dev);
    o->release(acc);
    o->host_free(pinned);
}

Test(kernels, adamw_matches_torch_formula_on_known_values)
{
    /* One step of torch.optim.AdamW(lr=0.1, betas=(0.9,0.999), eps=1e-8,
     * weight_decay=0.5) from p=1, g=0.2: p = 1*(1-0.05) - 0.1*sign = 0.85
     * (m_hat = g, sqrt(v_hat) = |g|). */
    float p = 1.0f, m = 0, v = 0, g = 0.2f, p_lp = -1;
    adamw_update_cpu(&p, &p_lp, &m, &v, &g, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 1);
    cr_assert_float_eq(p, 0.85f, 1e-6);
    cr_assert_eq(p_lp, p, "the low-precision copy is written in the same pass");
    cr_assert_float_eq(m, 0.02f, 1e-7);
    cr_assert_float_eq(v, 0.00004f, 1e-9);
}

/* adamw_multi against adamw_update per piece, after the in-place passes it
 * replaces (g *= unscale, then g *= clip), on the table ops given: pieces
 * of odd lengths (two of length 0, one long enough that every thread gets
 * a part), spaced apart in p and g, contiguous in m and v, every other one
 * with a low-precision copy, each with its own lr scale and weight decay.
 * Every bit of p, m, v and the copies must be the same, and g untouched. */
/* A sum of squares whose clipping coefficient (gradClip 1) is about
 * `want` (< 1), and the coefficient adamw_clip_factor makes of it. */
static float norm_sq_for(float want, float unscale, double *norm_sq)
{
    const double norm = (1.0 / want - 1e-6) / (double)unscale;
    *norm_sq = norm * norm;
    const float clip = adamw_clip_factor(*norm_sq, unscale, 1.0);
    cr_assert(fabsf(clip - want) < 1e-5f * want, "coefficient %.9g, wanted about %.9g", clip, want);
    return clip;
}

/* want_clip 1: no norm given (NULL), no clipping; else a norm in backend
 * memory whose coefficient is about want_clip, derived by the op */
static void adamw_multi_case(const vit_ops *ops, float beta1, float unscale, float want_clip,
                             float gmag, long t)
{
    double norm_sq = 0.0;
    const float clip = want_clip < 1.0f ? norm_sq_for(want_clip, unscale, &norm_sq) : 1.0f;
    enum { NP = 9 };
    const size_t lens[NP] = {7, 0, 1, 100003, 33, 0, 2049, 5, 4099};
    adamw_piece pc[NP];
    size_t total = 0, span = 0;
    for (int k = 0; k < NP; k++) {
        pc[k] = (adamw_piece){.start = total, .n = lens[k], .at = span + 3, .state = total,
                              .lr_scale = 1.0 / (1.0 + k), .weight_decay = k % 3 ? 0.05f : 0.0f};
        total += lens[k];
        span += lens[k] + 3;
    }
    float *p = rnd(span, 1), *g = rnd(span, gmag), *m = rnd(total, 0.1f), *v = rnd(total, 0.01f);
    float *lp = rnd(span, 1);
    for (size_t i = 0; i < total; i++) v[i] = v[i] * v[i];
    for (int k = 0; k < NP; k += 2) pc[k].p_lp = lp + pc[k].at; /* cpu floatX: 4 bytes */
    float *p2 = malloc(span * 4), *g2 = malloc(span * 4), *m2 = malloc(total * 4),
          *v2 = malloc(total * 4), *lp2 = malloc(span * 4), *g0 = malloc(span * 4);
    memcpy(p2, p, span * 4), memcpy(g2, g, span * 4), memcpy(g0, g, span * 4);
    memcpy(m2, m, total * 4), memcpy(v2, v, total * 4), memcpy(lp2, lp, span * 4);
    const double lr = 3e-3;
    const float b2 = 0.999f, eps = 1e-8f;
    ops->adamw_multi(p, m, v, g, pc, NP, total, lr, unscale, want_clip < 1.0f ? &norm_sq : NULL,
                     1.0, beta1, b2, eps, t);
    for (int k = 0; k < NP; k++) {
        float *gk = g2 + pc[k].at;
        scale_cpu(gk, unscale, pc[k].n);
        scale_cpu(gk, clip, pc[k].n);
        ops->adamw_update(p2 + pc[k].at, pc[k].p_lp ? lp2 + pc[k].at : NULL, m2 + pc[k].state,
                          v2 + pc[k].state, gk, pc[k].n, (float)(lr * pc[k].lr_scale), beta1, b2,
                          eps, pc[k].weight_decay, t);
    }
    cr_assert(memcmp(g, g0, span * 4) == 0, "%s: adamw_multi wrote the gradients", ops->name);
    for (size_t i = 0; i < span; i++) {
        cr_assert(memcmp(&p[i], &p2[i], 4) == 0, "%s t=%ld: p[%zu] %.9g, per piece %.9g",
                  ops->name, t, i, p[i], p2[i]);
        cr_assert(memcmp(&lp[i], &lp2[i], 4) == 0, "%s t=%ld: p_lp[%zu] %.9g, per piece %.9g",
                  ops->name, t, i, lp[i], lp2[i]);
    }
    for (size_t i = 0; i < total; i++) {
        cr_assert(memcmp(&m[i], &m2[i], 4) == 0, "%s t=%ld: m[%zu] %.9g, per piece %.9g",
                  ops->name, t, i, m[i], m2[i]);
        cr_assert(memcmp(&v[i], &v2[i], 4) == 0, "%s t=%ld: v[%zu] %.9g, per piece %.9g",
                  ops->name, t, i, v[i], v2[i]);
    }
    free(p), free(g), free(m), free(v), free(lp), free(p2), free(g2), free(m2), free(v2);
    free(lp2), free(g0);
}

Test(kernels, adamw_multi_equals_adamw_update_per_piece_bit_for_bit_on_every_cpu_table,
     .init = setup)
{
    const vit_ops *tables[3] = {ops_cpu(), ops_cpu_bf16(), ops_cpu_fp16()};
    ops_cpu_set_threads(2);
    for (int tb = 0; tb < 3; tb++) {
        adamw_multi_case(tables[tb], 0.9f, 1.0f / 65536, 0.37f, 0.1f * 65536, 1);
        adamw_multi_case(tables[tb], 0.9f, 1.0f, 1.0f, 0.1f, 7); /* no scaling, no clipping */
        adamw_multi_case(tables[tb], 0.9f, 1.0f, 0.61f, 0.1f, 3);
    }
}

Test(kernels, adamw_multi_unscales_then_clips_with_two_roundings_even_in_the_subnormals,
     .init = setup)
{
    /* gradients whose unscaled values are fp32 subnormals: there (g x 2^-16)
     * x clip and g x (2^-16 x clip) round differently; beta1 = 0 makes m the
     * gradient used, bit for bit */
    ops_cpu_set_threads(2);
    adamw_multi_case(ops_cpu(), 0.0f, 1.0f / 65536, 0.9f, 1e-34f, 1);
}

Test(kernels, round_bf16_rounds_to_nearest_even_and_keeps_nan_and_inf)
{
    const float one = 1.0f, ulp = 1.0f / 128; /* bf16 spacing at 1 */
    float x[10] = {one,
                   one + ulp / 2,              /* tie: to even (1) */
                   one + 3 * ulp / 2,          /* tie: to even (1 + 2 ulp) */
                   one + ulp / 2 + ulp / 64,   /* above the tie: up */
                   -(one + 3 * ulp / 2),       /* sign symmetric */
                   3.4e38f,                    /* past bf16's largest: inf */
                   INFINITY, NAN, 1e-40f, 0.1f};
    round_bf16_cpu(x, x, 10);
    cr_assert_eq(x[0], one);
    cr_assert_eq(x[1], one);
    cr_assert_eq(x[2], one + 2 * ulp);
    cr_assert_eq(x[3], one + ulp);
    cr_assert_eq(x[4], -(one + 2 * ulp));
    cr_assert(isinf(x[5]) && x[5] > 0);
    cr_assert(isinf(x[6]));
    cr_assert(isnan(x[7]));
    cr_assert(x[8] > 0 && x[8] < 1e-39f, "denormals are kept, rounded: %g", x[8]);
    cr_assert_eq(x[9], 0.10009765625f); /* 0.1 in bf16 */
}
