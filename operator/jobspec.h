/* operator/jobspec.h - a ViTJob's spec as the operator reads it.
 *
 * Owns: reading the operator's keys of a ViTJob (cJSON as returned by the API
 * server) into a plain struct, and validating the whole spec (the worker's
 * part through the spec table both programs share, api/config.h, so that
 * operator and worker can never disagree).
 * Must not: do I/O, allocate anything the caller has to free, or log.
 *
 * Errors: functions return 0 on success and -1 on failure, with a one-line
 * message in `err` (for validation: naming the field and value).
 */
#ifndef VITJOB_JOBSPEC_H
#define VITJOB_JOBSPEC_H

/* The most pods one ViTJob may ask for (also the CRD's maximum). */
#define VJ_MAX_REPLICAS 4096

#include <cjson/cJSON.h>
#include <stddef.h>


typedef enum {
    VJ_CLEAN_RUNNING = 0, /* delete pods still pending or running (default) */
    VJ_CLEAN_ALL,         /* delete every pod */
    VJ_CLEAN_NONE,        /* keep every pod */
} vj_clean_policy;

/* Strings are borrowed from the job object: valid while it lives, unchanged. */
typedef struct {
    const char *name;               /* metadata.name */
    const char *ns;                 /* metadata.namespace ("default" if absent) */
    const char *uid;                /* metadata.uid ("" if absent) */
    long long generation;           /* metadata.generation (0 if absent) */
    int replicas;                   /* spec.replicas (0 if absent: invalid) */
    int gpus;                       /* spec.gpusPerReplica (default 0) */
    int local_ranks;                /* max(gpus, 1) */
    int world_size;                 /* replicas x local_ranks */
    const char *image;              /* spec.image (NULL if absent: invalid) */
    const char *credentials_secret; /* spec.checkpoint.credentialsSecret; NULL if unset or "" */
    int backoff_limit;              /* spec.runPolicy.backoffLimit (default 3) */
    long long active_deadline;      /* spec.runPolicy.activeDeadlineSeconds; -1 = none */
    long long ttl;                  /* spec.runPolicy.ttlSecondsAfterFinished; -1 = none */
    long long node_lost_toleration; /* spec.runPolicy.nodeLostTolerationSeconds (default
                                       VJ_NODE_LOST_TOLERATION_S) */
    vj_clean_policy clean_pod_policy;
    int suspend;                    /* spec.suspend */
    const cJSON *spec;              /* the spec object (NULL if absent) */
    const cJSON *tmpl;              /* spec.template (NULL if absent) */
    const char *service_account;    /* spec.template.serviceAccountName; NULL = the operator
                                       makes the job's own identity */
} vj_jobspec;

/* Reads the job into js. Fails only when the object is not a ViTJob at all
 * (no metadata.name); everything else is left to vj_jobspec_validate. */
int vj_jobspec_parse(const cJSON *job, vj_jobspec *js, char *err, size_t errlen);

/* Validates what the schema cannot: the name (a DNS-1035 label short enough
 * for pod hostnames), replicas, image, spec.template (operator/template.h), and the
 * worker's part through config_load_string + config_validate with the job's
 * world size. On failure err holds the message (the worker's own for its keys). */
int vj_jobspec_validate(const vj_jobspec *js, char *err, size_t errlen);

/* The worker's part of the spec ({model, data, training, checkpoint}, those
 * present) as a new object; caller frees with cJSON_Delete. NULL on OOM. */
cJSON *vj_jobspec_worker_config(const vj_jobspec *js);

#endif
