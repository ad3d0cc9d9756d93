# kubelet/node.py: this kubelet's Node object: registering it (labels,
# capacity and allocatable, addresses, the kubelet API's port in
# daemonEndpoints, nodeInfo), the heartbeat of its
# conditions (all healthy, Ready True; lastTransitionTime kept where the
# status did not change), and its Lease in kube-node-lease, made (owned by
# the Node) when missing.
# Must not: write another node's objects, or any pod.

import os

from .api import now_rfc3339, q
from .log import log

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


class Node:
    def __init__(self, api, name, address):
        self.api, self.name, self.address = api, name, address
        self.port = 0               # the kubelet API's (server.py), once it serves

    def register(self, cpu, mem):
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name,
                             "labels": {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                                        "kubernetes.io/arch": "amd64"}},
                "spec": {}}
        r = self.api.call("POST", "/api/v1/nodes", node)
        if r is None or r.status not in (201, 409):
            raise RuntimeError("cannot register node %s: %s" % (self.name, r))
        self.heartbeat(cpu, mem)
        lease_ns = "/api/v1/namespaces/kube-node-lease"
        if self.api.call("GET", lease_ns).status == 404:
            self.api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": "kube-node-lease"}})
        self.renew_lease()
        log("info", "node_registered", node=self.name, cpu=cpu, memory=mem, address=self.address)

    def heartbeat(self, cpu=None, mem=None):
        """The node's status: conditions, addresses, nodeInfo (and capacity, when given)."""
        t = now_rfc3339()
        st = {"conditions": [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
             "message": "kubelet has sufficient memory available", "lastHeartbeatTime": t},
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
             "message": "kubelet has no disk pressure", "lastHeartbeatTime": t},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
             "message": "kubelet has sufficient PID available", "lastHeartbeatTime": t},
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "kubelet is posting ready status", "lastHeartbeatTime": t}],
            "addresses": [{"type": "InternalIP", "address": self.address},
                          {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "nodeInfo": {"kubeletVersion": "v1.26.0-vitjob-local", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "vitjob-local://0",
                         "kernelVersion": os.uname().release, "osImage": "local processes",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}}
        if cpu is not None:
            cap = {"cpu": cpu, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"}
            st["capacity"] = cap
            st["allocatable"] = dict(cap)
        # keep lastTransitionTime where the status did not change
        cur = self.api.call("GET", "/api/v1/nodes/" + q(self.name))
        old = {}
        if cur is not None and cur.status == 200:
            old = {c["type"]: c for c in (cur.body.get("status") or {}).get("conditions") or []}
        for c in st["conditions"]:
            o = old.get(c["type"])
            c["lastTransitionTime"] = o["lastTransitionTime"] if o and o.get("status") == c["status"] \
                and o.get("lastTransitionTime") else t
        self.api.call("PATCH", "/api/v1/nodes/%s/status" % q(self.name), {"status": st},
                      ctype="application/strategic-merge-patch+json")

    def renew_lease(self):
        path = LEASES + "/" + q(self.name)
        t = now_rfc3339(micro=True)
        r = self.api.call("PATCH", path, {"spec": {"renewTime": t, "holderIdentity": self.name}},
                          ctype="application/merge-patch+json")
        if r is not None and r.status == 404:
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                     "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": t}}
            node = self.api.call("GET", "/api/v1/nodes/" + q(self.name))
            if node is not None and node.status == 200:
                lease["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.name,
                                                         "uid": node.body["metadata"]["uid"]}]
            self.api.call("POST", LEASES, lease)
