/* worker/data/randaug.c - see randaug.h: timm's RandAugment ops with Pillow
 * 9.4's arithmetic.
 *
 * Owns: the lookup-table ops, the blends of ImageEnhance, the 3x3 SMOOTH
 * filter, PIL's affine transform engines (ImagingScaleAffine and
 * affine_fixed for the nearest filter, the generic engine with its bilinear
 * and bicubic filters), and RandAugment's draws. Must not: keep global
 * state, log, or allocate in the hot loop when the caller hands a scratch.
 *
 * Each op follows the order of PIL's own arithmetic (float where PIL
 * computes in float, double where in double, truncation where it truncates)
 * so that the result is PIL's byte for byte; the build contracts nothing
 * into FMAs (-std=c11), as Debian's Pillow on x86-64 does not either.
 */
#include "randaug.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names and sets -------------------------------------------------------- */

static const char *const op_names[RA_N_OPS] = {
    "AutoContrast", "Equalize",           "Invert",
    "Rotate",       "Posterize",          "PosterizeIncreasing",
    "Solarize",     "SolarizeIncreasing", "SolarizeAdd",
    "Color",        "ColorIncreasing",    "Contrast",
    "ContrastIncreasing", "Brightness",   "BrightnessIncreasing",
    "Sharpness",    "SharpnessIncreasing", "ShearX",
    "ShearY",       "TranslateXRel",      "TranslateYRel",
};

const char *ra_op_name(ra_op op)
{
    return (unsigned)op < RA_N_OPS ? op_names[op] : NULL;
}

int ra_op_from_name(const char *name)
{
    for (int i = 0; name && i < RA_N_OPS; i++)
        if (!strcmp(name, op_names[i])) return i;
    return -1;
}

static const ra_op set_default[15] = {
    RA_AUTO_CONTRAST, RA_EQUALIZE, RA_INVERT,   RA_ROTATE,     RA_POSTERIZE,
    RA_SOLARIZE,      RA_SOLARIZE_ADD, RA_COLOR, RA_CONTRAST,  RA_BRIGHTNESS,
    RA_SHARPNESS,     RA_SHEAR_X,  RA_SHEAR_Y,  RA_TRANSLATE_X_REL, RA_TRANSLATE_Y_REL,
};
static const ra_op set_increasing[15] = {
    RA_AUTO_CONTRAST,       RA_EQUALIZE,          RA_INVERT,
    RA_ROTATE,              RA_POSTERIZE_INCREASING, RA_SOLARIZE_INCREASING,
    RA_SOLARIZE_ADD,        RA_COLOR_INCREASING,  RA_CONTRAST_INCREASING,
    RA_BRIGHTNESS_INCREASING, RA_SHARPNESS_INCREASING, RA_SHEAR_X,
    RA_SHEAR_Y,             RA_TRANSLATE_X_REL,   RA_TRANSLATE_Y_REL,
};

const ra_op *ra_op_set(int increasing, int *n)
{
    *n = 15;
    return increasing ? set_increasing : set_default;
}

int ra_op_signed(ra_op op)
{
    switch (op) {
    case RA_ROTATE:
    case RA_COLOR_INCREASING:
    case RA_CONTRAST_INCREASING:
    case RA_BRIGHTNESS_INCREASING:
    case RA_SHARPNESS_INCREASING:
    case RA_SHEAR_X:
    case RA_SHEAR_Y:
    case RA_TRANSLATE_X_REL:
    case RA_TRANSLATE_Y_REL:
        return 1;
    default:
        return 0;
    }
}

/* ---- level to argument (timm's *_level_to_arg; _LEVEL_DENOM = 10) -------- */

