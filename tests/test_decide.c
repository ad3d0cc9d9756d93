/* tests/test_decide.c - operator/decide*.c (decide.h): the ViTJob lifecycle rules, on
 * jobs and pods written as JSON, and the idempotence property (applying a
 * plan and deciding again on the result gives an empty plan). */
#include "decide.h"
#include "exitcode.h"
#include "jobspec.h"
#include "kueue.h"
#include "timefmt.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW 1700000000LL /* 2023-11-14T22:13:20Z */

/* ------------------------------------------------------------- the world */

typedef struct {
    cJSON *job;
    cJSON *pods; /* array */
    vj_children have;
    int job_deleted;
    cJSON *podgroup; /* have.podgroup_obj: the PodGroup as the scheduler left it */
} world;

static const char *SPEC_OK =
    "\"replicas\": 2, \"gpusPerReplica\": 0, \"image\": \"img:1\","
    "\"model\": {\"preset\": \"fmnist_tiny\"},"
    "\"training\": {\"steps\": 100, \"globalBatchSize\": 128, \"microBatchSize\": 64}";

/* A job with `spec_extra` appended to the valid spec and `status` as given. */
static world mk(const char *spec_extra, const char *status)
{
    char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"vitjob.dev/v1alpha1\",\"kind\":\"ViTJob\","
             "\"metadata\":{\"name\":\"j\",\"namespace\":\"ns\",\"uid\":\"u-1\",\"generation\":1},"
             "\"spec\":{%s%s%s},\"status\":%s}",
             SPEC_OK, spec_extra && *spec_extra ? "," : "", spec_extra ? spec_extra : "",
             status ? status : "{}");
    world w = {0};
    w.job = cJSON_Parse(buf);
    cr_assert_not_null(w.job, "bad job JSON: %s", buf);
    w.pods = cJSON_CreateArray();
    return w;
}

static void world_free(world *w)
{
    cJSON_Delete(w->job);
    cJSON_Delete(w->pods);
    cJSON_Delete(w->podgroup);
}

static cJSON *find_pod(world *w, const char *name)
{
    cJSON *p;
    cJSON_ArrayForEach(p, w->pods)
    {
        const cJSON *n = cJSON_GetObjectItem(cJSON_GetObjectItem(p, "metadata"), "name");
        if (n && strcmp(n->valuestring, name) == 0)
            return p;
    }
    return NULL;
}

/* Adds a pod as listed by the API server; `extra_status` is spliced into status. */
static void add_pod(world *w, int rank, int gen, const char *phase, const char *extra_meta,
                    const char *extra_status)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"j-worker-%d-r%d\",\"namespace\":\"ns\",\"labels\":{"
             "\"vitjob.dev/job-name\":\"j\",\"vitjob.dev/rank\":\"%d\",\"vitjob.dev/restart\":\"%d\"}%s%s},"
             "\"status\":{\"phase\":\"%s\"%s%s}}",
             rank, gen, rank, gen, extra_meta ? "," : "", extra_meta ? extra_meta : "", phase,
             extra_status ? "," : "", extra_status ? extra_status : "");
    cJSON *p = cJSON_Parse(buf);
    cr_assert_not_null(p, "bad pod JSON: %s", buf);
    cJSON_AddItemToArray(w->pods, p);
}

static void set_phase(world *w, const char *name, const char *phase)
{
    cJSON *st = cJSON_GetObjectItem(find_pod(w, name), "status");
    cJSON_ReplaceItemInObject(st, "phase", cJSON_CreateString(phase));
}

static void set_all_phase(world *w, const char *phase)
{
    cJSON *p;
    cJSON_ArrayForEach(p, w->pods)
    {
        cJSON_ReplaceItemInObject(cJSON_GetObjectItem(p, "status"), "phase", cJSON_CreateString(phase));
    }
}

static void set_exit(world *w, const char *name, int code)
{
    cJSON *st = cJSON_GetObjectItem(find_pod(w, name), "status");
    cJSON_ReplaceItemInObject(st, "phase", cJSON_CreateString("Failed"));
    char buf[256];
    snprintf(buf, sizeof buf,
             "[{\"name\":\"worker\",\"state\":{\"terminated\":{\"exitCode\":%d}}}]", code);
    cJSON_DeleteItemFromObject(st, "containerStatuses");
    cJSON_AddItemToObject(st, "containerStatuses", cJSON_Parse(buf));
}

/* set_exit, with the worker's termination message as the kubelet reports it. */
static void set_exit_msg(world *w, const char *name, int code, const char *message)
{
    set_exit(w, name, code);
    cJSON *st = cJSON_GetObjectItem(find_pod(w, name), "status");
    cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(st, "containerStatuses"), 0), "state"), "terminated");
    cJSON_AddStringToObject(t, "message", message);
}

static vj_plan *decide_at(world *w, long long now)
{
    vj_plan *p = NULL;
    char err[256] = "";
    cr_assert_eq(vj_decide(w->job, w->pods, &w->have, now, &p, err, sizeof err), 0,
                 "decide: %s", err);
    cr_assert_not_null(p);
    return p;
}

/* RFC 7386 JSON merge patch of `patch` into the object `target`. */
static void merge_patch(cJSON *target, const cJSON *patch)
{
    const cJSON *ch;
    cJSON_ArrayForEach(ch, patch)
    {
        cJSON *cur = cJSON_GetObjectItemCaseSensitive(target, ch->string);
        if (cJSON_IsNull(ch)) {
            cJSON_DeleteItemFromObjectCaseSensitive(target, ch->string);
        } else if (cJSON_IsObject(ch) && cJSON_IsObject(cur)) {
            merge_patch(cur, ch);
        } else {
            cJSON_DeleteItemFromObjectCaseSensitive(target, ch->string);
            cJSON *v = cJSON_IsObject(ch) ? cJSON_CreateObject() : cJSON_Duplicate(ch, 1);
            cJSON_AddItemToObject(target, ch->string, v);
            if (cJSON_IsObject(ch))
                merge_patch(v, ch); /* nulls inside a new object are dropped too */
        }
    }
}

/* Applies the plan the way the API server and kubelet would, at once:
 * status merge-patched, graceful deletes mark deletionTimestamp = now + 30, forced
 * ones remove the pod, created pods appear Pending. */
static void apply(world *w, const vj_plan *p, long long now)
{
    if (p->status_patch) {
        cJSON *st = cJSON_GetObjectItem(w->job, "status");
        if (st == NULL)
            st = cJSON_AddObjectToObject(w->job, "status");
        merge_patch(st, cJSON_GetObjectItem(p->status_patch, "status"));
    }
    for (size_t i = 0; i < p->n_deletes; i++) {
        cJSON *pod = find_pod(w, p->deletes[i].name);
        cr_assert_not_null(pod, "deleting a pod that does not exist: %s", p->deletes[i].name);
        if (p->deletes[i].force) {
            cJSON_DetachItemViaPointer(w->pods, pod);
            cJSON_Delete(pod);
        } else {
            cJSON *meta = cJSON_GetObjectItem(pod, "metadata");
            if (!cJSON_GetObjectItem(meta, "deletionTimestamp")) {
                char ts[TIMEFMT_LEN];
                timefmt_rfc3339(ts, now + 30, 0, 0);
                cJSON_AddStringToObject(meta, "deletionTimestamp", ts);
            }
        }
    }
    cJSON *obj;
    cJSON_ArrayForEach(obj, p->creates)
    {
        const char *kind = cJSON_GetObjectItem(obj, "kind")->valuestring;
        if (strcmp(kind, "ConfigMap") == 0) {
            w->have.configmap = 1;
        } else if (strcmp(kind, "Service") == 0) {
            w->have.service = 1;
        } else if (strcmp(kind, "ServiceAccount") == 0) {
            w->have.service_account = 1;
        } else if (strcmp(kind, "Role") == 0) {
            w->have.role = 1;
        } else if (strcmp(kind, "RoleBinding") == 0) {
            w->have.role_binding = 1;
        } else if (strcmp(kind, "PodGroup") == 0) {
            w->have.podgroup = 1;
        } else {
            cr_assert_str_eq(kind, "Pod");
            cJSON *pod = cJSON_Duplicate(obj, 1);
            cJSON_AddItemToObject(pod, "status", cJSON_Parse("{\"phase\":\"Pending\"}"));
            /* Kueue's webhook gates the pods of a queue at creation */
            if (cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "metadata"), "labels"),
                                    VJ_KUEUE_QUEUE_LABEL))
                cJSON_AddItemToObject(cJSON_GetObjectItem(pod, "spec"), "schedulingGates",
                                      cJSON_Parse("[{\"name\":\"" VJ_KUEUE_GATE "\"}]"));
            cr_assert_null(find_pod(w, cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "metadata"), "name")->valuestring),
                           "creating a pod that exists");
            cJSON_AddItemToArray(w->pods, pod);
        }
    }
    if (p->delete_job)
        w->job_deleted = 1;
}

/* Decide, apply, decide again: the second plan must be empty. Returns the
 * first plan (caller frees). */
static vj_plan *step(world *w, long long now)
{
    vj_plan *p = decide_at(w, now);
    apply(w, p, now);
    vj_plan *again = decide_at(w, now);
    char *s = again->status_patch ? cJSON_PrintUnformatted(again->status_patch) : NULL;
    cr_assert(vj_plan_is_empty(again),
              "not idempotent: creates=%d deletes=%zu (%s) events=%zu (%s) status=%s delete_job=%d",
              cJSON_GetArraySize(again->creates), again->n_deletes,
              again->n_deletes ? again->deletes[0].name : "", again->n_events,
              again->n_events ? again->events[0].reason : "", s ? s : "null", again->delete_job);
    free(s);
    vj_plan_free(again);
    return p;
}

static const cJSON *st_get(world *w, const char *key)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(w->job, "status"), key);
}

static const char *phase_of(world *w)
{
    const cJSON *p = st_get(w, "phase");
    return p ? p->valuestring : "";
}

static const cJSON *cond(world *w, const char *type)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, st_get(w, "conditions"))
    {
        if (strcmp(cJSON_GetObjectItem(c, "type")->valuestring, type) == 0)
            return c;
    }
    return NULL;
}

static const char *cond_field(world *w, const char *type, const char *field)
{
    const cJSON *c = cond(w, type);
    const cJSON *f = c ? cJSON_GetObjectItem(c, field) : NULL;
    return f ? f->valuestring : NULL;
}

static int restarts(world *w)
{
    const cJSON *r = st_get(w, "restarts");
    return r ? r->valueint : 0;
}

static int n_pods_of_gen(world *w, int gen, int include_deleting)
{
    int n = 0;
    cJSON *p;
    cJSON_ArrayForEach(p, w->pods)
    {
        cJSON *meta = cJSON_GetObjectItem(p, "metadata");
        int g = atoi(cJSON_GetObjectItem(cJSON_GetObjectItem(meta, "labels"), "vitjob.dev/restart")->valuestring);
        if (g == gen && (include_deleting || !cJSON_GetObjectItem(meta, "deletionTimestamp")))
            n++;
    }
    return n;
}

static int has_event(const vj_plan *p, const char *reason)
{
    for (size_t i = 0; i < p->n_events; i++)
        if (strcmp(p->events[i].reason, reason) == 0)
            return 1;
    return 0;
}

static int deletes(const vj_plan *p, const char *name, int force)
{
    for (size_t i = 0; i < p->n_deletes; i++)
        if (strcmp(p->deletes[i].name, name) == 0 && p->deletes[i].force == force)
            return 1;
    return 0;
}

/* A job started and running: ConfigMap, Service, both pods Running. */
static world running_job(const char *spec_extra)
{
    world w = mk(spec_extra, NULL);
    vj_plan_free(step(&w, NOW));
    set_all_phase(&w, "Running");
    vj_plan_free(step(&w, NOW + 10));
    cr_assert_str_eq(phase_of(&w), "Running");
    return w;
}

/* ------------------------------------------------------------------ tests */

Test(decide, new_job_creates_configmap_service_identity_then_one_pod_per_rank_and_is_pending)
{
    world w = mk(NULL, NULL);
    vj_plan *p = step(&w, NOW);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 7);
    static const char *const order[] = {"ConfigMap", "Service", "ServiceAccount", "Role",
                                        "RoleBinding", "Pod", "Pod"};
    for (int i = 0; i < 7; i++)
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(p->creates, i), "kind")->valuestring,
                         order[i], "create %d: what the pods need comes first", i);
    cr_assert(w.have.configmap && w.have.service && w.have.service_account && w.have.role &&
              w.have.role_binding);
    cr_assert_not_null(find_pod(&w, "j-worker-0-r0"));
    cr_assert_not_null(find_pod(&w, "j-worker-1-r0"));
    cr_assert_str_eq(phase_of(&w), "Pending");
    cr_assert_str_eq(st_get(&w, "startTime")->valuestring, "2023-11-14T22:13:20Z");
    cr_assert_eq(restarts(&w), 0);
    cr_assert_eq(cJSON_GetObjectItem(st_get(&w, "replicas"), "active")->valueint, 2);
    cr_assert_str_eq(cond_field(&w, "Created", "status"), "True");
    cr_assert_eq(st_get(&w, "observedGeneration")->valueint, 1);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, phase_stays_pending_until_all_pods_run_then_running)
{
    world w = mk(NULL, NULL);
    vj_plan_free(step(&w, NOW));
    set_phase(&w, "j-worker-0-r0", "Running");
    vj_plan_free(step(&w, NOW + 1));
    cr_assert_str_eq(phase_of(&w), "Pending");
    set_phase(&w, "j-worker-1-r0", "Running");
    vj_plan_free(step(&w, NOW + 2));
    cr_assert_str_eq(phase_of(&w), "Running");
    cr_assert_str_eq(cond_field(&w, "Running", "status"), "True");
    world_free(&w);
}

