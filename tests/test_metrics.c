/* tests/test_metrics.c - operator/metrics.c: exact text for counters, gauges,
 * histograms and escaping; a promtool-style checker over the operator's whole
 * metric set; name validation; concurrent updates. */
#include "metrics.h"

#include <criterion/criterion.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRLEN 256

/* ---------------------------------------------------------------- checker */

/* A tiny text-format 0.0.4 checker, after promtool check metrics: every line is
 * a HELP, a TYPE (before the family's samples, once), or `name{labels} value`
 * with well-formed escapes; counters are >= 0; each histogram series has
 * strictly increasing le ending at +Inf, non-decreasing bucket counts, a _sum,
 * and a _count equal to its +Inf bucket. Returns NULL, or what is wrong in a
 * static buffer. */

#define MAX_FAMS 64
#define MAX_GROUPS 256

struct fam { char name[128]; char type[512]; int samples; };
struct group {
    char key[640]; /* family + labels other than le */
    double last_le, last_count, inf_count, count;
    int n_buckets, saw_inf, saw_sum, saw_count;
};

static char check_msg[512];

static const char *fail_at(int line, const char *what, const char *text)
{
    snprintf(check_msg, sizeof check_msg, "line %d: %s: %.200s", line, what, text);
    return check_msg;
}

static int is_name_char(char c, int first, int colon)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
           (!first && c >= '0' && c <= '9');
}

static int parse_value(const char *s, double *v)
{
    if (strcmp(s, "+Inf") == 0) { *v = INFINITY; return 0; }
    if (strcmp(s, "-Inf") == 0) { *v = -INFINITY; return 0; }
    if (strcmp(s, "NaN") == 0) { *v = NAN; return 0; }
    char *end;
    *v = strtod(s, &end);
    return (end == s || *end) ? -1 : 0;
}

