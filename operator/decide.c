/* operator/decide.c - see decide.h.
 *
 * Owns: the lifecycle rules of a ViTJob and the operator's status fields.
 * Must not: do I/O, read the clock, or write status.progress.
 *
 * Choices (documented in decide.h's rules and the CRD):
 * - The pods' generation is status.restarts + status.resumes: restarts counts
 *   the gang restarts after a failure or a disruption (kubectl get vj's
 *   RESTARTS), resumes the fresh generations that leaving Suspended started
 *   (counted apart, as Kubeflow does). status.disruptionRestarts counts the
 *   restarts that did not spend backoffLimit (disruptions); restarts -
 *   disruptionRestarts is what backoffLimit limits.
 * - When a generation shows both a disruption and retryable failures, it is a
 *   disruption: peers of a lost pod fail because they lost it.
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
 * - A terminating pod is force-deleted (grace 0) once its deletionTimestamp
 *   has passed, or at once when its node is lost; until then decide requeues
 *   at its deletionTimestamp.
 * - replicas counts are frozen once the job is finished.
 */
#include "decide.h"

#include "config.h"
#include "elastic.h"
#include "exitcode.h"
#include "jobspec.h"
#include "json.h"
#include "kueue.h"
#include "timefmt.h"
#include "render.h"
#include "workerline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum pod_phase { PP_PENDING, PP_RUNNING, PP_SUCCEEDED, PP_FAILED, PP_UNKNOWN };

typedef struct {
    const char *name;
    int rank, gen;
    enum pod_phase phase;
    int deleting;         /* metadata.deletionTimestamp set */
    long long del_ts;     /* its value (or now if unparseable) */
    int disruption;       /* DisruptionTarget True, or a disruption reason */
    int node_lost;        /* the node is gone: force-delete at once */
    int exit_code;        /* worker container's terminated exit code, -1 = none */
    int peer_lost;        /* failed saying it lost a peer (its last line: class=peer_lost) */
    const char *term_msg; /* the worker container's termination message, or NULL */
    long long finished_ts;/* the worker container's finishedAt (now if unknown) */
    const char *node;     /* spec.nodeName, or NULL */
    int placed;           /* bound to a node: nodeName set, or PodScheduled True */
    int unschedulable;    /* PodScheduled False, reason Unschedulable (and not placed) */
    long long unsched_ts; /* that condition's lastTransitionTime (now if unknown) */
    long long created;    /* metadata.creationTimestamp, or -1 */
    char lost_why[256];   /* why it was judged lost (vj_decide's lost-pod rule), or "" */
    int suspect;          /* lost by a `closed` report its kubelet has not confirmed */
    int gated;            /* waits at Kueue's admission gate (kueue.h) */
    int kueue_evicted;    /* Kueue evicted its group (preempted): a disruption */
    const char *kueue_why;/* Kueue's reason and message for it, or NULL */
    const char *kueue_msg;
    int evidence;         /* the pending restart's lost pod: kept until it is classified */
    int removed;          /* this plan deletes it */
} pod_info;

#define MAX_AVOID 16 /* nodes the next generation keeps off, at most */

typedef struct {
    vj_plan *plan;
    const vj_jobspec *js;   /* replicas: the current generation's size (spec.elastic) */
    const vj_jobspec *spec; /* the spec as written (spec.replicas) */
    const cJSON *job;
    const vj_children *have;
    const char *avoid[MAX_AVOID]; /* nodes of lost pods: the next generation keeps off */
    int n_avoid;
    const char *prefer_off; /* a suspect's node: the next generation prefers other nodes */
    int pending;          /* a restart awaits its classification: verdicts wait for it */
    long long now;
    int world;            /* the pods of the generation being created (spec.elastic) */
    int ok;               /* 0 after an allocation failure */
    char render_err[256]; /* the first child that could not be rendered, and why */
    size_t cap_del, cap_ev;
} ctx;

/* ---------------------------------------------------------------- helpers */

static int str_eq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static int parse_int_str(const char *s, int *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0 || v > 1000000000)
        return -1;
    *out = (int)v;
    return 0;
}

static void requeue(ctx *c, long long secs)
{
    if (secs < 1)
        secs = 1;
    if (c->plan->requeue_after == 0 || secs < c->plan->requeue_after)
        c->plan->requeue_after = secs;
}

static void event(ctx *c, const char *type, const char *reason, const char *msg)
{
    vj_plan *p = c->plan;
    if (p->n_events == c->cap_ev) {
        size_t n = c->cap_ev ? 2 * c->cap_ev : 4;
        vj_event *e = realloc(p->events, n * sizeof *e);
        if (e == NULL) {
            c->ok = 0;
            return;
        }
        p->events = e;
        c->cap_ev = n;
    }
    vj_event *e = &p->events[p->n_events++];
    snprintf(e->type, sizeof e->type, "%s", type);
    snprintf(e->reason, sizeof e->reason, "%s", reason);
    snprintf(e->message, sizeof e->message, "%s", msg ? msg : "");
}

static void delete_pod(ctx *c, pod_info *pi, int force)
{
    vj_plan *p = c->plan;
    if (p->n_deletes == c->cap_del) {
        size_t n = c->cap_del ? 2 * c->cap_del : 8;
        vj_pod_delete *d = realloc(p->deletes, n * sizeof *d);
        if (d == NULL) {
            c->ok = 0;
            return;
        }
        p->deletes = d;
        c->cap_del = n;
    }
    vj_pod_delete *d = &p->deletes[p->n_deletes++];
    snprintf(d->name, sizeof d->name, "%s", pi->name);
    d->force = force;
    pi->removed = 1;
}

/* Makes the pod go away: a graceful delete, or a forced one when it is
 * already terminating past its deadline or its node is lost. */
