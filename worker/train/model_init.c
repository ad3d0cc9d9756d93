/* worker/train/model_init.c - see model_init.h. */
#define _DEFAULT_SOURCE /* realpath */
#include "model_init.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "ckpt_store.h"
#include "config.h"
#include "log.h"
#include "safetensors.h"

/* an s3:// safetensors file is read whole into memory: at most this much */
#define INIT_MAX_BYTES ((size_t)1 << 40)

static vj_err store_class(ckpt_status st)
{
    return st == CKPT_RETRY ? VJ_ERR_IO : VJ_ERR_INIT_WEIGHTS;
}

/* The tensors of an open safetensors file into the model. */
static vj_err load_st(vit_model *m, st_file *f, const char *origin,
                      const model_load_options *lo, char *err, size_t errlen)
{
    int n = st_count(f);
    st_tensor *ts = malloc(sizeof *ts * (size_t)(n > 0 ? n : 1));
    if (!ts) {
        snprintf(err, errlen, "%s: out of memory", origin);
        return VJ_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < n; i++) ts[i] = *st_at(f, i);
    int rc = model_load_tensors(m, ts, n, origin, lo, err, errlen);
    free(ts);
    return rc == 0 ? VJ_OK : VJ_ERR_INIT_WEIGHTS;
}

/* The model config a checkpoint's manifest names (model_config_json's
 * keys), on top of the defaults: 0, or -1 with the message. */
static int manifest_model(const char *json, model_config *out, const char *origin, char *err,
                          size_t errlen)
{
    vit_job_config *cfg = malloc(sizeof *cfg);
    cJSON *model = cJSON_Parse(json);
    int rc = 0;
    if (!cfg || !model) {
        snprintf(err, errlen, "%s: %s", origin,
                 cfg ? "the manifest's model is not JSON" : "out of memory");
        rc = -1;
    } else {
        config_defaults(cfg);
        const cJSON *it;
        char kv[256], why[512];
        cJSON_ArrayForEach(it, model) {
            if (!cJSON_IsNumber(it) || rc) continue;
            snprintf(kv, sizeof kv, "model.%s=%.17g", it->string, it->valuedouble);
            if (config_set(cfg, kv, why, sizeof why) != 0) {
                snprintf(err, errlen, "%s: the manifest's model: %s", origin, why);
                rc = -1;
            }
        }
        if (rc == 0) *out = cfg->model;
    }
    cJSON_Delete(model);
    free(cfg);
    return rc;
}

/* A checkpoint: store is its root (file:///abs or s3://), step -1 for the
 * newest complete one; shown is model.init as given, dir_given whether it
 * was a local directory (for the message when it holds no checkpoint). */
static vj_err load_checkpoint(vit_model *m, const char *store_uri, long step, const char *shown,
                              int dir_given, const char *endpoint, const model_load_options *lo,
                              char *err, size_t errlen)
{
    char why[2048], origin[1200];
    ckpt_store *s = NULL;
    ckpt_manifest *man = NULL;
    vit_model *src = NULL;
    vj_err rc = VJ_ERR_INIT_WEIGHTS;
    ckpt_status st = ckpt_store_open(&s, store_uri, endpoint, why, sizeof why);
    if (st == CKPT_OK)
        st = step >= 0 ? ckpt_read_step(s, step, &man, why, sizeof why)
                       : ckpt_find(s, &man, why, sizeof why);
    if (st == CKPT_NOT_FOUND) {
        if (dir_given)
            snprintf(err, errlen, "model.init=%s: is a directory, not a regular file, and holds "
                     "no complete checkpoint (step-N/manifest.json)", shown);
        else
            snprintf(err, errlen, "model.init=%s: no such object, and no complete checkpoint "
                     "there (step-N/manifest.json): %s", shown, why);
        goto out;
    }
    if (st != CKPT_OK) {
        snprintf(err, errlen, "model.init=%s: %s", shown, why);
        rc = store_class(st);
        goto out;
    }
    const ckpt_meta *meta = ckpt_manifest_meta(man);
    char stepname[32];
    ckpt_step_name(meta->step, stepname, sizeof stepname);
    snprintf(origin, sizeof origin, "model.init=%s (checkpoint %s)", shown, stepname);
    model_config smc;
    if (manifest_model(meta->model, &smc, origin, err, errlen) != 0) goto out;
    /* the checkpoint's layout: its model's, on the host (its params are
     * host memory there: the checkpoint is read straight into them) */
    if ((rc = model_new(&src, &smc, 1, NULL, ops_cpu(), why, sizeof why)) != VJ_OK) {
        snprintf(err, errlen, "%s: %s", origin, why);
        goto out;
    }
    rc = VJ_ERR_INIT_WEIGHTS;
    if (model_num_params(src) != meta->n_params) {
        snprintf(err, errlen, "%s: the manifest's model has %zu parameters, not %zu", origin,
                 model_num_params(src), meta->n_params);
        goto out;
    }
    float *params = model_params(src);
    st = ckpt_read_range(s, man, 0, meta->n_params, params, NULL, NULL, why, sizeof why);
    if (st != CKPT_OK) {
        snprintf(err, errlen, "%s: %s", origin, why);
        rc = store_class(st);
        goto out;
    }
    int nt = model_num_tensors(src);
    st_tensor *ts = calloc((size_t)nt, sizeof *ts);
    if (!ts) {
        snprintf(err, errlen, "%s: out of memory", origin);
        rc = VJ_ERR_OUT_OF_MEMORY;
        goto out;
    }
    for (int i = 0; i < nt; i++) {
        const model_tensor *t = model_tensor_at(src, i);
        ts[i] = (st_tensor){.name = t->name, .dtype = ST_F32, .ndim = t->ndim,
                            .data = params + t->offset};
        for (int d = 0; d < t->ndim; d++) ts[i].shape[d] = t->shape[d];
    }
    if (model_load_tensors(m, ts, nt, origin, lo, err, errlen) == 0) {
        rc = VJ_OK;
        LOG_INFO("train", "event=init_loaded path=%s kind=checkpoint step=%ld", LOGV(shown),
                 meta->step);
    }
    free(ts);
out:
    model_free(src);
    ckpt_manifest_free(man);
    ckpt_store_free(s);
    return rc;
}

