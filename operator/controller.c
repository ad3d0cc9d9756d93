/* operator/controller.c - see controller.h. */
#include "controller.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "runner.h"
#include "decide.h"
#include "jobspec.h"
#include "admission.h"
#include "nodehealth.h"
#include "render.h"
#include "timefmt.h"
#include "util.h"
#include "log.h"

#define VJ_PREFIX "/apis/" VJ_API_VERSION
#define RBAC_PREFIX "/apis/" VJ_RBAC_API

/* The kinds the operator writes, where they live, and for the children other
 * than pods and events how to render them; the order of the informers. */
#define SRC(prefix_, resource_, transform_) \
    {.prefix = (prefix_), .resource = (resource_), .transform = (transform_)}

typedef struct {
    const char *kind;
    runner_source src; /* where it lives */
    cJSON *(*render)(const cJSON *job, char *err, size_t errlen);
} kind_info;

enum { INF_JOBS, INF_PODS, INF_CONFIGMAPS, INF_SERVICES, INF_SERVICEACCOUNTS, INF_ROLES,
       INF_ROLEBINDINGS, INF_COUNT };
/* The runner's last source, after KINDS': Nodes, cluster-scoped, optional
 * (RBAC may forbid them, as the chart's watchNamespace does), for elastic
 * jobs (elastic.h, "Capacity returned"). */
#define INF_NODES INF_COUNT

static const kind_info KINDS[] = {
    [INF_JOBS] = {VJ_KIND, SRC(VJ_PREFIX, VJ_RESOURCE, NULL), NULL},
    [INF_PODS] = {"Pod", SRC("/api/v1", "pods", cache_trim_pod), NULL},
    [INF_CONFIGMAPS] = {"ConfigMap", SRC("/api/v1", "configmaps", NULL), vj_render_configmap},
    [INF_SERVICES] = {"Service", SRC("/api/v1", "services", NULL), vj_render_service},
    [INF_SERVICEACCOUNTS] = {"ServiceAccount", SRC("/api/v1", "serviceaccounts", NULL),
                             vj_render_service_account},
    [INF_ROLES] = {"Role", SRC(RBAC_PREFIX, "roles", NULL), vj_render_role},
    [INF_ROLEBINDINGS] = {"RoleBinding", SRC(RBAC_PREFIX, "rolebindings", NULL), vj_render_role_binding},
    [INF_COUNT] = {"Event", SRC("/api/v1", "events", NULL), NULL},
};

struct controller {
    controller_opts o;
    runner_source sources[INF_COUNT + 1]; /* KINDS' sources, then Nodes' */
    runner *run;
    /* the latest time a schedulable node became Ready that on_node has seen
     * (it only grows): a node event enqueues the shrunk elastic jobs when it
     * moves it, not at each heartbeat */
    _Atomic long long nodes_ready_seen;
    metrics_counter *m_created, *m_succeeded, *m_failed, *m_restarted;
    /* per job, from status.progress as the informer sees it (set at each scrape) */
    metrics_gauge *m_step, *m_loss, *m_ips, *m_eta;
    metrics_gauge *m_world, *m_replicas; /* pods trained on now, and asked for */
};

/* ---- applying a plan ------------------------------------------------------ */

/* A gang scheduler's PodGroup: not watched (its CRD is optional; the job's
 * reconcile reads it), found by its apiVersion. */
static const kind_info PODGROUP_KINDS[] = {
    {VJ_PG_KIND, SRC("/apis/" VJ_PG_VOLCANO_API, VJ_PG_RESOURCE, NULL), vj_render_podgroup},
    {VJ_PG_KIND, SRC("/apis/" VJ_PG_COSCHED_API, VJ_PG_RESOURCE, NULL), vj_render_podgroup},
};

static const kind_info *kind_of(const cJSON *obj)
{
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(obj, "kind");
    const cJSON *api = cJSON_GetObjectItemCaseSensitive(obj, "apiVersion");
    if (cJSON_IsString(kind) && strcmp(kind->valuestring, VJ_PG_KIND) == 0) {
        for (size_t i = 0; cJSON_IsString(api) && i < 2; i++)
            if (strcmp(PODGROUP_KINDS[i].src.prefix + strlen("/apis/"), api->valuestring) == 0)
                return &PODGROUP_KINDS[i];
        return NULL;
    }
    for (size_t i = 0; cJSON_IsString(kind) && i < sizeof KINDS / sizeof KINDS[0]; i++)
        if (strcmp(KINDS[i].kind, kind->valuestring) == 0)
            return &KINDS[i];
    return NULL;
}

