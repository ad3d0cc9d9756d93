/* tools/flash_emu/flash_emu.cc - runs the flash-attention kernels
 * (kernels/flash_attention.cuh) on the CPU, one user-level context per CUDA
 * thread, and compares them with the CPU twin (kernels/attention.c).
 *
 * Owns: on top of tools/cuda_emu/cuda_emu.h (CUDA's and cuda_common.cuh's
 * stand-ins, the scheduler), the kernels' dynamic shared memory and the
 * stand-ins for the hardware primitives the kernels keep apart (fa_mma: the warp-wide m16n8k16 product, rebuilt from
 * the 32 lanes' fragments as PTX lays them out; fa_pack: round to 16 bits,
 * nearest even; fa_ldsm and fa_ldsm_t: ldmatrix .x4, plain and .trans,
 * from the 32 lanes' row addresses; fa_cp16, fa_cp4 and fa_cp_wait_all:
 * cp.async, landing late with the destination poisoned meanwhile); the
 * grids flash_attention.cu launches; and the comparison (out,
 * lse, dq, dk, dv: normwise relative error, unwritten or extra writes
 * caught by NaN poison; the kernels' cp.async pipeline against their
 * copies through registers: the same bits).
 * Must not: be built into the product (a check of the tile loops without a
 * GPU: tools/flash_emu/run.sh, `make test` runs its quick set as
 * reference/flash_emu); what it cannot check is the hardware itself (the
 * real fragment layout, timing, races between warps that the
 * barrier-per-collective schedule hides).
 *
 * usage: tools/flash_emu/run.sh [quick]
 */
extern "C" {
#include "ops.h"
}
#include "attention_scratch.h"
#include "cuda_emu.h"

#define FA_EMU /* flash_attention.cuh: fa_mma, fa_pack, fa_ldsm, fa_cp* are ours */

/* fa_mma: every lane posts its fragments; each computes its own 4 outputs
 * from the whole warp's, with A and B rebuilt from PTX's m16n8k16 layout. */
static uint32_t emu_a[32][32][4], emu_b[32][32][2];
static float lo16(uint32_t r, bf16 *) { return bits_to_float(bf16{(uint16_t)(r & 0xffff)}); }
static float hi16(uint32_t r, bf16 *) { return bits_to_float(bf16{(uint16_t)(r >> 16)}); }
static float lo16(uint32_t r, f16 *) { return bits_to_float(f16{(uint16_t)(r & 0xffff)}); }
static float hi16(uint32_t r, f16 *) { return bits_to_float(f16{(uint16_t)(r >> 16)}); }

template <typename X> static void fa_mma(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    const int w = emu_warp(), l = emu_lane();
    memcpy(emu_a[w][l], a, sizeof emu_a[w][l]);
    memcpy(emu_b[w][l], b, sizeof emu_b[w][l]);
    emu_wait(&emu_warp_bar[w]);
    float A[16][16], B[16][8];
    X *t = NULL;
    for (int L = 0; L < 32; L++) {
        const int g = L / 4, q = L % 4;
        const uint32_t *ra = emu_a[w][L], *rb = emu_b[w][L];
        A[g][2 * q] = lo16(ra[0], t), A[g][2 * q + 1] = hi16(ra[0], t);
        A[g + 8][2 * q] = lo16(ra[1], t), A[g + 8][2 * q + 1] = hi16(ra[1], t);
        A[g][2 * q + 8] = lo16(ra[2], t), A[g][2 * q + 9] = hi16(ra[2], t);
        A[g + 8][2 * q + 8] = lo16(ra[3], t), A[g + 8][2 * q + 9] = hi16(ra[3], t);
        B[2 * q][g] = lo16(rb[0], t), B[2 * q + 1][g] = hi16(rb[0], t);
        B[2 * q + 8][g] = lo16(rb[1], t), B[2 * q + 9][g] = hi16(rb[1], t);
    }
    const int g = l / 4, q = l % 4;
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * q + (i & 1);
        float s = 0.0f;
        for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
        c[i] += s;
    }
    emu_wait(&emu_warp_bar[w]);
}
template <typename X> static uint32_t fa_pack(float lo, float hi)
{
    X *t = NULL;
    return (uint32_t)to_bits(lo, t) | ((uint32_t)to_bits(hi, t) << 16);
}

/* fa_ldsm, fa_ldsm_t: every lane posts its row address; each builds its
 * four registers from the warp's 32 rows as ldmatrix (.trans) lays them
 * out: matrix i's rows are lanes 8i..8i+7's addresses. The addresses must
 * be 16-byte aligned, as the hardware demands. */
