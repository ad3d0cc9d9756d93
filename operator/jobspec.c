/* operator/jobspec.c - see jobspec.h.
 *
 * Owns: reading and validating a ViTJob spec.
 * Must not: do I/O or keep pointers beyond the job object it was given.
 */
#include "jobspec.h"

#include "config.h"
#include "json.h"
#include "kueue.h"
#include "kvalid.h"
#include "template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_err(char *err, size_t errlen, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
}

int vj_jobspec_parse(const cJSON *job, vj_jobspec *js, char *err, size_t errlen)
{
    const cJSON *meta = json_get(job, "metadata");
    const char *name = json_str(meta, "name");
    if (name == NULL || name[0] == '\0') {
        set_err(err, errlen, "ViTJob has no metadata.name");
        return -1;
    }
    vj_jobspec s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.ns = json_str(meta, "namespace");
    if (s.ns == NULL || s.ns[0] == '\0')
        s.ns = "default";
    s.uid = json_str(meta, "uid");
    if (s.uid == NULL)
        s.uid = "";
    s.generation = json_int(meta, "generation", 0);

    const cJSON *spec = json_get(job, "spec");
    s.spec = cJSON_IsObject(spec) ? spec : NULL;
    s.replicas = (int)json_int(spec, "replicas", 0);
    s.gpus = (int)json_int(spec, "gpusPerReplica", 0);
    s.local_ranks = s.gpus > 0 ? s.gpus : 1;
    s.world_size = s.replicas * s.local_ranks;
    s.gpu_memory = json_str(spec, "gpuMemory");
    long double gm = 0;
    if (s.gpu_memory && kv_parse_quantity(s.gpu_memory, &gm, NULL, 0))
        s.gpu_memory_bytes = (double)gm;
    s.image = json_str(spec, "image");
    const char *cs = json_str(json_get(spec, "checkpoint"), "credentialsSecret");
    s.credentials_secret = (cs && cs[0]) ? cs : NULL;

    const cJSON *rp = json_get(spec, "runPolicy");
    s.backoff_limit = (int)json_int(rp, "backoffLimit", 3);
    s.active_deadline = json_int(rp, "activeDeadlineSeconds", -1);
    s.ttl = json_int(rp, "ttlSecondsAfterFinished", -1);
    s.node_lost_toleration = json_int(rp, "nodeLostTolerationSeconds", VJ_NODE_LOST_TOLERATION_S);
    const char *cpp = json_str(rp, "cleanPodPolicy");
    s.clean_pod_policy = VJ_CLEAN_RUNNING;
    if (cpp && strcmp(cpp, "All") == 0)
        s.clean_pod_policy = VJ_CLEAN_ALL;
    else if (cpp && strcmp(cpp, "None") == 0)
        s.clean_pod_policy = VJ_CLEAN_NONE;
    const cJSON *sp = json_get(rp, "schedulingPolicy");
    const char *gang = json_str(sp, "gang");
    s.gang_name = gang ? gang : "none";
    s.gang = (gang == NULL || strcmp(gang, "none") == 0) ? VJ_GANG_NONE
             : strcmp(gang, "volcano") == 0              ? VJ_GANG_VOLCANO
             : strcmp(gang, "coscheduling") == 0         ? VJ_GANG_COSCHEDULING
                                                         : VJ_GANG_INVALID;
    const cJSON *el = json_get(spec, "elastic");
    s.elastic = cJSON_IsObject(el);
    s.min_replicas = (int)json_int(el, "minReplicas", s.replicas);
    s.pending_timeout = json_int(el, "pendingTimeoutSeconds", VJ_ELASTIC_PENDING_TIMEOUT_S);
    s.grow_check = json_int(el, "growCheckSeconds", VJ_ELASTIC_GROW_CHECK_S);
    s.min_available = (int)json_int(sp, "minAvailable", s.elastic ? s.min_replicas : s.replicas);
    s.queue = json_str(sp, "queue");
    s.priority_class = json_str(sp, "priorityClass");
    s.schedule_timeout = json_int(sp, "scheduleTimeoutSeconds", -1);
    const cJSON *labels = json_get(meta, "labels");
    s.kueue_queue = json_str(labels, VJ_KUEUE_QUEUE_LABEL);
    s.kueue_priority = json_str(labels, VJ_KUEUE_PRIORITY_LABEL);
    s.suspend = cJSON_IsTrue(json_get(spec, "suspend"));
    const cJSON *t = json_get(spec, "template");
    s.tmpl = cJSON_IsObject(t) ? t : NULL;
    const char *sa = json_str(s.tmpl, "serviceAccountName");
    s.service_account = (sa && sa[0]) ? sa : NULL;
    *js = s;
    return 0;
}

