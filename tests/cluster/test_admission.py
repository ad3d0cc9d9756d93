#!/usr/bin/python3
# tests/cluster/test_admission.py: the operator plans a GPU job before its
# first pods (operator/admission.h), with the real planner (the build's
# vitjob-worker, found beside the operator) against the test API server, on
# the operator's own token and RBAC (manifests/), with the real kubectl.
#
# What it proves: a vit_h14 job that does not fit 80 GB GPUs unsharded fails
# with WillNotFit (the plan's numbers and its suggestion in the condition)
# before any pod, ConfigMap or PodGroup of it exists; the suggested change,
# applied, is accepted (its pods are created) and its plan is in status and
# in `kubectl get vj -o wide`; without spec.gpuMemory the GPU memory comes
# from the smallest nvidia.com/gpu.memory node label the job's nodeSelector
# allows; an elastic job that fits at replicas but not at minReplicas is
# admitted with condition ElasticWillNotFit naming the fewest replicas that
# fit; CPU jobs are not planned; a bad spec.gpuMemory is refused by the
# CRD's schema.
# Run: BUILD=build /usr/bin/python3 -m unittest tests/cluster/test_admission.py

import json
import os
import re
import time
import unittest

from tests.cluster import testlimit
from tests.cluster.harness import wait_for
from tests.cluster.test_operator import BUILD, PODS, Base, body, job_doc

PLANNER = os.path.join(BUILD, "bin", "vitjob-worker")
GIB = 1024 ** 3


def h14_doc(name, gpu_memory="80Gi", **training):
    """vit_h14 on 8 GPUs, micro-batch 128, unsharded, fp32: the plan needs
    more than 100 GiB per rank (vitjob's own activations; PyTorch's eager
    needs more, so the issue's micro-batch 64 fits here, see the note)."""
    train = {"steps": 100, "globalBatchSize": 1024, "microBatchSize": 128, "sharding": "none"}
    train.update(training)
    doc = job_doc(name, replicas=8, gpusPerReplica=1,
                  model={"preset": "vit_h14"},
                  data={"format": "webdataset", "uri": "s3://train/shard-{0000..0127}.tar"},
                  training=train)
    if gpu_memory:
        doc["spec"]["gpuMemory"] = gpu_memory
    return doc


def columns(table):
    """{header: cell} of kubectl's one-row table, cut at the headers'
    columns (empty cells leave blanks, so split() would misalign)."""
    header, row = table.splitlines()[:2]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    ends = starts[1:] + [None]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, ends)}


def gib(quantity):
    m = re.fullmatch(r"([0-9.]+)(Mi|Gi|Ti)", quantity)
    assert m, quantity
    return float(m.group(1)) * {"Mi": 1 / 1024, "Gi": 1, "Ti": 1024}[m.group(2)]


