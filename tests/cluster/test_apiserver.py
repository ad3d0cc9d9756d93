#!/usr/bin/python3
# tests/cluster/test_apiserver.py: protocol tests of the test API server,
# spoken to over HTTPS; each test is named for the semantic it proves.
# Run: /usr/bin/python3 -m unittest tests/cluster/test_apiserver.py

import copy
import os
import shutil
import ssl
import tempfile
import time
import unittest

from tests.cluster import kubeclient, testlimit
from tests.cluster.harness import CRD, ServerProcess, load_yaml_docs, wait_for

NS = "/api/v1/namespaces/default"
VJ = "/apis/vitjob.dev/v1alpha1/namespaces/default/vitjobs"
HISTORY = 60
AUTHZ = "/apis/authorization.k8s.io/v1"


def vitjob(name, **spec):
    s = {"replicas": 1, "image": "img"}
    s.update(spec)
    return {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob", "metadata": {"name": name}, "spec": s}


def pod(name, labels=None, node=None, owner=None, **meta):
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": dict(name=name, labels=labels or {}, **meta),
         "spec": {"containers": [{"name": "worker", "image": "busybox"}]}}
    if node:
        p["spec"]["nodeName"] = node
    if owner:
        p["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                             "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                             "controller": True, "blockOwnerDeletion": True}]
    return p


def cm(name, labels=None):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}},
            "data": {"k": "v"}}


def rv(obj):
    return int(obj["metadata"]["resourceVersion"])


class ApiServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="apiserver-test-")
        cls.server = ServerProcess(os.path.join(cls.tmp, "state"),
                                   args=["--history", str(HISTORY), "--bookmark-interval", "0.3"])
        cls.c = cls.server.client()
        r = cls.c.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", load_yaml_docs(CRD)[0])
        assert r.status == 201, r

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def create(self, path, obj, status=201):
        r = self.c.post(path, obj)
        self.assertEqual(r.status, status, r)
        return r.body

    def wait_gone(self, path):
        wait_for("%s gone" % path, lambda: self.c.get(path).status == 404)

    # --- authentication and TLS --------------------------------------------------

    def test_request_without_token_gets_401(self):
        r = self.server.client(token="").get("/api/v1/namespaces")
        self.assertEqual(r.status, 401)
        self.assertEqual(r.body["reason"], "Unauthorized")

    def test_request_with_wrong_token_gets_401(self):
        self.assertEqual(self.server.client(token="nope").get("/api").status, 401)

    def test_tls_certificate_is_signed_by_generated_ca(self):
        # The client verifies the chain against state/pki/ca.crt and the SAN 127.0.0.1.
        self.assertEqual(self.c.get("/version").status, 200)
        with open(self.server.kubeconfig) as f:
            text = f.read()
        self.assertIn("https://127.0.0.1:%d" % self.server.port, text)
        self.assertIn("certificate-authority-data", text)

    # --- discovery ----------------------------------------------------------------

    def test_discovery_lists_core_and_group_resources(self):
        self.assertEqual(self.c.get("/api").body["versions"], ["v1"])
        core = {r["name"]: r for r in self.c.get("/api/v1").body["resources"]}
        for name in ("pods", "services", "configmaps", "secrets", "events", "namespaces", "pods/status"):
            self.assertIn(name, core)
        self.assertFalse(core["namespaces"]["namespaced"])
        groups = {g["name"] for g in self.c.get("/apis").body["groups"]}
        self.assertLessEqual({"coordination.k8s.io", "apiextensions.k8s.io", "apps", "vitjob.dev"}, groups)
        leases = self.c.get("/apis/coordination.k8s.io/v1").body
        self.assertEqual(leases["resources"][0]["name"], "leases")
        self.assertEqual(self.c.get("/apis/coordination.k8s.io").body["preferredVersion"]["version"], "v1")

    def test_openapi_v3_advertises_field_validation_for_patch(self):
        root = self.c.get("/openapi/v3").body["paths"]
        doc = self.c.get(root["apis/vitjob.dev/v1alpha1"]["serverRelativeURL"]).body
        op = doc["paths"]["/apis/vitjob.dev/v1alpha1/namespaces/{namespace}/vitjobs/{name}"]["patch"]
        self.assertEqual(op["x-kubernetes-group-version-kind"]["kind"], "ViTJob")
        self.assertIn("fieldValidation", [p["name"] for p in op["parameters"]])

    # --- custom resource definitions -----------------------------------------------------

    def test_crd_registration_makes_type_servable_and_deletion_removes_it(self):
        crd = copy.deepcopy(load_yaml_docs(CRD)[0])
        crd["metadata"]["name"] = "widgets.example.dev"
        crd["spec"].update(group="example.dev", names={"plural": "widgets", "kind": "Widget"})
        path = "/apis/example.dev/v1alpha1/namespaces/default/widgets"
        self.assertEqual(self.c.get(path).status, 404)
        created = self.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        conds = {c["type"]: c["status"] for c in created["status"]["conditions"]}
        self.assertEqual(conds["Established"], "True")
        kinds = [r["kind"] for r in self.c.get("/apis/example.dev/v1alpha1").body["resources"]]
        self.assertIn("Widget", kinds)
        w = vitjob("w1")
        w.update(apiVersion="example.dev/v1alpha1", kind="Widget")
        self.create(path, w)
        self.assertEqual(self.c.get(path).body["items"][0]["metadata"]["name"], "w1")
        self.c.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.dev")
        self.assertEqual(self.c.get(path).status, 404)
        self.assertEqual(self.c.get("/apis/example.dev/v1alpha1").status, 404)

    def test_custom_object_wrong_type_gets_422_naming_the_field(self):
        r = self.c.post(VJ, vitjob("bad-type", replicas="four"))
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.body["reason"], "Invalid")
        self.assertEqual(r.body["message"], 'ViTJob.vitjob.dev "bad-type" is invalid: spec.replicas: Invalid value: '
                         '"string": spec.replicas in body must be of type integer: "string"')
        self.assertEqual(r.body["details"]["causes"][0]["field"], "spec.replicas")

    def test_custom_object_missing_required_field_gets_422(self):
        obj = vitjob("bad-missing")
        del obj["spec"]["image"]
        r = self.c.post(VJ, obj)
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.body["message"], 'ViTJob.vitjob.dev "bad-missing" is invalid: spec.image: Required value')

    def test_custom_object_out_of_range_value_gets_422(self):
        r = self.c.post(VJ, vitjob("bad-range", replicas=0))
        self.assertEqual(r.status, 422, r)
        self.assertIn("spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
                      r.body["message"])

    def test_custom_object_unknown_enum_value_gets_422(self):
        r = self.c.post(VJ, vitjob("bad-enum", training={"precision": "fp16"}))
        self.assertEqual(r.status, 422, r)
        self.assertIn('spec.training.precision: Unsupported value: "fp16": supported values: "fp32", "bf16-mixed"',
                      r.body["message"])

    def test_custom_object_several_errors_are_listed_together(self):
        r = self.c.post(VJ, {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob", "metadata": {"name": "bad2"},
                             "spec": {"replicas": -1}})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(len(r.body["details"]["causes"]), 2)
        self.assertIn("is invalid: [", r.body["message"])

    def test_unknown_fields_pruned_and_defaults_applied(self):
        obj = vitjob("pruned", bogus=1, training={"steps": 5, "extra": "x"}, template={"keep": {"me": 1}})
        obj["topLevelJunk"] = True
        r = self.c.post(VJ, obj)
        self.assertEqual(r.status, 201, r)
        self.assertIn("Warning", r.headers)
        spec = self.c.get(VJ + "/pruned").body["spec"]
        self.assertNotIn("bogus", spec)
        self.assertNotIn("extra", spec["training"])
        self.assertNotIn("topLevelJunk", self.c.get(VJ + "/pruned").body)
        self.assertEqual(spec["template"], {"keep": {"me": 1}})     # x-kubernetes-preserve-unknown-fields
        self.assertEqual(spec["training"]["precision"], "bf16-mixed")  # default
        self.assertEqual(spec["gpusPerReplica"], 0)

    def test_strict_field_validation_rejects_unknown_field(self):
        r = self.c.post(VJ + "?fieldValidation=Strict", vitjob("strict", bogus=1))
        self.assertEqual(r.status, 400, r)
        self.assertIn('strict decoding error: unknown field "spec.bogus"', r.body["message"])

    # --- object metadata and concurrency -----------------------------------------------

    def test_create_sets_uid_creation_timestamp_and_generation(self):
        o = self.create(VJ, vitjob("meta"))
        self.assertRegex(o["metadata"]["uid"], r"^[0-9a-f-]{36}$")
        self.assertRegex(o["metadata"]["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(o["metadata"]["generation"], 1)

    def test_generate_name_makes_a_unique_name(self):
        a = self.create(NS + "/configmaps", {"metadata": {"generateName": "gen-"}, "data": {}})
        b = self.create(NS + "/configmaps", {"metadata": {"generateName": "gen-"}, "data": {}})
        self.assertTrue(a["metadata"]["name"].startswith("gen-"))
        self.assertNotEqual(a["metadata"]["name"], b["metadata"]["name"])

    def test_resource_version_is_global_and_monotonic(self):
        a = self.create(NS + "/configmaps", cm("rv-a"))
        b = self.create(VJ, vitjob("rv-b"))
        c = self.create("/apis/coordination.k8s.io/v1/namespaces/default/leases",
                        {"metadata": {"name": "rv-c"}, "spec": {"holderIdentity": "x"}})
        self.assertLess(rv(a), rv(b))
        self.assertLess(rv(b), rv(c))
        listed = int(self.c.get(NS + "/configmaps").body["metadata"]["resourceVersion"])
        self.assertGreaterEqual(listed, rv(c))

    def test_generation_bumped_on_spec_change_only(self):
        o = self.create(VJ, vitjob("gen"))
        o = self.c.patch(VJ + "/gen", {"metadata": {"labels": {"x": "y"}}}).body
        self.assertEqual(o["metadata"]["generation"], 1)
        o = self.c.patch(VJ + "/gen", {"spec": {"replicas": 3}}).body
        self.assertEqual(o["metadata"]["generation"], 2)
        o = self.c.patch(VJ + "/gen/status", {"status": {"phase": "Running"}}).body
        self.assertEqual(o["metadata"]["generation"], 2)

    def test_noop_update_keeps_resource_version(self):
        o = self.create(NS + "/configmaps", cm("noop"))
        again = self.c.put(NS + "/configmaps/noop", o).body
        self.assertEqual(rv(again), rv(o))

    def test_stale_resource_version_update_gets_409(self):
        o = self.create(VJ, vitjob("stale"))
        fresh = copy.deepcopy(o)
        fresh["spec"]["replicas"] = 2
        self.assertEqual(self.c.put(VJ + "/stale", fresh).status, 200)
        o["spec"]["replicas"] = 3
        r = self.c.put(VJ + "/stale", o)
        self.assertEqual(r.status, 409, r)
        self.assertEqual(r.body["reason"], "Conflict")
        self.assertEqual(r.body["message"], 'Operation cannot be fulfilled on vitjobs.vitjob.dev "stale": the object '
                         'has been modified; please apply your changes to the latest version and try again')

    def test_stale_resource_version_in_patch_gets_409(self):
        o = self.create("/apis/coordination.k8s.io/v1/namespaces/default/leases",
                        {"metadata": {"name": "lease-409"}, "spec": {"holderIdentity": "a"}})
        self.c.patch("/apis/coordination.k8s.io/v1/namespaces/default/leases/lease-409",
                     {"spec": {"holderIdentity": "b"}})
        r = self.c.patch("/apis/coordination.k8s.io/v1/namespaces/default/leases/lease-409",
                         {"metadata": {"resourceVersion": o["metadata"]["resourceVersion"]},
                          "spec": {"holderIdentity": "c"}})
        self.assertEqual(r.status, 409, r)

    def test_create_existing_gets_409_already_exists(self):
        self.create(NS + "/configmaps", cm("dup"))
        r = self.c.post(NS + "/configmaps", cm("dup"))
        self.assertEqual(r.status, 409)
        self.assertEqual(r.body["reason"], "AlreadyExists")
        self.assertEqual(r.body["message"], 'configmaps "dup" already exists')

    def test_get_missing_gets_404_not_found(self):
        r = self.c.get(VJ + "/nope")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.body["message"], 'vitjobs.vitjob.dev "nope" not found')

    def test_create_in_missing_namespace_gets_404(self):
        r = self.c.post("/api/v1/namespaces/nowhere/configmaps", cm("x"))
        self.assertEqual(r.status, 404)
        self.assertEqual(r.body["message"], 'namespaces "nowhere" not found')

    # --- status subresource ----------------------------------------------------------

    def test_status_subresource_ignores_spec(self):
        o = self.create(VJ, vitjob("st1"))
        o["spec"]["replicas"] = 9
        o["status"] = {"phase": "Running"}
        r = self.c.put(VJ + "/st1/status", o)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body["status"]["phase"], "Running")
        self.assertEqual(r.body["spec"]["replicas"], 1)

    def test_main_resource_write_ignores_status(self):
        o = self.create(VJ, vitjob("st2", replicas=1))
        self.assertNotIn("status", o)   # status on create is dropped too
        o["status"] = {"phase": "Failed"}
        o["spec"]["replicas"] = 2
        r = self.c.put(VJ + "/st2", o)
        self.assertEqual(r.body["spec"]["replicas"], 2)
        self.assertNotIn("status", r.body)
        self.c.patch(VJ + "/st2/status", {"status": {"phase": "Running"}})
        r = self.c.patch(VJ + "/st2", {"status": {"phase": "Failed"}})
        self.assertEqual(r.body["status"]["phase"], "Running")

    def test_status_is_validated_against_schema(self):
        self.create(VJ, vitjob("st3"))
        r = self.c.patch(VJ + "/st3/status", {"status": {"phase": "Exploded"}})
        self.assertEqual(r.status, 422, r)
        self.assertIn("status.phase: Unsupported value", r.body["message"])

    # --- patches ---------------------------------------------------------------------

    def test_merge_patch_merges_maps_and_null_deletes(self):
        self.create(VJ, vitjob("mp", training={"steps": 10, "precision": "fp32"}))
        r = self.c.patch(VJ + "/mp", {"spec": {"training": {"steps": 20, "precision": None}}})
        self.assertEqual(r.body["spec"]["training"], {"steps": 20, "precision": "bf16-mixed"})  # defaulted again

    def test_json_patch_applies_operations_and_test_failure_gets_422(self):
        self.create(VJ, vitjob("jp"))
        ops = [{"op": "test", "path": "/spec/replicas", "value": 1},
               {"op": "replace", "path": "/spec/replicas", "value": 4},
               {"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
        r = self.c.patch(VJ + "/jp", ops, ctype="application/json-patch+json")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body["spec"]["replicas"], 4)
        self.assertEqual(r.body["metadata"]["labels"], {"a": "b"})
        r = self.c.patch(VJ + "/jp", ops[:1], ctype="application/json-patch+json")
        self.assertEqual(r.status, 422, r)

    def test_strategic_merge_patch_merges_lists_by_key(self):
        # on a Deployment's pod template: a pod's own spec is immutable (containers' env, their number)
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "smp"},
               "spec": {"selector": {"matchLabels": {"app": "smp"}},
                        "template": {"metadata": {"labels": {"app": "smp"}},
                                     "spec": {"containers": [{"name": "worker", "image": "busybox"},
                                                             {"name": "side", "image": "a",
                                                              "env": [{"name": "A", "value": "1"}]}]}}}}
        path = "/apis/apps/v1/namespaces/default/deployments"
        self.create(path, dep)
        patch = {"spec": {"template": {"spec": {
                     "$setElementOrder/containers": [{"name": "worker"}, {"name": "side"}],
                     "containers": [{"name": "side", "image": "b", "env": [{"name": "B", "value": "2"}]}]}}},
                 "metadata": {"finalizers": ["x/y"]}}
        r = self.c.patch(path + "/smp", patch, ctype="application/strategic-merge-patch+json")
        self.assertEqual(r.status, 200, r)
        cs = r.body["spec"]["template"]["spec"]["containers"]
        self.assertEqual([c["name"] for c in cs], ["worker", "side"])
        self.assertEqual(cs[1]["image"], "b")
        self.assertEqual([e["name"] for e in cs[1]["env"]], ["A", "B"])
        r = self.c.patch(path + "/smp", {"spec": {"template": {"spec": {
                             "containers": [{"name": "side", "$patch": "delete"}]}}},
                                         "metadata": {"$deleteFromPrimitiveList/finalizers": ["x/y"]}},
                         ctype="application/strategic-merge-patch+json")
        self.assertEqual([c["name"] for c in r.body["spec"]["template"]["spec"]["containers"]], ["worker"])
        self.assertNotIn("finalizers", r.body["metadata"])

    def test_strategic_merge_patch_on_custom_resource_gets_415(self):
        self.create(VJ, vitjob("smp-cr"))
        r = self.c.patch(VJ + "/smp-cr", {"spec": {"replicas": 2}}, ctype="application/strategic-merge-patch+json")
        self.assertEqual(r.status, 415)

    # --- list: selectors and pagination ---------------------------------------------------

    def test_label_selector_filters_list(self):
        for i, tier in enumerate(["web", "web", "db"]):
            self.create(NS + "/configmaps", cm("ls-%d" % i, {"sel": "yes", "tier": tier}))
        names = lambda q: sorted(o["metadata"]["name"] for o in self.c.get(NS + "/configmaps?labelSelector=" + q)
                                 .body["items"])
        self.assertEqual(names("sel=yes,tier=web"), ["ls-0", "ls-1"])
        self.assertEqual(names("sel=yes,tier!=web"), ["ls-2"])
        self.assertEqual(names("sel,tier+in+(db)"), ["ls-2"])
        self.assertEqual(names("sel=yes,!tier"), [])

    def test_field_selector_filters_list(self):
        self.create(NS + "/pods", pod("fs-a", node="node-1"))
        self.create(NS + "/pods", pod("fs-b"))
        items = self.c.get(NS + "/pods?fieldSelector=spec.nodeName%3Dnode-1").body["items"]
        self.assertEqual([o["metadata"]["name"] for o in items], ["fs-a"])
        items = self.c.get(NS + "/pods?fieldSelector=metadata.name%3Dfs-b").body["items"]
        self.assertEqual([o["metadata"]["name"] for o in items], ["fs-b"])

    def test_unsupported_field_selector_gets_400(self):
        r = self.c.get(NS + "/pods?fieldSelector=spec.bogus%3Dx")
        self.assertEqual(r.status, 400)
        self.assertIn("field label not supported: spec.bogus", r.body["message"])

    def test_list_limit_and_continue_pages_through_all(self):
        self.create("/api/v1/namespaces", {"metadata": {"name": "paging"}})
        for i in range(7):
            self.create("/api/v1/namespaces/paging/configmaps", cm("p-%d" % i))
        seen, token, pages = [], "", 0
        while True:
            body = self.c.get("/api/v1/namespaces/paging/configmaps?limit=3" +
                              ("&continue=" + token if token else "")).body
            seen += [o["metadata"]["name"] for o in body["items"]]
            pages += 1
            token = body["metadata"].get("continue")
            if not token:
                break
            self.assertEqual(body["metadata"]["remainingItemCount"], 8 - len(seen))
        # every namespace has the root CA ConfigMap, as on a real cluster
        self.assertEqual(seen, ["kube-root-ca.crt"] + ["p-%d" % i for i in range(7)])
        self.assertEqual(pages, 3)

    def test_list_across_namespaces(self):
        self.create("/api/v1/namespaces", {"metadata": {"name": "other"}})
        self.create("/api/v1/namespaces/other/configmaps", cm("x-other", {"across": "1"}))
        self.create(NS + "/configmaps", cm("x-default", {"across": "1"}))
        items = self.c.get("/api/v1/configmaps?labelSelector=across").body["items"]
        self.assertEqual(sorted(o["metadata"]["namespace"] for o in items), ["default", "other"])

    # --- watch -----------------------------------------------------------------------

    def test_watch_streams_added_modified_deleted_as_chunked_json_lines(self):
        w = self.c.watch(NS + "/configmaps?watch=true&labelSelector=w%3D1")
        self.assertEqual(w.resp.getheader("Transfer-Encoding"), "chunked")
        self.create(NS + "/configmaps", cm("w1", {"w": "1"}))
        self.c.patch(NS + "/configmaps/w1", {"data": {"k": "v2"}})
        self.c.delete(NS + "/configmaps/w1")
        evs = w.collect(3)
        w.close()
        self.assertEqual([e["type"] for e in evs], ["ADDED", "MODIFIED", "DELETED"])
        self.assertEqual(evs[1]["object"]["data"]["k"], "v2")
        self.assertLess(rv(evs[1]["object"]), rv(evs[2]["object"]))

    def test_watch_without_resource_version_starts_with_current_state(self):
        self.create(NS + "/configmaps", cm("ws-1", {"ws": "1"}))
        w = self.c.watch(NS + "/configmaps?watch=1&labelSelector=ws")
        ev = w.next()
        w.close()
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "ws-1"))

    def test_watch_from_resource_version_replays_history(self):
        a = self.create(NS + "/configmaps", cm("wr-1", {"wr": "1"}))
        self.c.patch(NS + "/configmaps/wr-1", {"data": {"k": "x"}})
        w = self.c.watch(NS + "/configmaps?watch=true&labelSelector=wr&resourceVersion=%d" % rv(a))
        ev = w.next()
        w.close()
        self.assertEqual((ev["type"], ev["object"]["data"]["k"]), ("MODIFIED", "x"))

    def test_watch_too_old_resource_version_gets_410(self):
        first = self.create(NS + "/configmaps", cm("old-0"))
        for i in range(HISTORY + 5):
            self.c.patch(NS + "/configmaps/old-0", {"data": {"i": str(i)}})
        w = self.c.watch(NS + "/configmaps?watch=true&resourceVersion=%d" % rv(first))
        ev = w.next()
        self.assertIsNone(w.next())   # the stream ends after the error
        w.close()
        self.assertEqual(ev["type"], "ERROR")
        self.assertEqual(ev["object"]["code"], 410)
        self.assertEqual(ev["object"]["reason"], "Expired")
        self.assertTrue(ev["object"]["message"].startswith("too old resource version: %d (" % rv(first)))

    def test_watch_sends_bookmarks_only_when_allowed(self):
        cur = self.c.get(NS + "/configmaps").body["metadata"]["resourceVersion"]
        w = self.c.watch(NS + "/secrets?watch=true&allowWatchBookmarks=true&resourceVersion=" + cur)
        ev = w.next(timeout=30)   # one every 0.3 s (--bookmark-interval)
        w.close()
        self.assertEqual(ev["type"], "BOOKMARK")
        self.assertGreaterEqual(rv(ev["object"]), int(cur))
        # without allowWatchBookmarks, the stream's first line is its end (timeoutSeconds=1)
        w = self.c.watch(NS + "/secrets?watch=true&timeoutSeconds=1&resourceVersion=" + cur)
        self.assertIsNone(w.next(timeout=30))
        w.close()

    def test_watch_timeout_seconds_ends_stream(self):
        # ended by the server after its 1 s, not left open (a stream left open would
        # run into next()'s 30 s cap: no event matches the selector)
        start = time.monotonic()
        w = self.c.watch(NS + "/services?watch=true&timeoutSeconds=1&labelSelector=none")
        self.assertIsNone(w.next(timeout=30))
        w.close()
        self.assertLess(time.monotonic() - start, 60)

    def test_watch_with_selector_sends_deleted_when_object_leaves_selection(self):
        o = self.create(NS + "/configmaps", cm("leave", {"team": "a"}))
        w = self.c.watch(NS + "/configmaps?watch=true&labelSelector=team%3Da&resourceVersion=" +
                         o["metadata"]["resourceVersion"])
        self.c.patch(NS + "/configmaps/leave", {"metadata": {"labels": {"team": "b"}}})
        self.c.patch(NS + "/configmaps/leave", {"metadata": {"labels": {"team": "a"}}})
        evs = w.collect(2)
        w.close()
        self.assertEqual([e["type"] for e in evs], ["DELETED", "ADDED"])

    def test_watch_as_table_sends_rows(self):
        w = self.c.watch(VJ + "?watch=true&fieldSelector=metadata.name%3Dwt",
                         headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
        self.create(VJ, vitjob("wt"))
        ev = w.next()
        w.close()
        self.assertEqual(ev["object"]["kind"], "Table")
        self.assertEqual(ev["object"]["rows"][0]["cells"][0], "wt")

    # --- managedFields and defaults, as a real server writes them ------------------------

    def test_created_pod_carries_managed_fields_of_its_manager_as_a_real_server_writes(self):
        ua = kubeclient.for_server(self.server.port, self.server.ca, self.server.token)
        ua.user_agent = "kubectl/v1.26.3 (linux/amd64) kubernetes/9e64410"
        r = ua.post(NS + "/pods", pod("mf", labels={"app": "x"}))
        self.assertEqual(r.status, 201, r)
        got = self.c.get(NS + "/pods/mf").body
        (e,) = got["metadata"]["managedFields"]
        self.assertEqual(set(e), {"manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1"})
        self.assertEqual((e["manager"], e["operation"], e["apiVersion"], e["fieldsType"]),
                         ("kubectl", "Update", "v1", "FieldsV1"))
        fs = e["fieldsV1"]
        self.assertEqual(fs["f:metadata"], {"f:labels": {".": {}, "f:app": {}}})
        c = fs["f:spec"]["f:containers"]['k:{"name":"worker"}']
        for k in (".", "f:image", "f:name", "f:imagePullPolicy", "f:resources", "f:terminationMessagePath",
                  "f:terminationMessagePolicy"):
            self.assertIn(k, c)
        for k in ("f:dnsPolicy", "f:enableServiceLinks", "f:restartPolicy", "f:schedulerName",
                  "f:securityContext", "f:terminationGracePeriodSeconds"):
            self.assertIn(k, fs["f:spec"])
        self.assertNotIn("f:status", fs)

    def test_status_write_adds_an_entry_for_its_manager_and_subresource(self):
        self.create(NS + "/pods", pod("mfs"))
        st = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        r = self.c.patch(NS + "/pods/mfs/status?fieldManager=kubelet", st)
        self.assertEqual(r.status, 200, r)
        mf = {(e.get("manager"), e["operation"], e.get("subresource")): e
              for e in self.c.get(NS + "/pods/mfs").body["metadata"]["managedFields"]}
        fs = mf[("kubelet", "Update", "status")]["fieldsV1"]["f:status"]
        self.assertEqual(fs["f:phase"], {})
        self.assertEqual(fs["f:conditions"]['k:{"type":"Ready"}'], {".": {}, "f:status": {}, "f:type": {}})
        # the same write again changes nothing, not even the entry's time
        before = self.c.get(NS + "/pods/mfs").body["metadata"]
        self.c.patch(NS + "/pods/mfs/status?fieldManager=kubelet", st)
        after = self.c.get(NS + "/pods/mfs").body["metadata"]
        self.assertEqual(before["resourceVersion"], after["resourceVersion"])
        self.assertEqual(before["managedFields"], after["managedFields"])

    def test_update_moves_changed_fields_to_its_manager(self):
        self.create(NS + "/configmaps?fieldManager=creator", cm("mfu"))
        r = self.c.patch(NS + "/configmaps/mfu?fieldManager=editor", {"data": {"k": "changed", "n": "new"}})
        self.assertEqual(r.status, 200, r)
        mf = {e["manager"]: e["fieldsV1"] for e in r.body["metadata"]["managedFields"]}
        self.assertEqual(mf["editor"], {"f:data": {"f:k": {}, "f:n": {}}})
        self.assertNotIn("f:k", mf.get("creator", {}).get("f:data", {}))

    def test_pod_gets_the_defaults_and_admission_fields_a_real_server_writes(self):
        got = self.create(NS + "/pods", pod("defaults"))
        spec = got["spec"]
        self.assertEqual({k: spec.get(k) for k in ("dnsPolicy", "restartPolicy", "schedulerName",
                                                   "securityContext", "enableServiceLinks", "preemptionPolicy",
                                                   "priority", "serviceAccountName",
                                                   "terminationGracePeriodSeconds")},
                         {"dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
                          "schedulerName": "default-scheduler", "securityContext": {},
                          "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
                          "priority": 0, "serviceAccountName": "default",
                          "terminationGracePeriodSeconds": 30})
        c = spec["containers"][0]
        self.assertEqual((c["terminationMessagePath"], c["terminationMessagePolicy"], c["imagePullPolicy"],
                          c["resources"]), ("/dev/termination-log", "File", "Always", {}))
        self.assertTrue(spec["volumes"][0]["name"].startswith("kube-api-access-"))
        self.assertEqual(c["volumeMounts"][0]["mountPath"], "/var/run/secrets/kubernetes.io/serviceaccount")
        self.assertEqual(sorted((t["key"], t["tolerationSeconds"]) for t in spec["tolerations"]),
                         [("node.kubernetes.io/not-ready", 300), ("node.kubernetes.io/unreachable", 300)])

    # --- deletion, finalizers, grace periods, garbage collection ----------------------------

    def test_finalizer_keeps_object_with_deletion_timestamp_until_removed(self):
        o = vitjob("fin")
        o["metadata"]["finalizers"] = ["vitjob.dev/cleanup"]
        self.create(VJ, o)
        r = self.c.delete(VJ + "/fin")
        self.assertEqual(r.status, 200)
        got = self.c.get(VJ + "/fin").body
        self.assertIn("deletionTimestamp", got["metadata"])
        r = self.c.patch(VJ + "/fin", {"metadata": {"finalizers": ["another"]}})
        self.assertEqual(r.status, 422, r)    # no new finalizers on a terminating object
        self.c.patch(VJ + "/fin", {"metadata": {"finalizers": None}})
        self.assertEqual(self.c.get(VJ + "/fin").status, 404)

    def test_scheduled_pod_deletion_waits_grace_period_until_forced(self):
        self.create(NS + "/pods", pod("graceful", node="node-1"))
        r = self.c.delete(NS + "/pods/graceful", {"gracePeriodSeconds": 30})
        self.assertEqual(r.body["metadata"]["deletionGracePeriodSeconds"], 30)
        self.assertEqual(self.c.get(NS + "/pods/graceful").status, 200)
        self.c.delete(NS + "/pods/graceful", {"gracePeriodSeconds": 0})
        self.assertEqual(self.c.get(NS + "/pods/graceful").status, 404)

    def test_unscheduled_pod_is_deleted_at_once(self):
        self.create(NS + "/pods", pod("unscheduled"))
        self.c.delete(NS + "/pods/unscheduled")
        self.assertEqual(self.c.get(NS + "/pods/unscheduled").status, 404)

    def test_delete_precondition_on_uid_gets_409(self):
        self.create(NS + "/configmaps", cm("precond"))
        r = self.c.delete(NS + "/configmaps/precond", {"preconditions": {"uid": "other"}})
        self.assertEqual(r.status, 409)

    def test_gc_background_deletes_dependents_of_deleted_owner(self):
        owner = self.create(VJ, vitjob("gc-bg"))
        self.create(NS + "/pods", pod("gc-bg-0", owner=owner))
        self.create(NS + "/services", {"metadata": {"name": "gc-bg", "ownerReferences":
                                       pod("x", owner=owner)["metadata"]["ownerReferences"]},
                                       "spec": {"clusterIP": "None", "ports": [{"port": 29400}]}})
        self.c.delete(VJ + "/gc-bg", {"propagationPolicy": "Background"})
        self.wait_gone(NS + "/pods/gc-bg-0")
        self.wait_gone(NS + "/services/gc-bg")

    def test_gc_foreground_deletes_dependents_before_owner(self):
        owner = self.create(VJ, vitjob("gc-fg"))
        self.create(NS + "/configmaps", dict(cm("gc-fg-cm"), metadata={
            "name": "gc-fg-cm", "finalizers": ["test/hold"],
            "ownerReferences": pod("x", owner=owner)["metadata"]["ownerReferences"]}))
        self.c.delete(VJ + "/gc-fg", {"propagationPolicy": "Foreground"})
        # the GC (every 0.5 s) deletes the dependent, which its finalizer keeps...
        wait_for("gc-fg-cm deleting", lambda: "deletionTimestamp" in
                      self.c.get(NS + "/configmaps/gc-fg-cm").body["metadata"])
        got = self.c.get(VJ + "/gc-fg").body     # ...and the owner waits for its dependent
        self.assertIn("foregroundDeletion", got["metadata"]["finalizers"])
        self.c.patch(NS + "/configmaps/gc-fg-cm", {"metadata": {"finalizers": None}})
        self.wait_gone(VJ + "/gc-fg")

    def test_gc_orphan_keeps_dependents_and_drops_owner_reference(self):
        owner = self.create(VJ, vitjob("gc-or"))
        self.create(NS + "/configmaps", dict(cm("gc-or-cm"), metadata={
            "name": "gc-or-cm", "ownerReferences": pod("x", owner=owner)["metadata"]["ownerReferences"]}))
        self.c.delete(VJ + "/gc-or", {"propagationPolicy": "Orphan"})
        self.wait_gone(VJ + "/gc-or")
        time.sleep(0.3)
        got = self.c.get(NS + "/configmaps/gc-or-cm")
        self.assertEqual(got.status, 200)
        self.assertNotIn("ownerReferences", got.body["metadata"])

    def test_namespace_deletion_removes_its_objects(self):
        self.create("/api/v1/namespaces", {"metadata": {"name": "doomed"}})
        self.create("/api/v1/namespaces/doomed/configmaps", cm("c"))
        self.create("/api/v1/namespaces/doomed/pods", pod("p"))
        r = self.c.delete("/api/v1/namespaces/doomed")
        self.assertEqual(r.body["status"]["phase"], "Terminating")
        self.wait_gone("/api/v1/namespaces/doomed")
        self.assertEqual(self.c.get("/api/v1/namespaces/doomed/configmaps/c").status, 404)

    # --- core types --------------------------------------------------------------------

    def test_core_and_lease_types_round_trip(self):
        paths = {
            NS + "/services": {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}},
            NS + "/secrets": {"metadata": {"name": "sec"}, "stringData": {"a": "b"}},
            NS + "/events": {"metadata": {"name": "ev"}, "involvedObject": {"kind": "ViTJob", "name": "x"},
                             "reason": "Created", "message": "m", "type": "Normal"},
            "/apis/coordination.k8s.io/v1/namespaces/default/leases": {
                "metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}},
        }
        for path, obj in paths.items():
            made = self.create(path, obj)
            got = self.c.get(path + "/" + obj["metadata"]["name"]).body
            self.assertEqual(got["metadata"]["uid"], made["metadata"]["uid"])
        self.assertEqual(self.c.get(NS + "/services/svc").body["spec"]["ports"][0]["protocol"], "TCP")
        evs = self.c.get(NS + "/events?fieldSelector=involvedObject.kind%3DViTJob,involvedObject.name%3Dx").body
        self.assertEqual(len(evs["items"]), 1)

    # --- tables -------------------------------------------------------------------------

    def test_table_printing_uses_crd_printer_columns(self):
        self.create(VJ, vitjob("tbl", replicas=3))
        self.c.patch(VJ + "/tbl/status", {"status": {"phase": "Running", "progress": {"step": 42}}})
        r = self.c.get(VJ + "?fieldSelector=metadata.name%3Dtbl",
                       headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
        self.assertEqual(r.body["kind"], "Table")
        self.assertEqual([c["name"] for c in r.body["columnDefinitions"]],
                         ["Name", "Phase", "Replicas", "Step", "Age"])
        cells = r.body["rows"][0]["cells"]
        self.assertEqual(cells[:4], ["tbl", "Running", 3, 42])
        self.assertRegex(cells[4], r"^\d+s$")
        self.assertEqual(r.body["rows"][0]["object"]["kind"], "PartialObjectMetadata")

    # --- authorization.k8s.io: access reviews and impersonation ---------------------------

    def sa_client(self, ns, sa):
        """A client holding a token of ServiceAccount ns/sa (namespace and account made here)."""
        self.assertIn(self.c.post("/api/v1/namespaces", {"metadata": {"name": ns}}).status, (201, 409))
        self.assertIn(self.c.post("/api/v1/namespaces/%s/serviceaccounts" % ns,
                                  {"metadata": {"name": sa}}).status, (201, 409))
        r = self.c.post("/api/v1/namespaces/%s/serviceaccounts/%s/token" % (ns, sa),
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
        self.assertEqual(r.status, 201, r)
        return self.server.client(token=r.body["status"]["token"])

    def grant(self, ns, name, rules, subject, cluster=False):
        """A Role (ClusterRole when cluster) and its binding of `subject`."""
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        kind = "ClusterRole" if cluster else "Role"
        base = rbac if cluster else "%s/namespaces/%s" % (rbac, ns)
        self.create(base + ("/clusterroles" if cluster else "/roles"), {"metadata": {"name": name}, "rules": rules})
        self.create(base + ("/clusterrolebindings" if cluster else "/rolebindings"), {
            "metadata": {"name": name}, "subjects": [subject],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}})

    def ssar(self, client, spec, headers=None):
        return client.post(AUTHZ + "/selfsubjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec},
            headers=headers)

    def test_authorization_group_is_discovered_with_its_create_only_reviews(self):
        groups = {g["name"]: g for g in self.c.get("/apis").body["groups"]}
        self.assertEqual(groups["authorization.k8s.io"]["preferredVersion"]["groupVersion"], "authorization.k8s.io/v1")
        self.assertEqual(self.c.get("/apis/authorization.k8s.io").body["versions"][0]["version"], "v1")
        res = {r["name"]: r for r in self.c.get(AUTHZ).body["resources"]}
        self.assertEqual(sorted(res), ["localsubjectaccessreviews", "selfsubjectaccessreviews",
                                       "selfsubjectrulesreviews", "subjectaccessreviews"])
        self.assertEqual(res["selfsubjectaccessreviews"]["kind"], "SelfSubjectAccessReview")
        self.assertTrue(res["localsubjectaccessreviews"]["namespaced"])
        self.assertFalse(res["subjectaccessreviews"]["namespaced"])
        self.assertTrue(all(r["verbs"] == ["create"] for r in res.values()))
        # create only, never stored
        self.assertEqual(self.c.get(AUTHZ + "/selfsubjectaccessreviews").status, 405)

    def test_self_subject_access_review_answers_per_rbac_and_echoes_the_spec(self):
        robot = self.sa_client("ssar1", "robot")
        self.grant("ssar1", "pod-maker", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]}],
                   {"kind": "ServiceAccount", "name": "robot", "namespace": "ssar1"})
        spec = {"resourceAttributes": {"namespace": "ssar1", "verb": "create", "resource": "pods"}}
        r = self.ssar(robot, spec)
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.body["kind"], "SelfSubjectAccessReview")
        self.assertEqual(r.body["apiVersion"], "authorization.k8s.io/v1")
        self.assertEqual(r.body["spec"], spec)
        self.assertEqual(r.body["status"], {"allowed": True, "reason": 'RBAC: allowed by RoleBinding '
                                            '"pod-maker/ssar1" of Role "pod-maker" to ServiceAccount "robot/ssar1"'})
        # elsewhere, or another verb: RBAC has no opinion, so not allowed and not denied
        for attrs in ({"namespace": "default", "verb": "create", "resource": "pods"},
                      {"namespace": "ssar1", "verb": "delete", "resource": "pods"},
                      {"namespace": "ssar1", "verb": "get", "resource": "secrets"}):
            r = self.ssar(robot, {"resourceAttributes": attrs})
            self.assertEqual(r.body["status"], {"allowed": False}, attrs)
        # non-resource paths: the bootstrap discovery role
        r = self.ssar(robot, {"nonResourceAttributes": {"path": "/apis", "verb": "get"}})
        self.assertEqual(r.body["status"], {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding '
                                            '"system:discovery" of ClusterRole "system:discovery" to Group '
                                            '"system:authenticated"'})
        self.assertFalse(self.ssar(robot, {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}})
                         .body["status"]["allowed"])
        # system:masters may do anything, with no reason given
        self.assertEqual(self.ssar(self.c, {"resourceAttributes": {"verb": "delete", "resource": "nodes"}})
                         .body["status"], {"allowed": True})
        # nothing was stored: the same review again is answered again
        self.assertEqual(self.ssar(robot, spec).status, 201)

    def test_subject_access_review_needs_create_on_it_and_evaluates_the_user_of_its_spec(self):
        robot = self.sa_client("sar1", "robot")
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": "system:serviceaccount:sar1:robot", "groups": ["system:authenticated"],
                         "resourceAttributes": {"namespace": "sar1", "verb": "list", "resource": "configmaps"}}}
        r = robot.post(AUTHZ + "/subjectaccessreviews", body)
        self.assertEqual(r.status, 403, r)
        self.assertEqual(r.body["message"], 'subjectaccessreviews.authorization.k8s.io is forbidden: User '
                         '"system:serviceaccount:sar1:robot" cannot create resource "subjectaccessreviews" in API '
                         'group "authorization.k8s.io" at the cluster scope')
        r = self.c.post(AUTHZ + "/subjectaccessreviews", body)
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.body["spec"], body["spec"])
        self.assertEqual(r.body["status"], {"allowed": False})
        self.grant("sar1", "cm-reader", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
                   {"kind": "ServiceAccount", "name": "robot", "namespace": "sar1"})
        self.assertTrue(self.c.post(AUTHZ + "/subjectaccessreviews", body).body["status"]["allowed"])
        # a caller allowed to create them may ask too
        self.grant("", "sar1-reviewer", [{"apiGroups": ["authorization.k8s.io"],
                                          "resources": ["subjectaccessreviews"], "verbs": ["create"]}],
                   {"kind": "ServiceAccount", "name": "robot", "namespace": "sar1"}, cluster=True)
        self.assertTrue(robot.post(AUTHZ + "/subjectaccessreviews", body).body["status"]["allowed"])
        # the spec's groups are taken as given: without system:authenticated no bootstrap role applies
        disc = {"user": "bob", "nonResourceAttributes": {"path": "/api", "verb": "get"}}
        self.assertEqual(self.c.post(AUTHZ + "/subjectaccessreviews", {"spec": disc}).body["status"],
                         {"allowed": False})
        disc["groups"] = ["system:authenticated"]
        self.assertTrue(self.c.post(AUTHZ + "/subjectaccessreviews", {"spec": disc}).body["status"]["allowed"])
        # a group alone is a subject too
        self.grant("sar1", "team-edit", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}],
                   {"kind": "Group", "name": "team", "apiGroup": "rbac.authorization.k8s.io"})
        r = self.c.post(AUTHZ + "/subjectaccessreviews", {"spec": {"groups": ["team"], "resourceAttributes": {
            "namespace": "sar1", "verb": "delete", "resource": "pods", "name": "p"}}})
        self.assertEqual(r.body["status"], {"allowed": True, "reason": 'RBAC: allowed by RoleBinding '
                                            '"team-edit/sar1" of Role "team-edit" to Group "team"'})

    def test_local_subject_access_review_is_bound_to_its_namespace(self):
        self.sa_client("lsar1", "robot")
        path = AUTHZ + "/namespaces/lsar1/localsubjectaccessreviews"
        spec = {"user": "system:serviceaccount:lsar1:robot",
                "resourceAttributes": {"namespace": "lsar1", "verb": "get", "resource": "pods"}}
        r = self.c.post(path, {"spec": spec})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.body["kind"], "LocalSubjectAccessReview")
        self.assertEqual(r.body["metadata"]["namespace"], "lsar1")
        self.assertEqual(r.body["status"], {"allowed": False})
        spec["resourceAttributes"]["namespace"] = "other"
        r = self.c.post(path, {"spec": spec})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.body["message"], '.authorization.k8s.io "" is invalid: spec.resourceAttributes.namespace: '
                         'Invalid value: "other": must match metadata.namespace')
        r = self.c.post(path, {"spec": {"user": "u", "nonResourceAttributes": {"path": "/api", "verb": "get"}}})
        self.assertEqual(r.body["message"], '.authorization.k8s.io "" is invalid: spec.nonResourceAttributes: '
                         'Invalid value: authorization.NonResourceAttributes{Path:"/api", Verb:"get"}: disallowed '
                         'on this kind of request')
        self.assertEqual(self.c.post(AUTHZ + "/localsubjectaccessreviews", {"spec": spec}).status, 404)

    def test_access_review_validation_is_worded_as_on_a_real_server(self):
        r = self.ssar(self.c, {})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.body["reason"], "Invalid")
        self.assertEqual(r.body["message"], '.authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid '
                         'value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified')
        self.assertEqual(r.body["details"]["causes"][0]["field"], "spec.resourceAttributes")
        r = self.ssar(self.c, {"resourceAttributes": {"verb": "get", "resource": "pods"},
                               "nonResourceAttributes": {"path": "/api", "verb": "get"}})
        self.assertEqual(r.body["message"], '.authorization.k8s.io "" is invalid: spec.nonResourceAttributes: '
                         'Invalid value: authorization.NonResourceAttributes{Path:"/api", Verb:"get"}: cannot be '
                         'specified in combination with resourceAttributes')
        r = self.c.post(AUTHZ + "/subjectaccessreviews", {"spec": {}})
        self.assertEqual(r.body["message"], '.authorization.k8s.io "" is invalid: [spec.resourceAttributes: Invalid '
                         'value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified, '
                         'spec.user: Invalid value: "": at least one of user or group must be specified]')

    def test_self_subject_rules_review_lists_the_rules_of_the_caller_in_a_namespace(self):
        robot = self.sa_client("ssrr1", "robot")
        self.grant("ssrr1", "one-job", [{"apiGroups": ["vitjob.dev"], "resources": ["vitjobs/status"],
                                         "resourceNames": ["j"], "verbs": ["get", "patch"]}],
                   {"kind": "ServiceAccount", "name": "robot", "namespace": "ssrr1"})
        r = robot.post(AUTHZ + "/selfsubjectrulesreviews", {"spec": {"namespace": "ssrr1"}})
        self.assertEqual(r.status, 201, r)
        self.assertIn({"verbs": ["get", "patch"], "apiGroups": ["vitjob.dev"], "resources": ["vitjobs/status"],
                       "resourceNames": ["j"]}, r.body["status"]["resourceRules"])
        self.assertIn({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                       "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
                      r.body["status"]["resourceRules"])
        self.assertFalse(r.body["status"]["incomplete"])
        elsewhere = robot.post(AUTHZ + "/selfsubjectrulesreviews", {"spec": {"namespace": "default"}}).body
        self.assertNotIn("vitjob.dev", str(elsewhere["status"]["resourceRules"]))
        self.assertEqual(robot.post(AUTHZ + "/selfsubjectrulesreviews", {"spec": {}}).body["message"],
                         "no namespace on request")

    def test_impersonation_needs_the_impersonate_verb_worded_as_on_a_real_server(self):
        robot = self.sa_client("imp1", "robot")
        r = robot.get("/api/v1/namespaces/imp1/pods", headers={"Impersonate-User": "jane"})
        self.assertEqual(r.status, 403, r)
        self.assertEqual(r.body["message"], 'users "jane" is forbidden: User "system:serviceaccount:imp1:robot" '
                         'cannot impersonate resource "users" in API group "" at the cluster scope')
        self.assertEqual(r.body["details"], {"name": "jane", "kind": "users"})
        r = robot.get("/api/v1/namespaces/imp1/pods", headers={"Impersonate-User": "system:serviceaccount:imp1:other"})
        self.assertEqual(r.body["message"], 'serviceaccounts "other" is forbidden: User '
                         '"system:serviceaccount:imp1:robot" cannot impersonate resource "serviceaccounts" in API '
                         'group "" in the namespace "imp1"')
        self.grant("", "imp1-users", [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"],
                                       "resourceNames": ["jane"]}],
                   {"kind": "ServiceAccount", "name": "robot", "namespace": "imp1"}, cluster=True)
        r = robot.get("/api/v1/namespaces/imp1/pods", headers={"Impersonate-User": "jane",
                                                                "Impersonate-Group": "admins"})
        self.assertEqual(r.body["message"], 'groups "admins" is forbidden: User "system:serviceaccount:imp1:robot" '
                         'cannot impersonate resource "groups" in API group "" at the cluster scope')
        # allowed: the request runs as jane, who may do nothing here
        r = robot.get("/api/v1/namespaces/imp1/pods", headers={"Impersonate-User": "jane"})
        self.assertEqual(r.status, 403, r)
        self.assertEqual(r.body["message"], 'pods is forbidden: User "jane" cannot list resource "pods" in API '
                         'group "" in the namespace "imp1"')
        self.grant("imp1", "jane-pods", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
                   {"kind": "User", "name": "jane", "apiGroup": "rbac.authorization.k8s.io"})
        self.assertEqual(robot.get("/api/v1/namespaces/imp1/pods", headers={"Impersonate-User": "jane"}).status, 200)
        # the impersonated user is authenticated: the bootstrap roles apply to it
        self.assertEqual(robot.get("/api", headers={"Impersonate-User": "jane"}).status, 200)

    def test_impersonating_a_service_account_or_groups_reviews_their_access(self):
        self.sa_client("imp2", "worker")
        self.grant("imp2", "worker-status", [{"apiGroups": ["vitjob.dev"], "resources": ["vitjobs/status"],
                                              "verbs": ["patch"]}],
                   {"kind": "ServiceAccount", "name": "worker", "namespace": "imp2"})
        as_worker = {"Impersonate-User": "system:serviceaccount:imp2:worker"}
        ask = {"resourceAttributes": {"namespace": "imp2", "verb": "patch", "group": "vitjob.dev",
                                      "resource": "vitjobs", "subresource": "status", "name": "j"}}
        self.assertEqual(self.ssar(self.c, ask, headers=as_worker).body["status"]["reason"],
                         'RBAC: allowed by RoleBinding "worker-status/imp2" of Role "worker-status" to '
                         'ServiceAccount "worker/imp2"')
        ask["resourceAttributes"]["verb"] = "delete"
        self.assertEqual(self.ssar(self.c, ask, headers=as_worker).body["status"], {"allowed": False})
        r = self.c.get("/api/v1/namespaces/imp2/pods", headers=as_worker)
        self.assertEqual(r.body["message"], 'pods is forbidden: User "system:serviceaccount:imp2:worker" cannot '
                         'list resource "pods" in API group "" in the namespace "imp2"')
        # groups given: taken with system:authenticated; system:masters may do anything
        self.assertEqual(self.c.get("/api/v1/namespaces/imp2/pods",
                                    headers={"Impersonate-User": "x", "Impersonate-Group": "system:masters"}).status,
                         200)
        # groups without a user are refused
        r = self.c.get("/api/v1/namespaces", headers={"Impersonate-Group": "team"})
        self.assertEqual(r.status, 500)


