/* tests/test_config_schema.c - api/config_schema.c: the YAML it writes reads
 * back as the config table says (types, bounds, defaults, enums, the
 * descriptions word for word through folding), rewriting keeps every byte
 * outside the markers and is idempotent, the README table has one row per
 * key, the design's spec summary names every key once (an enum's with its
 * values) and its exit-code table is api/exitcode.c's, row for row. Whether
 * the committed files are fresh is tests/schema.bats'. */
#include "config.h"
#include "config_schema.h"
#include "exitcode.h"

#include "buf.h"
#include "yaml_json.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const sections[] = {"model", "data", "training", "training.optimizer",
                                       "training.ema", "checkpoint"};
#define N_SECTIONS (sizeof sections / sizeof sections[0])

static cJSON *parse(const char *text)
{
    cJSON *j = NULL;
    char err[256] = "";
    const yaml_json_opts typed = {.typed_scalars = 1};
    cr_assert_eq(yaml_json_parse(text, strlen(text), &typed, &j, err, sizeof err), 0, "%s\n%s", err,
                 text);
    return j;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Numbers exactly equal (the YAML is written to read back as the same double). */
static int same(const cJSON *a, const cJSON *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        return a->valuedouble == b->valuedouble;
    if (cJSON_IsArray(a) && cJSON_IsArray(b)) {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
            return 0;
        for (int i = 0; i < cJSON_GetArraySize(a); i++)
            if (!same(cJSON_GetArrayItem(a, i), cJSON_GetArrayItem(b, i)))
                return 0;
        return 1;
    }
    return cJSON_Compare(a, b, 1);
}

static int in_section(const char *path, const char *section)
{
    const char *dot = strrchr(path, '.');
    return dot && (size_t)(dot - path) == strlen(section) &&
           strncmp(path, section, strlen(section)) == 0;
}

Test(config_schema, each_sections_yaml_reads_back_as_the_config_table)
{
    cJSON *table = config_describe();
    cr_assert_not_null(table);
    int keys = 0, folded = 0, one_line = 0;
    for (size_t s = 0; s < N_SECTIONS; s++) {
        buf out = {0};
        char err[256] = "";
        cr_assert_eq(config_schema_crd_section(&out, sections[s], 4, err, sizeof err), 0, "%s", err);
        cr_assert(strncmp(out.data, "    ", 4) == 0 && out.data[4] != ' ', "%s", out.data);
        for (const char *d = out.data; (d = strstr(d, "description: ")) != NULL; d++) {
            folded += strncmp(d, "description: >-\n", 16) == 0;
            one_line += strncmp(d, "description: >-\n", 16) != 0;
        }
        cJSON *props = parse(out.data);
        const cJSON *row;
        cJSON_ArrayForEach(row, table) {
            const char *path = str(row, "path");
            if (!in_section(path, sections[s]))
                continue;
            keys++;
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(props, strrchr(path, '.') + 1);
            cr_assert_not_null(p, "%s: not in\n%s", path, out.data);
            cr_assert_str_eq(str(p, "type"), str(row, "type"), "%s", path);
            const int array = strcmp(str(row, "type"), "array") == 0;
            const cJSON *nums = array ? cJSON_GetObjectItem(p, "items") : p;
            static const char *const same_keys[] = {"minimum", "maximum", "maxLength", "pattern",
                                                    "enum", "format"};
            for (size_t i = 0; i < sizeof same_keys / sizeof same_keys[0]; i++)
                cr_assert(same(cJSON_GetObjectItem(nums, same_keys[i]),
                               cJSON_GetObjectItem(row, same_keys[i])),
                          "%s: %s", path, same_keys[i]);
            static const char *const excl[] = {"exclusiveMinimum", "exclusiveMaximum"};
            for (int i = 0; i < 2; i++)
                cr_assert_eq(cJSON_IsTrue(cJSON_GetObjectItem(nums, excl[i])),
                             cJSON_IsTrue(cJSON_GetObjectItem(row, excl[i])), "%s: %s", path, excl[i]);
            /* a default where the row has its own, exactly that one */
            const int own = strcmp(str(row, "defaultFrom"), "key") == 0;
            const cJSON *d = cJSON_GetObjectItem(p, "default");
            if (own)
                cr_assert(d && same(d, cJSON_GetObjectItem(row, "default")), "%s: default", path);
            else
                cr_assert_null(d, "%s: a default the row does not own", path);
            /* the description word for word, then "Default X." */
            const char *want = str(row, "description"), *got = str(p, "description");
            cr_assert_not_null(got, "%s", path);
            cr_assert(strncmp(got, want, strlen(want)) == 0, "%s:\n got %s\nwant %s", path, got, want);
            const char *rest = got + strlen(want);
            const cJSON *dv = cJSON_GetObjectItem(row, "default");
            if (own && !(cJSON_IsString(dv) && !dv->valuestring[0]))
                cr_assert(strncmp(rest, " Default ", 9) == 0 && rest[strlen(rest) - 1] == '.',
                          "%s: %s", path, got);
            else
                cr_assert_str_empty(rest, "%s: %s", path, got);
            if (array)
                cr_assert_str_eq(str(nums, "description"), str(row, "itemDescription"), "%s", path);
        }
        cJSON_Delete(props);
        buf_free(&out);
    }
    cr_assert_eq(keys, cJSON_GetArraySize(table), "every key is in one of the sections");
    cr_assert(folded > 0 && one_line > 0, "both description forms are exercised");
    cJSON_Delete(table);
}

Test(config_schema, double_defaults_are_yaml_1_1_floats)
{
    buf out = {0};
    cr_assert_eq(config_schema_crd_section(&out, "training.optimizer", 0, NULL, 0), 0);
    /* a YAML 1.1 float needs the point and the exponent's sign */
    cr_assert(strstr(out.data, "default: 1.0e-8\n") != NULL, "%s", out.data);
    cr_assert(strstr(out.data, "default: 0.05\n") != NULL, "%s", out.data);
    cr_assert(strstr(out.data, "default: 1.0\n") != NULL, "%s", out.data);
    cr_assert(strstr(out.data, "default: [0.9, 0.999]\n") != NULL, "%s", out.data);
    cr_assert(strstr(out.data, "Default 1e-8.") != NULL, "%s", out.data);
    buf_free(&out);
}

Test(config_schema, an_array_of_one_to_three_numbers_has_its_counts_and_no_default)
{
    buf out = {0};
    cr_assert_eq(config_schema_crd_section(&out, "data", 0, NULL, 0), 0);
    cJSON *props = parse(out.data);
    static const char *const vecs[] = {"mean", "std"};
    for (int i = 0; i < 2; i++) {
        const cJSON *p = cJSON_GetObjectItem(props, vecs[i]);
        cr_assert_not_null(p, "%s", vecs[i]);
        cr_assert_str_eq(str(p, "type"), "array");
        cr_assert_eq(cJSON_GetObjectItem(p, "minItems")->valuedouble, 1, "%s", vecs[i]);
        cr_assert_eq(cJSON_GetObjectItem(p, "maxItems")->valuedouble, 3, "%s", vecs[i]);
        cr_assert_null(cJSON_GetObjectItem(p, "default"), "%s: the default depends on the channels",
                       vecs[i]);
        cr_assert_str_eq(str(cJSON_GetObjectItem(p, "items"), "type"), "number");
    }
    /* the pairs keep exactly two */
    const cJSON *scale = cJSON_GetObjectItem(props, "scale");
    cr_assert_eq(cJSON_GetObjectItem(scale, "minItems")->valuedouble, 2);
    cr_assert_eq(cJSON_GetObjectItem(scale, "maxItems")->valuedouble, 2);
    cr_assert(strstr(out.data, "default: [0.08, 1.0]\n") != NULL, "%s", out.data);
    cJSON_Delete(props);
    buf_free(&out);
}

Test(config_schema, an_unknown_section_is_an_error)
{
    buf out = {0};
    char err[256] = "";
    cr_assert_eq(config_schema_crd_section(&out, "trainingx", 0, err, sizeof err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, "no config key is directly in section 'trainingx'");
    buf_free(&out);
}

/* A file with every section's region, hand-written lines around them. */
static char *template(const char *tail)
{
    buf t = {0};
    buf_puts(&t, "# hand: head\nspec:\n");
    for (size_t s = 0; s < N_SECTIONS; s++)
        buf_printf(&t,
                   "  s%zu:\n    x-hand: [%zu]\n    properties:\n"
                   "      # BEGIN generated: %s (anything)\n      stale: {}\n"
                   "      # END generated: %s\n      handKey: {type: string}\n",
                   s, s, sections[s], sections[s]);
    buf_puts(&t, tail);
    return buf_take(&t);
}

Test(config_schema, rewriting_keeps_the_hand_written_lines_and_is_idempotent)
{
    static const char *const tails[] = {"# the end\n", "# no newline at the end"};
    for (int k = 0; k < 2; k++) {
        char *in = template(tails[k]);
        buf once = {0}, twice = {0};
        char err[256] = "";
        cr_assert_eq(config_schema_rewrite(&once, in, strlen(in), "t.yaml", err, sizeof err), 0, "%s", err);
        cr_assert_eq(config_schema_rewrite(&twice, once.data, once.len, "t.yaml", err, sizeof err), 0,
                     "%s", err);
        cr_assert_str_eq(twice.data, once.data);
        cr_assert_null(strstr(once.data, "stale"));
        /* each hand-written line of the input, in order */
        const char *at = once.data;
        for (char *line = strtok(in, "\n"); line; line = strtok(NULL, "\n")) {
            if (strstr(line, "stale"))
                continue;
            const char *found = strstr(at, line);
            cr_assert_not_null(found, "lost: %s", line);
            at = found + strlen(line);
        }
        cr_assert_str_eq(once.data + once.len - strlen(tails[k]), tails[k]);
        cJSON *doc = parse(once.data);
        const cJSON *wd = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(
            cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "spec"), "s3"), "properties"),
            "weightDecay"), "default");
        cr_assert(cJSON_IsNumber(wd) && wd->valuedouble == 0.05);
        cJSON_Delete(doc);
        buf_free(&once);
        buf_free(&twice);
        free(in);
    }
}