static void remove_pod(ctx *c, pod_info *pi)
{
    if (pi->removed || pi->evidence)
        return;
    if (!pi->deleting) {
        delete_pod(c, pi, pi->node_lost);
        return;
    }
    if (pi->node_lost || pi->del_ts <= c->now)
        delete_pod(c, pi, 1);
    else {
        pi->removed = 1; /* on its way out */
        requeue(c, pi->del_ts - c->now);
    }
}

static int finished(const pod_info *pi)
{
    return pi->phase == PP_SUCCEEDED || pi->phase == PP_FAILED;
}

/* cleanPodPolicy None keeps a finished pod, whatever its generation. */
static int kept(const ctx *c, const pod_info *pi)
{
    return c->js->clean_pod_policy == VJ_CLEAN_NONE && finished(pi) && !pi->deleting;
}

static void create(ctx *c, cJSON *obj)
{
    if (obj == NULL || !cJSON_AddItemToArray(c->plan->creates, obj)) {
        cJSON_Delete(obj);
        c->ok = 0;
    }
}

/* ------------------------------------------------------------ pods parsed */

/* The worker container's terminated state (or its last one), or NULL. */
static const cJSON *worker_terminated(const cJSON *pod)
{
    const cJSON *cs;
    cJSON_ArrayForEach(cs, json_get(json_get(pod, "status"), "containerStatuses"))
    {
        if (!str_eq(json_str(cs, "name"), VJ_CONTAINER))
            continue;
        const cJSON *t = json_get(json_get(cs, "state"), "terminated");
        return t ? t : json_get(json_get(cs, "lastState"), "terminated");
    }
    return NULL;
}

/* Its exit code, -1 = none. */
static int worker_exit_code(const cJSON *term)
{
    const cJSON *code = json_get(term, "exitCode");
    return cJSON_IsNumber(code) ? code->valueint : -1;
}

/* Whether the worker's last line (exit_code=N class=NAME ...), which
 * terminationMessagePolicy FallbackToLogsOnError puts at the end of the
 * message, names class peer_lost. */
static int says_peer_lost(const char *msg)
{
    const char *last = NULL;
    for (const char *p = msg; p && (p = strstr(p, "exit_code=")) != NULL; p++)
        last = p;
    if (last == NULL)
        return 0;
    const char *end = strchr(last, '\n');
    const char *cls = strstr(last, " " VJ_EXIT_CLASS_PEER_LOST " ");
    return cls != NULL && (end == NULL || cls < end);
}

static int parse_pod(const cJSON *pod, const char *job, long long now, pod_info *pi)
{
    const cJSON *meta = json_get(pod, "metadata");
    const cJSON *labels = json_get(meta, "labels");
    memset(pi, 0, sizeof *pi);
    pi->name = json_str(meta, "name");
    if (pi->name == NULL || !str_eq(json_str(labels, VJ_LABEL_JOB), job) ||
        parse_int_str(json_str(labels, VJ_LABEL_RANK), &pi->rank) != 0 ||
        parse_int_str(json_str(labels, VJ_LABEL_RESTART), &pi->gen) != 0)
        return -1;
    const cJSON *st = json_get(pod, "status");
    const char *phase = json_str(st, "phase");
    pi->phase = str_eq(phase, "Running")     ? PP_RUNNING
                : str_eq(phase, "Succeeded") ? PP_SUCCEEDED
                : str_eq(phase, "Failed")    ? PP_FAILED
                : str_eq(phase, "Unknown")   ? PP_UNKNOWN
                                             : PP_PENDING;
    const char *dts = json_str(meta, "deletionTimestamp");
    if (dts) {
        pi->deleting = 1;
        if (timefmt_parse(dts, &pi->del_ts) != 0)
            pi->del_ts = now;
    }
    const char *reason = json_str(st, "reason");
    static const char *const disruption_reasons[] = {"Evicted", "NodeLost", "Preempted", "Shutdown",
                                                     "NodeShutdown", "Terminated", NULL};
    for (int i = 0; disruption_reasons[i]; i++)
        if (str_eq(reason, disruption_reasons[i]))
            pi->disruption = 1;
    if (str_eq(reason, "NodeLost") || pi->phase == PP_UNKNOWN)
        pi->node_lost = 1;
    const cJSON *cond;
    cJSON_ArrayForEach(cond, json_get(st, "conditions"))
    {
        if (str_eq(json_str(cond, "type"), "DisruptionTarget") &&
            str_eq(json_str(cond, "status"), "True")) {
            pi->disruption = 1;
            if (str_eq(json_str(cond, "reason"), "DeletionByTaintManager"))
                pi->node_lost = 1;
        }
    }
    pi->gated = vj_kueue_gated(pod);
    if (vj_kueue_evicted(pod, &pi->kueue_why, &pi->kueue_msg))
        pi->disruption = pi->kueue_evicted = 1;
    if (timefmt_parse(json_str(meta, "creationTimestamp"), &pi->created) != 0)
        pi->created = -1;
    pi->node = json_str(json_get(pod, "spec"), "nodeName");
    pi->placed = pi->node != NULL;
    cJSON_ArrayForEach(cond, json_get(st, "conditions"))
    {
        if (!str_eq(json_str(cond, "type"), "PodScheduled"))
            continue;
        if (str_eq(json_str(cond, "status"), "True"))
            pi->placed = 1;
        else if (str_eq(json_str(cond, "reason"), "Unschedulable") && !pi->placed) {
            pi->unschedulable = 1;
            if (timefmt_parse(json_str(cond, "lastTransitionTime"), &pi->unsched_ts) != 0)
                pi->unsched_ts = now;
        }
    }
    const cJSON *term = worker_terminated(pod);
    pi->exit_code = worker_exit_code(term);
    pi->term_msg = json_str(term, "message");
    if (pi->phase == PP_FAILED && says_peer_lost(pi->term_msg))
        pi->peer_lost = 1;
    const char *fin = json_str(term, "finishedAt");
    if (fin == NULL || timefmt_parse(fin, &pi->finished_ts) != 0)
        pi->finished_ts = now;
    return 0;
}