static const char *check_exposition(const char *text)
{
    static struct fam fams[MAX_FAMS];
    static struct group groups[MAX_GROUPS];
    int n_fams = 0, n_groups = 0;
    memset(fams, 0, sizeof fams);
    memset(groups, 0, sizeof groups);
    if (*text && text[strlen(text) - 1] != '\n') return "text does not end with a newline";

    int lineno = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        char line[1024];
        size_t len = (size_t)(nl - p);
        if (len >= sizeof line) return fail_at(lineno + 1, "line too long", p);
        memcpy(line, p, len);
        line[len] = '\0';
        p = nl + 1;
        lineno++;
        if (len == 0) return fail_at(lineno, "empty line", line);

        if (line[0] == '#') {
            char kind[8], name[128], rest[512];
            if (sscanf(line, "# %7s %127s %511[^\n]", kind, name, rest) < 2)
                return fail_at(lineno, "bad comment", line);
            struct fam *f = NULL;
            for (int i = 0; i < n_fams; i++)
                if (strcmp(fams[i].name, name) == 0) f = &fams[i];
            if (!f) {
                if (n_fams == MAX_FAMS) return "too many families";
                f = &fams[n_fams++];
                snprintf(f->name, sizeof f->name, "%s", name);
            }
            if (f->samples) return fail_at(lineno, "HELP/TYPE after samples", line);
            if (strcmp(kind, "TYPE") == 0) {
                if (f->type[0]) return fail_at(lineno, "second TYPE", line);
                if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") &&
                    strcmp(rest, "summary") && strcmp(rest, "untyped"))
                    return fail_at(lineno, "unknown type", line);
                snprintf(f->type, sizeof f->type, "%s", rest);
            } else if (strcmp(kind, "HELP") != 0) {
                return fail_at(lineno, "unknown comment", line);
            }
            continue;
        }

        /* name */
        const char *s = line;
        char name[128];
        size_t n = 0;
        if (!is_name_char(*s, 1, 1)) return fail_at(lineno, "bad metric name", line);
        while (is_name_char(*s, n == 0, 1) && n < sizeof name - 1) name[n++] = *s++;
        name[n] = '\0';

        /* labels */
        char key[512] = "";
        double le = NAN;
        int has_le = 0;
        if (*s == '{') {
            s++;
            while (*s != '}') {
                char lname[64], lval[256];
                size_t ln = 0, lv = 0;
                if (!is_name_char(*s, 1, 0)) return fail_at(lineno, "bad label name", line);
                while (is_name_char(*s, ln == 0, 0) && ln < sizeof lname - 1) lname[ln++] = *s++;
                lname[ln] = '\0';
                if (s[0] != '=' || s[1] != '"') return fail_at(lineno, "expected =\"", line);
                s += 2;
                while (*s != '"') {
                    if (!*s) return fail_at(lineno, "unterminated label value", line);
                    if (*s == '\\') {
                        s++;
                        if (*s != '\\' && *s != '"' && *s != 'n')
                            return fail_at(lineno, "bad escape", line);
                    }
                    if (lv < sizeof lval - 1) lval[lv++] = *s;
                    s++;
                }
                lval[lv] = '\0';
                s++;
                if (strcmp(lname, "le") == 0) {
                    has_le = 1;
                    if (parse_value(lval, &le) != 0) return fail_at(lineno, "bad le", line);
                } else {
                    size_t k = strlen(key);
                    snprintf(key + k, sizeof key - k, "%s=%s,", lname, lval);
                }
                if (*s == ',') s++;
                else if (*s != '}') return fail_at(lineno, "expected , or }", line);
            }
            s++;
        }
        if (*s != ' ') return fail_at(lineno, "expected one space before the value", line);
        s++;
        double v;
        if (parse_value(s, &v) != 0) return fail_at(lineno, "bad value (or a timestamp)", line);

        /* family */
        struct fam *f = NULL;
        const char *suffix = "";
        for (int i = 0; i < n_fams && !f; i++) {
            if (strcmp(fams[i].name, name) == 0 && strcmp(fams[i].type, "histogram") != 0) {
                f = &fams[i];
            } else if (strcmp(fams[i].type, "histogram") == 0) {
                const char *sufs[] = {"_bucket", "_sum", "_count"};
                for (int k = 0; k < 3; k++) {
                    size_t bl = strlen(fams[i].name);
                    if (strncmp(name, fams[i].name, bl) == 0 && strcmp(name + bl, sufs[k]) == 0) {
                        f = &fams[i];
                        suffix = sufs[k];
                    }
                }
            }
        }
        if (!f || !f->type[0]) return fail_at(lineno, "sample without a TYPE'd family", line);
        f->samples++;
        if (strcmp(f->type, "counter") == 0 && !(v >= 0)) return fail_at(lineno, "counter < 0", line);
        if (strcmp(f->type, "histogram") != 0) {
            if (has_le) return fail_at(lineno, "le on a non-histogram", line);
            continue;
        }
        char gkey[640];
        snprintf(gkey, sizeof gkey, "%s|%s", f->name, key);
        struct group *g = NULL;
        for (int i = 0; i < n_groups; i++)
            if (strcmp(groups[i].key, gkey) == 0) g = &groups[i];
        if (!g) {
            if (n_groups == MAX_GROUPS) return "too many histogram series";
            g = &groups[n_groups++];
            snprintf(g->key, sizeof g->key, "%s", gkey);
        }
        if (strcmp(suffix, "_bucket") == 0) {
            if (!has_le) return fail_at(lineno, "bucket without le", line);
            if (g->saw_inf) return fail_at(lineno, "bucket after +Inf", line);
            if (g->n_buckets && !(le > g->last_le)) return fail_at(lineno, "le not increasing", line);
            if (g->n_buckets && v < g->last_count) return fail_at(lineno, "buckets not cumulative", line);
            g->last_le = le;
            g->last_count = v;
            g->n_buckets++;
            if (isinf(le) && le > 0) {
                g->saw_inf = 1;
                g->inf_count = v;
            }
        } else if (strcmp(suffix, "_sum") == 0) {
            g->saw_sum = 1;
        } else {
            g->saw_count = 1;
            g->count = v;
        }
    }
    for (int i = 0; i < n_groups; i++) {
        struct group *g = &groups[i];
        if (!g->saw_inf || !g->saw_sum || !g->saw_count) {
            snprintf(check_msg, sizeof check_msg, "histogram %s lacks +Inf, _sum or _count", g->key);
            return check_msg;
        }
        if (g->count != g->inf_count) {
            snprintf(check_msg, sizeof check_msg, "histogram %s: _count %g != +Inf bucket %g",
                     g->key, g->count, g->inf_count);
            return check_msg;
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- exact text */

static void assert_renders(metrics_registry *reg, const char *want)
{
    char *got = metrics_render(reg);
    cr_assert_not_null(got);
    cr_assert_str_eq(got, want, "rendered:\n%s\nwanted:\n%s", got, want);
    const char *bad = check_exposition(got);
    cr_assert_null(bad, "checker: %s", bad);
    free(got);
}

Test(metrics, empty_registry_renders_empty_text)
{
    metrics_registry *reg = metrics_registry_new();
    assert_renders(reg, "");
    metrics_registry_free(reg);
    metrics_registry_free(NULL);
}

Test(metrics, unlabelled_counter_renders_zero_before_use_then_its_total)
{
    char err[ERRLEN] = "";
    metrics_registry *reg = metrics_registry_new();
    metrics_counter *c = metrics_counter_new(reg, "vitjob_jobs_created_total",
                                             "ViTJob worker Jobs created.", err, ERRLEN, 0);
    cr_assert_not_null(c, "%s", err);
    assert_renders(reg, "# HELP vitjob_jobs_created_total ViTJob worker Jobs created.\n"
                        "# TYPE vitjob_jobs_created_total counter\n"
                        "vitjob_jobs_created_total 0\n");
    cr_assert_eq(metrics_counter_add(c, 1), 0);
    cr_assert_eq(metrics_counter_add(c, 2), 0);
    assert_renders(reg, "# HELP vitjob_jobs_created_total ViTJob worker Jobs created.\n"
                        "# TYPE vitjob_jobs_created_total counter\n"
                        "vitjob_jobs_created_total 3\n");
    metrics_registry_free(reg);
}

Test(metrics, labelled_counter_series_appear_on_first_use_sorted_by_label_value)
{
    char err[ERRLEN] = "";
    metrics_registry *reg = metrics_registry_new();
    metrics_counter *c = metrics_counter_new(reg, "vitjob_reconcile_total",
                                             "Reconciles by result.", err, ERRLEN, 1, "result");
    cr_assert_not_null(c, "%s", err);
    assert_renders(reg, "# HELP vitjob_reconcile_total Reconciles by result.\n"
                        "# TYPE vitjob_reconcile_total counter\n");
    metrics_counter_add(c, 1, "requeue");
    metrics_counter_add(c, 1, "done");
    metrics_counter_add(c, 1, "done");
    metrics_counter_add(c, 0, "error"); /* makes the series appear at 0 */
    assert_renders(reg, "# HELP vitjob_reconcile_total Reconciles by result.\n"
                        "# TYPE vitjob_reconcile_total counter\n"
                        "vitjob_reconcile_total{result=\"done\"} 2\n"
                        "vitjob_reconcile_total{result=\"error\"} 0\n"
                        "vitjob_reconcile_total{result=\"requeue\"} 1\n");
    metrics_registry_free(reg);
}

Test(metrics, two_labels_render_in_declared_order_and_families_in_registration_order)
{
    char err[ERRLEN] = "";
    metrics_registry *reg = metrics_registry_new();
    metrics_counter *api = metrics_counter_new(reg, "vitjob_api_requests_total",
                                               "API server requests.", err, ERRLEN, 2, "verb",
                                               "code");
    metrics_gauge *depth = metrics_gauge_new(reg, "vitjob_workqueue_depth", "Queued keys.", err,
                                             ERRLEN, 0);
    cr_assert(api && depth, "%s", err);
    metrics_counter_add(api, 1, "GET", "200");
    metrics_counter_add(api, 1, "PATCH", "409");
    metrics_counter_add(api, 4, "GET", "200");
    metrics_counter_add(api, 1, "GET", "404");
    metrics_gauge_set(depth, 7);
    assert_renders(reg, "# HELP vitjob_api_requests_total API server requests.\n"
                        "# TYPE vitjob_api_requests_total counter\n"
                        "vitjob_api_requests_total{verb=\"GET\",code=\"200\"} 5\n"
                        "vitjob_api_requests_total{verb=\"GET\",code=\"404\"} 1\n"
                        "vitjob_api_requests_total{verb=\"PATCH\",code=\"409\"} 1\n"
                        "# HELP vitjob_workqueue_depth Queued keys.\n"
                        "# TYPE vitjob_workqueue_depth gauge\n"
                        "vitjob_workqueue_depth 7\n");
    metrics_registry_free(reg);
}

Test(metrics, gauge_set_replaces_and_add_accumulates_including_negative)
{
    char err[ERRLEN] = "";
    metrics_registry *reg = metrics_registry_new();
    metrics_gauge *g = metrics_gauge_new(reg, "vitjob_workqueue_depth", "Queued keys.", err,
                                         ERRLEN, 0);
    cr_assert_not_null(g, "%s", err);
    metrics_gauge_set(g, 10);
    metrics_gauge_add(g, 2.5);
    metrics_gauge_add(g, -5);
    assert_renders(reg, "# HELP vitjob_workqueue_depth Queued keys.\n"
                        "# TYPE vitjob_workqueue_depth gauge\n"
                        "vitjob_workqueue_depth 7.5\n");
    metrics_gauge_set(g, -0.25);
    assert_renders(reg, "# HELP vitjob_workqueue_depth Queued keys.\n"
                        "# TYPE vitjob_workqueue_depth gauge\n"
                        "vitjob_workqueue_depth -0.25\n");
    metrics_registry_free(reg);
}

Test(metrics, histogram_renders_cumulative_buckets_with_inclusive_bounds_sum_and_count)
{
    char err[ERRLEN] = "";
    metrics_registry *reg = metrics_registry_new();
    const double b[] = {0.1, 0.5, 1};
    metrics_histogram *h = metrics_histogram_new(reg, "vitjob_reconcile_duration_seconds",
                                                 "Reconcile latency.", b, 3, err, ERRLEN, 0);
    cr_assert_not_null(h, "%s", err);
    metrics_histogram_observe(h, 0.05);
    metrics_histogram_observe(h, 0.1); /* le is inclusive */
    metrics_histogram_observe(h, 0.75);
    metrics_histogram_observe(h, 3);
    assert_renders(reg, "# HELP vitjob_reconcile_duration_seconds Reconcile latency.\n"
                        "# TYPE vitjob_reconcile_duration_seconds histogram\n"
                        "vitjob_reconcile_duration_seconds_bucket{le=\"0.1\"} 2\n"
                        "vitjob_reconcile_duration_seconds_bucket{le=\"0.5\"} 2\n"
                        "vitjob_reconcile_duration_seconds_bucket{le=\"1\"} 3\n"
                        "vitjob_reconcile_duration_seconds_bucket{le=\"+Inf\"} 4\n"
                        "vitjob_reconcile_duration_seconds_sum 3.9\n"
                        "vitjob_reconcile_duration_seconds_count 4\n");
    metrics_registry_free(reg);
}

Test(metrics, labelled_histogram_puts_le_last_and_default_buckets_match_prometheus)
{
    char err[ERRLEN] = "";
    metrics_registry *reg = metrics_registry_new();
    metrics_histogram *h = metrics_histogram_new(reg, "d_seconds", "D.", NULL, 0, err, ERRLEN, 1,
                                                 "kind");
    cr_assert_not_null(h, "%s", err);
    metrics_histogram_observe(h, 0.3, "x");
    assert_renders(reg, "# HELP d_seconds D.\n"
                        "# TYPE d_seconds histogram\n"
                        "d_seconds_bucket{kind=\"x\",le=\"0.005\"} 0\n"
                        "d_seconds_bucket{kind=\"x\",le=\"0.01\"} 0\n"
                        "d_seconds_bucket{kind=\"x\",le=\"0.025\"} 0\n"
                        "d_seconds_bucket{kind=\"x\",le=\"0.05\"} 0\n"
                        "d_seconds_bucket{kind=\"x\",le=\"0.1\"} 0\n"
                        "d_seconds_bucket{kind=\"x\",le=\"0.25\"} 0\n"
                        "d_seconds_bucket{kind=\"x\",le=\"0.5\"} 1\n"
                        "d_seconds_bucket{kind=\"x\",le=\"1\"} 1\n"
                        "d_seconds_bucket{kind=\"x\",le=\"2.5\"} 1\n"
                        "d_seconds_bucket{kind=\"x\",le=\"5\"} 1\n"
                        "d_seconds_bucket{kind=\"x\",le=\"10\"} 1\n"
                        "d_seconds_bucket{kind=\"x\",le=\"+Inf\"} 1\n"
                        "d_seconds_sum{kind=\"x\"} 0.3\n"
                        "d_seconds_count{kind=\"x\"} 1\n");
    metrics_registry_free(reg);
}

Test(metrics, label_values_escape_backslash_quote_newline_and_help_escapes_backslash_newline)
{
    char err[ERRLEN] = "";
    metrics_registry *reg = metrics_registry_new();
    metrics_counter *c = metrics_counter_new(reg, "esc_total", "a \\ b\nc \"q\"", err, ERRLEN,
                                             1, "v");
    cr_assert_not_null(c, "%s", err);
    metrics_counter_add(c, 1, "back\\slash \"quoted\"\nnext");
    assert_renders(reg, "# HELP esc_total a \\\\ b\\nc \"q\"\n"
                        "# TYPE esc_total counter\n"
                        "esc_total{v=\"back\\\\slash \\\"quoted\\\"\\nnext\"} 1\n");
    metrics_registry_free(reg);
}

Test(metrics, values_use_the_shortest_exact_decimal_and_prometheus_infinities)
{
    char buf[40];
    const struct { double v; const char *want; } cases[] = {
        {0, "0"}, {3, "3"}, {0.1, "0.1"}, {1e6, "1000000"}, {0.1 + 0.2, "0.30000000000000004"},
        {-2.5, "-2.5"}, {1e-9, "1e-09"}, {INFINITY, "+Inf"}, {-INFINITY, "-Inf"}, {NAN, "NaN"},
        {9007199254740993.0, "9007199254740992"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_geq(metrics_format_value(buf, sizeof buf, cases[i].v), 0);
        cr_assert_str_eq(buf, cases[i].want);
        if (isfinite(cases[i].v)) cr_assert_eq(strtod(buf, NULL), cases[i].v);
    }
    cr_assert_eq(metrics_format_value(buf, 2, 12345), -1, "too small a buffer is an error");
}

/* ---------------------------------------------------------------- checker over the operator set */

Test(metrics, operator_metric_set_passes_the_promtool_style_checker)
{
    char err[ERRLEN] = "";
    metrics_registry *reg = metrics_registry_new();
    metrics_counter *rec = metrics_counter_new(reg, "vitjob_reconcile_total", "Reconciles.", err,
                                               ERRLEN, 1, "result");
    metrics_counter *api = metrics_counter_new(reg, "vitjob_api_requests_total", "API calls.",
                                               err, ERRLEN, 1, "code");
    metrics_counter *created = metrics_counter_new(reg, "vitjob_jobs_created_total", "Created.",
                                                   err, ERRLEN, 0);
    metrics_counter *ok = metrics_counter_new(reg, "vitjob_jobs_succeeded_total", "Succeeded.",
                                              err, ERRLEN, 0);
    metrics_counter *failed = metrics_counter_new(reg, "vitjob_jobs_failed_total", "Failed.",
                                                  err, ERRLEN, 0);
    metrics_counter *restarted = metrics_counter_new(reg, "vitjob_jobs_restarted_total",
                                                     "Restarted.", err, ERRLEN, 0);
    metrics_gauge *depth = metrics_gauge_new(reg, "vitjob_workqueue_depth", "Depth.", err, ERRLEN,
                                             0);
    metrics_histogram *dur = metrics_histogram_new(reg, "vitjob_reconcile_duration_seconds",
                                                   "Latency.", NULL, 0, err, ERRLEN, 0);
    metrics_histogram *lab = metrics_histogram_new(reg, "vitjob_api_duration_seconds",
                                                   "API latency by verb.", NULL, 0, err, ERRLEN,
                                                   1, "verb");
    cr_assert(rec && api && created && ok && failed && restarted && depth && dur && lab, "%s",
              err);
    const char *results[] = {"done", "requeue", "error"};
    const char *codes[] = {"200", "201", "404", "409", "500"};
    const char *verbs[] = {"GET", "PATCH", "POST"};
    unsigned r = 12345;
    for (int i = 0; i < 5000; i++) {
        r = r * 1103515245u + 12345u;
        metrics_counter_add(rec, 1, results[r % 3]);
        metrics_counter_add(api, 1, codes[(r >> 4) % 5]);
        double secs = (double)((r >> 8) % 20000) / 1000.0; /* 0 .. 20 s, past the last bucket */
        metrics_histogram_observe(dur, secs);
        metrics_histogram_observe(lab, secs / 10, verbs[(r >> 3) % 3]);
    }
    metrics_counter_add(created, 3);
    metrics_counter_add(ok, 2);
    metrics_counter_add(failed, 1);
    metrics_counter_add(restarted, 1);
    metrics_gauge_set(depth, 4);
    char *text = metrics_render(reg);
    cr_assert_not_null(text);
    const char *bad = check_exposition(text);
    cr_assert_null(bad, "checker: %s\n%s", bad, text);
    cr_assert_not_null(strstr(text, "vitjob_reconcile_duration_seconds_count 5000\n"));
    cr_assert_not_null(strstr(text, "vitjob_reconcile_duration_seconds_bucket{le=\"+Inf\"} 5000\n"));
    free(text);
    metrics_registry_free(reg);
}

Test(metrics, checker_rejects_broken_exposition)
{
    /* The checker itself must catch what it claims to. */
    cr_assert_not_null(check_exposition("x 1\n"), "sample without TYPE");
    cr_assert_not_null(check_exposition("# TYPE x counter\nx -1\n"));
    cr_assert_not_null(check_exposition("# TYPE x counter\nx{a=\"b} 1\n"));
    cr_assert_not_null(check_exposition("# TYPE x counter\nx{a=\"\\t\"} 1\n"));
    cr_assert_not_null(check_exposition("# TYPE x counter\nx 1 123\n"), "timestamp");
    cr_assert_not_null(check_exposition("# TYPE h histogram\n"
                                        "h_bucket{le=\"1\"} 3\nh_bucket{le=\"2\"} 2\n"
                                        "h_bucket{le=\"+Inf\"} 3\nh_sum 1\nh_count 3\n"),
                       "non-cumulative buckets");
    cr_assert_not_null(check_exposition("# TYPE h histogram\n"
                                        "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 3\n"
                                        "h_sum 1\nh_count 4\n"),
                       "_count != +Inf bucket");
    cr_assert_not_null(check_exposition("# TYPE h histogram\n"
                                        "h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n"),
                       "no +Inf");
    cr_assert_null(check_exposition("# HELP x y\n# TYPE x gauge\nx{a=\"\\\"\"} -1\n"));
}

/* ---------------------------------------------------------------- errors */

Test(metrics, bad_names_duplicates_and_bad_buckets_are_rejected_with_a_message)
{
    char err[ERRLEN];
    metrics_registry *reg = metrics_registry_new();
    cr_assert_not_null(metrics_counter_new(reg, "a_total", "", err, ERRLEN, 0));

    err[0] = '\0';
    cr_assert_null(metrics_counter_new(reg, "a_total", "", err, ERRLEN, 0));
    cr_assert_not_null(strstr(err, "already registered"), "%s", err);
    cr_assert_null(metrics_gauge_new(reg, "a_total", "", err, ERRLEN, 0), "names are global");
    cr_assert_null(metrics_counter_new(reg, "9lives", "", err, ERRLEN, 0));
    cr_assert_not_null(strstr(err, "invalid metric name \"9lives\""), "%s", err);
    cr_assert_null(metrics_counter_new(reg, "has-dash", "", err, ERRLEN, 0));
    cr_assert_null(metrics_counter_new(reg, "", "", err, ERRLEN, 0));
    cr_assert_null(metrics_counter_new(reg, NULL, "", err, ERRLEN, 0));
    cr_assert_null(metrics_counter_new(reg, "b_total", "", err, ERRLEN, 1, "__reserved"));
    cr_assert_null(metrics_counter_new(reg, "b_total", "", err, ERRLEN, 1, "a:b"));
    cr_assert_null(metrics_counter_new(reg, "b_total", "", err, ERRLEN, 2, "x", "x"));
    cr_assert_not_null(strstr(err, "duplicate label name"), "%s", err);
    cr_assert_null(metrics_histogram_new(reg, "h", "", NULL, 0, err, ERRLEN, 1, "le"));
    const double unsorted[] = {1, 0.5};
    cr_assert_null(metrics_histogram_new(reg, "h", "", unsorted, 2, err, ERRLEN, 0));
    const double inf[] = {1, INFINITY};
    cr_assert_null(metrics_histogram_new(reg, "h", "", inf, 2, err, ERRLEN, 0));
    cr_assert_null(metrics_counter_new(NULL, "c", "", err, ERRLEN, 0));
    cr_assert_not_null(metrics_counter_new(reg, "ns:sub_total", "", NULL, 0, 1, "le"),
                       "colons in metric names, le on a counter, NULL err are fine");
    metrics_registry_free(reg);
}

Test(metrics, counter_rejects_negative_and_nan_deltas_and_null_label_values)
{
    char err[ERRLEN];
    metrics_registry *reg = metrics_registry_new();
    metrics_counter *c = metrics_counter_new(reg, "c_total", "C.", err, ERRLEN, 1, "k");
    cr_assert_eq(metrics_counter_add(c, -1, "x"), -1);
    cr_assert_eq(metrics_counter_add(c, NAN, "x"), -1);
    cr_assert_eq(metrics_counter_add(c, 1, (const char *)NULL), -1);
    cr_assert_eq(metrics_counter_add(NULL, 1, "x"), -1);
    cr_assert_eq(metrics_gauge_set(NULL, 1), -1);
    cr_assert_eq(metrics_histogram_observe(NULL, 1), -1);
    assert_renders(reg, "# HELP c_total C.\n# TYPE c_total counter\n");
    metrics_registry_free(reg);
}

/* ---------------------------------------------------------------- threads */

#define N_THREADS 8
#define N_INCS 20000

struct worker_arg { metrics_counter *c; metrics_histogram *h; metrics_gauge *g; int id; };

static void *hammer(void *p)
{
    struct worker_arg *a = p;
    const char *label = (a->id % 2) ? "odd" : "even";
    for (int i = 0; i < N_INCS; i++) {
        metrics_counter_add(a->c, 1, label);
        metrics_histogram_observe(a->h, 0.5);
        metrics_gauge_add(a->g, 1);
    }
    return NULL;
}

static void *render_loop(void *p)
{
    metrics_registry *reg = p;
    for (int i = 0; i < 50; i++) {
        char *t = metrics_render(reg);
        const char *bad = check_exposition(t);
        cr_assert_null(bad, "mid-update render: %s", bad);
        free(t);
    }
    return NULL;
}

Test(metrics, concurrent_updates_are_all_counted_and_renders_stay_consistent)
{
    char err[ERRLEN];
    metrics_registry *reg = metrics_registry_new();
    struct worker_arg a[N_THREADS];
    metrics_counter *c = metrics_counter_new(reg, "t_total", "T.", err, ERRLEN, 1, "parity");
    metrics_histogram *h = metrics_histogram_new(reg, "t_seconds", "T.", NULL, 0, err, ERRLEN, 0);
    metrics_gauge *g = metrics_gauge_new(reg, "t_gauge", "T.", err, ERRLEN, 0);
    pthread_t t[N_THREADS], r;
    for (int i = 0; i < N_THREADS; i++) {
        a[i] = (struct worker_arg){c, h, g, i};
        pthread_create(&t[i], NULL, hammer, &a[i]);
    }
    pthread_create(&r, NULL, render_loop, reg);
    for (int i = 0; i < N_THREADS; i++) pthread_join(t[i], NULL);
    pthread_join(r, NULL);
    char *text = metrics_render(reg);
    char want[128];
    snprintf(want, sizeof want, "t_total{parity=\"even\"} %d\n", N_THREADS / 2 * N_INCS);
    cr_assert_not_null(strstr(text, want), "%s", text);
    snprintf(want, sizeof want, "t_seconds_count %d\n", N_THREADS * N_INCS);
    cr_assert_not_null(strstr(text, want), "%s", text);
    snprintf(want, sizeof want, "t_gauge %d\n", N_THREADS * N_INCS);
    cr_assert_not_null(strstr(text, want), "%s", text);
    free(text);
    metrics_registry_free(reg);
}

/* ---------------------------------------------------------------- per-job gauges by a collector */

typedef struct {
    metrics_gauge *step;
    const char *names[3]; /* the "jobs" a scrape sees; NULL-terminated */
    int calls;
} jobs_state;

static void collect_jobs(void *user)
{
    jobs_state *s = user;
    s->calls++;
    metrics_gauge_clear(s->step);
    for (int i = 0; s->names[i]; i++) metrics_gauge_set(s->step, 10.0 * (i + 1), "ns", s->names[i]);
}

Test(metrics, a_collector_sets_per_job_series_at_each_render_and_a_gone_job_loses_its_series)
{
    char err[ERRLEN] = "";
    metrics_registry *reg = metrics_registry_new();
    jobs_state s = {.names = {"a", "we\"ird\\", NULL}};
    s.step = metrics_gauge_new(reg, "vitjob_job_step", "Steps done.", err, ERRLEN, 2, "namespace",
                               "name");
    cr_assert(s.step, "%s", err);
    metrics_set_collector(reg, collect_jobs, &s);
    char *text = metrics_render(reg);
    cr_assert_str_eq(text, "# HELP vitjob_job_step Steps done.\n# TYPE vitjob_job_step gauge\n"
                           "vitjob_job_step{namespace=\"ns\",name=\"a\"} 10\n"
                           "vitjob_job_step{namespace=\"ns\",name=\"we\\\"ird\\\\\"} 20\n");
    cr_assert_null(check_exposition(text), "%s", text);
    free(text);
    s.names[0] = "we\"ird\\"; /* job a went away */
    s.names[1] = NULL;
    text = metrics_render(reg);
    cr_assert_null(strstr(text, "name=\"a\""), "a's series went with it:\n%s", text);
    cr_assert(strstr(text, "name=\"we\\\"ird\\\\\"} 10\n"), "%s", text);
    free(text);
    cr_assert_eq(s.calls, 2, "one collection per render");
    metrics_set_collector(reg, NULL, NULL);
    cr_assert_eq(metrics_gauge_remove(s.step, "ns", "we\"ird\\"), 0);
    cr_assert_eq(metrics_gauge_remove(s.step, "ns", "absent"), 0);
    text = metrics_render(reg);
    cr_assert_null(strstr(text, "vitjob_job_step{"), "removed:\n%s", text);
    cr_assert_eq(s.calls, 2, "no collector after it is removed");
    free(text);
    metrics_registry_free(reg);
}
