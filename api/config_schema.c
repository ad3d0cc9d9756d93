/* api/config_schema.c - see config_schema.h.
 *
 * Everything here is written from config_describe(), the key table of
 * api/config_keys.c, or from vj_err_table(), the exit-code table of
 * api/exitcode.c: a key's bounds, default or words, or a class's exit code,
 * change there, and `make schema` carries the change into the CRD, the
 * README and docs/design.md.
 *
 * The YAML is written the way the hand-written rest of the CRD is: block
 * style, two spaces a level, short descriptions on one line and longer ones
 * folded (>-) at 80 columns, plain scalars where YAML 1.1 and 1.2 both read
 * them as the same string, else double-quoted. Numbers: integers as
 * integers; a double key's default with a decimal point (1.0, 0.0) or, in
 * exponent form, "1.0e-8" (a YAML 1.1 float needs both the point and the
 * sign). Descriptions and the README write defaults as 0.003, 1e-8, 1.0.
 */
#include "config_schema.h"

#include "config.h"
#include "exitcode.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DESC_ONE_LINE 100 /* a description on one line fits in this many columns */
#define FOLD_WIDTH 80     /* folded descriptions wrap at this column */
#define SUMMARY_WIDTH 100 /* the spec summary's lines wrap at this column */

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return VJ_ERR_CONFIG;
}

/* ------------------------------------------------------------------------ */
/* Numbers                                                                   */

/* The shortest "%g" that reads back as d, exponent without '+' and leading
 * zeros: 0.003, 1e-8, 1e6. */
static void num_shortest(char *out, size_t n, double d)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, d);
        if (strtod(out, NULL) == d)
            break;
    }
    char *e = strchr(out, 'e');
    if (!e)
        return;
    char *p = e + 1, *q = e + 1;
    if (*p == '+' || *p == '-') {
        if (*p == '-')
            *q++ = '-';
        p++;
    }
    while (*p == '0' && p[1])
        p++;
    memmove(q, p, strlen(p) + 1);
}

static int integral(double d) { return d == floor(d) && fabs(d) < 1e15; }

/* A bound or an integer: 0, 64, 9007199254740991; else as a double. */
static void num_plain(char *out, size_t n, double d)
{
    if (integral(d))
        snprintf(out, n, "%.0f", d);
    else
        num_shortest(out, n, d);
}

/* A double for YAML: 1.0, 0.003, 1.0e-8, 2.5e+20. */
static void num_yaml_double(char *out, size_t n, double d)
{
    if (integral(d)) {
        snprintf(out, n, "%.1f", d);
        return;
    }
    char s[28]; /* "%.17g" of a double: 24 characters at most */
    num_shortest(s, sizeof s, d);
    char *e = strchr(s, 'e');
    if (!e) {
        snprintf(out, n, "%s", s);
        return;
    }
    *e = '\0';
    const char *exp = e + 1;
    snprintf(out, n, "%s%se%s%s", s, strchr(s, '.') ? "" : ".0", exp[0] == '-' ? "" : "+", exp);
}

/* A double for people: 1.0, 0.003, 1e-8. */
static void num_doc_double(char *out, size_t n, double d)
{
    if (integral(d))
        snprintf(out, n, "%.1f", d);
    else
        num_shortest(out, n, d);
}

/* ------------------------------------------------------------------------ */
/* YAML scalars                                                              */

static int is_letter(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* A string YAML 1.1 would read as something else: a boolean, null, number. */
static int resolves_to_non_string(const char *s)
{
    static const char *const words[] = {"y", "n", "yes", "no", "on", "off", "true", "false",
                                        "null", "~", NULL};
    for (const char *const *w = words; *w; w++)
        if (strcasecmp(s, *w) == 0)
            return 1;
    char *end;
    strtod(s, &end);
    return end != s;
}

/* A value (default, enum value) as a plain scalar: letters, digits and
 * _./:- only (no ':' in a flow sequence), starting with a letter, '_' or '/'. */
static int plain_value(const char *s, int flow)
{
    if (!(s[0] == '_' || s[0] == '/' || is_letter(s[0])) || resolves_to_non_string(s))
        return 0;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        int ok = is_letter(c) || is_digit(c) || c == '_' || c == '.' || c == '/' ||
                 c == '-' || (c == ':' && !flow);
        if (!ok)
            return 0;
    }
    return 1;
}

