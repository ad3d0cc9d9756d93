#!/usr/bin/python3
# tests/cluster/test_kueue_operator.py: ViTJobs under Kueue (issue 45) on the
# local cluster, with the Kueue stand-in (controllers/kueue.py,
# kubeapi/kueue_webhook.py; what it reproduces: KUEUE_FACTS.md) and the
# operator from manifests/. A ClusterQueue whose quota fits one job (each
# job: 2 pods of 500m CPU), a LocalQueue "team", WorkloadPriorityClasses low
# and high. Proved here:
#   - two jobs in the queue: the second waits Queued (no pod runs, no
#     startTime: no deadline counts) and starts when the first Succeeds;
#   - a high-priority job preempts a running low-priority one: the low one's
#     ranks checkpoint on SIGTERM, the restart is a disruption, the job waits
#     Queued as a new pod group, resumes from its checkpoint when readmitted
#     and ends with the weights of an uninterrupted run, bit for bit.
# Needs root (network namespaces), iproute2 and kubectl; skipped, saying why,
# without them. Run from the repository root:
#   /usr/bin/python3 -m tests.cluster.test_kueue_operator -v

import json
import os
import re
import sys
import unittest

from tests.cluster import testlimit
from tests.cluster.harness import wait_for
from tests.cluster.localcluster import ROOT, missing_prerequisites
from tests.cluster.test_e2e import ClusterJobTest, job_manifest, pods_of, status

WHY_NOT = missing_prerequisites()
K = "kueue.x-k8s.io/"
# A running job waits before step HOLD while the class's hold file exists
# (ClusterJobTest.HOLDS), so that it is still running when the test needs it
# to be, whatever the machine's speed: the first job until the second is seen
# Queued, the low-priority one until it has been preempted. The 30-step jobs
# end before it.
HOLD = 60
QUEUE_OBJECTS = [
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
     "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
              "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                  "name": "default", "resources": [{"name": "cpu", "nominalQuota": "1"},
                                                   {"name": "memory", "nominalQuota": "1Gi"}]}]}]}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
     "metadata": {"name": "team", "namespace": "default"}, "spec": {"clusterQueue": "cq"}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "low"},
     "value": 100},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
     "value": 1000},
]


def queued(m, priority):
    m["metadata"]["labels"] = {K + "queue-name": "team", K + "priority-class": priority}
    return m


