/* tests/test_render.c - operator/render.c: the ConfigMap, Service and worker
 * Pods of a ViTJob (docs/design.md's operator <-> worker contract), template
 * overrides, the worker identity, security contexts, the gang's PodGroup and
 * what the pods say of it, and vj_render_diff. */
#include "render.h"
#include "contract.h"

#include "config.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *job_with(const char *spec_extra)
{
    char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"vitjob.dev/v1alpha1\",\"kind\":\"ViTJob\","
             "\"metadata\":{\"name\":\"vit\",\"namespace\":\"ml\",\"uid\":\"uid-7\"},"
             "\"spec\":{\"replicas\":4,\"image\":\"ghcr.io/x/vitjob-worker:1\","
             "\"runPolicy\":{\"backoffLimit\":2},\"suspend\":false,"
             "\"model\":{\"preset\":\"fmnist_tiny\"},\"data\":{\"augment\":true},"
             "\"training\":{\"steps\":10,\"globalBatchSize\":256,\"microBatchSize\":32}%s%s}}",
             spec_extra ? "," : "", spec_extra ? spec_extra : "");
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "bad JSON: %s", buf);
    return j;
}

static cJSON *at(cJSON *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = buf, *dot; o && k; k = dot ? dot + 1 : NULL) {
        dot = strchr(k, '.');
        if (dot)
            *dot = '\0';
        if (cJSON_IsArray(o))
            o = cJSON_GetArrayItem(o, atoi(k));
        else
            o = cJSON_GetObjectItemCaseSensitive(o, k);
    }
    return o;
}

static const char *str_at(cJSON *o, const char *path)
{
    cJSON *v = at(o, path);
    cr_assert(cJSON_IsString(v), "%s is not a string", path);
    return v->valuestring;
}

static const char *env_of(cJSON *pod, const char *name)
{
    cJSON *e;
    cJSON_ArrayForEach(e, at(pod, "spec.containers.0.env"))
    {
        if (strcmp(cJSON_GetObjectItem(e, "name")->valuestring, name) == 0) {
            cJSON *v = cJSON_GetObjectItem(e, "value");
            return v ? v->valuestring : "<valueFrom>";
        }
    }
    return NULL;
}

