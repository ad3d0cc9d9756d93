/* operator/controller.h - the ViTJob controller: what it watches and its
 * reconcile, run by the generic runner (operator/runner.h).
 *
 * Owns: the sources (vitjobs, and the pods, configmaps, services,
 * serviceaccounts, roles and rolebindings labelled vitjob.dev/job-name;
 * and Nodes, cluster-wide, cached trimmed (cache_trim_node) and optional:
 * a node that became Ready later than any seen before queues every elastic
 * job running below spec.replicas, whose reconcile hands decide the latest
 * such time (elastic.h, "Capacity returned"); where RBAC refuses Nodes, as
 * with the chart's watchNamespace, one log line says so and those jobs grow
 * on their timer alone) and
 * reconcile(namespace, name): read the ViTJob fresh from the API server (the
 * cache may lag our own status writes), bring its ConfigMap, Service and
 * identity to their desired state (patching only the fields the operator
 * owns) and, with gang scheduling, its PodGroup (read fresh each time: it
 * is not watched, as its CRD may be absent; discovery tells a missing CRD
 * from a missing object), compute the plan (operator/decide.c) and apply it with the smallest
 * set of API calls. Results: done, requeue after N, error (requeued with
 * backoff), terminal (the job's own write refused for good: not requeued). A
 * child the API server refuses for good (kube_is_permanent: an invalid
 * object, a 403 from admission) fails the job with reason FailedCreate or
 * FailedUpdate and the server's message, and is not retried. The jobs
 * metrics (created, succeeded, failed, restarted), and per job (labels
 * namespace, name) its status.progress as the informer sees it:
 * vitjob_job_step, _loss, _images_per_second, _eta_seconds, set at each scrape
 * from the cache, so a job that goes away takes its series with it.
 * Must not: keep state that cannot be rebuilt by relisting.
 */
#ifndef VITJOB_CONTROLLER_H
#define VITJOB_CONTROLLER_H

#include <signal.h>
#include <stdatomic.h>

#include "informer.h"
#include "metrics.h"
#include "nslist.h"

typedef struct {
    kube_client_factory factory;   /* a client per thread */
    void *factory_user;
    const ns_list *namespaces;     /* borrowed; NULL or empty = all namespaces */
    int workers;                   /* reconcile threads, >= 1 */
    metrics_registry *metrics;     /* borrowed */
    const volatile sig_atomic_t *stop;
    /* With leader election: until when (CLOCK_MONOTONIC ms) we may act; a
     * worker makes no write after it. NULL = always. */
    const atomic_llong *leading_until_ms;
    /* The planner program (a vitjob-worker binary) that sizes GPU jobs
     * before their first pods (operator/admission.h); NULL = no admission
     * planning. Borrowed. */
    const char *planner;
} controller_opts;

typedef struct controller controller;

/* Starts informers and workers. *out: caller ends it with controller_join
 * after setting *stop. Returns 0, or -1 with a message in err. */
int controller_start(const controller_opts *opts, controller **out, char *err, size_t errlen);
/* 1 when every informer has listed once (readiness). */
int controller_synced(const controller *c);
/* Stops the queue, waits for workers and informers, frees. Accepts NULL. */
void controller_join(controller *c);

#endif
