/* operator/render.c - see render.h.
 *
 * Owns: the shape of the ConfigMap, Service and Pods of a ViTJob.
 * Must not: do I/O, read the clock, or keep references to its inputs.
 */
#include "render.h"

#include "jobspec.h"
#include "json.h"
#include "kueue.h"
#include "termmsg.h"

#include <stdio.h>
#include <string.h>

int vj_render_pod_name(char *buf, size_t len, const char *job, int rank, int restart)
{
    int n = snprintf(buf, len, "%s-worker-%d-r%d", job, rank, restart);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

int vj_render_configmap_name(char *buf, size_t len, const char *job)
{
    int n = snprintf(buf, len, "%s" VJ_CONFIGMAP_SUFFIX, job);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/* The builders below add to objects and only check for OOM at the end:
 * cJSON_Add* return NULL on failure and every later add to NULL is a no-op,
 * so a failure anywhere shows up as a missing item. `ok` tracks it. */
typedef struct {
    int ok;
} bld;

static cJSON *add_obj(bld *b, cJSON *parent, const char *key)
{
    cJSON *o = parent ? cJSON_AddObjectToObject(parent, key) : NULL;
    if (o == NULL)
        b->ok = 0;
    return o;
}

static cJSON *add_arr(bld *b, cJSON *parent, const char *key)
{
    cJSON *o = parent ? cJSON_AddArrayToObject(parent, key) : NULL;
    if (o == NULL)
        b->ok = 0;
    return o;
}

static void add_str(bld *b, cJSON *parent, const char *key, const char *v)
{
    if (parent == NULL || cJSON_AddStringToObject(parent, key, v) == NULL)
        b->ok = 0;
}

static void add_num(bld *b, cJSON *parent, const char *key, double v)
{
    if (parent == NULL || cJSON_AddNumberToObject(parent, key, v) == NULL)
        b->ok = 0;
}

static void add_bool(bld *b, cJSON *parent, const char *key, int v)
{
    if (parent == NULL || cJSON_AddBoolToObject(parent, key, v) == NULL)
        b->ok = 0;
}

/* Adds a deep copy of v under key (replacing an existing key). */
static void add_dup(bld *b, cJSON *parent, const char *key, const cJSON *v)
{
    cJSON *d = (parent && v) ? cJSON_Duplicate(v, 1) : NULL;
    if (d == NULL) {
        b->ok = 0;
        return;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(parent, key);
    if (!cJSON_AddItemToObject(parent, key, d)) {
        cJSON_Delete(d);
        b->ok = 0;
    }
}

static cJSON *arr_push_obj(bld *b, cJSON *arr)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL || arr == NULL || !cJSON_AddItemToArray(arr, o)) {
        cJSON_Delete(o);
        b->ok = 0;
        return NULL;
    }
    return o;
}

static void arr_push_str(bld *b, cJSON *arr, const char *s)
{
    cJSON *o = cJSON_CreateString(s);
    if (o == NULL || arr == NULL || !cJSON_AddItemToArray(arr, o)) {
        cJSON_Delete(o);
        b->ok = 0;
    }
}

/* apiVersion, kind, metadata {name, namespace, labels {job-name}, ownerReferences}. */
static cJSON *new_child(bld *b, const vj_jobspec *js, const char *api_version, const char *kind,
                        const char *name, cJSON **labels_out)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        b->ok = 0;
        return NULL;
    }
    add_str(b, o, "apiVersion", api_version);
    add_str(b, o, "kind", kind);
    cJSON *meta = add_obj(b, o, "metadata");
    add_str(b, meta, "name", name);
    add_str(b, meta, "namespace", js->ns);
    cJSON *labels = add_obj(b, meta, "labels");
    add_str(b, labels, VJ_LABEL_JOB, js->name);
    cJSON *owners = add_arr(b, meta, "ownerReferences");
    cJSON *ref = arr_push_obj(b, owners);
    add_str(b, ref, "apiVersion", VJ_API_VERSION);
    add_str(b, ref, "kind", VJ_KIND);
    add_str(b, ref, "name", js->name);
    add_str(b, ref, "uid", js->uid);
    add_bool(b, ref, "controller", 1);
    add_bool(b, ref, "blockOwnerDeletion", 1);
    if (labels_out)
        *labels_out = labels;
    return o;
}

