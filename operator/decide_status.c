/* operator/decide_status.c - the status the operator writes: the job's
 * conditions, the merge patch of the /status fields that changed, and
 * condition ProgressStalled.
 *
 * Owns: setting and clearing conditions (dec_set_cond, dec_clear_conds,
 * dec_cond_true), the /status patch (dec_status_patch: phase, conditions,
 * restarts, disruptionRestarts, resumes, lastRestart, replicas, startTime
 * and completionTime, spec.elastic's fields, observedGeneration, the
 * admission plan's fields) and ProgressStalled (dec_watch_progress).
 * Must not: do I/O, read the clock, or write status.progress (rank 0 of
 * the worker owns it; ProgressStalled only reads it); decide the phase
 * (decide.c, decide_restart.c).
 */
#include "decide_internal.h"

#include "config.h"
#include "json.h"
#include "planner.h"
#include "timefmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------- conditions */

/* Sets condition `type` in conds: lastTransitionTime changes only with the
 * status. When only_if_present, a missing condition is not added. */
void dec_set_cond(ctx *c, cJSON *conds, const char *type, const char *status,
                  const char *reason, const char *message, int only_if_present)
{
    char ts[TIMEFMT_LEN];
    cJSON *cond = NULL, *it;
    cJSON_ArrayForEach(it, conds)
    {
        if (dec_str_eq(json_str(it, "type"), type)) {
            cond = it;
            break;
        }
    }
    if (cond == NULL && only_if_present)
        return;
    const char *old_ltt = cond ? json_str(cond, "lastTransitionTime") : NULL;
    int keep_time = cond && dec_str_eq(json_str(cond, "status"), status) && old_ltt;
    if (keep_time)
        snprintf(ts, sizeof ts, "%s", old_ltt);
    else
        timefmt_rfc3339(ts, c->now, 0, 0);
    cJSON *n = cJSON_CreateObject();
    if (n == NULL || !cJSON_AddStringToObject(n, "type", type) ||
        !cJSON_AddStringToObject(n, "status", status) ||
        !cJSON_AddStringToObject(n, "reason", reason) ||
        !cJSON_AddStringToObject(n, "message", message) ||
        !cJSON_AddStringToObject(n, "lastTransitionTime", ts)) {
        cJSON_Delete(n);
        c->ok = 0;
        return;
    }
    if (cond)
        cJSON_ReplaceItemViaPointer(conds, cond, n);
    else if (!cJSON_AddItemToArray(conds, n)) {
        cJSON_Delete(n);
        c->ok = 0;
    }
}

int dec_cond_true(const cJSON *conds, const char *type)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, conds)
    {
        if (dec_str_eq(json_str(it, "type"), type))
            return dec_str_eq(json_str(it, "status"), "True");
    }
    return 0;
}

/* Sets each of these conditions False (if present and True). */
void dec_clear_conds(ctx *c, cJSON *conds, const char *reason, const char *msg,
                     const char *const *types)
{
    for (; *types; types++)
        if (dec_cond_true(conds, *types))
            dec_set_cond(c, conds, *types, "False", reason, msg, 1);
}

/* ------------------------------------------------------- the status patch */

/* Adds key=v to patch when it differs from cur[key]; takes v. */
static void diff_field(ctx *c, cJSON *patch, const cJSON *cur, const char *key, cJSON *v)
{
    if (v == NULL) {
        c->ok = 0;
        return;
    }
    if (cJSON_Compare(v, json_get(cur, key), 1) || !cJSON_AddItemToObject(patch, key, v))
        cJSON_Delete(v);
}

/* key := v (a new number), or null when v is 0 and cur has the key. */
static void diff_or_null(ctx *c, cJSON *patch, const cJSON *cur, const char *key, int v)
{
    if (v > 0)
        diff_field(c, patch, cur, key, cJSON_CreateNumber(v));
    else if (json_get(cur, key))
        diff_field(c, patch, cur, key, cJSON_CreateNull());
}

