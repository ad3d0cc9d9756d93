/* tests/test_ckpt_fence.c - worker/ckpt/ckpt_fence.c and the fencing of
 * the writer, listing and resume (worker/ckpt/ckpt_writer.c, ckpt_list.c,
 * ckpt_resume.c) on file://: every object a writer stores carries its
 * generation in its key and its manifest (generation 0 keeps the names of
 * the layout before fencing); when a step has manifests of several
 * generations the newest one's is what find, read_step, resume and
 * describe use; a step of the old layout (no "generation" anywhere) still
 * loads as generation 0; a writer of an older generation, once a newer
 * one has entered the fence, writes nothing and deletes nothing (its save
 * fails CKPT_FENCED, class rendezvous); retention never deletes an object
 * of a newer generation; a starting generation at or below the newest
 * fence (another job on the same URI) writes as one above it; and, with a
 * takeover at the exact moment between a check and its act
 * (ckpt_fence_set_hold), a stored shard or manifest is removed again, what
 * stays is never listed or resumed from, and a retention deletes nothing
 * newer. */
#include "ckpt.h"
#include "ckpt_fence.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

TestSuite(ckpt_fence, .timeout = 60);

#include "ckpt_fixture.h"

static ckpt_writer *writer(long gen, int keep)
{
    ckpt_writer *w = NULL;
    cr_assert_eq(ckpt_writer_new(&w, s, NULL, 0, 1, keep, 10, err, sizeof err), 0, "%s", err);
    ckpt_writer_set_generation(w, gen);
    return w;
}

/* One rank's save of a 16-value state at step, params base + i; returns
 * the save's outcome (err says why). */
static ckpt_status save(ckpt_writer *w, long step, float base)
{
    float p[16], m[16], v[16];
    for (int i = 0; i < 16; i++) p[i] = base + (float)i, m[i] = 0.5f, v[i] = 0.25f;
    ckpt_meta meta = {.step = step, .world_size = 1, .n_params = 16};
    snprintf(meta.sharding, sizeof meta.sharding, "none");
    snprintf(meta.model, sizeof meta.model, "{\"dim\":4}");
    ckpt_segment seg = {.lo = 0, .hi = 16, .params = p, .m = m, .v = v};
    ckpt_status st = ckpt_save(w, &meta, &seg, 1, ops_cpu(), err, sizeof err);
    return st ? st : ckpt_wait(w, NULL, err, sizeof err);
}

static void saved(ckpt_writer *w, long step, float base)
{
    ckpt_status st = save(w, step, base);
    cr_assert_eq(st, CKPT_OK, "step %ld: %s", step, err);
}

/* Every object under the store with its bytes, one "name size crc" line
 * each: a snapshot to compare before and after a stale writer runs. It
 * leaves err as it was (what a refused save said). */
static char *snapshot(void)
{
    char **names = NULL, e[512];
    uint64_t *sizes = NULL;
    size_t n = 0;
    cr_assert_eq(ckpt_store_list(s, &names, &sizes, &n, e, sizeof e), CKPT_OK, "%s", e);
    size_t cap = 64 + n * 160, used = 0;
    char *out = calloc(1, cap);
    for (size_t i = 0; i < n; i++) {
        void *b = NULL;
        size_t len = 0;
        cr_assert_eq(ckpt_store_read(s, names[i], 1 << 20, &b, &len, e, sizeof e), CKPT_OK,
                     "%s", e);
        unsigned h = 2166136261u; /* FNV-1a of the bytes */
        for (size_t k = 0; k < len; k++) h = (h ^ ((unsigned char *)b)[k]) * 16777619u;
        used += (size_t)snprintf(out + used, cap - used, "%s %llu %08x\n", names[i],
                                 (unsigned long long)sizes[i], h);
        free(b);
        free(names[i]);
    }
    free(names);
    free(sizes);
    return out;
}

/* The object is in the snapshot (a line of its own). */
static int in(const char *snap, const char *name)
{
    size_t k = strlen(name);
    for (const char *p = snap; (p = strstr(p, name)) != NULL; p += k)
        if ((p == snap || p[-1] == '\n') && p[k] == ' ') return 1;
    return 0;
}

