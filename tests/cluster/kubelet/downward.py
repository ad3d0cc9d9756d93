# kubelet/downward.py: the downward API: a pod's field by its fieldPath
# (metadata.name/namespace/uid, a label or annotation, spec.nodeName,
# spec.serviceAccountName, status.podIP, status.hostIP), for env and volumes.
# Must not: read the API server (the kubelet's own record of the pod answers).


def field_ref(pod, path, node, node_ip):
    """The value of fieldPath path for pod on node (whose address is node_ip)."""
    m = pod.obj["metadata"]
    if path == "metadata.name":
        return m["name"]
    if path == "metadata.namespace":
        return m["namespace"]
    if path == "metadata.uid":
        return m["uid"]
    if path.startswith("metadata.labels['") and path.endswith("']"):
        return (m.get("labels") or {}).get(path[17:-2], "")
    if path.startswith("metadata.annotations['") and path.endswith("']"):
        return (m.get("annotations") or {}).get(path[22:-2], "")
    if path == "spec.nodeName":
        return node
    if path == "spec.serviceAccountName":
        return pod.obj["spec"].get("serviceAccountName", "")
    if path == "status.podIP":
        return pod.ip
    if path == "status.hostIP":
        return node_ip
    raise RuntimeError("fieldRef %s is not supported" % path)
