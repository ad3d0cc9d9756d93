# controllers/nodelifecycle.py: the node lifecycle controller. A node whose
# newest heartbeat (Lease kube-node-lease/<node> spec.renewTime, Ready
# lastHeartbeatTime) is older than the grace period gets Ready,
# MemoryPressure, DiskPressure and PIDPressure Unknown (NodeStatusUnknown,
# "Kubelet stopped posting node status."; a node that never posted any:
# NodeStatusNeverUpdated after the startup grace period). Taints follow the
# conditions as in 1.26: Ready Unknown -> node.kubernetes.io/unreachable
# NoSchedule and NoExecute, Ready False -> node.kubernetes.io/not-ready
# NoSchedule and NoExecute, Memory/Disk/PIDPressure or NetworkUnavailable
# True -> their NoSchedule taint, spec.unschedulable ->
# node.kubernetes.io/unschedulable NoSchedule; each with timeAdded, removed
# once the condition is gone. Pods on a node whose Ready is not True get
# their Ready condition False (MarkPodsNotReady). No zone rate limiting.
# Must not: touch taints it does not manage (taints.py), or evict pods (the
# taint manager does).

from .base import Controller
from .log import log
from .objects import CORE, age, cond, key, pod_path, stamp, utcnow
from .taints import CONDITION_TAINTS, MANAGED_NOEXECUTE, MANAGED_NOSCHEDULE, UNSCHEDULABLE


class NodeLifecycle(Controller):
    def __init__(self, client, grace_period, startup_grace_period):
        super().__init__(client)
        self.grace_period = grace_period
        self.startup_grace_period = startup_grace_period

    def sync(self, nodes, leases, pods):
        """The nodes as this pass left them."""
        now = utcnow()
        now_s = stamp(now)
        lease_by = {l["metadata"]["name"]: l for l in leases}
        out = []
        for node in nodes:
            name = node["metadata"]["name"]
            ready = cond(node, "Ready")
            lease = lease_by.get(name)
            beats = [a for a in (age(((lease or {}).get("spec") or {}).get("renewTime"), now),
                                 age((ready or {}).get("lastHeartbeatTime"), now)) if a is not None]
            stale, never = False, False
            if beats:
                stale = min(beats) > self.grace_period
            else:
                created = age(node["metadata"].get("creationTimestamp"), now) or 0
                stale = never = created > self.startup_grace_period
            if stale and (ready is None or ready.get("status") != "Unknown"):
                node = self.mark_unknown(node, never, now_s) or node
            node = self.sync_taints(node, now_s) or node
            out.append(node)
            r = cond(node, "Ready")
            if not r or r.get("status") != "True":
                self.mark_pods_not_ready(name, pods, now_s)
        return out

    def mark_unknown(self, node, never, now_s):
        name = node["metadata"]["name"]
        st = node.setdefault("status", {})
        conds = st.setdefault("conditions", [])
        for ctype in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
            c = cond(node, ctype)
            if c is None:
                conds.append({"type": ctype, "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                              "message": "Kubelet never posted node status.",
                              "lastHeartbeatTime": node["metadata"].get("creationTimestamp"),
                              "lastTransitionTime": now_s})
            elif c.get("status") != "Unknown":
                c.update({"status": "Unknown", "reason": "NodeStatusUnknown",
                          "message": "Kubelet stopped posting node status.", "lastTransitionTime": now_s})
        out = self.write("node_status", "PUT", "%s/nodes/%s/status" % (CORE, name), node, node=name)
        if out is not None:
            log("info", controller="nodelifecycle", event="node_unknown", node=name,
                reason="NodeStatusNeverUpdated" if never else "NodeStatusUnknown")
            self.event(out, "Node", "v1", "NodeNotReady", "Node %s status is now: NodeNotReady" % name,
                       component="node-controller")
        return out

    def sync_taints(self, node, now_s):
        name = node["metadata"]["name"]
        spec = node.get("spec") or {}
        want = set()
        for ctype, m in CONDITION_TAINTS.items():
            c = cond(node, ctype)
            k = m.get((c or {}).get("status"))
            if k:
                want.add((k, "NoSchedule"))
                if k in MANAGED_NOEXECUTE:
                    want.add((k, "NoExecute"))
        if spec.get("unschedulable"):
            want.add((UNSCHEDULABLE, "NoSchedule"))
        taints = spec.get("taints") or []
        keep, have = [], set()
        for t in taints:
            kt = (t.get("key"), t.get("effect"))
            managed = ((kt[1] == "NoSchedule" and kt[0] in MANAGED_NOSCHEDULE) or
                       (kt[1] == "NoExecute" and kt[0] in MANAGED_NOEXECUTE))
            if managed and kt not in want:
                continue
            keep.append(t)
            have.add(kt)
        added = sorted(want - have)
        for k, e in added:
            keep.append({"key": k, "effect": e, "timeAdded": now_s})
        if len(keep) == len(taints) and not added:
            return None
        removed = sorted({(t.get("key"), t.get("effect")) for t in taints} - {(t.get("key"), t.get("effect"))
                                                                             for t in keep})
        node.setdefault("spec", {})["taints"] = keep
        if not keep:
            del node["spec"]["taints"]
        out = self.write("node_taints", "PUT", "%s/nodes/%s" % (CORE, name), node, node=name)
        if out is not None:
            for k, e in added:
                log("info", controller="nodelifecycle", event="taint_added", node=name, taint="%s:%s" % (k, e))
            for k, e in removed:
                log("info", controller="nodelifecycle", event="taint_removed", node=name,
                    taint="%s:%s" % (k, e))
        return out

    def mark_pods_not_ready(self, node, pods, now_s):
        for pod in pods:
            if (pod.get("spec") or {}).get("nodeName") != node:
                continue
            c = cond(pod, "Ready")
            if not c or c.get("status") == "False":
                continue
            c["status"] = "False"
            c["lastTransitionTime"] = now_s
            if self.write("pod_status", "PUT", pod_path(pod, "status"), pod, pod=key(pod)) is not None:
                log("info", controller="nodelifecycle", event="pod_not_ready", pod=key(pod), node=node)