double ra_op_arg(ra_op op, double m, int negate)
{
    double v;
    switch (op) {
    case RA_ROTATE:
        v = (m / 10.0) * 30.0;
        return negate ? -v : v;
    case RA_POSTERIZE:
        return (double)(long)((m / 10.0) * 4.0);
    case RA_POSTERIZE_INCREASING:
        return 4.0 - (double)(long)((m / 10.0) * 4.0);
    case RA_SOLARIZE:
    case RA_SOLARIZE_INCREASING: {
        long t = (long)((m / 10.0) * 256.0);
        if (t > 256) t = 256;
        return op == RA_SOLARIZE ? (double)t : (double)(256 - t);
    }
    case RA_SOLARIZE_ADD: {
        long a = (long)((m / 10.0) * 110.0);
        return (double)(a > 128 ? 128 : a);
    }
    case RA_COLOR:
    case RA_CONTRAST:
    case RA_BRIGHTNESS:
    case RA_SHARPNESS:
        return (m / 10.0) * 1.8 + 0.1;
    case RA_COLOR_INCREASING:
    case RA_CONTRAST_INCREASING:
    case RA_BRIGHTNESS_INCREASING:
    case RA_SHARPNESS_INCREASING:
        v = (m / 10.0) * 0.9;
        v = 1.0 + (negate ? -v : v);
        return v < 0.1 ? 0.1 : v; /* max(0.1, v) */
    case RA_SHEAR_X:
    case RA_SHEAR_Y:
        v = (m / 10.0) * 0.3;
        return negate ? -v : v;
    case RA_TRANSLATE_X_REL:
    case RA_TRANSLATE_Y_REL:
        v = (m / 10.0) * 0.45;
        return negate ? -v : v;
    default:
        return 0.0;
    }
}

/* The three bands of a pixel as lanes of one vector: each lane does the
 * very operations PIL does per band, in the same order (IEEE arithmetic per
 * lane, nothing contracted into FMAs), so the bytes are PIL's. */
typedef double v4d __attribute__((vector_size(32)));

/* (macros, not functions: a 32-byte vector passed or returned by value
 * would change the ABI between builds with and without AVX) */
#define LANES(p) ((v4d){(p)[0], (p)[1], (p)[2], 0.0})

/* ---- scratch ------------------------------------------------------------- */

struct ra_scratch {
    uint8_t *img;
    size_t cap;
    int *tab;
    size_t tcap;
    v4d *px; /* the source's pixels as doubles, for the bilinear and bicubic filters */
    size_t pcap;
};

ra_scratch *ra_scratch_new(void) { return calloc(1, sizeof(ra_scratch)); }

void ra_scratch_free(ra_scratch *s)
{
    if (!s) return;
    free(s->img);
    free(s->tab);
    free(s->px);
    free(s);
}

static uint8_t *scratch_img(ra_scratch *s, size_t n)
{
    if (n <= s->cap) return s->img;
    uint8_t *b = malloc(n);
    if (!b) return NULL;
    free(s->img);
    s->img = b;
    s->cap = n;
    return b;
}

static v4d *scratch_px(ra_scratch *s, size_t n)
{
    if (n <= s->pcap) return s->px;
    v4d *b = aligned_alloc(32, n * sizeof *b);
    if (!b) return NULL;
    free(s->px);
    s->px = b;
    s->pcap = n;
    return b;
}

static int *scratch_tab(ra_scratch *s, size_t n)
{
    if (n <= s->tcap) return s->tab;
    int *b = malloc(n * sizeof *b);
    if (!b) return NULL;
    free(s->tab);
    s->tab = b;
    s->tcap = n;
    return b;
}

/* ---- lookup tables (ImageOps, Image.point: entries clipped to 0..255) ---- */

static void apply_luts(uint8_t *img, size_t npix, const int lut[3][256])
{
    uint8_t l8[3][256];
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 256; i++)
            l8[c][i] = (uint8_t)(lut[c][i] < 0 ? 0 : lut[c][i] > 255 ? 255 : lut[c][i]);
    for (size_t i = 0; i < npix; i++) {
        img[3 * i] = l8[0][img[3 * i]];
        img[3 * i + 1] = l8[1][img[3 * i + 1]];
        img[3 * i + 2] = l8[2][img[3 * i + 2]];
    }
}

static void histograms(const uint8_t *img, size_t npix, long long h[3][256])
{
    memset(h, 0, sizeof(long long) * 3 * 256);
    for (size_t i = 0; i < npix; i++) {
        h[0][img[3 * i]]++;
        h[1][img[3 * i + 1]]++;
        h[2][img[3 * i + 2]]++;
    }
}

/* ImageOps.autocontrast(img) (cutoff 0, no ignore): per band, [lo, hi] of
 * the histogram stretched to [0, 255], int(ix * scale + offset) clipped */
