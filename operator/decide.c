/* operator/decide.c - see decide.h.
 *
 * Owns: the lifecycle rules of a ViTJob: decide() and the entry points of
 * decide.h; validation, start and running, success and failure,
 * activeDeadlineSeconds, ttlSecondsAfterFinished, suspend and resume,
 * Kueue's queueing, gang scheduling's PodGroup, admission (WillNotFit,
 * ElasticWillNotFit), elastic resizes, how a job ends and cleanPodPolicy.
 * The rest of the decision: the pods as read (decide_pods.c), restarts and
 * failures (decide_restart.c), the status written (decide_status.c), the
 * plan's contents (decide_plan.c); decide_internal.h is what they share.
 * Must not: do I/O, read the clock, or write status.progress.
 *
 * Choices (documented in decide.h's rules and the CRD):
 * - The pods' generation is status.restarts + status.resumes: restarts counts
 *   the gang restarts after a failure or a disruption (kubectl get vj's
 *   RESTARTS), resumes the fresh generations that leaving Suspended started
 *   (counted apart, as Kubeflow does). status.disruptionRestarts counts the
 *   restarts that did not spend backoffLimit (disruptions); restarts -
 *   disruptionRestarts is what backoffLimit limits.
 * - Unsuspending starts generation + 1 (if pods ever ran), so that pods of the
 *   suspended generation still terminating never clash by name or join the
 *   new rendezvous; it does not spend backoffLimit; startTime restarts, so
 *   activeDeadlineSeconds counts time since the resume.
 * - A pod of the current generation missing while the job is Running was lost
 *   (a disruption); while Pending it is (re)created.
 * - A Failed job deletes its pods still pending or running unless
 *   cleanPodPolicy is None (the gang cannot go on without them); finished
 *   pods follow cleanPodPolicy. A Succeeded job follows cleanPodPolicy.
 * - cleanPodPolicy None keeps every pod of a finished job, running ones
 *   included (a worker whose peer is gone ends on its own), and the
 *   finished pods of earlier generations, with their logs: the operator
 *   deletes no pod but those still running when the gang restarts (they
 *   must stop before the next generation starts) or when
 *   activeDeadlineSeconds is reached, and those someone else is already
 *   deleting (force-deleted past their grace, or on a lost node).
 * - replicas counts are frozen once the job is finished.
 * Where the other choices live: a disruption with failures is a disruption
 * (decide_restart.c); a terminating pod's forced delete (decide_plan.c).
 */
#include "decide_internal.h"

#include "elastic.h"
#include "jobspec.h"
#include "json.h"
#include "kueue.h"
#include "planner.h"
#include "timefmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------- the status read */

/* The pods' generation the status records: restarts + resumes. */
static int status_generation(const cJSON *st)
{
    const cJSON *r = json_get(st, "restarts"), *u = json_get(st, "resumes");
    return (cJSON_IsNumber(r) ? r->valueint : 0) + (cJSON_IsNumber(u) ? u->valueint : 0);
}

static long long status_time(const cJSON *st, const char *key)
{
    long long t;
    return timefmt_parse(json_str(st, key), &t) == 0 ? t : -1;
}

/* ------------------------------------------------------------- a job ends */

/* cleanPodPolicy None keeps a finished pod, whatever its generation. */
int dec_kept(const ctx *c, const pod_info *pi)
{
    return c->js->clean_pod_policy == VJ_CLEAN_NONE && dec_finished(pi) && !pi->deleting;
}

void dec_finish_job(ctx *c, desired_status *ds, pod_info *pods, size_t n, int success,
                    const char *reason, const char *msg)
{
    static const char *const running_types[] = {"Running", "Restarting", NULL};
    ds->phase = success ? "Succeeded" : "Failed";
    ds->completion = c->now;
    if (success) {
        dec_set_cond(c, ds->conds, "Succeeded", "True", reason, msg, 0);
        dec_clear_conds(c, ds->conds, "ViTJobSucceeded", msg, running_types);
        dec_event(c, "Normal", reason, msg);
    } else {
        dec_set_cond(c, ds->conds, "Failed", "True", reason, msg, 0);
        dec_clear_conds(c, ds->conds, "ViTJobFailed", msg, running_types);
        dec_event(c, "Warning", reason, msg);
    }
    /* Frozen counts of the last generation, as it ends. */
    ds->active = ds->succeeded = ds->failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (pods[i].gen != ds->gen || pods[i].rank >= c->js->replicas)
            continue;
        ds->succeeded += pods[i].phase == PP_SUCCEEDED;
        ds->failed += pods[i].phase == PP_FAILED;
    }
    ds->set_replicas = 1;
}

