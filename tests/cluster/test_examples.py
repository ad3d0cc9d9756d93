#!/usr/bin/python3
# tests/cluster/test_examples.py: the example ViTJobs (examples/*.yaml,
# manifests/examples/cpu/, manifests/examples/gpu/) as a user applies them:
# every example has a name of its own (applying two never reconfigures the
# other), cpu/ holds only jobs without GPUs and gpu/ only jobs with them,
# every image is the project's worker image, and the CPU examples' pods
# all fit the local cluster of `make cluster` at once (two nodes of the
# smallest machine the project runs on, 2 CPUs each, the local kubelet's
# memory, after the operator's own pods), as `kubectl apply -f
# manifests/examples/cpu/` places them. No server needed. Run from the
# repository root:
#   /usr/bin/python3 -m tests.cluster.test_examples -v
# Must not: start anything.

import glob
import os
import re
import unittest

import yaml

from tests.cluster import testlimit
from tests.cluster.localcluster import ROOT

# a local node of `make cluster`: the kubelet registers os.cpu_count() CPUs
# (2 on the project's smallest machines) and its default memory
NODES = 2
NODE_CPU_MILLI = 2000
with open(os.path.join(ROOT, "tests", "cluster", "kubelet", "sync.py")) as _f:
    NODE_MEMORY = int(re.search(r"memory_mi or (\d+)\)", _f.read()).group(1)) << 20
WORKER_IMAGE = re.compile(r"^ghcr\.io/vitjob/vitjob-worker:[0-9][0-9A-Za-z.-]*$")


def quantity(q, cpu):
    """A Kubernetes quantity as millicores (cpu) or bytes."""
    s = str(q)
    m = re.fullmatch(r"([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", s)
    if not m:
        raise ValueError("quantity %r" % s)
    v, unit = float(m.group(1)), m.group(2) or ""
    mul = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[unit]
    return round(v * mul * 1000) if cpu else round(v * mul)


def requests_of(resources):
    r = (resources or {}).get("requests") or {}
    return quantity(r.get("cpu", 0), True), quantity(r.get("memory", 0), False)


def example_files():
    return sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml")) +
                  glob.glob(os.path.join(ROOT, "manifests", "examples", "**", "*.yaml"), recursive=True))


def jobs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "ViTJob"]


def operator_pods():
    """(cpu milli, memory bytes) of each pod of manifests/02-operator.yaml's Deployment."""
    with open(os.path.join(ROOT, "manifests", "02-operator.yaml")) as f:
        for d in yaml.safe_load_all(f):
            if d and d.get("kind") == "Deployment":
                c = d["spec"]["template"]["spec"]["containers"][0]
                return [requests_of(c.get("resources"))] * int(d["spec"].get("replicas", 1))
    raise AssertionError("manifests/02-operator.yaml has no Deployment")


def place(pods, nodes):
    """First fit, largest first: the pods that find no node."""
    free = [list(n) for n in nodes]
    left = []
    for name, cpu, mem in sorted(pods, key=lambda p: (-p[1], -p[2])):
        for n in free:
            if n[0] >= cpu and n[1] >= mem:
                n[0] -= cpu
                n[1] -= mem
                break
        else:
            left.append(name)
    return left


class ExamplesTest(unittest.TestCase):
    def test_every_example_job_has_a_name_of_its_own(self):
        seen = {}
        for path in example_files():
            for j in jobs(path):
                key = (j["metadata"].get("namespace", "default"), j["metadata"]["name"])
                if key in seen:
                    self.fail("%s and %s both name the ViTJob %s/%s" %
                              (os.path.relpath(seen[key], ROOT), os.path.relpath(path, ROOT), *key))
                seen[key] = path
        self.assertGreaterEqual(len(seen), 5)

    def test_cpu_holds_only_jobs_without_gpus_and_gpu_only_jobs_with_them(self):
        for kind in ("cpu", "gpu"):
            files = glob.glob(os.path.join(ROOT, "manifests", "examples", kind, "*.yaml"))
            self.assertTrue(files, "manifests/examples/%s/ is empty" % kind)
            for path in files:
                for j in jobs(path):
                    gpus = j["spec"].get("gpusPerReplica", 0)
                    req = (j["spec"].get("template") or {}).get("resources") or {}
                    asks = any("nvidia.com/gpu" in (req.get(k) or {}) for k in ("requests", "limits"))
                    self.assertEqual(gpus > 0 or asks, kind == "gpu",
                                     "%s: gpusPerReplica %s in %s/" % (os.path.relpath(path, ROOT), gpus, kind))
        self.assertEqual(sorted(os.listdir(os.path.join(ROOT, "manifests", "examples"))), ["cpu", "gpu"],
                         "every example is in cpu/ or gpu/")

    def test_every_example_runs_the_projects_worker_image(self):
        for path in example_files():
            for j in jobs(path):
                self.assertRegex(j["spec"].get("image", ""), WORKER_IMAGE, os.path.relpath(path, ROOT))

    def test_the_cpu_examples_fit_a_local_node_each_and_all_at_once_beside_the_operator(self):
        ops = operator_pods()
        # a node that also runs an operator pod (two of them spread over the two nodes)
        beside = (NODE_CPU_MILLI - ops[0][0], NODE_MEMORY - ops[0][1])
        pods = []
        for path in example_files():
            for j in jobs(path):
                s = j["spec"]
                if s.get("gpusPerReplica", 0):
                    continue
                cpu, mem = requests_of((s.get("template") or {}).get("resources"))
                name = "%s (%s)" % (j["metadata"]["name"], os.path.relpath(path, ROOT))
                self.assertTrue(cpu <= beside[0] and mem <= beside[1],
                                "%s: a pod requests %dm CPU and %d MiB, more than a local node has beside "
                                "the operator (%dm, %d MiB)" % (name, cpu, mem >> 20, beside[0], beside[1] >> 20))
                if "/manifests/examples/cpu/" in path:
                    pods += [("%s pod %d" % (name, r), cpu, mem) for r in range(int(s.get("replicas", 1)))]
        self.assertTrue(pods)
        nodes = [beside if i < len(ops) else (NODE_CPU_MILLI, NODE_MEMORY) for i in range(NODES)]
        self.assertEqual(place(pods, nodes), [],
                         "`kubectl apply -f manifests/examples/cpu/` on %d local nodes of %dm CPU leaves "
                         "these pods Pending" % (NODES, NODE_CPU_MILLI))


if __name__ == "__main__":
    testlimit.main(60)
