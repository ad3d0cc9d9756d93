/* operator/metrics.c - see metrics.h.
 *
 * Owns: the families (a singly linked list in registration order), each with a
 * sorted array of series, all under the registry's one mutex; the text format.
 * Must not: do I/O, log, or hand out pointers into its tables other than the
 * family handles.
 */
#include "metrics.h"

#include "buf.h"

#include "util.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double metrics_default_buckets[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};
const int metrics_default_buckets_len =
    (int)(sizeof metrics_default_buckets / sizeof metrics_default_buckets[0]);

enum family_type { FAM_COUNTER, FAM_GAUGE, FAM_HISTOGRAM };
static const char *const type_names[] = {"counter", "gauge", "histogram"};

struct series {
    char **values;     /* n_labels label values */
    double value;      /* counter, gauge */
    uint64_t *buckets; /* histogram: n_bounds + 1 counts, not cumulative; last is +Inf */
    double sum;
    uint64_t count;
};

struct family {
    metrics_registry *reg;
    struct family *next;
    enum family_type type;
    char *name;
    char *help;
    int n_labels;
    char **label_names;
    double *bounds; /* histogram */
    int n_bounds;
    struct series **series; /* sorted by label values */
    size_t n_series, cap_series;
};

/* The public handle types are the family; one struct each for type checking. */
struct metrics_counter { struct family f; };
struct metrics_gauge { struct family f; };
struct metrics_histogram { struct family f; };

struct metrics_registry {
    pthread_mutex_t mu;
    struct family *head, *tail;
    /* the collector and each render run under collect_mu, so that what a
     * collector sets is rendered whole (never half cleared) */
    pthread_mutex_t collect_mu;
    metrics_collect_fn collect;
    void *collect_user;
};

/* ---------------------------------------------------------------- helpers */



static int valid_metric_name(const char *s)
{
    if (!s || !*s) return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                 (p != s && c >= '0' && c <= '9');
        if (!ok) return 0;
    }
    return 1;
}

static int valid_label_name(const char *s)
{
    if (!s || !*s || (s[0] == '_' && s[1] == '_')) return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (p != s && c >= '0' && c <= '9');
        if (!ok) return 0;
    }
    return 1;
}

int metrics_format_value(char *buf, size_t buflen, double v)
{
    int n;
    if (isnan(v)) n = snprintf(buf, buflen, "NaN");
    else if (isinf(v)) n = snprintf(buf, buflen, v > 0 ? "+Inf" : "-Inf");
    else {
        n = -1;
        for (int prec = 15; prec <= 17; prec++) {
            n = snprintf(buf, buflen, "%.*g", prec, v);
            if (n < 0 || (size_t)n >= buflen || strtod(buf, NULL) == v) break;
        }
    }
    return (n < 0 || (size_t)n >= buflen) ? -1 : n;
}

/* ---------------------------------------------------------------- families */

static void series_free(struct family *f, struct series *s)
{
    if (!s) return;
    if (s->values)
        for (int i = 0; i < f->n_labels; i++) free(s->values[i]);
    free(s->values);
    free(s->buckets);
    free(s);
}

static void family_free(struct family *f)
{
    if (!f) return;
    for (size_t i = 0; i < f->n_series; i++) series_free(f, f->series[i]);
    free(f->series);
    if (f->label_names)
        for (int i = 0; i < f->n_labels; i++) free(f->label_names[i]);
    free(f->label_names);
    free(f->bounds);
    free(f->name);
    free(f->help);
    free(f);
}

static int cmp_values(const struct family *f, char *const *a, const char *const *b)
{
    for (int i = 0; i < f->n_labels; i++) {
        int c = strcmp(a[i], b[i]);
        if (c) return c;
    }
    return 0;
}

/* The series with these label values, created if missing; NULL if out of memory.
 * Caller holds the mutex. */