Test(decide, phase_changes_emit_one_event_each_created_then_running)
{
    world w = mk(NULL, NULL);
    vj_plan *p = step(&w, NOW);
    cr_assert(has_event(p, "Created"), "no Created event for a new job");
    vj_plan_free(p);
    set_phase(&w, "j-worker-0-r0", "Running");
    set_phase(&w, "j-worker-1-r0", "Running");
    p = step(&w, NOW + 1);
    cr_assert(has_event(p, "Running"), "no Running event on Pending -> Running");
    cr_assert(!has_event(p, "Created"), "Created emitted twice");
    vj_plan_free(p);
    p = step(&w, NOW + 2);
    cr_assert_eq(p->n_events, 0, "a steady Running job emits events");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_job_naming_its_own_service_account_gets_no_identity_objects)
{
    world w = mk("\"template\":{\"serviceAccountName\":\"team-sa\"}", NULL);
    vj_plan *p = step(&w, NOW);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 4, "ConfigMap, Service, 2 pods");
    cr_assert(!w.have.service_account && !w.have.role && !w.have.role_binding);
    cJSON *pod = find_pod(&w, "j-worker-1-r0");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "spec"), "serviceAccountName")->valuestring,
                     "team-sa");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_child_refused_for_good_fails_the_job_with_the_servers_message_and_its_pods_go)
{
    world w = running_job(NULL);
    vj_plan *p = NULL;
    char err[256] = "";
    cr_assert_eq(vj_decide_failed(w.job, w.pods, "FailedCreate",
                                  "cannot create Service ns/j: Service \"j\" is invalid", NOW + 20,
                                  &p, err, sizeof err), 0, "%s", err);
    apply(&w, p, NOW + 20);
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "FailedCreate");
    cr_assert(strstr(cond_field(&w, "Failed", "message"), "Service \"j\" is invalid"));
    cr_assert(has_event(p, "FailedCreate"));
    cr_assert_eq(p->n_deletes, 2, "a failed job's running pods are deleted");
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    vj_plan_free(p);
    /* and it stays failed: a normal reconcile after it changes nothing */
    p = step(&w, NOW + 21);
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, missing_configmap_and_service_are_recreated_alone)
{
    world w = running_job(NULL);
    w.have.configmap = 0;
    vj_plan *p = step(&w, NOW + 20);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 1);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(p->creates, 0), "kind")->valuestring, "ConfigMap");
    cr_assert_null(p->status_patch);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, progress_is_never_touched)
{
    world w = mk(NULL, "{\"progress\":{\"step\":42,\"loss\":0.5}}");
    vj_plan *p = step(&w, NOW);
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(p->status_patch, "status"), "progress"));
    cr_assert_eq(cJSON_GetObjectItem(st_get(&w, "progress"), "step")->valueint, 42);
    vj_plan_free(p);
    /* And through a restart and a failure. */
    set_all_phase(&w, "Running");
    vj_plan_free(step(&w, NOW + 1));
    set_exit(&w, "j-worker-0-r0", 2);
    p = step(&w, NOW + 2);
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(p->status_patch, "status"), "progress"));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, invalid_spec_dim_not_divisible_by_heads_fails_naming_the_field_without_pods)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"j\",\"namespace\":\"ns\",\"generation\":1},"
             "\"spec\":{\"replicas\":2,\"image\":\"img\",\"model\":{\"dim\":66,\"heads\":4},"
             "\"training\":{\"steps\":100,\"globalBatchSize\":128,\"microBatchSize\":64}}}");
    world w = {0};
    w.job = cJSON_Parse(buf);
    w.pods = cJSON_CreateArray();
    vj_plan *p = step(&w, NOW);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0, "no ConfigMap, Service or pod for an invalid spec");
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "InvalidSpec");
    cr_assert(strstr(cond_field(&w, "Failed", "message"), "model.dim=66") != NULL, "%s",
              cond_field(&w, "Failed", "message"));
    cr_assert(strstr(cond_field(&w, "Failed", "message"), "model.heads=4") != NULL);
    cr_assert(has_event(p, "InvalidSpec"));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, invalid_spec_global_batch_not_divisible_by_micro_times_world_size)
{
    /* 4 replicas x 2 GPUs = world 8; 64 x 8 = 512 does not divide 128. */
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"j\",\"namespace\":\"ns\"},"
             "\"spec\":{\"replicas\":4,\"gpusPerReplica\":2,\"image\":\"img\","
             "\"training\":{\"steps\":100,\"globalBatchSize\":128,\"microBatchSize\":64}}}");
    world w = {0};
    w.job = cJSON_Parse(buf);
    w.pods = cJSON_CreateArray();
    vj_plan *p = step(&w, NOW);
    cr_assert_str_eq(phase_of(&w), "Failed");
    const char *m = cond_field(&w, "Failed", "message");
    cr_assert(strstr(m, "training.globalBatchSize=128") && strstr(m, "world size 8"), "%s", m);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, invalid_template_key_is_rejected)
{
    world w = mk("\"template\":{\"hostNetwork\":true}", NULL);
    vj_plan_free(step(&w, NOW));
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "InvalidSpec");
    cr_assert(strstr(cond_field(&w, "Failed", "message"), "spec.template.hostNetwork"));
    world_free(&w);
}

Test(decide, exit_code_2_fails_at_once_with_PermanentError_and_deletes_the_rest)
{
    world w = running_job(NULL);
    set_exit(&w, "j-worker-1-r0", 2);
    vj_plan *p = step(&w, NOW + 20);
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "PermanentError");
    cr_assert_eq(restarts(&w), 0, "no retry");
    cr_assert(deletes(p, "j-worker-0-r0", 0), "the still-running rank is deleted");
    cr_assert(!deletes(p, "j-worker-1-r0", 0), "cleanPodPolicy Running keeps the failed pod");
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    cr_assert_str_eq(st_get(&w, "completionTime")->valuestring, "2023-11-14T22:13:40Z");
    cr_assert_str_eq(cond_field(&w, "Running", "status"), "False");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, exit_code_3_fails_at_once_with_InvalidData)
{
    world w = running_job(NULL);
    set_exit(&w, "j-worker-0-r0", 3);
    vj_plan_free(step(&w, NOW + 20));
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "InvalidData");
    cr_assert_eq(restarts(&w), 0);
    world_free(&w);
}

#define BADPATH_LINE "ts=2024-05-01T10:00:00.000Z level=error comp=worker exit_code=3 class=data " \
    "retried=no msg=\"/data/fashion-mnst/train-images-idx3-ubyte: cannot open dataset file\""

Test(decide, a_permanent_failure_says_the_workers_own_error_in_the_condition_and_the_event)
{
    world w = running_job(NULL);
    set_exit_msg(&w, "j-worker-1-r0", 3, BADPATH_LINE);
    vj_plan *p = step(&w, NOW + 20);
    const char *want = "pod j-worker-1-r0 exited with code 3 (bad or missing data), permanent, not "
                       "retried: /data/fashion-mnst/train-images-idx3-ubyte: cannot open dataset file";
    cr_assert_str_eq(cond_field(&w, "Failed", "message"), want);
    cr_assert_eq(p->n_events, 1);
    cr_assert_str_eq(p->events[0].type, "Warning");
    cr_assert_str_eq(p->events[0].message, want);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_retryable_failure_says_the_workers_own_error_from_its_log_tail)
{
    world w = running_job("\"runPolicy\":{\"backoffLimit\":0}");
    set_exit_msg(&w, "j-worker-0-r0", 1,
                 "ts=a level=info comp=train step=3/100\n"
                 "ts=b level=error comp=worker exit_code=1 class=io retried=yes msg=\"s3: connection reset\"");
    vj_plan_free(step(&w, NOW + 20));
    const char *m = cond_field(&w, "Failed", "message");
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "BackoffLimitExceeded");
    cr_assert(strstr(m, "pod j-worker-0-r0 failed with exit code 1: s3: connection reset;") == m, "%s", m);
    world_free(&w);
}

Test(decide, cleanpodpolicy_none_keeps_every_pod_of_a_failed_job_the_running_ones_too)
{
    /* rank 1 fails for good while rank 0 still runs: both stay */
    world w = running_job("\"runPolicy\":{\"cleanPodPolicy\":\"None\"}");
    set_exit_msg(&w, "j-worker-1-r0", 3, BADPATH_LINE);
    vj_plan *p = step(&w, NOW + 20);
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_eq(p->n_deletes, 0, "deleted %s", p->n_deletes ? p->deletes[0].name : "");
    vj_plan_free(p);
    /* rank 0 ends later: still kept */
    set_exit_msg(&w, "j-worker-0-r0", 3, BADPATH_LINE);
    p = step(&w, NOW + 30);
    cr_assert_eq(p->n_deletes, 0);
    vj_plan_free(p);
    world_free(&w);

    /* backoffLimit spent while a rank runs: kept too */
    w = running_job("\"runPolicy\":{\"cleanPodPolicy\":\"None\",\"backoffLimit\":0}");
    set_exit(&w, "j-worker-1-r0", 1);
    p = step(&w, NOW + 20);
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "BackoffLimitExceeded");
    cr_assert_eq(p->n_deletes, 0, "deleted %s", p->n_deletes ? p->deletes[0].name : "");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, cleanpodpolicy_none_keeps_the_failed_pods_of_earlier_generations_across_a_gang_restart)
{
    world w = running_job("\"runPolicy\":{\"cleanPodPolicy\":\"None\"}");
    set_exit(&w, "j-worker-1-r0", 1);
    vj_plan *p = step(&w, NOW + 20);
    cr_assert_eq(restarts(&w), 1);
    cr_assert(deletes(p, "j-worker-0-r0", 0), "the running rank must stop before generation 1");
    cr_assert(!deletes(p, "j-worker-1-r0", 0), "the failed pod and its log stay");
    vj_plan_free(p);
    /* generation 1 runs, then succeeds: generation 0's failed pod is still kept */
    set_phase(&w, "j-worker-0-r1", "Running");
    set_phase(&w, "j-worker-1-r1", "Running");
    vj_plan_free(step(&w, NOW + 30));
    set_all_phase(&w, "Succeeded");
    set_phase(&w, "j-worker-1-r0", "Failed");
    p = step(&w, NOW + 40);
    cr_assert_str_eq(phase_of(&w), "Succeeded");
    cr_assert(!deletes(p, "j-worker-1-r0", 0));
    cr_assert_not_null(find_pod(&w, "j-worker-1-r0"));
    vj_plan_free(p);
    world_free(&w);
}

/* api/exitcode.h's table, row by row: what it says is permanent fails the
 * job at once, everything else restarts the gang. */
Test(decide, every_row_of_the_exit_code_table_is_decided_as_the_table_says)
{
    size_t n;
    const vj_err_row *t = vj_err_table(&n);
    for (size_t i = 0; i <= n; i++) {
        int code = i < n ? t[i].exit_code : 128 + 2; /* and SIGINT's 130 */
        int permanent = i < n ? t[i].permanent : 0;
        world w = running_job(NULL);
        set_exit(&w, "j-worker-1-r0", code);
        vj_plan_free(step(&w, NOW + 20));
        if (permanent) {
            cr_assert_str_eq(phase_of(&w), "Failed", "%s (exit %d)", t[i].name, code);
            cr_assert_eq(restarts(&w), 0, "%s (exit %d) was retried", t[i].name, code);
        } else {
            cr_assert_str_neq(phase_of(&w), "Failed", "exit %d", code);
            cr_assert_eq(restarts(&w), 1, "exit %d was not retried", code);
        }
        world_free(&w);
    }
}

Test(decide, retryable_exit_restarts_the_gang_as_next_generation_spending_backoff)
{
    world w = running_job(NULL);
    set_exit(&w, "j-worker-1-r0", 1);
    vj_plan *p = step(&w, NOW + 20);
    cr_assert(deletes(p, "j-worker-0-r0", 0) && deletes(p, "j-worker-1-r0", 0));
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 0);
    cr_assert_eq(n_pods_of_gen(&w, 1, 0), 2);
    cr_assert_not_null(find_pod(&w, "j-worker-0-r1"));
    cr_assert_str_eq(phase_of(&w), "Restarting");
    cr_assert_str_eq(cond_field(&w, "Restarting", "status"), "True");
    cr_assert_str_eq(cond_field(&w, "Restarting", "reason"), "RetryableFailure");
    cr_assert(has_event(p, "Restarting"));
    vj_plan_free(p);
    /* The new generation comes up: Running, Restarting False. */
    set_phase(&w, "j-worker-0-r1", "Running");
    set_phase(&w, "j-worker-1-r1", "Running");
    vj_plan_free(step(&w, NOW + 30));
    cr_assert_str_eq(phase_of(&w), "Running");
    cr_assert_str_eq(cond_field(&w, "Restarting", "status"), "False");
    world_free(&w);
}

Test(decide, backoff_limit_exceeded_fails_the_job)
{
    world w = running_job("\"runPolicy\":{\"backoffLimit\":1}");
    set_exit(&w, "j-worker-0-r0", 137);
    vj_plan_free(step(&w, NOW + 20));
    cr_assert_eq(restarts(&w), 1);
    set_exit(&w, "j-worker-0-r1", 1);
    vj_plan *p = step(&w, NOW + 40);
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "BackoffLimitExceeded");
    cr_assert_eq(restarts(&w), 1);
    cr_assert(deletes(p, "j-worker-1-r1", 0));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, eviction_is_a_disruption_that_does_not_spend_backoff)
{
    world w = running_job("\"runPolicy\":{\"backoffLimit\":0}");
    set_phase(&w, "j-worker-0-r0", "Failed");
    cJSON_AddStringToObject(cJSON_GetObjectItem(find_pod(&w, "j-worker-0-r0"), "status"), "reason", "Evicted");
    vj_plan *p = step(&w, NOW + 20);
    cr_assert_str_eq(phase_of(&w), "Restarting", "backoffLimit 0 is not spent by an eviction");
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 1);
    cr_assert_str_eq(cond_field(&w, "Restarting", "reason"), "Disruption");
    vj_plan_free(p);
    /* A real failure afterwards fails the job: backoffLimit 0. */
    set_exit(&w, "j-worker-1-r1", 1);
    vj_plan_free(step(&w, NOW + 40));
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "BackoffLimitExceeded");
    world_free(&w);
}

Test(decide, disruption_target_condition_with_failed_peers_counts_as_disruption)
{
    world w = running_job("\"runPolicy\":{\"backoffLimit\":0}");
    cJSON_AddItemToObject(cJSON_GetObjectItem(find_pod(&w, "j-worker-0-r0"), "status"), "conditions",
                          cJSON_Parse("[{\"type\":\"DisruptionTarget\",\"status\":\"True\","
                                      "\"reason\":\"PreemptionByScheduler\"}]"));
    set_exit(&w, "j-worker-1-r0", 1); /* lost its peer */
    vj_plan_free(step(&w, NOW + 20));
    cr_assert_str_eq(phase_of(&w), "Restarting");
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 1);
    world_free(&w);
}

Test(decide, node_lost_pod_is_disruption_and_force_deleted_with_later_stale_pods_forced)
{
    world w = running_job("\"runPolicy\":{\"backoffLimit\":0}");
    /* The taint manager deleted it; its phase stays Running. */
    cJSON *pod = find_pod(&w, "j-worker-1-r0");
    cJSON_AddStringToObject(cJSON_GetObjectItem(pod, "metadata"), "deletionTimestamp", "2023-11-14T22:13:50Z");
    cJSON_AddItemToObject(cJSON_GetObjectItem(pod, "status"), "conditions",
                          cJSON_Parse("[{\"type\":\"DisruptionTarget\",\"status\":\"True\","
                                      "\"reason\":\"DeletionByTaintManager\"}]"));
    vj_plan *p = step(&w, NOW + 20);
    cr_assert(deletes(p, "j-worker-1-r0", 1), "the pod on the lost node is force-deleted");
    cr_assert(deletes(p, "j-worker-0-r0", 0), "its healthy peer is deleted gracefully");
    cr_assert_null(find_pod(&w, "j-worker-1-r0"));
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 1);
    vj_plan_free(p);
    /* The old generation's healthy pod hangs in Terminating past its deadline
     * (its node went too): force-deleted then, with a requeue before. */
    p = decide_at(&w, NOW + 30);
    cr_assert_eq(p->n_deletes, 0);
    cr_assert_gt(p->requeue_after, 0);
    vj_plan_free(p);
    p = step(&w, NOW + 60);
    cr_assert(deletes(p, "j-worker-0-r0", 1), "stale older-generation pod force-deleted");
    cr_assert_eq(p->n_deletes, 1);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, stale_older_generation_pod_not_yet_deleted_is_deleted)
{
    world w = running_job(NULL);
    /* A pod of generation 0 appears while the job is at generation 1 (its delete failed). */
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(w.job, "status"), "restarts", cJSON_CreateNumber(1));
    cJSON *p0 = find_pod(&w, "j-worker-0-r0");
    cJSON_DetachItemViaPointer(w.pods, p0);
    cJSON_Delete(p0);
    cJSON *p1 = find_pod(&w, "j-worker-1-r0");
    (void)p1;
    add_pod(&w, 0, 1, "Running", NULL, NULL);
    add_pod(&w, 1, 1, "Running", NULL, NULL);
    vj_plan *p = step(&w, NOW + 20);
    cr_assert(deletes(p, "j-worker-1-r0", 0));
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, deleted_running_pod_of_current_generation_is_a_disruption)
{
    world w = running_job("\"runPolicy\":{\"backoffLimit\":0}");
    cJSON_AddStringToObject(cJSON_GetObjectItem(find_pod(&w, "j-worker-0-r0"), "metadata"),
                            "deletionTimestamp", "2023-11-14T22:14:00Z");
    vj_plan_free(step(&w, NOW + 20));
    cr_assert_str_eq(phase_of(&w), "Restarting");
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 1);
    world_free(&w);
}

