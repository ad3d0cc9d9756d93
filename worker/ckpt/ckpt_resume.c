/* worker/ckpt/ckpt_resume.c - a resume across the ranks (ckpt.h's
 * ckpt_resume): rank 0 enters the generation fence, then picks the step
 * and posts it through the rendezvous store; every rank loads its part
 * with the caller's loader and all agree on the outcome, passing a
 * corrupt step over together; and the exit class of a store's failure
 * (ckpt_status_class).
 *
 * Owns: the ranks' agreement on what to resume from (the rendezvous keys
 * "ckpt/resume/<attempt>" and "ckpt/loaded/<attempt>").
 * Must not: read a shard itself (the loader it is handed does, through
 * ckpt_read_range), search the steps (ckpt_list.c) or write anything but
 * the fence (ckpt_fence_enter).
 */
#include "ckpt.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_fence.h"
#include "log.h"

vj_err ckpt_status_class(ckpt_status st)
{
    if (st == CKPT_FENCED) return VJ_ERR_RENDEZVOUS; /* an older generation's process */
    return st == CKPT_RETRY || st == CKPT_NOT_FOUND ? VJ_ERR_IO : VJ_ERR_OUTPUT;
}

/* How bad a rank's load outcome is, for agreeing on one: a failing store
 * (stop and retry the run) over a corrupt step (try the one before) over
 * success. */
static int load_severity(ckpt_status st)
{
    return st == CKPT_OK ? 0 : st == CKPT_PERMANENT ? 1 : 2;
}

/* Every rank's outcome of loading attempt a, so that all ranks decide
 * alike: *all the worst one, why its message naming the rank. */
