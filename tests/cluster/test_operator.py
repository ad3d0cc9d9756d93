#!/usr/bin/python3
# tests/cluster/test_operator.py: the vitjob-operator end to end against the
# test API server (tests/cluster/apiserver), with the real kubectl where a user
# would use it. There is no kubelet here: the tests play it, writing pod
# phases and exit codes through the pods' /status subresource.
#
# The operator runs on its own ServiceAccount's token (kubectl create token
# vitjob-operator -n vitjob-system), so the server's RBAC judges every call it
# makes against manifests/01-rbac.yaml, as on a real cluster.
#
# What it proves: a ViTJob gets its ConfigMap, Service, worker identity and
# pods (env, labels, owner references), also in a namespace that enforces the
# restricted Pod Security Standard, where the worker's own token may patch
# its job's status and nothing else; labels and annotations others add to
# the children survive operator restarts; names and template values a real
# server would refuse in the children, and children it refuses for good, fail
# the job with a condition instead of a retry loop; POD_NAME is the leader
# identity; gang restarts on retryable exits, permanent exits fail,
# backoffLimit is enforced and disruptions do not spend it; success, suspend
# and resume, deadline, TTL; deleting the job removes its children; invalid
# specs fail naming the field; no duplicated pods across an operator restart;
# leader election (only the leader acts, the standby takes over; with the
# Deployment's lease timings, a standby takes over a SIGKILLed leader and at
# once acts on a job created and a pod failed while none led); a
# --namespace list reconciles the jobs of each listed namespace and leaves an
# unlisted one's alone, and refuses a bad name; an API
# server restart under the operator and 410 relists; /metrics and probes; the
# token never appears in the logs; gang scheduling: a volcano or
# coscheduling PodGroup owned by the job (collected with it) and pods that
# name it, a PodGroup unschedulable past its timeout shown as a condition with
# the scheduler's message, and a missing PodGroup CRD as one condition
# without pods or a retry loop; ProgressStalled when rank 0's report goes
# stale (on time, with no event to wake the operator) and clearing on the next;
# a shrunk elastic job growing as soon as a schedulable Node becomes Ready
# (a cordoned one does not count), and without nodes in the operator's RBAC
# one log line saying so, a ready operator that reconciles, and no growth.
# Run: /usr/bin/python3 -m unittest tests/cluster/test_operator.py

import calendar
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from tests.cluster import testlimit
from tests.cluster.harness import HERE, ServerProcess, stop_process, wait_for

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
OPERATOR = os.path.join(BUILD, "bin", "vitjob-operator")
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
VJ = "/apis/vitjob.dev/v1alpha1/namespaces/default/vitjobs"
PODS = "/api/v1/namespaces/default/pods"
RBAC_REFUSAL = 'User "system:serviceaccount:vitjob-system:vitjob-operator" cannot'


def vj_path(ns, name="", sub=""):
    return "/apis/vitjob.dev/v1alpha1/namespaces/%s/vitjobs%s%s" % (ns, "/" + name if name else "",
                                                                    "/" + sub if sub else "")


def body(r):
    """The parsed JSON body of a harness Response."""
    return r.body if isinstance(r.body, (dict, list)) else json.loads(r.body)


