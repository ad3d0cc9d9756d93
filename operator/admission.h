/* operator/admission.h - the operator's side of "will it fit?" before a
 * GPU job's first pods (docs/design.md, "Admission: will it fit?").
 *
 * Owns: when a job is planned (a GPU job, not finished, with no pods yet,
 * whose spec's generation has not been planned), the GPU memory its ranks
 * get (spec.gpuMemory; else the smallest nvidia.com/gpu.memory label, in
 * MiB as NVIDIA's GPU feature discovery publishes it, among the nodes its
 * spec.template.nodeSelector allows) and the GPU kind (the
 * nvidia.com/gpu.product its nodeSelector or those nodes name), and running
 * the planner (planner.h) with them, and for a job with spec.elastic, its
 * minReplicas (the plan then also covers the sizes it may shrink to).
 * Must not: decide (decide.c turns a plan that does not fit into
 * WillNotFit), write to the API server, or include the worker's code.
 */
#ifndef VITJOB_ADMISSION_H
#define VITJOB_ADMISSION_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "kube.h"
#include "planner.h"

/* The node labels NVIDIA's GPU feature discovery sets. */
#define VJ_GPU_MEMORY_LABEL "nvidia.com/gpu.memory"   /* MiB per GPU, e.g. 81559 */
#define VJ_GPU_PRODUCT_LABEL "nvidia.com/gpu.product" /* e.g. NVIDIA-H100-80GB-HBM3 */

/* 1 when job is to be planned now: spec.gpusPerReplica > 0, phase neither
 * Succeeded nor Failed, no pod in pods (the job's, as listed), and
 * status.plannedGeneration differs from metadata.generation. Else 0. */
int vj_admission_wanted(const cJSON *job, const cJSON *pods);

/* The planner's GPU kind for a product name ("NVIDIA-H100-80GB-HBM3": "h100"),
 * or NULL when it names none the planner knows. */
const char *vj_admission_gpu_kind(const char *product);

/* Plans job with the planner program: the GPU memory from spec.gpuMemory or
 * the nodes' labels (a LIST of nodes; a 403 or no labelled node leaves the
 * memory unknown, so nothing is refused), then vj_planner_run. 0 and *out
 * (generation set), or -1 with a message (the job is then not planned). */
int vj_admit(kube_client *k, const char *planner, const cJSON *job, vj_admission *out,
             char *err, size_t errlen);

#endif
