/* worker/data/transform.c - see transform.h: the crop boxes of timm/DeiT and
 * the antialiased resampling of torch's interpolate(antialias=True).
 *
 * Owns: the box rules and the two-pass resampler (per-axis weight tables,
 * horizontal pass into a ring of float rows, vertical pass, normalisation
 * into CHW). Must not: keep global state, log, or allocate in the hot loop
 * when the caller hands a scratch.
 */
#include "transform.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
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

xf_box xf_random_resized_crop(int width, int height, const double scale[2], const double ratio[2], rng_state *r)
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
    if (in_ratio < rmin) h = (int)round_half_even(w / rmin);
    else if (in_ratio > rmax) w = (int)round_half_even(h * rmax);
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
        for (int j = 0; j < n; j++) total += f(((double)(a + j) - c + 0.5) * g->inv);
        if (total == 0.0) total = 1.0; /* as torch: weights that sum to 0 stay as they are */
        for (int j = 0; j < n; j++) w[j] = (float)(f(((double)(a + j) - c + 0.5) * g->inv) / total);
        for (int j = n; j < g->kmax; j++) w[j] = 0.0f;
        t->start[o] = (int)a;
        t->n[o] = n;
        if (n > k) k = n;
    }
    t->k = k;
}

/* ---- the passes ---------------------------------------------------------- */

/* one source row, pixels lo..hi, to floats: RGB as 4 floats a pixel (the
 * fourth 0, so that a tap is one 4-wide multiply-add) or L as 1; pad zero
 * pixels after them (the taps past an output's last read zeros, times a zero
 * weight) */
static void row_to_float(const uint8_t *src, int lo, int hi, int ch, int pad, float *restrict dst)
{
    const uint8_t *p = src + (size_t)lo * 3;
    int n = hi - lo;
    if (ch == 4) {
        for (int i = 0; i < n; i++) {
            dst[4 * i + 0] = p[3 * i + 0];
            dst[4 * i + 1] = p[3 * i + 1];
            dst[4 * i + 2] = p[3 * i + 2];
            dst[4 * i + 3] = 0.0f;
        }
    } else {
        for (int i = 0; i < n; i++) {
            uint32_t l = ((uint32_t)p[3 * i] * 19595u + (uint32_t)p[3 * i + 1] * 38470u +
                          (uint32_t)p[3 * i + 2] * 7471u + 0x8000u) >> 16;
            dst[i] = (float)l;
        }
    }
    memset(dst + (size_t)n * ch, 0, (size_t)pad * ch * sizeof(float));
}

/* the horizontal pass of one row: out[o] = sum_j w[o][j] * row[start[o] - lo + j] */
static void hpass4(const float *restrict row, int lo, const axis_tab *t, int out, int kw, float *restrict dst)
{
    for (int o = 0; o < out; o++) {
        const float *restrict s = row + (size_t)(t->start[o] - lo) * 4;
        const float *restrict w = t->w + (size_t)o * kw;
        float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int n = t->n[o];
        for (int j = 0; j < n; j++) {
            a0 += w[j] * s[4 * j + 0];
            a1 += w[j] * s[4 * j + 1];
            a2 += w[j] * s[4 * j + 2];
            a3 += w[j] * s[4 * j + 3];
        }
        dst[4 * o + 0] = a0;
        dst[4 * o + 1] = a1;
        dst[4 * o + 2] = a2;
        dst[4 * o + 3] = a3;
    }
}

static void hpass1(const float *restrict row, int lo, const axis_tab *t, int out, int kw, float *restrict dst)
{
    for (int o = 0; o < out; o++) {
        const float *restrict s = row + (t->start[o] - lo);
        const float *restrict w = t->w + (size_t)o * kw;
        float a = 0;
        int n = t->n[o];
        for (int j = 0; j < n; j++) a += w[j] * s[j];
        dst[o] = a;
    }
}

/* ---- xf_resample -------------------------------------------------------- */

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* 1e-6 pixels: what a box scaled to a DCT-downscaled image may overrun by */
#define XF_EPS 1e-6

static int box_ok(xf_box b) { return isfinite(b.x) && isfinite(b.y) && isfinite(b.w) && isfinite(b.h); }

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

