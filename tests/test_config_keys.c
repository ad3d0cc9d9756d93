/* tests/test_config_keys.c - api/config_keys.c: the key table's rows agree
 * with what is committed beside them: the CRD (manifests/00-crd.yaml) has
 * each key with the table's type, bounds, enum and default and no other
 * key, the README's config reference lists each enumerated key's values
 * and default, and each enumerated value has its spelling. */
#include "config.h"

#include "buf.h"
#include "file.h"
#include "yaml_json.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *crd_property(const cJSON *node, const char *path)
{
    char part[128];
    for (const char *p = path; node && *p;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(part, sizeof part, "%.*s", (int)n, p);
        node = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(node, "properties"),
                                                part);
        p += n + (dot != NULL);
    }
    return node;
}

static int same_json_value(const cJSON *a, const cJSON *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        return fabs(a->valuedouble - b->valuedouble) <= 1e-12 * fmax(1, fabs(a->valuedouble));
    if (cJSON_IsArray(a) && cJSON_IsArray(b)) {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
            return 0;
        for (int i = 0; i < cJSON_GetArraySize(a); i++)
            if (!same_json_value(cJSON_GetArrayItem(a, i), cJSON_GetArrayItem(b, i)))
                return 0;
        return 1;
    }
    return cJSON_Compare(a, b, 1);
}

/* Every CRD leaf under model, data, training and checkpoint, dotted. */
static void crd_leaves(const cJSON *node, const char *prefix, char (*out)[128], int *n)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(node, "properties");
    if (props == NULL) {
        snprintf(out[(*n)++], 128, "%s", prefix);
        return;
    }
    for (const cJSON *p = props->child; p; p = p->next) {
        char path[128];
        snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", p->string);
        crd_leaves(p, path, out, n);
    }
}

Test(config_keys, the_crds_keys_types_bounds_enums_and_defaults_agree_with_the_spec_table)
{
    buf text = {0};
    cr_assert_eq(file_read(&text, "manifests/00-crd.yaml", NULL, 0), 0, "run from the repository root");
    cJSON *crd = NULL;
    char err[256];
    cr_assert_eq(yaml_json_parse(text.data, text.len, NULL, &crd, err, sizeof err), 0, "%s", err);
    buf_free(&text);
    const cJSON *spec = crd_property(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(
            cJSON_GetObjectItem(cJSON_GetObjectItem(crd, "spec"), "versions"), 0), "schema"),
            "openAPIV3Schema"), "spec");
    cr_assert_not_null(spec);
    /* keys whose CRD schema has no default on purpose: the preset fills the
     * model's dimensions, an unset checkpoint location means none, and the
     * defaults that follow other keys (config_finish) are the worker's */
    static const char *const no_default[] = {"model.imageSize", "model.patchSize", "model.channels",
                                             "model.dim", "model.depth", "model.heads",
                                             "model.mlpRatio", "model.numClasses", "data.endpoint",
                                             "data.mean", "data.std", "checkpoint.uri",
                                             "checkpoint.endpoint", "checkpoint.credentialsSecret",
                                             "data.augment", "training.optimizer.warmupSteps",
                                             "training.optimizer.lr", "training.globalBatchSize",
                                             "training.microBatchSize",
                                             "data.cutmixMinMax", "training.freeze", NULL};
    cJSON *table = config_describe();
    cr_assert_not_null(table);
    /* ... which are the table's keys whose default is not their own */
    int own = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, table) {
        const char *path = cJSON_GetObjectItem(r, "path")->valuestring;
        int listed = 0;
        for (const char *const *e = no_default; *e; e++)
            listed |= strcmp(*e, path) == 0;
        int from_key = strcmp(cJSON_GetObjectItem(r, "defaultFrom")->valuestring, "key") == 0;
        cr_assert_neq(listed, from_key, "%s: defaultFrom %s", path,
                      cJSON_GetObjectItem(r, "defaultFrom")->valuestring);
        own += from_key;
    }
    cr_assert_eq(own + 21, cJSON_GetArraySize(table));
    cr_assert_not_null(table);
    const cJSON *row;
    int rows = 0;
    cJSON_ArrayForEach(row, table) {
        rows++;
        const char *path = cJSON_GetObjectItem(row, "path")->valuestring;
        const cJSON *prop = crd_property(spec, path);
        cr_assert_not_null(prop, "%s: in the spec table, not in the CRD", path);
        cr_assert_str_eq(cJSON_GetObjectItem(prop, "type")->valuestring,
                         cJSON_GetObjectItem(row, "type")->valuestring, "%s: type", path);
        const cJSON *bounds = strcmp(cJSON_GetObjectItem(row, "type")->valuestring, "array") == 0
                                  ? cJSON_GetObjectItem(prop, "items") : prop;
        static const char *const nums[] = {"minimum", "maximum"};
        for (int i = 0; i < 2 && cJSON_GetObjectItem(row, nums[i]); i++)
            cr_assert(same_json_value(cJSON_GetObjectItem(bounds, nums[i]), cJSON_GetObjectItem(row, nums[i])),
                      "%s: %s differs between the CRD and the spec table", path, nums[i]);
        static const char *const excl[] = {"exclusiveMinimum", "exclusiveMaximum"};
        for (int i = 0; i < 2 && cJSON_GetObjectItem(row, excl[i]); i++)
            cr_assert_eq(cJSON_IsTrue(cJSON_GetObjectItem(bounds, excl[i])),
                         cJSON_IsTrue(cJSON_GetObjectItem(row, excl[i])), "%s: %s", path, excl[i]);
        static const char *const counts[] = {"minItems", "maxItems"};
        for (int i = 0; i < 2; i++)
            cr_assert(same_json_value(cJSON_GetObjectItem(prop, counts[i]), cJSON_GetObjectItem(row, counts[i])),
                      "%s: %s differs between the CRD and the spec table", path, counts[i]);
        cr_assert(same_json_value(cJSON_GetObjectItem(prop, "enum"), cJSON_GetObjectItem(row, "enum")),
                  "%s: the allowed values differ between the CRD and the spec table", path);
        const cJSON *dflt = cJSON_GetObjectItem(prop, "default");
        int exempt = 0;
        for (const char *const *e = no_default; *e; e++)
            exempt |= strcmp(*e, path) == 0;
        if (exempt)
            cr_assert_null(dflt, "%s: a CRD default would override the preset", path);
        else
            cr_assert(dflt && same_json_value(dflt, cJSON_GetObjectItem(row, "default")),
                      "%s: the CRD's default differs from the spec table's", path);
    }
    /* and the other way: the CRD has no key the worker would refuse */
    static char leaves[128][128];
    int n = 0;
    static const char *const sections[] = {"model", "data", "training", "checkpoint"};
    for (int i = 0; i < 4; i++)
        crd_leaves(crd_property(spec, sections[i]), sections[i], leaves, &n);
    cr_assert_eq(n, rows, "the CRD has %d keys for the worker, the spec table %d", n, rows);
    cJSON_Delete(table);
    cJSON_Delete(crd);
}