def operator_kubeconfig(server, tmp, env):
    """A kubeconfig with the operator's own service-account token, as the
    operator pod would have it, made with `kubectl create token`."""
    r = subprocess.run([KUBECTL, "create", "token", "vitjob-operator", "-n", "vitjob-system",
                        "--duration=4h"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    with open(server.kubeconfig) as f:
        text = f.read()
    path = os.path.join(tmp, "operator-kubeconfig")
    with open(path, "w") as f:
        f.write(text.replace(server.token, token))
    return path, token


class Operator:
    """One vitjob-operator process, on the operator's own token."""

    def __init__(self, server, tmp, name="op", args=(), env=None):
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen([OPERATOR, "--kubeconfig", os.path.join(tmp, "operator-kubeconfig"),
                                      "--metrics-addr", "127.0.0.1:0"] + list(args),
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = int(wait_for("operator metrics port", lambda: self._port(), 10))

    def _port(self):
        with open(self.log_path) as f:
            m = re.findall(r"metrics_port=(\d+)", f.read())
        return m[-1] if m else None

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM):
        rc = stop_process(self.proc, 15, sig)
        self.log.close()
        return rc


def job_doc(name, replicas=2, **spec):
    doc = {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob", "metadata": {"name": name},
           "spec": {"replicas": replicas, "image": "ghcr.io/vitjob/vitjob-worker:test",
                    "model": {"preset": "fmnist_tiny"},
                    "training": {"steps": 10, "globalBatchSize": 128, "microBatchSize": 64,
                                 "optimizer": {"warmupSteps": 1}}}}
    doc["spec"].update(spec)
    return doc


class Base(unittest.TestCase):
    server_args = ()
    operator_args = ()
    allowed_refusals = ()  # RBAC refusals the class brings about on purpose

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(OPERATOR):
            raise unittest.SkipTest("operator not built: " + OPERATOR)
        cls.tmp = tempfile.mkdtemp(prefix="operator-test-")
        cls.server = ServerProcess(os.path.join(cls.tmp, "state"), args=cls.server_args)
        cls.c = cls.server.client()
        cls.env = dict(os.environ, KUBECONFIG=cls.server.kubeconfig, HOME=cls.tmp)
        r = cls.kubectl(["apply", "-f", os.path.join(ROOT, "manifests")])
        assert r.returncode == 0, r.stderr
        cls.op_kubeconfig, cls.op_token = operator_kubeconfig(cls.server, cls.tmp, cls.env)
        cls.before_operator()
        cls.ops = [Operator(cls.server, cls.tmp, "op", cls.operator_args)]

    @classmethod
    def before_operator(cls):
        """What a class changes in the cluster before its operator starts."""

    @classmethod
    def tearDownClass(cls):
        for op in cls.ops:
            op.stop()
        cls.server.stop()
        # a sanitizer report in any operator's log fails the class (BUILD=build/asan)
        reports = [op.log_path for op in cls.ops
                   if re.search(r"Sanitizer|runtime error", op.text())]
        if reports:
            raise AssertionError("sanitizer reports in " + ", ".join(reports))
        # every call the operator made was allowed by manifests/01-rbac.yaml
        # (or by what the class made of it: allowed_refusals)
        refused = [op.log_path for op in cls.ops if any(
            RBAC_REFUSAL in line and not any(a in line for a in cls.allowed_refusals)
            for line in op.text().splitlines())]
        if refused:
            raise AssertionError("the operator's RBAC refused a call: see " + ", ".join(refused))
        if not os.environ.get("KEEP_TMP"):
            shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def kubectl(cls, args, stdin=None):
        return subprocess.run([KUBECTL] + args, input=stdin, capture_output=True, text=True,
                              env=cls.env, timeout=30)

    # --- helpers -------------------------------------------------------------
    def apply(self, doc):
        r = self.kubectl(["apply", "-f", "-"], stdin=json.dumps(doc))
        self.assertEqual(r.returncode, 0, r.stderr)

    def job(self, name):
        r = self.c.get(VJ + "/" + name)
        return body(r) if r.status == 200 else None

    def status(self, name):
        j = self.job(name)
        return (j or {}).get("status", {})

    def pods(self, name):
        r = self.c.get(PODS + "?labelSelector=vitjob.dev/job-name%3D" + name)
        items = body(r)["items"]
        return sorted(items, key=lambda p: p["metadata"]["name"])

    def live_pod_names(self, name):
        return [p["metadata"]["name"] for p in self.pods(name)
                if not p["metadata"].get("deletionTimestamp")]

    def wait_pods(self, name, names, timeout=15):
        return wait_for("pods %s" % names, lambda: self.live_pod_names(name) == names or None,
                        timeout)

    def wait_phase(self, name, phase, timeout=15):
        return wait_for("%s phase %s" % (name, phase),
                        lambda: self.status(name).get("phase") == phase and self.status(name),
                        timeout)

    def set_pod(self, pod, phase, exit_code=None, reason=None, conditions=None):
        st = {"phase": phase}
        if exit_code is not None:
            st["containerStatuses"] = [{"name": "worker", "state": {"terminated": {
                "exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}}}]
        if reason:
            st["reason"] = reason
        if conditions:
            st["conditions"] = conditions
        r = self.c.patch(PODS + "/" + pod + "/status", {"status": st})
        self.assertEqual(r.status, 200, r)

    def run_all(self, name, gen=0, replicas=2):
        for rank in range(replicas):
            self.set_pod("%s-worker-%d-r%d" % (name, rank, gen), "Running")
        self.wait_phase(name, "Running")


class ReconcileTest(Base):
    def test_vitjob_gets_configmap_service_and_pods_with_env_labels_and_owner_refs(self):
        self.apply(job_doc("basic"))
        self.wait_pods("basic", ["basic-worker-0-r0", "basic-worker-1-r0"])
        uid = self.job("basic")["metadata"]["uid"]
        cm = body(self.c.get("/api/v1/namespaces/default/configmaps/basic-config"))
        cfg = json.loads(cm["data"]["config.json"])
        self.assertEqual(cfg["model"]["preset"], "fmnist_tiny")
        svc = body(self.c.get("/api/v1/namespaces/default/services/basic"))
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        pod = self.pods("basic")[1]
        self.assertEqual(pod["metadata"]["labels"]["vitjob.dev/rank"], "1")
        self.assertEqual(pod["metadata"]["labels"]["vitjob.dev/restart"], "0")
        self.assertEqual(pod["metadata"]["ownerReferences"][0]["uid"], uid)
        self.assertEqual(pod["spec"]["hostname"], "basic-worker-1")
        self.assertEqual(pod["spec"]["subdomain"], "basic")
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        self.assertEqual(env["VITJOB_RANK"], "1")
        self.assertEqual(env["VITJOB_REPLICAS"], "2")
        self.assertEqual(env["VITJOB_RESTART"], "0")
        self.assertEqual(env["VITJOB_RDZV_ENDPOINT"], "basic-worker-0.basic.default.svc:29400")
        self.assertEqual(self.status("basic")["phase"], "Pending")
        self.run_all("basic")
        out = self.kubectl(["get", "vj", "basic"]).stdout
        self.assertIn("Running", out)

    def test_retryable_exit_code_gives_a_gang_restart_with_the_next_generation(self):
        self.apply(job_doc("retry"))
        self.wait_pods("retry", ["retry-worker-0-r0", "retry-worker-1-r0"])
        self.run_all("retry")
        self.set_pod("retry-worker-1-r0", "Failed", exit_code=1)
        self.wait_pods("retry", ["retry-worker-0-r1", "retry-worker-1-r1"])
        st = self.wait_phase("retry", "Restarting")
        self.assertEqual(st["restarts"], 1)
        cond = {c["type"]: c for c in st["conditions"]}
        self.assertEqual(cond["Restarting"]["status"], "True")
        ev = self.kubectl(["get", "events", "--field-selector", "involvedObject.name=retry"]).stdout
        self.assertIn("Restarting", ev)
        self.run_all("retry", gen=1)

    def test_permanent_exit_code_fails_the_job_without_retry(self):
        self.apply(job_doc("perm"))
        self.wait_pods("perm", ["perm-worker-0-r0", "perm-worker-1-r0"])
        self.run_all("perm")
        self.set_pod("perm-worker-0-r0", "Failed", exit_code=2)
        st = self.wait_phase("perm", "Failed")
        self.assertEqual(st.get("restarts", 0), 0)
        failed = [c for c in st["conditions"] if c["type"] == "Failed"][0]
        self.assertEqual(failed["status"], "True")
        time.sleep(1)
        self.assertFalse([n for n in self.live_pod_names("perm") if n.endswith("-r1")])

    def test_backoff_limit_is_enforced_and_a_disruption_does_not_spend_it(self):
        self.apply(job_doc("backoff", runPolicy={"backoffLimit": 1}))
        self.wait_pods("backoff", ["backoff-worker-0-r0", "backoff-worker-1-r0"])
        self.run_all("backoff")
        # an eviction: restart without spending the limit
        self.set_pod("backoff-worker-0-r0", "Failed", reason="Evicted")
        self.wait_pods("backoff", ["backoff-worker-0-r1", "backoff-worker-1-r1"])
        self.run_all("backoff", gen=1)
        # a real failure: spends the one allowed retry
        self.set_pod("backoff-worker-1-r1", "Failed", exit_code=1)
        self.wait_pods("backoff", ["backoff-worker-0-r2", "backoff-worker-1-r2"])
        self.run_all("backoff", gen=2)
        # another: past the limit
        self.set_pod("backoff-worker-1-r2", "Failed", exit_code=1)
        st = self.wait_phase("backoff", "Failed")
        self.assertEqual(st["restarts"], 2)
        self.assertEqual(st["disruptionRestarts"], 1)
        reasons = [c.get("reason") for c in st["conditions"] if c["type"] == "Failed"]
        self.assertEqual(reasons, ["BackoffLimitExceeded"])

    def test_all_pods_succeeded_gives_succeeded(self):
        self.apply(job_doc("done"))
        self.wait_pods("done", ["done-worker-0-r0", "done-worker-1-r0"])
        self.run_all("done")
        for r in range(2):
            self.set_pod("done-worker-%d-r0" % r, "Succeeded", exit_code=0)
        st = self.wait_phase("done", "Succeeded")
        self.assertIn("completionTime", st)

    def test_suspend_deletes_pods_and_resume_creates_them_again(self):
        self.apply(job_doc("susp"))
        self.wait_pods("susp", ["susp-worker-0-r0", "susp-worker-1-r0"])
        self.run_all("susp")
        r = self.c.patch(VJ + "/susp", {"spec": {"suspend": True}})
        self.assertEqual(r.status, 200, r)
        self.wait_phase("susp", "Suspended")
        self.wait_pods("susp", [])
        r = self.c.patch(VJ + "/susp", {"spec": {"suspend": False}})
        self.assertEqual(r.status, 200, r)
        names = wait_for("resumed pods", lambda: len(self.live_pod_names("susp")) == 2
                         and self.live_pod_names("susp"))
        self.assertTrue(all(n.endswith("-r1") for n in names), names)
        st = self.status("susp")  # counted apart: kubectl get vj's RESTARTS says 0
        self.assertEqual((st.get("restarts"), st.get("resumes"), st.get("disruptionRestarts")), (0, 1, 0), st)

    def test_active_deadline_fails_the_job(self):
        self.apply(job_doc("deadline", runPolicy={"activeDeadlineSeconds": 2}))
        self.wait_pods("deadline", ["deadline-worker-0-r0", "deadline-worker-1-r0"])
        self.run_all("deadline")
        st = self.wait_phase("deadline", "Failed", timeout=20)
        reasons = [c.get("reason") for c in st["conditions"] if c["type"] == "Failed"]
        self.assertEqual(reasons, ["DeadlineExceeded"])

    def test_ttl_deletes_the_finished_job(self):
        self.apply(job_doc("ttl", runPolicy={"ttlSecondsAfterFinished": 1}))
        self.wait_pods("ttl", ["ttl-worker-0-r0", "ttl-worker-1-r0"])
        for r in range(2):
            self.set_pod("ttl-worker-%d-r0" % r, "Succeeded", exit_code=0)
        wait_for("ttl deletion", lambda: self.c.get(VJ + "/ttl").status == 404, 20)

    def test_deleting_the_vitjob_removes_its_children(self):
        self.apply(job_doc("gone"))
        self.wait_pods("gone", ["gone-worker-0-r0", "gone-worker-1-r0"])
        r = self.kubectl(["delete", "vj", "gone"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_pods("gone", [])
        wait_for("configmap gone", lambda: self.c.get(
            "/api/v1/namespaces/default/configmaps/gone-config").status == 404)

    def test_semantically_invalid_spec_fails_with_a_condition_naming_the_field(self):
        doc = job_doc("bad-dims")
        doc["spec"]["model"] = {"preset": "fmnist_tiny", "dim": 66}
        self.apply(doc)
        st = self.wait_phase("bad-dims", "Failed")
        failed = [c for c in st["conditions"] if c["type"] == "Failed"][0]
        self.assertIn("model.dim=66", failed["message"])
        self.assertIn("model.heads=4", failed["message"])
        self.assertEqual(self.live_pod_names("bad-dims"), [])

    def test_a_name_too_long_for_pod_hostnames_fails_naming_metadata_name(self):
        name = "n" * 60  # 60 + len("-worker-1") > 63
        self.apply(job_doc(name))
        st = self.wait_phase(name, "Failed")
        failed = [c for c in st["conditions"] if c["type"] == "Failed"][0]
        self.assertIn("metadata.name", failed["message"])
        self.assertEqual(self.live_pod_names(name), [])

    def test_metrics_and_probes_answer(self):
        port = self.ops[0].port
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read()
        text = body.decode()
        self.assertIn("vitjob_reconcile_total", text)
        self.assertIn("vitjob_reconcile_duration_seconds_bucket", text)
        # every client's requests are counted by code: lists/gets, creates
        self.assertRegex(text, r'vitjob_api_requests_total\{code="200"\} [1-9]')
        self.assertRegex(text, r'vitjob_api_requests_total\{code="201"\} [1-9]')
        self.assertRegex(text, r'vitjob_jobs_created_total [1-9]')
        self.assertIn("vitjob_workqueue_depth", text)
        for path in ("/healthz", "/readyz"):
            r = urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5)
            self.assertEqual(r.status, 200)

    def test_progress_is_the_workers_the_operator_never_writes_it_and_serves_it_as_job_metrics(self):
        self.apply(job_doc("prog"))
        self.wait_pods("prog", ["prog-worker-0-r0", "prog-worker-1-r0"])
        progress = {"step": 5, "totalSteps": 10, "epoch": 0.25, "loss": 1.25,
                    "imagesPerSecond": 300.5, "etaSeconds": 12, "eta": "12s", "lastCheckpointStep": 4,
                    "lastCheckpointURI": "file:///ck/step-000000004",
                    "updateTime": "2026-01-02T03:04:05Z"}
        r = self.c.patch(VJ + "/prog/status", {"status": {"progress": progress}})
        self.assertEqual(r.status, 200, r)
        # the operator's status writes (Running, then Succeeded) leave it as the worker wrote it
        self.run_all("prog")
        self.assertEqual(self.status("prog")["progress"], progress)
        port = self.ops[0].port

        def scrape():
            return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
        want = ['vitjob_job_step{namespace="default",name="prog"} 5\n',
                'vitjob_job_loss{namespace="default",name="prog"} 1.25\n',
                'vitjob_job_images_per_second{namespace="default",name="prog"} 300.5\n',
                'vitjob_job_eta_seconds{namespace="default",name="prog"} 12\n',
                'vitjob_job_replicas{namespace="default",name="prog"} 2\n',
                'vitjob_job_world_size{namespace="default",name="prog"} 2\n']
        text = wait_for("per-job metrics", lambda: all(w in scrape() for w in want) and scrape(), 10)
        for name in ("vitjob_job_step", "vitjob_job_loss", "vitjob_job_images_per_second",
                     "vitjob_job_eta_seconds", "vitjob_job_replicas", "vitjob_job_world_size"):
            self.assertIn("# TYPE %s gauge\n" % name, text)
            self.assertIn("# HELP %s " % name, text)
        for rank in range(2):
            self.set_pod("prog-worker-%d-r0" % rank, "Succeeded", exit_code=0)
        self.wait_phase("prog", "Succeeded")
        self.assertEqual(self.status("prog")["progress"], progress)
        # status.worldSize (an elastic job's, shrunk) is the world size served
        r = self.c.patch(VJ + "/prog/status", {"status": {"worldSize": 1}})
        self.assertEqual(r.status, 200, r)
        wait_for("the world size from status.worldSize", lambda: 'vitjob_job_world_size{namespace="default",'
                 'name="prog"} 1\n' in scrape(), 10)
        self.assertIn('vitjob_job_replicas{namespace="default",name="prog"} 2\n', scrape())
        # a job that goes away takes its series with it
        self.assertEqual(self.c.delete(VJ + "/prog").status, 200)
        wait_for("per-job series gone", lambda: 'name="prog"' not in scrape(), 10)

    def test_zz_token_never_appears_in_the_logs(self):
        self.assertNotIn(self.server.token, self.ops[0].text())
        self.assertNotIn(self.op_token, self.ops[0].text())
        self.assertNotIn(self.op_token.split(".")[2], self.ops[0].text())




class IdentityAndPodSecurityTest(Base):
    NS = "team1"

    def setUp(self):
        if self.c.get("/api/v1/namespaces/" + self.NS).status == 404:
            for args in (["create", "namespace", self.NS],
                         ["label", "namespace", self.NS, "pod-security.kubernetes.io/enforce=restricted"]):
                r = self.kubectl(args)
                self.assertEqual(r.returncode, 0, r.stderr)

    def ns_pods(self, name):
        r = self.c.get("/api/v1/namespaces/%s/pods?labelSelector=vitjob.dev/job-name%%3D%s" % (self.NS, name))
        return sorted(body(r)["items"], key=lambda p: p["metadata"]["name"])

    def test_job_in_a_restricted_namespace_gets_pods_an_identity_and_a_token_that_patches_only_its_status(self):
        for name in ("secure", "other"):
            doc = job_doc(name)
            doc["metadata"]["namespace"] = self.NS
            self.apply(doc)
        pods = wait_for("pods in a restricted namespace", lambda: len(self.ns_pods("secure")) == 2
                        and self.ns_pods("secure"))
        uid = body(self.c.get(vj_path(self.NS, "secure")))["metadata"]["uid"]
        for path in ("/api/v1/namespaces/team1/serviceaccounts/secure-worker",
                     "/apis/rbac.authorization.k8s.io/v1/namespaces/team1/roles/secure-worker",
                     "/apis/rbac.authorization.k8s.io/v1/namespaces/team1/rolebindings/secure-worker"):
            r = self.c.get(path)
            self.assertEqual(r.status, 200, path)
            self.assertEqual(body(r)["metadata"]["ownerReferences"][0]["uid"], uid, path)
        rank0, rank1 = pods
        self.assertEqual(rank0["spec"]["serviceAccountName"], "secure-worker")
        for p in (rank0, rank1):  # rank 0 reports progress; any surviving rank may report a lost peer
            self.assertTrue(any(v["name"].startswith("kube-api-access-") for v in p["spec"]["volumes"]),
                            "%s gets the token it reports with" % p["metadata"]["name"])
        r = self.kubectl(["create", "token", "secure-worker", "-n", self.NS])
        self.assertEqual(r.returncode, 0, r.stderr)
        worker = self.server.client(token=r.stdout.strip())
        r = worker.patch(vj_path(self.NS, "secure", "status"), {"status": {"progress": {"step": 5, "loss": 1.5}}})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(body(self.c.get(vj_path(self.NS, "secure")))["status"]["progress"]["step"], 5)
        r = worker.patch(vj_path(self.NS, "other", "status"), {"status": {"progress": {"step": 5}}})
        self.assertEqual(r.status, 403, r)
        self.assertEqual(r.body["message"], 'vitjobs.vitjob.dev "other" is forbidden: User '
                         '"system:serviceaccount:team1:secure-worker" cannot patch resource "vitjobs/status" in API '
                         'group "vitjob.dev" in the namespace "team1"')
        self.assertEqual(worker.patch(vj_path(self.NS, "secure"), {"spec": {"suspend": True}}).status, 403)
        self.assertEqual(worker.get("/api/v1/namespaces/team1/pods").status, 403)
        self.assertEqual(worker.get("/api/v1/namespaces/team1/secrets").status, 403)

    def test_a_pod_that_breaks_the_restricted_standard_is_refused_and_fails_the_job_with_the_servers_words(self):
        doc = job_doc("rooty", template={"containerSecurityContext": {"runAsUser": 0}})
        doc["metadata"]["namespace"] = self.NS
        self.apply(doc)
        st = wait_for("rooty failed", lambda: (body(self.c.get(vj_path(self.NS, "rooty"))).get("status") or {})
                      .get("phase") == "Failed" and body(self.c.get(vj_path(self.NS, "rooty")))["status"])
        failed = [c for c in st["conditions"] if c["type"] == "Failed"][0]
        self.assertEqual(failed["reason"], "FailedCreate")
        self.assertIn('violates PodSecurity "restricted:latest"', failed["message"])
        self.assertIn("allowPrivilegeEscalation != false", failed["message"])
        self.assertEqual(self.ns_pods("rooty"), [])


class NamespacesTest(Base):
    # --namespace with a list: an informer per namespace, one work queue
    WATCHED = ("ns-a", "ns-b")
    UNWATCHED = "ns-c"
    operator_args = ("--namespace", ",".join(WATCHED))

    def setUp(self):
        for ns in self.WATCHED + (self.UNWATCHED,):
            if self.c.get("/api/v1/namespaces/" + ns).status == 404:
                r = self.kubectl(["create", "namespace", ns])
                self.assertEqual(r.returncode, 0, r.stderr)

    def ns_get(self, ns, what):
        r = self.c.get("/api/v1/namespaces/%s/%s" % (ns, what))
        return body(r) if r.status == 200 else None

    def ns_pods(self, ns, name):
        items = self.ns_get(ns, "pods?labelSelector=vitjob.dev/job-name%3D" + name)["items"]
        return sorted(p["metadata"]["name"] for p in items)

    def test_jobs_in_each_listed_namespace_run_and_a_job_in_an_unlisted_one_is_left_alone(self):
        for ns in (self.UNWATCHED,) + self.WATCHED:
            doc = job_doc("multi")
            doc["metadata"]["namespace"] = ns
            self.apply(doc)
        for ns in self.WATCHED:
            wait_for("pods in " + ns, lambda: self.ns_pods(ns, "multi") ==
                     ["multi-worker-0-r0", "multi-worker-1-r0"], 15)
            self.assertIsNotNone(self.ns_get(ns, "configmaps/multi-config"), ns)
            wait_for("status in " + ns, lambda: (body(self.c.get(vj_path(ns, "multi"))).get("status")
                                                  or {}).get("phase"), 15)
        # a change in a watched namespace is still seen after both listed:
        # the one queue serves every namespace's informers
        self.c.patch("/api/v1/namespaces/ns-b/pods/multi-worker-0-r0/status",
                     {"status": {"phase": "Running"}})
        self.c.patch("/api/v1/namespaces/ns-b/pods/multi-worker-1-r0/status",
                     {"status": {"phase": "Running"}})
        wait_for("ns-b's job running", lambda: (body(self.c.get(vj_path("ns-b", "multi"))).get("status")
                                                 or {}).get("phase") == "Running", 15)
        time.sleep(1.0)  # time enough for a wrongly queued key to be reconciled
        self.assertEqual(self.ns_pods(self.UNWATCHED, "multi"), [], "no pods in the unwatched namespace")
        self.assertIsNone(self.ns_get(self.UNWATCHED, "configmaps/multi-config"))
        self.assertNotIn("status", body(self.c.get(vj_path(self.UNWATCHED, "multi"))),
                         "no status on the unwatched namespace's job")
        self.assertNotIn("namespace=" + self.UNWATCHED, self.ops[0].text())
        self.assertIn("namespace=ns-a,ns-b", self.ops[0].text())

    def test_a_bad_name_in_the_list_exits_2_naming_it(self):
        r = subprocess.run([OPERATOR, "--kubeconfig", self.op_kubeconfig, "--metrics-addr", "127.0.0.1:0",
                            "--namespace", "ns-a,Team_B"], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("Team_B", r.stdout + r.stderr)
        self.assertIn("not a valid namespace name", r.stdout + r.stderr)


def stamp(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def parse_stamp(s):
    return calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))


class ElasticBase(Base):
    """Issue 44, elastic jobs and Nodes. The tests play the scheduler
    (PodScheduled in the pods' status) and the kubelet."""

    def node(self, name, ready_at, cordoned=False):
        """A Node (created now if need be) that is Ready since ready_at."""
        if self.c.get("/api/v1/nodes/" + name).status == 404:
            r = self.c.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                              "metadata": {"name": name},
                                              "spec": {"unschedulable": cordoned}})
            self.assertEqual(r.status, 201, r)
        r = self.c.patch("/api/v1/nodes/%s/status" % name, {"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "lastHeartbeatTime": stamp(ready_at), "lastTransitionTime": stamp(ready_at)}]}})
        self.assertEqual(r.status, 200, r)

    def shrink_to_two(self, name):
        """A 3-pod elastic job whose third pod cannot be placed: once its
        pendingTimeoutSeconds have passed (the Unschedulable condition is
        dated back), the operator restarts it at 2; those 2 run."""
        self.apply(job_doc(name, replicas=3, training={
            "steps": 10, "globalBatchSize": 96, "microBatchSize": 16, "optimizer": {"warmupSteps": 1}},
            elastic={"minReplicas": 2, "pendingTimeoutSeconds": 15, "growCheckSeconds": 3600}))
        gen0 = ["%s-worker-%d-r0" % (name, r) for r in range(3)]
        self.wait_pods(name, gen0)
        placed = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(time.time())}]
        for pod in gen0[:2]:
            self.set_pod(pod, "Running", conditions=placed)
        self.set_pod(gen0[2], "Pending", conditions=[{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/2 nodes are available: 2 Insufficient cpu.",
            "lastTransitionTime": stamp(time.time() - 60)}])
        st = wait_for("the shrink to 2", lambda: self.status(name).get("worldSize") == 2 and
                      self.status(name), 15)
        self.assertEqual((self.cond(st, "Elastic") or {}).get("reason"), "ShrunkUnschedulable", st)
        gen1 = ["%s-worker-%d-r1" % (name, r) for r in range(2)]
        wait_for("the pods of generation 1", lambda: set(gen1) <= set(self.live_pod_names(name)), 15)
        for pod in gen1:
            self.set_pod(pod, "Running", conditions=placed)
        return wait_for("running at 2", lambda: self.status(name).get("phase") == "Running" and
                        self.status(name), 15)

    @staticmethod
    def cond(st, ctype):
        return next((c for c in st.get("conditions") or [] if c["type"] == ctype), None)

    def reconciles(self):
        """How many reconciles the operator has finished (its /metrics)."""
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.ops[0].port,
                                      timeout=5).read().decode()
        return sum(float(v) for v in re.findall(r"^vitjob_reconcile_total\{[^}]*\} (\S+)$", text, re.M))


class ElasticNodesTest(ElasticBase):
    """A shrunk elastic job grows as soon as a Node becomes Ready, with
    growCheckSeconds an hour away: the operator watches Nodes."""

    def test_a_shrunk_job_grows_as_soon_as_a_node_becomes_ready_not_at_its_hour_long_check(self):
        st = self.shrink_to_two("grow")
        resized = parse_stamp(st["elasticResizeTime"])
        # a cordoned node is no capacity: a reconcile after it leaves the job at 2
        self.node("cordoned-node", resized + 1, cordoned=True)
        before = self.reconciles()
        r = self.c.patch(VJ + "/grow", {"metadata": {"labels": {"poke": "1"}}})
        self.assertEqual(r.status, 200, r)
        wait_for("a reconcile after the cordoned node", lambda: self.reconciles() > before, 15)
        self.assertEqual(self.status("grow").get("worldSize"), 2)
        self.assertIsNone(self.status("grow").get("elasticGrowFrom"))
        self.assertNotIn("node=cordoned-node", self.ops[0].text())
        # a node Ready after the shrink: the growth starts now, 3600 s early
        self.node("new-node", resized + 1)
        st = wait_for("the growth to 3", lambda: self.status("grow").get("worldSize") == 3 and
                      self.status("grow"), 15)
        self.assertEqual(st.get("elasticGrowFrom"), 2, st)
        el = self.cond(st, "Elastic")
        self.assertEqual(el["reason"], "Growing", el)
        # Ready since the later of its Ready condition and its creation (the
        # node is created now, which a loaded machine may make a second or
        # more after resized + 1: nodehealth.c's vj_node_ready_since)
        created = parse_stamp(self.c.get("/api/v1/nodes/new-node").body["metadata"]["creationTimestamp"])
        self.assertIn("node new-node became Ready at %s" % stamp(max(created, resized + 1)), el["message"])
        self.assertRegex(self.ops[0].text(), r"event=node_ready node=new-node .*shrunk_jobs_queued=1")
        # the old pods are stopped (a checkpoint on SIGTERM), then the grown
        # generation is created (without a kubelet here a deleted pod goes at
        # once, so the moment with no pod is too short to watch for; the order
        # is test_decide's elastic_grows_after_the_check_interval_...)
        wait_for("the old generation gone and the grown one created", lambda: self.live_pod_names("grow") ==
                 ["grow-worker-%d-r2" % r for r in range(3)], 15)


class NodesForbiddenTest(ElasticBase):
    """The operator's ClusterRole without nodes (as the chart's watchNamespace
    Roles are): it says so once, is ready and reconciles; elastic jobs grow
    on their timer alone."""
    allowed_refusals = ('cannot list resource "nodes"',)

    @classmethod
    def before_operator(cls):
        path = "/apis/rbac.authorization.k8s.io/v1/clusterroles/vitjob-operator"
        role = body(cls.c.get(path))
        role["rules"] = [r for r in role["rules"] if "nodes" not in r.get("resources", [])]
        r = cls.c.put(path, role)
        assert r.status == 200, r

    def test_without_nodes_rbac_the_operator_says_so_once_is_ready_and_reconciles_on_the_timer(self):
        st = self.shrink_to_two("norbac")  # the operator reconciles: it is synced
        port = self.ops[0].port
        self.assertEqual(urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=5).status, 200)
        self.node("new-node", parse_stamp(st["elasticResizeTime"]) + 1)
        # a reconcile after the node is Ready (a change to the job wakes it)
        # leaves the job at 2: the operator cannot see the node
        before = self.reconciles()
        r = self.c.patch(VJ + "/norbac", {"metadata": {"labels": {"poke": "1"}}})
        self.assertEqual(r.status, 200, r)
        wait_for("a reconcile after the node", lambda: self.reconciles() > before, 15)
        st = self.status("norbac")
        self.assertEqual(st.get("worldSize"), 2, st)
        self.assertIsNone(st.get("elasticGrowFrom"), st)
        # and it still acts: a rank's permanent failure fails the job
        self.set_pod("norbac-worker-0-r1", "Failed", exit_code=2)
        wait_for("the permanent failure", lambda: self.status("norbac").get("phase") == "Failed", 15)
        wait_for("the refusal logged", lambda: "event=list_refused" in self.ops[0].text(), 15)
        text = self.ops[0].text()
        refusals = [line for line in text.splitlines() if "_refused" in line]
        self.assertEqual(len(refusals), 1, refusals)
        self.assertIn("resource=nodes", refusals[0])
        self.assertIn("code=403", refusals[0])
        self.assertIn("growCheckSeconds only", refusals[0])
        self.assertNotIn("event=node_ready", text)


class ChildrenTest(Base):
    def test_labels_and_annotations_others_add_to_children_survive_an_operator_restart(self):
        self.apply(job_doc("keep"))
        self.wait_pods("keep", ["keep-worker-0-r0", "keep-worker-1-r0"])
        paths = ["/api/v1/namespaces/default/configmaps/keep-config", "/api/v1/namespaces/default/services/keep",
                 "/api/v1/namespaces/default/serviceaccounts/keep-worker",
                 "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/keep-worker",
                 "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings/keep-worker"]
        for p in paths:
            r = self.c.patch(p, {"metadata": {"labels": {"backup": "daily"},
                                              "annotations": {"owner-team": "ml"}}})
            self.assertEqual(r.status, 200, r)
        versions = {p: body(self.c.get(p))["metadata"]["resourceVersion"] for p in paths}
        self.ops[0].stop()
        self.ops[0] = Operator(self.server, self.tmp, "op-restarted")
        # the restarted operator has relisted and reconciled: a new job proves it
        self.apply(job_doc("keep2"))
        self.wait_pods("keep2", ["keep2-worker-0-r0", "keep2-worker-1-r0"])
        time.sleep(1)
        for p in paths:
            meta = body(self.c.get(p))["metadata"]
            self.assertEqual(meta["labels"].get("backup"), "daily", p)
            self.assertEqual(meta.get("annotations", {}).get("owner-team"), "ml", p)
            self.assertEqual(meta["resourceVersion"], versions[p], "%s was written again" % p)

    def test_a_changed_spec_patches_the_configmap_keeping_others_labels(self):
        self.apply(job_doc("grow"))
        self.wait_pods("grow", ["grow-worker-0-r0", "grow-worker-1-r0"])
        cm = "/api/v1/namespaces/default/configmaps/grow-config"
        self.c.patch(cm, {"metadata": {"labels": {"backup": "daily"}}})
        self.c.patch(VJ + "/grow", {"spec": {"training": {"steps": 20}}})
        got = wait_for("config patched", lambda: json.loads(body(self.c.get(cm))["data"]["config.json"])
                       ["training"]["steps"] == 20 and body(self.c.get(cm)))
        self.assertEqual(got["metadata"]["labels"]["backup"], "daily")
        # the operator logs the patch after the server has applied it
        wait_for("the patch logged", lambda: "event=patched kind=ConfigMap" in self.ops[0].text())

    def test_names_valid_for_a_vitjob_but_not_for_its_service_fail_the_job_without_children(self):
        for name in ("1job", "my.job"):
            self.apply(job_doc(name))
            st = self.wait_phase(name, "Failed")
            failed = [c for c in st["conditions"] if c["type"] == "Failed"][0]
            self.assertEqual(failed["reason"], "InvalidSpec")
            self.assertIn('metadata.name="%s"' % name, failed["message"])
            self.assertIn("DNS-1035", failed["message"])
            self.assertEqual(self.pods(name), [])
            self.assertEqual(self.c.get("/api/v1/namespaces/default/services/" + name).status, 404)

    def test_template_values_a_pod_would_refuse_are_refused_at_apply_or_fail_the_job(self):
        doc = job_doc("lots", template={"resources": {"requests": {"cpu": "lots"}}})
        r = self.kubectl(["apply", "-f", "-"], stdin=json.dumps(doc))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('The ViTJob "lots" is invalid: spec.template.resources.requests.cpu: Invalid value: '
                      '"lots": spec.template.resources.requests.cpu in body should match', r.stderr)
        self.apply(job_doc("greedy", template={"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}))
        st = self.wait_phase("greedy", "Failed")
        failed = [c for c in st["conditions"] if c["type"] == "Failed"][0]
        self.assertEqual(failed["reason"], "InvalidSpec")
        self.assertIn("spec.template.resources.requests.cpu: must be less than or equal to the cpu limit",
                      failed["message"])
        self.assertEqual(self.pods("greedy"), [])

    def test_a_child_the_server_refuses_for_good_fails_the_job_once_with_its_message(self):
        self.apply(job_doc("nosa", template={"serviceAccountName": "missing-sa"}))
        st = self.wait_phase("nosa", "Failed")
        failed = [c for c in st["conditions"] if c["type"] == "Failed"][0]
        self.assertEqual(failed["reason"], "FailedCreate")
        self.assertIn('cannot create Pod default/nosa-worker-0-r0: pods "nosa-worker-0-r0" is forbidden: error '
                      'looking up service account default/missing-sa: serviceaccount "missing-sa" not found',
                      failed["message"])
        ev = self.kubectl(["get", "events", "--field-selector", "involvedObject.name=nosa"]).stdout
        self.assertIn("FailedCreate", ev)
        time.sleep(2)
        refusals = [line for line in self.ops[0].text().splitlines() if "event=refused" in line and "nosa" in line]
        self.assertEqual(len(refusals), 1, "a refusal is not retried: %s" % refusals)
        self.assertEqual(self.live_pod_names("nosa"), [])


VOLCANO_PG = "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups"
COSCHED_PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"


def gang_doc(name, replicas=2, **policy):
    return job_doc(name, replicas=replicas, runPolicy={"schedulingPolicy": policy})


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class GangSchedulingTest(Base):
    """With volcano's and scheduler-plugins' PodGroup CRDs installed
    (tests/cluster/testdata/podgroups.*.yaml, trimmed from the upstream ones)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for f in ("podgroups.volcano.yaml", "podgroups.coscheduling.yaml"):
            r = cls.kubectl(["apply", "-f", os.path.join(HERE, "testdata", f)])
            assert r.returncode == 0, r.stderr
        for gv in ("scheduling.volcano.sh/v1beta1", "scheduling.x-k8s.io/v1alpha1"):
            wait_for("%s served" % gv, lambda: cls.c.get("/apis/" + gv).status == 200)

    def podgroup(self, base, name):
        r = self.c.get(base + "/" + name)
        return body(r) if r.status == 200 else None

    def condition(self, name, ctype):
        return next((c for c in self.status(name).get("conditions", []) if c["type"] == ctype), None)

    def assert_owned_and_collected(self, base, name):
        pg = self.podgroup(base, name)
        ref = pg["metadata"]["ownerReferences"][0]
        self.assertEqual((ref["kind"], ref["name"], ref["uid"], ref["controller"]),
                         ("ViTJob", name, self.job(name)["metadata"]["uid"], True))
        r = self.kubectl(["delete", "vj", name])
        self.assertEqual(r.returncode, 0, r.stderr)
        wait_for("podgroup %s collected" % name, lambda: self.c.get(base + "/" + name).status == 404)

    def test_volcano_gang_gets_an_owned_podgroup_and_pods_annotated_for_the_volcano_scheduler(self):
        self.apply(gang_doc("gv", gang="volcano", minAvailable=1, queue="research",
                            priorityClass="high-priority"))
        self.wait_pods("gv", ["gv-worker-0-r0", "gv-worker-1-r0"])
        pg = self.podgroup(VOLCANO_PG, "gv")
        self.assertEqual(pg["spec"], {"minMember": 1, "queue": "research",
                                      "priorityClassName": "high-priority"})
        for pod in self.pods("gv"):
            self.assertEqual(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "gv")
            self.assertEqual(pod["spec"]["schedulerName"], "volcano")
        self.assertIsNone(self.podgroup(COSCHED_PG, "gv"))
        self.assert_owned_and_collected(VOLCANO_PG, "gv")

    def test_coscheduling_gang_gets_an_owned_podgroup_of_all_replicas_and_pods_labelled_with_it(self):
        self.apply(gang_doc("gc", gang="coscheduling", scheduleTimeoutSeconds=30))
        self.wait_pods("gc", ["gc-worker-0-r0", "gc-worker-1-r0"])
        pg = self.podgroup(COSCHED_PG, "gc")
        self.assertEqual(pg["spec"], {"minMember": 2, "scheduleTimeoutSeconds": 30})
        for pod in self.pods("gc"):
            self.assertEqual(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "gc")
            self.assertNotIn("scheduling.k8s.io/group-name", pod["metadata"].get("annotations", {}))
            self.assertNotEqual(pod["spec"].get("schedulerName"), "volcano")
        self.assertIsNone(self.podgroup(VOLCANO_PG, "gc"))
        self.assert_owned_and_collected(COSCHED_PG, "gc")

    def test_a_volcano_podgroup_unschedulable_past_the_timeout_shows_the_schedulers_message(self):
        self.apply(gang_doc("gu", gang="volcano", scheduleTimeoutSeconds=1))
        self.wait_pods("gu", ["gu-worker-0-r0", "gu-worker-1-r0"])
        why = "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable"
        # volcano's PodGroup has no status subresource: the scheduler patches the object
        r = self.c.patch(VOLCANO_PG + "/gu", {"status": {"phase": "Pending", "conditions": [{
            "type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
            "message": why, "transitionID": "1", "lastTransitionTime": rfc3339(time.time() - 5)}]}})
        self.assertEqual(r.status, 200, r)
        cond = wait_for("GangUnschedulable", lambda: self.condition("gu", "GangUnschedulable"), 20)
        self.assertEqual((cond["status"], cond["reason"]), ("True", "PodGroupUnschedulable"))
        self.assertIn(why, cond["message"])
        self.assertIn("scheduleTimeoutSeconds=1", cond["message"])
        self.assertEqual(self.status("gu")["phase"], "Pending")
        # the scheduler places the gang: the condition goes False
        r = self.c.patch(VOLCANO_PG + "/gu", {"status": {"phase": "Running", "conditions": None}})
        self.assertEqual(r.status, 200, r)
        self.run_all("gu")
        wait_for("GangUnschedulable False",
                 lambda: self.condition("gu", "GangUnschedulable")["status"] == "False", 20)

    def test_a_coscheduling_podgroup_pending_past_the_timeout_shows_as_a_condition(self):
        self.apply(gang_doc("gp", gang="coscheduling", scheduleTimeoutSeconds=1))
        self.wait_pods("gp", ["gp-worker-0-r0", "gp-worker-1-r0"])
        r = self.c.patch(COSCHED_PG + "/gp/status", {"status": {
            "phase": "Pending", "scheduleStartTime": rfc3339(time.time() - 5)}})
        self.assertEqual(r.status, 200, r)
        cond = wait_for("GangUnschedulable", lambda: self.condition("gp", "GangUnschedulable"), 20)
        self.assertEqual((cond["status"], cond["reason"]), ("True", "PodGroupUnschedulable"))
        self.assertIn("phase Pending, 0 of minMember 2 running", cond["message"])


class GangWithoutCRDTest(Base):
    def test_the_crd_refuses_an_unknown_gang_and_min_available_above_replicas_naming_the_field(self):
        for policy, want in (({"gang": "kueue"}, 'spec.runPolicy.schedulingPolicy.gang: Unsupported value: '
                              '"kueue": supported values: "none", "volcano", "coscheduling"'),
                             ({"gang": "volcano", "minAvailable": 3},
                              "runPolicy.schedulingPolicy.minAvailable must not exceed replicas"),
                             ({"gang": "volcano", "scheduleTimeoutSeconds": 0},
                              "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds: Invalid value: 0: "
                              "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds in body should be "
                              "greater than or equal to 1")):
            r = self.kubectl(["apply", "-f", "-"], stdin=json.dumps(gang_doc("badgang", **policy)))
            self.assertNotEqual(r.returncode, 0, policy)
            self.assertIn(want, r.stderr)
        self.assertIsNone(self.job("badgang"))

    def test_a_gang_without_its_podgroup_crd_gets_one_condition_no_pods_and_no_hot_loop(self):
        self.apply(gang_doc("nocrd", gang="volcano"))
        cond = wait_for("GangSchedulingUnavailable", lambda: next(
            (c for c in self.status("nocrd").get("conditions", [])
             if c["type"] == "GangSchedulingUnavailable"), None))
        self.assertEqual((cond["status"], cond["reason"]), ("True", "PodGroupCRDMissing"))
        self.assertIn("gang scheduler volcano requested but its PodGroup CRD "
                      "(podgroups.scheduling.volcano.sh) is not installed", cond["message"])
        self.assertEqual(self.status("nocrd")["phase"], "Pending")
        time.sleep(3)
        self.assertEqual(self.live_pod_names("nocrd"), [])
        looks = [ln for ln in self.ops[0].text().splitlines()
                 if "podgroup_crd_missing" in ln and "job=nocrd" in ln]
        self.assertLessEqual(len(looks), 3, "not retried in a loop: %s" % looks)
        ev = self.kubectl(["get", "events", "--field-selector", "involvedObject.name=nocrd",
                           "-o", "json"]).stdout
        self.assertEqual([e["reason"] for e in json.loads(ev)["items"]].count("PodGroupCRDMissing"), 1)
        # once the CRD is installed, the next reconcile (here: a touched job) goes on
        r = self.kubectl(["apply", "-f", os.path.join(HERE, "testdata", "podgroups.volcano.yaml")])
        self.assertEqual(r.returncode, 0, r.stderr)
        wait_for("served", lambda: self.c.get("/apis/scheduling.volcano.sh/v1beta1").status == 200)
        r = self.kubectl(["annotate", "vj", "nocrd", "touched=1"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_pods("nocrd", ["nocrd-worker-0-r0", "nocrd-worker-1-r0"])
        self.assertEqual(body(self.c.get(VOLCANO_PG + "/nocrd"))["spec"]["minMember"], 2)
        wait_for("condition False", lambda: next(
            c for c in self.status("nocrd")["conditions"]
            if c["type"] == "GangSchedulingUnavailable")["status"] == "False")


class OperatorRestartTest(Base):
    def test_operator_killed_mid_reconcile_and_restarted_does_not_duplicate_pods(self):
        doc = job_doc("dup", replicas=3)
        doc["spec"]["training"]["globalBatchSize"] = 192  # 3 ranks x 64
        self.apply(doc)
        # kill it as soon as it has started creating the job's children
        wait_for("first child", lambda: self.c.get(
            "/api/v1/namespaces/default/configmaps/dup-config").status == 200, 10, 0.01)
        self.ops[0].stop(signal.SIGKILL)
        self.ops[0] = Operator(self.server, self.tmp, "op2")
        self.wait_pods("dup", ["dup-worker-0-r0", "dup-worker-1-r0", "dup-worker-2-r0"])
        self.apply(job_doc("dup2"))
        self.wait_pods("dup2", ["dup2-worker-0-r0", "dup2-worker-1-r0"])
        self.assertEqual(len(self.pods("dup")), 3)
        self.assertEqual(self.status("dup").get("restarts", 0), 0)

    def test_api_server_restart_under_the_operator_loses_no_work(self):
        self.apply(job_doc("before"))
        self.wait_pods("before", ["before-worker-0-r0", "before-worker-1-r0"])
        port = self.server.port
        self.server.stop()
        time.sleep(1)
        self.__class__.server = ServerProcess(os.path.join(self.tmp, "state"), port=port)
        self.__class__.c = self.server.client()
        self.apply(job_doc("after"))
        self.wait_pods("after", ["after-worker-0-r0", "after-worker-1-r0"], timeout=40)
        self.assertEqual(len(self.pods("before")), 2)


class WatchGoneTest(Base):
    # a history of 20 events: a watch that falls behind gets 410 and relists
    server_args = ("--history", "20")

    def test_too_old_resource_version_makes_the_operator_relist_and_carry_on(self):
        self.apply(job_doc("early"))
        self.wait_pods("early", ["early-worker-0-r0", "early-worker-1-r0"])
        op = self.ops[0]
        # Freeze the operator, cut its watches (server restart), and move the
        # history past its resourceVersions: its next watch gets 410 Gone.
        op.proc.send_signal(signal.SIGSTOP)
        try:
            port = self.server.port
            self.server.stop()
            self.__class__.server = ServerProcess(os.path.join(self.tmp, "state"), port=port,
                                                  args=self.server_args)
            self.__class__.c = self.server.client()
            for i in range(30):
                self.c.post("/api/v1/namespaces/default/configmaps",
                            {"metadata": {"name": "noise-%d" % i,
                                          "labels": {"vitjob.dev/job-name": "noise"}}})
            self.apply(job_doc("late"))
        finally:
            op.proc.send_signal(signal.SIGCONT)
        self.wait_pods("late", ["late-worker-0-r0", "late-worker-1-r0"], timeout=30)
        wait_for("a relist in the log", lambda: "event=relist" in op.text(), 10)
        self.assertEqual(len(self.pods("early")), 2)


LEASE = "/apis/coordination.k8s.io/v1/namespaces/default/leases/vitjob-operator"
# the Deployment's timings (manifests/02-operator.yaml, the chart's defaults)
HA_ARGS = ("--leader-elect", "--lease-namespace", "default", "--lease-duration", "8",
           "--renew-deadline", "6", "--retry-period", "1")


class LeaderElectionTest(Base):
    # the Deployment's timings: a leader that a loaded machine holds up for a
    # couple of seconds keeps its lease (a renew deadline of 2 s would not)
    operator_args = HA_ARGS

    def test_only_the_leader_acts_and_the_standby_takes_over_when_it_dies(self):
        wait_for("first leader", lambda: "event=controller_started" in self.ops[0].text())
        second = Operator(self.server, self.tmp, "op-b", self.operator_args,
                          env=dict(os.environ, POD_NAME="vitjob-operator-7d9f-b"))
        self.ops.append(second)
        self.apply(job_doc("led"))
        self.wait_pods("led", ["led-worker-0-r0", "led-worker-1-r0"], timeout=30)
        time.sleep(2.5)     # a couple of the standby's tries (every 1 s): it stays standby
        self.assertNotIn("event=controller_started", second.text())
        self.assertNotIn("event=created", second.text())
        lease = body(self.c.get(
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/vitjob-operator"))
        self.assertNotEqual(lease["spec"]["holderIdentity"], "")
        # the leader dies without releasing: the standby waits out the lease
        t0 = time.monotonic()
        self.ops[0].stop(signal.SIGKILL)
        wait_for("standby takes over", lambda: "event=controller_started" in second.text(), 40)
        self.assertLess(time.monotonic() - t0, 30)   # the 8 s lease and a try, not a hang
        self.apply(job_doc("led2"))
        self.wait_pods("led2", ["led2-worker-0-r0", "led2-worker-1-r0"], timeout=30)
        # POD_NAME (the Deployment's downward API) is the leader identity
        lease = body(self.c.get(
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/vitjob-operator"))
        self.assertEqual(lease["spec"]["holderIdentity"], "vitjob-operator-7d9f-b")


def now_rfc3339(delta=0.0):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + delta))


class TakeoverTest(Base):
    """The operator's HA as deployed: the leader is SIGKILLed (its node died: no
    Lease release), and the standby takes over and acts at once on what
    happened meanwhile, judging from the API server's state alone."""
    operator_args = HA_ARGS

    def test_standby_takes_over_a_killed_leader_and_at_once_acts_on_what_happened_while_none_led(self):
        wait_for("first leader", lambda: "event=controller_started" in self.ops[0].text())
        standby = Operator(self.server, self.tmp, "op-standby", self.operator_args,
                           env=dict(os.environ, POD_NAME="vitjob-operator-standby"))
        self.ops.append(standby)
        # a running job, its progress as rank 0 wrote it
        self.apply(job_doc("kept"))
        self.wait_pods("kept", ["kept-worker-0-r0", "kept-worker-1-r0"])
        self.run_all("kept")
        progress = {"step": 7, "totalSteps": 10, "updateTime": now_rfc3339()}
        self.assertEqual(self.c.patch(VJ + "/kept/status", {"status": {"progress": progress}}).status, 200)
        self.assertNotIn("event=controller_started", standby.text())
        # the leader's node dies: no Lease release, no last reconcile
        self.ops[0].stop(signal.SIGKILL)
        t_kill = time.monotonic()
        # meanwhile, with nobody leading: a new job, and a pod of the running one fails
        self.apply(job_doc("orphan"))
        self.set_pod("kept-worker-1-r0", "Failed", exit_code=1)
        time.sleep(0.5)
        self.assertEqual(self.pods("orphan"), [], "nobody leads yet")
        wait_for("the standby to take the Lease", lambda: body(self.c.get(LEASE))["spec"]["holderIdentity"]
                 == "vitjob-operator-standby" or None, 30)
        t_lease = time.monotonic()
        # it reconciles every job at once: the one created while none led, and
        # the gang restart the failure asks for, from the status on the server
        self.wait_pods("orphan", ["orphan-worker-0-r0", "orphan-worker-1-r0"], timeout=15)
        self.wait_pods("kept", ["kept-worker-0-r1", "kept-worker-1-r1"], timeout=15)
        t_acted = time.monotonic()
        st = self.status("kept")
        self.assertEqual(st["phase"], "Restarting")
        self.assertEqual(st["restarts"], 1)
        self.assertEqual(st["progress"], progress, "the workers' status is theirs: kept as written")
        self.assertEqual(body(self.c.get(LEASE))["spec"]["leaseTransitions"], 1)
        print("\ntakeover: lease taken %.1f s after the leader's SIGKILL, both jobs acted on %.1f s after it "
              "(lease-duration 8 s, retry-period 1 s)" % (t_lease - t_kill, t_acted - t_kill), file=sys.stderr)


    def test_lease_timings_out_of_order_exit_2_naming_the_rule(self):
        for lease, renew, retry in (("8", "8", "1"), ("8", "6", "6"), ("6", "8", "1"), ("8", "6", "0")):
            with self.subTest(lease=lease, renew=renew, retry=retry):
                r = subprocess.run([OPERATOR, "--kubeconfig", self.op_kubeconfig, "--metrics-addr", "127.0.0.1:0",
                                    "--leader-elect", "--lease-duration", lease, "--renew-deadline", renew,
                                    "--retry-period", retry], capture_output=True, text=True, timeout=10)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("need 0 < --retry-period < --renew-deadline < --lease-duration", r.stdout + r.stderr)

class ProgressStalledTest(Base):
    """Condition ProgressStalled from the status a (fake) rank 0 writes."""

    def stalled(self, name):
        for c in self.status(name).get("conditions", []):
            if c["type"] == "ProgressStalled":
                return c
        return None

    def test_a_job_whose_worker_stops_reporting_gets_progress_stalled_on_time_and_it_clears_when_reports_resume(self):
        self.apply(job_doc("quiet"))
        self.wait_pods("quiet", ["quiet-worker-0-r0", "quiet-worker-1-r0"])
        self.run_all("quiet")
        # The job has run for 10 minutes (as when this operator took it over
        # from another), and rank 0's last report is 50 s old: 10 s short of
        # the threshold (max(4 x 10 s, 60 s)). Nothing writes to the job after
        # this; the operator must requeue itself to see it go stale.
        conds = self.status("quiet")["conditions"]
        for c in conds:
            if c["type"] == "Running":
                c["lastTransitionTime"] = now_rfc3339(-600)
        r = self.c.patch(VJ + "/quiet/status", {"status": {"conditions": conds, "progress": {
            "step": 42, "totalSteps": 100, "eta": "35s", "updateTime": now_rfc3339(-50)}}})
        self.assertEqual(r.status, 200, r)
        time.sleep(2)
        self.assertIsNone(self.stalled("quiet"), "not stalled before the threshold")
        c = wait_for("ProgressStalled True", lambda: (self.stalled("quiet") or {}).get("status") == "True"
                     and self.stalled("quiet"), 30)
        self.assertEqual(c["reason"], "NoProgressReport")
        self.assertIn("no progress report for 60s (the last: step 42 at ", c["message"])
        self.assertEqual(self.status("quiet")["phase"], "Running", "a stall is shown, not acted on")
        self.assertEqual(self.status("quiet")["progress"]["step"], 42, "progress stays the worker's")
        # rank 0 reports again
        r = self.c.patch(VJ + "/quiet/status", {"status": {"progress": {"step": 43, "updateTime": now_rfc3339()}}})
        self.assertEqual(r.status, 200, r)
        c = wait_for("ProgressStalled False", lambda: (self.stalled("quiet") or {}).get("status") == "False"
                     and self.stalled("quiet"), 15)
        self.assertEqual(c["reason"], "ProgressResumed")
        self.assertIn("step 43", c["message"])

if __name__ == "__main__":
    testlimit.main(300)
