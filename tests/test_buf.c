/* tests/test_buf.c - lib/buf.c: growth, NUL termination, the cap and its
 * sticky failure, formatted appends, taking and clearing, whole files. */
#include "buf.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(buf, appends_grow_and_stay_nul_terminated)
{
    buf b = {0};
    for (int i = 0; i < 10000; i++)
        cr_assert_eq(buf_printf(&b, "%d,", i % 10), 0);
    cr_assert_eq(b.len, 20000);
    cr_assert_eq(b.data[b.len], '\0');
    cr_assert_eq(strncmp(b.data, "0,1,2,", 6), 0);
    cr_assert_eq(buf_puts(&b, "end"), 0);
    cr_assert_str_eq(b.data + 20000, "end");
    char *s = buf_take(&b);
    cr_assert_null(b.data, "taking leaves the buf empty");
    cr_assert_eq(b.len, 0);
    cr_assert_eq(strlen(s), 20003);
    free(s);
    s = buf_take(&b);
    cr_assert_str_eq(s, "", "an empty buf gives \"\", not NULL");
    free(s);
}

Test(buf, the_cap_fails_the_append_stickily_until_cleared)
{
    buf b = {.max = 8};
    cr_assert_eq(buf_append(&b, "12345678", 8), 0);
    cr_assert_eq(buf_append(&b, "9", 1), -1);
    cr_assert(b.failed && b.over_max);
    cr_assert_eq(buf_append(&b, "", 0), -1, "failure is sticky");
    cr_assert_str_eq(b.data, "12345678", "the bytes before the failure stay");
    buf_clear(&b);
    cr_assert(!b.failed && b.len == 0 && b.max == 8);
    cr_assert_eq(buf_puts(&b, "ok"), 0);
    cr_assert_str_eq(b.data, "ok");
    buf_free(&b);
    cr_assert_eq(b.max, 8, "the cap survives free");
}

Test(buf, clearing_forgets_that_the_cap_was_hit)
{
    /* a reused buffer: a later failure must not be reported as over the cap */
    buf b = {.max = 4};
    cr_assert_eq(buf_puts(&b, "12345"), -1);
    cr_assert(b.over_max);
    buf_clear(&b);
    cr_assert(!b.over_max, "over_max cleared");
    cr_assert_eq(buf_puts(&b, "1234"), 0);
    cr_assert(!b.failed && !b.over_max);
    buf_free(&b);
}
