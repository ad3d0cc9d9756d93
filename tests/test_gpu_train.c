/* tests/test_gpu_train.c - whole-model training on the GPU against the CPU.
 *
 * A small ViT (image 32, patch 4, 3 channels, dim 64, depth 4, 4 heads, MLP
 * ratio 4, 10 classes) trains 20 AdamW steps (lr 1e-3, 2 warmup steps, then
 * cosine to 0, weight decay 0.05, gradClip 1.0) on batches of 32 from a fixed
 * synthetic set, from model_init_random(5) on every backend (the same
 * weights everywhere). Every test skips, saying why, where ops_cuda() finds
 * no GPU (or this build has no CUDA backend).
 *
 * The data: 4 batches of 32 images (cycled: step s trains on batch s % 4),
 * pixel = N(0,1) noise + the label's prototype, where the 10 prototypes are
 * fixed random 3x4x4 patterns (amplitude 0.5) tiled over the image, so that
 * every patch carries the class and a ViT learns it within a few steps.
 *
 * Tolerances, measured where this can run without a GPU: the cpu-bf16 table
 * (bf16-mixed emulated on the CPU) tracks the fp32 CPU within 0.06% of the
 * loss at every one of the 20 steps, and the fp32 CPU run from weights
 * perturbed by 1e-6 (relative) within 3e-7; the fp32 loss falls from 2.35 to
 * 1.17 (ratio 0.50). The cpu-bf16 table rounds where the GPU stores 16
 * bits (ops.h; in the attention P and dS too, since issue 42: 0.057% then),
 * the GPU sums in other orders, so the bounds below keep a margin of 10x
 * or more:
 *   bf16 GPU vs fp32 CPU: |gpu - cpu| <= 0.01 * cpu + 0.005 at every step;
 *   fp32 GPU vs fp32 CPU: |gpu - cpu| <= 1e-4 * cpu at every step;
 *   the GPU's loss falls: last step < 0.75 * first step.
 * fp16-mixed (cuda-fp16) trains with the loss scaled by 2^16 and unscaled in
 * the optimizer (optim_set_loss_scale), as the loop does at its first steps,
 * and is held to the bf16 bounds; its CPU emulation (cpu-fp16) is held to
 * them here too, with or without a GPU. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "loss_scale.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "rng.h"

enum { IMG = 32, PATCH = 4, CH = 3, CLASSES = 10, BATCH = 32, STEPS = 20, NBATCH = 4 };
#define INIT_SEED 5
#define DATA_SEED 1234
#define PROTO_AMPLITUDE 0.5f

#define TRACK_BF16_REL 0.01
#define TRACK_BF16_ABS 0.005
#define TRACK_FP32_REL 1e-4
#define FALL_RATIO 0.75

/* The CUDA table (OPS_FP32, OPS_BF16 or OPS_FP16), or skip the test saying
 * why. */
static const vit_ops *gpu_or_skip(int storage)
{
    static char why[512];
    why[0] = '\0';
    const vit_ops *g = ops_cuda(storage, why, sizeof why);
    if (!g) cr_skip_test("%s", why);
    ops_cpu_set_threads(4); /* Criterion may run two of these at once */
    return g;
}

static model_config small_vit(void)
{
    model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.image_size = IMG;
    mc.patch_size = PATCH;
    mc.channels = CH;
    mc.dim = 64;
    mc.depth = 4;
    mc.heads = 4;
    mc.mlp_ratio = 4.0;
    mc.num_classes = CLASSES;
    return mc;
}

static optimizer_config adamw_config(void)
{
    vit_job_config cfg;
    config_defaults(&cfg); /* adamw, betas (0.9, 0.999), eps 1e-8, weight decay 0.05 */
    optimizer_config oc = cfg.training.optimizer;
    oc.lr = 1e-3;
    oc.warmup_steps = 2;
    oc.schedule = SCHEDULE_COSINE;
    oc.min_lr = 0.0;
    oc.grad_clip = 1.0;
    return oc;
}

typedef struct {
    float *images; /* NBATCH * BATCH images (CH, IMG, IMG) */
    int *labels;
} dataset;

#define IMG_FLOATS ((size_t)CH * IMG * IMG)

