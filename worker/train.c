/* worker/train.c - see train.h. */
#include "train.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "comm.h"
#include "data.h"
#include "exitcode.h"
#include "file.h"
#include "fsdp.h"
#include "log.h"
#include "model.h"
#include "model_io.h"
#include "optim.h"
#include "report.h"
#include "sysres.h"
#include "util.h"


static double peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

vj_err train_pick_backend(const vit_ops **out, const training_config *tc, char *err,
                          size_t errlen)
{
    const int bf16 = tc->precision == PRECISION_BF16_MIXED;
    const vit_ops *cpu = bf16 ? ops_cpu_bf16() : ops_cpu();
    if (tc->device == DEVICE_CPU) {
        *out = cpu;
        return 0;
    }
    char why[512] = "";
    const vit_ops *gpu = ops_cuda(bf16, why, sizeof why);
    if (gpu) {
        *out = gpu;
        return 0;
    }
    if (tc->device == DEVICE_CUDA) {
        snprintf(err, errlen, "training.device=cuda: %s; use training.device=cpu or auto", why);
        return VJ_ERR_NO_DEVICE;
    }
    LOG_INFO("train", "event=device device=cpu reason=\"%s\"", why);
    *out = cpu;
    return 0;
}

/* Tensor cores want matrix dims that are multiples of 8; say which are not. */
static void report_dims(const model_config *mc, const vit_ops *ops)
{
    const struct {
        const char *name;
        int value;
    } dims[] = {{"model.dim", mc->dim},
                {"mlpHidden", config_mlp_hidden(mc)},
                {"model.numClasses", mc->num_classes},
                {"patchFeatures(channels*patchSize^2)",
                 mc->channels * mc->patch_size * mc->patch_size},
                {"headDim", mc->dim / mc->heads}};
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].value % 8 != 0 && used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s=%d", used ? "," : "",
                                     dims[i].name, dims[i].value);
    if (!list[0]) return;
    if (ops->gpu)
        LOG_WARN("train", "event=dims_not_multiple_of_8 dims=%s msg=\"slower tensor-core matmuls\"",
                 list);
    else
        LOG_INFO("train", "event=dims_not_multiple_of_8 dims=%s", list);
}


/* One training run: what train_run sets up, uses and frees. */
typedef struct {
    const vit_job_config *cfg;
    const train_options *opt;
    const vit_ops *ops;
    dataset *train, *test;
    vit_model *model;
    optim *opt_state;
    data_loader loader;
    float *images; /* one micro-batch */
    int *labels;
    FILE *metrics; /* NULL without --metrics */
    int threads, micro, accum;
    /* many ranks: this rank's index, their count, the communicator (NULL
     * with one rank); under grad-op this rank's slice [lo, lo + slice) of
     * the padded flat vector */
    int rank, world;
    comm *comm;
    size_t slice, lo;
    fsdp *fsdp; /* sharding full with many ranks: the shard; else NULL */
    size_t *bounds; /* ... and the model's units (model_unit_bounds) */
    int units;
    /* checkpoints (checkpoint.uri): the store and the background writer */
    ckpt_store *cstore;
    ckpt_writer *cwriter;
    long start_step;             /* steps done before this process (resumed) */
    long done_epoch, done_index; /* the loader's position after the last completed step */
    int stop_agreed;             /* many ranks: a stop was asked; every rank ends after this step */
    char threads_source[64];
    long steps_per_epoch, total;
    /* progress */
    double t_train, last_loss;
    long images_done;
    /* rank 0 in Kubernetes: the writer of the job's status.progress (else
     * NULL), the newest stored checkpoint handed to it, and the rate it is
     * told (over windows of >= 2 s of training time) */
    report *rep;
    long steps_done, ckpt_reported;
    double rate, rate_t;
    long rate_images;
} run;

static int stop_set(const run *r) { return r->opt->stop_flag && *r->opt->stop_flag; }

typedef struct {
    double accuracy, loss;
} eval_result;

static vj_err sum_over_ranks(run *r, double *v, int n, char *err, size_t errlen);

/* Accuracy and mean loss over the whole test split, in batches of the
 * micro-batch size. With many ranks each evaluates its part (all ranks
 * run the same number of forward passes, as sharding full needs: a rank
 * whose part has run out computes one image and ignores it) and the sums
 * are added over ranks. Stops early (*stopped = 1) when the stop flag is
 * set, so that SIGTERM is honoured promptly. */
static vj_err evaluate(run *r, eval_result *out, int *stopped, char *err, size_t errlen)
{
    const dataset *d = r->test;
    vit_model *m = r->model;
    const int K = model_num_classes(m), B = r->micro;
    const size_t img = (size_t)d->rows * d->cols;
    const long per = ((long)d->n + r->world - 1) / r->world, first = (long)r->rank * per;
    long end = first + per < d->n ? first + per : d->n;
    if (end < first) end = first;
    const long batches = (per + B - 1) / B;
    double sums[2] = {0.0, 0.0}; /* correct, loss */
    *stopped = 0;
    for (long k = 0; k < batches; k++) {
        if (stop_set(r) && r->world == 1) { /* many ranks: every rank evaluates to the end */
            *stopped = 1;
            return VJ_OK;
        }
        long start = first + k * B;
        int n = end - start < B ? (int)(end - start) : B;
        if (n < 0) n = 0;
        for (int b = 0; b < (n ? n : 1); b++) {
            long i = n ? start + b : 0;
            dataset_image(d, (int)i, 0, 0, 0, r->images + b * img);
            r->labels[b] = d->labels[i];
        }
        model_forward(m, r->images, r->labels, n ? n : 1);
        const float *logits = model_logits(m), *losses = model_losses(m);
        for (int b = 0; b < n; b++) {
            const float *z = logits + (size_t)b * K;
            int best = 0;
            for (int c = 1; c < K; c++)
                if (z[c] > z[best]) best = c;
            sums[0] += best == r->labels[b];
            sums[1] += losses[b];
        }
    }
    if (r->fsdp && fsdp_sync(r->fsdp, err, errlen) != 0) return VJ_ERR_PEER_LOST;
    vj_err rc = sum_over_ranks(r, sums, 2, err, errlen);
    if (rc) return rc;
    out->accuracy = sums[0] / d->n;
    out->loss = sums[1] / d->n;
    return VJ_OK;
}