static cJSON *finish(bld *b, cJSON *o, char *err, size_t errlen)
{
    if (!b->ok || o == NULL) {
        cJSON_Delete(o);
        if (err && errlen)
            snprintf(err, errlen, "out of memory rendering an object");
        return NULL;
    }
    return o;
}

int vj_render_identity_name(char *buf, size_t len, const char *job)
{
    int n = snprintf(buf, len, "%s" VJ_IDENTITY_SUFFIX, job);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

cJSON *vj_render_configmap(const cJSON *job, char *err, size_t errlen)
{
    vj_jobspec js;
    char name[VJ_NAME_LEN];
    if (vj_jobspec_parse(job, &js, err, errlen) != 0)
        return NULL;
    if (vj_render_configmap_name(name, sizeof name, js.name) != 0) {
        snprintf(err, errlen, "metadata.name is too long");
        return NULL;
    }
    bld b = {1};
    cJSON *o = new_child(&b, &js, "v1", "ConfigMap", name, NULL);
    cJSON *data = add_obj(&b, o, "data");
    cJSON *wc = vj_jobspec_worker_config(&js);
    char *text = wc ? cJSON_PrintUnformatted(wc) : NULL;
    cJSON_Delete(wc);
    if (text == NULL)
        b.ok = 0;
    else
        add_str(&b, data, VJ_CONFIG_FILE, text);
    cJSON_free(text);
    return finish(&b, o, err, errlen);
}

cJSON *vj_render_service(const cJSON *job, char *err, size_t errlen)
{
    vj_jobspec js;
    if (vj_jobspec_parse(job, &js, err, errlen) != 0)
        return NULL;
    bld b = {1};
    cJSON *o = new_child(&b, &js, "v1", "Service", js.name, NULL);
    cJSON *spec = add_obj(&b, o, "spec");
    add_str(&b, spec, "clusterIP", "None");
    add_bool(&b, spec, "publishNotReadyAddresses", 1);
    cJSON *sel = add_obj(&b, spec, "selector");
    add_str(&b, sel, VJ_LABEL_JOB, js.name);
    cJSON *port = arr_push_obj(&b, add_arr(&b, spec, "ports"));
    add_str(&b, port, "name", "rdzv");
    add_num(&b, port, "port", VJ_RDZV_PORT);
    add_num(&b, port, "targetPort", VJ_RDZV_PORT);
    add_str(&b, port, "protocol", "TCP");
    return finish(&b, o, err, errlen);
}

/* ServiceAccount, Role and RoleBinding <job>-worker: rank 0's identity,
 * allowed to get and patch the status of this one ViTJob, nothing else. */
typedef enum { ID_SERVICE_ACCOUNT, ID_ROLE, ID_ROLE_BINDING } identity_part;

static cJSON *render_identity(const cJSON *job, identity_part part, char *err, size_t errlen)
{
    static const char *const kinds[] = {"ServiceAccount", "Role", "RoleBinding"};
    vj_jobspec js;
    char name[VJ_NAME_LEN];
    if (vj_jobspec_parse(job, &js, err, errlen) != 0)
        return NULL;
    if (vj_render_identity_name(name, sizeof name, js.name) != 0) {
        snprintf(err, errlen, "metadata.name is too long");
        return NULL;
    }
    bld b = {1};
    cJSON *o = new_child(&b, &js, part == ID_SERVICE_ACCOUNT ? "v1" : VJ_RBAC_API, kinds[part], name,
                         NULL);
    if (part == ID_ROLE) {
        cJSON *rule = arr_push_obj(&b, add_arr(&b, o, "rules"));
        arr_push_str(&b, add_arr(&b, rule, "apiGroups"), VJ_GROUP);
        arr_push_str(&b, add_arr(&b, rule, "resources"), "vitjobs/status");
        arr_push_str(&b, add_arr(&b, rule, "resourceNames"), js.name);
        cJSON *verbs = add_arr(&b, rule, "verbs");
        arr_push_str(&b, verbs, "get");
        arr_push_str(&b, verbs, "patch");
    } else if (part == ID_ROLE_BINDING) {
        cJSON *ref = add_obj(&b, o, "roleRef");
        add_str(&b, ref, "apiGroup", "rbac.authorization.k8s.io");
        add_str(&b, ref, "kind", "Role");
        add_str(&b, ref, "name", name);
        cJSON *subj = arr_push_obj(&b, add_arr(&b, o, "subjects"));
        add_str(&b, subj, "kind", "ServiceAccount");
        add_str(&b, subj, "name", name);
        add_str(&b, subj, "namespace", js.ns);
    }
    return finish(&b, o, err, errlen);
}

cJSON *vj_render_service_account(const cJSON *job, char *err, size_t errlen)
{
    return render_identity(job, ID_SERVICE_ACCOUNT, err, errlen);
}

cJSON *vj_render_role(const cJSON *job, char *err, size_t errlen)
{
    return render_identity(job, ID_ROLE, err, errlen);
}

cJSON *vj_render_role_binding(const cJSON *job, char *err, size_t errlen)
{
    return render_identity(job, ID_ROLE_BINDING, err, errlen);
}

/* The restricted Pod Security Standard: non-root (the worker image's user
 * 65532), RuntimeDefault seccomp, no privilege escalation, no capabilities.
 * spec.template.securityContext / containerSecurityContext replace these. */
static void pod_security_default(bld *b, cJSON *sc)
{
    add_bool(b, sc, "runAsNonRoot", 1);
    add_num(b, sc, "runAsUser", VJ_WORKER_UID);
    add_num(b, sc, "runAsGroup", VJ_WORKER_UID);
    add_num(b, sc, "fsGroup", VJ_WORKER_UID);
    add_str(b, add_obj(b, sc, "seccompProfile"), "type", "RuntimeDefault");
}

static void container_security_default(bld *b, cJSON *sc)
{
    add_bool(b, sc, "allowPrivilegeEscalation", 0);
    arr_push_str(b, add_arr(b, add_obj(b, sc, "capabilities"), "drop"), "ALL");
}

static void add_security(bld *b, cJSON *parent, const char *key, const cJSON *tmpl,
                         const char *tmpl_key, void (*dflt)(bld *, cJSON *))
{
    const cJSON *given = tmpl ? cJSON_GetObjectItemCaseSensitive(tmpl, tmpl_key) : NULL;
    if (given)
        add_dup(b, parent, key, given);
    else
        dflt(b, add_obj(b, parent, key));
}

static void add_env(bld *b, cJSON *env, const char *name, const char *value)
{
    cJSON *e = arr_push_obj(b, env);
    add_str(b, e, "name", name);
    add_str(b, e, "value", value);
}

static void add_env_int(bld *b, cJSON *env, const char *name, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    add_env(b, env, name, buf);
}

static void add_env_secret(bld *b, cJSON *env, const char *name, const char *secret, int optional)
{
    cJSON *e = arr_push_obj(b, env);
    add_str(b, e, "name", name);
    cJSON *ref = add_obj(b, add_obj(b, e, "valueFrom"), "secretKeyRef");
    add_str(b, ref, "name", secret);
    add_str(b, ref, "key", name);
    if (optional)
        add_bool(b, ref, "optional", 1);
}

/* container.resources = template.resources with limits (and requests, when the
 * template sets them) of nvidia.com/gpu forced to gpusPerReplica when > 0. */
static void add_resources(bld *b, cJSON *container, const vj_jobspec *js)
{
    const cJSON *tres = js->tmpl ? cJSON_GetObjectItemCaseSensitive(js->tmpl, "resources") : NULL;
    if (tres == NULL && js->gpus <= 0)
        return;
    cJSON *res;
    if (tres) {
        add_dup(b, container, "resources", tres);
        res = cJSON_GetObjectItemCaseSensitive(container, "resources");
    } else {
        res = add_obj(b, container, "resources");
    }
    if (js->gpus <= 0 || res == NULL)
        return;
    char n[16];
    snprintf(n, sizeof n, "%d", js->gpus);
    cJSON *limits = cJSON_GetObjectItemCaseSensitive(res, "limits");
    if (limits == NULL)
        limits = add_obj(b, res, "limits");
    if (limits) {
        cJSON_DeleteItemFromObjectCaseSensitive(limits, "nvidia.com/gpu");
        add_str(b, limits, "nvidia.com/gpu", n);
    }
    cJSON *requests = cJSON_GetObjectItemCaseSensitive(res, "requests");
    if (requests && cJSON_GetObjectItemCaseSensitive(requests, "nvidia.com/gpu")) {
        /* Extended resources: requests must equal limits. */
        cJSON_DeleteItemFromObjectCaseSensitive(requests, "nvidia.com/gpu");
        add_str(b, requests, "nvidia.com/gpu", n);
    }
}

/* spec.tolerations: the template's, then NoExecute tolerations of a lost node
 * (unreachable, not-ready) for runPolicy.nodeLostTolerationSeconds, unless the
 * template already tolerates that taint. */
static void add_tolerations(bld *b, cJSON *spec, const vj_jobspec *js)
{
    static const char *const lost[] = {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"};
    const cJSON *have = js->tmpl ? cJSON_GetObjectItemCaseSensitive(js->tmpl, "tolerations") : NULL;
    if (have)
        add_dup(b, spec, "tolerations", have);
    cJSON *arr = have ? cJSON_GetObjectItemCaseSensitive(spec, "tolerations") : add_arr(b, spec, "tolerations");
    for (size_t i = 0; i < sizeof lost / sizeof lost[0]; i++) {
        int covered = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, have)
        {
            const char *key = json_str(t, "key"), *eff = json_str(t, "effect");
            covered |= (key == NULL || !key[0] || strcmp(key, lost[i]) == 0) &&
                       (eff == NULL || !eff[0] || strcmp(eff, "NoExecute") == 0);
        }
        if (covered)
            continue;
        cJSON *o = arr_push_obj(b, arr);
        add_str(b, o, "key", lost[i]);
        add_str(b, o, "operator", "Exists");
        add_str(b, o, "effect", "NoExecute");
        add_num(b, o, "tolerationSeconds", (double)js->node_lost_toleration);
    }
}

/* parent[key] as an object, made (replacing whatever else was there) when
 * it is not one; NULL out of memory. */
static cJSON *obj_at(cJSON *parent, const char *key)
{
    cJSON *o = cJSON_GetObjectItemCaseSensitive(parent, key);
    if (cJSON_IsObject(o))
        return o;
    cJSON_DeleteItemFromObjectCaseSensitive(parent, key);
    return cJSON_AddObjectToObject(parent, key);
}

/* parent[key] as an array, made (replacing whatever else was there) when it
 * is not one; NULL out of memory. */
static cJSON *arr_at(cJSON *parent, const char *key)
{
    cJSON *a = cJSON_GetObjectItemCaseSensitive(parent, key);
    if (cJSON_IsArray(a))
        return a;
    cJSON_DeleteItemFromObjectCaseSensitive(parent, key);
    return cJSON_AddArrayToObject(parent, key);
}

cJSON *vj_render_pod(const cJSON *job, int rank, int restart, char *err, size_t errlen)
{
    vj_jobspec js;
    char name[VJ_NAME_LEN], host[VJ_NAME_LEN], cm[VJ_NAME_LEN], rdzv[2 * VJ_NAME_LEN];
    char ident[VJ_NAME_LEN], buf[32];
    if (vj_jobspec_parse(job, &js, err, errlen) != 0)
        return NULL;
    if (rank < 0 || restart < 0) {
        snprintf(err, errlen, "rank %d / restart %d: must be >= 0", rank, restart);
        return NULL;
    }
    int n1 = snprintf(host, sizeof host, "%s-worker-%d", js.name, rank);
    int n2 = snprintf(rdzv, sizeof rdzv, "%s-worker-0.%s.%s.svc:%d", js.name, js.name, js.ns,
                      VJ_RDZV_PORT);
    if (vj_render_pod_name(name, sizeof name, js.name, rank, restart) != 0 ||
        vj_render_configmap_name(cm, sizeof cm, js.name) != 0 ||
        vj_render_identity_name(ident, sizeof ident, js.name) != 0 || n1 < 0 ||
        (size_t)n1 >= sizeof host || n2 < 0 || (size_t)n2 >= sizeof rdzv) {
        snprintf(err, errlen, "metadata.name is too long");
        return NULL;
    }

    bld b = {1};
    cJSON *labels = NULL;
    cJSON *o = new_child(&b, &js, "v1", "Pod", name, &labels);
    snprintf(buf, sizeof buf, "%d", rank);
    add_str(&b, labels, VJ_LABEL_RANK, buf);
    snprintf(buf, sizeof buf, "%d", restart);
    add_str(&b, labels, VJ_LABEL_RESTART, buf);
    /* the gang's PodGroup, named after the job */
    if (js.gang == VJ_GANG_COSCHEDULING)
        add_str(&b, labels, VJ_PG_COSCHED_LABEL, js.name);
    else if (js.gang == VJ_GANG_VOLCANO)
        add_str(&b, add_obj(&b, cJSON_GetObjectItemCaseSensitive(o, "metadata"), "annotations"),
                VJ_PG_VOLCANO_ANNOTATION, js.name);
    /* under Kueue: each generation is a pod group of its own (kueue.h) */
    if (js.kueue_queue && o) {
        cJSON *meta = obj_at(o, "metadata");
        if (vj_kueue_label_pod(obj_at(meta, "labels"), obj_at(meta, "annotations"), js.name,
                               js.kueue_queue, js.kueue_priority, restart, js.replicas) != 0)
            b.ok = 0;
    }

    cJSON *spec = add_obj(&b, o, "spec");
    add_str(&b, spec, "hostname", host);
    add_str(&b, spec, "subdomain", js.name);
    add_str(&b, spec, "restartPolicy", "Never");
    if (js.service_account) {
        add_str(&b, spec, "serviceAccountName", js.service_account);
    } else {
        /* The job's own identity: rank 0 reports progress, and any surviving
         * rank may report a lost peer (status.lostPeer), so every rank has it. */
        add_str(&b, spec, "serviceAccountName", ident);
    }
    add_security(&b, spec, "securityContext", js.tmpl, "securityContext", pod_security_default);

    cJSON *c = arr_push_obj(&b, add_arr(&b, spec, "containers"));
    add_str(&b, c, "name", VJ_CONTAINER);
    add_str(&b, c, "image", js.image ? js.image : "");
    /* the worker's last log line (exit_code=N class=NAME ... msg=...) becomes
     * the terminated state's message: the worker writes it to this file (its
     * path also in VITJOB_TERMINATION_LOG), the log's tail stands in when the
     * file is empty; the operator reads the class and the error from it */
    add_str(&b, c, "terminationMessagePath", TERMMSG_DEFAULT_PATH);
    add_str(&b, c, "terminationMessagePolicy", "FallbackToLogsOnError");
    add_security(&b, c, "securityContext", js.tmpl, "containerSecurityContext",
                 container_security_default);
    cJSON *cmd = add_arr(&b, c, "command");
    arr_push_str(&b, cmd, "vitjob-worker");
    arr_push_str(&b, cmd, "train");
    arr_push_str(&b, cmd, "--config");
    arr_push_str(&b, cmd, VJ_CONFIG_DIR "/" VJ_CONFIG_FILE);

    cJSON *env = add_arr(&b, c, "env");
    add_env(&b, env, VJ_ENV_NAME, js.name);
    add_env(&b, env, VJ_ENV_NAMESPACE, js.ns);
    add_env_int(&b, env, VJ_ENV_RANK, rank);
    add_env_int(&b, env, VJ_ENV_REPLICAS, js.replicas);
    add_env_int(&b, env, VJ_ENV_LOCAL_RANKS, js.local_ranks);
    add_env(&b, env, VJ_ENV_RDZV_ENDPOINT, rdzv);
    add_env_int(&b, env, VJ_ENV_RESTART, restart);
    add_env(&b, env, VJ_ENV_TERMINATION_LOG, TERMMSG_DEFAULT_PATH);
    if (js.credentials_secret) {
        /* The CRD: keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, optionally
         * AWS_REGION and AWS_SESSION_TOKEN. */
        add_env_secret(&b, env, "AWS_ACCESS_KEY_ID", js.credentials_secret, 0);
        add_env_secret(&b, env, "AWS_SECRET_ACCESS_KEY", js.credentials_secret, 0);
        add_env_secret(&b, env, "AWS_REGION", js.credentials_secret, 1);
        add_env_secret(&b, env, "AWS_SESSION_TOKEN", js.credentials_secret, 1);
    }

    cJSON *vm = arr_push_obj(&b, add_arr(&b, c, "volumeMounts"));
    add_str(&b, vm, "name", "config");
    add_str(&b, vm, "mountPath", VJ_CONFIG_DIR);
    add_bool(&b, vm, "readOnly", 1);
    cJSON *port = arr_push_obj(&b, add_arr(&b, c, "ports"));
    add_str(&b, port, "name", "rdzv");
    add_num(&b, port, "containerPort", VJ_RDZV_PORT);
    add_str(&b, port, "protocol", "TCP");
    add_resources(&b, c, &js);

    cJSON *vol = arr_push_obj(&b, add_arr(&b, spec, "volumes"));
    add_str(&b, vol, "name", "config");
    add_str(&b, add_obj(&b, vol, "configMap"), "name", cm);

    if (js.gang == VJ_GANG_VOLCANO) /* spec.template.schedulerName still wins */
        add_str(&b, spec, "schedulerName", VJ_PG_VOLCANO_SCHEDULER);
    static const char *const pod_keys[] = {"nodeSelector", "schedulerName", "priorityClassName",
                                           "terminationGracePeriodSeconds"}; /* as they are */
    for (size_t i = 0; js.tmpl && i < sizeof pod_keys / sizeof pod_keys[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(js.tmpl, pod_keys[i]);
        if (v)
            add_dup(&b, spec, pod_keys[i], v);
    }
    add_tolerations(&b, spec, &js);
    return finish(&b, o, err, errlen);
}


/* {"key":"metadata.name","operator":"NotIn","values":[node]}: a node field
 * selector takes exactly one value (the API refuses more). NULL out of memory. */
static cJSON *not_this_node(const char *node)
{
    cJSON *r = cJSON_CreateObject(), *vals;
    if (r == NULL || !cJSON_AddStringToObject(r, "key", "metadata.name") ||
        !cJSON_AddStringToObject(r, "operator", "NotIn") ||
        (vals = cJSON_AddArrayToObject(r, "values")) == NULL ||
        !cJSON_AddItemToArray(vals, cJSON_CreateString(node))) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

int vj_render_avoid_nodes(cJSON *pod, const char *const *nodes, size_t n)
{
    cJSON *req = obj_at(obj_at(obj_at(obj_at(pod, "spec"), "affinity"), "nodeAffinity"),
                        "requiredDuringSchedulingIgnoredDuringExecution");
    if (req == NULL)
        return -1;
    cJSON *terms = arr_at(req, "nodeSelectorTerms");
    if (terms == NULL || (cJSON_GetArraySize(terms) == 0 && !cJSON_AddItemToArray(terms, cJSON_CreateObject())))
        return -1;
    cJSON *term;
    cJSON_ArrayForEach(term, terms)
    {
        cJSON *fields = arr_at(term, "matchFields");
        if (fields == NULL)
            return -1;
        for (size_t i = 0; i < n; i++) { /* requirements of a term are ANDed */
            cJSON *req1 = not_this_node(nodes[i]);
            if (req1 == NULL || !cJSON_AddItemToArray(fields, req1)) {
                cJSON_Delete(req1);
                return -1;
            }
        }
    }
    return 0;
}

int vj_render_set_replicas(cJSON *pod, int replicas)
{
    char v[16];
    cJSON *c, *e;
    snprintf(v, sizeof v, "%d", replicas);
    /* under Kueue the pod group counts the pods of this world */
    cJSON *ann = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pod, "metadata"),
                                                  "annotations");
    if (cJSON_GetObjectItemCaseSensitive(ann, VJ_KUEUE_COUNT_ANNOTATION)) {
        cJSON *s = cJSON_CreateString(v);
        if (s == NULL || !cJSON_ReplaceItemInObjectCaseSensitive(ann, VJ_KUEUE_COUNT_ANNOTATION, s))
            return -1;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pod, "spec"),
                                                           "containers"))
    {
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(c, "name");
        if (!cJSON_IsString(cn) || strcmp(cn->valuestring, VJ_CONTAINER) != 0)
            continue;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(c, "env"))
        {
            const cJSON *en = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (cJSON_IsString(en) && strcmp(en->valuestring, VJ_ENV_REPLICAS) == 0) {
                cJSON *s = cJSON_CreateString(v);
                return s && cJSON_ReplaceItemInObjectCaseSensitive(e, "value", s) ? 0 : -1;
            }
        }
    }
    return -1;
}