Test(decide, pod_missing_while_running_is_a_disruption_but_missing_while_pending_is_created)
{
    world w = mk(NULL, NULL);
    vj_plan_free(step(&w, NOW));
    cJSON *pod = find_pod(&w, "j-worker-1-r0");
    cJSON_DetachItemViaPointer(w.pods, pod);
    cJSON_Delete(pod);
    vj_plan *p = step(&w, NOW + 1);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 1, "Pending: the missing pod is created");
    cr_assert_eq(restarts(&w), 0);
    vj_plan_free(p);
    set_all_phase(&w, "Running");
    vj_plan_free(step(&w, NOW + 2));
    pod = find_pod(&w, "j-worker-1-r0");
    cJSON_DetachItemViaPointer(w.pods, pod);
    cJSON_Delete(pod);
    vj_plan_free(step(&w, NOW + 3));
    cr_assert_eq(restarts(&w), 1, "Running: a vanished pod restarts the gang");
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 1);
    world_free(&w);
}

Test(decide, all_succeeded_with_cleanpodpolicy_running_keeps_finished_pods)
{
    world w = running_job(NULL);
    set_all_phase(&w, "Succeeded");
    vj_plan *p = step(&w, NOW + 100);
    cr_assert_str_eq(phase_of(&w), "Succeeded");
    cr_assert_str_eq(cond_field(&w, "Succeeded", "status"), "True");
    cr_assert_str_eq(st_get(&w, "completionTime")->valuestring, "2023-11-14T22:15:00Z");
    cr_assert_eq(p->n_deletes, 0);
    cr_assert_eq(cJSON_GetObjectItem(st_get(&w, "replicas"), "succeeded")->valueint, 2);
    cr_assert(has_event(p, "ViTJobSucceeded"));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, cleanpodpolicy_all_deletes_every_pod_and_none_keeps_running_ones)
{
    world w = running_job("\"runPolicy\":{\"cleanPodPolicy\":\"All\"}");
    set_all_phase(&w, "Succeeded");
    vj_plan *p = step(&w, NOW + 100);
    cr_assert_eq(p->n_deletes, 2);
    vj_plan_free(p);
    world_free(&w);

    /* None: a pod still Running at success (say rank 1 lags) is kept. */
    w = running_job("\"runPolicy\":{\"cleanPodPolicy\":\"None\"}");
    set_all_phase(&w, "Succeeded");
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(w.job, "status"), "phase", cJSON_CreateString("Succeeded"));
    set_phase(&w, "j-worker-1-r0", "Running");
    p = step(&w, NOW + 100);
    cr_assert_eq(p->n_deletes, 0);
    vj_plan_free(p);
    world_free(&w);

    /* Running: the same pod is deleted. */
    w = running_job(NULL);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(w.job, "status"), "phase", cJSON_CreateString("Succeeded"));
    p = step(&w, NOW + 100);
    cr_assert_eq(p->n_deletes, 2);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, last_transition_time_kept_while_status_unchanged)
{
    world w = running_job(NULL);
    const char *t0 = cond_field(&w, "Running", "lastTransitionTime");
    cr_assert_str_eq(t0, "2023-11-14T22:13:30Z");
    set_exit(&w, "j-worker-0-r0", 1);
    vj_plan_free(step(&w, NOW + 100));
    const char *c0 = cond_field(&w, "Created", "lastTransitionTime");
    cr_assert_str_eq(c0, "2023-11-14T22:13:20Z", "Created stays True: its time is kept");
    const char *r1 = cond_field(&w, "Restarting", "lastTransitionTime");
    cr_assert_str_eq(r1, "2023-11-14T22:15:00Z");
    /* A second failure while still Restarting: True -> True keeps the time. */
    set_exit(&w, "j-worker-0-r1", 1);
    vj_plan_free(step(&w, NOW + 200));
    cr_assert_str_eq(cond_field(&w, "Restarting", "lastTransitionTime"), "2023-11-14T22:15:00Z");
    cr_assert_eq(restarts(&w), 2);
    world_free(&w);
}

/* Rank 1 done before rank 0 (which evaluates and exports last): the job
 * is still Running, not back to Pending, until every pod has succeeded. */
Test(decide, a_rank_that_succeeded_before_the_others_keeps_the_job_running_until_all_have)
{
    world w = running_job(NULL);
    set_phase(&w, "j-worker-1-r0", "Succeeded");
    vj_plan_free(step(&w, NOW + 20));
    cr_assert_str_eq(phase_of(&w), "Running");
    cr_assert_eq(cJSON_GetObjectItem(st_get(&w, "replicas"), "succeeded")->valueint, 1);
    set_phase(&w, "j-worker-0-r0", "Succeeded");
    vj_plan_free(step(&w, NOW + 30));
    cr_assert_str_eq(phase_of(&w), "Succeeded");
    world_free(&w);
}

Test(decide, suspend_deletes_pods_and_resume_starts_next_generation_counted_as_a_resume_not_a_restart)
{
    world w = running_job("\"runPolicy\":{\"backoffLimit\":0}");
    cJSON *spec = cJSON_GetObjectItem(w.job, "spec");
    cJSON_AddBoolToObject(spec, "suspend", 1);
    vj_plan *p = step(&w, NOW + 50);
    cr_assert_eq(p->n_deletes, 2);
    cr_assert_str_eq(phase_of(&w), "Suspended");
    cr_assert_str_eq(cond_field(&w, "Suspended", "status"), "True");
    cr_assert_str_eq(cond_field(&w, "Running", "status"), "False");
    cr_assert(has_event(p, "Suspended"));
    vj_plan_free(p);
    cJSON_ReplaceItemInObject(spec, "suspend", cJSON_CreateFalse());
    p = step(&w, NOW + 60);
    cr_assert_str_eq(phase_of(&w), "Pending");
    cr_assert_eq(restarts(&w), 0, "kubectl get vj's RESTARTS counts no suspend");
    cr_assert_eq(st_get(&w, "resumes")->valueint, 1);
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 0);
    cr_assert_eq(n_pods_of_gen(&w, 1, 0), 2);
    cr_assert_str_eq(cond_field(&w, "Suspended", "status"), "False");
    cr_assert_str_eq(st_get(&w, "startTime")->valuestring, "2023-11-14T22:14:20Z",
                     "the deadline counts from the resume");
    cr_assert(has_event(p, "Resumed"));
    vj_plan_free(p);
    /* suspended and resumed again once generation 1 ran: generation 2, read
     * back from restarts + resumes */
    set_all_phase(&w, "Running");
    vj_plan_free(step(&w, NOW + 70));
    cJSON_ReplaceItemInObject(spec, "suspend", cJSON_CreateTrue());
    vj_plan_free(step(&w, NOW + 80));
    cJSON_ReplaceItemInObject(spec, "suspend", cJSON_CreateFalse());
    vj_plan_free(step(&w, NOW + 90));
    cr_assert_eq(restarts(&w), 0);
    cr_assert_eq(st_get(&w, "resumes")->valueint, 2);
    cr_assert_eq(n_pods_of_gen(&w, 2, 0), 2, "the resumes' generations, not the restarts'");
    world_free(&w);
}

Test(decide, job_created_suspended_starts_at_generation_zero_on_resume)
{
    world w = mk("\"suspend\":true", NULL);
    vj_plan *p = step(&w, NOW);
    cr_assert_str_eq(phase_of(&w), "Suspended");
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    vj_plan_free(p);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(w.job, "spec"), "suspend", cJSON_CreateFalse());
    vj_plan_free(step(&w, NOW + 5));
    cr_assert_not_null(find_pod(&w, "j-worker-0-r0"));
    cr_assert_eq(restarts(&w), 0);
    world_free(&w);
}

Test(decide, active_deadline_requeues_then_fails_with_DeadlineExceeded_and_deletes_pods)
{
    world w = running_job("\"runPolicy\":{\"activeDeadlineSeconds\":100,\"cleanPodPolicy\":\"None\"}");
    /* (at NOW + 75 the ProgressStalled look is due later: NOW + 130) */
    vj_plan *p = decide_at(&w, NOW + 75);
    cr_assert_eq(p->requeue_after, 25);
    vj_plan_free(p);
    p = step(&w, NOW + 100);
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "DeadlineExceeded");
    cr_assert_eq(p->n_deletes, 2, "running pods go even with cleanPodPolicy None");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, ttl_requeues_until_completion_plus_ttl_then_deletes_the_job)
{
    world w = running_job("\"runPolicy\":{\"ttlSecondsAfterFinished\":300}");
    set_all_phase(&w, "Succeeded");
    vj_plan *p = step(&w, NOW + 100);
    cr_assert_eq(p->requeue_after, 300);
    cr_assert_eq(p->delete_job, 0);
    vj_plan_free(p);
    p = decide_at(&w, NOW + 350);
    cr_assert_eq(p->requeue_after, 50);
    cr_assert(vj_plan_is_empty(p));
    vj_plan_free(p);
    p = decide_at(&w, NOW + 400);
    cr_assert_eq(p->delete_job, 1);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, ttl_of_zero_deletes_the_job_as_soon_as_it_finishes)
{
    /* as for a Kubernetes Job: 0 is "at once", only an absent ttl keeps it */
    world w = running_job("\"runPolicy\":{\"ttlSecondsAfterFinished\":0}");
    set_all_phase(&w, "Succeeded");
    vj_plan *p = decide_at(&w, NOW + 100);
    cr_assert_eq(p->delete_job, 1, "deleted in the pass that finishes it");
    cr_assert_not_null(p->status_patch, "which still writes the final status");
    cr_assert_eq(p->requeue_after, 0, "nothing left to wait for");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, finished_job_is_stable_and_a_deleting_job_gets_an_empty_plan)
{
    world w = running_job(NULL);
    set_exit(&w, "j-worker-0-r0", 2);
    vj_plan_free(step(&w, NOW + 20));
    vj_plan *p = decide_at(&w, NOW + 25);
    cr_assert(vj_plan_is_empty(p), "nothing to do while the deleted rank terminates");
    cr_assert_eq(p->requeue_after, 25, "requeued at its deletionTimestamp");
    vj_plan_free(p);
    p = step(&w, NOW + 5000);
    cr_assert(deletes(p, "j-worker-1-r0", 1), "stuck in Terminating: forced");
    cr_assert_eq(p->n_deletes, 1);
    cr_assert_null(p->status_patch, "a finished job's status is frozen");
    vj_plan_free(p);
    cJSON_AddStringToObject(cJSON_GetObjectItem(w.job, "metadata"), "deletionTimestamp", "2023-11-14T22:20:00Z");
    p = decide_at(&w, NOW + 5000);
    cr_assert(vj_plan_is_empty(p));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, pods_of_other_jobs_are_ignored)
{
    world w = running_job(NULL);
    cJSON_AddItemToArray(w.pods, cJSON_Parse("{\"metadata\":{\"name\":\"other-worker-0-r0\",\"labels\":{"
                                             "\"vitjob.dev/job-name\":\"other\",\"vitjob.dev/rank\":\"0\","
                                             "\"vitjob.dev/restart\":\"0\"}},\"status\":{\"phase\":\"Failed\"}}"));
    vj_plan *p = decide_at(&w, NOW + 20);
    cr_assert(vj_plan_is_empty(p));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, lost_restart_status_write_is_recovered_from_pod_generation)
{
    world w = running_job(NULL);
    /* Pods of generation 1 exist but status still says 0. */
    cJSON_Delete(w.pods);
    w.pods = cJSON_CreateArray();
    add_pod(&w, 0, 1, "Running", NULL, NULL);
    add_pod(&w, 1, 1, "Running", NULL, NULL);
    vj_plan *p = step(&w, NOW + 20);
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    vj_plan_free(p);
    world_free(&w);
}

/* A worker that failed saying it lost its peer (its termination message ends
 * with the worker's last line), finished at `at`. */
static void set_peer_lost(world *w, const char *name, long long at)
{
    cJSON *st = cJSON_GetObjectItem(find_pod(w, name), "status");
    cJSON_ReplaceItemInObject(st, "phase", cJSON_CreateString("Failed"));
    char ts[TIMEFMT_LEN], buf[1024];
    timefmt_rfc3339(ts, at, 0, 0);
    snprintf(buf, sizeof buf,
             "[{\"name\":\"worker\",\"state\":{\"terminated\":{\"exitCode\":1,\"finishedAt\":\"%s\","
             "\"message\":\"ts=x level=info comp=train step=40 class=io\\nts=y level=error comp=worker "
             "exit_code=1 class=peer_lost retried=yes msg=\\\"all-reduce: connection reset; lost: rank 0\\\"\"}}}]",
             ts);
    cJSON_DeleteItemFromObject(st, "containerStatuses");
    cJSON *cs = cJSON_Parse(buf);
    cr_assert_not_null(cs);
    cJSON_AddItemToObject(st, "containerStatuses", cs);
}

/* As the taint manager evicts: the condition, then a graceful delete. */
static void evict_by_taint_manager(world *w, const char *name, long long at)
{
    char ts[TIMEFMT_LEN];
    timefmt_rfc3339(ts, at + 30, 0, 0);
    cJSON_AddStringToObject(cJSON_GetObjectItem(find_pod(w, name), "metadata"), "deletionTimestamp", ts);
    cJSON_AddItemToObject(cJSON_GetObjectItem(find_pod(w, name), "status"), "conditions",
                          cJSON_Parse("[{\"type\":\"DisruptionTarget\",\"status\":\"True\","
                                      "\"reason\":\"DeletionByTaintManager\"}]"));
}

