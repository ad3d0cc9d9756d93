/* operator/decide_pods.c - a job's pods as the decision reads them: each
 * pod parsed (its generation and rank, phase, disruption, exit, node,
 * scheduling, Kueue state), the current generation slotted by rank and
 * tallied (every other pod removed unless cleanPodPolicy None keeps it),
 * and the lost-pod rule of decide.h: nodes judged lost, status.lostPeer
 * reports, and workers that lost a peer waiting for its fate.
 *
 * Owns: reading a pod (dec_parse_pod, dec_finished), the tally of the
 * current generation (dec_tally) and which of its pods are lost.
 * Must not: do I/O, read the clock, or write status.progress; restart or
 * fail the job (decide.c and decide_restart.c decide on the tally).
 */
#include "decide_internal.h"

#include "exitcode.h"
#include "json.h"
#include "kueue.h"
#include "timefmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ pods parsed */

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

/* The worker container's terminated state (or its last one), or NULL. */
static const cJSON *worker_terminated(const cJSON *pod)
{
    const cJSON *cs;
    cJSON_ArrayForEach(cs, json_get(json_get(pod, "status"), "containerStatuses"))
    {
        if (!dec_str_eq(json_str(cs, "name"), VJ_CONTAINER))
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

int dec_parse_pod(const cJSON *pod, const char *job, long long now, pod_info *pi)
{
    const cJSON *meta = json_get(pod, "metadata");
    const cJSON *labels = json_get(meta, "labels");
    memset(pi, 0, sizeof *pi);
    pi->name = json_str(meta, "name");
    if (pi->name == NULL || !dec_str_eq(json_str(labels, VJ_LABEL_JOB), job) ||
        parse_int_str(json_str(labels, VJ_LABEL_RANK), &pi->rank) != 0 ||
        parse_int_str(json_str(labels, VJ_LABEL_RESTART), &pi->gen) != 0)
        return -1;
    const cJSON *st = json_get(pod, "status");
    const char *phase = json_str(st, "phase");
    pi->phase = dec_str_eq(phase, "Running")     ? PP_RUNNING
                : dec_str_eq(phase, "Succeeded") ? PP_SUCCEEDED
                : dec_str_eq(phase, "Failed")    ? PP_FAILED
                : dec_str_eq(phase, "Unknown")   ? PP_UNKNOWN
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
        if (dec_str_eq(reason, disruption_reasons[i]))
            pi->disruption = 1;
    if (dec_str_eq(reason, "NodeLost") || pi->phase == PP_UNKNOWN)
        pi->node_lost = 1;
    const cJSON *cond;
    cJSON_ArrayForEach(cond, json_get(st, "conditions"))
    {
        if (dec_str_eq(json_str(cond, "type"), "DisruptionTarget") &&
            dec_str_eq(json_str(cond, "status"), "True")) {
            pi->disruption = 1;
            if (dec_str_eq(json_str(cond, "reason"), "DeletionByTaintManager"))
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
        if (!dec_str_eq(json_str(cond, "type"), "PodScheduled"))
            continue;
        if (dec_str_eq(json_str(cond, "status"), "True"))
            pi->placed = 1;
        else if (dec_str_eq(json_str(cond, "reason"), "Unschedulable") && !pi->placed) {
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

int dec_finished(const pod_info *pi)
{
    return pi->phase == PP_SUCCEEDED || pi->phase == PP_FAILED;
}

/* -------------------------------------------------------------- lost pods */

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
        } else if (!dec_finished(pi) && !pi->disruption && !pi->deleting &&
                   pi->phase != PP_UNKNOWN) {
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
    dec_requeue(c, until - c->now);
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
        r->valueint >= replicas || (!dec_str_eq(ev, "heartbeat") && !dec_str_eq(ev, "closed")) ||
        timefmt_parse(json_str(lp, "time"), &rep->at) != 0)
        return 0;
    rep->rank = r->valueint;
    rep->by = cJSON_IsNumber(by) ? by->valueint : -1;
    rep->heartbeat = dec_str_eq(ev, "heartbeat");
    rep->message = json_str(lp, "message");
    return 1;
}

const vj_node_health *dec_node_health(const vj_children *have, const char *node)
{
    for (size_t i = 0; have && node && i < have->n_nodes; i++)
        if (dec_str_eq(have->nodes[i].name, node))
            return &have->nodes[i];
    return NULL;
}

static void avoid_node(ctx *c, const char *node)
{
    if (node == NULL)
        return;
    for (int i = 0; i < c->n_avoid; i++)
        if (dec_str_eq(c->avoid[i], node))
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
        const vj_node_health *nh = pi ? dec_node_health(c->have, pi->node) : NULL;
        if (pi == NULL || dec_finished(pi) || nh == NULL || !nh->lost)
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
    if (dec_finished(pi) && !(rep.heartbeat && pi->phase == PP_FAILED && pi->peer_lost))
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
     * (dec_settle_restart, decide_restart.c); meanwhile the new pods prefer
     * other nodes. */
    pi->suspect = 1;
    c->prefer_off = pi->node;
}

/* ------------------------------------------------------------------ tally */

/* Slots the current generation (every other pod goes) and tallies it.
 * Returns 0, or -1 out of memory. */
int dec_tally(ctx *c, const desired_status *ds, pod_info *pods, size_t n, generation *g)
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
            if (!dec_kept(c, pi))
                dec_remove_pod(c, pi);
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
