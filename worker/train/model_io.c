/* worker/train/model_io.c - see model_io.h. Files are read and written only
 * through safetensors.h (which opens and replaces them through lib/file.h). */
#include "model_io.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pos_resample.h"
#include "rng.h"
#include "safetensors.h"

void model_config_json(const model_config *mc, char *out, size_t len)
{
    snprintf(out, len,
             "{\"imageSize\":%d,\"patchSize\":%d,\"channels\":%d,\"dim\":%d,\"depth\":%d,"
             "\"heads\":%d,\"mlpRatio\":%.17g,\"numClasses\":%d}",
             mc->image_size, mc->patch_size, mc->channels, mc->dim, mc->depth, mc->heads,
             mc->mlp_ratio, mc->num_classes);
}

int model_save_safetensors(vit_model *m, const model_config *mc, const char *path, char *err,
                           size_t errlen)
{
    int n = model_num_tensors(m);
    st_tensor *ts = calloc((size_t)n, sizeof *ts);
    if (!ts) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    float *params = malloc(sizeof(float) * model_num_params(m));
    if (!params) {
        free(ts);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    if (model_read_params(m, params) != 0) {
        free(ts);
        free(params);
        snprintf(err, errlen, "%s: not written: gathering the parameters from the other ranks "
                 "failed", path);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const model_tensor *t = model_tensor_at(m, i);
        ts[i].name = t->name;
        ts[i].dtype = ST_F32;
        ts[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) ts[i].shape[d] = t->shape[d];
        ts[i].data = params + t->offset;
    }
    char dims[256];
    model_config_json(mc, dims, sizeof dims);
    const char *meta[] = {"format", "pt", "vitjob.model", dims, "vitjob.architecture",
                          "timm.VisionTransformer(class_token, pre-norm, qkv_bias)"};
    int rc = st_write(path, ts, n, meta, 3, err, errlen);
    free(ts);
    free(params);
    return rc;
}

/* shapes as "1,50,768" */
static void shape_text(char *out, size_t len, int ndim, const int64_t *shape)
{
    out[0] = '\0';
    for (int d = 0; d < ndim; d++)
        snprintf(out + strlen(out), len - strlen(out), "%s%lld", d ? "," : "",
                 (long long)shape[d]);
}

static const st_tensor *find(const st_tensor *ts, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ts[i].name, name) == 0) return &ts[i];
    return NULL;
}

static int same_shape(const st_tensor *s, const model_tensor *t)
{
    int same = s->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
    return same;
}

static int shape_error(const st_tensor *s, const model_tensor *t, const char *origin, char *err,
                       size_t errlen)
{
    char want[96], got[96];
    int64_t w[4];
    for (int d = 0; d < t->ndim; d++) w[d] = t->shape[d];
    shape_text(want, sizeof want, t->ndim, w);
    shape_text(got, sizeof got, s->ndim, s->shape);
    snprintf(err, errlen, "%s: tensor '%s' has shape [%s], the model needs [%s]", origin,
             t->name, got, want);
    return -1;
}

/* The first non-finite value of s, by the bits (so that no floating-point
 * mode can hide it): 0, or -1 with the message. */
static int check_finite(const st_tensor *s, size_t numel, const char *origin, char *err,
                        size_t errlen)
{
    for (size_t k = 0; k < numel; k++) {
        uint32_t bits;
        memcpy(&bits, (const char *)s->data + 4 * k, sizeof bits);
        if ((bits & 0x7f800000u) == 0x7f800000u) {
            snprintf(err, errlen, "%s: tensor '%s' holds %s at element %zu", origin, s->name,
                     (bits & 0x007fffffu) ? "NaN" : (bits >> 31) ? "-Inf" : "Inf", k);
            return -1;
        }
    }
    return 0;
}

void model_new_head_init(float *weight, float *bias, int num_classes, int dim, uint64_t seed)
{
    rng_state r;
    rng_seed(&r, seed, 0x4ead, (uint64_t)num_classes);
    for (size_t i = 0; i < (size_t)num_classes * (size_t)dim; i++) {
        float x;
        do {
            x = 0.02f * rng_normal(&r);
        } while (x < -2.0f || x > 2.0f); /* timm's trunc_normal_ bounds: absolute */
        weight[i] = x;
    }
    for (int k = 0; k < num_classes; k++) bias[k] = 0.0f;
}