static void make_data(dataset *d)
{
    const int n = NBATCH * BATCH;
    d->images = malloc(sizeof(float) * IMG_FLOATS * n);
    d->labels = malloc(sizeof(int) * n);
    cr_assert(d->images && d->labels, "out of host memory for the data");
    rng_state r;
    rng_seed(&r, DATA_SEED, 7, 0);
    static float proto[CLASSES][CH][PATCH][PATCH];
    for (int k = 0; k < CLASSES; k++)
        for (int c = 0; c < CH; c++)
            for (int y = 0; y < PATCH; y++)
                for (int x = 0; x < PATCH; x++) proto[k][c][y][x] = PROTO_AMPLITUDE * rng_normal(&r);
    for (int i = 0; i < n; i++) {
        int label = (int)rng_below(&r, CLASSES);
        float *img = d->images + IMG_FLOATS * i;
        d->labels[i] = label;
        for (int c = 0; c < CH; c++)
            for (int y = 0; y < IMG; y++)
                for (int x = 0; x < IMG; x++)
                    img[((size_t)c * IMG + y) * IMG + x] =
                        rng_normal(&r) + proto[label][c][y % PATCH][x % PATCH];
    }
}

static void free_data(dataset *d)
{
    free(d->images);
    free(d->labels);
}

static void status_ok(const vit_model *m, const char *what, int step)
{
    char err[512] = "";
    int rc = model_status(m, err, sizeof err);
    if (step >= 0)
        cr_assert(rc == 0, "%s: %s at step %d failed: %s", model_ops(m)->name, what, step, err);
    else
        cr_assert(rc == 0, "%s: %s failed: %s", model_ops(m)->name, what, err);
}

static vit_model *new_model(const vit_ops *ops, int checkpointing)
{
    model_config mc = small_vit();
    model_options opts = {.activation_checkpointing = checkpointing};
    char err[512] = "";
    vit_model *m = NULL;
    int rc = model_new(&m, &mc, BATCH, &opts, ops, err, sizeof err);
    cr_assert(rc == 0, "%s: model_new: %s", ops->name, err);
    cr_assert(model_init_random(m, INIT_SEED) == 0, "%s: model_init_random failed", ops->name);
    status_ok(m, "model_init_random", -1);
    return m;
}

/* STEPS optimizer steps on `ops`; losses[s] = step s's mean training loss.
 * With n_params non-NULL, returns the weights at the end (malloc'd, *n_params
 * floats; the caller frees them), else NULL. */
static float *train(const vit_ops *ops, const dataset *d, float *losses, size_t *n_params)
{
    vit_model *m = new_model(ops, 0);
    optimizer_config oc = adamw_config();
    char err[512] = "";
    optim *o = NULL;
    int rc = optim_new(&o, m, &oc, STEPS, err, sizeof err);
    cr_assert(rc == 0, "%s: optim_new: %s", ops->name, err);
    const float scale = ops->fp16 ? LSCALE_INIT_SCALE : 1.0f; /* fp16-mixed's loss scale */
    for (int s = 0; s < STEPS; s++) {
        const int b = s % NBATCH;
        model_zero_grads(m);
        losses[s] = model_forward(m, d->images + IMG_FLOATS * BATCH * b, d->labels + BATCH * b,
                                  BATCH);
        status_ok(m, "forward", s);
        cr_assert(isfinite(losses[s]), "%s: loss at step %d is %g", ops->name, s, losses[s]);
        model_backward(m, 1.0f / BATCH * scale);
        status_ok(m, "backward", s);
        if (ops->fp16) optim_set_loss_scale(o, 1.0f / scale, 0);
        optim_result r = optim_step(o, m, ops, s);
        status_ok(m, "optimizer step", s);
        cr_assert(!r.skipped, "%s: step %d overflowed at loss scale %g", ops->name, s,
                  (double)scale);
        cr_assert(isfinite(r.grad_norm), "%s: gradient norm at step %d is %g", ops->name, s,
                  r.grad_norm);
    }
    float *params = NULL;
    if (n_params) {
        *n_params = model_num_params(m);
        params = malloc(*n_params * sizeof(float));
        cr_assert(params != NULL, "out of host memory for the weights");
        model_read_params(m, params);
    }
    optim_free(o);
    model_free(m);
    return params;
}

