/* operator/admission.c - see admission.h. */
#include "admission.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "jobspec.h"
#include "log.h"

int vj_admission_wanted(const cJSON *job, const cJSON *pods)
{
    const cJSON *spec = json_get(job, "spec"), *st = json_get(job, "status");
    if (json_int(spec, "gpusPerReplica", 0) <= 0) return 0;
    const char *phase = json_str(st, "phase");
    if (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"))) return 0;
    if (cJSON_GetArraySize(pods) > 0) return 0;
    long long gen = json_int(json_get(job, "metadata"), "generation", 0);
    return json_int(st, "plannedGeneration", -1) != gen;
}

const char *vj_admission_gpu_kind(const char *product)
{
    static const struct { const char *in, *kind; } kinds[] = {
        {"H200", "h200"}, {"H100", "h100"}, {"A100", "a100"}, {"V100", "v100"}};
    for (size_t i = 0; product && i < sizeof kinds / sizeof kinds[0]; i++)
        if (strstr(product, kinds[i].in)) return kinds[i].kind;
    return NULL;
}

/* The smallest nvidia.com/gpu.memory label (MiB) among the nodes sel
 * (spec.template.nodeSelector, may be NULL) allows: bytes into *bytes, the
 * node's words into src and its product into product; 0 when none says. */
static void memory_of_nodes(kube_client *k, const cJSON *sel, double *bytes, char *src,
                            size_t srclen, char *product, size_t prodlen)
{
    char selector[2048], path[256];
    size_t at = (size_t)snprintf(selector, sizeof selector, "%s", VJ_GPU_MEMORY_LABEL);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, sel) {
        if (!cJSON_IsString(kv)) continue;
        int w = snprintf(selector + at, sizeof selector - at, ",%s=%s", kv->string,
                         kv->valuestring);
        if (w < 0 || (size_t)w >= sizeof selector - at) return; /* cannot say: unknown */
        at += (size_t)w;
    }
    kube_path(path, sizeof path, "/api/v1", NULL, "nodes", NULL, NULL);
    kube_list_opts lo = {.label_selector = selector, .limit = 500};
    cJSON *items = NULL;
    kube_status st;
    if (kube_list(k, path, &lo, &items, NULL, 0, &st) != KUBE_OK) {
        LOG_WARN("admission", "event=nodes_unreadable code=%d msg=%s", st.http_code,
                 LOGV(st.message));
        return;
    }
    const cJSON *node, *best = NULL;
    double best_mib = 0;
    int n = 0;
    cJSON_ArrayForEach(node, items) {
        const char *v = json_str(json_get(json_get(node, "metadata"), "labels"),
                                 VJ_GPU_MEMORY_LABEL);
        char *end;
        double mib = v ? strtod(v, &end) : 0;
        if (!v || end == v || *end || mib <= 0) continue; /* not a number of MiB */
        n++;
        if (!best || mib < best_mib) best = node, best_mib = mib;
    }
    if (best) {
        const cJSON *labels = json_get(json_get(best, "metadata"), "labels");
        *bytes = best_mib * 1048576.0;
        snprintf(src, srclen, "node label %s=%s on node %s%s", VJ_GPU_MEMORY_LABEL,
                 json_str(labels, VJ_GPU_MEMORY_LABEL), kube_meta_str(best, "name"),
                 n > 1 ? ", the smallest of the nodes the job may run on" : "");
        const char *p = json_str(labels, VJ_GPU_PRODUCT_LABEL);
        snprintf(product, prodlen, "%s", p ? p : "");
    }
    cJSON_Delete(items);
}

int vj_admit(kube_client *k, const char *planner, const cJSON *job, vj_admission *out,
             char *err, size_t errlen)
{
    vj_jobspec js;
    if (vj_jobspec_parse(job, &js, err, errlen) != 0) return -1;
    if (vj_jobspec_validate(&js, err, errlen) != 0) return -1; /* decide says why */
    const cJSON *sel = json_get(js.tmpl, "nodeSelector");
    char src[256] = "", product[128] = "";
    snprintf(product, sizeof product, "%s",
             json_str(sel, VJ_GPU_PRODUCT_LABEL) ? json_str(sel, VJ_GPU_PRODUCT_LABEL) : "");
    double bytes = 0;
    if (js.gpu_memory_bytes > 0) {
        bytes = js.gpu_memory_bytes;
        snprintf(src, sizeof src, "spec.gpuMemory=%s", js.gpu_memory);
    } else {
        char node_product[128] = "";
        memory_of_nodes(k, sel, &bytes, src, sizeof src, node_product, sizeof node_product);
        if (!product[0]) snprintf(product, sizeof product, "%s", node_product);
    }
    cJSON *wc = vj_jobspec_worker_config(&js);
    if (!wc) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    vj_planner_args a = {.program = planner, .replicas = js.replicas,
                         .local_ranks = js.local_ranks,
                         .gpu_kind = vj_admission_gpu_kind(product), .gpu_bytes = bytes,
                         .gpu_source = src,
                         .min_replicas = js.elastic && js.min_replicas < js.replicas
                                             ? js.min_replicas : 0};
    int rc = vj_planner_run(&a, wc, out, err, errlen);
    cJSON_Delete(wc);
    if (rc == 0) out->generation = js.generation;
    return rc;
}
