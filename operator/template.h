/* operator/template.h - spec.template, the pod overrides of a ViTJob.
 *
 * Owns: the keys spec.template accepts (resources, nodeSelector, tolerations,
 * schedulerName, priorityClassName, serviceAccountName, securityContext,
 * containerSecurityContext) and checking their values as the API server
 * would check them in a pod: quantities and resource names, requests <=
 * limits, whole and equal requests and limits for extended resources such as
 * nvidia.com/gpu, toleration operators and effects, node selector keys and
 * values, object names, and the shape (keys and types) of the security
 * contexts. A ViTJob whose template a real server would refuse in a pod fails
 * before any pod is created, with the field named.
 * Must not: allocate, log, or merge anything into a pod (operator/render.c
 * does that).
 */
#ifndef VITJOB_TEMPLATE_H
#define VITJOB_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* The extended resource gpusPerReplica sets on the worker container. */
#define VJ_GPU_RESOURCE "nvidia.com/gpu"

/* tmpl: spec.template (NULL = none). gpus: spec.gpusPerReplica; when > 0
 * the operator sets nvidia.com/gpu itself, so the template's value for it is
 * not checked. Returns 0, or -1 with "spec.template.<field>...: <why>" in err. */
int vj_template_validate(const cJSON *tmpl, int gpus, char *err, size_t errlen);

#endif