/* Creates obj in ns; AlreadyExists is success (our names are deterministic,
 * so a lagging cache only costs a 409). */
static int create_child(kube_client *k, const char *ns, const cJSON *obj,
                        kube_status *st)
{
    memset(st, 0, sizeof *st);
    const kind_info *ki = kind_of(obj);
    char path[512];
    if (!ki ||
        kube_path(path, sizeof path, ki->src.prefix, ns, ki->src.resource, NULL, NULL) != 0) {
        snprintf(st->message, sizeof st->message, "cannot create an object of this kind");
        return KUBE_ERR_INVALID;
    }
    int rc = kube_create(k, path, obj, NULL, st);
    if (rc != KUBE_OK && st->http_code == 409) return KUBE_OK;
    if (rc == KUBE_OK)
        LOG_INFO("reconcile", "event=created kind=%s namespace=%s name=%s", LOGV(ki->kind),
                 LOGV(ns), LOGV(kube_meta_str(obj, "name") ? kube_meta_str(obj, "name") : ""));
    return rc;
}

static int emit_event(kube_client *k, const cJSON *job, const vj_event *ev,
                      kube_status *st)
{
    const char *ns = kube_meta_str(job, "namespace"), *name = kube_meta_str(job, "name");
    char when[TIMEFMT_LEN], ename[320];
    timefmt_now(when, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(ename, sizeof ename, "%s.%llx", name, (unsigned long long)ts.tv_sec * 1000000000ULL +
                                                       (unsigned long long)ts.tv_nsec);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "apiVersion", "v1");
    cJSON_AddStringToObject(e, "kind", "Event");
    cJSON *meta = cJSON_AddObjectToObject(e, "metadata");
    cJSON_AddStringToObject(meta, "name", ename);
    cJSON_AddStringToObject(meta, "namespace", ns);
    cJSON *io = cJSON_AddObjectToObject(e, "involvedObject");
    cJSON_AddStringToObject(io, "apiVersion", VJ_API_VERSION);
    cJSON_AddStringToObject(io, "kind", VJ_KIND);
    cJSON_AddStringToObject(io, "name", name);
    cJSON_AddStringToObject(io, "namespace", ns);
    if (kube_meta_str(job, "uid")) cJSON_AddStringToObject(io, "uid", kube_meta_str(job, "uid"));
    cJSON_AddStringToObject(e, "type", ev->type);
    cJSON_AddStringToObject(e, "reason", ev->reason);
    cJSON_AddStringToObject(e, "message", ev->message);
    cJSON_AddStringToObject(e, "firstTimestamp", when);
    cJSON_AddStringToObject(e, "lastTimestamp", when);
    cJSON_AddNumberToObject(e, "count", 1);
    cJSON_AddItemToObject(e, "source", cJSON_CreateObject());
    cJSON_AddStringToObject(cJSON_GetObjectItem(e, "source"), "component", "vitjob-operator");
    int rc = create_child(k, ns, e, st);
    cJSON_Delete(e);
    LOG_INFO("reconcile", "event=emitted namespace=%s job=%s type=%s reason=%s", LOGV(ns),
             LOGV(name), LOGV(ev->type), LOGV(ev->reason));
    return rc;
}

static const char *patched_phase(const vj_plan *p)
{
    const cJSON *phase = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(p->status_patch, "status"), "phase");
    return cJSON_IsString(phase) ? phase->valuestring : NULL;
}

/* What the API server refused for good (kube_is_permanent): the verb, kind
 * and name, and its answer. */
typedef struct {
    int set;
    const char *reason; /* the Failed condition's: FailedCreate or FailedUpdate */
    char what[400];     /* "create Pod ns/name" */
    kube_status st;
} refusal;

static void refused(refusal *r, int create, const char *kind, const char *ns, const char *name,
                    const kube_status *st)
{
    r->set = 1;
    r->reason = create ? "FailedCreate" : "FailedUpdate";
    snprintf(r->what, sizeof r->what, "%s %s %s/%s", create ? "create" : "update", kind, ns,
             name ? name : "");
    r->st = *st;
}

/* Applies the plan in decide.h's order: status first (the new generation is
 * recorded before its pods exist; if that write fails nothing else is done),
 * deletes, creates, events, the job itself. Returns KUBE_OK or the first
 * error (after the status, the rest is still attempted: every step is
 * idempotent and the next reconcile repeats it), except that a create the
 * server refuses for good stops the creates (no pod without its Service)
 * and is reported in *ref. */
