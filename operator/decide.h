/* operator/decide.h - the reconcile decision for one ViTJob, as a pure function.
 *
 * Owns: the rules of the job's lifecycle (validation, gang start, permanent
 * exit codes, retryable failures against backoffLimit, disruptions that do
 * not spend it, stale generations, success and cleanPodPolicy, suspend and
 * resume, activeDeadlineSeconds, ttlSecondsAfterFinished, gang scheduling's
 * PodGroup and its conditions, ProgressStalled, and applying spec.elastic's
 * verdicts (operator/elastic.h) as gang restarts at another size) and the
 * status the operator writes.
 * Must not: do I/O, read the clock (`now` is an input), or touch
 * status.progress (rank 0 of the worker owns it).
 * Its files: decide.c (the lifecycle), decide_pods.c (the pods as read),
 * decide_restart.c (restarts and failures), decide_status.c (the status
 * written) and decide_plan.c (the plan's contents); decide_internal.h is
 * what they share, private to them.
 *
 * decide() is level-triggered and idempotent: applying its plan and running it
 * again on the resulting state (same `now`) gives an empty plan. The status
 * it writes describes the state AFTER the plan is applied (pods it creates
 * count as active, pods it deletes do not).
 *
 * Apply a plan in this order: status_patch (so the new generation is
 * recorded before its pods exist), deletes, creates, events, delete_job;
 * then requeue after requeue_after seconds if > 0.
 */
#ifndef VITJOB_DECIDE_H
#define VITJOB_DECIDE_H

#include "planner.h"
#include "render.h"

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct {
    char name[VJ_NAME_LEN]; /* pod name, in the job's namespace */
    int force;              /* 1 = gracePeriodSeconds 0 (stuck on a lost node) */
} vj_pod_delete;

typedef struct {
    char type[16];     /* "Normal" or "Warning" */
    char reason[64];   /* CamelCase, e.g. BackoffLimitExceeded */
    char message[1024]; /* the worker's own error may end it (workerline.h) */
} vj_event;

typedef struct {
    cJSON *status_patch;    /* JSON merge patch body for the /status subresource,
                               {"status": {...changed fields only}}; NULL = no change */
    cJSON *creates;         /* array of objects to create (ConfigMap, Service, Pods); never NULL */
    vj_pod_delete *deletes; /* n_deletes pods to delete */
    size_t n_deletes;
    vj_event *events;       /* n_events events to emit on the ViTJob */
    size_t n_events;
    int delete_job;         /* 1 = delete the ViTJob itself (TTL after finishing) */
    long long requeue_after;/* seconds; 0 = no timed requeue */
} vj_plan;

/* What the operator knows of a node that runs a pod of the current
 * generation (read by the controller only while a worker reports a lost peer
 * or a peer_lost failure is held: vj_decide_wants_nodes). */
typedef struct {
    const char *name; /* the node's name; borrowed */
    int lost;         /* its Ready condition is Unknown or False, or its Lease
                         (kube-node-lease) expired: the node is declared lost */
    char why[192];    /* what showed it, for the condition and the event */
} vj_node_health;

/* Which of the job's other children exist (and are as desired). */
typedef struct {
    int configmap, service;                  /* <job>-config, <job> */
    int service_account, role, role_binding; /* <job>-worker, the job's own identity */
    /* With spec.runPolicy.schedulingPolicy.gang volcano or coscheduling: */
    int podgroup;              /* PodGroup <job> exists (and is as desired) */
    int podgroup_crd_missing;  /* the API has no podgroups in the gang's group */
    const cJSON *podgroup_obj; /* that PodGroup as read (its status), or NULL; borrowed */
    const vj_node_health *nodes; /* n_nodes nodes judged by the controller; borrowed */
    size_t n_nodes;
    /* spec.elastic, a job below spec.replicas: the latest time a schedulable
     * node became Ready (vj_node_ready_since over the operator's Node cache;
     * elastic.h, "Capacity returned"), seconds since the epoch, 0 = unknown;
     * and that node's name (borrowed, or NULL). */
    long long node_ready_at;
    const char *node_ready_name;
    /* The plan made at admission this reconcile (operator/admission.h:
     * vj_admission_wanted), or NULL; borrowed. */
    const vj_admission *plan;
} vj_children;

