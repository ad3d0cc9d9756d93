#!/usr/bin/python3
# tests/cluster/test_kubectl.py: the test API server driven only by the real
# kubectl (default flags, KUBECONFIG=state/kubeconfig): apply, get with the
# CRD's printer columns, -o yaml, describe, patches, edit, get -w, cascading
# delete, invalid ViTJobs refused with a message naming the field, and
# `kubectl auth can-i [--list] --as` against the project's RBAC.
# Run: /usr/bin/python3 -m unittest tests/cluster/test_kubectl.py

import os
import shutil
import subprocess
import tempfile
import unittest

import yaml

from tests.cluster import testlimit
from tests.cluster.harness import HERE, ServerProcess, wait_for

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
TESTDATA = os.path.join(HERE, "testdata")
MANIFESTS = os.path.join(HERE, "..", "..", "manifests")
EXAMPLES = os.path.join(HERE, "..", "..", "examples")
NS = "/api/v1/namespaces/default"


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl not installed")
class KubectlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kubectl-test-")
        cls.server = ServerProcess(os.path.join(cls.tmp, "state"))
        cls.c = cls.server.client()
        home = os.path.join(cls.tmp, "home")
        os.makedirs(home)
        cls.env = dict(os.environ, KUBECONFIG=cls.server.kubeconfig, HOME=home)
        cls.env.pop("KUBECTL_EXTERNAL_DIFF", None)
        cls.kubectl_ok(["apply", "-f", os.path.join(TESTDATA, "crd.yaml")])
        cls.kubectl_ok(["wait", "--for", "condition=established", "--timeout=10s",
                        "crd/vitjobs.vitjob.dev"])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def kubectl(cls, args, stdin=None, env=None, timeout=30):
        return subprocess.run([KUBECTL] + args, input=stdin, capture_output=True, text=True,
                              env=env or cls.env, timeout=timeout)

    @classmethod
    def kubectl_ok(cls, args, stdin=None, env=None):
        r = cls.kubectl(args, stdin, env)
        if r.returncode != 0:
            raise AssertionError("kubectl %s failed (%d): %s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r.stdout

    def apply_job(self, name, replicas=2):
        doc = {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob", "metadata": {"name": name},
               "spec": {"replicas": replicas, "image": "ghcr.io/example/vitjob-worker:test"}}
        return self.kubectl_ok(["apply", "-f", "-"], stdin=yaml.safe_dump(doc))

    def owned_pod(self, job, name):
        uid = self.kubectl_ok(["get", "vj", job, "-o", "jsonpath={.metadata.uid}"])
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": {"vitjob.dev/job-name": job},
                            "ownerReferences": [{"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob",
                                                 "name": job, "uid": uid, "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": {"containers": [{"name": "worker", "image": "busybox"}]}}
        r = self.c.post(NS + "/pods", pod)
        self.assertEqual(r.status, 201, r)

    # --- apply ----------------------------------------------------------------------

    def test_apply_crd_rbac_deployment_and_example(self):
        out = self.kubectl_ok(["apply", "-f", os.path.join(TESTDATA, "crd.yaml"),
                               "-f", os.path.join(TESTDATA, "rbac.yaml"),
                               "-f", os.path.join(TESTDATA, "deployment.yaml"),
                               "-f", os.path.join(TESTDATA, "vitjob.yaml")])
        self.assertIn("customresourcedefinition.apiextensions.k8s.io/vitjobs.vitjob.dev unchanged", out)
        self.assertIn("serviceaccount/vitjob-operator created", out)
        self.assertIn("clusterrole.rbac.authorization.k8s.io/vitjob-operator created", out)
        self.assertIn("clusterrolebinding.rbac.authorization.k8s.io/vitjob-operator created", out)
        self.assertIn("deployment.apps/vitjob-operator created", out)
        self.assertIn("vitjob.vitjob.dev/demo created", out)
        again = self.kubectl_ok(["apply", "-f", os.path.join(TESTDATA, "deployment.yaml"),
                                 "-f", os.path.join(TESTDATA, "vitjob.yaml")])
        self.assertIn("deployment.apps/vitjob-operator unchanged", again)
        self.assertIn("vitjob.vitjob.dev/demo unchanged", again)
        # a changed manifest is applied as a patch computed from the last-applied annotation
        with open(os.path.join(TESTDATA, "deployment.yaml")) as f:
            dep = yaml.safe_load(f)
        dep["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "LOG_LEVEL", "value": "debug"}]
        out = self.kubectl_ok(["apply", "-f", "-"], stdin=yaml.safe_dump(dep))
        self.assertIn("deployment.apps/vitjob-operator configured", out)
        got = self.c.get("/apis/apps/v1/namespaces/default/deployments/vitjob-operator").body
        self.assertEqual(got["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"], "debug")
        self.assertIn("kubectl.kubernetes.io/last-applied-configuration", got["metadata"]["annotations"])

    # --- get, describe --------------------------------------------------------------------

    def test_get_vj_shows_printer_columns(self):
        self.apply_job("cols", replicas=3)
        self.c.patch("/apis/vitjob.dev/v1alpha1/namespaces/default/vitjobs/cols/status",
                     {"status": {"phase": "Running", "progress": {"step": 17}}})
        out = self.kubectl_ok(["get", "vj", "cols"]).splitlines()
        self.assertEqual(out[0].split(), ["NAME", "PHASE", "REPLICAS", "STEP", "AGE"])
        self.assertEqual(out[1].split()[:4], ["cols", "Running", "3", "17"])

    def test_get_vj_yaml_shows_object_with_server_fields(self):
        self.apply_job("yaml")
        obj = yaml.safe_load(self.kubectl_ok(["get", "vj", "yaml", "-o", "yaml"]))
        self.assertEqual(obj["kind"], "ViTJob")
        self.assertEqual(obj["spec"]["replicas"], 2)
        self.assertEqual(obj["spec"]["gpusPerReplica"], 0)     # defaulted by the schema
        for k in ("uid", "resourceVersion", "creationTimestamp", "generation"):
            self.assertIn(k, obj["metadata"])

    def test_describe_vj(self):
        self.apply_job("desc")
        uid = self.kubectl_ok(["get", "vj", "desc", "-o", "jsonpath={.metadata.uid}"])
        self.c.post(NS + "/events", {"metadata": {"name": "desc.1"}, "type": "Normal", "reason": "Created",
                                     "message": "created 2 pods", "count": 1,
                                     "involvedObject": {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob",
                                                        "name": "desc", "namespace": "default", "uid": uid},
                                     "source": {"component": "vitjob-operator"}})
        out = self.kubectl_ok(["describe", "vj", "desc"])
        self.assertRegex(out, r"Name:\s+desc")
        self.assertRegex(out, r"Replicas:\s+2")
        self.assertRegex(out, r"Normal\s+Created\s+.*created 2 pods")

    def test_get_pods_shows_pod_columns(self):
        self.c.post(NS + "/pods", {"metadata": {"name": "cols-pod"},
                                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
        out = self.kubectl_ok(["get", "pods", "cols-pod"]).splitlines()
        self.assertEqual(out[0].split(), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"])
        self.assertEqual(out[1].split()[:4], ["cols-pod", "0/1", "Pending", "0"])

    # --- patches and edit -----------------------------------------------------------------

    def test_patch_merge_and_json_on_vj(self):
        self.apply_job("patched")
        self.kubectl_ok(["patch", "vj", "patched", "--type", "merge", "-p", '{"spec":{"replicas":5}}'])
        self.assertEqual(self.kubectl_ok(["get", "vj", "patched", "-o", "jsonpath={.spec.replicas}"]), "5")
        self.kubectl_ok(["patch", "vj", "patched", "--type", "json",
                         "-p", '[{"op":"replace","path":"/spec/replicas","value":6}]'])
        out = self.kubectl_ok(["get", "vj", "patched", "-o", "jsonpath={.spec.replicas} {.metadata.generation}"])
        self.assertEqual(out, "6 3")

    def test_patch_strategic_on_pod(self):
        self.c.post(NS + "/pods", {"metadata": {"name": "smp-pod"}, "spec": {"containers": [
            {"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}]}})
        self.kubectl_ok(["patch", "pod", "smp-pod", "-p",
                         '{"metadata":{"labels":{"x":"y"}},"spec":{"containers":[{"name":"b","image":"alpine"}]}}'])
        out = self.kubectl_ok(["get", "pod", "smp-pod", "-o",
                               "jsonpath={.spec.containers[*].name} {.spec.containers[1].image} {.metadata.labels.x}"])
        self.assertEqual(out, "a b alpine y")

    def test_edit_with_editor_script(self):
        self.apply_job("edited", replicas=2)
        editor = os.path.join(self.tmp, "editor.sh")
        with open(editor, "w") as f:
            f.write("#!/bin/sh\nsed -i 's/replicas: 2/replicas: 7/' \"$1\"\n")
        os.chmod(editor, 0o755)
        out = self.kubectl_ok(["edit", "vj", "edited"], env=dict(self.env, EDITOR=editor))
        self.assertIn("vitjob.vitjob.dev/edited edited", out)
        self.assertEqual(self.kubectl_ok(["get", "vj", "edited", "-o", "jsonpath={.spec.replicas}"]), "7")

    # --- watch --------------------------------------------------------------------------

    def test_get_pods_watch_receives_events(self):
        out_path = os.path.join(self.tmp, "watch.out")
        with open(out_path, "w") as out:
            proc = subprocess.Popen([KUBECTL, "get", "pods", "-w", "-l", "watched=yes"], stdout=out,
                                    stderr=subprocess.STDOUT, env=self.env)

        def wait_output(desc, what):
            """kubectl's output once what(output) holds (failing, naming desc,
            after harness.wait_for's limit)."""
            def shown():
                with open(out_path) as f:
                    text = f.read()
                return text if what(text) else None
            return wait_for("kubectl's watch to show " + desc, shown)
        try:
            # a sentinel pod shows once kubectl has listed (it is in the list, or an
            # event of the watch that starts from the list's resourceVersion): what
            # is created after that is an event kubectl's watch brings
            r = self.c.post(NS + "/pods", {"metadata": {"name": "sentinel-pod", "labels": {"watched": "yes"}},
                                           "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
            self.assertEqual(r.status, 201, r)
            wait_output("sentinel-pod", lambda t: "sentinel-pod" in t)
            self.c.post(NS + "/pods", {"metadata": {"name": "watched-pod", "labels": {"watched": "yes"}},
                                       "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
            self.c.patch(NS + "/pods/watched-pod/status", {"status": {"phase": "Running"}})
            text = wait_output("watched-pod Running", lambda t: any(
                l.startswith("watched-pod") and "Running" in l for l in t.splitlines()))
        finally:
            proc.terminate()
            proc.wait(30)
        rows = [l.split() for l in text.splitlines() if l.startswith("watched-pod")]
        self.assertGreaterEqual(len(rows), 2, text)
        self.assertEqual(rows[0][2], "Pending")
        self.assertEqual(rows[-1][2], "Running")

    # --- delete ---------------------------------------------------------------------------

    def test_delete_vj_cascades_to_owned_pods(self):
        self.apply_job("cascade")
        self.owned_pod("cascade", "cascade-worker-0-r0")
        self.owned_pod("cascade", "cascade-worker-1-r0")
        out = self.kubectl_ok(["delete", "vj", "cascade"])
        self.assertIn('vitjob.vitjob.dev "cascade" deleted', out)
        # the garbage collector deletes the owned pods
        wait_for("the owned pods gone", lambda: not self.kubectl_ok(
            ["get", "pods", "-l", "vitjob.dev/job-name=cascade", "-o", "name"]).strip())
        r = self.kubectl(["get", "vj", "cascade"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('vitjobs.vitjob.dev "cascade" not found', r.stderr)

    # --- invalid objects --------------------------------------------------------------------

    INVALID = [
        ("bad-type", 'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"'),
        ("bad-missing", "spec.image: Required value"),
        ("bad-range", "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"),
        ("bad-enum", 'spec.training.precision: Unsupported value: "fp16": supported values: "fp32", "bf16-mixed"'),
    ]

    def test_invalid_vitjob_refused_with_message_naming_the_field(self):
        with open(os.path.join(TESTDATA, "invalid.yaml")) as f:
            docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(f)}
        for name, message in self.INVALID:
            with self.subTest(name=name):
                text = yaml.safe_dump(docs[name])
                for verb in ("apply", "create"):
                    r = self.kubectl([verb, "-f", "-"], stdin=text)
                    self.assertNotEqual(r.returncode, 0)
                    self.assertIn('The ViTJob "%s" is invalid: %s' % (name, message), r.stderr)
                self.assertEqual(self.c.get("/apis/vitjob.dev/v1alpha1/namespaces/default/vitjobs/" + name).status,
                                 404)

    def test_create_secret_generic_and_other_protobuf_bodies_work_as_on_a_real_cluster(self):
        """kubectl's typed clients send protobuf: the GPU example's own command."""
        self.kubectl_ok(["create", "secret", "generic", "s3-creds", "--from-literal=AWS_ACCESS_KEY_ID=AKIA1",
                         "--from-literal=AWS_SECRET_ACCESS_KEY=s3cr3t"])
        got = self.c.get(NS + "/secrets/s3-creds").body
        self.assertEqual(got["data"], {"AWS_ACCESS_KEY_ID": "QUtJQTE=", "AWS_SECRET_ACCESS_KEY": "czNjcjN0"})
        self.assertEqual(got["type"], "Opaque")
        self.kubectl_ok(["create", "configmap", "settings", "--from-literal=a=1"])
        self.assertEqual(self.c.get(NS + "/configmaps/settings").body["data"], {"a": "1"})
        self.kubectl_ok(["create", "serviceaccount", "robot"])
        self.kubectl_ok(["create", "role", "pod-reader", "--verb=get,list", "--resource=pods"])
        self.kubectl_ok(["create", "rolebinding", "robot-reads", "--role=pod-reader",
                         "--serviceaccount=default:robot"])
        token = self.kubectl_ok(["create", "token", "robot"]).strip()
        self.assertEqual(self.kubectl(["--token", token, "get", "pods"]).returncode, 0)
        r = self.kubectl(["--token", token, "get", "secrets"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('secrets is forbidden: User "system:serviceaccount:default:robot" cannot list resource '
                      '"secrets" in API group "" in the namespace "default"', r.stderr)

    def test_kubectl_with_wrong_token_is_unauthorized(self):
        bad = os.path.join(self.tmp, "bad-kubeconfig")
        with open(self.server.kubeconfig) as f:
            text = f.read()
        with open(bad, "w") as f:
            f.write(text.replace(self.server.token, "wrong-token"))
        r = self.kubectl(["get", "pods"], env=dict(self.env, KUBECONFIG=bad))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("Unauthorized", r.stderr)


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl not installed")
@unittest.skipUnless(os.path.exists(os.path.join(MANIFESTS, "00-crd.yaml")), "manifests/ not written yet")
@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl not installed")
class ProjectManifestsTest(unittest.TestCase):
    """The project's own manifests/ (the real ViTJob CRD, RBAC, the operator
    Deployment and the examples) on a server of their own, through kubectl."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kubectl-manifests-")
        cls.server = ServerProcess(os.path.join(cls.tmp, "state"))
        cls.env = dict(os.environ, KUBECONFIG=cls.server.kubeconfig, HOME=cls.tmp)
        cls.env.pop("KUBECTL_EXTERNAL_DIFF", None)
        r = cls.run_kubectl(["apply", "-f", MANIFESTS])
        assert r.returncode == 0, r.stdout + r.stderr
        cls.applied = r.stdout
        r = cls.run_kubectl(["apply", "-R", "-f", os.path.join(MANIFESTS, "examples")])
        assert r.returncode == 0, r.stdout + r.stderr
        cls.applied_examples = r.stdout

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def run_kubectl(cls, args, stdin=None):
        return subprocess.run([KUBECTL] + args, input=stdin, capture_output=True, text=True,
                              env=cls.env, timeout=30)

    def ok(self, args, stdin=None):
        r = self.run_kubectl(args, stdin)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def test_apply_manifests_creates_crd_rbac_operator_and_examples_and_reapply_is_unchanged(self):
        for line in ("customresourcedefinition.apiextensions.k8s.io/vitjobs.vitjob.dev created",
                     "clusterrole.rbac.authorization.k8s.io/vitjob-operator created",
                     "deployment.apps/vitjob-operator created"):
            self.assertIn(line, self.applied)
        self.assertIn("vitjob.vitjob.dev/fmnist-tiny created", self.applied_examples)
        again = self.ok(["apply", "-f", MANIFESTS])
        self.assertIn("customresourcedefinition.apiextensions.k8s.io/vitjobs.vitjob.dev unchanged", again)

    def test_get_vj_shows_phase_step_readable_loss_img_s_eta_and_stalled_from_status_in_printer_columns(self):
        # as the worker writes them: loss to 4 significant digits, images/s to
        # 1 decimal, the ETA as a kubectl duration beside etaSeconds
        self.ok(["patch", "vj", "fmnist-tiny", "--subresource=status", "--type=merge", "-p",
                 '{"status": {"phase": "Running", "restarts": 1, "progress": '
                 '{"step": 120, "totalSteps": 936, "loss": 0.5123, "imagesPerSecond": 1830.2, '
                 '"etaSeconds": 192, "eta": "3m12s"}}}'])
        out = self.ok(["get", "vj", "fmnist-tiny"])
        header, row = out.splitlines()[0].split(), out.splitlines()[1].split()
        self.assertEqual(header[:9], ["NAME", "PHASE", "STEP", "TOTAL", "LOSS", "IMG/S", "ETA", "STALLED",
                                      "RESTARTS"])
        self.assertEqual(row[:8], ["fmnist-tiny", "Running", "120", "936", "0.5123", "1830.2", "3m12s", "1"])

        def stalled_cell():
            head, line = self.ok(["get", "vj", "fmnist-tiny"]).splitlines()[:2]
            return line[head.index("STALLED"):head.index("RESTARTS")].strip()
        self.assertEqual(stalled_cell(), "", "no ProgressStalled condition: an empty cell")
        # condition ProgressStalled, as the operator writes it, is the STALLED column
        for status in ("True", "False"):
            self.ok(["patch", "vj", "fmnist-tiny", "--subresource=status", "--type=merge", "-p",
                     '{"status": {"conditions": [{"type": "Running", "status": "True"}, '
                     '{"type": "ProgressStalled", "status": "%s", "reason": "NoProgressReport"}]}}' % status])
            self.assertEqual(stalled_cell(), status)
        # short name and the `all` category find it too
        self.assertIn("fmnist-tiny", self.ok(["get", "all"]))

    def test_get_vj_wide_shows_the_epoch_to_2_decimals_and_the_newest_test_accuracy(self):
        # status.progress as report.c writes it: epoch rounded, testAccuracy at testStep
        self.ok(["patch", "vj", "fmnist-tiny", "--subresource=status", "--type=merge", "-p",
                 '{"status": {"progress": {"step": 120, "totalSteps": 936, "epoch": 0.56, '
                 '"testAccuracy": 0.8123, "testStep": 100}}}'])
        head, line = self.ok(["get", "vj", "fmnist-tiny", "-o", "wide"]).splitlines()[:2]
        names = head.split()

        def cell(name):  # columns may be empty: cut at the header's positions
            i = names.index(name)
            end = head.index(names[i + 1]) if i + 1 < len(names) else len(line)
            return line[head.index(name):end].strip()
        self.assertEqual(cell("EPOCH"), "0.56", head + "\n" + line)
        self.assertEqual(cell("TEST-ACC"), "0.8123", head + "\n" + line)

    def test_the_imagenet_example_passes_the_crds_schema_and_rules_and_keeps_its_data_keys(self):
        out = self.ok(["apply", "-f", os.path.join(EXAMPLES, "imagenet-vitb16.yaml")])
        self.assertIn("vitjob.vitjob.dev/imagenet-vitb16 created", out)
        data = yaml.safe_load(self.ok(["get", "vj", "imagenet-vitb16", "-o", "yaml"]))["spec"]["data"]
        self.assertEqual(data["format"], "webdataset")
        self.assertEqual(data["uri"], "s3://imagenet/train-{000000..001023}.tar")
        self.assertEqual(data["mean"], [0.485, 0.456, 0.406])  # not pruned
        self.assertEqual(data["maxPixels"], 89478485)          # the CRD's default

    def test_schema_defaults_fill_the_stored_spec(self):
        spec = yaml.safe_load(self.ok(["get", "vj", "fmnist-tiny", "-o", "yaml"]))["spec"]
        self.assertEqual(spec["training"]["optimizer"]["name"], "adamw")
        self.assertIn("backoffLimit", spec["runPolicy"])

    def test_a_vitjob_as_stored_by_the_server_is_a_valid_worker_config(self):
        """The CRD's defaults and the worker's config table agree: the stored
        object (defaults applied, metadata and status around the spec) runs."""
        worker = os.path.join(os.environ.get("BUILD", os.path.join(HERE, "..", "..", "build")),
                              "bin", "vitjob-worker")
        if not os.path.exists(worker):
            self.skipTest("worker not built: " + worker)
        path = os.path.join(self.tmp, "fmnist-tiny.json")
        with open(path, "w") as f:
            f.write(self.ok(["get", "vj", "fmnist-tiny", "-o", "json"]))
        r = subprocess.run([worker, "train", "--config", path, "--set", "training.steps=2",
                            "--set", "training.optimizer.warmupSteps=1",
                            "--set", "training.exportPath=", "--set", "training.threads=1"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertIn('"event":"summary"', r.stdout)

    def test_auth_can_i_answers_per_the_operator_and_worker_rbac(self):
        """`kubectl auth can-i --as` (impersonation and SelfSubjectAccessReview)
        agrees with manifests/01-rbac.yaml for the operator and with the
        identity the operator gives a job's rank 0 (operator/render.c:
        ServiceAccount, Role and RoleBinding <job>-worker: get and patch of
        that one job's status)."""
        worker = "fmnist-tiny-worker"
        identity = [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": worker, "namespace": "default"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": worker, "namespace": "default"},
             "rules": [{"apiGroups": ["vitjob.dev"], "resources": ["vitjobs/status"],
                        "resourceNames": ["fmnist-tiny"], "verbs": ["get", "patch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": worker, "namespace": "default"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": worker},
             "subjects": [{"kind": "ServiceAccount", "name": worker, "namespace": "default"}]}]
        self.ok(["apply", "-f", "-"], stdin=yaml.safe_dump_all(identity))
        op = "system:serviceaccount:vitjob-system:vitjob-operator"
        wk = "system:serviceaccount:default:" + worker
        cases = [
            (op, ["create", "pods"], "yes"),
            (op, ["delete", "pods"], "yes"),
            (op, ["update", "pods"], "no"),
            (op, ["get", "secrets"], "no"),
            (op, ["create", "roles.rbac.authorization.k8s.io"], "yes"),
            (op, ["patch", "vitjobs.vitjob.dev", "--subresource=status"], "yes"),
            (op, ["create", "vitjobs.vitjob.dev"], "no"),
            (wk, ["create", "pods"], "no"),
            (wk, ["get", "vitjobs.vitjob.dev/fmnist-tiny"], "no"),
            (wk, ["patch", "vitjobs.vitjob.dev/fmnist-tiny", "--subresource=status"], "yes"),
            (wk, ["get", "vitjobs.vitjob.dev/fmnist-tiny", "--subresource=status"], "yes"),
            (wk, ["patch", "vitjobs.vitjob.dev/fashion-mnist", "--subresource=status"], "no"),
        ]
        for user, args, want in cases:
            with self.subTest(user=user, args=args):
                r = self.run_kubectl(["auth", "can-i"] + args + ["-n", "default", "--as", user])
                self.assertEqual(r.stdout.strip(), want, r.stdout + r.stderr)
                self.assertEqual(r.returncode, 0 if want == "yes" else 1, r.stderr)
        # the worker's rules as `--list` shows them
        out = self.ok(["auth", "can-i", "--list", "-n", "default", "--as", wk])
        rows = [line.split() for line in out.splitlines()]
        self.assertIn(["vitjobs.vitjob.dev/status", "[]", "[fmnist-tiny]", "[get", "patch]"], rows)
        self.assertNotIn("pods", out)
        # impersonating needs the impersonate verb: the operator may not
        r = self.run_kubectl(["auth", "can-i", "create", "pods", "--as", wk, "--token",
                              self.ok(["create", "token", "vitjob-operator", "-n", "vitjob-system"]).strip()])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('cannot impersonate resource "serviceaccounts" in API group "" in the namespace "default"',
                      r.stderr)

    def test_invalid_vitjobs_are_refused_naming_the_field(self):
        base = {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob",
                "spec": {"replicas": 1, "image": "ghcr.io/vitjob/vitjob-worker:0.1.0"}}
        cases = [
            ("wrong-type", {"replicas": "two"}, "spec.replicas"),
            ("missing-image", {"image": None}, "spec.image: Required value"),
            ("out-of-range", {"model": {"dim": 0}}, "spec.model.dim"),
            ("bad-enum", {"training": {"precision": "fp16"}}, 'spec.training.precision: Unsupported value: "fp16"'),
            # the CRD's CEL rules, as a real server evaluates them
            ("dims", {"model": {"dim": 66, "heads": 4}},
             'spec.model: Invalid value: "object": model.dim must be divisible by model.heads'),
            ("warmup", {"training": {"steps": 10, "optimizer": {"warmupSteps": 50}}},
             'spec.training: Invalid value: "object": training.optimizer.warmupSteps must not exceed '
             "training.steps"),
            # written batches the world does not divide (unwritten ones follow
            # replicas: api/config_keys.c's DEF_FOLLOWS)
            ("batch", {"replicas": 3, "training": {"globalBatchSize": 128, "microBatchSize": 32}},
             'spec: Invalid value: "object": training.globalBatchSize must be divisible by'),
            ("zero-replicas", {"replicas": 0},
             "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"),
            ("bad-quantity", {"template": {"resources": {"limits": {"memory": "lots"}}}},
             "spec.template.resources.limits.memory"),
            ("old-format", {"data": {"format": "shards"}}, 'spec.data.format: Unsupported value: "shards"'),
            ("four-means", {"data": {"mean": [0.1, 0.2, 0.3, 0.4]}}, "spec.data.mean: Too many"),
            ("no-std", {"data": {"std": [0.5, 0]}}, "spec.data.std[1]"),
            ("scale-reversed", {"data": {"scale": [0.9, 0.5]}},
             "spec.data: Invalid value: \"object\": data.scale's minimum must not exceed its maximum"),
            ("ratio-reversed", {"data": {"ratio": [2, 0.5]}},
             "spec.data: Invalid value: \"object\": data.ratio's minimum must not exceed its maximum"),
            ("folder-on-s3", {"data": {"format": "imagefolder", "uri": "/d", "testUri": "s3://b/val"}},
             "spec.data: Invalid value: \"object\": imagefolder reads a local folder or mounted volume"),
        ]
        for name, change, message in cases:
            with self.subTest(name=name):
                doc = yaml.safe_load(yaml.safe_dump(base))
                doc["metadata"] = {"name": name}
                for k, v in change.items():
                    if v is None:
                        del doc["spec"][k]
                    else:
                        doc["spec"][k] = v
                r = self.run_kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump(doc))
                self.assertNotEqual(r.returncode, 0)
                self.assertIn('The ViTJob "%s" is invalid' % name, r.stderr)
                self.assertIn(message, r.stderr)
                self.assertNotIn("evaluating rule", r.stderr, "a rule of the CRD failed to evaluate")


if __name__ == "__main__":
    testlimit.main(300)
