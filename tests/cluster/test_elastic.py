#!/usr/bin/python3
# tests/cluster/test_elastic.py: elastic gangs (issue 44, operator/elastic.h)
# on the local cluster at upstream node-lifecycle defaults (Lease every 10 s,
# 40 s node-monitor grace), three 2-CPU nodes, S3 checkpoints. A 3-replica
# job (1500m per pod: one per node) with elastic.minReplicas 2 loses a node
# that does not come back: once the node is declared lost its pod is gone,
# the next generation's third pod cannot be placed, and after
# pendingTimeoutSeconds the job shrinks to 2 (a disruption, status.worldSize
# 2, condition Elastic ShrunkUnschedulable) and trains on from its
# checkpoint at the same global batch. The node comes back: as soon as it
# is Ready the job grows to 3 (growCheckSeconds is 600, so only the
# operator's Node watch can start that growth in time; the Growing event
# names the node), then condition Elastic Grown, and it Succeeds.
# Then the same config is trained uninterrupted by 3 ranks on loopback: the
# steps before the shrink's resume print the same, the first 20 after it
# (at 2 ranks: the same samples summed in another order) too, the loss of
# every 100 steps is within 10% and the final test accuracy within 1 point.
# The job waits at two steps while files exist (VITJOB_TEST_HOLD, below),
# so that the order of events holds on a machine of any speed. Timings are
# printed, never asserted; the order of events and the outcome are. Needs root (network namespaces), iproute2 and kubectl; skipped,
# saying why, without them. Run from the repository root:
#   /usr/bin/python3 -m tests.cluster.test_elastic -v

import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from tests.cluster import testlimit
from tests.cluster.harness import wait_for
from tests.cluster.kubelet import logs as container_logs
from tests.cluster.kubelet.env import reference_worker_env
from tests.cluster.localcluster import missing_prerequisites
from tests.cluster.test_e2e import BUILD, ClusterJobTest, job_manifest, pods_of, status, worker_pid

WHY_NOT = missing_prerequisites()


def ready(node):
    return next((cd["status"] for cd in node.get("status", {}).get("conditions", []) if cd["type"] == "Ready"),
                None)


def cond(st, ctype):
    return next((c for c in st.get("conditions") or [] if c["type"] == ctype), {})


STEP = re.compile(r"comp=train step=(\d+)/\d+ epoch=\S+ (loss=\S+) lr=\S+ (grad_norm=\S+)")
RESUMED = re.compile(r"event=resumed step=(\d+) from_world_size=(\d+)")
WORLD = re.compile(r"comp=rdzv event=rendezvous rank=0 world=(\d+)")


def rank0_run(text):
    """What rank 0's log says: its world size, the step it resumed from (0:
    none) and each step's printed loss and grad_norm."""
    world, resumed = WORLD.search(text), RESUMED.search(text)
    return (int(world.group(1)) if world else 1, int(resumed.group(1)) if resumed else 0,
            {int(m.group(1)): (m.group(2), m.group(3)) for m in STEP.finditer(text)})


def generations(c, name):
    """rank0_run of each generation of the job that trained, by generation,
    from rank 0's log in its kubelet's log directory (kept after deletion)."""
    out = {}
    for d in glob.glob(os.path.join(c.work, "nodes", "*", "logs", "default_%s-worker-0-r*_*" % name)):
        gen = int(re.search(r"-r(\d+)_", os.path.basename(d)).group(1))
        files = sorted(glob.glob(os.path.join(d, "*", "*.log")))
        run = rank0_run("".join(container_logs.text(f).decode(errors="replace") for f in files))
        if run[2]:
            out[gen] = run
    return out


def reference_run(c, name, work, world):
    """The job's own worker config (its ConfigMap) trained uninterrupted by
    `world` ranks on loopback, checkpoints in a local folder: (rank 0's log,
    its metrics lines)."""
    cfg = json.loads(c.get_json("configmap", name + "-config")["data"]["config.json"])
    cfg["checkpoint"].update(uri="file://" + os.path.join(work, "ck"), endpoint="", credentialsSecret="")
    path = os.path.join(work, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(world):
        # a pod's environment, not this machine's (kubelet/env.py)
        env = reference_worker_env(VITJOB_REPLICAS=str(world), VITJOB_RANK=str(r), VITJOB_RESTART="0",
                                   VITJOB_RDZV_ENDPOINT="127.0.0.1:%d" % port, VITJOB_COMM_HOST="127.0.0.1")
        args = [os.path.join(BUILD, "bin", "vitjob-worker"), "train", "--config", path, "--log-level", "info"]
        if r == 0:
            args += ["--metrics", os.path.join(work, "metrics.jsonl")]
        with open(os.path.join(work, "rank-%d.log" % r), "w") as log:
            procs.append(subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=log))
    for r, p in enumerate(procs):
        rc = p.wait(timeout=1200)
        if rc != 0:
            with open(os.path.join(work, "rank-%d.log" % r)) as f:
                raise AssertionError("the reference run's rank %d exited %d:\n%s" % (r, rc, f.read()[-2000:]))
    with open(os.path.join(work, "rank-0.log")) as f, open(os.path.join(work, "metrics.jsonl")) as m:
        return f.read(), [json.loads(l) for l in m]


