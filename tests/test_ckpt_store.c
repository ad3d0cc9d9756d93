/* tests/test_ckpt_store.c - worker/ckpt/ckpt_store.c on file://: objects put
 * whole appear with their bytes, ranged gets read exactly what was put and
 * refuse to read past the end, listing is sorted and skips temporaries of
 * writers that died, deletes are idempotent and remove empty step
 * directories, names that climb out of the root are refused, and a URI
 * that is not absolute or not a known scheme is a permanent error; a
 * guarded put stores nothing, not even a temporary, when its guard refuses,
 * and one folder lists alone. */
#include "ckpt_store.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(ckpt_store, .timeout = 30);

#define CKPT_FIXTURE_ROOT "root/"
#include "ckpt_fixture.h"

Test(ckpt_store, put_get_read_list_delete, .init = open_store, .fini = close_store)
{
    const char a[] = "0123456789", b[] = "manifest";
    cr_assert_eq(ckpt_store_put(s, "step-000000002/shard-0.bin", a, 10, err, sizeof err), CKPT_OK,
                 "%s", err);
    cr_assert_eq(ckpt_store_put(s, "step-000000002/manifest.json", b, 8, err, sizeof err), CKPT_OK);
    cr_assert_eq(ckpt_store_put(s, "step-000000001/manifest.json", b, 8, err, sizeof err), CKPT_OK);
    char got[16] = "";
    cr_assert_eq(ckpt_store_get(s, "step-000000002/shard-0.bin", 3, 4, got, err, sizeof err),
                 CKPT_OK);
    cr_assert_eq(memcmp(got, "3456", 4), 0);
    cr_assert_neq(ckpt_store_get(s, "step-000000002/shard-0.bin", 8, 4, got, err, sizeof err),
                  CKPT_OK, "a get past the end must fail");
    cr_assert(strstr(err, "shorter than 12 bytes"), "%s", err);
    cr_assert_eq(ckpt_store_get(s, "step-000000009/none", 0, 1, got, err, sizeof err),
                 CKPT_NOT_FOUND);
    void *whole = NULL;
    size_t len = 0;
    cr_assert_eq(ckpt_store_read(s, "step-000000002/manifest.json", 100, &whole, &len, err,
                                 sizeof err), CKPT_OK);
    cr_assert_eq(len, 8);
    cr_assert_str_eq(whole, "manifest");
    free(whole);
    /* a temporary a dead writer left is not an object */
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s/root/step-000000002/.vitjob-tmp.0011223344556677.abcdef", dir);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    fclose(f);
    char **names;
    uint64_t *sizes;
    size_t n;
    cr_assert_eq(ckpt_store_list(s, &names, &sizes, &n, err, sizeof err), CKPT_OK);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(names[0], "step-000000001/manifest.json");
    cr_assert_str_eq(names[1], "step-000000002/manifest.json");
    cr_assert_str_eq(names[2], "step-000000002/shard-0.bin");
    cr_assert_eq(sizes[2], 10);
    cr_assert_eq(sizes[0], 8);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(sizes);
    /* deletes: idempotent; the emptied step directory goes */
    cr_assert_eq(ckpt_store_delete(s, "step-000000001/manifest.json", err, sizeof err), CKPT_OK);
    cr_assert_eq(ckpt_store_delete(s, "step-000000001/manifest.json", err, sizeof err), CKPT_OK);
    char gone[256];
    snprintf(gone, sizeof gone, "%s/root/step-000000001", dir);
    struct stat st;
    cr_assert_neq(stat(gone, &st), 0, "the empty step directory stays");
}

Test(ckpt_store, names_that_leave_the_root_are_refused, .init = open_store, .fini = close_store)
{
    const char *bad[] = {"../x", "/etc/passwd", "a/../../x", "a//b", "", "./a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(ckpt_store_put(s, bad[i], "x", 1, err, sizeof err), CKPT_PERMANENT,
                     "%s accepted", bad[i]);
        cr_assert(strstr(err, "bad object name"), "%s", err);
    }
}