Test(config_schema, a_marker_must_be_a_comment_line_of_its_own)
{
    const char *text = "text that says BEGIN generated: model in passing\n";
    buf out = {0};
    char err[256] = "";
    cr_assert_eq(config_schema_rewrite(&out, text, strlen(text), "x.md", err, sizeof err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, "x.md: no generated region ('BEGIN generated: NAME' ... 'END generated: NAME')");
    buf_free(&out);
}

Test(config_schema, a_section_twice_is_an_error)
{
    const char *text = "# BEGIN generated: data\n# END generated: data\n"
                       "# BEGIN generated: data\n# END generated: data\n";
    buf out = {0};
    char err[256] = "";
    cr_assert_eq(config_schema_rewrite(&out, text, strlen(text), "x.yaml", err, sizeof err), VJ_ERR_CONFIG);
    cr_assert_str_eq(err, "x.yaml:3: a second region 'BEGIN generated: data'");
    buf_free(&out);
}

Test(config_schema, the_readme_table_has_one_row_per_key_in_table_order)
{
    const char *text = "intro\n<!-- BEGIN generated: config-keys -->\nold\n<!-- END generated: config-keys -->\nafter\n";
    buf out = {0};
    char err[256] = "";
    cr_assert_eq(config_schema_rewrite(&out, text, strlen(text), "R.md", err, sizeof err), 0, "%s", err);
    const char *head = "intro\n<!-- BEGIN generated: config-keys -->\n"
                       "| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
    cr_assert(strncmp(out.data, head, strlen(head)) == 0, "%s", out.data);
    cr_assert(strstr(out.data, "<!-- END generated: config-keys -->\nafter\n") != NULL);
    cr_assert_null(strstr(out.data, "\nold\n"));
    cJSON *table = config_describe();
    const cJSON *row;
    const char *at = out.data;
    cJSON_ArrayForEach(row, table) {
        char head[160];
        snprintf(head, sizeof head, "\n| `%s` | ", str(row, "path"));
        const char *found = strstr(at, head);
        cr_assert_not_null(found, "%s: no row, or out of order", str(row, "path"));
        at = found + 1;
    }
    cr_assert(strstr(out.data, "| `training.optimizer.lr` | number (0, 10] | 0.003 (`minLr` when larger) | peak learning rate |\n"));
    cr_assert(strstr(out.data, "| `training.epochs` | int 0..1000000 | 2 | used when `steps` is 0 |\n"));
    cr_assert(strstr(out.data, "| `data.format` | `fashion-mnist` \\| `webdataset` \\| `imagefolder` | "
                               "`fashion-mnist` |"));
    cr_assert(strstr(out.data, "| `data.mean` | 1 to 3 numbers in [0, 1] | by `channels` | "), "%s", out.data);
    cr_assert(strstr(out.data, "| `data.std` | 1 to 3 numbers in (0, 1] | by `channels` | "), "%s", out.data);
    cr_assert(strstr(out.data, "| `data.scale` | two numbers in (0, 1] | [0.08, 1] | "), "%s", out.data);
    cr_assert(strstr(out.data, "| `training.optimizer.betas` | two numbers in [0, 1) | [0.9, 0.999] | "),
              "%s", out.data);
    cJSON_Delete(table);
    buf_free(&out);
}

/* The dotted paths of a parsed spec summary's keys, into `seen` (a JSON
 * object used as a set); the enum text of each key that has a value into
 * `values`. Returns how many keys it walked. */
static int summary_paths(const cJSON *map, const char *prefix, cJSON *seen, cJSON *values)
{
    int n = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, map) {
        char path[160];
        snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", item->string);
        if (cJSON_IsObject(item)) {
            n += summary_paths(item, path, seen, values);
            continue;
        }
        cr_assert_null(cJSON_GetObjectItem(seen, path), "%s twice", path);
        cJSON_AddTrueToObject(seen, path);
        if (cJSON_IsString(item))
            cJSON_AddStringToObject(values, path, item->valuestring);
        else
            cr_assert(cJSON_IsNull(item), "%s: a value that is no enum", path);
        n++;
    }
    return n;
}

