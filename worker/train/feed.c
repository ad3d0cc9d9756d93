/* worker/train/feed.c - see feed.h. */
#include "feed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "data.h"
#include "loader.h"
#include "log.h"
#include "sysres.h"
#include "timefmt.h"

struct feed {
    feed_options o;
    int micro, accum, G;
    /* Fashion-MNIST */
    dataset *train, *test;
    data_loader dl;
    int dl_ready;
    long ev_first, ev_end, ev_next;
    /* shards and folders */
    ld_index *ix, *tix;
    ld_loader *ld, *ev;
    ld_options lo;
    long done_epoch, done_index;
    float mean[3], stdv[3];
    int upscale_warned; /* feed_warn_upscale logged */
};

/* v (n doubles, host) summed over the ranks through the backend's memory,
 * in chunks (a data set's shard counts can be long). */
static vj_err sum_over_ranks(const feed_options *o, double *v, size_t n, char *err,
                             size_t errlen)
{
    if (o->world <= 1 || !o->comm) return VJ_OK;
    const size_t CH = 4096;
    double *dev = o->ops->alloc(sizeof(double) * CH * (size_t)o->world);
    double *host = malloc(sizeof(double) * CH * (size_t)o->world);
    vj_err rc = VJ_OK;
    if (!dev || !host) {
        snprintf(err, errlen, "out of memory sharing the data set's counts");
        rc = VJ_ERR_OUT_OF_MEMORY;
    }
    for (size_t at = 0; rc == VJ_OK && at < n; at += CH) {
        size_t k = n - at < CH ? n - at : CH;
        double *mine = dev + (size_t)o->rank * k;
        o->ops->upload(mine, v + at, sizeof(double) * k);
        if (comm_allgather(o->comm, mine, dev, k * 2, COMM_F32, err, errlen) != 0) {
            rc = VJ_ERR_PEER_LOST;
            break;
        }
        o->ops->download(host, dev, sizeof(double) * k * (size_t)o->world);
        for (size_t i = 0; i < k; i++) {
            double s = 0;
            for (int q = 0; q < o->world; q++) s += host[(size_t)q * k + i];
            v[at + i] = s;
        }
    }
    if (dev) o->ops->release(dev);
    free(host);
    return rc;
}

/* Lists and counts one split over all ranks. A rank whose scan failed still
 * takes part in the sharing, with -1 in its first count, so that every rank
 * fails together (the failing one with the message). */
