# controllers/scheduler.py: the kube-scheduler stand-in. It takes pods with
# no spec.nodeName, schedulerName default-scheduler (or unset), not being
# deleted, without scheduling gates (the SchedulingGates PreEnqueue plugin of
# 1.27+: a gated pod is not tried, and keeps the PodScheduled False
# SchedulingGated condition the API server gave it). Filters, in the real plugin order, each node reporting its first
# failure: NodeUnschedulable, TaintToleration (NoSchedule/NoExecute taints),
# Ready condition True ("node(s) were not ready", a check 1.26 leaves to the
# not-ready/unreachable taints), NodeAffinity (nodeSelector and required
# node affinity), NodeResourcesFit (requests of cpu, memory and any other
# named resource - max of the sum of containers and each init container,
# plus overhead - and the pod count, against status.allocatable). Score:
# NodeAffinity first (the sum of the weights of the pod's preferred node
# affinity terms that the node matches, highest first; an empty preference
# matches nothing), then the fewest pods, then the name. Binds through
# POST .../pods/NAME/binding. A pod that fits nowhere gets PodScheduled
# False, reason Unschedulable, with the real message form ("0/N nodes are
# available: ... preemption: ..."), and is tried again on every pass (no
# backoff); there is no preemption.
# Must not: write anything of a pod but its binding and its PodScheduled
# condition.

import fractions

from tests.cluster.kubeapi.quantity import parse_quantity

from .base import Controller
from .log import log
from .objects import cond, deleting, key, pod_path, set_condition, stamp, terminal
from .taints import UNSCHEDULABLE, tolerates, untolerated


def quantity(v):
    """A quantity's value; 0 when absent or unreadable."""
    q = parse_quantity(v)
    return fractions.Fraction(0) if q is None else q


def pod_requests(pod):
    """{resource: Fraction}: max(sum of containers, each init container) + overhead,
    a container's limit standing in for a missing request (the API's defaulting)."""
    def one(c):
        res = c.get("resources") or {}
        out = {k: quantity(v) for k, v in (res.get("limits") or {}).items()}
        out.update({k: quantity(v) for k, v in (res.get("requests") or {}).items()})
        return out
    spec = pod.get("spec") or {}
    total = {}
    for c in spec.get("containers") or []:
        for k, v in one(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in one(c).items():
            if v > total.get(k, 0):
                total[k] = v
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + quantity(v)
    return {k: v for k, v in total.items() if v > 0}


def _match_expr(expr, labels):
    key, op, vals = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in vals
    if op == "NotIn":
        return key not in labels or labels[key] not in vals
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            a, b = int(labels[key]), int(vals[0])
        except (KeyError, IndexError, ValueError):
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term_matches(term, node):
    """A node selector term: all its matchExpressions on the node's labels and
    matchFields on its metadata.name; a term with neither matches nothing."""
    exprs, fexprs = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fexprs:
        return False
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    return all(_match_expr(e, labels) for e in exprs) and all(_match_expr(e, fields) for e in fexprs)


def _node_affinity(pod):
    return ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}


