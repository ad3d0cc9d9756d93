/* api/contract.h - the operator <-> worker contract of docs/design.md, in one
 * place: exit codes, environment variables, labels, names, paths and the
 * API group. Both programs include it; neither spells these anywhere else.
 * Must not: hold code, or anything only one side uses.
 */
#ifndef VITJOB_CONTRACT_H
#define VITJOB_CONTRACT_H

/* Worker exit codes. 2 and 3 fail the job for good; anything else (and a
 * signal) restarts the gang while runPolicy.backoffLimit allows. */
enum {
    VITJOB_EXIT_OK = 0,
    VITJOB_EXIT_FAILURE = 1, /* retryable */
    VITJOB_EXIT_CONFIG = 2,  /* bad config or spec: permanent */
    VITJOB_EXIT_DATA = 3,    /* bad or missing data: permanent */
};

/* The API: group, version, kind and resource of a ViTJob. */
#define VJ_GROUP "vitjob.dev"
#define VJ_VERSION "v1alpha1"
#define VJ_API_VERSION VJ_GROUP "/" VJ_VERSION
#define VJ_KIND "ViTJob"
#define VJ_RESOURCE "vitjobs"

/* Labels on every child of a job, and on its pods. */
#define VJ_LABEL_JOB "vitjob.dev/job-name"
#define VJ_LABEL_RANK "vitjob.dev/rank"       /* pods: the pod's index */
#define VJ_LABEL_RESTART "vitjob.dev/restart" /* pods: the restart generation */

/* Names of a job's children: <job> (Service), <job>-config (ConfigMap),
 * <job>-worker (ServiceAccount, Role, RoleBinding), <job>-worker-<rank>-r<gen>
 * (pods, hostname <job>-worker-<rank>). */
#define VJ_CONFIGMAP_SUFFIX "-config"
#define VJ_IDENTITY_SUFFIX "-worker"
#define VJ_CONTAINER "worker" /* the one container of a worker pod */

/* What a worker pod gets: its config file, its rendezvous port, its user. */
#define VJ_CONFIG_DIR "/etc/vitjob"
#define VJ_CONFIG_FILE "config.json"
#define VJ_RDZV_PORT 29400
#define VJ_WORKER_UID 65532 /* the worker image's non-root user and group */

/* A lost node: worker pods tolerate node.kubernetes.io/unreachable and
 * not-ready (NoExecute) for runPolicy.nodeLostTolerationSeconds, default this
 * (Kubernetes' own default, 300 s, would idle the whole gang for 5 minutes),
 * then the taint manager evicts them and the gang restarts. A worker that
 * failed with class peer_lost while a peer still looks alive is held for
 * that toleration plus VJ_PEER_LOST_WAIT_S (the node monitor's grace period,
 * 40 s in Kubernetes 1.26, and a margin): if the peer turns out disrupted,
 * the restart is a disruption and spends no backoffLimit. */
#define VJ_NODE_LOST_TOLERATION_S 10
#define VJ_PEER_LOST_WAIT_S 60
#define VJ_EXIT_CLASS_PEER_LOST "class=peer_lost" /* in the worker's last log line */

/* Environment of a worker pod. */
#define VJ_ENV_NAME "VITJOB_NAME"                   /* the ViTJob's name */
#define VJ_ENV_NAMESPACE "VITJOB_NAMESPACE"         /* its namespace */
#define VJ_ENV_RANK "VITJOB_RANK"                   /* the pod's index, 0..replicas-1 */
#define VJ_ENV_REPLICAS "VITJOB_REPLICAS"           /* pods in the job (spec.replicas) */
#define VJ_ENV_LOCAL_RANKS "VITJOB_LOCAL_RANKS"     /* processes per pod; world = replicas x this */
#define VJ_ENV_RDZV_ENDPOINT "VITJOB_RDZV_ENDPOINT" /* <job>-worker-0.<job>.<ns>.svc:29400 */
#define VJ_ENV_RESTART "VITJOB_RESTART"             /* the restart generation */
/* the container's terminationMessagePath: the worker writes its last line
 * there (lib/termmsg.h; without it, /dev/termination-log if writable) */
#define VJ_ENV_TERMINATION_LOG "VITJOB_TERMINATION_LOG"
/* Set by the worker's local agent for the processes it starts, not by the
 * operator: the process's index in its pod, 0..local ranks-1 (global rank
 * = VITJOB_RANK x VITJOB_LOCAL_RANKS + this). */
#define VJ_ENV_LOCAL_RANK "VITJOB_LOCAL_RANK"

#endif
