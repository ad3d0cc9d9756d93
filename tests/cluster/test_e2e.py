#!/usr/bin/python3
# tests/cluster/test_e2e.py: the whole product on one machine as on a
# cluster (tests/cluster/localcluster.py): the test API server, the
# controller-manager stand-in, two local kubelets (nodes) and moto's S3.
# `kubectl apply -f manifests/` deploys the operator, which the local kubelet
# runs from its Deployment with in-cluster configuration only; a ViTJob of 2
# CPU replicas trains across the two nodes with S3 checkpoints and reports
# its progress into `kubectl get vj`. Proved here (a lost node, at upstream
# node-lifecycle defaults, is tests/cluster/test_recovery.py's):
#   - the columns of `kubectl get vj` change while a job runs;
#   - a worker killed with SIGKILL: a retryable failure (one backoffLimit unit),
#     resumed from the checkpoint, Succeeded;
#   - a worker whose status patches are refused still trains to the end and
#     logs the refusals once per report interval, not per step;
#   - a ViTJob that says only training.steps: 10 (nothing of warmup; the
#     rest the defaults: Fashion-MNIST, fmnist_tiny) is admitted and
#     Succeeds, warming up over its 10 steps (issue 46);
#   - a job that fails (a typo in data.uri) says the worker's own error line
#     in its Failed condition and Warning event (the termination message the
#     worker writes), and with cleanPodPolicy None keeps every rank's pod and
#     log.
# Needs root (network namespaces), iproute2 and kubectl; skipped, saying why,
# without them. Run from the repository root:
#   /usr/bin/python3 -m tests.cluster.test_e2e -v

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from tests.cluster import testlimit
from tests.cluster.harness import wait_for
from tests.cluster.kubelet.env import reference_worker_env
from tests.cluster.localcluster import ROOT, LocalCluster, missing_prerequisites

BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
WORKER = os.path.join(BUILD, "bin", "vitjob-worker")
WHY_NOT = missing_prerequisites()
STEPS = 300
INTERVAL = 50


def job_manifest(name, prefix, sa=None, steps=STEPS):
    tmpl = {"resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}
    if sa:
        tmpl["serviceAccountName"] = sa
    return {
        "apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 2, "gpusPerReplica": 0, "image": "ghcr.io/vitjob/vitjob-worker:0.1.0",
            "model": {"preset": "fmnist_tiny"},
            "data": {"format": "fashion-mnist", "uri": "file:///usr/share/datasets/fashion-mnist"},
            "training": {"steps": steps, "globalBatchSize": 64, "microBatchSize": 32, "device": "cpu",
                         "threads": 1, "seed": 7, "logInterval": 1, "evalInterval": 0, "exportPath": "",
                         "reportIntervalSeconds": 1, "collectiveTimeoutSeconds": 60,
                         "rendezvousTimeoutSeconds": 120,
                         "optimizer": {"lr": 0.003, "warmupSteps": 5}},
            "checkpoint": {"uri": "s3://vitjob/" + prefix, "intervalSteps": INTERVAL, "keep": 3,
                           "credentialsSecret": "s3-credentials"},
            "runPolicy": {"backoffLimit": 2, "nodeLostTolerationSeconds": 2, "cleanPodPolicy": "None"},
            "template": tmpl}}


def status(c, name):
    return c.get_json("vitjob", name).get("status") or {}


def pods_of(c, name):
    return c.get_json("pods", "-l", "vitjob.dev/job-name=" + name).get("items", [])


def log_ts(line):
    m = re.search(r"ts=(\S+)Z", line)
    return time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone + \
        float("0" + m.group(1)[19:]) if m else None


def worker_pid(name, rank):
    """The pid of a job's worker process of this rank (from /proc environ)."""
    want = {b"VITJOB_NAME=" + name.encode(), b"VITJOB_RANK=%d" % rank}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                env = set(f.read().split(b"\0"))
            with open("/proc/%s/comm" % d) as f:
                comm = f.read().strip()
        except OSError:
            continue
        if want <= env and comm.startswith("vitjob-worker"):
            return int(d)
    return None


