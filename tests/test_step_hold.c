/* tests/test_step_hold.c - worker/train/step_hold.c: VITJOB_TEST_HOLD's
 * entries parsed or refused by name, a hold due only at its step and only
 * while its file exists, the wait ending when the file goes or the stop
 * flag is set (both done from the wait's own tick: no clock involved). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "step_hold.h"

static char dir[64];
static char path_a[128], path_b[128];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/step_hold_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path_a, sizeof path_a, "%s/a", dir);
    snprintf(path_b, sizeof path_b, "%s/b", dir);
}

static void touch(const char *p)
{
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fclose(f);
}

static void clean_dir(void)
{
    unlink(path_a);
    unlink(path_b);
    rmdir(dir);
}

TestSuite(step_hold, .init = make_dir, .fini = clean_dir);

Test(step_hold, unset_or_empty_is_no_hold_and_never_due)
{
    step_hold *h = (step_hold *)1;
    char err[256] = "";
    cr_assert_eq(step_hold_parse(&h, NULL, err, sizeof err), VJ_OK);
    cr_assert_null(h);
    cr_assert_eq(step_hold_parse(&h, "", err, sizeof err), VJ_OK);
    cr_assert_null(h);
    cr_assert_not(step_hold_due(NULL, 1));
    step_hold_wait(NULL, 1, 0, NULL, NULL, NULL); /* returns at once */
}

Test(step_hold, a_hold_is_due_at_its_step_only_while_its_file_exists)
{
    char spec[300], err[256] = "";
    snprintf(spec, sizeof spec, "150:%s,250:%s", path_a, path_b);
    step_hold *h = NULL;
    cr_assert_eq(step_hold_parse(&h, spec, err, sizeof err), VJ_OK, "%s", err);
    cr_assert_not_null(h);
    cr_assert_not(step_hold_due(h, 150), "no file yet");
    touch(path_a);
    cr_assert(step_hold_due(h, 150));
    cr_assert_not(step_hold_due(h, 149));
    cr_assert_not(step_hold_due(h, 151));
    cr_assert_not(step_hold_due(h, 250), "b's file does not exist");
    touch(path_b);
    cr_assert(step_hold_due(h, 250));
    unlink(path_a);
    cr_assert_not(step_hold_due(h, 150));
    step_hold_wait(h, 150, 0, NULL, NULL, NULL); /* not held: returns at once */
    step_hold_free(h);
}

Test(step_hold, malformed_entries_are_refused_naming_the_variable_and_the_entry)
{
    const char *bad[] = {"0:/tmp/x", "-3:/tmp/x", "x:/tmp/x", "12", "12:", "12:rel/path",
                         "12/tmp/x", "5:/tmp/a,", "5:/tmp/a,,6:/tmp/b", "99999999999999999999:/tmp/x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        step_hold *h = (step_hold *)1;
        char err[256] = "";
        cr_assert_eq(step_hold_parse(&h, bad[i], err, sizeof err), VJ_ERR_ENVIRONMENT, "\"%s\"", bad[i]);
        cr_assert_null(h, "\"%s\"", bad[i]);
        cr_assert(strstr(err, STEP_HOLD_ENV) != NULL, "\"%s\": %s", bad[i], err);
        cr_assert(strstr(err, "entry \"") != NULL, "\"%s\": %s", bad[i], err);
    }
}

/* the waiting loop's tick (step_hold_wait calls it at each poll): counts,
 * and at the third call removes the hold's file or sets the stop flag, so
 * that the wait ends by what the test does, not by a clock */
typedef struct {
    int ticks;
    const char *remove;
    volatile sig_atomic_t *stop;
} tick_ctx;
static void third_tick(void *p)
{
    tick_ctx *t = p;
    if (++t->ticks == 3) {
        if (t->remove) unlink(t->remove);
        if (t->stop) *t->stop = 15;
    }
}

Test(step_hold, the_wait_ends_when_the_file_is_removed_and_ticks_meanwhile)
{
    char spec[300], err[256] = "";
    snprintf(spec, sizeof spec, "3:%s", path_a);
    step_hold *h = NULL;
    cr_assert_eq(step_hold_parse(&h, spec, err, sizeof err), VJ_OK, "%s", err);
    touch(path_a);
    tick_ctx t = {0, path_a, NULL};
    step_hold_wait(h, 3, 0, NULL, third_tick, &t); /* only the removal ends it (the test's timeout otherwise) */
    cr_assert_eq(t.ticks, 3, "the wait went on after the file was removed, or ended before (%d ticks)",
                 t.ticks);
    step_hold_free(h);
}

static volatile sig_atomic_t stop_flag;

Test(step_hold, the_wait_ends_when_the_stop_flag_is_set_with_the_file_still_there)
{
    char spec[300], err[256] = "";
    snprintf(spec, sizeof spec, "7:%s", path_a);
    step_hold *h = NULL;
    cr_assert_eq(step_hold_parse(&h, spec, err, sizeof err), VJ_OK, "%s", err);
    touch(path_a);
    stop_flag = 0;
    tick_ctx t = {0, NULL, &stop_flag};
    step_hold_wait(h, 7, 0, &stop_flag, third_tick, &t);
    cr_assert_eq(t.ticks, 3, "the wait ended before the stop flag was set, or went on (%d ticks)",
                 t.ticks);
    cr_assert_eq(access(path_a, F_OK), 0);
    step_hold_free(h);
}