int vj_render_prefer_off_node(cJSON *pod, const char *node)
{
    cJSON *na = obj_at(obj_at(obj_at(pod, "spec"), "affinity"), "nodeAffinity");
    if (na == NULL)
        return -1;
    cJSON *pref = arr_at(na, "preferredDuringSchedulingIgnoredDuringExecution");
    cJSON *term = cJSON_CreateObject(), *preference, *fields, *req;
    if (pref == NULL || term == NULL || !cJSON_AddItemToArray(pref, term)) {
        cJSON_Delete(term);
        return -1;
    }
    if (!cJSON_AddNumberToObject(term, "weight", VJ_PREFER_OFF_WEIGHT) ||
        (preference = cJSON_AddObjectToObject(term, "preference")) == NULL ||
        (fields = cJSON_AddArrayToObject(preference, "matchFields")) == NULL ||
        (req = not_this_node(node)) == NULL)
        return -1;
    if (!cJSON_AddItemToArray(fields, req)) {
        cJSON_Delete(req);
        return -1;
    }
    return 0;
}

cJSON *vj_render_podgroup(const cJSON *job, char *err, size_t errlen)
{
    vj_jobspec js;
    if (vj_jobspec_parse(job, &js, err, errlen) != 0)
        return NULL;
    if (js.gang != VJ_GANG_VOLCANO && js.gang != VJ_GANG_COSCHEDULING) {
        snprintf(err, errlen, "spec.runPolicy.schedulingPolicy.gang=\"%s\": no PodGroup",
                 js.gang_name);
        return NULL;
    }
    bld b = {1};
    cJSON *o = new_child(&b, &js, vj_gang_api_version(js.gang), VJ_PG_KIND, js.name, NULL);
    cJSON *spec = add_obj(&b, o, "spec");
    add_num(&b, spec, "minMember", js.min_available);
    if (js.gang == VJ_GANG_VOLCANO) {
        if (js.queue)
            add_str(&b, spec, "queue", js.queue);
        if (js.priority_class)
            add_str(&b, spec, "priorityClassName", js.priority_class);
    } else if (js.schedule_timeout > 0) {
        add_num(&b, spec, "scheduleTimeoutSeconds", (double)js.schedule_timeout);
    }
    return finish(&b, o, err, errlen);
}