static vj_err agree_on_load(const ckpt_resume_options *o, int a, ckpt_status mine,
                            const char *mine_why, ckpt_status *all, char *why, size_t whylen,
                            char *err, size_t errlen)
{
    *all = mine;
    snprintf(why, whylen, "%s", mine_why);
    if (o->world == 1) return VJ_OK;
    char prefix[48], val[1100];
    char **vals = calloc((size_t)o->world, sizeof *vals);
    if (!vals) {
        snprintf(err, errlen, "checkpoint: out of memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    snprintf(prefix, sizeof prefix, "ckpt/loaded/%d", a);
    int n = snprintf(val, sizeof val, "%d %s", (int)mine, mine ? mine_why : "");
    if (rdzv_exchange(o->r, prefix, val, (size_t)(n < (int)sizeof val ? n : (int)sizeof val - 1),
                      o->timeout_s, vals, NULL, err, errlen) != 0) {
        free(vals);
        return VJ_ERR_RENDEZVOUS;
    }
    for (int q = 0; q < o->world; q++) {
        char *rest = NULL;
        ckpt_status theirs = (ckpt_status)strtol(vals[q], &rest, 10);
        if (load_severity(theirs) > load_severity(*all)) {
            *all = theirs;
            snprintf(why, whylen, "rank %d: %s", q, *rest == ' ' ? rest + 1 : rest);
        }
    }
    rdzv_exchange_free(o->r, vals);
    free(vals);
    return VJ_OK;
}

/* Attempt a's step: rank 0 finds it below `below` and posts it (-1: none)
 * with its manifest's generation and the writer generation *gen (rank 0's
 * ckpt_fence_enter); the others read them and that very manifest. */
static vj_err pick_step(const ckpt_resume_options *o, int a, long below, long *step, long *gen,
                        ckpt_manifest **man, char *err, size_t errlen)
{
    char key[48], val[96];
    snprintf(key, sizeof key, "ckpt/resume/%d", a);
    ckpt_status st;
    if (o->rank == 0) {
        st = ckpt_find_candidate(o->store, below, man, err, errlen);
        if (st != CKPT_OK && st != CKPT_NOT_FOUND) return ckpt_status_class(st);
        *step = st == CKPT_OK ? ckpt_manifest_meta(*man)->step : -1;
        int n = snprintf(val, sizeof val, "%ld %ld %ld", *step,
                         st == CKPT_OK ? ckpt_manifest_meta(*man)->generation : 0, *gen);
        if (o->world > 1 && rdzv_set(o->r, key, val, (size_t)n, NULL, err, errlen) != 0)
            return VJ_ERR_RENDEZVOUS;
        return VJ_OK;
    }
    void *v = NULL;
    size_t len = 0;
    if (rdzv_get(o->r, key, o->timeout_s, &v, &len, NULL, err, errlen) != 0)
        return VJ_ERR_RENDEZVOUS;
    snprintf(val, sizeof val, "%.*s", (int)(len < 95 ? len : 95), (char *)v);
    free(v);
    long mgen = 0;
    if (sscanf(val, "%ld %ld %ld", step, &mgen, gen) != 3) {
        snprintf(err, errlen, "checkpoint: rank 0 posted '%s' for the step to resume", val);
        return VJ_ERR_RENDEZVOUS;
    }
    if (*step >= 0 &&
        (st = ckpt_read_manifest(o->store, *step, mgen, man, err, errlen)) != CKPT_OK)
        return ckpt_status_class(st);
    return VJ_OK;
}

vj_err ckpt_resume(const ckpt_resume_options *o, ckpt_meta *meta, char *err, size_t errlen)
{
    long below = LONG_MAX, step = -1, gen = 0;
    memset(meta, 0, sizeof *meta);
    meta->step = -1;
    if (o->rank == 0) { /* the fence first: an older generation deletes nothing from now */
        ckpt_status st = ckpt_fence_enter(o->store, o->restart, &gen, err, errlen);
        if (st) return ckpt_status_class(st);
    }
    for (int a = 0;; a++) {
        ckpt_manifest *man = NULL;
        vj_err rc = pick_step(o, a, below, &step, &gen, &man, err, errlen);
        if (rc || step < 0) {
            ckpt_manifest_free(man);
            if (rc) return rc;
            break;
        }
        /* each attempt must go below the step passed over before it: the
         * same step again would be loaded, found corrupt and offered again
         * for ever (a retry that cannot help), so it ends here instead */
        if (step >= below) {
            snprintf(err, errlen, "checkpoint.uri=%s: step %ld was offered again after it was "
                     "passed over as corrupt (the search must go below step %ld); giving up "
                     "instead of loading it again", o->uri, step, below);
            ckpt_manifest_free(man);
            return VJ_ERR_OUTPUT;
        }
        const ckpt_meta *m = ckpt_manifest_meta(man);
        if (strcmp(m->model, o->model_json) != 0 || m->n_params != o->n_params) {
            snprintf(err, errlen, "checkpoint.uri=%s: step %ld was written for the model %s "
                     "(%zu parameters), not this run's %s (%zu); use another checkpoint.uri",
                     o->uri, step, m->model, m->n_params, o->model_json, o->n_params);
            ckpt_manifest_free(man);
            return VJ_ERR_CONFIG;
        }
        char why[1200] = "", all_why[1300];
        ckpt_status all = CKPT_OK;
        ckpt_status st = o->load(o->ctx, o->store, man, why, sizeof why);
        rc = agree_on_load(o, a, st, why, &all, all_why, sizeof all_why, err, errlen);
        if (!rc && all == CKPT_OK) *meta = *m;
        ckpt_manifest_free(man);
        if (rc) return rc;
        if (all == CKPT_OK) break;
        if (all != CKPT_PERMANENT) { /* storage failing now: not a verdict on the step */
            snprintf(err, errlen, "%s", all_why);
            return ckpt_status_class(all);
        }
        if (o->rank == 0)
            LOG_WARN("ckpt", "event=skipped step=%ld reason=%s", step,
                     LOGVF("corrupt: %s", all_why));
        below = step;
    }
    if (o->generation) *o->generation = gen;
    if (meta->step >= 0)
        LOG_INFO("ckpt", "event=resumed step=%ld from_world_size=%d from_sharding=%s "
                 "world_size=%d epoch=%ld index=%ld from_generation=%ld generation=%ld",
                 meta->step, meta->world_size, LOGV(meta->sharding), o->world, meta->epoch,
                 meta->index, meta->generation, gen);
    else if (o->rank == 0)
        LOG_INFO("ckpt", "event=fresh_start uri=%s reason=\"no complete checkpoint\"",
                 LOGV(o->uri));
    return VJ_OK;
}
