# controllers/taintmanager.py: the NoExecute taint manager. A pod on a node
# with a NoExecute taint it does not tolerate is evicted at once; tolerated
# with tolerationSeconds, at the earliest timeAdded + tolerationSeconds over
# the taints (never before this process saw the taint + tolerationSeconds,
# timeAdded having whole seconds). Eviction: condition DisruptionTarget True
# DeletionByTaintManager on pods/status, then a graceful DELETE. Terminal
# pods and pods being deleted are left alone.
# Must not: add or remove taints (the node lifecycle controller does), or
# force a deletion (the kubelet confirms it).

import time

from .base import Controller
from .log import log
from .objects import deleting, key, parse_time, pod_path, set_condition, stamp, terminal, utcnow
from .taints import tolerates


class TaintManager(Controller):
    def __init__(self, client):
        super().__init__(client)
        self.taint_seen = {}      # (node, key, value, timeAdded) -> monotonic time first seen
        self.first_pass = True

    def sync(self, nodes, pods):
        now = utcnow()
        now_m = time.monotonic()
        by_name = {n["metadata"]["name"]: n for n in nodes}
        seen = {}
        for n in nodes:
            for t in (n.get("spec") or {}).get("taints") or []:
                if t.get("effect") == "NoExecute":
                    k = (n["metadata"]["name"], t.get("key"), t.get("value"), t.get("timeAdded"))
                    # taints already there on the first pass count from their timeAdded alone
                    seen[k] = self.taint_seen.get(k, float("-inf") if self.first_pass else now_m)
        self.taint_seen = seen
        self.first_pass = False
        for pod in pods:
            node = by_name.get((pod.get("spec") or {}).get("nodeName"))
            if node is None or deleting(pod) or terminal(pod):
                continue
            taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"]
            if not taints:
                continue
            tols = pod["spec"].get("tolerations") or []
            due = None         # seconds from now; None = never
            for t in taints:
                match = [x for x in tols if tolerates(x, t)]
                if not match:
                    due = 0
                    break
                secs = [x.get("tolerationSeconds") for x in match]
                if any(s is None for s in secs):
                    continue          # tolerated forever
                s = max(0, min(secs))
                added = parse_time(t.get("timeAdded"))
                d = s - ((now - added).total_seconds() if added else 0)
                first = seen.get((node["metadata"]["name"], t.get("key"), t.get("value"), t.get("timeAdded")))
                if first is not None and first != float("-inf"):
                    d = max(d, s - (now_m - first))
                due = d if due is None else min(due, d)
            if due is not None and due <= 0:
                self.evict(pod, node["metadata"]["name"])

    def evict(self, pod, node):
        now_s = stamp()
        conds = pod.setdefault("status", {}).setdefault("conditions", [])
        set_condition(conds, {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                              "message": "Taint manager: deleting due to NoExecute taint"}, now_s)
        if self.write("pod_status", "PUT", pod_path(pod, "status"), pod, pod=key(pod)) is None:
            return
        if self.write("pod_delete", "DELETE", pod_path(pod), pod=key(pod)) is None:
            return
        log("info", controller="taintmanager", event="evicted", pod=key(pod), node=node)
        self.event(pod, "Pod", "v1", "TaintManagerEviction", "Marking for deletion Pod %s" % key(pod),
                   component="taint-controller")
