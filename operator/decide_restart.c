/* operator/decide_restart.c - gang restarts and failures: a failed,
 * disrupted, lost or missing pod restarts the gang as the next generation
 * or, once backoffLimit is spent, fails the job; a permanent exit fails it
 * for good; a restart caused by a `closed` report alone is classified when
 * the evidence comes (decide.h, "Restart now, classify later"); and
 * status.lastRestart records every restart.
 *
 * Owns: dec_restart_or_fail, dec_fail_permanent, the classification of a
 * pending restart (dec_settle_restart) and status.lastRestart
 * (dec_last_restart_new, which decide.c's elastic resizes call too).
 * Must not: do I/O, read the clock, or write status.progress.
 *
 * Choice (documented in decide.h's rules and the CRD):
 * - When a generation shows both a disruption and retryable failures, it is a
 *   disruption: peers of a lost pod fail because they lost it.
 */
#include "decide_internal.h"

#include "exitcode.h"
#include "json.h"
#include "timefmt.h"
#include "workerline.h"

#include <stdio.h>
#include <string.h>

/* --------------------------------------------------------------- failures */

/* ": <the worker's own error>" from pi's termination message (workerline.h),
 * or "" when it left none, into out. */
static const char *worker_says(char *out, size_t outlen, const pod_info *pi)
{
    char why[VJ_WORKER_ERROR_MAX];
    if (outlen == 0)
        return out;
    out[0] = '\0';
    if (vj_worker_error(pi->term_msg, why, sizeof why))
        snprintf(out, outlen, ": %s", why);
    return out;
}

/* The Failed condition's message for bad's permanent exit (2 or 3), into
 * msg; returns its reason. */
static const char *permanent_exit(char *msg, size_t len, const pod_info *bad)
{
    char says[VJ_WORKER_ERROR_MAX + 2];
    int config = bad->exit_code == VITJOB_EXIT_CONFIG;
    snprintf(msg, len, "pod %s exited with code %d (%s), permanent, not retried%s", bad->name,
             bad->exit_code, config ? "bad config or spec" : "bad or missing data",
             worker_says(says, sizeof says, bad));
    return config ? "PermanentError" : "InvalidData";
}

/* A worker exited 2 or 3: the job fails for good. */
void dec_fail_permanent(ctx *c, desired_status *ds, pod_info *pods, size_t n,
                        const pod_info *bad)
{
    char msg[1024];
    const char *reason = permanent_exit(msg, sizeof msg, bad);
    dec_finish_job(c, ds, pods, n, 0, reason, msg);
    dec_clean_pods(c, ds, pods, n);
}

/* ----------------------------------------------------- status.lastRestart */

/* ds->last_restart = a new record of the restart that ended generation
 * `gen` (decide.h): why, as what, the pod that caused it, and for a pending
 * one the time by which it is classified. */
void dec_last_restart_new(ctx *c, desired_status *ds, int gen, const char *cause,
                          const char *cls, const pod_info *pod, long long classify_by,
                          const char *msg)
{
    char ts[TIMEFMT_LEN];
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddNumberToObject(o, "generation", gen) &&
             cJSON_AddStringToObject(o, "cause", cause) &&
             cJSON_AddStringToObject(o, "classifiedAs", cls);
    if (ok && pod)
        ok = cJSON_AddStringToObject(o, "pod", pod->name) &&
             (pod->node == NULL || cJSON_AddStringToObject(o, "node", pod->node));
    timefmt_rfc3339(ts, c->now, 0, 0);
    ok = ok && cJSON_AddStringToObject(o, "time", ts);
    if (ok && classify_by >= 0) {
        timefmt_rfc3339(ts, classify_by, 0, 0);
        ok = cJSON_AddStringToObject(o, "classifyBy", ts) != NULL;
    }
    ok = ok && cJSON_AddStringToObject(o, "message", msg);
    if (!ok) {
        cJSON_Delete(o);
        c->ok = 0;
        return;
    }
    cJSON_Delete(ds->last_restart);
    ds->last_restart = o;
}

/* The pending restart's classification, written into ds->last_restart:
 * classifiedAs, its message, classifiedAt (classifyBy stays, as history). */
static void last_restart_classified(ctx *c, desired_status *ds, const char *cls, const char *msg)
{
    char ts[TIMEFMT_LEN];
    cJSON *o = ds->last_restart;
    timefmt_rfc3339(ts, c->now, 0, 0);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "classifiedAs");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "classifiedAt");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "message");
    if (!cJSON_AddStringToObject(o, "classifiedAs", cls) ||
        !cJSON_AddStringToObject(o, "classifiedAt", ts) ||
        !cJSON_AddStringToObject(o, "message", msg))
        c->ok = 0;
}

typedef enum { RESTART_PENDING, RESTART_DISRUPTION, RESTART_FAILURE, RESTART_PERMANENT } restart_class;

/* What the evidence says of the pending restart's lost pod `pi` (NULL:
 * gone from the API) and why; RESTART_PENDING while there is none yet.
 * *force: the pod must be force-deleted (nothing on its node will). */