/* Prose as a one-line plain scalar: no indicator first, no ": " or " #",
 * no ':' last, no control characters, not read as a number or boolean. */
static int plain_text(const char *s)
{
    if (!s[0] || strchr("-?:,[]{}#&*!|>'\"%@` ", s[0]) || strstr(s, ": ") || strstr(s, " #") ||
        s[strlen(s) - 1] == ':' || s[strlen(s) - 1] == ' ' || resolves_to_non_string(s))
        return 0;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return 0;
    return 1;
}

static void put_double_quoted(buf *out, const char *s)
{
    buf_puts(out, "\"");
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\')
            buf_printf(out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            buf_printf(out, "\\x%02x", c);
        else
            buf_append(out, p, 1);
    }
    buf_puts(out, "\"");
}

static void put_value(buf *out, const char *s, int flow)
{
    if (plain_value(s, flow))
        buf_puts(out, s);
    else
        put_double_quoted(out, s);
}

/* Prose that folding keeps as it is: single spaces between words, none at
 * either end, no control characters. */
static int foldable(const char *s)
{
    if (!s[0] || s[0] == ' ' || s[strlen(s) - 1] == ' ' || strstr(s, "  "))
        return 0;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return 0;
    return 1;
}

/* "description: ..." at indent: on one line when it fits, else folded. */
static void put_description(buf *out, int indent, const char *text)
{
    buf_printf(out, "%*sdescription: ", indent, "");
    if (plain_text(text) && indent + 13 + strlen(text) <= DESC_ONE_LINE) {
        buf_printf(out, "%s\n", text);
        return;
    }
    if (!foldable(text)) {
        put_double_quoted(out, text);
        buf_puts(out, "\n");
        return;
    }
    buf_puts(out, ">-\n");
    const int in = indent + 2;
    const char *p = text;
    while (*p) {
        /* as many words as fit in FOLD_WIDTH columns; at least one */
        const char *end = strchr(p, ' ');
        if (!end)
            end = p + strlen(p);
        for (;;) {
            const char *next = strchr(end + (*end == ' '), ' ');
            if (!*end)
                break;
            if (!next)
                next = end + strlen(end);
            if (in + (next - p) > FOLD_WIDTH)
                break;
            end = next;
        }
        buf_printf(out, "%*s%.*s\n", in, "", (int)(end - p), p);
        p = *end ? end + 1 : end;
    }
}

/* ------------------------------------------------------------------------ */
/* The key table                                                             */

static const char *str_of(const cJSON *row, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int true_of(const cJSON *row, const char *name)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(row, name));
}

static const cJSON *num_of(const cJSON *row, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, name);
    return cJSON_IsNumber(v) ? v : NULL;
}

/* Is `path` directly in `section` ("training.steps" in "training", not
 * "training.optimizer.lr")? */
static int in_section(const char *path, const char *section)
{
    const char *dot = strrchr(path, '.');
    size_t n = strlen(section);
    return dot && (size_t)(dot - path) == n && strncmp(path, section, n) == 0;
}

/* A default as people read it: fmnist_tiny, "", false, 50, 0.003, [0.9, 0.999];
 * the row's defaultWords where it has them. */
