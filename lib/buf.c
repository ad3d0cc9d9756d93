/* lib/buf.c - see buf.h.
 *
 * Owns: growable, capped, NUL-terminated byte buffers.
 * Must not: log.
 */
#include "buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(buf *b, size_t n)
{
    if (b->failed)
        return -1;
    if (b->max && b->len + n > b->max) {
        b->failed = b->over_max = 1;
        return -1;
    }
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        b->failed = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

int buf_append(buf *b, const void *d, size_t n)
{
    if (reserve(b, n) != 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, d, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_puts(buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_printf(buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n) != 0) {
        b->failed = 1;
        return -1;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

char *buf_take(buf *b)
{
    if (b->data == NULL && buf_append(b, "", 0) != 0)
        return NULL;
    char *p = b->data;
    size_t max = b->max;
    memset(b, 0, sizeof *b);
    b->max = max;
    return p;
}

void buf_clear(buf *b)
{
    b->len = 0;
    b->failed = b->over_max = 0;
    if (b->data)
        b->data[0] = '\0';
}

void buf_free(buf *b)
{
    free(b->data);
    size_t max = b->max;
    memset(b, 0, sizeof *b);
    b->max = max;
}