static struct series *series_get(struct family *f, const char *const *values)
{
    size_t lo = 0, hi = f->n_series;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = cmp_values(f, f->series[mid]->values, values);
        if (c == 0) return f->series[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (f->n_series == f->cap_series) {
        size_t cap = f->cap_series ? f->cap_series * 2 : 4;
        struct series **a = realloc(f->series, cap * sizeof *a);
        if (!a) return NULL;
        f->series = a;
        f->cap_series = cap;
    }
    struct series *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->values = calloc((size_t)f->n_labels + 1, sizeof *s->values);
    if (!s->values) goto fail;
    for (int i = 0; i < f->n_labels; i++)
        if (!(s->values[i] = strdup(values[i]))) goto fail;
    if (f->type == FAM_HISTOGRAM) {
        s->buckets = calloc((size_t)f->n_bounds + 1, sizeof *s->buckets);
        if (!s->buckets) goto fail;
    }
    memmove(&f->series[lo + 1], &f->series[lo], (f->n_series - lo) * sizeof *f->series);
    f->series[lo] = s;
    f->n_series++;
    return s;
fail:
    series_free(f, s);
    return NULL;
}

static struct family *family_new(metrics_registry *reg, enum family_type type, const char *name,
                                 const char *help, const double *bounds, int n_bounds,
                                 char *err, size_t errlen, int n_labels, va_list ap)
{
    if (!reg) {
        err_printf(err, errlen, "metrics: NULL registry");
        return NULL;
    }
    if (!valid_metric_name(name)) {
        err_printf(err, errlen, "metrics: invalid metric name \"%s\"", name ? name : "(null)");
        return NULL;
    }
    if (n_labels < 0 || n_labels > METRICS_MAX_LABELS) {
        err_printf(err, errlen, "metrics: %s: %d labels (at most %d)", name, n_labels,
               METRICS_MAX_LABELS);
        return NULL;
    }
    const char *names[METRICS_MAX_LABELS];
    for (int i = 0; i < n_labels; i++) {
        names[i] = va_arg(ap, const char *);
        if (!valid_label_name(names[i]) || (type == FAM_HISTOGRAM && strcmp(names[i], "le") == 0)) {
            err_printf(err, errlen, "metrics: %s: invalid label name \"%s\"", name,
                   names[i] ? names[i] : "(null)");
            return NULL;
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(names[i], names[j]) == 0) {
                err_printf(err, errlen, "metrics: %s: duplicate label name \"%s\"", name, names[i]);
                return NULL;
            }
        }
    }
    if (type == FAM_HISTOGRAM) {
        if (!bounds || n_bounds == 0) {
            bounds = metrics_default_buckets;
            n_bounds = metrics_default_buckets_len;
        }
        if (n_bounds < 0 || n_bounds > METRICS_MAX_BUCKETS) {
            err_printf(err, errlen, "metrics: %s: %d buckets (1 to %d)", name, n_bounds,
                   METRICS_MAX_BUCKETS);
            return NULL;
        }
        for (int i = 0; i < n_bounds; i++) {
            if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
                err_printf(err, errlen,
                       "metrics: %s: bucket %d (%g) is not finite and above the one before",
                       name, i, bounds[i]);
                return NULL;
            }
        }
    }

    struct family *f = calloc(1, sizeof *f);
    if (!f) goto oom;
    f->reg = reg;
    f->type = type;
    f->n_labels = n_labels;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    f->label_names = calloc((size_t)n_labels + 1, sizeof *f->label_names);
    if (!f->name || !f->help || !f->label_names) goto oom;
    for (int i = 0; i < n_labels; i++)
        if (!(f->label_names[i] = strdup(names[i]))) goto oom;
    if (type == FAM_HISTOGRAM) {
        f->bounds = malloc((size_t)n_bounds * sizeof *f->bounds);
        if (!f->bounds) goto oom;
        memcpy(f->bounds, bounds, (size_t)n_bounds * sizeof *f->bounds);
        f->n_bounds = n_bounds;
    }
    /* A family without labels has its one series from the start. */
    if (n_labels == 0 && !series_get(f, NULL)) goto oom;

    pthread_mutex_lock(&reg->mu);
    for (struct family *g = reg->head; g; g = g->next) {
        if (strcmp(g->name, name) == 0) {
            pthread_mutex_unlock(&reg->mu);
            err_printf(err, errlen, "metrics: %s: already registered", name);
            family_free(f);
            return NULL;
        }
    }
    if (reg->tail) reg->tail->next = f;
    else reg->head = f;
    reg->tail = f;
    pthread_mutex_unlock(&reg->mu);
    return f;
oom:
    err_printf(err, errlen, "metrics: %s: out of memory", name);
    family_free(f);
    return NULL;
}

metrics_counter *metrics_counter_new(metrics_registry *reg, const char *name, const char *help,
                                     char *err, size_t errlen, int n_labels, ...)
{
    va_list ap;
    va_start(ap, n_labels);
    struct family *f = family_new(reg, FAM_COUNTER, name, help, NULL, 0, err, errlen, n_labels, ap);
    va_end(ap);
    return (metrics_counter *)f;
}

