/* worker/data/erasing.c - see erasing.h. */
#include "erasing.h"

#include <math.h>
#include <stddef.h>

#define MIN_AREA 0.02
#define MAX_AREA (1.0 / 3.0)
#define MIN_ASPECT 0.3

/* Python's round() to an integer: half to even */
static double round_half_even(double v)
{
    double f = floor(v), d = v - f;
    if (d > 0.5) return f + 1.0;
    if (d < 0.5) return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

int er_apply(const er_params *p, float *img, int chans, int height, int width, rng_state *r,
             er_box *box)
{
    if (!p || !(p->probability > 0.0) || chans <= 0 || height <= 0 || width <= 0) return 0;
    if (!((double)rng_uniform(r) < p->probability)) return 0;
    const double area = (double)height * (double)width;
    const double lo = log(MIN_ASPECT), hi = log(1.0 / MIN_ASPECT);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = (MIN_AREA + (MAX_AREA - MIN_AREA) * (double)rng_uniform(r)) * area / 1.0;
        double aspect = exp(lo + (hi - lo) * (double)rng_uniform(r));
        int h = (int)round_half_even(sqrt(target * aspect));
        int w = (int)round_half_even(sqrt(target / aspect));
        if (!(w < width && h < height)) continue;
        int top = (int)rng_below(r, (uint64_t)(height - h + 1));
        int left = (int)rng_below(r, (uint64_t)(width - w + 1));
        for (int c = 0; c < chans; c++) {
            float v = p->mode == ER_RAND ? rng_normal(r) : 0.0f;
            float *plane = img + (size_t)c * height * width;
            for (int y = top; y < top + h; y++)
                for (int x = left; x < left + w; x++)
                    plane[(size_t)y * width + x] = p->mode == ER_PIXEL ? rng_normal(r) : v;
        }
        if (box) *box = (er_box){top, left, h, w};
        return 1;
    }
    return 0;
}
