# controllers/kueue.py: a minimal stand-in for Kueue's plain-pod group path
# (Kueue v0.19.2; the facts and their sources: KUEUE_FACTS.md beside this
# file). It runs while the Kueue CRDs are installed (manager.py lists them);
# the webhooks that gate the pods are kubeapi/kueue_webhook.py.
# Reproduced, each from Kueue's source at v0.19.2:
#  - groups: managed pods (label kueue.x-k8s.io/managed=true) with a
#    kueue.x-k8s.io/pod-group-name, per namespace; a Workload named as the
#    group (annotation kueue.x-k8s.io/is-group-workload, finalizer
#    kueue.x-k8s.io/resource-in-use, owner references to every pod) once
#    pod-group-total-count runnable pods exist; pods that differ in queue name
#    or total count get no Workload; extra active pods are finalized and
#    deleted, newest first; inactive pods (Failed, or deleted before being
#    scheduled) are finalized while no Workload exists and, once one does,
#    when replacements make them surplus (pkg/controller/jobs/pod/
#    pod_controller.go ConstructComposableWorkload, FindMatchingWorkloads);
#  - priority: the WorkloadPriorityClass named by kueue.x-k8s.io/priority-class
#    (its value), else 0; queue order: priority, then the Workload's creation
#    time (pkg/cache/queue/cluster_queue.go, pkg/workload/workload.go);
#  - quota: a ClusterQueue's resourceGroups, each covered resource taken from
#    the first flavour of its group that lists it, nominalQuota only; a
#    Workload fits when the usage of the Workloads holding a reservation in
#    that ClusterQueue plus its own requests (count x the pod's requests, as
#    the scheduler computes them) stay within it; messages of pkg/scheduler/
#    flavorassigner/flavorassigner.go ("insufficient unused quota ...",
#    "insufficient quota ... > maximum capacity", "resource X unavailable in
#    ClusterQueue"), reason Pending (the default without the
#    UnadmittedWorkloadsObservability gate);
#  - admission: status.admission, QuotaReserved True QuotaReserved "Quota
#    reserved in ClusterQueue <cq>", Admitted True Admitted "The workload is
#    admitted", Evicted/Preempted flipped to False QuotaReserved
#    "Previously: ..." (pkg/workload/workload.go SetQuotaReservation,
#    admissionchecks.go); then each gated pod gets the flavour's nodeLabels
#    in its nodeSelector, its tolerations, the kueue.x-k8s.io/podset label and
#    loses the kueue.x-k8s.io/admission gate (pod_controller.go Run, prepare);
#  - preemption with withinClusterQueue LowerPriority: candidates of lower
#    priority holding a reservation, already evicted first, then lowest
#    priority, then the most recently reserved; taken until the preemptor
#    fits, then given back in reverse order while it still fits
#    (pkg/scheduler/preemption/preemption.go, common/ordering.go); each target
#    gets Evicted True Preempted and Preempted True InClusterQueue with the
#    message "Preempted to accommodate a workload (UID: ..., JobUID: UNKNOWN)
#    due to prioritization in the ClusterQueue; preemptor path: <cq>;
#    preemptee path: <cq>"; the preemptor waits (". Pending the preemption
#    of N workload(s)");
#  - eviction of a group: each pod that is neither terminating, gated nor
#    terminal gets the status condition TerminationTarget True reason
#    WorkloadEvictedDueToPreempted with the Evicted message, then a DELETE
#    with the pod's own grace period (pod_controller.go Stop,
#    jobframework/reconciler.go stopJob); once no pod of the group is active
#    (Running and not past deletionTimestamp + grace), the reservation is
#    released: QuotaReserved False Pending, Admitted False NoReservation,
#    Requeued True Preempted (reconciler.go "handle eviction");
#  - a pod that runs ungated without an admitted Workload is stopped the same
#    way with reason NotAdmitted, "Not admitted by cluster queue";
#  - WaitingForReplacementPods (True with the eviction's reason, or PodsFailed
#    "Some Failed pods need replacement"; False PodsReady "No pods need
#    replacement");
#  - the end: all total-count pods Succeeded, or the group unretriable
#    (kueue.x-k8s.io/retriable-in-group "false" on a pod) with no pod left
#    running: Finished True Succeeded "Pods succeeded: n/N.", the finalizer
#    taken off every pod of the group and off the Workload; a deleted
#    Workload stops the group (reason WorkloadDeleted) and frees its pods.
# Not reproduced: single (ungrouped) pods, cohorts and borrowing, fair
# sharing, StrictFIFO, flavour fungibility (only the first flavour that lists
# a resource), admission checks, TAS, waitForPodsReady, fast admission,
# serving groups, several roles with different shapes beyond counting them,
# the Kubernetes PriorityClass fallback, requeue backoff, the one-head-per-
# ClusterQueue scheduling cycle (here: all pending Workloads of a queue in
# order each pass; after one that waits for preemptions, none behind it is
# admitted in that pass), LocalQueue/ClusterQueue status beyond the counts,
# events.
# Must not: list objects (manager.py does) or touch pods without the
# managed label.

