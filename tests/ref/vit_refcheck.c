/* tests/ref/vit_refcheck.c - the C side of the PyTorch reference check (a
 * test tool, not part of the product).
 *
 * Owns: running the engine on weights and a batch that PyTorch chose, and
 * writing what PyTorch must reproduce: logits, loss and every parameter
 * gradient at the initial weights, then the losses and final weights of N
 * optimizer steps on the same batch, and with training.ema in the config
 * the EMA of the weights after them (check_against_torch.py compares).
 * The batch is fed in micro-batches of training.microBatchSize, so gradient
 * accumulation is checked too. The loss is the trainer's: against IN's
 * "targets" (B,K) when given (model_forward_soft), else with
 * training.labelSmoothing the trainer's smoothed targets, else the labels;
 * with training.dropPath, IN's fixed keep mask "droppath_keep"
 * (depth,2,B) becomes each micro-batch's scales by the trainer's rule
 * (worker/train/droppath.h), the same mask at every step. Must not: compute
 * anything the trainer does not (it calls the same model and optimizer
 * code).
 *
 * usage: vit_refcheck --config CFG --init W.safetensors --inputs IN.safetensors
 *                     --out OUT.safetensors [--steps N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "droppath.h"
#include "ema.h"
#include "model.h"
#include "model_io.h"
#include "optim.h"
#include "safetensors.h"
#include "smoothing.h"
#include "stdfds.h"

static int fail(const char *msg)
{
    fprintf(stderr, "vit_refcheck: %s\n", msg);
    return 1;
}

/* What one forward of n samples from sample b0 needs besides the images. */
typedef struct {
    const vit_job_config *cfg;
    const int *labels;
    const float *targets;  /* IN's (B,K), or NULL */
    const float *keep;     /* IN's (depth,2,B), or NULL */
    int B, K, depth;
    float *rows, *sub, *scale; /* scratch: (B,K), (depth,2,B) twice */
} loss_in;

/* The trainer's forward with its loss and drop path, for samples
 * [b0, b0+n); returns the mean loss. */
static float forward(vit_model *m, const loss_in *in, const float *images, int b0, int n)
{
    if (in->keep) {
        for (int i = 0; i < in->depth * 2; i++)
            memcpy(in->sub + (size_t)i * n, in->keep + (size_t)i * in->B + b0, sizeof(float) * n);
        droppath_scales(in->scale, in->sub, in->cfg->training.drop_path, in->depth, n);
        model_set_drop_path(m, in->scale, n);
    }
    if (in->targets)
        return model_forward_soft(m, images, in->targets + (size_t)b0 * in->K, n);
    if (in->cfg->training.label_smoothing > 0) {
        smoothing_targets(in->rows, in->labels + b0, n, in->K, in->cfg->training.label_smoothing);
        return model_forward_soft(m, images, in->rows, n);
    }
    return model_forward(m, images, in->labels + b0, n);
}

