#!/usr/bin/python3
# tests/cluster/test_kubelet.py: tests/cluster/kubelet, the local kubelet of
# the test cluster, on a one-node local cluster (localcluster.py): what a pod
# sees (hostname, its address, the pod DNS names of a headless Service in
# /etc/hosts, ConfigMap/Secret volumes, the service-account token, env from
# field and secret refs, its user), the status it reports (exit codes, the log
# tail as termination message), graceful deletion (SIGTERM, then SIGKILL
# after the grace period, then the pod is gone), and a killed kubelet taking
# its pods with it. Pods run shell commands with an image named
# `*vitjob-worker*` (the kubelet runs any command for such images).
# Needs root; skipped, saying why, without. Run: /usr/bin/python3 tests/cluster/test_kubelet.py -v

import json
import os
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import wait_for  # noqa: E402
import testlimit  # noqa: E402
from localcluster import LocalCluster, missing_prerequisites  # noqa: E402

WHY_NOT = missing_prerequisites()
IMAGE = "example.com/vitjob-worker:test"


def pod(name, script, **spec):
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
         "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                  "containers": [{"name": "c", "image": IMAGE, "command": ["/bin/sh", "-c", script]}]}}
    p["spec"].update(spec)
    return p


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
                  "echo env=$MY_POD/$MY_KEY/$KUBERNETES_SERVICE_HOST; "
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
        self.assertIn("env=seer/s3cr3t/10.89.0.1", lines)
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
