/* api/config_load.c - see config.h: a config read from text.
 *
 * Owns: config_load_file, config_load_string and config_set: a document
 * parsed into a cJSON tree first (JSON with cJSON, YAML with libyaml's event
 * API through lib/yaml_json: plain scalars resolved as YAML 1.1 does:
 * numbers, booleans, null; quoted scalars always strings), the bare spec or
 * a ViTJob manifest's spec walked section by section onto the key table
 * (presets first, duplicate and dotted keys refused, the operator's keys
 * ignored), a `--set key=value` assignment's text turned into the value a
 * document would have held, and the unknown key's did-you-mean suggestion.
 * Every value goes through config_apply_value (api/config.c) onto a copy of
 * the config, which replaces the caller's only on success.
 * Must not: hold a row (api/config_keys.c), or check a value itself: its
 * type, bounds and the rules between keys are api/config.c's.
 */
#include "config.h"

#include "buf.h"
#include "config_impl.h"
#include "config_keys.h"
#include "file.h"
#include "log.h"
#include "util.h"
#include "yaml_json.h"

#include <cjson/cJSON.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILE_PATH_MAX 4096
#define FILE_MAX_BYTES (16u << 20)  /* a config larger than this is a mistake */

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

static int in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (strcmp(*list, s) == 0)
            return 1;
    return 0;
}

/* Copy of s without leading/trailing whitespace; caller frees. */
static char *dup_trimmed(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    return config_dup_range(s, n);
}

/* `'key'`: a key as messages show it (escaped like config_quote(), single quotes). */
static void key_quote(char *out, size_t n, const char *key)
{
    config_quote(out, n, key);
    size_t len = strlen(out);
    if (len >= 2) {
        out[0] = '\'';
        out[len - 1] = '\'';
    }
}

/* ------------------------------------------------------------------------ */
/* Table lookups and suggestions                                             */

