# controllers/deployment.py: the deployment controller. Deployment ->
# ReplicaSet <deploy>-<hash> (FNV-32a of the template and collisionCount,
# encoded as the real controller does, though not bit-identical to its hash)
# -> pods (replicaset.py). Both strategies are run as one simplified
# Recreate: on a template change the new ReplicaSet gets spec.replicas at
# once and the older ones are scaled to 0 at once, without waiting for old
# pods to end. Status: replicas, updated/ready/available/unavailable
# replicas, observedGeneration, the Available and Progressing conditions
# (ProgressDeadlineExceeded included), the revision annotation.
# spec.paused, revisionHistoryLimit cleanup, rollback and adoption of
# orphaned ReplicaSets are left out.
# Must not: create or delete pods (the replicaset controller does).

import json
import struct

from tests.cluster.kubeapi.errors import ApiError

from .base import UNANSWERED, Controller, describe
from .log import log
from .objects import APPS, age, apps_path, cond, controller_uid, deleting, key, set_condition, stamp, utcnow

SAFE = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template, collisions):
    """FNV-32a of the template (and collisionCount), in the real controller's alphabet."""
    h = 0x811c9dc5
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collisions:
        data += struct.pack(">I", collisions & 0xffffffff)
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xffffffff
    return "".join(SAFE[c % len(SAFE)] for c in str(h).encode())