/* spec.elastic's status fields (elastic.h). */
static void elastic_status(ctx *c, const desired_status *ds, cJSON *patch, const cJSON *cur)
{
    char ts[TIMEFMT_LEN];
    diff_field(c, patch, cur, "worldSize", cJSON_CreateNumber(ds->el.size));
    if (ds->el.resized >= 0) {
        timefmt_rfc3339(ts, ds->el.resized, 0, 0);
        diff_field(c, patch, cur, "elasticResizeTime", cJSON_CreateString(ts));
    }
    diff_or_null(c, patch, cur, "elasticGrowFrom", ds->el.grow_from);
    diff_or_null(c, patch, cur, "elasticGrowFailures", ds->el.failures);
    diff_or_null(c, patch, cur, "elasticMinFittingReplicas", ds->el.floor);
}

cJSON *dec_status_patch(ctx *c, const desired_status *ds, const cJSON *cur)
{
    char ts[TIMEFMT_LEN];
    cJSON *st = cJSON_CreateObject();
    if (st == NULL) {
        c->ok = 0;
        return NULL;
    }
    if (ds->phase)
        diff_field(c, st, cur, "phase", cJSON_CreateString(ds->phase));
    diff_field(c, st, cur, "conditions", cJSON_Duplicate(ds->conds, 1));
    diff_field(c, st, cur, "restarts", cJSON_CreateNumber(ds->gen - ds->resumes));
    diff_field(c, st, cur, "disruptionRestarts", cJSON_CreateNumber(ds->disruptions));
    if (ds->resumes > 0 || json_get(cur, "resumes"))
        diff_field(c, st, cur, "resumes", cJSON_CreateNumber(ds->resumes));
    if (ds->last_restart && !cJSON_Compare(ds->last_restart, json_get(cur, "lastRestart"), 1)) {
        /* a JSON merge patch: keys of the old record that the new lacks are nulled */
        cJSON *lr = cJSON_Duplicate(ds->last_restart, 1);
        const cJSON *old;
        cJSON_ArrayForEach(old, json_get(cur, "lastRestart"))
        {
            if (lr && !cJSON_HasObjectItem(lr, old->string) && !cJSON_AddNullToObject(lr, old->string)) {
                cJSON_Delete(lr);
                lr = NULL;
            }
        }
        if (lr == NULL || !cJSON_AddItemToObject(st, "lastRestart", lr)) {
            cJSON_Delete(lr);
            c->ok = 0;
        }
    }
    if (ds->set_replicas) {
        cJSON *r = cJSON_CreateObject();
        if (r && (!cJSON_AddNumberToObject(r, "active", ds->active) ||
                  !cJSON_AddNumberToObject(r, "succeeded", ds->succeeded) ||
                  !cJSON_AddNumberToObject(r, "failed", ds->failed))) {
            cJSON_Delete(r);
            r = NULL;
        }
        diff_field(c, st, cur, "replicas", r);
    }
    if (ds->start >= 0) {
        timefmt_rfc3339(ts, ds->start, 0, 0);
        diff_field(c, st, cur, "startTime", cJSON_CreateString(ts));
    } else if (json_get(cur, "startTime") && !cJSON_AddNullToObject(st, "startTime")) {
        c->ok = 0; /* unset again (Kueue evicted the job): the merge patch's null removes it */
    }
    if (ds->completion >= 0) {
        timefmt_rfc3339(ts, ds->completion, 0, 0);
        diff_field(c, st, cur, "completionTime", cJSON_CreateString(ts));
    }
    if (c->js->elastic)
        elastic_status(c, ds, st, cur);
    diff_field(c, st, cur, "observedGeneration", cJSON_CreateNumber((double)c->js->generation));
    const vj_admission *a = c->have->plan;
    if (a) {
        char q[32];
        vj_planner_quantity(q, sizeof q, a->memory_bytes);
        diff_field(c, st, cur, "plannedGeneration", cJSON_CreateNumber((double)a->generation));
        diff_field(c, st, cur, "plannedMemoryPerRank", cJSON_CreateString(q));
        diff_field(c, st, cur, "plannedImagesPerSecond",
                   cJSON_CreateNumber(round(a->images_per_s * 10) / 10));
    }
    if (st->child == NULL) {
        cJSON_Delete(st);
        return NULL;
    }
    cJSON *body = cJSON_CreateObject();
    if (body == NULL || !cJSON_AddItemToObject(body, "status", st)) {
        cJSON_Delete(body);
        cJSON_Delete(st);
        c->ok = 0;
        return NULL;
    }
    return body;
}