static int apply_plan(controller *c, kube_client *k, const cJSON *job, const vj_plan *p,
                      kube_status *first, refusal *ref)
{
    const char *ns = kube_meta_str(job, "namespace"), *name = kube_meta_str(job, "name");
    kube_status st;
    int result = KUBE_OK;
#define KEEP(rc_)                                    \
    do {                                             \
        int r_ = (rc_);                              \
        if (r_ != KUBE_OK && result == KUBE_OK) {    \
            result = r_;                             \
            *first = st;                             \
        }                                            \
    } while (0)
    if (p->status_patch) {
        char path[512];
        kube_path(path, sizeof path, VJ_PREFIX, ns, VJ_RESOURCE, name, "status");
        int rc = kube_merge_patch(k, path, p->status_patch, NULL, &st);
        if (rc != KUBE_OK && kube_is_not_found(&st)) return KUBE_OK; /* deleted meanwhile */
        if (rc != KUBE_OK) { /* nothing else before the status (new generation) is recorded */
            *first = st;
            return rc;
        }
        const char *phase = patched_phase(p);
        if (rc == KUBE_OK && phase) {
            if (strcmp(phase, "Succeeded") == 0) metrics_counter_add(c->m_succeeded, 1);
            if (strcmp(phase, "Failed") == 0) metrics_counter_add(c->m_failed, 1);
            if (strcmp(phase, "Restarting") == 0) metrics_counter_add(c->m_restarted, 1);
            const cJSON *st_old = cJSON_GetObjectItemCaseSensitive(job, "status");
            if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(st_old, "phase")))
                metrics_counter_add(c->m_created, 1);
        }
    }
    for (size_t i = 0; i < p->n_deletes; i++) {
        char path[512];
        kube_path(path, sizeof path, "/api/v1", ns, "pods", p->deletes[i].name, NULL);
        int rc = kube_delete(k, path, p->deletes[i].force ? 0 : -1, NULL, NULL, &st);
        if (rc != KUBE_OK && kube_is_not_found(&st)) rc = KUBE_OK;
        if (rc == KUBE_OK)
            LOG_INFO("reconcile", "event=deleted kind=Pod namespace=%s name=%s force=%d", LOGV(ns),
                     LOGV(p->deletes[i].name), p->deletes[i].force);
        KEEP(rc);
    }
    const cJSON *obj;
    cJSON_ArrayForEach(obj, p->creates) {
        int rc = create_child(k, ns, obj, &st);
        KEEP(rc);
        if (rc != KUBE_OK && kube_is_permanent(&st)) {
            const kind_info *ki = kind_of(obj);
            refused(ref, 1, ki ? ki->kind : "object", ns, kube_meta_str(obj, "name"), &st);
            break;
        }
    }
    for (size_t i = 0; i < p->n_events; i++) KEEP(emit_event(k, job, &p->events[i], &st));
    if (p->delete_job) {
        char path[512];
        kube_path(path, sizeof path, VJ_PREFIX, ns, VJ_RESOURCE, name, NULL);
        int rc = kube_delete(k, path, -1, "Background", NULL, &st);
        if (rc != KUBE_OK && kube_is_not_found(&st)) rc = KUBE_OK;
        if (rc == KUBE_OK)
            LOG_INFO("reconcile", "event=deleted kind=ViTJob namespace=%s name=%s reason=ttl",
                     LOGV(ns), LOGV(name));
        KEEP(rc);
    }
#undef KEEP
    return result;
}

/* ---- reconcile ---------------------------------------------------------- */

/* Whether obj is controlled by the object with this uid. A child of an
 * earlier job of the same name (deleted, not yet collected) is not ours. */
static int owned_by(const cJSON *obj, const char *uid)
{
    const cJSON *refs = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "ownerReferences");
    const cJSON *r;
    cJSON_ArrayForEach(r, refs) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "uid");
        if (cJSON_IsString(u) && uid && strcmp(u->valuestring, uid) == 0) return 1;
    }
    return 0;
}

/* Drops from pods (in place) the ones another incarnation of the job owns. */
static void keep_owned(cJSON *pods, const char *uid)
{
    for (int i = cJSON_GetArraySize(pods) - 1; i >= 0; i--)
        if (!owned_by(cJSON_GetArrayItem(pods, i), uid)) cJSON_DeleteItemFromArray(pods, i);
}

/* Brings the job's child of this kind (ConfigMap, Service, or an identity
 * object) to its desired state: one owned by an earlier incarnation of the
 * job is deleted, as is one whose immutable fields differ (both are created
 * anew next round); our own is patched in the fields the operator owns,
 * keeping everybody else's labels and annotations. Returns 1 if it exists as
 * desired, 0 if it does not (yet), -1 if the server refused the change for
 * good (*ref). */