static cJSON *pod(cJSON *job, int rank, int gen)
{
    char err[256] = "";
    cJSON *p = vj_render_pod(job, rank, gen, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    return p;
}

Test(render, pod_name_hostname_subdomain_labels_and_owner_follow_the_contract)
{
    cJSON *j = job_with(NULL);
    cJSON *p = pod(j, 3, 2);
    cr_assert_str_eq(str_at(p, "metadata.name"), "vit-worker-3-r2");
    cr_assert_str_eq(str_at(p, "metadata.namespace"), "ml");
    cr_assert_str_eq(str_at(p, "spec.hostname"), "vit-worker-3");
    cr_assert_str_eq(str_at(p, "spec.subdomain"), "vit");
    cJSON *labels = at(p, "metadata.labels");
    cr_assert_str_eq(cJSON_GetObjectItem(labels, "vitjob.dev/job-name")->valuestring, "vit");
    cr_assert_str_eq(cJSON_GetObjectItem(labels, "vitjob.dev/rank")->valuestring, "3");
    cr_assert_str_eq(cJSON_GetObjectItem(labels, "vitjob.dev/restart")->valuestring, "2");
    cr_assert_str_eq(str_at(p, "metadata.ownerReferences.0.kind"), "ViTJob");
    cr_assert_str_eq(str_at(p, "metadata.ownerReferences.0.uid"), "uid-7");
    cr_assert(cJSON_IsTrue(at(p, "metadata.ownerReferences.0.controller")));
    cr_assert(cJSON_IsTrue(at(p, "metadata.ownerReferences.0.blockOwnerDeletion")));
    cr_assert_str_eq(str_at(p, "spec.restartPolicy"), "Never");
    cr_assert_str_eq(str_at(p, "spec.serviceAccountName"), "vit-worker", "the job's own identity");
    cr_assert_eq(cJSON_GetArraySize(at(p, "spec.containers")), 1);
    cr_assert_str_eq(str_at(p, "spec.containers.0.name"), "worker");
    cr_assert_str_eq(str_at(p, "spec.containers.0.image"), "ghcr.io/x/vitjob-worker:1");
    char *cmd = cJSON_PrintUnformatted(at(p, "spec.containers.0.command"));
    cr_assert_str_eq(cmd, "[\"vitjob-worker\",\"train\",\"--config\",\"/etc/vitjob/config.json\"]");
    free(cmd);
    cJSON_Delete(p);
    cJSON_Delete(j);
}

Test(render, pod_env_contract_and_config_mount)
{
    cJSON *j = job_with("\"gpusPerReplica\":2");
    cJSON *p = pod(j, 1, 5);
    cr_assert_str_eq(env_of(p, "VITJOB_NAME"), "vit");
    cr_assert_str_eq(env_of(p, "VITJOB_NAMESPACE"), "ml");
    cr_assert_str_eq(env_of(p, "VITJOB_RANK"), "1");
    cr_assert_str_eq(env_of(p, "VITJOB_REPLICAS"), "4");
    cr_assert_str_eq(env_of(p, "VITJOB_LOCAL_RANKS"), "2");
    cr_assert_str_eq(env_of(p, "VITJOB_RDZV_ENDPOINT"), "vit-worker-0.vit.ml.svc:29400");
    cr_assert_str_eq(env_of(p, "VITJOB_RESTART"), "5");
    cr_assert_null(env_of(p, "AWS_ACCESS_KEY_ID"), "no secret, no credentials");
    cr_assert_str_eq(str_at(p, "spec.containers.0.volumeMounts.0.mountPath"), "/etc/vitjob");
    cr_assert_str_eq(str_at(p, "spec.containers.0.volumeMounts.0.name"), "config");
    cr_assert_str_eq(str_at(p, "spec.volumes.0.name"), "config");
    cr_assert_str_eq(str_at(p, "spec.volumes.0.configMap.name"), "vit-config");
    cr_assert_str_eq(cJSON_GetObjectItem(at(p, "spec.containers.0.resources.limits"), "nvidia.com/gpu")->valuestring, "2");
    cJSON_Delete(p);
    cJSON_Delete(j);
}

Test(render, cpu_pod_has_one_local_rank_and_no_gpu_limit)
{
    cJSON *j = job_with(NULL);
    cJSON *p = pod(j, 0, 0);
    cr_assert_str_eq(env_of(p, "VITJOB_LOCAL_RANKS"), "1");
    cr_assert_null(at(p, "spec.containers.0.resources"));
    cJSON_Delete(p);
    cJSON_Delete(j);
}

Test(render, credentials_secret_becomes_aws_env_from_secret_key_refs)
{
    cJSON *j = job_with("\"checkpoint\":{\"uri\":\"s3://b/ck\",\"credentialsSecret\":\"s3-creds\"}");
    cJSON *p = pod(j, 0, 0);
    const char *names[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_SESSION_TOKEN"};
    for (int i = 0; i < 4; i++) {
        cJSON *e;
        int found = 0;
        cJSON_ArrayForEach(e, at(p, "spec.containers.0.env"))
        {
            if (strcmp(cJSON_GetObjectItem(e, "name")->valuestring, names[i]) != 0)
                continue;
            found = 1;
            cJSON *ref = at(e, "valueFrom.secretKeyRef");
            cr_assert_str_eq(cJSON_GetObjectItem(ref, "name")->valuestring, "s3-creds");
            cr_assert_str_eq(cJSON_GetObjectItem(ref, "key")->valuestring, names[i]);
            cr_assert_eq(cJSON_IsTrue(cJSON_GetObjectItem(ref, "optional")), i >= 2,
                         "%s optional only for region and session token", names[i]);
        }
        cr_assert(found, "%s missing", names[i]);
    }
    cJSON_Delete(p);
    cJSON_Delete(j);
}

Test(render, template_overrides_are_merged_and_gpu_limit_wins)
{
    cJSON *j = job_with("\"gpusPerReplica\":1,\"template\":{"
                        "\"resources\":{\"requests\":{\"cpu\":\"4\",\"memory\":\"16Gi\",\"nvidia.com/gpu\":\"8\"},"
                        "\"limits\":{\"memory\":\"32Gi\",\"nvidia.com/gpu\":\"8\"}},"
                        "\"nodeSelector\":{\"gpu\":\"h100\"},"
                        "\"tolerations\":[{\"key\":\"gpu\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}],"
                        "\"schedulerName\":\"volcano\",\"priorityClassName\":\"high\","
                        "\"terminationGracePeriodSeconds\":120}");
    cJSON *p = pod(j, 0, 0);
    cJSON *lim = at(p, "spec.containers.0.resources.limits");
    cJSON *req = at(p, "spec.containers.0.resources.requests");
    cr_assert_str_eq(cJSON_GetObjectItem(lim, "memory")->valuestring, "32Gi");
    cr_assert_str_eq(cJSON_GetObjectItem(lim, "nvidia.com/gpu")->valuestring, "1");
    cr_assert_str_eq(cJSON_GetObjectItem(req, "nvidia.com/gpu")->valuestring, "1");
    cr_assert_str_eq(cJSON_GetObjectItem(req, "cpu")->valuestring, "4");
    cr_assert_str_eq(str_at(p, "spec.nodeSelector.gpu"), "h100");
    cr_assert_str_eq(str_at(p, "spec.tolerations.0.key"), "gpu");
    cr_assert_str_eq(str_at(p, "spec.schedulerName"), "volcano");
    cr_assert_str_eq(str_at(p, "spec.priorityClassName"), "high");
    cr_assert_eq(at(p, "spec.terminationGracePeriodSeconds")->valueint, 120);
    cJSON_Delete(p);
    cJSON_Delete(j);
}

Test(render, configmap_holds_the_worker_part_and_the_worker_accepts_it)
{
    cJSON *j = job_with(NULL);
    char err[512] = "";
    cJSON *cm = vj_render_configmap(j, err, sizeof err);
    cr_assert_not_null(cm, "%s", err);
    cr_assert_str_eq(str_at(cm, "metadata.name"), "vit-config");
    cr_assert_str_eq(str_at(cm, "kind"), "ConfigMap");
    const char *text = cJSON_GetObjectItem(at(cm, "data"), "config.json")->valuestring;
    cJSON *doc = cJSON_Parse(text);
    cr_assert_not_null(doc);
    cr_assert_not_null(cJSON_GetObjectItem(doc, "model"));
    cr_assert_not_null(cJSON_GetObjectItem(doc, "training"));
    cr_assert_null(cJSON_GetObjectItem(doc, "replicas"), "operator keys stay out");
    cr_assert_null(cJSON_GetObjectItem(doc, "runPolicy"));
    cJSON_Delete(doc);
    vit_job_config cfg;
    config_defaults(&cfg);
    cr_assert_eq(config_load_string(&cfg, text, strlen(text), "cm", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg.training.global_batch_size, 256);
    cr_assert_eq(cfg.data.augment, 1);
    cJSON_Delete(cm);
    cJSON_Delete(j);
}

Test(render, service_is_headless_with_rdzv_port_and_not_ready_addresses)
{
    cJSON *j = job_with(NULL);
    char err[256];
    cJSON *s = vj_render_service(j, err, sizeof err);
    cr_assert_not_null(s);
    cr_assert_str_eq(str_at(s, "metadata.name"), "vit");
    cr_assert_str_eq(str_at(s, "spec.clusterIP"), "None");
    cr_assert(cJSON_IsTrue(at(s, "spec.publishNotReadyAddresses")));
    cr_assert_str_eq(cJSON_GetObjectItem(at(s, "spec.selector"), "vitjob.dev/job-name")->valuestring, "vit");
    cr_assert_str_eq(str_at(s, "spec.ports.0.name"), "rdzv");
    cr_assert_eq(at(s, "spec.ports.0.port")->valueint, 29400);
    cr_assert_str_eq(str_at(s, "metadata.ownerReferences.0.name"), "vit");
    cJSON_Delete(s);
    cJSON_Delete(j);
}

/* An object as a real server lists it: no kind, no apiVersion. */
static cJSON *as_listed(const cJSON *o)
{
    cJSON *live = cJSON_Duplicate(o, 1);
    cJSON_DeleteItemFromObject(live, "kind");
    cJSON_DeleteItemFromObject(live, "apiVersion");
    cJSON_AddStringToObject(at(live, "metadata"), "resourceVersion", "12");
    return live;
}

static vj_child_diff diff(const cJSON *live, const cJSON *want, char **patch_text)
{
    cJSON *patch = NULL;
    vj_child_diff d = vj_render_diff(live, want, &patch);
    *patch_text = patch ? cJSON_PrintUnformatted(patch) : NULL;
    cr_assert_eq(patch != NULL, d == VJ_CHILD_PATCH, "a patch exactly when one is due");
    cJSON_Delete(patch);
    return d;
}

Test(render, diff_of_a_listed_child_without_kind_and_with_server_defaults_is_empty)
{
    cJSON *j = job_with(NULL);
    char err[256], *pt = NULL;
    cJSON *(*renders[])(const cJSON *, char *, size_t) = {
        vj_render_service, vj_render_configmap, vj_render_service_account, vj_render_role,
        vj_render_role_binding};
    for (size_t i = 0; i < sizeof renders / sizeof renders[0]; i++) {
        cJSON *want = renders[i](j, err, sizeof err);
        cr_assert_not_null(want, "%s", err);
        cJSON *live = as_listed(want);
        cJSON_AddStringToObject(at(live, "metadata"), "uid", "child-uid");
        if (at(live, "spec"))
            cJSON_AddStringToObject(at(live, "spec"), "sessionAffinity", "None");
        cr_assert_eq(diff(live, want, &pt), VJ_CHILD_OK, "%s: listed without kind is no difference (%s)",
                     str_at(want, "kind"), pt ? pt : "");
        cJSON_Delete(live);
        cJSON_Delete(want);
    }
    cJSON_Delete(j);
}

Test(render, diff_patches_only_owned_fields_and_keeps_others_labels_and_annotations)
{
    cJSON *j = job_with(NULL);
    char err[256], *pt = NULL;
    cJSON *cm = vj_render_configmap(j, err, sizeof err);
    cJSON *live = as_listed(cm);
    cJSON_AddItemToObject(at(live, "metadata"), "annotations", cJSON_Parse("{\"owner-team\":\"ml\"}"));
    cJSON_AddStringToObject(at(live, "metadata.labels"), "backup", "daily");
    cJSON_AddStringToObject(at(live, "data"), "notes.txt", "theirs");
    cr_assert_eq(diff(live, cm, &pt), VJ_CHILD_OK, "others' labels, annotations, data: %s", pt ? pt : "");
    cJSON_ReplaceItemInObject(at(live, "data"), "config.json", cJSON_CreateString("{}"));
    cJSON_ReplaceItemInObject(at(live, "metadata.labels"), "vitjob.dev/job-name", cJSON_CreateString("x"));
    cr_assert_eq(diff(live, cm, &pt), VJ_CHILD_PATCH);
    cJSON *patch = cJSON_Parse(pt);
    cr_assert_str_eq(cJSON_GetObjectItem(at(patch, "metadata.labels"), "vitjob.dev/job-name")->valuestring,
                     "vit");
    cJSON_free(pt);
    cr_assert_null(at(patch, "metadata.annotations"), "annotations are not ours");
    cr_assert_null(cJSON_GetObjectItem(at(patch, "metadata.labels"), "backup"));
    cr_assert_not_null(cJSON_GetObjectItem(at(patch, "data"), "config.json"));
    cr_assert_null(cJSON_GetObjectItem(at(patch, "data"), "notes.txt"));
    cJSON_Delete(patch);
    cJSON_Delete(live);
    cJSON_Delete(cm);
    cJSON_Delete(j);
}

Test(render, diff_of_a_service_removes_foreign_selector_keys_and_recreates_for_cluster_ip)
{
    cJSON *j = job_with(NULL);
    char err[256], *pt = NULL;
    cJSON *s = vj_render_service(j, err, sizeof err);
    cJSON *live = as_listed(s);
    cJSON_AddStringToObject(at(live, "spec.selector"), "extra", "yes");
    cr_assert_eq(diff(live, s, &pt), VJ_CHILD_PATCH);
    cJSON *patch = cJSON_Parse(pt);
    cJSON_free(pt);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(at(patch, "spec.selector"), "extra")),
              "a foreign selector key is removed with null");
    cJSON_Delete(patch);
    cJSON_ReplaceItemInObject(at(live, "spec"), "clusterIP", cJSON_CreateString("10.0.0.1"));
    cr_assert_eq(diff(live, s, &pt), VJ_CHILD_RECREATE, "clusterIP is immutable");
    cJSON_Delete(live);
    cJSON_Delete(s);
    cJSON_Delete(j);
}

Test(render, identity_role_allows_only_get_and_patch_of_this_jobs_status)
{
    cJSON *j = job_with(NULL);
    char err[256];
    cJSON *sa = vj_render_service_account(j, err, sizeof err);
    cJSON *role = vj_render_role(j, err, sizeof err);
    cJSON *rb = vj_render_role_binding(j, err, sizeof err);
    cr_assert_str_eq(str_at(sa, "metadata.name"), "vit-worker");
    cr_assert_str_eq(str_at(sa, "metadata.namespace"), "ml");
    cr_assert_str_eq(str_at(sa, "metadata.ownerReferences.0.uid"), "uid-7");
    cr_assert_eq(cJSON_GetArraySize(at(role, "rules")), 1);
    cr_assert_str_eq(str_at(role, "rules.0.apiGroups.0"), "vitjob.dev");
    cr_assert_str_eq(str_at(role, "rules.0.resources.0"), "vitjobs/status");
    cr_assert_eq(cJSON_GetArraySize(at(role, "rules.0.resources")), 1);
    cr_assert_str_eq(str_at(role, "rules.0.resourceNames.0"), "vit");
    cr_assert_eq(cJSON_GetArraySize(at(role, "rules.0.verbs")), 2);
    cr_assert_str_eq(str_at(role, "rules.0.verbs.0"), "get");
    cr_assert_str_eq(str_at(role, "rules.0.verbs.1"), "patch");
    cr_assert_str_eq(str_at(rb, "roleRef.kind"), "Role");
    cr_assert_str_eq(str_at(rb, "roleRef.name"), "vit-worker");
    cr_assert_str_eq(str_at(rb, "subjects.0.kind"), "ServiceAccount");
    cr_assert_str_eq(str_at(rb, "subjects.0.name"), "vit-worker");
    cr_assert_str_eq(str_at(rb, "subjects.0.namespace"), "ml");
    cJSON *p0 = pod(j, 0, 0), *p1 = pod(j, 1, 0);
    cr_assert_str_eq(str_at(p0, "spec.serviceAccountName"), "vit-worker");
    cr_assert_null(at(p0, "spec.automountServiceAccountToken"), "rank 0 reports: it gets the token");
    cr_assert_null(at(p1, "spec.automountServiceAccountToken"),
                   "any surviving rank may report a lost peer: every rank gets it");
    cJSON_Delete(p0);
    cJSON_Delete(p1);
    cJSON_Delete(sa);
    cJSON_Delete(role);
    cJSON_Delete(rb);
    cJSON_Delete(j);
}

Test(render, pods_pass_the_restricted_pod_security_standard_unless_the_template_says_otherwise)
{
    cJSON *j = job_with(NULL);
    cJSON *p = pod(j, 0, 0);
    cr_assert(cJSON_IsTrue(at(p, "spec.securityContext.runAsNonRoot")));
    cr_assert_eq(at(p, "spec.securityContext.runAsUser")->valueint, 65532);
    cr_assert_str_eq(str_at(p, "spec.securityContext.seccompProfile.type"), "RuntimeDefault");
    cr_assert(cJSON_IsFalse(at(p, "spec.containers.0.securityContext.allowPrivilegeEscalation")));
    cr_assert_str_eq(str_at(p, "spec.containers.0.securityContext.capabilities.drop.0"), "ALL");
    cJSON_Delete(p);
    cJSON_Delete(j);
    j = job_with("\"template\":{\"securityContext\":{\"runAsUser\":0},"
                 "\"containerSecurityContext\":{\"privileged\":true}}");
    p = pod(j, 0, 0);
    cr_assert_eq(at(p, "spec.securityContext.runAsUser")->valueint, 0);
    cr_assert_null(at(p, "spec.securityContext.runAsNonRoot"), "the template replaces the default");
    cr_assert(cJSON_IsTrue(at(p, "spec.containers.0.securityContext.privileged")));
    cr_assert_null(at(p, "spec.containers.0.securityContext.capabilities"));
    cJSON_Delete(p);
    cJSON_Delete(j);
}

Test(render, not_a_vitjob_is_an_error_with_a_message)
{
    cJSON *j = cJSON_Parse("{\"spec\":{}}");
    char err[256] = "";
    cr_assert_null(vj_render_pod(j, 0, 0, err, sizeof err));
    cr_assert(strstr(err, "metadata.name"));
    cJSON_Delete(j);
}

Test(render, pods_tolerate_a_lost_node_for_node_lost_toleration_seconds_unless_the_template_does)
{
    cJSON *j = job_with(NULL);
    cJSON *p = pod(j, 1, 0);
    cJSON *tols = at(p, "spec.tolerations");
    cr_assert_eq(cJSON_GetArraySize(tols), 2);
    cr_assert_str_eq(str_at(p, "spec.tolerations.0.key"), "node.kubernetes.io/unreachable");
    cr_assert_str_eq(str_at(p, "spec.tolerations.0.effect"), "NoExecute");
    cr_assert_str_eq(str_at(p, "spec.tolerations.0.operator"), "Exists");
    cr_assert_eq(at(p, "spec.tolerations.0.tolerationSeconds")->valueint, VJ_NODE_LOST_TOLERATION_S);
    cr_assert_str_eq(str_at(p, "spec.tolerations.1.key"), "node.kubernetes.io/not-ready");
    /* the worker's last line becomes the termination message */
    cr_assert_str_eq(str_at(p, "spec.containers.0.terminationMessagePolicy"), "FallbackToLogsOnError");
    /* ... written by the worker to the file the pod names, told by its env */
    cr_assert_str_eq(str_at(p, "spec.containers.0.terminationMessagePath"), "/dev/termination-log");
    cr_assert_str_eq(env_of(p, "VITJOB_TERMINATION_LOG"), "/dev/termination-log");
    cJSON_Delete(p);
    cJSON_Delete(j);

    j = job_with("\"template\":{\"tolerations\":["
                 "{\"key\":\"node.kubernetes.io/unreachable\",\"operator\":\"Exists\",\"effect\":\"NoExecute\","
                 "\"tolerationSeconds\":600}]}");
    cJSON_AddNumberToObject(at(j, "spec.runPolicy"), "nodeLostTolerationSeconds", 45);
    p = pod(j, 0, 0);
    tols = at(p, "spec.tolerations");
    cr_assert_eq(cJSON_GetArraySize(tols), 2, "the template's unreachable toleration wins");
    cr_assert_eq(at(p, "spec.tolerations.0.tolerationSeconds")->valueint, 600);
    cr_assert_str_eq(str_at(p, "spec.tolerations.1.key"), "node.kubernetes.io/not-ready");
    cr_assert_eq(at(p, "spec.tolerations.1.tolerationSeconds")->valueint, 45);
    cJSON_Delete(p);
    cJSON_Delete(j);
}

/* A job of 4 replicas with this spec.runPolicy.schedulingPolicy. */
static cJSON *gang_job(const char *policy, const char *tmpl)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"vitjob.dev/v1alpha1\",\"kind\":\"ViTJob\","
             "\"metadata\":{\"name\":\"vit\",\"namespace\":\"ml\",\"uid\":\"uid-7\"},"
             "\"spec\":{\"replicas\":4,\"image\":\"img:1\","
             "\"runPolicy\":{\"schedulingPolicy\":%s}%s%s}}",
             policy, tmpl ? ",\"template\":" : "", tmpl ? tmpl : "");
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "bad JSON: %s", buf);
    return j;
}