/* Evaluates on the test split (every rank) and reports it (rank 0): a log
 * line and, with a metrics file, a JSON line. */
static vj_err evaluate_and_report(run *r, long step, eval_result *ev, int *stopped, char *err,
                                  size_t errlen)
{
    vj_err rc = evaluate(r, ev, stopped, err, errlen);
    if (rc || *stopped || r->rank != 0) return rc;
    LOG_INFO("eval", "step=%ld test_accuracy=%.4f test_loss=%.4f train_seconds=%.2f", step,
             ev->accuracy, ev->loss, r->t_train);
    if (r->metrics)
        fprintf(r->metrics, "{\"step\":%ld,\"test_accuracy\":%.6f,\"train_seconds\":%.3f}\n",
                step, ev->accuracy, r->t_train);
    return VJ_OK;
}

/* The data sets, checked against the model, and the number of steps. */
static vj_err load_data(run *r, char *err, size_t errlen)
{
    const vit_job_config *cfg = r->cfg;
    const model_config *mc = &cfg->model;
    const training_config *tc = &cfg->training;
    vj_err rc = dataset_load_idx(&r->train, cfg->data.uri, "train", mc->num_classes, err, errlen);
    if (rc == 0)
        rc = dataset_load_idx(&r->test, cfg->data.uri, "t10k", mc->num_classes, err, errlen);
    if (rc)
        return rc;
    if (r->train->rows != mc->image_size || r->train->cols != mc->image_size) {
        snprintf(err, errlen, "%s: images are %dx%d but model.imageSize=%d", cfg->data.uri,
                 r->train->rows, r->train->cols, mc->image_size);
        return VJ_ERR_DATA;
    }
    if (r->test->rows != r->train->rows || r->test->cols != r->train->cols) {
        snprintf(err, errlen, "%s: test images are %dx%d but training images are %dx%d",
                 cfg->data.uri, r->test->rows, r->test->cols, r->train->rows, r->train->cols);
        return VJ_ERR_DATA;
    }
    r->steps_per_epoch = r->train->n / tc->global_batch_size;
    if (r->steps_per_epoch < 1) {
        snprintf(err, errlen, "training.globalBatchSize=%d exceeds the %d training images",
                 tc->global_batch_size, r->train->n);
        return VJ_ERR_CONFIG;
    }
    r->total = tc->steps > 0 ? tc->steps : (long)tc->epochs * r->steps_per_epoch;
    if (tc->optimizer.warmup_steps > r->total) {
        snprintf(err, errlen, "training.optimizer.warmupSteps=%d exceeds the %ld steps of "
                 "training.epochs=%d", tc->optimizer.warmup_steps, r->total, tc->epochs);
        return VJ_ERR_CONFIG;
    }
    return 0;
}

/* Why a write to an output failed, as an error class: what can pass (a
 * full disk, a quota, an I/O error) is retried; anything else will fail
 * the same way again. */
static vj_err write_error_class(int e)
{
    return e == ENOSPC || e == EDQUOT || e == EIO || e == EAGAIN || e == EINTR ? VJ_ERR_IO
                                                                              : VJ_ERR_OUTPUT;
}

/* Host memory the run needs besides what the backend holds: the data
 * sets and the batch buffers; plus, on the CPU, the model and optimizer. */
