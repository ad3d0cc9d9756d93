# kubelet/sync.py: the kubelet's loop: every --period seconds it renews the
# Lease (every --lease-seconds) and the node status (every 10 s), lists pods
# and services, and syncs the pods bound to this node (spec.nodeName): admits
# new ones (address, hosts file, a first status), starts and restarts their
# containers, keeps their hosts files and status current; a pod being
# deleted gets SIGTERM, the grace period, SIGKILL, then its final status and
# the deletion confirmed (grace 0), as a real kubelet does; a pod gone from
# the API (force-deleted) has its processes killed. One failed pass is
# logged and never ends the node; SIGTERM or SIGINT stops it, killing its
# pods.
# Must not: touch pods of other nodes; hold the logic of one concern (the
# other modules of this package do).

import os
import shutil
import signal
import time

from tests.cluster.kubeapi import tls

from . import dns, status
from .api import Api, q
from .log import log
from .network import PodNetwork
from .node import Node
from .pods import Pod, reap
from .runtime import Runtime
from .server import KubeletServer
from .volumes import Volumes


class Kubelet:
    def __init__(self, args):
        self.args = args
        self.api = Api(args.apiserver_state)
        self.root = os.path.abspath(args.root)
        self.net = PodNetwork(args.node, args.index)
        self.node = Node(self.api, args.node, self.net.node_ip)
        self.server = None          # the kubelet API (server.py), from run()
        with open(self.api.ca_path) as f:
            ca_pem = f.read()
        volumes = Volumes(self.api, args.node, self.net.node_ip, ca_pem)
        self.runtime = Runtime(self.api, args.node, self.net.node_ip, self.root, os.path.abspath(args.bin_dir),
                               volumes)
        self.pods = {}              # uid -> Pod
        self.next_lease = 0.0
        self.next_heartbeat = 0.0
        self.stopping = False

    def start_pod(self, obj):
        uid = obj["metadata"]["uid"]
        root = os.path.join(self.root, "pods", uid)
        os.makedirs(root, exist_ok=True)
        ip, netns, veth = self.net.alloc()
        pod = Pod(obj, ip, netns, veth, root)
        self.pods[uid] = pod
        dns.init_files(root, pod.ns)
        log("info", "pod_admitted", pod="%s/%s" % (pod.ns, pod.name), ip=ip, netns=netns)
        # the address first, so that peers' hosts files know it before the pod runs
        self.send_status(pod)
        return pod

    def send_status(self, pod):
        status.send(self.api, pod, self.net.node_ip)

    def finish_deletion(self, pod):
        """The end of a graceful deletion: the final status, then the
        deletion confirmed (grace 0), as a real kubelet does."""
        self.runtime.stop(pod)
        if pod.phase in ("Running", "Pending"):
            pod.phase = "Succeeded" if pod.containers and all(c.exit_code == 0 for c in pod.containers) \
                else "Failed"
        self.send_status(pod)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": pod.uid}}
        r = self.api.call("DELETE", "/api/v1/namespaces/%s/pods/%s" % (q(pod.ns), q(pod.name)), body)
        if r is not None and r.status not in (200, 202, 404, 409):
            log("warn", "delete_refused", pod="%s/%s" % (pod.ns, pod.name), code=r.status)
            return
        self.forget(pod)
        log("info", "pod_deleted", pod="%s/%s" % (pod.ns, pod.name))

    def forget(self, pod):
        self.runtime.stop(pod)
        self.net.free(pod)
        self.pods.pop(pod.uid, None)
        shutil.rmtree(pod.root, ignore_errors=True)

    def step(self):
        t = time.monotonic()
        if t >= self.next_lease:
            self.node.renew_lease()
            self.next_lease = t + self.args.lease_seconds
        if t >= self.next_heartbeat:
            self.node.heartbeat()
            self.next_heartbeat = t + 10
        r = self.api.call("GET", "/api/v1/pods")
        s = self.api.call("GET", "/api/v1/services")
        if r is None or r.status != 200 or s is None or s.status != 200:
            return
        all_pods = r.body.get("items") or []
        entries = dns.entries(all_pods, s.body.get("items") or [])
        mine = {p["metadata"]["uid"]: p for p in all_pods
                if (p.get("spec") or {}).get("nodeName") == self.node.name}
        # pods removed from the API (force-deleted): their processes go
        for uid in list(self.pods):
            if uid not in mine:
                pod = self.pods[uid]
                log("info", "pod_gone", pod="%s/%s" % (pod.ns, pod.name))
                self.forget(pod)
        for uid, obj in mine.items():
            pod = self.pods.get(uid)
            meta = obj["metadata"]
            deleting = meta.get("deletionTimestamp") is not None
            if pod is None:
                phase = (obj.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed") and not deleting:
                    continue        # finished before this kubelet started
                if deleting:
                    body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
                    self.api.call("DELETE", "/api/v1/namespaces/%s/pods/%s" % (q(meta["namespace"]),
                                                                               q(meta["name"])), body)
                    continue
                try:
                    pod = self.start_pod(obj)
                except RuntimeError as e:
                    log("error", "pod_network_failed", pod="%s/%s" % (meta["namespace"], meta["name"]), msg=e)
                    continue
            else:
                pod.obj = obj
            if deleting:
                self.sync_deletion(pod, t)
            else:
                self.sync_pod(pod, entries, t)

    def sync_deletion(self, pod, t):
        """A pod being deleted: SIGTERM once, SIGKILL after the grace period."""
        if pod.term_sent is None:
            grace = pod.obj["metadata"].get("deletionGracePeriodSeconds", 30) or 0
            pod.term_sent = t
            pod.kill_at = t + grace
            log("info", "pod_killing", pod="%s/%s" % (pod.ns, pod.name), grace_s=grace)
            self.runtime.send_signal(pod, signal.SIGTERM)
        reap(pod)
        alive = [c for c in pod.containers if c.proc is not None and c.exit_code is None]
        if not alive or t >= pod.kill_at:
            self.finish_deletion(pod)

    def sync_pod(self, pod, entries, t):
        """A running pod: its hosts file, containers due to (re)start, probes, status."""
        dns.write_hosts(pod, entries)
        reap(pod)
        if not pod.done:
            for c in pod.containers:
                if c.failed_to_start is not None:
                    due = t >= c.next_start
                elif c.proc is None:
                    due = True
                else:
                    due = c.exit_code is not None and c.next_start > 0 and t >= c.next_start
                if not due:
                    continue
                c.next_start = 0.0
                self.runtime.start(pod, c)
                if c.failed_to_start is not None:
                    c.next_start = t + 2
            if any(c.proc is not None and c.exit_code is None for c in pod.containers):
                pod.phase = "Running"
        for c in pod.containers:
            self.runtime.probe(pod, c)
        self.send_status(pod)

    def stop_all(self):
        for pod in list(self.pods.values()):
            self.runtime.send_signal(pod, signal.SIGKILL)
            self.net.free(pod)

    def serve(self):
        """The kubelet API on the node's address; its port goes into the Node's daemonEndpoints."""
        crt, key = tls.self_signed(os.path.join(self.root, "pki"), self.node.name, [self.net.node_ip])
        self.server = KubeletServer(self, self.net.node_ip, self.args.port, crt, key, self.api.ca_path).start()
        self.node.port = self.server.port
        log("info", "serving", address="%s:%d" % (self.net.node_ip, self.server.port))

    def run(self):
        self.net.up()
        self.serve()
        self.node.register(str(self.args.cpu or os.cpu_count() or 1), "%dMi" % (self.args.memory_mi or 8192))

        def stop(signum, frame):
            self.stopping = True
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while not self.stopping:
            try:
                self.step()
            except Exception as e:      # one bad pass never kills the node
                log("error", "step_failed", error="%s: %s" % (type(e).__name__, e))
            time.sleep(self.args.period)
        log("info", "stopping", node=self.node.name, pods=len(self.pods))
        self.stop_all()
        self.server.shutdown()
        self.net.down()