class FakeKubelet:
    """A kubelet API endpoint on 127.0.0.1 that records what the API server
    asks of GET /containerLogs and answers from answers: {container: (code,
    body)}; it asks for a client certificate of the cluster CA."""

    def __init__(self, pki, answers):
        import http.server
        import threading
        outer = self
        self.requests, self.answers = [], answers

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                cert = self.connection.getpeercert() or {}
                cn = [v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"]
                outer.requests.append((self.path, cn))
                container = self.path.split("?")[0].rsplit("/", 1)[-1]
                code, body = outer.answers.get(container, (404, "no such container"))
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(pki, "server.crt"), os.path.join(pki, "server.key"))
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(os.path.join(pki, "ca.crt"))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class PodLogTest(unittest.TestCase):
    """GET pods/NAME/log: checked and worded as a real server, then proxied to
    the node's kubelet endpoint (status.addresses InternalIP,
    daemonEndpoints.kubeletEndpoint.Port) with the server's kubelet client
    certificate; a fake kubelet answers here."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="apiserver-logs-")
        cls.server = ServerProcess(os.path.join(cls.tmp, "state"))
        cls.c = cls.server.client()
        cls.kubelet = FakeKubelet(os.path.join(cls.server.state, "pki"), {
            "main": (200, "one\ntwo\n"),
            "gone": (400, 'previous terminated container "gone" in pod "p1" not found'),
            "new": (400, 'container "new" in pod "p1" is waiting to start: ContainerCreating')})
        r = cls.c.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fk"}})
        assert r.status == 201, r
        r = cls.c.patch("/api/v1/nodes/fk/status", {"status": {
            "addresses": [{"type": "Hostname", "address": "fk"}, {"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": cls.kubelet.port}}}})
        assert r.status == 200, r
        containers = [{"name": n, "image": "busybox"} for n in ("main", "gone", "new")]
        for name, node, cs in (("p1", "fk", containers), ("solo", "fk", containers[:1]),
                               ("unbound", None, containers[:1])):
            body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                    "spec": {"containers": cs}}
            if node:
                body["spec"]["nodeName"] = node
            r = cls.c.post(NS + "/pods", body)
            assert r.status == 201, r

    @classmethod
    def tearDownClass(cls):
        cls.kubelet.stop()
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_log_of_a_missing_pod_is_404_pods_not_found(self):
        r = self.c.get(NS + "/pods/ghost/log")
        self.assertEqual((r.status, r.body["reason"], r.body["message"]), (404, "NotFound", 'pods "ghost" not found'))

    def test_log_of_a_pod_with_several_containers_needs_a_container_named_as_a_real_server_says(self):
        r = self.c.get(NS + "/pods/p1/log")
        self.assertEqual((r.status, r.body["reason"]), (400, "BadRequest"))
        self.assertEqual(r.body["message"], "a container name must be specified for pod p1, choose one of: "
                                            "[main gone new]")
        r = self.c.get(NS + "/pods/p1/log?container=nope")
        self.assertEqual((r.status, r.body["message"]), (400, "container nope is not valid for pod p1"))

    def test_log_is_proxied_to_the_nodes_kubelet_with_its_options_and_the_client_certificate(self):
        n = len(self.kubelet.requests)
        r = self.c.get(NS + "/pods/p1/log?container=main&tailLines=2&timestamps=true&limitBytes=50"
                       "&sinceSeconds=9&previous=false")
        self.assertEqual((r.status, r.body), (200, "one\ntwo\n"))
        self.assertEqual(r.headers["Content-Type"], "text/plain")
        path, cn = self.kubelet.requests[n]
        self.assertEqual(path, "/containerLogs/default/p1/main?timestamps=true&sinceSeconds=9&tailLines=2"
                               "&limitBytes=50")
        self.assertEqual(cn, ["kube-apiserver-kubelet-client"])
        r = self.c.get(NS + "/pods/solo/log")      # the only container needs no name
        self.assertEqual((r.status, r.body), (200, "one\ntwo\n"))
        self.assertEqual(self.kubelet.requests[-1][0], "/containerLogs/default/solo/main")

    def test_a_kubelets_refusal_is_a_bad_request_with_its_words(self):
        r = self.c.get(NS + "/pods/p1/log?container=gone&previous=true")
        self.assertEqual((r.status, r.body["reason"], r.body["message"]),
                         (400, "BadRequest", 'previous terminated container "gone" in pod "p1" not found'))
        self.assertIn("previous=true", self.kubelet.requests[-1][0])
        r = self.c.get(NS + "/pods/p1/log?container=new")
        self.assertEqual((r.status, r.body["message"]),
                         (400, 'container "new" in pod "p1" is waiting to start: ContainerCreating'))

    def test_log_of_a_pod_on_no_node_is_empty(self):
        r = self.c.get(NS + "/pods/unbound/log")
        self.assertEqual((r.status, r.body), (200, None))

    def test_log_options_are_validated_as_pod_log_options(self):
        r = self.c.get(NS + "/pods/solo/log?tailLines=-1")
        self.assertEqual((r.status, r.body["message"]), (422, 'PodLogOptions "" is invalid: tailLines: '
                                                              'Invalid value: -1: must be greater than or equal to 0'))

    def test_pods_log_is_authorized_as_get_on_the_log_subresource(self):
        r = self.c.get(NS + "/pods/solo/log", headers={"Impersonate-User": "nobody"})
        self.assertEqual((r.status, r.body["message"]), (403, 'pods "solo" is forbidden: User "nobody" cannot get '
                                                              'resource "pods/log" in API group "" in the namespace '
                                                              '"default"'))


class RestartTest(unittest.TestCase):
    def test_restart_keeps_objects_and_resource_versions_increase(self):
        tmp = tempfile.mkdtemp(prefix="apiserver-restart-")
        state = os.path.join(tmp, "state")
        try:
            s = ServerProcess(state, args=["--history", "100"])
            c = s.client()
            self.assertEqual(c.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                    load_yaml_docs(CRD)[0]).status, 201)
            job = c.post(VJ, vitjob("survivor")).body
            c.patch(VJ + "/survivor/status", {"status": {"phase": "Running"}})
            cmap = c.post(NS + "/configmaps", cm("kept")).body
            before = int(c.get(NS + "/configmaps").body["metadata"]["resourceVersion"])
            port = s.port
            s.stop()

            s = ServerProcess(state, port=port, args=["--history", "100"])
            self.assertEqual(s.port, port)
            c = s.client()   # same CA, token and port: an existing kubeconfig keeps working
            got = c.get(VJ + "/survivor").body
            self.assertEqual(got["metadata"]["uid"], job["metadata"]["uid"])
            self.assertEqual(got["status"]["phase"], "Running")
            self.assertEqual(c.get(NS + "/configmaps/kept").body["metadata"]["uid"], cmap["metadata"]["uid"])
            # a watch resumes from a resourceVersion seen before the restart
            w = c.watch(NS + "/configmaps?watch=true&resourceVersion=%d" % rv(cmap))
            after = c.post(NS + "/configmaps", cm("after")).body
            ev = w.next()
            w.close()
            self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "after"))
            self.assertGreater(rv(after), before)
            s.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def https_status(host, port, ca, path="/version"):
    """GET path on host:port, verifying the server's certificate names host."""
    return kubeclient.for_server(port, ca, None, host=host).get(path).status