static void default_words(char *out, size_t n, const cJSON *row)
{
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(row, "default");
    const char *type = str_of(row, "type");
    if (str_of(row, "defaultWords"))
        snprintf(out, n, "%s", str_of(row, "defaultWords"));
    else if (cJSON_IsString(d))
        snprintf(out, n, "%s", d->valuestring[0] ? d->valuestring : "\"\"");
    else if (cJSON_IsBool(d))
        snprintf(out, n, "%s", cJSON_IsTrue(d) ? "true" : "false");
    else if (cJSON_IsNumber(d) && strcmp(type, "number") == 0)
        num_doc_double(out, n, d->valuedouble);
    else if (cJSON_IsNumber(d))
        num_plain(out, n, d->valuedouble);
    else if (cJSON_IsArray(d) && cJSON_GetArraySize(d) > 0) {
        size_t used = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, d) {
            char a[64];
            num_shortest(a, sizeof a, e->valuedouble);
            int w = snprintf(out + used, n - used, "%s%s", e == d->child ? "[" : ", ", a);
            if (w < 0 || (size_t)w >= n - used)
                return;
            used += (size_t)w;
        }
        snprintf(out + used, n - used, "]");
    } else
        snprintf(out, n, "?");
}

/* A number of the schema: a bound, or a default of type `type`. */
static void put_number(buf *out, double d, const char *type, int is_default)
{
    char s[64];
    if (is_default && strcmp(type, "integer") != 0)
        num_yaml_double(s, sizeof s, d);
    else
        num_plain(s, sizeof s, d);
    buf_puts(out, s);
}

/* type, format, minimum, exclusiveMinimum, maximum, exclusiveMaximum of a
 * number (or of an array's elements) at indent. */
static void put_bounds(buf *out, int indent, const cJSON *row, const char *type)
{
    const cJSON *v;
    buf_printf(out, "%*stype: %s\n", indent, "", type);
    if (str_of(row, "format"))
        buf_printf(out, "%*sformat: %s\n", indent, "", str_of(row, "format"));
    if ((v = num_of(row, "minimum"))) {
        buf_printf(out, "%*sminimum: ", indent, "");
        put_number(out, v->valuedouble, type, 0);
        buf_puts(out, "\n");
    }
    if (true_of(row, "exclusiveMinimum"))
        buf_printf(out, "%*sexclusiveMinimum: true\n", indent, "");
    if ((v = num_of(row, "maximum"))) {
        buf_printf(out, "%*smaximum: ", indent, "");
        put_number(out, v->valuedouble, type, 0);
        buf_puts(out, "\n");
    }
    if (true_of(row, "exclusiveMaximum"))
        buf_printf(out, "%*sexclusiveMaximum: true\n", indent, "");
}

