#!/usr/bin/python3
# tests/cluster/test_controllers.py: tests/cluster/controllers (the test
# cluster's scheduler, deployment/replicaset, node lifecycle, taint manager
# and pod GC) against the test API server. The tests play the kubelet: they
# register Nodes (Ready, allocatable), renew their Leases in kube-node-lease
# and write pod phases and Ready conditions through pods/status.
# Each test starts its own API server and controllers, with short timings
# (node checks every 0.2 s, pod GC every 0.5 s) but the node monitor grace
# period of the real default, 40 s: a renewing thread that a loaded machine
# holds up for a while must not mark its node Unknown. The tests that need a
# lease to lapse restart the controllers with LAPSE_GRACE.
# Run: /usr/bin/python3 -m unittest tests/cluster/test_controllers.py

import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from tests.cluster import testlimit
from tests.cluster.harness import ServerProcess, stop_process, wait_for

CONTROLLERS = "tests.cluster.controllers"  # run as python3 -m, like this module
PODS = "/api/v1/namespaces/default/pods"
NODES = "/api/v1/nodes"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
RSS = "/apis/apps/v1/namespaces/default/replicasets"
GRACE = 40          # --node-monitor-grace-period of every test but those below
LAPSE_GRACE = 5     # ... of the tests in which a lease lapses (restart_controllers)


