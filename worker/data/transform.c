/* worker/data/transform.c - see transform.h: the crop boxes of timm/DeiT and
 * the antialiased resampling of torch's interpolate(antialias=True).
 *
 * Owns: the box rules and the two-pass resampler (per-axis weight tables,
 * horizontal pass into a ring of float rows, vertical pass, normalisation
 * into CHW). Must not: keep global state, log, or allocate in the hot loop
 * when the caller hands a scratch.
 */
#include "transform.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the boxes ---------------------------------------------------------- */

/* Python's round() on a float: to the nearest, ties to even */
static double round_half_even(double v)
{
    double f = floor(v), d = v - f;
    if (d > 0.5) return f + 1.0;
    if (d < 0.5) return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

xf_box xf_random_resized_crop(int width, int height, const double scale[2], const double ratio[2],
                              rng_state *r)
{
    double area = (double)height * (double)width;
    /* torch.log(torch.tensor(ratio)): float32 */
    double lr0 = (double)logf((float)ratio[0]), lr1 = (double)logf((float)ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double u = (double)rng_uniform(r);
        double target = area * (scale[0] + u * (scale[1] - scale[0]));
        double v = (double)rng_uniform(r);
        double ar = exp(lr0 + v * (lr1 - lr0));
        double w = round_half_even(sqrt(target * ar));
        double h = round_half_even(sqrt(target / ar));
        if (0 < w && w <= width && 0 < h && h <= height) {
            double i = (double)rng_below(r, (uint64_t)(height - (int)h + 1));
            double j = (double)rng_below(r, (uint64_t)(width - (int)w + 1));
            return (xf_box){j, i, w, h};
        }
    }
    /* the fallback: the whole image, its aspect clamped into ratio, centered */
    double in_ratio = (double)width / (double)height;
    double rmin = ratio[0] < ratio[1] ? ratio[0] : ratio[1];
    double rmax = ratio[0] < ratio[1] ? ratio[1] : ratio[0];
    int w = width, h = height;
    if (in_ratio < rmin)
        h = (int)round_half_even(w / rmin);
    else if (in_ratio > rmax)
        w = (int)round_half_even(h * rmax);
    /* torchvision would return an empty crop here (ratio far from 1 on a
     * 1-pixel image); one pixel instead */
    if (h < 1) h = 1;
    if (w < 1) w = 1;
    return (xf_box){(double)((width - w) / 2), (double)((height - h) / 2), w, h};
}

xf_box xf_center_crop_box(int width, int height, int size, double crop_pct)
{
    long s = (long)floor(size / crop_pct);
    long shortside = width <= height ? width : height, longside = width <= height ? height : width;
    long newlong = (long)((double)(s * longside) / (double)shortside);
    long nw = width <= height ? s : newlong, nh = width <= height ? newlong : s;
    double top = round_half_even((double)(nh - size) / 2.0);
    double left = round_half_even((double)(nw - size) / 2.0);
    double sx = (double)width / (double)nw, sy = (double)height / (double)nh;
    return (xf_box){left * sx, top * sy, size * sx, size * sy};
}

/* ---- scratch ------------------------------------------------------------ */

struct xf_scratch {
    void *buf;
    size_t cap;
};

xf_scratch *xf_scratch_new(void) { return calloc(1, sizeof(xf_scratch)); }

void xf_scratch_free(xf_scratch *s)
{
    if (!s) return;
    free(s->buf);
    free(s);
}

/* at least n bytes, 64-byte aligned; the contents are not kept */
static void *scratch_get(xf_scratch *s, size_t n)
{
    if (n <= s->cap) return s->buf;
    size_t cap = (n + 4095) & ~(size_t)4095;
    void *b = aligned_alloc(64, cap);
    if (!b) return NULL;
    free(s->buf);
    s->buf = b;
    s->cap = cap;
    return b;
}

/* ---- weight tables ------------------------------------------------------ */

static double filter_linear(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Keys' cubic convolution, a = -0.5 (torch's antialias path, PIL) */
static double filter_cubic(double x)
{
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

/* one axis: output i reads n[i] source pixels from start[i] (absolute
 * index) with the weights w[i * k ...] (k = the table's width, the rest
 * zero) */
typedef struct {
    int *start, *n;
    float *w;
    int k;
} axis_tab;

typedef struct {
    double scale, support, inv;
    int kmax; /* an upper bound on the taps of one output */
} axis_geom;

static axis_geom axis_geometry(double len, int out, double base)
{
    axis_geom g;
    g.scale = len / out;
    double stretch = g.scale >= 1.0 ? g.scale : 1.0;
    g.support = base * stretch;
    g.inv = 1.0 / stretch;
    g.kmax = (int)ceil(2.0 * g.support) + 2;
    return g;
}

/* fills t (its arrays sized for out outputs of g.kmax taps); lo..hi: the
 * readable source pixels; flip: output i takes the taps of out-1-i */
static void axis_fill(axis_tab *t, const axis_geom *g, double x0, int out, int lo, int hi,
                      double (*f)(double), int flip)
{
    int k = 0;
    for (int i = 0; i < out; i++) {
        double c = x0 + g->scale * (i + 0.5);
        long a = (long)floor(c - g->support + 0.5), b = (long)floor(c + g->support + 0.5);
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (b <= a) { /* cannot happen for a box inside its bounds; the nearest pixel */
            a = (long)floor(c);
            if (a < lo) a = lo;
            if (a > hi - 1) a = hi - 1;
            b = a + 1;
        }
        int n = (int)(b - a);
        if (n > g->kmax) n = g->kmax; /* cannot happen either: kmax bounds b - a */
        int o = flip ? out - 1 - i : i;
        float *w = t->w + (size_t)o * g->kmax;
        double total = 0.0;
        for (int j = 0; j < n; j++) {
            double v = f(((double)(a + j) - c + 0.5) * g->inv);
            w[j] = (float)v;
            total += v;
        }
        if (total != 0.0) { /* as torch: weights that sum to 0 stay as they are */
            float inv = (float)(1.0 / total);
            for (int j = 0; j < n; j++) w[j] *= inv;
        }
        for (int j = n; j < g->kmax; j++) w[j] = 0.0f;
        t->start[o] = (int)a;
        t->n[o] = n;
        if (n > k) k = n;
    }
    t->k = k;
}

/* ---- the passes ---------------------------------------------------------- */

/* GCC's generic vectors (lowered to whatever the target has: SSE, AVX,
 * AVX-512): v8/v8u eight floats (aligned / not), v4/v4u four. The code fixes
 * the order of every sum (and -std=c11 contracts nothing into FMAs), so the
 * output is bit for bit the same on every x86-64, whatever its vector width. */
typedef float v8 __attribute__((vector_size(32), may_alias));
typedef float v8u __attribute__((vector_size(32), may_alias, aligned(4)));
typedef int v8i __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
typedef float v4u __attribute__((vector_size(16), may_alias, aligned(4)));
typedef int v4i __attribute__((vector_size(16)));

/* one source row, pixels lo..hi, to floats: RGB as they are (3 floats a
 * pixel: a plain widening the compiler vectorises) or L; then zeros for pad
 * pixels and ROW_SLACK floats more (the taps past an output's own read zeros,
 * times a zero weight, and hpass3's 8-float loads read 2 floats past a pair) */
#define ROW_SLACK 8
static void row_to_float(const uint8_t *restrict src, int lo, int hi, int ch, int pad,
                         float *restrict dst)
{
    const uint8_t *restrict p = src + (size_t)lo * 3;
    int n = hi - lo;
    if (ch == 3) {
        for (int i = 0; i < 3 * n; i++) dst[i] = p[i];
    } else {
        for (int i = 0; i < n; i++) {
            uint32_t l = ((uint32_t)p[3 * i] * 19595u + (uint32_t)p[3 * i + 1] * 38470u +
                          (uint32_t)p[3 * i + 2] * 7471u + 0x8000u) >>
                         16;
            dst[i] = (float)l;
        }
    }
    memset(dst + (size_t)n * ch, 0, ((size_t)pad * ch + ROW_SLACK) * sizeof(float));
}

/* The horizontal pass of one RGB row (3 floats a pixel) into three planes of
 * out floats: plane c, output o = sum_j w[o][j] * row[start[o] - lo + j][c].
 * Two taps a vector: the 8 floats from pixel start + 2i hold pixels 2i and
 * 2i + 1 (and 2 floats unused), times w8[o][i] = {w[2i] x3, w[2i+1] x3, 0, 0}
 * (xf_resample_ex expands it); the two halves are added at the end. Four
 * outputs at a time, so that four sums run side by side, and their {r g b}
 * are transposed into the planes. kp: tap pairs; the weights past an
 * output's own taps are zero. */
static void hpass3(const float *restrict row, int lo, const int *start, const float *restrict w8,
                   int kp, int out, float *restrict dst)
{
    const v8i half = {3, 4, 5, 6, 7, 0, 1, 2};
    int o = 0;
    for (; o + 4 <= out; o += 4) {
        const float *s0 = row + (size_t)(start[o] - lo) * 3,
                    *s1 = row + (size_t)(start[o + 1] - lo) * 3;
        const float *s2 = row + (size_t)(start[o + 2] - lo) * 3,
                    *s3 = row + (size_t)(start[o + 3] - lo) * 3;
        const v8 *w0 = (const v8 *)(w8 + (size_t)o * kp * 8), *w1 = w0 + kp, *w2 = w1 + kp,
                 *w3 = w2 + kp;
        v8 a0 = w0[0] * *(const v8u *)s0, a1 = w1[0] * *(const v8u *)s1;
        v8 a2 = w2[0] * *(const v8u *)s2, a3 = w3[0] * *(const v8u *)s3;
        for (int i = 1; i < kp; i++) {
            a0 += w0[i] * *(const v8u *)(s0 + 6 * i);
            a1 += w1[i] * *(const v8u *)(s1 + 6 * i);
            a2 += w2[i] * *(const v8u *)(s2 + 6 * i);
            a3 += w3[i] * *(const v8u *)(s3 + 6 * i);
        }
        a0 += __builtin_shuffle(a0, half);
        a1 += __builtin_shuffle(a1, half);
        a2 += __builtin_shuffle(a2, half);
        a3 += __builtin_shuffle(a3, half);
        v4 b0, b1, b2, b3; /* the low halves: {r g b .} of each output */
        memcpy(&b0, &a0, sizeof b0);
        memcpy(&b1, &a1, sizeof b1);
        memcpy(&b2, &a2, sizeof b2);
        memcpy(&b3, &a3, sizeof b3);
        /* {r g b .} x 4 -> {r r r r}, {g g g g}, {b b b b} */
        v4 t0 = __builtin_shuffle(b0, b1, (v4i){0, 4, 1, 5}); /* r0 r1 g0 g1 */
        v4 t1 = __builtin_shuffle(b2, b3, (v4i){0, 4, 1, 5}); /* r2 r3 g2 g3 */
        v4 t2 = __builtin_shuffle(b0, b1, (v4i){2, 6, 3, 7}); /* b0 b1 .. .. */
        v4 t3 = __builtin_shuffle(b2, b3, (v4i){2, 6, 3, 7}); /* b2 b3 .. .. */
        *(v4u *)(dst + o) = __builtin_shuffle(t0, t1, (v4i){0, 1, 4, 5});
        *(v4u *)(dst + out + o) = __builtin_shuffle(t0, t1, (v4i){2, 3, 6, 7});
        *(v4u *)(dst + 2 * out + o) = __builtin_shuffle(t2, t3, (v4i){0, 1, 4, 5});
    }
    for (; o < out; o++) {
        const float *s0 = row + (size_t)(start[o] - lo) * 3;
        const v8 *w0 = (const v8 *)(w8 + (size_t)o * kp * 8);
        v8 a0 = w0[0] * *(const v8u *)s0;
        for (int i = 1; i < kp; i++) a0 += w0[i] * *(const v8u *)(s0 + 6 * i);
        a0 += __builtin_shuffle(a0, half);
        dst[o] = a0[0];
        dst[out + o] = a0[1];
        dst[2 * out + o] = a0[2];
    }
}

static void hpass1(const float *restrict row, int lo, const axis_tab *t, int out, int kw,
                   float *restrict dst)
{
    const int K = t->k;
    for (int o = 0; o < out; o++) {
        const float *restrict s = row + (t->start[o] - lo);
        const float *restrict w = t->w + (size_t)o * kw;
        float a = 0;
        for (int j = 0; j < K; j++) a += w[j] * s[j];
        dst[o] = a;
    }
}

/* the vertical pass of one output row of one channel, normalised:
 * dst[x] = (sum_j w[j] * rows[j][x]) * scl + bias, eight x at a time with
 * the sum held in a register over the taps */
static void vpass(float *restrict dst, const float *const *rows, int n, const float *w, int S,
                  float scl, float bias)
{
    int x = 0;
    for (; x + 8 <= S; x += 8) {
        v8u acc = w[0] * *(const v8u *)(rows[0] + x);
        for (int j = 1; j < n; j++) acc += w[j] * *(const v8u *)(rows[j] + x);
        *(v8u *)(dst + x) = acc * scl + bias;
    }
    for (; x < S; x++) {
        float acc = w[0] * rows[0][x];
        for (int j = 1; j < n; j++) acc += w[j] * rows[j][x];
        dst[x] = acc * scl + bias;
    }
}

/* ---- xf_resample -------------------------------------------------------- */

/* 1e-6 pixels: what a box scaled to a DCT-downscaled image may overrun by */
#define XF_EPS 1e-6

static int box_ok(xf_box b)
{
    return isfinite(b.x) && isfinite(b.y) && isfinite(b.w) && isfinite(b.h);
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* v rounded half up and clamped to 0..255 (PIL's clip8 of its fixed-point sums) */
static float u8_of(float v)
{
    double r = floor((double)v + 0.5);
    return (float)(r < 0.0 ? 0.0 : r > 255.0 ? 255.0 : r);
}

static void round_u8(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) v[i] = u8_of(v[i]);
}

/* xf_resample_ex's work; raw: as PIL's resize of 8-bit images, each pass's
 * values rounded to 8 bits (the horizontal pass's here, the vertical one's
 * by the caller), and no normalisation (scale 1, bias 0; mean and std
 * unused) */
static int resample(const uint8_t *rgb, int width, int height, xf_box box, const xf_box *bounds,
                    int flip, const xf_params *p, int raw, xf_scratch *s, float *out, char *err,
                    size_t errlen)
{
    if (!p || !out) return err_fail(err, errlen, "xf_resample: no parameters or no output");
    if (!rgb || width <= 0 || height <= 0)
        return err_fail(err, errlen, "xf_resample: no image (%dx%d)", width, height);
    if (p->out_size <= 0 || p->out_size > 65536)
        return err_fail(err, errlen, "xf_resample: out_size %d outside 1..65536", p->out_size);
    if (p->channels != 1 && p->channels != 3)
        return err_fail(err, errlen, "xf_resample: channels %d, not 1 or 3", p->channels);
    if (p->interp != XF_BILINEAR && p->interp != XF_BICUBIC)
        return err_fail(err, errlen, "xf_resample: unknown interpolation %d", (int)p->interp);
    if (!raw && (!p->mean || !p->std)) return err_fail(err, errlen, "xf_resample: no mean or std");
    for (int c = 0; !raw && c < p->channels; c++)
        if (!(p->std[c] != 0.0f) || !isfinite(p->std[c]) || !isfinite(p->mean[c]))
            return err_fail(err, errlen, "xf_resample: channel %d: mean %g, std %g", c,
                            (double)p->mean[c], (double)p->std[c]);
    if (!box_ok(box) || !(box.w > 0) || !(box.h > 0))
        return err_fail(err, errlen, "xf_resample: empty box x=%g y=%g w=%g h=%g", box.x, box.y,
                        box.w, box.h);
    if (box.x < -XF_EPS || box.y < -XF_EPS || box.x + box.w > width + XF_EPS ||
        box.y + box.h > height + XF_EPS)
        return err_fail(err, errlen, "xf_resample: box x=%g y=%g w=%g h=%g outside the %dx%d image",
                        box.x, box.y, box.w, box.h, width, height);
    xf_box bd = bounds ? *bounds : box;
    if (bounds && (!box_ok(bd) || box.x < bd.x - XF_EPS || box.y < bd.y - XF_EPS ||
                   box.x + box.w > bd.x + bd.w + XF_EPS || box.y + box.h > bd.y + bd.h + XF_EPS))
        return err_fail(err, errlen,
                        "xf_resample: box x=%g y=%g w=%g h=%g outside its bounds x=%g y=%g w=%g "
                        "h=%g",
                        box.x, box.y, box.w, box.h, bd.x, bd.y, bd.w, bd.h);
    /* the readable pixels: the bounds rounded outward, cut to the image; an
     * edge within XF_EPS of a whole pixel is that pixel's (163.00000000000003,
     * the sum of a scaled box's x and w, ends at 163, not 164) */
    double fx0 = floor(bd.x + XF_EPS), fy0 = floor(bd.y + XF_EPS);
    double fx1 = ceil(bd.x + bd.w - XF_EPS), fy1 = ceil(bd.y + bd.h - XF_EPS);
    int lox = fx0 < 0 ? 0 : fx0 > width - 1 ? width - 1 : (int)fx0;
    int loy = fy0 < 0 ? 0 : fy0 > height - 1 ? height - 1 : (int)fy0;
    int hix = fx1 > width ? width : fx1 < lox + 1 ? lox + 1 : (int)fx1;
    int hiy = fy1 > height ? height : fy1 < loy + 1 ? loy + 1 : (int)fy1;

    int S = p->out_size, ch = p->channels;
    double base = p->interp == XF_BICUBIC ? 2.0 : 1.0;
    double (*f)(double) = p->interp == XF_BICUBIC ? filter_cubic : filter_linear;
    axis_geom gx = axis_geometry(box.w, S, base), gy = axis_geometry(box.h, S, base);
    int spanx = hix - lox;

    /* one block: both tables, the float source row, the ring */
    size_t o_xs = 0, o_xn = o_xs + align64(sizeof(int) * S), o_xw = o_xn + align64(sizeof(int) * S);
    size_t o_ys = o_xw + align64(sizeof(float) * (size_t)S * gx.kmax);
    size_t o_yn = o_ys + align64(sizeof(int) * S), o_yw = o_yn + align64(sizeof(int) * S);
    size_t o_row = o_yw + align64(sizeof(float) * (size_t)S * gy.kmax);
    size_t o_ring = o_row + align64(sizeof(float) * ((size_t)(spanx + gx.kmax) * ch + ROW_SLACK));
    size_t o_rows = o_ring + align64(sizeof(float) * (size_t)gy.kmax * S * p->channels);
    size_t o_w8 = o_rows + align64(sizeof(float *) * (size_t)gy.kmax);
    int kpmax = (gx.kmax + 1) / 2;
    size_t need = o_w8 + align64(sizeof(float) * 8 * (size_t)S * kpmax);

    xf_scratch own = {0};
    xf_scratch *sc = s ? s : &own;
    char *m = scratch_get(sc, need);
    if (!m) {
        free(own.buf);
        return err_fail(err, errlen, "xf_resample: out of memory (%zu bytes for a %dx%d box to %d)",
                        need, (int)box.w, (int)box.h, S);
    }
    axis_tab tx = {(int *)(m + o_xs), (int *)(m + o_xn), (float *)(m + o_xw), 0};
    axis_tab ty = {(int *)(m + o_ys), (int *)(m + o_yn), (float *)(m + o_yw), 0};
    float *row = (float *)(m + o_row), *ring = (float *)(m + o_ring);
    const float **rows = (const float **)(m + o_rows); /* the ring rows of one output row */
    float *w8 = (float *)(m + o_w8);
    axis_fill(&tx, &gx, box.x, S, lox, hix, f, flip);
    axis_fill(&ty, &gy, box.y, S, loy, hiy, f, 0);

    /* hpass3's weights: tap pairs, each weight for its pixel's 3 floats */
    int kp = (tx.k + 1) / 2;
    for (int o = 0; o < S; o++)
        for (int i = 0; i < kp; i++) {
            const float *w = tx.w + (size_t)o * gx.kmax;
            float *d = w8 + ((size_t)o * kp + i) * 8;
            float wa = w[2 * i], wb = 2 * i + 1 < gx.kmax ? w[2 * i + 1] : 0.0f;
            for (int l = 0; l < 3; l++) d[l] = wa, d[3 + l] = wb;
            d[6] = d[7] = 0.0f;
        }

    float scl[3] = {1.0f, 1.0f, 1.0f}, bias[3] = {0.0f, 0.0f, 0.0f};
    for (int c = 0; !raw && c < p->channels; c++) {
        scl[c] = (float)(1.0 / (255.0 * p->std[c]));
        bias[c] = (float)(-(double)p->mean[c] / p->std[c]);
    }

    int R = ty.k, next = ty.start[0]; /* ring slots; the next source row to filter */
    int planes = p->channels;
    size_t rowlen = (size_t)S * planes, plane = (size_t)S * S;
    for (int y = 0; y < S; y++) {
        int a = ty.start[y], n = ty.n[y];
        if (next < a) next = a;
        for (; next < a + n; next++) {
            row_to_float(rgb + (size_t)next * width * 3, lox, hix, ch, gx.kmax, row);
            float *dst = ring + (size_t)(next % R) * rowlen;
            if (ch == 3)
                hpass3(row, lox, tx.start, w8, kp, S, dst);
            else
                hpass1(row, lox, &tx, S, gx.kmax, dst);
            if (raw) round_u8(dst, rowlen); /* PIL's 8-bit image between the passes */
        }
        for (int c = 0; c < planes; c++) {
            for (int j = 0; j < n; j++)
                rows[j] = ring + (size_t)((a + j) % R) * rowlen + (size_t)c * S;
            vpass(out + c * plane + (size_t)y * S, rows, n, ty.w + (size_t)y * gy.kmax, S, scl[c],
                  bias[c]);
        }
    }
    free(own.buf);
    return 0;
}

int xf_resample_ex(const uint8_t *rgb, int width, int height, xf_box box, const xf_box *bounds,
                   int flip, const xf_params *p, xf_scratch *s, float *out, char *err,
                   size_t errlen)
{
    return resample(rgb, width, height, box, bounds, flip, p, 0, s, out, err, errlen);
}

/* ---- 8 bits, for RandAugment ------------------------------------------- */

int xf_resample_u8(const uint8_t *rgb, int width, int height, xf_box box, const xf_box *bounds,
                   int flip, const xf_params *p, xf_scratch *s, float *tmp, uint8_t *out,
                   char *err, size_t errlen)
{
    if (!p || !tmp || !out)
        return err_fail(err, errlen, "xf_resample_u8: no parameters or no output");
    xf_params rgbp = *p;
    rgbp.channels = 3;
    if (resample(rgb, width, height, box, bounds, flip, &rgbp, 1, s, tmp, err, errlen) != 0)
        return -1;
    size_t plane = (size_t)p->out_size * p->out_size;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) out[3 * i + c] = (uint8_t)u8_of(tmp[(size_t)c * plane + i]);
    return 0;
}

void xf_normalize_u8(const uint8_t *hwc, const xf_params *p, float *out)
{
    size_t plane = (size_t)p->out_size * p->out_size;
    if (p->channels == 1) {
        for (size_t i = 0; i < plane; i++) {
            const uint8_t *q = hwc + 3 * i;
            uint32_t l = ((uint32_t)q[0] * 19595u + (uint32_t)q[1] * 38470u +
                          (uint32_t)q[2] * 7471u + 0x8000u) >>
                         16;
            out[i] = ((float)l / 255.0f - p->mean[0]) / p->std[0];
        }
        return;
    }
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < plane; i++)
            out[(size_t)c * plane + i] = ((float)hwc[3 * i + c] / 255.0f - p->mean[c]) / p->std[c];
}

int xf_resample(const uint8_t *rgb, int width, int height, xf_box box, int flip, const xf_params *p,
                float *out, char *err, size_t errlen)
{
    return xf_resample_ex(rgb, width, height, box, NULL, flip, p, NULL, out, err, errlen);
}