static void log_losses(const char *a_name, const float *a, const char *b_name, const float *b)
{
    for (int s = 0; s < STEPS; s++)
        cr_log_info("step %2d  %s %.6f  %s %.6f  diff %+.2e", s, a_name, a[s], b_name, b[s],
                    (double)a[s] - b[s]);
}

/* Every step's GPU loss within rel * cpu + abs of the CPU fp32 loss. */
static void assert_tracks(const vit_ops *g, const float *gpu, const float *cpu, double rel,
                          double abs_tol)
{
    log_losses(g->name, gpu, "cpu", cpu);
    for (int s = 0; s < STEPS; s++) {
        double bound = rel * cpu[s] + abs_tol;
        cr_assert(fabs((double)gpu[s] - cpu[s]) <= bound,
                  "step %d: %s loss %.7f vs cpu fp32 %.7f: |diff| %.3g > %.3g", s, g->name,
                  gpu[s], cpu[s], fabs((double)gpu[s] - cpu[s]), bound);
    }
}

/* (a) */
Test(gpu_train, bf16_gpu_loss_tracks_fp32_cpu_within_1pct_plus_0_005_every_step_and_falls)
{
    const vit_ops *g = gpu_or_skip(OPS_BF16);
    dataset d;
    make_data(&d);
    float gpu[STEPS], cpu[STEPS];
    train(g, &d, gpu, NULL);
    train(ops_cpu(), &d, cpu, NULL);
    assert_tracks(g, gpu, cpu, TRACK_BF16_REL, TRACK_BF16_ABS);
    cr_assert(gpu[STEPS - 1] < FALL_RATIO * gpu[0],
              "%s: the loss did not fall: %.4f at step 0, %.4f at step %d (want < %.2fx)",
              g->name, gpu[0], gpu[STEPS - 1], STEPS - 1, FALL_RATIO);
    free_data(&d);
}

/* (b) */
Test(gpu_train, bf16_gpu_training_is_bit_reproducible_losses_and_weights)
{
    const vit_ops *g = gpu_or_skip(OPS_BF16);
    dataset d;
    make_data(&d);
    float l1[STEPS], l2[STEPS];
    size_t np, np2;
    float *p1 = train(g, &d, l1, &np), *p2 = train(g, &d, l2, &np2);
    cr_assert(np == np2);
    for (int s = 0; s < STEPS; s++)
        cr_assert(memcmp(&l1[s], &l2[s], sizeof(float)) == 0,
                  "%s: step %d loss %.9g in the first run, %.9g in the second", g->name, s,
                  l1[s], l2[s]);
    size_t first = np;
    for (size_t i = 0; i < np && first == np; i++)
        if (memcmp(&p1[i], &p2[i], sizeof(float)) != 0) first = i;
    cr_assert(first == np, "%s: final weight [%zu] is %.9g in the first run, %.9g in the second",
              g->name, first, first < np ? p1[first] : 0.0f, first < np ? p2[first] : 0.0f);
    free(p1);
    free(p2);
    free_data(&d);
}

/* (c) */
Test(gpu_train, fp32_gpu_loss_tracks_fp32_cpu_within_1e_4_relative_every_step)
{
    const vit_ops *g = gpu_or_skip(OPS_FP32);
    dataset d;
    make_data(&d);
    float gpu[STEPS], cpu[STEPS];
    train(g, &d, gpu, NULL);
    train(ops_cpu(), &d, cpu, NULL);
    assert_tracks(g, gpu, cpu, TRACK_FP32_REL, 0.0);
    cr_assert(gpu[STEPS - 1] < FALL_RATIO * gpu[0], "%s: the loss did not fall: %.4f -> %.4f",
              g->name, gpu[0], gpu[STEPS - 1]);
    free_data(&d);
}

/* (d) One forward + backward on the same weights and batch, with and
 * without activation checkpointing: the same loss and gradient bits (the
 * recomputed block runs the same ops on the same inputs), with less
 * activation memory. */
