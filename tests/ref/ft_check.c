/* tests/ref/ft_check.c - the C side of the finetuning reference checks (a
 * test tool, not part of the product; tests/ref/finetune_torch.py drives it).
 *
 * Owns: exposing, on data the script chose, what the engine does when it
 * finetunes: pos_embed resampling (pos_resample.h), a new head's init
 * (model_new_head_init), the optimizer's per-tensor lr scale and weight
 * decay under layerDecay (optim_tensor_hparams) and the AdamW steps they
 * give. Must not: compute anything the worker does not (it calls the same
 * code).
 *
 * usage:
 *   ft_check resample H W D NH NW < IN.f32 > OUT.f32   (token-major grids)
 *   ft_check head K D SEED > OUT.f32                    (K*D weights, then K biases)
 *   ft_check groups DEPTH LAYER_DECAY WEIGHT_DECAY      (one line per tensor:
 *                                                        name lr_scale weight_decay)
 *   ft_check steps DEPTH LAYER_DECAY WEIGHT_DECAY LR GRAD_CLIP N OUT.safetensors
 *       a ViT (image 8, patch 4, 1 channel, dim 8, 2 heads, mlp 2, 3 classes)
 *       from model_init_random(1), N AdamW steps (constant lr, no warmup)
 *       with the gradients g_s[i] = sin(0.37 i + s) x 0.5^s / sqrt(n);
 *       writes init.NAME, grad.S.NAME (the gradient of step S as given)
 *       and final.NAME
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "config.h"
#include "model.h"
#include "model_io.h"
#include "optim.h"
#include "pos_resample.h"
#include "safetensors.h"
#include "stdfds.h"

static int fail(const char *msg)
{
    fprintf(stderr, "ft_check: %s\n", msg);
    return 1;
}

static int resample(char **a)
{
    int h = atoi(a[0]), w = atoi(a[1]), D = atoi(a[2]), nh = atoi(a[3]), nw = atoi(a[4]);
    if (h < 1 || w < 1 || D < 1 || nh < 1 || nw < 1) return fail("bad sizes");
    size_t in = (size_t)h * w * D, out = (size_t)nh * nw * D;
    float *x = malloc(sizeof(float) * in), *y = malloc(sizeof(float) * out);
    int rc = 1;
    if (!x || !y) rc = fail("out of memory");
    else if (fread(x, sizeof(float), in, stdin) != in) rc = fail("short input");
    else if (pos_resample_bicubic_aa(x, h, w, D, y, nh, nw) != 0) rc = fail("resample failed");
    else rc = fwrite(y, sizeof(float), out, stdout) == out ? 0 : fail("write failed");
    free(x);
    free(y);
    return rc;
}

static int head(char **a)
{
    int K = atoi(a[0]), D = atoi(a[1]);
    uint64_t seed = strtoull(a[2], NULL, 10);
    if (K < 1 || D < 1) return fail("bad sizes");
    float *w = malloc(sizeof(float) * (size_t)K * D), *b = malloc(sizeof(float) * (size_t)K);
    int rc = 1;
    if (!w || !b) {
        rc = fail("out of memory");
    } else {
        model_new_head_init(w, b, K, D, seed);
        rc = fwrite(w, sizeof(float), (size_t)K * D, stdout) == (size_t)K * D &&
                     fwrite(b, sizeof(float), (size_t)K, stdout) == (size_t)K
                 ? 0
                 : fail("write failed");
    }
    free(w);
    free(b);
    return rc;
}

/* the checks' ViT of depth blocks, its optimizer from the arguments */
static int build(int depth, double layer_decay, double wd, double lr, double clip, long steps,
                 vit_model **m, optim **o)
{
    model_config mc = {.image_size = 8, .patch_size = 4, .channels = 1, .dim = 8,
                       .depth = depth, .heads = 2, .mlp_ratio = 2.0, .num_classes = 3};
    static vit_job_config cfg;
    config_defaults(&cfg);
    optimizer_config oc = cfg.training.optimizer;
    oc.lr = lr;
    oc.weight_decay = wd;
    oc.layer_decay = layer_decay;
    oc.warmup_steps = 0;
    oc.schedule = SCHEDULE_CONSTANT;
    oc.grad_clip = clip;
    char err[512];
    if (model_new(m, &mc, 1, NULL, ops_cpu(), err, sizeof err) ||
        model_init_random(*m, 1) != 0 || optim_new(o, *m, &oc, steps, err, sizeof err))
        return fail(err);
    return 0;
}