const char *vj_gang_api_version(vj_gang g)
{
    return g == VJ_GANG_VOLCANO ? VJ_PG_VOLCANO_API : g == VJ_GANG_COSCHEDULING ? VJ_PG_COSCHED_API : "";
}

/* spec.runPolicy.schedulingPolicy (the CRD checks the same, for jobs that
 * reach the operator some other way). */
static int validate_scheduling(const vj_jobspec *js, char *err, size_t errlen)
{
#define SP "spec.runPolicy.schedulingPolicy."
    char why[160];
    if (js->gang == VJ_GANG_INVALID) {
        snprintf(err, errlen, SP "gang=\"%s\": must be one of none, volcano, coscheduling",
                 js->gang_name);
        return -1;
    }
    if (js->min_available < 1 || js->min_available > js->replicas) {
        snprintf(err, errlen, SP "minAvailable=%d: must be in [1, spec.replicas=%d]",
                 js->min_available, js->replicas);
        return -1;
    }
    if (js->schedule_timeout != -1 && js->schedule_timeout < 1) {
        snprintf(err, errlen, SP "scheduleTimeoutSeconds=%lld: must be >= 1", js->schedule_timeout);
        return -1;
    }
    if (js->queue && !kv_is_dns1123_subdomain(js->queue, why, sizeof why)) {
        snprintf(err, errlen, SP "queue=\"%s\": %s", js->queue, why);
        return -1;
    }
    if (js->priority_class && !kv_is_dns1123_subdomain(js->priority_class, why, sizeof why)) {
        snprintf(err, errlen, SP "priorityClass=\"%s\": %s", js->priority_class, why);
        return -1;
    }
#define KL "metadata.labels[" VJ_KUEUE_QUEUE_LABEL "]"
    if (js->kueue_priority && js->kueue_queue == NULL) {
        snprintf(err, errlen, "metadata.labels[" VJ_KUEUE_PRIORITY_LABEL "]=\"%s\": only means "
                 "something with " KL " (the Kueue LocalQueue the pods wait in)", js->kueue_priority);
        return -1;
    }
    if (js->kueue_queue == NULL)
        return 0;
    if (!kv_is_dns1123_subdomain(js->kueue_queue, why, sizeof why)) {
        snprintf(err, errlen, KL "=\"%s\": %s", js->kueue_queue, why);
        return -1;
    }
    if (js->kueue_priority && !kv_is_dns1123_subdomain(js->kueue_priority, why, sizeof why)) {
        snprintf(err, errlen, "metadata.labels[" VJ_KUEUE_PRIORITY_LABEL "]=\"%s\": %s",
                 js->kueue_priority, why);
        return -1;
    }
    if (js->gang != VJ_GANG_NONE) {
        snprintf(err, errlen, KL "=\"%s\" with " SP "gang=\"%s\": Kueue admits the pods as one "
                 "group itself (gang none); a second gang scheduler would wait for pods that Kueue "
                 "holds at its gate until they are admitted, so neither ever starts them: remove one",
                 js->kueue_queue, js->gang_name);
        return -1;
    }
    return 0;
#undef KL
#undef SP
}