/* ------------------------------------------------------------------- diff */

/* desired ⊆ existing: objects by key (recursively), arrays element by element
 * with equal lengths, scalars equal. */
static int subset(const cJSON *want, const cJSON *have)
{
    if (want == NULL)
        return 1;
    if (have == NULL)
        return 0;
    if (cJSON_IsObject(want)) {
        if (!cJSON_IsObject(have))
            return 0;
        for (const cJSON *ch = want->child; ch; ch = ch->next)
            if (!subset(ch, cJSON_GetObjectItemCaseSensitive(have, ch->string)))
                return 0;
        return 1;
    }
    if (cJSON_IsArray(want)) {
        if (!cJSON_IsArray(have) || cJSON_GetArraySize(want) != cJSON_GetArraySize(have))
            return 0;
        const cJSON *h = have->child;
        for (const cJSON *w = want->child; w; w = w->next, h = h->next)
            if (!subset(w, h))
                return 0;
        return 1;
    }
    return cJSON_Compare(want, have, 1);
}

/* parent[key] as an object, added when absent. */
static cJSON *obj_in(bld *b, cJSON *parent, const char *key)
{
    cJSON *o = parent ? cJSON_GetObjectItemCaseSensitive(parent, key) : NULL;
    return o ? o : add_obj(b, parent, key);
}