static void autocontrast(uint8_t *img, size_t npix)
{
    long long h[3][256];
    int lut[3][256];
    histograms(img, npix, h);
    for (int c = 0; c < 3; c++) {
        int lo = 0, hi = 255;
        while (lo < 255 && !h[c][lo]) lo++;
        while (hi > 0 && !h[c][hi]) hi--;
        if (hi <= lo) {
            for (int i = 0; i < 256; i++) lut[c][i] = i;
            continue;
        }
        double scale = 255.0 / (double)(hi - lo);
        double offset = (double)(-lo) * scale;
        for (int i = 0; i < 256; i++) {
            int v = (int)((double)i * scale + offset); /* Python's int(): toward zero */
            lut[c][i] = v < 0 ? 0 : v > 255 ? 255 : v;
        }
    }
    apply_luts(img, npix, lut);
}

/* ImageOps.equalize(img): per band, step = (count - the last non-empty
 * bin's count) // 255; lut[i] = (step // 2 + pixels below i) // step */
static void equalize(uint8_t *img, size_t npix)
{
    long long h[3][256];
    int lut[3][256];
    histograms(img, npix, h);
    for (int c = 0; c < 3; c++) {
        long long total = 0, last = 0;
        int nonzero = 0;
        for (int i = 0; i < 256; i++)
            if (h[c][i]) {
                nonzero++;
                total += h[c][i];
                last = h[c][i];
            }
        long long step = nonzero <= 1 ? 0 : (total - last) / 255;
        if (!step) {
            for (int i = 0; i < 256; i++) lut[c][i] = i;
            continue;
        }
        long long n = step / 2;
        for (int i = 0; i < 256; i++) {
            long long v = n / step;
            lut[c][i] = v > 255 ? 255 : (int)v;
            n += h[c][i];
        }
    }
    apply_luts(img, npix, lut);
}

/* the same table for the three bands */
static void point(uint8_t *img, size_t npix, const int lut1[256])
{
    int lut[3][256];
    for (int c = 0; c < 3; c++) memcpy(lut[c], lut1, sizeof lut[c]);
    apply_luts(img, npix, lut);
}

/* ---- ImageEnhance: Image.blend(degenerate, img, factor) ------------------- */

/* ImagingBlend: alpha as a C float; in [0, 1]: (UINT8)(d + alpha * (i - d)),
 * computed in float; outside: the same, clipped to 0..255 */
static void blend(const uint8_t *deg, uint8_t *img, size_t n, double factor)
{
    float a = (float)factor;
    if (a == 0.0f) {
        memcpy(img, deg, n);
        return;
    }
    if (a == 1.0f) return;
    if (a >= 0.0f && a <= 1.0f) {
        for (size_t i = 0; i < n; i++) {
            int d = deg[i], v = img[i];
            img[i] = (uint8_t)((float)d + a * (float)(v - d));
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            int d = deg[i], v = img[i];
            float t = (float)d + a * (float)(v - d);
            img[i] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : (uint8_t)t;
        }
    }
}

/* PIL's convert("L"): ITU-R 601-2 in 16-bit fixed point */
static inline int luma(const uint8_t *p)
{
    return (int)(((unsigned)p[0] * 19595u + (unsigned)p[1] * 38470u + (unsigned)p[2] * 7471u +
                  0x8000u) >>
                 16);
}

/* ImageFilter.SMOOTH (3x3: 1 1 1 / 1 5 1 / 1 1 1, / 13) as ImagingFilter3x3
 * computes it: float kernel, rows y+1, y, y-1 summed onto 0.5, truncated and
 * clipped; the border rows and columns copied; an image under 3x3 copied */
static void smooth(const uint8_t *in, uint8_t *out, int w, int h)
{
    memcpy(out, in, (size_t)w * h * 3);
    if (w < 3 || h < 3) return;
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    const float ka[3] = {k1, k1, k1}, kb[3] = {k1, k5, k1};
    for (int y = 1; y < h - 1; y++) {
        const uint8_t *rp = in + (size_t)(y + 1) * w * 3, *r0 = in + (size_t)y * w * 3,
                      *rm = in + (size_t)(y - 1) * w * 3;
        uint8_t *o = out + (size_t)y * w * 3;
        for (int x = 1; x < w - 1; x++)
            for (int c = 0; c < 3; c++) {
                int i = 3 * x + c;
                float ss = 0.5f;
                ss += (float)rp[i - 3] * ka[0] + (float)rp[i] * ka[1] + (float)rp[i + 3] * ka[2];
                ss += (float)r0[i - 3] * kb[0] + (float)r0[i] * kb[1] + (float)r0[i + 3] * kb[2];
                ss += (float)rm[i - 3] * ka[0] + (float)rm[i] * ka[1] + (float)rm[i + 3] * ka[2];
                o[i] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (uint8_t)ss;
            }
    }
}

