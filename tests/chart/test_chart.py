#!/usr/bin/python3
# tests/chart/test_chart.py: the Helm chart charts/vitjob-operator, rendered
# by tools/helmrender (Helm's rendering, since no Helm binary can be had
# here): default and non-default values render what they say; every
# rendering (a list of watched namespaces too: a Role and RoleBinding in each)
# is accepted by `kubectl apply --dry-run=server` against the test
# API server; wrong values are refused by values.schema.json naming the
# field; the chart's CRD is manifests/00-crd.yaml byte for byte; and the
# chart installed on the local cluster runs an operator that runs a job.
# Run from the repository root: /usr/bin/python3 -m tests.chart.test_chart (BUILD: the
# build tree holding bin/helmrender and the programs; default build).

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from tests.cluster import testlimit
from tests.cluster.harness import ServerProcess, wait_for
from tests.cluster.localcluster import LocalCluster, missing_prerequisites

BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
RENDER = os.path.join(BUILD, "bin", "helmrender")
CHART = os.path.join(ROOT, "charts", "vitjob-operator")
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
NS = "vitjob-system"

# A stand-in for the Prometheus Operator's ServiceMonitor CRD (a real cluster
# with monitoring has the full one; the chart only needs the kind to exist).
SERVICEMONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"kind": "ServiceMonitor", "listKind": "ServiceMonitorList",
                       "plural": "servicemonitors", "singular": "servicemonitor"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {
                               "type": "object",
                               "properties": {"spec": {"type": "object",
                                                       "x-kubernetes-preserve-unknown-fields": True}}}}}]}}

NON_DEFAULT = ["--set", "replicaCount=2", "--set", "leaderElection.enabled=true",
               "--set", "watchNamespace=ml", "--set", "resources.limits.cpu=2",
               "--set", "resources.limits.memory=1Gi", "--set", "resources.requests.cpu=250m",
               "--set", "logLevel=debug", "--set", "fullnameOverride=vj-op",
               "--set", "nodeSelector.kubernetes\\.io/os=linux",
               "--set", "tolerations[0].key=dedicated", "--set", "tolerations[0].operator=Exists",
               "--set", "imagePullSecrets[0].name=regcred", "--set", "image.tag=0.1.0-rc1",
               "--set", "metrics.serviceMonitor.enabled=true",
               "--set", "grafana.dashboard.enabled=true"]