static int settle_child(controller *c, kube_client *k, const cJSON *job, int inf, refusal *ref)
{
    const kind_info *ki = &KINDS[inf];
    const char *ns = kube_meta_str(job, "namespace"), *uid = kube_meta_str(job, "uid");
    char path[512], err[256];
    kube_status st;
    cJSON *want = ki->render(job, err, sizeof err);
    if (!want) return 0; /* an invalid spec: decide reports it */
    const char *name = kube_meta_str(want, "name");
    cJSON *have = cache_get(runner_cache(c->run, inf), ns, name);
    int result = 0;
    kube_path(path, sizeof path, ki->src.prefix, ns, ki->src.resource, name, NULL);
    if (!have) goto out;
    cJSON *patch = NULL;
    vj_child_diff d = owned_by(have, uid) ? vj_render_diff(have, want, &patch) : VJ_CHILD_RECREATE;
    if (d == VJ_CHILD_OK) {
        result = 1;
    } else if (d == VJ_CHILD_RECREATE) {
        LOG_INFO("reconcile", "event=deleted kind=%s namespace=%s name=%s reason=%s",
                 LOGV(ki->kind), LOGV(ns), LOGV(name),
                 owned_by(have, uid) ? "immutable-field" : "stale-owner");
        kube_delete(k, path, -1, NULL, NULL, &st);
    } else if (d == VJ_CHILD_PATCH) {
        if (kube_merge_patch(k, path, patch, NULL, &st) == KUBE_OK) {
            LOG_INFO("reconcile", "event=patched kind=%s namespace=%s name=%s", LOGV(ki->kind),
                     LOGV(ns), LOGV(name));
            result = 1;
        } else if (kube_is_permanent(&st)) {
            refused(ref, 0, ki->kind, ns, name, &st);
            result = -1;
        } else {
            result = 1; /* retried at the next reconcile; usable meanwhile */
        }
    }
    cJSON_Delete(patch);
out:
    cJSON_Delete(have);
    cJSON_Delete(want);
    return result;
}

/* Whether the API serves podgroups in the gang's group and version
 * (discovery; a 404 there means the CRD is not installed). 1 served, 0 not,
 * -1 unknown (the server did not answer). */
static int podgroups_served(kube_client *k, const char *prefix)
{
    cJSON *doc = NULL;
    kube_status st;
    int rc = kube_get(k, prefix, &doc, &st);
    if (rc != KUBE_OK) return kube_is_not_found(&st) ? 0 : -1;
    int served = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(doc, "resources")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(r, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, VJ_PG_RESOURCE) == 0) served = 1;
    }
    cJSON_Delete(doc);
    return served;
}

/* The gang's PodGroup, read fresh at each reconcile (nothing watches it):
 * ours is patched in the fields the operator owns and handed to decide with
 * its status (*pg_out, caller frees); one of an earlier incarnation of the
 * job is deleted; a 404 asks discovery whether the CRD is there at all.
 * Returns -1 if the server refused the change for good (*ref), else 0. */
static int settle_podgroup(kube_client *k, const cJSON *job, vj_children *have, cJSON **pg_out,
                           refusal *ref)
{
    vj_jobspec js;
    char err[256], path[512];
    if (vj_jobspec_parse(job, &js, err, sizeof err) != 0 ||
        (js.gang != VJ_GANG_VOLCANO && js.gang != VJ_GANG_COSCHEDULING) ||
        vj_jobspec_validate(&js, err, sizeof err) != 0) /* decide reports it */
        return 0;
    cJSON *want = vj_render_podgroup(job, err, sizeof err);
    if (!want) return 0;
    const kind_info *ki = kind_of(want);
    const char *ns = js.ns, *name = js.name;
    kube_path(path, sizeof path, ki->src.prefix, ns, ki->src.resource, name, NULL);
    cJSON *pg = NULL, *patch = NULL;
    kube_status st;
    int result = 0;
    if (kube_get(k, path, &pg, &st) != KUBE_OK) {
        if (kube_is_not_found(&st) && podgroups_served(k, ki->src.prefix) == 0) {
            have->podgroup_crd_missing = 1;
            LOG_WARN("reconcile", "namespace=%s job=%s event=podgroup_crd_missing gang=%s",
                     LOGV(ns), LOGV(name), LOGV(js.gang_name));
        }
        goto out;
    }
    if (!owned_by(pg, js.uid)) {
        LOG_INFO("reconcile", "event=deleted kind=%s namespace=%s name=%s reason=stale-owner",
                 LOGV(ki->kind), LOGV(ns), LOGV(name));
        kube_delete(k, path, -1, NULL, NULL, &st);
        goto out;
    }
    vj_child_diff d = vj_render_diff(pg, want, &patch);
    if (d == VJ_CHILD_PATCH) {
        if (kube_merge_patch(k, path, patch, NULL, &st) == KUBE_OK) {
            LOG_INFO("reconcile", "event=patched kind=%s namespace=%s name=%s", LOGV(ki->kind),
                     LOGV(ns), LOGV(name));
        } else if (kube_is_permanent(&st)) {
            refused(ref, 0, ki->kind, ns, name, &st);
            result = -1;
        }
    }
    have->podgroup = 1;
    have->podgroup_obj = pg;
    *pg_out = pg;
    pg = NULL;
out:
    cJSON_Delete(patch);
    cJSON_Delete(pg);
    cJSON_Delete(want);
    return result;
}

