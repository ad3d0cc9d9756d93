/* worker/train/train.c - see train.h. */
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
#include "data.h"
#include "dp.h"
#include "droppath.h"
#include "feed.h"
#include "exitcode.h"
#include "file.h"
#include "freeze.h"
#include "log.h"
#include "loss_scale.h"
#include "mixup.h"
#include "model.h"
#include "model_io.h"
#include "model_init.h"
#include "optim.h"
#include "plan_memory.h"
#include "report.h"
#include "smoothing.h"
#include "step_hold.h"
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
    const int storage = tc->precision == PRECISION_BF16_MIXED   ? OPS_BF16
                        : tc->precision == PRECISION_FP16_MIXED ? OPS_FP16
                                                                : OPS_FP32;
    const vit_ops *cpu = storage == OPS_BF16 ? ops_cpu_bf16()
                         : storage == OPS_FP16 ? ops_cpu_fp16() : ops_cpu();
    if (tc->device == DEVICE_CPU) {
        *out = cpu;
        return 0;
    }
    char why[512] = "";
    const vit_ops *gpu = ops_cuda(storage, why, sizeof why);
    if (gpu) {
        *out = gpu;
        return 0;
    }
    if (tc->device == DEVICE_CUDA) {
        snprintf(err, errlen, "training.device=cuda: %s; use training.device=cpu or auto", why);
        return VJ_ERR_NO_DEVICE;
    }
    LOG_INFO("train", "event=device device=cpu reason=%s", LOGV(why));
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
                 LOGV(list));
    else
        LOG_INFO("train", "event=dims_not_multiple_of_8 dims=%s", LOGV(list));
}


/* One training run: what train_run sets up, uses and frees. */
typedef struct {
    const vit_job_config *cfg;
    const train_options *opt;
    const vit_ops *ops;
    feed *feed; /* the training and test samples */
    vit_model *model;
    dp *dp; /* the data-parallel strategy: the state's layout over the ranks */
    float *images; /* one micro-batch */
    int *labels;
    float *targets;  /* training.labelSmoothing or mixing: the micro-batch's target rows, else NULL */
    float *dp_scale; /* training.dropPath: the micro-batch's drop path scales, else NULL */
    int mixing;      /* data.mixup / data.cutmix: targets are mixup's (smoothing folded in) */
    mixup_params mix;
    FILE *metrics; /* NULL without --metrics */
    int threads, micro, accum;
    int rank, world; /* this rank's index and their count */
    size_t planned_bytes; /* the backend's allocations as planned (jobplan_memory) */
    /* checkpoints (checkpoint.uri): the store and the background writer */
    ckpt_store *cstore;
    ckpt_writer *cwriter;
    long start_step;             /* steps done before this process (resumed) */
    long done_epoch, done_index; /* the loader's position after the last completed step */
    int resumed, resumed_world;  /* resumed from a checkpoint, and the world size that wrote it */
    char *resumed_loader;        /* its loader positions (JSON; "" none) */
    int stop_agreed;             /* many ranks: a stop was asked; every rank ends after this step */
    char threads_source[64];
    long steps_per_epoch, total;
    optimizer_config oc; /* training.optimizer, its warmup that of `total` steps */
    /* progress */
    double t_train, last_loss; /* t_train: this process's training time */
    long images_done;
    long images_start; /* images_done when this process started training (a resume's) */
    long skipped; /* bad samples skipped by all ranks */
    lscale *lscale; /* fp16-mixed: the loss scaler (loss_scale.h), else NULL */
    float *loss_host; /* the steps' per-sample losses, read back without a wait:
                       * pinned (ops.h host_alloc), two steps' worth (by parity),
                       * accum x micro each */
    unsigned long waits_at, step_waits; /* ops.h host_waits: before this step, and
                                         * summed over the steps after the first */
    const char *inject; /* test only: VITJOB_TEST_INJECT_OVERFLOW (loss_scale.h) */
    step_hold *hold;    /* test only: VITJOB_TEST_HOLD (step_hold.h), else NULL */
    /* rank 0 in Kubernetes: the writer of the job's status.progress (else
     * NULL), the newest stored checkpoint handed to it, and the rate it is
     * told (over windows of >= 2 s of training time) */
    report *rep;
    long steps_done, ckpt_reported;
    long ckpt_generation; /* the checkpoints' writer generation (ckpt_resume's) */
    double rate, rate_t;
    long rate_images;
    double test_accuracy; /* the newest evaluation's (the EMA's with one); NAN: none yet */
    long test_step;       /* the step it was made at */
} run;

static int stop_set(const run *r) { return r->opt->stop_flag && *r->opt->stop_flag; }

/* Epochs done, as a fraction: images seen over the training set's size. */
static double train_epochs(const run *r)
{
    uint64_t n = r->feed ? feed_train_samples(r->feed) : 0;
    return n ? (double)r->images_done / (double)n : 0.0;
}

typedef struct {
    double accuracy, loss;
} eval_result;

/* Accuracy and mean loss over the whole test split, in batches of the
 * micro-batch size. With many ranks each evaluates its part (all ranks
 * run the same number of forward passes, as a sharded strategy needs: a rank
 * whose part has run out computes one image and ignores it) and the sums
 * are added over ranks. Stops early (*stopped = 1) when the stop flag is
 * set, so that SIGTERM is honoured promptly. */
static vj_err evaluate(run *r, eval_result *out, int *stopped, char *err, size_t errlen)
{
    vit_model *m = r->model;
    const int K = model_num_classes(m);
    double sums[3] = {0.0, 0.0, 0.0}; /* correct, loss, samples */
    long batches = 0;
    *stopped = 0;
    vj_err rc = feed_eval_begin(r->feed, &batches, err, errlen);
    for (long k = 0; rc == VJ_OK && k < batches; k++) {
        if (stop_set(r) && r->world == 1) { /* many ranks: every rank evaluates to the end */
            *stopped = 1;
            break;
        }
        int n = 0;
        r->ops->wait_host(r->images); /* no upload still reads it (pinned) */
        if ((rc = feed_eval_next(r->feed, r->images, r->labels, &n, err, errlen)) != VJ_OK) break;
        if (n == 0) r->labels[0] = 0; /* this rank's part has run out: one image, ignored */
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
        sums[2] += n;
    }
    feed_eval_end(r->feed);
    if (rc || *stopped) return rc;
    rc = dp_sync(r->dp, err, errlen);
    if (rc == VJ_OK) rc = dp_sum(r->dp, sums, 3, err, errlen);
    if (rc) return rc;
    out->accuracy = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
    out->loss = sums[2] > 0 ? sums[1] / sums[2] : 0.0;
    return VJ_OK;
}