class DeploymentController(Controller):
    def sync(self, deploys, rss):
        for d in deploys:
            if deleting(d):
                continue
            try:
                self.deployment(d, [r for r in rss if controller_uid(r) == d["metadata"]["uid"]])
            except (ApiError,) + UNANSWERED as e:
                log("error", controller="deployment", event="sync_failed", deployment=key(d),
                    msg=describe(e))

    def deployment(self, d, owned):
        spec, m = d.get("spec") or {}, d["metadata"]
        want = spec.get("replicas", 1)
        tmpl = spec.get("template") or {}
        status = d.get("status") or {}
        collisions = status.get("collisionCount", 0)
        h = template_hash(tmpl, collisions)

        def bare(rs):
            t = json.loads(json.dumps((rs.get("spec") or {}).get("template") or {}))
            lab = (t.get("metadata") or {}).get("labels") or {}
            lab.pop("pod-template-hash", None)
            if "labels" in (t.get("metadata") or {}) and not lab:
                del t["metadata"]["labels"]
            return t
        new = None
        for rs in owned:
            if bare(rs) == tmpl and not deleting(rs):
                new = rs
                break
        revisions = [int((r["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision", "0")
                         or 0) for r in owned]
        created = False
        if new is None:
            name = "%s-%s" % (m["name"], h)
            t = json.loads(json.dumps(tmpl))
            t.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
            sel = json.loads(json.dumps(spec.get("selector") or {}))
            sel.setdefault("matchLabels", {})["pod-template-hash"] = h
            rev = str(max(revisions + [0]) + 1)
            rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                  "metadata": {"name": name, "namespace": m["namespace"],
                               "labels": dict(t["metadata"]["labels"]),
                               "annotations": {"deployment.kubernetes.io/revision": rev,
                                               "deployment.kubernetes.io/desired-replicas": str(want),
                                               "deployment.kubernetes.io/max-replicas": str(want)},
                               "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                    "name": m["name"], "uid": m["uid"], "controller": True,
                                                    "blockOwnerDeletion": True}]},
                  "spec": {"replicas": want, "minReadySeconds": spec.get("minReadySeconds", 0),
                           "selector": sel, "template": t}}
            try:
                new = self.c.call("POST", "%s/namespaces/%s/replicasets" % (APPS, m["namespace"]), rs)
                created = True
                log("info", controller="deployment", event="replicaset_created", deployment=key(d),
                    replicaset=name, replicas=want, revision=rev)
                self.event(d, "Deployment", "apps/v1", "ScalingReplicaSet",
                           "Scaled up replica set %s to %d" % (name, want), component="deployment-controller")
            except ApiError as e:
                if e.code != 409:
                    raise
                other = self.c.call("GET", "%s/namespaces/%s/replicasets/%s" % (APPS, m["namespace"], name))
                if controller_uid(other) != m["uid"]:
                    status["collisionCount"] = collisions + 1
                    d["status"] = status
                    self.write("deployment_status", "PUT", apps_path("deployments", d, "status"), d,
                               deployment=key(d))
                    log("info", controller="deployment", event="hash_collision", deployment=key(d),
                        replicaset=name)
                return
            owned = owned + [new]
        # scale: the current RS to spec.replicas, the others to 0 (simplified Recreate)
        for rs in owned:
            target = want if rs is new else 0
            if deleting(rs) or (rs.get("spec") or {}).get("replicas", 1) == target:
                continue
            before = rs["spec"].get("replicas", 1)
            rs["spec"]["replicas"] = target
            ann = rs["metadata"].setdefault("annotations", {})
            ann["deployment.kubernetes.io/desired-replicas"] = str(want)
            ann["deployment.kubernetes.io/max-replicas"] = str(want)
            if self.write("replicaset_scale", "PUT", apps_path("replicasets", rs), rs,
                          replicaset=key(rs)) is not None:
                log("info", controller="deployment", event="replicaset_scaled", deployment=key(d),
                    replicaset=rs["metadata"]["name"], replicas=target)
                self.event(d, "Deployment", "apps/v1", "ScalingReplicaSet", "Scaled %s replica set %s to %d"
                           % ("up" if target > before else "down", rs["metadata"]["name"], target),
                           component="deployment-controller")
        # status
        rs_st = [(r, r.get("status") or {}) for r in owned]
        new_st = (new.get("status") or {}) if not created else {}
        total = sum(s.get("replicas", 0) for _, s in rs_st)
        ready = sum(s.get("readyReplicas", 0) for _, s in rs_st)
        avail = sum(s.get("availableReplicas", 0) for _, s in rs_st)
        updated = new_st.get("replicas", 0)
        max_unavail = 0
        strat = spec.get("strategy") or {}
        if (strat.get("type") or "RollingUpdate") == "RollingUpdate" and want:
            mu = (strat.get("rollingUpdate") or {}).get("maxUnavailable", "25%")
            if isinstance(mu, str) and mu.endswith("%"):
                max_unavail = int(want * int(mu[:-1]) // 100)
            else:
                max_unavail = int(mu)
        now_s = stamp()
        st = json.loads(json.dumps(status))
        st["observedGeneration"] = m.get("generation", 1)
        st["replicas"] = total
        st["updatedReplicas"] = updated
        st["readyReplicas"] = ready
        st["availableReplicas"] = avail
        st["unavailableReplicas"] = max(0, want - avail) if total or want else 0
        for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas"):
            if not st[k]:
                del st[k]
        conds = st.setdefault("conditions", [])
        rsname = new["metadata"]["name"]
        if avail >= want - max_unavail:
            av = {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                  "message": "Deployment has minimum availability."}
        else:
            av = {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                  "message": "Deployment does not have minimum availability."}
        complete = (updated == want and total == want and avail == want
                    and (new.get("status") or {}).get("observedGeneration", 0) >= (new["metadata"].get("generation") or 1))
        if created:
            pr = {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
                  "message": 'Created new replica set "%s"' % rsname}
        elif complete:
            pr = {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                  "message": 'ReplicaSet "%s" has successfully progressed.' % rsname}
        else:
            pr = {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                  "message": 'ReplicaSet "%s" is progressing.' % rsname}
            old = cond({"status": st}, "Progressing")
            deadline = spec.get("progressDeadlineSeconds", 600)
            if old and old.get("reason") == "ProgressDeadlineExceeded":
                pr = dict(old)
            elif old and old.get("status") == "True" and old.get("reason") != "NewReplicaSetAvailable":
                since = age(old.get("lastUpdateTime"), utcnow())
                if since is not None and since > deadline:
                    pr = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                          "message": 'ReplicaSet "%s" has timed out progressing.' % rsname}
        for new_c in (av, pr):
            old = cond({"status": st}, new_c["type"])
            if old is None or any(old.get(k) != new_c[k] for k in ("status", "reason", "message")):
                new_c = dict(new_c, lastUpdateTime=now_s)
                if old is not None and old.get("status") == new_c["status"]:
                    new_c["lastTransitionTime"] = old.get("lastTransitionTime", now_s)
                set_condition(conds, new_c, now_s)
                for c in conds:
                    if c["type"] == new_c["type"]:
                        c["lastUpdateTime"] = now_s
        # the order kubectl shows: Available, then Progressing
        conds.sort(key=lambda c: {"Available": 0, "Progressing": 1}.get(c.get("type"), 2))
        ann = m.get("annotations") or {}
        rev = (new["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision")
        if rev and ann.get("deployment.kubernetes.io/revision") != rev:
            ann["deployment.kubernetes.io/revision"] = rev
            m["annotations"] = ann
            out = self.write("deployment_revision", "PUT", apps_path("deployments", d), d,
                             deployment=key(d))
            if out is None:
                return
            d = out
        if st != status:
            d["status"] = st
            self.write("deployment_status", "PUT", apps_path("deployments", d, "status"), d,
                       deployment=key(d))