static void put_crd_key(buf *out, int indent, const cJSON *row)
{
    const char *path = str_of(row, "path"), *type = str_of(row, "type");
    const int in = indent + 2;
    const int array = strcmp(type, "array") == 0;
    const cJSON *v;
    buf_printf(out, "%*s%s:\n", indent, "", strrchr(path, '.') + 1);
    if (array) {
        buf_printf(out, "%*stype: array\n", in, "");
        if ((v = num_of(row, "minItems")))
            buf_printf(out, "%*sminItems: %.0f\n", in, "", v->valuedouble);
        if ((v = num_of(row, "maxItems")))
            buf_printf(out, "%*smaxItems: %.0f\n", in, "", v->valuedouble);
    } else {
        put_bounds(out, in, row, type);
        if ((v = num_of(row, "maxLength")))
            buf_printf(out, "%*smaxLength: %.0f\n", in, "", v->valuedouble);
        if (str_of(row, "pattern")) {
            buf_printf(out, "%*spattern: ", in, "");
            put_double_quoted(out, str_of(row, "pattern"));
            buf_puts(out, "\n");
        }
    }

    const int has_default = strcmp(str_of(row, "defaultFrom"), "key") == 0;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(row, "default");
    if (has_default) {
        buf_printf(out, "%*sdefault: ", in, "");
        if (cJSON_IsString(d))
            put_value(out, d->valuestring, 0);
        else if (cJSON_IsBool(d))
            buf_puts(out, cJSON_IsTrue(d) ? "true" : "false");
        else if (cJSON_IsNumber(d))
            put_number(out, d->valuedouble, type, 1);
        else if (cJSON_IsArray(d)) {
            const cJSON *e;
            buf_puts(out, "[");
            cJSON_ArrayForEach(e, d) {
                put_number(out, e->valuedouble, "number", 1);
                buf_puts(out, e->next ? ", " : "");
            }
            buf_puts(out, "]");
        }
        buf_puts(out, "\n");
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(row, "enum");
    if (e) {
        const cJSON *c;
        buf_printf(out, "%*senum: [", in, "");
        cJSON_ArrayForEach(c, e) {
            put_value(out, c->valuestring, 1);
            buf_puts(out, c->next ? ", " : "");
        }
        buf_puts(out, "]\n");
    }

    /* the description, and the default in words where the CRD has one */
    buf text = {0};
    buf_puts(&text, str_of(row, "description"));
    if (has_default && !(cJSON_IsString(d) && !d->valuestring[0])) { /* "" says it itself */
        char w[256];
        default_words(w, sizeof w, row);
        buf_printf(&text, "%sDefault %s.", text.len ? " " : "", w);
    }
    if (text.len)
        put_description(out, in, text.data);
    if (text.failed)
        out->failed = 1;
    buf_free(&text);

    if (array && str_of(row, "itemType")) { /* a list of strings (training.freeze) */
        buf_printf(out, "%*sitems:\n%*stype: %s\n", in, "", in + 2, "", str_of(row, "itemType"));
        if ((v = num_of(row, "maxLength")))
            buf_printf(out, "%*sminLength: 1\n%*smaxLength: %.0f\n", in + 2, "", in + 2, "",
                       v->valuedouble);
        if (str_of(row, "itemDescription"))
            put_description(out, in + 2, str_of(row, "itemDescription"));
    } else if (array) {
        buf_printf(out, "%*sitems:\n", in, "");
        put_bounds(out, in + 2, row, "number");
        if (str_of(row, "itemDescription"))
            put_description(out, in + 2, str_of(row, "itemDescription"));
    }
}

int config_schema_crd_section(buf *out, const char *section, int indent, char *err, size_t errlen)
{
    cJSON *table = config_describe();
    if (!table)
        return fail(err, errlen, "out of memory");
    int n = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, table) {
        if (in_section(str_of(row, "path"), section)) {
            put_crd_key(out, indent, row);
            n++;
        }
    }
    cJSON_Delete(table);
    if (n == 0)
        return fail(err, errlen, "no config key is directly in section '%s'", section);
    return out->failed ? fail(err, errlen, "out of memory") : 0;
}

/* The README's type column: the row's readmeType, else from the type. */
static void readme_type(buf *out, const cJSON *row)
{
    const char *type = str_of(row, "type");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(row, "enum");
    char lo[64] = "", hi[64] = "";
    const cJSON *mn = num_of(row, "minimum"), *mx = num_of(row, "maximum");
    if (mn)
        num_plain(lo, sizeof lo, mn->valuedouble);
    if (mx)
        num_plain(hi, sizeof hi, mx->valuedouble);
    const char open = true_of(row, "exclusiveMinimum") ? '(' : '[';
    const char close = true_of(row, "exclusiveMaximum") ? ')' : ']';
    if (str_of(row, "readmeType")) {
        buf_puts(out, str_of(row, "readmeType"));
    } else if (e) {
        const cJSON *c;
        cJSON_ArrayForEach(c, e)
            buf_printf(out, "`%s`%s", c->valuestring, c->next ? " \\| " : "");
    } else if (strcmp(type, "integer") == 0) {
        buf_printf(out, "int %s..%s", lo, hi);
    } else if (strcmp(type, "number") == 0) {
        buf_printf(out, "number %c%s, %s%c", open, lo, hi, close);
    } else if (strcmp(type, "array") == 0) {
        const cJSON *a = num_of(row, "minItems"), *b = num_of(row, "maxItems");
        const int n_lo = a ? (int)a->valuedouble : 0, n_hi = b ? (int)b->valuedouble : 0;
        static const char *const counts[] = {"no", "one", "two", "three", "four"};
        if (n_lo == n_hi && n_lo >= 0 && n_lo <= 4)
            buf_printf(out, "%s numbers", counts[n_lo]);
        else
            buf_printf(out, "%d to %d numbers", n_lo, n_hi);
        buf_printf(out, " in %c%s, %s%c", open, lo, hi, close);
    } else if (strcmp(type, "boolean") == 0) {
        buf_puts(out, "bool");
    } else {
        buf_puts(out, type);
    }
}