Test(ckpt_store, bad_uris_are_permanent_errors)
{
    ckpt_store *t = NULL;
    cr_assert_eq(ckpt_store_open(&t, "file://relative/dir", "", err, sizeof err), CKPT_PERMANENT);
    cr_assert(strstr(err, "absolute path"), "%s", err);
    cr_assert_eq(ckpt_store_open(&t, "gs://bucket/x", "", err, sizeof err), CKPT_PERMANENT);
    cr_assert(strstr(err, "must start with s3:// or file://"), "%s", err);
    cr_assert_null(t);
}

static ckpt_status refuse(void *ctx, int stored, char *e, size_t len)
{
    (void)stored;
    ++*(int *)ctx;
    snprintf(e, len, "refused by the guard");
    return CKPT_FENCED;
}

static ckpt_status allow(void *ctx, int stored, char *e, size_t len)
{
    (void)e, (void)len, (void)stored;
    ++*(int *)ctx;
    return CKPT_OK;
}

/* Allows before the put and refuses after it: what a fence that appeared
 * while the put was in flight says. */
static ckpt_status refuse_after(void *ctx, int stored, char *e, size_t len)
{
    ++*(int *)ctx;
    if (!stored) return CKPT_OK;
    snprintf(e, len, "refused once it was stored");
    return CKPT_FENCED;
}

/* A guarded put asks its guard after the bytes are written and before they
 * become visible: refused, nothing is there, not even a temporary; allowed,
 * it is asked a second time once the object is stored. */
Test(ckpt_store, a_guard_that_refuses_leaves_nothing_and_one_that_allows_puts,
     .init = open_store, .fini = close_store)
{
    int asked = 0;
    cr_assert_eq(ckpt_store_put_guarded(s, "step-000000003/x.bin", "abc", 3, refuse, &asked, err,
                                        sizeof err), CKPT_FENCED);
    cr_assert_eq(asked, 1);
    cr_assert_str_eq(err, "refused by the guard");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test -z \"$(find %s/root -type f)\"", dir);
    cr_assert_eq(system(cmd), 0, "a refused put left a file");
    cr_assert_eq(ckpt_store_put_guarded(s, "step-000000003/x.bin", "abc", 3, allow, &asked, err,
                                        sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(asked, 3);
    char got[4] = "";
    cr_assert_eq(ckpt_store_get(s, "step-000000003/x.bin", 0, 3, got, err, sizeof err), CKPT_OK);
    cr_assert_eq(memcmp(got, "abc", 3), 0);
    char **names;
    uint64_t *sizes;
    size_t n;
    cr_assert_eq(ckpt_store_list_dir(s, "step-000000003", &names, &sizes, &n, err, sizeof err),
                 CKPT_OK, "%s", err);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(names[0], "step-000000003/x.bin");
    free(names[0]);
    free(names);
    free(sizes);
    cr_assert_eq(ckpt_store_list_dir(s, "fence", &names, &sizes, &n, err, sizeof err), CKPT_OK);
    cr_assert_eq(n, 0, "a folder that does not exist lists nothing");
    free(names);
    free(sizes);
}

/* A guard that says no only when asked after the put (its condition changed
 * while the put was in flight): the object is deleted again, the put fails
 * with the guard's status, and err says both what the guard said and that
 * the object was stored and removed. */
Test(ckpt_store, a_guard_that_refuses_after_the_put_has_the_object_removed_again,
     .init = open_store, .fini = close_store)
{
    int asked = 0;
    cr_assert_eq(ckpt_store_put_guarded(s, "step-000000004/y.bin", "abcd", 4, refuse_after, &asked,
                                        err, sizeof err), CKPT_FENCED);
    cr_assert_eq(asked, 2);
    cr_assert(strstr(err, "refused once it was stored; step-000000004/y.bin was stored just as "
                          "that happened and has been removed again"), "%s", err);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test -z \"$(find %s/root -type f)\"", dir);
    cr_assert_eq(system(cmd), 0, "the object (or a temporary) is still there");
}