/* cleanPodPolicy on a finished job (see the choices at the top). */
void dec_clean_pods(ctx *c, const desired_status *ds, pod_info *pods, size_t n)
{
    vj_clean_policy policy = c->js->clean_pod_policy;
    int failed = dec_str_eq(ds->phase, "Failed");
    for (size_t i = 0; i < n; i++) {
        pod_info *pi = &pods[i];
        int del = policy == VJ_CLEAN_ALL ||
                  (!dec_finished(pi) && ((failed && policy != VJ_CLEAN_NONE) ||
                                         policy == VJ_CLEAN_RUNNING)) ||
                  (pi->deleting && pi->gen < ds->gen) ||
                  (pi->gen > ds->gen && !dec_kept(c, pi)); /* a generation stopped unborn */
        if (del)
            dec_remove_pod(c, pi);
    }
}

/* ------------------------------------------------------------------- gang */

static const char *gang_crd(vj_gang g)
{
    return g == VJ_GANG_VOLCANO ? VJ_PG_RESOURCE "." VJ_PG_VOLCANO_GROUP
                                : VJ_PG_RESOURCE "." VJ_PG_COSCHED_GROUP;
}

/* The gang scheduler's PodGroup CRD is not installed: one condition and one
 * event, and a look again much later (no hot loop). */
static void gang_unavailable(ctx *c, desired_status *ds)
{
    char msg[512];
    snprintf(msg, sizeof msg,
             "gang scheduler %s requested but its PodGroup CRD (%s) is not installed; no pods "
             "are created until it is",
             c->js->gang_name, gang_crd(c->js->gang));
    if (!dec_cond_true(ds->conds, "GangSchedulingUnavailable"))
        dec_event(c, "Warning", "PodGroupCRDMissing", msg);
    dec_set_cond(c, ds->conds, "GangSchedulingUnavailable", "True", "PodGroupCRDMissing", msg, 0);
    dec_requeue(c, VJ_GANG_MISSING_RECHECK_S);
}

/* The PodGroup's (last) condition Unschedulable True (volcano's), or NULL. */
static const cJSON *podgroup_unschedulable(const cJSON *pg)
{
    const cJSON *cond, *unsched = NULL;
    cJSON_ArrayForEach(cond, json_get(json_get(pg, "status"), "conditions"))
    {
        if (dec_str_eq(json_str(cond, "type"), "Unschedulable") &&
            dec_str_eq(json_str(cond, "status"), "True"))
            unsched = cond;
    }
    return unsched;
}

/* Whether the PodGroup waits for its gang, since when, and the scheduler's
 * words: volcano's condition Unschedulable (its message), or a phase before
 * the gang is placed (volcano Pending; coscheduling Pending, PreScheduling,
 * Scheduling). */
static int podgroup_waiting(const ctx *c, const cJSON *pg, long long *since, char *why,
                            size_t whylen)
{
    const cJSON *st = json_get(pg, "status");
    const char *phase = json_str(st, "phase");
    const cJSON *unsched = podgroup_unschedulable(pg);
    int waiting = unsched != NULL || dec_str_eq(phase, "Pending") ||
                  dec_str_eq(phase, "PreScheduling") || dec_str_eq(phase, "Scheduling");
    if (!waiting)
        return 0;
    const char *t = unsched ? json_str(unsched, "lastTransitionTime") : NULL;
    if (t == NULL)
        t = json_str(st, "scheduleStartTime");
    if (t == NULL)
        t = json_str(json_get(pg, "metadata"), "creationTimestamp");
    if (t == NULL || timefmt_parse(t, since) != 0)
        *since = c->now;
    const char *m = unsched ? json_str(unsched, "message") : NULL;
    if (m && m[0])
        snprintf(why, whylen, "%s", m);
    else
        snprintf(why, whylen, "phase %s, %d of minMember %d running", phase ? phase : "Pending",
                 (int)json_int(st, "running", 0), c->js->min_available);
    return 1;
}

/* While the job waits for its gang, reads the PodGroup's status (level-
 * triggered: nothing watches PodGroups, so it is requeued to look again),
 * and says so when it waits past the timeout. */