import datetime
import fractions

from .base import Controller
from .log import log
from .objects import cond, key, parse_time, pod_path, set_condition, stamp, terminal, utcnow
from .scheduler import pod_requests, quantity
# the pod's names, one home with the webhook that writes them
from tests.cluster.kubeapi.kueue_webhook import (FINALIZER, GATE, GROUP, MANAGED, PRIORITY, QUEUE,
                                                 RETRIABLE, ROLE_HASH, TOTAL)

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
PODSET = "kueue.x-k8s.io/podset"
POD_FINALIZER = FINALIZER
WL_FINALIZER = "kueue.x-k8s.io/resource-in-use"
IS_GROUP = "kueue.x-k8s.io/is-group-workload"


def labels(o):
    return o["metadata"].get("labels") or {}


def annotations(o):
    return o["metadata"].get("annotations") or {}


def gated(pod):
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def phase(pod):
    return (pod.get("status") or {}).get("phase")


def runnable(pod):
    """isPodRunnableOrSucceeded: not Failed, and not deleted before being scheduled."""
    if pod["metadata"].get("deletionTimestamp") and not (pod.get("spec") or {}).get("nodeName"):
        return False
    return phase(pod) != "Failed"


def is_true(obj, ctype):
    c = cond(obj, ctype)
    return bool(c and c.get("status") == "True")


def fmt_qty(v):
    v = fractions.Fraction(v)
    if v.denominator == 1:
        return str(v.numerator)
    return "%dm" % int(v * 1000)


def wl_path(ns, name="", sub=""):
    p = "%s/namespaces/%s/workloads" % (KUEUE, ns)
    if name:
        p += "/" + name
    return p + ("/" + sub if sub else "")