Test(config_schema, the_spec_summary_names_every_key_once_and_each_enums_values)
{
    buf out = {0}, doc = {0};
    char err[256] = "";
    cr_assert_eq(config_schema_spec_summary(&out, 2, err, sizeof err), 0, "%s", err);
    /* YAML: each section a flow mapping of its keys, sections inside nested */
    buf_printf(&doc, "spec:\n%s", out.data);
    cJSON *root = parse(doc.data);
    cJSON *seen = cJSON_CreateObject(), *values = cJSON_CreateObject();
    const int n = summary_paths(cJSON_GetObjectItem(root, "spec"), "", seen, values);
    cJSON *table = config_describe();
    cr_assert_eq(n, cJSON_GetArraySize(table), "%s", out.data);
    const cJSON *row;
    cJSON_ArrayForEach(row, table) {
        const char *path = str(row, "path");
        cr_assert_not_null(cJSON_GetObjectItem(seen, path), "%s: not in\n%s", path, out.data);
        const cJSON *e = cJSON_GetObjectItem(row, "enum"), *c;
        buf want = {0};
        cJSON_ArrayForEach(c, e)
            buf_printf(&want, "%s%s", c->valuestring[0] ? c->valuestring : "\"\"",
                       c->next ? " | " : "");
        if (e)
            cr_assert_str_eq(str(values, path), want.data, "%s", path);
        else
            cr_assert_null(cJSON_GetObjectItem(values, path), "%s", path);
        buf_free(&want);
    }
    /* lines of 100 columns at most: a section at the indentation, or its
     * continuation under its first key ("  checkpoint: {": column 15) */
    for (const char *line = out.data; *line;) {
        const size_t len = strcspn(line, "\n");
        cr_assert_leq(len, 100, "%.*s", (int)len, line);
        const size_t lead = strspn(line, " ");
        cr_assert(lead == 2 || lead == 15, "%.*s", (int)len, line);
        line += len + (line[len] == '\n');
    }
    cr_assert(strstr(out.data, "  model:      {preset: ") == out.data, "%s", out.data);
    cr_assert(strstr(out.data, "\n  checkpoint: {uri, intervalSteps, "), "%s", out.data);
    cJSON_Delete(table);
    cJSON_Delete(seen);
    cJSON_Delete(values);
    cJSON_Delete(root);
    buf_free(&doc);
    buf_free(&out);
}