static void watch_gang(ctx *c, desired_status *ds, const vj_children *have)
{
    const vj_jobspec *js = c->js;
    long long timeout = js->schedule_timeout > 0 ? js->schedule_timeout : VJ_GANG_DEFAULT_TIMEOUT_S;
    long long since = 0;
    char why[256], msg[512];
    int waiting_job = dec_str_eq(ds->phase, "Pending") || dec_str_eq(ds->phase, "Restarting");
    if (waiting_job && have->podgroup_obj &&
        podgroup_waiting(c, have->podgroup_obj, &since, why, sizeof why)) {
        dec_requeue(c, timeout < 30 ? timeout : 30);
        if (c->now < since + timeout) {
            dec_requeue(c, since + timeout - c->now);
            return;
        }
        snprintf(msg, sizeof msg,
                 "PodGroup %s/%s has waited for the %s gang scheduler longer than "
                 "scheduleTimeoutSeconds=%lld: %s",
                 js->ns, js->name, js->gang_name, timeout, why);
        if (!dec_cond_true(ds->conds, "GangUnschedulable"))
            dec_event(c, "Warning", "GangUnschedulable", msg);
        dec_set_cond(c, ds->conds, "GangUnschedulable", "True", "PodGroupUnschedulable", msg, 0);
        return;
    }
    if (waiting_job)
        dec_requeue(c, timeout < 30 ? timeout : 30);
    static const char *const types[] = {"GangUnschedulable", NULL};
    snprintf(msg, sizeof msg, "PodGroup %s/%s is no longer waiting for its gang", js->ns,
             js->name);
    dec_clear_conds(c, ds->conds, "PodGroupScheduled", msg, types);
}

/* ---------------------------------------------------------------- running */

/* Leaving Suspended: a fresh generation when pods ran before (it resumes
 * from the checkpoint), without spending backoffLimit. Returns whether the
 * job still counts as restarting. */
static int resume(ctx *c, desired_status *ds, const char *cur_phase)
{
    int restarting = dec_str_eq(cur_phase, "Restarting");
    if (!dec_str_eq(cur_phase, "Suspended"))
        return restarting;
    char msg[512];
    snprintf(msg, sizeof msg, "ViTJob %s/%s is resumed", c->js->ns, c->js->name);
    dec_set_cond(c, ds->conds, "Suspended", "False", "ViTJobResumed", msg, 1);
    if (ds->start >= 0) {
        ds->gen++;
        ds->resumes++;
        ds->start = -1;
        restarting = 0;
    }
    dec_event(c, "Normal", "Resumed", msg);
    return restarting;
}

/* Under Kueue (kueue.h): while pods of the generation wait at Kueue's
 * admission gate, the job is Queued (phase and condition, one event), and
 * no clock of the job runs (startTime stays unset, so activeDeadlineSeconds
 * counts from the admission). Once none waits, the condition turns False.
 * Returns 1 while queued. */
static int watch_queue(ctx *c, desired_status *ds, const generation *g, const char *cur_phase)
{
    const vj_jobspec *js = c->js;
    char msg[512];
    static const char *const running_types[] = {"Running", NULL};
    if (js->kueue_queue == NULL)
        return 0;
    if (g->gated == 0) {
        snprintf(msg, sizeof msg, "Kueue admitted generation %d (its pods passed the %s gate)",
                 ds->gen, VJ_KUEUE_GATE);
        if (dec_cond_true(ds->conds, "Queued")) {
            dec_set_cond(c, ds->conds, "Queued", "False", "Admitted", msg, 1);
            dec_event(c, "Normal", "Admitted", msg);
        }
        return 0;
    }
    snprintf(msg, sizeof msg, "%d of %d pods of generation %d wait at Kueue's %s gate for "
             "LocalQueue %s/%s to admit them; no deadline of the job runs meanwhile", g->gated,
             js->replicas, ds->gen, VJ_KUEUE_GATE, js->ns, js->kueue_queue);
    ds->phase = "Queued";
    if (!dec_str_eq(cur_phase, "Queued"))
        dec_event(c, "Normal", "Queued", msg);
    dec_set_cond(c, ds->conds, "Queued", "True", "WaitingForKueue", msg, 0);
    dec_clear_conds(c, ds->conds, "ViTJobQueued", msg, running_types);
    return 1;
}

/* 1 while a pod of an older generation has not finished. */
static int older_alive(const desired_status *ds, const pod_info *pods, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (pods[i].gen < ds->gen && !dec_finished(&pods[i]))
            return 1;
    return 0;
}

/* Since when the gang scheduler's PodGroup says its gang cannot be placed
 * (volcano's condition Unschedulable True: its lastTransitionTime), or -1. */
static long long podgroup_unschedulable_since(const ctx *c)
{
    const cJSON *cond = podgroup_unschedulable(c->have ? c->have->podgroup_obj : NULL);
    long long t;
    if (cond == NULL)
        return -1;
    return timefmt_parse(json_str(cond, "lastTransitionTime"), &t) == 0 ? t : c->now;
}

/* spec.elastic (elastic.h): reads what the scheduler says of the generation,
 * writes condition Elastic, and restarts the gang at another size as a
 * disruption (a growth creates its pods once the old ones are gone:
 * keep_running). Returns 1 when it restarted the gang, else 0. */
