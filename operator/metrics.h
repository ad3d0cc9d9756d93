/* operator/metrics.h - a small thread-safe Prometheus metrics registry.
 *
 * Owns: metric families (counters, gauges, histograms with fixed buckets), their
 * labelled series, and the text exposition format 0.0.4 they render to.
 * Must not: do I/O (httpd.c serves the text), or block for long: every call
 * takes one registry mutex briefly, so it is safe from any thread.
 *
 *     metrics_registry *reg = metrics_registry_new();
 *     metrics_counter *rec = metrics_counter_new(reg, "vitjob_reconcile_total",
 *         "Reconciles by result.", err, sizeof err, 1, "result");
 *     metrics_counter_add(rec, 1, "done");           // one value per label name
 *     metrics_histogram *dur = metrics_histogram_new(reg,
 *         "vitjob_reconcile_duration_seconds", "Reconcile latency.", NULL, 0,
 *         err, sizeof err, 0);
 *     metrics_histogram_observe(dur, 0.012);
 *     char *text = metrics_render(reg);  ...  free(text);
 *
 * Families render in registration order; series within a family in the order
 * of their label values (byte-wise), so the output is deterministic. A family
 * without labels has its one series from the start (rendered as 0); a labelled
 * series appears on first use (add 0 to make it appear early).
 *
 * The variadic label names and label values are `const char *`, exactly as
 * many as the family's n_labels; passing fewer is undefined behaviour.
 */
#ifndef VITJOB_METRICS_H
#define VITJOB_METRICS_H

#include <stddef.h>

#define METRICS_MAX_LABELS 8
#define METRICS_MAX_BUCKETS 64

typedef struct metrics_registry metrics_registry;
/* Handles are borrowed from the registry: valid until metrics_registry_free;
 * never free them yourself. */
typedef struct metrics_counter metrics_counter;
typedef struct metrics_gauge metrics_gauge;
typedef struct metrics_histogram metrics_histogram;

/* Prometheus' default buckets, for latencies in seconds (.005 .. 10). */
extern const double metrics_default_buckets[];
extern const int metrics_default_buckets_len;

/* NULL if out of memory. Caller frees with metrics_registry_free. */
metrics_registry *metrics_registry_new(void);
/* Frees the registry and every handle from it. Accepts NULL. */
void metrics_registry_free(metrics_registry *reg);

/* Register a family. On error, returns NULL and writes a message naming the
 * problem to err (a bad metric or label name, a duplicate metric name, bad
 * buckets, too many labels, out of memory). `name`, `help` and the label names
 * are copied. */
metrics_counter *metrics_counter_new(metrics_registry *reg, const char *name, const char *help,
                                     char *err, size_t errlen, int n_labels, ...);
metrics_gauge *metrics_gauge_new(metrics_registry *reg, const char *name, const char *help,
                                 char *err, size_t errlen, int n_labels, ...);
/* `buckets`: upper bounds, strictly increasing and finite (the +Inf bucket is
 * implicit); NULL/0 for metrics_default_buckets. The label name "le" is
 * reserved. */
metrics_histogram *metrics_histogram_new(metrics_registry *reg, const char *name,
                                         const char *help, const double *buckets,
                                         int n_buckets, char *err, size_t errlen,
                                         int n_labels, ...);

/* Updates take the label values after the number. They return 0, or -1 for a
 * NULL handle or label value, a negative or NaN counter delta, or out of
 * memory (nothing changed then). */
int metrics_counter_add(metrics_counter *c, double delta, ...);
int metrics_gauge_set(metrics_gauge *g, double value, ...);
int metrics_gauge_add(metrics_gauge *g, double delta, ...);
int metrics_histogram_observe(metrics_histogram *h, double value, ...);

/* Removes the series with these label values (absent: nothing). 0, or -1
 * for a NULL handle or label value. */
int metrics_gauge_remove(metrics_gauge *g, ...);
/* Removes every series of a labelled gauge (an unlabelled one keeps its own). */
void metrics_gauge_clear(metrics_gauge *g);

/* A collector: called by metrics_render before it renders, to set gauges
 * from the caller's state (e.g. one series per object in a cache, cleared
 * and set again). Collectors and renders are serialised, so a render shows
 * what one collection set. One per registry; NULL removes it, waiting for
 * a render in flight (so the state it reads may be freed afterwards). */
typedef void (*metrics_collect_fn)(void *user);
void metrics_set_collector(metrics_registry *reg, metrics_collect_fn fn, void *user);

/* The whole registry in text format 0.0.4; NULL if out of memory.
 * Caller frees with free(). */
char *metrics_render(metrics_registry *reg);

/* Writes `v` as Prometheus does: the shortest decimal that reads back
 * exactly, or "+Inf", "-Inf", "NaN". Returns the length (< buflen) or -1. */
int metrics_format_value(char *buf, size_t buflen, double v);

#endif
