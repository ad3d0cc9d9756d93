/* worker/train/pos_resample.c - see pos_resample.h. */
#include "pos_resample.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* Keys' cubic convolution kernel with a = -0.5 (torch's antialiased bicubic) */
static double cubic(double x)
{
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

/* One axis of in -> out samples: for output i, taps lo[i] .. lo[i]+cnt[i]-1
 * with weights wt[i*win ..]. Returns the window (the most taps of any i). */
typedef struct {
    int *lo, *cnt;
    double *wt;
    int win;
} axis;

static void axis_free(axis *a)
{
    free(a->lo);
    free(a->cnt);
    free(a->wt);
}

static int axis_make(axis *a, int in, int out)
{
    const double scale = (double)in / out;
    const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
    const double inv = scale >= 1.0 ? 1.0 / scale : 1.0;
    a->win = (int)ceil(support) * 2 + 1;
    a->lo = malloc(sizeof(int) * (size_t)out);
    a->cnt = malloc(sizeof(int) * (size_t)out);
    a->wt = malloc(sizeof(double) * (size_t)out * (size_t)a->win);
    if (!a->lo || !a->cnt || !a->wt) return -1;
    for (int i = 0; i < out; i++) {
        const double centre = scale * (i + 0.5);
        int64_t lo = (int64_t)(centre - support + 0.5); /* truncation, as torch */
        int64_t hi = (int64_t)(centre + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        int n = (int)(hi - lo);
        if (n > a->win) n = a->win; /* cannot happen: support bounds the taps */
        double *w = a->wt + (size_t)i * a->win, total = 0.0;
        for (int j = 0; j < n; j++) {
            w[j] = cubic(((double)(j + lo) - centre + 0.5) * inv);
            total += w[j];
        }
        for (int j = 0; j < n; j++)
            if (total != 0.0) w[j] /= total;
        a->lo[i] = (int)lo;
        a->cnt[i] = n;
    }
    return 0;
}

int pos_resample_bicubic_aa(const float *src, int h, int w, int D, float *dst, int nh, int nw)
{
    axis ay = {0}, ax = {0};
    double *rows = malloc(sizeof(double) * (size_t)nh * w * D); /* nh x w tokens */
    double *acc = malloc(sizeof(double) * (size_t)D);
    int rc = -1;
    if (!rows || !acc || axis_make(&ay, h, nh) != 0 || axis_make(&ax, w, nw) != 0) goto out;
    /* rows: along the height */
    for (int y = 0; y < nh; y++) {
        const double *wt = ay.wt + (size_t)y * ay.win;
        for (int x = 0; x < w; x++) {
            double *o = rows + ((size_t)y * w + x) * D;
            for (int d = 0; d < D; d++) o[d] = 0.0;
            for (int j = 0; j < ay.cnt[y]; j++) {
                const float *s = src + ((size_t)(ay.lo[y] + j) * w + x) * D;
                for (int d = 0; d < D; d++) o[d] += wt[j] * s[d];
            }
        }
    }
    /* then columns: along the width */
    for (int y = 0; y < nh; y++) {
        for (int x = 0; x < nw; x++) {
            const double *wt = ax.wt + (size_t)x * ax.win;
            for (int d = 0; d < D; d++) acc[d] = 0.0;
            for (int j = 0; j < ax.cnt[x]; j++) {
                const double *s = rows + ((size_t)y * w + ax.lo[x] + j) * D;
                for (int d = 0; d < D; d++) acc[d] += wt[j] * s[d];
            }
            float *o = dst + ((size_t)y * nw + x) * D;
            for (int d = 0; d < D; d++) o[d] = (float)acc[d];
        }
    }
    rc = 0;
out:
    axis_free(&ay);
    axis_free(&ax);
    free(rows);
    free(acc);
    return rc;
}