/* The nodes of the job's unfinished pods, judged (nodehealth.h) for decide's
 * lost-pod rule; read only while vj_decide_wants_nodes says a peer was lost,
 * at most VJ_MAX_JUDGED nodes. A node or Lease the operator may not read
 * (403) gives no evidence; the rule then rests on the workers' report.
 * Returns the count; out[i].name borrows from pods. */
#define VJ_MAX_JUDGED 64
static size_t judge_nodes(kube_client *k, const cJSON *job, const cJSON *pods, long long now,
                          vj_node_health *out)
{
    size_t n = 0;
    if (!vj_decide_wants_nodes(job, pods)) return 0;
    const cJSON *pod;
    cJSON_ArrayForEach(pod, pods) {
        if (n == VJ_MAX_JUDGED) break;
        const cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(pod, "status");
        const cJSON *nn = cJSON_GetObjectItemCaseSensitive(spec, "nodeName");
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(st, "phase");
        if (!cJSON_IsString(nn) || !nn->valuestring[0] ||
            (cJSON_IsString(ph) && (!strcmp(ph->valuestring, "Succeeded") ||
                                    !strcmp(ph->valuestring, "Failed"))))
            continue;
        int seen = 0;
        for (size_t i = 0; i < n && !seen; i++) seen = !strcmp(out[i].name, nn->valuestring);
        if (seen) continue;
        char path[512];
        cJSON *node = NULL, *lease = NULL;
        kube_status st1, st2;
        kube_path(path, sizeof path, "/api/v1", NULL, "nodes", nn->valuestring, NULL);
        int rc = kube_get(k, path, &node, &st1);
        if (rc != KUBE_OK && !kube_is_not_found(&st1)) {
            LOG_WARN("reconcile", "event=node_unreadable node=%s code=%d msg=%s",
                     LOGV(nn->valuestring), st1.http_code, LOGV(st1.message));
            continue; /* no evidence either way */
        }
        kube_path(path, sizeof path, "/apis/coordination.k8s.io/v1", VJ_NODE_LEASE_NAMESPACE,
                  "leases", nn->valuestring, NULL);
        if (node && kube_get(k, path, &lease, &st2) != KUBE_OK && !kube_is_not_found(&st2))
            LOG_WARN("reconcile", "event=node_lease_unreadable node=%s code=%d msg=%s",
                     LOGV(nn->valuestring), st2.http_code, LOGV(st2.message));
        vj_node_judge(nn->valuestring, node, lease, now, &out[n]);
        if (out[n].lost)
            LOG_WARN("reconcile", "event=node_lost node=%s why=%s", LOGV(nn->valuestring),
                     LOGV(out[n].why));
        n++;
        cJSON_Delete(node);
        cJSON_Delete(lease);
    }
    return n;
}

/* ---- nodes: capacity for elastic jobs ---------------------------------- */

/* A job with spec.elastic running below spec.replicas (status.worldSize). */
static int elastic_shrunk(const cJSON *job)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(job, "spec");
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(spec, "replicas");
    const cJSON *world = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(job, "status"), "worldSize");
    return cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(spec, "elastic")) &&
           cJSON_IsNumber(want) && cJSON_IsNumber(world) && world->valuedouble < want->valuedouble;
}

typedef struct {
    controller *c;
    int n;
} shrunk_walk;

static void enqueue_shrunk(void *user, const cJSON *job)
{
    shrunk_walk *w = user;
    if (!elastic_shrunk(job)) return;
    runner_enqueue(w->c->run, kube_meta_str(job, "namespace"), kube_meta_str(job, "name"));
    w->n++;
}