Test(config_keys, enum_values_have_their_spellings)
{
    cr_assert_str_eq(config_enum_name("training.precision", PRECISION_BF16_MIXED), "bf16-mixed");
    cr_assert_str_eq(config_enum_name("training.precision", PRECISION_FP16_MIXED), "fp16-mixed");
    cr_assert_str_eq(config_enum_name("training.device", DEVICE_AUTO), "auto");
    cr_assert_str_eq(config_enum_name("training.sharding", SHARDING_GRAD_OP), "grad-op");
    cr_assert_str_eq(config_enum_name("training.optimizer.schedule", SCHEDULE_CONSTANT), "constant");
    cr_assert_str_eq(config_enum_name("data.format", DATA_WEBDATASET), "webdataset");
    cr_assert_str_eq(config_enum_name("data.format", DATA_IMAGEFOLDER), "imagefolder");
    cr_assert_str_eq(config_enum_name("data.interpolation", INTERP_BILINEAR), "bilinear");
    cr_assert_str_eq(config_enum_name("training.device", 9), "?");
    cr_assert_str_eq(config_enum_name("training.steps", 0), "?", "not an enumerated key");
}

/* The backticked words of one column of a Markdown table row ("\|" is not
 * a column break), space-separated into out. */
static void column_words(const char *line, int col, char *out, size_t outlen)
{
    out[0] = '\0';
    int c = -1;
    for (const char *p = line; *p; p++) {
        if (*p == '|' && (p == line || p[-1] != '\\')) {
            c++;
            continue;
        }
        if (c != col || *p != '`')
            continue;
        const char *end = strchr(p + 1, '`');
        if (!end)
            break;
        size_t n = strlen(out);
        snprintf(out + n, outlen - n, "%s%.*s", n ? " " : "", (int)(end - p - 1), p + 1);
        p = end;
    }
}

Test(config_keys, the_readmes_config_reference_lists_each_enum_and_its_default_as_the_table)
{
    buf text = {0};
    cr_assert_eq(file_read(&text, "README.md", NULL, 0), 0, "run from the repository root");
    cJSON *table = config_describe();
    const cJSON *row;
    int enums = 0;
    cJSON_ArrayForEach(row, table) {
        const cJSON *e = cJSON_GetObjectItem(row, "enum");
        const char *path = cJSON_GetObjectItem(row, "path")->valuestring;
        if (!e || strcmp(path, "model.preset") == 0)
            continue;
        enums++;
        char head[160], want[256] = "", got[256], dflt[128];
        snprintf(head, sizeof head, "\n| `%s` |", path);
        const char *line = strstr(text.data, head);
        cr_assert_not_null(line, "README.md has no config reference row for %s", path);
        char one[512];
        snprintf(one, sizeof one, "%.*s", (int)(strchr(line + 1, '\n') - line - 1), line + 1);
        const cJSON *v;
        cJSON_ArrayForEach(v, e) {
            size_t n = strlen(want);
            snprintf(want + n, sizeof want - n, "%s%s", n ? " " : "", v->valuestring);
        }
        column_words(one, 1, got, sizeof got);
        cr_assert_str_eq(got, want, "README.md: the values of %s", path);
        column_words(one, 2, dflt, sizeof dflt);
        cr_assert_str_eq(dflt, cJSON_GetObjectItem(row, "default")->valuestring,
                         "README.md: the default of %s", path);
    }
    cr_assert_eq(enums, 10);
    cJSON_Delete(table);
    buf_free(&text);
}
