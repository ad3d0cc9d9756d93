/* lib/util.h - the few helpers every module wants.
 * Owns: writing a formatted message into a caller's error buffer (the one
 * helper for it: modules keep no copy of their own), the monotonic clock
 * every module times things with (and a busy wait on it), the median of a
 * few timings, and reading a decimal.
 * Must not: allocate or log. */
#ifndef VITJOB_UTIL_H
#define VITJOB_UTIL_H

#include <stdarg.h>
#include <stddef.h>

/* Seconds on CLOCK_MONOTONIC (for durations and deadlines, never wall time). */
double mono_seconds(void);
/* Keeps the calling thread busy for s seconds on that clock (a probe's
 * stand-in for compute); returns at once for s <= 0. */
void mono_spin(double s);
/* The median of t[0..n) (sorts t in place: meant for a few timings); 0
 * when n is 0. */
double median_of(double *t, int n);

/* A decimal number, in full: [+-] digits [. digits] [e [+-] digits]; no hex,
 * no inf/nan spellings. Returns 0 with *out, or -1. */
int parse_decimal(const char *s, double *out);

/* vsnprintf into err; does nothing when err is NULL or errlen is 0. */
void err_printf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* err_printf, then -1: `return err_fail(err, errlen, ...)` in a function that
 * fails with -1. */
int err_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* err_printf with a va_list (for a module's failing helper that keeps more
 * than the message, e.g. the tar reader's). */
void err_vprintf(char *err, size_t errlen, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
