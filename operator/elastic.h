/* operator/elastic.h - elastic gangs (spec.elastic, issue 44): the world
 * size a job runs at, as a pure function of its spec, its status and what
 * the scheduler says of the current generation's pods.
 *
 * Owns: the rules of shrinking, growing and giving a growth up, the state
 * they keep in the status (worldSize, elasticResizeTime, elasticGrowFrom,
 * elasticGrowFailures) and the words of condition Elastic.
 * Must not: do I/O, read the clock, or touch pods: decide.c applies a
 * verdict as a gang restart (a disruption: backoffLimit not spent) at the
 * new size, and calls this only when nothing else (a failure, success, a
 * lost pod, a restart awaiting its classification) decides the generation.
 *
 * The rules (docs/user-guide.md, "Elastic jobs"). `size` is the pods of the
 * current generation (status.worldSize; spec.replicas before any resize).
 * Allowed sizes are those of vj_jobspec_world_sizes in [minReplicas,
 * replicas].
 * - Shrink. When pods of the generation are unschedulable (PodScheduled
 *   False, reason Unschedulable; or, where no pod says so, its unplaced
 *   Pending pods while the gang scheduler's PodGroup has condition
 *   Unschedulable True, since the later of that condition's
 *   lastTransitionTime and the pod's creation: decide.c) and the earliest
 *   of them has been so for pendingTimeoutSeconds, the job restarts at the largest allowed size not
 *   above the pods that were placed (nodeName set or PodScheduled True), and
 *   below size: reason ShrunkUnschedulable. With none (fewer than
 *   minReplicas placed, or no allowed size among them) the job waits as
 *   without elastic: reason BelowMinReplicas, no restart. Where the
 *   admission plan found that the fewest sizes do not fit the GPU
 *   (status.elasticMinFittingReplicas, decide.c: ElasticWillNotFit), that
 *   size stands for minReplicas: a rank that does not fit would exit 2 and
 *   fail the job, so waiting is better.
 * - Grow. When every pod of the generation runs and size < replicas, at
 *   elasticResizeTime + growCheckSeconds x 2^min(elasticGrowFailures, 6)
 *   the job restarts at the largest allowed size up to replicas (reason
 *   Growing; elasticGrowFrom = the size it ran at). Its old pods are
 *   deleted gracefully first (SIGTERM: each rank saves the step it is in, as
 *   for a suspend) and the new pods are created once they are gone
 *   (decide.c).
 * - Capacity returned. When a schedulable node became Ready later than
 *   elasticResizeTime (vj_elastic_gen.node_ready_at: the latest, over the
 *   nodes that are Ready and not spec.unschedulable, of max(Ready's
 *   lastTransitionTime, creationTimestamp); the controller reads it from
 *   its Node informer), the job grows at once as above, whatever is left
 *   of the wait: new capacity is new information. Not after a GrowFailed
 *   (elasticGrowFailures > 0): its backoff holds, since on a busy cluster
 *   nodes become Ready all the time and each try costs a checkpoint and a
 *   restart. A node that was Ready before the last resize (a shrink or a
 *   growth) does not count again. Without node
 *   information (0: none, e.g. the operator may not watch Nodes) only the
 *   timer grows.
 * - Grown. The grown generation runs whole: elasticGrowFrom cleared,
 *   elasticGrowFailures back to 0, reason Grown.
 * - GrowFailed. The grown generation's pods stay unschedulable for
 *   pendingTimeoutSeconds: the job restarts at elasticGrowFrom, one more
 *   elasticGrowFailures, the next try later by the doubled interval.
 * Condition Elastic is True while the job runs or waits below replicas,
 * False once it runs at replicas again; it is written from the first
 * verdict on and never before (a job that never resized has none). */
#ifndef VITJOB_ELASTIC_H
#define VITJOB_ELASTIC_H

#include "jobspec.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* Failed growths beyond this no longer double the interval. */
#define VJ_ELASTIC_MAX_BACKOFF_DOUBLINGS 6

typedef struct {
    int size;           /* pods of the current generation */
    int grow_from;      /* a growth being placed: the size it grew from; 0 = none */
    int failures;       /* growths given up in a row */
    long long resized;  /* the last resize, seconds since the epoch; -1 = never */
    int floor;          /* status.elasticMinFittingReplicas: the fewest pods whose plan
                         * fits the GPU, above minReplicas; 0 = none (minReplicas) */
} vj_elastic_state;

/* The state in `status` (the ViTJob's status object, NULL = none) for a job
 * with spec.elastic; size spec.replicas and nothing else for one without,
 * or when status.worldSize is not in [minReplicas, replicas] (the spec
 * changed beneath it). */
void vj_elastic_read(const vj_jobspec *js, const cJSON *status, vj_elastic_state *st);

/* What the scheduler says of the current generation's `size` pods. */
typedef struct {
    int gen;                  /* its number (the pods' vitjob.dev/restart) */
    int placed;               /* pods bound to a node */
    int running;              /* pods in phase Running */
    int unschedulable;        /* pods the scheduler could not place */
    long long unsched_since;  /* the earliest of their PodScheduled lastTransitionTime */
    const char *unsched_names;/* their names, ", " between them */
    const char *cond_reason;  /* the Elastic condition's reason now, or NULL */
    long long node_ready_at;  /* the latest time a schedulable node became Ready, seconds
                               * since the epoch; 0 = unknown (timer only) */
    const char *node_ready_name; /* that node's name, or NULL */
} vj_elastic_gen;

typedef struct {
    vj_elastic_state next;    /* the state to write; next.size != size: restart at it */
    int set_cond;             /* 1: condition Elastic := cond_status, reason, message */
    const char *cond_status;  /* "True" or "False" */
    char reason[32];          /* ShrunkUnschedulable, Growing, Grown, GrowFailed, BelowMinReplicas */
    char message[768];
    int grow;                 /* the restart grows the job: old pods go before new ones */
    long long requeue_after;  /* seconds; 0 = none */
} vj_elastic_verdict;

/* Applies the rules above at `now` to a job with spec.elastic. Returns 0, or
 * -1 with a message (out of memory, or the worker's part of the spec does
 * not load: vj_jobspec_validate refuses such a spec first). */
int vj_elastic_decide(const vj_jobspec *js, const vj_elastic_state *st, const vj_elastic_gen *g,
                      long long now, vj_elastic_verdict *v, char *err, size_t errlen);

#endif