@unittest.skipUnless(os.path.exists(PLANNER), "worker not built: " + PLANNER)
class AdmissionTest(Base):
    def condition(self, name, type_):
        for c in self.status(name).get("conditions", []):
            if c["type"] == type_:
                return c
        return None

    def nothing_of(self, name):
        """No pod, ConfigMap or Service of the job was ever made (the
        operator makes them in that order after admission)."""
        self.assertEqual(self.pods(name), [])
        for kind in ("configmaps/%s-config" % name, "services/%s" % name):
            self.assertEqual(self.c.get("/api/v1/namespaces/default/" + kind).status, 404, kind)

    def test_vit_h14_unsharded_on_80gb_is_refused_before_any_pod_and_the_suggestion_is_accepted(self):
        self.apply(h14_doc("h14"))
        st = self.wait_phase("h14", "Failed", timeout=30)
        self.nothing_of("h14")
        failed = self.condition("h14", "Failed")
        self.assertEqual(failed["reason"], "WillNotFit")
        wnf = self.condition("h14", "WillNotFit")
        self.assertEqual((wnf["status"], wnf["reason"]), ("True", "ExceedsGPUMemory"))
        msg = wnf["message"]
        self.assertIn("a GPU has 80Gi (spec.gpuMemory=80Gi)", msg)
        self.assertIn("sharding none, micro-batch 128", msg)
        self.assertIn("activations", msg)
        need = gib(st["plannedMemoryPerRank"])
        self.assertGreater(need, 80, st)
        self.assertIn("needs %s of GPU memory per rank" % st["plannedMemoryPerRank"], msg)
        m = re.search(r"the cheapest change that fits: spec\.training\.(\w+)=(\w+) \(([0-9.]+\w+) per rank\)", msg)
        self.assertTrue(m, msg)
        self.assertEqual(m.group(1, 2), ("activationCheckpointing", "true"))
        ev = self.kubectl(["get", "events", "--field-selector", "involvedObject.name=h14"]).stdout
        self.assertIn("WillNotFit", ev)
        self.assertEqual(st["plannedGeneration"], self.job("h14")["metadata"]["generation"])
        # what a user does with it: the same job with the suggested change
        self.apply(h14_doc("h14-ckpt", activationCheckpointing=True))
        self.wait_pods("h14-ckpt", ["h14-ckpt-worker-%d-r0" % r for r in range(8)], timeout=30)
        st = self.status("h14-ckpt")
        self.assertEqual(st["phase"], "Pending")
        self.assertIsNone(self.condition("h14-ckpt", "WillNotFit"))
        self.assertEqual(st["plannedMemoryPerRank"], m.group(3), "the suggestion's total is the plan's")
        self.assertLess(gib(st["plannedMemoryPerRank"]), 80)
        self.assertGreater(st["plannedImagesPerSecond"], 0)
        # `kubectl get vj -o wide`: the planned beside the measured rate
        out = self.kubectl(["get", "vj", "h14-ckpt", "-o", "wide"]).stdout
        cells = columns(out)
        self.assertIn("IMG/S", cells, out)
        self.assertEqual(cells["PLANNED-MEM"], st["plannedMemoryPerRank"], out)
        self.assertAlmostEqual(float(cells["PLANNED-IMG/S"]), st["plannedImagesPerSecond"],
                               places=1)
        self.assertNotIn("PLANNED-IMG/S", self.kubectl(["get", "vj", "h14-ckpt"]).stdout)

    def test_without_spec_gpu_memory_the_smallest_gpu_memory_label_the_node_selector_allows_is_used(self):
        for name, mib, product, pool in (("gpu-a", "81559", "NVIDIA-H100-80GB-HBM3", "small"),
                                         ("gpu-b", "143771", "NVIDIA-H200", "big")):
            r = self.c.post("/api/v1/nodes", {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": mib,
                                                      "nvidia.com/gpu.product": product,
                                                      "pool": pool}}})
            self.assertIn(r.status, (201, 409), r)
        try:
            self.apply(h14_doc("h14-any", gpu_memory=None))
            self.wait_phase("h14-any", "Failed", timeout=30)
            self.nothing_of("h14-any")
            msg = self.condition("h14-any", "WillNotFit")["message"]
            self.assertIn("a GPU has 79.6Gi (node label nvidia.com/gpu.memory=81559 on node gpu-a, "
                          "the smallest of the nodes the job may run on)", msg)
            big = h14_doc("h14-big", gpu_memory=None)
            big["spec"]["template"] = {"nodeSelector": {"pool": "big"}}
            self.apply(big)
            self.wait_pods("h14-big", ["h14-big-worker-%d-r0" % r for r in range(8)], timeout=30)
            self.assertGreater(gib(self.status("h14-big")["plannedMemoryPerRank"]), 80)
            self.assertIsNone(self.condition("h14-big", "WillNotFit"))
            self.assertIn("h200", self.op_log_plan("h14-big"))
        finally:
            for name in ("gpu-a", "gpu-b"):
                self.c.delete("/api/v1/nodes/" + name)

    def op_log_plan(self, name):
        """The operator's event=planned line of a job (the device it planned for)."""
        lines = [l for l in self.ops[0].text().splitlines()
                 if "event=planned" in l and "key=default/%s " % name in l]
        self.assertTrue(lines, "no plan logged for " + name)
        return lines[-1]

    def test_an_elastic_job_that_fits_at_replicas_but_not_at_min_replicas_is_admitted_with_a_warning(self):
        # vit_h14 sharded full: each rank's shard grows as the ranks fall
        # (the planner: 8 ranks 8.4 GiB, 4 ranks 9.5 GiB, 2 ranks 11.9 GiB)
        doc = h14_doc("h14-el", gpu_memory="10Gi", sharding="full", precision="bf16-mixed",
                      microBatchSize=16)
        doc["spec"]["elastic"] = {"minReplicas": 2}
        self.apply(doc)
        self.wait_pods("h14-el", ["h14-el-worker-%d-r0" % r for r in range(8)], timeout=30)
        self.assertIsNone(self.condition("h14-el", "WillNotFit"), "admitted on its plan at replicas")
        wnf = wait_for("condition ElasticWillNotFit", lambda: self.condition("h14-el", "ElasticWillNotFit"), 10)
        self.assertEqual((wnf["status"], wnf["reason"]), ("True", "MinReplicasExceedsGPUMemory"), wnf)
        msg = wnf["message"]
        self.assertIn("at 2 replicas (2 ranks, elastic.minReplicas=2)", msg)
        self.assertIn("a GPU has 10Gi (spec.gpuMemory=10Gi)", msg)
        self.assertIn("set spec.elastic.minReplicas to 4", msg)
        ev = self.kubectl(["get", "events", "--field-selector", "involvedObject.name=h14-el"]).stdout
        self.assertIn("ElasticWillNotFit", ev)

    def test_cpu_jobs_are_not_planned(self):
        self.apply(job_doc("cpu-job"))
        self.wait_pods("cpu-job", ["cpu-job-worker-0-r0", "cpu-job-worker-1-r0"])
        time.sleep(0.5)
        self.assertNotIn("plannedMemoryPerRank", self.status("cpu-job"))

    def test_a_gpu_memory_that_is_not_a_quantity_is_refused_by_the_schema(self):
        r = self.kubectl(["apply", "-f", "-"], stdin=json.dumps(h14_doc("h14-bad", gpu_memory="lots")))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("spec.gpuMemory", r.stderr)


if __name__ == "__main__":
    testlimit.main(300)