/* A Node changed (the Node informer's callback): one that became Ready for
 * pods later than any seen before may let a shrunk elastic job grow now
 * (elastic.h), so each such job is queued; a heartbeat, or a node whose
 * Ready time is old news, queues nothing. Only enqueues (informer.h). */
static void on_node(void *user, const char *type, const cJSON *node)
{
    controller *c = user;
    if (strcmp(type, "DELETED") == 0) return;
    long long since = vj_node_ready_since(node);
    long long seen = atomic_load(&c->nodes_ready_seen);
    do {
        if (since <= seen) return;
    } while (!atomic_compare_exchange_weak(&c->nodes_ready_seen, &seen, since));
    shrunk_walk w = {c, 0};
    cache_each(runner_cache(c->run, INF_JOBS), NULL, enqueue_shrunk, &w);
    char when[TIMEFMT_LEN];
    timefmt_rfc3339(when, since, 0, 0);
    LOG_INFO("elastic", "event=node_ready node=%s ready_since=%s shrunk_jobs_queued=%d",
             LOGV(kube_meta_str(node, "name") ? kube_meta_str(node, "name") : ""), LOGV(when), w.n);
}

/* The latest time a schedulable node became Ready, over the Node cache. */
typedef struct {
    long long at;
    char name[256];
} ready_node;

static void latest_ready(void *user, const cJSON *node)
{
    ready_node *r = user;
    long long since = vj_node_ready_since(node);
    const char *name = kube_meta_str(node, "name");
    if (since > r->at && name) {
        r->at = since;
        snprintf(r->name, sizeof r->name, "%s", name);
    }
}

/* Whether the leadership (if elected) still covers a write now. */
static int may_act(const controller *c)
{
    if (!c->o.leading_until_ms) return 1;
    return (long long)(mono_seconds() * 1000) < atomic_load(c->o.leading_until_ms);
}


/* Retrying cannot help: the job fails, saying what the server said. */
static run_result fail_refused(controller *c, kube_client *k, const char *key, const cJSON *job,
                               const cJSON *pods, const refusal *ref, long long now)
{
    char msg[1024], err[512];
    snprintf(msg, sizeof msg, "cannot %s: %s", ref->what,
             ref->st.server_message[0] ? ref->st.server_message : ref->st.message);
    LOG_ERROR("reconcile", "key=%s event=refused code=%d reason=%s msg=%s", LOGV(key),
              ref->st.http_code, LOGV(ref->st.reason), LOGV(msg));
    vj_plan *plan = NULL;
    kube_status first;
    refusal again = {0};
    run_result r = RUN_DONE;
    if (vj_decide_failed(job, pods, ref->reason, msg, now, &plan, err, sizeof err) != 0)
        r = RUN_ERROR;
    else if (apply_plan(c, k, job, plan, &first, &again) != KUBE_OK)
        r = kube_is_permanent(&first) ? RUN_TERMINAL : RUN_ERROR;
    vj_plan_free(plan);
    return r;
}

