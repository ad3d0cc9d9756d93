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

/* spec.runPolicy.schedulingPolicy.gang: which gang scheduler's PodGroup the
 * operator makes for the job (docs/design.md, "Gang scheduling"). */
typedef enum {
    VJ_GANG_NONE = 0,     /* no PodGroup (default) */
    VJ_GANG_VOLCANO,      /* scheduling.volcano.sh/v1beta1 PodGroup, schedulerName volcano */
    VJ_GANG_COSCHEDULING, /* scheduling.x-k8s.io/v1alpha1 PodGroup (scheduler-plugins) */
    VJ_GANG_INVALID,      /* any other value: vj_jobspec_validate refuses it */
} vj_gang;

#define VJ_PG_VOLCANO_GROUP "scheduling.volcano.sh"
#define VJ_PG_VOLCANO_API VJ_PG_VOLCANO_GROUP "/v1beta1"
#define VJ_PG_COSCHED_GROUP "scheduling.x-k8s.io"
#define VJ_PG_COSCHED_API VJ_PG_COSCHED_GROUP "/v1alpha1"
#define VJ_PG_RESOURCE "podgroups"
#define VJ_PG_KIND "PodGroup"
/* volcano: the pods' annotation naming their PodGroup, and its scheduler */
#define VJ_PG_VOLCANO_ANNOTATION "scheduling.k8s.io/group-name"
#define VJ_PG_VOLCANO_SCHEDULER "volcano"
/* coscheduling: the pods' label naming their PodGroup */
#define VJ_PG_COSCHED_LABEL "scheduling.x-k8s.io/pod-group"
/* How long a PodGroup may wait unschedulable before the job says so, when
 * scheduleTimeoutSeconds is unset. */
#define VJ_GANG_DEFAULT_TIMEOUT_S 60
/* How long a job whose gang scheduler is not installed waits before it
 * looks again (no hot loop; installing the CRD is a human's act). */
#define VJ_GANG_MISSING_RECHECK_S 300

/* spec.elastic (issue 44; operator/elastic.h): the defaults of its times. */
#define VJ_ELASTIC_PENDING_TIMEOUT_S 60
#define VJ_ELASTIC_GROW_CHECK_S 300

/* Strings are borrowed from the job object: valid while it lives, unchanged. */
typedef struct {
    const char *name;               /* metadata.name */
    const char *ns;                 /* metadata.namespace ("default" if absent) */
    const char *uid;                /* metadata.uid ("" if absent) */
    long long generation;           /* metadata.generation (0 if absent) */
    int replicas;                   /* spec.replicas (0 if absent: invalid) */
    int gpus;                       /* spec.gpusPerReplica (default 0) */
    int local_ranks;                /* max(gpus, 1) */
    const char *gpu_memory;         /* spec.gpuMemory, a quantity ("80Gi"); NULL if unset */
    double gpu_memory_bytes;        /* its value (0 if unset or invalid) */
    int world_size;                 /* replicas x local_ranks */
    const char *image;              /* spec.image (NULL if absent: invalid) */
    const char *credentials_secret; /* spec.checkpoint.credentialsSecret; NULL if unset or "" */
    int backoff_limit;              /* spec.runPolicy.backoffLimit (default 3) */
    long long active_deadline;      /* spec.runPolicy.activeDeadlineSeconds; -1 = none */
    long long ttl;                  /* spec.runPolicy.ttlSecondsAfterFinished; -1 = none */
    long long node_lost_toleration; /* spec.runPolicy.nodeLostTolerationSeconds (default
                                       VJ_NODE_LOST_TOLERATION_S) */
    vj_clean_policy clean_pod_policy;
    vj_gang gang;                   /* spec.runPolicy.schedulingPolicy.gang (default none) */
    const char *gang_name;          /* its value as written ("none" if absent) */
    int min_available;              /* .minAvailable (default replicas; with spec.elastic,
                                       elastic.minReplicas) */
    const char *queue;              /* .queue; NULL if unset */
    const char *priority_class;     /* .priorityClass; NULL if unset */
    long long schedule_timeout;     /* .scheduleTimeoutSeconds; -1 = unset */
    const char *kueue_queue;        /* metadata.labels[kueue.x-k8s.io/queue-name]; NULL = not
                                       under Kueue (operator/kueue.h) */
    const char *kueue_priority;     /* metadata.labels[kueue.x-k8s.io/priority-class]; NULL */
    int suspend;                    /* spec.suspend */
    int elastic;                    /* spec.elastic is present (an object) */
    int min_replicas;               /* spec.elastic.minReplicas (default replicas) */
    long long pending_timeout;      /* .pendingTimeoutSeconds (default
                                       VJ_ELASTIC_PENDING_TIMEOUT_S) */
    long long grow_check;           /* .growCheckSeconds (default VJ_ELASTIC_GROW_CHECK_S) */
    const cJSON *spec;              /* the spec object (NULL if absent) */
    const cJSON *tmpl;              /* spec.template (NULL if absent) */
    const char *service_account;    /* spec.template.serviceAccountName; NULL = the operator
                                       makes the job's own identity */
} vj_jobspec;

/* Reads the job into js. Fails only when the object is not a ViTJob at all
 * (no metadata.name); everything else is left to vj_jobspec_validate. */
int vj_jobspec_parse(const cJSON *job, vj_jobspec *js, char *err, size_t errlen);

/* The API version of the gang's PodGroup ("" for VJ_GANG_NONE or invalid). */
const char *vj_gang_api_version(vj_gang g);

/* Validates what the schema cannot: the name (a DNS-1035 label short enough
 * for pod hostnames), replicas, image, spec.runPolicy.schedulingPolicy, spec.template (operator/template.h), and the
 * worker's part through config_load_string + config_validate with the job's
 * world size. On failure err holds the message (the worker's own for its keys). */
int vj_jobspec_validate(const vj_jobspec *js, char *err, size_t errlen);

/* The world sizes the job may run at, by the worker's own rule (the one
 * vj_jobspec_validate applies at spec.replicas): for each pod count w in
 * [lo, hi], ok[w - lo] = 1 when config_finish accepts the worker's part of
 * the spec at world size w x local_ranks (training.globalBatchSize divides
 * into whole micro-batches on every rank), else 0. Returns 0, or -1 with
 * the worker's message when its part does not load at all, or out of memory. */
int vj_jobspec_world_sizes(const vj_jobspec *js, int lo, int hi, unsigned char *ok, char *err,
                           size_t errlen);

/* The worker's part of the spec ({model, data, training, checkpoint}, those
 * present) as a new object; caller frees with cJSON_Delete. NULL on OOM. */
cJSON *vj_jobspec_worker_config(const vj_jobspec *js);

#endif