static void check_checkpointing(const vit_ops *g)
{
    dataset d;
    make_data(&d);
    vit_model *plain = new_model(g, 0), *ckpt = new_model(g, 1);
    vit_model *ms[2] = {plain, ckpt};
    float loss[2];
    size_t np = model_num_params(plain);
    float *grads[2] = {malloc(np * sizeof(float)), malloc(np * sizeof(float))};
    cr_assert(grads[0] && grads[1]);
    for (int i = 0; i < 2; i++) {
        model_zero_grads(ms[i]);
        loss[i] = model_forward(ms[i], d.images, d.labels, BATCH);
        model_backward(ms[i], 1.0f / BATCH);
        status_ok(ms[i], i ? "forward+backward with checkpointing" : "forward+backward", 0);
        model_read_grads(ms[i], grads[i]);
    }
    cr_assert(memcmp(&loss[0], &loss[1], sizeof(float)) == 0,
              "%s: loss %.9g without checkpointing, %.9g with", g->name, loss[0], loss[1]);
    double norm = 0;
    for (size_t i = 0; i < np; i++) {
        cr_assert(memcmp(&grads[0][i], &grads[1][i], sizeof(float)) == 0,
                  "%s: gradient [%zu] is %.9g without checkpointing, %.9g with", g->name, i,
                  grads[0][i], grads[1][i]);
        norm += (double)grads[0][i] * grads[0][i];
    }
    cr_assert(norm > 0, "%s: the gradients are all zero", g->name);
    cr_assert(model_activation_bytes(ckpt) < model_activation_bytes(plain),
              "%s: checkpointing keeps %zu activation bytes, without %zu", g->name,
              model_activation_bytes(ckpt), model_activation_bytes(plain));
    free(grads[0]);
    free(grads[1]);
    model_free(plain);
    model_free(ckpt);
    free_data(&d);
}

Test(gpu_train, activation_checkpointing_gives_bit_identical_gradients_on_bf16_gpu)
{
    check_checkpointing(gpu_or_skip(OPS_BF16));
}

Test(gpu_train, activation_checkpointing_gives_bit_identical_gradients_on_fp16_gpu)
{
    check_checkpointing(gpu_or_skip(OPS_FP16));
}

Test(gpu_train, activation_checkpointing_gives_bit_identical_gradients_on_fp32_gpu)
{
    check_checkpointing(gpu_or_skip(OPS_FP32));
}

/* ---- fp16-mixed (cuda-fp16), with the loss scaled by 2^16 ---- */

static void tracks_and_falls(const vit_ops *g)
{
    dataset d;
    make_data(&d);
    float x[STEPS], cpu[STEPS];
    train(g, &d, x, NULL);
    train(ops_cpu(), &d, cpu, NULL);
    assert_tracks(g, x, cpu, TRACK_BF16_REL, TRACK_BF16_ABS);
    cr_assert(x[STEPS - 1] < FALL_RATIO * x[0],
              "%s: the loss did not fall: %.4f at step 0, %.4f at step %d (want < %.2fx)",
              g->name, x[0], x[STEPS - 1], STEPS - 1, FALL_RATIO);
    free_data(&d);
}

Test(gpu_train, fp16_gpu_loss_tracks_fp32_cpu_within_1pct_plus_0_005_every_step_and_falls)
{
    tracks_and_falls(gpu_or_skip(OPS_FP16));
}

/* Runs without a GPU: the emulation the GPU path is checked against. */
Test(gpu_train, cpu_fp16_emulation_with_the_loss_scale_tracks_fp32_cpu_within_the_same_bounds)
{
    ops_cpu_set_threads(2);
    tracks_and_falls(ops_cpu_fp16());
}

Test(gpu_train, fp16_gpu_training_is_bit_reproducible_losses_and_weights)
{
    const vit_ops *g = gpu_or_skip(OPS_FP16);
    dataset d;
    make_data(&d);
    float l1[STEPS], l2[STEPS];
    size_t np, np2;
    float *p1 = train(g, &d, l1, &np), *p2 = train(g, &d, l2, &np2);
    cr_assert(np == np2);
    cr_assert(memcmp(l1, l2, sizeof l1) == 0, "%s: the losses differ between two runs", g->name);
    cr_assert(memcmp(p1, p2, np * sizeof(float)) == 0, "%s: the weights differ between two runs",
              g->name);
    free(p1);
    free(p2);
    free_data(&d);
}

/* A step captured as a CUDA graph (ops_cuda_graph: what gpu_bench --graph
 * times) and replayed once does the step it captured: two models from the
 * same weights each take step 0 queued (the warm-up a capture needs: the
 * backend's scratch is grown by then), then step 1 on the next batch,
 * queued on the first and captured and replayed on the second. The
 * second's weights and step-1 losses are the first's, bit for bit. */