/* Evaluates on the test split (every rank) and reports it (rank 0): a log
 * line and, with a metrics file, a JSON line. With training.ema, the model
 * evaluated is the EMA's when ema is 1 and the raw weights' when 0, and
 * both lines say which (ema=1, "ema":true); without, ema is -1 and they say
 * nothing of it. The weights are the raw ones again when this returns,
 * unless keep_ema. */
static vj_err evaluate_and_report(run *r, long step, int ema, int keep_ema, eval_result *ev,
                                  int *stopped, char *err, size_t errlen)
{
    vj_err rc = dp_use_ema(r->dp, ema == 1, err, errlen);
    if (rc == VJ_OK) rc = evaluate(r, ev, stopped, err, errlen);
    if (rc == VJ_OK && !keep_ema) rc = dp_use_ema(r->dp, 0, err, errlen);
    if (rc || *stopped || r->rank != 0) return rc;
    const char *which = ema < 0 ? "" : ema ? " ema=1" : " ema=0";
    if (ema != 0) { /* the model the summary's test_accuracy is of */
        r->test_accuracy = ev->accuracy;
        r->test_step = step;
    }
    LOG_INFO("eval", "step=%ld test_accuracy=%.4f test_loss=%.4f train_seconds=%.2f%s", step,
             ev->accuracy, ev->loss, r->t_train, which /* pairs: " ema=0|1" or "" */);
    if (r->metrics)
        fprintf(r->metrics, "{\"step\":%ld,\"test_accuracy\":%.6f,\"train_seconds\":%.3f%s}\n",
                step, ev->accuracy, r->t_train,
                ema < 0 ? "" : ema ? ",\"ema\":true" : ",\"ema\":false");
    return VJ_OK;
}