int config_schema_readme_table(buf *out, char *err, size_t errlen)
{
    cJSON *table = config_describe();
    if (!table)
        return fail(err, errlen, "out of memory");
    buf_puts(out, "| key | type | default | meaning |\n| --- | --- | --- | --- |\n");
    const cJSON *row;
    cJSON_ArrayForEach(row, table) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(row, "default");
        char w[256];
        default_words(w, sizeof w, row);
        buf_printf(out, "| `%s` | ", str_of(row, "path"));
        readme_type(out, row);
        /* strings that name something in backquotes; "" as it is */
        const int quoted = cJSON_IsString(d) && d->valuestring[0];
        buf_printf(out, " | %s%s%s | ", quoted ? "`" : "", w, quoted ? "`" : "");
        const char *meaning = str_of(row, "readme");
        buf_printf(out, "%s%s|\n", meaning ? meaning : "", meaning && meaning[0] ? " " : "");
    }
    cJSON_Delete(table);
    return out->failed ? fail(err, errlen, "out of memory") : 0;
}

/* ------------------------------------------------------------------------ */
/* docs/design.md: the spec summary and the exit codes                       */

/* Is `path` under `prefix` ("training.optimizer.lr" under "training")? */
static int under(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(path, prefix, n) == 0 && path[n] == '.';
}

/* Does a row before `row` hold a key under `prefix`? */
static int seen_before(const cJSON *table, const cJSON *row, const char *prefix)
{
    for (const cJSON *r = table->child; r && r != row; r = r->next)
        if (under(str_of(r, "path"), prefix))
            return 1;
    return 0;
}

/* The keys under `prefix`, in table order, as one flow mapping: "{a, b: x |
 * y, sub: {c, d}}": a key by its name, an enum's with its values, the keys
 * of a section inside it as a mapping of their own where its first key is. */
static void summary_map(buf *out, const cJSON *table, const char *prefix)
{
    int first = 1;
    const cJSON *row;
    buf_puts(out, "{");
    cJSON_ArrayForEach(row, table) {
        const char *path = str_of(row, "path");
        if (!under(path, prefix))
            continue;
        const char *name = path + strlen(prefix) + 1, *dot = strchr(name, '.');
        char inner[128];
        if (dot) {
            snprintf(inner, sizeof inner, "%.*s", (int)(dot - path), path);
            if (seen_before(table, row, inner))
                continue;
        }
        buf_puts(out, first ? "" : ", ");
        first = 0;
        if (dot) {
            buf_printf(out, "%.*s: ", (int)(dot - name), name);
            summary_map(out, table, inner);
            continue;
        }
        buf_puts(out, name);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(row, "enum"), *c;
        if (e) {
            buf_puts(out, ": ");
            cJSON_ArrayForEach(c, e)
                buf_printf(out, "%s%s", c->valuestring[0] ? c->valuestring : "\"\"",
                           c->next ? " | " : "");
        }
    }
    buf_puts(out, "}");
}

/* Appends the word [w, w+n) to a line at column *col: after a space, or on
 * a new line at column `cont` when it would pass SUMMARY_WIDTH (the first
 * word of a line stays, however long). */
static void summary_word(buf *out, const char *w, size_t n, int cont, int *col)
{
    if (*col > cont && *col + 1 + (int)n > SUMMARY_WIDTH) {
        buf_printf(out, "\n%*s", cont, "");
        *col = cont;
    } else if (*col > cont) {
        buf_puts(out, " ");
        (*col)++;
    }
    buf_append(out, w, n);
    *col += (int)n;
}