static void enhance(ra_op op, double factor, uint8_t *img, int w, int h, uint8_t *deg)
{
    size_t npix = (size_t)w * h, n = npix * 3;
    switch (op) {
    case RA_COLOR:
    case RA_COLOR_INCREASING: /* convert("L").convert("RGB") */
        for (size_t i = 0; i < npix; i++) deg[3 * i] = deg[3 * i + 1] = deg[3 * i + 2] =
                                             (uint8_t)luma(img + 3 * i);
        break;
    case RA_CONTRAST:
    case RA_CONTRAST_INCREASING: { /* grey at int(mean of the "L" image + 0.5) */
        long long hist[256] = {0};
        for (size_t i = 0; i < npix; i++) hist[luma(img + 3 * i)]++;
        double sum = 0.0; /* ImageStat: a float sum of j * h[j] (exact here) */
        for (int j = 0; j < 256; j++) sum += (double)j * (double)hist[j];
        int mean = (int)(sum / (double)npix + 0.5);
        memset(deg, mean, n);
        break;
    }
    case RA_BRIGHTNESS:
    case RA_BRIGHTNESS_INCREASING:
        memset(deg, 0, n);
        break;
    default: /* sharpness */
        smooth(img, deg, w, h);
        break;
    }
    blend(deg, img, n, factor);
}

/* ---- Image.transform(AFFINE) ---------------------------------------------- */

#define COORD(v) ((v) < 0.0 ? -1 : ((int)(v)))
#define FLOOR(v) ((v) < 0.0 ? ((int)floor(v)) : ((int)(v)))

static inline int clipi(int v, int n) { return v < 0 ? 0 : v < n ? v : n - 1; }

/* the bilinear filter of PIL's generic transform (bilinear_filter32RGB);
 * 0 when (xin, yin) is outside the image (the pixel keeps the fill) */
static int bilinear_px(const v4d *im, int w, int h, double xin, double yin, uint8_t *out)
{
    if (xin < 0.0 || xin >= w || yin < 0.0 || yin >= h) return 0;
    xin -= 0.5;
    yin -= 0.5;
    int x = FLOOR(xin), y = FLOOR(yin);
    double dx = xin - x, dy = yin - y;
    int x0 = clipi(x, w), x1 = clipi(x + 1, w);
    const v4d *r0 = im + (size_t)clipi(y, h) * w;
    /* BILINEAR(v, a, b, d): a + (b - a) * d, b - a exact */
    v4d a = r0[x0], v1 = a + (r0[x1] - a) * dx, v2 = v1;
    if (y + 1 >= 0 && y + 1 < h) {
        const v4d *r1 = im + (size_t)(y + 1) * w;
        a = r1[x0];
        v2 = a + (r1[x1] - a) * dx;
    }
    v1 = v1 + (v2 - v1) * dy;
    for (int b = 0; b < 3; b++) out[b] = (uint8_t)v1[b];
    return 1;
}

/* PIL's BICUBIC macro (a = -1 cubic); on the first pass the p's are
 * integers in PIL, exact in double here */
#define CUBIC(v, v1, v2, v3, v4, d)                                                   \
    do {                                                                              \
        v4d p1_ = (v2), p2_ = -(v1) + (v3), p3_ = 2 * ((v1) - (v2)) + (v3) - (v4);    \
        v4d p4_ = -(v1) + (v2) - (v3) + (v4);                                         \
        (v) = p1_ + (d) * (p2_ + (d) * (p3_ + (d) * p4_));                            \
    } while (0)