int main(int argc, char **argv)
{
    stdfds_ensure("vit_refcheck", 1);
    const char *cfg_path = NULL, *init = NULL, *inputs = NULL, *out_path = NULL;
    long steps = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--config")) cfg_path = argv[i + 1];
        else if (!strcmp(argv[i], "--init")) init = argv[i + 1];
        else if (!strcmp(argv[i], "--inputs")) inputs = argv[i + 1];
        else if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
        else if (!strcmp(argv[i], "--steps")) steps = atol(argv[i + 1]);
        else return fail("unknown argument");
    }
    if (!cfg_path || !init || !inputs || !out_path || steps < 0) return fail("missing arguments");

    char err[1024];
    static vit_job_config cfg;
    config_defaults(&cfg);
    if (config_load_file(&cfg, cfg_path, err, sizeof err)) return fail(err);
    if (cfg.training.precision == PRECISION_FP16_MIXED) /* its loss scaling is the loop's */
        return fail("fp16-mixed is not checked here (tests/fp16.bats, tests/test_loss_scale.c)");
    const model_config *mc = &cfg.model;
    if (mc->dim % mc->heads || mc->image_size % mc->patch_size) return fail("bad model dims");

    st_file *in = NULL;
    if (st_open(&in, inputs, err, sizeof err)) return fail(err);
    const st_tensor *timg = st_find(in, "images"), *tlab = st_find(in, "labels");
    if (!timg || !tlab || timg->dtype != ST_F32 || tlab->dtype != ST_I64 || timg->ndim != 4)
        return fail("inputs need images F32 (B,C,S,S) and labels I64 (B)");
    const int B = (int)timg->shape[0], micro = cfg.training.micro_batch_size;
    if (B % micro) return fail("batch not divisible by training.microBatchSize");
    int *labels = malloc(sizeof(int) * B);
    for (int b = 0; b < B; b++) {
        int64_t v;
        memcpy(&v, (const char *)tlab->data + 8 * b, 8);
        labels[b] = (int)v;
    }
    const size_t img_floats = (size_t)mc->channels * mc->image_size * mc->image_size;
    float *images = malloc(sizeof(float) * B * img_floats);
    memcpy(images, timg->data, sizeof(float) * B * img_floats);

    const int K = mc->num_classes, L = mc->depth;
    const st_tensor *ttgt = st_find(in, "targets"), *tkeep = st_find(in, "droppath_keep");
    if (ttgt && (ttgt->dtype != ST_F32 || ttgt->ndim != 2 || ttgt->shape[0] != B ||
                 ttgt->shape[1] != K))
        return fail("inputs: targets must be F32 (B, numClasses)");
    if (cfg.training.drop_path > 0 &&
        (!tkeep || tkeep->dtype != ST_F32 || tkeep->ndim != 3 || tkeep->shape[0] != L ||
         tkeep->shape[1] != 2 || tkeep->shape[2] != B))
        return fail("training.dropPath needs inputs droppath_keep F32 (depth, 2, B)");
    float *rows = malloc(sizeof(float) * B * K), *sub = malloc(sizeof(float) * L * 2 * B),
          *scale = malloc(sizeof(float) * L * 2 * B);
    const loss_in lin = {.cfg = &cfg, .labels = labels, .B = B, .K = K, .depth = L,
                         .targets = ttgt ? (const float *)ttgt->data : NULL,
                         .keep = cfg.training.drop_path > 0 ? (const float *)tkeep->data : NULL,
                         .rows = rows, .sub = sub, .scale = scale};

    const vit_ops *ops =
        cfg.training.precision == PRECISION_BF16_MIXED ? ops_cpu_bf16() : ops_cpu();
    ops_cpu_set_threads(cfg.training.threads);
    vit_model *m = NULL;
    model_options mopts = {.activation_checkpointing = cfg.training.activation_checkpointing,
                           .drop_path = cfg.training.drop_path > 0};
    if (model_new(&m, mc, B, &mopts, ops, err, sizeof err)) return fail(err);
    if (model_load_safetensors(m, init, err, sizeof err)) return fail(err);
    optim *o = NULL;
    if (optim_new(&o, m, &cfg.training.optimizer, steps, err, sizeof err)) return fail(err);
    ema *ema_ = NULL; /* the trainer's EMA, over the optimizer's one span (the whole vector) */
    if (ema_enabled(&cfg.training.ema)) {
        if (ema_new(&ema_, o, ops, &cfg.training.ema, err, sizeof err)) return fail(err);
        ema_reset(ema_, model_params(m));
    }

    const size_t n = model_num_params(m);
    float *logits0 = malloc(sizeof(float) * B * K), *grads0 = malloc(sizeof(float) * n);
    float *losses = calloc((size_t)steps + 1, sizeof(float));
    float loss0 = forward(m, &lin, images, 0, B);
    memcpy(logits0, model_logits(m), sizeof(float) * B * K);

    /* One step = the trainer's: micro-batches accumulate, then clip + AdamW. */
    for (long s = 0; s <= steps; s++) {
        model_zero_grads(m);
        double loss = 0.0;
        for (int b0 = 0; b0 < B; b0 += micro) {
            loss += forward(m, &lin, images + b0 * img_floats, b0, micro) * (double)micro;
            model_backward(m, 1.0f / B);
        }
        if (s == 0) memcpy(grads0, model_grads(m), sizeof(float) * n);
        if (s == steps) break;
        losses[s] = (float)(loss / B);
        optim_step(o, m, ops, s);
        if (ema_) ema_update(ema_, model_params(m), s);
    }

    /* logits, loss, losses, then grads.*, params.* (and ema.*) in layout order */
    int nt = model_num_tensors(m), count = 0, kinds = ema_ ? 3 : 2;
    st_tensor *ts = calloc((size_t)(3 + kinds * nt), sizeof *ts);
    char (*names)[MODEL_MAX_NAME + 8] = calloc((size_t)(kinds * nt), sizeof *names);
    ts[count++] = (st_tensor){"logits", ST_F32, 2, {B, K}, logits0};
    ts[count++] = (st_tensor){"loss", ST_F32, 1, {1}, &loss0};
    ts[count++] = (st_tensor){"losses", ST_F32, 1, {steps}, losses};
    for (int i = 0; i < nt; i++) {
        const model_tensor *t = model_tensor_at(m, i);
        for (int k = 0; k < kinds; k++) {
            static const char *const kind[] = {"grads", "params", "ema"};
            char *nm = names[kinds * i + k];
            snprintf(nm, MODEL_MAX_NAME + 8, "%s.%s", kind[k], t->name);
            st_tensor *e = &ts[count++];
            e->name = nm;
            e->dtype = ST_F32;
            e->ndim = t->ndim;
            for (int d = 0; d < t->ndim; d++) e->shape[d] = t->shape[d];
            /* the EMA of the one span starting at 0 is laid out as the parameters */
            e->data = (k == 2 ? ema_values(ema_) : k ? model_params(m) : grads0) + t->offset;
        }
    }
    int rc = st_write(out_path, ts, count, NULL, 0, err, sizeof err) ? fail(err) : 0;
    free(ts);
    free(names);
    free(losses);
    free(grads0);
    free(logits0);
    free(images);
    free(labels);
    free(rows);
    free(sub);
    free(scale);
    ema_free(ema_);
    optim_free(o);
    model_free(m);
    st_close(in);
    return rc;
}
