#!/usr/bin/python3
# tests/cluster/test_kueue.py: the Kueue stand-in (kubeapi/kueue_webhook.py,
# controllers/kueue.py; what it reproduces: their headers and
# controllers/KUEUE_FACTS.md) against the test API server, with plain pods:
# the webhooks' gating and refusals, quota that admits whole groups one at a
# time, priority order, and preemption with Kueue's conditions and reasons.
# Each test starts its own API server with Kueue's CRDs; the test runs the
# controller's passes itself (Manager.kueue_pass, its clock injected) and
# plays the kubelet (pod phases through pods/status), so that nothing
# depends on timing.
# Run: python3 -m tests.cluster.test_kueue

import datetime
import os
import shutil
import tempfile
import unittest

from tests.cluster import testlimit
from tests.cluster.controllers.manager import Manager
from tests.cluster.controllers.scheduler import Scheduler
from tests.cluster.harness import ServerProcess, load_yaml_docs, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
K = "/apis/kueue.x-k8s.io/v1beta2"
PODS = "/api/v1/namespaces/default/pods"
WLS = K + "/namespaces/default/workloads"
GATE = "kueue.x-k8s.io/admission"
FIN = "kueue.x-k8s.io/managed"


def cond(obj, ctype):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def pod_doc(name, group=None, total=None, queue="team", cpu="2", priority=None, extra_labels=None,
            annotations=None):
    labels = dict(extra_labels or {})
    ann = dict(annotations or {})
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    if group:
        labels["kueue.x-k8s.io/pod-group-name"] = group
    if total is not None:
        ann["kueue.x-k8s.io/pod-group-total-count"] = str(total)
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels, "annotations": ann},
            "spec": {"containers": [{"name": "c", "image": "busybox:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}


class KueueTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kueue-test-")
        self.server = ServerProcess(os.path.join(self.dir, "api"))
        self.api = self.server.client()
        self.mgr = Manager(self.api, 40, 1, 60, 20)
        self.now = datetime.datetime.now(datetime.timezone.utc)
        self.mgr.kueue.clock = lambda: self.now

    def tearDown(self):
        self.server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers -------------------------------------------------------------------------

    def ok(self, r, *codes):
        self.assertIn(r.status, codes or (200, 201), r)
        return r.body

    def install(self, quota=None, preemption="LowerPriority"):
        for d in load_yaml_docs(os.path.join(HERE, "testdata", "kueue.crds.yaml")):
            self.ok(self.api.post(CRDS, d), 201)
        wait_for("kueue.x-k8s.io served", lambda: self.api.get(K + "/clusterqueues").status == 200)
        self.ok(self.api.post(K + "/resourceflavors", {"apiVersion": "kueue.x-k8s.io/v1beta2",
                                                        "kind": "ResourceFlavor", "metadata": {"name": "default"},
                                                        "spec": {"nodeLabels": {"pool": "gpu"}}}), 201)
        res = [{"name": r, "nominalQuota": q} for r, q in sorted((quota or {"cpu": "4", "memory": "16Gi",
                                                                          "nvidia.com/gpu": "0"}).items())]
        self.ok(self.api.post(K + "/clusterqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
            "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": preemption},
                     "resourceGroups": [{"coveredResources": [r["name"] for r in res],
                                         "flavors": [{"name": "default", "resources": res}]}]}}), 201)
        self.ok(self.api.post(K + "/namespaces/default/localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team"},
            "spec": {"clusterQueue": "cq"}}), 201)
        for name, value in (("low", 100), ("high", 1000)):
            self.ok(self.api.post(K + "/workloadpriorityclasses", {
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                "metadata": {"name": name}, "value": value}), 201)

    def kpass(self, n=2):
        """n passes of the Kueue stand-in (a Workload made in one is scheduled in the same)."""
        for _ in range(n):
            self.mgr.last_kueue_probe = None
            self.mgr.kueue_pass(self.api.list("/api/v1/pods"))

    def pod(self, name):
        return self.ok(self.api.get(PODS + "/" + name))

    def wl(self, name):
        return self.ok(self.api.get(WLS + "/" + name))

    def gated(self, name):
        return any(g["name"] == GATE for g in self.pod(name)["spec"].get("schedulingGates") or [])

    def group(self, name, n, cpu="2", priority=None, unretriable=False):
        ann = {"kueue.x-k8s.io/retriable-in-group": "false"} if unretriable else None
        for i in range(n):
            self.ok(self.api.post(PODS, pod_doc("%s-%d" % (name, i), group=name, total=n, cpu=cpu,
                                                priority=priority, annotations=ann)), 201)
        return ["%s-%d" % (name, i) for i in range(n)]

    def run_pods(self, names, phase="Running"):
        """The kubelet: bind (if not yet) and report the phase."""
        for n in names:
            p = self.pod(n)
            if not p["spec"].get("nodeName"):
                self.ok(self.api.post(PODS + "/%s/binding" % n, {
                    "apiVersion": "v1", "kind": "Binding", "metadata": {"name": n},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}), 201)
                p = self.pod(n)
            p["status"]["phase"] = phase
            self.ok(self.api.put(PODS + "/%s/status" % n, p))

    def kubelet_confirms_deletion(self, name):
        """The kubelet's last word on a deleted pod: DELETE with grace 0."""
        self.ok(self.api.delete(PODS + "/" + name, {"apiVersion": "v1", "kind": "DeleteOptions",
                                                    "gracePeriodSeconds": 0}))

    def refused(self, body, message):
        r = self.api.post(PODS, body)
        self.assertEqual(r.status, 403, r)
        self.assertEqual(r.body["message"], 'admission webhook "vpod.kb.io" denied the request: ' + message)

    # --- the webhooks ------------------------------------------------------------------------

    def test_webhook_gates_queued_pods_only_while_kueue_is_installed_and_outside_kube_system(self):
        self.ok(self.api.post(PODS, pod_doc("before")), 201)
        self.install()
        self.ok(self.api.post(PODS, pod_doc("queued")), 201)
        self.ok(self.api.post(PODS, pod_doc("plain", queue=None)), 201)
        self.ok(self.api.post("/api/v1/namespaces/kube-system/pods", pod_doc("sys")), 201)
        p = self.pod("queued")
        self.assertEqual(p["spec"]["schedulingGates"], [{"name": GATE}])
        self.assertEqual(p["metadata"]["labels"]["kueue.x-k8s.io/managed"], "true")
        self.assertIn(FIN, p["metadata"]["finalizers"])
        self.assertIn("kueue.x-k8s.io/role-hash", p["metadata"]["annotations"])
        c = cond(p, "PodScheduled")
        self.assertEqual((c["status"], c["reason"], c["message"]),
                         ("False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"))
        for name, ns in (("before", "default"), ("plain", "default"), ("sys", "kube-system")):
            q = self.ok(self.api.get("/api/v1/namespaces/%s/pods/%s" % (ns, name)))
            self.assertNotIn("schedulingGates", q["spec"], name)
            self.assertNotIn("finalizers", q["metadata"], name)

    def test_webhook_refuses_what_kueues_pod_webhook_refuses_with_its_words(self):
        self.install()
        both = ("both the 'kueue.x-k8s.io/pod-group-total-count' annotation and the "
                "'kueue.x-k8s.io/pod-group-name' label should be set")
        self.refused(pod_doc("a", group="g"),
                     "metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: " + both)
        self.refused(pod_doc("a", total=2), "metadata.labels[kueue.x-k8s.io/pod-group-name]: Required value: " + both)
        self.refused(pod_doc("a", group="g", total="two"),
                     'metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Invalid value: "two": '
                     'strconv.Atoi: parsing "two": invalid syntax')
        self.refused(pod_doc("a", group="g", total=0),
                     'metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Invalid value: "0": incorrect '
                     "annotation value 'kueue.x-k8s.io/pod-group-total-count=0': group total count should be "
                     "greater than zero")
        # (a queued pod's managed label is set to "true" by the mutating webhook first)
        self.refused(pod_doc("a", queue=None, extra_labels={"kueue.x-k8s.io/managed": "false"}),
                     "metadata.labels[kueue.x-k8s.io/managed]: Forbidden: managed label value can only be 'true'")
        r = self.api.post(PODS, pod_doc("a", group="G_1", total=1))
        self.assertEqual(r.status, 403, r)
        self.assertIn('metadata.labels[kueue.x-k8s.io/pod-group-name]: Invalid value: "G_1": a lowercase RFC 1123 '
                      'subdomain', r.body["message"])
        # updates: the group name is immutable; a gate can only be removed (the API server's rule)
        self.ok(self.api.post(PODS, pod_doc("p", group="g", total=1)), 201)
        r = self.api.patch(PODS + "/p", {"metadata": {"labels": {"kueue.x-k8s.io/pod-group-name": "h"}}})
        self.assertEqual((r.status, r.body["message"]), (403, 'admission webhook "vpod.kb.io" denied the request: '
                         'metadata.labels[kueue.x-k8s.io/pod-group-name]: Invalid value: "h": field is immutable'))
        r = self.api.patch(PODS + "/p", {"spec": {"schedulingGates": [{"name": GATE}, {"name": "x"}]}})
        self.assertEqual(r.status, 422, r)
        self.assertIn("spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling "
                      "gate 'x'", r.body["message"])

    def test_the_scheduler_leaves_gated_pods_alone(self):
        self.install()
        node = self.ok(self.api.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                        "metadata": {"name": "n1", "labels": {"pool": "gpu"}}}), 201)
        node["status"] = {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                          "conditions": [{"type": "Ready", "status": "True"}]}
        self.ok(self.api.put("/api/v1/nodes/n1/status", node))
        self.ok(self.api.post(PODS, pod_doc("g", group="g", total=1)), 201)
        Scheduler(self.api).sync(self.api.list("/api/v1/nodes"), self.api.list("/api/v1/pods"))
        self.assertNotIn("nodeName", self.pod("g")["spec"])
        self.kpass()
        self.assertFalse(self.gated("g"))
        self.assertEqual(self.pod("g")["spec"]["nodeSelector"], {"pool": "gpu"})   # the flavour's nodeLabels
        Scheduler(self.api).sync(self.api.list("/api/v1/nodes"), self.api.list("/api/v1/pods"))
        self.assertEqual(self.pod("g")["spec"].get("nodeName"), "n1")

    # --- quota ---------------------------------------------------------------------------------

    def test_two_groups_that_fit_one_at_a_time_the_second_waits_gated_until_the_first_finishes(self):
        self.install()
        a = self.group("a", 2)
        self.kpass()
        b = self.group("b", 2)
        self.kpass()
        self.assertFalse(any(self.gated(n) for n in a))
        self.assertTrue(all(self.gated(n) for n in b))
        wa, wb = self.wl("a"), self.wl("b")
        self.assertEqual(wa["metadata"]["annotations"]["kueue.x-k8s.io/is-group-workload"], "true")
        self.assertEqual(sorted(r["name"] for r in wa["metadata"]["ownerReferences"]), a)
        self.assertEqual(wa["status"]["admission"]["clusterQueue"], "cq")
        for t, reason, msg in (("QuotaReserved", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
                               ("Admitted", "Admitted", "The workload is admitted")):
            c = cond(wa, t)
            self.assertEqual((c["status"], c["reason"], c["message"]), ("True", reason, msg))
        c = cond(wb, "QuotaReserved")
        self.assertEqual((c["status"], c["reason"]), ("False", "Pending"))
        self.assertRegex(c["message"], r"^couldn't assign flavors to pod set \w+: insufficient unused quota for cpu "
                                       r"in flavor default, 4 more needed$")
        self.run_pods(a)
        self.kpass()
        self.assertTrue(all(self.gated(n) for n in b))      # running pods hold the quota
        self.run_pods(a, "Succeeded")
        self.kpass()
        c = cond(self.wl("a"), "Finished")
        self.assertEqual((c["status"], c["reason"], c["message"]), ("True", "Succeeded", "Pods succeeded: 2/2."))
        self.assertFalse(any(FIN in (self.pod(n)["metadata"].get("finalizers") or []) for n in a))
        self.assertFalse(any(self.gated(n) for n in b))
        self.assertEqual(cond(self.wl("b"), "Admitted")["status"], "True")

    def test_pending_groups_are_admitted_highest_priority_first(self):
        self.install(preemption="Never")    # else "newer" would preempt "first"
        self.group("first", 2)
        self.kpass()                # admitted: the queue was empty
        self.group("older", 2, priority="low")
        self.group("newer", 2, priority="high")
        self.group("plain", 2)
        self.kpass()
        order = []
        for _ in range(3):
            done = [n for n in ("first", "older", "newer", "plain") if cond(self.wl(n), "Admitted") and
                    cond(self.wl(n), "Admitted")["status"] == "True" and n not in order]
            self.assertEqual(len(done), 1, done)
            order += done
            self.run_pods(["%s-0" % done[0], "%s-1" % done[0]], "Succeeded")
            self.kpass()
        self.assertEqual(order, ["first", "newer", "older"])
        self.assertEqual(self.wl("newer")["spec"]["priority"], 1000)

    def test_a_group_larger_than_the_quota_is_told_so_and_never_admitted(self):
        self.install()
        self.group("big", 3)
        self.kpass()
        c = cond(self.wl("big"), "QuotaReserved")
        self.assertRegex(c["message"], r"insufficient quota for cpu in flavor default, previously considered podsets "
                                       r"requests \(0\) \+ current podset request \(6\) > maximum capacity \(4\)$")

    # --- preemption --------------------------------------------------------------------------

    def test_a_higher_priority_group_preempts_a_running_lower_one_as_kueue_does(self):
        self.install()
        low = self.group("low", 2, priority="low", unretriable=True)
        self.kpass()
        self.run_pods(low)
        high = self.group("high", 2, priority="high")
        self.kpass()
        wl = self.wl("low")
        ev, pre = cond(wl, "Evicted"), cond(wl, "Preempted")
        self.assertEqual((ev["status"], ev["reason"], pre["status"], pre["reason"]),
                         ("True", "Preempted", "True", "InClusterQueue"))
        self.assertEqual(ev["message"], "Preempted to accommodate a workload (UID: %s, JobUID: UNKNOWN) due to "
                         "prioritization in the ClusterQueue; preemptor path: cq; preemptee path: cq"
                         % self.wl("high")["metadata"]["uid"])
        for n in low:
            p = self.pod(n)
            tt = cond(p, "TerminationTarget")
            self.assertEqual((tt["status"], tt["reason"], tt["message"]),
                             ("True", "WorkloadEvictedDueToPreempted", ev["message"]))
            self.assertTrue(p["metadata"].get("deletionTimestamp"))
            self.assertEqual(p["metadata"]["deletionGracePeriodSeconds"], 30)     # the pod's own
            self.assertIn(FIN, p["metadata"]["finalizers"])
        self.assertTrue(cond(self.wl("high"), "QuotaReserved")["message"].endswith(
            ". Pending the preemption of 1 workload(s)"))
        # still Running inside the grace period: the quota stays reserved
        self.kpass()
        self.assertTrue(all(self.gated(n) for n in high))
        self.assertEqual(cond(self.wl("low"), "QuotaReserved")["status"], "True")
        # the kubelet stops the containers: Failed; the group (unretriable) ends, which
        # Kueue checks before the eviction: Finished, finalizers off, its quota free
        self.run_pods(low, "Failed")
        self.kpass()
        c = cond(self.wl("low"), "Finished")
        self.assertEqual((c["status"], c["reason"], c["message"]), ("True", "Succeeded", "Pods succeeded: 0/2."))
        for n in low:
            self.assertNotIn(FIN, self.pod(n)["metadata"].get("finalizers") or [])
            self.kubelet_confirms_deletion(n)
            self.assertEqual(self.api.get(PODS + "/" + n).status, 404, n)
        self.assertFalse(any(self.gated(n) for n in high))
        c = cond(self.wl("high"), "Admitted")
        self.assertEqual((c["status"], c["reason"]), ("True", "Admitted"))

    def test_a_preempted_pod_still_running_past_its_grace_period_no_longer_holds_the_quota(self):
        self.install()
        low = self.group("low", 2, priority="low")
        self.kpass()
        self.run_pods(low)
        high = self.group("high", 2, priority="high")
        self.kpass()
        self.kpass()
        self.assertTrue(all(self.gated(n) for n in high))
        # deletionTimestamp is the deletion's time + 30 s; Kueue adds the grace period once more
        self.now += datetime.timedelta(seconds=59)
        self.kpass()
        self.assertTrue(all(self.gated(n) for n in high))
        self.now += datetime.timedelta(seconds=2)
        self.kpass()
        self.assertFalse(any(self.gated(n) for n in high))
        wl = self.wl("low")
        for t, status, reason in (("QuotaReserved", "False", "Pending"), ("Requeued", "True", "Preempted"),
                                  ("Admitted", "False", "NoReservation")):
            self.assertEqual((cond(wl, t)["status"], cond(wl, t)["reason"]), (status, reason), t)
        # retriable: once Failed, Kueue keeps its finalizer on the old pods, waiting for replacements
        self.run_pods(low, "Failed")
        self.kpass()
        for n in low:
            self.kubelet_confirms_deletion(n)
            p = self.pod(n)
            self.assertEqual((p["metadata"]["finalizers"], p["metadata"]["deletionGracePeriodSeconds"]), ([FIN], 0))
        c = cond(self.wl("low"), "WaitingForReplacementPods")
        self.assertEqual((c["status"], c["reason"]), ("True", "Preempted"))
        # whoever takes the finalizer off (Kueue, once replacements come) ends the pod
        self.ok(self.api.patch(PODS + "/low-0", {"metadata": {"finalizers": None}}))
        self.assertEqual(self.api.get(PODS + "/low-0").status, 404)

    def test_without_lower_priority_preemption_the_higher_group_waits(self):
        self.install(preemption="Never")
        low = self.group("low", 2, priority="low")
        self.kpass()
        self.run_pods(low)
        high = self.group("high", 2, priority="high")
        self.kpass()
        self.assertIsNone(cond(self.wl("low"), "Evicted"))
        self.assertTrue(all(self.gated(n) for n in high))


if __name__ == "__main__":
    testlimit.main(120)