static int elastic_resize(ctx *c, desired_status *ds, const generation *g)
{
    int R = c->js->replicas;
    char names[256] = "", err[256], m2[1024];
    vj_elastic_gen eg = {.gen = ds->gen, .unsched_since = -1, .unsched_names = names,
                         .node_ready_at = c->have ? c->have->node_ready_at : 0,
                         .node_ready_name = c->have ? c->have->node_ready_name : NULL};
    size_t w = 0;
    /* No pod says it, but the PodGroup does: its unplaced pods are
     * unschedulable since the later of its word and their creation (the
     * PodGroup outlives generations: a word older than the pods is not
     * about them). */
    long long pg_since = podgroup_unschedulable_since(c), gen_start = ds->el.resized, t;
    for (int r = 0; r < R; r++)
        if (g->slot[r] && g->slot[r]->unschedulable)
            pg_since = -1;
    /* nor about a generation started after it (the pods' creation, where
     * unknown: the last restart or resize) */
    if (timefmt_parse(json_str(ds->last_restart, "time"), &t) == 0 && t > gen_start)
        gen_start = t;
    if (pg_since >= 0 && gen_start > pg_since)
        pg_since = gen_start;
    for (int r = 0; r < R; r++) {
        const pod_info *pi = g->slot[r];
        if (pi == NULL)
            continue;
        eg.placed += pi->placed;
        eg.running += pi->phase == PP_RUNNING;
        long long since = pi->unsched_ts;
        if (!pi->unschedulable && pg_since >= 0 && !pi->placed && pi->phase == PP_PENDING &&
            !pi->deleting && !pi->gated)
            since = pi->created > pg_since ? pi->created : pg_since;
        else if (!pi->unschedulable)
            continue;
        eg.unschedulable++;
        if (eg.unsched_since < 0 || since < eg.unsched_since)
            eg.unsched_since = since;
        if (w < sizeof names) {
            int k = snprintf(names + w, sizeof names - w, "%s%s", w ? ", " : "", pi->name);
            w += k > 0 ? (size_t)k : 0;
        }
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, ds->conds)
    {
        if (dec_str_eq(json_str(it, "type"), "Elastic"))
            eg.cond_reason = json_str(it, "reason");
    }
    vj_elastic_verdict v;
    if (vj_elastic_decide(c->spec, &ds->el, &eg, c->now, &v, err, sizeof err) != 0) {
        if (strstr(err, "out of memory"))
            c->ok = 0;
        return 0;
    }
    if (v.requeue_after > 0)
        dec_requeue(c, v.requeue_after);
    int resize = v.next.size != ds->el.size;
    if (v.set_cond) {
        int changed = !dec_str_eq(eg.cond_reason, v.reason);
        dec_set_cond(c, ds->conds, "Elastic", v.cond_status, v.reason, v.message, 0);
        if (changed || resize)
            dec_event(c, dec_str_eq(v.reason, "Grown") || dec_str_eq(v.reason, "Growing") ||
                     dec_str_eq(v.reason, "Placed") ? "Normal" : "Warning", v.reason, v.message);
    }
    ds->el = v.next;
    if (!resize)
        return 0;
    for (int r = 0; r < R; r++)
        if (g->slot[r] && !dec_kept(c, g->slot[r]))
            dec_remove_pod(c, g->slot[r]);
    ds->gen++;
    ds->disruptions++;
    snprintf(m2, sizeof m2, "%s; gang restart as generation %d at %d pods (disruption, "
             "backoffLimit not spent)", v.message, ds->gen, v.next.size);
    static const char *const running_types[] = {"Running", NULL};
    dec_set_cond(c, ds->conds, "Restarting", "True", "Elastic", m2, 0);
    dec_last_restart_new(c, ds, ds->gen - 1, "Elastic", "Disruption", NULL, -1, m2);
    dec_clear_conds(c, ds->conds, "ViTJobRestarting", m2, running_types);
    c->world = v.next.size;
    if (!v.grow) /* a growth waits for the old pods to stop: keep_running */
        for (int r = 0; r < v.next.size; r++)
            dec_create_generation_pod(c, r, ds->gen);
    ds->phase = "Restarting";
    ds->active = v.grow ? 0 : v.next.size;
    ds->succeeded = ds->failed = 0;
    ds->set_replicas = 1;
    return 1;
}

