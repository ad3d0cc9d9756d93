/* tests/fd.h - what the gradient tests share (test_kernels.c, test_model.c):
 * a seeded random source, random tensors, and the check of an analytic
 * gradient against central finite differences of L = <out, r>.
 *
 * The scalar probed is L = sum(out * R) for a fixed random R, accumulated in
 * double; the analytic gradient is the op's backward with dout = R. Ops are
 * fp32, so steps are 1e-2..1e-3 and tolerances are relative to the largest
 * gradient (the PyTorch check, tests/ref, is the 1e-4 one). */
#ifndef VITJOB_TESTS_FD_H
#define VITJOB_TESTS_FD_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "ops.h"
#include "rng.h"

static rng_state R;

static inline float *rnd(size_t n, float scale)
{
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(&R);
    return x;
}

static inline double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static inline float max_abs(const float *x, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* A forward closure: recompute `out` from the current inputs. */
typedef void (*forward_fn)(void *ctx);

/* Compares ana (n) with the central difference of L = <out, r> w.r.t. x,
 * on up to 48 evenly spread elements. */
static inline void check_fd(const char *what, float *x, size_t n, const float *ana, forward_fn f,
                     void *ctx, const float *out, const float *r, size_t nout, float eps,
                     float tol)
{
    float scale = max_abs(ana, n);
    if (scale < 1e-3f) scale = 1e-3f;
    size_t stride = n > 48 ? n / 48 : 1;
    for (size_t i = 0; i < n; i += stride) {
        float keep = x[i];
        x[i] = keep + eps;
        f(ctx);
        double lp = dot(out, r, nout);
        x[i] = keep - eps;
        f(ctx);
        double lm = dot(out, r, nout);
        x[i] = keep;
        double num = (lp - lm) / (2.0 * eps);
        cr_assert(fabs(num - ana[i]) <= tol * scale,
                  "%s[%zu]: finite difference %.6g vs backward %.6g (scale %.3g)", what, i, num,
                  ana[i], scale);
    }
    f(ctx);
}


static inline void setup(void)
{
    rng_seed(&R, 42, 0, 0);
    ops_cpu_set_threads(2);
}

#endif