Test(decide, a_worker_that_lost_its_peer_waits_for_the_peers_fate_and_its_eviction_is_a_disruption)
{
    world w = running_job("\"runPolicy\":{\"backoffLimit\":0}");
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    vj_plan *p = step(&w, NOW + 12);
    cr_assert_eq(p->n_deletes, 0, "no restart while the peer's fate is unknown");
    cr_assert_eq(restarts(&w), 0);
    cr_assert_str_eq(phase_of(&w), "Running");
    cr_assert(p->requeue_after > 0 && p->requeue_after <= VJ_NODE_LOST_TOLERATION_S + VJ_PEER_LOST_WAIT_S,
              "requeue_after %lld", p->requeue_after);
    vj_plan_free(p);
    /* the node is declared lost: the taint manager evicts rank 0 */
    evict_by_taint_manager(&w, "j-worker-0-r0", NOW + 29);
    p = step(&w, NOW + 30);
    cr_assert_str_eq(phase_of(&w), "Restarting", "backoffLimit 0 is not spent");
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 1);
    cr_assert_str_eq(cond_field(&w, "Restarting", "reason"), "Disruption");
    cr_assert(deletes(p, "j-worker-0-r0", 1), "the pod on the lost node is force-deleted");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_worker_that_lost_a_peer_still_alive_after_the_wait_spends_backoff)
{
    world w = running_job(NULL);
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    vj_plan_free(step(&w, NOW + 11 + VJ_NODE_LOST_TOLERATION_S + VJ_PEER_LOST_WAIT_S - 1));
    cr_assert_eq(restarts(&w), 0);
    vj_plan_free(step(&w, NOW + 11 + VJ_NODE_LOST_TOLERATION_S + VJ_PEER_LOST_WAIT_S));
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 0);
    cr_assert_str_eq(cond_field(&w, "Restarting", "reason"), "RetryableFailure");
    world_free(&w);
}

Test(decide, workers_that_all_lost_their_peers_or_failed_otherwise_restart_at_once)
{
    world w = running_job(NULL);
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    set_peer_lost(&w, "j-worker-0-r0", NOW + 11);
    vj_plan_free(step(&w, NOW + 12));
    cr_assert_eq(restarts(&w), 1, "nobody is left alive to wait for");
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 0);
    /* a failure of another class beside a peer_lost one does not wait either */
    set_all_phase(&w, "Running");
    vj_plan_free(step(&w, NOW + 20));
    set_peer_lost(&w, "j-worker-1-r1", NOW + 21);
    set_exit(&w, "j-worker-0-r1", 137);
    vj_plan_free(step(&w, NOW + 22));
    cr_assert_eq(restarts(&w), 2);
    world_free(&w);
}

/* ------------------------------------------------ lost pods (issue 26) */

static void set_node(world *w, const char *pod, const char *node)
{
    cJSON *p = find_pod(w, pod);
    cJSON *spec = cJSON_GetObjectItem(p, "spec");
    if (spec == NULL)
        spec = cJSON_AddObjectToObject(p, "spec");
    cJSON_DeleteItemFromObject(spec, "nodeName");
    cJSON_AddStringToObject(spec, "nodeName", node);
}

/* A surviving worker's status.lostPeer (docs/design.md, lost nodes). */
static void report_lost(world *w, int gen, int rank, int by, const char *evidence, long long at)
{
    char ts[TIMEFMT_LEN], buf[512];
    timefmt_rfc3339(ts, at, 0, 0);
    snprintf(buf, sizeof buf, "{\"generation\":%d,\"rank\":%d,\"reportedBy\":%d,\"evidence\":\"%s\","
             "\"time\":\"%s\",\"message\":\"rank %d: no heartbeat for 5.0 s\"}", gen, rank, by,
             evidence, ts, rank);
    cJSON *st = cJSON_GetObjectItem(w->job, "status");
    cJSON_DeleteItemFromObject(st, "lostPeer");
    cJSON_AddItemToObject(st, "lostPeer", cJSON_Parse(buf));
}

/* The node names that the pod's required node affinity keeps it off, joined by ",". */
static void avoided(world *w, const char *pod, char *out, size_t len)
{
    out[0] = '\0';
    const cJSON *terms = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(
        cJSON_GetObjectItem(find_pod(w, pod), "spec"), "affinity"), "nodeAffinity"),
        "requiredDuringSchedulingIgnoredDuringExecution"), "nodeSelectorTerms");
    const cJSON *t, *f, *v;
    cJSON_ArrayForEach(t, terms) cJSON_ArrayForEach(f, cJSON_GetObjectItem(t, "matchFields"))
    {
        cr_assert_str_eq(cJSON_GetObjectItem(f, "key")->valuestring, "metadata.name");
        cr_assert_str_eq(cJSON_GetObjectItem(f, "operator")->valuestring, "NotIn");
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(f, "values"))
        {
            if (out[0])
                strncat(out, ",", len - strlen(out) - 1);
            strncat(out, v->valuestring, len - strlen(out) - 1);
        }
    }
}

/* Two running pods on node-a (rank 0) and node-b (rank 1). */
static world running_on_nodes(const char *spec_extra)
{
    world w = running_job(spec_extra);
    set_node(&w, "j-worker-0-r0", "node-a");
    set_node(&w, "j-worker-1-r0", "node-b");
    return w;
}

Test(decide, a_reported_heartbeat_loss_restarts_the_gang_at_once_as_a_disruption_off_the_lost_node)
{
    world w = running_on_nodes("\"runPolicy\":{\"backoffLimit\":0}");
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    report_lost(&w, 0, 0, 1, "heartbeat", NOW + 11);
    cr_assert(vj_decide_wants_nodes(w.job, w.pods));
    vj_plan *p = step(&w, NOW + 11);
    cr_assert_eq(restarts(&w), 1, "no waiting for Kubernetes' node lifecycle");
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 1, "backoffLimit 0 not spent");
    cr_assert_str_eq(cond_field(&w, "Restarting", "reason"), "Disruption");
    cr_assert(strstr(cond_field(&w, "Restarting", "message"), "j-worker-0-r0 was lost: its heartbeat "
                     "stopped (reported by pod index 1"), "%s", cond_field(&w, "Restarting", "message"));
    cr_assert(deletes(p, "j-worker-0-r0", 0), "a frozen pod on a live node: its kubelet takes it down");
    char av[128];
    avoided(&w, "j-worker-0-r1", av, sizeof av);
    cr_assert_str_eq(av, "node-a", "generation 1 keeps off the lost pod's node");
    avoided(&w, "j-worker-1-r1", av, sizeof av);
    cr_assert_str_eq(av, "node-a");
    cr_assert(!vj_decide_wants_nodes(w.job, w.pods), "the report names an older generation now");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_cut_off_pod_that_gave_up_on_its_peers_too_is_lost_not_a_retryable_failure)
{
    /* a network partition: each side loses the other by heartbeat and both
     * exit peer_lost; the side that reported names the other */
    world w = running_on_nodes("\"runPolicy\":{\"backoffLimit\":0}");
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    set_peer_lost(&w, "j-worker-0-r0", NOW + 11);
    report_lost(&w, 0, 0, 1, "heartbeat", NOW + 11);
    vj_plan *p = step(&w, NOW + 12);
    cr_assert_eq(restarts(&w), 1);
    cr_assert_str_eq(phase_of(&w), "Restarting", "backoffLimit 0 is not spent");
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 1);
    char av[128];
    avoided(&w, "j-worker-1-r1", av, sizeof av);
    cr_assert_str_eq(av, "node-a", "off the cut node");
    vj_plan_free(p);
    world_free(&w);
    /* a pod named by a report that then failed otherwise is judged by its own exit */
    w = running_on_nodes("\"runPolicy\":{\"backoffLimit\":0}");
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    set_exit(&w, "j-worker-0-r0", 137);
    report_lost(&w, 0, 0, 1, "heartbeat", NOW + 11);
    vj_plan_free(step(&w, NOW + 12));
    cr_assert_str_eq(phase_of(&w), "Failed", "a crash spends backoffLimit 0");
    world_free(&w);
}

/* status.lastRestart's field (a string), or "" */
static const char *last_restart(world *w, const char *field)
{
    const cJSON *f = cJSON_GetObjectItem(st_get(w, "lastRestart"), field);
    return cJSON_IsString(f) ? f->valuestring : "";
}

static int disruptions(world *w)
{
    const cJSON *d = st_get(w, "disruptionRestarts");
    return d ? d->valueint : 0;
}

/* The node the pod's preferred node affinity steers it off, or "". */
static const char *preferred_off(world *w, const char *pod)
{
    const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(
        cJSON_GetObjectItem(find_pod(w, pod), "spec"), "affinity"), "nodeAffinity"),
        "preferredDuringSchedulingIgnoredDuringExecution"), 0), "preference"), "matchFields"), 0),
        "values"), 0);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Rank 1 of generation 0 lost rank 0 by closed connections at NOW + 11. */
static world closed_report(const char *spec_extra)
{
    world w = running_on_nodes(spec_extra);
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    report_lost(&w, 0, 0, 1, "closed", NOW + 11);
    return w;
}

Test(decide, a_reported_closed_connection_restarts_the_gang_at_once_pending_its_classification)
{
    world w = closed_report(NULL);
    cr_assert(vj_decide_wants_nodes(w.job, w.pods));
    vj_plan *p = step(&w, NOW + 11);
    cr_assert_eq(restarts(&w), 1, "no waiting for its kubelet");
    cr_assert_eq(disruptions(&w), 0, "nothing counted yet");
    cr_assert_str_eq(last_restart(&w, "classifiedAs"), "Pending");
    cr_assert_str_eq(last_restart(&w, "cause"), "PeerLost");
    cr_assert_str_eq(last_restart(&w, "pod"), "j-worker-0-r0");
    cr_assert_str_eq(last_restart(&w, "node"), "node-a");
    cr_assert_eq(cJSON_GetObjectItem(st_get(&w, "lastRestart"), "generation")->valueint, 0);
    long long by;
    cr_assert_eq(timefmt_parse(last_restart(&w, "classifyBy"), &by), 0);
    cr_assert_eq(by, NOW + 11 + VJ_RESTART_CLASSIFY_S);
    cr_assert_str_eq(cond_field(&w, "Restarting", "reason"), "PeerLost");
    cr_assert(!deletes(p, "j-worker-0-r0", 0) && !deletes(p, "j-worker-0-r0", 1),
              "the lost pod is the evidence: kept until classified");
    cr_assert(deletes(p, "j-worker-1-r0", 0));
    cr_assert_eq(n_pods_of_gen(&w, 1, 0), 2, "generation 1 created in the same pass");
    cr_assert_str_eq(preferred_off(&w, "j-worker-0-r1"), "node-a", "the new pods prefer other nodes");
    cr_assert_str_eq(preferred_off(&w, "j-worker-1-r1"), "node-a");
    char av[128];
    avoided(&w, "j-worker-1-r1", av, sizeof av);
    cr_assert_str_eq(av, "", "not required: its node may be alive");
    cr_assert(p->requeue_after > 0 && p->requeue_after <= VJ_RESTART_CLASSIFY_S);
    cr_assert(vj_decide_wants_nodes(w.job, w.pods), "its node is judged while it is pending");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_crash_its_kubelet_reports_after_the_restart_spends_backoff_and_the_pod_then_goes)
{
    world w = closed_report(NULL);
    vj_plan_free(step(&w, NOW + 11));
    set_exit(&w, "j-worker-0-r0", 137); /* it crashed; its kubelet says so */
    vj_plan *p = step(&w, NOW + 12);
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(disruptions(&w), 0, "a crash spends backoffLimit");
    cr_assert_str_eq(last_restart(&w, "classifiedAs"), "RetryableFailure");
    cr_assert(strstr(last_restart(&w, "message"), "exit code 137"), "%s", last_restart(&w, "message"));
    cr_assert(has_event(p, "RestartClassified"));
    cr_assert(deletes(p, "j-worker-0-r0", 0), "classified: the crashed pod goes");
    cr_assert_str_eq(phase_of(&w), "Restarting", "generation 1 goes on");
    cr_assert(!vj_decide_wants_nodes(w.job, w.pods));
    vj_plan_free(p);
    /* the next restart's record replaces this one whole (a merge patch nulls the rest) */
    set_exit(&w, "j-worker-1-r1", 137);
    vj_plan_free(step(&w, NOW + 13));
    cr_assert_str_eq(last_restart(&w, "cause"), "Failure");
    cr_assert_str_eq(last_restart(&w, "classifyBy"), "");
    cr_assert_str_eq(last_restart(&w, "classifiedAt"), "");
    cr_assert_str_eq(last_restart(&w, "node"), "", "generation 1's pod had no node");
    world_free(&w);
}

Test(decide, a_pending_restart_with_no_evidence_by_its_deadline_is_a_disruption_and_the_pod_forced)
{
    world w = closed_report(NULL);
    vj_plan_free(step(&w, NOW + 11));
    vj_plan_free(step(&w, NOW + 11 + VJ_RESTART_CLASSIFY_S - 1));
    cr_assert_str_eq(last_restart(&w, "classifiedAs"), "Pending");
    vj_plan *p = step(&w, NOW + 11 + VJ_RESTART_CLASSIFY_S);
    cr_assert_str_eq(last_restart(&w, "classifiedAs"), "Disruption");
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(disruptions(&w), 1);
    cr_assert(deletes(p, "j-worker-0-r0", 1), "nothing on its node will take it down: forced");
    cr_assert(has_event(p, "RestartClassified"));
    for (size_t i = 0; i < p->n_events; i++)
        if (strcmp(p->events[i].reason, "RestartClassified") == 0)
            cr_assert(strstr(p->events[i].message, "within 60 s"), "%s", p->events[i].message);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_pending_restart_whose_node_is_judged_lost_is_a_disruption_saying_why)
{
    world w = closed_report("\"runPolicy\":{\"backoffLimit\":0}");
    vj_plan_free(step(&w, NOW + 11));
    vj_node_health nodes[1] = {{.name = "node-a", .lost = 1}};
    snprintf(nodes[0].why, sizeof nodes[0].why, "its Lease was not renewed for 40 s");
    w.have.nodes = nodes;
    w.have.n_nodes = 1;
    vj_plan *p = step(&w, NOW + 52);
    cr_assert_str_eq(last_restart(&w, "classifiedAs"), "Disruption");
    cr_assert(strstr(last_restart(&w, "message"), "node node-a is lost: its Lease"), "%s",
              last_restart(&w, "message"));
    cr_assert_eq(disruptions(&w), 1);
    cr_assert_str_neq(phase_of(&w), "Failed", "backoffLimit 0 is not spent");
    cr_assert(deletes(p, "j-worker-0-r0", 1));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_crash_past_backoff_limit_classified_after_the_restart_undoes_it_and_stops_the_new_generation)
{
    /* cleanPodPolicy None keeps pods, but not those of a generation that never counted */
    world w = closed_report("\"runPolicy\":{\"backoffLimit\":0,\"cleanPodPolicy\":\"None\"}");
    vj_plan_free(step(&w, NOW + 11));
    cr_assert_eq(restarts(&w), 1, "restarted at once, backoffLimit 0 or not");
    set_all_phase(&w, "Running");
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    set_exit(&w, "j-worker-0-r0", 137);
    vj_plan *p = step(&w, NOW + 13);
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "BackoffLimitExceeded");
    cr_assert_eq(restarts(&w), 0, "the undone restart is not counted: as if it had waited");
    cr_assert_eq(disruptions(&w), 0);
    const char *m = cond_field(&w, "Failed", "message");
    cr_assert(strstr(m, "backoffLimit 0 reached after 0 restart(s)") && strstr(m, "generation 1") &&
              strstr(m, "is stopped"), "%s", m);
    cr_assert_str_eq(last_restart(&w, "classifiedAs"), "RetryableFailure");
    cr_assert(deletes(p, "j-worker-0-r1", 0) && deletes(p, "j-worker-1-r1", 0),
              "generation 1 is stopped whatever cleanPodPolicy says");
    cr_assert(!deletes(p, "j-worker-0-r0", 0), "cleanPodPolicy None keeps the crashed pod and its log");
    vj_plan_free(p);
    vj_plan_free(step(&w, NOW + 100));
    cr_assert_eq(restarts(&w), 0, "a finished job's status stands, its stopped pods or not");
    world_free(&w);
}

