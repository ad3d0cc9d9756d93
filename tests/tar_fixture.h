/* tests/tar_fixture.h - helpers of the tar and webdataset tests
 * (tests/test_tar.c, tests/test_wds.c): a growing memory sink for
 * tar_writer, a stream that hands out a few bytes per read (as a network
 * stream does), and tars built in memory. Test code only. */
#ifndef VITJOB_TAR_FIXTURE_H
#define VITJOB_TAR_FIXTURE_H

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tar.h"

typedef struct {
    unsigned char *p;
    size_t n, cap;
} membuf;

static inline int membuf_write(void *ctx, const void *buf, size_t n)
{
    membuf *b = ctx;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    memcpy(b->p + b->n, buf, n);
    b->n += n;
    return 0;
}

/* a stream of at most 7 bytes per read */
static inline ssize_t trickle_read(void *ctx, void *buf, size_t n)
{
    return tar_mem_read(ctx, buf, n > 7 ? 7 : n);
}

typedef struct {
    const char *name;
    const char *data;
    size_t size;
} fx_member;

/* The tar of these members, from tar_writer, in out (the caller frees out->p). */
static inline void fx_write(membuf *out, const fx_member *m, size_t n)
{
    char err[512];
    memset(out, 0, sizeof *out);
    tar_writer *w = tar_writer_new(membuf_write, out);
    cr_assert_not_null(w);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(tar_writer_add(w, m[i].name, m[i].data, m[i].size, err, sizeof err), 0,
                     "%s", err);
    cr_assert_eq(tar_writer_finish(w, err, sizeof err), 0, "%s", err);
    tar_writer_free(w);
}

#endif