static restart_class classify(ctx *c, const pod_info *pi, int out_of_time, int *force, char *why,
                              size_t whylen)
{
    char says[VJ_WORKER_ERROR_MAX + 2];
    const vj_node_health *nh = pi ? dec_node_health(c->have, pi->node) : NULL;
    *force = 0;
    if (pi == NULL) {
        snprintf(why, whylen, "the pod is gone and its kubelet never reported that it ended");
        return RESTART_DISRUPTION;
    }
    if (pi->phase == PP_FAILED && vj_exit_permanent(pi->exit_code)) {
        snprintf(why, whylen, "its kubelet reported exit code %d%s", pi->exit_code,
                 worker_says(says, sizeof says, pi));
        return RESTART_PERMANENT;
    }
    if (pi->disruption || pi->node_lost) {
        *force = pi->node_lost;
        snprintf(why, whylen, "it was disrupted (evicted, preempted, deleted or its node lost)");
        return RESTART_DISRUPTION;
    }
    if (dec_finished(pi)) {
        snprintf(why, whylen, "its kubelet reported that it ended with exit code %d%s",
                 pi->exit_code, worker_says(says, sizeof says, pi));
        return RESTART_FAILURE;
    }
    if (nh && nh->lost) {
        *force = 1;
        snprintf(why, whylen, "node %s is lost: %s", pi->node, nh->why);
        return RESTART_DISRUPTION;
    }
    if (pi->deleting) {
        snprintf(why, whylen, "it is being deleted");
        return RESTART_DISRUPTION;
    }
    if (!out_of_time)
        return RESTART_PENDING;
    *force = 1;
    snprintf(why, whylen, "neither its kubelet nor its node said anything within %d s: its node "
             "is taken for lost", VJ_RESTART_CLASSIFY_S);
    return RESTART_DISRUPTION;
}

/* Classifies the pending restart (status.lastRestart.classifiedAs Pending)
 * from the evidence at hand (decide.h). Returns 1 while it stays pending
 * (its pod kept, c->pending set, requeued for its deadline), 2 when the
 * classification ended the job (backoffLimit exceeded or a permanent exit:
 * the generation the restart started is stopped and not counted), else 0.
 * With `now_or_never` (the job ended otherwise meanwhile) it is classified
 * with what is known, and never ends the job. */
int dec_settle_restart(ctx *c, desired_status *ds, pod_info *pods, size_t n, int now_or_never)
{
    const cJSON *lr = ds->last_restart;
    const cJSON *g = json_get(lr, "generation");
    const char *pod = json_str(lr, "pod");
    long long by;
    if (!dec_str_eq(json_str(lr, "classifiedAs"), "Pending") || !cJSON_IsNumber(g) || pod == NULL)
        return 0;
    if (timefmt_parse(json_str(lr, "classifyBy"), &by) != 0)
        by = c->now;
    pod_info *pi = NULL;
    for (size_t i = 0; i < n && pi == NULL; i++)
        if (dec_str_eq(pods[i].name, pod) && pods[i].gen == g->valueint)
            pi = &pods[i];
    int force;
    char why[VJ_WORKER_ERROR_MAX + 128], msg[1024], says[VJ_WORKER_ERROR_MAX + 2];
    restart_class rc = classify(c, pi, now_or_never || c->now >= by, &force, why, sizeof why);
    c->pending = 0;
    if (pi)
        pi->evidence = 0;
    if (rc == RESTART_PENDING) {
        pi->evidence = 1;
        c->pending = 1;
        dec_requeue(c, by - c->now);
        return 1;
    }
    const vj_jobspec *js = c->js;
    const char *reason = "BackoffLimitExceeded"; /* when a failure ends the job */
    int stop = 0;
    if (rc == RESTART_DISRUPTION) {
        ds->disruptions++;
        snprintf(msg, sizeof msg, "the restart of generation %d after pod %s was lost is a "
                 "disruption: %s; backoffLimit not spent", g->valueint, pod, why);
        last_restart_classified(c, ds, "Disruption", msg);
        dec_event(c, "Normal", "RestartClassified", msg);
    } else {
        int spent = ds->gen - ds->resumes - ds->disruptions; /* this restart included */
        stop = !now_or_never && (rc == RESTART_PERMANENT || spent > js->backoff_limit);
        if (rc == RESTART_PERMANENT)
            reason = permanent_exit(msg, sizeof msg, pi);
        else if (stop)
            snprintf(msg, sizeof msg, "pod %s failed with exit code %d%s; backoffLimit %d reached "
                     "after %d restart(s)", pod, pi->exit_code, worker_says(says, sizeof says, pi),
                     js->backoff_limit, spent - 1);
        else
            snprintf(msg, sizeof msg, "the restart of generation %d after pod %s was lost is a "
                     "retryable failure: %s; backoffLimit spent %d of %d", g->valueint, pod, why,
                     spent, js->backoff_limit);
        if (stop) {
            size_t w = strlen(msg);
            snprintf(msg + w, sizeof msg - w, "; generation %d, started before this was known, "
                     "is stopped and not counted", ds->gen);
        }
        last_restart_classified(c, ds, rc == RESTART_PERMANENT ? "PermanentFailure"
                                       : "RetryableFailure", msg);
        if (!stop)
            dec_event(c, "Warning", "RestartClassified", msg);
    }
    if (pi && !dec_kept(c, pi)) {
        pi->node_lost = pi->node_lost || force;
        dec_remove_pod(c, pi);
    }
    if (!stop)
        return 0;
    ds->gen--; /* the restart is undone: the job ends as if it had waited */
    dec_finish_job(c, ds, pods, n, 0, reason, msg);
    dec_clean_pods(c, ds, pods, n);
    return 2;
}