/* Splits a checkpoint URI into its root and step: ".../step-N" names one
 * step (*step = N), anything else is a root (*step = -1). */
static void split_step(const char *uri, char *root, size_t len, long *step)
{
    snprintf(root, len, "%s", uri);
    size_t n = strlen(root);
    while (n > 0 && root[n - 1] == '/') root[--n] = '\0';
    char *last = strrchr(root, '/'), tail;
    *step = -1;
    if (last && sscanf(last + 1, "step-%ld%c", step, &tail) == 1 && *step >= 0) *last = '\0';
    else *step = -1;
}

static vj_err load_s3(vit_model *m, const model_init_options *o, char *err, size_t errlen)
{
    char parent[CONFIG_STR + 8], why[2048], root[CONFIG_STR + 8];
    long step;
    const char *slash = strrchr(o->uri + 5, '/');
    /* s3://bucket/key: try the object first */
    if (slash && slash[1] != '\0') {
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - o->uri), o->uri);
        ckpt_store *s = NULL;
        void *buf = NULL;
        size_t len = 0;
        ckpt_status st = ckpt_store_open(&s, parent, o->endpoint, why, sizeof why);
        if (st == CKPT_OK) st = ckpt_store_read(s, slash + 1, INIT_MAX_BYTES, &buf, &len, why,
                                                sizeof why);
        ckpt_store_free(s);
        if (st == CKPT_OK) {
            st_file *f = NULL;
            if (st_open_mem(&f, buf, len, o->uri, err, errlen) != 0) return VJ_ERR_INIT_WEIGHTS;
            vj_err rc = load_st(m, f, o->uri, &o->load, err, errlen);
            st_close(f);
            if (rc == VJ_OK)
                LOG_INFO("train", "event=init_loaded path=%s kind=safetensors bytes=%zu",
                         LOGV(o->uri), len);
            return rc;
        }
        if (st != CKPT_NOT_FOUND) {
            snprintf(err, errlen, "model.init=%s: %s", o->uri, why);
            return store_class(st);
        }
    }
    split_step(o->uri, root, sizeof root, &step);
    return load_checkpoint(m, root, step, o->uri, 0, o->endpoint, &o->load, err, errlen);
}

vj_err model_init_load(vit_model *m, const model_init_options *o, char *err, size_t errlen)
{
    if (strncmp(o->uri, "s3://", 5) == 0) return load_s3(m, o, err, errlen);
    const char *path = strncmp(o->uri, "file://", 7) == 0 ? o->uri + 7 : o->uri;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char abs[PATH_MAX], root[PATH_MAX + 16];
        long step;
        if (!realpath(path, abs)) {
            snprintf(err, errlen, "model.init=%s: %s", o->uri, strerror(errno));
            return VJ_ERR_INIT_WEIGHTS;
        }
        char uri[PATH_MAX + 8];
        snprintf(uri, sizeof uri, "file://%s", abs);
        split_step(uri, root, sizeof root, &step);
        return load_checkpoint(m, root, step, o->uri, 1, o->endpoint, &o->load, err, errlen);
    }
    st_file *f = NULL;
    if (st_open(&f, path, err, errlen) != 0) return VJ_ERR_INIT_WEIGHTS;
    vj_err rc = load_st(m, f, path, &o->load, err, errlen);
    st_close(f);
    if (rc == VJ_OK) LOG_INFO("train", "event=init_loaded path=%s kind=safetensors", LOGV(path));
    return rc;
}
