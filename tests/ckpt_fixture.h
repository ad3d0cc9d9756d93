/* tests/ckpt_fixture.h - a file:// checkpoint store in a fresh temporary
 * directory, for the checkpoint tests (tests/test_ckpt.c,
 * tests/test_ckpt_store.c, tests/test_ckpt_fence.c): open_store as a
 * test's .init, close_store as its .fini (it removes the directory). Define
 * CKPT_FIXTURE_ROOT first for another folder under the directory than "ck"
 * (the store's URI names it). Test code only. */
#ifndef VITJOB_CKPT_FIXTURE_H
#define VITJOB_CKPT_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt_store.h"

#ifndef CKPT_FIXTURE_ROOT
#define CKPT_FIXTURE_ROOT "ck"
#endif

static char dir[64];
static ckpt_store *s;
static char err[2048];

static void open_store(void)
{
    snprintf(dir, sizeof dir, "/tmp/vitjob_ckpt_test_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char uri[128];
    snprintf(uri, sizeof uri, "file://%s/" CKPT_FIXTURE_ROOT, dir);
    cr_assert_eq(ckpt_store_open(&s, uri, "", err, sizeof err), CKPT_OK, "%s", err);
}

static void close_store(void)
{
    ckpt_store_free(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

#endif