Test(config_schema, the_exit_code_table_has_one_row_per_class_in_order)
{
    buf out = {0};
    char err[256] = "";
    cr_assert_eq(config_schema_exit_codes_table(&out, err, sizeof err), 0, "%s", err);
    buf want = {0};
    buf_puts(&want, "| class | exit code | retried | what happened |\n| --- | --- | --- | --- |\n");
    size_t n;
    const vj_err_row *t = vj_err_table(&n);
    for (size_t i = 0; i < n; i++)
        buf_printf(&want, "| `%s` | %d | %s | %s |\n", t[i].name, t[i].exit_code,
                   t[i].permanent ? "no" : "yes", t[i].meaning);
    cr_assert_str_eq(out.data, want.data);
    cr_assert(strstr(out.data, "| `data` | 3 | no | ") && strstr(out.data, "| `stopped` | 143 | yes | "));
    buf_free(&want);
    buf_free(&out);
}

Test(config_schema, rewriting_fills_a_summary_at_its_indentation_and_an_exit_code_table)
{
    const char *text = "```yaml\nspec:\n  replicas: 4\n"
                       "  # BEGIN generated: config-summary (words)\n  stale\n"
                       "  # END generated: config-summary\n  suspend: false\n```\n\n"
                       "<!-- BEGIN generated: exit-codes -->\n| stale |\n<!-- END generated: exit-codes -->\n"
                       "after\n";
    buf once = {0}, twice = {0}, summary = {0}, codes = {0};
    char err[256] = "";
    cr_assert_eq(config_schema_rewrite(&once, text, strlen(text), "d.md", err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_schema_rewrite(&twice, once.data, once.len, "d.md", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(twice.data, once.data);
    cr_assert_eq(config_schema_spec_summary(&summary, 2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_schema_exit_codes_table(&codes, err, sizeof err), 0, "%s", err);
    buf want = {0};
    buf_printf(&want, "```yaml\nspec:\n  replicas: 4\n  # BEGIN generated: config-summary (words)\n%s"
                      "  # END generated: config-summary\n  suspend: false\n```\n\n"
                      "<!-- BEGIN generated: exit-codes -->\n%s<!-- END generated: exit-codes -->\nafter\n",
               summary.data, codes.data);
    cr_assert_str_eq(once.data, want.data);
    buf_free(&once);
    buf_free(&twice);
    buf_free(&summary);
    buf_free(&codes);
    buf_free(&want);
}