cJSON *vj_jobspec_worker_config(const vj_jobspec *js)
{
    static const char *const keys[] = {"model", "data", "training", "checkpoint"};
    cJSON *out = cJSON_CreateObject();
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *v = json_get(js->spec, keys[i]);
        if (v == NULL)
            continue;
        cJSON *dup = cJSON_Duplicate(v, 1);
        if (dup == NULL || !cJSON_AddItemToObject(out, keys[i], dup)) {
            cJSON_Delete(dup);
            cJSON_Delete(out);
            return NULL;
        }
    }
    return out;
}

/* cfg = the defaults and the worker's part of the spec, as the worker loads
 * it (config_finish not yet applied). */
static int load_worker_config(const vj_jobspec *js, vit_job_config *cfg, char *err, size_t errlen)
{
    cJSON *wc = vj_jobspec_worker_config(js);
    char *text = wc ? cJSON_PrintUnformatted(wc) : NULL;
    cJSON_Delete(wc);
    if (text == NULL) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    config_defaults(cfg);
    int rc = config_load_string(cfg, text, strlen(text), "spec", err, errlen) != 0 ? -1 : 0;
    free(text);
    return rc;
}

int vj_jobspec_world_sizes(const vj_jobspec *js, int lo, int hi, unsigned char *ok, char *err,
                           size_t errlen)
{
    vit_job_config *base = malloc(sizeof *base), *cfg = malloc(sizeof *cfg);
    int rc = -1;
    char why[256];
    if (base == NULL || cfg == NULL) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    if (load_worker_config(js, base, err, errlen) != 0)
        goto out;
    for (int w = lo; w <= hi; w++) {
        *cfg = *base;
        cfg->world_size = w * js->local_ranks;
        ok[w - lo] = w >= 1 && config_finish(cfg, why, sizeof why) == 0;
    }
    rc = 0;
out:
    free(base);
    free(cfg);
    return rc;
}

/* spec.elastic (operator/elastic.h): the bounds, the times, a batch that
 * stays the same at every size, a size to shrink to, and a gang scheduler
 * that lets pods be placed one by one. */
static int validate_elastic(const vj_jobspec *js, char *err, size_t errlen)
{
#define EL "spec.elastic."
    if (js->pending_timeout < 1) {
        snprintf(err, errlen, EL "pendingTimeoutSeconds=%lld: must be >= 1", js->pending_timeout);
        return -1;
    }
    if (js->grow_check < 1) {
        snprintf(err, errlen, EL "growCheckSeconds=%lld: must be >= 1", js->grow_check);
        return -1;
    }
    if (json_get(json_get(js->spec, "training"), "globalBatchSize") == NULL) {
        set_err(err, errlen, "spec.elastic needs spec.training.globalBatchSize: its default "
                "follows the world size (128 rounded up to a multiple of microBatchSize x world "
                "size), so the batch would change at every resize");
        return -1;
    }
    if (js->gang != VJ_GANG_NONE && js->min_available > js->min_replicas) {
        snprintf(err, errlen, "spec.runPolicy.schedulingPolicy.minAvailable=%d: with spec.elastic "
                 "it must not exceed elastic.minReplicas=%d (the gang scheduler places no pod "
                 "until minAvailable fit, so a job that fits only minReplicas would show no "
                 "placed pod to shrink to); leave it unset", js->min_available, js->min_replicas);
        return -1;
    }
    if (js->min_replicas == js->replicas)
        return 0;
    int n = js->replicas - js->min_replicas; /* sizes below replicas */
    unsigned char *ok = malloc((size_t)n);
    if (ok == NULL) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    int rc = vj_jobspec_world_sizes(js, js->min_replicas, js->replicas - 1, ok, err, errlen);
    int any = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        any |= ok[i];
    free(ok);
    if (rc != 0)
        return -1;
    if (!any) {
        const cJSON *t = json_get(js->spec, "training");
        snprintf(err, errlen, EL "minReplicas=%d: no world size in [%d, %d] pods (x %d ranks "
                 "each) divides training.globalBatchSize=%lld into whole micro-batches (of "
                 "microBatchSize %s) per rank, so the job could never shrink",
                 js->min_replicas, js->min_replicas, js->replicas - 1, js->local_ranks,
                 json_int(t, "globalBatchSize", 0),
                 json_get(t, "microBatchSize") ? "as given" : "any size up to 64");
        return -1;
    }
    return 0;
#undef EL
}