static cJSON *podgroup(cJSON *job)
{
    char err[256] = "";
    cJSON *pg = vj_render_podgroup(job, err, sizeof err);
    cr_assert_not_null(pg, "%s", err);
    return pg;
}

static void assert_owned_by_the_job(cJSON *o)
{
    cr_assert_str_eq(str_at(o, "metadata.ownerReferences.0.kind"), "ViTJob");
    cr_assert_str_eq(str_at(o, "metadata.ownerReferences.0.uid"), "uid-7");
    cr_assert(cJSON_IsTrue(at(o, "metadata.ownerReferences.0.controller")));
}

Test(render, volcano_podgroup_has_min_member_queue_and_priority_and_is_owned_by_the_job)
{
    cJSON *job = gang_job("{\"gang\":\"volcano\",\"minAvailable\":3,\"queue\":\"research\","
                          "\"priorityClass\":\"high\",\"scheduleTimeoutSeconds\":9}", NULL);
    cJSON *pg = podgroup(job);
    cr_assert_str_eq(str_at(pg, "apiVersion"), "scheduling.volcano.sh/v1beta1");
    cr_assert_str_eq(str_at(pg, "kind"), "PodGroup");
    cr_assert_str_eq(str_at(pg, "metadata.name"), "vit");
    cr_assert_str_eq(str_at(pg, "metadata.namespace"), "ml");
    cr_assert_str_eq(cJSON_GetObjectItem(at(pg, "metadata.labels"), VJ_LABEL_JOB)->valuestring,
                     "vit");
    assert_owned_by_the_job(pg);
    char *spec = cJSON_PrintUnformatted(at(pg, "spec"));
    cr_assert_str_eq(spec, "{\"minMember\":3,\"queue\":\"research\",\"priorityClassName\":\"high\"}");
    free(spec);
    cJSON_Delete(pg);
    cJSON_Delete(job);
}

