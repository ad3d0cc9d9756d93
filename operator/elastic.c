/* operator/elastic.c - see elastic.h.
 *
 * Owns: the elastic rules and their state and words.
 * Must not: do I/O, read the clock, or touch pods.
 */
#include "elastic.h"

#include "json.h"
#include "timefmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vj_elastic_read(const vj_jobspec *js, const cJSON *status, vj_elastic_state *st)
{
    memset(st, 0, sizeof *st);
    st->size = js->replicas;
    st->resized = -1;
    if (!js->elastic)
        return;
    int ws = (int)json_int(status, "worldSize", js->replicas);
    if (ws >= js->min_replicas && ws <= js->replicas)
        st->size = ws;
    int from = (int)json_int(status, "elasticGrowFrom", 0);
    st->grow_from = from >= 1 && from <= js->replicas ? from : 0;
    long long f = json_int(status, "elasticGrowFailures", 0);
    st->failures = f > 0 && f < 1000000 ? (int)f : 0;
    long long fl = json_int(status, "elasticMinFittingReplicas", 0);
    st->floor = fl > js->min_replicas && fl <= js->replicas ? (int)fl : 0;
    if (timefmt_parse(json_str(status, "elasticResizeTime"), &st->resized) != 0)
        st->resized = -1;
}

/* The fewest pods a shrink may leave: minReplicas, or the plan's floor. */
static int lowest(const vj_jobspec *js, const vj_elastic_state *st)
{
    return st->floor > js->min_replicas ? st->floor : js->min_replicas;
}

/* The largest allowed pod count in [lo, hi] (ok[w - 1]: w pods are
 * allowed by the batch rule), never below `least`, or 0. */
static int largest_allowed(const vj_jobspec *js, const unsigned char *ok, int least, int lo,
                           int hi)
{
    for (int w = hi < js->replicas ? hi : js->replicas; w >= lo && w >= 1; w--)
        if (w >= least && ok[w - 1])
            return w;
    return 0;
}

/* "2, 3, 4": the allowed pod counts, into buf. */
static void allowed_list(const vj_jobspec *js, const unsigned char *ok, char *buf, size_t len)
{
    size_t w = 0;
    buf[0] = '\0';
    for (int s = js->min_replicas; s <= js->replicas && w < len; s++) {
        if (!ok[s - 1])
            continue;
        int k = snprintf(buf + w, len - w, "%s%d", w ? ", " : "", s);
        if (k < 0)
            break;
        w += (size_t)k;
    }
}

static long long grow_interval(const vj_jobspec *js, int failures)
{
    int d = failures < VJ_ELASTIC_MAX_BACKOFF_DOUBLINGS ? failures : VJ_ELASTIC_MAX_BACKOFF_DOUBLINGS;
    return js->grow_check << d;
}

/* A schedulable node became Ready after the last resize: grow now. */
static int capacity_returned(const vj_elastic_state *st, const vj_elastic_gen *g)
{
    /* after a failed growth the backoff holds: on a busy cluster nodes
     * become Ready all the time, and each try costs a checkpoint and a
     * restart (it must not flap) */
    return st->failures == 0 && g->node_ready_at > 0 && st->resized >= 0 &&
           g->node_ready_at > st->resized;
}

/* Why a growth starts now, into buf: the node that became Ready, or the
 * time spent at the smaller size. */
static void grow_reason(const vj_elastic_state *st, const vj_elastic_gen *g, long long now,
                        char *buf, size_t len)
{
    if (capacity_returned(st, g)) {
        char ready[TIMEFMT_LEN], resized[TIMEFMT_LEN];
        timefmt_rfc3339(ready, g->node_ready_at, 0, 0);
        timefmt_rfc3339(resized, st->resized, 0, 0);
        if (g->node_ready_name && g->node_ready_name[0])
            snprintf(buf, len, "node %s became Ready at %s, after the last resize at %s",
                     g->node_ready_name, ready, resized);
        else
            snprintf(buf, len, "capacity returned: a node became Ready at %s, after the last "
                     "resize at %s", ready, resized);
        return;
    }
    snprintf(buf, len, "after %lld s at %d", now - (st->resized >= 0 ? st->resized : now),
             st->size);
}

static void say(vj_elastic_verdict *v, const char *status, const char *reason)
{
    v->set_cond = 1;
    v->cond_status = status;
    snprintf(v->reason, sizeof v->reason, "%s", reason);
}

/* Pods that stay unschedulable past the timeout: give a growth up, shrink,
 * or say that the job waits. */