metrics_gauge *metrics_gauge_new(metrics_registry *reg, const char *name, const char *help,
                                 char *err, size_t errlen, int n_labels, ...)
{
    va_list ap;
    va_start(ap, n_labels);
    struct family *f = family_new(reg, FAM_GAUGE, name, help, NULL, 0, err, errlen, n_labels, ap);
    va_end(ap);
    return (metrics_gauge *)f;
}

metrics_histogram *metrics_histogram_new(metrics_registry *reg, const char *name,
                                         const char *help, const double *buckets,
                                         int n_buckets, char *err, size_t errlen,
                                         int n_labels, ...)
{
    va_list ap;
    va_start(ap, n_labels);
    struct family *f = family_new(reg, FAM_HISTOGRAM, name, help, buckets, n_buckets, err,
                                  errlen, n_labels, ap);
    va_end(ap);
    return (metrics_histogram *)f;
}

/* ---------------------------------------------------------------- updates */

enum op { OP_ADD, OP_SET, OP_OBSERVE };

static int update(struct family *f, enum op op, double v, va_list ap)
{
    if (!f) return -1;
    const char *values[METRICS_MAX_LABELS];
    for (int i = 0; i < f->n_labels; i++) {
        values[i] = va_arg(ap, const char *);
        if (!values[i]) return -1;
    }
    pthread_mutex_lock(&f->reg->mu);
    struct series *s = series_get(f, values);
    if (s) {
        switch (op) {
        case OP_ADD: s->value += v; break;
        case OP_SET: s->value = v; break;
        case OP_OBSERVE: {
            int b = 0; /* first bound >= v; NaN lands in +Inf only */
            while (b < f->n_bounds && !(v <= f->bounds[b])) b++;
            s->buckets[b]++;
            s->sum += v;
            s->count++;
            break;
        }
        }
    }
    pthread_mutex_unlock(&f->reg->mu);
    return s ? 0 : -1;
}

int metrics_gauge_remove(metrics_gauge *g, ...)
{
    if (!g) return -1;
    struct family *f = &g->f;
    const char *values[METRICS_MAX_LABELS];
    va_list ap;
    va_start(ap, g);
    for (int i = 0; i < f->n_labels; i++) values[i] = va_arg(ap, const char *);
    va_end(ap);
    for (int i = 0; i < f->n_labels; i++)
        if (!values[i]) return -1;
    pthread_mutex_lock(&f->reg->mu);
    for (size_t i = 0; i < f->n_series; i++) {
        if (cmp_values(f, f->series[i]->values, values) != 0) continue;
        series_free(f, f->series[i]);
        memmove(&f->series[i], &f->series[i + 1], (f->n_series - i - 1) * sizeof *f->series);
        f->n_series--;
        break;
    }
    pthread_mutex_unlock(&f->reg->mu);
    return 0;
}

void metrics_gauge_clear(metrics_gauge *g)
{
    if (!g || g->f.n_labels == 0) return; /* an unlabelled family keeps its one series */
    struct family *f = &g->f;
    pthread_mutex_lock(&f->reg->mu);
    for (size_t i = 0; i < f->n_series; i++) series_free(f, f->series[i]);
    f->n_series = 0;
    pthread_mutex_unlock(&f->reg->mu);
}

void metrics_set_collector(metrics_registry *reg, metrics_collect_fn fn, void *user)
{
    if (!reg) return;
    pthread_mutex_lock(&reg->collect_mu); /* waits for a render in flight */
    reg->collect = fn;
    reg->collect_user = user;
    pthread_mutex_unlock(&reg->collect_mu);
}

int metrics_counter_add(metrics_counter *c, double delta, ...)
{
    if (!(delta >= 0)) return -1;
    va_list ap;
    va_start(ap, delta);
    int rc = update(c ? &c->f : NULL, OP_ADD, delta, ap);
    va_end(ap);
    return rc;
}

int metrics_gauge_set(metrics_gauge *g, double value, ...)
{
    va_list ap;
    va_start(ap, value);
    int rc = update(g ? &g->f : NULL, OP_SET, value, ap);
    va_end(ap);
    return rc;
}

int metrics_gauge_add(metrics_gauge *g, double delta, ...)
{
    va_list ap;
    va_start(ap, delta);
    int rc = update(g ? &g->f : NULL, OP_ADD, delta, ap);
    va_end(ap);
    return rc;
}

int metrics_histogram_observe(metrics_histogram *h, double value, ...)
{
    va_list ap;
    va_start(ap, value);
    int rc = update(h ? &h->f : NULL, OP_OBSERVE, value, ap);
    va_end(ap);
    return rc;
}

/* ---------------------------------------------------------------- rendering */

