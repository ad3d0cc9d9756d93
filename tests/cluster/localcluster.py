# tests/cluster/localcluster.py: a Kubernetes cluster on one machine, for the
# end-to-end test and `make demo`: the test API server (listening on the pod
# bridge too, its certificate valid for 10.89.0.1), the kube-controller-manager
# and scheduler stand-in (tests/cluster/controllers), one local kubelet per node
# (tests/cluster/kubelet), and optionally moto's S3 server (tests/s3/moto_server.py)
# reachable from pods at 10.89.0.1; install_operator() applies manifests/ and
# waits for the operator (`make demo`, `make cluster`: tests/cluster/up.py).
# kubectl() runs the real kubectl against it.
# stop() ends every process it started and removes the pod network (the netns
# vj-*, the bridge vjbr0), also after a kubelet was killed.
# Must not: touch anything outside its work directory but the pod network.

import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
from tests.cluster.harness import ServerProcess, stop_process
from tests.cluster.kubelet import logs as container_logs

BRIDGE = "vjbr0"
BRIDGE_IP = "10.89.0.1"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def missing_prerequisites():
    """Why this machine cannot run the local cluster, or None."""
    if os.geteuid() != 0:
        return "the local cluster needs root (network and mount namespaces)"
    for tool in ("ip", "nsenter", "unshare", "setpriv"):
        if shutil.which(tool) is None:
            return "%s not found (iproute2, util-linux)" % tool
    if not os.path.exists(KUBECTL):
        return "kubectl not installed"
    r = subprocess.run(["ip", "netns", "add", "vj-probe"], stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        return "network namespaces unavailable: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "del", "vj-probe"])
    return None


def cleanup_network():
    r = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, text=True)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith("vj-"):
            subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)
    subprocess.run(["ip", "link", "del", BRIDGE], stderr=subprocess.DEVNULL)


