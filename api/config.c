/* api/config.c - see config.h: the engine of the config table.
 *
 * Owns: what the key table's rows (api/config_keys.c) mean: a value checked
 * against its row (type, bounds, choices, length) and stored into its field
 * (config_apply_value, which api/config_load.c calls for each key a document
 * or a --set names), a field read back as a value (the effective config,
 * config_to_json; config_describe for api/config_schema.c), the defaults
 * applied row by row, the presets applied, the rules between keys
 * (config_validate: dim % heads, the data format against the model, batch
 * divisibility, ...: code, not rows, so here and not in the table), and the
 * one-line messages every error of the config writes.
 * Must not: hold a row (a key is added in api/config_keys.c alone), or read
 * text: JSON, YAML, manifests and --set assignments are parsed in
 * api/config_load.c.
 */
#include "config.h"

#include "config_impl.h"
#include "config_keys.h"
#include "randaug_spec.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

/* Copies s into a fixed buffer, zero-filling the rest (so that equal configs
 * compare equal byte for byte). The caller has checked that it fits. */
static void set_str(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n >= cap)
        n = cap - 1;
    memset(dst, 0, cap);
    memcpy(dst, s, n);
}

char *config_dup_range(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Shortest "%.Ng" that reads back as exactly d. */
static void fmt_num(char *out, size_t n, double d)
{
    if (isnan(d)) {
        snprintf(out, n, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(out, n, d < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, d);
        if (strtod(out, NULL) == d)
            return;
    }
}

/* `"text"` with quotes, backslashes and control bytes escaped, cut at 80 bytes. */
void config_quote(char *out, size_t n, const char *s)
{
    size_t o = 0;
    const size_t limit = 80;
    if (n < 8) {
        if (n)
            out[0] = '\0';
        return;
    }
    out[o++] = '"';
    size_t i = 0;
    for (; i < limit && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        char piece[8];
        if (c == '"' || c == '\\')
            snprintf(piece, sizeof piece, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            snprintf(piece, sizeof piece, "\\x%02x", c);
        else
            snprintf(piece, sizeof piece, "%c", c);
        size_t pl = strlen(piece);
        if (o + pl + 5 >= n) /* room for `..."` and NUL */
            break;
        memcpy(out + o, piece, pl);
        o += pl;
    }
    if (s[i]) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o++] = '"';
    out[o] = '\0';
}

/* "string \"ten\"", "number 1.5", "boolean true", "null", "array", "object". */
void config_value_words(char *out, size_t n, const cJSON *v)
{
    char buf[200];
    if (v == NULL) {
        snprintf(out, n, "nothing");
    } else if (cJSON_IsString(v)) {
        config_quote(buf, sizeof buf, v->valuestring);
        snprintf(out, n, "string %s", buf);
    } else if (cJSON_IsNumber(v)) {
        fmt_num(buf, sizeof buf, v->valuedouble);
        snprintf(out, n, "number %s", buf);
    } else if (cJSON_IsBool(v)) {
        snprintf(out, n, "boolean %s", cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(out, n, "null");
    } else if (cJSON_IsArray(v)) {
        snprintf(out, n, "array");
    } else if (cJSON_IsObject(v)) {
        snprintf(out, n, "object");
    } else {
        snprintf(out, n, "a value of unknown type");
    }
}

/* Writes "<origin>: <message>" into the caller's buffer, on one line. */
int config_fail(const config_ctx *c, const char *fmt, ...)
{
    if (c->err == NULL || c->errlen == 0)
        return VJ_ERR_CONFIG;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->origin)
        snprintf(c->err, c->errlen, "%s: %s", c->origin, msg);
    else
        snprintf(c->err, c->errlen, "%s", msg);
    for (char *p = c->err; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    return VJ_ERR_CONFIG;
}

/* ------------------------------------------------------------------------ */
/* Applying one value to one field                                           */

static int check_range(const config_ctx *c, const config_key *k, const char *name, double d)
{
    int ok = (k->open & OPEN_MIN) ? d > k->min : d >= k->min;
    ok = ok && ((k->open & OPEN_MAX) ? d < k->max : d <= k->max);
    if (ok) /* also false for NaN */
        return 0;
    char v[64], lo[64], hi[64];
    fmt_num(v, sizeof v, d);
    fmt_num(lo, sizeof lo, k->min);
    fmt_num(hi, sizeof hi, k->max);
    return config_fail(c, "%s=%s is out of range %c%s, %s%c", name, v, (k->open & OPEN_MIN) ? '(' : '[', lo,
                       hi, (k->open & OPEN_MAX) ? ')' : ']');
}

static int fail_choices(const config_ctx *c, const config_key *k, const char *value)
{
    char list[512] = "";
    size_t used = 0;
    for (size_t i = 0;; i++) {
        const char *name = k->type != KT_PRESET ? k->choices[i]
                           : i < config_n_presets ? config_presets[i].name
                                                  : NULL;
        if (name == NULL)
            break;
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", name);
        if (w < 0 || (size_t)w >= sizeof list - used)
            break;
        used += (size_t)w;
    }
    char q[200];
    config_quote(q, sizeof q, value);
    return config_fail(c, "%s=%s is not one of %s", k->path, q, list);
}

/* "an array of 2 numbers", "an array of 1 to 3 numbers" */
_Static_assert(NUMS_MAX >= 2, "a KT_PAIR's two numbers fit in NUMS_MAX");

/* The fewest numbers an array key takes. */
static int min_items(const config_key *k)
{
    return k->type == KT_PAIR || k->all_items ? k->items : 1;
}

static void items_words(char *out, size_t n, const config_key *k)
{
    if (min_items(k) == k->items)
        snprintf(out, n, "an array of %d numbers", k->items);
    else
        snprintf(out, n, "an array of 1 to %d numbers", k->items);
}

/* The numbers of a KT_PAIR or KT_VEC value v (an array of 2, or of 1 to
 * k->items), each checked against the row's bounds, into nums[0..*n). */
static int number_array(const config_ctx *c, const config_key *k, const cJSON *v, double *nums,
                        int *n)
{
    char got[256], want[64];
    items_words(want, sizeof want, k);
    if (!cJSON_IsArray(v)) {
        config_value_words(got, sizeof got, v);
        return config_fail(c, "%s: expected %s, got %s", k->path, want, got);
    }
    const int len = cJSON_GetArraySize(v);
    const int lo = min_items(k);
    if (len < lo || len > k->items)
        return config_fail(c, "%s: expected %s, got an array of %d", k->path, want, len);
    for (int i = 0; i < len; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        char name[CONFIG_PATH_MAX + 8];
        snprintf(name, sizeof name, "%s[%d]", k->path, i);
        if (!cJSON_IsNumber(e)) {
            config_value_words(got, sizeof got, e);
            return config_fail(c, "%s: expected a number, got %s", name, got);
        }
        int rc = check_range(c, k, name, e->valuedouble);
        if (rc)
            return rc;
        nums[i] = e->valuedouble;
    }
    *n = len;
    return 0;
}

/* Checks v against row k and, only if it passes, stores it into cfg. */
int config_apply_value(const config_ctx *c, vit_job_config *cfg, const config_key *k,
                       const cJSON *v)
{
    char *field = (char *)cfg + k->off;
    char got[256];
    config_value_words(got, sizeof got, v);
    const size_t row = (size_t)(k - config_keys);
    if (row < config_n_keys) /* a row of the table, not a copy: the key was given */
        cfg->given[row / 8] |= (unsigned char)(1u << (row % 8));

    switch (k->type) {
    case KT_INT:
    case KT_LONG:
    case KT_U64: {
        if (!cJSON_IsNumber(v))
            return config_fail(c, "%s: expected an integer, got %s", k->path, got);
        double d = v->valuedouble;
        if (!isfinite(d) || d != floor(d))
            return config_fail(c, "%s: expected an integer, got %s", k->path, got);
        int rc = check_range(c, k, k->path, d);
        if (rc)
            return rc;
        if (k->type == KT_INT)
            *(int *)(void *)field = (int)d;
        else if (k->type == KT_LONG)
            *(long *)(void *)field = (long)d;
        else
            *(unsigned long long *)(void *)field = (unsigned long long)d;
        return 0;
    }
    case KT_DOUBLE: {
        if (!cJSON_IsNumber(v))
            return config_fail(c, "%s: expected a number, got %s", k->path, got);
        int rc = check_range(c, k, k->path, v->valuedouble);
        if (rc)
            return rc;
        *(double *)(void *)field = v->valuedouble;
        return 0;
    }
    case KT_BOOL:
        if (!cJSON_IsBool(v))
            return config_fail(c, "%s: expected a boolean (true or false), got %s", k->path, got);
        *(int *)(void *)field = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    case KT_ENUM: {
        if (!cJSON_IsString(v))
            return config_fail(c, "%s: expected a string, got %s", k->path, got);
        for (int i = 0; k->choices[i]; i++)
            if (strcmp(k->choices[i], v->valuestring) == 0) {
                *(int *)(void *)field = i; /* enums of small values are int-sized */
                return 0;
            }
        return fail_choices(c, k, v->valuestring);
    }
    case KT_STRING:
    case KT_PRESET: {
        if (!cJSON_IsString(v))
            return config_fail(c, "%s: expected a string, got %s", k->path, got);
        const char *s = v->valuestring;
        size_t n = strlen(s);
        if (n >= k->size)
            return config_fail(c, "%s: a string of %zu bytes is too long (at most %zu)", k->path, n,
                               k->size - 1);
        if (k->type == KT_PRESET) {
            /* "" = no preset: leave the dims as they are. */
            if (n > 0 && config_preset(&cfg->model, s) != 0)
                return fail_choices(c, k, s);
        }
        set_str(field, k->size, s);
        return 0;
    }
    case KT_STRS: {
        const size_t cap = k->size / (size_t)k->items; /* one string's, with its NUL */
        if (cJSON_IsNull(v)) { /* not given: none */
            memset(field, 0, k->size);
            *(int *)(void *)((char *)cfg + k->off2) = 0;
            return 0;
        }
        if (!cJSON_IsArray(v))
            return config_fail(c, "%s: expected an array of strings, got %s", k->path, got);
        const int len = cJSON_GetArraySize(v);
        if (len > k->items)
            return config_fail(c, "%s: expected at most %d strings, got an array of %d", k->path,
                               k->items, len);
        for (int i = 0; i < len; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            config_value_words(got, sizeof got, e);
            if (!cJSON_IsString(e) || !e->valuestring[0])
                return config_fail(c, "%s[%d]: expected a non-empty string, got %s", k->path, i, got);
            if (strlen(e->valuestring) >= cap)
                return config_fail(c, "%s[%d]: a string of %zu bytes is too long (at most %zu)",
                                   k->path, i, strlen(e->valuestring), cap - 1);
        }
        memset(field, 0, k->size);
        for (int i = 0; i < len; i++)
            set_str(field + (size_t)i * cap, cap, cJSON_GetArrayItem(v, i)->valuestring);
        *(int *)(void *)((char *)cfg + k->off2) = len;
        return 0;
    }
    case KT_PAIR:
    case KT_VEC: {
        double nums[NUMS_MAX]; /* >= 2, a pair's */
        int n = 0;
        if (k->type == KT_VEC && cJSON_IsNull(v)) { /* not given: the key's default */
            memset(field, 0, k->size);
            *(int *)(void *)((char *)cfg + k->off2) = 0;
            return 0;
        }
        int rc = number_array(c, k, v, nums, &n);
        if (rc)
            return rc;
        if (k->type == KT_PAIR) {
            *(double *)(void *)field = nums[0];
            *(double *)(void *)((char *)cfg + k->off2) = nums[1];
        } else {
            memset(field, 0, k->size);
            memcpy(field, nums, (size_t)n * sizeof nums[0]);
            *(int *)(void *)((char *)cfg + k->off2) = n;
        }
        return 0;
    }
    }
    return config_fail(c, "%s: internal error: unknown key type", k->path);
}

/* The field as a cJSON value. `exact` prints numbers as raw text that reads
 * back bit for bit (cJSON's own printer may round the last digit). */
static cJSON *field_to_json(const vit_job_config *cfg, const config_key *k, int exact)
{
    const char *field = (const char *)cfg + k->off;
    char num[64];
    switch (k->type) {
    case KT_INT:
        snprintf(num, sizeof num, "%d", *(const int *)(const void *)field);
        return exact ? cJSON_CreateRaw(num) : cJSON_CreateNumber(*(const int *)(const void *)field);
    case KT_LONG:
        snprintf(num, sizeof num, "%ld", *(const long *)(const void *)field);
        return exact ? cJSON_CreateRaw(num)
                     : cJSON_CreateNumber((double)*(const long *)(const void *)field);
    case KT_U64:
        snprintf(num, sizeof num, "%llu", *(const unsigned long long *)(const void *)field);
        return exact ? cJSON_CreateRaw(num)
                     : cJSON_CreateNumber((double)*(const unsigned long long *)(const void *)field);
    case KT_DOUBLE: {
        double d = *(const double *)(const void *)field;
        if (!exact || !isfinite(d))
            return cJSON_CreateNumber(d);
        fmt_num(num, sizeof num, d);
        return cJSON_CreateRaw(num);
    }
    case KT_BOOL:
        return cJSON_CreateBool(*(const int *)(const void *)field != 0);
    case KT_ENUM: {
        int v = *(const int *)(const void *)field, n = 0;
        while (k->choices[n])
            n++;
        return cJSON_CreateString(v >= 0 && v < n ? k->choices[v] : "?");
    }
    case KT_STRING:
    case KT_PRESET: {
        char *s = config_dup_range(field, strnlen(field, k->size - 1));
        if (!s)
            return NULL;
        cJSON *j = cJSON_CreateString(s);
        free(s);
        return j;
    }
    case KT_STRS: {
        const size_t cap = k->size / (size_t)k->items;
        int n = *(const int *)(const void *)((const char *)cfg + k->off2);
        if (n < 0 || n > k->items) /* set by code: shown as the error it is */
            return cJSON_CreateNumber(n);
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; arr && i < n; i++) {
            const char *f = field + (size_t)i * cap;
            char *s = config_dup_range(f, strnlen(f, cap - 1));
            cJSON *e = s ? cJSON_CreateString(s) : NULL;
            free(s);
            if (!e || !cJSON_AddItemToArray(arr, e)) {
                cJSON_Delete(e);
                cJSON_Delete(arr);
                return NULL;
            }
        }
        return arr;
    }
    case KT_PAIR:
    case KT_VEC: {
        double nums[NUMS_MAX]; /* >= 2, a pair's */
        int n = 2;
        const void *second = (const char *)cfg + k->off2;
        if (k->type == KT_PAIR) {
            nums[0] = *(const double *)(const void *)field;
            nums[1] = *(const double *)second;
        } else {
            n = *(const int *)second;
            if (n == 0)
                return cJSON_CreateNull(); /* not given */
            if (n < 0 || n > k->items)     /* set by code: shown as the error it is */
                return cJSON_CreateNumber(n);
            memcpy(nums, field, (size_t)n * sizeof nums[0]);
        }
        cJSON *arr = cJSON_CreateArray();
        if (!arr)
            return NULL;
        for (int i = 0; i < n; i++) {
            cJSON *e;
            if (exact && isfinite(nums[i])) {
                fmt_num(num, sizeof num, nums[i]);
                e = cJSON_CreateRaw(num);
            } else {
                e = cJSON_CreateNumber(nums[i]);
            }
            if (!e || !cJSON_AddItemToArray(arr, e)) {
                cJSON_Delete(e);
                cJSON_Delete(arr);
                return NULL;
            }
        }
        return arr;
    }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Public API                                                                */

int config_preset(model_config *m, const char *name)
{
    if (m == NULL || name == NULL)
        return -1;
    for (size_t i = 0; i < config_n_presets; i++) {
        const preset_def *p = &config_presets[i];
        if (strcmp(p->name, name) != 0)
            continue;
        set_str(m->preset, sizeof m->preset, p->name);
        m->image_size = p->image_size;
        m->patch_size = p->patch_size;
        m->channels = p->channels;
        m->dim = p->dim;
        m->depth = p->depth;
        m->heads = p->heads;
        m->mlp_ratio = p->mlp_ratio;
        m->num_classes = p->num_classes;
        return 0;
    }
    return -1;
}

/* Writes the row's default into its field (DEF_PRESET and DEF_UNSET: the
 * field keeps what it holds: the preset's value, or zero). */
static void set_default(vit_job_config *cfg, const config_key *k)
{
    if (k->dflt.from != DEF_KEY && k->dflt.from != DEF_FOLLOWS)
        return;
    char *field = (char *)cfg + k->off;
    const key_default *d = &k->dflt;
    switch (k->type) {
    case KT_INT:
    case KT_BOOL:
    case KT_ENUM:
        *(int *)(void *)field = (int)d->num;
        break;
    case KT_LONG:
        *(long *)(void *)field = (long)d->num;
        break;
    case KT_U64:
        *(unsigned long long *)(void *)field = (unsigned long long)d->num;
        break;
    case KT_DOUBLE:
        *(double *)(void *)field = d->num;
        break;
    case KT_PAIR:
        *(double *)(void *)field = d->num;
        *(double *)(void *)((char *)cfg + k->off2) = d->num2;
        break;
    case KT_VEC: /* only unset (ROW_VEC): config_defaults' memset left it so */
    case KT_STRS: /* none (ROW_STRS) */
        break;
    case KT_STRING:
        set_str(field, k->size, d->str ? d->str : "");
        break;
    case KT_PRESET:
        config_preset(&cfg->model, d->str ? d->str : "");
        break;
    }
}

void config_defaults(vit_job_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    /* in table order: model.preset, the first row, fills the dims that come from it */
    for (size_t i = 0; i < config_n_keys; i++)
        set_default(cfg, &config_keys[i]);
    cfg->world_size = 1;
}

int config_mlp_hidden(const model_config *m)
{
    return (int)lround((double)m->dim * m->mlp_ratio);
}

int config_data_norm(const vit_job_config *cfg, double mean[CONFIG_DATA_CHANNELS_MAX],
                     double std[CONFIG_DATA_CHANNELS_MAX])
{
    static const double imagenet_mean[3] = {0.485, 0.456, 0.406};
    static const double imagenet_std[3] = {0.229, 0.224, 0.225};
    const int n = cfg->model.channels;
    if (n < 1 || n > CONFIG_DATA_CHANNELS_MAX)
        return 0;
    const data_config *d = &cfg->data;
    for (int i = 0; i < n; i++) {
        mean[i] = d->mean_n == n ? d->mean[i] : n == 3 ? imagenet_mean[i] : 0.5;
        std[i] = d->std_n == n ? d->std[i] : n == 3 ? imagenet_std[i] : 0.5;
    }
    return n;
}

int config_accum_steps(const vit_job_config *cfg)
{
    long long per_step = (long long)cfg->training.micro_batch_size * cfg->world_size;
    if (per_step <= 0)
        return 0;
    return (int)(cfg->training.global_batch_size / per_step);
}

/* ------------------------------------------------------------------------ */
/* Validation: the rules between keys                                        */

/* A [min, max] pair: min <= max. */
static int validate_ordered(const config_ctx *c, const char *path, double lo, double hi)
{
    if (lo <= hi)
        return 0;
    char a[64], b[64];
    fmt_num(a, sizeof a, lo);
    fmt_num(b, sizeof b, hi);
    return config_fail(c, "%s=[%s, %s]: the minimum %s exceeds the maximum %s", path, a, b, a, b);
}

/* data.randAugment parses (api/randaug_spec.c), and it and data.randomErasing
 * are asked for only where they apply: the loader's training augmentation. */
static int validate_augment(const config_ctx *c, const data_config *d)
{
    randaug_spec ra;
    char why[1024];
    if (randaug_spec_parse(d->rand_augment, "data.randAugment", &ra, why, sizeof why) != 0)
        return config_fail(c, "%s", why);
    const char *on = ra.enabled ? "data.randAugment" : d->random_erasing > 0 ? "data.randomErasing"
                                                                             : NULL;
    if (!on)
        return 0;
    if (d->format == DATA_FASHION_MNIST)
        return config_fail(c, "%s does not fit data.format=fashion-mnist: it applies to webdataset and "
                              "imagefolder images (fashion-mnist's augmentation is its padded crop and flip)",
                           on);
    if (!d->augment)
        return config_fail(c, "%s needs data.augment=true: it follows the training augmentation's crop "
                              "and flip",
                           on);
    return 0;
}

/* data.mean or data.std, when given: one number per channel. */
static int validate_per_channel(const config_ctx *c, const char *path, int n, int channels)
{
    if (n == 0 || n == channels)
        return 0;
    return config_fail(c, "%s has %d number%s but model.channels=%d: give one per channel, or leave "
                          "%s out for the default", path, n, n == 1 ? "" : "s", channels, path);
}

/* imagefolder reads files, not objects. */
static int validate_local(const config_ctx *c, const char *path, const char *uri)
{
    if (strncmp(uri, "s3://", 5) != 0)
        return 0;
    char q[200];
    config_quote(q, sizeof q, uri);
    return config_fail(c, "%s=%s: imagefolder reads a local folder or mounted volume; write webdataset "
                          "shards with vitjob-worker shards for S3", path, q);
}

/* The checks of webdataset and imagefolder: RGB or grayscale, the
 * normalisation per channel, imagefolder's URIs local. */
static int validate_images(const config_ctx *c, const vit_job_config *cfg)
{
    const model_config *m = &cfg->model;
    const data_config *d = &cfg->data;
    const char *fmt = config_enum_name("data.format", (int)d->format);
    if (m->channels != 1 && m->channels != 3)
        return config_fail(c, "model.channels=%d does not fit data.format=%s: images are decoded to RGB "
                              "(3 channels) or grayscale (1), so model.channels must be 3 or 1",
                           m->channels, fmt);
    int rc;
    if ((rc = validate_per_channel(c, "data.mean", d->mean_n, m->channels)) ||
        (rc = validate_per_channel(c, "data.std", d->std_n, m->channels)))
        return rc;
    if (d->format == DATA_IMAGEFOLDER &&
        ((rc = validate_local(c, "data.uri", d->uri)) ||
         (rc = validate_local(c, "data.testUri", d->test_uri))))
        return rc;
    return 0;
}

/* data.mixup, data.cutmix and their keys (worker/data/mixup.h): the mode
 * built, cutmixMinMax as [min, max] with room for a box size, and an even
 * micro-batch (timm's Mixup pairs each sample with the batch reversed). */
static int validate_mixup(const config_ctx *c, const vit_job_config *cfg)
{
    const data_config *d = &cfg->data;
    if (d->mixup_mode != MIXUP_MODE_BATCH)
        return config_fail(c, "data.mixupMode=%s is not implemented: only batch (one draw per "
                              "micro-batch, timm's default)",
                           config_enum_name("data.mixupMode", (int)d->mixup_mode));
    if (d->cutmix_minmax_n == 2) {
        int rc = validate_ordered(c, "data.cutmixMinMax", d->cutmix_minmax[0],
                                  d->cutmix_minmax[1]);
        if (rc)
            return rc;
        const int S = cfg->model.image_size;
        const int lo = (int)(S * d->cutmix_minmax[0]), hi = (int)(S * d->cutmix_minmax[1]);
        if (lo >= hi) {
            char a[64], b[64];
            fmt_num(a, sizeof a, d->cutmix_minmax[0]);
            fmt_num(b, sizeof b, d->cutmix_minmax[1]);
            return config_fail(c, "data.cutmixMinMax=[%s, %s] leaves no box size at model.imageSize=%d: "
                                  "the sides are drawn from [int(%d x %s), int(%d x %s)) = [%d, %d)",
                               a, b, S, S, a, S, b, lo, hi);
        }
    }
    const int on = d->mixup > 0 || d->cutmix > 0 || d->cutmix_minmax_n > 0;
    if (on && cfg->training.micro_batch_size % 2 != 0)
        return config_fail(c, "training.microBatchSize=%d is odd: data.mixup and data.cutmix pair each "
                              "sample with the micro-batch reversed (timm's Mixup), which needs an even "
                              "micro-batch", cfg->training.micro_batch_size);
    return 0;
}

int config_validate(const vit_job_config *cfg, char *err, size_t errlen)
{
    const config_ctx c = {NULL, err, errlen};
    if (cfg == NULL)
        return config_fail(&c, "internal error: no config");

    /* Every field on its own, with the same checks as a file (catches
     * fields that code has set directly). */
    vit_job_config *scratch = malloc(sizeof *scratch);
    if (!scratch)
        return config_fail(&c, "out of memory");
    memcpy(scratch, cfg, sizeof *scratch);
    int rc = 0;
    for (size_t i = 0; i < config_n_keys && rc == 0; i++) {
        const config_key *k = &config_keys[i];
        if ((k->type == KT_STRING || k->type == KT_PRESET) &&
            memchr((const char *)cfg + k->off, '\0', k->size) == NULL) {
            rc = config_fail(&c, "%s: string is not NUL-terminated", k->path);
            break;
        }
        cJSON *v = field_to_json(cfg, k, 0);
        rc = v ? config_apply_value(&c, scratch, k, v) : config_fail(&c, "out of memory");
        cJSON_Delete(v);
    }
    free(scratch);
    if (rc)
        return rc;

    const model_config *m = &cfg->model;
    const training_config *t = &cfg->training;
    const optimizer_config *o = &t->optimizer;

    if (m->dim % m->heads != 0)
        return config_fail(&c, "model.dim=%d is not divisible by model.heads=%d", m->dim, m->heads);
    if (m->image_size % m->patch_size != 0)
        return config_fail(&c, "model.imageSize=%d is not divisible by model.patchSize=%d", m->image_size,
                           m->patch_size);
    if (config_mlp_hidden(m) < 1) {
        char r[64];
        fmt_num(r, sizeof r, m->mlp_ratio);
        return config_fail(&c, "model.dim=%d * model.mlpRatio=%s gives an MLP hidden width of %d; it must be >= 1",
                           m->dim, r, config_mlp_hidden(m));
    }

    if (cfg->data.format == DATA_FASHION_MNIST) {
        if (m->image_size != 28)
            return config_fail(&c, "model.imageSize=%d does not fit data.format=fashion-mnist: "
                                   "Fashion-MNIST images are 28x28x1, so model.imageSize must be 28",
                               m->image_size);
        if (m->channels != 1)
            return config_fail(&c, "model.channels=%d does not fit data.format=fashion-mnist: "
                                   "Fashion-MNIST images are 28x28x1, so model.channels must be 1",
                               m->channels);
        if (m->num_classes < 10)
            return config_fail(&c, "model.numClasses=%d does not fit data.format=fashion-mnist: "
                                   "Fashion-MNIST has 10 classes, so model.numClasses must be >= 10",
                               m->num_classes);
    } else {
        rc = validate_images(&c, cfg);
        if (rc)
            return rc;
    }
    if ((rc = validate_ordered(&c, "data.scale", cfg->data.scale_min, cfg->data.scale_max)) ||
        (rc = validate_ordered(&c, "data.ratio", cfg->data.ratio_min, cfg->data.ratio_max)) ||
        (rc = validate_mixup(&c, cfg)) ||
        (rc = validate_augment(&c, &cfg->data)))
        return rc;

    if (cfg->world_size < 1)
        return config_fail(&c, "world size %d is invalid; it must be >= 1", cfg->world_size);
    if (t->global_batch_size % cfg->world_size != 0) /* no micro-batch size fits */
        return config_fail(&c, "training.globalBatchSize=%d is not divisible by the world size %d "
                               "(replicas x gpusPerReplica): every rank takes the same share",
                           t->global_batch_size, cfg->world_size);
    long long per_step = (long long)t->micro_batch_size * cfg->world_size;
    if (t->global_batch_size % per_step != 0)
        return config_fail(&c, "training.globalBatchSize=%d is not divisible by training.microBatchSize=%d "
                               "x world size %d = %lld",
                           t->global_batch_size, t->micro_batch_size, cfg->world_size, per_step);
    if (t->steps == 0 && t->epochs == 0)
        return config_fail(&c, "training.steps=0 and training.epochs=0: set one of them to a positive number");
    if (t->steps > 0 && o->warmup_steps > t->steps)
        return config_fail(&c, "training.optimizer.warmupSteps=%d exceeds training.steps=%ld",
                           o->warmup_steps, t->steps);
    if (o->min_lr > o->lr) {
        char a[64], b[64];
        fmt_num(a, sizeof a, o->min_lr);
        fmt_num(b, sizeof b, o->lr);
        return config_fail(&c, "training.optimizer.minLr=%s exceeds training.optimizer.lr=%s", a, b);
    }

    const char *ck = cfg->checkpoint.uri;
    if (ck[0] && strncmp(ck, "s3://", 5) != 0 && strncmp(ck, "file://", 7) != 0) {
        char q[200];
        config_quote(q, sizeof q, ck);
        return config_fail(&c, "checkpoint.uri=%s must start with s3:// or file://", q);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Defaults that follow other keys                                           */

const config_key *config_find_key(const char *path)
{
    for (size_t i = 0; path && i < config_n_keys; i++)
        if (strcmp(config_keys[i].path, path) == 0)
            return &config_keys[i];
    return NULL;
}

int config_given(const vit_job_config *cfg, const char *path)
{
    const config_key *k = config_find_key(path);
    if (!cfg || !k)
        return 0;
    const size_t row = (size_t)(k - config_keys);
    return (cfg->given[row / 8] >> (row % 8)) & 1;
}

/* The row's own default: what a DEF_FOLLOWS key starts from. */
static double base_of(const char *path)
{
    const config_key *k = config_find_key(path);
    return k ? k->dflt.num : 0;
}

int config_warmup_steps(const vit_job_config *cfg, long total_steps)
{
    const char *path = "training.optimizer.warmupSteps";
    if (config_given(cfg, path))
        return cfg->training.optimizer.warmup_steps;
    const double base = base_of(path);
    return total_steps >= 0 && (double)total_steps < base ? (int)total_steps : (int)base;
}

/* The largest divisor of n up to cap (an even one first when `even`); 0 for n < 1. */
static int divisor_up_to(long long n, int cap, int even)
{
    for (int pass = even ? 0 : 1; pass < 2; pass++)
        for (int d = cap; d >= 1; d--)
            if (n % d == 0 && (pass == 1 || d % 2 == 0))
                return d;
    return 0;
}

/* The batch sizes: the one left unset follows the one given and the world size. */
static void follow_batches(vit_job_config *cfg)
{
    training_config *t = &cfg->training;
    const int world = cfg->world_size > 0 ? cfg->world_size : 1;
    const int micro_given = config_given(cfg, "training.microBatchSize");
    const int global_given = config_given(cfg, "training.globalBatchSize");
    if (!micro_given) {
        const int base = (int)base_of("training.microBatchSize");
        const data_config *d = &cfg->data;
        const int mixing = d->mixup > 0 || d->cutmix > 0 || d->cutmix_minmax_n > 0;
        int m = global_given && t->global_batch_size % world == 0
                    ? divisor_up_to(t->global_batch_size / world, base, mixing)
                    : 0;
        t->micro_batch_size = m > 0 ? m : base;
    }
    if (!global_given) {
        const long long per = (long long)t->micro_batch_size * world;
        const long long base = (long long)base_of("training.globalBatchSize");
        long long g = per > 0 ? (base + per - 1) / per * per : base;
        t->global_batch_size = g <= 16777216 ? (int)g : (int)base; /* beyond: refused as given */
    }
}

int config_finish(vit_job_config *cfg, char *err, size_t errlen)
{
    if (cfg == NULL)
        return config_validate(cfg, err, errlen);
    optimizer_config *o = &cfg->training.optimizer;
    if (cfg->training.steps > 0)
        o->warmup_steps = config_warmup_steps(cfg, cfg->training.steps);
    else if (!config_given(cfg, "training.optimizer.warmupSteps"))
        o->warmup_steps = (int)base_of("training.optimizer.warmupSteps"); /* the run's: train.c */
    if (!config_given(cfg, "training.optimizer.lr")) {
        const double base = base_of("training.optimizer.lr");
        o->lr = o->min_lr > base ? o->min_lr : base;
    }
    follow_batches(cfg);
    if (!config_given(cfg, "data.augment"))
        cfg->data.augment = cfg->data.format != DATA_FASHION_MNIST;
    return config_validate(cfg, err, errlen);
}

char *config_to_json(const vit_job_config *cfg)
{
    if (cfg == NULL)
        return NULL;
    cJSON *root = cJSON_CreateObject();
    char *out = NULL;
    if (!root)
        return NULL;
    for (size_t i = 0; i < config_n_keys; i++) {
        const config_key *k = &config_keys[i];
        /* Walk or create the sections of the path, then add the leaf. */
        cJSON *parent = root;
        const char *p = k->path;
        const char *dot;
        while ((dot = strchr(p, '.')) != NULL) {
            char name[CONFIG_PATH_MAX];
            snprintf(name, sizeof name, "%.*s", (int)(dot - p), p);
            cJSON *sec = cJSON_GetObjectItemCaseSensitive(parent, name);
            if (!sec) {
                sec = cJSON_AddObjectToObject(parent, name);
                if (!sec)
                    goto out;
            }
            parent = sec;
            p = dot + 1;
        }
        cJSON *v = field_to_json(cfg, k, 1);
        if (!v || !cJSON_AddItemToObject(parent, p, v)) {
            cJSON_Delete(v);
            goto out;
        }
    }
    out = cJSON_PrintUnformatted(root);
out:
    cJSON_Delete(root);
    return out;
}

cJSON *config_describe(void)
{
    vit_job_config d;
    config_defaults(&d);
    cJSON *out = cJSON_CreateArray();
    for (size_t i = 0; out && i < config_n_keys; i++) {
        const config_key *k = &config_keys[i];
        cJSON *row = cJSON_CreateObject();
        if (!row || !cJSON_AddItemToArray(out, row)) {
            cJSON_Delete(row);
            cJSON_Delete(out);
            return NULL;
        }
        static const char *const types[] = {
            [KT_INT] = "integer", [KT_LONG] = "integer", [KT_U64] = "integer",
            [KT_DOUBLE] = "number", [KT_BOOL] = "boolean", [KT_STRING] = "string",
            [KT_ENUM] = "string", [KT_PAIR] = "array", [KT_VEC] = "array",
            [KT_PRESET] = "string", [KT_STRS] = "array"};
        const int array = k->type == KT_PAIR || k->type == KT_VEC;
        int ok = cJSON_AddStringToObject(row, "path", k->path) &&
                 cJSON_AddStringToObject(row, "type", types[k->type]) != NULL;
        if (k->type <= KT_DOUBLE || array) {
            ok = ok && cJSON_AddNumberToObject(row, "minimum", k->min) &&
                 cJSON_AddNumberToObject(row, "maximum", k->max) &&
                 cJSON_AddBoolToObject(row, "exclusiveMinimum", (k->open & OPEN_MIN) != 0) &&
                 cJSON_AddBoolToObject(row, "exclusiveMaximum", (k->open & OPEN_MAX) != 0);
        }
        if (k->type == KT_ENUM || k->type == KT_PRESET) {
            cJSON *e = cJSON_AddArrayToObject(row, "enum");
            if (k->type == KT_ENUM)
                for (const char *const *c = k->choices; e && *c; c++)
                    cJSON_AddItemToArray(e, cJSON_CreateString(*c));
            else {
                for (size_t p = 0; e && p < config_n_presets; p++)
                    cJSON_AddItemToArray(e, cJSON_CreateString(config_presets[p].name));
                cJSON_AddItemToArray(e, cJSON_CreateString(""));
            }
            ok = ok && e;
        }
        static const char *const formats_of[] = {[KT_INT] = "int32", [KT_LONG] = "int64",
                                                 [KT_U64] = "int64", [KT_DOUBLE] = "double",
                                                 [KT_PAIR] = "double", [KT_VEC] = "double"};
        if (k->type <= KT_DOUBLE || array)
            ok = ok && cJSON_AddStringToObject(row, "format", formats_of[k->type]);
        if (k->type == KT_STRING)
            ok = ok && cJSON_AddNumberToObject(row, "maxLength", (double)(k->size - 1));
        if (array)
            ok = ok && cJSON_AddNumberToObject(row, "minItems", min_items(k)) &&
                 cJSON_AddNumberToObject(row, "maxItems", k->items);
        if (k->type == KT_STRS) /* items: strings of 1 to size/items - 1 bytes */
            ok = ok && cJSON_AddNumberToObject(row, "maxItems", k->items) &&
                 cJSON_AddStringToObject(row, "itemType", "string") &&
                 cJSON_AddNumberToObject(row, "maxLength",
                                         (double)(k->size / (size_t)k->items - 1));
        static const char *const from[] = {[DEF_KEY] = "key", [DEF_PRESET] = "preset",
                                           [DEF_UNSET] = "unset", [DEF_FOLLOWS] = "follows"};
        ok = ok && cJSON_AddStringToObject(row, "defaultFrom", from[k->dflt.from]) &&
             cJSON_AddStringToObject(row, "description", k->help ? k->help : "") &&
             cJSON_AddStringToObject(row, "readme", k->readme ? k->readme : "");
        if (k->kind)
            ok = ok && cJSON_AddStringToObject(row, "readmeType", k->kind);
        if (k->pattern)
            ok = ok && cJSON_AddStringToObject(row, "pattern", k->pattern);
        if (k->item_help)
            ok = ok && cJSON_AddStringToObject(row, "itemDescription", k->item_help);
        if (k->dflt_words)
            ok = ok && cJSON_AddStringToObject(row, "defaultWords", k->dflt_words);
        cJSON *v = field_to_json(&d, k, 0);
        if (!ok || !v || !cJSON_AddItemToObject(row, "default", v)) {
            cJSON_Delete(v);
            cJSON_Delete(out);
            return NULL;
        }
    }
    return out;
}

const char *config_enum_name(const char *path, int value)
{
    for (size_t i = 0; path && i < config_n_keys; i++) {
        const config_key *k = &config_keys[i];
        if (k->type != KT_ENUM || strcmp(k->path, path) != 0)
            continue;
        for (int j = 0; k->choices[j]; j++)
            if (j == value)
                return k->choices[j];
    }
    return "?";
}