static void unschedulable(const vj_jobspec *js, const unsigned char *ok, const char *sizes,
                          const vj_elastic_state *st, const vj_elastic_gen *g, long long now,
                          vj_elastic_verdict *v)
{
    vj_elastic_state *nx = &v->next;
    if (st->grow_from > 0) {
        nx->size = st->grow_from;
        nx->grow_from = 0;
        nx->failures = st->failures + 1;
        nx->resized = now;
        say(v, "True", "GrowFailed");
        snprintf(v->message, sizeof v->message,
                 "growing from %d to %d pods failed: pod(s) %s could not be placed for "
                 "pendingTimeoutSeconds=%lld (%d of %d placed); back to %d pods, the next try "
                 "in %lld s (growCheckSeconds x 2^%d)", st->grow_from, st->size,
                 g->unsched_names, js->pending_timeout, g->placed, st->size, st->grow_from,
                 grow_interval(js, nx->failures),
                 nx->failures < VJ_ELASTIC_MAX_BACKOFF_DOUBLINGS ? nx->failures
                                                                 : VJ_ELASTIC_MAX_BACKOFF_DOUBLINGS);
        return;
    }
    int least = lowest(js, st);
    int to = largest_allowed(js, ok, least, 1, g->placed < st->size - 1 ? g->placed
                                                                         : st->size - 1);
    if (to == 0) {
        char floor[160] = "";
        if (least > js->min_replicas)
            snprintf(floor, sizeof floor, " (raised to %d: fewer would not fit the GPU's memory, "
                     "status.elasticMinFittingReplicas)", least);
        say(v, "True", "BelowMinReplicas");
        snprintf(v->message, sizeof v->message,
                 "pod(s) %s could not be placed for pendingTimeoutSeconds=%lld and only %d of %d "
                 "pods are placed: no allowed world size between minReplicas=%d%s and %d "
                 "(allowed: %s); waiting for the scheduler", g->unsched_names,
                 js->pending_timeout, g->placed, st->size, js->min_replicas, floor, g->placed,
                 sizes);
        return;
    }
    nx->size = to;
    nx->resized = now;
    say(v, "True", "ShrunkUnschedulable");
    snprintf(v->message, sizeof v->message,
             "pod(s) %s of generation %d could not be placed for pendingTimeoutSeconds=%lld (%d of "
             "%d placed): shrunk from %d to %d pods, the largest allowed size that fits (allowed: "
             "%s; minReplicas=%d)", g->unsched_names, g->gen, js->pending_timeout, g->placed,
             st->size, st->size, to, sizes, js->min_replicas);
}

int vj_elastic_decide(const vj_jobspec *js, const vj_elastic_state *st, const vj_elastic_gen *g,
                      long long now, vj_elastic_verdict *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    v->next = *st;
    int n = js->replicas;
    unsigned char *ok = malloc(n > 0 ? (size_t)n : 1);
    char sizes[256];
    if (ok == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (n < 1 || vj_jobspec_world_sizes(js, 1, js->replicas, ok, err, errlen) != 0) {
        if (n < 1)
            snprintf(err, errlen, "spec.replicas=%d: must be >= 1", js->replicas);
        free(ok);
        return -1;
    }
    allowed_list(js, ok, sizes, sizeof sizes);
    if (g->unschedulable > 0) {
        long long due = g->unsched_since + js->pending_timeout;
        if (now < due)
            v->requeue_after = due - now;
        else
            unschedulable(js, ok, sizes, st, g, now, v);
    } else if (g->running == st->size) {
        const char *status = st->size < js->replicas ? "True" : "False";
        if (st->grow_from > 0) {
            v->next.grow_from = 0;
            v->next.failures = 0;
            say(v, status, "Grown");
            snprintf(v->message, sizeof v->message, "grew from %d to %d pods (spec.replicas=%d)",
                     st->grow_from, st->size, js->replicas);
        } else if (g->cond_reason && strcmp(g->cond_reason, "BelowMinReplicas") == 0) {
            say(v, status, "Placed");
            snprintf(v->message, sizeof v->message, "all %d pods are placed and running",
                     st->size);
        }
        int to = st->size < js->replicas ? largest_allowed(js, ok, 1, st->size + 1, js->replicas)
                                         : 0;
        long long due = (st->resized >= 0 ? st->resized : now) + grow_interval(js, st->failures);
        if (to > 0 && v->next.grow_from == 0 && st->grow_from == 0) {
            if (now < due && !capacity_returned(st, g)) {
                v->requeue_after = due - now;
            } else {
                v->next.size = to;
                v->next.grow_from = st->size;
                v->next.resized = now;
                v->grow = 1;
                say(v, "True", "Growing");
                char why[384];
                grow_reason(st, g, now, why, sizeof why);
                snprintf(v->message, sizeof v->message,
                         "growing from %d to %d pods (spec.replicas=%d, allowed: %s): %s; "
                         "checkpoint on stop, then a restart at %d", st->size, to, js->replicas,
                         sizes, why, to);
            }
        }
    }
    free(ok);
    return 0;
}
