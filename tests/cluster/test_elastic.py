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
# Timings are printed, never asserted; the order of events and the outcome
# are. Needs root (network namespaces), iproute2 and kubectl; skipped,
# saying why, without them. Run from the repository root:
#   /usr/bin/python3 -m tests.cluster.test_elastic -v

import json
import sys
import time
import unittest

from tests.cluster import testlimit
from tests.cluster.harness import wait_for
from tests.cluster.localcluster import missing_prerequisites
from tests.cluster.test_e2e import ClusterJobTest, job_manifest, pods_of, status

WHY_NOT = missing_prerequisites()


def ready(node):
    return next((cd["status"] for cd in node.get("status", {}).get("conditions", []) if cd["type"] == "Ready"),
                None)


def cond(st, ctype):
    return next((c for c in st.get("conditions") or [] if c["type"] == ctype), {})


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class Elastic(ClusterJobTest):
    NODES = 3
    CLUSTER = dict(lease_seconds=10, grace_seconds=40, node_cpu=2)  # upstream node-lifecycle defaults

    def test_a_lost_node_shrinks_the_gang_to_what_fits_and_its_return_grows_it_back(self):
        c, name = self.c, "el-job"
        m = job_manifest(name, "elastic/job", steps=2000)
        m["spec"]["replicas"] = 3
        m["spec"]["training"].update(globalBatchSize=96, microBatchSize=16)  # whole micro-batches at 3 and 2
        # growCheckSeconds 600: the growth below can only come from the node's return
        m["spec"]["elastic"] = {"minReplicas": 2, "pendingTimeoutSeconds": 15, "growCheckSeconds": 600}
        m["spec"]["template"]["resources"]["requests"]["cpu"] = "1500m"  # one rank per node
        self.apply(m)
        t0 = time.time()
        wait_for("the first checkpoint", lambda: (status(c, name).get("progress") or {}).get(
            "lastCheckpointStep", 0) >= 50, 300, 0.5)
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
        st = wait_for("the end", lambda: status(c, name).get("phase") in ("Succeeded", "Failed")
                      and status(c, name), 900, 1)
        self.assertEqual(st["phase"], "Succeeded", json.dumps(st.get("conditions")))
        self.assertEqual(st.get("restarts"), st.get("disruptionRestarts"), st)
        print("\nelastic: %s (seconds after the kill; the job started %.0f s before it)" % (", ".join(
            "%s %+.1f" % (k, v - t["kill"]) for k, v in t.items() if k != "kill"), t["kill"] - t0),
            file=sys.stderr)
        c.kubectl("delete", "vj", name, "--wait=false")


if __name__ == "__main__":
    testlimit.main(1500)