/* What the load changed besides copying, logged once it has succeeded. */
typedef struct {
    int pos, head;          /* pos_embed resampled; a new head */
    int pos_from, pos_to;   /* grid sides */
    long head_from;         /* the file's class count, -1: no head */
} adaptations;

/* With adaptation: the head (both tensors of another class count, or both
 * absent) and the patch size, before any tensor is read. */
static int check_head_and_patch(vit_model *m, const st_tensor *ts, int n, const char *origin,
                                const model_load_options *o, adaptations *ad, char *err,
                                size_t errlen)
{
    const st_tensor *hw = find(ts, n, "head.weight"), *hb = find(ts, n, "head.bias");
    const model_tensor *mw = model_tensor_at(m, model_find_tensor(m, "head.weight"));
    int K = model_num_classes(m);
    if (!hw && !hb) {
        ad->head = 1;
        ad->head_from = -1;
    } else if (hw && hb && hw->ndim == 2 && hb->ndim == 1 && hw->shape[0] == hb->shape[0] &&
               hw->shape[1] == mw->shape[1] && hw->shape[0] != K) {
        ad->head = 1;
        ad->head_from = (long)hw->shape[0];
    }
    if (ad->head && o->head == INIT_HEAD_KEEP) {
        if (ad->head_from < 0)
            snprintf(err, errlen, "%s: has no head (head.weight, head.bias) and "
                     "model.initHead=keep needs one of model.numClasses=%d classes (new: "
                     "timm's init of a new head)", origin, K);
        else
            snprintf(err, errlen, "%s: head.weight has %ld classes and model.numClasses=%d; "
                     "model.initHead=keep refuses a new head (new: timm's init of one)",
                     origin, ad->head_from, K);
        return -1;
    }
    const st_tensor *pw = find(ts, n, "patch_embed.proj.weight");
    const model_tensor *mp = model_tensor_at(m, model_find_tensor(m, "patch_embed.proj.weight"));
    if (pw && pw->ndim == 4 && (pw->shape[2] != mp->shape[2] || pw->shape[3] != mp->shape[3])) {
        snprintf(err, errlen, "%s: patch size %lldx%lld (patch_embed.proj.weight's kernel) "
                 "differs from model.patchSize=%d: resampling patch embeddings is not "
                 "supported; set model.patchSize=%lld", origin, (long long)pw->shape[2],
                 (long long)pw->shape[3], mp->shape[2], (long long)pw->shape[2]);
        return -1;
    }
    return 0;
}

/* pos_embed of another square grid (1 class token + g x g, the same
 * width): resampled into out as timm's resample_abs_pos_embed. 1 when it
 * applies and was done, 0 when it does not apply, -1 on an error. */
static int resample_pos(const st_tensor *s, const model_tensor *t, float *out,
                        adaptations *ad, const char *origin, char *err, size_t errlen)
{
    if (s->ndim != 3 || s->shape[0] != 1 || s->shape[2] != t->shape[2] ||
        s->shape[1] == t->shape[1] || s->shape[1] < 2)
        return 0;
    const int D = t->shape[2];
    int64_t grid = s->shape[1] - 1, g = (int64_t)floor(sqrt((double)grid) + 0.5);
    if (g * g != grid) {
        snprintf(err, errlen, "%s: tensor 'pos_embed' has %lld tokens: not a class token and "
                 "a square grid, so it cannot be resampled to the model's %d tokens", origin,
                 (long long)s->shape[1], t->shape[1]);
        return -1;
    }
    int ng = (int)floor(sqrt((double)(t->shape[1] - 1)) + 0.5);
    memcpy(out, s->data, sizeof(float) * (size_t)D); /* the class token as it is */
    float *src = malloc(sizeof(float) * (size_t)grid * D);
    if (!src) {
        snprintf(err, errlen, "%s: out of memory resampling pos_embed", origin);
        return -1;
    }
    memcpy(src, (const float *)s->data + D, sizeof(float) * (size_t)grid * D);
    int rc = pos_resample_bicubic_aa(src, (int)g, (int)g, D, out + D, ng, ng);
    free(src);
    if (rc != 0) {
        snprintf(err, errlen, "%s: out of memory resampling pos_embed", origin);
        return -1;
    }
    ad->pos = 1;
    ad->pos_from = (int)g;
    ad->pos_to = ng;
    return 1;
}