static const uint16_t *emu_rows[32][32];
static void emu_ldsm(uint32_t r[4], const void *row, int trans)
{
    const int w = emu_warp(), l = emu_lane();
    if (((uintptr_t)row & 15) != 0) {
        fprintf(stderr, "flash_emu: ldmatrix row address %p not 16-byte aligned (lane %d)\n",
                row, l);
        exit(3);
    }
    emu_rows[w][l] = (const uint16_t *)row;
    emu_wait(&emu_warp_bar[w]);
    const int g = l / 4, q = l % 4;
    for (int i = 0; i < 4; i++) {
        const uint16_t *const *m = &emu_rows[w][8 * i];
        const uint16_t lo = trans ? m[2 * q][g] : m[g][2 * q];
        const uint16_t hi = trans ? m[2 * q + 1][g] : m[g][2 * q + 1];
        r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
    emu_wait(&emu_warp_bar[w]);
}
static void fa_ldsm(uint32_t r[4], const void *row) { emu_ldsm(r, row, 0); }
static void fa_ldsm_t(uint32_t r[4], const void *row) { emu_ldsm(r, row, 1); }

/* fa_cp16, fa_cp4 (cp.async) and fa_cp_wait_all: a copy is queued, its
 * destination poisoned at once (all ones: NaN in bf16, half and float)
 * and written only when its thread waits. So a read of a tile before its
 * wait and barrier, and a copy into a buffer some warp still reads (a
 * barrier missing before it), both see NaN. A thread that ends with
 * copies still queued is an error too. */
struct emu_copy {
    void *dst;
    const void *src;
    size_t n;
};
static std::vector<emu_copy> emu_queued[EMU_MAX_THREADS];
static long emu_copies;
static void emu_cp(void *dst, const void *src, size_t n)
{
    if (((uintptr_t)dst | (uintptr_t)src) & (n - 1)) {
        fprintf(stderr, "flash_emu: cp.async of %zu bytes from %p to %p: not aligned\n", n, src,
                dst);
        exit(3);
    }
    memset(dst, 0xff, n);
    emu_queued[emu_cur].push_back(emu_copy{dst, src, n});
    emu_copies++;
}
static void fa_cp16(void *dst, const void *src) { emu_cp(dst, src, 16); }
static void fa_cp4(void *dst, const void *src) { emu_cp(dst, src, 4); }
static void fa_cp_wait_all(void)
{
    for (const emu_copy &c : emu_queued[emu_cur]) memcpy(c.dst, c.src, c.n);
    emu_queued[emu_cur].clear();
}
alignas(16) unsigned char fa_smem[1 << 18];

/* the core's hooks: a thread ends with no cp.async copy queued; a launch
 * starts with its shared memory poisoned (all ones: NaN in bf16 and half,
 * so that reads of unloaded tiles show) */
static void fa_thread_end(void)
{
    if (!emu_queued[emu_cur].empty()) {
        fprintf(stderr, "flash_emu: thread %d ended with %zu cp.async copies never waited for\n",
                emu_cur, emu_queued[emu_cur].size());
        exit(3);
    }
}
static void fa_launch(void) { memset(fa_smem, 0xff, sizeof fa_smem); }

#include "flash_attention.cuh"

/* ---- the launches of flash_attention.cu, on host buffers ---- */

template <typename X, int HDP, bool ASYNC>
static void run_forward(X *out, float *lse, const X *qkv, int B, int T, int D, int NH)
{
    const int hd = D / NH;
    emu_launch(flash_forward_kernel<X, HDP, ASYNC>, (unsigned)(B * NH), (unsigned)((T + 63) / 64),
               FA_THREADS, out, lse, qkv, T, NH, hd, FA_LOG2E / sqrtf((float)hd));
}

template <typename X, int HDP, bool ASYNC>
static void run_backward(X *dqkv, float *dvec, const X *dout, const X *qkv, const X *out,
                         const float *lse, int B, int T, int D, int NH)
{
    const int hd = D / NH;
    const float scale = 1.0f / sqrtf((float)hd), scale_log2 = scale * FA_LOG2E;
    const size_t rows = (size_t)B * NH * T;
    emu_launch(flash_backward_dot_kernel<X>, (unsigned)((rows + 7) / 8), 1, 256, dvec, dout, out,
               B, T, NH, hd);
    emu_launch(flash_backward_dkdv_kernel<X, HDP, ASYNC, false>, (unsigned)(B * NH),
               (unsigned)((T + 63) / 64), FA_THREADS, dqkv, (float *)NULL, qkv, dout, lse,
               (const float *)dvec, 0, T, NH, hd, scale, scale_log2);
    emu_launch(flash_backward_dq_kernel<X, HDP, ASYNC>, (unsigned)(B * NH), (unsigned)((T + 63) / 64),
               FA_THREADS, dqkv, qkv, dout, lse, (const float *)dvec, T, NH, hd, scale,
               scale_log2);
}

/* The fused backward (OPS_CANDIDATE_KERNELS), as fa_backward_fused
 * launches it, with `heads` heads a launch (the backend takes
 * att_flash_fused_heads; fewer here make several launches reuse the
 * parts). scratch: the D_i, then the parts. */
template <typename X, int HDP>
static void run_backward_fused(X *dqkv, float *scratch, const X *dout, const X *qkv, const X *out,
                               const float *lse, int B, int T, int D, int NH, int heads)
{
    const int hd = D / NH, BH = B * NH, nkt = (T + 63) / 64;
    const float scale = 1.0f / sqrtf((float)hd), scale_log2 = scale * FA_LOG2E;
    const size_t rows = (size_t)BH * T;
    float *dvec = scratch, *part = scratch + att_flash_scratch_bytes(B, T, NH) / sizeof(float);
    emu_launch(flash_backward_dot_kernel<X>, (unsigned)((rows + 7) / 8), 1, 256, dvec, dout, out,
               B, T, NH, hd);
    for (int bh0 = 0; bh0 < BH; bh0 += heads) {
        const int n = BH - bh0 < heads ? BH - bh0 : heads;
        emu_launch(flash_backward_dkdv_kernel<X, HDP, true, true>, (unsigned)n, (unsigned)nkt,
                   FA_THREADS, dqkv, part, qkv, dout, lse, (const float *)dvec, bh0, T, NH, hd,
                   scale, scale_log2);
        const size_t pairs = (size_t)n * T * hd / 2;
        emu_launch(flash_backward_dq_sum_kernel<X>, (unsigned)((pairs + 255) / 256), 1, 256, dqkv,
                   (const float *)part, bh0, n, nkt, T, NH, hd, scale);
    }
}

/* ---- the comparison ---- */

static unsigned long long rng_s = 0x9e3779b97f4a7c15ull;
static float randn(void)
{
    /* Box-Muller on a 64-bit LCG: enough for test inputs */
    rng_s = rng_s * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((rng_s >> 11) + 1.0) / 9007199254740993.0;
    rng_s = rng_s * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = (rng_s >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

template <typename X> static std::vector<X> to_x(const std::vector<float> &v)
{
    std::vector<X> r(v.size());
    X *t = NULL;
    for (size_t i = 0; i < v.size(); i++) r[i].bits = to_bits(v[i], t);
    return r;
}
template <typename X> static std::vector<float> from_x(const std::vector<X> &v)
{
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); i++) r[i] = ldx(v[i]);
    return r;
}

/* max |got - want| / max |want| over the elements at (row, col) with col in
 * [c0, c0 + n) of rows of width w; infinity for a NaN */
static double rel_err(const float *got, const float *want, size_t rows, int w, int c0, int n)
{
    double md = 0, mr = 0;
    for (size_t r = 0; r < rows; r++)
        for (int c = c0; c < c0 + n; c++) {
            const double g = got[r * w + c], x = want[r * w + c];
            if (!std::isfinite(g) || !std::isfinite(x)) return INFINITY;
            md = fmax(md, fabs(g - x));
            mr = fmax(mr, fabs(x));
        }
    return md / (mr > 0 ? mr : 1);
}

/* whether x[0..n) are all still NaN */
static int untouched(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!std::isnan(x[i])) return 0;
    return 1;
}