/* The data sets, checked against the model, and the number of steps. */
static vj_err load_data(run *r, char *err, size_t errlen)
{
    const vit_job_config *cfg = r->cfg;
    const training_config *tc = &cfg->training;
    feed_options fo = {.cfg = cfg, .ops = r->ops, .comm = r->opt->comm, .rank = r->rank,
                       .world = r->world, .threads = r->threads};
    vj_err rc = feed_new(&r->feed, &fo, err, errlen);
    if (rc) return rc;
    r->steps_per_epoch = feed_epoch_steps(r->feed, 0);
    if (r->steps_per_epoch < 1) {
        snprintf(err, errlen, "training.globalBatchSize=%d exceeds the %llu training images "
                 "(with %d ranks, data.maxBadFraction's reserve and the split of shards "
                 "over ranks)", tc->global_batch_size,
                 (unsigned long long)feed_train_samples(r->feed), r->world);
        return VJ_ERR_CONFIG;
    }
    r->total = tc->steps > 0 ? tc->steps : feed_total_steps(r->feed, tc->epochs);
    r->oc = tc->optimizer;
    r->oc.warmup_steps = config_warmup_steps(cfg, r->total); /* unset: follows the run's */
    if (r->oc.warmup_steps > r->total) {
        snprintf(err, errlen, "training.optimizer.warmupSteps=%d exceeds the %ld steps of "
                 "training.epochs=%d", r->oc.warmup_steps, r->total, tc->epochs);
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

/* The backend's peak of its own allocations (ops_cpu_peak_bytes,
 * ops_cuda_peak_bytes) beside the plan of them (jobplan_memory), once at
 * the end: what tests/plan.bats holds the planner to. */
static void log_memory_peak(const run *r)
{
    size_t peak = r->ops->gpu ? ops_cuda_peak_bytes() : ops_cpu_peak_bytes();
    LOG_INFO("train", "event=memory rank=%d peak_bytes=%zu planned_bytes=%zu", r->rank, peak,
             r->planned_bytes);
}

/* The memory the run needs (jobplan_memory, the planner's sum: the
 * backend's allocations and the batch buffers and staging; the data is
 * loaded by now, so it counts as used) against what this process may take:
 * on the CPU, where the backend's memory is the host's. */
static vj_err check_memory(run *r, char *err, size_t errlen)
{
    jobplan_mem pm;
    vj_err rc = jobplan_memory(r->cfg, r->ops, r->world, r->rank, r->opt->comm != NULL, 0, &pm,
                               err, errlen);
    if (rc) return rc;
    r->planned_bytes = pm.backend_bytes;
    if (r->ops->gpu) return VJ_OK; /* the backend reports what it cannot allocate */
    const size_t need = pm.check_bytes, model = pm.backend_bytes - pm.optim_bytes - pm.ema_bytes;
    char source[64];
    long long avail = sysres_memory_available("", source, sizeof source);
    if (avail >= 0 && need > (size_t)avail) {
        snprintf(err, errlen,
                 "the run needs %zu bytes of host memory (model %zu, optimizer state %zu, "
                 "batches and staging %zu) but %lld are available (%s); lower model.dim, "
                 "model.depth or training.microBatchSize, turn on "
                 "training.activationCheckpointing, or give the pod more memory "
                 "(`vitjob-worker plan` says what fits)",
                 need, model, pm.optim_bytes + pm.ema_bytes, pm.batch_bytes, avail, source);
        return VJ_ERR_TOO_LARGE;
    }
    LOG_DEBUG("train", "event=memory need_bytes=%zu available_bytes=%lld source=%s", need,
              avail, LOGV(source));
    return VJ_OK;
}

/* data.mixup / data.cutmix (worker/data/mixup.h): the parameters and the
 * targets buffer, when on. */
static vj_err mix_setup(run *r, char *err, size_t errlen)
{
    const vit_job_config *cfg = r->cfg;
    if (!mixup_enabled(&cfg->data)) return VJ_OK;
    const int K = cfg->model.num_classes;
    mixup_params_from_config(&r->mix, &cfg->data, K, cfg->training.label_smoothing);
    r->mixing = 1;
    if (!r->targets) r->targets = malloc(sizeof(float) * (size_t)r->micro * (size_t)K);
    if (!r->targets) {
        snprintf(err, errlen, "out of memory for the mixup targets");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    if (r->rank == 0)
        LOG_INFO("train", "event=mixup mixup_alpha=%g cutmix_alpha=%g cutmix_minmax=%s prob=%g "
                 "switch_prob=%g label_smoothing=%g mode=batch", r->mix.mixup_alpha,
                 r->mix.has_minmax ? 1.0 : r->mix.cutmix_alpha, r->mix.has_minmax ? "set" : "unset",
                 r->mix.prob, r->mix.switch_prob, r->mix.smoothing);
    return VJ_OK;
}

/* Mixes micro-batch a of this rank's part of step `step` in place and
 * fills r->targets: its draw is a function of the seed, the step and the
 * micro-batch's place in the global batch (mixup_stream), never of time. */
static vj_err mix_micro_batch(run *r, long step, int a, char *err, size_t errlen)
{
    const model_config *mc = &r->cfg->model;
    rng_state rs;
    mixup_stream(&rs, r->cfg->training.seed, step, (long)r->rank * r->accum + a);
    if (mixup_batch(&r->mix, &rs, r->images, r->labels, r->micro, mc->channels, mc->image_size,
                    mc->image_size, r->targets, NULL, err, errlen))
        return VJ_ERR_DATA;
    return VJ_OK;
}

/* The backend, the model with its first weights, the optimizer, the batch
 * buffers, the data loader and the metrics file. */
static vj_err build(run *r, char *err, size_t errlen)
{
    const vit_job_config *cfg = r->cfg;
    const model_config *mc = &cfg->model;
    const training_config *tc = &cfg->training;
    vj_err rc = VJ_OK;
    report_dims(mc, r->ops);
    /* with many ranks a stop is honoured at a step's end, where all agree */
    model_options mopts = {.activation_checkpointing = tc->activation_checkpointing,
                           .stop = r->world == 1 ? r->opt->stop_flag : NULL,
                           .drop_path = tc->drop_path > 0};
    dp_options dpo = {.comm = r->opt->comm, .ops = r->ops, .mc = mc, .oc = &r->oc,
                      .total_steps = r->total, .mode = tc->sharding, .ema = &tc->ema};
    if ((rc = dp_new(&r->dp, &dpo, &mopts, err, errlen)) != VJ_OK ||
        (rc = check_memory(r, err, errlen)) != VJ_OK ||
        (rc = dp_prepare(r->dp, &mopts, err, errlen)) != VJ_OK ||
        (rc = model_new(&r->model, mc, r->micro, &mopts, r->ops, err, errlen)) != VJ_OK)
        return rc;
    if (mc->init[0]) {
        /* a file or checkpoint, adapted as timm does (model_init.h), logged there */
        model_init_options io = {.uri = mc->init, .endpoint = cfg->checkpoint.endpoint,
                                 .load = {.head = mc->init_head, .seed = tc->seed}};
        if ((rc = model_init_load(r->model, &io, err, errlen)) != VJ_OK) return rc;
    } else if (model_init_random(r->model, tc->seed) != 0) {
        snprintf(err, errlen, "out of host memory for the initial weights");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    /* training.freeze before the optimizer state, which leaves frozen tensors out */
    if ((rc = freeze_model(r->model, tc, r->rank == 0, NULL, err, errlen)) != VJ_OK ||
        (rc = dp_attach(r->dp, r->model, err, errlen)) != VJ_OK)
        return rc;
    if (tc->optimizer.layer_decay > 0) /* optim.c applies it (layer_decay.h) */
        LOG_INFO("train", "event=layer_decay decay=%g layers=%d head_scale=1 stem_scale=%.6g",
                 tc->optimizer.layer_decay, mc->depth + 2,
                 pow(tc->optimizer.layer_decay, mc->depth + 1));
    const size_t image_bytes = sizeof(float) * (size_t)r->micro * model_image_floats(r->model);
    r->images = malloc(image_bytes);
    r->labels = malloc(sizeof(int) * (size_t)r->micro);
    if (tc->label_smoothing > 0)
        r->targets = malloc(sizeof(float) * (size_t)r->micro * mc->num_classes);
    if (tc->drop_path > 0) r->dp_scale = malloc(sizeof(float) * (size_t)r->micro * 2 * mc->depth);
    if (!r->images || !r->labels || (tc->label_smoothing > 0 && !r->targets) ||
        (tc->drop_path > 0 && !r->dp_scale)) {
        snprintf(err, errlen, "out of memory for batch buffers");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    /* on a GPU, each micro-batch's upload is then one DMA (kernels/ops.h);
     * where it cannot be pinned, uploads stage it */
    (void)r->ops->pin(r->images, image_bytes);
    r->loss_host = r->ops->host_alloc(sizeof(float) * 2 * (size_t)r->accum * (size_t)r->micro);
    if (!r->loss_host) {
        snprintf(err, errlen, "out of memory for the losses' readback");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    if ((rc = mix_setup(r, err, errlen)) != VJ_OK)
        return rc;
    if (r->ops->fp16) { /* fp16-mixed: GradScaler's dynamic loss scaling */
        const lscale_params lp = lscale_defaults();
        if (lscale_new(&r->lscale, &lp) != 0) {
            snprintf(err, errlen, "out of memory for the loss scaler");
            return VJ_ERR_OUT_OF_MEMORY;
        }
        r->inject = getenv("VITJOB_TEST_INJECT_OVERFLOW");
        if (r->rank == 0)
            LOG_INFO("train", "event=loss_scaler init_scale=%g growth_factor=%g "
                     "backoff_factor=%g growth_interval=%ld%s", (double)lp.init_scale,
                     lp.growth_factor, lp.backoff_factor, lp.growth_interval,
                     r->inject && r->inject[0] ? " test_inject_overflow=1" : "");
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

/* Forward of micro-batch a of step `step` with the training's
 * regularisation: drop path's masks, keyed by each sample's place in the
 * step's global batch (rank q holds part q), and label smoothing's targets.
 * Queued: its losses are copied to `losses` (pinned) without a wait. */
static void train_forward(run *r, long step, int a, float *losses)
{
    const training_config *tc = &r->cfg->training;
    if (r->dp_scale) {
        const long first = ((long)r->rank * r->accum + a) * r->micro;
        droppath_draw(r->dp_scale, NULL, tc->drop_path, r->cfg->model.depth, r->micro, tc->seed,
                      step, first);
        model_set_drop_path(r->model, r->dp_scale, r->micro);
    }
    if (!r->targets) {
        model_forward_queue(r->model, r->images, r->labels, NULL, r->micro, losses);
        return;
    }
    if (!r->mixing) /* mixing filled them, the smoothing folded in (mix_micro_batch) */
        smoothing_targets(r->targets, r->labels, r->micro, r->cfg->model.num_classes,
                          tc->label_smoothing);
    model_forward_queue(r->model, r->images, NULL, r->targets, r->micro, losses);
}

/* A step queued by train_step and not yet finished (finish_step). */
typedef struct {
    long step;
    optim_result res;
    int slot;    /* its losses: r->loss_host's half `slot` */
    double loss; /* the global batch's mean loss once known (NAN: not yet) */
} step_out;

/* This rank's summed loss of step slot `slot`: each micro-batch's mean
 * (model_mean_loss) times its size, added in order, in double, once the
 * copies are there. */
static double rank_loss(run *r, int slot)
{
    const float *l = r->loss_host + (size_t)slot * (size_t)r->accum * (size_t)r->micro;
    r->ops->wait_host(l);
    double sum = 0.0;
    for (int a = 0; a < r->accum; a++)
        sum += model_mean_loss(l + (size_t)a * (size_t)r->micro, r->micro) * (double)r->micro;
    return sum;
}

/* One optimizer step: the micro-batches of this rank's part of a global
 * batch, accumulated, then the update. *loss is the global batch's mean
 * loss. A stop request abandons the step between micro-batches or between
 * blocks (VJ_ERR_STOPPED): the weights are then those of the last
 * completed step. */
static vj_err train_step(run *r, long step, step_out *out, char *err, size_t errlen)
{
    r->waits_at = r->ops->host_waits();
    const training_config *tc = &r->cfg->training;
    const int G = tc->global_batch_size;
    /* each sample's loss enters the mean over the global batch, so the
     * accumulated micro-batch gradients (over every rank) add up to the
     * global batch's */
    float dloss = 1.0f / (float)G;
    if (r->lscale) { /* fp16-mixed: the seed times the loss scale (a power of two: exact) */
        dloss *= lscale_scale(r->lscale);
        dp_set_loss_scale(r->dp, lscale_inv(r->lscale), lscale_skipped(r->lscale));
    }
    double t0 = mono_seconds();
    dp_zero_grads(r->dp);
    out->step = step;
    out->slot = (int)(step & 1);
    out->loss = NAN;
    float *losses = r->loss_host + (size_t)out->slot * (size_t)r->accum * (size_t)r->micro;
    /* epochs end at optimizer-step (global batch) boundaries, so that a step
     * never mixes two epochs whatever the micro-batch size; rank q reads the
     * q-th part of the step's samples, so the samples the job sees do not
     * depend on the world size */
    feed_step_begin(r->feed);
    int a = 0;
    const char *where = NULL;
    const int solo = r->world == 1; /* many ranks finish the step together */
    for (; a < r->accum && !(solo && stop_set(r)); a++) {
        r->ops->wait_host(r->images); /* the last upload from it is done (pinned) */
        vj_err rd = feed_next(r->feed, r->images, r->labels, err, errlen);
        if (rd == VJ_OK && r->mixing) rd = mix_micro_batch(r, step, a, err, errlen);
        if (rd) return rd;
        train_forward(r, step, a, losses + (size_t)a * (size_t)r->micro);
        if ((where = model_abandoned(r->model)) != NULL) break;
        /* test only: an overflow of this rank's loss gradient (loss_scale.h) */
        model_backward(r->model, r->lscale && a == 0 && lscale_injected(r->inject, step + 1,
                                                                        r->rank)
                                     ? INFINITY : dloss);
        if ((where = model_abandoned(r->model)) != NULL) break;
    }
    if (solo && stop_set(r)) {
        snprintf(err, errlen, "stopped by signal during step %ld (micro-batch %d of %d%s%s); the "
                 "step was abandoned, the last completed step is %ld", step + 1,
                 a < r->accum ? a + 1 : a, r->accum, where ? ", " : "", where ? where : "", step);
        return VJ_ERR_STOPPED;
    }
    /* many ranks: the loss (read now: a wait), whether to stop, and the bad
     * samples skipped; one rank reads its loss a step later (finish_step) */
    double sums[3] = {solo ? 0.0 : rank_loss(r, out->slot), stop_set(r) ? 1.0 : 0.0,
                      (double)feed_skipped(r->feed)};
    vj_err rc = dp_sync(r->dp, err, errlen);
    if (rc == VJ_OK && !solo) rc = dp_sum(r->dp, sums, 3, err, errlen);
    r->skipped = (long)sums[2];
    if (rc == VJ_OK) rc = dp_update(r->dp, step, &out->res, err, errlen);
    if (rc) return rc;
    if (r->lscale) { /* every rank saw the same reduced gradients: the same verdict */
        const float used = lscale_scale(r->lscale);
        if (lscale_update(r->lscale, out->res.skipped))
            LOG_WARN("train", "event=step_skipped rank=%d step=%ld reason=non_finite_gradients "
                     "loss_scale=%g next_loss_scale=%g skipped_steps=%ld", r->rank, step + 1,
                     (double)used, (double)lscale_scale(r->lscale), lscale_skipped(r->lscale));
    }
    if (!solo) out->loss = sums[0] / G;
    if (!solo && sums[1] > 0) r->stop_agreed = 1;
    feed_step_end(r->feed);
    feed_position(r->feed, &r->done_epoch, &r->done_index);
    r->t_train += mono_seconds() - t0;
    if (model_status(r->model, err, errlen))
        return VJ_ERR_DEVICE_FAULT; /* retryable from the last checkpoint */
    if (step > r->start_step) r->step_waits += r->ops->host_waits() - r->waits_at;
    return VJ_OK;
}

/* The rest of a queued step, once its results are back: its loss (one rank:
 * read now, from the copies the forwards queued) and gradient norm, the
 * divergence check and the metrics line. Called right after train_step, or
 * (one rank, a step with no checkpoint, evaluation or end after it) after
 * the next step has been queued, so that the device never waits for the
 * host between the two. */
static vj_err finish_step(run *r, step_out *o, char *err, size_t errlen)
{
    const long step = o->step;
    const double t0 = mono_seconds();
    const int G = r->cfg->training.global_batch_size;
    if (r->world == 1) o->loss = rank_loss(r, o->slot) / G; /* many: train_step's sum */
    dp_collect(r->dp, &o->res);
    r->t_train += mono_seconds() - t0;
    if (model_status(r->model, err, errlen))
        return VJ_ERR_DEVICE_FAULT; /* retryable from the last checkpoint */
    r->images_done += G;
    const double loss = o->loss;
    const optim_result *res = &o->res;
    if (!isfinite(loss)) {
        snprintf(err, errlen, "loss is %f at step %ld (diverged); lower training.optimizer.lr",
                 loss, step + 1);
        return VJ_ERR_DIVERGED;
    }
    r->last_loss = loss;
    if (r->metrics) {
        char gn[32] = "null", ls[96] = ""; /* a skipped step's norm is inf or NaN: null */
        if (isfinite(res->grad_norm)) snprintf(gn, sizeof gn, "%.17g", res->grad_norm);
        if (r->lscale) /* the scale the next step uses, the steps skipped so far */
            snprintf(ls, sizeof ls, ",\"loss_scale\":%.9g,\"skipped_steps\":%ld%s",
                     (double)lscale_scale(r->lscale), lscale_skipped(r->lscale),
                     res->skipped ? ",\"skipped\":true" : "");
        fprintf(r->metrics, "{\"step\":%ld,\"loss\":%.17g,\"lr\":%.17g,\"grad_norm\":%s%s}\n",
                step + 1, loss, res->lr, gn, ls);
    }
    return flush_metrics(r, err, errlen);
}

/* The final evaluation (every rank), the export and the summary line (rank
 * 0). With training.ema the raw weights are evaluated first, then the EMA
 * weights, which stay in the model for the export (as timm saves its EMA
 * model): the summary's test_accuracy is the EMA's, raw_test_accuracy the
 * weights'. */
static vj_err finish(run *r, char *err, size_t errlen)
{
    const model_config *mc = &r->cfg->model;
    const training_config *tc = &r->cfg->training;
    int stopped = 0;
    eval_result ev = {NAN, NAN}, raw = {NAN, NAN};
    const int has_test = feed_has_test(r->feed), ema = dp_has_ema(r->dp);
    vj_err rc = VJ_OK;
    if (has_test && ema)
        rc = evaluate_and_report(r, r->total, 0, 0, &raw, &stopped, err, errlen);
    if (rc == VJ_OK && !stopped)
        rc = has_test ? evaluate_and_report(r, r->total, ema ? 1 : -1, 1, &ev, &stopped, err,
                                            errlen)
                      : dp_use_ema(r->dp, 1, err, errlen); /* the export is the EMA's */
    if (rc == VJ_OK && stopped) {
        snprintf(err, errlen, "stopped by signal during the final evaluation");
        rc = VJ_ERR_STOPPED;
    }
    if (rc) return rc;
    if (r->rank != 0) {
        /* the export may read the parameters through collectives: take part */
        if (tc->export_path[0] && (rc = dp_export_part(r->dp, err, errlen)) != VJ_OK)
            return rc;
        log_memory_peak(r);
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
            int e = errno;
            if (dp_sync(r->dp, err, errlen) != VJ_OK) return VJ_ERR_PEER_LOST;
            return write_error_class(e);
        }
        LOG_INFO("train", "event=exported path=%s weights=%s", LOGV(tc->export_path),
                 ema ? "ema" : "raw");
    }
    log_memory_peak(r);
    /* this process's images over this process's time: a resume's earlier
     * steps are in images_done, not in t_train */
    double ips = r->t_train > 0 ? (double)(r->images_done - r->images_start) / r->t_train : 0.0;
    char raw_words[64] = ""; /* with an EMA: test_accuracy is the EMA's, and the weights' */
    if (ema) snprintf(raw_words, sizeof raw_words, " ema=1 raw_test_accuracy=%.4f", raw.accuracy);
    LOG_INFO("train",
             "event=done steps=%ld final_loss=%.4f test_accuracy=%.4f%s img_per_s=%.1f "
             "train_seconds=%.1f peak_rss_mib=%.1f",
             r->total, r->last_loss, ev.accuracy, raw_words /* pairs: ema, raw_test_accuracy */,
             ips, r->t_train, peak_rss_mib());
    char acc[32] = "null", tl[32] = "null"; /* no test split: no accuracy */
    char raws[96] = ""; /* with an EMA: the raw weights' too */
    if (has_test) {
        snprintf(acc, sizeof acc, "%.6f", ev.accuracy);
        snprintf(tl, sizeof tl, "%.6f", ev.loss);
    }
    if (ema && has_test)
        snprintf(raws, sizeof raws, ",\"raw_test_accuracy\":%.6f,\"raw_test_loss\":%.6f",
                 raw.accuracy, raw.loss);
    else if (ema)
        snprintf(raws, sizeof raws, ",\"raw_test_accuracy\":null,\"raw_test_loss\":null");
    printf("{\"event\":\"summary\",\"steps\":%ld,\"final_loss\":%.9g,\"test_accuracy\":%s,"
           "\"test_loss\":%s,\"ema\":%s%s,\"images_per_sec\":%.3f,\"train_seconds\":%.3f,"
           "\"params\":%zu,\"threads\":%d,\"peak_rss_mib\":%.1f,\"skipped_samples\":%llu,"
           "\"skipped_steps\":%ld,\"data_wait_seconds\":%.3f,\"step_host_waits\":%lu}\n",
           r->total, r->last_loss, acc, tl, ema ? "true" : "false", raws, ips, r->t_train,
           model_num_params(r->model), r->threads, peak_rss_mib(),
           (unsigned long long)feed_skipped(r->feed),
           r->lscale ? lscale_skipped(r->lscale) : 0L, feed_wait_seconds(r->feed), r->step_waits);
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
                     .epoch = train_epochs(r),
                     .loss = r->steps_done > r->start_step ? r->last_loss : NAN,
                     .images_per_second = rate,
                     .eta_seconds = rate > 0 ? (double)(r->total - r->steps_done) * G / rate : -1,
                     .last_checkpoint_step = -1, .skipped_samples = r->skipped,
                     .test_accuracy = r->test_accuracy, .test_step = r->test_step};
    long stored = ckpt_stored_step(r->cwriter);
    if (stored < 0 && r->start_step > 0) stored = r->start_step; /* resumed from it */
    if (stored >= 0) {
        const char *uri = r->cfg->checkpoint.uri;
        size_t n = strlen(uri);
        while (n > 0 && uri[n - 1] == '/') n--;
        char name[32];
        ckpt_step_name(stored, name, sizeof name);
        p.last_checkpoint_step = stored;
        snprintf(p.last_checkpoint_uri, sizeof p.last_checkpoint_uri, "%.*s/%s", (int)n, uri,
                 name);
    }
    if (stored > r->ckpt_reported) {
        r->ckpt_reported = stored;
        report_checkpoint(r->rep, &p);
    } else {
        report_progress(r->rep, &p);
    }
}

/* hand_progress as a test hold's tick (step_hold.h): a checkpoint stored
 * while the loop waits is reported then, not after the next step. */
static void hand_progress_of(void *r) { hand_progress(r); }

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
    feed_free(r->feed);
    free(r->resumed_loader);
    if (r->images) r->ops->unpin(r->images);
    if (r->loss_host) r->ops->host_free(r->loss_host);
    free(r->images);
    free(r->labels);
    free(r->targets);
    free(r->dp_scale);
    lscale_free(r->lscale);
    step_hold_free(r->hold);
    model_free(r->model); /* before the strategy: it may hold the model's shard */
    dp_free(r->dp);
    ckpt_writer_free(r->cwriter);
    ckpt_store_free(r->cstore);
    return rc;
}

/* Compute threads: training.threads when set (a warning when above the CPUs
 * the affinity mask and the cgroup quota allow), else OMP_NUM_THREADS when
 * the environment sets it (as torchrun does), else what the CPU affinity and
 * the cgroup's CPU quota allow (never one per core of a node the pod may
 * use two of). */
static int pick_threads(const training_config *tc, char *source, size_t srclen)
{
    if (tc->threads > 0) {
        /* kept as asked (the user may know better, e.g. threads that wait on
         * I/O), but said: more threads than CPUs only time-slice */
        char cpus_source[64];
        int cpus = sysres_cpus("", 0, cpus_source, sizeof cpus_source);
        if (tc->threads > cpus)
            LOG_WARN("train", "event=threads_above_cpus threads=%d cpus=%d cpus_source=%s msg=%s",
                     tc->threads, cpus, LOGV(cpus_source),
                     LOGVF("training.threads=%d exceeds the %d CPUs this process may use; "
                           "kept as set", tc->threads, cpus));
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
        LOG_WARN("train", "event=ignored_env name=OMP_NUM_THREADS value=%s reason=\"not a "
                 "count in [1, 1024]\"", LOGV(env));
    }
    return ops_cpu_set_threads(sysres_cpus("", 0, source, srclen));
}


/* The reporter's gate (report_options.may_write): the heartbeat's. */
static int may_write(const void *ctx) { return hb_ok(ctx); }

/* Saves the state after `steps` completed steps; with wait, returns once
 * it is stored (the end of training, a stop), else while it uploads. */
static vj_err save_checkpoint(run *r, long steps, int wait, char *err, size_t errlen)
{
    if (!r->cwriter) return VJ_OK;
    if (!hb_ok(r->opt->hb)) { /* woken from a freeze, or a peer is lost: write nothing */
        snprintf(err, errlen, "checkpoint of step %ld not saved: this rank's heartbeat went "
                 "unanswered or a peer is lost", steps);
        return VJ_ERR_PEER_LOST;
    }
    ckpt_meta meta = {.step = steps, .total_steps = r->total, .epoch = r->done_epoch,
                      .index = r->done_index,
                      .images_done = r->images_done, .world_size = r->world,
                      .n_params = model_num_params(r->model), .ema = dp_has_ema(r->dp)};
    if (r->lscale) {
        meta.loss_scale = lscale_scale(r->lscale);
        meta.scale_growth_tracker = lscale_growth_tracker(r->lscale);
        meta.skipped_steps = lscale_skipped(r->lscale);
    }
    snprintf(meta.sharding, sizeof meta.sharding, "%s", dp_name(r->dp));
    freeze_model_json(&r->cfg->model, &r->cfg->training, meta.model, sizeof meta.model);
    vj_err rl = feed_checkpoint_state(r->feed, r->dp, meta.loader, sizeof meta.loader, err,
                                      errlen);
    if (rl) return rl;
    ckpt_segment *segs = NULL;
    int n = dp_segments(r->dp, &segs);
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
    if (st) return ckpt_status_class(st);
    LOG_INFO("ckpt", "event=checkpoint step=%ld rank=%d wait=%d stall_s=%.4f copy_s=%.4f%s",
             steps, r->rank, wait, stall_s, copy_s, wait ? " stored=1" : "");
    return VJ_OK;
}

static ckpt_status load_step(void *ctx, ckpt_store *store, const ckpt_manifest *man, char *err,
                             size_t errlen)
{
    return dp_load(ctx, store, man, err, errlen);
}

/* A resume whose run was planned for another number of steps than this one
 * (training.steps changed, or training.epochs): one warning line (rank 0)
 * saying what becomes of the learning-rate schedule. A checkpoint that
 * does not say (written before the manifest's "totalSteps") gives none. */
static void warn_total_changed(const run *r, long ckpt_step, long ckpt_total)
{
    if (r->rank != 0 || ckpt_total <= 0 || ckpt_total == r->total) return;
    const training_config *tc = &r->cfg->training;
    char from[64], msg[640];
    if (tc->steps > 0)
        snprintf(from, sizeof from, "training.steps=%ld", tc->steps);
    else
        snprintf(from, sizeof from, "training.epochs=%d", tc->epochs);
    int n = snprintf(msg, sizeof msg, "checkpoint step %ld was written by a run of %ld steps "
                     "and this run has %ld (%s): the learning-rate schedule is now computed "
                     "for %ld steps", ckpt_step, ckpt_total, r->total, from, r->total);
    if (ckpt_step >= r->total) {
        snprintf(msg + n, sizeof msg - (size_t)n, ", and none of them is left to train");
    } else {
        optimizer_config was = r->oc; /* the schedule the checkpoint's run followed */
        was.warmup_steps = config_warmup_steps(r->cfg, ckpt_total);
        n += snprintf(msg + n, sizeof msg - (size_t)n, ", so step %ld trains at lr=%.3g "
                      "instead of %.3g", ckpt_step + 1, optim_lr_at(&r->oc, ckpt_step, r->total),
                      optim_lr_at(&was, ckpt_step, ckpt_total));
        if (r->oc.schedule == SCHEDULE_COSINE)
            snprintf(msg + n, sizeof msg - (size_t)n, " and the cosine decay reaches "
                     "training.optimizer.minLr at step %ld instead of %ld", r->total, ckpt_total);
    }
    LOG_WARN("train", "event=total_steps_changed checkpoint_step=%ld checkpoint_total_steps=%ld "
             "total_steps=%ld msg=%s", ckpt_step, ckpt_total, r->total, LOGV(msg));
}

/* At start, with checkpoint.uri: the store, the newest complete checkpoint
 * loaded into this rank's state whatever world size and sharding wrote it
 * (ckpt_resume: the ranks agree on it), and the writer. */
static vj_err resume(run *r, char *err, size_t errlen)
{
    const checkpoint_config *cc = &r->cfg->checkpoint;
    if (!cc->uri[0]) return VJ_OK;
    ckpt_status st = ckpt_store_open(&r->cstore, cc->uri, cc->endpoint, err, errlen);
    if (st) return ckpt_status_class(st);
    char mine[512];
    freeze_model_json(&r->cfg->model, &r->cfg->training, mine, sizeof mine);
    ckpt_resume_options o = {.store = r->cstore, .r = r->opt->rdzv, .rank = r->rank,
                             .world = r->world,
                             .timeout_s = r->cfg->training.rendezvous_timeout_seconds,
                             .uri = cc->uri, .model_json = mine,
                             .n_params = model_num_params(r->model), .load = load_step,
                             .ctx = r->dp, .restart = r->opt->generation,
                             .generation = &r->ckpt_generation};
    ckpt_meta meta;
    vj_err rc = ckpt_resume(&o, &meta, err, errlen);
    if (rc) return rc;
    if (meta.step >= 0) {
        r->start_step = meta.step;
        r->images_done = meta.images_done;
        r->done_epoch = meta.epoch;
        r->done_index = meta.index;
        r->resumed = 1;
        r->resumed_world = meta.world_size;
        warn_total_changed(r, meta.step, meta.total_steps);
        /* fp16-mixed: the scaler where it was (a step saved without one: a new scaler) */
        if (r->lscale && meta.loss_scale > 0 &&
            lscale_restore(r->lscale, (float)meta.loss_scale, meta.scale_growth_tracker,
                           meta.skipped_steps) != 0) {
            snprintf(err, errlen, "checkpoint step %ld: lossScaler scale=%g growthTracker=%ld "
                     "skippedSteps=%ld is out of range", meta.step, meta.loss_scale,
                     meta.scale_growth_tracker, meta.skipped_steps);
            return VJ_ERR_DATA;
        }
        free(r->resumed_loader);
        if (!(r->resumed_loader = strdup(meta.loader))) {
            snprintf(err, errlen, "out of host memory");
            return VJ_ERR_OUT_OF_MEMORY;
        }
    }
    if (ckpt_writer_new(&r->cwriter, r->cstore, r->opt->rdzv, r->rank, r->world, cc->keep,
                        r->cfg->training.collective_timeout_seconds, err, errlen) != 0)
        return VJ_ERR_OUT_OF_MEMORY;
    ckpt_writer_set_generation(r->cwriter, r->ckpt_generation);
    if (r->opt->hb)
        ckpt_writer_set_gate(r->cwriter, may_write, r->opt->hb);
    return VJ_OK;
}

/* The log line's window: the losses summed since the last line, their
 * count, and when it began. */
typedef struct {
    double loss;
    long steps;
    double t;
} log_window;

/* Whether step `step`, queued, may be finished after the next one is
 * queued: one rank, no loss scaling (its verdict decides the next step),
 * and nothing after it that needs the step complete (the last step, a
 * checkpoint, an evaluation, a stop). */
static int may_defer(const run *r, long step)
{
    const training_config *tc = &r->cfg->training;
    const long done = step + 1;
    if (r->world != 1 || r->lscale || done >= r->total || stop_set(r)) return 0;
    if (r->cwriter && done % r->cfg->checkpoint.interval_steps == 0) return 0;
    if (tc->eval_interval > 0 && done % tc->eval_interval == 0) return 0;
    return 1;
}

/* What follows a finished step: the log line, the progress report, a
 * stop agreed by the ranks, the periodic checkpoint and evaluation.
 * VJ_OK to go on, else the code the run ends with (err set). */
static vj_err after_step(run *r, const step_out *o, log_window *lw, char *err, size_t errlen)
{
    const training_config *tc = &r->cfg->training;
    const long step = o->step;
    vj_err rc;
    lw->loss += o->loss;
    lw->steps++;
    r->steps_done = step + 1;
    if (r->rank == 0) /* small images upscaled on the CPU: the planned time, once */
        feed_warn_upscale(r->feed, r->t_train / (double)(step + 1 - r->start_step),
                          r->total - r->start_step, r->total);
    int last = step + 1 == r->total;
    if (((step + 1) % tc->log_interval == 0 || last) && r->rank == 0) {
        double t = mono_seconds(), rate = lw->steps * tc->global_batch_size / (t - lw->t);
        double eta = (double)(r->total - step - 1) * tc->global_batch_size / rate;
        LOG_INFO("train",
                 "step=%ld/%ld epoch=%.2f loss=%.4f lr=%.3e grad_norm=%.3f img_per_s=%.1f "
                 "eta_s=%.0f",
                 step + 1, r->total, train_epochs(r), lw->loss / lw->steps, o->res.lr,
                 o->res.grad_norm, rate, eta);
        lw->loss = 0.0;
        lw->steps = 0;
        lw->t = mono_seconds();
    }
    hand_progress(r);
    if (r->stop_agreed) { /* many ranks: all stop after this step, checkpointed */
        rc = save_checkpoint(r, step + 1, 1, err, errlen);
        if (rc == VJ_OK)
            snprintf(err, errlen, "stopped by signal; every rank ended after step %ld%s",
                     step + 1, r->cwriter ? ", checkpointed" : "");
        return rc ? rc : VJ_ERR_STOPPED;
    }
    if (r->cwriter && (step + 1) % r->cfg->checkpoint.interval_steps == 0 && !last &&
        (rc = save_checkpoint(r, step + 1, 0, err, errlen)) != VJ_OK)
        return rc;
    if (tc->eval_interval > 0 && (step + 1) % tc->eval_interval == 0 && !last &&
        feed_has_test(r->feed)) {
        int stopped;
        eval_result ev;
        const int ema = dp_has_ema(r->dp) ? 1 : -1; /* the EMA's, when there is one */
        if ((rc = evaluate_and_report(r, step + 1, ema, 0, &ev, &stopped, err, errlen)) != VJ_OK)
            return rc;
        if (stopped) {
            snprintf(err, errlen, "stopped by signal during the evaluation at step %ld",
                     step + 1);
            return VJ_ERR_STOPPED;
        }
        if ((rc = flush_metrics(r, err, errlen)) != VJ_OK) return rc;
        lw->t = mono_seconds(); /* keep eval time out of the rate */
    }
    return VJ_OK;
}

/* finish_step, then after_step: a queued step completed and reported. */
static vj_err complete_step(run *r, step_out *o, log_window *lw, char *err, size_t errlen)
{
    vj_err rc = finish_step(r, o, err, errlen);
    return rc != VJ_OK ? rc : after_step(r, o, lw, err, errlen);
}

vj_err train_run(const vit_job_config *cfg, const train_options *opt, char *err, size_t errlen)
{
    const training_config *tc = &cfg->training;
    run r = {.cfg = cfg, .opt = opt, .rank = opt->rank, .world = opt->world > 1 ? opt->world : 1,
             .test_accuracy = NAN, .test_step = -1};
    if (r.world > 1 && !opt->comm) {
        snprintf(err, errlen, "world size %d without a communicator", r.world);
        return VJ_ERR_UNSUPPORTED;
    }
    r.threads = pick_threads(tc, r.threads_source, sizeof r.threads_source);
    r.micro = tc->micro_batch_size;
    r.accum = config_accum_steps(cfg);
    vj_err rc = VJ_OK;
    rc = freeze_check(tc, &cfg->model, err, errlen); /* before any work */
    if (rc == VJ_OK) rc = step_hold_parse(&r.hold, getenv(STEP_HOLD_ENV), err, errlen);
    if (rc == VJ_OK && !(r.ops = opt->ops)) rc = train_pick_backend(&r.ops, tc, err, errlen);
    if (rc == VJ_OK)
        rc = load_data(&r, err, errlen);
    if (rc == VJ_OK)
        rc = build(&r, err, errlen);
    if (rc == VJ_OK)
        rc = resume(&r, err, errlen);
    if (rc == VJ_OK)
        rc = feed_start(r.feed, r.resumed ? r.start_step : -1, r.done_epoch, r.done_index,
                        r.resumed_loader ? r.resumed_loader : "", r.resumed_world, err, errlen);
    if (rc)
        return run_free(&r, rc, err, errlen);
    r.steps_done = r.start_step;
    r.ckpt_reported = r.start_step > 0 ? r.start_step - 1 : -1; /* the resumed one: reported once */
    r.rate_t = r.t_train;
    r.rate_images = r.images_start = r.images_done;
    if (r.rank == 0) {
        r.rep = report_from_env(&(report_options){.interval_s = tc->report_interval_seconds,
                                                  .may_write = may_write, .may_write_ctx = opt->hb});
        hand_progress(&r);
    }

    LOG_INFO("train",
             "event=start backend=%s precision=%s activation_checkpointing=%d threads=%d "
             "threads_source=%s params=%zu activation_mib=%.1f tokens=%d "
             "steps=%ld steps_per_epoch=%ld global_batch=%d micro_batch=%d accum=%d",
             LOGV(r.ops->name),
             LOGV(r.ops->fp16 ? "fp16-mixed" : r.ops->bf16 ? "bf16-mixed" : "fp32"),
             tc->activation_checkpointing,
             r.threads, LOGV(r.threads_source), model_num_params(r.model),
             model_activation_bytes(r.model) / 1048576.0, model_tokens(r.model), r.total,
             r.steps_per_epoch, tc->global_batch_size, r.micro, r.accum);

    log_window lw = {0.0, 0, mono_seconds()};
    step_out pend; /* one rank: the step queued before this one, not finished */
    int have_pend = 0;
    for (long step = r.start_step; step < r.total; step++) {
        step_out cur;
        if (step_hold_due(r.hold, step + 1)) { /* test only: the step before is finished first */
            if (have_pend) {
                have_pend = 0;
                if ((rc = complete_step(&r, &pend, &lw, err, errlen)) != VJ_OK)
                    return run_free(&r, rc, err, errlen);
            }
            step_hold_wait(r.hold, step + 1, r.rank, opt->stop_flag, hand_progress_of, &r);
        }
        rc = train_step(&r, step, &cur, err, errlen);
        if (have_pend) { /* queued behind it: the step before is done, or nearly */
            have_pend = 0;
            char why[1024];
            vj_err rp = complete_step(&r, &pend, &lw, rc ? why : err, rc ? sizeof why : errlen);
            if (rp != VJ_OK && rc == VJ_OK) return run_free(&r, rp, err, errlen);
        }
        if (rc != VJ_OK) {
            if (rc == VJ_ERR_STOPPED) { /* one rank: the state of the last completed step */
                char why[1024];
                vj_err c = save_checkpoint(&r, step, 1, why, sizeof why);
                if (c) LOG_ERROR("ckpt", "event=final_checkpoint_failed msg=%s", LOGV(why));
            }
            return run_free(&r, rc, err, errlen);
        }
        if (may_defer(&r, step)) {
            pend = cur;
            have_pend = 1;
            continue;
        }
        if ((rc = complete_step(&r, &cur, &lw, err, errlen)) != VJ_OK)
            return run_free(&r, rc, err, errlen);
    }
    if (r.start_step < r.total && (rc = save_checkpoint(&r, r.total, 1, err, errlen)) != VJ_OK)
        return run_free(&r, rc, err, errlen);
    return run_free(&r, finish(&r, err, errlen), err, errlen);
}
