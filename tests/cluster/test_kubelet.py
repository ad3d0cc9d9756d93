#!/usr/bin/python3
# tests/cluster/test_kubelet.py: tests/cluster/kubelet, the local kubelet of
# the test cluster, on a one-node local cluster (localcluster.py): what a pod
# sees (hostname, its address, the pod DNS names of a headless Service in
# /etc/hosts, ConfigMap/Secret volumes, the service-account token, env from
# field and secret refs, the worker image's ENV, its user), the status it
# reports (exit codes, the termination message: the file at its path, else
# the log tail), graceful
# deletion (SIGTERM, then SIGKILL after the grace period, then the pod is
# gone), and a killed kubelet taking
# its pods with it; `kubectl logs` through the API server and the kubelet
# API (plain, --tail, --timestamps, --limit-bytes, --follow while the
# container runs, --previous after a restart, the wording for a container
# that has not started). Pods run shell commands with an image named
# `*vitjob-worker*` (the kubelet runs any command for such images).
# Needs root; skipped, saying why, without. Run from the repository root:
#   /usr/bin/python3 -m tests.cluster.test_kubelet -v

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from tests.cluster import testlimit
from tests.cluster.harness import wait_for
from tests.cluster.localcluster import KUBECTL, LocalCluster, missing_prerequisites

WHY_NOT = missing_prerequisites()
IMAGE = "example.com/vitjob-worker:test"


def pod(name, script, **spec):
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
         "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                  "containers": [{"name": "c", "image": IMAGE, "command": ["/bin/sh", "-c", script]}]}}
    p["spec"].update(spec)
    return p


