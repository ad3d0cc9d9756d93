/* lib/buf.h - a growable byte buffer, always NUL-terminated.
 *
 * Owns: appending bytes and formatted text with doubling growth, and an
 * optional size cap. Failures are sticky (like ferror): append away, check
 * `failed` once at the end. Reading files into a buf is lib/file.c's.
 * Must not: log, or free anything but its own bytes.
 *
 * A zeroed buf is empty and valid: buf b = {0}; b.max = cap (0 = no cap).
 * b.data is owned by the buf: buf_free releases it, buf_take hands it over.
 */
#ifndef VITJOB_BUF_H
#define VITJOB_BUF_H

#include <stddef.h>

typedef struct {
    char *data;   /* len bytes + NUL once anything was appended; NULL before */
    size_t len, cap;
    size_t max;   /* most bytes it may hold; 0 = no limit */
    int failed;   /* an append failed: out of memory or over max (sticky) */
    int over_max; /* ... because of max */
} buf;

/* Appends n bytes. Returns 0, or -1 (and sets failed) when out of memory or
 * over max; a failed buf ignores further appends. */
int buf_append(buf *b, const void *d, size_t n);
int buf_puts(buf *b, const char *s);
int buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The bytes as a NUL-terminated string the caller owns (free()); "" rather
 * than NULL when empty; NULL only when out of memory. The buf is left empty. */
char *buf_take(buf *b);
/* Empties the buf and clears its failure, keeping the memory for reuse. */
void buf_clear(buf *b);
/* Frees the bytes; the buf is empty and reusable (its max is kept). */
void buf_free(buf *b);

#endif
