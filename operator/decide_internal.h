/* operator/decide_internal.h - what the files of the reconcile decision
 * share, private to them (decide.h is the API every caller uses).
 *
 * Owns: the decision's working state (ctx: the plan being built and what it
 * is built from; pod_info: a pod as read; generation: the current
 * generation's pods by rank; desired_status: the status as it will be) and
 * the functions that cross the module's files, each declared under the
 * file that owns it:
 *   decide.c          the lifecycle rules: decide() and the entry points,
 *                     start, run, suspend and resume, gang scheduling,
 *                     Kueue, admission, elastic resizes; how a job ends and
 *                     cleanPodPolicy;
 *   decide_plan.c     the plan's contents: pod deletes, creates, events,
 *                     requeues; vj_plan_is_empty, vj_plan_free;
 *   decide_pods.c     the pods as read: each pod parsed, the current
 *                     generation tallied, lost pods and lost-peer reports;
 *   decide_restart.c  gang restarts and failures: backoffLimit, permanent
 *                     exits, status.lastRestart and the classification of a
 *                     pending restart;
 *   decide_status.c   the status written: conditions, the /status patch,
 *                     ProgressStalled.
 * Must not: be included outside operator/decide*.c; declare the API
 * (decide.h).
 */
#ifndef VITJOB_DECIDE_INTERNAL_H
#define VITJOB_DECIDE_INTERNAL_H

#include "decide.h"
#include "elastic.h"
#include "jobspec.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <string.h>

enum pod_phase { PP_PENDING, PP_RUNNING, PP_SUCCEEDED, PP_FAILED, PP_UNKNOWN };

typedef struct {
    const char *name;
    int rank, gen;
    enum pod_phase phase;
    int deleting;         /* metadata.deletionTimestamp set */
    long long del_ts;     /* its value (or now if unparseable) */
    int disruption;       /* DisruptionTarget True, or a disruption reason */
    int node_lost;        /* the node is gone: force-delete at once */
    int exit_code;        /* worker container's terminated exit code, -1 = none */
    int peer_lost;        /* failed saying it lost a peer (its last line: class=peer_lost) */
    const char *term_msg; /* the worker container's termination message, or NULL */
    long long finished_ts;/* the worker container's finishedAt (now if unknown) */
    const char *node;     /* spec.nodeName, or NULL */
    int placed;           /* bound to a node: nodeName set, or PodScheduled True */
    int unschedulable;    /* PodScheduled False, reason Unschedulable (and not placed) */
    long long unsched_ts; /* that condition's lastTransitionTime (now if unknown) */
    long long created;    /* metadata.creationTimestamp, or -1 */
    char lost_why[256];   /* why it was judged lost (vj_decide's lost-pod rule), or "" */
    int suspect;          /* lost by a `closed` report its kubelet has not confirmed */
    int gated;            /* waits at Kueue's admission gate (kueue.h) */
    int kueue_evicted;    /* Kueue evicted its group (preempted): a disruption */
    const char *kueue_why;/* Kueue's reason and message for it, or NULL */
    const char *kueue_msg;
    int evidence;         /* the pending restart's lost pod: kept until it is classified */
    int removed;          /* this plan deletes it */
} pod_info;

#define MAX_AVOID 16 /* nodes the next generation keeps off, at most */

typedef struct {
    vj_plan *plan;
    const vj_jobspec *js;   /* replicas: the current generation's size (spec.elastic) */
    const vj_jobspec *spec; /* the spec as written (spec.replicas) */
    const cJSON *job;
    const vj_children *have;
    const char *avoid[MAX_AVOID]; /* nodes of lost pods: the next generation keeps off */
    int n_avoid;
    const char *prefer_off; /* a suspect's node: the next generation prefers other nodes */
    int pending;          /* a restart awaits its classification: verdicts wait for it */
    long long now;
    int world;            /* the pods of the generation being created (spec.elastic) */
    int ok;               /* 0 after an allocation failure */
    char render_err[256]; /* the first child that could not be rendered, and why */
    size_t cap_del, cap_ev;
} ctx;

typedef struct {
    const char *phase;
    int gen, disruptions, resumes; /* gen: the pods' generation (restarts + resumes) */
    long long start, completion; /* -1 = unset */
    cJSON *conds;                /* owned */
    cJSON *last_restart;         /* status.lastRestart as it will be; owned, NULL = none */
    int active, succeeded, failed;
    int set_replicas;
    vj_elastic_state el;         /* spec.elastic: the size and its state, as they will be */
} desired_status;

/* The current generation's pods by rank, and what they say together. */
typedef struct {
    pod_info **slot;                  /* [replicas]: the pod of each rank, or NULL */
    int succeeded, running, missing, failed, disrupted;
    int holding;                      /* failures that only lost a peer, waiting for its fate */
    pod_info *suspect;                /* lost by an unconfirmed `closed` report, or NULL */
    int gone;                         /* pods missing while the job ran: lost (disruptions) */
    int gated;                        /* pods waiting at Kueue's admission gate */
    int kueue_evicted;                /* pods whose group Kueue evicted */
    pod_info *permanent, *first_bad;  /* the first permanent exit; the first failure to report */
} generation;