static run_result reconcile(void *user, kube_client *k, const char *ns, const char *name,
                            double *requeue_s)
{
    controller *c = user;
    char key[512];
    snprintf(key, sizeof key, "%s/%s", ns, name);

    /* The job fresh from the server: our own status writes must be seen. */
    char path[512];
    kube_path(path, sizeof path, VJ_PREFIX, ns, VJ_RESOURCE, name, NULL);
    cJSON *job = NULL;
    kube_status st;
    int rc = kube_get(k, path, &job, &st);
    if (rc != KUBE_OK) {
        if (kube_is_not_found(&st)) return RUN_DONE; /* deleted: children go by GC */
        LOG_WARN("reconcile", "key=%s event=get_failed code=%d msg=%s", LOGV(key), st.http_code,
                 LOGV(st.message));
        return RUN_ERROR;
    }
    cJSON *pods = cache_list(runner_cache(c->run, INF_PODS), ns, VJ_LABEL_JOB, name);
    const char *uid = kube_meta_str(job, "uid");
    if (pods) keep_owned(pods, uid);
    refusal ref = {0};
    vj_children have = {0};
    int *flags[] = {&have.configmap, &have.service, &have.service_account, &have.role,
                    &have.role_binding};
    for (int i = INF_CONFIGMAPS; i <= INF_ROLEBINDINGS && !ref.set; i++)
        *flags[i - INF_CONFIGMAPS] = settle_child(c, k, job, i, &ref) > 0;
    /* Admission: a GPU job's plan before its first pods (admission.h); one
     * that does not fit gets no PodGroup either (decide fails it). */
    vj_admission adm;
    char aerr[512];
    if (!ref.set && c->o.planner && pods && vj_admission_wanted(job, pods)) {
        if (vj_admit(k, c->o.planner, job, &adm, aerr, sizeof aerr) == 0) {
            have.plan = &adm;
            LOG_INFO("admission", "key=%s event=planned fits=%d memory_bytes=%.0f "
                     "device_bytes=%.0f images_per_second=%.1f device=%s", LOGV(key), adm.fits,
                     adm.memory_bytes, adm.device_bytes, adm.images_per_s, LOGV(adm.device));
        } else {
            LOG_WARN("admission", "key=%s event=not_planned msg=%s", LOGV(key), LOGV(aerr));
        }
    }
    cJSON *podgroup = NULL;
    if (!ref.set && (!have.plan || have.plan->fits))
        settle_podgroup(k, job, &have, &podgroup, &ref);
    vj_plan *plan = NULL;
    char err[512];
    run_result result = RUN_DONE;
    long long now = (long long)time(NULL);
    vj_node_health nodes[VJ_MAX_JUDGED];
    if (pods && !ref.set) {
        have.nodes = nodes;
        have.n_nodes = judge_nodes(k, job, pods, now, nodes);
    }
    ready_node ready = {0, ""}; /* none: the Node cache is empty (refused, or not listed yet) */
    if (elastic_shrunk(job)) {
        cache_each(runner_cache(c->run, INF_NODES), NULL, latest_ready, &ready);
        have.node_ready_at = ready.at;
        have.node_ready_name = ready.name;
    }
    if (!pods || (!ref.set && vj_decide(job, pods, &have, now, &plan, err, sizeof err) != 0)) {
        LOG_ERROR("reconcile", "key=%s msg=%s", LOGV(key), LOGV(pods ? err : "out of memory"));
        result = RUN_ERROR;
    } else if (!may_act(c)) {
        LOG_WARN("reconcile", "key=%s event=skipped reason=\"not (or no longer) the leader\"",
                 LOGV(key));
        result = RUN_ERROR;
    } else {
        kube_status first;
        int applied = ref.set ? KUBE_OK : apply_plan(c, k, job, plan, &first, &ref);
        if (ref.set) {
            result = fail_refused(c, k, key, job, pods, &ref, now);
        } else if (applied != KUBE_OK) {
            LOG_WARN("reconcile", "key=%s event=apply_failed code=%d reason=%s msg=%s", LOGV(key),
                     first.http_code, LOGV(first.reason), LOGV(first.message));
            /* e.g. the job's own status refused: retrying the same write cannot help */
            result = kube_is_permanent(&first) ? RUN_TERMINAL : RUN_ERROR;
        } else if (plan->requeue_after > 0) {
            *requeue_s = (double)plan->requeue_after;
            result = RUN_REQUEUE;
        }
    }
    vj_plan_free(plan);
    cJSON_Delete(podgroup);
    cJSON_Delete(job);
    cJSON_Delete(pods);
    return result;
}

/* ---- per-job metrics -------------------------------------------------------- */

/* The metrics collector: one series per job in the informer's cache and
 * field of its status.progress (written by the worker), so a deleted job's
 * series go with it; and its size: spec.replicas, and the pods its current
 * generation trains on (status.worldSize, which only an elastic job has:
 * below spec.replicas while shrunk; else spec.replicas). */
static void collect_job(void *user, const cJSON *job)
{
    controller *c = user;
    metrics_gauge *g[] = {c->m_step, c->m_loss, c->m_ips, c->m_eta};
    static const char *const field[] = {"step", "loss", "imagesPerSecond", "etaSeconds"};
    const char *ns = kube_meta_str(job, "namespace"), *name = kube_meta_str(job, "name");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(job, "status");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(st, "progress");
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(job, "spec"), "replicas");
    const cJSON *world = cJSON_GetObjectItemCaseSensitive(st, "worldSize");
    if (!ns || !name) return;
    if (cJSON_IsNumber(want)) {
        metrics_gauge_set(c->m_replicas, want->valuedouble, ns, name);
        metrics_gauge_set(c->m_world, cJSON_IsNumber(world) ? world->valuedouble
                                                            : want->valuedouble, ns, name);
    }
    if (!cJSON_IsObject(pr)) return;
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(pr, field[i]);
        if (cJSON_IsNumber(v)) metrics_gauge_set(g[i], v->valuedouble, ns, name);
    }
}