/* ------------------------------------------------------------- conditions */

/* Sets condition `type` in conds: lastTransitionTime changes only with the
 * status. When only_if_present, a missing condition is not added. */
static void set_cond(ctx *c, cJSON *conds, const char *type, const char *status,
                     const char *reason, const char *message, int only_if_present)
{
    char ts[TIMEFMT_LEN];
    cJSON *cond = NULL, *it;
    cJSON_ArrayForEach(it, conds)
    {
        if (str_eq(json_str(it, "type"), type)) {
            cond = it;
            break;
        }
    }
    if (cond == NULL && only_if_present)
        return;
    const char *old_ltt = cond ? json_str(cond, "lastTransitionTime") : NULL;
    int keep_time = cond && str_eq(json_str(cond, "status"), status) && old_ltt;
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

static int cond_true(const cJSON *conds, const char *type)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, conds)
    {
        if (str_eq(json_str(it, "type"), type))
            return str_eq(json_str(it, "status"), "True");
    }
    return 0;
}

/* Sets each of these conditions False (if present and True). */
static void clear_conds(ctx *c, cJSON *conds, const char *reason, const char *msg,
                        const char *const *types)
{
    for (; *types; types++)
        if (cond_true(conds, *types))
            set_cond(c, conds, *types, "False", reason, msg, 1);
}

/* ----------------------------------------------------------------- decide */

/* The pods' generation the status records: restarts + resumes. */
static int status_generation(const cJSON *st)
{
    const cJSON *r = json_get(st, "restarts"), *u = json_get(st, "resumes");
    return (cJSON_IsNumber(r) ? r->valueint : 0) + (cJSON_IsNumber(u) ? u->valueint : 0);
}

typedef struct {
    const char *phase;
    int gen, disruptions, resumes; /* gen: the pods' generation (restarts + resumes) */
    long long start, completion; /* -1 = unset */
    cJSON *conds;                /* owned */
    cJSON *last_restart;         /* status.lastRestart as it will be; owned, NULL = none */
    int active, succeeded, failed;
    int set_replicas;
    vj_elastic_state el;         /* spec.elastic: the size and its state, as they will be */
} desired_status;