def cond(st, ctype):
    return next((c for c in st.get("conditions") or [] if c["type"] == ctype), {})


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class UnderKueue(ClusterJobTest):
    NODES = 2
    ref = None

    HOLDS = ((HOLD, "hold"),)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        c = cls.c
        c.kubectl("apply", "-f", os.path.join(ROOT, "tests", "cluster", "testdata", "kueue.crds.yaml"))
        wait_for("Kueue's API served", lambda: c.kubectl("get", "clusterqueues", check=False).returncode == 0,
                 60, 0.5)
        for o in QUEUE_OBJECTS:
            c.kubectl("apply", "-f", "-", input=json.dumps(o))

    def tearDown(self):
        for name in getattr(self, "jobs", []):
            self.c.kubectl("delete", "vj", name, "--wait=false", check=False)

    def wait_end(self, name, limit=600):
        st = wait_for("%s to end" % name, lambda: status(self.c, name).get("phase") in ("Succeeded", "Failed")
                      and status(self.c, name), limit, 1)
        self.assertEqual(st["phase"], "Succeeded", json.dumps(st.get("conditions")))
        return st

    def test_two_jobs_in_a_queue_that_fits_one_the_second_waits_queued_and_starts_when_the_first_ends(self):
        c = self.c
        self.jobs = ["kq-first", "kq-second"]
        self.hold()
        self.apply(queued(job_manifest("kq-first", "kueue/first", steps=100), "low"))
        wait_for("the first admitted", lambda: status(c, "kq-first").get("phase") in ("Running", "Succeeded"),
                 180, 0.5)
        self.apply(queued(job_manifest("kq-second", "kueue/second", steps=30), "low"))
        try:
            st = wait_for("the second Queued", lambda: status(c, "kq-second").get("phase") == "Queued"
                          and status(c, "kq-second"), 120, 0.5)
        except AssertionError:
            print(json.dumps(status(c, "kq-second"), indent=1), file=sys.stderr)
            for p in pods_of(c, "kq-second"):
                print(json.dumps({"meta": p["metadata"], "gates": p["spec"].get("schedulingGates"),
                                  "status": p.get("status")}, indent=1), file=sys.stderr)
            print(c.kubectl("get", "workloads", "-o", "yaml", check=False).stdout[-3000:], file=sys.stderr)
            raise
        q = cond(st, "Queued")
        self.assertEqual((q.get("status"), q.get("reason")), ("True", "WaitingForKueue"), q)
        self.assertIn("kueue.x-k8s.io/admission", q.get("message", ""))
        self.assertIn("default/team", q.get("message", ""))
        self.assertNotIn("startTime", st, "no clock runs while queued")
        for p in pods_of(c, "kq-second"):
            self.assertEqual(p["status"].get("phase"), "Pending", p["metadata"]["name"])
            self.assertIn({"name": "kueue.x-k8s.io/admission"}, p["spec"].get("schedulingGates") or [])
            self.assertEqual(p["metadata"]["labels"].get(K + "pod-group-name"), "kq-second-r0")
        row = c.kubectl("get", "vj", "kq-second", "--no-headers").stdout.split()
        self.assertEqual(row[1], "Queued", row)
        self.release()  # the first job trains on to its end
        self.wait_end("kq-first")
        st = self.wait_end("kq-second")
        q = cond(st, "Queued")
        self.assertEqual((q.get("status"), q.get("reason")), ("False", "Admitted"), q)
        self.assertEqual(st.get("restarts", 0), 0, st)

    def test_a_high_priority_job_preempts_a_low_one_which_checkpoints_queues_again_and_ends_bit_for_bit(self):
        c = self.c
        self.jobs = ["kq-low", "kq-high"]
        self.hold()
        low = queued(job_manifest("kq-low", "kueue/low", steps=100), "low")
        self.apply(low)
        wait_for("the low job's first checkpoint", lambda: (status(c, "kq-low").get("progress") or {}).get(
            "lastCheckpointStep", 0) >= 50, 240, 0.5)
        first = next(p for p in pods_of(c, "kq-low") if p["metadata"]["labels"]["vitjob.dev/rank"] == "0")
        self.apply(queued(job_manifest("kq-high", "kueue/high", steps=30), "high"))
        st = wait_for("the low job preempted", lambda: status(c, "kq-low").get("restarts", 0) >= 1
                      and status(c, "kq-low"), 180, 0.5)
        self.assertEqual(st.get("disruptionRestarts"), 1, "preemption spends no backoffLimit: %s" % st)
        self.assertIn("evicted by Kueue (WorkloadEvictedDueToPreempted)", cond(st, "Restarting").get("message", ""))
        wait_for("the low job Queued again", lambda: status(c, "kq-low").get("phase") == "Queued", 120, 0.5)
        self.release()  # readmitted, it trains on to its end
        self.wait_end("kq-high")
        st = self.wait_end("kq-low")
        self.assertEqual((st.get("restarts"), st.get("disruptionRestarts")), (1, 1), st)
        log0 = c.pod_log(first)
        self.assertRegex(log0, r"exit_code=143", "the preempted rank stopped on SIGTERM: " + log0[-1500:])
        saved = [int(s) for s in re.findall(r"event=saved step=(\d+)", log0)]
        log1 = c.pod_log(self.rank0_of_gen("kq-low", 1))
        resumed = re.search(r"event=resumed step=(\d+)", log1)
        self.assertTrue(resumed, log1[-2000:])
        self.assertTrue(saved, log0[-1500:])
        self.assertEqual(int(resumed.group(1)), max(saved), "resumed from the newest checkpoint it saved")
        ours = self.export("s3://vitjob/kueue/low/step-%09d" % 100, os.path.join(self.work, "kq-low.st"))
        ref = self.reference_run(low, "kueue/ref")[1]
        self.assertEqual(ours, ref, "final weights differ from the uninterrupted run")


if __name__ == "__main__":
    testlimit.main(900)