Test(decide, a_permanent_exit_classified_after_the_restart_fails_the_job_as_it_would_have)
{
    world w = closed_report(NULL);
    vj_plan_free(step(&w, NOW + 11));
    set_exit_msg(&w, "j-worker-0-r0", 3, "ts=x level=error comp=worker exit_code=3 class=data "
                 "retried=no msg=\"cannot open dataset file\"");
    vj_plan_free(step(&w, NOW + 12));
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "InvalidData");
    cr_assert_eq(restarts(&w), 0);
    cr_assert_str_eq(last_restart(&w, "classifiedAs"), "PermanentFailure");
    world_free(&w);
}

Test(decide, while_a_restart_is_pending_the_new_generations_verdicts_wait_for_it)
{
    world w = closed_report(NULL);
    vj_plan_free(step(&w, NOW + 11));
    set_phase(&w, "j-worker-0-r1", "Succeeded");
    set_phase(&w, "j-worker-1-r1", "Succeeded");
    vj_plan *p = step(&w, NOW + 20);
    cr_assert_str_neq(phase_of(&w), "Succeeded", "success waits for the classification");
    cr_assert(p->requeue_after > 0 && p->requeue_after <= 11 + VJ_RESTART_CLASSIFY_S - 20);
    vj_plan_free(p);
    set_exit(&w, "j-worker-0-r0", 137);
    vj_plan_free(step(&w, NOW + 21));
    cr_assert_str_eq(phase_of(&w), "Succeeded");
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(disruptions(&w), 0);
    world_free(&w);
}

Test(decide, every_restart_records_its_class_at_once_in_last_restart)
{
    world w = running_job(NULL);
    set_exit(&w, "j-worker-1-r0", 137);
    vj_plan_free(step(&w, NOW + 20));
    cr_assert_str_eq(last_restart(&w, "cause"), "Failure");
    cr_assert_str_eq(last_restart(&w, "classifiedAs"), "RetryableFailure");
    cr_assert_str_eq(last_restart(&w, "pod"), "j-worker-1-r0");
    cr_assert_str_eq(last_restart(&w, "classifyBy"), "", "nothing pending");
    world_free(&w);
}

/* ------------------------------- every order of events, the same counts */

typedef enum { EV_CRASH, EV_NODE_LOST, EV_GONE, EV_SILENCE } evidence;
/* When the evidence comes: before the operator reads the report (today's
 * order), right after the restart, after generation 1 runs, after
 * generation 1 has failed too. */
typedef enum { AT_BEFORE, AT_RESTARTED, AT_RUNNING, AT_NEW_FAILED } moment;

typedef struct {
    int failed, restarts, disruptions;
} outcome;

/* Wait-then-decide (the rule before issue 48): generation 0's loss is
 * classified first; then generation 1's failure, if any, is decided. */
static outcome waited(evidence e, int backoff, int new_fails)
{
    outcome o = {0, 0, 0};
    int disruption = e != EV_CRASH;
    if (!disruption && 0 >= backoff) {
        o.failed = 1;
        return o;
    }
    o.restarts = 1;
    o.disruptions = disruption;
    if (!new_fails)
        return o;
    if (o.restarts - o.disruptions >= backoff) {
        o.failed = 1;
        return o;
    }
    o.restarts = 2;
    return o;
}

static void give(world *w, evidence e, vj_node_health *nodes)
{
    if (e == EV_CRASH) {
        set_exit(w, "j-worker-0-r0", 137);
    } else if (e == EV_NODE_LOST) {
        w->have.nodes = nodes;
        w->have.n_nodes = 1;
    } else if (e == EV_GONE) {
        cJSON *p = find_pod(w, "j-worker-0-r0");
        cJSON_DetachItemViaPointer(w->pods, p);
        cJSON_Delete(p);
    }
}

/* Runs one order of events; the operator keeps nothing between steps (each
 * decide reads the job and pods afresh, as a restarted operator would). */
static outcome run_order(evidence e, moment at, int backoff)
{
    char extra[64];
    snprintf(extra, sizeof extra, "\"runPolicy\":{\"backoffLimit\":%d}", backoff);
    world w = closed_report(extra);
    vj_node_health nodes[1] = {{.name = "node-a", .lost = 1, .why = "Ready is Unknown"}};
    long long t = NOW + 11;
    if (at == AT_BEFORE)
        give(&w, e, nodes);
    vj_plan_free(step(&w, t++));
    if (at == AT_RUNNING || at == AT_NEW_FAILED) {
        for (int r = 0; r < 2; r++) {
            char name[32];
            snprintf(name, sizeof name, "j-worker-%d-r1", r);
            if (find_pod(&w, name))
                set_phase(&w, name, "Running");
        }
        vj_plan_free(step(&w, t++));
    }
    if (at == AT_NEW_FAILED && find_pod(&w, "j-worker-1-r1")) {
        set_exit(&w, "j-worker-1-r1", 137);
        vj_plan_free(step(&w, t++));
    }
    if (at != AT_BEFORE) {
        if (e == EV_SILENCE)
            t = NOW + 11 + VJ_RESTART_CLASSIFY_S;
        give(&w, e, nodes);
        vj_plan_free(step(&w, t++));
    }
    /* nothing pending is left, and nothing changes later */
    cr_assert_str_neq(last_restart(&w, "classifiedAs"), "Pending");
    vj_plan_free(step(&w, t + VJ_RESTART_CLASSIFY_S));
    outcome o = {strcmp(phase_of(&w), "Failed") == 0, restarts(&w), disruptions(&w)};
    world_free(&w);
    return o;
}

Test(decide, every_order_of_evidence_and_events_ends_with_the_counts_of_waiting_for_the_evidence)
{
    static const char *const ev[] = {"crash", "node lost", "pod gone", "silence"};
    static const char *const mo[] = {"before", "restarted", "running", "new generation failed"};
    int cases = 0;
    for (int e = EV_CRASH; e <= EV_SILENCE; e++)
        for (int at = AT_BEFORE; at <= AT_NEW_FAILED; at++)
            for (int backoff = 0; backoff <= 2; backoff++) {
                if (e == EV_SILENCE && at == AT_BEFORE)
                    continue; /* silence is only known by waiting */
                outcome got = run_order((evidence)e, (moment)at, backoff);
                outcome want = waited((evidence)e, backoff, at == AT_NEW_FAILED);
                cr_assert(got.failed == want.failed && got.restarts == want.restarts &&
                          got.disruptions == want.disruptions,
                          "%s, evidence %s, backoffLimit %d: failed=%d restarts=%d disruptions=%d, "
                          "waiting would give failed=%d restarts=%d disruptions=%d",
                          ev[e], mo[at], backoff, got.failed, got.restarts, got.disruptions,
                          want.failed, want.restarts, want.disruptions);
                cases++;
            }
    cr_assert_eq(cases, 45);
}

Test(decide, a_node_judged_lost_disrupts_its_pods_at_once_without_any_report)
{
    world w = running_on_nodes(NULL);
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    vj_node_health nodes[2] = {{.name = "node-a", .lost = 1}, {.name = "node-b", .lost = 0}};
    snprintf(nodes[0].why, sizeof nodes[0].why, "Ready is Unknown (NodeStatusUnknown)");
    w.have.nodes = nodes;
    w.have.n_nodes = 2;
    vj_plan *p = step(&w, NOW + 12);
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(st_get(&w, "disruptionRestarts")->valueint, 1);
    cr_assert(strstr(cond_field(&w, "Restarting", "message"), "node node-a is lost: Ready is Unknown"));
    cr_assert(deletes(p, "j-worker-0-r0", 1), "pods on a lost node are force-deleted");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_report_of_an_older_generation_or_another_shape_is_ignored)
{
    world w = running_on_nodes(NULL);
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    report_lost(&w, 7, 0, 1, "heartbeat", NOW + 11);
    vj_plan_free(step(&w, NOW + 12));
    cr_assert_eq(restarts(&w), 0, "generation 7 is not this one: hold for the peer's fate");
    report_lost(&w, 0, 5, 1, "heartbeat", NOW + 11);
    vj_plan_free(step(&w, NOW + 12));
    cr_assert_eq(restarts(&w), 0, "rank 5 of 2");
    report_lost(&w, 0, 0, 1, "rumour", NOW + 11);
    vj_plan_free(step(&w, NOW + 12));
    cr_assert_eq(restarts(&w), 0, "unknown evidence");
    world_free(&w);
}

Test(decide, nodes_are_wanted_only_while_a_peer_of_the_current_generation_is_lost)
{
    world w = running_on_nodes(NULL);
    cr_assert(!vj_decide_wants_nodes(w.job, w.pods));
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    cr_assert(vj_decide_wants_nodes(w.job, w.pods));
    world_free(&w);
}

Test(decide, a_peer_lost_failure_or_report_older_than_the_newest_pod_wants_no_nodes)
{
    /* status.restarts still says 0 (its write was lost) but a pod of
     * generation 1 exists: generation 0's peer_lost failure is history */
    world w = running_on_nodes(NULL);
    set_peer_lost(&w, "j-worker-1-r0", NOW + 11);
    report_lost(&w, 0, 0, 1, "heartbeat", NOW + 11);
    cr_assert(vj_decide_wants_nodes(w.job, w.pods));
    add_pod(&w, 0, 1, "Pending", NULL, NULL);
    cr_assert(!vj_decide_wants_nodes(w.job, w.pods), "generation 1 is the newest");
    world_free(&w);
}

/* ------------------------------------------------------- ProgressStalled */

/* Rank 0's report, as worker/train/report.c merge-patches it. */
static void set_progress(world *w, long step, long long at)
{
    cJSON *st = cJSON_GetObjectItem(w->job, "status");
    char ts[TIMEFMT_LEN], buf[256];
    timefmt_rfc3339(ts, at, 0, 0);
    snprintf(buf, sizeof buf, "{\"step\":%ld,\"totalSteps\":100,\"eta\":\"35s\",\"updateTime\":\"%s\"}",
             step, ts);
    cJSON_DeleteItemFromObject(st, "progress");
    cJSON_AddItemToObject(st, "progress", cJSON_Parse(buf));
}

Test(decide, progress_stalled_appears_after_four_report_intervals_or_a_minute_on_time_with_age_and_step)
{
    world w = running_job(NULL); /* Running since NOW + 10 */
    set_progress(&w, 7, NOW + 20);
    vj_plan *p = step(&w, NOW + 20 + VJ_PROGRESS_STALL_MIN_S - 1);
    cr_assert_null(cond(&w, "ProgressStalled"), "not stalled before the threshold");
    cr_assert_eq(p->requeue_after, 1, "requeued for the moment it is stale: %lld", p->requeue_after);
    vj_plan_free(p);
    p = step(&w, NOW + 20 + VJ_PROGRESS_STALL_MIN_S);
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "status"), "True");
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "reason"), "NoProgressReport");
    const char *msg = cond_field(&w, "ProgressStalled", "message");
    cr_assert(strstr(msg, "no progress report for 60s (the last: step 7 at 2023-11-14T22:13:40Z)"),
              "%s", msg);
    cr_assert(strstr(msg, "every 10s, stalled after 60s"), "%s", msg);
    cr_assert_str_eq(phase_of(&w), "Running", "a stall changes no phase");
    cr_assert_eq(p->requeue_after, VJ_PROGRESS_STALL_MIN_S, "the age is rewritten on time");
    vj_plan_free(p);
    /* the same message until the next step of the age: no write per reconcile */
    p = decide_at(&w, NOW + 20 + 2 * VJ_PROGRESS_STALL_MIN_S - 1);
    cr_assert(vj_plan_is_empty(p));
    cr_assert_eq(p->requeue_after, 1);
    vj_plan_free(p);
    vj_plan_free(step(&w, NOW + 20 + 6 * VJ_PROGRESS_STALL_MIN_S + 5));
    msg = cond_field(&w, "ProgressStalled", "message");
    cr_assert(strstr(msg, "no progress report for 6m "), "%s", msg);
    world_free(&w);
}

Test(decide, progress_stalled_clears_with_ProgressResumed_on_a_newer_report)
{
    world w = running_job(NULL);
    set_progress(&w, 7, NOW + 20);
    vj_plan_free(step(&w, NOW + 200));
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "status"), "True");
    char ltt[TIMEFMT_LEN];
    timefmt_rfc3339(ltt, NOW + 200, 0, 0);
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "lastTransitionTime"), ltt);
    set_progress(&w, 9, NOW + 205);
    vj_plan *p = step(&w, NOW + 206);
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "status"), "False");
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "reason"), "ProgressResumed");
    cr_assert(strstr(cond_field(&w, "ProgressStalled", "message"), "step 9"));
    cr_assert_eq(p->requeue_after, 205 + VJ_PROGRESS_STALL_MIN_S - 206, "%lld", p->requeue_after);
    cr_assert_eq(p->n_deletes + (size_t)cJSON_GetArraySize(p->creates), 0, "no pod is touched");
    vj_plan_free(p);
    /* stalled again later, then the job finishes: False, NotRunning */
    vj_plan_free(step(&w, NOW + 205 + VJ_PROGRESS_STALL_MIN_S));
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "status"), "True");
    set_all_phase(&w, "Succeeded");
    vj_plan_free(step(&w, NOW + 300));
    cr_assert_str_eq(phase_of(&w), "Succeeded");
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "status"), "False");
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "reason"), "NotRunning");
    world_free(&w);
}

Test(decide, progress_stalled_waits_the_same_grace_from_running_before_the_first_report)
{
    world w = running_job(NULL); /* Running since NOW + 10; a report of an earlier run */
    set_progress(&w, 3, NOW - 1000);
    vj_plan *p = step(&w, NOW + 10 + VJ_PROGRESS_STALL_MIN_S - 1);
    cr_assert_null(cond(&w, "ProgressStalled"), "no report yet, but not for a minute");
    cr_assert_eq(p->requeue_after, 1);
    vj_plan_free(p);
    vj_plan_free(step(&w, NOW + 10 + VJ_PROGRESS_STALL_MIN_S));
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "status"), "True");
    const char *msg = cond_field(&w, "ProgressStalled", "message");
    cr_assert(strstr(msg, "no progress report in the 60s since generation 0 began running"), "%s", msg);
    world_free(&w);
}

Test(decide, progress_stalled_threshold_is_four_of_the_specs_report_intervals_when_above_a_minute)
{
    world w = running_job(NULL);
    cJSON_AddNumberToObject(cJSON_GetObjectItem(cJSON_GetObjectItem(w.job, "spec"), "training"),
                            "reportIntervalSeconds", 30);
    set_progress(&w, 7, NOW + 20);
    vj_plan *p = step(&w, NOW + 20 + VJ_PROGRESS_STALL_MIN_S);
    cr_assert_null(cond(&w, "ProgressStalled"), "4 x 30 s is the threshold, not a minute");
    cr_assert_eq(p->requeue_after, 4 * 30 - VJ_PROGRESS_STALL_MIN_S);
    vj_plan_free(p);
    vj_plan_free(step(&w, NOW + 20 + 4 * 30));
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "status"), "True");
    cr_assert(strstr(cond_field(&w, "ProgressStalled", "message"), "every 30s, stalled after 2m"));
    world_free(&w);
}