static void sb_escaped(buf *b, const char *s, int quote)
{
    const char *run = s;
    for (; *s; s++) {
        const char *rep = NULL;
        if (*s == '\\') rep = "\\\\";
        else if (*s == '\n') rep = "\\n";
        else if (quote && *s == '"') rep = "\\\"";
        if (!rep) continue;
        buf_append(b, run, (size_t)(s - run));
        buf_puts(b, rep);
        run = s + 1;
    }
    buf_append(b, run, (size_t)(s - run));
}

static void sb_value(buf *b, double v)
{
    char num[40];
    if (metrics_format_value(num, sizeof num, v) < 0) b->failed = 1;
    else buf_puts(b, num);
}

static void sb_u64(buf *b, uint64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    buf_puts(b, num);
}

/* name{l1="v1",...[,le="x"]} ; suffix may be "" */
static void sb_sample_name(buf *b, const struct family *f, const struct series *s,
                           const char *suffix, const char *le)
{
    buf_puts(b, f->name);
    buf_puts(b, suffix);
    if (f->n_labels == 0 && !le) return;
    buf_puts(b, "{");
    for (int i = 0; i < f->n_labels; i++) {
        if (i) buf_puts(b, ",");
        buf_puts(b, f->label_names[i]);
        buf_puts(b, "=\"");
        sb_escaped(b, s->values[i], 1);
        buf_puts(b, "\"");
    }
    if (le) {
        if (f->n_labels) buf_puts(b, ",");
        buf_puts(b, "le=\"");
        buf_puts(b, le);
        buf_puts(b, "\"");
    }
    buf_puts(b, "}");
}

static void render_family(buf *b, const struct family *f)
{
    buf_puts(b, "# HELP ");
    buf_puts(b, f->name);
    buf_puts(b, " ");
    sb_escaped(b, f->help, 0);
    buf_puts(b, "\n# TYPE ");
    buf_puts(b, f->name);
    buf_puts(b, " ");
    buf_puts(b, type_names[f->type]);
    buf_puts(b, "\n");
    for (size_t i = 0; i < f->n_series; i++) {
        const struct series *s = f->series[i];
        if (f->type != FAM_HISTOGRAM) {
            sb_sample_name(b, f, s, "", NULL);
            buf_puts(b, " ");
            sb_value(b, s->value);
            buf_puts(b, "\n");
            continue;
        }
        uint64_t cum = 0;
        for (int k = 0; k <= f->n_bounds; k++) {
            char le[40];
            if (k < f->n_bounds) metrics_format_value(le, sizeof le, f->bounds[k]);
            else snprintf(le, sizeof le, "+Inf");
            cum += s->buckets[k];
            sb_sample_name(b, f, s, "_bucket", le);
            buf_puts(b, " ");
            sb_u64(b, cum);
            buf_puts(b, "\n");
        }
        sb_sample_name(b, f, s, "_sum", NULL);
        buf_puts(b, " ");
        sb_value(b, s->sum);
        buf_puts(b, "\n");
        sb_sample_name(b, f, s, "_count", NULL);
        buf_puts(b, " ");
        sb_u64(b, s->count);
        buf_puts(b, "\n");
    }
}

char *metrics_render(metrics_registry *reg)
{
    if (!reg) return NULL;
    buf b = {0};
    pthread_mutex_lock(&reg->collect_mu);
    if (reg->collect) reg->collect(reg->collect_user);
    pthread_mutex_lock(&reg->mu);
    for (const struct family *f = reg->head; f && !b.failed; f = f->next) render_family(&b, f);
    pthread_mutex_unlock(&reg->mu);
    pthread_mutex_unlock(&reg->collect_mu);
    if (b.failed) {
        buf_free(&b);
        return NULL;
    }
    return buf_take(&b); /* an empty registry renders "" */
}

/* ---------------------------------------------------------------- registry */

metrics_registry *metrics_registry_new(void)
{
    metrics_registry *reg = calloc(1, sizeof *reg);
    if (!reg) return NULL;
    if (pthread_mutex_init(&reg->mu, NULL) != 0) {
        free(reg);
        return NULL;
    }
    if (pthread_mutex_init(&reg->collect_mu, NULL) != 0) {
        pthread_mutex_destroy(&reg->mu);
        free(reg);
        return NULL;
    }
    return reg;
}

void metrics_registry_free(metrics_registry *reg)
{
    if (!reg) return;
    struct family *f = reg->head;
    while (f) {
        struct family *next = f->next;
        family_free(f);
        f = next;
    }
    pthread_mutex_destroy(&reg->mu);
    pthread_mutex_destroy(&reg->collect_mu);
    free(reg);
}