def ts(delta=0.0, micro=False):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=delta)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def cond(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


class ControllersTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="controllers-test-")
        self.server = ServerProcess(os.path.join(self.dir, "api"))
        self.api = self.server.client()
        self.stop_beats = {}
        self.beat_threads = []
        self.proc = None
        self.start_controllers()

    def tearDown(self):
        for ev in self.stop_beats.values():
            ev.set()
        for t in self.beat_threads:
            t.join(5)
        self.stop_controllers()
        self.server.stop()
        if self._outcome_ok():
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            sys.stderr.write("\nkept %s\n" % self.dir)

    def _outcome_ok(self):
        res = getattr(self, "_outcome", None)
        errs = getattr(getattr(res, "result", None), "errors", []) + \
            getattr(getattr(res, "result", None), "failures", [])
        return not any(t is self for t, _ in errs)

    # --- processes ---------------------------------------------------------------

    def start_controllers(self, *extra, grace=GRACE):
        self.logpath = os.path.join(self.dir, "controllers.log")
        deadline = time.monotonic() + 20
        started = self.logs().count("event=started") if os.path.exists(self.logpath) else 0
        self.log = open(self.logpath, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", CONTROLLERS, "--kubeconfig", self.server.kubeconfig,
             "--node-monitor-grace-period", str(grace), "--node-monitor-period", "0.2",
             "--pod-gc-period", "0.5", "--poll-interval", "0.2", "-v"] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        while self.logs().count("event=started") <= started:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.fail("controllers did not start:\n" + self.logs())
            time.sleep(0.05)

    def stop_controllers(self):
        rc = stop_process(self.proc) if self.proc else None
        self.log.close()
        return rc

    def restart_controllers(self, grace):
        """The controllers again, with this node monitor grace period."""
        self.stop_controllers()
        self.start_controllers(grace=grace)

    def logs(self):
        with open(self.logpath) as f:
            return f.read()

    # --- the fake kubelet ----------------------------------------------------------

    def ok(self, r, *codes):
        self.assertIn(r.status, codes or (200, 201), r)
        return r.body

    def update(self, path, change, sub=""):
        """Reads the object at path, change(obj), writes it back (to path +
        sub, a subresource); read and changed again on a 409, as client-go's
        RetryOnConflict: a controller may write the object in between (its
        status, a taint), which a real server refuses as a conflict too."""
        for _ in range(20):
            obj = self.ok(self.api.get(path))
            change(obj)
            r = self.api.put(path + sub, obj)
            if r.status != 409:
                return self.ok(r, 200)
        self.fail("%s: a conflict on each of 20 writes" % path)

    def add_node(self, name, labels=None, taints=None, cpu="4", memory="8Gi", pods="110", ready="True",
                 heartbeat=0.0, lease=True, unschedulable=False):
        spec = {}
        if taints:
            spec["taints"] = taints
        if unschedulable:
            spec["unschedulable"] = True
        self.ok(self.api.post(NODES, {"apiVersion": "v1", "kind": "Node",
                                      "metadata": {"name": name, "labels": labels or {}},
                                      "spec": spec}), 201)
        alloc = {"cpu": cpu, "memory": memory, "pods": pods}
        hb = ts(heartbeat)

        def status(node):
            node["status"] = {"capacity": alloc, "allocatable": alloc, "conditions": [
                {"type": t, "status": s, "reason": r, "message": "", "lastHeartbeatTime": hb,
                 "lastTransitionTime": hb}
                for t, s, r in (("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                                ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                                ("PIDPressure", "False", "KubeletHasSufficientPID"),
                                ("Ready", ready, "KubeletReady" if ready == "True" else "KubeletNotReady"))]}
        node = self.update(NODES + "/" + name, status, "/status")
        if lease:
            self.renew(name, heartbeat)
        return node

    def renew(self, name, delta=0.0):
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                         "renewTime": ts(delta, micro=True)}}
        r = self.api.get(LEASES + "/" + name)
        if r.status == 404:
            self.ok(self.api.post(LEASES, body), 201)
        else:
            body["metadata"]["resourceVersion"] = r.body["metadata"]["resourceVersion"]
            self.ok(self.api.put(LEASES + "/" + name, body))

    def keep_renewing(self, name):
        """A kubelet's lease loop: renew every 0.3 s until stopped."""
        stop = threading.Event()
        self.stop_beats[name] = stop

        def loop():
            while not stop.wait(0.3):
                try:
                    self.renew(name)
                except AssertionError:
                    pass
        t = threading.Thread(target=loop, daemon=True)
        t.start()
        self.beat_threads.append(t)
        return stop

    def post_ready(self, name):
        """The kubelet posts Ready True with a fresh heartbeat (retrying on 409)."""
        def ready(node):
            for c in node["status"]["conditions"]:
                c["lastHeartbeatTime"] = ts()
                if c["type"] == "Ready":
                    c.update(status="True", reason="KubeletReady", message="kubelet is posting ready status",
                             lastTransitionTime=ts())
                else:
                    c.update(status="False")
        self.update(NODES + "/" + name, ready, "/status")

    def pod_spec(self, cpu=None, tolerations=None, node_selector=None, node_name=None, preferred=None):
        c = {"name": "main", "image": "busybox"}
        if cpu:
            c["resources"] = {"requests": {"cpu": cpu}}
        spec = {"containers": [c]}
        if tolerations:
            spec["tolerations"] = tolerations
        if node_selector:
            spec["nodeSelector"] = node_selector
        if node_name:
            spec["nodeName"] = node_name
        if preferred:
            spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
        return spec

    def add_pod(self, name, **kw):
        return self.ok(self.api.post(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                            "spec": self.pod_spec(**kw)}), 201)

    def run_pod(self, name):
        """The kubelet starts the pod: phase Running, Ready True."""
        def running(pod):
            st = pod.setdefault("status", {})
            st["phase"] = "Running"
            conds = [c for c in st.get("conditions") or [] if c["type"] not in ("Ready", "ContainersReady")]
            conds += [{"type": "Ready", "status": "True", "lastTransitionTime": ts()},
                      {"type": "ContainersReady", "status": "True", "lastTransitionTime": ts()}]
            st["conditions"] = conds
        return self.update(PODS + "/" + name, running, "/status")

    def wait_for(self, what, fn, timeout=30):
        try:
            return wait_for(what, fn, timeout)
        except AssertionError as e:
            self.fail("%s\n--- controllers log:\n%s" % (e, self.logs()[-3000:]))

    def pod(self, name):
        r = self.api.get(PODS + "/" + name)
        return r.body if r.status == 200 else None

    def node_of(self, name):
        p = self.pod(name)
        return p and p["spec"].get("nodeName")

    # --- scheduler -----------------------------------------------------------------------

    def test_scheduler_binds_pod_to_the_ready_node_that_fits_not_tainted_full_unselected_or_not_ready(self):
        # names sort so that each wrong node would win the name tie-break
        self.add_node("a-tainted", labels={"disk": "ssd"},
                      taints=[{"key": "example.com/gpu", "value": "x", "effect": "NoSchedule"}])
        self.add_node("b-full", labels={"disk": "ssd"}, cpu="250m")
        self.add_node("c-unselected", labels={"disk": "hdd"})
        self.add_node("d-notready", labels={"disk": "ssd"}, ready="False")
        self.add_node("e-cordoned", labels={"disk": "ssd"}, unschedulable=True)
        self.add_node("f-nopods", labels={"disk": "ssd"}, pods="0")
        self.add_node("g-good", labels={"disk": "ssd"})
        for n in ("a-tainted", "b-full", "c-unselected", "d-notready", "e-cordoned", "f-nopods", "g-good"):
            self.keep_renewing(n)
        self.add_pod("web", cpu="500m", node_selector={"disk": "ssd"})
        self.assertEqual(self.wait_for("web bound", lambda: self.node_of("web")), "g-good")
        pod = self.pod("web")
        self.assertEqual(cond(pod, "PodScheduled")["status"], "True")
        self.assertRegex(self.logs(), r"controller=scheduler event=bound pod=default/web node=g-good")

    def test_scheduler_prefers_the_node_with_fewest_pods_and_refuses_nodes_without_room(self):
        self.add_node("a", cpu="1")
        self.add_node("b", cpu="1")
        self.keep_renewing("a")
        self.keep_renewing("b")
        self.add_pod("first", node_name="a")
        self.add_pod("p1", cpu="600m")
        self.assertEqual(self.wait_for("p1 bound", lambda: self.node_of("p1")), "b")
        # b now has 600m of 1 cpu used: a 600m pod fits only on a
        self.add_pod("p2", cpu="600m")
        self.assertEqual(self.wait_for("p2 bound", lambda: self.node_of("p2")), "a")
        # neither has 600m left
        self.add_pod("p3", cpu="600m")
        c = self.wait_for("p3 unschedulable", lambda: cond(self.pod("p3"), "PodScheduled"))
        self.assertEqual(c["reason"], "Unschedulable")
        self.assertTrue(c["message"].startswith("0/2 nodes are available: 2 Insufficient cpu. preemption: "
                                                "0/2 nodes are available: 2 No preemption victims found"), c)

    AVOID_A = [{"weight": 100, "preference": {"matchFields": [
        {"key": "metadata.name", "operator": "NotIn", "values": ["a"]}]}}]

    def test_scheduler_puts_preferred_node_affinity_before_fewest_pods_and_name(self):
        # a wins both tie-breaks (fewer pods, first name); the preference sends the pod to b
        self.add_node("a")
        self.add_node("b")
        self.keep_renewing("a")
        self.keep_renewing("b")
        self.add_pod("on-b", node_name="b")
        self.add_pod("shy", preferred=self.AVOID_A)
        self.assertEqual(self.wait_for("shy bound", lambda: self.node_of("shy")), "b")

    def test_scheduler_still_uses_a_node_the_pod_prefers_to_avoid_when_it_is_the_only_fit(self):
        self.add_node("a")
        self.add_node("b", cpu="250m")
        self.keep_renewing("a")
        self.keep_renewing("b")
        self.add_pod("shy", cpu="500m", preferred=self.AVOID_A)
        self.assertEqual(self.wait_for("shy bound", lambda: self.node_of("shy")), "a")

    def test_scheduler_sums_the_weights_of_the_preferences_a_node_matches_on_its_labels(self):
        # a scores 10, b 20, c 10 + 20: a best term alone would tie b and c, and b's name wins;
        # the empty preference matches nothing (were it to match all, it would change no order)
        self.add_node("a", labels={"zone": "z1"})
        self.add_node("b", labels={"zone": "z2", "disk": "ssd"})
        self.add_node("c", labels={"zone": "z1", "disk": "ssd"})
        for n in ("a", "b", "c"):
            self.keep_renewing(n)
        self.add_pod("picky", preferred=[
            {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}},
            {"weight": 20, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}},
            {"weight": 100, "preference": {}}])
        self.assertEqual(self.wait_for("picky bound", lambda: self.node_of("picky")), "c")

    def test_scheduler_counts_the_pods_it_bound_in_the_same_pass(self):
        self.stop_controllers()
        self.add_node("a", cpu="1")
        self.add_node("b", cpu="1")
        self.keep_renewing("a")
        self.keep_renewing("b")
        for n in ("q1", "q2", "q3"):
            self.add_pod(n, cpu="600m")
        self.start_controllers()
        self.assertEqual(self.wait_for("q1 bound", lambda: self.node_of("q1")), "a")
        self.assertEqual(self.wait_for("q2 bound", lambda: self.node_of("q2")), "b")
        c = self.wait_for("q3 unschedulable", lambda: cond(self.pod("q3"), "PodScheduled"))
        self.assertEqual((c["status"], c["reason"]), ("False", "Unschedulable"))
        self.assertIsNone(self.node_of("q3"))

    def test_unschedulable_pod_gets_podscheduled_false_with_the_real_message_and_is_retried(self):
        # a lost node (heartbeat long ago, no lease): the controllers taint it unreachable
        self.add_node("lost", labels={"zone": "a"}, heartbeat=-3600, lease=False)
        self.add_node("other", labels={"zone": "b"})
        self.keep_renewing("other")
        self.wait_for("lost tainted", lambda: any(
            t["key"] == "node.kubernetes.io/unreachable" and t["effect"] == "NoSchedule"
            for t in (self.ok(self.api.get(NODES + "/lost")).get("spec") or {}).get("taints") or []))
        self.add_pod("picky", node_selector={"zone": "a"})
        c = self.wait_for("PodScheduled False", lambda: cond(self.pod("picky"), "PodScheduled"))
        self.assertEqual((c["status"], c["reason"]), ("False", "Unschedulable"))
        self.assertEqual(c["message"],
                         "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                         "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }. preemption: "
                         "0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
        self.assertIsNone(self.pod("picky")["spec"].get("nodeName"))
        self.assertRegex(self.logs(), r"controller=scheduler event=unschedulable pod=default/picky")
        # once a node fits, the same pod is bound
        self.update(NODES + "/other", lambda node: node["metadata"]["labels"].update(zone="a"))
        self.assertEqual(self.wait_for("picky bound", lambda: self.node_of("picky")), "other")
        self.assertEqual(cond(self.pod("picky"), "PodScheduled")["status"], "True")

    # --- deployments -------------------------------------------------------------------

    def deployment(self, name, replicas, image="busybox"):
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"containers": [{"name": "main", "image": image}]}}}}

    def owned_pods(self, rs_uid, active=True):
        out = []
        for p in self.ok(self.api.get(PODS))["items"]:
            refs = p["metadata"].get("ownerReferences") or []
            if not any(r["uid"] == rs_uid and r.get("controller") for r in refs):
                continue
            if active and (p["metadata"].get("deletionTimestamp")
                           or p.get("status", {}).get("phase") in ("Failed", "Succeeded")):
                continue
            out.append(p)
        return out

    def test_deployment_gets_a_replicaset_and_n_pods_replaces_gone_or_failed_ones_and_reports_status(self):
        self.add_node("n1")
        self.keep_renewing("n1")
        dep = self.ok(self.api.post(DEPLOYS, self.deployment("web", 3)), 201)
        rs = self.wait_for("replicaset", lambda: self.ok(self.api.get(RSS))["items"])
        self.assertEqual(len(rs), 1)
        rs = rs[0]
        h = rs["metadata"]["labels"]["pod-template-hash"]
        self.assertEqual(rs["metadata"]["name"], "web-" + h)
        self.assertRegex(h, r"^[bcdfghjklmnpqrstvwxz2456789]{1,10}$")
        ref = rs["metadata"]["ownerReferences"][0]
        self.assertEqual((ref["kind"], ref["name"], ref["uid"], ref["controller"]),
                         ("Deployment", "web", dep["metadata"]["uid"], True))
        self.assertEqual(rs["spec"]["selector"]["matchLabels"], {"app": "web", "pod-template-hash": h})
        pods = self.wait_for("3 pods", lambda: len(self.owned_pods(rs["metadata"]["uid"])) == 3
                             and self.owned_pods(rs["metadata"]["uid"]))
        for p in pods:
            self.assertRegex(p["metadata"]["name"], r"^web-%s-[bcdfghjklmnpqrstvwxz2456789]{5}$" % h)
            self.assertEqual(p["metadata"]["labels"], {"app": "web", "pod-template-hash": h})
        self.wait_for("all bound", lambda: all(self.node_of(p["metadata"]["name"]) == "n1" for p in pods))
        for p in pods:
            self.run_pod(p["metadata"]["name"])

        def dep_status(want):
            st = self.ok(self.api.get(DEPLOYS + "/web")).get("status") or {}
            got = {k: st.get(k) for k in want}
            return st if got == want else None
        st = self.wait_for("deployment status", lambda: dep_status(
            {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3, "updatedReplicas": 3,
             "observedGeneration": 1}))
        self.assertEqual((cond({"status": st}, "Available")["status"], cond({"status": st}, "Available")["reason"]),
                         ("True", "MinimumReplicasAvailable"))
        self.assertEqual(cond({"status": st}, "Progressing")["reason"], "NewReplicaSetAvailable")
        rs_st = self.ok(self.api.get(RSS + "/" + rs["metadata"]["name"]))["status"]
        self.assertEqual((rs_st["replicas"], rs_st["readyReplicas"], rs_st["availableReplicas"],
                          rs_st["observedGeneration"]), (3, 3, 3, 1))

        # one pod gone for good, one Failed: both replaced
        gone, failed = pods[0]["metadata"]["name"], pods[1]["metadata"]["name"]
        self.ok(self.api.delete(PODS + "/" + gone, {"gracePeriodSeconds": 0}))
        self.update(PODS + "/" + failed, lambda p: p["status"].update(phase="Failed"), "/status")
        new = self.wait_for("replacements", lambda: (lambda ps: len(ps) == 3 and ps)(
            self.owned_pods(rs["metadata"]["uid"])))
        names = {p["metadata"]["name"] for p in new}
        self.assertNotIn(gone, names)
        self.assertNotIn(failed, names)
        self.assertIn(pods[2]["metadata"]["name"], names)
        self.assertIsNotNone(self.pod(failed), "a Failed pod is left in place, as upstream does")
        self.wait_for("readyReplicas 1", lambda: dep_status({"replicas": 3, "readyReplicas": 1}))

    def test_deployment_template_change_makes_a_new_replicaset_and_scales_the_old_one_to_zero(self):
        self.add_node("n1")
        self.keep_renewing("n1")
        self.ok(self.api.post(DEPLOYS, self.deployment("app", 2)), 201)
        old = self.wait_for("rs", lambda: self.ok(self.api.get(RSS))["items"])[0]
        self.wait_for("2 pods", lambda: len(self.owned_pods(old["metadata"]["uid"])) == 2)
        # (the deployment controller writes the status meanwhile: a conflict, read again)
        self.update(DEPLOYS + "/app",
                    lambda dep: dep["spec"]["template"]["spec"]["containers"][0].update(image="busybox:2"))

        def two():
            items = self.ok(self.api.get(RSS))["items"]
            return len(items) == 2 and items
        items = self.wait_for("second rs", two)
        new = [r for r in items if r["metadata"]["uid"] != old["metadata"]["uid"]][0]
        self.assertNotEqual(new["metadata"]["name"], old["metadata"]["name"])
        self.assertEqual(new["spec"]["template"]["spec"]["containers"][0]["image"], "busybox:2")
        self.assertEqual(new["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2")
        self.wait_for("old scaled to 0", lambda: self.ok(self.api.get(
            RSS + "/" + old["metadata"]["name"]))["spec"]["replicas"] == 0)
        self.wait_for("2 new pods", lambda: len(self.owned_pods(new["metadata"]["uid"])) == 2)
        self.wait_for("updatedReplicas 2", lambda: (self.ok(self.api.get(DEPLOYS + "/app")).get("status") or {})
                      .get("updatedReplicas") == 2 and True)

    # --- node lifecycle and taint manager ----------------------------------------------------------

    def taints(self, node):
        return {(t["key"], t["effect"]): t for t in
                (self.ok(self.api.get(NODES + "/" + node)).get("spec") or {}).get("taints") or []}

    def test_node_whose_lease_stops_is_marked_unknown_tainted_unreachable_and_its_pods_not_ready(self):
        self.restart_controllers(LAPSE_GRACE)
        added = time.monotonic()
        self.add_node("n1")
        beat = time.monotonic()      # n1's own heartbeat and first renewal are older than this
        self.add_node("m", lease=False)     # cordoned below: a mark in the controllers' passes
        self.add_pod("p", node_name="n1")
        self.run_pod("p")
        # renewed all along, past the grace period of n1's own heartbeat: nothing happens.
        # The test renews the lease itself (every 0.3 s), and so knows the longest the
        # lease went unrenewed: were that half the grace period (the controllers' pass
        # takes its time too), a held-up machine could rightly have marked the node.
        longest, last = 0.0, added
        while True:
            sent = time.monotonic()
            self.renew("n1")
            longest, last = max(longest, time.monotonic() - last), sent
            if sent > beat + LAPSE_GRACE + 1:
                break
            time.sleep(0.3)
        # That was the last renewal. m's cordon taint comes from a pass that listed the
        # nodes, then the leases, after it; any earlier pass's verdict on n1 is in by
        # then. From here on, n1 turns Unknown only once that renewal is GRACE old.
        self.update(NODES + "/m", lambda node: node["spec"].update(unschedulable=True))
        self.wait_for("m's cordon taint", lambda: ("node.kubernetes.io/unschedulable", "NoSchedule")
                      in self.taints("m"))
        node = self.ok(self.api.get(NODES + "/n1"))
        longest = max(longest, time.monotonic() - last)
        if cond(node, "Ready")["status"] != "True" and longest >= LAPSE_GRACE / 2:
            self.skipTest("inconclusive: the machine held the lease's renewals up for %.1f s, half the "
                          "grace period of %s s" % (longest, LAPSE_GRACE))
        self.assertEqual(cond(node, "Ready")["status"], "True", "the lease went %.1f s unrenewed at most" % longest)
        self.assertFalse((node.get("spec") or {}).get("taints"))
        node = self.wait_for("Ready Unknown", lambda: (lambda n: cond(n, "Ready")["status"] == "Unknown" and n)(
            self.ok(self.api.get(NODES + "/n1"))), timeout=LAPSE_GRACE + 30)
        self.assertGreaterEqual(time.monotonic() - last, LAPSE_GRACE - 0.1)
        for ctype in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
            c = cond(node, ctype)
            self.assertEqual((c["status"], c["reason"], c["message"]),
                             ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."), ctype)
        taints = self.wait_for("taints", lambda: (lambda t: len(t) == 2 and t)(self.taints("n1")))
        self.assertEqual(set(taints), {("node.kubernetes.io/unreachable", "NoExecute"),
                                       ("node.kubernetes.io/unreachable", "NoSchedule")})
        for t in taints.values():
            self.assertRegex(t.get("timeAdded", ""), r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.wait_for("pod NotReady", lambda: cond(self.pod("p"), "Ready")["status"] == "False")
        # the default 300 s toleration keeps the pod through this test
        self.assertIsNone(self.pod("p")["metadata"].get("deletionTimestamp"))
        self.assertRegex(self.logs(), r"event=node_unknown node=n1")
        # the kubelet comes back: the taints go
        self.keep_renewing("n1")
        self.post_ready("n1")
        node = self.wait_for("taints removed", lambda: (lambda n: not (n.get("spec") or {}).get("taints") and n)(
            self.ok(self.api.get(NODES + "/n1"))))
        self.assertEqual(cond(node, "Ready")["status"], "True")

    def test_kubelet_posting_ready_false_gets_not_ready_taints_and_a_cordoned_node_the_unschedulable_one(self):
        self.add_node("sick", ready="False")
        self.add_node("cordoned", unschedulable=True)
        self.keep_renewing("sick")
        self.keep_renewing("cordoned")
        self.wait_for("not-ready taints", lambda: set(self.taints("sick")) == {
            ("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/not-ready", "NoSchedule")})
        self.wait_for("unschedulable taint", lambda: set(self.taints("cordoned")) == {
            ("node.kubernetes.io/unschedulable", "NoSchedule")})
        # the lease is renewed: Ready stays as the kubelet posted it
        self.assertEqual(cond(self.ok(self.api.get(NODES + "/sick")), "Ready")["reason"], "KubeletNotReady")
        self.update(NODES + "/cordoned", lambda node: node["spec"].pop("unschedulable"))
        self.wait_for("uncordoned", lambda: self.taints("cordoned") == {})

    def test_pod_not_tolerating_a_noexecute_taint_is_evicted_at_once_with_disruptiontarget_and_stays_terminating(self):
        self.add_node("n1")
        self.keep_renewing("n1")
        self.add_pod("victim", node_name="n1")
        self.add_pod("tolerant", node_name="n1",
                     tolerations=[{"key": "example.com/drain", "operator": "Exists", "effect": "NoExecute"}])
        self.run_pod("victim")
        self.run_pod("tolerant")
        self.update(NODES + "/n1", lambda node: node["spec"].update(
            taints=[{"key": "example.com/drain", "effect": "NoExecute", "timeAdded": ts()}]))
        t0 = time.monotonic()
        pod = self.wait_for("victim deleting", lambda: (lambda p: p["metadata"].get("deletionTimestamp") and p)(
            self.pod("victim")), timeout=60)
        self.assertLess(time.monotonic() - t0, 30, "at once, not after some toleration")
        c = cond(pod, "DisruptionTarget")
        self.assertEqual((c["status"], c["reason"], c["message"]),
                         ("True", "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"))
        self.assertEqual(pod["status"]["phase"], "Running")
        time.sleep(2)      # no kubelet confirms the deletion: it stays Terminating
        pod = self.pod("victim")
        self.assertIsNotNone(pod)
        self.assertTrue(pod["metadata"].get("deletionTimestamp"))
        self.assertIsNone(self.pod("tolerant")["metadata"].get("deletionTimestamp"))
        self.assertIsNone(cond(self.pod("tolerant"), "DisruptionTarget"))
        self.assertRegex(self.logs(), r"controller=taintmanager event=evicted pod=default/victim node=n1")

    def test_pod_tolerating_unreachable_for_10s_is_evicted_about_10s_after_the_taint_not_before(self):
        tol = 10
        self.restart_controllers(LAPSE_GRACE)
        untainted = start = time.monotonic()  # the taint comes later: the node is yet to exist
        self.add_node("n1")
        stop = self.keep_renewing("n1")
        self.add_pod("p", node_name="n1", tolerations=[
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": tol}])
        self.run_pod("p")
        stop.set()
        # Not before: the pod stays until tol s after the taint was added, which was
        # after the last look that found n1 without it (`untainted`, taken before that
        # look's request). A look at the pod counts only if its answer is in before
        # untainted + tol - 1 (1 s for timeAdded's whole seconds).
        unreachable = ("node.kubernetes.io/unreachable", "NoExecute")
        tainted = None                  # when the test first saw the taint: it was added before
        while True:
            if tainted is None and time.monotonic() - start > 60:
                self.fail("no unreachable taint on n1 in 60 s:\n" + self.logs()[-3000:])
            sent = time.monotonic()
            if unreachable not in self.taints("n1"):
                untainted = sent
            elif tainted is None:
                tainted = time.monotonic()
            p = self.pod("p")
            if time.monotonic() >= untainted + tol - 1:
                break
            self.assertIsNone(p["metadata"].get("deletionTimestamp"),
                              "evicted with the taint at most %.2f s old" % (time.monotonic() - untainted))
            self.assertIsNone(cond(p, "DisruptionTarget"))
            time.sleep(0.1)
        if tainted is None:
            self.wait_for("unreachable NoExecute", lambda: unreachable in self.taints("n1"))
            tainted = time.monotonic()
        pod = self.wait_for("evicted", lambda: (lambda p: p["metadata"].get("deletionTimestamp") and p)(
            self.pod("p")), timeout=60)
        # about tol s after the taint (with 30 s to spare for a loaded machine)
        self.assertLess(time.monotonic() - tainted, tol + 30)
        self.assertEqual(cond(pod, "DisruptionTarget")["reason"], "DeletionByTaintManager")

    # --- pod GC ------------------------------------------------------------------------------

    def test_deleting_the_node_makes_pod_gc_fail_and_remove_its_pods_terminating_ones_too(self):
        self.add_node("n1")
        self.add_node("n2")
        self.keep_renewing("n1")
        self.keep_renewing("n2")
        self.add_pod("running", node_name="n1")
        self.add_pod("terminating", node_name="n1")
        self.add_pod("elsewhere", node_name="n2")
        for n in ("running", "terminating", "elsewhere"):
            self.run_pod(n)
        self.ok(self.api.delete(PODS + "/terminating"))
        self.assertTrue(self.pod("terminating")["metadata"].get("deletionTimestamp"))
        rv = self.ok(self.api.get(PODS))["metadata"]["resourceVersion"]
        w = self.api.watch(PODS + "?watch=true&resourceVersion=" + rv)
        self.stop_beats["n1"].set()
        self.ok(self.api.delete(NODES + "/n1"))
        seen, deleted = {}, set()
        deadline = time.monotonic() + 30
        while deleted != {"running", "terminating"} and time.monotonic() < deadline:
            ev = w.next(timeout=30)
            name = ev["object"]["metadata"]["name"]
            seen.setdefault(name, []).append(ev)
            if ev["type"] == "DELETED":
                deleted.add(name)
        w.close()
        self.assertEqual(deleted, {"running", "terminating"})
        # the running pod's last state: failed by the pod GC. (The terminating one's
        # status write can remove it already: the test server removes an object
        # with a deletionTimestamp and no finalizers on any update, where a real one
        # does so only once deletionGracePeriodSeconds is 0.)
        last = seen["running"][-1]["object"]
        c = cond(last, "DisruptionTarget")
        self.assertIsNotNone(c, [(e["type"], e["object"].get("status")) for e in seen["running"]])
        self.assertEqual((c["status"], c["reason"], c["message"]),
                         ("True", "DeletionByPodGC", "PodGC: node no longer exists"))
        self.assertEqual(last["status"]["phase"], "Failed")
        self.assertIsNone(self.pod("running"))
        self.assertIsNone(self.pod("terminating"))
        self.assertIsNotNone(self.pod("elsewhere"))
        self.assertIsNone(cond(self.pod("elsewhere"), "DisruptionTarget"))
        self.assertRegex(self.logs(), r"controller=podgc event=force_deleted pod=default/running node=n1")

    # --- the process ---------------------------------------------------------------------------

    def test_sigterm_exits_0_and_the_log_is_key_value_lines_without_the_token(self):
        self.add_node("n1")
        self.keep_renewing("n1")
        self.add_pod("p")
        self.wait_for("bound", lambda: self.node_of("p"))
        self.assertEqual(self.stop_controllers(), 0)
        text = self.logs()
        self.assertNotIn(self.server.token, text)
        lines = [l for l in text.splitlines() if l]
        self.assertTrue(lines)
        for l in lines:
            self.assertRegex(l, r'^ts=\S+ level=(info|debug|error)( [a-z_]+=("([^"\\]|\\.)*"|\S+))*$')
        self.assertIn("event=stopped", lines[-1])


if __name__ == "__main__":
    testlimit.main(300)
