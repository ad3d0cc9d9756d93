/* operator/render.h - the desired child objects of a ViTJob.
 *
 * Owns: turning a ViTJob (cJSON as read from the API server) into the
 * ConfigMap, headless Service and worker Pods the operator wants to exist,
 * following design.md's operator <-> worker contract, and deciding whether an
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

#define VJ_LABEL_JOB "vitjob.dev/job-name"
#define VJ_LABEL_RANK "vitjob.dev/rank"
#define VJ_LABEL_RESTART "vitjob.dev/restart"
#define VJ_RDZV_PORT 29400
#define VJ_CONFIG_DIR "/etc/vitjob"
#define VJ_CONFIG_FILE "config.json"
#define VJ_WORKER_SA "vitjob-worker"
#define VJ_NAME_LEN 320

/* "<job>-worker-<rank>-r<restart>" into buf. Returns 0, -1 if it does not fit. */
int vj_render_pod_name(char *buf, size_t len, const char *job, int rank, int restart);

/* "<job>-config". Returns 0, -1 if it does not fit. */
int vj_render_configmap_name(char *buf, size_t len, const char *job);

/* ConfigMap <job>-config: data."config.json" = {model, data, training,
 * checkpoint} of the spec (those present), owned by the job. */
cJSON *vj_render_configmap(const cJSON *job, char *err, size_t errlen);

/* Headless Service <job>: clusterIP None, selector job-name=<job>, port 29400
 * named rdzv, publishNotReadyAddresses true, owned by the job. */
cJSON *vj_render_service(const cJSON *job, char *err, size_t errlen);

/* Worker pod of `rank` in restart generation `restart` (see design.md):
 * name, hostname, subdomain, labels, owner reference, env contract, config
 * mount, GPU limit and spec.template overrides merged in. */
cJSON *vj_render_pod(const cJSON *job, int rank, int restart, char *err, size_t errlen);

/* 1 if `existing` (as read from the API server, with its defaults and
 * status) matches `desired` (a vj_render_* result) closely enough that no
 * change is needed, else 0. Compared: the kind, name, the desired labels
 * (a subset), and per kind: ConfigMap data (exactly); Service spec fields the
 * operator sets (a subset: the server's defaults are ignored); Pod the
 * worker container's image, command and env (pods are immutable: a mismatch
 * means delete and recreate). */
int vj_render_matches(const cJSON *existing, const cJSON *desired);

#endif
