/* worker/train/freeze.c - see freeze.h. */
#include "freeze.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdint.h>

#include "log.h"
#include "model_io.h"

int freeze_match(const char *prefix, const char *name)
{
    size_t n = strlen(prefix);
    return n > 0 && strncmp(prefix, name, n) == 0 && (name[n] == '\0' || name[n] == '.');
}

vj_err freeze_resolve(const char *const *prefixes, int n_prefixes, const char *const *names,
                      int n, unsigned char *frozen, char *err, size_t errlen)
{
    int n_frozen = 0;
    for (int i = 0; i < n; i++) {
        frozen[i] = 0;
        for (int p = 0; p < n_prefixes && !frozen[i]; p++)
            frozen[i] = (unsigned char)freeze_match(prefixes[p], names[i]);
        n_frozen += frozen[i];
    }
    for (int p = 0; p < n_prefixes; p++) {
        int hits = 0;
        for (int i = 0; i < n && !hits; i++) hits = freeze_match(prefixes[p], names[i]);
        if (!hits) {
            snprintf(err, errlen, "training.freeze[%d]=%s matches no parameter (prefixes of "
                     "timm's names, matched at a '.': cls_token, pos_embed, patch_embed, "
                     "blocks, blocks.N, blocks.N.attn, norm, head, ...)", p, prefixes[p]);
            return VJ_ERR_CONFIG;
        }
    }
    if (n > 0 && n_frozen == n) {
        snprintf(err, errlen, "training.freeze freezes every parameter (all %d tensors): "
                 "nothing would train; leave at least one (e.g. head) out", n);
        return VJ_ERR_CONFIG;
    }
    return VJ_OK;
}

/* The prefixes of tc as a pointer array (malloc'd; NULL out of memory). */
static const char **prefixes_of(const training_config *tc)
{
    const char **p = malloc(sizeof *p * (size_t)(tc->freeze_n > 0 ? tc->freeze_n : 1));
    for (int i = 0; p && i < tc->freeze_n; i++) p[i] = tc->freeze[i];
    return p;
}

vj_err freeze_check(const training_config *tc, const model_config *mc, char *err,
                    size_t errlen)
{
    if (tc->freeze_n == 0) return VJ_OK;
    int n = model_tensor_names(mc, NULL, 0);
    model_tensor *ts = n > 0 ? calloc((size_t)n, sizeof *ts) : NULL;
    const char **names = n > 0 ? malloc(sizeof *names * (size_t)n) : NULL;
    unsigned char *frozen = n > 0 ? malloc((size_t)n) : NULL;
    const char **pre = prefixes_of(tc);
    vj_err rc = VJ_ERR_OUT_OF_MEMORY;
    if (ts && names && frozen && pre && model_tensor_names(mc, ts, n) == n) {
        for (int i = 0; i < n; i++) names[i] = ts[i].name;
        rc = freeze_resolve(pre, tc->freeze_n, names, n, frozen, err, errlen);
    } else {
        snprintf(err, errlen, "out of host memory checking training.freeze");
    }
    free(ts);
    free(names);
    free(frozen);
    free(pre);
    return rc;
}

vj_err freeze_model(vit_model *m, const training_config *tc, int log, size_t *n_frozen,
                    char *err, size_t errlen)
{
    if (n_frozen) *n_frozen = 0;
    if (tc->freeze_n == 0) return VJ_OK;
    const int n = model_num_tensors(m);
    const char **names = calloc((size_t)(n > 0 ? n : 1), sizeof *names);
    unsigned char *frozen = malloc((size_t)n);
    const char **pre = prefixes_of(tc);
    vj_err rc = VJ_ERR_OUT_OF_MEMORY;
    if (names && frozen && pre) {
        for (int i = 0; i < n; i++) names[i] = model_tensor_at(m, i)->name;
        rc = freeze_resolve(pre, tc->freeze_n, names, n, frozen, err, errlen);
    } else {
        snprintf(err, errlen, "out of host memory applying training.freeze");
    }
    if (rc == VJ_OK) {
        model_set_frozen(m, frozen);
        size_t nf = 0;
        int tf = 0;
        for (int i = 0; i < n; i++)
            if (frozen[i]) {
                nf += model_tensor_at(m, i)->numel;
                tf++;
            }
        if (n_frozen) *n_frozen = nf;
        if (log) {
            char list[CONFIG_FREEZE_MAX * CONFIG_FREEZE_LEN] = "";
            size_t used = 0;
            for (int p = 0; p < tc->freeze_n && used < sizeof list; p++) {
                int w = snprintf(list + used, sizeof list - used, "%s%s", p ? "," : "",
                                 tc->freeze[p]);
                if (w > 0) used += (size_t)w;
            }
            LOG_INFO("train", "event=freeze prefixes=%s frozen_params=%zu trainable_params=%zu "
                     "frozen_tensors=%d trainable_tensors=%d", LOGV(list), nf,
                     model_num_params(m) - nf, tf, n - tf);
        }
    }
    free(names);
    free(frozen);
    free(pre);
    return rc;
}

int freeze_runs(const vit_model *m, size_t lo, size_t hi, int frozen, size_t *lo_out,
                size_t *hi_out, int max)
{
    int k = 0, open = 0;
    const int nt = model_num_tensors(m);
    for (int t = 0; t <= nt && lo < hi; t++) {
        /* tensor t's part of [lo, hi); t == nt: the padding beyond the last */
        size_t a, b;
        int f;
        if (t < nt) {
            const model_tensor *x = model_tensor_at(m, t);
            a = x->offset;
            b = x->offset + x->numel;
            f = x->frozen != 0;
        } else {
            a = model_num_params(m);
            b = hi > a ? hi : a;
            f = 1;
        }
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a >= b) continue;
        if (f != (frozen != 0)) {
            open = 0;
            continue;
        }
        if (open && k <= max && hi_out[k - 1] == a) {
            hi_out[k - 1] = b;
            continue;
        }
        if (k < max) {
            lo_out[k] = a;
            hi_out[k] = b;
        }
        k++;
        open = k <= max;
    }
    return k;
}

void freeze_model_json(const model_config *mc, const training_config *tc, char *out,
                       size_t len)
{
    model_config_json(mc, out, len);
    if (tc->freeze_n == 0) return;
    cJSON *j = cJSON_Parse(out), *list = cJSON_CreateArray();
    for (int p = 0; j && list && p < tc->freeze_n; p++)
        cJSON_AddItemToArray(list, cJSON_CreateString(tc->freeze[p]));
    char *text = NULL;
    if (j && list && cJSON_AddItemToObject(j, "freeze", list)) {
        list = NULL;
        text = cJSON_PrintUnformatted(j);
        if (!text || strlen(text) >= len) { /* too long: a hash of the list instead */
            uint64_t h = 1469598103934665603ull;
            for (int p = 0; p < tc->freeze_n; p++)
                for (const unsigned char *c = (const unsigned char *)tc->freeze[p];; c++) {
                    h = (h ^ *c) * 1099511628211ull; /* the NUL separates the prefixes */
                    if (!*c) break;
                }
            char hash[40];
            snprintf(hash, sizeof hash, "fnv1a64:%016" PRIx64, h);
            cJSON_free(text);
            text = NULL;
            cJSON_DeleteItemFromObject(j, "freeze");
            if (cJSON_AddStringToObject(j, "freeze", hash)) text = cJSON_PrintUnformatted(j);
        }
    }
    if (text && strlen(text) < len) snprintf(out, len, "%s", text);
    cJSON_free(text);
    cJSON_Delete(list);
    cJSON_Delete(j);
}