int vj_jobspec_validate(const vj_jobspec *js, char *err, size_t errlen)
{
    if (js->spec == NULL) {
        set_err(err, errlen, "spec: missing");
        return -1;
    }
    if (js->replicas < 1 || js->replicas > VJ_MAX_REPLICAS) {
        snprintf(err, errlen, "spec.replicas=%d: must be in [1, %d]", js->replicas,
                 VJ_MAX_REPLICAS);
        return -1;
    }
    /* <job> is a Service name: a DNS-1035 label (a ViTJob's own name is only
     * a DNS-1123 subdomain, so "1job" or "my.job" pass the API server). */
    char why[160];
    if (!kv_is_dns1035_label(js->name, why, sizeof why)) {
        snprintf(err, errlen,
                 "metadata.name=\"%s\": %s (it names the job's Service, which must be a "
                 "DNS-1035 label: lower case letters, digits and '-', starting with a letter, "
                 "ending with a letter or digit)", js->name, why);
        return -1;
    }
    /* <job>-worker-<rank> is a pod hostname: a DNS label of at most 63. */
    char last_rank[16];
    int digits = snprintf(last_rank, sizeof last_rank, "%d", js->replicas - 1);
    size_t max_name = 63 - strlen("-worker-") - (size_t)digits;
    if (js->name && strlen(js->name) > max_name) {
        snprintf(err, errlen,
                 "metadata.name=\"%s\" is %zu characters; with %d replicas at most %zu fit "
                 "(pod hostnames <name>-worker-<rank> are DNS labels of 63)",
                 js->name, strlen(js->name), js->replicas, max_name);
        return -1;
    }
    if (js->gpus < 0 || js->gpus > 64) {
        snprintf(err, errlen, "spec.gpusPerReplica=%d: must be in [0, 64]", js->gpus);
        return -1;
    }
    if (js->gpu_memory) {
        char why[128] = "";
        long double gm = 0;
        if (!kv_parse_quantity(js->gpu_memory, &gm, why, sizeof why) || gm < 1) {
            snprintf(err, errlen, "spec.gpuMemory=\"%s\": %s", js->gpu_memory,
                     why[0] ? why : "must be a positive quantity of bytes, e.g. 80Gi");
            return -1;
        }
    }
    if (js->image == NULL || js->image[0] == '\0') {
        set_err(err, errlen, "spec.image: missing or empty");
        return -1;
    }
    /* before the scheduling policy: minAvailable defaults to it */
    if (js->elastic && (js->min_replicas < 1 || js->min_replicas > js->replicas)) {
        snprintf(err, errlen, "spec.elastic.minReplicas=%d: must be in [1, spec.replicas=%d]",
                 js->min_replicas, js->replicas);
        return -1;
    }
    if (validate_scheduling(js, err, errlen) != 0)
        return -1;
    if (vj_template_validate(js->tmpl, js->gpus, err, errlen) != 0)
        return -1;

    /* The worker's own code, on exactly the document the worker will read. */
    vit_job_config *cfg = malloc(sizeof *cfg);
    int rc = -1;
    if (cfg == NULL) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    if (load_worker_config(js, cfg, err, errlen) != 0)
        goto out;
    cfg->world_size = js->world_size;
    if (config_finish(cfg, err, errlen) != 0)
        goto out;
    rc = js->elastic ? validate_elastic(js, err, errlen) : 0;
out:
    free(cfg);
    return rc;
}