int model_load_tensors(vit_model *m, const st_tensor *ts, int n, const char *origin,
                       const model_load_options *o, char *err, size_t errlen)
{
    int rc = -1, nt = model_num_tensors(m);
    adaptations ad = {0};
    /* staged on the host; the model changes only once every tensor checked out */
    float *host = malloc(sizeof(float) * model_num_params(m));
    if (!host) {
        snprintf(err, errlen, "%s: out of memory", origin);
        return -1;
    }
    if (o && check_head_and_patch(m, ts, n, origin, o, &ad, err, errlen) != 0) goto out;
    for (int i = 0; i < nt; i++) {
        const model_tensor *t = model_tensor_at(m, i);
        int is_head = strcmp(t->name, "head.weight") == 0 || strcmp(t->name, "head.bias") == 0;
        if (ad.head && is_head) continue; /* initialised below */
        const st_tensor *s = find(ts, n, t->name);
        if (!s) {
            snprintf(err, errlen, "%s: tensor '%s' is missing", origin, t->name);
            goto out;
        }
        if (s->dtype != ST_F32) {
            snprintf(err, errlen, "%s: tensor '%s' is %s, the model needs F32", origin, t->name,
                     st_dtype_name(s->dtype));
            goto out;
        }
        size_t numel = 1;
        for (int d = 0; d < s->ndim; d++) numel *= (size_t)s->shape[d];
        if (same_shape(s, t)) {
            if (check_finite(s, numel, origin, err, errlen) != 0) goto out;
            memcpy(host + t->offset, s->data, t->numel * sizeof(float));
            continue;
        }
        int done = 0;
        if (o && strcmp(t->name, "pos_embed") == 0) {
            if (check_finite(s, numel, origin, err, errlen) != 0) goto out;
            done = resample_pos(s, t, host + t->offset, &ad, origin, err, errlen);
            if (done < 0) goto out;
        }
        if (!done) {
            shape_error(s, t, origin, err, errlen);
            goto out;
        }
    }
    for (int i = 0; i < n; i++) {
        if (model_find_tensor(m, ts[i].name) < 0) {
            snprintf(err, errlen, "%s: tensor '%s' is not part of this model", origin,
                     ts[i].name);
            goto out;
        }
    }
    if (ad.head) {
        const model_tensor *w = model_tensor_at(m, model_find_tensor(m, "head.weight"));
        const model_tensor *b = model_tensor_at(m, model_find_tensor(m, "head.bias"));
        model_new_head_init(host + w->offset, host + b->offset, w->shape[0], w->shape[1],
                            o->seed);
    }
    model_write_params(m, host);
    if (ad.pos)
        LOG_INFO("init", "event=init_adapted tensor=pos_embed action=resampled from=%dx%d "
                 "to=%dx%d how=bicubic_antialias class_token=kept origin=%s", ad.pos_from,
                 ad.pos_from, ad.pos_to, ad.pos_to, LOGV(origin));
    if (ad.head) {
        char from[32];
        if (ad.head_from < 0) snprintf(from, sizeof from, "none");
        else snprintf(from, sizeof from, "%ld", ad.head_from);
        LOG_INFO("init", "event=init_adapted tensor=head.weight action=new from_classes=%s "
                 "to_classes=%d how=trunc_normal_std_0.02 seed=%llu origin=%s", LOGV(from),
                 model_num_classes(m), (unsigned long long)o->seed, LOGV(origin));
        LOG_INFO("init", "event=init_adapted tensor=head.bias action=new from_classes=%s "
                 "to_classes=%d how=zeros origin=%s", LOGV(from), model_num_classes(m),
                 LOGV(origin));
    }
    rc = 0;
out:
    free(host);
    return rc;
}

int model_load_safetensors(vit_model *m, const char *path, char *err, size_t errlen)
{
    st_file *f = NULL;
    if (st_open(&f, path, err, errlen) != 0) return -1;
    int n = st_count(f), rc = -1;
    st_tensor *ts = malloc(sizeof *ts * (size_t)(n > 0 ? n : 1));
    if (!ts) {
        snprintf(err, errlen, "%s: out of memory", path);
    } else {
        for (int i = 0; i < n; i++) ts[i] = *st_at(f, i);
        rc = model_load_tensors(m, ts, n, path, NULL, err, errlen);
    }
    free(ts);
    st_close(f);
    return rc;
}