/* --------------------------------------------------------------- restarts */

/* A pod failed, was disrupted or disappeared: the whole gang restarts as
 * the next generation, or the job fails once backoffLimit is spent
 * (disruptions do not spend it). */
void dec_restart_or_fail(ctx *c, desired_status *ds, pod_info *pods, size_t n,
                         const generation *g)
{
    const vj_jobspec *js = c->js;
    int R = js->replicas;
    char msg[900], m2[1280], says[VJ_WORKER_ERROR_MAX + 2];
    /* an unconfirmed `closed` loss alone: restart now, classify later */
    const pod_info *pending = g->suspect && g->disrupted == 1 ? g->suspect : NULL;
    int disruption = !pending && (g->disrupted > 0 || g->gone > 0 || g->failed == 0);
    const pod_info *bad = pending ? pending : g->first_bad;
    if (bad == NULL)
        snprintf(msg, sizeof msg, "%d pod(s) of generation %d disappeared", g->missing, ds->gen);
    else if (bad->phase == PP_FAILED && !bad->disruption)
        snprintf(msg, sizeof msg, "pod %s failed with exit code %d%s", bad->name, bad->exit_code,
                 worker_says(says, sizeof says, bad));
    else if (bad->lost_why[0])
        snprintf(msg, sizeof msg, "pod %s was lost: %s", bad->name, bad->lost_why);
    else if (bad->kueue_evicted)
        snprintf(msg, sizeof msg, "pod %s was evicted by Kueue (%s): %s", bad->name,
                 bad->kueue_why ? bad->kueue_why : "no reason given",
                 bad->kueue_msg ? bad->kueue_msg : "");
    else
        snprintf(msg, sizeof msg, "pod %s was disrupted (evicted, preempted, deleted or its "
                 "node lost)", bad->name);
    int spent = ds->gen - ds->resumes - ds->disruptions;
    if (!disruption && !pending && spent >= js->backoff_limit) {
        snprintf(m2, sizeof m2, "%s; backoffLimit %d reached after %d restart(s)", msg,
                 js->backoff_limit, spent);
        for (int r = 0; r < R; r++)
            if (g->slot[r] && !dec_finished(g->slot[r]) && js->clean_pod_policy != VJ_CLEAN_NONE)
                dec_remove_pod(c, g->slot[r]);
        dec_finish_job(c, ds, pods, n, 0, "BackoffLimitExceeded", m2);
        dec_clean_pods(c, ds, pods, n);
        return;
    }
    for (int r = 0; r < R; r++)
        if (g->slot[r] && !dec_kept(c, g->slot[r]) && g->slot[r] != pending)
            dec_remove_pod(c, g->slot[r]); /* the pending one is the evidence: it stays */
    ds->gen++;
    if (disruption)
        ds->disruptions++;
    if (g->kueue_evicted)
        ds->start = -1; /* as after a suspend: deadlines count from the next admission */
    if (pending)
        snprintf(m2, sizeof m2, "%s; gang restart as generation %d at once (classified when "
                 "known, within %d s: a disruption if its node is lost, a retryable failure "
                 "that spends backoffLimit if its kubelet reports that it ended)", msg, ds->gen,
                 VJ_RESTART_CLASSIFY_S);
    else
        snprintf(m2, sizeof m2, "%s; gang restart as generation %d (%s)", msg, ds->gen,
                 disruption ? "disruption, backoffLimit not spent" : "retryable failure");
    const char *reason = pending ? "PeerLost" : disruption ? "Disruption" : "RetryableFailure";
    static const char *const running_types[] = {"Running", NULL};
    dec_set_cond(c, ds->conds, "Restarting", "True", reason, m2, 0);
    if (pending)
        dec_requeue(c, VJ_RESTART_CLASSIFY_S); /* classified by then, evidence or not */
    dec_last_restart_new(c, ds, ds->gen - 1,
                         pending ? "PeerLost" : disruption ? "Disruption" : "Failure",
                         pending ? "Pending" : disruption ? "Disruption" : "RetryableFailure", bad,
                         pending ? c->now + VJ_RESTART_CLASSIFY_S : -1, m2);
    dec_clear_conds(c, ds->conds, "ViTJobRestarting", m2, running_types);
    dec_event(c, "Warning", "Restarting", m2);
    for (int r = 0; r < R; r++)
        dec_create_generation_pod(c, r, ds->gen);
    ds->phase = "Restarting";
    ds->active = R;
    ds->succeeded = ds->failed = 0;
    ds->set_replicas = 1;
}