static int has(const char *name)
{
    char *snap = snapshot();
    int yes = in(snap, name);
    free(snap);
    return yes;
}

/* A save that the fence (or the gate) refuses: CKPT_FENCED (err says why)
 * and the store just as the snapshot `before`. */
static void fenced(ckpt_writer *w, long step, float base, const char *before)
{
    cr_assert_eq(save(w, step, base), CKPT_FENCED, "step %ld: %s", step, err);
    char *after = snapshot();
    cr_assert_str_eq(after, before, "step %ld: a refused save changed the store", step);
    free(after);
}

static char *read_text(const char *name)
{
    void *b = NULL;
    size_t len = 0;
    cr_assert_eq(ckpt_store_read(s, name, 1 << 20, &b, &len, err, sizeof err), CKPT_OK,
                 "%s: %s", name, err);
    return b; /* NUL-terminated by the store */
}

/* ---- names ---- */

Test(ckpt_fence, names_carry_the_generation_and_generation_0_keeps_the_old_ones)
{
    char n[96];
    long g;
    ckpt_manifest_name(0, n, sizeof n);
    cr_assert_str_eq(n, "manifest.json");
    ckpt_manifest_name(7, n, sizeof n);
    cr_assert_str_eq(n, "manifest.g7.json");
    ckpt_shard_name(1, 2, 0, n, sizeof n);
    cr_assert_str_eq(n, "shard-00001-of-00002.bin");
    ckpt_shard_name(1, 2, 12, n, sizeof n);
    cr_assert_str_eq(n, "shard-00001-of-00002.g12.bin");
    cr_assert_eq(ckpt_object_kind("manifest.json", &g), CKPT_OBJ_MANIFEST);
    cr_assert_eq(g, 0);
    cr_assert_eq(ckpt_object_kind("manifest.g7.json", &g), CKPT_OBJ_MANIFEST);
    cr_assert_eq(g, 7);
    cr_assert_eq(ckpt_object_kind("shard-00001-of-00002.g12.bin", &g), CKPT_OBJ_SHARD);
    cr_assert_eq(g, 12);
    cr_assert_eq(ckpt_object_kind("shard-00001-of-00002.bin", &g), CKPT_OBJ_SHARD);
    cr_assert_eq(g, 0);
    /* not the writer's spelling: not a checkpoint object */
    const char *other[] = {"manifest.g0.json", "manifest.g07.json", "manifest.g-1.json",
                           "manifest.gx.json", "shard-1-of-2.bin", "shard-00001-of-00002.g.bin",
                           "shard-00001-of-00002.g3.bin.tmp", "notes.txt"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        cr_assert_eq(ckpt_object_kind(other[i], &g), CKPT_OBJ_OTHER, "%s", other[i]);
}

/* ---- what a writer stores ---- */

Test(ckpt_fence, a_writer_of_generation_3_puts_3_in_every_key_and_in_its_manifest,
     .init = open_store, .fini = close_store)
{
    ckpt_writer *w = writer(3, 5);
    saved(w, 1, 100);
    ckpt_writer_free(w);
    char *snap = snapshot();
    cr_assert(in(snap, "fence/g3.json") == 0 && in(snap, "step-000000001/manifest.g3.json") &&
              in(snap, "step-000000001/shard-00000-of-00001.g3.bin"), "%s", snap);
    cr_assert_eq(strchr(strchr(snap, '\n') + 1, '\n')[1], '\0', "two objects: %s", snap);
    free(snap);
    char *t = read_text("step-000000001/manifest.g3.json");
    cr_assert(strstr(t, "\"generation\":\t3"), "%s", t);
    cr_assert(strstr(t, "\"shard-00000-of-00001.g3.bin\""), "%s", t);
    free(t);
    ckpt_manifest *m = NULL;
    cr_assert_eq(ckpt_find(s, &m, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(m)->generation, 3);
    ckpt_manifest_free(m);
    /* generation 0: the names and manifest of before, with generation 0 said */
    w = writer(0, 5);
    saved(w, 2, 200);
    ckpt_writer_free(w);
    cr_assert(has("step-000000002/manifest.json"));
    cr_assert(has("step-000000002/shard-00000-of-00001.bin"));
    t = read_text("step-000000002/manifest.json");
    cr_assert(strstr(t, "\"generation\":\t0"), "%s", t);
    free(t);
}

/* ---- the newest generation's manifest wins ---- */

static void read_params(const ckpt_manifest *m, float *p)
{
    cr_assert_eq(ckpt_read_range(s, m, 0, 16, p, NULL, NULL, err, sizeof err), CKPT_OK, "%s",
                 err);
}

static ckpt_status fixed_loader(void *ctx, ckpt_store *store, const ckpt_manifest *man,
                                char *why, size_t len)
{
    return ckpt_read_range(store, man, 0, 16, ctx, NULL, NULL, why, len);
}

Test(ckpt_fence, a_step_with_manifests_of_generations_0_2_and_1_is_read_as_generation_2s,
     .init = open_store, .fini = close_store)
{
    const long gens[3] = {0, 2, 1}; /* the newest is not the last written */
    for (int i = 0; i < 3; i++) {
        ckpt_writer *w = writer(gens[i], 5);
        saved(w, 4, 1000.0f * (float)gens[i]);
        ckpt_writer_free(w);
    }
    float p[16];
    ckpt_manifest *m = NULL;
    cr_assert_eq(ckpt_find(s, &m, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(m)->generation, 2);
    read_params(m, p);
    cr_assert_eq(p[5], 2005.0f, "read %g: not generation 2's shard", p[5]);
    ckpt_manifest_free(m);
    cr_assert_eq(ckpt_find_candidate(s, 100, &m, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(m)->generation, 2);
    ckpt_manifest_free(m);
    cr_assert_eq(ckpt_read_step(s, 4, &m, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(m)->generation, 2);
    ckpt_manifest_free(m);
    /* the resume loads generation 2's state */
    long gen = -1;
    ckpt_resume_options o = {.store = s, .rank = 0, .world = 1, .timeout_s = 5,
                             .uri = "file:///test", .model_json = "{\"dim\":4}", .n_params = 16,
                             .load = fixed_loader, .ctx = p, .restart = 3, .generation = &gen};
    ckpt_meta meta;
    memset(p, 0, sizeof p);
    cr_assert_eq(ckpt_resume(&o, &meta, err, sizeof err), VJ_OK, "%s", err);
    cr_assert_eq(meta.step, 4);
    cr_assert_eq(meta.generation, 2);
    cr_assert_eq(p[15], 2015.0f);
    cr_assert_eq(gen, 3, "the resumed run writes as its own generation");
    /* describe names the winner */
    char *out = NULL;
    size_t outlen = 0;
    FILE *f = open_memstream(&out, &outlen);
    cr_assert_eq(ckpt_describe(s, f, err, sizeof err), CKPT_OK, "%s", err);
    fclose(f);
    cr_assert(strstr(out, "4            complete  ") && strstr(out, " generation=2 (newest"),
              "%s", out);
    cr_assert(strstr(out, "fence: generation 3"), "%s", out);
    free(out);
}

/* The newest manifest alone speaks for its step: generation 1's, corrupt,
 * makes the step corrupt, not generation 0's. */
Test(ckpt_fence, the_newest_manifest_being_corrupt_passes_the_step_over, .init = open_store,
     .fini = close_store)
{
    ckpt_writer *w = writer(0, 5);
    saved(w, 1, 100);
    saved(w, 2, 200);
    ckpt_writer_free(w);
    w = writer(1, 5);
    saved(w, 2, 300);
    ckpt_writer_free(w);
    cr_assert_eq(ckpt_store_put(s, "step-000000002/manifest.g1.json", "{", 1, err, sizeof err),
                 CKPT_OK);
    ckpt_manifest *m = NULL;
    cr_assert_eq(ckpt_find(s, &m, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(m)->step, 1);
    ckpt_manifest_free(m);
}

/* ---- the layout before fencing ---- */

Test(ckpt_fence, a_step_of_the_old_layout_without_any_generation_still_loads_as_generation_0,
     .init = open_store, .fini = close_store)
{
    ckpt_writer *w = writer(0, 5);
    saved(w, 6, 600);
    ckpt_writer_free(w);
    /* the manifest as writers before fencing wrote it: no "generation" */
    char *t = read_text("step-000000006/manifest.json");
    char *g = strstr(t, "\t\"generation\":\t0,\n");
    cr_assert_not_null(g, "%s", t);
    memmove(g, g + strlen("\t\"generation\":\t0,\n"), strlen(g) - strlen("\t\"generation\":\t0,\n") + 1);
    cr_assert_null(strstr(t, "generation"));
    cr_assert_eq(ckpt_store_put(s, "step-000000006/manifest.json", t, strlen(t), err,
                                sizeof err), CKPT_OK);
    free(t);
    ckpt_manifest *m = NULL;
    cr_assert_eq(ckpt_find(s, &m, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(m)->step, 6);
    cr_assert_eq(ckpt_manifest_meta(m)->generation, 0);
    float p[16];
    read_params(m, p);
    for (int i = 0; i < 16; i++) cr_assert_eq(p[i], 600.0f + (float)i);
    ckpt_manifest_free(m);
    /* a generation-1 run resumes from it and writes beside it */
    long gen = -1;
    ckpt_resume_options o = {.store = s, .rank = 0, .world = 1, .timeout_s = 5,
                             .uri = "file:///test", .model_json = "{\"dim\":4}", .n_params = 16,
                             .load = fixed_loader, .ctx = p, .restart = 1, .generation = &gen};
    ckpt_meta meta;
    cr_assert_eq(ckpt_resume(&o, &meta, err, sizeof err), VJ_OK, "%s", err);
    cr_assert_eq(meta.step, 6);
    cr_assert_eq(gen, 1);
}

Test(ckpt_fence, a_manifest_naming_a_shard_of_another_generation_is_refused, .init = open_store,
     .fini = close_store)
{
    ckpt_writer *w = writer(0, 5);
    saved(w, 1, 100);
    ckpt_writer_free(w);
    /* generation 1's manifest pointing at generation 0's shard */
    char *t = read_text("step-000000001/manifest.json");
    char *g = strstr(t, "\"generation\":\t0");
    cr_assert_not_null(g);
    g[strlen("\"generation\":\t")] = '1';
    cr_assert_eq(ckpt_store_put(s, "step-000000001/manifest.g1.json", t, strlen(t), err,
                                sizeof err), CKPT_OK);
    free(t);
    ckpt_manifest *m = NULL;
    cr_assert_eq(ckpt_read_step(s, 1, &m, err, sizeof err), CKPT_PERMANENT);
    cr_assert(strstr(err, "not a shard of generation 1"), "%s", err);
}

/* ---- the fence ---- */

Test(ckpt_fence, entering_the_fence_records_the_generation_and_another_job_on_the_uri_goes_above,
     .init = open_store, .fini = close_store)
{
    long g = -5, newest = -5;
    cr_assert_eq(ckpt_fence_enter(s, 0, &g, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(g, 0);
    char *snap = snapshot();
    cr_assert_str_eq(snap, "", "generation 0 with no fence writes nothing: %s", snap);
    free(snap);
    cr_assert_eq(ckpt_fence_newest(s, &newest, err, sizeof err), CKPT_OK);
    cr_assert_eq(newest, -1);
    cr_assert_eq(ckpt_fence_enter(s, 2, &g, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(g, 2);
    cr_assert(has("fence/g2.json"));
    char *t = read_text("fence/g2.json");
    cr_assert(strstr(t, "\"generation\": 2, \"restart\": 2"), "%s", t);
    free(t);
    cr_assert_eq(ckpt_fence_check(s, 2, "manifest", 9, err, sizeof err), CKPT_OK, "%s", err);
    /* a new job (restart 0) on the same URI writes as 3 and fences 2 off */
    cr_assert_eq(ckpt_fence_enter(s, 0, &g, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(g, 3);
    cr_assert_eq(ckpt_fence_enter(s, 3, &g, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(g, 4, "a generation already fenced in is not entered twice");
    cr_assert_eq(ckpt_fence_newest(s, &newest, err, sizeof err), CKPT_OK);
    cr_assert_eq(newest, 4);
    cr_assert_eq(ckpt_fence_check(s, 2, "retention", 9, err, sizeof err), CKPT_FENCED);
    cr_assert(strstr(err, "older generation (2)") && strstr(err, "(4, fence/g4.json)") &&
              strstr(err, "retention of step 9") && strstr(err, "was refused, and it stores and deletes nothing more"),
              "%s", err);
    cr_assert_eq(ckpt_status_class(CKPT_FENCED), VJ_ERR_RENDEZVOUS);
    /* names in the fence folder that are not fences do not count */
    cr_assert_eq(ckpt_store_put(s, "fence/g99.json.bak", "x", 1, err, sizeof err), CKPT_OK);
    cr_assert_eq(ckpt_store_put(s, "fence/notes", "x", 1, err, sizeof err), CKPT_OK);
    cr_assert_eq(ckpt_fence_newest(s, &newest, err, sizeof err), CKPT_OK);
    cr_assert_eq(newest, 4);
}

/* Generation 0 saves 1 and 2 (keep 2); generation 1 enters the fence and
 * saves 3; then generation 0, still running, saves: it writes nothing and
 * deletes nothing, and its save fails CKPT_FENCED. */
Test(ckpt_fence, a_stale_writer_after_a_newer_fence_writes_nothing_and_deletes_nothing,
     .init = open_store, .fini = close_store)
{
    ckpt_writer *old = writer(0, 2);
    saved(old, 1, 100);
    saved(old, 2, 200);
    long g;
    cr_assert_eq(ckpt_fence_enter(s, 1, &g, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(g, 1);
    ckpt_writer *neu = writer(1, 2);
    saved(neu, 3, 300);
    char *before = snapshot();
    /* its step 4 would make 1-2 old enough to delete (keep 2); its step 3
     * would sit beside generation 1's */
    for (long step = 3; step <= 4; step++) {
        fenced(old, step, 999, before);
        cr_assert(strstr(err, "older generation (0)") && strstr(err, "(1, fence/g1.json)"),
                  "%s", err);
    }
    free(before);
    ckpt_writer_free(old);
    /* generation 1 goes on; its retention takes generation 0's old steps */
    saved(neu, 4, 400);
    saved(neu, 5, 500);
    char *snap = snapshot();
    cr_assert_null(strstr(snap, "step-000000001/"), "%s", snap);
    cr_assert_null(strstr(snap, "step-000000002/"), "%s", snap);
    cr_assert_null(strstr(snap, "step-000000003/"), "%s", snap);
    cr_assert(strstr(snap, "step-000000004/manifest.g1.json") &&
              strstr(snap, "step-000000005/manifest.g1.json"), "%s", snap);
    free(snap);
    ckpt_writer_free(neu);
}

/* Without a fence to stop it (a fence lost, or a newer generation that has
 * not entered it yet), a writer of generation 0 whose retention lists old
 * steps holding objects of generation `newer` (written before its listing)
 * deletes its own and older ones of those steps, never the newer ones. */
static void retention_spares(long newer)
{
    char m_new[48], sh_new[48], m_step[96], sh_step[96];
    ckpt_manifest_name(newer, m_new, sizeof m_new);
    ckpt_shard_name(0, 1, newer, sh_new, sizeof sh_new);
    ckpt_writer *wn = writer(newer, 2);
    saved(wn, 1, 100);
    saved(wn, 2, 200);
    ckpt_writer_free(wn);
    ckpt_writer *w0 = writer(0, 2);
    saved(w0, 1, 101); /* generation 0's objects beside the newer ones */
    saved(w0, 3, 300);
    saved(w0, 4, 400); /* keep 2: 3 and 4; steps 1 and 2 are old */
    ckpt_writer_free(w0);
    char *snap = snapshot();
    for (int step = 1; step <= 2; step++) {
        snprintf(m_step, sizeof m_step, "step-%09d/%s", step, m_new);
        snprintf(sh_step, sizeof sh_step, "step-%09d/%s", step, sh_new);
        cr_assert(in(snap, m_step) && in(snap, sh_step),
                  "generation %ld's objects of step %d were deleted:\n%s", newer, step, snap);
    }
    cr_assert(!in(snap, "step-000000001/manifest.json") &&
              !in(snap, "step-000000001/shard-00000-of-00001.bin"), "its own old ones go:\n%s",
              snap);
    free(snap);
    /* a newer writer deletes older generations' objects like its own */
    ckpt_writer *w3 = writer(newer + 1, 1);
    saved(w3, 5, 500);
    ckpt_writer_free(w3);
    ckpt_manifest_name(newer + 1, m_new, sizeof m_new);
    snprintf(m_step, sizeof m_step, "step-000000005/%s", m_new);
    snap = snapshot();
    cr_assert_null(strstr(snap, "step-000000001/"), "%s", snap);
    cr_assert_null(strstr(snap, "step-000000004/"), "%s", snap);
    cr_assert(in(snap, m_step), "%s", snap);
    free(snap);
}

Test(ckpt_fence, retention_never_deletes_a_newer_generations_objects, .init = open_store,
     .fini = close_store)
{
    retention_spares(2);
}

/* The generation just above the writer's: the filter is `newer than mine`,
 * not `more than one newer` */
Test(ckpt_fence, retention_never_deletes_the_objects_of_the_generation_just_above_its_own,
     .init = open_store, .fini = close_store)
{
    retention_spares(1);
}

static int gate_open = 1;
static int gate(const void *ctx)
{
    (void)ctx;
    return gate_open;
}

/* A rank woken from a freeze (the heartbeat's hb_ok says no) whose save
 * reaches the moment of a rename: nothing becomes visible. */
Test(ckpt_fence, a_closed_gate_stops_a_save_at_the_rename_and_leaves_no_file,
     .init = open_store, .fini = close_store)
{
    ckpt_writer *w = writer(0, 3);
    ckpt_writer_set_gate(w, gate, NULL);
    saved(w, 1, 100);
    char *before = snapshot();
    gate_open = 0;
    fenced(w, 2, 200, before);
    cr_assert(strstr(err, "may write no more"), "%s", err);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "find %s -name '.vitjob-tmp.*' | grep -q .", dir);
    cr_assert_neq(system(cmd), 0, "a refused put left its temporary");
    free(before);
    ckpt_writer_free(w);
}

/* ---- the moment between a check and its act (ckpt_fence_hold) ---- */

/* What the hold does when the writer of the old generation reaches
 * hold_action at hold_step: generation 1 enters the fence there, and with
 * hold_save a writer of generation 1 saves that step (base 111). */
static const char *hold_action;
static long hold_step;
static int hold_save, held;

static void take_over(const char *action, long step, void *ctx)
{
    (void)ctx;
    if (strcmp(action, hold_action) != 0 || step != hold_step) return;
    held++;
    long g;
    char e[512];
    cr_assert_eq(ckpt_fence_enter(s, 1, &g, e, sizeof e), CKPT_OK, "%s", e);
    if (hold_save) { /* the file's own writer and save, from the held writer's thread */
        ckpt_writer *w = writer(1, 5);
        saved(w, step, 111);
        ckpt_writer_free(w);
    }
}

static void hold_at(const char *action, long step, int save_too)
{
    hold_action = action;
    hold_step = step;
    hold_save = save_too;
    held = 0;
    ckpt_fence_set_hold(take_over, NULL);
}

static void unhold(void) { ckpt_fence_set_hold(NULL, NULL); }

/* What `vitjob-worker checkpoints` prints for the store. */
static char *described(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_eq(ckpt_describe(s, f, err, sizeof err), CKPT_OK, "%s", err);
    fclose(f);
    return text;
}

/* Generation 1 takes over between the fence check of generation 0's shard
 * of step 2 and its rename: the shard is stored, asked about again, and
 * removed; the save fails CKPT_FENCED saying so, and the store holds what
 * it held plus the fence. */
Test(ckpt_fence, a_takeover_between_a_shards_check_and_its_rename_has_the_shard_removed_again,
     .init = open_store, .fini = close_store)
{
    ckpt_writer *old = writer(0, 3);
    saved(old, 1, 100);
    hold_at("shard", 2, 0);
    char *before = snapshot();
    cr_assert_eq(save(old, 2, 200), CKPT_FENCED, "%s", err);
    unhold();
    cr_assert_eq(held, 1);
    cr_assert(strstr(err, "it took over while its shard of step 2 was in flight, and it stores "
                          "and deletes nothing more; step-000000002/shard-00000-of-00001.bin "
                          "was stored just as that happened and has been removed again"),
              "%s", err);
    /* the store as before, plus the fence (sorted first) */
    char *after = snapshot();
    char *nl = strchr(after, '\n');
    cr_assert(nl && strncmp(after, "fence/g1.json ", 14) == 0, "%s", after);
    cr_assert_str_eq(nl + 1, before, "the stale shard stayed or something changed");
    free(after);
    free(before);
    ckpt_writer_free(old);
}

/* Generation 1 takes over between the check of generation 0's manifest of
 * step 2 and its rename: the manifest is removed again; generation 0's
 * shard of step 2, stored before the takeover, is what a stale writer
 * leaves: a step nobody can complete any more, which neither
 * `checkpoints` nor resume sees, while a torn step of the newest
 * generation still shows as torn. */
Test(ckpt_fence, a_takeover_between_a_manifests_check_and_its_rename_leaves_nothing_visible,
     .init = open_store, .fini = close_store)
{
    ckpt_writer *old = writer(0, 3);
    saved(old, 1, 100);
    hold_at("manifest", 2, 0);
    cr_assert_eq(save(old, 2, 200), CKPT_FENCED, "%s", err);
    unhold();
    cr_assert_eq(held, 1);
    cr_assert(strstr(err, "its manifest of step 2 was in flight") &&
              strstr(err, "step-000000002/manifest.json was stored just as that happened and "
                          "has been removed again"), "%s", err);
    cr_assert(!has("step-000000002/manifest.json"));
    cr_assert(has("step-000000002/shard-00000-of-00001.bin"));
    char *text = described();
    cr_assert(!strstr(text, "\n2 "), "the stale writer's step is listed:\n%s", text);
    cr_assert(strstr(text, "\n1            complete"), "%s", text);
    free(text);
    ckpt_manifest *m = NULL;
    cr_assert_eq(ckpt_find(s, &m, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(m)->step, 1);
    ckpt_manifest_free(m);
    /* generation 1's own shard of step 3 without its manifest: torn, listed */
    char name[96];
    ckpt_shard_name(0, 1, 1, name + 15, sizeof name - 15);
    memcpy(name, "step-000000003/", 15);
    cr_assert_eq(ckpt_store_put(s, name, "x", 1, err, sizeof err), CKPT_OK, "%s", err);
    text = described();
    cr_assert(strstr(text, "\n3            torn"), "%s", text);
    cr_assert(!strstr(text, "\n2 "), "%s", text);
    free(text);
    ckpt_writer_free(old);
}

/* Generation 1 takes over (and saves step 1 itself) between the fence check
 * of generation 0's retention of step 1 and its deletes: the deletes of
 * that one step go on, and take generation 0's objects of it only;
 * generation 1's step 1 is whole, and generation 0's next save is refused. */
Test(ckpt_fence, a_takeover_between_retentions_check_and_its_deletes_deletes_nothing_newer,
     .init = open_store, .fini = close_store)
{
    ckpt_writer *old = writer(0, 1);
    saved(old, 1, 100);
    hold_at("retention", 1, 1);
    cr_assert_eq(save(old, 2, 200), CKPT_OK, "%s", err);
    unhold();
    cr_assert_eq(held, 1);
    cr_assert(has("step-000000001/manifest.g1.json") &&
              has("step-000000001/shard-00000-of-00001.g1.bin"), "generation 1's step 1 went");
    cr_assert(!has("step-000000001/manifest.json") &&
              !has("step-000000001/shard-00000-of-00001.bin"));
    ckpt_manifest *m = NULL;
    cr_assert_eq(ckpt_read_step(s, 1, &m, err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_manifest_meta(m)->generation, 1);
    ckpt_manifest_free(m);
    char *before = snapshot();
    fenced(old, 3, 300, before);
    free(before);
    ckpt_writer_free(old);
}