static vj_err index_split(feed *f, const char *uri, const char *key, ld_index **out, char *err,
                          size_t errlen)
{
    const data_config *dc = &f->o.cfg->data;
    ld_index_options io = {.kind = dc->format == DATA_IMAGEFOLDER ? LD_IMAGEFOLDER : LD_WEBDATASET,
                           .uri = uri, .key = key, .endpoint = f->lo.endpoint,
                           .num_classes = f->o.cfg->model.num_classes,
                           .eval = strcmp(key, "data.testUri") == 0};
    vj_err rc = ld_index_new(out, &io, err, errlen);
    if (rc) return rc; /* the listing is the same on every rank: all fail alike */
    size_t n = ld_index_units(*out);
    double *counts = calloc(n + 1, sizeof *counts);
    if (!counts) {
        snprintf(err, errlen, "out of memory for the data set's counts");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    rc = ld_index_scan(*out, f->o.rank, f->o.world, f->lo.workers, counts + 1, err, errlen);
    if (rc) counts[0] = 1; /* this rank failed */
    char why[512];
    vj_err rs = sum_over_ranks(&f->o, counts, n + 1, rc ? why : err, rc ? sizeof why : errlen);
    if (rc == VJ_OK && rs) rc = rs;
    if (rc == VJ_OK && counts[0] > 0) {
        snprintf(err, errlen, "%s: another rank found the data unreadable (its log says why)",
                 key);
        rc = VJ_ERR_DATA;
    }
    if (rc == VJ_OK) rc = ld_index_set_counts(*out, counts + 1, err, errlen);
    free(counts);
    if (rc == VJ_OK)
        LOG_INFO("data", "event=indexed key=%s uri=%s units=%zu samples=%llu", LOGV(key), LOGV(uri), n,
                 (unsigned long long)ld_index_samples(*out));
    return rc;
}

int feed_default_workers(int threads)
{
    char src[64];
    int cpus = sysres_cpus("", 0, src, sizeof src);
    int w = cpus - threads;
    return w < 1 ? 1 : w;
}

/* The start's warnings of what would otherwise surprise at the end (one
 * line each, rank 0): no test set where the format has none built in, and
 * fewer class folders than model.numClasses. */
static void warn_surprises(const feed *f)
{
    const vit_job_config *cfg = f->o.cfg;
    const data_config *dc = &cfg->data;
    if (f->o.rank != 0) return;
    if (dc->format != DATA_FASHION_MNIST && !dc->test_uri[0])
        LOG_WARN("data", "event=no_test_set key=data.testUri format=%s msg=%s",
                 dc->format == DATA_IMAGEFOLDER ? "imagefolder" : "webdataset",
                 LOGV("data.testUri is not set and this data.format has no test split of its "
                      "own: the run measures no test accuracy (test_accuracy is null at the "
                      "end); set data.testUri to a held-out set"));
    int nc = 0;
    if (dc->format == DATA_IMAGEFOLDER && f->ix) ld_index_classes(f->ix, &nc);
    if (dc->format == DATA_IMAGEFOLDER && f->ix && nc < cfg->model.num_classes) {
        char msg[256];
        snprintf(msg, sizeof msg, "data.uri has %d class folders but model.numClasses=%d: "
                 "%d of the model's classes have no images and are never learned", nc,
                 cfg->model.num_classes, cfg->model.num_classes - nc);
        LOG_WARN("data", "event=few_classes class_folders=%d num_classes=%d msg=%s", nc,
                 cfg->model.num_classes, LOGV(msg));
    }
}

vj_err feed_new(feed **out, const feed_options *o, char *err, size_t errlen)
{
    *out = NULL;
    feed *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    *out = f;
    f->o = *o;
    if (f->o.world < 1) f->o.world = 1;
    const vit_job_config *cfg = o->cfg;
    const model_config *mc = &cfg->model;
    const data_config *dc = &cfg->data;
    f->micro = cfg->training.micro_batch_size;
    f->accum = config_accum_steps(cfg);
    f->G = cfg->training.global_batch_size;
    if (dc->format == DATA_FASHION_MNIST) {
        vj_err rc = dataset_load_idx(&f->train, dc->uri, "train", mc->num_classes, err, errlen);
        if (rc == 0) {
            const char *turi = dc->test_uri[0] ? dc->test_uri : dc->uri;
            rc = dataset_load_idx(&f->test, turi, "t10k", mc->num_classes, err, errlen);
        }
        if (rc == 0) rc = dataset_check_image_size(f->train, mc->image_size, err, errlen);
        if (rc == 0) rc = dataset_check_same_size(f->test, f->train, err, errlen);
        if (rc == 0 && data_loader_init(&f->dl, f->train, cfg->training.seed, dc->augment)) {
            snprintf(err, errlen, "out of memory for the data loader");
            rc = VJ_ERR_OUT_OF_MEMORY;
        }
        f->dl_ready = rc == 0;
        return rc;
    }
    ld_options *lo = &f->lo;
    lo->endpoint = dc->endpoint[0] ? dc->endpoint : cfg->checkpoint.endpoint;
    lo->rank = f->o.rank;
    lo->world = f->o.world;
    lo->seed = cfg->training.seed;
    lo->augment = dc->augment;
    lo->batch = f->micro;
    lo->per_step = f->micro * f->accum;
    lo->xf.out_size = mc->image_size;
    lo->xf.channels = mc->channels;
    lo->xf.interp = dc->interpolation == INTERP_BILINEAR ? XF_BILINEAR : XF_BICUBIC;
    double mean[3], stdv[3];
    config_data_norm(cfg, mean, stdv);
    for (int c = 0; c < 3; c++) {
        f->mean[c] = (float)mean[c];
        f->stdv[c] = (float)stdv[c];
    }
    lo->xf.mean = f->mean;
    lo->xf.std = f->stdv;
    lo->scale[0] = dc->scale_min;
    lo->scale[1] = dc->scale_max;
    lo->ratio[0] = dc->ratio_min;
    lo->ratio[1] = dc->ratio_max;
    /* RandAugment as timm's create_transform sets it up: the fill is the
     * mean in 8 bits (img_mean), the filter the crop's interpolation */
    if (randaug_spec_parse(dc->rand_augment, "data.randAugment", &lo->randaug, err, errlen))
        return VJ_ERR_CONFIG;
    for (int c = 0; c < 3; c++) {
        long v = (long)nearbyint(255.0 * mean[mc->channels == 1 ? 0 : c]); /* Python round() */
        lo->ra.fill[c] = (uint8_t)(v > 255 ? 255 : v < 0 ? 0 : v);
    }
    lo->ra.resample = dc->interpolation == INTERP_BILINEAR ? RA_BILINEAR : RA_BICUBIC;
    lo->erasing.probability = dc->random_erasing;
    lo->erasing.mode = dc->random_erasing_mode == ERASE_CONST  ? ER_CONST
                       : dc->random_erasing_mode == ERASE_RAND ? ER_RAND
                                                               : ER_PIXEL;
    lo->crop_pct = dc->crop_pct;
    lo->workers = dc->workers > 0 ? dc->workers : feed_default_workers(o->threads);
    lo->prefetch_batches = dc->prefetch_batches;
    lo->shuffle_buffer = dc->shuffle_buffer;
    lo->max_pixels = dc->max_pixels;
    lo->max_bad_fraction = dc->max_bad_fraction;
    lo->note_upscale = o->rank == 0 && o->ops && !o->ops->gpu;
    vj_err rc = index_split(f, dc->uri, "data.uri", &f->ix, err, errlen);
    if (rc == VJ_OK && dc->test_uri[0])
        rc = index_split(f, dc->test_uri, "data.testUri", &f->tix, err, errlen);
    if (rc) return rc;
    ld_options tr = *lo;
    tr.ix = f->ix;
    tr.train = 1;
    rc = ld_new(&f->ld, &tr, err, errlen);
    if (rc == VJ_OK) warn_surprises(f);
    return rc;
}

void feed_free(feed *f)
{
    if (!f) return;
    if (f->dl_ready) data_loader_free(&f->dl);
    dataset_free(f->train);
    dataset_free(f->test);
    ld_free(f->ev);
    ld_free(f->ld);
    ld_index_free(f->ix);
    ld_index_free(f->tix);
    free(f);
}

uint64_t feed_train_samples(const feed *f)
{
    return f->train ? (uint64_t)f->train->n : f->ix ? ld_index_samples(f->ix) : 0;
}

long feed_epoch_steps(feed *f, long epoch)
{
    if (f->train) return f->train->n / f->G;
    return ld_epoch_steps(f->ld, epoch);
}

long feed_total_steps(feed *f, long epochs)
{
    long t = 0;
    for (long e = 0; e < epochs; e++) t += feed_epoch_steps(f, e);
    return t;
}

/* One rank's row of the manifest's "loader": [epoch, step, consumed,
 * block_first, unit, offset]. */
static int parse_row(const char *json, int rank, int world, ld_position *p)
{
    cJSON *j = cJSON_Parse(json);
    int ok = 0;
    if (cJSON_IsArray(j) && cJSON_GetArraySize(j) == world) {
        const cJSON *row = cJSON_GetArrayItem(j, rank);
        double v[LD_POSITION_FIELDS];
        ok = cJSON_IsArray(row) && cJSON_GetArraySize(row) == LD_POSITION_FIELDS;
        for (int i = 0; ok && i < LD_POSITION_FIELDS; i++) {
            const cJSON *e = cJSON_GetArrayItem(row, i);
            ok = cJSON_IsNumber(e) && e->valuedouble >= -1 && e->valuedouble < 9e15;
            if (ok) v[i] = e->valuedouble;
        }
        if (ok)
            *p = (ld_position){(long)v[0], (long)v[1], (int64_t)v[2], (int64_t)v[3],
                               (int64_t)v[4], (int64_t)v[5]};
    }
    cJSON_Delete(j);
    return ok;
}

vj_err feed_start(feed *f, long meta_step, long epoch, long index, const char *loader_json,
                  int saved_world, char *err, size_t errlen)
{
    if (f->train) {
        if (meta_step >= 0) data_loader_seek(&f->dl, epoch, index);
        f->done_epoch = f->dl.epoch;
        f->done_index = f->dl.index;
        return VJ_OK;
    }
    if (meta_step < 0) return ld_start(f->ld, NULL, 1, err, errlen);
    ld_position p = {.epoch = epoch, .step = index};
    int exact = saved_world == f->o.world && loader_json && loader_json[0] &&
                parse_row(loader_json, f->o.rank, f->o.world, &p) && p.epoch == epoch &&
                p.step == index;
    if (!exact) {
        p = (ld_position){.epoch = epoch, .step = index, .unit = -1};
        LOG_WARN("data", "event=loader_position_rederived epoch=%ld step=%ld saved_world=%d "
                 "world=%d msg=%s", epoch, index, saved_world, f->o.world,
                 LOGV("the checkpoint has no exact position for this world size; the "
                      "epoch's samples of the steps done are skipped unread"));
    }
    f->done_epoch = epoch;
    f->done_index = index;
    return ld_start(f->ld, &p, exact, err, errlen);
}

void feed_step_begin(feed *f)
{
    if (!f->train) return;
    long part = f->G / f->o.world;
    data_loader_begin_step(&f->dl, f->G);
    data_loader_skip(&f->dl, (long)f->o.rank * part);
}

vj_err feed_next(feed *f, float *images, int *labels, char *err, size_t errlen)
{
    if (f->train) {
        data_loader_next(&f->dl, f->micro, images, labels);
        return VJ_OK;
    }
    int n = 0;
    int rc = ld_next(f->ld, images, labels, &n, err, errlen);
    if (rc == 0 && n < f->micro) {
        snprintf(err, errlen, "the data loader ended early (%d of %d samples)", n, f->micro);
        rc = VJ_ERR_DATA;
    }
    return (vj_err)rc;
}

void feed_step_end(feed *f)
{
    if (f->train) {
        long part = f->G / f->o.world;
        data_loader_skip(&f->dl, (long)(f->o.world - 1 - f->o.rank) * part);
        f->done_epoch = f->dl.epoch;
        f->done_index = f->dl.index;
        return;
    }
    ld_step_done(f->ld);
    ld_position p = ld_position_now(f->ld);
    f->done_epoch = p.epoch;
    f->done_index = p.step;
}

void feed_position(const feed *f, long *epoch, long *index)
{
    *epoch = f->done_epoch;
    *index = f->done_index;
}

vj_err feed_checkpoint_state(feed *f, dp *d, char *buf, size_t buflen, char *err, size_t errlen)
{
    buf[0] = '\0';
    if (f->train) return VJ_OK;
    ld_position p = ld_position_now(f->ld);
    double mine[LD_POSITION_FIELDS] = {(double)p.epoch, (double)p.step, (double)p.consumed,
                                       (double)p.block_first, (double)p.unit, (double)p.offset};
    const int W = f->o.world;
    double *all = malloc(sizeof(double) * LD_POSITION_FIELDS * (size_t)W);
    if (!all) {
        snprintf(err, errlen, "out of memory for the loader's positions");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    vj_err rc = dp_gather(d, mine, LD_POSITION_FIELDS, all, err, errlen);
    if (rc) {
        free(all);
        return rc;
    }
    size_t used = 0;
    int fits = 1;
    used += (size_t)snprintf(buf, buflen, "[");
    for (int q = 0; q < W && fits; q++) {
        const double *v = all + (size_t)q * LD_POSITION_FIELDS;
        int k = snprintf(buf + used, buflen - used, "%s[%.0f,%.0f,%.0f,%.0f,%.0f,%.0f]",
                         q ? "," : "", v[0], v[1], v[2], v[3], v[4], v[5]);
        if (k < 0 || (size_t)k + 2 >= buflen - used) fits = 0;
        else used += (size_t)k;
    }
    if (fits) snprintf(buf + used, buflen - used, "]");
    else buf[0] = '\0'; /* a resume re-derives the position */
    free(all);
    return VJ_OK;
}

uint64_t feed_skipped(const feed *f)
{
    return f->ld ? ld_stats_now(f->ld).skipped : 0;
}

double feed_wait_seconds(const feed *f)
{
    return f->ld ? ld_stats_now(f->ld).wait_seconds : 0.0;
}

void feed_upscale_message(char *msg, size_t len, int w, int h, int size, double step_s,
                          long steps_left, long total)
{
    const double factor = (double)size * size / ((double)w * h);
    char when[TIMEFMT_DUR_LEN], left[64] = "";
    timefmt_duration(when, (long long)llround(step_s * (double)steps_left));
    if (steps_left != total) snprintf(left, sizeof left, " (%ld left)", steps_left);
    snprintf(msg, len, "the images are %dx%d and model.imageSize=%d: each is upscaled %.0fx in "
             "area and trained at that size's full cost on the CPU, %.3g s a step so far: the "
             "run's %ld steps%s take about %s; a model.imageSize near the images' own size "
             "trains many times faster", w, h, size, factor, step_s, total, left, when);
}

void feed_warn_upscale(feed *f, double step_s, long steps_left, long total)
{
    int w, h;
    if (f->upscale_warned || !f->ld || !ld_upscaled(f->ld, &w, &h)) return;
    f->upscale_warned = 1;
    const int size = f->lo.xf.out_size;
    char msg[512];
    feed_upscale_message(msg, sizeof msg, w, h, size, step_s, steps_left, total);
    LOG_WARN("data", "event=upscale stored=%dx%d image_size=%d area_factor=%.1f device=cpu "
             "step_seconds=%.3g planned_seconds=%.0f msg=%s", w, h, size,
             (double)size * size / ((double)w * h), step_s, step_s * (double)steps_left,
             LOGV(msg));
}

int feed_has_test(const feed *f) { return f->test != NULL || f->tix != NULL; }

uint64_t feed_test_samples(const feed *f)
{
    return f->test ? (uint64_t)f->test->n : f->tix ? ld_index_samples(f->tix) : 0;
}

vj_err feed_eval_begin(feed *f, long *batches, char *err, size_t errlen)
{
    const int B = f->micro, W = f->o.world;
    if (f->test) {
        const long n = f->test->n, per = (n + W - 1) / W;
        f->ev_first = (long)f->o.rank * per;
        f->ev_end = f->ev_first + per < n ? f->ev_first + per : n;
        if (f->ev_end < f->ev_first) f->ev_end = f->ev_first;
        f->ev_next = f->ev_first;
        *batches = (per + B - 1) / B;
        return VJ_OK;
    }
    ld_options eo = f->lo;
    eo.ix = f->tix;
    eo.train = 0;
    eo.note_upscale = 0; /* the training loader's images speak for the run */
    eo.augment = 0;
    vj_err rc = (vj_err)ld_new(&f->ev, &eo, err, errlen);
    if (rc) return rc;
    int64_t max = 0;
    ld_eval_samples(f->ev, &max);
    *batches = (long)((max + B - 1) / B);
    return (vj_err)ld_start(f->ev, NULL, 1, err, errlen);
}

vj_err feed_eval_next(feed *f, float *images, int *labels, int *n, char *err, size_t errlen)
{
    if (f->test) {
        const dataset *d = f->test;
        const size_t img = (size_t)d->rows * d->cols;
        long k = f->ev_end - f->ev_next;
        *n = k < f->micro ? (int)k : f->micro;
        for (int b = 0; b < *n; b++) {
            dataset_image(d, (int)(f->ev_next + b), 0, 0, 0, images + b * img);
            labels[b] = d->labels[f->ev_next + b];
        }
        f->ev_next += *n;
        return VJ_OK;
    }
    return (vj_err)ld_next(f->ev, images, labels, n, err, errlen);
}

void feed_eval_end(feed *f)
{
    ld_free(f->ev);
    f->ev = NULL;
}