class ClusterJobTest(unittest.TestCase):
    """A local cluster with moto's S3, the operator from manifests/ and the
    s3-credentials Secret, and what the tests of a job on it share (also
    tests/cluster/test_recovery.py's)."""
    NODES = 2
    CLUSTER = {}  # more LocalCluster arguments
    # (step, file name) pairs: every job waits before that 1-based step while
    # the class's file of that name exists (VITJOB_TEST_HOLD, worker/train/
    # step_hold.h, baked into the nodes' worker image), so that a test sees
    # a job still running whatever the machine's speed; hold(name) makes the
    # file, release(name) removes it
    HOLDS = ()

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="vitjob-%s-" % cls.__name__.lower())
        os.chmod(cls.work, 0o755)
        args = dict(cls.CLUSTER)
        if cls.HOLDS:
            args["worker_env"] = {"VITJOB_TEST_HOLD": ",".join(
                "%d:%s" % (step, cls.hold_path(name)) for step, name in cls.HOLDS)}
        cls.c = LocalCluster(cls.work, nodes=cls.NODES, s3=True, bin_dir=os.path.join(BUILD, "bin"),
                             **args).start()
        c = cls.c
        c.kubectl("apply", "-f", os.path.join(ROOT, "manifests"))
        wait_for("a leading operator", cls.leader, 90, 0.5)
        s3 = c.s3
        c.kubectl("create", "secret", "generic", "s3-credentials",
                  "--from-literal=AWS_ACCESS_KEY_ID=" + s3["AWS_ACCESS_KEY_ID"],
                  "--from-literal=AWS_SECRET_ACCESS_KEY=" + s3["AWS_SECRET_ACCESS_KEY"],
                  "--from-literal=AWS_REGION=" + s3["AWS_REGION"])

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()
        if os.environ.get("VITJOB_KEEP_E2E"):
            print("kept", cls.work, file=sys.stderr)
        else:
            shutil.rmtree(cls.work, ignore_errors=True)

    @classmethod
    def hold_path(cls, name):
        return os.path.join(cls.work, name)

    def hold(self, name="hold"):
        """Holds the jobs at name's steps (HOLDS) until release(name)."""
        open(self.hold_path(name), "w").close()

    def release(self, name="hold"):
        os.unlink(self.hold_path(name))

    @classmethod
    def leader(cls):
        """(pod, node) of the operator replica holding the Lease, once it runs."""
        lease = cls.c.get_json("lease", "-n", "vitjob-system", "vitjob-operator")
        holder = (lease.get("spec") or {}).get("holderIdentity")
        for p in cls.c.get_json("pods", "-n", "vitjob-system").get("items", []):
            if p["metadata"]["name"] == holder and p.get("status", {}).get("phase") == "Running":
                return p["metadata"]["name"], p["spec"]["nodeName"]
        return None

    def apply(self, manifest):
        m = json.loads(json.dumps(manifest))
        m["spec"]["checkpoint"]["endpoint"] = self.c.s3["POD_ENDPOINT"]
        self.c.kubectl("apply", "-f", "-", input=json.dumps(m))
        return m

    def s3_creds(self):
        s3 = self.c.s3
        return dict(AWS_ACCESS_KEY_ID=s3["AWS_ACCESS_KEY_ID"],
                    AWS_SECRET_ACCESS_KEY=s3["AWS_SECRET_ACCESS_KEY"], AWS_REGION=s3["AWS_REGION"])

    def s3_env(self):
        return dict(os.environ, **self.s3_creds())

    def export(self, uri, out):
        r = subprocess.run([WORKER, "export", "--from", uri, "--out", out, "--endpoint", self.c.s3["S3_ENDPOINT"]],
                           env=self.s3_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            return f.read()

    def reference_run(self, manifest, prefix):
        """The same job as two local processes, never interrupted: (final loss, weights)."""
        spec = json.loads(json.dumps(manifest["spec"]))
        steps = spec["training"]["steps"]
        spec["checkpoint"] = dict(spec["checkpoint"], uri="s3://vitjob/" + prefix,
                                  endpoint=self.c.s3["S3_ENDPOINT"])
        for k in ("replicas", "gpusPerReplica", "image", "runPolicy", "template"):
            spec.pop(k, None)
        cfg = os.path.join(self.work, prefix.replace("/", "_") + ".json")
        with open(cfg, "w") as f:
            json.dump(spec, f)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        procs, logs = [], []
        for rank in (0, 1):
            # a pod's environment, not this machine's (kubelet/env.py)
            env = reference_worker_env(**self.s3_creds(), VITJOB_REPLICAS="2", VITJOB_RANK=str(rank),
                                       VITJOB_RESTART="0", VITJOB_RDZV_ENDPOINT="127.0.0.1:%d" % port,
                                       VITJOB_COMM_HOST="127.0.0.1")
            lf = open(os.path.join(self.work, "%s-rank%d.log" % (prefix.replace("/", "_"), rank)), "w+")
            logs.append(lf)
            procs.append(subprocess.Popen([WORKER, "train", "--config", cfg, "--log-level", "info"],
                                          env=env, stdout=subprocess.DEVNULL, stderr=lf))
        for p in procs:
            self.assertEqual(p.wait(600), 0)
        logs[0].seek(0)
        text = logs[0].read()
        for lf in logs:
            lf.close()
        losses = re.findall(r"step=%d/%d .*?loss=(\S+)" % (steps, steps), text)
        self.assertTrue(losses, text[-2000:])
        weights = self.export("s3://vitjob/%s/step-%09d" % (prefix, steps), cfg + ".safetensors")
        return losses[-1], weights

    def final_loss_of(self, pod_log):
        losses = re.findall(r"step=%d/%d .*?loss=(\S+)" % (STEPS, STEPS), pod_log)
        return losses[-1] if losses else None

    def rank0_of_gen(self, name, gen):
        for p in pods_of(self.c, name):
            lb = p["metadata"]["labels"]
            if lb.get("vitjob.dev/rank") == "0" and lb.get("vitjob.dev/restart") == str(gen):
                return p
        return None


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class EndToEnd(ClusterJobTest):
    # The killed job waits before step 100 until the test has killed a rank
    # (HOLDS). The other jobs end before it.
    HOLDS = ((100, "hold"),)

    # ------------------------------------------------------------------ tests

    def test_a_worker_killed_with_sigkill_restarts_the_gang_spending_one_backoff_unit(self):
        c, name, steps = self.c, "e2e-kill", 150
        self.hold()
        self.apply(job_manifest(name, "e2e/kill", steps=steps))
        seen = set()

        def progressed():
            out = c.kubectl("get", "vj", name, "--no-headers", check=False).stdout
            seen.add(out.strip())
            return (status(c, name).get("progress") or {}).get("lastCheckpointStep", 0) >= INTERVAL
        wait_for("the first checkpoint", progressed, 180, 0.5)
        # kubectl get vj shows the columns changing while it runs
        rows = [r.split() for r in seen if r]
        self.assertTrue(any(r[1] == "Running" for r in rows), rows)
        self.assertGreater(len({tuple(r[2:4]) for r in rows}), 1, rows)
        for op in c.get_json("pods", "-n", "vitjob-system")["items"]:
            self.assertNotIn("KUBECONFIG", json.dumps(op["spec"]), "the operator runs on in-cluster config")
        pid = wait_for("rank 1's process", lambda: worker_pid(name, 1), 30, 0.5)
        os.kill(pid, signal.SIGKILL)
        self.release()  # generation 1 trains on to the end
        st = wait_for("Succeeded", lambda: status(c, name).get("phase") in ("Succeeded", "Failed")
                      and status(c, name), 600, 1)
        self.assertEqual(st["phase"], "Succeeded", json.dumps(st.get("conditions")))
        self.assertEqual(st.get("restarts"), 1, st)
        self.assertEqual(st.get("disruptionRestarts"), 0, "a killed worker spends backoffLimit")
        # the final evaluation's accuracy, beside the steps, as get vj -o wide shows it
        pr = st.get("progress") or {}
        self.assertEqual(pr.get("testStep"), steps, pr)
        self.assertTrue(0 <= pr.get("testAccuracy", -1) <= 1, pr)
        log = c.pod_log(self.rank0_of_gen(name, 1))
        self.assertTrue([ln for ln in log.splitlines() if "event=resumed" in ln], log[-2000:])

    def test_a_worker_whose_status_patches_are_refused_still_finishes_and_logs_once_per_interval(self):
        c, name = self.c, "e2e-norole"
        # an identity with no Role: every status patch is refused (403)
        c.kubectl("create", "serviceaccount", "no-status-rights")
        t0 = time.time()
        self.apply(job_manifest(name, "e2e/norole", sa="no-status-rights", steps=30))
        st = wait_for("Succeeded", lambda: status(c, name).get("phase") in ("Succeeded", "Failed")
                      and status(c, name), 600, 1)
        self.assertEqual(st["phase"], "Succeeded", json.dumps(st.get("conditions")))
        self.assertNotIn("progress", st, "nothing could be reported")
        log = c.pod_log(self.rank0_of_gen(name, 0))
        refused = [ln for ln in log.splitlines() if "comp=report" in ln and "level=warn" in ln]
        steps = [ln for ln in log.splitlines() if re.search(r" step=\d+/30 ", ln)]
        self.assertTrue(refused, "the refusals are logged: " + log[-2000:])
        self.assertTrue(any("403" in ln for ln in refused), refused[:3])
        self.assertEqual(len(steps), 30)
        took = time.time() - t0
        self.assertLessEqual(len(refused), took + 3, "at most one line per report interval (1 s)")
        self.assertNotIn("token", " ".join(refused).lower().replace("serviceaccount", ""))

    def test_a_job_of_10_steps_that_says_nothing_of_warmup_is_admitted_and_succeeds(self):
        c, name = self.c, "e2e-steps10"
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 1, "image": "ghcr.io/vitjob/vitjob-worker:0.1.0",
                     "training": {"steps": 10}}}))
        st = wait_for("Succeeded", lambda: status(c, name).get("phase") in ("Succeeded", "Failed")
                      and status(c, name), 600, 1)
        self.assertEqual(st["phase"], "Succeeded", json.dumps(st.get("conditions")))
        log = c.pod_log(self.rank0_of_gen(name, 0))
        self.assertRegex(log, r'\\"warmupSteps\\":10,', "the warmup followed the 10 steps")
        self.assertRegex(log, r" step=10/10 ")

    def test_a_failed_job_says_the_workers_own_error_and_keeps_every_pod_with_clean_pod_policy_none(self):
        c, name = self.c, "e2e-badpath"
        m = job_manifest(name, "e2e/badpath", steps=30)
        m["spec"]["data"]["uri"] = "file:///usr/share/datasets/fashion-mnst"  # a typo
        self.apply(m)
        st = wait_for("Failed", lambda: status(c, name).get("phase") in ("Succeeded", "Failed")
                      and status(c, name), 300, 1)
        self.assertEqual(st["phase"], "Failed", json.dumps(st.get("conditions")))
        failed = [x for x in st["conditions"] if x["type"] == "Failed"][0]
        # the worker's own line, from the file it wrote at /dev/termination-log
        self.assertEqual(failed["reason"], "InvalidData")
        self.assertRegex(failed["message"], r"^pod e2e-badpath-worker-\d-r0 exited with code 3 "
                         r"\(bad or missing data\), permanent, not retried: .*fashion-mnst.*"
                         r"train-images-idx3-ubyte.*")
        events = c.get_json("events", "--field-selector", "involvedObject.name=" + name)["items"]
        self.assertIn(failed["message"], [e["message"] for e in events if e["type"] == "Warning"])
        pod = [p for p in pods_of(c, name) if failed["message"].startswith("pod " + p["metadata"]["name"])][0]
        term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        self.assertNotIn("\n", term["message"], "the file's one line, not the log's tail")
        self.assertIn(" exit_code=3 class=data ", term["message"])
        # cleanPodPolicy None: every rank's pod is still there, with its log
        wait_for("both pods to end", lambda: all(p["status"].get("phase") in ("Succeeded", "Failed")
                                                 for p in pods_of(c, name)), 120, 1)
        pods = pods_of(c, name)
        self.assertEqual(sorted(p["metadata"]["labels"]["vitjob.dev/rank"] for p in pods), ["0", "1"])
        self.assertFalse([p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")])
        for p in pods:
            self.assertIn("exit_code=", c.kubectl("logs", p["metadata"]["name"]).stdout)


if __name__ == "__main__":
    testlimit.main(300)
