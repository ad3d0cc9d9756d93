# controllers/taints.py: the node taints the node lifecycle controller
# manages (their keys, and the node conditions they follow), and whether a
# pod's tolerations tolerate a taint, as the scheduler and the taint manager
# both ask.
# Must not: call the API server.

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
CONDITION_TAINTS = {           # condition type -> {status: taint key} (NoSchedule)
    "Ready": {"False": NOT_READY, "Unknown": UNREACHABLE},
    "MemoryPressure": {"True": "node.kubernetes.io/memory-pressure"},
    "DiskPressure": {"True": "node.kubernetes.io/disk-pressure"},
    "PIDPressure": {"True": "node.kubernetes.io/pid-pressure"},
    "NetworkUnavailable": {"True": "node.kubernetes.io/network-unavailable"},
}
MANAGED_NOSCHEDULE = {UNSCHEDULABLE} | {k for m in CONDITION_TAINTS.values() for k in m.values()}
MANAGED_NOEXECUTE = {UNREACHABLE, NOT_READY}


def tolerates(tol, taint):
    """ToleratesTaint of k8s.io/api/core/v1, as written there."""
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if tol.get("key") and tol["key"] != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Equal":
        return (tol.get("value") or "") == (taint.get("value") or "")
    return op == "Exists"


def untolerated(pod, taints, effects):
    """The first taint with one of these effects that the pod does not tolerate, or None."""
    tols = (pod.get("spec") or {}).get("tolerations") or []
    for t in taints:
        if t.get("effect") in effects and not any(tolerates(x, t) for x in tols):
            return t
    return None