/* Steady state: every rank has its pod; Running once all run. */
static void keep_running(ctx *c, desired_status *ds, const pod_info *pods, size_t n,
                         const generation *g, const char *cur_phase, int restarting)
{
    int R = c->js->replicas, active = 0;
    char msg[512];
    /* a growth starts once the old generation has stopped (and checkpointed) */
    int wait_old = c->js->elastic && ds->el.grow_from > 0 && older_alive(ds, pods, n);
    for (int r = 0; r < R; r++) {
        if (g->slot[r] == NULL) {
            if (wait_old)
                continue;
            dec_create_generation_pod(c, r, ds->gen);
            active++;
        } else if (!dec_finished(g->slot[r])) {
            active++;
        }
    }
    if (watch_queue(c, ds, g, cur_phase)) {
        ds->active = active;
        ds->succeeded = g->succeeded;
        ds->failed = 0;
        ds->set_replicas = 1;
        return;
    }
    /* under Kueue the clock starts at the admission: every pod there, none gated */
    if (ds->start < 0 && (c->js->kueue_queue == NULL || (g->gated == 0 && g->missing == 0)))
        ds->start = c->now;
    if (g->running == R) {
        ds->phase = "Running";
        snprintf(msg, sizeof msg, "all %d pods of generation %d are running", R, ds->gen);
        dec_set_cond(c, ds->conds, "Running", "True", "ViTJobRunning", msg, 0);
        if (!dec_str_eq(cur_phase, "Running")) /* an event for every phase change */
            dec_event(c, "Normal", "Running", msg);
        if (dec_cond_true(ds->conds, "Restarting"))
            dec_set_cond(c, ds->conds, "Restarting", "False", "ViTJobRunning", msg, 1);
    } else if (g->running > 0 && g->running + g->succeeded == R &&
               dec_str_eq(cur_phase, "Running")) {
        ds->phase = "Running"; /* ranks ending one by one: running until all have succeeded */
    } else {
        ds->phase = restarting ? "Restarting" : "Pending";
    }
    ds->active = active;
    ds->succeeded = g->succeeded;
    ds->failed = 0;
    ds->set_replicas = 1;
}

/* While the gang waits for a lost peer's fate: the phase and counts stand. */
static void hold(desired_status *ds, const generation *g, const char *cur_phase)
{
    ds->phase = dec_str_eq(cur_phase, "Restarting") ? "Restarting" : "Running";
    ds->active = g->running;
    ds->succeeded = g->succeeded;
    ds->failed = g->holding + g->failed;
    ds->set_replicas = 1;
}

/* The running job: start, watch, restart, finish. */
static void run_job(ctx *c, desired_status *ds, pod_info *pods, size_t n, const char *cur_phase,
                    const vj_children *have)
{
    dec_ensure_children(c, have);
    int restarting = resume(c, ds, cur_phase);
    generation g;
    if (dec_tally(c, ds, pods, n, &g) != 0)
        return;
    g.gone = dec_str_eq(cur_phase, "Running") ? g.missing : 0;
    int verdict = g.permanent || g.succeeded == c->js->replicas || g.disrupted || g.failed || g.gone;
    if (verdict && c->pending) {
        hold(ds, &g, cur_phase); /* the last restart's class decides this one's: wait for it */
    } else if (g.permanent) {
        dec_fail_permanent(c, ds, pods, n, g.permanent);
    } else if (g.succeeded == c->js->replicas) {
        char msg[512];
        snprintf(msg, sizeof msg, "all %d pods of generation %d succeeded", c->js->replicas, ds->gen);
        dec_finish_job(c, ds, pods, n, 1, "ViTJobSucceeded", msg);
        dec_clean_pods(c, ds, pods, n);
    } else if (g.disrupted || g.failed || g.gone) {
        dec_restart_or_fail(c, ds, pods, n, &g); /* a pod missing while Running was lost */
    } else if (g.holding) {
        hold(ds, &g, cur_phase); /* a worker lost its peer: wait for the peer's fate */
    } else if (!c->js->elastic || c->pending || !elastic_resize(c, ds, &g)) {
        /* a resize is a restart too: it waits for a pending one's class (issue 48) */
        keep_running(c, ds, pods, n, &g, cur_phase, restarting);
    }
    free(g.slot);
}

static void suspend_job(ctx *c, desired_status *ds, pod_info *pods, size_t n, const char *cur_phase)
{
    char msg[256];
    static const char *const types[] = {"Running", "Restarting", NULL};
    snprintf(msg, sizeof msg, "ViTJob %s/%s is suspended", c->js->ns, c->js->name);
    for (size_t i = 0; i < n; i++)
        dec_remove_pod(c, &pods[i]);
    ds->phase = "Suspended";
    dec_set_cond(c, ds->conds, "Suspended", "True", "ViTJobSuspended", msg, 0);
    dec_clear_conds(c, ds->conds, "ViTJobSuspended", msg, types);
    if (!dec_str_eq(cur_phase, "Suspended"))
        dec_event(c, "Normal", "Suspended", msg);
    ds->active = ds->succeeded = ds->failed = 0;
    ds->set_replicas = 1;
}