vj_child_diff vj_render_diff(const cJSON *existing, const cJSON *desired, cJSON **patch)
{
    *patch = NULL;
    const cJSON *kind = json_at(desired, "kind", NULL);
    if (!cJSON_IsString(kind))
        return VJ_CHILD_ERROR;
    const char *k = kind->valuestring;
    /* immutable fields: only a new object can change them */
    if (strcmp(k, "Service") == 0 &&
        !subset(json_at(desired, "spec", "clusterIP"), json_at(existing, "spec", "clusterIP")))
        return VJ_CHILD_RECREATE;
    if (strcmp(k, "RoleBinding") == 0 &&
        !subset(json_at(desired, "roleRef", NULL), json_at(existing, "roleRef", NULL)))
        return VJ_CHILD_RECREATE;

    bld b = {1};
    cJSON *p = cJSON_CreateObject();
    if (p == NULL)
        return VJ_CHILD_ERROR;
    /* our labels; everybody else's stay */
    const cJSON *want_labels = json_at(desired, "metadata", "labels");
    const cJSON *have_labels = json_at(existing, "metadata", "labels");
    for (const cJSON *l = want_labels ? want_labels->child : NULL; l; l = l->next)
        if (!subset(l, json_at(have_labels, l->string, NULL)))
            add_dup(&b, obj_in(&b, obj_in(&b, p, "metadata"), "labels"), l->string, l);
    if (strcmp(k, "ConfigMap") == 0) {
        /* our key of data; keys others added stay */
        const cJSON *want = json_at(desired, "data", NULL), *have = json_at(existing, "data", NULL);
        for (const cJSON *d = want ? want->child : NULL; d; d = d->next)
            if (!subset(d, json_at(have, d->string, NULL)))
                add_dup(&b, obj_in(&b, p, "data"), d->string, d);
    } else if (strcmp(k, "Service") == 0) {
        /* the spec fields we set; the selector exactly ours (a key others
         * added would select other pods), so theirs are removed (null) */
        const cJSON *want = json_at(desired, "spec", NULL), *have = json_at(existing, "spec", NULL);
        for (const cJSON *f = want ? want->child : NULL; f; f = f->next) {
            if (strcmp(f->string, "selector") != 0) {
                if (!subset(f, json_at(have, f->string, NULL)))
                    add_dup(&b, obj_in(&b, p, "spec"), f->string, f);
                continue;
            }
            const cJSON *hs = json_at(have, "selector", NULL);
            for (const cJSON *e = f->child; e; e = e->next)
                if (!subset(e, json_at(hs, e->string, NULL)))
                    add_dup(&b, obj_in(&b, obj_in(&b, p, "spec"), "selector"), e->string, e);
            for (const cJSON *e = hs ? hs->child : NULL; e; e = e->next)
                if (!json_at(f, e->string, NULL) &&
                    !cJSON_AddNullToObject(obj_in(&b, obj_in(&b, p, "spec"), "selector"),
                                           e->string))
                    b.ok = 0;
        }
    } else if (strcmp(k, "Role") == 0) {
        if (!subset(json_at(desired, "rules", NULL), json_at(existing, "rules", NULL)))
            add_dup(&b, p, "rules", json_at(desired, "rules", NULL));
    } else if (strcmp(k, "RoleBinding") == 0) {
        if (!subset(json_at(desired, "subjects", NULL), json_at(existing, "subjects", NULL)))
            add_dup(&b, p, "subjects", json_at(desired, "subjects", NULL));
    } else if (strcmp(k, VJ_PG_KIND) == 0) {
        /* the spec fields we set; the scheduler's status and others' fields stay */
        const cJSON *want = json_at(desired, "spec", NULL), *have = json_at(existing, "spec", NULL);
        for (const cJSON *f = want ? want->child : NULL; f; f = f->next)
            if (!subset(f, json_at(have, f->string, NULL)))
                add_dup(&b, obj_in(&b, p, "spec"), f->string, f);
    }
    if (!b.ok) {
        cJSON_Delete(p);
        return VJ_CHILD_ERROR;
    }
    if (p->child == NULL) {
        cJSON_Delete(p);
        return VJ_CHILD_OK;
    }
    *patch = p;
    return VJ_CHILD_PATCH;
}
