/* tools/ln_emu/ln_emu.cc - runs LayerNorm's one-pass backward
 * (kernels/layernorm_onepass.cuh, the candidate kernels' slot) on the CPU,
 * thread by thread through tools/cuda_emu, and compares it with the CPU
 * twin (kernels/layernorm.c).
 *
 * Owns: the launches layernorm.cu's layernorm_backward_onepass_cuda makes
 * (the one-pass kernel over cuda_ln1_blocks(N) blocks, its V4 instance for
 * C; the partials' sum over (ceil(C/32), 2) blocks of 32 x 16), on host
 * buffers, in fp32, bf16 and half storage; and the checks: dinp, dw and
 * db, each accumulated onto random values, against the CPU twin (normwise
 * relative error); the floatX copy of dinp the bits that rounding dinp
 * gives; a frozen LayerNorm (no partials) the same dinp bits; nothing
 * written past the buffers, no partial row left unwritten and no shared
 * memory read before a thread of its block wrote it (NaN poison).
 * Must not: be built into the product (tools/ln_emu/run.sh; `make test`
 * runs its quick set as reference/ln_emu); what it cannot check is the
 * hardware (timing, races between warps that the barrier-per-collective
 * schedule hides).
 *
 * usage: tools/ln_emu/run.sh [quick]
 */
extern "C" {
#include "ops.h"
}
#include "cuda_emu.h"

/* the kernels' static __shared__ arrays: one per kernel, block-wide while
 * the emulator runs one block at a time */
#undef __shared__
#define __shared__ static
#define LN1_EMU_SHARED(a) emu_shared((a), sizeof(a)) /* poisoned at each block's start */

#include "layernorm_onepass.cuh"