/* -------------------------------------------------------------- admission */

/* A plan that does not fit: the job fails before any child exists. */
static void will_not_fit(ctx *c, desired_status *ds, pod_info *pods, size_t n)
{
    const vj_admission *a = c->have->plan;
    char need[32], have[32], msg[1024];
    vj_planner_quantity(need, sizeof need, a->memory_bytes);
    vj_planner_quantity(have, sizeof have, a->device_bytes);
    int w = snprintf(msg, sizeof msg, "the plan needs %s of GPU memory per rank (sharding %s, "
                     "micro-batch %d: %s) but a GPU has %s (%s); ", need, a->sharding,
                     a->micro_batch, a->parts, have, a->device_source);
    if (w > 0 && (size_t)w < sizeof msg)
        snprintf(msg + w, sizeof msg - (size_t)w, "%s%s",
                 a->suggestion[0] ? "the cheapest change that fits: " : "",
                 a->suggestion[0] ? a->suggestion
                                  : "no change the planner tries fits (activation checkpointing, "
                                    "grad-op, full, a smaller micro-batch, more replicas)");
    dec_set_cond(c, ds->conds, "WillNotFit", "True", "ExceedsGPUMemory", msg, 0);
    dec_finish_job(c, ds, pods, n, 0, "WillNotFit", msg);
}

/* An elastic job whose plan fits at replicas but not at the fewest replicas
 * it may be shrunk to: admitted (the spec is valid and runs as written;
 * the shrink may never come), with condition ElasticWillNotFit True and a
 * Warning event naming both sizes' numbers, so that the user knows before
 * a shrink. A later plan where it fits turns an existing condition False. */
static void elastic_will_not_fit(ctx *c, desired_status *ds)
{
    const vj_admission *a = c->have->plan;
    if (!a->elastic.min_replicas || !a->elastic.replicas) return;
    if (a->elastic.fits) {
        ds->el.floor = 0;
        dec_set_cond(c, ds->conds, "ElasticWillNotFit", "False", "MinReplicasFit",
                     "every size the job may be shrunk to fits the GPU memory", 1);
        return;
    }
    char need[32], have[32], at[32], msg[1024];
    vj_planner_quantity(need, sizeof need, a->elastic.memory_bytes);
    vj_planner_quantity(have, sizeof have, a->device_bytes);
    vj_planner_quantity(at, sizeof at, a->memory_bytes);
    int w = snprintf(msg, sizeof msg, "at %d replicas (%d ranks, elastic.minReplicas=%d) the plan "
                     "needs %s of GPU memory per rank (sharding %s, micro-batch %d x accumulation "
                     "%d) but a GPU has %s (%s); at %d replicas it needs %s. ",
                     a->elastic.replicas, a->elastic.world, a->elastic.min_replicas, need,
                     a->sharding, a->elastic.micro_batch, a->elastic.accumulation, have,
                     a->device_source, a->replicas, at);
    int fit_from = a->elastic.smallest_fitting > 0 && a->elastic.smallest_fitting < a->replicas
                    ? a->elastic.smallest_fitting : a->replicas;
    /* a shrink below it would fail the job (the ranks' memory check exits
     * 2, not retried): the job is not shrunk below it (elastic.h) */
    ds->el.floor = fit_from > a->elastic.min_replicas ? fit_from : 0;
    if (w > 0 && (size_t)w < sizeof msg)
        snprintf(msg + w, sizeof msg - (size_t)w, "The job is not shrunk below %d replicas "
                 "(status.elasticMinFittingReplicas): set spec.elastic.minReplicas to %d, or make "
                 "a change that needs less memory", fit_from, fit_from);
    if (!dec_cond_true(ds->conds, "ElasticWillNotFit"))
        dec_event(c, "Warning", "ElasticWillNotFit", msg);
    dec_set_cond(c, ds->conds, "ElasticWillNotFit", "True", "MinReplicasExceedsGPUMemory", msg, 0);
}

/* ----------------------------------------------------------------- decide */

