/* operator/leader.h - leader election on a coordination.k8s.io/v1 Lease, as
 * client-go's leaderelection does it.
 *
 * Owns: acquiring, renewing and releasing one Lease
 * (spec.holderIdentity, leaseDurationSeconds, acquireTime, renewTime,
 * leaseTransitions) with optimistic concurrency (a stale resourceVersion
 * loses the round), and the rule that a candidate may take over only after
 * the lease went unrenewed for leaseDuration as observed on its OWN clock
 * (never by comparing the holder's renewTime with ours: clocks skew).
 * Must not: sleep or spawn threads; the caller calls leader_try every retry
 * period (2 s) and asks leader_is_leader before acting.
 */
#ifndef VITJOB_LEADER_H
#define VITJOB_LEADER_H

#include "kube.h"

typedef struct {
    const char *ns, *name;     /* the Lease */
    const char *identity;      /* this replica's identity (pod name + random suffix) */
    double lease_duration;     /* s, 15 */
    double renew_deadline;     /* s, 10: a leader that cannot renew for this long steps down */
} leader_opts;

typedef struct leader_elector leader_elector;

/* Copies the strings of opts. *out: caller frees with leader_free. Returns 0
 * or -1 (out of memory). The client is borrowed and must outlive it. */
int leader_new(kube_client *c, const leader_opts *opts, leader_elector **out);
void leader_free(leader_elector *le); /* accepts NULL */

/* One round at monotonic time `now` (seconds): create the Lease if missing,
 * renew it if we hold it, take it over if it expired. Returns 1 if this
 * replica leads after the round, 0 if another does; API errors count as "not
 * renewed" (st says why; a leader keeps leading until renew_deadline). */
int leader_try(leader_elector *le, double now, kube_status *st);
/* Whether we lead at time now: the last successful renewal is younger than
 * renew_deadline. */
int leader_is_leader(const leader_elector *le, double now);
/* The time (same clock as `now`) until which the last successful renewal lets
 * us act: last renewal + renew_deadline; in the past when we do not lead. */
double leader_valid_until(const leader_elector *le);
/* On shutdown: if we lead, hand the Lease back (empty holder, 1 s duration)
 * so that another replica takes over at once. Returns 0 or a kube_err. */
int leader_release(leader_elector *le, kube_status *st);
/* The holder as last observed (borrowed; "" if none). */
const char *leader_observed_holder(const leader_elector *le);

#endif