static unsigned long long rng_s = 0x2545f4914f6cdd1dull;
static float uniform(void) /* [-1, 1) */
{
    rng_s ^= rng_s << 13, rng_s ^= rng_s >> 7, rng_s ^= rng_s << 17;
    return (float)((double)(rng_s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static std::vector<float> rnd(size_t n, float scale, float offset)
{
    std::vector<float> v(n);
    for (float &x : v) x = offset + scale * uniform();
    return v;
}

static float to_float(float v) { return v; }
static float to_float(bf16 v) { return ldx(v); }
static float to_float(f16 v) { return ldx(v); }
static uint32_t bits_of(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}
static uint32_t bits_of(bf16 v) { return v.bits; }
static uint32_t bits_of(f16 v) { return v.bits; }

/* max|a - b| / max|b|; NaN anywhere in a: infinity */
static double normwise(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (std::isnan(a[i])) return INFINITY;
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return den > 0 ? num / den : num;
}

static int failures, cur_r;
static void report(const char *type, const char *what, int N, int C, double err, double tol)
{
    const int bad = !(err <= tol);
    failures += bad;
    printf("%s %-14s N=%-6d C=%-5d R=%d err=%.3g%s\n", type, what, N, C, cur_r, err,
           bad ? "  FAIL" : "");
}

/* layernorm_backward_onepass_cuda's launches, R rows a warp (its
 * cuda_ln1_rows_per_warp(N), or more: the rows of an N above 32768 in a
 * case small enough to emulate); part NULL: a frozen LayerNorm */
template <typename X>
static void run_onepass(float *dinp, X *dinp_x, float *dw, float *db, float *part, const X *dout,
                        const float *inp, const float *w, const float *mean, const float *rstd,
                        int N, int C, int R)
{
    const int rows = LN1_WARPS * R, nblk = (N - 1) / rows + 1;
#define LN1_EMU(V4)                                                                             \
    emu_launch(layernorm_backward_onepass_kernel<X, V4>, (unsigned)nblk, 1, LN1_THREADS, dinp, \
               dinp_x, part, dout, inp, w, mean, rstd, N, C, R)
    LN_V4_SWITCH(C, LN1_EMU);
#undef LN1_EMU
    if (part)
        emu_launch_2d(layernorm_backward_onepass_reduce_kernel, (unsigned)((C + 31) / 32), 2, 32,
                      LN1_RED_GROUPS, dw, db, (const float *)part, nblk, C);
}

template <typename X> static void ln_case(const char *type, int N, int C, int R)
{
    cur_r = R;
    const size_t n = (size_t)N * C, guard = 64;
    std::vector<float> inp = rnd(n, 2, 3), w = rnd(C, 0.2f, 1), b = rnd(C, 0.2f, 0);
    std::vector<float> out(n), mean(N), rstd(N);
    layernorm_forward_cpu(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                          C);
    std::vector<float> doutf = rnd(n, 1, 0);
    std::vector<X> dout(n);
    for (size_t i = 0; i < n; i++) { /* dout as floatX holds it, both sides */
        dout[i] = stx<X>(doutf[i]);
        doutf[i] = to_float(dout[i]);
    }
    const std::vector<float> dinp0 = rnd(n, 1, 0), dw0 = rnd(C, 1, 0), db0 = rnd(C, 1, 0);
    std::vector<float> want_dinp = dinp0, want_dw = dw0, want_db = db0;
    layernorm_backward_cpu(want_dinp.data(), NULL, want_dw.data(), want_db.data(), doutf.data(),
                           inp.data(), w.data(), mean.data(), rstd.data(), N, C);

    /* the device's buffers, each with a poisoned guard past its end */
    const float nanf = NAN;
    std::vector<float> dinp(n + guard, nanf), dw(C + guard, nanf), db(C + guard, nanf);
    std::copy(dinp0.begin(), dinp0.end(), dinp.begin());
    std::copy(dw0.begin(), dw0.end(), dw.begin());
    std::copy(db0.begin(), db0.end(), db.begin());
    X poison;
    memset(&poison, 0xff, sizeof poison);
    std::vector<X> dx(n + guard, poison);
    const size_t nblk = (size_t)((N - 1) / (LN1_WARPS * R) + 1);
    std::vector<float> part(2 * nblk * C + guard, nanf);
    run_onepass<X>(dinp.data(), dx.data(), dw.data(), db.data(), part.data(), dout.data(),
                   inp.data(), w.data(), mean.data(), rstd.data(), N, C, R);
    report(type, "dinp", N, C, normwise(dinp.data(), want_dinp.data(), n), 1e-5);
    report(type, "dw", N, C, normwise(dw.data(), want_dw.data(), C), 1e-5);
    report(type, "db", N, C, normwise(db.data(), want_db.data(), C), 1e-5);
    size_t off = 0, past = 0;
    for (size_t i = 0; i < n; i++) off += bits_of(dx[i]) != bits_of(stx<X>(dinp[i]));
    for (size_t i = 0; i < guard; i++)
        past += !std::isnan(dinp[n + i]) + !std::isnan(dw[C + i]) + !std::isnan(db[C + i]) +
                (bits_of(dx[n + i]) != bits_of(poison)) +
                !std::isnan(part[part.size() - guard + i]);
    report(type, "dinp_x bits", N, C, (double)off, 0);
    report(type, "past the end", N, C, (double)past, 0);

    /* frozen (no partials, no copy): the same dinp bits */
    std::vector<float> fdinp(n + guard, nanf);
    std::copy(dinp0.begin(), dinp0.end(), fdinp.begin());
    run_onepass<X>(fdinp.data(), (X *)NULL, (float *)NULL, (float *)NULL, (float *)NULL,
                   dout.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C, R);
    size_t diff = 0;
    for (size_t i = 0; i < n + guard; i++) diff += bits_of(fdinp[i]) != bits_of(dinp[i]);
    report(type, "frozen", N, C, (double)diff, 0);
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    /* (N, C, R; R 0: cuda_ln1_rows_per_warp(N)): every V4 instance (C up
     * to 256, 512, 768, 1024, 1280), a C that is not a multiple of 32, rows
     * that leave a block's last warps idle, several blocks, and warps of
     * more than 4 rows (as N > 32768 gives them; the full set also one
     * such N itself) */
    static const int full[][3] = {{37, 24, 0},  {394, 192, 0}, {300, 520, 0}, {130, 768, 0},
                                  {3000, 768, 0}, {70, 1024, 0}, {70, 1280, 0}, {1, 64, 0},
                                  {33, 1276, 0}, {394, 192, 6}, {33000, 8, 0}};
    static const int brief[][3] = {{37, 24, 0}, {300, 520, 0}, {70, 1280, 0}, {394, 192, 6}};
    const int(*shapes)[3] = quick ? brief : full;
    const size_t count = quick ? sizeof brief / sizeof brief[0] : sizeof full / sizeof full[0];
    for (size_t s = 0; s < count; s++) {
        const int N = shapes[s][0], C = shapes[s][1];
        const int R = shapes[s][2] ? shapes[s][2] : cuda_ln1_rows_per_warp(N);
        ln_case<float>("fp32", N, C, R);
        ln_case<bf16>("bf16", N, C, R);
        ln_case<f16>("f16", N, C, R);
    }
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