Test(decide, a_restart_clears_progress_stalled_and_the_new_generation_gets_its_own_grace)
{
    world w = running_job(NULL);
    vj_plan_free(step(&w, NOW + 100));
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "status"), "True");
    set_exit(&w, "j-worker-0-r0", 1);
    vj_plan_free(step(&w, NOW + 101));
    cr_assert_str_eq(phase_of(&w), "Restarting");
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "reason"), "NotRunning");
    set_all_phase(&w, "Running"); /* generation 1 runs at NOW + 102 */
    vj_plan_free(step(&w, NOW + 102));
    vj_plan *p = step(&w, NOW + 102 + VJ_PROGRESS_STALL_MIN_S - 1);
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "status"), "False");
    cr_assert_eq(p->requeue_after, 1);
    vj_plan_free(p);
    vj_plan_free(step(&w, NOW + 102 + VJ_PROGRESS_STALL_MIN_S));
    cr_assert_str_eq(cond_field(&w, "ProgressStalled", "status"), "True");
    cr_assert(strstr(cond_field(&w, "ProgressStalled", "message"), "since generation 1 began"));
    world_free(&w);
}

/* ------------------------------------------------------- gang scheduling */

static world gang_world(const char *gang, const char *more)
{
    char extra[512];
    snprintf(extra, sizeof extra,
             "\"runPolicy\":{\"schedulingPolicy\":{\"gang\":\"%s\"%s%s}}", gang,
             more ? "," : "", more ? more : "");
    return mk(extra, NULL);
}

/* The scheduler writes the PodGroup's status (decide reads it as given). */
static void set_podgroup(world *w, const char *status_json)
{
    cJSON_Delete(w->podgroup);
    char buf[1024];
    snprintf(buf, sizeof buf, "{\"metadata\":{\"name\":\"j\",\"creationTimestamp\":"
             "\"2023-11-14T22:13:20Z\"},\"status\":%s}", status_json);
    w->podgroup = cJSON_Parse(buf);
    cr_assert_not_null(w->podgroup, "%s", buf);
    w->have.podgroup_obj = w->podgroup;
}

static int n_creates_of(const vj_plan *p, const char *kind)
{
    int n = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, p->creates) n += strcmp(cJSON_GetObjectItem(o, "kind")->valuestring, kind) == 0;
    return n;
}

Test(decide, a_gang_job_creates_its_podgroup_before_the_pods_and_polls_it_while_pending)
{
    world w = gang_world("volcano", NULL);
    vj_plan *p = step(&w, NOW);
    static const char *const order[] = {"ConfigMap", "Service", "ServiceAccount", "Role",
                                        "RoleBinding", "PodGroup", "Pod", "Pod"};
    cr_assert_eq(cJSON_GetArraySize(p->creates), 8);
    for (int i = 0; i < 8; i++)
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(p->creates, i), "kind")->valuestring,
                         order[i], "create %d", i);
    cr_assert_eq(p->requeue_after, 30, "nothing watches PodGroups: %lld", p->requeue_after);
    cr_assert_null(cond(&w, "GangUnschedulable"));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_missing_podgroup_crd_gives_one_condition_no_pods_and_a_long_requeue_until_installed)
{
    world w = gang_world("volcano", NULL);
    w.have.podgroup_crd_missing = 1;
    vj_plan *p = step(&w, NOW);
    cr_assert_eq(n_creates_of(p, "Pod") + n_creates_of(p, "PodGroup"), 0);
    cr_assert_str_eq(phase_of(&w), "Pending");
    cr_assert_str_eq(cond_field(&w, "GangSchedulingUnavailable", "status"), "True");
    cr_assert_str_eq(cond_field(&w, "GangSchedulingUnavailable", "reason"), "PodGroupCRDMissing");
    cr_assert(strstr(cond_field(&w, "GangSchedulingUnavailable", "message"),
                     "gang scheduler volcano requested but its PodGroup CRD "
                     "(podgroups.scheduling.volcano.sh) is not installed"),
              "%s", cond_field(&w, "GangSchedulingUnavailable", "message"));
    cr_assert(has_event(p, "PodGroupCRDMissing"));
    cr_assert_eq(p->requeue_after, VJ_GANG_MISSING_RECHECK_S);
    vj_plan_free(p);
    p = step(&w, NOW + VJ_GANG_MISSING_RECHECK_S); /* looked again: still missing */
    cr_assert(vj_plan_is_empty(p), "one condition, one event");
    cr_assert_eq(p->requeue_after, VJ_GANG_MISSING_RECHECK_S);
    vj_plan_free(p);
    w.have.podgroup_crd_missing = 0; /* installed */
    p = step(&w, NOW + 2 * VJ_GANG_MISSING_RECHECK_S);
    cr_assert_eq(n_creates_of(p, "PodGroup"), 1);
    cr_assert_eq(n_creates_of(p, "Pod"), 2);
    cr_assert_str_eq(cond_field(&w, "GangSchedulingUnavailable", "status"), "False");
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_volcano_podgroup_unschedulable_past_the_timeout_gives_a_condition_with_its_message)
{
    world w = gang_world("volcano", "\"scheduleTimeoutSeconds\":60");
    vj_plan_free(step(&w, NOW));
    set_podgroup(&w, "{\"phase\":\"Pending\",\"conditions\":[{\"type\":\"Unschedulable\","
                     "\"status\":\"True\",\"reason\":\"NotEnoughResources\",\"message\":"
                     "\"0/4 nodes are available: 4 Insufficient nvidia.com/gpu\","
                     "\"lastTransitionTime\":\"2023-11-14T22:13:30Z\"}]}"); /* NOW + 10 */
    vj_plan *p = step(&w, NOW + 40);
    cr_assert_null(cond(&w, "GangUnschedulable"), "not before the timeout");
    cr_assert_eq(p->requeue_after, 30);
    vj_plan_free(p);
    p = step(&w, NOW + 69);
    cr_assert_eq(p->requeue_after, 1, "at the timeout: %lld", p->requeue_after);
    vj_plan_free(p);
    p = step(&w, NOW + 70);
    cr_assert_str_eq(cond_field(&w, "GangUnschedulable", "status"), "True");
    cr_assert_str_eq(cond_field(&w, "GangUnschedulable", "reason"), "PodGroupUnschedulable");
    const char *msg = cond_field(&w, "GangUnschedulable", "message");
    cr_assert(strstr(msg, "scheduleTimeoutSeconds=60: 0/4 nodes are available: 4 Insufficient "
                          "nvidia.com/gpu"), "%s", msg);
    cr_assert(has_event(p, "GangUnschedulable"));
    cr_assert_str_eq(phase_of(&w), "Pending");
    vj_plan_free(p);
    /* placed: the gang runs and the condition goes False */
    set_podgroup(&w, "{\"phase\":\"Running\",\"running\":2}");
    set_all_phase(&w, "Running");
    p = step(&w, NOW + 80);
    cr_assert_str_eq(phase_of(&w), "Running");
    cr_assert_str_eq(cond_field(&w, "GangUnschedulable", "status"), "False");
    cr_assert_eq(p->requeue_after, VJ_PROGRESS_STALL_MIN_S,
                 "a running gang is not polled (only the ProgressStalled look): %lld",
                 p->requeue_after);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_coscheduling_podgroup_pending_past_the_timeout_counts_from_its_schedule_start)
{
    world w = gang_world("coscheduling", "\"scheduleTimeoutSeconds\":5,\"minAvailable\":2");
    vj_plan_free(step(&w, NOW));
    set_podgroup(&w, "{\"phase\":\"Pending\",\"running\":0,\"scheduleStartTime\":"
                     "\"2023-11-14T22:13:40Z\"}"); /* NOW + 20 */
    vj_plan_free(step(&w, NOW + 24));
    cr_assert_null(cond(&w, "GangUnschedulable"));
    vj_plan_free(step(&w, NOW + 25));
    cr_assert(strstr(cond_field(&w, "GangUnschedulable", "message"),
                     "phase Pending, 0 of minMember 2 running"),
              "%s", cond_field(&w, "GangUnschedulable", "message"));
    world_free(&w);
}

Test(decide, an_unknown_gang_fails_the_job_naming_the_field_without_children)
{
    world w = gang_world("kueue", NULL);
    vj_plan *p = step(&w, NOW);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert(strstr(cond_field(&w, "Failed", "message"),
                     "spec.runPolicy.schedulingPolicy.gang=\"kueue\""),
              "%s", cond_field(&w, "Failed", "message"));
    vj_plan_free(p);
    world_free(&w);
}

/* ------------------------------------------------------------- admission */

/* A plan as the planner would give it for an 8-GPU job. */
static vj_admission plan_of(double need_gib, double gpu_gib, const char *suggestion)
{
    vj_admission a = {.generation = 1, .memory_bytes = need_gib * 1073741824.0,
                      .device_bytes = gpu_gib * 1073741824.0, .images_per_s = 1234.56,
                      .micro_batch = 128};
    a.fits = gpu_gib <= 0 || need_gib <= gpu_gib;
    snprintf(a.device_source, sizeof a.device_source, "spec.gpuMemory=80Gi");
    snprintf(a.parts, sizeof a.parts, "activations 98Gi, optimizer state 4.7Gi");
    snprintf(a.sharding, sizeof a.sharding, "none");
    snprintf(a.suggestion, sizeof a.suggestion, "%s", suggestion ? suggestion : "");
    return a;
}

Test(decide, a_plan_over_the_gpu_memory_fails_the_job_with_WillNotFit_before_anything_is_created)
{
    world w = mk(NULL, NULL);
    vj_admission a = plan_of(111.2, 80, "spec.training.activationCheckpointing=true (22.4Gi per rank)");
    w.have.plan = &a;
    vj_plan *p = step(&w, NOW);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0, "no ConfigMap, identity or pod");
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "WillNotFit");
    cr_assert_str_eq(cond_field(&w, "WillNotFit", "status"), "True");
    cr_assert_str_eq(cond_field(&w, "WillNotFit", "reason"), "ExceedsGPUMemory");
    const char *msg = cond_field(&w, "WillNotFit", "message");
    cr_assert(strstr(msg, "111.2Gi") && strstr(msg, "80Gi (spec.gpuMemory=80Gi)") &&
              strstr(msg, "activations 98Gi") && strstr(msg, "micro-batch 128") &&
              strstr(msg, "the cheapest change that fits: spec.training.activationCheckpointing=true"),
              "the message carries the plan's numbers and its suggestion: %s", msg);
    cr_assert(has_event(p, "WillNotFit"));
    cr_assert_str_eq(st_get(&w, "plannedMemoryPerRank")->valuestring, "111.2Gi");
    cr_assert_float_eq(st_get(&w, "plannedImagesPerSecond")->valuedouble, 1234.6, 1e-9);
    cr_assert_eq(st_get(&w, "plannedGeneration")->valueint, 1);
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, a_plan_that_fits_records_its_numbers_and_the_job_starts_as_any_other)
{
    world w = mk(NULL, NULL);
    vj_admission a = plan_of(22.4, 80, NULL);
    w.have.plan = &a;
    vj_plan *p = step(&w, NOW);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 7);
    cr_assert_str_eq(phase_of(&w), "Pending");
    cr_assert_null(cond(&w, "WillNotFit"));
    cr_assert_str_eq(st_get(&w, "plannedMemoryPerRank")->valuestring, "22.4Gi");
    vj_plan_free(p);
    /* later reconciles carry no plan: the recorded numbers stay */
    w.have.plan = NULL;
    set_all_phase(&w, "Running");
    vj_plan_free(step(&w, NOW + 10));
    cr_assert_str_eq(phase_of(&w), "Running");
    cr_assert_str_eq(st_get(&w, "plannedMemoryPerRank")->valuestring, "22.4Gi");
    world_free(&w);
}

Test(decide, unknown_gpu_memory_refuses_nothing_and_a_job_with_pods_is_never_refused)
{
    world w = mk(NULL, NULL);
    vj_admission a = plan_of(111.2, 0, NULL);
    w.have.plan = &a;
    vj_plan *p = step(&w, NOW);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 7, "no GPU memory known: planned, not refused");
    vj_plan_free(p);
    a = plan_of(111.2, 80, NULL); /* a plan that does not fit, once pods exist */
    p = step(&w, NOW + 1);
    cr_assert_str_eq(phase_of(&w), "Pending");
    cr_assert_null(cond(&w, "WillNotFit"));
    vj_plan_free(p);
    /* nor once it started, even with its pods gone (between generations) */
    cJSON_Delete(w.pods);
    w.pods = cJSON_CreateArray();
    p = decide_at(&w, NOW + 2);
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(p->status_patch, "status"), "phase"),
                   "the job that started is not failed");
    cr_assert(!has_event(p, "WillNotFit"));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, with_no_change_that_fits_the_message_says_so)
{
    world w = mk(NULL, NULL);
    vj_admission a = plan_of(2010, 80, NULL);
    w.have.plan = &a;
    vj_plan_free(step(&w, NOW));
    const char *msg = cond_field(&w, "WillNotFit", "message");
    cr_assert(strstr(msg, "no change the planner tries fits"), "%s", msg);
    cr_assert(strstr(msg, "needs 2Ti of GPU memory"), "%s", msg);
    world_free(&w);
}

/* ------------------------------------------------------ Kueue (issue 45) */

/* The job labelled for Kueue's LocalQueue "team-a" (and priority "high"). */
static world kueue_job(const char *spec_extra)
{
    world w = mk(spec_extra, NULL);
    cJSON *labels = cJSON_AddObjectToObject(cJSON_GetObjectItem(w.job, "metadata"), "labels");
    cJSON_AddStringToObject(labels, VJ_KUEUE_QUEUE_LABEL, "team-a");
    cJSON_AddStringToObject(labels, VJ_KUEUE_PRIORITY_LABEL, "high");
    return w;
}

/* A reconcile that creates pods under Kueue: its webhook gates them as they
 * are created (apply), which the next reconcile sees; no idempotency check. */
static vj_plan *create_step(world *w, long long now)
{
    vj_plan *p = decide_at(w, now);
    apply(w, p, now);
    return p;
}

/* What Kueue does on admission: the gate goes. */
static void ungate_all(world *w)
{
    cJSON *p;
    cJSON_ArrayForEach(p, w->pods)
        cJSON_DeleteItemFromObject(cJSON_GetObjectItem(p, "spec"), "schedulingGates");
}

static const char *pod_meta(world *w, const char *pod, const char *kind, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(find_pod(w, pod),
                                         "metadata"), kind), key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