static int bicubic_px(const v4d *im, int w, int h, double xin, double yin, uint8_t *out)
{
    if (xin < 0.0 || xin >= w || yin < 0.0 || yin >= h) return 0;
    xin -= 0.5;
    yin -= 0.5;
    int x = FLOOR(xin), y = FLOOR(yin);
    double dx = xin - x, dy = yin - y;
    x--;
    y--;
    int xs[4];
    for (int i = 0; i < 4; i++) xs[i] = clipi(x + i, w);
    v4d v[4];
    for (int j = 0; j < 4; j++) {
        int yy = y + j;
        if (j == 0 || (yy >= 0 && yy < h)) {
            const v4d *r = im + (size_t)(j == 0 ? clipi(yy, h) : yy) * w;
            CUBIC(v[j], r[xs[0]], r[xs[1]], r[xs[2]], r[xs[3]], dx);
        } else {
            v[j] = v[j - 1];
        }
    }
    v4d r;
    CUBIC(r, v[0], v[1], v[2], v[3], dy);
    for (int b = 0; b < 3; b++) out[b] = r[b] <= 0.0 ? 0 : r[b] >= 255.0 ? 255 : (uint8_t)r[b];
    return 1;
}

static inline void put_px(uint8_t *o, const uint8_t *src)
{
    o[0] = src[0];
    o[1] = src[1];
    o[2] = src[2];
}

static inline int check_fixed(const double a[6], int x, int y)
{
    return fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

/* Image.transform(size, AFFINE, a, resample, fillcolor=fill) into out (the
 * same size); ImagingTransformAffine's choice of engine */
static int affine(const uint8_t *in, uint8_t *out, int w, int h, const double a[6],
                  ra_resample rs, const uint8_t fill[3], ra_scratch *s)
{
    size_t npix = (size_t)w * h;
    for (size_t i = 0; i < npix; i++) put_px(out + 3 * i, fill);
    if (rs == RA_NEAREST && a[1] == 0 && a[3] == 0) {
        /* ImagingScaleAffine */
        int *xin = scratch_tab(s, (size_t)w);
        if (!xin) return -1;
        memset(xin, 0, sizeof(int) * (size_t)w);
        double xo = a[2] + a[0] * 0.5, yo = a[5] + a[4] * 0.5;
        int xmin = w, xmax = 0;
        for (int x = 0; x < w; x++) {
            int xi = COORD(xo);
            if (xi >= 0 && xi < w) {
                xmax = x + 1;
                if (x < xmin) xmin = x;
                xin[x] = xi;
            }
            xo += a[0];
        }
        for (int y = 0; y < h; y++) {
            int yi = COORD(yo);
            if (yi >= 0 && yi < h)
                for (int x = xmin; x < xmax; x++)
                    put_px(out + ((size_t)y * w + x) * 3, in + ((size_t)yi * w + xin[x]) * 3);
            yo += a[4];
        }
        return 0;
    }
    if (rs == RA_NEAREST) {
        if (check_fixed(a, 0, 0) && check_fixed(a, w, h) && check_fixed(a, 0, h) &&
            check_fixed(a, w, 0)) {
            /* affine_fixed: 16.16 fixed point */
#define FIX(v) FLOOR((v) * 65536.0 + 0.5)
            int a0 = FIX(a[0]), a1 = FIX(a[1]), a3 = FIX(a[3]), a4 = FIX(a[4]);
            int a2 = FIX(a[2] + a[0] * 0.5 + a[1] * 0.5);
            int a5 = FIX(a[5] + a[3] * 0.5 + a[4] * 0.5);
#undef FIX
            for (int y = 0; y < h; y++) {
                int xx = a2, yy = a5;
                for (int x = 0; x < w; x++) {
                    int xi = xx >> 16; /* arithmetic shift: floor, as PIL (GCC) */
                    if (xi >= 0 && xi < w) {
                        int yi = yy >> 16;
                        if (yi >= 0 && yi < h)
                            put_px(out + ((size_t)y * w + x) * 3, in + ((size_t)yi * w + xi) * 3);
                    }
                    xx += a0;
                    yy += a3;
                }
                a2 += a1;
                a5 += a4;
            }
        } else {
            /* the floating-point nearest engine */
            double xo = a[2] + a[1] * 0.5 + a[0] * 0.5, yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
            for (int y = 0; y < h; y++) {
                double xx = xo, yy = yo;
                for (int x = 0; x < w; x++) {
                    int xi = COORD(xx);
                    if (xi >= 0 && xi < w) {
                        int yi = COORD(yy);
                        if (yi >= 0 && yi < h)
                            put_px(out + ((size_t)y * w + x) * 3, in + ((size_t)yi * w + xi) * 3);
                    }
                    xx += a[0];
                    yy += a[3];
                }
                xo += a[1];
                yo += a[4];
            }
        }
        return 0;
    }
    /* ImagingGenericTransform with affine_transform and the filter */
    v4d *px = scratch_px(s, npix);
    if (!px) return -1;
    for (size_t i = 0; i < npix; i++) px[i] = LANES(in + 3 * i);
    for (int y = 0; y < h; y++) {
        uint8_t *o = out + (size_t)y * w * 3;
        double yin = y + 0.5;
        for (int x = 0; x < w; x++, o += 3) {
            double xin = x + 0.5;
            double xx = a[0] * xin + a[1] * yin + a[2];
            double yy = a[3] * xin + a[4] * yin + a[5];
            uint8_t v[3];
            int ok = rs == RA_BILINEAR ? bilinear_px(px, w, h, xx, yy, v)
                                       : bicubic_px(px, w, h, xx, yy, v);
            if (ok) put_px(o, v);
        }
    }
    return 0;
}

/* Python's float %: the sign of the divisor */
static double py_fmod(double v, double m)
{
    double r = fmod(v, m);
    if (r != 0.0) {
        if ((m < 0) != (r < 0)) r += m;
    } else {
        r = copysign(0.0, m);
    }
    return r;
}

/* Python's round(x, 15): to 15 decimals, correctly rounded, and back */
static double round15(double x)
{
    char b[64];
    snprintf(b, sizeof b, "%.15f", x);
    return strtod(b, NULL);
}

/* Image.transpose(ROTATE_90 / ROTATE_180 / ROTATE_270) into out (w == h for
 * 90 and 270: Image.rotate takes these only then) */
static void transpose(const uint8_t *in, uint8_t *out, int w, int h, int quarter)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int sx, sy;
            if (quarter == 2) {
                sx = w - 1 - x;
                sy = h - 1 - y;
            } else if (quarter == 1) { /* counter-clockwise */
                sx = w - 1 - y;
                sy = x;
            } else {
                sx = y;
                sy = h - 1 - x;
            }
            put_px(out + ((size_t)y * w + x) * 3, in + ((size_t)sy * w + sx) * 3);
        }
}

