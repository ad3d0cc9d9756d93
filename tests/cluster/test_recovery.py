#!/usr/bin/python3
# tests/cluster/test_recovery.py: recovery from a lost node without waiting
# for Kubernetes' node lifecycle (issue 26), on the local cluster
# (tests/cluster/localcluster.py) set to upstream defaults: kubelets renew
# their node Lease every 10 s, the node monitor's grace period is 40 s, and
# pods get DefaultTolerationSeconds' 300 s. Three nodes of 2 CPUs; the
# operator from manifests/ (two replicas with leader election, spread over
# the nodes); each ViTJob of 2 CPU replicas asks 1500m per worker, so the two
# ranks always run on two different nodes. Proved here:
#   - a worker's node dies after a checkpoint: the surviving rank reports the
#     lost peer into status.lostPeer, the operator restarts the gang as a
#     disruption before the node lifecycle has even declared the node lost,
#     steers the new pods off it, and the job succeeds bit for bit equal to an
#     uninterrupted run;
#   - the operator leader's node dies with a worker on it: the standby takes
#     over and does the same;
#   - a worker frozen with SIGSTOP for 60 s, then SIGCONT: the gang has moved
#     on, the stale rank exits without writing, every checkpoint verifies;
#   - a node's pod network cut (its kubelet still posting status): the same
#     outcome as a lost node, no split brain;
#   - a worker crashes on a live node whose kubelet is frozen (so it cannot
#     report): the gang restarts at once, pending classification (issue 48);
#     once the kubelet reports the crash it is a retryable failure, and with
#     backoffLimit 0 the restart is undone, the new generation stopped and
#     the job failed, the counts those of waiting for the kubelet.
# A lost node's restart is pending too until the node is judged lost; the
# job still ends with it counted as a disruption.
# Each test prints its timeline (kill, detected, gang restarted, new pods
# Running, checkpoint read, training again). Timings are printed, never
# asserted; what is asserted is the order of events (the restart comes before
# the node is declared lost) and the outcome.
# Needs root (network namespaces), iproute2 and kubectl; skipped, saying why,
# without them. Run from the repository root:
#   /usr/bin/python3 -m tests.cluster.test_recovery -v

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest

from tests.cluster import testlimit
from tests.cluster.harness import wait_for
from tests.cluster.localcluster import ROOT, missing_prerequisites
from tests.cluster.test_e2e import ClusterJobTest, job_manifest, log_ts, pods_of, status, worker_pid

BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
WORKER = os.path.join(BUILD, "bin", "vitjob-worker")
WHY_NOT = missing_prerequisites()
STEPS = 150
INTERVAL = 50
# Every generation waits before step HOLD while the class's hold file exists
# (ClusterJobTest.HOLDS; setUp makes the file): generation 0 is still training when the
# test strikes after its first checkpoint, whatever the machine's speed, and
# generation 1 trains on once the test has seen it running (or, in the
# crash test, never: it must be stopped, not finish).
HOLD = 100


def log_time(ts):
    """A log line's ts= (UTC, milliseconds) as seconds since the epoch."""
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def manifest(name, prefix, grace=None):
    m = job_manifest(name, prefix, steps=STEPS)
    if grace is not None:  # the frozen pod outlives its freeze: SIGTERM waits, SIGKILL comes after `grace`
        m["spec"]["template"]["terminationGracePeriodSeconds"] = grace
    m["spec"]["runPolicy"] = {"backoffLimit": 0, "cleanPodPolicy": "None"}  # upstream-like: default toleration
    m["spec"]["template"]["resources"]["requests"]["cpu"] = "1500m"      # one rank per node
    m["spec"]["training"]["heartbeatTimeoutSeconds"] = 5
    return m


