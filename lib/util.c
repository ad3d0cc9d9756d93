/* lib/util.c - see util.h. */
#include "util.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mono_spin(double s)
{
    const double s0 = mono_seconds();
    while (mono_seconds() - s0 < s) {
    }
}

double median_of(double *t, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            const double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return n == 0 ? 0 : n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

void err_vprintf(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (!err || errlen == 0) return;
    vsnprintf(err, errlen, fmt, ap);
}

void err_printf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int err_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int parse_decimal(const char *s, double *out)
{
    const char *p = s;
    int digits = 0;
    if (*p == '+' || *p == '-')
        p++;
    while (isdigit((unsigned char)*p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            p++;
            digits++;
        }
    }
    if (digits == 0)
        return -1;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        int exp_digits = 0;
        while (isdigit((unsigned char)*p)) {
            p++;
            exp_digits++;
        }
        if (exp_digits == 0)
            return -1;
    }
    if (*p != '\0')
        return -1;
    char *end = NULL;
    double d = strtod(s, &end);
    if (end != p)
        return -1;
    *out = d;
    return 0;
}