/* Image.rotate(degrees, resample, fillcolor=fill) (expand 0, center the
 * image's): the fast paths, else the affine matrix as Image.rotate builds it */
static int rotate(const uint8_t *in, uint8_t *out, int w, int h, double degrees, ra_resample rs,
                  const uint8_t fill[3], ra_scratch *s)
{
    double angle = py_fmod(degrees, 360.0);
    if (angle == 0.0) {
        memcpy(out, in, (size_t)w * h * 3);
        return 0;
    }
    if (angle == 180.0) {
        transpose(in, out, w, h, 2);
        return 0;
    }
    if ((angle == 90.0 || angle == 270.0) && w == h) {
        transpose(in, out, w, h, angle == 90.0 ? 1 : 3);
        return 0;
    }
    const double deg_to_rad = 3.141592653589793 / 180.0; /* Python's math.radians */
    double cx = w / 2.0, cy = h / 2.0;
    double t = -(angle * deg_to_rad);
    double m[6] = {round15(cos(t)), round15(sin(t)), 0.0, round15(-sin(t)), round15(cos(t)), 0.0};
    double x = -cx - 0.0, y = -cy - 0.0;
    double m2 = m[0] * x + m[1] * y + m[2], m5 = m[3] * x + m[4] * y + m[5];
    m[2] = m2 + cx;
    m[5] = m5 + cy;
    return affine(in, out, w, h, m, rs, fill, s);
}

/* ---- one op ------------------------------------------------------------- */