static void collect_jobs(void *user)
{
    controller *c = user;
    metrics_gauge *g[] = {c->m_step, c->m_loss, c->m_ips, c->m_eta, c->m_world, c->m_replicas};
    for (int i = 0; i < 6; i++) metrics_gauge_clear(g[i]);
    /* one job parsed at a time: a list of every job, parsed, was the peak
     * of the operator's memory at each scrape (issue 28) */
    cache_each(runner_cache(c->run, INF_JOBS), NULL, collect_job, c);
}

/* ---- lifecycle ------------------------------------------------------------ */

int controller_start(const controller_opts *o, controller **out, char *err, size_t errlen)
{
    controller *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->o = *o;
    metrics_registry *m = o->metrics;
    char merr[256] = "";
    c->m_created = metrics_counter_new(m, "vitjob_jobs_created_total", "ViTJobs taken on.", merr,
                                       sizeof merr, 0);
    c->m_succeeded = metrics_counter_new(m, "vitjob_jobs_succeeded_total", "ViTJobs succeeded.",
                                         merr, sizeof merr, 0);
    c->m_failed = metrics_counter_new(m, "vitjob_jobs_failed_total", "ViTJobs failed.", merr,
                                      sizeof merr, 0);
    c->m_restarted = metrics_counter_new(m, "vitjob_jobs_restarted_total",
                                         "Gang restarts of ViTJobs.", merr, sizeof merr, 0);
    c->m_step = metrics_gauge_new(m, "vitjob_job_step", "Optimizer steps a ViTJob has done "
                                  "(status.progress.step).", merr, sizeof merr, 2, "namespace",
                                  "name");
    c->m_loss = metrics_gauge_new(m, "vitjob_job_loss", "Training loss of a ViTJob's latest "
                                  "reported step (status.progress.loss).", merr, sizeof merr, 2,
                                  "namespace", "name");
    c->m_ips = metrics_gauge_new(m, "vitjob_job_images_per_second", "Training throughput of a "
                                 "ViTJob (status.progress.imagesPerSecond).", merr, sizeof merr, 2,
                                 "namespace", "name");
    c->m_eta = metrics_gauge_new(m, "vitjob_job_eta_seconds", "Seconds of training a ViTJob has "
                                 "left (status.progress.etaSeconds).", merr, sizeof merr, 2,
                                 "namespace", "name");
    c->m_world = metrics_gauge_new(m, "vitjob_job_world_size", "Pods a ViTJob's current "
                                   "generation trains on (status.worldSize of an elastic job, "
                                   "else spec.replicas).", merr, sizeof merr, 2, "namespace",
                                   "name");
    c->m_replicas = metrics_gauge_new(m, "vitjob_job_replicas", "Pods a ViTJob asks for "
                                      "(spec.replicas).", merr, sizeof merr, 2, "namespace",
                                      "name");
    if (!c->m_created || !c->m_succeeded || !c->m_failed || !c->m_restarted || !c->m_step ||
        !c->m_loss || !c->m_ips || !c->m_eta || !c->m_world || !c->m_replicas) {
        snprintf(err, errlen, "controller: cannot set up metrics: %s", merr);
        free(c);
        return -1;
    }
    for (int i = 0; i < INF_COUNT; i++)
        c->sources[i] = KINDS[i].src;
    c->sources[INF_NODES] = (runner_source){
        .prefix = "/api/v1", .resource = "nodes", .transform = cache_trim_node,
        .on_change = on_node, .on_change_user = c,
        .optional = "elastic jobs grow every growCheckSeconds only, not when a node becomes "
                    "Ready (RBAC: list and watch nodes)"};
    runner_opts ro = {.sources = c->sources, .n_sources = INF_COUNT + 1, .owner_label = VJ_LABEL_JOB,
                      .reconcile = reconcile, .user = c, .factory = o->factory,
                      .factory_user = o->factory_user, .namespaces = o->namespaces,
                      .workers = o->workers, .metrics = o->metrics, .stop = o->stop};
    if (runner_start(&ro, &c->run, err, errlen) != 0) {
        free(c);
        return -1;
    }
    metrics_set_collector(m, collect_jobs, c);
    *out = c;
    return 0;
}

int controller_synced(const controller *c)
{
    return c && c->run && runner_synced(c->run);
}

void controller_join(controller *c)
{
    if (!c) return;
    metrics_set_collector(c->o.metrics, NULL, NULL); /* no scrape reads the caches after this */
    runner_join(c->run);
    free(c);
}