Test(gpu_train, a_step_captured_as_a_cuda_graph_and_replayed_is_the_queued_step_bit_for_bit)
{
    const vit_ops *g = gpu_or_skip(OPS_BF16);
    dataset d;
    make_data(&d);
    float *w[2], step1[2][BATCH];
    size_t np = 0;
    for (int k = 0; k < 2; k++) {
        vit_model *m = new_model(g, 0);
        optimizer_config oc = adamw_config();
        char err[512] = "";
        optim *o = NULL;
        cr_assert(optim_new(&o, m, &oc, STEPS, err, sizeof err) == 0, "optim_new: %s", err);
        float *losses = g->host_alloc(2 * BATCH * sizeof(float));
        cr_assert(losses != NULL, "%s: no pinned memory for the losses", g->name);
        for (int s = 0; s < 2; s++) {
            const int captured = k == 1 && s == 1;
            if (captured)
                cr_assert(ops_cuda_graph(OPS_GRAPH_BEGIN, NULL, err, sizeof err) == 0, "%s", err);
            model_zero_grads(m);
            model_forward_queue(m, d.images + IMG_FLOATS * BATCH * s, d.labels + BATCH * s, NULL,
                                BATCH, losses + BATCH * s);
            model_backward(m, 1.0f / BATCH);
            optim_result r = optim_step_queue(o, m, g, s);
            if (captured) {
                size_t nodes = 0;
                cr_assert(ops_cuda_graph(OPS_GRAPH_END, &nodes, err, sizeof err) == 0, "%s", err);
                cr_assert(nodes > 0, "%s: the captured step has no nodes", g->name);
                cr_assert(ops_cuda_graph(OPS_GRAPH_REPLAY, NULL, err, sizeof err) == 0, "%s",
                          err);
            }
            g->synchronize();
            optim_step_collect(o, &r);
            status_ok(m, captured ? "the captured step" : "a queued step", s);
        }
        memcpy(step1[k], losses + BATCH, sizeof step1[k]);
        np = model_num_params(m);
        w[k] = malloc(np * sizeof(float));
        cr_assert(w[k] != NULL, "out of host memory for the weights");
        model_read_params(m, w[k]);
        cr_assert(ops_cuda_graph(OPS_GRAPH_FREE, NULL, err, sizeof err) == 0, "%s", err);
        g->host_free(losses);
        optim_free(o);
        model_free(m);
    }
    cr_assert(memcmp(step1[0], step1[1], sizeof step1[0]) == 0,
              "%s: step 1's losses differ: %.9g queued, %.9g replayed (the first sample)",
              g->name, step1[0][0], step1[1][0]);
    size_t first = np;
    for (size_t i = 0; i < np && first == np; i++)
        if (memcmp(&w[0][i], &w[1][i], sizeof(float)) != 0) first = i;
    cr_assert(first == np, "%s: weight [%zu] is %.9g after the queued step, %.9g after the replay",
              g->name, first, first < np ? w[0][first] : 0.0f, first < np ? w[1][first] : 0.0f);
    free(w[0]);
    free(w[1]);
    free_data(&d);
}

/* Runs without a usable GPU: the graph entry point says why it cannot,
 * the loader's or the backend's reason (what ops_cuda says), on one line. */
Test(gpu_train, without_a_usable_gpu_a_graph_capture_fails_with_the_loaders_reason)
{
    char why[512] = "", err[512] = "";
    if (ops_cuda(OPS_FP32, why, sizeof why))
        cr_skip_test("a CUDA GPU is usable here: the no-GPU path is checked where there is none");
    for (int op = OPS_GRAPH_BEGIN; op <= OPS_GRAPH_FREE; op++) {
        err[0] = '\0';
        cr_assert_neq(ops_cuda_graph((ops_graph_op)op, NULL, err, sizeof err), 0,
                      "op %d succeeded without a GPU", op);
        cr_assert(strstr(err, why) != NULL, "'%s' does not give the loader's reason '%s'", err,
                  why);
        cr_assert(strchr(err, '\n') == NULL, "not one line: %s", err);
    }
}