class ImageEnv(unittest.TestCase):
    def test_the_worker_images_env_here_is_the_env_its_dockerfile_sets(self):
        from tests.cluster.kubelet.image import WORKER_ENV
        root = os.path.join(os.path.dirname(__file__), "..", "..")
        env = {}
        with open(os.path.join(root, "docker", "worker.Dockerfile")) as f:
            for ln in f:
                if ln.startswith("ENV ") and not ln.startswith("ENV PATH="):
                    k, _, v = ln[4:].strip().partition("=")
                    env[k] = v
        self.assertEqual(WORKER_ENV, env)


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class Kubelet(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="vitjob-kubelet-")
        os.chmod(cls.work, 0o755)
        cls.c = LocalCluster(cls.work, nodes=1).start()

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def apply(self, obj):
        self.c.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def get(self, name):
        return self.c.get_json("pod", name)

    def finished(self, name):
        p = self.get(name)
        return p if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    def test_a_pod_sees_its_name_address_peers_volumes_token_env_and_user(self):
        c = self.c
        c.kubectl("create", "configmap", "cfg", "--from-literal=config.json={\"a\": 1}")
        c.kubectl("create", "secret", "generic", "sec", "--from-literal=KEY=s3cr3t")
        c.kubectl("create", "serviceaccount", "runner")
        self.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "grp", "namespace": "default"},
                    "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                             "selector": {"app": "grp"}, "ports": [{"name": "p", "port": 1}]}})
        self.apply(pod("peer", "sleep 60", hostname="w-1", subdomain="grp"))
        wait_for("the peer's address", lambda: (self.get("peer").get("status") or {}).get("podIP"), 30, 0.2)
        script = ("set -e; hostname; id -u; cat /etc/vitjob/config.json; echo; "
                  "test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token-ok; "
                  "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; "
                  "echo env=$MY_POD/$MY_KEY/$KUBERNETES_SERVICE_HOST/$OMP_WAIT_POLICY; "
                  "for i in $(seq 50); do getent hosts w-1.grp.default.svc >/dev/null && break; sleep 0.1; done; "
                  "getent hosts w-1.grp.default.svc; getent hosts w-0.grp.default.svc.cluster.local")
        p = pod("seer", script, hostname="w-0", subdomain="grp", serviceAccountName="runner",
                securityContext={"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532},
                volumes=[{"name": "config", "configMap": {"name": "cfg"}}])
        ct = p["spec"]["containers"][0]
        ct["volumeMounts"] = [{"name": "config", "mountPath": "/etc/vitjob", "readOnly": True}]
        ct["env"] = [{"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                     {"name": "MY_KEY", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "KEY"}}}]
        self.apply(p)
        try:
            done = wait_for("the pod to finish", lambda: self.finished("seer"), 30, 0.2)
        except AssertionError:
            raise AssertionError(json.dumps(self.get("seer").get("status")) + self.c.pod_log(self.get("seer")))
        log = self.c.pod_log(done)
        self.assertEqual(done["status"]["phase"], "Succeeded", log)
        lines = log.splitlines()
        self.assertEqual(lines[0], "w-0")
        self.assertEqual(lines[1], "65532")
        self.assertEqual(lines[2], '{"a": 1}')
        self.assertIn("token-ok", lines)
        self.assertIn("default", lines)
        self.assertIn("env=seer/s3cr3t/10.89.0.1/PASSIVE", lines)   # the image's ENV too
        peer_ip = self.get("peer")["status"]["podIP"]
        self.assertTrue(any(ln.startswith(peer_ip + " ") and "w-1.grp.default.svc" in ln for ln in lines), log)
        self.assertTrue(any(ln.startswith(done["status"]["podIP"] + " ") for ln in lines), log)
        self.assertFalse(os.path.exists("/etc/vitjob"), "mount points are made on a pod-private overlay")
        cs = done["status"]["containerStatuses"][0]
        self.assertEqual(cs["state"]["terminated"]["exitCode"], 0)
        self.assertEqual(cs["state"]["terminated"]["reason"], "Completed")
        c.kubectl("delete", "pod", "peer", "--grace-period=1", "--wait=false")

    def test_a_failed_container_reports_its_exit_code_and_its_log_tail_as_message(self):
        p = pod("fails", "echo first; echo 'exit_code=3 class=data retried=no'; exit 3")
        p["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
        self.apply(p)
        done = wait_for("the pod to fail", lambda: self.finished("fails"), 30, 0.2)
        self.assertEqual(done["status"]["phase"], "Failed")
        t = done["status"]["containerStatuses"][0]["state"]["terminated"]
        self.assertEqual((t["exitCode"], t["reason"]), (3, "Error"))
        self.assertTrue(t["message"].endswith("exit_code=3 class=data retried=no"), t)

    def test_the_termination_message_is_the_file_at_its_path_and_the_log_tail_only_when_it_is_empty(self):
        runs = {
            # a failed container that wrote the file: the file, not its log
            "says": ("echo noise; printf 'the error line' > /dev/termination-log; exit 3", {}),
            # more than 4096 bytes: the end is kept, as a real kubelet keeps it
            "long": ("head -c 5000 /dev/zero | tr '\\0' a > /dev/termination-log; "
                     "printf END >> /dev/termination-log", {}),
            # a path of its own, written by a user that is not root
            "mine": ("printf 'at my path' > /var/msg; exit 1",
                     {"terminationMessagePath": "/var/msg", "securityContext": {"runAsUser": 65532}}),
            # an empty file and a failure: the log's tail stands in
            "tail": ("echo last words; exit 1", {}),
            # an empty file and a success: no message
            "quiet": ("echo fine", {}),
        }
        for name, (script, extra) in runs.items():
            p = pod(name, script)
            p["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
            p["spec"]["containers"][0].update(extra)
            self.apply(p)
        got = {}
        for name in runs:
            done = wait_for(name + " to finish", lambda: self.finished(name), 30, 0.2)
            got[name] = done["status"]["containerStatuses"][0]["state"]["terminated"].get("message")
        self.assertEqual(got["says"], "the error line")
        self.assertEqual((len(got["long"]), got["long"][-4:]), (4096, "aEND"))
        self.assertEqual(got["mine"], "at my path")
        self.assertEqual(got["tail"], "last words")
        self.assertIsNone(got["quiet"])
        self.assertFalse(os.path.exists("/dev/termination-log"), "the file is mounted in the pod only")

    def test_deletion_sends_sigterm_then_sigkill_after_the_grace_period_then_the_pod_is_gone(self):
        mark = os.path.join(self.work, "termed")
        self.apply(pod("polite", "trap 'touch %s; exit 0' TERM; while :; do sleep 0.1; done" % mark))
        self.apply(pod("stubborn", "trap '' TERM; while :; do sleep 0.1; done", terminationGracePeriodSeconds=2))
        for n in ("polite", "stubborn"):
            wait_for(n + " running", lambda: (self.get(n).get("status") or {}).get("phase") == "Running", 30, 0.2)
        t0 = time.monotonic()
        self.c.kubectl("delete", "pod", "polite", "stubborn", "--wait=false")
        wait_for("polite gone", lambda: not self.get("polite"), 30, 0.2)
        self.assertTrue(os.path.exists(mark), "SIGTERM came first")
        wait_for("stubborn gone", lambda: not self.get("stubborn"), 20, 0.2)
        self.assertGreaterEqual(time.monotonic() - t0, 2.0, "the grace period was given")

    def logs(self, *args):
        return self.c.kubectl("logs", *args, check=False)

    def test_kubectl_logs_shows_the_output_its_tail_timestamps_and_a_byte_limit(self):
        self.apply(pod("talker", "for i in $(seq 1 10); do echo line-$i; done; sleep 0.3; echo oops >&2"))
        wait_for("talker to finish", lambda: self.finished("talker"), 30, 0.2)
        r = self.logs("talker")
        self.assertEqual((r.returncode, r.stdout), (0, "".join("line-%d\n" % i for i in range(1, 11)) + "oops\n"),
                         r.stderr)
        self.assertEqual(self.logs("talker", "--tail=3").stdout, "line-9\nline-10\noops\n")
        self.assertEqual(self.logs("talker", "--limit-bytes=9").stdout, "line-1\nli")
        stamped = self.logs("talker", "--timestamps", "--tail=2").stdout.splitlines()
        self.assertEqual(len(stamped), 2, stamped)
        self.assertRegex(stamped[0], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z line-10$")
        self.assertEqual(self.logs("talker", "--since=1h").stdout.count("\n"), 11)
        r = self.logs("talker", "--previous")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('previous terminated container "c" in pod "talker" not found', r.stderr)
        r = self.logs("nobody-here")
        self.assertIn('pods "nobody-here" not found', r.stderr)

    def test_kubectl_logs_follow_reads_lines_while_the_container_runs_and_ends_when_it_exits(self):
        self.apply(pod("ticker", "for i in $(seq 1 8); do echo tick-$i; sleep 0.5; done"))
        wait_for("ticker running", lambda: (self.get("ticker").get("status") or {}).get("phase") == "Running",
                 30, 0.1)
        p = subprocess.Popen([KUBECTL, "logs", "-f", "ticker"], env=dict(os.environ, KUBECONFIG=self.c.kubeconfig),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = p.stdout.readline()
            self.assertEqual(first, "tick-1\n", p.stderr.read() if not first else "")
            self.assertEqual(self.get("ticker")["status"]["phase"], "Running", "read while the container runs")
            rest = p.stdout.read()
            self.assertEqual(p.wait(30), 0, p.stderr.read())
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
        self.assertEqual(first + rest, "".join("tick-%d\n" % i for i in range(1, 9)))
        self.assertEqual(self.get("ticker")["status"]["phase"], "Succeeded", "it ended when the container did")

    def test_kubectl_logs_previous_shows_the_container_before_its_restart(self):
        script = ("n=$(cat /etc/restarter/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /etc/restarter/n; echo instance-$n; "
                  "[ $n -ge 2 ] || exit 1; exec sleep 60")
        p = pod("restarter", script, restartPolicy="OnFailure", terminationGracePeriodSeconds=1,
                volumes=[{"name": "data", "emptyDir": {}}])
        p["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/etc/restarter"}]
        self.apply(p)

        def restarted():
            cs = ((self.get("restarter").get("status") or {}).get("containerStatuses") or [{}])[0]
            return cs.get("restartCount", 0) >= 1 and "running" in (cs.get("state") or {})
        wait_for("restarter to restart", restarted, 30, 0.2)
        wait_for("the new instance's line", lambda: self.logs("restarter").stdout == "instance-2\n", 10, 0.2)
        r = self.logs("restarter", "--previous")
        self.assertEqual((r.returncode, r.stdout), (0, "instance-1\n"), r.stderr)
        self.c.kubectl("delete", "pod", "restarter", "--wait=false")

    def test_kubectl_logs_of_a_container_not_started_says_what_it_waits_for(self):
        p = pod("blocked", "echo never", volumes=[{"name": "cfg", "configMap": {"name": "absent"}}])
        p["spec"]["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/blocked"}]
        self.apply(p)
        wait_for("blocked waiting", lambda: ((self.get("blocked").get("status") or {}).get(
            "containerStatuses") or [{}])[0].get("state", {}).get("waiting", {}).get("reason") ==
            "CreateContainerConfigError", 30, 0.2)
        r = self.logs("blocked")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('container "c" in pod "blocked" is waiting to start: CreateContainerConfigError', r.stderr)
        self.c.kubectl("delete", "pod", "blocked", "--wait=false")

    def test_the_kubelet_api_refuses_a_client_without_a_certificate_of_the_cluster_ca(self):
        import ssl
        import urllib.request
        node = self.c.get_json("node", "node-1")
        port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        ip = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"][0]
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen("https://%s:%d/containerLogs/default/x/c" % (ip, port), context=ctx, timeout=10)
        self.assertEqual(e.exception.code, 401)

    def test_a_killed_kubelet_takes_its_pods_processes_with_it(self):
        self.apply(pod("victim", "exec sleep 300"))
        running = wait_for("victim running", lambda: (self.get("victim").get("status") or {}).get(
            "containerStatuses", [{}])[0].get("state", {}).get("running") and self.get("victim"), 30, 0.2)
        pid = int(running["status"]["containerStatuses"][0]["containerID"].rsplit("/", 1)[1])
        os.kill(pid, 0)
        self.c.kill_node("node-1")
        try:
            def dead():
                try:
                    with open("/proc/%d/stat" % pid) as f:
                        return f.read().split()[2] == "Z"
                except OSError:
                    return True
            wait_for("the pod's process to die", dead, 10, 0.2)
        finally:
            self.c.start_node(1)        # the node comes back for the other tests


if __name__ == "__main__":
    testlimit.main(300)