static vj_err check_memory(run *r, const model_options *mopts, char *err, size_t errlen)
{
    const vit_job_config *cfg = r->cfg;
    size_t n_params = 0;
    size_t model = model_memory_bytes(&cfg->model, r->micro, mopts, r->ops, &n_params);
    if (model == 0) {
        snprintf(err, errlen, "out of host memory planning the model");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    size_t optim = optim_memory_bytes(n_params);
    if (mopts->shard) { /* sharding full: a 1/world share of the state, and the unit slots */
        size_t pb, gb;
        fsdp_memory_bytes(r->bounds, r->units, r->world, &pb, &gb);
        optim = optim_memory_bytes(pb / sizeof(float)) + pb + gb;
    }
    if (r->ops->gpu) return VJ_OK; /* the backend reports what it cannot allocate */
    /* the data sets are already loaded, so they count as used; a staging
     * copy of the parameters comes and goes at init */
    const model_config *mc = &cfg->model;
    size_t batch = (sizeof(float) * (size_t)mc->channels * mc->image_size * mc->image_size +
                    sizeof(int)) * (size_t)r->micro;
    size_t need = model + optim + batch + n_params * sizeof(float);
    char source[64];
    long long avail = sysres_memory_available("", source, sizeof source);
    if (avail >= 0 && need > (size_t)avail) {
        snprintf(err, errlen,
                 "the run needs %zu bytes of host memory (model %zu, optimizer state %zu, "
                 "batches and staging %zu) but %lld are available (%s); lower model.dim, "
                 "model.depth or training.microBatchSize, turn on "
                 "training.activationCheckpointing, or give the pod more memory",
                 need, model, optim, need - model - optim, avail, source);
        return VJ_ERR_TOO_LARGE;
    }
    LOG_DEBUG("train", "event=memory need_bytes=%zu available_bytes=%lld source=\"%s\"", need,
              avail, source);
    return VJ_OK;
}

/* The backend, the model with its first weights, the optimizer, the batch
 * buffers, the data loader and the metrics file. */
static vj_err build(run *r, char *err, size_t errlen)
{
    const vit_job_config *cfg = r->cfg;
    const model_config *mc = &cfg->model;
    const training_config *tc = &cfg->training;
    vj_err rc = train_pick_backend(&r->ops, tc, err, errlen);
    if (rc)
        return rc;
    if (r->world > 1 && r->ops->gpu) { /* device auto; main.c refuses device cuda */
        LOG_INFO("train", "event=device device=cpu reason=\"world size %d: the collectives "
                 "of this build run on the CPU\"", r->world);
        r->ops = tc->precision == PRECISION_BF16_MIXED ? ops_cpu_bf16() : ops_cpu();
    }
    report_dims(mc, r->ops);
    /* with many ranks a stop is honoured at a step's end, where all agree */
    model_options mopts = {.activation_checkpointing = tc->activation_checkpointing,
                           .stop = r->world == 1 ? r->opt->stop_flag : NULL,
                           .pad_multiple = r->world};
    const int full = r->world > 1 && tc->sharding == SHARDING_FULL;
    if (full) {
        const int max = mc->depth + 3;
        r->bounds = malloc(sizeof *r->bounds * (size_t)max);
        if (!r->bounds || (r->units = model_unit_bounds(mc, r->bounds, max)) == 0) {
            snprintf(err, errlen, "out of host memory planning the shards");
            return VJ_ERR_OUT_OF_MEMORY;
        }
        static const model_shard planned; /* check_memory only asks whether */
        mopts.shard = &planned;
        mopts.pad_multiple = 1;
    }
    if ((rc = check_memory(r, &mopts, err, errlen)) != VJ_OK)
        return rc;
    if (full) {
        if ((rc = fsdp_new(&r->fsdp, r->comm, r->ops, r->bounds, r->units, err, errlen)) != 0)
            return rc;
        mopts.shard = fsdp_hooks(r->fsdp);
    }
    if ((rc = model_new(&r->model, mc, r->micro, &mopts, r->ops, err, errlen)) != 0)
        return rc;
    if (mc->init[0]) {
        if (model_load_safetensors(r->model, mc->init, err, errlen) != 0)
            return VJ_ERR_INIT_WEIGHTS; /* unreadable, malformed, mismatched or not finite */
        LOG_INFO("train", "event=init_loaded path=%s", mc->init);
    } else if (model_init_random(r->model, tc->seed) != 0) {
        snprintf(err, errlen, "out of host memory for the initial weights");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    size_t param_bytes = model_padded_params(r->model) * sizeof(float), grad_bytes = param_bytes;
    if (full) {
        const size_t u = (size_t)r->units;
        size_t *lo = malloc(sizeof *lo * 3 * u);
        optim_span *spans = malloc(sizeof *spans * u);
        if (!lo || !spans) {
            free(lo);
            free(spans);
            snprintf(err, errlen, "out of host memory planning the shards");
            return VJ_ERR_OUT_OF_MEMORY;
        }
        fsdp_shard_spans(r->fsdp, lo, lo + u, lo + 2 * u);
        for (size_t i = 0; i < u; i++) spans[i] = (optim_span){lo[i], lo[u + i], lo[2 * u + i]};
        rc = optim_new_spans(&r->opt_state, r->model, &tc->optimizer, r->total, spans, r->units,
                             err, errlen);
        free(lo);
        free(spans);
        r->slice = fsdp_shard_len(r->fsdp);
        fsdp_memory_bytes(r->bounds, r->units, r->world, &param_bytes, &grad_bytes);
    } else if (r->world > 1 && tc->sharding == SHARDING_GRAD_OP) {
        r->slice = model_padded_params(r->model) / (size_t)r->world;
        r->lo = (size_t)r->rank * r->slice;
        rc = optim_new_slice(&r->opt_state, r->model, &tc->optimizer, r->total, r->lo,
                             r->lo + r->slice, err, errlen);
    } else {
        r->slice = model_padded_params(r->model);
        rc = optim_new(&r->opt_state, r->model, &tc->optimizer, r->total, err, errlen);
    }
    if (rc)
        return rc;
    size_t n = model_num_params(r->model), mine = optim_num_params(r->opt_state);
    LOG_INFO("train", "event=shard rank=%d world=%d sharding=%s params=%zu padded=%zu "
             "shard_params=%zu param_bytes=%zu grad_bytes=%zu optim_bytes=%zu", r->rank,
             r->world, config_enum_name("training.sharding", tc->sharding), n,
             full ? fsdp_shard_len(r->fsdp) * (size_t)r->world : model_padded_params(r->model),
             mine, param_bytes, grad_bytes, optim_memory_bytes(mine));
    r->images = malloc(sizeof(float) * (size_t)r->micro * model_image_floats(r->model));
    r->labels = malloc(sizeof(int) * (size_t)r->micro);
    if (!r->images || !r->labels ||
        data_loader_init(&r->loader, r->train, tc->seed, cfg->data.augment)) {
        snprintf(err, errlen, "out of memory for batch buffers");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    if (r->opt->metrics_path && r->rank == 0) {
        char why[1024];
        int fd = file_create(r->opt->metrics_path, why, sizeof why);
        if (fd < 0) {
            snprintf(err, errlen, "--metrics: %s", why);
            return VJ_ERR_OUTPUT;
        }
        if ((r->metrics = fdopen(fd, "w")) == NULL) {
            close(fd);
            snprintf(err, errlen, "%s: out of memory opening the metrics file",
                     r->opt->metrics_path);
            return VJ_ERR_OUT_OF_MEMORY;
        }
    }
    return VJ_OK;
}

/* Flushes the metrics lines just written; a failed write ends the run. */
static vj_err flush_metrics(run *r, char *err, size_t errlen)
{
    if (!r->metrics || (fflush(r->metrics) == 0 && !ferror(r->metrics)))
        return VJ_OK;
    int e = errno ? errno : EIO;
    snprintf(err, errlen, "%s: write failed: %s", r->opt->metrics_path, strerror(e));
    return write_error_class(e);
}

/* The sum over ranks of n doubles each rank holds, in rank order on every
 * rank (bit-identical everywhere, and to the one-rank sum when n ranks are
 * one). Gathered as raw bytes: two f32 slots per double. */
static vj_err sum_over_ranks(run *r, double *v, int n, char *err, size_t errlen)
{
    if (r->world == 1) return VJ_OK;
    double *all = calloc((size_t)r->world * (size_t)n, sizeof *all);
    if (!all) {
        snprintf(err, errlen, "out of memory summing over ranks");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    memcpy(all + (size_t)r->rank * n, v, sizeof *v * (size_t)n);
    vj_err rc = VJ_OK;
    if (comm_allgather(r->comm, all + (size_t)r->rank * n, all, (size_t)n * 2, COMM_F32, err,
                       errlen) != 0) {
        rc = VJ_ERR_PEER_LOST;
    } else {
        for (int k = 0; k < n; k++) {
            double s = 0.0;
            for (int q = 0; q < r->world; q++) s += all[(size_t)q * n + k];
            v[k] = s;
        }
    }
    free(all);
    return rc;
}

/* Gradients of the global batch from every rank's part, then the update:
 * none (DDP): all-reduce, every rank updates everything; grad-op (ZeRO-2):
 * reduce-scatter, each rank updates its slice of the fp32 parameters and
 * AdamW state, the updated slices are all-gathered. */
static vj_err sync_and_update(run *r, long step, optim_result *res, char *err, size_t errlen)
{
    const training_config *tc = &r->cfg->training;
    float *g = model_grads(r->model), *p = model_params(r->model);
    const size_t np = model_padded_params(r->model);
    if (r->world == 1) {
        *res = optim_step(r->opt_state, r->model, r->ops, step);
        return VJ_OK;
    }
    if (r->fsdp) { /* full: the gradients are already reduce-scattered into the shard */
        double sq = optim_grad_sq_in(r->opt_state, fsdp_grads(r->fsdp));
        vj_err rc = sum_over_ranks(r, &sq, 1, err, errlen);
        if (rc) return rc;
        *res = optim_step_in(r->opt_state, r->model, r->ops, step, sqrt(sq),
                             fsdp_params(r->fsdp), fsdp_grads(r->fsdp));
        fsdp_params_changed(r->fsdp);
        return VJ_OK;
    }
    if (tc->sharding == SHARDING_NONE) {
        if (comm_allreduce_sum(r->comm, g, np, err, errlen) != 0) return VJ_ERR_PEER_LOST;
        *res = optim_step(r->opt_state, r->model, r->ops, step);
        return VJ_OK;
    }
    /* grad-op */
    if (comm_reduce_scatter_sum(r->comm, g, r->slice, err, errlen) != 0)
        return VJ_ERR_PEER_LOST;
    double sq = optim_grad_sq(r->opt_state, r->model);
    vj_err rc = sum_over_ranks(r, &sq, 1, err, errlen);
    if (rc) return rc;
    *res = optim_step_norm(r->opt_state, r->model, r->ops, step, sqrt(sq));
    if (comm_allgather(r->comm, p + r->lo, p, r->slice, COMM_F32, err, errlen) != 0)
        return VJ_ERR_PEER_LOST;
    model_params_refreshed(r->model);
    return VJ_OK;
}

/* One optimizer step: the micro-batches of this rank's part of a global
 * batch, accumulated, then the update. *loss is the global batch's mean
 * loss. A stop request abandons the step between micro-batches or between
 * blocks (VJ_ERR_STOPPED): the weights are then those of the last
 * completed step. */
static vj_err train_step(run *r, long step, double *loss, optim_result *res, char *err,
                         size_t errlen)
{
    const training_config *tc = &r->cfg->training;
    const int G = tc->global_batch_size;
    const long part = G / r->world; /* this rank's samples of the global batch */
    /* each sample's loss enters the mean over the global batch, so the
     * accumulated micro-batch gradients (over every rank) add up to the
     * global batch's */
    const float dloss = 1.0f / (float)G;
    double t0 = mono_seconds();
    model_zero_grads(r->model);
    if (r->fsdp) fsdp_zero_grads(r->fsdp);
    *loss = 0.0;
    /* epochs end at optimizer-step (global batch) boundaries, so that a step
     * never mixes two epochs whatever the micro-batch size; rank q reads the
     * q-th part of the step's samples, so the samples the job sees do not
     * depend on the world size */
    data_loader_begin_step(&r->loader, G);
    data_loader_skip(&r->loader, (long)r->rank * part);
    int a = 0;
    const char *where = NULL;
    const int solo = r->world == 1; /* many ranks finish the step together */
    for (; a < r->accum && !(solo && stop_set(r)); a++) {
        data_loader_next(&r->loader, r->micro, r->images, r->labels);
        *loss += model_forward(r->model, r->images, r->labels, r->micro) * (double)r->micro;
        if ((where = model_abandoned(r->model)) != NULL) break;
        model_backward(r->model, dloss);
        if ((where = model_abandoned(r->model)) != NULL) break;
    }
    data_loader_skip(&r->loader, (long)(r->world - 1 - r->rank) * part);
    if (solo && stop_set(r)) {
        snprintf(err, errlen, "stopped by signal during step %ld (micro-batch %d of %d%s%s); the "
                 "step was abandoned, the last completed step is %ld", step + 1,
                 a < r->accum ? a + 1 : a, r->accum, where ? ", " : "", where ? where : "", step);
        return VJ_ERR_STOPPED;
    }
    if (r->fsdp && fsdp_sync(r->fsdp, err, errlen) != 0) return VJ_ERR_PEER_LOST;
    double sums[2] = {*loss, stop_set(r) ? 1.0 : 0.0}; /* the loss, and whether to stop */
    vj_err rc = sum_over_ranks(r, sums, solo ? 1 : 2, err, errlen);
    if (rc == VJ_OK) rc = sync_and_update(r, step, res, err, errlen);
    if (rc) return rc;
    *loss = sums[0] / G;
    if (!solo && sums[1] > 0) r->stop_agreed = 1;
    r->done_epoch = r->loader.epoch;
    r->done_index = r->loader.index;
    r->t_train += mono_seconds() - t0;
    if (model_status(r->model, err, errlen))
        return VJ_ERR_DEVICE_FAULT; /* retryable from the last checkpoint */
    r->images_done += G;
    if (!isfinite(*loss)) {
        snprintf(err, errlen, "loss is %f at step %ld (diverged); lower training.optimizer.lr",
                 *loss, step + 1);
        return VJ_ERR_DIVERGED;
    }
    r->last_loss = *loss;
    if (r->metrics)
        fprintf(r->metrics, "{\"step\":%ld,\"loss\":%.17g,\"lr\":%.17g,\"grad_norm\":%.17g}\n",
                step + 1, *loss, res->lr, res->grad_norm);
    return flush_metrics(r, err, errlen);
}

/* The final evaluation (every rank), the export and the summary line (rank 0). */
static vj_err finish(run *r, char *err, size_t errlen)
{
    const model_config *mc = &r->cfg->model;
    const training_config *tc = &r->cfg->training;
    int stopped;
    eval_result ev;
    vj_err rc = evaluate_and_report(r, r->total, &ev, &stopped, err, errlen);
    if (rc == VJ_OK && stopped) {
        snprintf(err, errlen, "stopped by signal during the final evaluation");
        rc = VJ_ERR_STOPPED;
    }
    if (rc) return rc;
    if (r->rank != 0) {
        /* under sharding full the export gathers every unit: take part */
        if (r->fsdp && tc->export_path[0]) {
            float *scratch = malloc(sizeof(float) * model_num_params(r->model));
            if (!scratch) {
                snprintf(err, errlen, "out of host memory gathering the parameters to export");
                return VJ_ERR_OUT_OF_MEMORY;
            }
            int bad = model_read_params(r->model, scratch);
            free(scratch);
            if (bad && fsdp_sync(r->fsdp, err, errlen) != 0) return VJ_ERR_PEER_LOST;
        }
        LOG_INFO("train", "event=done rank=%d steps=%ld train_seconds=%.1f peak_rss_mib=%.1f",
                 r->rank, r->total, r->t_train, peak_rss_mib());
        return VJ_OK;
    }
    rc = flush_metrics(r, err, errlen);
    if (rc)
        return rc;
    if (tc->export_path[0]) {
        errno = 0;
        if (model_save_safetensors(r->model, mc, tc->export_path, err, errlen) != 0) {
            if (r->fsdp && fsdp_sync(r->fsdp, err, errlen) != 0) return VJ_ERR_PEER_LOST;
            return write_error_class(errno);
        }
        LOG_INFO("train", "event=exported path=%s", tc->export_path);
    }
    double ips = r->t_train > 0 ? r->images_done / r->t_train : 0.0;
    LOG_INFO("train",
             "event=done steps=%ld final_loss=%.4f test_accuracy=%.4f img_per_s=%.1f "
             "train_seconds=%.1f peak_rss_mib=%.1f",
             r->total, r->last_loss, ev.accuracy, ips, r->t_train, peak_rss_mib());
    printf("{\"event\":\"summary\",\"steps\":%ld,\"final_loss\":%.9g,\"test_accuracy\":%.6f,"
           "\"test_loss\":%.6f,\"images_per_sec\":%.3f,\"train_seconds\":%.3f,\"params\":%zu,"
           "\"threads\":%d,\"peak_rss_mib\":%.1f}\n",
           r->total, r->last_loss, ev.accuracy, ev.loss, ips, r->t_train,
           model_num_params(r->model), r->threads, peak_rss_mib());
    fflush(stdout);
    return VJ_OK;
}

#define RATE_WINDOW_S 2.0

/* Rank 0 in Kubernetes: the progress after r->steps_done steps to the
 * reporter, which writes it on its own thread (this returns at once). A
 * checkpoint stored since the last call is written without waiting for the
 * report interval. */
static void hand_progress(run *r)
{
    if (!r->rep) return;
    const long G = r->cfg->training.global_batch_size;
    if (r->t_train - r->rate_t >= RATE_WINDOW_S) {
        r->rate = (double)(r->images_done - r->rate_images) / (r->t_train - r->rate_t);
        r->rate_t = r->t_train;
        r->rate_images = r->images_done;
    }
    double rate = r->rate;
    if (rate <= 0 && r->t_train > r->rate_t) /* the first window: what there is */
        rate = (double)(r->images_done - r->rate_images) / (r->t_train - r->rate_t);
    report_info p = {.step = r->steps_done, .total_steps = r->total,
                     .epoch = r->train && r->train->n ? (double)r->images_done / r->train->n : 0,
                     .loss = r->steps_done > r->start_step ? r->last_loss : NAN,
                     .images_per_second = rate,
                     .eta_seconds = rate > 0 ? (double)(r->total - r->steps_done) * G / rate : -1,
                     .last_checkpoint_step = -1};
    long stored = ckpt_stored_step(r->cwriter);
    if (stored < 0 && r->start_step > 0) stored = r->start_step; /* resumed from it */
    if (stored >= 0) {
        const char *uri = r->cfg->checkpoint.uri;
        size_t n = strlen(uri);
        while (n > 0 && uri[n - 1] == '/') n--;
        p.last_checkpoint_step = stored;
        snprintf(p.last_checkpoint_uri, sizeof p.last_checkpoint_uri, "%.*s/step-%09ld", (int)n,
                 uri, stored);
    }
    if (stored > r->ckpt_reported) {
        r->ckpt_reported = stored;
        report_checkpoint(r->rep, &p);
    } else {
        report_progress(r->rep, &p);
    }
}

/* Frees what the run holds; a metrics file that fails to close fails the run. */
static vj_err run_free(run *r, vj_err rc, char *err, size_t errlen)
{
    if (r->rep) { /* the final state, with a checkpoint still being stored */
        char why[256];
        if (r->cwriter) ckpt_wait(r->cwriter, NULL, why, sizeof why);
        hand_progress(r);
        report_free(r->rep);
        r->rep = NULL;
    }
    if (r->metrics && fclose(r->metrics) != 0 && rc == VJ_OK) {
        snprintf(err, errlen, "%s: write failed: %s", r->opt->metrics_path, strerror(errno));
        rc = write_error_class(errno);
    }
    data_loader_free(&r->loader);
    free(r->images);
    free(r->labels);
    optim_free(r->opt_state);
    model_free(r->model);
    ckpt_writer_free(r->cwriter);
    ckpt_store_free(r->cstore);
    fsdp_free(r->fsdp);
    free(r->bounds);
    dataset_free(r->train);
    dataset_free(r->test);
    return rc;
}

/* Compute threads: training.threads when set, else OMP_NUM_THREADS when
 * the environment sets it (as torchrun does), else what the CPU affinity and
 * the cgroup's CPU quota allow (never one per core of a node the pod may
 * use two of). */
static int pick_threads(const training_config *tc, char *source, size_t srclen)
{
    if (tc->threads > 0) {
        snprintf(source, srclen, "training.threads");
        return ops_cpu_set_threads(tc->threads);
    }
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end == '\0' && n >= 1 && n <= 1024) {
            snprintf(source, srclen, "OMP_NUM_THREADS");
            return ops_cpu_set_threads((int)n);
        }
        LOG_WARN("train", "event=ignored_env name=OMP_NUM_THREADS value=\"%s\" reason=\"not a "
                 "count in [1, 1024]\"", env);
    }
    return ops_cpu_set_threads(sysres_cpus("", 0, source, srclen));
}


static vj_err ckpt_class(ckpt_status st)
{
    return st == CKPT_RETRY || st == CKPT_NOT_FOUND ? VJ_ERR_IO : VJ_ERR_OUTPUT;
}

/* This rank's part of the state a checkpoint holds: its optimizer spans
 * (with sharding none every rank has them all, so rank r saves the r-th
 * slice), with where their parameters and AdamW state are. *out malloc'd. */
static int ckpt_segments(run *r, ckpt_segment **out)
{
    const int n = optim_num_spans(r->opt_state);
    ckpt_segment *segs = calloc((size_t)(n ? n : 1), sizeof *segs);
    if (!segs) return -1;
    const size_t np = model_num_params(r->model);
    size_t lo = 0, hi = np; /* the range this rank saves */
    if (r->world > 1 && r->cfg->training.sharding == SHARDING_NONE) {
        size_t c = (np + (size_t)r->world - 1) / (size_t)r->world;
        lo = (size_t)r->rank * c < np ? (size_t)r->rank * c : np;
        hi = lo + c < np ? lo + c : np;
    }
    const float *p = r->fsdp ? fsdp_params(r->fsdp) : model_params(r->model);
    int k = 0;
    for (int i = 0; i < n; i++) {
        size_t so;
        optim_span sp = optim_span_at(r->opt_state, i, &so);
        size_t a = sp.lo > lo ? sp.lo : lo, b = sp.hi < hi ? sp.hi : hi;
        if (a >= b) continue;
        segs[k++] = (ckpt_segment){a, b, p + sp.at + (a - sp.lo),
                                   optim_m(r->opt_state) + so + (a - sp.lo),
                                   optim_v(r->opt_state) + so + (a - sp.lo)};
    }
    *out = segs;
    return k;
}

/* Saves the state after `steps` completed steps; with wait, returns once
 * it is stored (the end of training, a stop), else while it uploads. */
static vj_err save_checkpoint(run *r, long steps, int wait, char *err, size_t errlen)
{
    if (!r->cwriter) return VJ_OK;
    ckpt_meta meta = {.step = steps, .epoch = r->done_epoch, .index = r->done_index,
                      .images_done = r->images_done, .world_size = r->world,
                      .n_params = model_num_params(r->model)};
    snprintf(meta.sharding, sizeof meta.sharding, "%s",
             config_enum_name("training.sharding", r->cfg->training.sharding));
    model_config_json(&r->cfg->model, meta.model, sizeof meta.model);
    ckpt_segment *segs = NULL;
    int n = ckpt_segments(r, &segs);
    if (n < 0) {
        snprintf(err, errlen, "checkpoint: out of host memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    double t0 = mono_seconds();
    ckpt_status st = ckpt_save(r->cwriter, &meta, segs, n, r->ops, err, errlen);
    free(segs);
    /* stall: what training waited (the previous save, if still running,
     * and the host copy); copy: the host copy alone */
    double stall_s = mono_seconds() - t0, copy_s = ckpt_copy_seconds(r->cwriter);
    if (st == CKPT_OK && wait) st = ckpt_wait(r->cwriter, NULL, err, errlen);
    if (st) return ckpt_class(st);
    LOG_INFO("ckpt", "event=checkpoint step=%ld rank=%d wait=%d stall_s=%.4f copy_s=%.4f%s",
             steps, r->rank, wait, stall_s, copy_s, wait ? " stored=1" : "");
    return VJ_OK;
}

/* This rank's load of a step: every parameter (the model keeps what this
 * rank needs), then the AdamW state of its spans. *st: the read's outcome
 * (ckpt_read_range checks every block it reads); the return value is only
 * VJ_ERR_OUT_OF_MEMORY or VJ_OK. */
static vj_err load_state(run *r, const ckpt_manifest *man, ckpt_status *st, char *err,
                         size_t errlen)
{
    const size_t n = model_num_params(r->model);
    float *host = malloc(sizeof(float) * 2 * n); /* params; then m and v of a span */
    if (!host) {
        snprintf(err, errlen, "out of host memory loading the checkpoint");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    *st = ckpt_read_range(r->cstore, man, 0, n, host, NULL, NULL, err, errlen);
    if (!*st) model_write_params(r->model, host);
    for (int i = 0; !*st && i < optim_num_spans(r->opt_state); i++) {
        size_t so;
        optim_span sp = optim_span_at(r->opt_state, i, &so);
        size_t k = sp.hi - sp.lo;
        if (k == 0) continue;
        *st = ckpt_read_range(r->cstore, man, sp.lo, sp.hi, NULL, host, host + k, err, errlen);
        if (*st) break;
        r->ops->upload(optim_m(r->opt_state) + so, host, k * sizeof(float));
        r->ops->upload(optim_v(r->opt_state) + so, host + k, k * sizeof(float));
    }
    free(host);
    return VJ_OK;
}

/* How bad a rank's load outcome is, for agreeing on one: a failing store
 * (retry the run) over a corrupt step (try the one before) over success. */
static int load_severity(ckpt_status st)
{
    return st == CKPT_OK ? 0 : st == CKPT_PERMANENT ? 1 : 2;
}

/* Every rank's outcome of loading attempt a, through the rendezvous store,
 * so that all ranks decide alike: *all the worst one, why its message
 * naming the rank (with more than one). */
static vj_err agree_on_load(run *r, int a, ckpt_status mine, const char *mine_why,
                            ckpt_status *all, char *why, size_t whylen, char *err, size_t errlen)
{
    *all = mine;
    snprintf(why, whylen, "%s", mine_why);
    if (r->world == 1) return VJ_OK;
    char key[64], val[1100];
    snprintf(key, sizeof key, "ckpt/loaded/%d/%d", a, r->rank);
    int n = snprintf(val, sizeof val, "%d %s", (int)mine, mine ? mine_why : "");
    if (rdzv_set(r->opt->rdzv, key, val, (size_t)(n < (int)sizeof val ? n : (int)sizeof val - 1),
                 NULL, err, errlen) != 0)
        return VJ_ERR_RENDEZVOUS;
    for (int q = 0; q < r->world; q++) {
        void *v = NULL;
        size_t len = 0;
        snprintf(key, sizeof key, "ckpt/loaded/%d/%d", a, q);
        if (rdzv_get(r->opt->rdzv, key, r->cfg->training.rendezvous_timeout_seconds, &v, &len,
                     NULL, err, errlen) != 0)
            return VJ_ERR_RENDEZVOUS;
        snprintf(val, sizeof val, "%.*s", (int)(len < sizeof val ? len : sizeof val - 1),
                 (char *)v);
        free(v);
        char *rest = NULL;
        ckpt_status theirs = (ckpt_status)strtol(val, &rest, 10);
        if (load_severity(theirs) > load_severity(*all)) {
            *all = theirs;
            snprintf(why, whylen, "rank %d: %s", q, *rest == ' ' ? rest + 1 : rest);
        }
    }
    return VJ_OK;
}

/* At start, with checkpoint.uri: the store, the newest complete checkpoint
 * loaded into this rank's model and optimizer whatever world size and
 * sharding wrote it, and the writer. Rank 0 picks the newest step whose
 * objects are all there (ckpt_find_candidate) and tells the others through
 * the rendezvous store; every rank loads its part, checking each block's
 * CRC as it reads (the ranks together read every block), so the state is
 * read once; if any rank found a block corrupt, all pass the step over and
 * take the one before. */
static vj_err resume(run *r, char *err, size_t errlen)
{
    const checkpoint_config *cc = &r->cfg->checkpoint;
    if (!cc->uri[0]) return VJ_OK;
    ckpt_status st = ckpt_store_open(&r->cstore, cc->uri, cc->endpoint, err, errlen);
    if (st) return ckpt_class(st);
    long below = LONG_MAX, step = -1;
    for (int a = 0;; a++) {
        ckpt_manifest *man = NULL;
        char key[48], val[32];
        snprintf(key, sizeof key, "ckpt/resume/%d", a);
        if (r->rank == 0) {
            st = ckpt_find_candidate(r->cstore, below, &man, err, errlen);
            if (st != CKPT_OK && st != CKPT_NOT_FOUND) return ckpt_class(st);
            step = st == CKPT_OK ? ckpt_manifest_meta(man)->step : -1;
            int n = snprintf(val, sizeof val, "%ld", step);
            if (r->world > 1 &&
                rdzv_set(r->opt->rdzv, key, val, (size_t)n, NULL, err, errlen) != 0) {
                ckpt_manifest_free(man);
                return VJ_ERR_RENDEZVOUS;
            }
        } else {
            void *v = NULL;
            size_t len = 0;
            if (rdzv_get(r->opt->rdzv, key, r->cfg->training.rendezvous_timeout_seconds, &v,
                         &len, NULL, err, errlen) != 0)
                return VJ_ERR_RENDEZVOUS;
            snprintf(val, sizeof val, "%.*s", (int)(len < 31 ? len : 31), (char *)v);
            free(v);
            step = strtol(val, NULL, 10);
            if (step >= 0 && (st = ckpt_read_step(r->cstore, step, &man, err, errlen)) != CKPT_OK)
                return ckpt_class(st);
        }
        if (step < 0) break;
        const ckpt_meta *meta = ckpt_manifest_meta(man);
        char mine[512];
        model_config_json(&r->cfg->model, mine, sizeof mine);
        const size_t n = model_num_params(r->model);
        if (strcmp(meta->model, mine) != 0 || meta->n_params != n) {
            snprintf(err, errlen, "checkpoint.uri=%s: step %ld was written for the model %s "
                     "(%zu parameters), not this run's %s (%zu); use another checkpoint.uri",
                     cc->uri, step, meta->model, meta->n_params, mine, n);
            ckpt_manifest_free(man);
            return VJ_ERR_CONFIG;
        }
        char why[1200] = "", all_why[1300];
        ckpt_status all = CKPT_OK;
        vj_err rc = load_state(r, man, &st, why, sizeof why);
        if (!rc) rc = agree_on_load(r, a, st, why, &all, all_why, sizeof all_why, err, errlen);
        if (rc == VJ_ERR_OUT_OF_MEMORY) snprintf(err, errlen, "%s", why);
        if (!rc && all == CKPT_OK) {
            r->start_step = step;
            r->images_done = meta->images_done;
            r->done_epoch = meta->epoch;
            r->done_index = meta->index;
            data_loader_seek(&r->loader, meta->epoch, meta->index);
            LOG_INFO("ckpt", "event=resumed step=%ld from_world_size=%d from_sharding=%s "
                     "world_size=%d epoch=%ld index=%ld", step, meta->world_size,
                     meta->sharding, r->world, meta->epoch, meta->index);
        }
        ckpt_manifest_free(man);
        if (rc) return rc;
        if (all == CKPT_OK) break;
        if (all != CKPT_PERMANENT) { /* storage failing now: not a verdict on the step */
            snprintf(err, errlen, "%s", all_why);
            return ckpt_class(all);
        }
        if (r->rank == 0)
            LOG_WARN("ckpt", "event=skipped step=%ld reason=\"corrupt: %s\"", step, all_why);
        below = step;
    }
    if (step < 0 && r->rank == 0)
        LOG_INFO("ckpt", "event=fresh_start uri=%s reason=\"no complete checkpoint\"", cc->uri);
    if (ckpt_writer_new(&r->cwriter, r->cstore, r->opt->rdzv, r->rank, r->world, cc->keep,
                        r->cfg->training.collective_timeout_seconds, err, errlen) != 0)
        return VJ_ERR_OUT_OF_MEMORY;
    return VJ_OK;
}

vj_err train_run(const vit_job_config *cfg, const train_options *opt, char *err, size_t errlen)
{
    const training_config *tc = &cfg->training;
    run r = {.cfg = cfg, .opt = opt, .rank = opt->rank, .world = opt->world > 1 ? opt->world : 1,
             .comm = opt->comm};
    if (r.world > 1 && !r.comm) {
        snprintf(err, errlen, "world size %d without a communicator", r.world);
        return VJ_ERR_UNSUPPORTED;
    }
    r.threads = pick_threads(tc, r.threads_source, sizeof r.threads_source);
    r.micro = tc->micro_batch_size;
    r.accum = config_accum_steps(cfg);
    vj_err rc = load_data(&r, err, errlen);
    if (rc == VJ_OK)
        rc = build(&r, err, errlen);
    if (rc == VJ_OK)
        rc = resume(&r, err, errlen);
    if (rc)
        return run_free(&r, rc, err, errlen);
    r.steps_done = r.start_step;
    r.ckpt_reported = r.start_step > 0 ? r.start_step - 1 : -1; /* the resumed one: reported once */
    r.rate_t = r.t_train;
    r.rate_images = r.images_done;
    if (r.rank == 0) {
        r.rep = report_from_env(&(report_options){.interval_s = tc->report_interval_seconds});
        hand_progress(&r);
    }

    LOG_INFO("train",
             "event=start backend=%s precision=%s activation_checkpointing=%d threads=%d "
             "threads_source=\"%s\" params=%zu activation_mib=%.1f tokens=%d "
             "steps=%ld steps_per_epoch=%ld global_batch=%d micro_batch=%d accum=%d",
             r.ops->name, r.ops->bf16 ? "bf16-mixed" : "fp32", tc->activation_checkpointing,
             r.threads, r.threads_source, model_num_params(r.model),
             model_activation_bytes(r.model) / 1048576.0, model_tokens(r.model), r.total,
             r.steps_per_epoch, tc->global_batch_size, r.micro, r.accum);

    double interval_loss = 0.0, t_interval = mono_seconds();
    long interval_steps = 0;
    for (long step = r.start_step; step < r.total; step++) {
        double loss;
        optim_result res;
        if ((rc = train_step(&r, step, &loss, &res, err, errlen)) != VJ_OK) {
            if (rc == VJ_ERR_STOPPED) { /* one rank: the state of the last completed step */
                char why[1024];
                vj_err c = save_checkpoint(&r, step, 1, why, sizeof why);
                if (c) LOG_ERROR("ckpt", "event=final_checkpoint_failed msg=\"%s\"", why);
            }
            return run_free(&r, rc, err, errlen);
        }
        interval_loss += loss;
        interval_steps++;
        r.steps_done = step + 1;
        int last = step + 1 == r.total;
        if (((step + 1) % tc->log_interval == 0 || last) && r.rank == 0) {
            double t = mono_seconds(),
                   rate = interval_steps * tc->global_batch_size / (t - t_interval);
            double eta = (double)(r.total - step - 1) * tc->global_batch_size / rate;
            LOG_INFO("train",
                     "step=%ld/%ld epoch=%.2f loss=%.4f lr=%.3e grad_norm=%.3f img_per_s=%.1f "
                     "eta_s=%.0f",
                     step + 1, r.total, (double)r.images_done / r.train->n,
                     interval_loss / interval_steps, res.lr, res.grad_norm, rate, eta);
            interval_loss = 0.0;
            interval_steps = 0;
            t_interval = mono_seconds();
        }
        hand_progress(&r);
        if (r.stop_agreed) { /* many ranks: all stop after this step, checkpointed */
            rc = save_checkpoint(&r, step + 1, 1, err, errlen);
            if (rc == VJ_OK)
                snprintf(err, errlen, "stopped by signal; every rank ended after step %ld%s",
                         step + 1, r.cwriter ? ", checkpointed" : "");
            return run_free(&r, rc ? rc : VJ_ERR_STOPPED, err, errlen);
        }
        if (r.cwriter && (step + 1) % r.cfg->checkpoint.interval_steps == 0 && !last &&
            (rc = save_checkpoint(&r, step + 1, 0, err, errlen)) != VJ_OK)
            return run_free(&r, rc, err, errlen);
        if (tc->eval_interval > 0 && (step + 1) % tc->eval_interval == 0 && !last) {
            int stopped;
            eval_result ev;
            if ((rc = evaluate_and_report(&r, step + 1, &ev, &stopped, err, errlen)) != VJ_OK)
                return run_free(&r, rc, err, errlen);
            if (stopped) {
                snprintf(err, errlen, "stopped by signal during the evaluation at step %ld",
                         step + 1);
                return run_free(&r, VJ_ERR_STOPPED, err, errlen);
            }
            if ((rc = flush_metrics(&r, err, errlen)) != VJ_OK)
                return run_free(&r, rc, err, errlen);
            t_interval = mono_seconds(); /* keep eval time out of the rate */
        }
    }
    if (r.start_step < r.total && (rc = save_checkpoint(&r, r.total, 1, err, errlen)) != VJ_OK)
        return run_free(&r, rc, err, errlen);
    return run_free(&r, finish(&r, err, errlen), err, errlen);
}