Test(render, coscheduling_podgroup_has_min_member_of_all_replicas_and_the_timeout)
{
    cJSON *job = gang_job("{\"gang\":\"coscheduling\",\"scheduleTimeoutSeconds\":90,"
                          "\"queue\":\"ignored\"}", NULL);
    cJSON *pg = podgroup(job);
    cr_assert_str_eq(str_at(pg, "apiVersion"), "scheduling.x-k8s.io/v1alpha1");
    assert_owned_by_the_job(pg);
    char *spec = cJSON_PrintUnformatted(at(pg, "spec"));
    cr_assert_str_eq(spec, "{\"minMember\":4,\"scheduleTimeoutSeconds\":90}");
    free(spec);
    cJSON_Delete(pg);
    cJSON_Delete(job);
}

Test(render, no_gang_has_no_podgroup_and_pods_name_none)
{
    cJSON *job = gang_job("{\"gang\":\"none\"}", NULL);
    char err[256] = "";
    cr_assert_null(vj_render_podgroup(job, err, sizeof err));
    cr_assert(strstr(err, "gang=\"none\""), "%s", err);
    cJSON *p = pod(job, 0, 0);
    cr_assert_null(at(p, "metadata.annotations"));
    cr_assert_null(at(p, "spec.schedulerName"));
    cr_assert_null(cJSON_GetObjectItem(at(p, "metadata.labels"), "scheduling.x-k8s.io/pod-group"));
    cJSON_Delete(p);
    cJSON_Delete(job);
}