/* A lost pod (issue 26; docs/design.md, "Lost nodes"). A pod of the current
 * generation that has not terminated in the API is lost when
 *  - its node is declared lost (vj_node_health.lost), or
 *  - a surviving rank of the generation reported it in status.lostPeer with
 *    evidence "heartbeat" (its heartbeat stopped while its connection stayed
 *    open: frozen, partitioned, or its node died silently); such a pod that
 *    has since failed with class peer_lost itself (cut off, it lost its
 *    peers as they lost it) is lost all the same, or
 *  - status.lostPeer reported it with evidence "closed" (its connections
 *    closed: its process ended) and its kubelet has not reported it
 *    terminated (yet). The gang restarts at once, before anyone knows
 *    whether the process crashed on a live node or died with its node: see
 *    "restart now, classify later" below.
 * A lost pod is a disruption: the gang restarts at once (backoffLimit not
 * spent), pods on a lost node are force-deleted, and the next generation's
 * pods get a required node affinity (matchFields metadata.name NotIn, one
 * requirement per node) that keeps them off the lost pods' nodes.
 *
 * Restart now, classify later (issue 48). A restart caused by a `closed`
 * report alone is recorded in status.lastRestart with classifiedAs Pending
 * (cause PeerLost, the lost pod, its node, classifyBy = the restart +
 * VJ_RESTART_CLASSIFY_S); backoffLimit is not checked and nothing is
 * counted yet; the lost pod is kept (its kubelet's report is the evidence);
 * the new generation's pods only prefer other nodes
 * (vj_render_prefer_off_node), since the node may be alive. At each
 * reconcile the evidence classifies it, first match wins:
 *   the pod failed with a permanent exit code: PermanentFailure;
 *   it was disrupted (DisruptionTarget, evicted, NodeLost, phase Unknown):
 *     Disruption;
 *   it finished (its kubelet reported the end): RetryableFailure;
 *   its node is judged lost (vj_node_health): Disruption;
 *   it is gone from the API, or being deleted: Disruption;
 *   nothing by classifyBy: Disruption (its node is taken for lost; an event
 *     says so).
 * A Disruption adds one to disruptionRestarts. A RetryableFailure spends
 * backoffLimit; if that makes restarts - disruptionRestarts exceed it, or
 * on a PermanentFailure, the restart is undone (restarts goes back by one)
 * and the job fails as it would have had it waited for the evidence
 * (BackoffLimitExceeded, PermanentError or InvalidData, the same message,
 * plus that the started generation is stopped); that generation's pods are
 * deleted whatever cleanPodPolicy says (they never counted). While a
 * restart is Pending, every verdict on the new generation (success, failure,
 * another restart) waits for the classification, so every order of events
 * ends with the counts of waiting for the evidence first. Each
 * classification is one event (RestartClassified). Every other gang restart
 * writes status.lastRestart too, classified at once (cause Failure or
 * Disruption). All of it is in the status: a new leader carries on. */
#define VJ_RESTART_CLASSIFY_S 60

/* 1 if the controller should judge the nodes of the current generation's
 * pods for this reconcile (status.lostPeer names the current generation, or
 * one of its pods failed with class peer_lost), else 0. */
int vj_decide_wants_nodes(const cJSON *job, const cJSON *pods);

/* Gang scheduling (spec.runPolicy.schedulingPolicy.gang not none): the
 * PodGroup is created before the pods. Without its CRD no pods are created:
 * condition GangSchedulingUnavailable (reason PodGroupCRDMissing, the CRD
 * named), one Warning event, and a look again after
 * VJ_GANG_MISSING_RECHECK_S. While the job waits for its gang (Pending or
 * Restarting), the PodGroup's status is read at each reconcile (requeued
 * every min(scheduleTimeoutSeconds, 30) s): unschedulable (volcano's
 * condition Unschedulable, or phase Pending/PreScheduling/Scheduling/
 * Inqueue) for longer than scheduleTimeoutSeconds (default
 * VJ_GANG_DEFAULT_TIMEOUT_S) gives condition GangUnschedulable True with the
 * scheduler's message; False once the gang runs. */

