# kubelet/status.py: what the kubelet reports of a pod through pods/status:
# phase, conditions (PodScheduled, Initialized, ContainersReady, Ready; the
# others' conditions, DisruptionTarget, kept), podIP/hostIP, startTime, and
# containerStatuses (waiting with a reason, running, terminated with exit
# code and message); sent only when it changed, and read back on a conflict.
# Must not: change the spec or metadata of the pod.

import json

from .api import now_rfc3339, q
from .log import log


def container_status(c):
    image = c.spec.get("image", "")
    st = {"name": c.name, "image": image, "imageID": "", "restartCount": c.restart_count,
          "ready": bool(c.proc is not None and c.exit_code is None and c.ready),
          "started": c.proc is not None and c.exit_code is None}
    if c.failed_to_start:
        st["state"] = {"waiting": {"reason": c.failed_to_start[0], "message": c.failed_to_start[1]}}
    elif c.proc is None:
        st["state"] = {"waiting": {"reason": "ContainerCreating"}}
    elif c.exit_code is None:
        st["state"] = {"running": {"startedAt": c.started_at}}
        st["containerID"] = "vitjob-local://%d" % c.proc.pid
    else:
        t = {"exitCode": c.exit_code, "reason": c.reason, "startedAt": c.started_at,
             "finishedAt": c.finished_at, "containerID": "vitjob-local://%d" % c.proc.pid}
        if c.message:
            t["message"] = c.message
        st["state"] = {"terminated": t}
    return st


def send(api, pod, node_ip):
    """PUTs pod's status where it changed since the last one the server took."""
    cs = [container_status(c) for c in pod.containers]
    running = [c for c in pod.containers if c.proc is not None and c.exit_code is None]
    ready = bool(running) and len(running) == len(pod.containers) and all(c.ready for c in running)
    t = now_rfc3339()
    conds = {"PodScheduled": "True", "Initialized": "True",
             "ContainersReady": "True" if ready else "False", "Ready": "True" if ready else "False"}
    old = {c["type"]: c for c in (pod.obj.get("status") or {}).get("conditions") or []}
    out = []
    for k, v in conds.items():
        o = old.get(k) or {}
        cond = {"type": k, "status": v,
                "lastTransitionTime": o.get("lastTransitionTime") if o.get("status") == v and
                o.get("lastTransitionTime") else t, "lastProbeTime": None}
        if v == "False" and k in ("Ready", "ContainersReady"):
            cond["reason"] = "PodCompleted" if pod.done else "ContainersNotReady"
        out.append(cond)
    for k, o in old.items():      # others' conditions (DisruptionTarget) stay
        if k not in conds:
            out.append(o)
    status = {"phase": pod.phase, "conditions": out, "hostIP": node_ip, "podIP": pod.ip,
              "podIPs": [{"ip": pod.ip}], "startTime": pod.start_time, "containerStatuses": cs,
              "qosClass": "Burstable"}
    key = json.dumps(status, sort_keys=True)
    if key == pod.status_sent:
        return
    body = dict(pod.obj)
    body["status"] = status
    r = api.call("PUT", "/api/v1/namespaces/%s/pods/%s/status" % (q(pod.ns), q(pod.name)), body)
    if r is not None and r.status == 200:
        pod.obj = r.body
        pod.status_sent = key
    elif r is not None and r.status == 409:
        g = api.call("GET", "/api/v1/namespaces/%s/pods/%s" % (q(pod.ns), q(pod.name)))
        if g is not None and g.status == 200:
            pod.obj = g.body
    elif r is not None and r.status != 404:
        log("warn", "status_refused", pod="%s/%s" % (pod.ns, pod.name), code=r.status,
            msg=(r.body or {}).get("message") if isinstance(r.body, dict) else r.body)