int config_schema_spec_summary(buf *out, int indent, char *err, size_t errlen)
{
    cJSON *table = config_describe();
    if (!table)
        return fail(err, errlen, "out of memory");
    /* the top-level sections in table order, their names padded alike */
    int width = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, table) {
        const char *path = str_of(row, "path");
        const int n = (int)strcspn(path, ".");
        if (n > width)
            width = n;
    }
    cJSON_ArrayForEach(row, table) {
        const char *path = str_of(row, "path");
        char section[64];
        snprintf(section, sizeof section, "%.*s", (int)strcspn(path, "."), path);
        if (seen_before(table, row, section))
            continue;
        buf map = {0};
        summary_map(&map, table, section);
        if (map.failed)
            out->failed = 1;
        /* "section: {" then the items, wrapped after a ", " where the next
         * one would pass SUMMARY_WIDTH, continued under the first; an item
         * longer than a line (an enum of many values) before its " | "s */
        buf_printf(out, "%*s%s:%*s", indent, "", section, width - (int)strlen(section) + 1, "");
        const int cont = indent + width + 3; /* the column after the "{" */
        int col = cont - 1;
        const char *p = map.data ? map.data : "";
        while (*p) {
            const char *sep = strstr(p, ", ");
            const size_t n = sep ? (size_t)(sep - p) + 1 : strlen(p); /* with its comma */
            const char *end = p + n;
            if (cont + (int)n <= SUMMARY_WIDTH) {
                summary_word(out, p, n, cont, &col);
            } else {
                for (const char *w = p; w < end;) {
                    const char *bar = strstr(w + 1, " | ");
                    const char *we = bar && bar < end ? bar : end;
                    summary_word(out, w, (size_t)(we - w), cont, &col);
                    w = we + (we < end); /* "| value" starts the next word */
                }
            }
            p = end + (sep ? 1 : 0);
        }
        buf_puts(out, "\n");
        buf_free(&map);
    }
    cJSON_Delete(table);
    return out->failed ? fail(err, errlen, "out of memory") : 0;
}

int config_schema_exit_codes_table(buf *out, char *err, size_t errlen)
{
    size_t n;
    const vj_err_row *t = vj_err_table(&n);
    buf_puts(out, "| class | exit code | retried | what happened |\n| --- | --- | --- | --- |\n");
    for (size_t i = 0; i < n; i++) {
        buf_printf(out, "| `%s` | %d | %s | ", t[i].name, t[i].exit_code, t[i].permanent ? "no" : "yes");
        for (const char *m = t[i].meaning; *m;) { /* a '|' would end the cell */
            const size_t k = strcspn(m, "|");
            buf_append(out, m, k);
            m += k;
            if (*m) {
                buf_puts(out, "\\|");
                m++;
            }
        }
        buf_puts(out, " |\n");
    }
    return out->failed ? fail(err, errlen, "out of memory") : 0;
}

/* ------------------------------------------------------------------------ */
/* Rewriting a file's generated regions                                      */

#define BEGIN_MARK "BEGIN generated: "
#define END_MARK "END generated: "
#define README_REGION "config-keys"
#define SUMMARY_REGION "config-summary"
#define EXIT_CODES_REGION "exit-codes"

/* The name of the marker `mark` on the line [s, e), into name; 0 if the
 * line is no such marker. A marker is a comment line of its own: after the
 * indentation, "# " (YAML) or "<!-- " (Markdown), then the mark and a name. */
static int marker_name(const char *s, const char *e, const char *mark, char *name, size_t n)
{
    const char *p = s;
    while (p < e && *p == ' ')
        p++;
    if ((size_t)(e - p) > 2 && strncmp(p, "# ", 2) == 0)
        p += 2;
    else if ((size_t)(e - p) > 5 && strncmp(p, "<!-- ", 5) == 0)
        p += 5;
    else
        return 0;
    size_t ml = strlen(mark);
    if ((size_t)(e - p) < ml || strncmp(p, mark, ml) != 0)
        return 0;
    const char *q = p + ml, *r = q;
    while (r < e && (is_letter(*r) || is_digit(*r) || *r == '.' || *r == '_' || *r == '-'))
        r++;
    if (r == q || (size_t)(r - q) >= n)
        return 0;
    snprintf(name, n, "%.*s", (int)(r - q), q);
    return 1;
}