Test(render, volcano_pods_carry_the_group_annotation_and_the_volcano_scheduler_unless_the_template_names_one)
{
    cJSON *job = gang_job("{\"gang\":\"volcano\"}", NULL);
    cJSON *p = pod(job, 1, 2);
    cr_assert_str_eq(cJSON_GetObjectItem(at(p, "metadata.annotations"),
                                         "scheduling.k8s.io/group-name")->valuestring, "vit");
    cr_assert_str_eq(str_at(p, "spec.schedulerName"), "volcano");
    cJSON_Delete(p);
    cJSON_Delete(job);
    job = gang_job("{\"gang\":\"volcano\"}", "{\"schedulerName\":\"volcano-gpu\"}");
    p = pod(job, 0, 0);
    cr_assert_str_eq(str_at(p, "spec.schedulerName"), "volcano-gpu");
    cJSON_Delete(p);
    cJSON_Delete(job);
}

Test(render, coscheduling_pods_carry_the_pod_group_label_and_keep_the_clusters_scheduler)
{
    cJSON *job = gang_job("{\"gang\":\"coscheduling\"}", NULL);
    cJSON *p = pod(job, 3, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(at(p, "metadata.labels"),
                                         "scheduling.x-k8s.io/pod-group")->valuestring, "vit");
    cr_assert_null(at(p, "metadata.annotations"));
    cr_assert_null(at(p, "spec.schedulerName"));
    cJSON_Delete(p);
    cJSON_Delete(job);
}