# The job is held at steps the test chooses instead of racing its training
# (ClusterJobTest.HOLDS): every generation waits before step HOLD_1 while the
# file hold-1 exists (removed once the job has shrunk: the 3-rank generation
# is still there when the node dies, whatever the machine's speed) and
# before step HOLD_2 while hold-2 exists (removed once the job has grown
# back: the 2-rank generation is still training when the node returns, and
# the grown one until the test has seen it running). Checkpoints every 50
# steps: the shrunk generation resumes from step 50, the grown one from the
# checkpoint the 2-rank generation writes as it stops to grow.
STEPS = 350
HOLD_1, HOLD_2 = 100, 250


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class Elastic(ClusterJobTest):
    NODES = 3
    CLUSTER = dict(lease_seconds=10, grace_seconds=40, node_cpu=2)  # upstream node-lifecycle defaults

    # hold-2 also before the step after HOLD_2: the 2-rank generation,
    # stopped to grow while it waits there, runs step HOLD_2 and stores it,
    # so the grown one resumes past it
    HOLDS = ((HOLD_1, "hold-1"), (HOLD_2, "hold-2"), (HOLD_2 + 1, "hold-2"))

    def test_a_lost_node_shrinks_the_gang_to_what_fits_and_its_return_grows_it_back(self):
        c, name = self.c, "el-job"
        self.hold("hold-1")
        self.hold("hold-2")
        m = job_manifest(name, "elastic/job", steps=STEPS)
        m["spec"]["replicas"] = 3
        m["spec"]["training"].update(globalBatchSize=96, microBatchSize=16)  # whole micro-batches at 3 and 2
        # growCheckSeconds 600: the growth below can only come from the node's return
        m["spec"]["elastic"] = {"minReplicas": 2, "pendingTimeoutSeconds": 15, "growCheckSeconds": 600}
        m["spec"]["template"]["resources"]["requests"]["cpu"] = "1500m"  # one rank per node
        self.apply(m)
        t0 = time.time()
        wait_for("the first checkpoint", lambda: (status(c, name).get("progress") or {}).get(
            "lastCheckpointStep", 0) >= 50, 300, 0.5)
        pid = worker_pid(name, 0)
        with open("/proc/%d/environ" % pid, "rb") as f:  # the image's ENV reached the worker
            self.assertIn(b"VITJOB_TEST_HOLD=%d:" % HOLD_1, f.read())
        _, op_node = self.leader()
        pods = pods_of(c, name)
        victim = next(p["spec"]["nodeName"] for p in pods if p["spec"]["nodeName"] != op_node)
        t = {"kill": time.time()}
        c.kill_node(victim)
        wait_for("%s declared lost" % victim, lambda: ready(c.get_json("node", victim)) != "True", 180, 0.5)
        t["node_lost"] = time.time()
        st = wait_for("the shrink to 2", lambda: status(c, name).get("worldSize") == 2 and status(c, name),
                      300, 0.5)
        t["shrunk"] = time.time()
        print("\nat the shrink: %s" % json.dumps(st.get("conditions")), file=sys.stderr)
        shrunk = [e for e in c.get_json("events", "--field-selector", "involvedObject.name=" + name)["items"]
                  if e.get("reason") == "ShrunkUnschedulable"]
        self.assertTrue(shrunk, "an event says the job shrank")
        self.assertIn("3 to 2", shrunk[0].get("message", ""), shrunk[0])
        self.assertGreaterEqual(st.get("disruptionRestarts", 0), 1, st)
        self.assertEqual(st.get("restarts", 0), st.get("disruptionRestarts", 0), "no backoffLimit spent: %s" % st)
        self.release("hold-1")
        st = wait_for("training at 2", lambda: status(c, name).get("phase") == "Running" and (
            status(c, name).get("progress") or {}).get("step", 0) > st.get("progress", {}).get("step", 0)
            and status(c, name), 300, 0.5)
        t["training_at_2"] = time.time()
        print("training at 2: %s" % json.dumps(st.get("conditions")), file=sys.stderr)
        self.assertEqual(st.get("worldSize"), 2, st)
        for p in pods_of(c, name):
            gen = int(p["metadata"]["labels"]["vitjob.dev/restart"])
            if gen == st["restarts"] + st.get("resumes", 0):
                env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0].get("env", [])}
                self.assertEqual(env.get("VITJOB_REPLICAS"), "2", p["metadata"]["name"])
        # the node comes back: the job grows as soon as it is Ready
        c.start_node(int(victim.split("-")[1]))
        wait_for("%s Ready again" % victim, lambda: ready(c.get_json("node", victim)) == "True", 120, 0.5)
        t["node_back"] = time.time()
        st = wait_for("the growth to 3", lambda: status(c, name).get("worldSize") == 3
                      and status(c, name).get("phase") == "Running" and status(c, name), 300, 0.5)
        t["grown"] = time.time()
        self.assertEqual(cond(st, "Elastic").get("reason"), "Grown", cond(st, "Elastic"))
        growing = [e for e in c.get_json("events", "--field-selector", "involvedObject.name=" + name)["items"]
                   if e.get("reason") == "Growing"]
        self.assertTrue(growing, "an event says the job grows")
        self.assertIn("node %s became Ready" % victim, growing[0].get("message", ""), growing[0])
        self.release("hold-2")
        st = wait_for("the end", lambda: status(c, name).get("phase") in ("Succeeded", "Failed")
                      and status(c, name), 900, 1)
        self.assertEqual(st["phase"], "Succeeded", json.dumps(st.get("conditions")))
        self.assertEqual(st.get("restarts"), st.get("disruptionRestarts"), st)
        print("\nelastic: %s (seconds after the kill; the job started %.0f s before it)" % (", ".join(
            "%s %+.1f" % (k, v - t["kill"]) for k, v in t.items() if k != "kill"), t["kill"] - t0),
            file=sys.stderr)
        events = c.get_json("events", "--field-selector", "involvedObject.name=" + name)["items"]
        print("its events:\n" + "".join("  %s %s %s\n" % (e.get("lastTimestamp"), e.get("reason"),
                                                           (e.get("message") or "")[:300]) for e in events),
              file=sys.stderr)
        self.compare_with_an_uninterrupted_run(name, st)
        c.kubectl("delete", "vj", name, "--wait=false")

    def compare_with_an_uninterrupted_run(self, name, st):
        """The elastic run against the same config trained by 3 ranks
        without interruption (bit-identical at the same world size: ranks.bats):
        every step before the shrink's resume printed the same; the steps
        after it, at 2 ranks (another summation order of the same samples),
        within the print's precision at first and close over the run; the
        final test accuracy within 1 point."""
        gens = generations(self.c, name)
        worlds = [(g, w, resumed) for g, (w, resumed, _) in sorted(gens.items())]
        self.assertEqual([w for _, w, _ in worlds if w == 2][:1], [2], "a generation trained at 2: %s" % worlds)
        shrink_gen, _, shrink_from = next(x for x in worlds if x[1] == 2)
        self.assertGreater(shrink_from, 0, "the shrunk generation resumed from a checkpoint: %s" % worlds)
        steps = {}
        for g in sorted(gens):  # a step redone by a later generation is that one's
            steps.update(gens[g][2])
        with tempfile.TemporaryDirectory(prefix="vj-elastic-ref-") as work:
            ref_log, ref_metrics = reference_run(self.c, name, work, 3)
        ref = rank0_run(ref_log)[2]
        self.assertEqual(sorted(steps), sorted(ref), "the elastic run printed every step once")
        before = [s for s in sorted(ref) if s <= shrink_from]
        self.assertEqual([steps[s] for s in before], [ref[s] for s in before],
                         "steps 1-%d (3 ranks, before the shrink's resume) as the uninterrupted run" % shrink_from)

        def loss(v):
            return float(v[0].split("=")[1])
        first = [s for s in sorted(ref) if shrink_from < s <= shrink_from + 20]
        worst_first = max(abs(loss(steps[s]) - loss(ref[s])) for s in first)
        # windows of 100 steps: the mean loss (another world size sums the same
        # samples in another order: the runs part slowly, as any two do)
        windows = []
        for lo in range(shrink_from, max(ref), 100):
            w = [s for s in ref if lo < s <= lo + 100]
            a, b = (sum(loss(x[s]) for s in w) / len(w) for x in (steps, ref))
            windows.append(round(abs(a - b) / b, 4))
        acc, ref_acc = (st.get("progress") or {}).get("testAccuracy"), ref_metrics[-1].get("test_accuracy")
        print("elastic vs uninterrupted: steps 1-%d identical; the first 20 at 2 ranks within %.2g; "
              "100-step mean loss within %.2g%% (worst window); test accuracy %.4f vs %.4f" % (
                  shrink_from, worst_first, 100 * max(windows), acc, ref_acc), file=sys.stderr)
        self.assertLessEqual(worst_first, 2e-4, "the first 20 steps after the shrink, printed to 1e-4")
        print("the windows' relative differences: %s" % windows, file=sys.stderr)
        # measured: 2.3% to 4.5% worst over 2,000 steps (bench/NOTES.md), 0.03% over
        # 350; two runs part by chance
        self.assertLess(max(windows), 0.10, "the loss curve follows the uninterrupted run's: %s" % windows)
        self.assertLessEqual(abs(acc - ref_acc), 0.01, "final test accuracy within 1 point")


if __name__ == "__main__":
    # under run.sh's 1200 s per suite, so that this limit is the one that names the test
    testlimit.main(1100)
