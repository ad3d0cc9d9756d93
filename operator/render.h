/* operator/render.h - the desired child objects of a ViTJob.
 *
 * Owns: turning a ViTJob (cJSON as read from the API server) into the
 * ConfigMap, headless Service and worker Pods the operator wants to exist,
 * following docs/design.md's operator <-> worker contract, and deciding whether an
 * existing child is close enough to the desired one.
 * Must not: do I/O, read the clock, or decide WHICH children should exist
 * (that is decide.h); it renders whatever it is asked for.
 *
 * Every vj_render_* builder returns a new object (caller frees with
 * cJSON_Delete), or NULL with a message in err (not a ViTJob, or OOM).
 */
#ifndef VITJOB_RENDER_H
#define VITJOB_RENDER_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "contract.h"

#define VJ_RBAC_API "rbac.authorization.k8s.io/v1"
#define VJ_NAME_LEN 320

/* "<job>-worker-<rank>-r<restart>" into buf. Returns 0, -1 if it does not fit. */
int vj_render_pod_name(char *buf, size_t len, const char *job, int rank, int restart);

/* "<job>-config". Returns 0, -1 if it does not fit. */
int vj_render_configmap_name(char *buf, size_t len, const char *job);

/* "<job>-worker": the job's ServiceAccount, Role and RoleBinding. Returns 0,
 * -1 if it does not fit. */
int vj_render_identity_name(char *buf, size_t len, const char *job);

/* ConfigMap <job>-config: data."config.json" = {model, data, training,
 * checkpoint} of the spec (those present), owned by the job. */
cJSON *vj_render_configmap(const cJSON *job, char *err, size_t errlen);

/* Headless Service <job>: clusterIP None, selector job-name=<job>, port 29400
 * named rdzv, publishNotReadyAddresses true, owned by the job. */
cJSON *vj_render_service(const cJSON *job, char *err, size_t errlen);

/* The worker identity of a job that names no service account in
 * spec.template, all named <job>-worker and owned by the job: a
 * ServiceAccount; a Role allowing get and patch of vitjobs/status for this
 * job's name only; a RoleBinding of the one to the other. */
cJSON *vj_render_service_account(const cJSON *job, char *err, size_t errlen);
cJSON *vj_render_role(const cJSON *job, char *err, size_t errlen);
cJSON *vj_render_role_binding(const cJSON *job, char *err, size_t errlen);

/* Worker pod of `rank` in restart generation `restart` (see docs/design.md):
 * name, hostname, subdomain, labels, owner reference, env contract, config
 * mount, GPU limit, the gang's PodGroup (vj_render_podgroup), the service
 * account (spec.template's, else the job's own
 * identity, whose token every rank mounts: any may report a lost peer), security contexts that pass the
 * restricted Pod Security Standard (spec.template.securityContext and
 * .containerSecurityContext replace them) and spec.template overrides. */
cJSON *vj_render_pod(const cJSON *job, int rank, int restart, char *err, size_t errlen);

/* Keeps `pod` (as vj_render_pod made it) off the n `nodes`: every term of
 * its required node affinity gets one matchFields requirement metadata.name
 * NotIn [node] per node (a node field selector takes one value; a term is
 * added when it has none), so a template's own node affinity still
 * holds. Returns 0, or -1 out of memory (pod then incomplete: free it). */
int vj_render_avoid_nodes(cJSON *pod, const char *const *nodes, size_t n);

/* Makes `pod` (as vj_render_pod made it) one of a gang of `replicas` pods
 * instead of spec.replicas (spec.elastic, operator/elastic.h): the worker
 * container's VITJOB_REPLICAS, which the worker reads for its world size,
 * and under Kueue its pod group's total count (operator/kueue.h).
 * Returns 0, or -1 out of memory or when the pod has no such variable. */
int vj_render_set_replicas(cJSON *pod, int replicas);

/* Makes `pod` prefer any node but `node`: a preferred node affinity term of
 * weight VJ_PREFER_OFF_WEIGHT, matchFields metadata.name NotIn [node], added
 * to the template's own. The scheduler still places it there when nothing
 * else fits. Returns 0, or -1 out of memory (pod then incomplete: free it). */
#define VJ_PREFER_OFF_WEIGHT 100
int vj_render_prefer_off_node(cJSON *pod, const char *node);

/* The gang's PodGroup <job> (spec.runPolicy.schedulingPolicy.gang volcano
 * or coscheduling; NULL with a message for none), owned by the job:
 * volcano's scheduling.volcano.sh/v1beta1 {minMember, queue,
 * priorityClassName}, coscheduling's scheduling.x-k8s.io/v1alpha1
 * {minMember, scheduleTimeoutSeconds}, those set. The pods name it:
 * volcano's annotation scheduling.k8s.io/group-name and schedulerName
 * volcano, coscheduling's label scheduling.x-k8s.io/pod-group. */
cJSON *vj_render_podgroup(const cJSON *job, char *err, size_t errlen);

typedef enum {
    VJ_CHILD_OK = 0,   /* as desired: nothing to do */
    VJ_CHILD_PATCH,    /* *patch: a JSON merge patch of the fields the operator owns */
    VJ_CHILD_RECREATE, /* an immutable field differs (Service clusterIP, RoleBinding
                          roleRef): delete it; the next reconcile creates it anew */
    VJ_CHILD_ERROR,    /* desired has no kind, or out of memory */
} vj_child_diff;

/* Compares `existing` (as read from the API server: list items carry no
 * kind or apiVersion, and the server adds defaults) with `desired` (a
 * vj_render_* result, whose kind says what is compared). Owned fields: the
 * operator's labels (others' labels and all annotations stay), and per kind
 * ConfigMap data."config.json", Service spec fields the operator sets (the
 * selector exactly), Role rules, RoleBinding subjects, PodGroup spec
 * fields. *patch (caller frees
 * with cJSON_Delete) is set only for VJ_CHILD_PATCH. Pods are never patched:
 * they are immutable, and decide.c replaces them by generation. */
vj_child_diff vj_render_diff(const cJSON *existing, const cJSON *desired, cJSON **patch);

#endif