/* -------------------------------------------------------- ProgressStalled */

/* training.reportIntervalSeconds as the job's spec sets it, else the
 * config table's default (api/config_keys.c: the worker's own). 0 out of memory. */
static long long report_interval(ctx *c)
{
    const cJSON *v = json_get(json_get(c->js->spec, "training"), "reportIntervalSeconds");
    if (cJSON_IsNumber(v) && v->valuedouble >= 1)
        return (long long)v->valuedouble;
    vit_job_config *d = malloc(sizeof *d);
    if (d == NULL) {
        c->ok = 0;
        return 0;
    }
    config_defaults(d);
    long long s = d->training.report_interval_seconds;
    free(d);
    return s;
}

/* Condition ProgressStalled (decide.h): judged from the status the workers
 * wrote (status.progress.updateTime) and the Running condition's
 * lastTransitionTime, never from anything this operator remembers, so a new
 * leader judges a job as the old one would. Only the conditions are written
 * (rank 0 owns status.progress). */
void dec_watch_progress(ctx *c, desired_status *ds, const cJSON *st)
{
    char msg[512], age[TIMEFMT_DUR_LEN], every[TIMEFMT_DUR_LEN], after[TIMEFMT_DUR_LEN];
    if (!dec_str_eq(ds->phase, "Running")) {
        if (dec_cond_true(ds->conds, "ProgressStalled")) {
            snprintf(msg, sizeof msg, "the job is %s", ds->phase ? ds->phase : "not running");
            dec_set_cond(c, ds->conds, "ProgressStalled", "False", "NotRunning", msg, 1);
        }
        return;
    }
    long long interval = report_interval(c);
    if (interval <= 0)
        return;
    long long limit = VJ_PROGRESS_STALL_REPORTS * interval;
    if (limit < VJ_PROGRESS_STALL_MIN_S)
        limit = VJ_PROGRESS_STALL_MIN_S;
    long long since = c->now, upd = -1; /* Running since; the last report */
    const cJSON *cond;
    cJSON_ArrayForEach(cond, ds->conds)
    {
        if (dec_str_eq(json_str(cond, "type"), "Running") &&
            timefmt_parse(json_str(cond, "lastTransitionTime"), &since) != 0)
            since = c->now;
    }
    const cJSON *pr = json_get(st, "progress");
    int reported = timefmt_parse(json_str(pr, "updateTime"), &upd) == 0 && upd >= since;
    long long base = reported ? upd : since, stalled_at = base + limit;
    if (c->now < stalled_at) {
        dec_requeue(c, stalled_at - c->now); /* raised on time, without a new event */
        if (!dec_cond_true(ds->conds, "ProgressStalled"))
            return;
        if (reported)
            snprintf(msg, sizeof msg, "progress reported again at step %lld",
                     json_int(pr, "step", 0));
        else
            snprintf(msg, sizeof msg, "generation %d is running; its first progress report is "
                     "due", ds->gen);
        dec_set_cond(c, ds->conds, "ProgressStalled", "False",
                     reported ? "ProgressResumed" : "ViTJobRestarted", msg, 1);
        return;
    }
    /* The age is shown in steps of `limit` (1m, 2m, ...): the message changes
     * once per step, not at every reconcile, and is rewritten on time. */
    long long k = (c->now - stalled_at) / limit;
    timefmt_duration(age, (k + 1) * limit);
    timefmt_duration(every, interval);
    timefmt_duration(after, limit);
    if (reported)
        snprintf(msg, sizeof msg, "no progress report for %s (the last: step %lld at %s); "
                 "rank 0 reports every %s, stalled after %s", age, json_int(pr, "step", 0),
                 json_str(pr, "updateTime"), every, after);
    else
        snprintf(msg, sizeof msg, "no progress report in the %s since generation %d began "
                 "running; rank 0 reports every %s, stalled after %s", age, ds->gen, every, after);
    dec_set_cond(c, ds->conds, "ProgressStalled", "True", "NoProgressReport", msg, 0);
    dec_requeue(c, stalled_at + (k + 1) * limit - c->now);
}
