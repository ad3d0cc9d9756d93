/* tests/test_ema.c - the exponential moving average of the weights
 * (training.ema): the CPU op (kernels/ema.c: torch's lerp in both of its
 * branches, an exact copy at w = 1, swap) and the module
 * (worker/train/ema.c: timm's decay schedule, ModelEmaV2 without warmup and
 * ModelEmaV3's with it; the update, reset and swap over exactly an
 * optimizer's spans, laid out like its AdamW state). The EMA against
 * PyTorch over training steps is tests/ref/check_against_torch.py; across
 * ranks and checkpoints, tests/ema.bats. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ema.h"
#include "model.h"
#include "ops.h"
#include "optim.h"

TestSuite(ema, .timeout = 60);

/* torch.lerp's two branches, each operation rounded to fp32 */
static float lerp_ref(float e, float p, float w)
{
    volatile float d = p - e, s;
    if (w < 0.5f) {
        s = w * d;
        return e + s;
    }
    volatile float om = 1.0f - w;
    s = d * om;
    return p - s;
}

Test(ema, the_op_is_torchs_lerp_in_both_branches_and_w_1_copies_w_0_keeps)
{
    const float ws[] = {0.0f, 2e-4f, 0.1f, 0.4999f, 0.5f, 0.75f, 0.9999f, 1.0f};
    enum { N = 257 };
    float e0[N], p[N];
    for (int i = 0; i < N; i++) {
        e0[i] = sinf(0.37f * (float)i) * 3.0f + 1e-7f * (float)i;
        p[i] = cosf(1.3f * (float)i) / 3.0f - 2.0f;
    }
    for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) {
        float e[N];
        memcpy(e, e0, sizeof e);
        ema_update_cpu(e, p, N, ws[k]);
        for (int i = 0; i < N; i++) {
            const float want = ws[k] == 1.0f ? p[i] : ws[k] == 0.0f ? e0[i]
                                                                  : lerp_ref(e0[i], p[i], ws[k]);
            cr_assert(e[i] == want, "w=%g [%d]: %.9g, want %.9g", (double)ws[k], i, (double)e[i],
                      (double)want);
        }
    }
    /* known values: 1 -> 3 by a quarter, and by three quarters */
    float a = 1.0f, b = 1.0f, three = 3.0f;
    ema_update_cpu(&a, &three, 1, 0.25f);
    ema_update_cpu(&b, &three, 1, 0.75f);
    cr_assert_eq(a, 1.5f);
    cr_assert_eq(b, 2.5f);
}

Test(ema, swap_exchanges_two_vectors_exactly)
{
    float a[5] = {1, -2, 3.5f, NAN, 0}, b[5] = {9, 8, 7, 6, -0.0f};
    swap_cpu(a, b, 5);
    cr_assert(a[0] == 9 && a[1] == 8 && a[2] == 7 && a[3] == 6 && a[4] == 0 && signbit(a[4]));
    cr_assert(b[0] == 1 && b[1] == -2 && b[2] == 3.5f && isnan(b[3]) && b[4] == 0);
}

Test(ema, without_warmup_the_decay_is_constant_from_the_first_update)
{
    const ema_config ec = {.decay = 0.9998, .warmup = 0};
    cr_assert(ema_enabled(&ec));
    for (long n = 1; n < 100000; n = n * 3 + 1)
        cr_assert_eq(ema_decay_at(&ec, n), 0.9998, "update %ld", n);
    const ema_config off = {.decay = 0.0};
    cr_assert(!ema_enabled(&off));
    cr_assert(!ema_enabled(NULL));
}

Test(ema, with_warmup_update_n_uses_min_of_decay_and_1_minus_n_to_the_minus_2_3)
{
    const ema_config ec = {.decay = 0.9, .warmup = 1};
    /* timm ModelEmaV3.get_decay(step=n): n - 1 <= 0 gives 0, a copy */
    cr_assert_eq(ema_decay_at(&ec, 1), 0.0);
    cr_assert_eq(ema_decay_at(&ec, 0), 0.0);
    cr_assert_float_eq(ema_decay_at(&ec, 2), 1.0 - pow(2.0, -2.0 / 3.0), 1e-15);
    cr_assert_float_eq(ema_decay_at(&ec, 8), 0.75, 1e-15);       /* 8^(-2/3) = 1/4 */
    cr_assert_float_eq(ema_decay_at(&ec, 27), 8.0 / 9.0, 1e-15); /* 27^(-2/3) = 1/9 */
    cr_assert_eq(ema_decay_at(&ec, 1000), 0.9);                  /* 1 - 1/100 > 0.9: capped */
    const ema_config high = {.decay = 0.99, .warmup = 1};
    double last = -1.0;
    for (long n = 1; n <= 5000; n++) { /* rising to the cap, never above it */
        double d = ema_decay_at(&high, n);
        cr_assert(d >= last && d <= 0.99, "update %ld: %.17g after %.17g", n, d, last);
        last = d;
    }
    cr_assert_eq(last, 0.99);
}