static int groups(char **a)
{
    vit_model *m = NULL;
    optim *o = NULL;
    if (build(atoi(a[0]), atof(a[1]), atof(a[2]), 1e-3, 0.0, 1, &m, &o)) return 1;
    for (int k = 0; k < model_num_tensors(m); k++) {
        double scale, wd;
        optim_tensor_hparams(o, m, k, &scale, &wd);
        printf("%s %.17g %.17g\n", model_tensor_at(m, k)->name, scale, wd);
    }
    optim_free(o);
    model_free(m);
    return 0;
}

static int steps(char **a)
{
    long n_steps = atol(a[5]);
    vit_model *m = NULL;
    optim *o = NULL;
    if (n_steps < 1 || n_steps > 8) return fail("1 to 8 steps");
    if (build(atoi(a[0]), atof(a[1]), atof(a[2]), atof(a[3]), atof(a[4]), n_steps, &m, &o))
        return 1;
    const size_t n = model_num_params(m);
    const int nt = model_num_tensors(m);
    /* init, n_steps gradients, final: (2 + n_steps) copies of the parameters */
    float *copies = malloc(sizeof(float) * n * (size_t)(2 + n_steps));
    st_tensor *ts = calloc((size_t)nt * (size_t)(2 + n_steps), sizeof *ts);
    char (*names)[MODEL_MAX_NAME + 16] = calloc((size_t)nt * (size_t)(2 + n_steps), sizeof *names);
    if (!copies || !ts || !names) return fail("out of memory");
    memcpy(copies, model_params(m), sizeof(float) * n);
    float *g = model_grads(m);
    for (long s = 0; s < n_steps; s++) {
        for (size_t i = 0; i < n; i++)
            g[i] = (float)(sin(0.37 * (double)i + (double)s) * pow(0.5, (double)s) /
                           sqrt((double)n));
        memcpy(copies + n * (size_t)(1 + s), g, sizeof(float) * n);
        optim_step(o, m, ops_cpu(), s);
    }
    memcpy(copies + n * (size_t)(1 + n_steps), model_params(m), sizeof(float) * n);
    int count = 0;
    for (long c = 0; c < 2 + n_steps; c++) {
        for (int k = 0; k < nt; k++) {
            const model_tensor *t = model_tensor_at(m, k);
            char *nm = names[count];
            if (c == 0) snprintf(nm, sizeof names[0], "init.%s", t->name);
            else if (c == 1 + n_steps) snprintf(nm, sizeof names[0], "final.%s", t->name);
            else snprintf(nm, sizeof names[0], "grad.%ld.%s", c - 1, t->name);
            st_tensor *e = &ts[count++];
            e->name = nm;
            e->dtype = ST_F32;
            e->ndim = t->ndim;
            for (int d = 0; d < t->ndim; d++) e->shape[d] = t->shape[d];
            e->data = copies + n * (size_t)c + t->offset;
        }
    }
    char err[512];
    int rc = st_write(a[6], ts, count, NULL, 0, err, sizeof err) ? fail(err) : 0;
    free(copies);
    free(ts);
    free(names);
    optim_free(o);
    model_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    stdfds_ensure("ft_check", 1);
    if (argc == 7 && !strcmp(argv[1], "resample")) return resample(argv + 2);
    if (argc == 5 && !strcmp(argv[1], "head")) return head(argv + 2);
    if (argc == 5 && !strcmp(argv[1], "groups")) return groups(argv + 2);
    if (argc == 9 && !strcmp(argv[1], "steps")) return steps(argv + 2);
    return fail("usage: see tests/ref/ft_check.c");
}
