/* worker/train/model_io.c - see model_io.h. Files are read and written only
 * through safetensors.h (which opens and replaces them through lib/file.h). */
#include "model_io.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int model_load_safetensors(vit_model *m, const char *path, char *err, size_t errlen)
{
    st_file *f = NULL;
    if (st_open(&f, path, err, errlen) != 0) return -1;
    int rc = -1, n = model_num_tensors(m);
    /* staged on the host; the model changes only once every tensor checked out */
    float *host = malloc(sizeof(float) * model_num_params(m));
    if (!host) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const model_tensor *t = model_tensor_at(m, i);
        const st_tensor *s = st_find(f, t->name);
        if (!s) {
            snprintf(err, errlen, "%s: tensor '%s' is missing", path, t->name);
            goto out;
        }
        if (s->dtype != ST_F32) {
            snprintf(err, errlen, "%s: tensor '%s' is %s, the model needs F32", path, t->name,
                     st_dtype_name(s->dtype));
            goto out;
        }
        int same = s->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
        if (!same) {
            char want[64] = "", got[64] = "";
            for (int d = 0; d < t->ndim; d++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", d ? "," : "",
                         t->shape[d]);
            for (int d = 0; d < s->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "",
                         (long long)s->shape[d]);
            snprintf(err, errlen, "%s: tensor '%s' has shape [%s], the model needs [%s]", path,
                     t->name, got, want);
            goto out;
        }
        memcpy(host + t->offset, s->data, t->numel * sizeof(float));
        /* by the bits, so that no floating-point mode can hide them */
        for (size_t k = 0; k < (size_t)t->numel; k++) {
            uint32_t bits;
            memcpy(&bits, host + t->offset + k, sizeof bits);
            if ((bits & 0x7f800000u) == 0x7f800000u) {
                snprintf(err, errlen, "%s: tensor '%s' holds %s at element %zu", path, t->name,
                         (bits & 0x007fffffu) ? "NaN" : (bits >> 31) ? "-Inf" : "Inf", k);
                goto out;
            }
        }
    }
    if (st_count(f) != n) {
        for (int i = 0; i < st_count(f); i++) {
            if (model_find_tensor(m, st_at(f, i)->name) < 0) {
                snprintf(err, errlen, "%s: tensor '%s' is not part of this model", path,
                         st_at(f, i)->name);
                goto out;
            }
        }
    }
    model_write_params(m, host);
    rc = 0;
out:
    free(host);
    st_close(f);
    return rc;
}
