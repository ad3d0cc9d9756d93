#!/usr/bin/python3
# tests/cluster/kubelet: a local kubelet for the one-machine test cluster (a
# test and demo tool, never shipped). One process is one node:
#
#   kubelet --apiserver-state DIR --node NAME --index N --root DIR --bin-dir build/bin
#           [--lease-seconds 1] [--cpu N] [--memory-mi N] [-v]
#
# It registers the Node (Ready, capacity, allocatable) and renews its Lease in
# kube-node-lease, and runs the pods bound to it (spec.nodeName) as local
# processes, as a real kubelet runs containers:
#   - images: `*vitjob-worker*` and `*vitjob-operator*` run the binaries of
#     --bin-dir, whose parent (the build: bin/, lib/) each pod sees read-only
#     at /opt/vitjob as its image (the entrypoint is the binary of that name;
#     a container `command` is looked up on a PATH that starts with
#     /opt/vitjob/bin);
#     any other image fails the container (reason ErrImagePull).
#   - each pod has its own network namespace with a veth on the bridge vjbr0
#     (10.89.0.1/16 on the host side), address 10.89.N.K, its own UTS
#     namespace (hostname = spec.hostname or the pod name) and a private mount
#     namespace in which /etc/hosts is the pod's own: the pod itself, and every
#     pod of its namespace with hostname + subdomain where a headless Service
#     of that subdomain exists, as <hostname>.<subdomain>.<ns>.svc and
#     .svc.cluster.local (what cluster DNS answers), rewritten in place as pods
#     come and go; its /etc/resolv.conf names no reachable server, so that a
#     name the hosts file lacks fails at once.
#   - ConfigMap, Secret, projected (service-account token through the
#     TokenRequest API, kube-root-ca.crt, downward API), downward API and
#     emptyDir volumes are written under --root and bind-mounted at their
#     mountPath (missing mount points are made on a pod-private overlay of the
#     parent, so nothing is created on the host); env from value, secretKeyRef,
#     configMapKeyRef and fieldRef; KUBERNETES_SERVICE_HOST/PORT point at the
#     API server through the bridge; runAsUser/runAsGroup/fsGroup are honoured
#     (setpriv).
#   - status: phase, conditions, podIP/hostIP, containerStatuses with exit codes
#     and, for terminationMessagePolicy FallbackToLogsOnError, the log's tail as
#     the message; readiness probes (httpGet); restartPolicy Always/OnFailure
#     restart in place with back-off.
#   - deletion: SIGTERM, the grace period, SIGKILL, then the kubelet confirms
#     the deletion (grace 0), as a real one does.
#   - killing the kubelet kills its pods (every container has PR_SET_PDEATHSIG
#     SIGKILL): a node that dies takes its pods with it.
# Not emulated: images and their filesystems (pods see the host's), resource
# limits (cgroups), liveness probes, readOnlyRootFilesystem, exec probes.
# Needs root (namespaces, veth, mounts) and iproute2, util-linux.
# Must not: log a token or a secret; touch pods of other nodes.

import argparse
import base64
import ctypes
import datetime
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import http.client

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from kubeclient import for_server  # noqa: E402

# where a pod finds its "image": the build directory (bin/, lib/) mounted read-only
IMAGE_DIR = "/opt/vitjob"
BRIDGE = "vjbr0"
BRIDGE_IP = "10.89.0.1"
PREFIX = 16
PR_SET_PDEATHSIG = 1
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
VERBOSE = False


def log(level, event, **kv):
    if level == "debug" and not VERBOSE:
        return
    parts = ["ts=%s" % datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
             "level=%s" % level, "comp=kubelet", "event=%s" % event]
    for k, v in kv.items():
        s = str(v)
        if any(c in s for c in ' "=') or not s:
            s = '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append("%s=%s" % (k, s))
    print(" ".join(parts), file=sys.stderr, flush=True)


def now_rfc3339(micro=False):
    t = datetime.datetime.now(datetime.timezone.utc)
    if micro:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def sh(*args, check=True):
    r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), r.stderr.strip()))
    return r