static int failures;
static void report(const char *type, const char *what, int B, int T, int hd, int NH, double e,
                   double tol)
{
    const int bad = !(e <= tol);
    failures += bad;
    printf("%-4s %-4s B=%d T=%-3d hd=%-3d NH=%d err=%.3g%s\n", type, what, B, T, hd, NH, e,
           bad ? "  FAIL" : "");
}

/* neg: every score far below zero (q near +4, k near -4: about -128 at hd
 * 64), so that lse < -88 and exp(-lse) overflows: what a tile's keys past
 * T, whose rows of K are zero (score 0), must never let into dq. */
template <typename X, int HDP>
static void check(const char *type, int B, int T, int hd, int NH, int neg)
{
    const int D = NH * hd;
    const size_t nq = (size_t)B * T * 3 * D, no = (size_t)B * T * D, nl = (size_t)B * NH * T;
    std::vector<float> qkv(nq), dout(no), out(no), lse(nl), dqkv(nq);
    for (size_t i = 0; i < nq; i++) {
        const size_t c = i % (3 * (size_t)D);
        qkv[i] = !neg || c >= 2 * (size_t)D ? randn() : (c < (size_t)D ? 4 : -4) + 0.1f * randn();
    }
    for (auto &x : dout) x = randn();
    qkv = from_x(to_x<X>(qkv)); /* both sides read the 16-bit values */
    dout = from_x(to_x<X>(dout));
    std::vector<float> scratch(ops_cpu_attention_scratch_bytes(B, T, D, NH) / 4 + 1);
    attention_forward_cpu(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, D, NH);
    out = from_x(to_x<X>(out)); /* the backward's out, as the GPU stores it */
    attention_backward_cpu(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(),
                           lse.data(), B, T, D, NH);

    std::vector<X> xqkv = to_x<X>(qkv), xdout = to_x<X>(dout), xout = to_x<X>(out);
    /* outputs poisoned with NaN, with a poisoned tail past their end that
     * must stay so (GUARD elements) */
    const size_t GUARD = 64 * 3 * (size_t)D;
    std::vector<X> fout = to_x<X>(std::vector<float>(no + GUARD, NAN));
    std::vector<float> flse(nl + GUARD, NAN), dvec(nl + GUARD, NAN);
    const long copies = emu_copies;
    run_forward<X, HDP, true>(fout.data(), flse.data(), xqkv.data(), B, T, D, NH);
    report(type, "cp.async", B, T, hd, NH, emu_copies > copies ? 0 : INFINITY, 0);
    std::vector<float> got = from_x(fout);
    report(type, "tail", B, T, hd, NH, untouched(got.data() + no, GUARD) &&
           untouched(flse.data() + nl, GUARD) ? 0 : INFINITY, 0);
    report(type, "out", B, T, hd, NH, rel_err(got.data(), out.data(), (size_t)B * T, D, 0, D),
           1e-2);
    report(type, "lse", B, T, hd, NH, rel_err(flse.data(), lse.data(), 1, (int)nl, 0, (int)nl),
           1e-2);

    std::vector<X> fd = to_x<X>(std::vector<float>(nq + GUARD, NAN));
    run_backward<X, HDP, true>(fd.data(), dvec.data(), xdout.data(), xqkv.data(), xout.data(),
                               lse.data(), B, T, D, NH);
    std::vector<float> g = from_x(fd);
    report(type, "tail", B, T, hd, NH, untouched(g.data() + nq, GUARD) &&
           untouched(dvec.data() + nl, GUARD) ? 0 : INFINITY, 0);
    const char *names[3] = {"dq", "dk", "dv"};
    /* neg: dq = sum_j dS_ij k_j, where every k_j holds the same -4 and the
     * dS_ij (rounded to 16 bits) sum to about 0: the cancellation costs
     * bf16 digits on either path (measured 0.036 on both) */
    const double tol[3] = {neg ? 0.05 : 1e-2, 1e-2, 1e-2};
    for (int p = 0; p < 3; p++)
        report(type, names[p], B, T, hd, NH,
               rel_err(g.data(), dqkv.data(), (size_t)B * T, 3 * D, p * D, D), tol[p]);

    /* the tiles copied through registers (OPS_FLASH_SYNC_LOADS): the same
     * bits as with cp.async, every output */
    std::vector<X> sout = to_x<X>(std::vector<float>(no, NAN)), sd(nq);
    std::vector<float> slse(nl, NAN), sdvec(nl, NAN);
    run_forward<X, HDP, false>(sout.data(), slse.data(), xqkv.data(), B, T, D, NH);
    run_backward<X, HDP, false>(sd.data(), sdvec.data(), xdout.data(), xqkv.data(), xout.data(),
                                lse.data(), B, T, D, NH);
    const int same = memcmp(sout.data(), fout.data(), no * sizeof(X)) == 0 &&
                     memcmp(slse.data(), flse.data(), nl * sizeof(float)) == 0 &&
                     memcmp(sd.data(), fd.data(), nq * sizeof(X)) == 0 &&
                     memcmp(sdvec.data(), dvec.data(), nl * sizeof(float)) == 0;
    report(type, "sync", B, T, hd, NH, same ? 0 : INFINITY, 0);

    /* the fused backward, all heads in one launch and one head a launch:
     * dq, dk, dv against the CPU twin; dk and dv the two kernels' bits, dq
     * the same in both launch splits; nothing past dqkv written, and the
     * parts' NaN poison never reaching dq */
    const int BH = B * NH, all = att_flash_fused_heads(B, T, D, NH);
    const size_t parts = att_flash_fused_scratch_bytes(B, T, D, NH) / sizeof(float);
    std::vector<X> f1 = to_x<X>(std::vector<float>(nq + GUARD, NAN)), f2 = f1;
    std::vector<float> fs(parts, NAN), fs2(parts, NAN);
    report(type, "heads", B, T, hd, NH, all == BH ? 0 : INFINITY, 0);
    run_backward_fused<X, HDP>(f1.data(), fs.data(), xdout.data(), xqkv.data(), xout.data(),
                               lse.data(), B, T, D, NH, all);
    run_backward_fused<X, HDP>(f2.data(), fs2.data(), xdout.data(), xqkv.data(), xout.data(),
                               lse.data(), B, T, D, NH, 1);
    std::vector<float> gf = from_x(f1);
    report(type, "ftail", B, T, hd, NH, untouched(gf.data() + nq, GUARD) ? 0 : INFINITY, 0);
    for (int p = 0; p < 3; p++) {
        char what[8];
        snprintf(what, sizeof what, "f%s", names[p]);
        report(type, what, B, T, hd, NH,
               rel_err(gf.data(), dqkv.data(), (size_t)B * T, 3 * D, p * D, D), tol[p]);
    }
    int kv_same = 1, q_same = 1;
    for (size_t r = 0; r < (size_t)B * T; r++) {
        const X *a = f1.data() + r * 3 * D, *b = fd.data() + r * 3 * D, *c = f2.data() + r * 3 * D;
        kv_same &= memcmp(a + D, b + D, 2 * D * sizeof(X)) == 0;
        q_same &= memcmp(a, c, 3 * D * sizeof(X)) == 0;
    }
    report(type, "fdkdv", B, T, hd, NH, kv_same ? 0 : INFINITY, 0);
    report(type, "fsplit", B, T, hd, NH, q_same ? 0 : INFINITY, 0);
}