/* vj_decide, or with fail_reason: vj_decide_failed. */
static int decide(const cJSON *job, const cJSON *pods_json, const vj_children *have,
                  const char *fail_reason, const char *fail_msg, long long now, vj_plan **out,
                  char *err, size_t errlen)
{
    vj_jobspec js;
    if (vj_jobspec_parse(job, &js, err, errlen) != 0)
        return -1;
    vj_plan *plan = calloc(1, sizeof *plan);
    if (plan == NULL || (plan->creates = cJSON_CreateArray()) == NULL) {
        free(plan);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* spec.elastic: the current generation's pods may be fewer than
     * spec.replicas (elastic.h); validation reads the spec as written */
    vj_jobspec run = js;
    desired_status ds;
    memset(&ds, 0, sizeof ds);
    vj_elastic_read(&js, json_get(job, "status"), &ds.el);
    run.replicas = ds.el.size;
    run.world_size = ds.el.size * js.local_ranks;
    ctx c = {.plan = plan, .js = &run, .spec = &js, .job = job, .have = have, .now = now, .ok = 1,
             .world = ds.el.size};
    pod_info *pods = NULL;
    size_t n = 0;

    /* Being deleted: the garbage collector takes the children. */
    if (json_str(json_get(job, "metadata"), "deletionTimestamp"))
        goto done;

    const cJSON *st = json_get(job, "status");
    const char *cur_phase = json_str(st, "phase");
    ds.gen = status_generation(st);
    const cJSON *v = json_get(st, "resumes");
    ds.resumes = cJSON_IsNumber(v) ? v->valueint : 0;
    v = json_get(st, "disruptionRestarts");
    ds.disruptions = cJSON_IsNumber(v) ? v->valueint : 0;
    ds.start = status_time(st, "startTime");
    ds.completion = status_time(st, "completionTime");
    ds.phase = cur_phase;
    const cJSON *conds = json_get(st, "conditions");
    ds.conds = cJSON_IsArray(conds) ? cJSON_Duplicate(conds, 1) : cJSON_CreateArray();
    const cJSON *lr = json_get(st, "lastRestart");
    ds.last_restart = cJSON_IsObject(lr) ? cJSON_Duplicate(lr, 1) : NULL;
    if (ds.conds == NULL || (lr && cJSON_IsObject(lr) && ds.last_restart == NULL)) {
        c.ok = 0;
        goto done;
    }
    int terminal = dec_str_eq(cur_phase, "Succeeded") || dec_str_eq(cur_phase, "Failed");

    int np = cJSON_IsArray(pods_json) ? cJSON_GetArraySize(pods_json) : 0;
    pods = calloc(np > 0 ? (size_t)np : 1, sizeof *pods);
    if (pods == NULL) {
        c.ok = 0;
        goto done;
    }
    const cJSON *pj;
    cJSON_ArrayForEach(pj, pods_json)
    {
        if (dec_parse_pod(pj, js.name, now, &pods[n]) == 0) {
            /* the status write of a restart was lost (a finished job's status
             * is whole: its pods of a later generation were stopped unborn) */
            if (!terminal && pods[n].gen > ds.gen)
                ds.gen = pods[n].gen;
            n++;
        }
    }

    if (!terminal) {
        char msg[512], verr[480];
        snprintf(msg, sizeof msg, "ViTJob %s/%s is created", js.ns, js.name);
        if (!dec_cond_true(ds.conds, "Created"))
            dec_event(&c, "Normal", "Created", msg);
        dec_set_cond(&c, ds.conds, "Created", "True", "ViTJobCreated", msg, 0);
        if (ds.phase == NULL)
            ds.phase = "Pending";
        if (dec_settle_restart(&c, &ds, pods, n, 0) == 2) {
            /* the restart it classified ended the job */
        } else if (fail_reason) {
            dec_finish_job(&c, &ds, pods, n, 0, fail_reason, fail_msg);
            dec_clean_pods(&c, &ds, pods, n);
        } else if (vj_jobspec_validate(&js, verr, sizeof verr) != 0) {
            snprintf(msg, sizeof msg, "invalid spec: %s", verr);
            dec_finish_job(&c, &ds, pods, n, 0, "InvalidSpec", msg);
            dec_clean_pods(&c, &ds, pods, n);
        } else if (have->plan && !have->plan->fits && n == 0 && ds.start < 0) {
            /* never started: a job that ran (an operator upgraded beneath
             * it, its pods gone between generations) is not refused */
            will_not_fit(&c, &ds, pods, n);
        } else if (js.suspend) {
            suspend_job(&c, &ds, pods, n, cur_phase);
        } else if (js.active_deadline > 0 && ds.start >= 0 && !dec_str_eq(cur_phase, "Suspended") &&
                   now >= ds.start + js.active_deadline) {
            snprintf(msg, sizeof msg, "the job ran longer than activeDeadlineSeconds=%lld",
                     js.active_deadline);
            dec_finish_job(&c, &ds, pods, n, 0, "DeadlineExceeded", msg);
            dec_clean_pods(&c, &ds, pods, n);
            for (size_t i = 0; i < n; i++) /* the deadline stops them, whatever the policy */
                if (!dec_finished(&pods[i]))
                    dec_remove_pod(&c, &pods[i]);
        } else if (js.gang != VJ_GANG_NONE && have->podgroup_crd_missing) {
            gang_unavailable(&c, &ds);
            if (n > 0) /* pods made before the CRD went: still watched */
                run_job(&c, &ds, pods, n, cur_phase, have);
        } else {
            if (js.gang != VJ_GANG_NONE) {
                static const char *const types[] = {"GangSchedulingUnavailable", NULL};
                dec_clear_conds(&c, ds.conds, "PodGroupCRDInstalled",
                                "the gang scheduler's PodGroup CRD is installed", types);
            }
            run_job(&c, &ds, pods, n, cur_phase, have);
            if (js.gang != VJ_GANG_NONE)
                watch_gang(&c, &ds, have);
            if (js.active_deadline > 0 && ds.start >= 0 && dec_str_eq(ds.phase, "Failed") == 0 &&
                dec_str_eq(ds.phase, "Succeeded") == 0)
                dec_requeue(&c, ds.start + js.active_deadline - now);
        }
        /* admitted on its plan at replicas: what its shrinks would need */
        if (have->plan && have->plan->fits && js.elastic && !dec_str_eq(ds.phase, "Failed"))
            elastic_will_not_fit(&c, &ds);
    } else {
        dec_clean_pods(&c, &ds, pods, n);
    }

    if (c.render_err[0] && c.ok) {
        /* a child that cannot be rendered: no creates, the job fails saying why */
        char msg[512];
        snprintf(msg, sizeof msg, "cannot render the job's children: %s", c.render_err);
        while (cJSON_GetArraySize(plan->creates) > 0)
            cJSON_DeleteItemFromArray(plan->creates, 0);
        dec_finish_job(&c, &ds, pods, n, 0, "InvalidSpec", msg);
        dec_clean_pods(&c, &ds, pods, n);
    }
    terminal = dec_str_eq(ds.phase, "Succeeded") || dec_str_eq(ds.phase, "Failed");
    if (terminal && c.pending) { /* the job ended otherwise before the restart was classified */
        dec_settle_restart(&c, &ds, pods, n, 1);
        dec_clean_pods(&c, &ds, pods, n);
    }
    if (terminal && js.ttl >= 0 && ds.completion >= 0) {
        if (now >= ds.completion + js.ttl)
            plan->delete_job = 1;
        else
            dec_requeue(&c, ds.completion + js.ttl - now);
    }
    dec_watch_progress(&c, &ds, st);
    if (c.ok)
        plan->status_patch = dec_status_patch(&c, &ds, st);

done:
    cJSON_Delete(ds.conds);
    cJSON_Delete(ds.last_restart);
    free(pods);
    if (!c.ok) {
        vj_plan_free(plan);
        snprintf(err, errlen, "out of memory deciding ViTJob %s", js.name);
        return -1;
    }
    *out = plan;
    return 0;
}

int vj_decide(const cJSON *job, const cJSON *pods, const vj_children *have, long long now,
              vj_plan **out, char *err, size_t errlen)
{
    return decide(job, pods, have, NULL, NULL, now, out, err, errlen);
}

int vj_decide_failed(const cJSON *job, const cJSON *pods, const char *reason,
                     const char *message, long long now, vj_plan **out, char *err, size_t errlen)
{
    static const vj_children all = {.configmap = 1, .service = 1, .service_account = 1,
                                    .role = 1, .role_binding = 1, .podgroup = 1};
    return decide(job, pods, &all, reason, message, now, out, err, errlen);
}

int vj_decide_wants_nodes(const cJSON *job, const cJSON *pods)
{
    const cJSON *meta = json_get(job, "metadata"), *st = json_get(job, "status");
    const char *name = json_str(meta, "name");
    int gen = status_generation(st);
    int peer_lost = 0; /* a pod of generation gen failed peer_lost */
    const cJSON *pj;
    pod_info pi;
    cJSON_ArrayForEach(pj, pods)
    {
        if (dec_parse_pod(pj, name, 0, &pi) != 0)
            continue;
        if (pi.gen > gen) { /* a newer generation: what was seen is older */
            gen = pi.gen;
            peer_lost = 0;
        }
        if (pi.gen == gen && pi.peer_lost)
            peer_lost = 1;
    }
    const cJSON *v = json_get(json_get(st, "lostPeer"), "generation");
    return peer_lost || (cJSON_IsNumber(v) && v->valueint == gen) ||
           dec_str_eq(json_str(json_get(st, "lastRestart"), "classifiedAs"), "Pending");
}
