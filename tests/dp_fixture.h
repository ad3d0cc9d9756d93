/* tests/dp_fixture.h - for the tests of the data-parallel strategies
 * (worker/train/dp.h): a small ViT trained a few AdamW steps through the
 * strategy, on a fixed synthetic batch per step, each rank taking its rows of
 * the global batch. Header-only (static), one copy per test. */
#ifndef VITJOB_TESTS_DP_FIXTURE_H
#define VITJOB_TESTS_DP_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "config.h"
#include "dp.h"
#include "model.h"
#include "ops.h"
#include "rng.h"

enum { DPF_IMG = 16, DPF_CH = 1, DPF_CLASSES = 4, DPF_BATCH = 8, DPF_STEPS = 4 };

static model_config dpf_vit(void)
{
    model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.image_size = DPF_IMG;
    mc.patch_size = 4;
    mc.channels = DPF_CH;
    mc.dim = 32;
    mc.depth = 2;
    mc.heads = 2;
    mc.mlp_ratio = 2.0;
    mc.num_classes = DPF_CLASSES;
    return mc;
}

static optimizer_config dpf_adamw(void)
{
    vit_job_config cfg;
    config_defaults(&cfg);
    optimizer_config oc = cfg.training.optimizer;
    oc.lr = 1e-3;
    oc.warmup_steps = 1;
    oc.schedule = SCHEDULE_COSINE;
    oc.min_lr = 0.0;
    oc.grad_clip = 0.5; /* small enough to clip: the global norm matters */
    return oc;
}

/* Rows [first, first + n) of step s's global batch: N(0,1) pixels and a
 * label, the same whoever asks. */
static void dpf_rows(float *img, int *lab, int first, int n, int step)
{
    const size_t floats = (size_t)DPF_CH * DPF_IMG * DPF_IMG;
    for (int b = 0; b < n; b++) {
        rng_state r;
        rng_seed(&r, 99, (uint64_t)step, (uint64_t)(first + b));
        lab[b] = (int)rng_below(&r, DPF_CLASSES);
        for (size_t i = 0; i < floats; i++) img[(size_t)b * floats + i] = rng_normal(&r);
    }
}

/* training.ema for dpf_train (NULL: none), and where it writes the EMA
 * weights after the last step (n_params floats; NULL: not read; the
 * weights are swapped back before params is read). */
static const ema_config *dpf_ema;
static float *dpf_ema_out;

/* Trains DPF_STEPS steps on ops under mode, through comm (NULL: alone);
 * this rank computes its rows of each global batch of DPF_BATCH. losses
 * (DPF_STEPS, may be NULL) the global batch's mean loss per step; params
 * (n_params floats, may be NULL) the weights after the last step; *n_params
 * their count. Returns 0, or a non-zero stage with err. */
static int dpf_train(const vit_ops *ops, comm *c, sharding_mode mode, double *losses,
                     float *params, size_t *n_params, char *err, size_t errlen)
{
    const model_config mc = dpf_vit();
    const optimizer_config oc = dpf_adamw();
    const int rank = c ? comm_rank(c) : 0, world = c ? comm_world_size(c) : 1;
    const int part = DPF_BATCH / world;
    model_options mo = {0};
    dp_options o = {.comm = c, .ops = ops, .mc = &mc, .oc = &oc, .total_steps = DPF_STEPS,
                    .mode = mode, .ema = dpf_ema};
    dp *d = NULL;
    vit_model *m = NULL;
    float *img = malloc(sizeof(float) * DPF_CH * DPF_IMG * DPF_IMG * DPF_BATCH);
    int lab[DPF_BATCH];
    int stage = 0;
    if (!img) { snprintf(err, errlen, "out of memory"); stage = 1; goto out; }
    if (dp_new(&d, &o, &mo, err, errlen)) { stage = 2; goto out; }
    if (dp_prepare(d, &mo, err, errlen)) { stage = 3; goto out; }
    if (model_new(&m, &mc, part, &mo, ops, err, errlen)) { stage = 4; goto out; }
    if (model_init_random(m, 5)) { snprintf(err, errlen, "init"); stage = 5; goto out; }
    if (dp_attach(d, m, err, errlen)) { stage = 6; goto out; }
    for (int s = 0; s < DPF_STEPS; s++) {
        dp_zero_grads(d);
        dpf_rows(img, lab, rank * part, part, s);
        double sum = model_forward(m, img, lab, part) * (double)part;
        model_backward(m, 1.0f / DPF_BATCH);
        optim_result res;
        if (dp_sync(d, err, errlen) || dp_sum(d, &sum, 1, err, errlen) ||
            dp_update(d, s, &res, err, errlen)) {
            stage = 7;
            goto out;
        }
        if (losses) losses[s] = sum / DPF_BATCH;
    }
    if (model_status(m, err, errlen)) { stage = 8; goto out; }
    if (dpf_ema_out && (dp_use_ema(d, 1, err, errlen) || model_read_params(m, dpf_ema_out) ||
                        dp_use_ema(d, 0, err, errlen))) {
        stage = 10;
        goto out;
    }
    *n_params = model_num_params(m);
    if (params && model_read_params(m, params)) { snprintf(err, errlen, "read"); stage = 9; }
out:
    model_free(m);
    dp_free(d);
    free(img);
    return stage;
}

#endif
