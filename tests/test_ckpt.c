/* tests/test_ckpt.c - worker/ckpt/ckpt.h on file://: the writer's retention
 * (ckpt_writer.c), the search (ckpt_list.c), the resume (ckpt_resume.c) and
 * the manifest's EMA and loss scaler through the writer and the reader
 * (ckpt_writer.c, ckpt_reader.c), together. Retention keeps
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

#include "ckpt_fixture.h"

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
 * would loop for ever: the suite's timeout ends it), and a step offered
 * again ends it at once. No timeout of its own: with one (10 s), running
 * in parallel (-j2) with the EMA tests below, Criterion 2.4.1's runner
 * leaked 48 bytes it had allocated (LeakSanitizer, every run); without it,
 * never. */
Test(ckpt, a_resume_tries_each_corrupt_step_once_newest_first_and_then_starts_fresh,
     .init = open_store, .fini = close_store)
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

/* ---- the EMA of the weights (training.ema): a fourth array ---- */

/* One rank's save of a 40-value state at step 1 in two segments, [0, 15)
 * and [15, 40), with (ema) or without an EMA; waited for. Values:
 * params i, m 1000 + i, v 2000 + i, ema 3000 + i. */
static void save_state(int ema)
{
    ckpt_writer *w = writer(10);
    static float p[40], m[40], v[40], e[40];
    for (int i = 0; i < 40; i++)
        p[i] = (float)i, m[i] = 1000.0f + (float)i, v[i] = 2000.0f + (float)i,
        e[i] = 3000.0f + (float)i;
    ckpt_meta meta = {.step = 1, .world_size = 1, .n_params = 40, .ema = ema};
    snprintf(meta.sharding, sizeof meta.sharding, "none");
    snprintf(meta.model, sizeof meta.model, "{\"dim\":4}");
    ckpt_segment seg[2] = {{.lo = 0, .hi = 15, .params = p, .m = m, .v = v, .ema = e},
                           {.lo = 15, .hi = 40, .params = p + 15, .m = m + 15, .v = v + 15,
                            .ema = e + 15}};
    if (!ema) seg[0].ema = seg[1].ema = NULL;
    cr_assert_eq(ckpt_save(w, &meta, seg, 2, ops_cpu(), err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_wait(w, NULL, err, sizeof err), CKPT_OK, "%s", err);
    ckpt_writer_free(w);
}

static char *manifest_text(void)
{
    void *text = NULL;
    size_t len = 0;
    cr_assert_eq(ckpt_store_read(s, "step-000000001/manifest.json", 1 << 20, &text, &len, err,
                                 sizeof err), CKPT_OK, "%s", err);
    char *t = realloc(text, len + 1);
    t[len] = '\0';
    return t;
}

Test(ckpt, an_ema_is_saved_as_a_fourth_array_with_crcs_and_reads_back_by_range,
     .init = open_store, .fini = close_store)
{
    save_state(1);
    char *man_text = manifest_text();
    cr_assert(strstr(man_text, "\"ema\":\ttrue") != NULL, "%s", man_text);
    free(man_text);
    ckpt_manifest *man = NULL;
    cr_assert_eq(ckpt_find(s, &man, err, sizeof err), CKPT_OK, "%s", err); /* every CRC read */
    cr_assert_eq(ckpt_manifest_meta(man)->ema, 1);
    float p[40], m[40], v[40], e[40];
    cr_assert_eq(ckpt_read_range(s, man, 0, 40, p, m, v, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_read_ema(s, man, 0, 40, e, err, sizeof err), CKPT_OK, "%s", err);
    for (int i = 0; i < 40; i++) {
        cr_assert_eq(p[i], (float)i);
        cr_assert_eq(m[i], 1000.0f + (float)i);
        cr_assert_eq(v[i], 2000.0f + (float)i);
        cr_assert_eq(e[i], 3000.0f + (float)i);
    }
    /* a range across both segments, as another world size reads it */
    cr_assert_eq(ckpt_read_ema(s, man, 7, 31, e, err, sizeof err), CKPT_OK, "%s", err);
    for (int i = 0; i < 24; i++) cr_assert_eq(e[i], 3007.0f + (float)i);
    ckpt_manifest_free(man);
    /* the shard is 4 arrays of 40 floats */
    char **names = NULL;
    uint64_t *sizes = NULL;
    size_t n = 0;
    cr_assert_eq(ckpt_store_list(s, &names, &sizes, &n, err, sizeof err), CKPT_OK, "%s", err);
    for (size_t i = 0; i < n; i++) {
        if (strstr(names[i], "shard-")) cr_assert_eq(sizes[i], 4 * 40 * sizeof(float));
        free(names[i]);
    }
    free(names);
    free(sizes);
}

Test(ckpt, a_step_without_an_ema_loads_as_before_and_asking_it_for_one_names_the_step,
     .init = open_store, .fini = close_store)
{
    save_state(0);
    char *man_text = manifest_text();
    cr_assert(strstr(man_text, "ema") == NULL, "the older format: %s", man_text);
    free(man_text);
    ckpt_manifest *man = NULL;
    cr_assert_eq(ckpt_find(s, &man, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(man)->ema, 0);
    float p[40], m[40], v[40], e[40];
    cr_assert_eq(ckpt_read_range(s, man, 0, 40, p, m, v, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(v[39], 2039.0f);
    cr_assert_eq(ckpt_read_ema(s, man, 0, 40, e, err, sizeof err), CKPT_PERMANENT);
    cr_assert(strstr(err, "checkpoint step 1 has no EMA") != NULL, "%s", err);
    ckpt_manifest_free(man);
}

Test(ckpt, a_flipped_byte_in_the_ema_is_corrupt_and_a_manifest_claiming_an_ema_it_lacks_is_refused,
     .init = open_store, .fini = close_store)
{
    save_state(1);
    const char *shard = "step-000000001/shard-00000-of-00001.bin";
    void *data = NULL;
    size_t len = 0;
    cr_assert_eq(ckpt_store_read(s, shard, 1 << 20, &data, &len, err, sizeof err), CKPT_OK);
    ((unsigned char *)data)[len - 5] ^= 0x5a; /* the EMA of the last values */
    cr_assert_eq(ckpt_store_put(s, shard, data, len, err, sizeof err), CKPT_OK, "%s", err);
    ckpt_manifest *man = NULL;
    cr_assert_eq(ckpt_read_step(s, 1, &man, err, sizeof err), CKPT_OK, "%s", err);
    float e[40];
    cr_assert_eq(ckpt_read_ema(s, man, 0, 40, e, err, sizeof err), CKPT_PERMANENT);
    cr_assert(strstr(err, "does not match its CRC (corrupt)") != NULL, "%s", err);
    ckpt_manifest_free(man);
    /* the shard cut back to three arrays: the manifest's "ema" no longer fits */
    cr_assert_eq(ckpt_store_put(s, shard, data, 3 * 40 * sizeof(float), err, sizeof err),
                 CKPT_OK);
    free(data);
    char *t = manifest_text();
    char *b = strstr(t, "\"bytes\":");
    cr_assert_not_null(b);
    char *end = strchr(b, ',');
    char fixed[8192];
    snprintf(fixed, sizeof fixed, "%.*s\"bytes\":\t%zu%s", (int)(b - t), t, 3 * 40 * sizeof(float),
             end);
    free(t);
    cr_assert_eq(ckpt_store_put(s, "step-000000001/manifest.json", fixed, strlen(fixed), err,
                                sizeof err), CKPT_OK);
    cr_assert_eq(ckpt_read_step(s, 1, &man, err, sizeof err), CKPT_PERMANENT);
    cr_assert(strstr(err, "size, segments and CRCs disagree") != NULL, "%s", err);
}

/* fp16-mixed's loss scaler: its state round-trips through the manifest
 * ("lossScaler"), a step without one reads as none (loss_scale 0), and a
 * malformed one makes the step unreadable, naming the field. */
/* One rank's save at step 1 of 8 zeros with meta's extra fields (its
 * step, size, sharding and model set here), waited for. */
static void save_step1(ckpt_meta meta)
{
    ckpt_writer *w = writer(10);
    float p[8] = {0}, m[8] = {0}, v[8] = {0};
    meta.step = 1;
    meta.world_size = 1;
    meta.n_params = 8;
    snprintf(meta.sharding, sizeof meta.sharding, "none");
    snprintf(meta.model, sizeof meta.model, "{\"dim\":4}");
    ckpt_segment seg = {.lo = 0, .hi = 8, .params = p, .m = m, .v = v};
    cr_assert_eq(ckpt_save(w, &meta, &seg, 1, ops_cpu(), err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_wait(w, NULL, err, sizeof err), CKPT_OK, "%s", err);
    ckpt_writer_free(w);
}

static void save_scaler(double scale, long tracker, long skipped)
{
    save_step1((ckpt_meta){.loss_scale = scale, .scale_growth_tracker = tracker,
                           .skipped_steps = skipped});
}

Test(ckpt, the_loss_scalers_state_round_trips_through_the_manifest_and_a_bad_one_is_refused,
     .init = open_store, .fini = close_store)
{
    save_scaler(32768.0, 1999, 3);
    ckpt_manifest *man = NULL;
    cr_assert_eq(ckpt_read_step(s, 1, &man, err, sizeof err), CKPT_OK, "%s", err);
    const ckpt_meta *mt = ckpt_manifest_meta(man);
    cr_assert(mt->loss_scale == 32768.0 && mt->scale_growth_tracker == 1999 &&
              mt->skipped_steps == 3, "%g %ld %ld", mt->loss_scale, mt->scale_growth_tracker,
              mt->skipped_steps);
    ckpt_manifest_free(man);
    char *t = manifest_text();
    cr_assert(strstr(t, "\"lossScaler\"") != NULL, "%s", t);
    /* the scale 0: refused */
    char *sc = strstr(t, "\"scale\":");
    cr_assert_not_null(sc);
    char *end = strchr(sc, ',');
    char bad[8192];
    snprintf(bad, sizeof bad, "%.*s\"scale\":\t0%s", (int)(sc - t), t, end);
    free(t);
    cr_assert_eq(ckpt_store_put(s, "step-000000001/manifest.json", bad, strlen(bad), err,
                                sizeof err), CKPT_OK);
    cr_assert_neq(ckpt_read_step(s, 1, &man, err, sizeof err), CKPT_OK);
    cr_assert(strstr(err, "lossScaler") != NULL, "%s", err);
}

Test(ckpt, a_step_saved_without_a_loss_scaler_reads_as_none, .init = open_store,
     .fini = close_store)
{
    save_scaler(0.0, 0, 0);
    char *t = manifest_text();
    cr_assert(strstr(t, "lossScaler") == NULL, "%s", t);
    free(t);
    ckpt_manifest *man = NULL;
    cr_assert_eq(ckpt_read_step(s, 1, &man, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert(ckpt_manifest_meta(man)->loss_scale == 0.0);
    ckpt_manifest_free(man);
}

/* The run's total steps (the manifest's "totalSteps", for the resume's
 * warning when training.steps changed): saved and read back; a step
 * saved without it (an older manifest) reads as unknown, 0; a value that
 * is no whole number >= 1 makes the step unreadable, naming the key. */
static void save_total(long total) { save_step1((ckpt_meta){.total_steps = total}); }

Test(ckpt, the_runs_total_steps_round_trip_an_older_manifest_reads_unknown_and_a_bad_one_is_refused,
     .init = open_store, .fini = close_store)
{
    save_total(1200);
    ckpt_manifest *man = NULL;
    cr_assert_eq(ckpt_read_step(s, 1, &man, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(man)->total_steps, 1200);
    ckpt_manifest_free(man);
    char *t = manifest_text();
    char *at = strstr(t, "\"totalSteps\":\t1200,");
    cr_assert_not_null(at, "%s", t);
    const char *bad_values[] = {"0", "2.5", "\"1200\""};
    for (int i = 0; i < 3; i++) {
        char bad[8192];
        snprintf(bad, sizeof bad, "%.*s\"totalSteps\":\t%s%s", (int)(at - t), t, bad_values[i],
                 strchr(at, ','));
        cr_assert_eq(ckpt_store_put(s, "step-000000001/manifest.json", bad, strlen(bad), err,
                                    sizeof err), CKPT_OK);
        cr_assert_neq(ckpt_read_step(s, 1, &man, err, sizeof err), CKPT_OK, "%s", bad_values[i]);
        cr_assert(strstr(err, "\"totalSteps\" is not a whole number >= 1") != NULL, "%s", err);
    }
    /* the key left out, as a manifest written before it */
    char old[8192];
    snprintf(old, sizeof old, "%.*s%s", (int)(at - t), t, strchr(at, ',') + 1);
    free(t);
    cr_assert_eq(ckpt_store_put(s, "step-000000001/manifest.json", old, strlen(old), err,
                                sizeof err), CKPT_OK);
    cr_assert_eq(ckpt_read_step(s, 1, &man, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(man)->total_steps, 0);
    ckpt_manifest_free(man);
}

Test(ckpt, a_step_saved_without_the_runs_total_has_no_totalSteps_key, .init = open_store,
     .fini = close_store)
{
    save_total(0);
    char *t = manifest_text();
    cr_assert(strstr(t, "totalSteps") == NULL, "%s", t);
    free(t);
}