/* A small model's optimizer state over two spans of a 70-float buffer: the
 * flat vector's [10, 50) at 0 and [100, 130) at 40. */
static void with_spans(vit_model **m, optim **o)
{
    model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.image_size = 8, mc.patch_size = 4, mc.channels = 1, mc.dim = 8, mc.depth = 1;
    mc.heads = 2, mc.mlp_ratio = 2.0, mc.num_classes = 3;
    char err[256];
    cr_assert_eq(model_new(m, &mc, 1, NULL, ops_cpu(), err, sizeof err), 0, "%s", err);
    cr_assert(model_num_params(*m) > 130);
    vit_job_config cfg;
    config_defaults(&cfg);
    const optim_span spans[2] = {{10, 50, 0}, {100, 130, 40}};
    cr_assert_eq(optim_new_spans(o, *m, &cfg.training.optimizer, 10, spans, 2, err, sizeof err),
                 0, "%s", err);
}

Test(ema, reset_update_and_swap_cover_exactly_the_optimizers_spans_in_its_layout)
{
    vit_model *m = NULL;
    optim *o = NULL;
    with_spans(&m, &o);
    const ema_config ec = {.decay = 0.9, .warmup = 0};
    ema *e = NULL;
    char err[256];
    cr_assert_eq(ema_new(&e, o, ops_cpu(), &ec, err, sizeof err), 0, "%s", err);
    float p[80], keep[80];
    for (int i = 0; i < 80; i++) p[i] = (float)i;
    ema_reset(e, p); /* the first 70 of p: the spans' `at` */
    const float *v = ema_values(e);
    for (int i = 0; i < 70; i++) cr_assert_eq(v[i], (float)i, "[%d]", i);
    for (int i = 0; i < 80; i++) p[i] = 1000.0f + (float)i;
    ema_update(e, p, 0); /* no warmup: decay 0.9 at the first update too */
    for (int i = 0; i < 70; i++) {
        float want = (float)i;
        ema_update_cpu(&want, &p[i], 1, (float)(1.0 - 0.9));
        cr_assert_eq(v[i], want, "[%d]: %.9g, want %.9g", i, (double)v[i], (double)want);
    }
    /* swap: the spans of p and the EMA change places; twice, back bit for bit */
    float before[70];
    memcpy(before, v, sizeof before);
    memcpy(keep, p, sizeof keep);
    ema_swap(e, p);
    for (int i = 0; i < 70; i++) {
        cr_assert_eq(p[i], before[i]);
        cr_assert_eq(v[i], keep[i]);
    }
    for (int i = 70; i < 80; i++) cr_assert_eq(p[i], keep[i], "outside the spans: untouched");
    ema_swap(e, p);
    cr_assert_arr_eq(p, keep, sizeof keep);
    cr_assert_arr_eq(v, before, sizeof before);
    ema_free(e);
    optim_free(o);
    model_free(m);
}

Test(ema, with_warmup_the_first_update_makes_the_ema_the_weights)
{
    vit_model *m = NULL;
    optim *o = NULL;
    with_spans(&m, &o);
    const ema_config ec = {.decay = 0.9999, .warmup = 1};
    ema *e = NULL;
    char err[256];
    cr_assert_eq(ema_new(&e, o, ops_cpu(), &ec, err, sizeof err), 0, "%s", err);
    float p[70];
    for (int i = 0; i < 70; i++) p[i] = -3.0f + (float)i / 7.0f;
    ema_update(e, p, 0); /* from zeros: after update 1 it is the weights exactly */
    cr_assert_arr_eq(ema_values(e), p, sizeof p);
    for (int i = 0; i < 70; i++) p[i] += 1.0f;
    ema_update(e, p, 1); /* update 2: decay 1 - 2^(-2/3) */
    const float w = (float)(1.0 - (1.0 - pow(2.0, -2.0 / 3.0)));
    for (int i = 0; i < 70; i++) {
        float want = p[i] - 1.0f;
        ema_update_cpu(&want, &p[i], 1, w);
        cr_assert_eq(ema_values(e)[i], want, "[%d]", i);
    }
    ema_free(e);
    optim_free(o);
    model_free(m);
}
