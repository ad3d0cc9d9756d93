/* operator/decide_plan.c - the plan a decision builds (decide.h's vj_plan):
 * the pods it deletes, the children and pods it creates, its events and
 * when it looks again; and freeing it.
 *
 * Owns: adding to the plan (dec_requeue, dec_event, dec_remove_pod,
 * dec_create_generation_pod, dec_ensure_children), how a pod is deleted
 * (gracefully or forced), a child that cannot be rendered (carried in
 * ctx.render_err for decide() to fail the job), vj_plan_is_empty and
 * vj_plan_free.
 * Must not: do I/O, read the clock, or write status.progress; choose which
 * pods go or when a generation starts (the rules in decide.c, decide_pods.c
 * and decide_restart.c do).
 *
 * Choice (documented in decide.h's rules and the CRD):
 * - A terminating pod is force-deleted (grace 0) once its deletionTimestamp
 *   has passed, or at once when its node is lost; until then decide requeues
 *   at its deletionTimestamp.
 */
#include "decide_internal.h"

#include "render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dec_requeue(ctx *c, long long secs)
{
    if (secs < 1)
        secs = 1;
    if (c->plan->requeue_after == 0 || secs < c->plan->requeue_after)
        c->plan->requeue_after = secs;
}

/* items, grown (doubled, or to `first` when empty) if `used` fills its
 * `cap` of `size`-byte elements, so that one more fits; NULL when out of
 * memory (items then unchanged and still the caller's). */
static void *grown(void *items, size_t *cap, size_t used, size_t size, size_t first)
{
    if (used < *cap)
        return items;
    size_t n = *cap ? 2 * *cap : first;
    void *more = realloc(items, n * size);
    if (more != NULL)
        *cap = n;
    return more;
}

void dec_event(ctx *c, const char *type, const char *reason, const char *msg)
{
    vj_plan *p = c->plan;
    vj_event *all = grown(p->events, &c->cap_ev, p->n_events, sizeof *all, 4);
    if (all == NULL) {
        c->ok = 0;
        return;
    }
    p->events = all;
    vj_event *e = &all[p->n_events++];
    snprintf(e->type, sizeof e->type, "%s", type);
    snprintf(e->reason, sizeof e->reason, "%s", reason);
    snprintf(e->message, sizeof e->message, "%s", msg ? msg : "");
}

static void delete_pod(ctx *c, pod_info *pi, int force)
{
    vj_plan *p = c->plan;
    vj_pod_delete *all = grown(p->deletes, &c->cap_del, p->n_deletes, sizeof *all, 8);
    if (all == NULL) {
        c->ok = 0;
        return;
    }
    p->deletes = all;
    vj_pod_delete *d = &all[p->n_deletes++];
    snprintf(d->name, sizeof d->name, "%s", pi->name);
    d->force = force;
    pi->removed = 1;
}

/* Makes the pod go away: a graceful delete, or a forced one when it is
 * already terminating past its deadline or its node is lost. */
void dec_remove_pod(ctx *c, pod_info *pi)
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
        dec_requeue(c, pi->del_ts - c->now);
    }
}

static void create(ctx *c, cJSON *obj)
{
    if (obj == NULL || !cJSON_AddItemToArray(c->plan->creates, obj)) {
        cJSON_Delete(obj);
        c->ok = 0;
    }
}

/* Adds a rendered child to the creates; a child that could not be rendered
 * is carried with its message (render_err), and fails the job (decide(),
 * decide.c). */
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

void dec_create_generation_pod(ctx *c, int rank, int gen)
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
void dec_ensure_children(ctx *c, const vj_children *have)
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