/* "model", "training.optimizer", ...: a proper prefix of some key's path. */
static int is_section(const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < config_n_keys; i++)
        if (strncmp(config_keys[i].path, path, n) == 0 && config_keys[i].path[n] == '.')
            return 1;
    return 0;
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > CONFIG_PATH_MAX || lb > CONFIG_PATH_MAX)
        return (size_t)-1;
    size_t row[CONFIG_PATH_MAX + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Equal ignoring case, '_' and '-': "model.image_size" ~ "model.imageSize". */
static int loose_equal(const char *a, const char *b)
{
    for (;;) {
        while (*a == '_' || *a == '-')
            a++;
        while (*b == '_' || *b == '-')
            b++;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
        if (*a == '\0')
            return 1;
        a++;
        b++;
    }
}

static const char *last_part(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

/* The key the user most likely meant, or NULL. */
static const char *suggest(const char *path, int spec_level)
{
    static const char *const sections[] = {"model", "data", "training", "training.optimizer",
                                           "training.ema", "checkpoint", NULL};
    const char *best = NULL;
    size_t best_d = 3; /* only suggest within an edit distance of 2 */
    const char *cands[CONFIG_KEYS_MAX + 16];
    size_t nc = 0;
    for (size_t i = 0; i < config_n_keys; i++)
        cands[nc++] = config_keys[i].path;
    for (size_t i = 0; sections[i]; i++)
        cands[nc++] = sections[i];
    if (spec_level)
        for (size_t i = 0; config_operator_keys[i]; i++)
            cands[nc++] = config_operator_keys[i];

    for (size_t i = 0; i < nc; i++)
        if (loose_equal(path, cands[i]))
            return cands[i];
    if (strlen(path) >= 4) {
        for (size_t i = 0; i < nc; i++) {
            size_t d = edit_distance(path, cands[i]);
            if (d < best_d) {
                best_d = d;
                best = cands[i];
            }
        }
        if (best)
            return best;
    }
    /* Right name, wrong section: "training.lr" -> "training.optimizer.lr". */
    const char *leaf = last_part(path);
    for (size_t i = 0; i < config_n_keys; i++) {
        if (loose_equal(leaf, last_part(config_keys[i].path))) {
            if (best)
                return NULL; /* ambiguous */
            best = config_keys[i].path;
        }
    }
    return best;
}

static int fail_unknown(const config_ctx *c, const char *path, int spec_level)
{
    char q[200];
    key_quote(q, sizeof q, path);
    const char *s = suggest(path, spec_level);
    if (s)
        return config_fail(c, "unknown key %s (did you mean '%s'?)", q, s);
    return config_fail(c, "unknown key %s", q);
}

/* ------------------------------------------------------------------------ */
/* Walking a document                                                        */

/* The dotted path of `key` under `prefix`; -1 if the key cannot be one of ours. */
static int join_path(char *out, size_t n, const char *prefix, const char *key)
{
    if (key[0] == '\0' || strchr(key, '.'))
        return -1;
    int w = prefix[0] ? snprintf(out, n, "%s.%s", prefix, key) : snprintf(out, n, "%s", key);
    return (w < 0 || (size_t)w >= n) ? -1 : 0;
}

static int check_duplicate(const config_ctx *c, const cJSON *obj, const cJSON *child,
                           const char *shown)
{
    for (const cJSON *prev = obj->child; prev && prev != child; prev = prev->next) {
        if (prev->string && strcmp(prev->string, child->string) == 0) {
            char q[200];
            key_quote(q, sizeof q, shown);
            return config_fail(c, "duplicate key %s", q);
        }
    }
    return 0;
}

static int whole_count(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 1 << 20 &&
           v->valuedouble == (double)(int)v->valuedouble;
}

/* spec.replicas, spec.gpusPerReplica, spec.gpuMemory and
 * spec.elastic.minReplicas as written, for the planner
 * (vit_job_config.spec_scale); the CRD checks them, the worker ignores
 * them: a value of another shape is left out here, not refused. */
static void keep_scale(vit_job_config *cfg, const char *key, const cJSON *v)
{
    int whole = whole_count(v);
    const cJSON *min = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "minReplicas") : NULL;
    if (strcmp(key, "elastic") == 0 && whole_count(min))
        cfg->spec_scale.min_replicas = (int)min->valuedouble;
    else if (strcmp(key, "replicas") == 0 && whole)
        cfg->spec_scale.replicas = (int)v->valuedouble;
    else if (strcmp(key, "gpusPerReplica") == 0 && whole)
        cfg->spec_scale.gpus_per_replica = (int)v->valuedouble;
    else if (strcmp(key, "gpuMemory") == 0 && cJSON_IsString(v) &&
             strlen(v->valuestring) < sizeof cfg->spec_scale.gpu_memory)
        snprintf(cfg->spec_scale.gpu_memory, sizeof cfg->spec_scale.gpu_memory, "%s",
                 v->valuestring);
}

static int apply_section(const config_ctx *c, vit_job_config *cfg, const cJSON *obj,
                         const char *prefix)
{
    const int spec_level = prefix[0] == '\0';
    char path[CONFIG_PATH_MAX];

    /* Pass 1: presets, so that explicit keys of the same section override
     * them whatever the key order. */
    for (const cJSON *ch = obj->child; ch; ch = ch->next) {
        if (join_path(path, sizeof path, prefix, ch->string) != 0)
            continue;
        const config_key *k = config_find_key(path);
        if (k && k->type == KT_PRESET) {
            int rc = config_apply_value(c, cfg, k, ch);
            if (rc)
                return rc;
        }
    }

    /* Pass 2: everything else, in document order. */
    for (const cJSON *ch = obj->child; ch; ch = ch->next) {
        if (join_path(path, sizeof path, prefix, ch->string) != 0) {
            char shown[CONFIG_PATH_MAX + 64], q[200];
            snprintf(shown, sizeof shown, "%s%s%s", prefix, spec_level ? "" : ".", ch->string);
            if (!strchr(ch->string, '.'))
                return fail_unknown(c, shown, spec_level);
            key_quote(q, sizeof q, shown);
            return config_fail(c, "unknown key %s (write dotted keys as nested sections)", q);
        }
        int rc = check_duplicate(c, obj, ch, path);
        if (rc)
            return rc;
        const config_key *k = config_find_key(path);
        if (k) {
            if (k->type == KT_PRESET)
                continue;
            rc = config_apply_value(c, cfg, k, ch);
            if (rc)
                return rc;
            continue;
        }
        if (is_section(path)) {
            if (cJSON_IsNull(ch)) /* `checkpoint:` with nothing under it */
                continue;
            if (!cJSON_IsObject(ch)) {
                char got[256];
                config_value_words(got, sizeof got, ch);
                return config_fail(c, "%s: expected an object, got %s", path, got);
            }
            rc = apply_section(c, cfg, ch, path);
            if (rc)
                return rc;
            continue;
        }
        if (spec_level && in_list(config_operator_keys, path)) {
            LOG_DEBUG("config", "ignored=%s reason=operator-only", LOGV(path));
            keep_scale(cfg, path, ch);
            continue;
        }
        return fail_unknown(c, path, spec_level);
    }
    return 0;
}

/* The document is the bare spec, or a ViTJob manifest whose `spec` we use. */
static int apply_document(const config_ctx *c, vit_job_config *cfg, const cJSON *root)
{
    char got[256];
    if (!cJSON_IsObject(root)) {
        config_value_words(got, sizeof got, root);
        return config_fail(c, "expected an object (the spec or a ViTJob manifest) at the top level, got %s",
                           got);
    }
    int manifest = cJSON_GetObjectItemCaseSensitive(root, "apiVersion") ||
                   cJSON_GetObjectItemCaseSensitive(root, "kind") ||
                   cJSON_GetObjectItemCaseSensitive(root, "spec");
    if (!manifest)
        return apply_section(c, cfg, root, "");

    const cJSON *spec = NULL;
    for (const cJSON *ch = root->child; ch; ch = ch->next) {
        int rc = check_duplicate(c, root, ch, ch->string);
        if (rc)
            return rc;
        if (strcmp(ch->string, "spec") == 0)
            spec = ch;
        else if (!in_list(config_manifest_keys, ch->string))
            return fail_unknown(c, ch->string, 0);
    }
    if (spec == NULL)
        return config_fail(c, "the ViTJob manifest has no spec");
    if (!cJSON_IsObject(spec)) {
        config_value_words(got, sizeof got, spec);
        return config_fail(c, "spec: expected an object, got %s", got);
    }
    return apply_section(c, cfg, spec, "");
}

/* YAML as the config reads it: YAML 1.1 scalars, no aliases (lib/yaml_json). */
static int yaml_to_json(const config_ctx *c, const char *text, size_t len, cJSON **out)
{
    static const yaml_json_opts opts = {.typed_scalars = 1, .aliases = 0};
    char why[512];
    if (yaml_json_parse(text, len, &opts, out, why, sizeof why) != 0)
        return config_fail(c, "%s", why);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Parsing a document                                                        */

/* JSON if it starts with '{' and parses as JSON, YAML otherwise. *out is the
 * tree (caller deletes), or NULL for an empty document. */
static int parse_document(const config_ctx *c, const char *text, size_t len, cJSON **out)
{
    const char *nul = memchr(text, '\0', len);
    if (nul)
        return config_fail(c, "the config contains a NUL byte at byte %zu", (size_t)(nul - text));
    char *buf = config_dup_range(text, len); /* cJSON wants a NUL-terminated buffer */
    if (!buf)
        return config_fail(c, "out of memory");

    size_t i = 0;
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
        i = 3;
    while (i < len && isspace((unsigned char)buf[i]))
        i++;

    int rc = 0;
    if (i < len && buf[i] == '{') {
        const char *end = NULL;
        cJSON *j = cJSON_ParseWithLengthOpts(buf, len + 1, &end, 1);
        if (j) {
            *out = j;
        } else {
            /* Not JSON; YAML flow style ({model: {dim: 32}}) may still read it. */
            size_t at = end && end >= buf ? (size_t)(end - buf) : 0;
            config_ctx quiet = {c->origin, NULL, 0};
            cJSON *y = NULL;
            if (yaml_to_json(&quiet, buf, len, &y) == 0 && y)
                *out = y;
            else {
                cJSON_Delete(y);
                rc = config_fail(c, "invalid JSON near byte %zu", at);
            }
        }
    } else {
        rc = yaml_to_json(c, buf, len, out);
    }
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Public API                                                                */

int config_load_string(vit_job_config *cfg, const char *text, size_t len, const char *origin,
                       char *err, size_t errlen)
{
    const config_ctx c = {origin ? origin : "<string>", err, errlen};
    if (cfg == NULL || (text == NULL && len > 0))
        return config_fail(&c, "internal error: no config or no text");

    cJSON *root = NULL;
    int rc = parse_document(&c, text ? text : "", len, &root);
    if (rc)
        return rc;
    if (root == NULL)
        return config_fail(&c, "the config is empty; expected the spec or a ViTJob manifest");

    vit_job_config *tmp = malloc(sizeof *tmp);
    if (!tmp) {
        cJSON_Delete(root);
        return config_fail(&c, "out of memory");
    }
    memcpy(tmp, cfg, sizeof *tmp);
    rc = apply_document(&c, tmp, root);
    if (rc == 0)
        memcpy(cfg, tmp, sizeof *cfg);
    free(tmp);
    cJSON_Delete(root);
    return rc;
}

int config_load_file(vit_job_config *cfg, const char *path, char *err, size_t errlen)
{
    const config_ctx c = {path ? path : "<null>", err, errlen};
    if (path == NULL)
        return config_fail(&c, "cannot read config: no path given");

    buf text = {.max = FILE_MAX_BYTES};
    int rc;
    char why[FILE_PATH_MAX + 256];
    if (file_read(&text, path, why, sizeof why) != 0) {
        /* fail's message names the path (its origin) already */
        rc = config_fail(&c, "cannot read config: %s", file_reason(why, path));
        goto out;
    }
    rc = config_load_string(cfg, text.data ? text.data : "", text.len, path, err, errlen);
out:
    buf_free(&text);
    return rc;
}

/* "a,b" or "[a, b]" (each item trimmed; "" and "[]": none) as an array of
 * strings; NULL when out of memory. */
static cJSON *string_list(char *t)
{
    size_t n = strlen(t);
    if (n >= 2 && t[0] == '[' && t[n - 1] == ']') {
        t[n - 1] = '\0';
        t++;
    }
    cJSON *v = cJSON_CreateArray();
    char *body = dup_trimmed(t);
    for (char *p = body; v && body && body[0];) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        char *part = dup_trimmed(p);
        cJSON *e = part ? cJSON_CreateString(part) : NULL;
        free(part);
        if (!e || !cJSON_AddItemToArray(v, e)) {
            cJSON_Delete(e);
            cJSON_Delete(v);
            v = NULL;
        }
        if (!comma) break;
        p = comma + 1;
    }
    if (!body) {
        cJSON_Delete(v);
        v = NULL;
    }
    free(body);
    return v;
}

/* Text of a --set value as the cJSON value a document would have held. */
static cJSON *value_from_text(const config_key *k, const char *text)
{
    if (k->type == KT_STRING || k->type == KT_ENUM || k->type == KT_PRESET)
        return cJSON_CreateString(text); /* as-is */

    char *t = dup_trimmed(text);
    if (!t)
        return NULL;
    cJSON *v = NULL;
    double d;
    if (k->type == KT_BOOL) {
        if (strcmp(t, "true") == 0)
            v = cJSON_CreateTrue();
        else if (strcmp(t, "false") == 0)
            v = cJSON_CreateFalse();
        else
            v = cJSON_CreateString(t);
    } else if (k->type == KT_STRS || (k->type == KT_VEC && (t[0] == '\0' || strcmp(t, "null") == 0))) {
        if (k->type == KT_STRS) /* "a,b" or "[a, b]"; "" or "[]": none */
            v = string_list(t);
        else
            v = cJSON_CreateNull(); /* "data.mean=": back to the key's default */
    } else if (k->type == KT_PAIR || k->type == KT_VEC) {
        /* "0.9,0.95" or "[0.9, 0.95]"; "0.5" or "[0.5]" */
        char *body = t;
        size_t n = strlen(body);
        if (n >= 2 && body[0] == '[' && body[n - 1] == ']') {
            body[n - 1] = '\0';
            body++;
        }
        while (isspace((unsigned char)*body))
            body++;
        v = cJSON_CreateArray();
        const char *p = body;
        while (v && body[0]) { /* "[]": no numbers */
            const char *comma = strchr(p, ',');
            const char *end = comma ? comma : p + strlen(p);
            char *raw = config_dup_range(p, (size_t)(end - p));
            char *part = raw ? dup_trimmed(raw) : NULL;
            free(raw);
            cJSON *e = NULL;
            if (part)
                e = parse_decimal(part, &d) == 0 ? cJSON_CreateNumber(d) : cJSON_CreateString(part);
            free(part);
            if (!e || !cJSON_AddItemToArray(v, e)) {
                cJSON_Delete(e);
                cJSON_Delete(v);
                v = NULL;
                break;
            }
            if (!comma)
                break;
            p = comma + 1;
        }
    } else { /* numbers */
        v = parse_decimal(t, &d) == 0 ? cJSON_CreateNumber(d) : cJSON_CreateString(t);
    }
    free(t);
    return v;
}

int config_set(vit_job_config *cfg, const char *assignment, char *err, size_t errlen)
{
    const config_ctx c = {"--set", err, errlen};
    if (cfg == NULL || assignment == NULL)
        return config_fail(&c, "internal error: no config or no assignment");
    const char *eq = strchr(assignment, '=');
    if (eq == NULL) {
        char q[200];
        config_quote(q, sizeof q, assignment);
        return config_fail(&c, "expected key=value, got %s", q);
    }
    char *raw_key = config_dup_range(assignment, (size_t)(eq - assignment));
    char *key = raw_key ? dup_trimmed(raw_key) : NULL;
    free(raw_key);
    if (!key)
        return config_fail(&c, "out of memory");

    int rc;
    const config_key *k = config_find_key(key);
    if (k == NULL) {
        if (is_section(key))
            rc = config_fail(&c, "%s is a section; set one of its keys, e.g. %s.<key>=value", key, key);
        else
            rc = fail_unknown(&c, key, 0);
        free(key);
        return rc;
    }
    free(key);

    cJSON *v = value_from_text(k, eq + 1);
    if (v == NULL)
        return config_fail(&c, "out of memory");
    vit_job_config *tmp = malloc(sizeof *tmp);
    if (!tmp) {
        cJSON_Delete(v);
        return config_fail(&c, "out of memory");
    }
    memcpy(tmp, cfg, sizeof *tmp);
    rc = config_apply_value(&c, tmp, k, v);
    if (rc == 0)
        memcpy(cfg, tmp, sizeof *cfg);
    free(tmp);
    cJSON_Delete(v);
    return rc;
}
