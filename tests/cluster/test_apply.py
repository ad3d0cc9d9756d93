#!/usr/bin/python3
# tests/cluster/test_apply.py: server-side apply on the test API server
# (kubeapi/apply.py) as a real 1.26 server serves it: driven by the real
# kubectl (`apply --server-side`, `--force-conflicts`, `--field-manager`):
# create, an unchanged re-apply, conflicts with another manager printed as
# kubectl prints them, force taking the field, pruning of what the manager
# stopped applying, co-ownership of equal values, ViTJobs (a CRD); and
# without kubectl: the PatchOptions refusals (422), the 415 of an unknown
# patch type, YAML and JSON bodies, the 409's body, dryRun and the status
# subresource, each worded as a real server words it.
# Run from the repository root: /usr/bin/python3 -m tests.cluster.test_apply

import copy
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import yaml

from tests.cluster import testlimit
from tests.cluster.harness import HERE, ServerProcess

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
CRD = os.path.join(HERE, "testdata", "crd.yaml")
APPLY = "application/apply-patch+yaml"
NS = "/api/v1/namespaces/default"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
VJ = "/apis/vitjob.dev/v1alpha1/namespaces/default/vitjobs"


def deployment(name, replicas=2, env=True, labels=None):
    c = {"name": "nginx", "image": "nginx:1.25"}
    if env:
        c["env"] = [{"name": "A", "value": "1"}]
    meta = {"name": name, "labels": dict(labels or {"app": name})}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [c]}}}}


def vitjob(name, replicas=2):
    return {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob", "metadata": {"name": name},
            "spec": {"replicas": replicas, "image": "ghcr.io/example/vitjob-worker:test"}}


def entries(obj, manager=None):
    return [e for e in obj["metadata"].get("managedFields") or [] if manager is None or e.get("manager") == manager]


class ApplyTestBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="apply-test-")
        cls.server = ServerProcess(os.path.join(cls.tmp, "state"))
        cls.c = cls.server.client()
        with open(CRD) as f:
            r = cls.c.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", yaml.safe_load(f))
        assert r.status == 201, r

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def get(self, path):
        r = self.c.get(path)
        self.assertEqual(r.status, 200, r)
        return r.body

    def apply(self, path, body, query="?fieldManager=test", raw=False):
        data = body if raw else yaml.safe_dump(body).encode()
        return self.c.patch(path + query, data, ctype=APPLY)


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl not installed")
class KubectlServerSideApplyTest(ApplyTestBase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        home = os.path.join(cls.tmp, "home")
        os.makedirs(home)
        cls.env = dict(os.environ, KUBECONFIG=cls.server.kubeconfig, HOME=home)

    def kubectl(self, args, doc=None):
        stdin = yaml.safe_dump(doc) if isinstance(doc, dict) else doc
        return subprocess.run([KUBECTL] + args, input=stdin, capture_output=True, text=True, env=self.env,
                              timeout=30)

    def ok(self, args, doc=None):
        r = self.kubectl(args, doc)
        self.assertEqual(r.returncode, 0, "kubectl %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
        return r.stdout

    def ssa(self, doc, *flags):
        return self.kubectl(["apply", "--server-side"] + list(flags) + ["-f", "-"], doc)

    def test_apply_server_side_creates_with_an_apply_entry_and_an_unchanged_reapply_writes_nothing(self):
        out = self.ok(["apply", "--server-side", "-f", "-"], deployment("create"))
        self.assertIn("deployment.apps/create serverside-applied", out)
        obj = self.get(DEPLOYS + "/create")
        self.assertEqual(obj["spec"]["replicas"], 2)
        mf = entries(obj)
        self.assertEqual([(e["manager"], e["operation"]) for e in mf], [("kubectl", "Apply")])
        fs = mf[0]["fieldsV1"]
        self.assertEqual(fs["f:metadata"], {"f:labels": {"f:app": {}}})
        self.assertIn('k:{"name":"A"}', fs["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"nginx"}']
                      ["f:env"])
        self.ok(["apply", "--server-side", "-f", "-"], deployment("create"))
        again = self.get(DEPLOYS + "/create")
        self.assertEqual(again["metadata"]["resourceVersion"], obj["metadata"]["resourceVersion"])
        self.assertEqual(again["metadata"]["managedFields"], obj["metadata"]["managedFields"])

    def test_field_changed_by_kubectl_patch_conflicts_on_reapply_and_force_conflicts_takes_it(self):
        self.ok(["apply", "--server-side", "-f", "-"], deployment("conflict"))
        self.ok(["patch", "deployment", "conflict", "--type=merge", "-p", '{"spec":{"replicas":5}}'])
        r = self.ssa(deployment("conflict"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('error: Apply failed with 1 conflict: conflict with "kubectl-patch" using apps/v1: '
                      '.spec.replicas', r.stderr)
        self.assertIn("--force-conflicts", r.stderr)
        self.assertEqual(self.get(DEPLOYS + "/conflict")["spec"]["replicas"], 5)
        self.assertEqual(self.ssa(deployment("conflict"), "--force-conflicts").returncode, 0)
        obj = self.get(DEPLOYS + "/conflict")
        self.assertEqual(obj["spec"]["replicas"], 2)
        self.assertEqual(entries(obj, "kubectl-patch"), [], "the patch's only field was taken over")
        self.assertIn("f:replicas", entries(obj, "kubectl")[0]["fieldsV1"]["f:spec"])

    def test_field_changed_by_kubectl_edit_conflicts_with_kubectl_edit(self):
        self.ok(["apply", "--server-side", "-f", "-"], deployment("edited"))
        editor = os.path.join(self.tmp, "editor.sh")
        with open(editor, "w") as f:
            f.write("#!/bin/sh\nsed -i 's/image: nginx:1.25/image: nginx:1.26/' \"$1\"\n")
        os.chmod(editor, 0o755)
        env = dict(self.env, KUBE_EDITOR=editor)
        r = subprocess.run([KUBECTL, "edit", "deployment", "edited"], capture_output=True, text=True, env=env,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.ssa(deployment("edited"))
        self.assertIn('Apply failed with 1 conflict: conflict with "kubectl-edit" using apps/v1: '
                      '.spec.template.spec.containers[name="nginx"].image', r.stderr)

    def test_field_omitted_in_the_next_apply_is_removed_unless_another_manager_owns_it(self):
        self.ok(["apply", "--server-side", "-f", "-"], deployment("prune", labels={"app": "prune", "tier": "web",
                                                                                   "team": "ml"}))
        # manager x applies an equal value: no conflict, it co-owns the label
        self.ok(["apply", "--server-side", "--field-manager=x", "-f", "-"],
                {"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": "prune", "labels": {"team": "ml"}}})
        self.ok(["apply", "--server-side", "-f", "-"], deployment("prune", env=False))
        obj = self.get(DEPLOYS + "/prune")
        self.assertEqual(obj["metadata"]["labels"], {"app": "prune", "team": "ml"})
        self.assertNotIn("env", obj["spec"]["template"]["spec"]["containers"][0])
        self.assertEqual(entries(obj, "x")[0]["fieldsV1"], {"f:metadata": {"f:labels": {"f:team": {}}}})

    def test_equal_value_applied_by_another_manager_is_co_owned_not_a_conflict(self):
        self.ok(["apply", "--server-side", "-f", "-"], deployment("coown"))
        self.ok(["apply", "--server-side", "--field-manager=x", "-f", "-"], deployment("coown"))
        obj = self.get(DEPLOYS + "/coown")
        for m in ("kubectl", "x"):
            self.assertIn("f:replicas", entries(obj, m)[0]["fieldsV1"]["f:spec"], m)
        r = self.ssa(deployment("coown", replicas=4), "--field-manager=x")
        self.assertIn('Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas', r.stderr)

    def test_apply_server_side_of_a_vitjob_creates_updates_and_conflicts(self):
        out = self.ok(["apply", "--server-side", "-f", "-"], vitjob("ssa-job"))
        self.assertIn("vitjob.vitjob.dev/ssa-job serverside-applied", out)
        self.ok(["apply", "--server-side", "-f", "-"], vitjob("ssa-job", replicas=3))
        self.assertEqual(self.get(VJ + "/ssa-job")["spec"]["replicas"], 3)
        r = self.ssa(vitjob("ssa-job", replicas=4), "--field-manager=operator")
        self.assertIn('Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas', r.stderr)
        bad = vitjob("ssa-job")
        bad["spec"]["replicas"] = 0
        r = self.ssa(bad)
        self.assertIn("spec.replicas", r.stderr)
        self.assertEqual(self.get(VJ + "/ssa-job")["spec"]["replicas"], 3)


class ServerSideApplyApiTest(ApplyTestBase):
    def test_apply_without_field_manager_is_422_as_a_real_server_words_it(self):
        r = self.apply(NS + "/configmaps/nofm", {"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": "nofm"}}, query="")
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.body["reason"], "Invalid")
        self.assertEqual(r.body["message"], 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                                            'is required for apply patch')
        self.assertEqual(r.body["details"], {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
            {"reason": "FieldValueRequired", "message": "Required value: is required for apply patch",
             "field": "fieldManager"}]})
        self.assertEqual(self.c.get(NS + "/configmaps/nofm").status, 404)

    def test_force_on_a_non_apply_patch_is_422_as_a_real_server_words_it(self):
        self.assertEqual(self.apply(NS + "/configmaps/force", {"apiVersion": "v1", "kind": "ConfigMap",
                                                               "metadata": {"name": "force"}}).status, 201)
        r = self.c.patch(NS + "/configmaps/force?force=true", {"data": {"a": "b"}})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.body["message"], 'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be '
                                            'specified for non-apply patch')
        self.assertEqual(r.body["details"]["causes"], [{"reason": "FieldValueForbidden", "field": "force",
                                                        "message": "Forbidden: may not be specified for non-apply "
                                                                   "patch"}])
        r = self.apply(NS + "/configmaps/force", {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "force"}}, query="?fieldManager=a&force=true")
        self.assertEqual(r.status, 200, r)

    def test_unknown_patch_type_is_415_listing_apply_and_no_strategic_merge_for_custom_objects(self):
        r = self.c.patch(NS + "/configmaps/whatever", {"data": {}}, ctype="application/yaml")
        self.assertEqual(r.status, 415, r)
        self.assertEqual(r.body["reason"], "UnsupportedMediaType")
        self.assertEqual(r.body["message"], "the body of the request was in an unknown format - accepted media "
                                            "types include: application/json-patch+json, application/merge-patch"
                                            "+json, application/strategic-merge-patch+json, application/apply-patch"
                                            "+yaml")
        r = self.c.patch(VJ + "/whatever", {"spec": {}}, ctype="application/strategic-merge-patch+json")
        self.assertEqual(r.status, 415, r)
        self.assertEqual(r.body["message"], "the body of the request was in an unknown format - accepted media "
                                            "types include: application/json-patch+json, application/merge-patch"
                                            "+json, application/apply-patch+yaml")

    def test_yaml_body_creates_with_201_and_json_body_updates_with_200(self):
        raw = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bodies\ndata:\n  when: 2024-01-02\n  on: 'x'\n"
        r = self.apply(NS + "/configmaps/bodies", raw, raw=True)
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.body["data"], {"when": "2024-01-02", "true": "x"}, "YAML 1.1 as the real decoder reads it")
        self.assertEqual([(e["manager"], e["operation"]) for e in entries(r.body)], [("test", "Apply")])
        doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bodies"}, "data": {"k": "v"}}
        r = self.apply(NS + "/configmaps/bodies", json.dumps(doc).encode(), raw=True)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body["data"], {"k": "v"}, "the fields applied before and omitted now are pruned")
        self.assertEqual(entries(r.body)[0]["fieldsV1"], {"f:data": {"f:k": {}}})

    def test_apply_refuses_a_wrong_api_version_managed_fields_and_another_name(self):
        r = self.apply(NS + "/configmaps/wrong", {"apiVersion": "v2", "kind": "ConfigMap",
                                                  "metadata": {"name": "wrong"}})
        self.assertEqual((r.status, r.body["message"]), (400, "Incorrect version specified in apply patch. "
                                                              "Specified patch version: v2, expected: v1"))
        r = self.apply(NS + "/configmaps/wrong", {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "wrong", "managedFields": []}})
        self.assertEqual((r.status, r.body["message"]), (400, "metadata.managedFields must be nil"))
        r = self.apply(NS + "/configmaps/wrong", {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "other"}})
        self.assertEqual((r.status, r.body["message"]),
                         (400, "the name of the object (other) does not match the name on the URL (wrong)"))

    def test_conflict_is_409_with_the_real_message_and_causes(self):
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c409"}, "data": {"a": "1", "b": "2"}}
        self.assertEqual(self.c.post(NS + "/configmaps?fieldManager=writer", cm).status, 201)
        changed = copy.deepcopy(cm)
        changed["data"] = {"a": "9"}
        r = self.apply(NS + "/configmaps/c409", changed, "?fieldManager=applier")
        self.assertEqual(r.status, 409, r)
        self.assertEqual(r.body["reason"], "Conflict")
        self.assertEqual(r.body["message"], 'Apply failed with 1 conflict: conflict with "writer" using v1: .data.a')
        self.assertEqual(r.body["details"], {"causes": [{"reason": "FieldManagerConflict",
                                                         "message": 'conflict with "writer" using v1',
                                                         "field": ".data.a"}]})
        changed["data"] = {"a": "9", "b": "8"}
        r = self.apply(NS + "/configmaps/c409", changed, "?fieldManager=applier")
        self.assertEqual(r.body["message"], 'Apply failed with 2 conflicts: conflicts with "writer" using v1:\n'
                                            '- .data.a\n- .data.b')
        r = self.apply(NS + "/configmaps/c409", changed, "?fieldManager=applier&force=true")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body["data"], {"a": "9", "b": "8"})
        self.assertEqual([(e["manager"], e["fieldsV1"]) for e in entries(r.body)],
                         [("applier", {"f:data": {"f:a": {}, "f:b": {}}}), ("writer", {"f:data": {".": {}}})],
                         "the forced fields left the writer's set")

    def test_dry_run_apply_answers_the_result_and_stores_nothing(self):
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry"}, "data": {"a": "1"}}
        r = self.apply(NS + "/configmaps/dry", cm, "?fieldManager=m&dryRun=All")
        self.assertEqual(r.status, 201, r)
        self.assertEqual(self.c.get(NS + "/configmaps/dry").status, 404)
        self.assertEqual(self.apply(NS + "/configmaps/dry", cm, "?fieldManager=m").status, 201)
        rv = self.get(NS + "/configmaps/dry")["metadata"]["resourceVersion"]
        cm["data"]["a"] = "2"
        r = self.apply(NS + "/configmaps/dry", cm, "?fieldManager=m&dryRun=All")
        self.assertEqual((r.status, r.body["data"]), (200, {"a": "2"}))
        stored = self.get(NS + "/configmaps/dry")
        self.assertEqual((stored["data"], stored["metadata"]["resourceVersion"]), ({"a": "1"}, rv))

    def test_apply_to_the_status_subresource_owns_status_only_and_never_creates(self):
        r = self.apply(VJ + "/nostatus/status", dict(vitjob("nostatus"), status={"phase": "Running"}))
        self.assertEqual(r.status, 404, r)
        self.assertEqual(self.apply(VJ + "/st", vitjob("st"), "?fieldManager=user").status, 201)
        body = dict(vitjob("st", replicas=7), status={"phase": "Running"})
        r = self.apply(VJ + "/st/status", body, "?fieldManager=operator")
        self.assertEqual(r.status, 200, r)
        self.assertEqual((r.body["spec"]["replicas"], r.body["status"]["phase"]), (2, "Running"))
        op = entries(r.body, "operator")
        self.assertEqual(len(op), 1)
        self.assertEqual((op[0]["operation"], op[0]["subresource"]), ("Apply", "status"))
        self.assertEqual(op[0]["fieldsV1"], {"f:status": {"f:phase": {}}})
        r = self.apply(VJ + "/st", dict(vitjob("st"), status={"phase": "Failed"}), "?fieldManager=user")
        self.assertEqual(r.body["status"]["phase"], "Running", "status is reset on the main resource")


if __name__ == "__main__":
    testlimit.main(300)