class ListenAddressTest(unittest.TestCase):
    """--address and --san: a server reachable on other addresses, whose
    certificate clients verify there."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="apiserver-addr-")
        self.state = os.path.join(self.tmp, "state")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_default_listens_on_loopback_only_and_san_restart_reissues_the_cert_from_the_same_ca(self):
        s = ServerProcess(self.state)
        try:
            self.assertEqual(https_status("127.0.0.1", s.port, s.ca), 200)
            with self.assertRaises(OSError):
                https_status("127.0.0.2", s.port, s.ca)     # not listening there
        finally:
            s.stop()
        with open(s.ca) as f:
            ca_before = f.read()
        s = ServerProcess(self.state, args=["--address", "0.0.0.0", "--san", "127.0.0.2"])
        try:
            with open(s.ca) as f:
                self.assertEqual(f.read(), ca_before, "the CA is kept")
            self.assertEqual(https_status("127.0.0.2", s.port, s.ca), 200)
            self.assertEqual(https_status("127.0.0.1", s.port, s.ca), 200)
            with self.assertRaises(ssl.SSLCertVerificationError):
                https_status("127.0.0.3", s.port, s.ca)     # listening, but not named by the cert
            with open(s.kubeconfig) as f:
                self.assertIn("server: https://127.0.0.1:%d\n" % s.port, f.read())
        finally:
            s.stop()


if __name__ == "__main__":
    testlimit.main(300)