template <typename X>
static void check_hd(const char *type, int B, int T, int hd, int NH, int neg = 0)
{
    switch ((hd + 15) / 16 * 16) {
    case 32: check<X, 32>(type, B, T, hd, NH, neg); break;
    case 48: check<X, 48>(type, B, T, hd, NH, neg); break;
    case 64: check<X, 64>(type, B, T, hd, NH, neg); break;
    case 80: check<X, 80>(type, B, T, hd, NH, neg); break;
    case 96: check<X, 96>(type, B, T, hd, NH, neg); break;
    case 112: check<X, 112>(type, B, T, hd, NH, neg); break;
    case 128: check<X, 128>(type, B, T, hd, NH, neg); break;
    }
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    ops_cpu_set_threads(1);
    emu_at_thread_end = fa_thread_end;
    emu_at_launch = fa_launch;
    /* (B, T, hd, NH). The quick set (make test) covers a partial tile
     * (T 7; T 70 over two tiles) and zero columns past hd (hd 40 runs as
     * 48, next to another head's columns). */
    static const int quick_cases[][4] = {{1, 7, 40, 2}, {2, 70, 80, 1}};
    static const int cases[][4] = {{1, 1, 32, 2},   {1, 7, 64, 2},   {2, 197, 64, 2},
                                   {1, 257, 80, 2}, {1, 197, 128, 1}, {1, 577, 64, 1},
                                   {1, 65, 40, 2},  {1, 130, 72, 1},  {1, 64, 96, 1},
                                   {1, 63, 112, 1}, {1, 129, 120, 1}, {1, 7, 80, 3}};
    const int n = quick ? 2 : (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const int *c = quick ? quick_cases[i] : cases[i];
        check_hd<bf16>("bf16", c[0], c[1], c[2], c[3]);
        check_hd<f16>("f16", c[0], c[1], c[2], c[3]);
    }
    /* scores all far below zero (lse < -88), a partial last K/V tile */
    printf("scores near -128:\n");
    check_hd<bf16>("bf16", 1, 70, 64, 1, 1);
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