def render(*args, check=True):
    r = subprocess.run([RENDER] + list(args) + [CHART], capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise AssertionError("helmrender %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr))
    return r


def docs(text):
    return [d for d in yaml.safe_load_all(text) if d]


def find(ds, kind, name=None):
    got = [d for d in ds if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    if len(got) != 1:
        raise AssertionError("%d %s named %s in the rendering" % (len(got), kind, name))
    return got[0]


@unittest.skipUnless(os.path.exists(RENDER), "tools/helmrender not built (make needs golang-go)")
class ChartRenderingTest(unittest.TestCase):
    def test_the_charts_crd_is_the_manifests_crd_byte_for_byte(self):
        with open(os.path.join(CHART, "crds", "vitjobs.vitjob.dev.yaml"), "rb") as a, \
                open(os.path.join(ROOT, "manifests", "00-crd.yaml"), "rb") as b:
            self.assertEqual(a.read(), b.read(), "charts/vitjob-operator/crds/ drifted from "
                             "manifests/00-crd.yaml: copy it again")

    def test_chart_version_and_app_version_are_the_release_of_api_version_h(self):
        with open(os.path.join(ROOT, "api", "version.h")) as f:
            release = [ln.split('"')[1] for ln in f if ln.startswith("#define VJ_RELEASE")][0]
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        self.assertEqual(chart["appVersion"], release)
        self.assertEqual(chart["version"], release)

    def test_defaults_render_two_operators_with_leader_election_standard_labels_and_appversion_tag(self):
        ds = docs(render("--release", "vitjob", "--namespace", NS).stdout)
        kinds = [d["kind"] for d in ds]
        self.assertEqual(kinds, ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                                 "RoleBinding", "Service", "Deployment"], "Helm's install order")
        dep = find(ds, "Deployment", "vitjob-vitjob-operator")
        self.assertEqual(dep["metadata"]["namespace"], NS)
        labels = dep["metadata"]["labels"]
        for k, v in {"app.kubernetes.io/name": "vitjob-operator", "app.kubernetes.io/instance": "vitjob",
                     "app.kubernetes.io/version": "0.1.0", "app.kubernetes.io/managed-by": "Helm",
                     "helm.sh/chart": "vitjob-operator-0.1.0"}.items():
            self.assertEqual(labels.get(k), v, k)
        spec = dep["spec"]
        self.assertEqual(spec["replicas"], 2, "a leader and a standby")
        self.assertEqual(spec["selector"]["matchLabels"], {"app.kubernetes.io/name": "vitjob-operator",
                                                           "app.kubernetes.io/instance": "vitjob"})
        pod = spec["template"]["spec"]
        c = pod["containers"][0]
        self.assertEqual(c["image"], "ghcr.io/vitjob/vitjob-operator:0.1.0")
        self.assertIn("--leader-elect", c["args"])
        self.assertEqual(c["args"][c["args"].index("--lease-name") + 1], "vitjob-vitjob-operator")
        self.assertNotIn("--namespace", c["args"])
        # a standby takes over within about 10 s: lease 8 s, polled every second
        for flag, want in (("--lease-duration", "8"), ("--renew-deadline", "6"), ("--retry-period", "1")):
            self.assertEqual(c["args"][c["args"].index(flag) + 1], want, flag)
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertTrue(c["securityContext"]["readOnlyRootFilesystem"])
        self.assertEqual(pod["serviceAccountName"], "vitjob-vitjob-operator")
        crb = find(ds, "ClusterRoleBinding")
        self.assertEqual(crb["subjects"], [{"kind": "ServiceAccount", "name": "vitjob-vitjob-operator",
                                            "namespace": NS}])
        lease = find(ds, "Role", "vitjob-vitjob-operator-leader-election")
        self.assertEqual(lease["rules"][0]["resources"], ["leases"])
        svc = find(ds, "Service")
        self.assertEqual(svc["spec"]["selector"], spec["selector"]["matchLabels"])
        self.assertEqual(svc["spec"]["ports"][0]["targetPort"], "metrics")

    def test_two_replicas_a_watch_namespace_and_custom_resources_render_as_asked(self):
        ds = docs(render("--release", "vitjob", "--namespace", NS, *NON_DEFAULT).stdout)
        dep = find(ds, "Deployment", "vj-op")
        pod = dep["spec"]["template"]["spec"]
        c = pod["containers"][0]
        self.assertEqual(dep["spec"]["replicas"], 2)
        self.assertIn("--leader-elect", c["args"])
        self.assertEqual(c["args"][c["args"].index("--namespace") + 1], "ml")
        self.assertEqual(c["args"][c["args"].index("--log-level") + 1], "debug")
        self.assertEqual(c["image"], "ghcr.io/vitjob/vitjob-operator:0.1.0-rc1")
        self.assertEqual(c["resources"], {"limits": {"cpu": 2, "memory": "1Gi"},
                                          "requests": {"cpu": "250m", "memory": "64Mi"}})
        self.assertEqual(pod["nodeSelector"], {"kubernetes.io/os": "linux"})
        self.assertEqual(pod["tolerations"][2:], [{"key": "dedicated", "operator": "Exists"}])
        self.assertEqual(pod["imagePullSecrets"], [{"name": "regcred"}])
        # one namespace: a Role there, no cluster-wide permission
        self.assertFalse([d for d in ds if d["kind"] == "ClusterRole"])
        role = find(ds, "Role", "vj-op")
        self.assertEqual(role["metadata"]["namespace"], "ml")
        rb = find(ds, "RoleBinding", "vj-op")
        self.assertEqual(rb["metadata"]["namespace"], "ml")
        self.assertEqual(rb["subjects"][0], {"kind": "ServiceAccount", "name": "vj-op", "namespace": NS})
        sm = find(ds, "ServiceMonitor")
        self.assertEqual(sm["spec"]["selector"]["matchLabels"], dep["spec"]["selector"]["matchLabels"])
        cm = find(ds, "ConfigMap", "vj-op-dashboard")
        self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1")
        dash = json.loads(cm["data"]["vitjob.json"])
        exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
        for metric in ("vitjob_job_loss", "vitjob_job_step", "vitjob_job_images_per_second",
                       "vitjob_job_eta_seconds", "vitjob_job_world_size", "vitjob_job_replicas"):
            self.assertIn(metric, exprs)

    def test_the_operator_tolerates_a_lost_node_10s_and_spreads_its_replicas_over_nodes(self):
        ds = docs(render("--release", "vitjob", "--namespace", NS).stdout)
        pod = find(ds, "Deployment")["spec"]["template"]["spec"]
        self.assertEqual(pod["tolerations"], [
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 10},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 10}])
        self.assertEqual(pod["topologySpreadConstraints"], [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "vitjob-operator",
                                              "app.kubernetes.io/instance": "vitjob"}}}])
        # the value sets the seconds; null leaves Kubernetes' default; users' own come after
        ds = docs(render("--set", "nodeLostTolerationSeconds=30", "--set", "tolerations[0].key=dedicated",
                         "--set", "tolerations[0].operator=Exists").stdout)
        tol = find(ds, "Deployment")["spec"]["template"]["spec"]["tolerations"]
        self.assertEqual([t.get("tolerationSeconds") for t in tol], [30, 30, None])
        self.assertEqual(tol[2], {"key": "dedicated", "operator": "Exists"})
        ds = docs(render("--set", "nodeLostTolerationSeconds=null", "--set", "spreadOverNodes=false").stdout)
        pod = find(ds, "Deployment")["spec"]["template"]["spec"]
        self.assertNotIn("tolerations", pod)
        self.assertNotIn("topologySpreadConstraints", pod)

    def test_lease_timings_out_of_order_are_refused_as_the_operator_refuses_them(self):
        for args in (["--set", "leaderElection.renewDeadline=8"],
                     ["--set", "leaderElection.retryPeriod=6"],
                     ["--set", "leaderElection.leaseDuration=5"]):
            with self.subTest(args=args):
                r = render(*args, check=False)
                self.assertEqual(r.returncode, 1, r.stdout[:300])
                self.assertIn("leaderElection: need retryPeriod < renewDeadline < leaseDuration", r.stderr)
                self.assertEqual(r.stdout, "")
        # without leader election they do not matter
        render("--set", "replicaCount=1", "--set", "leaderElection.enabled=false",
               "--set", "leaderElection.renewDeadline=8")

    def test_a_list_of_watch_namespaces_renders_a_role_and_binding_in_each_and_one_namespace_flag(self):
        ds = docs(render("--release", "vitjob", "--namespace", NS, "--set", "watchNamespace={ml,team2}",
                         "--set", "replicaCount=1", "--set", "leaderElection.enabled=false").stdout)
        args = find(ds, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertEqual(args.count("--namespace"), 1)
        self.assertEqual(args[args.index("--namespace") + 1], "ml,team2")
        self.assertFalse([d for d in ds if d["kind"] in ("ClusterRole", "ClusterRoleBinding")],
                         "no cluster-wide permission when namespaces are named")
        roles = [d for d in ds if d["kind"] == "Role"]
        bindings = [d for d in ds if d["kind"] == "RoleBinding"]
        self.assertEqual(sorted(r["metadata"]["namespace"] for r in roles), ["ml", "team2"])
        self.assertEqual(sorted(b["metadata"]["namespace"] for b in bindings), ["ml", "team2"])
        for rb in bindings:
            self.assertEqual(rb["metadata"]["name"], "vitjob-vitjob-operator")
            self.assertEqual(rb["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                             "name": "vitjob-vitjob-operator"})
            self.assertEqual(rb["subjects"][0], {"kind": "ServiceAccount",
                                                 "name": "vitjob-vitjob-operator", "namespace": NS})
        self.assertEqual(roles[0]["rules"], roles[1]["rules"])
        # the empty list is every namespace, as the empty string
        ds = docs(render("--set", "watchNamespace={}").stdout)
        self.assertNotIn("--namespace", find(ds, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])
        find(ds, "ClusterRole")
        notes = render("--release", "vitjob", "--namespace", NS, "--set", "watchNamespace={ml,team2}",
                       "--notes").stdout
        self.assertIn('namespaces "ml", "team2" only', notes)

    def test_notes_tell_what_to_do_next_with_the_releases_names(self):
        out = render("--release", "vitjob", "--namespace", NS, "--notes").stdout
        notes = out[out.index("NOTES:"):]
        self.assertIn("rollout status deployment/vitjob-vitjob-operator", notes)
        self.assertIn("kubectl get vitjobs", notes)

    def test_wrong_values_are_refused_by_the_schema_naming_the_field(self):
        cases = [
            (["--set", "replicaCount=two"], "replicaCount: Invalid type. Expected: integer, given: string"),
            (["--set", "image.pullPolicy=Sometimes"], "image.pullPolicy: image.pullPolicy must be one of"),
            (["--set", "logLevel=verbose"], "logLevel: logLevel must be one of"),
            (["--set", "replicas=2"], "Additional property replicas is not allowed"),
            (["--set", "replicaCount=2", "--set", "leaderElection.enabled=false"],
             "leaderElection.enabled: leaderElection.enabled does not match: true"),
            # the default is 2 replicas: turning leader election off alone is refused
            (["--set", "leaderElection.enabled=false"],
             "leaderElection.enabled: leaderElection.enabled does not match: true"),
            (["--set", "nodeLostTolerationSeconds=-1"], "nodeLostTolerationSeconds"),
            (["--set", "watchNamespace=Not_A_Namespace"], "watchNamespace: Does not match pattern"),
            (["--set", "watchNamespace={ml,Not_A_Namespace}"], "watchNamespace.1: Does not match pattern"),
            (["--set", "watchNamespace={ml,ml}"], "watchNamespace: array items[0,1] must be unique"),
            (["--set", "metrics.port=70000"], "metrics.port: Must be less than or equal to 65535"),
            (["--set", "resources.limits.memory=lots"], "resources.limits.memory"),
        ]
        for args, want in cases:
            with self.subTest(args=args):
                r = render(*args, check=False)
                self.assertEqual(r.returncode, 1, r.stdout[:300])
                self.assertIn("values don't meet the specifications of the schema(s)", r.stderr)
                self.assertIn(want, r.stderr)
                self.assertEqual(r.stdout, "", "nothing is rendered from wrong values")

    def test_a_service_account_not_created_must_be_named(self):
        r = render("--set", "serviceAccount.create=false", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("serviceAccount.name is required when serviceAccount.create is false", r.stderr)
        ds = docs(render("--set", "serviceAccount.create=false", "--set", "serviceAccount.name=mine").stdout)
        self.assertFalse([d for d in ds if d["kind"] == "ServiceAccount"])
        self.assertEqual(find(ds, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"], "mine")


@unittest.skipUnless(os.path.exists(RENDER), "tools/helmrender not built (make needs golang-go)")
@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl not installed")
class ChartDryRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="chart-test-")
        cls.server = ServerProcess(os.path.join(cls.tmp, "state"))
        home = os.path.join(cls.tmp, "home")
        os.makedirs(home)
        cls.env = dict(os.environ, KUBECONFIG=cls.server.kubeconfig, HOME=home)
        cls.kubectl_ok("apply", "-f", os.path.join(CHART, "crds"))
        cls.kubectl_ok("apply", "-f", "-", stdin=json.dumps(SERVICEMONITOR_CRD))
        cls.kubectl_ok("wait", "--for", "condition=established", "--timeout=10s",
                       "crd/vitjobs.vitjob.dev", "crd/servicemonitors.monitoring.coreos.com")
        for ns in (NS, "ml", "team2"):
            cls.kubectl_ok("create", "namespace", ns)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def kubectl_ok(cls, *args, stdin=None):
        r = subprocess.run([KUBECTL] + list(args), input=stdin, capture_output=True, text=True,
                           env=cls.env, timeout=60)
        if r.returncode != 0:
            raise AssertionError("kubectl %s failed (%d): %s%s" % (" ".join(args), r.returncode,
                                                                 r.stdout, r.stderr))
        return r.stdout

    def dry_run(self, *values):
        manifests = render("--release", "vitjob", "--namespace", NS, *values).stdout
        # every namespaced object names its namespace (as Helm sends each to its own)
        out = self.kubectl_ok("apply", "--dry-run=server", "-f", "-", stdin=manifests)
        return docs(manifests), out

    def test_the_default_rendering_is_accepted_by_a_server_side_dry_run(self):
        ds, out = self.dry_run()
        for d in ds:
            self.assertIn("%s/%s created (server dry run)" % (
                d["kind"].lower() + ("" if d["apiVersion"] == "v1" else "." + d["apiVersion"].split("/")[0]),
                d["metadata"]["name"]), out)
        # a dry run stores nothing
        self.assertNotIn("vitjob-vitjob-operator", self.kubectl_ok("get", "deployments", "-n", NS))

    def test_the_non_default_rendering_is_accepted_by_a_server_side_dry_run(self):
        ds, out = self.dry_run(*NON_DEFAULT)
        self.assertEqual(out.count("(server dry run)"), len(ds), out)
        self.assertIn("servicemonitor.monitoring.coreos.com/vj-op created (server dry run)", out)
        self.assertIn("role.rbac.authorization.k8s.io/vj-op created (server dry run)", out)

    def test_a_rendering_with_a_list_of_watch_namespaces_is_accepted_by_a_server_side_dry_run(self):
        ds, out = self.dry_run("--set", "watchNamespace={ml,team2}")
        self.assertEqual(out.count("(server dry run)"), len(ds), out)
        self.assertEqual(out.count("role.rbac.authorization.k8s.io/vitjob-vitjob-operator created"), 2, out)
        self.assertEqual(out.count("rolebinding.rbac.authorization.k8s.io/vitjob-vitjob-operator created"), 2,
                         out)

    def test_a_rendering_the_server_would_refuse_is_refused_by_the_dry_run(self):
        # proof that the dry run checks: a label value a real server refuses
        manifests = render("--release", "vitjob", "--namespace", NS,
                           "--set", "podLabels.team=no spaces allowed").stdout
        r = subprocess.run([KUBECTL, "apply", "--dry-run=server", "-f", "-"], input=manifests,
                           capture_output=True, text=True, env=self.env, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('spec.template.labels: Invalid value: "no spaces allowed"', r.stderr)


WHY_NOT = missing_prerequisites()


@unittest.skipUnless(os.path.exists(RENDER), "tools/helmrender not built (make needs golang-go)")
@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class ChartInstallTest(unittest.TestCase):
    """The chart installed on the local cluster: its operator runs a job."""

    def test_the_installed_chart_runs_an_operator_that_trains_a_job_to_success(self):
        work = tempfile.mkdtemp(prefix="vitjob-chart-")
        os.chmod(work, 0o755)
        c = LocalCluster(work, nodes=1, bin_dir=os.path.join(BUILD, "bin")).start()
        try:
            c.kubectl("apply", "-f", os.path.join(CHART, "crds"))
            c.kubectl("create", "namespace", NS)
            manifests = render("--release", "vitjob", "--namespace", NS,
                               "--set", "logLevel=debug", "--set", "resources.requests.cpu=50m").stdout
            c.kubectl("apply", "-n", NS, "-f", "-", input=manifests)

            def ready():
                names = [p["metadata"]["name"] for p in c.get_json("pods", "-n", NS).get("items", [])
                         if any(cd["type"] == "Ready" and cd["status"] == "True"
                                for cd in p.get("status", {}).get("conditions", []))]
                return names if len(names) == 2 else None
            pods = wait_for("the chart's two operator pods to be Ready (leader and standby)", ready, 90, 0.5)
            lease = c.get_json("lease", "vitjob-vitjob-operator", "-n", NS)
            self.assertIn(lease["spec"]["holderIdentity"], pods, "one leads under the release's Lease")
            job = {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob",
                   "metadata": {"name": "chart-smoke", "namespace": "default"},
                   "spec": {"replicas": 1, "gpusPerReplica": 0,
                            "image": "ghcr.io/vitjob/vitjob-worker:0.1.0",
                            "model": {"preset": "fmnist_tiny"},
                            "data": {"format": "fashion-mnist",
                                     "uri": "file:///usr/share/datasets/fashion-mnist"},
                            "training": {"steps": 20, "globalBatchSize": 32, "microBatchSize": 32,
                                         "device": "cpu", "threads": 1, "evalInterval": 0,
                                         "exportPath": "", "optimizer": {"warmupSteps": 2}},
                            "template": {"resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}}}
            c.kubectl("apply", "-f", "-", input=json.dumps(job))
            wait_for("the job to succeed", lambda: (c.get_json("vitjob", "chart-smoke").get("status") or {})
                     .get("phase") == "Succeeded", 180, 1)
            st = c.get_json("vitjob", "chart-smoke")["status"]
            self.assertEqual(st["progress"]["step"], 20)
        finally:
            c.stop()
            if os.environ.get("VITJOB_KEEP_CHART"):
                print("kept", work, file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    testlimit.main(300)