static void finish_job(ctx *c, desired_status *ds, pod_info *pods, size_t n, int success,
                       const char *reason, const char *msg)
{
    static const char *const running_types[] = {"Running", "Restarting", NULL};
    ds->phase = success ? "Succeeded" : "Failed";
    ds->completion = c->now;
    if (success) {
        set_cond(c, ds->conds, "Succeeded", "True", reason, msg, 0);
        clear_conds(c, ds->conds, "ViTJobSucceeded", msg, running_types);
        event(c, "Normal", reason, msg);
    } else {
        set_cond(c, ds->conds, "Failed", "True", reason, msg, 0);
        clear_conds(c, ds->conds, "ViTJobFailed", msg, running_types);
        event(c, "Warning", reason, msg);
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
static void clean_pods(ctx *c, const desired_status *ds, pod_info *pods, size_t n)
{
    vj_clean_policy policy = c->js->clean_pod_policy;
    int failed = str_eq(ds->phase, "Failed");
    for (size_t i = 0; i < n; i++) {
        pod_info *pi = &pods[i];
        int del = policy == VJ_CLEAN_ALL ||
                  (!finished(pi) && ((failed && policy != VJ_CLEAN_NONE) ||
                                     policy == VJ_CLEAN_RUNNING)) ||
                  (pi->deleting && pi->gen < ds->gen) ||
                  (pi->gen > ds->gen && !kept(c, pi)); /* a generation stopped unborn */
        if (del)
            remove_pod(c, pi);
    }
}

/* Adds a rendered child to the creates; a child that could not be rendered
 * is carried with its message (render_err), and fails the job (decide()). */
static void create_rendered(ctx *c, cJSON *obj, const char *err)
{
    if (obj) {
        create(c, obj);
    } else if (strstr(err, "out of memory")) {
        c->ok = 0;
    } else if (!c->render_err[0]) {
        snprintf(c->render_err, sizeof c->render_err, "%s", err);
    }
}

static void create_generation_pod(ctx *c, int rank, int gen)
{
    char err[256];
    cJSON *pod = vj_render_pod(c->job, rank, gen, err, sizeof err);
    if (pod && ((c->world != c->spec->replicas && vj_render_set_replicas(pod, c->world) != 0) ||
                (c->n_avoid > 0 && vj_render_avoid_nodes(pod, c->avoid, (size_t)c->n_avoid) != 0) ||
                (c->prefer_off && vj_render_prefer_off_node(pod, c->prefer_off) != 0))) {
        cJSON_Delete(pod);
        c->ok = 0;
        return;
    }
    create_rendered(c, pod, err);
}

/* What the pods need, before them (creates are applied in order): the
 * config, the Service, and the identity when the job has its own. */
static void ensure_children(ctx *c, const vj_children *have)
{
    char err[256];
    if (!have->configmap)
        create_rendered(c, vj_render_configmap(c->job, err, sizeof err), err);
    if (!have->service)
        create_rendered(c, vj_render_service(c->job, err, sizeof err), err);
    if (!c->js->service_account) {
        if (!have->service_account)
            create_rendered(c, vj_render_service_account(c->job, err, sizeof err), err);
        if (!have->role)
            create_rendered(c, vj_render_role(c->job, err, sizeof err), err);
        if (!have->role_binding)
            create_rendered(c, vj_render_role_binding(c->job, err, sizeof err), err);
    }
    if (c->js->gang != VJ_GANG_NONE && !have->podgroup && !have->podgroup_crd_missing)
        create_rendered(c, vj_render_podgroup(c->job, err, sizeof err), err);
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
    if (!cond_true(ds->conds, "GangSchedulingUnavailable"))
        event(c, "Warning", "PodGroupCRDMissing", msg);
    set_cond(c, ds->conds, "GangSchedulingUnavailable", "True", "PodGroupCRDMissing", msg, 0);
    requeue(c, VJ_GANG_MISSING_RECHECK_S);
}

/* Whether the PodGroup waits for its gang, since when, and the scheduler's
 * words: volcano's condition Unschedulable (its message), or a phase before
 * the gang is placed (volcano Pending; coscheduling Pending, PreScheduling,
 * Scheduling). */
/* The PodGroup's (last) condition Unschedulable True (volcano's), or NULL. */
static const cJSON *podgroup_unschedulable(const cJSON *pg)
{
    const cJSON *cond, *unsched = NULL;
    cJSON_ArrayForEach(cond, json_get(json_get(pg, "status"), "conditions"))
    {
        if (str_eq(json_str(cond, "type"), "Unschedulable") &&
            str_eq(json_str(cond, "status"), "True"))
            unsched = cond;
    }
    return unsched;
}

static int podgroup_waiting(const ctx *c, const cJSON *pg, long long *since, char *why,
                            size_t whylen)
{
    const cJSON *st = json_get(pg, "status");
    const char *phase = json_str(st, "phase");
    const cJSON *unsched = podgroup_unschedulable(pg);
    int waiting = unsched != NULL || str_eq(phase, "Pending") ||
                  str_eq(phase, "PreScheduling") || str_eq(phase, "Scheduling");
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
    int waiting_job = str_eq(ds->phase, "Pending") || str_eq(ds->phase, "Restarting");
    if (waiting_job && have->podgroup_obj &&
        podgroup_waiting(c, have->podgroup_obj, &since, why, sizeof why)) {
        requeue(c, timeout < 30 ? timeout : 30);
        if (c->now < since + timeout) {
            requeue(c, since + timeout - c->now);
            return;
        }
        snprintf(msg, sizeof msg,
                 "PodGroup %s/%s has waited for the %s gang scheduler longer than "
                 "scheduleTimeoutSeconds=%lld: %s",
                 js->ns, js->name, js->gang_name, timeout, why);
        if (!cond_true(ds->conds, "GangUnschedulable"))
            event(c, "Warning", "GangUnschedulable", msg);
        set_cond(c, ds->conds, "GangUnschedulable", "True", "PodGroupUnschedulable", msg, 0);
        return;
    }
    if (waiting_job)
        requeue(c, timeout < 30 ? timeout : 30);
    static const char *const types[] = {"GangUnschedulable", NULL};
    snprintf(msg, sizeof msg, "PodGroup %s/%s is no longer waiting for its gang", js->ns,
             js->name);
    clear_conds(c, ds->conds, "PodGroupScheduled", msg, types);
}

/* Leaving Suspended: a fresh generation when pods ran before (it resumes
 * from the checkpoint), without spending backoffLimit. Returns whether the
 * job still counts as restarting. */
static int resume(ctx *c, desired_status *ds, const char *cur_phase)
{
    int restarting = str_eq(cur_phase, "Restarting");
    if (!str_eq(cur_phase, "Suspended"))
        return restarting;
    char msg[512];
    snprintf(msg, sizeof msg, "ViTJob %s/%s is resumed", c->js->ns, c->js->name);
    set_cond(c, ds->conds, "Suspended", "False", "ViTJobResumed", msg, 1);
    if (ds->start >= 0) {
        ds->gen++;
        ds->resumes++;
        ds->start = -1;
        restarting = 0;
    }
    event(c, "Normal", "Resumed", msg);
    return restarting;
}

/* The current generation's pods by rank, and what they say together. */
typedef struct {
    pod_info **slot;                  /* [replicas]: the pod of each rank, or NULL */
    int succeeded, running, missing, failed, disrupted;
    int holding;                      /* failures that only lost a peer, waiting for its fate */
    pod_info *suspect;                /* lost by an unconfirmed `closed` report, or NULL */
    int gone;                         /* pods missing while the job ran: lost (disruptions) */
    int gated;                        /* pods waiting at Kueue's admission gate */
    int kueue_evicted;                /* pods whose group Kueue evicted */
    pod_info *permanent, *first_bad;  /* the first permanent exit; the first failure to report */
} generation;

/* Workers that failed only because they lost a peer (class peer_lost) while
 * another pod of the generation still looks alive: when a node dies its pods'
 * connections break at once, long before Kubernetes declares the node lost
 * and evicts them. The gang waits (at most the node-lost toleration plus
 * VJ_PEER_LOST_WAIT_S after the first such failure) for the peer's fate: a
 * disruption then restarts it without spending backoffLimit; a peer that fails
 * too, or the end of the wait, makes it a retryable failure. */
static void hold_for_lost_peer(ctx *c, generation *g)
{
    int R = c->js->replicas, lost = 0, others_alive = 0;
    long long since = -1;
    for (int r = 0; r < R; r++) {
        const pod_info *pi = g->slot[r];
        if (pi == NULL)
            continue;
        if (pi->phase == PP_FAILED && pi->peer_lost && !pi->disruption && !pi->deleting) {
            lost++;
            if (since < 0 || pi->finished_ts < since)
                since = pi->finished_ts;
        } else if (!finished(pi) && !pi->disruption && !pi->deleting && pi->phase != PP_UNKNOWN) {
            others_alive++;
        }
    }
    if (lost == 0 || lost != g->failed || g->disrupted > 0 || g->permanent || others_alive == 0)
        return;
    long long until = since + c->js->node_lost_toleration + VJ_PEER_LOST_WAIT_S;
    if (c->now >= until)
        return;
    g->holding = lost;
    g->failed = 0;
    requeue(c, until - c->now);
}

/* status.lostPeer, as a worker of the current generation wrote it. */
typedef struct {
    int rank, by, heartbeat;
    long long at;
    const char *message;
} lost_report;

static int read_lost_report(const cJSON *job, int gen, int replicas, lost_report *rep)
{
    const cJSON *lp = json_get(json_get(job, "status"), "lostPeer");
    const cJSON *g = json_get(lp, "generation"), *r = json_get(lp, "rank"), *by = json_get(lp, "reportedBy");
    const char *ev = json_str(lp, "evidence");
    if (!cJSON_IsNumber(g) || g->valueint != gen || !cJSON_IsNumber(r) || r->valueint < 0 ||
        r->valueint >= replicas || (!str_eq(ev, "heartbeat") && !str_eq(ev, "closed")) ||
        timefmt_parse(json_str(lp, "time"), &rep->at) != 0)
        return 0;
    rep->rank = r->valueint;
    rep->by = cJSON_IsNumber(by) ? by->valueint : -1;
    rep->heartbeat = str_eq(ev, "heartbeat");
    rep->message = json_str(lp, "message");
    return 1;
}

static const vj_node_health *node_health(const vj_children *have, const char *node)
{
    for (size_t i = 0; have && node && i < have->n_nodes; i++)
        if (str_eq(have->nodes[i].name, node))
            return &have->nodes[i];
    return NULL;
}

static void avoid_node(ctx *c, const char *node)
{
    if (node == NULL)
        return;
    for (int i = 0; i < c->n_avoid; i++)
        if (str_eq(c->avoid[i], node))
            return;
    if (c->n_avoid < MAX_AVOID)
        c->avoid[c->n_avoid++] = node;
}

/* The lost-pod rule of decide.h: pods of the current generation that still
 * look alive in the API but are lost become disruptions. */
static void judge_lost(ctx *c, const desired_status *ds, generation *g)
{
    int R = c->js->replicas;
    for (int r = 0; r < R; r++) {
        pod_info *pi = g->slot[r];
        const vj_node_health *nh = pi ? node_health(c->have, pi->node) : NULL;
        if (pi == NULL || finished(pi) || nh == NULL || !nh->lost)
            continue;
        pi->disruption = pi->node_lost = 1;
        snprintf(pi->lost_why, sizeof pi->lost_why, "node %s is lost: %s", pi->node, nh->why);
        avoid_node(c, pi->node);
    }
    lost_report rep;
    if (!read_lost_report(c->job, ds->gen, R, &rep))
        return;
    pod_info *pi = g->slot[rep.rank];
    if (pi == NULL || pi->disruption || pi->deleting)
        return;
    /* A pod that ended on its own is judged by its own exit, except one that
     * went silent and then gave up on its peers too (cut off or frozen, it
     * lost them as they lost it): its peer_lost exit is the same loss. */
    if (finished(pi) && !(rep.heartbeat && pi->phase == PP_FAILED && pi->peer_lost))
        return;
    pi->disruption = 1;
    snprintf(pi->lost_why, sizeof pi->lost_why, "%s (reported by pod index %d%s%s)",
             rep.heartbeat ? "its heartbeat stopped" : "its connections closed", rep.by,
             rep.message ? ": " : "", rep.message ? rep.message : "");
    if (rep.heartbeat) {
        avoid_node(c, pi->node);
        return;
    }
    /* Closed connections: its process ended, on a live node (a crash, which
     * spends backoffLimit) or with its node (a disruption). The gang restarts
     * now and the restart is classified when the evidence comes
     * (settle_restart); meanwhile the new pods prefer other nodes. */
    pi->suspect = 1;
    c->prefer_off = pi->node;
}

/* Slots the current generation (every other pod goes) and tallies it.
 * Returns 0, or -1 out of memory. */
static int tally(ctx *c, const desired_status *ds, pod_info *pods, size_t n, generation *g)
{
    int R = c->js->replicas;
    memset(g, 0, sizeof *g);
    g->slot = calloc((size_t)R, sizeof *g->slot);
    if (g->slot == NULL) {
        c->ok = 0;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        pod_info *pi = &pods[i];
        if (pi->gen != ds->gen || pi->rank >= R || g->slot[pi->rank] != NULL) {
            if (!kept(c, pi))
                remove_pod(c, pi);
        }
        else
            g->slot[pi->rank] = pi;
    }
    judge_lost(c, ds, g);
    for (int r = 0; r < R; r++) {
        pod_info *pi = g->slot[r];
        if (pi == NULL) {
            g->missing++;
        } else if (pi->phase == PP_SUCCEEDED) {
            g->succeeded++;
        } else if (pi->phase == PP_FAILED && vj_exit_permanent(pi->exit_code)) {
            if (g->permanent == NULL)
                g->permanent = pi;
        } else if (pi->disruption || pi->deleting || pi->phase == PP_UNKNOWN) {
            g->disrupted++;
            g->kueue_evicted += pi->kueue_evicted;
            if (pi->suspect)
                g->suspect = pi;
            if (g->first_bad == NULL || !g->first_bad->disruption)
                g->first_bad = pi;
        } else if (pi->phase == PP_FAILED) {
            g->failed++;
            if (g->first_bad == NULL || (g->first_bad->peer_lost && !pi->peer_lost))
                g->first_bad = pi;
        } else if (pi->phase == PP_RUNNING) {
            g->running++;
        } else if (pi->gated) {
            g->gated++;
        }
    }
    hold_for_lost_peer(c, g);
    return 0;
}

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

/* A worker exited 2 or 3: the job fails for good. */
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

static void fail_permanent(ctx *c, desired_status *ds, pod_info *pods, size_t n,
                           const pod_info *bad)
{
    char msg[1024];
    const char *reason = permanent_exit(msg, sizeof msg, bad);
    finish_job(c, ds, pods, n, 0, reason, msg);
    clean_pods(c, ds, pods, n);
}

/* ------------------------------------------------- status.lastRestart */

/* ds->last_restart = a new record of the restart that ended generation
 * `gen` (decide.h): why, as what, the pod that caused it, and for a pending
 * one the time by which it is classified. */
static void last_restart_new(ctx *c, desired_status *ds, int gen, const char *cause,
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
    const vj_node_health *nh = pi ? node_health(c->have, pi->node) : NULL;
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
    if (finished(pi)) {
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
static int settle_restart(ctx *c, desired_status *ds, pod_info *pods, size_t n, int now_or_never)
{
    const cJSON *lr = ds->last_restart;
    const cJSON *g = json_get(lr, "generation");
    const char *pod = json_str(lr, "pod");
    long long by;
    if (!str_eq(json_str(lr, "classifiedAs"), "Pending") || !cJSON_IsNumber(g) || pod == NULL)
        return 0;
    if (timefmt_parse(json_str(lr, "classifyBy"), &by) != 0)
        by = c->now;
    pod_info *pi = NULL;
    for (size_t i = 0; i < n && pi == NULL; i++)
        if (str_eq(pods[i].name, pod) && pods[i].gen == g->valueint)
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
        requeue(c, by - c->now);
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
        event(c, "Normal", "RestartClassified", msg);
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
            event(c, "Warning", "RestartClassified", msg);
    }
    if (pi && !kept(c, pi)) {
        pi->node_lost = pi->node_lost || force;
        remove_pod(c, pi);
    }
    if (!stop)
        return 0;
    ds->gen--; /* the restart is undone: the job ends as if it had waited */
    finish_job(c, ds, pods, n, 0, reason, msg);
    clean_pods(c, ds, pods, n);
    return 2;
}

/* A pod failed, was disrupted or disappeared: the whole gang restarts as
 * the next generation, or the job fails once backoffLimit is spent
 * (disruptions do not spend it). */
static void restart_or_fail(ctx *c, desired_status *ds, pod_info *pods, size_t n,
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
            if (g->slot[r] && !finished(g->slot[r]) && js->clean_pod_policy != VJ_CLEAN_NONE)
                remove_pod(c, g->slot[r]);
        finish_job(c, ds, pods, n, 0, "BackoffLimitExceeded", m2);
        clean_pods(c, ds, pods, n);
        return;
    }
    for (int r = 0; r < R; r++)
        if (g->slot[r] && !kept(c, g->slot[r]) && g->slot[r] != pending)
            remove_pod(c, g->slot[r]); /* the pending one is the evidence: it stays */
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
    set_cond(c, ds->conds, "Restarting", "True", reason, m2, 0);
    if (pending)
        requeue(c, VJ_RESTART_CLASSIFY_S); /* classified by then, evidence or not */
    last_restart_new(c, ds, ds->gen - 1, pending ? "PeerLost" : disruption ? "Disruption" : "Failure",
                     pending ? "Pending" : disruption ? "Disruption" : "RetryableFailure", bad,
                     pending ? c->now + VJ_RESTART_CLASSIFY_S : -1, m2);
    clear_conds(c, ds->conds, "ViTJobRestarting", m2, running_types);
    event(c, "Warning", "Restarting", m2);
    for (int r = 0; r < R; r++)
        create_generation_pod(c, r, ds->gen);
    ds->phase = "Restarting";
    ds->active = R;
    ds->succeeded = ds->failed = 0;
    ds->set_replicas = 1;
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
        if (cond_true(ds->conds, "Queued")) {
            set_cond(c, ds->conds, "Queued", "False", "Admitted", msg, 1);
            event(c, "Normal", "Admitted", msg);
        }
        return 0;
    }
    snprintf(msg, sizeof msg, "%d of %d pods of generation %d wait at Kueue's %s gate for "
             "LocalQueue %s/%s to admit them; no deadline of the job runs meanwhile", g->gated,
             js->replicas, ds->gen, VJ_KUEUE_GATE, js->ns, js->kueue_queue);
    ds->phase = "Queued";
    if (!str_eq(cur_phase, "Queued"))
        event(c, "Normal", "Queued", msg);
    set_cond(c, ds->conds, "Queued", "True", "WaitingForKueue", msg, 0);
    clear_conds(c, ds->conds, "ViTJobQueued", msg, running_types);
    return 1;
}

/* 1 while a pod of an older generation has not finished. */
static int older_alive(const desired_status *ds, const pod_info *pods, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (pods[i].gen < ds->gen && !finished(&pods[i]))
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
        if (str_eq(json_str(it, "type"), "Elastic"))
            eg.cond_reason = json_str(it, "reason");
    }
    vj_elastic_verdict v;
    if (vj_elastic_decide(c->spec, &ds->el, &eg, c->now, &v, err, sizeof err) != 0) {
        if (strstr(err, "out of memory"))
            c->ok = 0;
        return 0;
    }
    if (v.requeue_after > 0)
        requeue(c, v.requeue_after);
    int resize = v.next.size != ds->el.size;
    if (v.set_cond) {
        int changed = !str_eq(eg.cond_reason, v.reason);
        set_cond(c, ds->conds, "Elastic", v.cond_status, v.reason, v.message, 0);
        if (changed || resize)
            event(c, str_eq(v.reason, "Grown") || str_eq(v.reason, "Growing") ||
                     str_eq(v.reason, "Placed") ? "Normal" : "Warning", v.reason, v.message);
    }
    ds->el = v.next;
    if (!resize)
        return 0;
    for (int r = 0; r < R; r++)
        if (g->slot[r] && !kept(c, g->slot[r]))
            remove_pod(c, g->slot[r]);
    ds->gen++;
    ds->disruptions++;
    snprintf(m2, sizeof m2, "%s; gang restart as generation %d at %d pods (disruption, "
             "backoffLimit not spent)", v.message, ds->gen, v.next.size);
    static const char *const running_types[] = {"Running", NULL};
    set_cond(c, ds->conds, "Restarting", "True", "Elastic", m2, 0);
    last_restart_new(c, ds, ds->gen - 1, "Elastic", "Disruption", NULL, -1, m2);
    clear_conds(c, ds->conds, "ViTJobRestarting", m2, running_types);
    c->world = v.next.size;
    if (!v.grow) /* a growth waits for the old pods to stop: keep_running */
        for (int r = 0; r < v.next.size; r++)
            create_generation_pod(c, r, ds->gen);
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
            create_generation_pod(c, r, ds->gen);
            active++;
        } else if (!finished(g->slot[r])) {
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
        set_cond(c, ds->conds, "Running", "True", "ViTJobRunning", msg, 0);
        if (!str_eq(cur_phase, "Running")) /* an event for every phase change */
            event(c, "Normal", "Running", msg);
        if (cond_true(ds->conds, "Restarting"))
            set_cond(c, ds->conds, "Restarting", "False", "ViTJobRunning", msg, 1);
    } else if (g->running > 0 && g->running + g->succeeded == R && str_eq(cur_phase, "Running")) {
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
    ds->phase = str_eq(cur_phase, "Restarting") ? "Restarting" : "Running";
    ds->active = g->running;
    ds->succeeded = g->succeeded;
    ds->failed = g->holding + g->failed;
    ds->set_replicas = 1;
}