def node_matches(pod, node):
    """nodeSelector and required node affinity."""
    labels = node["metadata"].get("labels") or {}
    for k, v in ((pod.get("spec") or {}).get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = _node_affinity(pod).get("requiredDuringSchedulingIgnoredDuringExecution")
    if req and not any(_term_matches(t, node) for t in req.get("nodeSelectorTerms") or []):
        return False
    return True


def affinity_score(pod, node):
    """The NodeAffinity score: the weights of the preferred terms the node matches."""
    return sum(p.get("weight") or 0
               for p in _node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution") or []
               if _term_matches(p.get("preference") or {}, node))


class Scheduler(Controller):
    def __init__(self, client):
        super().__init__(client)
        self.sched_msgs = {}      # pod uid -> last FailedScheduling message

    def sync(self, nodes, pods):
        pending = [p for p in pods if not (p.get("spec") or {}).get("nodeName") and not deleting(p)
                   and not terminal(p) and not (p.get("spec") or {}).get("schedulingGates")
                   and (p["spec"].get("schedulerName") or "default-scheduler") == "default-scheduler"]
        if not pending:
            return
        by_node = {n["metadata"]["name"]: [] for n in nodes}
        for p in pods:
            nn = (p.get("spec") or {}).get("nodeName")
            if nn in by_node and not terminal(p):
                by_node[nn].append(pod_requests(p))
        pending.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), key(p)))
        for pod in pending:
            fits, reasons = [], {}
            for node in nodes:
                why = self.filter(pod, node, by_node[node["metadata"]["name"]])
                if why:
                    for r in why:
                        reasons[r] = reasons.get(r, 0) + 1
                else:
                    fits.append(node)
            if not fits:
                self.unschedulable(pod, nodes, reasons)
                continue
            fits.sort(key=lambda n: (-affinity_score(pod, n), len(by_node[n["metadata"]["name"]]),
                                     n["metadata"]["name"]))
            node = fits[0]["metadata"]["name"]
            m = pod["metadata"]
            binding = {"apiVersion": "v1", "kind": "Binding",
                       "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m.get("uid")},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
            if self.write("binding", "POST", pod_path(pod, "binding"), binding, pod=key(pod),
                          node=node) is not None:
                by_node[node].append(pod_requests(pod))
                self.sched_msgs.pop(m.get("uid"), None)
                log("info", controller="scheduler", event="bound", pod=key(pod), node=node)
                self.event(pod, "Pod", "v1", "Scheduled",
                           "Successfully assigned %s to %s" % (key(pod), node))

    def filter(self, pod, node, placed):
        """The reasons this node cannot take the pod ([] when it can)."""
        spec = node.get("spec") or {}
        taints = spec.get("taints") or []
        if spec.get("unschedulable"):
            ut = {"key": UNSCHEDULABLE, "effect": "NoSchedule"}
            if not any(tolerates(t, ut) for t in (pod["spec"].get("tolerations") or [])):
                return ["node(s) were unschedulable"]
        t = untolerated(pod, taints, ("NoSchedule", "NoExecute"))
        if t:
            return ["node(s) had untolerated taint {%s: %s}" % (t.get("key", ""), t.get("value", ""))]
        ready = cond(node, "Ready")
        if not ready or ready.get("status") != "True":
            return ["node(s) were not ready"]
        if not node_matches(pod, node):
            return ["node(s) didn't match Pod's node affinity/selector"]
        st = node.get("status") or {}
        alloc = st.get("allocatable") or st.get("capacity") or {}
        out = []
        if len(placed) + 1 > quantity(alloc.get("pods")):
            out.append("Too many pods")
        want = pod_requests(pod)
        for res in sorted(want):
            used = sum(p.get(res, 0) for p in placed)
            if used + want[res] > quantity(alloc.get(res)):
                out.append("Insufficient " + res)
        return out

    def unschedulable(self, pod, nodes, reasons):
        n = len(nodes)
        if n == 0:
            msg = "no nodes available to schedule pods"
        else:
            parts = sorted("%d %s" % (c, r) for r, c in reasons.items())
            resolvable = sum(c for r, c in reasons.items()
                             if r.startswith("Insufficient") or r == "Too many pods")
            # a node counts once in the preemption summary: it is "not helpful" when
            # any of its reasons is one preemption cannot fix
            pre = []
            helpful = min(resolvable, n)
            if n - helpful:
                pre.append("%d Preemption is not helpful for scheduling" % (n - helpful))
            if helpful:
                pre.append("%d No preemption victims found for incoming pod" % helpful)
            msg = "0/%d nodes are available: %s. preemption: 0/%d nodes are available: %s." % (
                n, ", ".join(parts), n, ", ".join(sorted(pre)))
        uid = pod["metadata"].get("uid")
        c = cond(pod, "PodScheduled")
        if self.sched_msgs.get(uid) == msg and c and c.get("message") == msg:
            return
        now_s = stamp()
        st = pod.setdefault("status", {})
        st.setdefault("phase", "Pending")
        conds = st.setdefault("conditions", [])
        set_condition(conds, {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                              "message": msg, "lastProbeTime": None}, now_s)
        if self.write("pod_status", "PUT", pod_path(pod, "status"), pod, pod=key(pod)) is not None:
            self.sched_msgs[uid] = msg
            log("info", controller="scheduler", event="unschedulable", pod=key(pod), msg=msg)
            self.event(pod, "Pod", "v1", "FailedScheduling", msg, "Warning")
