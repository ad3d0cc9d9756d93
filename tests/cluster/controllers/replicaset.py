# controllers/replicaset.py: the replicaset controller. It keeps
# spec.replicas active pods (not Failed or Succeeded, not being deleted)
# named <rs>-<5 chars> (generateName) and owned by the ReplicaSet; removes
# extra ones (unscheduled, not ready, newest first); keeps status (replicas,
# fullyLabeledReplicas, readyReplicas, availableReplicas with
# minReadySeconds, observedGeneration, ReplicaFailure when a create is
# refused). Terminal pods are left in place, as upstream does.
# Must not: touch pods another controller owns.

import json

from tests.cluster.kubeapi.errors import ApiError

from .base import Controller, describe
from .log import log
from .objects import CORE, age, apps_path, cond, controller_uid, deleting, key, pod_path, pod_ready, stamp, \
    terminal, utcnow


class ReplicaSetController(Controller):
    def sync(self, rss, pods):
        now = utcnow()
        for rs in rss:
            if deleting(rs):
                continue
            uid = rs["metadata"]["uid"]
            mine = [p for p in pods if controller_uid(p) == uid]
            active = [p for p in mine if not terminal(p) and not deleting(p)]
            want = (rs.get("spec") or {}).get("replicas", 1)
            failure = None
            if len(active) < want:
                for _ in range(want - len(active)):
                    pod = self.new_pod(rs)
                    try:
                        out = self.c.call("POST", "%s/namespaces/%s/pods" % (CORE, rs["metadata"]["namespace"]),
                                          pod)
                    except ApiError as e:
                        failure = describe(e)
                        log("error" if e.code not in (409,) else "debug", controller="replicaset",
                            event="create_failed", replicaset=key(rs), code=e.code, msg=failure)
                        if e.code != 409:
                            self.event(rs, "ReplicaSet", "apps/v1", "FailedCreate", "Error creating: %s" % e.message,
                                       "Warning", component="replicaset-controller")
                        break
                    active.append(out)
                    log("info", controller="replicaset", event="pod_created", replicaset=key(rs),
                        pod=out["metadata"]["name"])
                    self.event(rs, "ReplicaSet", "apps/v1", "SuccessfulCreate",
                               "Created pod: %s" % out["metadata"]["name"], component="replicaset-controller")
            elif len(active) > want:
                def rank(p):
                    return (bool((p.get("spec") or {}).get("nodeName")), pod_ready(p),
                            p["metadata"].get("creationTimestamp", ""))
                extra = sorted(active, key=lambda p: (rank(p)[0], rank(p)[1],
                                                       [-ord(ch) for ch in rank(p)[2]]))[:len(active) - want]
                for p in extra:
                    if self.write("pod_delete", "DELETE", pod_path(p), pod=key(p)) is not None:
                        active.remove(p)
                        log("info", controller="replicaset", event="pod_deleted", replicaset=key(rs),
                            pod=p["metadata"]["name"])
                        self.event(rs, "ReplicaSet", "apps/v1", "SuccessfulDelete",
                                   "Deleted pod: %s" % p["metadata"]["name"], component="replicaset-controller")
            min_ready = (rs.get("spec") or {}).get("minReadySeconds", 0)
            sel = (rs.get("spec") or {}).get("selector")
            tlabels = (((rs.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
            ready = [p for p in active if pod_ready(p)]
            avail = [p for p in ready if min_ready <= 0 or
                     (age(cond(p, "Ready").get("lastTransitionTime"), now) or 0) >= min_ready]
            labeled = [p for p in active if all((p["metadata"].get("labels") or {}).get(k) == v
                                                for k, v in tlabels.items())]
            status = rs.get("status") or {}
            st = json.loads(json.dumps(status))
            st["replicas"] = len(active)
            st["fullyLabeledReplicas"] = len(labeled) if sel is not None else 0
            st["readyReplicas"] = len(ready)
            st["availableReplicas"] = len(avail)
            st["observedGeneration"] = rs["metadata"].get("generation", 1)
            for k in ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"):
                if not st[k]:
                    del st[k]
            conds = [c for c in st.get("conditions") or [] if c.get("type") != "ReplicaFailure"]
            if failure:
                conds.append({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                              "message": failure, "lastTransitionTime": stamp(now)})
            if conds:
                st["conditions"] = conds
            else:
                st.pop("conditions", None)
            if st != status:
                rs["status"] = st
                self.write("replicaset_status", "PUT", apps_path("replicasets", rs, "status"), rs,
                           replicaset=key(rs))

    def new_pod(self, rs):
        t = json.loads(json.dumps((rs.get("spec") or {}).get("template") or {}))
        tm = t.get("metadata") or {}
        m = rs["metadata"]
        meta = {"generateName": m["name"] + "-", "namespace": m["namespace"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": m["name"],
                                     "uid": m["uid"], "controller": True, "blockOwnerDeletion": True}]}
        for k in ("labels", "annotations", "finalizers"):
            if tm.get(k):
                meta[k] = tm[k]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": t.get("spec") or {}}