Test(render, diff_of_a_podgroup_patches_only_our_spec_fields_and_keeps_the_schedulers_status)
{
    cJSON *job = gang_job("{\"gang\":\"volcano\",\"minAvailable\":2}", NULL);
    cJSON *want = podgroup(job);
    cJSON *live = as_listed(want);
    cJSON_AddStringToObject(at(live, "spec"), "queue", "default"); /* the CRD's default */
    cJSON *st = cJSON_AddObjectToObject(live, "status");
    cJSON_AddStringToObject(st, "phase", "Pending");
    char *text = NULL;
    cr_assert_eq(diff(live, want, &text), VJ_CHILD_OK, "%s", text ? text : "");
    cJSON_ReplaceItemInObject(at(live, "spec"), "minMember", cJSON_CreateNumber(4));
    cr_assert_eq(diff(live, want, &text), VJ_CHILD_PATCH);
    cr_assert_str_eq(text, "{\"spec\":{\"minMember\":2}}");
    free(text);
    cJSON_Delete(live);
    cJSON_Delete(want);
    cJSON_Delete(job);
}

Test(render, avoiding_lost_nodes_adds_one_single_valued_not_in_per_node_to_every_required_term_and_keeps_its_own)
{
    cJSON *j = job_with(NULL);
    cJSON *p = pod(j, 1, 3);
    /* a pod that already has required terms (ORed): each keeps its own */
    cJSON_AddItemToObject(at(p, "spec"), "affinity", cJSON_Parse(
        "{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":["
        "{\"matchExpressions\":[{\"key\":\"gpu\",\"operator\":\"In\",\"values\":[\"a100\"]}]},"
        "{\"matchExpressions\":[{\"key\":\"gpu\",\"operator\":\"In\",\"values\":[\"h100\"]}]}]}}}"));
    const char *nodes[] = {"node-a", "node-b"};
    cr_assert_eq(vj_render_avoid_nodes(p, nodes, 2), 0);
    for (int t = 0; t < 2; t++) {
        char path[128];
        snprintf(path, sizeof path, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                 "nodeSelectorTerms.%d", t);
        cJSON *term = at(p, path);
        cr_assert_str_eq(str_at(term, "matchExpressions.0.key"), "gpu", "term %d keeps its own", t);
        cr_assert_str_eq(str_at(term, "matchFields.0.key"), "metadata.name");
        cr_assert_str_eq(str_at(term, "matchFields.0.operator"), "NotIn");
        /* a node field selector takes exactly one value (the API refuses more) */
        cr_assert_str_eq(str_at(term, "matchFields.0.values.0"), "node-a");
        cr_assert_null(at(term, "matchFields.0.values.1"));
        cr_assert_str_eq(str_at(term, "matchFields.1.operator"), "NotIn");
        cr_assert_str_eq(str_at(term, "matchFields.1.values.0"), "node-b");
        cr_assert_null(at(term, "matchFields.1.values.1"));
    }
    cJSON_Delete(p);
    cJSON_Delete(j);

    j = job_with(NULL); /* no affinity at all: one term */
    p = pod(j, 0, 1);
    cr_assert_eq(vj_render_avoid_nodes(p, nodes, 1), 0);
    cJSON *terms = at(p, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                         "nodeSelectorTerms");
    cr_assert_eq(cJSON_GetArraySize(terms), 1);
    cr_assert_str_eq(str_at(terms, "0.matchFields.0.values.0"), "node-a");
    cr_assert_null(at(terms, "0.matchFields.0.values.1"));
    cJSON_Delete(p);
    cJSON_Delete(j);
}

Test(render, preferring_off_a_node_adds_a_weighted_preferred_term_and_keeps_the_templates_own)
{
    cJSON *j = job_with(NULL);
    cJSON *p = pod(j, 1, 2);
    cJSON_AddItemToObject(at(p, "spec"), "affinity", cJSON_Parse(
        "{\"nodeAffinity\":{\"preferredDuringSchedulingIgnoredDuringExecution\":[{\"weight\":5,"
        "\"preference\":{\"matchExpressions\":[{\"key\":\"zone\",\"operator\":\"In\",\"values\":[\"a\"]}]}}]}}"));
    cr_assert_eq(vj_render_prefer_off_node(p, "node-a"), 0);
    cJSON *pref = at(p, "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution");
    cr_assert_eq(cJSON_GetArraySize(pref), 2);
    cr_assert_str_eq(str_at(pref, "0.preference.matchExpressions.0.key"), "zone", "the template's own stays");
    cr_assert_eq(at(pref, "1.weight")->valueint, VJ_PREFER_OFF_WEIGHT);
    cr_assert_str_eq(str_at(pref, "1.preference.matchFields.0.key"), "metadata.name");
    cr_assert_str_eq(str_at(pref, "1.preference.matchFields.0.operator"), "NotIn");
    cr_assert_str_eq(str_at(pref, "1.preference.matchFields.0.values.0"), "node-a");
    cr_assert_null(at(pref, "1.preference.matchFields.0.values.1"));
    cr_assert_null(at(p, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
                   "only a preference: the node may be alive");
    cJSON_Delete(p);
    cJSON_Delete(j);
}

Test(render, a_smaller_world_rewrites_the_replicas_env_and_under_kueue_the_groups_total_count)
{
    cJSON *j = job_with(NULL);
    cJSON *labels = cJSON_AddObjectToObject(at(j, "metadata"), "labels");
    cJSON_AddStringToObject(labels, "kueue.x-k8s.io/queue-name", "team");
    cJSON *p = pod(j, 1, 2);
    const cJSON *ann = at(p, "metadata.annotations");
    cr_assert_str_eq(cJSON_GetObjectItem(ann, "kueue.x-k8s.io/pod-group-total-count")->valuestring, "4");
    cr_assert_eq(vj_render_set_replicas(p, 3), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(ann, "kueue.x-k8s.io/pod-group-total-count")->valuestring, "3");
    cJSON_Delete(p);
    cJSON_Delete(j);
}