Test(decide, a_job_under_kueue_makes_each_generation_one_unretriable_pod_group_in_its_queue)
{
    world w = kueue_job(NULL);
    vj_plan_free(create_step(&w, NOW));
    for (int r = 0; r < 2; r++) {
        char pod[32];
        snprintf(pod, sizeof pod, "j-worker-%d-r0", r);
        cr_assert_str_eq(pod_meta(&w, pod, "labels", VJ_KUEUE_QUEUE_LABEL), "team-a");
        cr_assert_str_eq(pod_meta(&w, pod, "labels", VJ_KUEUE_PRIORITY_LABEL), "high");
        cr_assert_str_eq(pod_meta(&w, pod, "labels", VJ_KUEUE_GROUP_LABEL), "j-r0");
        cr_assert_str_eq(pod_meta(&w, pod, "annotations", VJ_KUEUE_COUNT_ANNOTATION), "2");
        cr_assert_str_eq(pod_meta(&w, pod, "annotations", VJ_KUEUE_RETRIABLE_ANNOTATION), "false",
                         "a restart makes a new group, never replacements in this one");
    }
    world_free(&w);
    w = mk(NULL, NULL);
    vj_plan_free(step(&w, NOW));
    cr_assert_str_eq(pod_meta(&w, "j-worker-0-r0", "labels", VJ_KUEUE_GROUP_LABEL), "",
                     "without the queue label nothing of Kueue's");
    cr_assert_str_eq(pod_meta(&w, "j-worker-0-r0", "annotations", VJ_KUEUE_COUNT_ANNOTATION), "");
    world_free(&w);
}

Test(decide, gated_pods_keep_the_job_queued_with_no_clock_running_until_kueue_admits_them)
{
    world w = kueue_job("\"runPolicy\":{\"activeDeadlineSeconds\":100}");
    vj_plan_free(create_step(&w, NOW)); /* created, and gated by Kueue's webhook (apply) */
    vj_plan *p = step(&w, NOW + 1);
    cr_assert_str_eq(phase_of(&w), "Queued");
    cr_assert_str_eq(cond_field(&w, "Queued", "status"), "True");
    cr_assert_str_eq(cond_field(&w, "Queued", "reason"), "WaitingForKueue");
    const char *m = cond_field(&w, "Queued", "message");
    cr_assert(strstr(m, "2 of 2 pods") && strstr(m, VJ_KUEUE_GATE) && strstr(m, "ns/team-a"), "%s", m);
    cr_assert(has_event(p, "Queued"));
    cr_assert_null(st_get(&w, "startTime"), "no clock runs while queued");
    vj_plan_free(p);
    p = step(&w, NOW + 1000);
    cr_assert_str_eq(phase_of(&w), "Queued", "activeDeadlineSeconds does not count the wait");
    cr_assert_eq(p->n_deletes, 0, "gated pods are neither restarted nor recreated");
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    vj_plan_free(p);
    ungate_all(&w);
    p = step(&w, NOW + 1001);
    cr_assert_str_eq(phase_of(&w), "Pending");
    cr_assert_str_eq(cond_field(&w, "Queued", "status"), "False");
    cr_assert_str_eq(cond_field(&w, "Queued", "reason"), "Admitted");
    cr_assert(has_event(p, "Admitted"));
    long long t;
    cr_assert_eq(timefmt_parse(cJSON_GetStringValue(st_get(&w, "startTime")), &t), 0);
    cr_assert_eq(t, NOW + 1001, "the deadline counts from the admission");
    vj_plan_free(p);
    set_all_phase(&w, "Running");
    vj_plan_free(step(&w, NOW + 1002));
    cr_assert_str_eq(phase_of(&w), "Running");
    world_free(&w);
}

/* What Kueue does to an evicted group's pods: its condition, then a delete. */
static void kueue_evict(world *w, const char *name, long long at)
{
    char ts[TIMEFMT_LEN];
    timefmt_rfc3339(ts, at + 30, 0, 0);
    cJSON *pod = find_pod(w, name);
    cJSON_AddStringToObject(cJSON_GetObjectItem(pod, "metadata"), "deletionTimestamp", ts);
    cJSON_AddItemToObject(cJSON_GetObjectItem(pod, "status"), "conditions", cJSON_Parse(
        "[{\"type\":\"TerminationTarget\",\"status\":\"True\",\"reason\":\"WorkloadEvictedDueToPreempted\","
        "\"message\":\"Preempted to accommodate a workload (UID: u-9) due to prioritization in the "
        "ClusterQueue\"}]"));
}

Test(decide, kueue_preemption_is_a_disruption_and_the_next_generation_queues_again_as_a_new_group)
{
    world w = kueue_job("\"runPolicy\":{\"backoffLimit\":0}");
    vj_plan_free(create_step(&w, NOW));
    ungate_all(&w);
    set_all_phase(&w, "Running");
    vj_plan_free(step(&w, NOW + 10));
    cr_assert_str_eq(phase_of(&w), "Running");
    cr_assert_not_null(st_get(&w, "startTime"));
    kueue_evict(&w, "j-worker-0-r0", NOW + 20);
    kueue_evict(&w, "j-worker-1-r0", NOW + 20);
    vj_plan *p = create_step(&w, NOW + 21);
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(disruptions(&w), 1, "preemption spends no backoffLimit");
    cr_assert_str_neq(phase_of(&w), "Failed");
    const char *m = cond_field(&w, "Restarting", "message");
    cr_assert(strstr(m, "evicted by Kueue (WorkloadEvictedDueToPreempted): Preempted to accommodate"),
              "%s", m);
    cr_assert_null(st_get(&w, "startTime"), "the deadline counts again from the next admission");
    cr_assert_str_eq(pod_meta(&w, "j-worker-0-r1", "labels", VJ_KUEUE_GROUP_LABEL), "j-r1");
    cr_assert(!deletes(p, "j-worker-0-r0", 1), "no force: Kueue's finalizer and the grace period "
              "(the ranks checkpoint on SIGTERM) stand");
    vj_plan_free(p);
    vj_plan_free(step(&w, NOW + 22));
    cr_assert_str_eq(phase_of(&w), "Queued");
    world_free(&w);
}

Test(decide, a_queue_label_with_a_gang_scheduler_is_refused_saying_why)
{
    world w = kueue_job("\"runPolicy\":{\"schedulingPolicy\":{\"gang\":\"volcano\"}}");
    vj_plan *p = step(&w, NOW);
    cr_assert_str_eq(phase_of(&w), "Failed");
    cr_assert_str_eq(cond_field(&w, "Failed", "reason"), "InvalidSpec");
    const char *m = cond_field(&w, "Failed", "message");
    cr_assert(strstr(m, "kueue.x-k8s.io/queue-name") && strstr(m, "gang=\"volcano\"") &&
              strstr(m, "Kueue admits the pods as one group itself"), "%s", m);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    vj_plan_free(p);
    world_free(&w);
}

/* ------------------------------------------------------ elastic gangs */

/* A job of `replicas` pods, globalBatchSize `global` in micro-batches of 2,
 * with spec.elastic = {elastic} (NULL: none) and `extra` in the spec. */
static world mk_elastic(int replicas, int global, const char *elastic, const char *extra)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"vitjob.dev/v1alpha1\",\"kind\":\"ViTJob\","
             "\"metadata\":{\"name\":\"j\",\"namespace\":\"ns\",\"uid\":\"u-1\",\"generation\":1},"
             "\"spec\":{\"replicas\":%d,\"image\":\"img:1\",\"model\":{\"preset\":\"fmnist_tiny\"},"
             "\"training\":{\"steps\":100,\"globalBatchSize\":%d,\"microBatchSize\":2}"
             "%s%s%s%s},\"status\":{}}",
             replicas, global, elastic ? ",\"elastic\":{" : "", elastic ? elastic : "",
             elastic ? "}" : "", extra ? extra : "");
    world w = {0};
    w.job = cJSON_Parse(buf);
    cr_assert_not_null(w.job, "bad job JSON: %s", buf);
    w.pods = cJSON_CreateArray();
    return w;
}

/* The scheduler bound the pod to `node` (and the kubelet runs it). */
static void place(world *w, const char *name, const char *node)
{
    cJSON *pod = find_pod(w, name);
    cr_assert_not_null(pod, "no pod %s", name);
    cJSON *spec = cJSON_GetObjectItem(pod, "spec");
    if (spec == NULL)
        spec = cJSON_AddObjectToObject(pod, "spec");
    cJSON_DeleteItemFromObject(spec, "nodeName");
    cJSON_AddStringToObject(spec, "nodeName", node);
    cJSON *st = cJSON_GetObjectItem(pod, "status");
    cJSON_DeleteItemFromObject(st, "conditions");
    cJSON_AddItemToObject(st, "conditions",
                          cJSON_Parse("[{\"type\":\"PodScheduled\",\"status\":\"True\"}]"));
    cJSON_ReplaceItemInObject(st, "phase", cJSON_CreateString("Running"));
}

/* The scheduler could not place the pod, since `since`. */
static void unschedulable(world *w, const char *name, long long since)
{
    char ts[TIMEFMT_LEN], buf[256];
    timefmt_rfc3339(ts, since, 0, 0);
    snprintf(buf, sizeof buf, "[{\"type\":\"PodScheduled\",\"status\":\"False\",\"reason\":"
             "\"Unschedulable\",\"message\":\"0/2 nodes are available\",\"lastTransitionTime\":\"%s\"}]", ts);
    cJSON *st = cJSON_GetObjectItem(find_pod(w, name), "status");
    cr_assert_not_null(st, "no pod %s", name);
    cJSON_DeleteItemFromObject(st, "conditions");
    cJSON_AddItemToObject(st, "conditions", cJSON_Parse(buf));
}

/* The pods of generation `gen` are gone (their kubelets stopped them). */
static void pods_gone(world *w, int gen)
{
    cJSON *p = w->pods->child;
    while (p) {
        cJSON *next = p->next;
        cJSON *labels = cJSON_GetObjectItem(cJSON_GetObjectItem(p, "metadata"), "labels");
        if (atoi(cJSON_GetObjectItem(labels, "vitjob.dev/restart")->valuestring) == gen)
            cJSON_Delete(cJSON_DetachItemViaPointer(w->pods, p));
        p = next;
    }
}

/* The worker container's env var `key` of pod `name`. */
static const char *pod_env(world *w, const char *name, const char *key)
{
    const cJSON *c, *e;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(cJSON_GetObjectItem(find_pod(w, name), "spec"), "containers"))
    {
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "env"))
        {
            if (strcmp(cJSON_GetObjectItem(e, "name")->valuestring, key) == 0)
                return cJSON_GetObjectItem(e, "value")->valuestring;
        }
    }
    return NULL;
}

