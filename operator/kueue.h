/* operator/kueue.h - Kueue's plain-pod group contract, as the operator keeps
 * it (issue 45; docs/user-guide.md "Running under Kueue"; the facts and the
 * Kueue source they come from: tests/cluster/controllers/KUEUE_FACTS.md).
 *
 * Owns: the names Kueue reads and writes on pods (labels, annotations, its
 * scheduling gate, its eviction condition), the group a generation's pods
 * form, and the reading of a pod's Kueue state.
 * Must not: do I/O, decide anything about the job (decide.c does), or touch
 * Kueue's finalizer (Kueue removes it; nobody else may).
 *
 * A ViTJob labelled kueue.x-k8s.io/queue-name=Q (and optionally
 * kueue.x-k8s.io/priority-class=P) gets pods that carry, per generation N:
 * the labels queue-name=Q, priority-class=P, pod-group-name=<job>-r<N>, and
 * the annotations pod-group-total-count=<replicas> and
 * retriable-in-group="false". Each generation is a new group: a restart
 * makes new pods, never replacements in the old group, so the old group is
 * marked unretriable and Kueue finishes it (and frees its quota and its
 * pods' finalizers) once all its pods have ended. */
#ifndef VITJOB_KUEUE_H
#define VITJOB_KUEUE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#define VJ_KUEUE_QUEUE_LABEL "kueue.x-k8s.io/queue-name"
#define VJ_KUEUE_PRIORITY_LABEL "kueue.x-k8s.io/priority-class"
#define VJ_KUEUE_GROUP_LABEL "kueue.x-k8s.io/pod-group-name"
#define VJ_KUEUE_COUNT_ANNOTATION "kueue.x-k8s.io/pod-group-total-count"
#define VJ_KUEUE_RETRIABLE_ANNOTATION "kueue.x-k8s.io/retriable-in-group"
/* the scheduling gate Kueue's webhook adds and removes on admission */
#define VJ_KUEUE_GATE "kueue.x-k8s.io/admission"
/* the pod condition Kueue sets before it deletes an evicted group's pods */
#define VJ_KUEUE_EVICTION_CONDITION "TerminationTarget"

/* The pod group name of generation `gen` of job `job` (<job>-r<gen>) into
 * buf. Returns 0, or -1 when it does not fit. */
int vj_kueue_group_name(char *buf, size_t len, const char *job, int gen);

/* Adds the group's labels to `labels` and annotations to `annotations` (a
 * pod's, as vj_render_pod makes them) for `queue` (non-NULL),
 * `priority_class` (or NULL), generation `gen` of `job` and `count` pods.
 * 0, or -1 out of memory (NULL objects included) or a name too long. */
int vj_kueue_label_pod(cJSON *labels, cJSON *annotations, const char *job, const char *queue,
                       const char *priority_class, int gen, int count);

/* 1 if the pod still carries Kueue's admission gate (it waits in its queue). */
int vj_kueue_gated(const cJSON *pod);

/* If Kueue evicted the pod (condition TerminationTarget True), its reason
 * (e.g. WorkloadEvictedDueToPreempted) and message, borrowed from the pod,
 * else 0. */
int vj_kueue_evicted(const cJSON *pod, const char **reason, const char **message);

#endif