def ready(node):
    return next((cd["status"] for cd in node.get("status", {}).get("conditions", []) if cd["type"] == "Ready"),
                None)


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class Recovery(ClusterJobTest):
    NODES = 3
    CLUSTER = dict(lease_seconds=10, grace_seconds=40, node_cpu=2)  # upstream node-lifecycle defaults
    ref = None

    HOLDS = ((HOLD, "hold"),)

    def setUp(self):
        self.hold()
        for name, p in list(self.c.kubelets.items()):  # a node an earlier test killed comes back
            if p.poll() is not None:
                self.c.start_node(int(name.split("-")[1]))
        wait_for("every node Ready", lambda: all(ready(n) == "True" for n in self.c.get_json("nodes")["items"]),
                 120, 0.5)
        self.t = {}
        self.job = None

    def tearDown(self):
        if self.job:  # a failed test's job must not hold the nodes' CPUs for the next
            self.c.kubectl("delete", "vj", self.job, "--wait=false", check=False)

    def checkpoints(self, prefix):
        r = subprocess.run([WORKER, "checkpoints", "--uri", "s3://vitjob/" + prefix, "--endpoint",
                            self.c.s3["S3_ENDPOINT"]], env=self.s3_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def reference(self, m):
        """The uninterrupted run's final weights (one for the class: every job here is the same run)."""
        if Recovery.ref is None:
            Recovery.ref = self.reference_run(m, "recovery/ref")[1]
        return Recovery.ref

    def start_job(self, name, prefix, grace=None):
        self.job = name
        m = self.apply(manifest(name, prefix, grace))
        wait_for("the first checkpoint", lambda: (status(self.c, name).get("progress") or {}).get(
            "lastCheckpointStep", 0) >= INTERVAL, 240, 0.5)
        pods = pods_of(self.c, name)
        self.assertEqual(len({p["spec"]["nodeName"] for p in pods}), 2, "the ranks run on two nodes")
        return m, pods

    def watch_recovery(self, name, victim_node):
        """Waits for the restart, noting whether the victim was still Ready then, and for generation 1 to run."""
        c = self.c

        def restarted():
            st = status(c, name)
            if st.get("restarts", 0) < 1:
                return None
            self.t.setdefault("restarted", time.time())
            self.node_ready_at_restart = ready(c.get_json("node", victim_node)) if victim_node else None
            return st
        st = wait_for("the gang restart", restarted, 240, 0.2)
        self.t.setdefault("restarted", time.time())
        self.last_restart_at_restart = st.get("lastRestart") or {}
        lp = st.get("lostPeer") or {}
        if lp.get("time"):
            self.t["detected"] = time.mktime(time.strptime(lp["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        wait_for("generation 1 running", lambda: status(c, name).get("phase") == "Running", 240, 0.2)
        self.t["pods_running"] = time.time()
        self.release()  # generation 1 trains on to the end
        return st

    def finish(self, name, prefix, m, what):
        """Waits for Succeeded; checks the resume, the weights and the checkpoints; prints the timeline."""
        c = self.c
        st = wait_for("Succeeded", lambda: status(c, name).get("phase") in ("Succeeded", "Failed")
                      and status(c, name), 600, 1)
        self.assertEqual(st["phase"], "Succeeded", json.dumps(st.get("conditions")))
        self.assertEqual(st.get("restarts"), 1, st)
        self.assertEqual(st.get("disruptionRestarts"), 1, "a lost pod is a disruption: %s" % st)
        self.assertEqual((st.get("lastRestart") or {}).get("classifiedAs"), "Disruption", st.get("lastRestart"))
        log = c.pod_log(self.rank0_of_gen(name, 1))
        resumed = [ln for ln in log.splitlines() if "event=resumed" in ln]
        self.assertTrue(resumed, log[-3000:])
        first = next(ln for ln in log.splitlines() if re.search(r" step=\d+/%d " % STEPS, ln))
        self.t["checkpoint_read"] = log_ts(resumed[0])
        self.t["training_again"] = log_ts(first)
        k = self.t["kill"]
        parts = ["%s %+.1f s" % (key, self.t[key] - k) for key in
                 ("detected", "restarted", "pods_running", "checkpoint_read", "training_again") if key in self.t]
        print("\n%s: kill -> training again %.1f s (%s)" % (what, self.t["training_again"] - k, ", ".join(parts)),
              file=sys.stderr)
        ours = self.export("s3://vitjob/%s/step-%09d" % (prefix, STEPS), os.path.join(self.work, name + ".st"))
        self.assertEqual(ours, self.reference(m), "final weights differ from the uninterrupted run")
        listing = self.checkpoints(prefix)
        self.assertRegex(listing, r"(?m)^%d +complete" % STEPS)
        for line in listing.splitlines()[1:]:
            if line[:1].isdigit():  # a step (not the fence line)
                self.assertRegex(line, r"^\d+ +complete ", "every checkpoint verifies:\n" + listing)
        c.kubectl("delete", "vj", name, "--wait=false")
        return st

    # -------------------------------------------------------------- tests

    def test_a_workers_node_dies_and_the_gang_restarts_before_kubernetes_declares_the_node_lost(self):
        c, name, prefix = self.c, "rec-node", "recovery/node"
        m, pods = self.start_job(name, prefix)
        _, op_node = self.leader()
        victim = next(p["spec"]["nodeName"] for p in pods if p["spec"]["nodeName"] != op_node)
        self.t["kill"] = time.time()
        c.kill_node(victim)
        st = self.watch_recovery(name, victim)
        self.assertEqual(self.node_ready_at_restart, "True",
                         "the restart waited for the node lifecycle to declare %s lost" % victim)
        lr = self.last_restart_at_restart
        if (st.get("lostPeer") or {}).get("evidence") == "closed":
            # its processes died with it: restarted before anything could say crash or disruption
            self.assertEqual((lr.get("cause"), lr.get("classifiedAs")), ("PeerLost", "Pending"), lr)
            self.assertEqual(st.get("disruptionRestarts", 0), 0, "nothing is counted while pending")
        else:
            self.assertEqual(st.get("disruptionRestarts"), 1, st)
        wait_for("generation 1 placed", lambda: all(p["spec"].get("nodeName") for p in pods_of(c, name)
                                                     if p["metadata"]["labels"]["vitjob.dev/restart"] == "1"),
                 120, 0.2)
        for p in pods_of(c, name):
            if p["metadata"]["labels"]["vitjob.dev/restart"] == "1":
                self.assertNotEqual(p["spec"].get("nodeName"), victim, "a new pod was placed on the lost node")
        self.finish(name, prefix, m, "a worker's node lost")

    def test_the_operator_leaders_node_dies_with_a_worker_and_the_standby_restarts_the_gang(self):
        c, name, prefix = self.c, "rec-op", "recovery/op"
        leader_pod, op_node = self.leader()
        # one rank on the leader's node: keep the workers off the standby's node while they start
        others = [p["spec"]["nodeName"] for p in c.get_json("pods", "-n", "vitjob-system")["items"]
                  if p["spec"].get("nodeName") != op_node]
        for n in others:
            c.kubectl("cordon", n)
        try:
            m, pods = self.start_job(name, prefix)
        finally:
            for n in others:
                c.kubectl("uncordon", n)
        self.assertIn(op_node, {p["spec"]["nodeName"] for p in pods})
        self.t["kill"] = time.time()
        c.kill_node(op_node)
        new_leader = wait_for("the standby leading", lambda: (self.leader() or (None,))[0] not in (None, leader_pod)
                              and self.leader(), 120, 0.2)
        self.t["takeover"] = time.time()
        self.assertNotEqual(new_leader[1], op_node)
        self.watch_recovery(name, op_node)
        self.assertEqual(self.node_ready_at_restart, "True",
                         "the restart waited for the node lifecycle to declare %s lost" % op_node)
        print("\nthe standby took over %.1f s after the kill" % (self.t["takeover"] - self.t["kill"]),
              file=sys.stderr)
        self.finish(name, prefix, m, "the operator leader's node lost")

    def test_a_worker_frozen_for_60_s_is_replaced_and_on_waking_writes_nothing(self):
        c, name, prefix = self.c, "rec-stop", "recovery/stop"
        m, pods = self.start_job(name, prefix, grace=120)
        pid = wait_for("rank 1's process", lambda: worker_pid(name, 1), 30, 0.5)
        self.t["kill"] = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            st = self.watch_recovery(name, None)
            self.assertEqual((st.get("lostPeer") or {}).get("evidence"), "heartbeat", st.get("lostPeer"))
            wait_for("a checkpoint of generation 1", lambda: (status(c, name).get("progress") or {}).get(
                "lastCheckpointStep", 0) > (st.get("progress") or {}).get("lastCheckpointStep", 0), 240, 0.5)
            before = self.checkpoints(prefix)
            time.sleep(max(0.0, self.t["kill"] + 60 - time.time()))
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        # the stale rank, if its kubelet has not already stopped it, exits on waking
        def gone():
            try:
                with open("/proc/%d/stat" % pid) as f:
                    return f.read().split()[2] == "Z"
            except OSError:
                return True
        wait_for("the stale rank gone", gone, 120, 0.5)
        frozen = next(p for p in pods if p["metadata"]["labels"]["vitjob.dev/rank"] == "1")
        # its log is whole once its kubelet has recorded the exit (the kubelet
        # copies the output from pipes and finishes that first): a process
        # gone from /proc may still have lines in the pipe
        node, pod = frozen["spec"]["nodeName"], "default/" + frozen["metadata"]["name"]

        def kubelet_says():
            with open(os.path.join(c.work, "kubelet-%s.log" % node), errors="replace") as f:
                return [l for l in f if "pod=%s " % pod in l and "comp=kubelet" in l]
        wait_for("its kubelet to record the exit", lambda: any(
            "event=container_exited" in l for l in kubelet_says()), 60, 0.5)
        log = c.pod_log(frozen)
        self.assertIn("event=stale", log, "the woken rank knew it was stale: " + log[-1500:] +
                      "\n--- its kubelet:\n" + "".join(kubelet_says()))
        # it stores no checkpoint it had not begun before it was frozen (one
        # begun may finish: the fence keeps it out of any step's manifest):
        # judged by the lines' times against the freeze, not by which step it
        # had reached, which depends on how fast it ran (a loaded machine
        # froze it after its step 100 was stored)
        def ckpt_steps(event, after):
            out = set()
            for l in log.splitlines():
                m = re.match(r"ts=(\S+) .*event=%s step=(\d+)" % event, l)
                if m and (log_time(m.group(1)) > self.t["kill"]) == after:
                    out.add(int(m.group(2)))
            return out
        begun, stored = ckpt_steps("checkpoint", False), ckpt_steps("shard_stored", True)
        self.assertLessEqual(stored, begun, "the stale rank stored a checkpoint it began after its freeze: " +
                             log[-1500:])
        after = self.checkpoints(prefix)
        for line in before.splitlines():  # nothing it listed went away or changed
            if line.startswith("step-"):
                self.assertIn(line, after)
        self.finish(name, prefix, m, "a worker frozen for 60 s")

    def test_a_nodes_pod_network_cut_is_a_lost_node_without_split_brain(self):
        c, name, prefix = self.c, "rec-cut", "recovery/cut"
        m, pods = self.start_job(name, prefix)
        _, op_node = self.leader()
        victim = next(p["spec"]["nodeName"] for p in pods if p["spec"]["nodeName"] != op_node)
        idx = int(victim.split("-")[1])
        links = subprocess.run(["ip", "-o", "link", "show"], stdout=subprocess.PIPE, text=True).stdout
        veths = re.findall(r"\d+: (vjh%dx\d+)[@:]" % idx, links)
        self.assertTrue(veths, links)
        self.t["kill"] = time.time()
        for v in veths:
            subprocess.run(["ip", "link", "set", "dev", v, "down"], check=True)
        st = self.watch_recovery(name, victim)
        self.assertEqual(ready(c.get_json("node", victim)), "True", "the cut node's kubelet still posts status")
        self.assertEqual(st.get("disruptionRestarts"), 1, st)
        for p in pods_of(c, name):
            if p["metadata"]["labels"]["vitjob.dev/restart"] == "1":
                self.assertNotEqual(p["spec"].get("nodeName"), victim, "a new pod was placed on the cut node")
        self.finish(name, prefix, m, "a node's pod network cut")

    def test_a_crash_on_a_live_node_restarts_at_once_and_past_backoff_limit_the_restart_is_undone(self):
        c, name, prefix = self.c, "rec-crash", "recovery/crash"
        m, pods = self.start_job(name, prefix)  # backoffLimit 0, cleanPodPolicy None
        _, op_node = self.leader()
        victim = next(p for p in pods if p["spec"]["nodeName"] != op_node)
        node, vname = victim["spec"]["nodeName"], victim["metadata"]["name"]
        pid = wait_for("the victim's process", lambda: worker_pid(name, int(victim["metadata"]["labels"][
            "vitjob.dev/rank"])), 30, 0.5)
        kubelet = c.kubelets[node]
        kubelet.send_signal(signal.SIGSTOP)  # its kubelet can report nothing until SIGCONT
        try:
            self.t["kill"] = time.time()
            os.kill(pid, signal.SIGKILL)
            st = wait_for("the gang restart", lambda: status(c, name).get("restarts", 0) >= 1 and status(c, name),
                          30, 0.1)
            self.t["restarted"] = time.time()
            lr = st.get("lastRestart") or {}
            self.assertEqual((lr.get("cause"), lr.get("classifiedAs"), lr.get("pod")), ("PeerLost", "Pending", vname),
                             "restarted before its kubelet could report: %s" % lr)
            self.assertEqual(st.get("disruptionRestarts", 0), 0, st)
            self.assertNotEqual(status(c, name).get("phase"), "Failed", "backoffLimit 0 does not stop the restart")
        finally:
            kubelet.send_signal(signal.SIGCONT)
        st = wait_for("the job to end", lambda: status(c, name).get("phase") in ("Succeeded", "Failed")
                      and status(c, name), 120, 0.2)
        self.t["classified"] = time.time()
        self.assertEqual(st["phase"], "Failed", st)
        failed = next(cd for cd in st["conditions"] if cd["type"] == "Failed")
        self.assertEqual(failed["reason"], "BackoffLimitExceeded", failed)
        self.assertIn("backoffLimit 0 reached after 0 restart(s)", failed["message"])
        self.assertIn("generation 1, started before this was known, is stopped", failed["message"])
        self.assertEqual((st.get("restarts"), st.get("disruptionRestarts")), (0, 0),
                         "the counts of waiting for the kubelet: %s" % st)
        self.assertEqual((st.get("lastRestart") or {}).get("classifiedAs"), "RetryableFailure", st.get("lastRestart"))
        wait_for("generation 1 stopped", lambda: not [p for p in pods_of(c, name)
                                                       if p["metadata"]["labels"]["vitjob.dev/restart"] == "1"],
                 120, 0.5)
        self.assertTrue(any(p["metadata"]["name"] == vname for p in pods_of(c, name)),
                        "cleanPodPolicy None keeps the crashed pod")
        print("\na crash on a live node, its kubelet frozen: restarted %+.1f s, failed %+.1f s after the kill"
              % (self.t["restarted"] - self.t["kill"], self.t["classified"] - self.t["kill"]), file=sys.stderr)
        c.kubectl("delete", "vj", name, "--wait=false")


if __name__ == "__main__":
    testlimit.main(900)