int xf_resample_ex(const uint8_t *rgb, int width, int height, xf_box box, const xf_box *bounds,
                   int flip, const xf_params *p, xf_scratch *s, float *out, char *err, size_t errlen)
{
    if (!p || !out) return fail(err, errlen, "xf_resample: no parameters or no output");
    if (!rgb || width <= 0 || height <= 0)
        return fail(err, errlen, "xf_resample: no image (%dx%d)", width, height);
    if (p->out_size <= 0 || p->out_size > 65536)
        return fail(err, errlen, "xf_resample: out_size %d outside 1..65536", p->out_size);
    if (p->channels != 1 && p->channels != 3)
        return fail(err, errlen, "xf_resample: channels %d, not 1 or 3", p->channels);
    if (p->interp != XF_BILINEAR && p->interp != XF_BICUBIC)
        return fail(err, errlen, "xf_resample: unknown interpolation %d", (int)p->interp);
    if (!p->mean || !p->std) return fail(err, errlen, "xf_resample: no mean or std");
    for (int c = 0; c < p->channels; c++)
        if (!(p->std[c] != 0.0f) || !isfinite(p->std[c]) || !isfinite(p->mean[c]))
            return fail(err, errlen, "xf_resample: channel %d: mean %g, std %g", c, (double)p->mean[c],
                        (double)p->std[c]);
    if (!box_ok(box) || !(box.w > 0) || !(box.h > 0))
        return fail(err, errlen, "xf_resample: empty box x=%g y=%g w=%g h=%g", box.x, box.y, box.w, box.h);
    if (box.x < -XF_EPS || box.y < -XF_EPS || box.x + box.w > width + XF_EPS || box.y + box.h > height + XF_EPS)
        return fail(err, errlen, "xf_resample: box x=%g y=%g w=%g h=%g outside the %dx%d image", box.x, box.y,
                    box.w, box.h, width, height);
    xf_box bd = bounds ? *bounds : box;
    if (bounds && (!box_ok(bd) || box.x < bd.x - XF_EPS || box.y < bd.y - XF_EPS ||
                   box.x + box.w > bd.x + bd.w + XF_EPS || box.y + box.h > bd.y + bd.h + XF_EPS))
        return fail(err, errlen, "xf_resample: box x=%g y=%g w=%g h=%g outside its bounds x=%g y=%g w=%g h=%g",
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

    int S = p->out_size, ch = p->channels == 3 ? 4 : 1;
    double base = p->interp == XF_BICUBIC ? 2.0 : 1.0;
    double (*f)(double) = p->interp == XF_BICUBIC ? filter_cubic : filter_linear;
    axis_geom gx = axis_geometry(box.w, S, base), gy = axis_geometry(box.h, S, base);
    int spanx = hix - lox;

    /* one block: both tables, the float source row, the ring, the output row */
    size_t o_xs = 0, o_xn = o_xs + align64(sizeof(int) * S), o_xw = o_xn + align64(sizeof(int) * S);
    size_t o_ys = o_xw + align64(sizeof(float) * (size_t)S * gx.kmax);
    size_t o_yn = o_ys + align64(sizeof(int) * S), o_yw = o_yn + align64(sizeof(int) * S);
    size_t o_row = o_yw + align64(sizeof(float) * (size_t)S * gy.kmax);
    size_t o_ring = o_row + align64(sizeof(float) * (size_t)(spanx + gx.kmax) * ch);
    size_t o_orow = o_ring + align64(sizeof(float) * (size_t)gy.kmax * S * ch);
    size_t need = o_orow + align64(sizeof(float) * (size_t)S * ch);

    xf_scratch own = {0};
    xf_scratch *sc = s ? s : &own;
    char *m = scratch_get(sc, need);
    if (!m) {
        free(own.buf);
        return fail(err, errlen, "xf_resample: out of memory (%zu bytes for a %dx%d box to %d)", need,
                    (int)box.w, (int)box.h, S);
    }
    axis_tab tx = {(int *)(m + o_xs), (int *)(m + o_xn), (float *)(m + o_xw), 0};
    axis_tab ty = {(int *)(m + o_ys), (int *)(m + o_yn), (float *)(m + o_yw), 0};
    float *row = (float *)(m + o_row), *ring = (float *)(m + o_ring), *orow = (float *)(m + o_orow);
    axis_fill(&tx, &gx, box.x, S, lox, hix, f, flip);
    axis_fill(&ty, &gy, box.y, S, loy, hiy, f, 0);

    float scl[3], bias[3];
    for (int c = 0; c < p->channels; c++) {
        scl[c] = (float)(1.0 / (255.0 * p->std[c]));
        bias[c] = (float)(-(double)p->mean[c] / p->std[c]);
    }

    int R = ty.k, next = ty.start[0]; /* ring slots; the next source row to filter */
    size_t rowlen = (size_t)S * ch, plane = (size_t)S * S;
    for (int y = 0; y < S; y++) {
        int a = ty.start[y], n = ty.n[y];
        if (next < a) next = a;
        for (; next < a + n; next++) {
            row_to_float(rgb + (size_t)next * width * 3, lox, hix, ch, gx.kmax, row);
            float *dst = ring + (size_t)(next % R) * rowlen;
            if (ch == 4) hpass4(row, lox, &tx, S, gx.kmax, dst);
            else hpass1(row, lox, &tx, S, gx.kmax, dst);
        }
        const float *w = ty.w + (size_t)y * gy.kmax;
        {
            const float *restrict r0 = ring + (size_t)(a % R) * rowlen;
            float w0 = w[0];
            for (size_t i = 0; i < rowlen; i++) orow[i] = w0 * r0[i];
        }
        for (int j = 1; j < n; j++) {
            const float *restrict rj = ring + (size_t)((a + j) % R) * rowlen;
            float wj = w[j];
            for (size_t i = 0; i < rowlen; i++) orow[i] += wj * rj[i];
        }
        if (ch == 4) {
            float *o0 = out + (size_t)y * S, *o1 = o0 + plane, *o2 = o1 + plane;
            for (int x = 0; x < S; x++) {
                o0[x] = orow[4 * x + 0] * scl[0] + bias[0];
                o1[x] = orow[4 * x + 1] * scl[1] + bias[1];
                o2[x] = orow[4 * x + 2] * scl[2] + bias[2];
            }
        } else {
            float *o0 = out + (size_t)y * S;
            for (int x = 0; x < S; x++) o0[x] = orow[x] * scl[0] + bias[0];
        }
    }
    free(own.buf);
    return 0;
}

int xf_resample(const uint8_t *rgb, int width, int height, xf_box box, int flip, const xf_params *p, float *out,
                char *err, size_t errlen)
{
    return xf_resample_ex(rgb, width, height, box, NULL, flip, p, NULL, out, err, errlen);
}