static int st_int(world *w, const char *key)
{
    const cJSON *v = st_get(w, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

/* 3 pods, minReplicas 2: pods 0 and 1 placed, pod 2 unschedulable since
 * NOW+1 (a node is gone for good). */
static world three_with_one_unplaceable(const char *extra)
{
    world w = mk_elastic(3, 12, "\"minReplicas\":2", extra);
    vj_plan_free(step(&w, NOW));
    place(&w, "j-worker-0-r0", "n1");
    place(&w, "j-worker-1-r0", "n2");
    unschedulable(&w, "j-worker-2-r0", NOW + 1);
    return w;
}

Test(decide, elastic_shrinks_to_the_placed_pods_after_pending_timeout_and_not_before)
{
    world w = three_with_one_unplaceable(",\"runPolicy\":{\"backoffLimit\":0}");
    cr_assert_eq(st_int(&w, "worldSize"), 3);
    vj_plan *p = step(&w, NOW + 60);
    cr_assert_eq(restarts(&w), 0, "59 s unschedulable: not yet");
    cr_assert_eq(p->requeue_after, 1, "looked at again when the timeout ends");
    cr_assert_null(cond(&w, "Elastic"));
    vj_plan_free(p);
    p = step(&w, NOW + 61);
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(st_int(&w, "disruptionRestarts"), 1, "a disruption: backoffLimit 0 not spent");
    cr_assert_str_eq(phase_of(&w), "Restarting");
    cr_assert_eq(st_int(&w, "worldSize"), 2);
    cr_assert_str_eq(cond_field(&w, "Elastic", "status"), "True");
    cr_assert_str_eq(cond_field(&w, "Elastic", "reason"), "ShrunkUnschedulable");
    const char *msg = cond_field(&w, "Elastic", "message");
    cr_assert(strstr(msg, "j-worker-2-r0") && strstr(msg, "from 3 to 2 pods"), "%s", msg);
    cr_assert(has_event(p, "ShrunkUnschedulable"));
    cr_assert_str_eq(cJSON_GetObjectItem(st_get(&w, "lastRestart"), "cause")->valuestring, "Elastic");
    cr_assert_eq(n_pods_of_gen(&w, 1, 1), 2, "the next generation has 2 pods");
    cr_assert_str_eq(pod_env(&w, "j-worker-0-r1", "VITJOB_REPLICAS"), "2");
    cr_assert_str_eq(pod_env(&w, "j-worker-1-r1", "VITJOB_REPLICAS"), "2");
    cr_assert_eq(n_pods_of_gen(&w, 0, 0), 0, "the old generation's pods are deleted");
    vj_plan_free(p);
    /* the smaller gang runs */
    pods_gone(&w, 0);
    place(&w, "j-worker-0-r1", "n1");
    place(&w, "j-worker-1-r1", "n2");
    vj_plan_free(step(&w, NOW + 70));
    cr_assert_str_eq(phase_of(&w), "Running");
    cr_assert_eq(cJSON_GetObjectItem(st_get(&w, "replicas"), "active")->valueint, 2);
    world_free(&w);
}

Test(decide, elastic_never_shrinks_below_min_replicas_and_says_it_waits)
{
    world w = mk_elastic(3, 12, "\"minReplicas\":2", NULL);
    vj_plan_free(step(&w, NOW));
    place(&w, "j-worker-0-r0", "n1");
    unschedulable(&w, "j-worker-1-r0", NOW);
    unschedulable(&w, "j-worker-2-r0", NOW);
    vj_plan *p = step(&w, NOW + 600);
    cr_assert_eq(restarts(&w), 0, "1 placed < minReplicas 2: no restart");
    cr_assert_eq(st_int(&w, "worldSize"), 3);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    cr_assert_str_eq(cond_field(&w, "Elastic", "reason"), "BelowMinReplicas");
    const char *msg = cond_field(&w, "Elastic", "message");
    cr_assert(strstr(msg, "only 1 of 3 pods are placed") && strstr(msg, "minReplicas=2"), "%s", msg);
    cr_assert(has_event(p, "BelowMinReplicas"));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, elastic_shrinks_only_to_an_allowed_world_size)
{
    /* 16 = 2 x 2 x 4 = 2 x 4 x 2: 4, 2 and 1 pods divide it into micro-batches of 2; 3 do not */
    world w = mk_elastic(4, 16, "\"minReplicas\":1", NULL);
    vj_plan_free(step(&w, NOW));
    place(&w, "j-worker-0-r0", "n1");
    place(&w, "j-worker-1-r0", "n2");
    place(&w, "j-worker-2-r0", "n3");
    unschedulable(&w, "j-worker-3-r0", NOW);
    vj_plan_free(step(&w, NOW + 60));
    cr_assert_eq(st_int(&w, "worldSize"), 2, "3 placed, 3 not allowed: 2");
    cr_assert_eq(n_pods_of_gen(&w, 1, 1), 2);
    cr_assert_str_eq(pod_env(&w, "j-worker-1-r1", "VITJOB_REPLICAS"), "2");
    world_free(&w);
}

/* three_with_one_unplaceable, shrunk at NOW+61 and running at 2 from NOW+70. */
static world shrunk_and_running(void)
{
    world w = three_with_one_unplaceable(NULL);
    vj_plan_free(step(&w, NOW + 61));
    pods_gone(&w, 0);
    place(&w, "j-worker-0-r1", "n1");
    place(&w, "j-worker-1-r1", "n2");
    vj_plan_free(step(&w, NOW + 70));
    cr_assert_str_eq(phase_of(&w), "Running");
    return w;
}

Test(decide, elastic_grows_after_the_check_interval_stopping_the_old_pods_first)
{
    world w = shrunk_and_running();
    vj_plan *p = step(&w, NOW + 61 + 299);
    cr_assert_eq(restarts(&w), 1, "not before growCheckSeconds");
    cr_assert_eq(p->requeue_after, 1);
    vj_plan_free(p);
    p = step(&w, NOW + 61 + 300);
    cr_assert_eq(restarts(&w), 2);
    cr_assert_eq(st_int(&w, "disruptionRestarts"), 2, "a growth is a disruption");
    cr_assert_eq(st_int(&w, "worldSize"), 3);
    cr_assert_eq(st_int(&w, "elasticGrowFrom"), 2);
    cr_assert_str_eq(cond_field(&w, "Elastic", "reason"), "Growing");
    cr_assert(deletes(p, "j-worker-0-r1", 0) && deletes(p, "j-worker-1-r1", 0),
              "stopped gracefully: SIGTERM, each rank saves its step");
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0, "no new pod while the old ones stop");
    vj_plan_free(p);
    pods_gone(&w, 1);
    vj_plan_free(step(&w, NOW + 400));
    cr_assert_eq(n_pods_of_gen(&w, 2, 1), 3);
    cr_assert_str_eq(pod_env(&w, "j-worker-2-r2", "VITJOB_REPLICAS"), "3");
    for (int r = 0; r < 3; r++) {
        char name[32];
        snprintf(name, sizeof name, "j-worker-%d-r2", r);
        place(&w, name, "n1");
    }
    p = step(&w, NOW + 410);
    cr_assert_str_eq(phase_of(&w), "Running");
    cr_assert_str_eq(cond_field(&w, "Elastic", "status"), "False", "at spec.replicas again");
    cr_assert_str_eq(cond_field(&w, "Elastic", "reason"), "Grown");
    cr_assert_null(st_get(&w, "elasticGrowFrom"));
    cr_assert(has_event(p, "Grown"));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, elastic_grows_at_once_when_the_controller_saw_a_node_become_ready_after_the_shrink)
{
    world w = shrunk_and_running(); /* shrunk at NOW+61, growCheckSeconds 300 */
    w.have.node_ready_at = NOW + 50; /* before the shrink: old news */
    w.have.node_ready_name = "n3";
    vj_plan *p = step(&w, NOW + 100);
    cr_assert_eq(restarts(&w), 1, "a node Ready before the shrink does not grow it");
    cr_assert(p->requeue_after > 0 && p->requeue_after <= 61 + 300 - 100, "%lld", p->requeue_after);
    vj_plan_free(p);
    w.have.node_ready_at = NOW + 90;
    p = step(&w, NOW + 100);
    cr_assert_eq(restarts(&w), 2, "n3 Ready after the shrink: grows now, 261 s early");
    cr_assert_eq(st_int(&w, "worldSize"), 3);
    cr_assert_eq(st_int(&w, "elasticGrowFrom"), 2);
    cr_assert_str_eq(cond_field(&w, "Elastic", "reason"), "Growing");
    const char *msg = cond_field(&w, "Elastic", "message");
    cr_assert(strstr(msg, "node n3 became Ready"), "%s", msg);
    cr_assert(has_event(p, "Growing"));
    vj_plan_free(p);
    world_free(&w);
}

Test(decide, elastic_failed_growth_returns_to_the_old_size_and_backs_off)
{
    world w = shrunk_and_running();
    vj_plan_free(step(&w, NOW + 361));
    pods_gone(&w, 1);
    vj_plan_free(step(&w, NOW + 362));
    place(&w, "j-worker-0-r2", "n1");
    place(&w, "j-worker-1-r2", "n2");
    unschedulable(&w, "j-worker-2-r2", NOW + 363);
    vj_plan *p = step(&w, NOW + 363 + 59);
    cr_assert_eq(restarts(&w), 2, "not before pendingTimeoutSeconds");
    vj_plan_free(p);
    p = step(&w, NOW + 363 + 60);
    cr_assert_eq(restarts(&w), 3);
    cr_assert_eq(st_int(&w, "disruptionRestarts"), 3);
    cr_assert_eq(st_int(&w, "worldSize"), 2, "back to the size that ran");
    cr_assert_eq(st_int(&w, "elasticGrowFailures"), 1);
    cr_assert_null(st_get(&w, "elasticGrowFrom"));
    cr_assert_str_eq(cond_field(&w, "Elastic", "reason"), "GrowFailed");
    cr_assert(has_event(p, "GrowFailed"));
    cr_assert_eq(n_pods_of_gen(&w, 3, 1), 2);
    cr_assert_str_eq(pod_env(&w, "j-worker-0-r3", "VITJOB_REPLICAS"), "2");
    vj_plan_free(p);
    long long back = NOW + 423;
    pods_gone(&w, 2);
    place(&w, "j-worker-0-r3", "n1");
    place(&w, "j-worker-1-r3", "n2");
    vj_plan_free(step(&w, back + 10));
    cr_assert_str_eq(phase_of(&w), "Running");
    vj_plan_free(step(&w, back + 300));
    cr_assert_eq(restarts(&w), 3, "no growth at 1 x growCheckSeconds");
    vj_plan_free(step(&w, back + 600));
    cr_assert_eq(restarts(&w), 4, "growing again at 2 x growCheckSeconds");
    cr_assert_eq(st_int(&w, "elasticGrowFrom"), 2);
    world_free(&w);
}

Test(decide, without_elastic_unschedulable_pods_wait_and_nothing_changes)
{
    world w = mk_elastic(3, 12, NULL, NULL);
    vj_plan_free(step(&w, NOW));
    place(&w, "j-worker-0-r0", "n1");
    place(&w, "j-worker-1-r0", "n2");
    unschedulable(&w, "j-worker-2-r0", NOW);
    vj_plan *p = step(&w, NOW + 3600);
    cr_assert_eq(restarts(&w), 0);
    cr_assert_null(st_get(&w, "worldSize"));
    cr_assert_null(cond(&w, "Elastic"));
    cr_assert_eq(p->n_events, 0);
    cr_assert_eq(cJSON_GetArraySize(p->creates), 0);
    cr_assert_eq(p->n_deletes, 0);
    vj_plan_free(p);
    world_free(&w);
}

/* Volcano may leave a pod that it cannot place without a PodScheduled
 * condition: the PodGroup's Unschedulable says it for the gang. */
Test(decide, elastic_reads_a_podgroups_unschedulable_when_no_pod_says_it_counting_from_the_later_of_both)
{
    world w = mk_elastic(3, 12, "\"minReplicas\":2",
                         ",\"runPolicy\":{\"schedulingPolicy\":{\"gang\":\"volcano\"}}");
    vj_plan_free(step(&w, NOW));
    place(&w, "j-worker-0-r0", "n1");
    place(&w, "j-worker-1-r0", "n2");
    /* pod 2: Pending, no conditions, created at NOW + 30 */
    cJSON *meta = cJSON_GetObjectItem(find_pod(&w, "j-worker-2-r0"), "metadata");
    cJSON_DeleteItemFromObject(meta, "creationTimestamp");
    cJSON_AddStringToObject(meta, "creationTimestamp", "2023-11-14T22:13:50Z");
    /* the PodGroup has said Unschedulable since NOW + 10 (older than the pod) */
    set_podgroup(&w, "{\"phase\":\"Running\",\"running\":2,\"conditions\":[{\"type\":"
                     "\"Unschedulable\",\"status\":\"True\",\"reason\":\"NotEnoughResources\","
                     "\"message\":\"1/3 tasks in gang unschedulable\","
                     "\"lastTransitionTime\":\"2023-11-14T22:13:30Z\"}]}");
    vj_plan *p = step(&w, NOW + 71);
    cr_assert_eq(restarts(&w), 0, "61 s after the PodGroup's word but 41 s after the pod's creation");
    cr_assert_eq(p->requeue_after, 19, "looked at again 60 s after the pod's creation: %lld",
                 p->requeue_after);
    vj_plan_free(p);
    vj_plan_free(step(&w, NOW + 90));
    cr_assert_eq(restarts(&w), 1);
    cr_assert_eq(st_int(&w, "worldSize"), 2);
    cr_assert_str_eq(cond_field(&w, "Elastic", "reason"), "ShrunkUnschedulable");
    cr_assert(strstr(cond_field(&w, "Elastic", "message"), "j-worker-2-r0"), "%s",
              cond_field(&w, "Elastic", "message"));
    world_free(&w);
}

Test(decide, elastic_ignores_the_podgroup_while_a_pod_says_why_itself)
{
    world w = three_with_one_unplaceable(",\"runPolicy\":{\"schedulingPolicy\":{\"gang\":\"volcano\"}}");
    /* the PodGroup's word is older than the pod's own (NOW + 1) */
    set_podgroup(&w, "{\"phase\":\"Running\",\"running\":2,\"conditions\":[{\"type\":"
                     "\"Unschedulable\",\"status\":\"True\",\"lastTransitionTime\":"
                     "\"2023-11-14T22:13:20Z\"}]}");
    vj_plan_free(step(&w, NOW + 60));
    cr_assert_eq(restarts(&w), 0, "the pod's own condition (NOW + 1) counts, not the PodGroup's");
    vj_plan_free(step(&w, NOW + 61));
    cr_assert_eq(restarts(&w), 1);
    world_free(&w);
}

Test(decide, an_elastic_resize_waits_for_a_pending_restarts_classification)
{
    world w = closed_report("\"elastic\":{\"minReplicas\":1,\"pendingTimeoutSeconds\":15}");
    vj_plan_free(step(&w, NOW + 11));
    cr_assert_str_eq(last_restart(&w, "classifiedAs"), "Pending");
    place(&w, "j-worker-0-r1", "node-b");
    unschedulable(&w, "j-worker-1-r1", NOW + 12);
    vj_plan_free(step(&w, NOW + 40));
    cr_assert_eq(restarts(&w), 1, "no shrink while the restart that started generation 1 is pending");
    set_exit(&w, "j-worker-0-r0", 137); /* its kubelet: a crash */
    vj_plan *p = step(&w, NOW + 41);
    cr_assert(has_event(p, "RestartClassified"), "classified first");
    cr_assert(has_event(p, "ShrunkUnschedulable"), "then shrunk");
    vj_plan_free(p);
    cr_assert_eq(restarts(&w), 2, "the shrink, a restart of its own");
    cr_assert_str_eq(last_restart(&w, "cause"), "Elastic");
    cr_assert_eq(disruptions(&w), 1, "the shrink is a disruption, the crash spent backoffLimit");
    world_free(&w);
}

/* An elastic job's admission plan (planner.h's vj_admission.elastic): it
 * fits at 4 replicas, and at its fewest (2) it needs min_gib. */
static vj_admission elastic_plan_of(double min_gib, int smallest_fitting)
{
    vj_admission a = plan_of(60, 80, NULL);
    snprintf(a.sharding, sizeof a.sharding, "full");
    a.replicas = 4;
    a.elastic.min_replicas = 2;
    a.elastic.replicas = 2, a.elastic.world = 2;
    a.elastic.micro_batch = 2, a.elastic.accumulation = 4;
    a.elastic.memory_bytes = min_gib * 1073741824.0;
    a.elastic.fits = min_gib <= 80;
    a.elastic.smallest_fitting = smallest_fitting;
    return a;
}

Test(decide, an_elastic_job_that_fits_at_replicas_but_not_at_min_replicas_is_admitted_with_ElasticWillNotFit)
{
    world w = mk_elastic(4, 16, "\"minReplicas\":2", NULL);
    vj_admission a = elastic_plan_of(92, 4);
    w.have.plan = &a;
    vj_plan *p = step(&w, NOW);
    cr_assert_gt(cJSON_GetArraySize(p->creates), 0, "admitted: its children are created");
    cr_assert_str_eq(phase_of(&w), "Pending");
    cr_assert_null(cond(&w, "WillNotFit"));
    cr_assert_str_eq(cond_field(&w, "ElasticWillNotFit", "status"), "True");
    cr_assert_str_eq(cond_field(&w, "ElasticWillNotFit", "reason"), "MinReplicasExceedsGPUMemory");
    const char *msg = cond_field(&w, "ElasticWillNotFit", "message");
    cr_assert(strstr(msg, "at 2 replicas (2 ranks, elastic.minReplicas=2) the plan needs 92Gi") &&
              strstr(msg, "sharding full, micro-batch 2 x accumulation 4") &&
              strstr(msg, "a GPU has 80Gi (spec.gpuMemory=80Gi)") &&
              strstr(msg, "at 4 replicas it needs 60Gi") &&
              strstr(msg, "set spec.elastic.minReplicas to 4"), "%s", msg);
    cr_assert(has_event(p, "ElasticWillNotFit"), "a Warning event, before any shrink");
    vj_plan_free(p);
    cr_assert_eq(st_int(&w, "elasticMinFittingReplicas"), 4, "the floor of its shrinks");
    /* later reconciles carry no plan: the condition stays, no second event */
    w.have.plan = NULL;
    p = step(&w, NOW + 1);
    cr_assert(!has_event(p, "ElasticWillNotFit"));
    cr_assert_str_eq(cond_field(&w, "ElasticWillNotFit", "status"), "True");
    vj_plan_free(p);
    /* a pod that cannot be placed: 2 pods would fit the batch rule, not the
     * GPU, so the job waits at 4 instead of shrinking into a failure */
    place(&w, "j-worker-0-r0", "n1");
    place(&w, "j-worker-1-r0", "n2");
    place(&w, "j-worker-2-r0", "n3");
    unschedulable(&w, "j-worker-3-r0", NOW + 1);
    vj_plan_free(step(&w, NOW + 100));
    cr_assert_eq(restarts(&w), 0, "not shrunk below elasticMinFittingReplicas");
    cr_assert_eq(st_int(&w, "worldSize"), 4);
    cr_assert_str_eq(cond_field(&w, "Elastic", "reason"), "BelowMinReplicas");
    cr_assert(strstr(cond_field(&w, "Elastic", "message"), "minReplicas=2 (raised to 4"), "%s",
              cond_field(&w, "Elastic", "message"));
    cr_assert_eq(st_int(&w, "elasticMinFittingReplicas"), 4, "kept without a plan");
    world_free(&w);
}

Test(decide, an_elastic_job_that_fits_at_min_replicas_or_a_job_without_elastic_gets_no_ElasticWillNotFit)
{
    world w = mk_elastic(4, 16, "\"minReplicas\":2", NULL);
    vj_admission a = elastic_plan_of(70, 2);
    w.have.plan = &a;
    vj_plan *p = step(&w, NOW);
    cr_assert_null(cond(&w, "ElasticWillNotFit"));
    cr_assert(!has_event(p, "ElasticWillNotFit"));
    vj_plan_free(p);
    world_free(&w);
    w = mk_elastic(4, 16, NULL, NULL);
    a = elastic_plan_of(92, 4); /* a planner's elastic part, for a job that has none */
    w.have.plan = &a;
    vj_plan_free(step(&w, NOW));
    cr_assert_null(cond(&w, "ElasticWillNotFit"));
    world_free(&w);
}
