/* worker/ckpt/ckpt_list.c - the steps under a checkpoint root (ckpt.h):
 * their folders' names, which steps there are (a fenced generation's
 * abandoned step is none), the state of each (complete, torn, corrupt),
 * the newest good one (ckpt_find, ckpt_find_candidate), the manifest that
 * speaks for one step (ckpt_read_step: the newest generation's) and the
 * listing of `vitjob-worker checkpoints` (ckpt_describe).
 *
 * Owns: the step folders' names (ckpt_step_name, ckpt_step_object), the
 * list of steps and the search for one.
 * Must not: write or delete anything; parse a manifest or read a shard
 * (ckpt_reader.c); agree with the other ranks (ckpt_resume.c).
 */
#include "ckpt.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_fence.h"
#include "ckpt_internal.h"
#include "log.h"

void ckpt_step_name(long step, char *out, size_t len) { snprintf(out, len, "step-%09ld", step); }

/* ckpt_internal.h: a step folder's object: the step and the name in the
 * folder; 0 for an object outside the steps (a fence). */
int ckpt_step_object(const char *name, long *step, const char **base)
{
    int off = 0;
    if (sscanf(name, "step-%ld/%n", step, &off) != 1 || off == 0) return 0;
    *base = name + off;
    return 1;
}

/* The newest generation among the manifests in names (a step's objects,
 * "step-N/..."; others are passed over): its generation, -1 when none;
 * *count (may be NULL): how many manifests. */
static long newest_manifest(char *const *names, size_t n, const char *dir, int *count)
{
    long best = -1, gen;
    size_t dl = strlen(dir);
    int c = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(names[i], dir, dl) == 0 && names[i][dl] == '/' &&
            ckpt_object_kind(names[i] + dl + 1, &gen) == CKPT_OBJ_MANIFEST) {
            c++;
            if (gen > best) best = gen;
        }
    if (count) *count = c;
    return best;
}

ckpt_status ckpt_read_step(ckpt_store *store, long step, ckpt_manifest **out, char *err,
                           size_t errlen)
{
    char dir[32], **names = NULL;
    uint64_t *sizes = NULL;
    size_t n = 0;
    ckpt_step_name(step, dir, sizeof dir);
    ckpt_status st = ckpt_store_list_dir(store, dir, &names, &sizes, &n, err, errlen);
    if (st) return st;
    long gen = newest_manifest(names, n, dir, NULL);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(sizes);
    if (gen < 0) { /* as a read of the manifest would say */
        snprintf(err, errlen, "checkpoint: %s/manifest.json: no manifest of any generation",
                 dir);
        return CKPT_NOT_FOUND;
    }
    return ckpt_read_manifest(store, step, gen, out, err, errlen);
}

typedef struct {
    char **names;
    uint64_t *sizes;
    size_t n;
} objects;

static void objects_free(objects *o)
{
    for (size_t i = 0; i < o->n; i++) free(o->names[i]);
    free(o->names);
    free(o->sizes);
}

/* The steps that have any object, descending; *count. A step left by a
 * fenced generation is not one: no manifest, and every object of it of a
 * generation older than fence (the newest fence; -1 none): what a stale
 * writer had in flight when a newer generation took over (ckpt_fence.h),
 * which no generation can complete any more. Nobody lists it, resumes from
 * it or passes it over; the retention of a newer generation deletes it
 * like any older step. */
static long *steps_of(const objects *o, long fence, size_t *count)
{
    long *steps = malloc(sizeof *steps * (o->n + 1));
    size_t k = 0;
    if (!steps) return NULL;
    long cur = -1, newest_gen = -1;
    int has_manifest = 0;
    for (size_t i = 0; i <= o->n; i++) {
        long s = -1, gen = 0;
        const char *base = NULL;
        if (i < o->n && !ckpt_step_object(o->names[i], &s, &base)) continue;
        if (i == o->n || s != cur) { /* the step before is whole */
            if (cur >= 0 && (has_manifest || newest_gen >= fence)) steps[k++] = cur;
            if (i == o->n) break;
            cur = s;
            newest_gen = -1;
            has_manifest = 0;
        }
        if (ckpt_object_kind(base, &gen) == CKPT_OBJ_MANIFEST) has_manifest = 1;
        if (gen > newest_gen) newest_gen = gen;
    }
    for (size_t i = 0; i < k / 2; i++) { /* ascending (sorted names) -> descending */
        long t = steps[i];
        steps[i] = steps[k - 1 - i];
        steps[k - 1 - i] = t;
    }
    *count = k;
    return steps;
}

/* The state of one step: CKPT_OK with *out (may be NULL: not wanted), or
 * why it is torn or corrupt; its blocks are read only with read_blocks. */
static ckpt_status check_step(ckpt_store *store, const objects *o, long step, int read_blocks,
                              ckpt_manifest **out, int *manifests, char *why, size_t len)
{
    char dir[32];
    ckpt_step_name(step, dir, sizeof dir);
    /* the newest generation's manifest speaks for the step (ckpt_fence.h) */
    long gen = newest_manifest(o->names, o->n, dir, manifests);
    if (gen < 0) {
        snprintf(why, len, "torn: no manifest (a save that did not finish)");
        return CKPT_NOT_FOUND;
    }
    ckpt_manifest *m = NULL;
    char err[512];
    ckpt_status st = ckpt_read_manifest(store, step, gen, &m, err, sizeof err);
    if (st) {
        snprintf(why, len, "corrupt: %s", err);
        return st;
    }
    if ((st = ckpt_verify_shards(store, m, o->names, o->sizes, o->n, read_blocks, why, len)) !=
        CKPT_OK) {
        ckpt_manifest_free(m);
        return st;
    }
    if (out)
        *out = m;
    else
        ckpt_manifest_free(m);
    return CKPT_OK;
}

