/* operator/nodehealth.h - whether a node that runs a job's pod is lost, from
 * its Node object and its Lease (kube-node-lease), as the operator judges it
 * for the lost-pod rule of decide.h.
 *
 * Also when a node became Ready for new pods (the elastic rule's input).
 *
 * Owns: those judgements (pure: no I/O, `now` is an input).
 * Must not: read the clock or talk to the API server (controller.c does).
 */
#ifndef VITJOB_NODEHEALTH_H
#define VITJOB_NODEHEALTH_H

#include "decide.h"

#include <cjson/cJSON.h>

/* The namespace of the kubelets' node Leases. */
#define VJ_NODE_LEASE_NAMESPACE "kube-node-lease"

/* Judges node `name` into *h (h->name = name, borrowed). `node` is the Node
 * as read (NULL = the API server has no such node: it was deleted, so it is
 * lost); `lease` its Lease (NULL = not readable: no evidence). Lost when its
 * Ready condition is Unknown or False (the node lifecycle controller's
 * verdict), or the Lease's renewTime + leaseDurationSeconds is before `now`
 * (the kubelet stopped renewing it). h->why says which, with the times. */
void vj_node_judge(const char *name, const cJSON *node, const cJSON *lease, long long now,
                   vj_node_health *h);

/* When `node` last became able to take new pods, for the elastic rule
 * "Capacity returned" (elastic.h): max(its Ready condition's
 * lastTransitionTime, metadata.creationTimestamp) in seconds since the
 * epoch, when Ready is True and spec.unschedulable is not true; else 0 (not
 * Ready, cordoned, or neither time readable). */
long long vj_node_ready_since(const cJSON *node);

#endif