class LocalCluster:
    def __init__(self, work, nodes=2, s3=False, bin_dir=None, lease_seconds=1.0, grace_seconds=4.0,
                 node_cpu=0, verbose=False, worker_env=None):
        self.work = os.path.abspath(work)
        self.n_nodes = nodes
        self.want_s3 = s3
        self.bin_dir = os.path.abspath(bin_dir or os.path.join(ROOT, "build", "bin"))
        self.lease_seconds = lease_seconds
        self.grace_seconds = grace_seconds
        self.node_cpu = node_cpu
        self.verbose = verbose
        self.worker_env = dict(worker_env or {})  # the kubelets' --worker-env (a test's hook)
        self.server = None
        self.controllers = None
        self.kubelets = {}          # node name -> Popen
        self.moto = None
        self.s3 = None              # {AWS_ACCESS_KEY_ID, ..., S3_ENDPOINT (host), POD_ENDPOINT}
        self.logs = []

    # --------------------------------------------------------------- start

    def _log(self, name):
        f = open(os.path.join(self.work, name + ".log"), "a")
        self.logs.append(f)
        return f

    def start(self):
        os.makedirs(self.work, exist_ok=True)
        cleanup_network()
        self.server = ServerProcess(os.path.join(self.work, "apiserver"),
                                    args=["--address", "0.0.0.0", "--san", BRIDGE_IP])
        self.kubeconfig = self.server.kubeconfig
        self.controllers = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.controllers", "--kubeconfig", self.kubeconfig,
             "--node-monitor-grace-period", str(self.grace_seconds), "--node-monitor-period", "0.5"],
            stdout=self._log("controllers"), stderr=subprocess.STDOUT)
        for i in range(1, self.n_nodes + 1):
            self.start_node(i)
        if self.want_s3:
            self.start_s3()
        self.wait_nodes_ready()
        return self

    def start_node(self, i):
        name = "node-%d" % i
        cmd = [sys.executable, "-m", "tests.cluster.kubelet", "--apiserver-state", self.server.state,
               "--node", name, "--index", str(i), "--root", os.path.join(self.work, "nodes", name),
               "--bin-dir", self.bin_dir, "--lease-seconds", str(self.lease_seconds)]
        if self.node_cpu:
            cmd += ["--cpu", str(self.node_cpu)]
        for k, v in sorted(self.worker_env.items()):
            cmd += ["--worker-env", "%s=%s" % (k, v)]
        if self.verbose:
            cmd.append("-v")
        self.kubelets[name] = subprocess.Popen(cmd, stdout=self._log("kubelet-" + name), stderr=subprocess.STDOUT)

    def start_s3(self, bucket="vitjob"):
        env_out = os.path.join(self.work, "s3.env")
        py = shutil.which("python3") or sys.executable     # the Python that has moto (pyenv's)
        self.moto = subprocess.Popen([py, os.path.join(ROOT, "tests", "s3", "moto_server.py"), "--address",
                                      "0.0.0.0", "--port", "0", "--env-out", env_out, "--bucket", bucket],
                                     stdout=subprocess.DEVNULL, stderr=self._log("moto"))
        deadline = time.monotonic() + 60
        while not (os.path.exists(env_out) and os.path.getsize(env_out) > 0):
            if self.moto.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("moto did not start; see %s/moto.log" % self.work)
            time.sleep(0.1)
        env = {}
        with open(env_out) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                if k:
                    env[k] = v
        env["POD_ENDPOINT"] = env["S3_ENDPOINT"].replace("127.0.0.1", BRIDGE_IP)
        env["BUCKET"] = bucket
        self.s3 = env

    def wait_nodes_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            nodes = self.get_json("nodes")
            ready = [n for n in nodes.get("items", []) if any(
                c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))]
            if len(ready) >= self.n_nodes:
                return
            for name, p in self.kubelets.items():
                if p.poll() is not None:
                    raise RuntimeError("kubelet %s exited %s; see %s/kubelet-%s.log" % (name, p.returncode,
                                                                                        self.work, name))
            time.sleep(0.2)
        raise RuntimeError("nodes not Ready within %ss" % timeout)

    def install_operator(self, timeout=90):
        """`kubectl apply -f manifests/` (the CRD, RBAC and the operator's
        Deployment) and waits until an operator pod is Ready; kubectl's
        output."""
        out = self.kubectl("apply", "-f", os.path.join(ROOT, "manifests")).stdout
        deadline = time.monotonic() + timeout
        while True:
            pods = self.get_json("pods", "-n", "vitjob-system").get("items", [])
            if any(any(cd["type"] == "Ready" and cd["status"] == "True" for cd in p.get("status", {}).get(
                    "conditions", [])) for p in pods):
                return out
            if time.monotonic() > deadline:
                raise RuntimeError("the operator's pod is not Ready within %ss; see %s" % (timeout, self.work))
            time.sleep(0.5)

    # ------------------------------------------------------------- control

    def kubectl(self, *args, check=True, input=None, timeout=60):
        env = dict(os.environ, KUBECONFIG=self.kubeconfig)
        r = subprocess.run([KUBECTL] + list(args), env=env, input=input, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError("kubectl %s: %s" % (" ".join(args), r.stderr.strip()))
        return r

    def get_json(self, *args):
        r = self.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout else {}

    def kill_node(self, name):
        """The node dies: its kubelet and (through PDEATHSIG) its pods."""
        p = self.kubelets[name]
        p.send_signal(signal.SIGKILL)
        p.wait()

    def pod_log(self, pod):
        """The log of a pod's containers, every instance in order, from its
        kubelet's log directory (kept after deletion; CRI records as text)."""
        m = pod["metadata"]
        for name in self.kubelets:
            d = os.path.join(self.work, "nodes", name, "logs", "%s_%s_%s" % (m["namespace"], m["name"], m["uid"]))
            if os.path.isdir(d):
                out = []
                for c in sorted(os.listdir(d)):
                    files = [f for f in os.listdir(os.path.join(d, c)) if f.endswith(".log")]
                    for f in sorted(files, key=lambda f: int(f.split(".")[0])):
                        out.append(container_logs.text(os.path.join(d, c, f)).decode(errors="replace"))
                return "".join(out)
        return ""

    def stop(self):
        procs = [p for p in [self.controllers, self.moto] + list(self.kubelets.values()) if p is not None]
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            stop_process(p)
        if self.server is not None:
            self.server.stop()
        cleanup_network()
        for f in self.logs:
            f.close()
        self.logs = []