int ra_op_apply(ra_op op, double arg, const ra_params *p, uint8_t *img, int w, int h,
                ra_scratch *s)
{
    if ((unsigned)op >= RA_N_OPS || !p || !img || w <= 0 || h <= 0) return -1;
    ra_scratch own = {0};
    ra_scratch *sc = s ? s : &own;
    size_t npix = (size_t)w * h, n = npix * 3;
    int lut[256], rc = 0;
    uint8_t *tmp = NULL;
    switch (op) {
    case RA_AUTO_CONTRAST:
        autocontrast(img, npix);
        break;
    case RA_EQUALIZE:
        equalize(img, npix);
        break;
    case RA_INVERT:
        for (int i = 0; i < 256; i++) lut[i] = 255 - i;
        point(img, npix, lut);
        break;
    case RA_POSTERIZE:
    case RA_POSTERIZE_INCREASING: {
        int bits = (int)arg;
        if (bits >= 8) break; /* timm: "if bits_to_keep >= 8: return img" */
        /* ~(2 ** (8 - bits) - 1): bits <= 0 clears all eight */
        int mask = bits <= 0 ? 0 : (~((1 << (8 - bits)) - 1)) & 0xff;
        for (int i = 0; i < 256; i++) lut[i] = i & mask;
        point(img, npix, lut);
        break;
    }
    case RA_SOLARIZE:
    case RA_SOLARIZE_INCREASING: {
        double thr = arg;
        for (int i = 0; i < 256; i++) lut[i] = i < thr ? i : 255 - i;
        point(img, npix, lut);
        break;
    }
    case RA_SOLARIZE_ADD: {
        double add = arg;
        for (int i = 0; i < 256; i++) {
            double v = i + add;
            lut[i] = i < 128 ? (v > 255 ? 255 : (int)v) : i;
        }
        point(img, npix, lut);
        break;
    }
    case RA_COLOR:
    case RA_COLOR_INCREASING:
    case RA_CONTRAST:
    case RA_CONTRAST_INCREASING:
    case RA_BRIGHTNESS:
    case RA_BRIGHTNESS_INCREASING:
    case RA_SHARPNESS:
    case RA_SHARPNESS_INCREASING:
        if (!(tmp = scratch_img(sc, n))) {
            rc = -1;
            break;
        }
        enhance(op, arg, img, w, h, tmp);
        break;
    default: { /* the geometric ops */
        if (!(tmp = scratch_img(sc, n))) {
            rc = -1;
            break;
        }
        double a[6] = {1, 0, 0, 0, 1, 0};
        if (op == RA_ROTATE) {
            rc = rotate(img, tmp, w, h, arg, p->resample, p->fill, sc);
        } else {
            if (op == RA_SHEAR_X) a[1] = arg;
            if (op == RA_SHEAR_Y) a[3] = arg;
            if (op == RA_TRANSLATE_X_REL) a[2] = arg * w;
            if (op == RA_TRANSLATE_Y_REL) a[5] = arg * h;
            rc = affine(img, tmp, w, h, a, p->resample, p->fill, sc);
        }
        if (rc == 0) memcpy(img, tmp, n);
        break;
    }
    }
    free(own.img);
    free(own.tab);
    free(own.px);
    return rc;
}

/* ---- RandAugment -------------------------------------------------------- */

int ra_apply(const randaug_spec *spec, const ra_params *p, uint8_t *img, int w, int h,
             rng_state *r, ra_scratch *s, ra_trace *trace)
{
    if (trace) trace->n = 0;
    if (!spec || !spec->enabled || spec->num_ops <= 0) return 0;
    int nset, n = spec->num_ops > 100 ? 100 : spec->num_ops;
    const ra_op *set = ra_op_set(spec->increasing, &nset);
    ra_op chosen[100];
    for (int i = 0; i < n; i++) chosen[i] = set[rng_below(r, (uint64_t)nset)];
    const double upper = randaug_spec_upper(spec);
    for (int i = 0; i < n; i++) {
        ra_op op = chosen[i];
        int applied = 1;
        double mag = spec->magnitude, arg = 0.0;
        if (spec->prob < 1.0 && !((double)rng_uniform(r) < spec->prob)) applied = 0;
        if (applied) {
            if (isinf(spec->magnitude_std))
                mag = spec->magnitude * (double)rng_uniform(r); /* random.uniform(0, m) */
            else if (spec->magnitude_std > 0)
                mag = spec->magnitude + spec->magnitude_std * (double)rng_normal(r);
            mag = mag > upper ? upper : mag;
            mag = mag < 0.0 ? 0.0 : mag;
            int neg = ra_op_signed(op) ? rng_uniform(r) > 0.5f : 0;
            arg = ra_op_arg(op, mag, neg);
            if (ra_op_apply(op, arg, p, img, w, h, s) != 0) return -1;
        }
        if (trace) {
            trace->op[i] = op;
            trace->applied[i] = applied;
            trace->magnitude[i] = applied ? mag : 0.0;
            trace->arg[i] = arg;
            trace->n = i + 1;
        }
    }
    return 0;
}