class Kueue(Controller):
    def __init__(self, client, clock=utcnow):
        super().__init__(client)
        self.clock = clock

    # --- one pass --------------------------------------------------------------------

    def sync(self, pods, workloads, cqs, lqs, wpcs, flavors):
        self.now = self.clock()
        self.now_s = stamp(self.now)
        groups = {}
        for p in pods:
            if labels(p).get(MANAGED) == "true" and labels(p).get(GROUP):
                groups.setdefault((p["metadata"]["namespace"], labels(p)[GROUP]), []).append(p)
        for ps in groups.values():
            ps.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))
        wls = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in workloads}
        prio = {w["metadata"]["name"]: int(w.get("value") or 0) for w in wpcs}
        self.flavors = {f["metadata"]["name"]: f for f in flavors}
        for gk in sorted(set(groups) | set(k for k, w in wls.items() if annotations(w).get(IS_GROUP) == "true")):
            w = self.group(gk, groups.get(gk, []), wls.get(gk), prio)
            if w is None:
                wls.pop(gk, None)
            else:
                wls[gk] = w
        self.schedule(list(wls.values()), cqs, lqs)

    # --- a group and its Workload -------------------------------------------------------

    def group(self, gk, pods, wl, prio):
        """Reconcile one group; the Workload as it stands afterwards (None: none)."""
        ns, name = gk
        if wl is not None and is_true(wl, "Finished"):
            self.finalize(pods)
            return self.drop_wl_finalizer(wl)
        if wl is not None and wl["metadata"].get("deletionTimestamp"):
            self.stop(pods, "WorkloadDeleted", "Workload is deleted", include_suspended=True)
            self.finalize(pods)
            self.drop_wl_finalizer(wl)
            return None
        if not pods:
            if wl is not None:
                self.drop_wl_finalizer(wl)    # FinalizeOrphanedWorkload; the GC collects it
            return wl
        try:
            total = int(annotations(pods[0]).get(TOTAL, ""))
        except ValueError:
            return wl
        succeeded = sum(1 for p in pods if phase(p) == "Succeeded")
        unretriable = any(annotations(p).get(RETRIABLE) == "false" for p in pods)
        if succeeded == total or (unretriable and all(terminal(p) for p in pods)):
            if wl is not None:
                self.set_conditions(wl, [{"type": "Finished", "status": "True", "reason": "Succeeded",
                                          "message": "Pods succeeded: %d/%d." % (succeeded, total)}])
            self.finalize(pods)
            return self.drop_wl_finalizer(wl) if wl is not None else None
        active = [p for p in pods if runnable(p)]
        inactive = [p for p in pods if not runnable(p)]
        if wl is None:
            self.finalize(inactive)
            live = [p for p in pods if phase(p) != "Failed"]
            if any(labels(p).get(QUEUE) != labels(pods[0]).get(QUEUE) or annotations(p).get(TOTAL) != str(total)
                   for p in live) or len(active) < total:
                return None
            if len(active) > total:
                self.remove_excess(active[total:])
                active = active[:total]
            return self.create_wl(ns, name, active, total, prio)
        # replacements: surplus inactive pods are finalized, oldest first
        surplus = min(len(inactive), len(inactive) + len(active) - total)
        if surplus > 0:
            self.finalize(sorted(inactive, key=lambda p: p["metadata"].get("creationTimestamp", ""))[:surplus])
        if len(active) > total:
            self.remove_excess(active[total:])
            active = active[:total]
        absent = max(0, total - len(active))
        ev = cond(wl, "Evicted")
        evicted = bool(ev and ev.get("status") == "True")
        conds = []
        if absent:
            conds.append({"type": "WaitingForReplacementPods", "status": "True",
                          "reason": ev["reason"] if evicted else "PodsFailed",
                          "message": ev["message"] if evicted else "Some Failed pods need replacement"})
        elif cond(wl, "WaitingForReplacementPods"):
            conds.append({"type": "WaitingForReplacementPods", "status": "False", "reason": "PodsReady",
                          "message": "No pods need replacement"})
        if evicted:
            self.stop(pods, "WorkloadEvictedDueTo" + ev["reason"], ev["message"])
            if is_true(wl, "QuotaReserved") and not self.any_active(pods):
                wl = self.release(wl, ev["reason"], ev["message"]) or wl
            elif conds:
                wl = self.set_conditions(wl, conds) or wl
            return wl
        if conds:
            wl = self.set_conditions(wl, conds) or wl
        if is_true(wl, "Admitted"):
            self.ungate(wl, pods)
        else:
            running = [p for p in pods if not gated(p) and not terminal(p)]
            if running:
                self.stop(running, "NotAdmitted", "Not admitted by cluster queue")
        return wl

    def any_active(self, pods):
        """Pod.IsActive: a pod Running, and not past its deletion's grace period."""
        for p in pods:
            if phase(p) != "Running":
                continue
            m = p["metadata"]
            if m.get("deletionTimestamp") and m.get("deletionGracePeriodSeconds") is not None:
                end = parse_time(m["deletionTimestamp"]) + datetime.timedelta(
                    seconds=m["deletionGracePeriodSeconds"])
                if self.now > end:
                    continue
            return True
        return False

    def create_wl(self, ns, name, pods, total, prio):
        first = pods[0]
        pc = labels(first).get(PRIORITY, "")
        sets = {}
        for p in pods:
            h = annotations(p).get(ROLE_HASH, "main")
            if h not in sets:
                sets[h] = {"name": h, "count": 0, "template": {"spec": first["spec"] if p is first else p["spec"]}}
            sets[h]["count"] += 1
        spec = {"queueName": labels(first).get(QUEUE, ""), "podSets": [sets[h] for h in sorted(sets)],
                "priority": prio.get(pc, 0) if pc else 0}
        if pc:
            spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": pc}
        body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": name, "namespace": ns, "annotations": {IS_GROUP: "true"},
                             "finalizers": [WL_FINALIZER],
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"],
                                                  "uid": p["metadata"]["uid"]} for p in pods]},
                "spec": spec}
        w = self.write("workload_create", "POST", wl_path(ns), body, workload="%s/%s" % (ns, name))
        if w is not None:
            log("info", controller="kueue", event="workload_created", workload="%s/%s" % (ns, name),
                queue=spec["queueName"], priority=spec["priority"], pods=total)
        return w

    def remove_excess(self, pods):
        for p in pods:
            self.finalize([p])
            if not p["metadata"].get("deletionTimestamp"):
                if self.write("pod_delete", "DELETE", pod_path(p), pod=key(p)) is not None:
                    log("info", controller="kueue", event="excess_pod_deleted", pod=key(p))

    def finalize(self, pods):
        """removePodFinalizers: kueue.x-k8s.io/managed off each pod that has it."""
        for p in pods:
            fins = p["metadata"].get("finalizers") or []
            if POD_FINALIZER not in fins:
                continue
            patch = [{"op": "test", "path": "/metadata/finalizers", "value": fins},
                     {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in fins if f != POD_FINALIZER]}]
            if self.c_patch(pod_path(p), patch, pod=key(p)) is not None:
                p["metadata"]["finalizers"] = [f for f in fins if f != POD_FINALIZER]
                log("info", controller="kueue", event="pod_finalized", pod=key(p))

    def c_patch(self, path, patch, **kv):
        try:
            return self.c.call("PATCH", path, patch, ctype="application/json-patch+json")
        except Exception as e:      # noqa: BLE001 - logged like base.write
            log("debug", controller="kueue", event="write_failed", what="patch", msg=str(e), **kv)
            return None

    def drop_wl_finalizer(self, wl):
        fins = wl["metadata"].get("finalizers") or []
        if WL_FINALIZER not in fins:
            return wl
        m = wl["metadata"]
        patch = [{"op": "test", "path": "/metadata/finalizers", "value": fins},
                 {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in fins if f != WL_FINALIZER]}]
        return self.c_patch(wl_path(m["namespace"], m["name"]), patch, workload=m["name"]) or wl

    def stop(self, pods, reason, message, include_suspended=False):
        """Pod.Stop: TerminationTarget on the pod's status, then a DELETE."""
        for p in pods:
            if p["metadata"].get("deletionTimestamp"):
                continue
            if not include_suspended and (gated(p) or terminal(p)):
                continue
            st = p.setdefault("status", {})
            set_condition(st.setdefault("conditions", []), {"type": "TerminationTarget", "status": "True",
                                                            "reason": reason, "message": message}, self.now_s)
            if self.write("pod_status", "PUT", pod_path(p, "status"), p, pod=key(p)) is None:
                continue
            if self.write("pod_delete", "DELETE", pod_path(p), pod=key(p)) is not None:
                log("info", controller="kueue", event="pod_stopped", pod=key(p), reason=reason)

    def ungate(self, wl, pods):
        adm = (wl.get("status") or {}).get("admission") or {}
        info = {a.get("name"): a for a in adm.get("podSetAssignments") or []}
        for p in pods:
            if not gated(p) or p["metadata"].get("deletionTimestamp"):
                continue
            ps = annotations(p).get(ROLE_HASH, "main")
            spec = p["spec"]
            # podset.FromAssignment: the assigned flavours' nodeLabels and tolerations
            for fname in sorted(set(((info.get(ps) or {}).get("flavors") or {}).values())):
                fspec = (self.flavors.get(fname) or {}).get("spec") or {}
                if fspec.get("nodeLabels"):
                    spec["nodeSelector"] = dict(spec.get("nodeSelector") or {}, **fspec["nodeLabels"])
                if fspec.get("tolerations"):
                    spec["tolerations"] = (spec.get("tolerations") or []) + fspec["tolerations"]
            spec["schedulingGates"] = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
            if not spec["schedulingGates"]:
                del spec["schedulingGates"]
            p["metadata"].setdefault("labels", {})[PODSET] = ps
            if self.write("pod_ungate", "PUT", pod_path(p), p, pod=key(p)) is not None:
                log("info", controller="kueue", event="pod_ungated", pod=key(p), workload=wl["metadata"]["name"])

    # --- Workload status ----------------------------------------------------------------

    def put_status(self, wl):
        m = wl["metadata"]
        return self.write("workload_status", "PUT", wl_path(m["namespace"], m["name"], "status"), wl,
                          workload="%s/%s" % (m["namespace"], m["name"]))

    def set_conditions(self, wl, conds):
        conds_now = wl.setdefault("status", {}).setdefault("conditions", [])
        changed = False
        for c in conds:
            changed = set_condition(conds_now, dict(c, observedGeneration=wl["metadata"].get("generation", 1)),
                                    self.now_s) or changed
        return self.put_status(wl) if changed else wl

    def release(self, wl, reason, message):
        """The evicted group is no longer active: its reservation goes back."""
        wl.setdefault("status", {}).pop("admission", None)
        w = self.set_conditions(wl, [
            {"type": "Requeued", "status": "True", "reason": reason, "message": message},
            {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message},
            {"type": "Admitted", "status": "False", "reason": "NoReservation",
             "message": "The workload has no reservation"}])
        if w is not None:
            log("info", controller="kueue", event="quota_released", workload=key(wl), reason=reason)
        return w

    # --- the queues -------------------------------------------------------------------------

    def schedule(self, wls, cqs, lqs):
        lq_cq = {(q["metadata"]["namespace"], q["metadata"]["name"]): (q.get("spec") or {}).get("clusterQueue")
                 for q in lqs}
        by_cq = {}
        for w in wls:
            if w["metadata"].get("deletionTimestamp") or is_true(w, "Finished"):
                continue
            cq = lq_cq.get((w["metadata"]["namespace"], (w.get("spec") or {}).get("queueName")))
            if cq is not None:
                by_cq.setdefault(cq, []).append(w)
        for cq in cqs:
            self.schedule_cq(cq, by_cq.get(cq["metadata"]["name"], []))

    def quota(self, cq):
        """{resource: (flavour, nominal Fraction)} from the ClusterQueue's resource groups."""
        out = {}
        for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
            for res in rg.get("coveredResources") or []:
                for f in rg.get("flavors") or []:
                    r = next((r for r in f.get("resources") or [] if r.get("name") == res), None)
                    if r is not None and res not in out:
                        out[res] = (f.get("name"), quantity(r.get("nominalQuota")))
        return out

    @staticmethod
    def need(w):
        total = {}
        for ps in (w.get("spec") or {}).get("podSets") or []:
            for r, v in pod_requests({"spec": (ps.get("template") or {}).get("spec") or {}}).items():
                total[r] = total.get(r, 0) + v * int(ps.get("count") or 0)
        return total

    def schedule_cq(self, cq, wls):
        name = cq["metadata"]["name"]
        quota = self.quota(cq)
        reserved = [w for w in wls if is_true(w, "QuotaReserved")]
        used = {}
        for w in reserved:
            for r, v in self.need(w).items():
                used[r] = used.get(r, 0) + v
        pending = [w for w in wls if not is_true(w, "QuotaReserved")]
        pending.sort(key=lambda w: (-int((w.get("spec") or {}).get("priority") or 0),
                                    w["metadata"].get("creationTimestamp", ""), w["metadata"]["name"]))
        policy = ((cq.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue", "Never")
        for w in pending:
            need = self.need(w)
            ps = ((w.get("spec") or {}).get("podSets") or [{}])[0].get("name", "main")
            msg = self.no_fit(ps, need, used, quota)
            if msg is None:
                self.admit(w, name, quota)
                for r, v in need.items():
                    used[r] = used.get(r, 0) + v
                reserved.append(w)
                continue
            if self.no_fit(ps, need, {}, quota) is None and policy == "LowerPriority":
                targets = self.targets(w, need, used, quota, reserved)
                if targets:
                    self.preempt(w, targets, name)
                    self.set_pending(w, msg + ". Pending the preemption of %d workload(s)" % len(targets))
                    break   # the head waits for its preemptions; nothing behind it goes first
            self.set_pending(w, msg)

    def no_fit(self, ps, need, used, quota):
        msgs = []
        for r in sorted(need):
            if r not in quota:
                return "couldn't assign flavors to pod set %s: resource %s unavailable in ClusterQueue" % (ps, r)
            f, nominal = quota[r]
            if need[r] > nominal:
                msgs.append("insufficient quota for %s in flavor %s, previously considered podsets requests (0) + "
                            "current podset request (%s) > maximum capacity (%s)" % (r, f, fmt_qty(need[r]),
                                                                                     fmt_qty(nominal)))
            elif used.get(r, 0) + need[r] > nominal:
                msgs.append("insufficient unused quota for %s in flavor %s, %s more needed"
                            % (r, f, fmt_qty(used.get(r, 0) + need[r] - nominal)))
        if not msgs:
            return None
        return "couldn't assign flavors to pod set %s: %s" % (ps, ", ".join(msgs))

    def targets(self, w, need, used, quota, reserved):
        mine = int((w.get("spec") or {}).get("priority") or 0)

        def order(c):
            qr = cond(c, "QuotaReserved") or {}
            t = parse_time(qr.get("lastTransitionTime")) or self.now
            return (0 if is_true(c, "Evicted") else 1, int((c.get("spec") or {}).get("priority") or 0),
                    -t.timestamp(), c["metadata"].get("uid", ""))
        cands = sorted((c for c in reserved if int((c.get("spec") or {}).get("priority") or 0) < mine), key=order)
        left = dict(used)
        chosen = []

        def fits(u):
            return all(u.get(r, 0) + v <= quota[r][1] for r, v in need.items())
        for c in cands:
            for r, v in self.need(c).items():
                left[r] = left.get(r, 0) - v
            chosen.append(c)
            if fits(left):
                for i in range(len(chosen) - 2, -1, -1):    # fillBackWorkloads
                    back = dict(left)
                    for r, v in self.need(chosen[i]).items():
                        back[r] = back.get(r, 0) + v
                    if fits(back):
                        left = back
                        chosen.pop(i)
                return chosen
        return []

    def preempt(self, w, targets, cq):
        msg = ("Preempted to accommodate a workload (UID: %s, JobUID: UNKNOWN) due to prioritization in the "
               "ClusterQueue; preemptor path: %s; preemptee path: %s" % (w["metadata"].get("uid", "UNKNOWN"), cq, cq))
        for t in targets:
            if is_true(t, "Evicted"):
                continue
            if self.set_conditions(t, [{"type": "Evicted", "status": "True", "reason": "Preempted", "message": msg},
                                       {"type": "Preempted", "status": "True", "reason": "InClusterQueue",
                                        "message": msg}]) is not None:
                log("info", controller="kueue", event="preempted", workload=key(t), preemptor=key(w))

    def set_pending(self, w, msg):
        self.set_conditions(w, [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": msg}])

    def admit(self, w, cq, quota):
        assigns = []
        for ps in (w.get("spec") or {}).get("podSets") or []:
            per = pod_requests({"spec": (ps.get("template") or {}).get("spec") or {}})
            count = int(ps.get("count") or 0)
            flavors = {r: quota[r][0] for r in per}
            assigns.append({"name": ps.get("name"), "count": count, "flavors": flavors,
                            "resourceUsage": {r: fmt_qty(v * count) for r, v in per.items()}})
        w.setdefault("status", {})["admission"] = {"clusterQueue": cq, "podSetAssignments": assigns}
        conds = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                  "message": "Quota reserved in ClusterQueue %s" % cq},
                 {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}]
        for t in ("Evicted", "Preempted"):
            c = cond(w, t)
            if c and c.get("status") == "True":
                conds.append({"type": t, "status": "False", "reason": "QuotaReserved",
                              "message": "Previously: " + c.get("message", "")})
        if self.set_conditions(w, conds) is not None:
            log("info", controller="kueue", event="admitted", workload=key(w), cluster_queue=cq)