/* The running job: start, watch, restart, finish. */
static void run_job(ctx *c, desired_status *ds, pod_info *pods, size_t n, const char *cur_phase,
                    const vj_children *have)
{
    ensure_children(c, have);
    int restarting = resume(c, ds, cur_phase);
    generation g;
    if (tally(c, ds, pods, n, &g) != 0)
        return;
    g.gone = str_eq(cur_phase, "Running") ? g.missing : 0;
    int verdict = g.permanent || g.succeeded == c->js->replicas || g.disrupted || g.failed || g.gone;
    if (verdict && c->pending) {
        hold(ds, &g, cur_phase); /* the last restart's class decides this one's: wait for it */
    } else if (g.permanent) {
        fail_permanent(c, ds, pods, n, g.permanent);
    } else if (g.succeeded == c->js->replicas) {
        char msg[512];
        snprintf(msg, sizeof msg, "all %d pods of generation %d succeeded", c->js->replicas, ds->gen);
        finish_job(c, ds, pods, n, 1, "ViTJobSucceeded", msg);
        clean_pods(c, ds, pods, n);
    } else if (g.disrupted || g.failed || g.gone) {
        restart_or_fail(c, ds, pods, n, &g); /* a pod missing while Running was lost */
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
        remove_pod(c, &pods[i]);
    ds->phase = "Suspended";
    set_cond(c, ds->conds, "Suspended", "True", "ViTJobSuspended", msg, 0);
    clear_conds(c, ds->conds, "ViTJobSuspended", msg, types);
    if (!str_eq(cur_phase, "Suspended"))
        event(c, "Normal", "Suspended", msg);
    ds->active = ds->succeeded = ds->failed = 0;
    ds->set_replicas = 1;
}

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

static cJSON *status_patch(ctx *c, const desired_status *ds, const cJSON *cur)
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

static long long status_time(const cJSON *st, const char *key)
{
    long long t;
    return timefmt_parse(json_str(st, key), &t) == 0 ? t : -1;
}

/* ------------------------------------------------------ ProgressStalled */

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
static void watch_progress(ctx *c, desired_status *ds, const cJSON *st)
{
    char msg[512], age[TIMEFMT_DUR_LEN], every[TIMEFMT_DUR_LEN], after[TIMEFMT_DUR_LEN];
    if (!str_eq(ds->phase, "Running")) {
        if (cond_true(ds->conds, "ProgressStalled")) {
            snprintf(msg, sizeof msg, "the job is %s", ds->phase ? ds->phase : "not running");
            set_cond(c, ds->conds, "ProgressStalled", "False", "NotRunning", msg, 1);
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
        if (str_eq(json_str(cond, "type"), "Running") &&
            timefmt_parse(json_str(cond, "lastTransitionTime"), &since) != 0)
            since = c->now;
    }
    const cJSON *pr = json_get(st, "progress");
    int reported = timefmt_parse(json_str(pr, "updateTime"), &upd) == 0 && upd >= since;
    long long base = reported ? upd : since, stalled_at = base + limit;
    if (c->now < stalled_at) {
        requeue(c, stalled_at - c->now); /* raised on time, without a new event */
        if (!cond_true(ds->conds, "ProgressStalled"))
            return;
        if (reported)
            snprintf(msg, sizeof msg, "progress reported again at step %lld",
                     json_int(pr, "step", 0));
        else
            snprintf(msg, sizeof msg, "generation %d is running; its first progress report is "
                     "due", ds->gen);
        set_cond(c, ds->conds, "ProgressStalled", "False",
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
    set_cond(c, ds->conds, "ProgressStalled", "True", "NoProgressReport", msg, 0);
    requeue(c, stalled_at + (k + 1) * limit - c->now);
}

/* ---------------------------------------------------------- admission */

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
    set_cond(c, ds->conds, "WillNotFit", "True", "ExceedsGPUMemory", msg, 0);
    finish_job(c, ds, pods, n, 0, "WillNotFit", msg);
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
        set_cond(c, ds->conds, "ElasticWillNotFit", "False", "MinReplicasFit",
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
    if (!cond_true(ds->conds, "ElasticWillNotFit"))
        event(c, "Warning", "ElasticWillNotFit", msg);
    set_cond(c, ds->conds, "ElasticWillNotFit", "True", "MinReplicasExceedsGPUMemory", msg, 0);
}

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
    int terminal = str_eq(cur_phase, "Succeeded") || str_eq(cur_phase, "Failed");

    int np = cJSON_IsArray(pods_json) ? cJSON_GetArraySize(pods_json) : 0;
    pods = calloc(np > 0 ? (size_t)np : 1, sizeof *pods);
    if (pods == NULL) {
        c.ok = 0;
        goto done;
    }
    const cJSON *pj;
    cJSON_ArrayForEach(pj, pods_json)
    {
        if (parse_pod(pj, js.name, now, &pods[n]) == 0) {
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
        if (!cond_true(ds.conds, "Created"))
            event(&c, "Normal", "Created", msg);
        set_cond(&c, ds.conds, "Created", "True", "ViTJobCreated", msg, 0);
        if (ds.phase == NULL)
            ds.phase = "Pending";
        if (settle_restart(&c, &ds, pods, n, 0) == 2) {
            /* the restart it classified ended the job */
        } else if (fail_reason) {
            finish_job(&c, &ds, pods, n, 0, fail_reason, fail_msg);
            clean_pods(&c, &ds, pods, n);
        } else if (vj_jobspec_validate(&js, verr, sizeof verr) != 0) {
            snprintf(msg, sizeof msg, "invalid spec: %s", verr);
            finish_job(&c, &ds, pods, n, 0, "InvalidSpec", msg);
            clean_pods(&c, &ds, pods, n);
        } else if (have->plan && !have->plan->fits && n == 0 && ds.start < 0) {
            /* never started: a job that ran (an operator upgraded beneath
             * it, its pods gone between generations) is not refused */
            will_not_fit(&c, &ds, pods, n);
        } else if (js.suspend) {
            suspend_job(&c, &ds, pods, n, cur_phase);
        } else if (js.active_deadline > 0 && ds.start >= 0 && !str_eq(cur_phase, "Suspended") &&
                   now >= ds.start + js.active_deadline) {
            snprintf(msg, sizeof msg, "the job ran longer than activeDeadlineSeconds=%lld",
                     js.active_deadline);
            finish_job(&c, &ds, pods, n, 0, "DeadlineExceeded", msg);
            clean_pods(&c, &ds, pods, n);
            for (size_t i = 0; i < n; i++) /* the deadline stops them, whatever the policy */
                if (!finished(&pods[i]))
                    remove_pod(&c, &pods[i]);
        } else if (js.gang != VJ_GANG_NONE && have->podgroup_crd_missing) {
            gang_unavailable(&c, &ds);
            if (n > 0) /* pods made before the CRD went: still watched */
                run_job(&c, &ds, pods, n, cur_phase, have);
        } else {
            if (js.gang != VJ_GANG_NONE) {
                static const char *const types[] = {"GangSchedulingUnavailable", NULL};
                clear_conds(&c, ds.conds, "PodGroupCRDInstalled",
                            "the gang scheduler's PodGroup CRD is installed", types);
            }
            run_job(&c, &ds, pods, n, cur_phase, have);
            if (js.gang != VJ_GANG_NONE)
                watch_gang(&c, &ds, have);
            if (js.active_deadline > 0 && ds.start >= 0 && str_eq(ds.phase, "Failed") == 0 &&
                str_eq(ds.phase, "Succeeded") == 0)
                requeue(&c, ds.start + js.active_deadline - now);
        }
        /* admitted on its plan at replicas: what its shrinks would need */
        if (have->plan && have->plan->fits && js.elastic && !str_eq(ds.phase, "Failed"))
            elastic_will_not_fit(&c, &ds);
    } else {
        clean_pods(&c, &ds, pods, n);
    }

    if (c.render_err[0] && c.ok) {
        /* a child that cannot be rendered: no creates, the job fails saying why */
        char msg[512];
        snprintf(msg, sizeof msg, "cannot render the job's children: %s", c.render_err);
        while (cJSON_GetArraySize(plan->creates) > 0)
            cJSON_DeleteItemFromArray(plan->creates, 0);
        finish_job(&c, &ds, pods, n, 0, "InvalidSpec", msg);
        clean_pods(&c, &ds, pods, n);
    }
    terminal = str_eq(ds.phase, "Succeeded") || str_eq(ds.phase, "Failed");
    if (terminal && c.pending) { /* the job ended otherwise before the restart was classified */
        settle_restart(&c, &ds, pods, n, 1);
        clean_pods(&c, &ds, pods, n);
    }
    if (terminal && js.ttl >= 0 && ds.completion >= 0) {
        if (now >= ds.completion + js.ttl)
            plan->delete_job = 1;
        else
            requeue(&c, ds.completion + js.ttl - now);
    }
    watch_progress(&c, &ds, st);
    if (c.ok)
        plan->status_patch = status_patch(&c, &ds, st);

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

int vj_plan_is_empty(const vj_plan *p)
{
    return p == NULL || (p->status_patch == NULL && cJSON_GetArraySize(p->creates) == 0 &&
                         p->n_deletes == 0 && p->n_events == 0 && !p->delete_job);
}

void vj_plan_free(vj_plan *p)
{
    if (p == NULL)
        return;
    cJSON_Delete(p->status_patch);
    cJSON_Delete(p->creates);
    free(p->deletes);
    free(p->events);
    free(p);
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
        if (parse_pod(pj, name, 0, &pi) != 0)
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
           str_eq(json_str(json_get(st, "lastRestart"), "classifiedAs"), "Pending");
}
