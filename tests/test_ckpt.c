/* tests/test_ckpt.c - worker/ckpt/ckpt.c on file://: retention keeps
 * exactly the checkpoint.keep newest complete steps (a step with its
 * manifest) and deletes every object of the older ones, whether the
 * writer saved them all or a resumed run follows one that stopped; a torn
 * step (shards without a manifest, a save that died) never counts toward
 * keep, so it never makes a complete step disappear, and it goes once it is
 * older than the oldest step kept. A resume that finds every step corrupt
 * tries each once and ends. */
#include "ckpt.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

TestSuite(ckpt, .timeout = 30);

static char dir[64];
static ckpt_store *s;
static char err[2048];

static void open_store(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_ckpt_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char uri[128];
    snprintf(uri, sizeof uri, "file://%s/ck", dir);
    cr_assert_eq(ckpt_store_open(&s, uri, "", err, sizeof err), CKPT_OK, "%s", err);
}

static void close_store(void)
{
    ckpt_store_free(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static ckpt_writer *writer(int keep)
{
    ckpt_writer *w = NULL;
    cr_assert_eq(ckpt_writer_new(&w, s, NULL, 0, 1, keep, 10, err, sizeof err), 0, "%s", err);
    return w;
}

/* One rank's save of a 16-value state at `step`, waited for. */
static void save(ckpt_writer *w, long step)
{
    float p[16], m[16], v[16];
    for (int i = 0; i < 16; i++) p[i] = (float)(step * 100 + i), m[i] = 0.5f, v[i] = 0.25f;
    ckpt_meta meta = {.step = step, .world_size = 1, .n_params = 16};
    snprintf(meta.sharding, sizeof meta.sharding, "none");
    snprintf(meta.model, sizeof meta.model, "{\"dim\":4}");
    ckpt_segment seg = {.lo = 0, .hi = 16, .params = p, .m = m, .v = v};
    cr_assert_eq(ckpt_save(w, &meta, &seg, 1, ops_cpu(), err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_wait(w, NULL, err, sizeof err), CKPT_OK, "step %ld: %s", step, err);
}

/* A save that died after its shard and before the manifest. */
static void torn(long step)
{
    char name[96];
    ckpt_step_name(step, name, 32);
    strcat(name, "/shard-00000-of-00001.bin");
    cr_assert_eq(ckpt_store_put(s, name, "partial", 7, err, sizeof err), CKPT_OK, "%s", err);
}

/* The steps that have any object ("1,2,3"), and those with a manifest. */
static void steps(char *any, char *complete, size_t len)
{
    char **names = NULL;
    uint64_t *sizes = NULL;
    size_t n = 0;
    cr_assert_eq(ckpt_store_list(s, &names, &sizes, &n, err, sizeof err), CKPT_OK, "%s", err);
    any[0] = complete[0] = '\0';
    long last = -1;
    for (size_t i = 0; i < n; i++) {
        long step;
        char tail[64];
        cr_assert_eq(sscanf(names[i], "step-%ld/%63s", &step, tail), 2, "%s", names[i]);
        if (step != last)
            snprintf(any + strlen(any), len - strlen(any), "%s%ld", *any ? "," : "", step);
        if (strcmp(tail, "manifest.json") == 0)
            snprintf(complete + strlen(complete), len - strlen(complete), "%s%ld",
                     *complete ? "," : "", step);
        last = step;
        free(names[i]);
    }
    free(names);
    free(sizes);
}

#define ASSERT_STEPS(want_any, want_complete)                                                   \
    do {                                                                                         \
        char any_[256], complete_[256];                                                          \
        steps(any_, complete_, sizeof any_);                                                     \
        cr_assert_str_eq(any_, want_any, "steps with objects: %s, want %s", any_, want_any);     \
        cr_assert_str_eq(complete_, want_complete, "complete steps: %s, want %s", complete_,     \
                         want_complete);                                                         \
    } while (0)

Test(ckpt, keep_2_after_5_checkpoints_leaves_exactly_the_two_newest, .init = open_store,
     .fini = close_store)
{
    ckpt_writer *w = writer(2);
    save(w, 1);
    ASSERT_STEPS("1", "1");
    save(w, 2);
    ASSERT_STEPS("1,2", "1,2");
    for (long step = 3; step <= 5; step++) save(w, step);
    ASSERT_STEPS("4,5", "4,5");
    ckpt_writer_free(w);
}

Test(ckpt, keep_1_leaves_only_the_newest_and_keep_3_the_three_newest, .init = open_store,
     .fini = close_store)
{
    ckpt_writer *w = writer(1);
    for (long step = 2; step <= 6; step += 2) save(w, step);
    ASSERT_STEPS("6", "6");
    ckpt_writer_free(w);
    w = writer(3);
    for (long step = 8; step <= 14; step += 2) save(w, step);
    ASSERT_STEPS("10,12,14", "10,12,14");
    ckpt_writer_free(w);
}

/* A run saves 1-3 and stops; the resumed run (a new writer, as a new
 * process) finds step 3 and saves 4-6: still exactly the two newest. */
Test(ckpt, keep_2_holds_across_a_resume, .init = open_store, .fini = close_store)
{
    ckpt_writer *w = writer(2);
    for (long step = 1; step <= 3; step++) save(w, step);
    ckpt_writer_free(w);
    ASSERT_STEPS("2,3", "2,3");
    ckpt_manifest *m = NULL;
    cr_assert_eq(ckpt_find(s, &m, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(m)->step, 3);
    ckpt_manifest_free(m);
    w = writer(2);
    save(w, 4);
    ASSERT_STEPS("3,4", "3,4");
    save(w, 5);
    save(w, 6);
    ASSERT_STEPS("5,6", "5,6");
    ckpt_writer_free(w);
}

/* keep=2 over complete 1, 2, 3, a torn 4 and then 5: the two newest
 * complete steps are 3 and 5 (the torn 4 does not count), so 3 stays; the
 * torn 4 is newer than 3 and stays too (nothing newer than the oldest kept
 * step is deleted); 1 and 2 go. At 6 the kept steps are 5 and 6, and the
 * torn 4, now older, goes with 3. */
Test(ckpt, a_torn_step_does_not_count_toward_keep_nor_push_out_a_complete_one,
     .init = open_store, .fini = close_store)
{
    ckpt_writer *w = writer(2);
    for (long step = 1; step <= 3; step++) save(w, step);
    ckpt_writer_free(w);
    torn(4);
    ASSERT_STEPS("2,3,4", "2,3");
    w = writer(2); /* the resumed run, from 3 */
    ckpt_manifest *m = NULL;
    cr_assert_eq(ckpt_find(s, &m, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(m)->step, 3, "the torn 4 is passed over");
    ckpt_manifest_free(m);
    save(w, 5);
    ASSERT_STEPS("3,4,5", "3,5");
    save(w, 6);
    ASSERT_STEPS("5,6", "5,6");
    ckpt_writer_free(w);
}

/* Fewer complete steps than keep: nothing is deleted, torn ones included. */
Test(ckpt, fewer_complete_steps_than_keep_delete_nothing, .init = open_store, .fini = close_store)
{
    torn(1);
    ckpt_writer *w = writer(3);
    save(w, 2);
    save(w, 3);
    ASSERT_STEPS("1,2,3", "2,3");
    ckpt_writer_free(w);
}

/* A loader that finds every step corrupt, noting which it was handed. */
typedef struct {
    long seen[16];
    int n;
} corrupt_log;

static ckpt_status always_corrupt(void *ctx, ckpt_store *store, const ckpt_manifest *man,
                                  char *why, size_t len)
{
    (void)store;
    corrupt_log *l = ctx;
    if (l->n < 16) l->seen[l->n] = ckpt_manifest_meta(man)->step;
    l->n++;
    snprintf(why, len, "block 0 does not match its CRC (corrupt)");
    return CKPT_PERMANENT;
}

/* Every step corrupt: the resume tries each once, newest first, and ends
 * in a fresh start; it never tries a step it has passed over again (that
 * would loop for ever), and a step offered again ends it at once. */
Test(ckpt, a_resume_tries_each_corrupt_step_once_newest_first_and_then_starts_fresh,
     .init = open_store, .fini = close_store, .timeout = 10)
{
    ckpt_writer *w = writer(10);
    for (long step = 1; step <= 3; step++) save(w, step);
    ckpt_writer_free(w);
    torn(4);
    corrupt_log l = {0};
    ckpt_resume_options o = {.store = s, .rank = 0, .world = 1, .timeout_s = 5,
                             .uri = "file:///test", .model_json = "{\"dim\":4}", .n_params = 16,
                             .load = always_corrupt, .ctx = &l};
    ckpt_meta meta;
    vj_err rc = ckpt_resume(&o, &meta, err, sizeof err);
    cr_assert_eq(rc, VJ_OK, "%d: %s", rc, err);
    cr_assert_eq(meta.step, -1, "a fresh start");
    cr_assert_eq(l.n, 3, "each complete step once, not %d loads", l.n);
    cr_assert(l.seen[0] == 3 && l.seen[1] == 2 && l.seen[2] == 1, "%ld %ld %ld", l.seen[0],
              l.seen[1], l.seen[2]);
}