def ensure_bridge():
    """The host side of the pod network, made once by whichever kubelet comes first."""
    with open("/run/vitjob-kubelet-net.lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
            sh("ip", "link", "add", BRIDGE, "type", "bridge")
            sh("ip", "addr", "add", "%s/%d" % (BRIDGE_IP, PREFIX), "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")


_libc = ctypes.CDLL(None, use_errno=True)


def _child_setup():
    # the container dies with its kubelet (the node), and gets a process group
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.setsid()


class Api:
    """The admin client (a real kubelet uses its node credentials)."""

    def __init__(self, state):
        with open(os.path.join(state, "port")) as f:
            self.port = int(f.read())
        with open(os.path.join(state, "token")) as f:
            token = f.read().strip()
        self.ca_path = os.path.join(state, "pki", "ca.crt")
        self.client = for_server(self.port, self.ca_path, token)

    def call(self, method, path, body=None, ctype="application/json"):
        try:
            r = self.client.request(method, path, body, ctype=ctype)
        except (OSError, http.client.HTTPException) as e:
            log("warn", "api_error", method=method, path=path, error=e)
            return None
        return r


def q(s):
    return urllib.parse.quote(s, safe="")


class Container:
    def __init__(self, spec):
        self.spec = spec
        self.name = spec["name"]
        self.proc = None
        self.log_path = None
        self.started_at = None
        self.finished_at = None
        self.exit_code = None
        self.reason = None
        self.message = None
        self.restart_count = 0
        self.next_start = 0.0
        self.ready = False
        self.probe_fails = 0
        self.probe_ok = 0
        self.next_probe = 0.0
        self.failed_to_start = None


class Pod:
    def __init__(self, obj, ip, netns, veth, root):
        self.obj = obj
        self.uid = obj["metadata"]["uid"]
        self.ns = obj["metadata"]["namespace"]
        self.name = obj["metadata"]["name"]
        self.ip, self.netns, self.veth, self.root = ip, netns, veth, root
        self.containers = [Container(c) for c in obj["spec"].get("containers", [])]
        self.term_sent = None       # monotonic time SIGTERM went out
        self.kill_at = None
        self.phase = "Pending"
        self.start_time = now_rfc3339()
        self.hosts_text = None
        self.status_sent = None
        self.done = False           # terminal: no more containers run


class Kubelet:
    def __init__(self, args):
        self.args = args
        self.api = Api(args.apiserver_state)
        self.node = args.node
        self.index = args.index
        self.root = os.path.abspath(args.root)
        self.bin_dir = os.path.abspath(args.bin_dir)
        self.pods = {}              # uid -> Pod
        self.used_ips = set()
        self.next_lease = 0.0
        self.next_heartbeat = 0.0
        self.stopping = False
        self.node_ip = "10.89.%d.1" % self.index
        with open(self.api.ca_path) as f:
            self.ca_pem = f.read()

    # ------------------------------------------------------------- the node

    def register(self):
        cpu = str(self.args.cpu or os.cpu_count() or 1)
        mem = "%dMi" % (self.args.memory_mi or 8192)
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node,
                             "labels": {"kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux",
                                        "kubernetes.io/arch": "amd64"}},
                "spec": {}}
        r = self.api.call("POST", "/api/v1/nodes", node)
        if r is None or r.status not in (201, 409):
            raise RuntimeError("cannot register node %s: %s" % (self.node, r))
        self.node_status(cpu, mem)
        lease_ns = "/api/v1/namespaces/kube-node-lease"
        if self.api.call("GET", lease_ns).status == 404:
            self.api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": "kube-node-lease"}})
        self.renew_lease()
        log("info", "node_registered", node=self.node, cpu=cpu, memory=mem, address=self.node_ip)

    def node_status(self, cpu=None, mem=None):
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
            "addresses": [{"type": "InternalIP", "address": self.node_ip},
                          {"type": "Hostname", "address": self.node}],
            "nodeInfo": {"kubeletVersion": "v1.26.0-vitjob-local", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "vitjob-local://0",
                         "kernelVersion": os.uname().release, "osImage": "local processes",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}}
        if cpu is not None:
            cap = {"cpu": cpu, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"}
            st["capacity"] = cap
            st["allocatable"] = dict(cap)
        # keep lastTransitionTime where the status did not change
        cur = self.api.call("GET", "/api/v1/nodes/" + q(self.node))
        old = {}
        if cur is not None and cur.status == 200:
            old = {c["type"]: c for c in (cur.body.get("status") or {}).get("conditions") or []}
        for c in st["conditions"]:
            o = old.get(c["type"])
            c["lastTransitionTime"] = o["lastTransitionTime"] if o and o.get("status") == c["status"] \
                and o.get("lastTransitionTime") else t
        self.api.call("PATCH", "/api/v1/nodes/%s/status" % q(self.node), {"status": st},
                      ctype="application/strategic-merge-patch+json")

    def renew_lease(self):
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + q(self.node)
        t = now_rfc3339(micro=True)
        r = self.api.call("PATCH", path, {"spec": {"renewTime": t, "holderIdentity": self.node}},
                          ctype="application/merge-patch+json")
        if r is not None and r.status == 404:
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": self.node, "namespace": "kube-node-lease"},
                     "spec": {"holderIdentity": self.node, "leaseDurationSeconds": 40, "renewTime": t}}
            node = self.api.call("GET", "/api/v1/nodes/" + q(self.node))
            if node is not None and node.status == 200:
                lease["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.node,
                                                         "uid": node.body["metadata"]["uid"]}]
            self.api.call("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)

    # -------------------------------------------------------------- network

    def alloc_net(self):
        for k in range(2, 255):
            if k not in self.used_ips:
                self.used_ips.add(k)
                break
        else:
            raise RuntimeError("no pod address left on node %s" % self.node)
        ip = "10.89.%d.%d" % (self.index, k)
        netns = "vj-%s-%d" % (self.node, k)
        host_if = "vjh%dx%d" % (self.index, k)
        sh("ip", "netns", "del", netns, check=False)
        sh("ip", "link", "del", host_if, check=False)
        sh("ip", "netns", "add", netns)
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", netns)
        sh("ip", "link", "set", host_if, "master", BRIDGE, "up")
        sh("ip", "-n", netns, "link", "set", "lo", "up")
        sh("ip", "-n", netns, "addr", "add", "%s/%d" % (ip, PREFIX), "dev", "eth0")
        sh("ip", "-n", netns, "link", "set", "eth0", "up")
        sh("ip", "-n", netns, "route", "add", "default", "via", BRIDGE_IP)
        return ip, netns, host_if

    def free_net(self, pod):
        sh("ip", "netns", "del", pod.netns, check=False)
        sh("ip", "link", "del", pod.veth, check=False)
        try:
            self.used_ips.discard(int(pod.ip.rsplit(".", 1)[1]))
        except ValueError:
            pass

    def clean_stale(self):
        """Namespaces and interfaces a previous run of this node left (killed with -9)."""
        r = sh("ip", "netns", "list", check=False)
        for line in r.stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith("vj-%s-" % self.node):
                sh("ip", "netns", "del", name, check=False)
        r = sh("ip", "-o", "link", "show", check=False)
        for line in r.stdout.splitlines():
            f = line.split(":")
            if len(f) > 1:
                name = f[1].strip().split("@")[0]
                if name.startswith("vjh%dx" % self.index):
                    sh("ip", "link", "del", name, check=False)

    # ------------------------------------------------------------- volumes

    def get_obj(self, kind, ns, name):
        r = self.api.call("GET", "/api/v1/namespaces/%s/%s/%s" % (q(ns), kind, q(name)))
        return r.body if r is not None and r.status == 200 else None

    def sa_token(self, pod, audiences, seconds):
        sa = pod.obj["spec"].get("serviceAccountName") or "default"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": audiences, "expirationSeconds": seconds,
                         "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod.name,
                                            "uid": pod.uid}}}
        r = self.api.call("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (q(pod.ns), q(sa)), body)
        if r is None or r.status != 201:
            raise RuntimeError("serviceaccount %s/%s: token request failed (%s)" %
                               (pod.ns, sa, r.status if r is not None else "no answer"))
        return r.body["status"]["token"]

    def field_ref(self, pod, path):
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
            return self.node
        if path == "spec.serviceAccountName":
            return pod.obj["spec"].get("serviceAccountName", "")
        if path == "status.podIP":
            return pod.ip
        if path == "status.hostIP":
            return self.node_ip
        raise RuntimeError("fieldRef %s is not supported" % path)

    def key_files(self, data, items, binary=False):
        """{relative path: bytes} of a ConfigMap's or Secret's data."""
        out = {}
        conv = (lambda v: base64.b64decode(v)) if binary else (lambda v: v.encode())
        if items:
            for it in items:
                if it["key"] not in data:
                    raise RuntimeError("key %s not found" % it["key"])
                out[it["path"]] = conv(data[it["key"]])
        else:
            for k, v in data.items():
                out[k] = conv(v)
        return out

    def volume_files(self, pod, vol):
        """(kind, {path: bytes}) for one volume, or ('emptyDir', None)."""
        if "emptyDir" in vol:
            return None
        if "configMap" in vol:
            src = vol["configMap"]
            cm = self.get_obj("configmaps", pod.ns, src["name"])
            if cm is None:
                if src.get("optional"):
                    return {}
                raise RuntimeError('configmap "%s" not found' % src["name"])
            return self.key_files(cm.get("data") or {}, src.get("items"))
        if "secret" in vol:
            src = vol["secret"]
            s = self.get_obj("secrets", pod.ns, src["secretName"])
            if s is None:
                if src.get("optional"):
                    return {}
                raise RuntimeError('secret "%s" not found' % src["secretName"])
            return self.key_files(s.get("data") or {}, src.get("items"), binary=True)
        if "downwardAPI" in vol:
            return {it["path"]: self.field_ref(pod, it["fieldRef"]["fieldPath"]).encode()
                    for it in vol["downwardAPI"].get("items", [])}
        if "projected" in vol:
            out = {}
            for s in vol["projected"].get("sources", []):
                if "serviceAccountToken" in s:
                    t = s["serviceAccountToken"]
                    aud = [t["audience"]] if t.get("audience") else []
                    out[t["path"]] = self.sa_token(pod, aud, t.get("expirationSeconds", 3607)).encode()
                elif "configMap" in s:
                    name = s["configMap"]["name"]
                    cm = self.get_obj("configmaps", pod.ns, name)
                    data = (cm or {}).get("data")
                    if cm is None and name == "kube-root-ca.crt":
                        data = {"ca.crt": self.ca_pem}   # published by a controller we do not run
                    if data is None:
                        raise RuntimeError('configmap "%s" not found' % name)
                    out.update(self.key_files(data, s["configMap"].get("items")))
                elif "secret" in s:
                    sec = self.get_obj("secrets", pod.ns, s["secret"]["name"])
                    if sec is None:
                        raise RuntimeError('secret "%s" not found' % s["secret"]["name"])
                    out.update(self.key_files(sec.get("data") or {}, s["secret"].get("items"), binary=True))
                elif "downwardAPI" in s:
                    for it in s["downwardAPI"].get("items", []):
                        out[it["path"]] = self.field_ref(pod, it["fieldRef"]["fieldPath"]).encode()
            return out
        raise RuntimeError("volume %s: this kubelet does not support its type" % vol.get("name"))

    def write_volumes(self, pod, uid, gid):
        """Materializes every volume; {name: host directory}."""
        out = {}
        for vol in pod.obj["spec"].get("volumes") or []:
            d = os.path.join(pod.root, "volumes", vol["name"])
            os.makedirs(d, exist_ok=True)
            files = self.volume_files(pod, vol)
            mode = 0o1777 if files is None else 0o755
            os.chmod(d, mode)
            for rel, data in (files or {}).items():
                p = os.path.join(d, rel)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "wb") as f:
                    f.write(data)
                os.chmod(p, 0o644 if uid is None else 0o640)
                if uid is not None:
                    os.chown(p, uid, gid)
            out[vol["name"]] = d
        return out

    # ---------------------------------------------------------------- start

    def env_for(self, pod, c):
        env = {"PATH": IMAGE_DIR + "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOSTNAME": pod.obj["spec"].get("hostname") or pod.name,
               "HOME": "/",
               "KUBERNETES_SERVICE_HOST": BRIDGE_IP,
               "KUBERNETES_SERVICE_PORT": str(self.api.port),
               "KUBERNETES_SERVICE_PORT_HTTPS": str(self.api.port),
               "KUBERNETES_PORT": "tcp://%s:%d" % (BRIDGE_IP, self.api.port)}
        for e in c.get("env") or []:
            if "value" in e:
                v = e["value"]
                for k2, v2 in env.items():      # $(VAR) references to earlier variables
                    v = v.replace("$(%s)" % k2, v2)
                env[e["name"]] = v
                continue
            vf = e.get("valueFrom") or {}
            if "fieldRef" in vf:
                env[e["name"]] = self.field_ref(pod, vf["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in vf:
                ref = vf["secretKeyRef"]
                s = self.get_obj("secrets", pod.ns, ref["name"])
                if s is None or ref["key"] not in (s.get("data") or {}):
                    if ref.get("optional"):
                        continue
                    raise RuntimeError('secret "%s" not found' % ref["name"] if s is None else
                                       "couldn't find key %s in Secret %s/%s" % (ref["key"], pod.ns, ref["name"]))
                env[e["name"]] = base64.b64decode(s["data"][ref["key"]]).decode()
            elif "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                cm = self.get_obj("configmaps", pod.ns, ref["name"])
                if cm is None or ref["key"] not in (cm.get("data") or {}):
                    if ref.get("optional"):
                        continue
                    raise RuntimeError('configmap "%s" not found' % ref["name"] if cm is None else
                                       "couldn't find key %s in ConfigMap %s/%s" % (ref["key"], pod.ns, ref["name"]))
                env[e["name"]] = cm["data"][ref["key"]]
            else:
                raise RuntimeError("env %s: this kubelet does not support its valueFrom" % e["name"])
        return env

    def argv_for(self, c):
        image = c.get("image") or ""
        if "vitjob-worker" in image:
            entry = ["vitjob-worker"]
        elif "vitjob-operator" in image:
            entry = ["vitjob-operator"]
        else:
            raise LookupError('image "%s": this kubelet runs only vitjob-worker and vitjob-operator '
                              "images (from %s)" % (image, self.bin_dir))
        argv = list(c.get("command") or entry) + list(c.get("args") or [])
        if "/" not in argv[0] and os.path.exists(os.path.join(self.bin_dir, argv[0])):
            argv[0] = os.path.join(IMAGE_DIR, "bin", argv[0])
        return argv

    def mount_script(self, pod, c, vols, hosts_path, hostname):
        """The shell lines run inside the pod's namespaces before exec."""
        lines = ["set -e", 'hostname "$1"', "shift"]
        targets = []
        for vm in c.get("volumeMounts") or []:
            src = vols.get(vm["name"])
            if src is None:
                raise RuntimeError("volumeMount %s: no volume of that name" % vm["name"])
            if vm.get("subPath"):
                src = os.path.join(src, vm["subPath"])
            targets.append((vm["mountPath"], src, vm.get("readOnly", False)))
        # the image, as a real container has it whatever the pod mounts
        # (an emptyDir at /tmp would hide a build under /tmp)
        targets.append((IMAGE_DIR, os.path.dirname(self.bin_dir), True))
        targets.append(("/etc/hosts", hosts_path, False))
        # cluster DNS is the hosts file: a resolver that fails at once (nothing
        # listens on the pod's own loopback) instead of waiting on the host's
        targets.append(("/etc/resolv.conf", os.path.join(pod.root, "resolv.conf"), False))
        ovl = os.path.join(pod.root, "overlay-" + c["name"])
        os.makedirs(ovl, exist_ok=True)
        overlaid = []
        n = 0
        for path, src, _ in sorted(targets, key=lambda t: t[0].count("/")):
            real = os.path.realpath(path)
            if os.path.lexists(real) or any(real.startswith(o + "/") for o in overlaid):
                continue
            parent = os.path.dirname(real)
            while not os.path.isdir(parent):
                parent = os.path.dirname(parent)
            if parent == "/":
                raise RuntimeError("mountPath %s: cannot make a mount point under /" % path)
            d = os.path.join(ovl, str(n))
            n += 1
            lines += ["mount -t tmpfs tmpfs '%s'" % d, "mkdir -p '%s/u' '%s/w'" % (d, d),
                      "mount -t overlay overlay -o 'lowerdir=%s,upperdir=%s/u,workdir=%s/w' '%s'" %
                      (parent, d, d, parent)]
            os.makedirs(d, exist_ok=True)
            overlaid.append(parent)
        # parents before children; a mount over a directory that holds a
        # source of another mount (a pod's emptyDir at /tmp, over the kubelet's
        # root or the build) last, so that it does not hide them
        sources = [t[1] for t in targets]

        def order(t):
            real = os.path.realpath(t[0]) if os.path.lexists(t[0]) else t[0]
            return (any(src.startswith(real.rstrip("/") + "/") for src in sources), real.count("/"))
        for path, src, ro in sorted(targets, key=order):
            real = os.path.realpath(path) if os.path.lexists(path) else path
            kind = "-f" if os.path.isfile(src) else "-d"
            mk = "mkdir -p '%s'" % real if kind == "-d" else "[ -e '%s' ] || touch '%s'" % (real, real)
            lines += [mk, "mount --bind '%s' '%s'" % (src, real)]
            if ro:
                lines.append("mount -o remount,bind,ro '%s'" % real)
        return lines

    def start_container(self, pod, c):
        spec = c.spec
        psc = pod.obj["spec"].get("securityContext") or {}
        csc = spec.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", uid))
        fs_group = psc.get("fsGroup")
        c.failed_to_start = None
        try:
            argv = self.argv_for(spec)
        except LookupError as e:
            c.failed_to_start = ("ErrImagePull", str(e))
            log("warn", "image_unknown", pod="%s/%s" % (pod.ns, pod.name), container=c.name, msg=e)
            return
        try:
            env = self.env_for(pod, spec)
            vols = self.write_volumes(pod, uid, fs_group if fs_group is not None else gid)
            hostname = pod.obj["spec"].get("hostname") or pod.name
            lines = self.mount_script(pod, spec, vols, os.path.join(pod.root, "hosts"), hostname)
        except (RuntimeError, KeyError, ValueError, OSError) as e:
            c.failed_to_start = ("CreateContainerConfigError", str(e))
            log("warn", "container_config_error", pod="%s/%s" % (pod.ns, pod.name), container=c.name, msg=e)
            return
        if spec.get("workingDir"):
            lines.append("cd '%s'" % spec["workingDir"])
        if uid is not None:
            groups = [str(g) for g in ([gid] if gid is not None else []) +
                      ([fs_group] if fs_group is not None else []) + list(psc.get("supplementalGroups") or [])]
            lines.append('exec setpriv --reuid %d --regid %d --groups %s --pdeathsig KILL -- "$@"' %
                         (uid, gid if gid is not None else uid, ",".join(groups) or str(uid)))
        else:
            lines.append('exec "$@"')
        # logs outlive the pod (as /var/log/pods): <root>/logs/<ns>_<pod>_<uid>/<container>.log
        logdir = os.path.join(self.root, "logs", "%s_%s_%s" % (pod.ns, pod.name, pod.uid))
        os.makedirs(logdir, exist_ok=True)
        c.log_path = os.path.join(logdir, "%s.log" % c.name)
        logf = open(c.log_path, "ab")
        cmd = ["nsenter", "--net=/run/netns/" + pod.netns, "unshare", "--mount", "--uts",
               "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(lines), "sh", hostname] + argv
        try:
            c.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env,
                                      preexec_fn=_child_setup, close_fds=True)
        except OSError as e:
            c.failed_to_start = ("StartError", str(e))
            logf.close()
            return
        logf.close()
        c.started_at = now_rfc3339()
        c.exit_code = c.reason = c.message = c.finished_at = None
        c.ready = not spec.get("readinessProbe")
        c.probe_ok = c.probe_fails = 0
        c.next_probe = time.monotonic() + (spec.get("readinessProbe") or {}).get("initialDelaySeconds", 0)
        log("info", "container_started", pod="%s/%s" % (pod.ns, pod.name), container=c.name, pid=c.proc.pid,
            ip=pod.ip, restarts=c.restart_count)

    def start_pod(self, obj):
        uid = obj["metadata"]["uid"]
        root = os.path.join(self.root, "pods", uid)
        os.makedirs(root, exist_ok=True)
        ip, netns, veth = self.alloc_net()
        pod = Pod(obj, ip, netns, veth, root)
        self.pods[uid] = pod
        with open(os.path.join(root, "hosts"), "w") as f:
            f.write("127.0.0.1\tlocalhost\n")
        with open(os.path.join(root, "resolv.conf"), "w") as f:
            f.write("search %s.svc.cluster.local svc.cluster.local cluster.local\n"
                    "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n" % obj["metadata"]["namespace"])
        log("info", "pod_admitted", pod="%s/%s" % (pod.ns, pod.name), ip=ip, netns=netns)
        # the address first, so that peers' hosts files know it before the pod runs
        self.send_status(pod)
        return pod

    # --------------------------------------------------------------- status

    def container_status(self, pod, c):
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

    def send_status(self, pod):
        cs = [self.container_status(pod, c) for c in pod.containers]
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
        status = {"phase": pod.phase, "conditions": out, "hostIP": self.node_ip, "podIP": pod.ip,
                  "podIPs": [{"ip": pod.ip}], "startTime": pod.start_time, "containerStatuses": cs,
                  "qosClass": "Burstable"}
        key = json.dumps(status, sort_keys=True)
        if key == pod.status_sent:
            return
        body = dict(pod.obj)
        body["status"] = status
        r = self.api.call("PUT", "/api/v1/namespaces/%s/pods/%s/status" % (q(pod.ns), q(pod.name)), body)
        if r is not None and r.status == 200:
            pod.obj = r.body
            pod.status_sent = key
        elif r is not None and r.status == 409:
            g = self.api.call("GET", "/api/v1/namespaces/%s/pods/%s" % (q(pod.ns), q(pod.name)))
            if g is not None and g.status == 200:
                pod.obj = g.body
        elif r is not None and r.status != 404:
            log("warn", "status_refused", pod="%s/%s" % (pod.ns, pod.name), code=r.status,
                msg=(r.body or {}).get("message") if isinstance(r.body, dict) else r.body)

    def log_tail(self, c):
        try:
            with open(c.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - LOG_TAIL_BYTES))
                data = f.read()
        except OSError:
            return ""
        lines = data.decode("utf-8", "replace").splitlines()[-LOG_TAIL_LINES:]
        return "\n".join(lines)[-LOG_TAIL_BYTES:]

    # ----------------------------------------------------------- lifecycles

    def reap(self, pod):
        """Records the exit of containers that ended; sets a finished pod's phase."""
        exited_now = False
        policy = pod.obj["spec"].get("restartPolicy", "Always")
        for c in pod.containers:
            if c.proc is None or c.exit_code is not None:
                continue
            rc = c.proc.poll()
            if rc is None:
                continue
            c.exit_code = rc if rc >= 0 else 128 - rc
            c.finished_at = now_rfc3339()
            c.reason = "Completed" if c.exit_code == 0 else "Error"
            if c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError" and c.exit_code != 0:
                c.message = self.log_tail(c)
            exited_now = True
            log("info", "container_exited", pod="%s/%s" % (pod.ns, pod.name), container=c.name,
                exit_code=c.exit_code)
            if pod.term_sent is None and (policy == "Always" or (policy == "OnFailure" and c.exit_code != 0)):
                c.restart_count += 1
                c.next_start = time.monotonic() + min(300, 2 ** min(c.restart_count, 8) / 2)
        if exited_now and pod.term_sent is None:
            exited = [c for c in pod.containers if c.exit_code is not None]
            if len(exited) == len(pod.containers):
                if policy == "Never":
                    pod.done = True
                    pod.phase = "Succeeded" if all(c.exit_code == 0 for c in exited) else "Failed"
                elif policy == "OnFailure" and all(c.exit_code == 0 for c in exited):
                    pod.done = True
                    pod.phase = "Succeeded"

    def probe(self, pod, c):
        p = c.spec.get("readinessProbe") or {}
        hg = p.get("httpGet")
        if not hg or c.proc is None or c.exit_code is not None or time.monotonic() < c.next_probe:
            return
        c.next_probe = time.monotonic() + p.get("periodSeconds", 10)
        port = hg.get("port")
        if isinstance(port, str) and not port.isdigit():
            port = next((cp["containerPort"] for cp in c.spec.get("ports") or [] if cp.get("name") == port), None)
        ok = False
        if port is not None:
            try:
                conn = http.client.HTTPConnection(pod.ip, int(port), timeout=p.get("timeoutSeconds", 1))
                conn.request("GET", hg.get("path", "/"))
                ok = 200 <= conn.getresponse().status < 400
                conn.close()
            except (OSError, http.client.HTTPException):
                ok = False
        if ok:
            c.probe_fails = 0
            c.probe_ok += 1
            if c.probe_ok >= p.get("successThreshold", 1):
                c.ready = True
        else:
            c.probe_ok = 0
            c.probe_fails += 1
            if c.probe_fails >= p.get("failureThreshold", 3):
                c.ready = False

    def signal_pod(self, pod, sig):
        for c in pod.containers:
            if c.proc is not None and c.exit_code is None:
                try:
                    os.killpg(c.proc.pid, sig)
                except ProcessLookupError:
                    pass

    def stop_containers(self, pod):
        """SIGKILL to what still runs, then its exit recorded."""
        self.signal_pod(pod, signal.SIGKILL)
        for c in pod.containers:
            if c.proc is not None:
                try:
                    c.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        self.reap(pod)

    def finish_deletion(self, pod):
        """The end of a graceful deletion: the final status, then the
        deletion confirmed (grace 0), as a real kubelet does."""
        self.stop_containers(pod)
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
        self.stop_containers(pod)
        self.free_net(pod)
        self.pods.pop(pod.uid, None)
        shutil.rmtree(pod.root, ignore_errors=True)

    # ------------------------------------------------------------------ DNS

    def dns(self, all_pods, services):
        """ns -> [(ip, names...)] for pods with hostname + subdomain of a headless Service."""
        headless = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in services
                    if (s.get("spec") or {}).get("clusterIP") == "None"}
        out = {}
        for p in all_pods:
            spec, st = p.get("spec") or {}, p.get("status") or {}
            ns = p["metadata"]["namespace"]
            ip = st.get("podIP")
            if not ip or not spec.get("hostname") or not spec.get("subdomain") or \
                    (ns, spec["subdomain"]) not in headless or st.get("phase") in ("Succeeded", "Failed"):
                continue
            h, sd = spec["hostname"], spec["subdomain"]
            out.setdefault(ns, []).append((ip, "%s.%s.%s.svc.cluster.local" % (h, sd, ns),
                                           "%s.%s.%s.svc" % (h, sd, ns), "%s.%s" % (h, sd)))
        return out

    def write_hosts(self, pod, entries):
        spec = pod.obj["spec"]
        h = spec.get("hostname") or pod.name
        lines = ["# Kubernetes-managed hosts file (vitjob local kubelet).",
                 "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        own = [h]
        if spec.get("subdomain"):
            sd = spec["subdomain"]     # as the kubelet writes it, plus what cluster DNS answers
            own = ["%s.%s.%s.svc.cluster.local" % (h, sd, pod.ns), "%s.%s.%s.svc" % (h, sd, pod.ns),
                   "%s.%s" % (h, sd), h]
        lines.append("%s\t%s" % (pod.ip, "\t".join(own)))
        for e in sorted(entries.get(pod.ns, [])):
            if e[0] != pod.ip:
                lines.append("\t".join(e))
        text = "\n".join(lines) + "\n"
        if text == pod.hosts_text:
            return
        # in place: the pod's /etc/hosts is a bind mount of this inode
        with open(os.path.join(pod.root, "hosts"), "r+") as f:
            f.seek(0)
            f.write(text)
            f.truncate()
        pod.hosts_text = text

    # ----------------------------------------------------------------- loop

    def step(self):
        t = time.monotonic()
        if t >= self.next_lease:
            self.renew_lease()
            self.next_lease = t + self.args.lease_seconds
        if t >= self.next_heartbeat:
            self.node_status()
            self.next_heartbeat = t + 10
        r = self.api.call("GET", "/api/v1/pods")
        s = self.api.call("GET", "/api/v1/services")
        if r is None or r.status != 200 or s is None or s.status != 200:
            return
        all_pods = r.body.get("items") or []
        entries = self.dns(all_pods, s.body.get("items") or [])
        mine = {p["metadata"]["uid"]: p for p in all_pods if (p.get("spec") or {}).get("nodeName") == self.node}
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
                if pod.term_sent is None:
                    grace = meta.get("deletionGracePeriodSeconds", 30) or 0
                    pod.term_sent = t
                    pod.kill_at = t + grace
                    log("info", "pod_killing", pod="%s/%s" % (pod.ns, pod.name), grace_s=grace)
                    self.signal_pod(pod, signal.SIGTERM)
                self.reap(pod)
                alive = [c for c in pod.containers if c.proc is not None and c.exit_code is None]
                if not alive or t >= pod.kill_at:
                    self.finish_deletion(pod)
                continue
            self.write_hosts(pod, entries)
            self.reap(pod)
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
                    self.start_container(pod, c)
                    if c.failed_to_start is not None:
                        c.next_start = t + 2
                if any(c.proc is not None and c.exit_code is None for c in pod.containers):
                    pod.phase = "Running"
            for c in pod.containers:
                self.probe(pod, c)
            self.send_status(pod)

    def stop_all(self):
        for pod in list(self.pods.values()):
            self.signal_pod(pod, signal.SIGKILL)
            self.free_net(pod)

    def run(self):
        ensure_bridge()
        sh("ip", "addr", "add", "%s/%d" % (self.node_ip, PREFIX), "dev", BRIDGE, check=False)
        self.clean_stale()
        self.register()

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
        log("info", "stopping", node=self.node, pods=len(self.pods))
        self.stop_all()
        sh("ip", "addr", "del", "%s/%d" % (self.node_ip, PREFIX), "dev", BRIDGE, check=False)


def main():
    global VERBOSE
    p = argparse.ArgumentParser(description="a local kubelet: runs the pods of one node as processes")
    p.add_argument("--apiserver-state", required=True, help="the test API server's state directory")
    p.add_argument("--node", required=True)
    p.add_argument("--index", type=int, required=True, help="1-254: the node's pod subnet 10.89.N.0/24")
    p.add_argument("--root", required=True, help="where pods' volumes, logs and hosts files live")
    p.add_argument("--bin-dir", required=True, help="the build's bin directory (vitjob-worker, vitjob-operator)")
    p.add_argument("--lease-seconds", type=float, default=10.0, help="seconds between Lease renewals")
    p.add_argument("--period", type=float, default=0.3, help="seconds between sync passes")
    p.add_argument("--cpu", type=int, default=0)
    p.add_argument("--memory-mi", type=int, default=0)
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    VERBOSE = args.verbose
    if not 1 <= args.index <= 254:
        print("kubelet: --index %d: must be 1-254" % args.index, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("kubelet: needs root (network and mount namespaces)", file=sys.stderr)
        return 2
    for tool in ("ip", "nsenter", "unshare", "setpriv"):
        if shutil.which(tool) is None:
            print("kubelet: %s not found (iproute2, util-linux)" % tool, file=sys.stderr)
            return 2
    os.makedirs(args.root, exist_ok=True)
    Kubelet(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
