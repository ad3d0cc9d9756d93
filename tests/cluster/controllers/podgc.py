# controllers/podgc.py: the pod garbage collector. Pods bound to a node that
# no longer exists (its absence confirmed by a GET; no 40 s quarantine) get
# DisruptionTarget True DeletionByPodGC and phase Failed (unless terminal),
# then a DELETE with gracePeriodSeconds=0; that includes terminating ones.
# The terminated-pod threshold and out-of-service taint handling are left
# out.
# Must not: delete a pod whose node still exists.

import urllib.parse

from tests.cluster.kubeapi.errors import ApiError

from .base import Controller
from .log import log
from .objects import CORE, key, pod_path, set_condition, stamp, terminal


class PodGC(Controller):
    def sync(self, nodes, pods):
        names = {n["metadata"]["name"] for n in nodes}
        gone = {}
        for pod in pods:
            nn = (pod.get("spec") or {}).get("nodeName")
            if not nn or nn in names:
                continue
            if nn not in gone:
                try:
                    self.c.call("GET", "%s/nodes/%s" % (CORE, urllib.parse.quote(nn)))
                    gone[nn] = False
                except ApiError as e:
                    gone[nn] = e.code == 404
            if not gone[nn]:
                continue
            now_s = stamp()
            st = pod.setdefault("status", {})
            conds = st.setdefault("conditions", [])
            changed = set_condition(conds, {"type": "DisruptionTarget", "status": "True",
                                            "reason": "DeletionByPodGC",
                                            "message": "PodGC: node no longer exists"}, now_s)
            if not terminal(pod):
                st["phase"] = "Failed"
                changed = True
            if changed and self.write("pod_status", "PUT", pod_path(pod, "status"), pod,
                                      pod=key(pod)) is None:
                continue
            if self.write("pod_delete", "DELETE", pod_path(pod),
                          {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                          pod=key(pod)) is not None:
                log("info", controller="podgc", event="force_deleted", pod=key(pod), node=nn,
                    reason="node no longer exists")