/* 1 if a and b are both set and equal. */
static inline int dec_str_eq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* --------------------------------------------------------------- decide.c */

/* cleanPodPolicy None keeps a finished pod, whatever its generation. */
int dec_kept(const ctx *c, const pod_info *pi);

/* The job ends: phase Succeeded or Failed, completionTime, condition
 * Succeeded or Failed True with reason and msg (Running and Restarting
 * cleared), one event, and the replicas counts of its last generation,
 * frozen. Its pods are dec_clean_pods's. */
void dec_finish_job(ctx *c, desired_status *ds, pod_info *pods, size_t n, int success,
                    const char *reason, const char *msg);

/* cleanPodPolicy on a finished job (decide.c's choices). */
void dec_clean_pods(ctx *c, const desired_status *ds, pod_info *pods, size_t n);

/* ---------------------------------------------------------- decide_plan.c */

/* Look again after secs (at least 1): the earliest of the plan's asks. */
void dec_requeue(ctx *c, long long secs);

/* An event on the ViTJob: type Normal or Warning, its reason and message. */
void dec_event(ctx *c, const char *type, const char *reason, const char *msg);

/* Makes the pod go away: a graceful delete, or a forced one when it is
 * already terminating past its deadline or its node is lost. Not the
 * pending restart's evidence, nor a pod already removed. */
void dec_remove_pod(ctx *c, pod_info *pi);

/* Creates the pod of `rank` in generation `gen`, at c->world pods, kept off
 * c->avoid's nodes and preferring other nodes than c->prefer_off. */
void dec_create_generation_pod(ctx *c, int rank, int gen);

/* What the pods need, before them (creates are applied in order): the
 * config, the Service, and the identity when the job has its own. */
void dec_ensure_children(ctx *c, const vj_children *have);

/* ---------------------------------------------------------- decide_pods.c */

/* Reads a pod of `job` into *pi (a deletion, scheduling or finish time it
 * cannot read is `now`). Returns 0, or -1 when it is not one of the job's
 * (no name, another job's label, no rank or generation). */
int dec_parse_pod(const cJSON *pod, const char *job, long long now, pod_info *pi);

/* 1 if the pod succeeded or failed. */
int dec_finished(const pod_info *pi);

/* What the controller judged of `node` (vj_children.nodes), or NULL. */
const vj_node_health *dec_node_health(const vj_children *have, const char *node);

/* Slots the current generation (every other pod goes) and tallies it.
 * Returns 0, or -1 out of memory. g->slot is the caller's to free. */
int dec_tally(ctx *c, const desired_status *ds, pod_info *pods, size_t n, generation *g);

/* ------------------------------------------------------- decide_restart.c */

/* A worker exited 2 or 3: the job fails for good. */
void dec_fail_permanent(ctx *c, desired_status *ds, pod_info *pods, size_t n,
                        const pod_info *bad);

/* ds->last_restart = a new record of the restart that ended generation
 * `gen` (decide.h): why, as what, the pod that caused it, and for a pending
 * one the time by which it is classified. */
void dec_last_restart_new(ctx *c, desired_status *ds, int gen, const char *cause,
                          const char *cls, const pod_info *pod, long long classify_by,
                          const char *msg);

/* Classifies the pending restart (status.lastRestart.classifiedAs Pending)
 * from the evidence at hand (decide.h). Returns 1 while it stays pending
 * (its pod kept, c->pending set, requeued for its deadline), 2 when the
 * classification ended the job (backoffLimit exceeded or a permanent exit:
 * the generation the restart started is stopped and not counted), else 0.
 * With `now_or_never` (the job ended otherwise meanwhile) it is classified
 * with what is known, and never ends the job. */
int dec_settle_restart(ctx *c, desired_status *ds, pod_info *pods, size_t n, int now_or_never);

/* A pod failed, was disrupted or disappeared: the whole gang restarts as
 * the next generation, or the job fails once backoffLimit is spent
 * (disruptions do not spend it). */
void dec_restart_or_fail(ctx *c, desired_status *ds, pod_info *pods, size_t n,
                         const generation *g);

/* -------------------------------------------------------- decide_status.c */

/* Sets condition `type` in conds: lastTransitionTime changes only with the
 * status. When only_if_present, a missing condition is not added. */
void dec_set_cond(ctx *c, cJSON *conds, const char *type, const char *status,
                  const char *reason, const char *message, int only_if_present);

/* 1 if conds has condition `type` with status True. */
int dec_cond_true(const cJSON *conds, const char *type);

/* Sets each of these conditions False (if present and True). */
void dec_clear_conds(ctx *c, cJSON *conds, const char *reason, const char *msg,
                     const char *const *types);

/* The plan's status_patch: {"status": {...}} with the fields of ds that
 * differ from cur (the status as read), or NULL when none does. */
cJSON *dec_status_patch(ctx *c, const desired_status *ds, const cJSON *cur);

/* Condition ProgressStalled (decide.h): judged from the status the workers
 * wrote (status.progress.updateTime) and the Running condition's
 * lastTransitionTime, never from anything this operator remembers, so a new
 * leader judges a job as the old one would. Only the conditions are written
 * (rank 0 owns status.progress). */
void dec_watch_progress(ctx *c, desired_status *ds, const cJSON *st);

#endif