/* Every object under store and the steps they belong to, newest first
 * (*steps malloc'd; free it and objects_free). */
static ckpt_status list_steps(ckpt_store *store, objects *o, long **steps, size_t *ns, char *err,
                              size_t errlen)
{
    long fence = -1;
    ckpt_status st = ckpt_fence_newest(store, &fence, err, errlen);
    if (st) return st;
    if ((st = ckpt_store_list(store, &o->names, &o->sizes, &o->n, err, errlen)) != CKPT_OK)
        return st;
    if (!(*steps = steps_of(o, fence, ns))) {
        objects_free(o);
        snprintf(err, errlen, "checkpoint: out of memory");
        return CKPT_RETRY;
    }
    return CKPT_OK;
}

/* ckpt_find and ckpt_find_candidate: the newest step below `below` that
 * check_step passes. */
static ckpt_status find(ckpt_store *store, long below, int read_blocks, ckpt_manifest **out,
                        char *err, size_t errlen)
{
    objects o = {0};
    long *steps = NULL;
    size_t ns = 0;
    ckpt_status st = list_steps(store, &o, &steps, &ns, err, errlen);
    if (st) return st;
    st = CKPT_NOT_FOUND;
    for (size_t i = 0; i < ns && st == CKPT_NOT_FOUND; i++) {
        char why[1024];
        if (steps[i] >= below) continue;
        ckpt_status s = check_step(store, &o, steps[i], read_blocks, out, NULL, why,
                                   sizeof why);
        if (s == CKPT_OK) {
            st = CKPT_OK;
        } else if (s == CKPT_RETRY) { /* storage failing now: not a verdict on the step */
            snprintf(err, errlen, "%s", why);
            st = CKPT_RETRY;
        } else {
            LOG_WARN("ckpt", "event=skipped step=%ld reason=%s", steps[i], LOGV(why));
        }
    }
    if (st == CKPT_NOT_FOUND) snprintf(err, errlen, "no complete checkpoint");
    free(steps);
    objects_free(&o);
    return st;
}

ckpt_status ckpt_find(ckpt_store *store, ckpt_manifest **out, char *err, size_t errlen)
{
    return find(store, LONG_MAX, 1, out, err, errlen);
}

ckpt_status ckpt_find_candidate(ckpt_store *store, long below, ckpt_manifest **out, char *err,
                                size_t errlen)
{
    return find(store, below, 0, out, err, errlen);
}

ckpt_status ckpt_describe(ckpt_store *store, FILE *out, char *err, size_t errlen)
{
    objects o = {0};
    long *steps = NULL;
    size_t ns = 0;
    ckpt_status st = list_steps(store, &o, &steps, &ns, err, errlen);
    if (st) return st;
    fprintf(out, "%-12s %-9s %s\n", "STEP", "STATE", "DETAIL");
    if (ns == 0) fprintf(out, "(no checkpoints under this URI)\n");
    for (size_t i = 0; i < ns; i++) {
        char why[1024];
        ckpt_manifest *m = NULL;
        int manifests = 0;
        ckpt_status s = check_step(store, &o, steps[i], 1, &m, &manifests, why, sizeof why);
        if (s == CKPT_OK) {
            const ckpt_meta *mt = ckpt_manifest_meta(m);
            char gen[64] = ""; /* a generation other than 0, or several manifests */
            if (mt->generation > 0 || manifests > 1)
                snprintf(gen, sizeof gen, " generation=%ld%s", mt->generation,
                         manifests > 1 ? " (newest of the step's manifests)" : "");
            fprintf(out, "%-12ld %-9s world_size=%d sharding=%s params=%zu epoch=%ld%s%s\n",
                    steps[i], "complete", mt->world_size, LOGV(mt->sharding), mt->n_params,
                    mt->epoch, gen, mt->ema ? " ema=1" : "");
            ckpt_manifest_free(m);
        } else if (s == CKPT_RETRY) {
            snprintf(err, errlen, "%s", why);
            st = CKPT_RETRY;
            break;
        } else {
            /* one line per step, whatever a corrupt file put in the reason */
            char line[sizeof why * 2];
            log_escape(line, sizeof line, why);
            const char *colon = strchr(line, ':');
            const char *rest = !colon ? line : colon[1] ? colon + 2 : colon + 1;
            fprintf(out, "%-12ld %-9.*s %s\n", steps[i], colon ? (int)(colon - line) : 7, line,
                    rest);
        }
    }
    free(steps);
    objects_free(&o);
    long fence = -1;
    char ferr[512];
    if (st == CKPT_OK && ckpt_fence_newest(store, &fence, ferr, sizeof ferr) == CKPT_OK &&
        fence > 0)
        fprintf(out, "fence: generation %ld (%s/g%ld.json): a writer of an older generation "
                "that sees it stores and deletes nothing more\n", fence, CKPT_FENCE_DIR, fence);
    return st;
}