/* Admission (docs/design.md, "Admission: will it fit?"): with a plan
 * (vj_children.plan), status gets plannedGeneration, plannedMemoryPerRank (a
 * quantity, e.g. "22.4Gi") and plannedImagesPerSecond (1 decimal). A plan
 * that does not fit, for a job that never started (no pods, no startTime),
 * fails the job before anything
 * of it is created: condition WillNotFit True (reason ExceedsGPUMemory,
 * the plan's total, largest parts, the GPU memory and where it came from,
 * and the cheapest change that fits), and Failed with reason WillNotFit.
 * An elastic job whose plan fits but not at the fewest replicas it may be
 * shrunk to (vj_admission.elastic) is admitted, with condition
 * ElasticWillNotFit True (reason MinReplicasExceedsGPUMemory: both sizes'
 * memory per rank, the accumulation, the GPU memory and the minReplicas
 * from which every size fits) and one Warning event; a later plan where it
 * fits turns the condition False (reason MinReplicasFit). */

/* ProgressStalled: while the job is Running, rank 0 writes
 * status.progress.updateTime (worker/train/report.c) at most every
 * training.reportIntervalSeconds (default 10) while steps complete. When the
 * newer of that time and the Running condition's lastTransitionTime (so a
 * job that has not reported yet, e.g. reading its checkpoint, gets the same
 * grace from the moment it runs) is older than
 * max(VJ_PROGRESS_STALL_REPORTS x the interval, VJ_PROGRESS_STALL_MIN_S),
 * condition ProgressStalled is True (reason NoProgressReport; the message
 * gives the last report's age, in steps of that threshold so that it is
 * rewritten once per step rather than at every reconcile, its step and
 * time); the job is requeued so that it appears and is refreshed on time
 * without a new event. A newer report sets it False (reason
 * ProgressResumed); leaving Running sets it False (reason NotRunning). The
 * times are the worker's clock against the operator's: skew of a few
 * seconds is far below the threshold. A step slower than the threshold (a
 * huge batch on CPU, a long evaluation) reads as stalled while it runs. */
#define VJ_PROGRESS_STALL_REPORTS 4
#define VJ_PROGRESS_STALL_MIN_S 60

/* Computes the plan for `job` (the ViTJob as read from the API server) given
 * `pods` (a JSON array of its pods as listed, or NULL = none; pods not
 * labelled with this job's name are ignored), which other children exist,
 * and `now` (seconds since the epoch). Missing children are created before
 * the pods, in the order ConfigMap, Service, ServiceAccount, Role,
 * RoleBinding (the identity only when spec.template names no service
 * account).
 * On success returns 0 and *out is a new plan (caller frees with
 * vj_plan_free); on failure (not a ViTJob, OOM) returns -1, *out untouched. */
int vj_decide(const cJSON *job, const cJSON *pods, const vj_children *have, long long now,
              vj_plan **out, char *err, size_t errlen);

/* The plan that fails the job because the API server refused one of its
 * children for good (a 4xx that retrying cannot fix): phase Failed,
 * condition Failed with `reason` and `message` (which should quote the
 * server), a Warning event, and the pods cleaned as for any failure. A job
 * already finished gets no new status. Returns as vj_decide. */
int vj_decide_failed(const cJSON *job, const cJSON *pods, const char *reason,
                     const char *message, long long now, vj_plan **out, char *err, size_t errlen);

/* 1 if the plan has nothing to do (no status change, creates, deletes, events
 * or job deletion; requeue_after does not count), else 0. */
int vj_plan_is_empty(const vj_plan *p);

/* Frees the plan and everything in it; NULL is fine. */
void vj_plan_free(vj_plan *p);

#endif