int config_schema_rewrite(buf *out, const char *text, size_t len, const char *origin, char *err,
                          size_t errlen)
{
    cJSON *table = config_describe();
    if (!table)
        return fail(err, errlen, "out of memory");
    const int n_keys = cJSON_GetArraySize(table);
    char *written = calloc((size_t)n_keys + 1, 1); /* per key: in a YAML region */
    char(*seen)[128] = calloc(64, sizeof *seen);   /* region names so far */
    int n_seen = 0, yaml_regions = 0, rc = 0;
    if (!written || !seen) {
        rc = fail(err, errlen, "out of memory");
        goto out;
    }

    const char *p = text, *end = text + len;
    int line = 0;
    while (p < end && rc == 0) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl + 1 : end;
        line++;
        char name[128];
        buf_append(out, p, (size_t)(eol - p));
        if (!marker_name(p, eol, BEGIN_MARK, name, sizeof name)) {
            p = eol;
            continue;
        }
        /* a region: its end marker, then what goes between */
        const int begin_line = line;
        const int indent = (int)strspn(p, " ");
        const char *q = eol;
        char end_name[128];
        int found = 0;
        while (q < end) {
            const char *qn = memchr(q, '\n', (size_t)(end - q));
            const char *qe = qn ? qn + 1 : end;
            line++;
            if (marker_name(q, qe, END_MARK, end_name, sizeof end_name)) {
                if (strcmp(end_name, name) != 0) {
                    rc = fail(err, errlen, "%s:%d: 'END generated: %s' closes 'BEGIN generated: %s' of line %d",
                              origin, line, end_name, name, begin_line);
                    goto out;
                }
                found = 1;
                break;
            }
            q = qe;
        }
        if (!found) {
            rc = fail(err, errlen, "%s:%d: 'BEGIN generated: %s' has no 'END generated: %s'",
                      origin, begin_line, name, name);
            goto out;
        }
        for (int i = 0; i < n_seen; i++)
            if (strcmp(seen[i], name) == 0) {
                rc = fail(err, errlen, "%s:%d: a second region 'BEGIN generated: %s'", origin,
                          begin_line, name);
                goto out;
            }
        if (n_seen < 64)
            snprintf(seen[n_seen++], sizeof seen[0], "%s", name);

        if (strcmp(name, README_REGION) == 0) {
            rc = config_schema_readme_table(out, err, errlen);
        } else if (strcmp(name, SUMMARY_REGION) == 0) {
            rc = config_schema_spec_summary(out, indent, err, errlen);
        } else if (strcmp(name, EXIT_CODES_REGION) == 0) {
            rc = config_schema_exit_codes_table(out, err, errlen);
        } else {
            yaml_regions++;
            int i = 0;
            const cJSON *row;
            cJSON_ArrayForEach(row, table) {
                if (in_section(str_of(row, "path"), name))
                    written[i] = 1;
                i++;
            }
            char why[256];
            rc = config_schema_crd_section(out, name, indent, why, sizeof why);
            if (rc)
                fail(err, errlen, "%s:%d: %s", origin, begin_line, why);
        }
        /* the end marker line itself */
        const char *qn = memchr(q, '\n', (size_t)(end - q));
        const char *qe = qn ? qn + 1 : end;
        buf_append(out, q, (size_t)(qe - q));
        p = qe;
    }
    if (rc)
        goto out;
    if (n_seen == 0) {
        rc = fail(err, errlen, "%s: no generated region ('BEGIN generated: NAME' ... 'END generated: NAME')",
                  origin);
        goto out;
    }
    if (yaml_regions) {
        int i = 0;
        const cJSON *row;
        cJSON_ArrayForEach(row, table) {
            if (!written[i]) {
                const char *path = str_of(row, "path");
                rc = fail(err, errlen, "%s: no region 'BEGIN generated: %.*s' for the key %s", origin,
                          (int)(strrchr(path, '.') - path), path, path);
                goto out;
            }
            i++;
        }
    }
    if (out->failed)
        rc = fail(err, errlen, "out of memory");
out:
    free(written);
    free(seen);
    cJSON_Delete(table);
    return rc;
}
