#!/usr/bin/python3
# tests/cluster/test_apiserver_parity.py: what a real Kubernetes 1.26+ API
# server refuses, the test API server refuses too, with the real server's
# words: CRDs that are not structural or whose defaults break their own CEL
# rules, custom objects that break CEL rules (evaluated by a real CEL
# implementation), RBAC for service-account tokens with escalation checks,
# ServiceAccount, DefaultTolerationSeconds and Pod Security admission, name
# and quantity validation of the built-in types, pod node affinity
# validation, pod spec immutability and
# pods/binding, and list items without kind. Each test names the
# behaviour it proves; the messages are those a real server was seen to give
# (see the issue "What a real cluster refuses").
# Run from the repository root: /usr/bin/python3 -m tests.cluster.test_apiserver_parity

import copy
import os
import shutil
import tempfile
import unittest

from tests.cluster import testlimit
from tests.cluster.harness import HERE, ServerProcess, load_yaml_docs

PROJECT_CRD = os.path.join(HERE, "..", "..", "manifests", "00-crd.yaml")
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NS = "/api/v1/namespaces"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def vj_path(ns="default", name=""):
    return "/apis/vitjob.dev/v1alpha1/namespaces/%s/vitjobs%s" % (ns, "/" + name if name else "")


def project_crd():
    return copy.deepcopy(load_yaml_docs(PROJECT_CRD)[0])


def spec_schema(crd):
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def renamed(crd, plural):
    """The CRD under another group, so that variants can sit beside each other."""
    crd["metadata"]["name"] = "%s.parity.dev" % plural
    crd["spec"]["group"] = "parity.dev"
    crd["spec"]["names"] = {"plural": plural, "kind": plural.capitalize()[:-1], "singular": plural[:-1]}
    return crd


def job(name, **spec):
    s = {"replicas": 2, "image": "img:1", "training": {"steps": 10, "globalBatchSize": 128,
                                                       "microBatchSize": 64, "optimizer": {"warmupSteps": 1}}}
    for k, v in spec.items():
        s[k] = v
    return {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob", "metadata": {"name": name}, "spec": s}


def pod(name, sa=None, **spec):
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
         "spec": {"containers": [{"name": "worker", "image": "img:1"}]}}
    if sa:
        p["spec"]["serviceAccountName"] = sa
    p["spec"].update(spec)
    return p


class ParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="apiserver-parity-")
        cls.server = ServerProcess(os.path.join(cls.tmp, "state"))
        cls.c = cls.server.client()
        r = cls.c.post(CRDS, project_crd())
        assert r.status == 201, r

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def refused(self, r, code, message):
        self.assertEqual(r.status, code, r)
        self.assertEqual(r.body["message"], message)

    def namespace(self, name, labels=None):
        r = self.c.post(NS, {"metadata": {"name": name, "labels": labels or {}}})
        self.assertIn(r.status, (201, 409), r)

    def token(self, ns, sa, create=True):
        if create:
            self.c.post("%s/%s/serviceaccounts" % (NS, ns), {"metadata": {"name": sa}})
        r = self.c.post("%s/%s/serviceaccounts/%s/token" % (NS, ns, sa),
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
        self.assertEqual(r.status, 201, r)
        return r.body["status"]["token"]

    # --- CRDs -----------------------------------------------------------------------

    def test_crd_root_metadata_with_a_description_is_refused_as_on_a_real_server(self):
        crd = renamed(project_crd(), "metas")
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"]["description"] = "x"
        self.refused(self.c.post(CRDS, crd), 422,
                     'CustomResourceDefinition.apiextensions.k8s.io "metas.parity.dev" is invalid: '
                     "spec.validation.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything "
                     "other than name and generateName, but metadata is implicitly specified")

    def test_crd_default_is_validated_against_its_own_rules_without_nested_defaults(self):
        crd = renamed(project_crd(), "defaults")
        spec_schema(crd)["properties"]["training"]["x-kubernetes-validations"][0]["rule"] = \
            "(has(self.steps) && self.steps > 0) || (has(self.epochs) && self.epochs > 0)"
        self.refused(self.c.post(CRDS, crd), 422,
                     'CustomResourceDefinition.apiextensions.k8s.io "defaults.parity.dev" is invalid: '
                     "spec.validation.openAPIV3Schema.properties[spec].properties[training].default: Invalid "
                     'value: "object": set training.steps or training.epochs to a positive number')

    def test_crd_field_without_a_type_is_not_structural(self):
        crd = renamed(project_crd(), "untyped")
        del spec_schema(crd)["properties"]["model"]["type"]
        self.refused(self.c.post(CRDS, crd), 422,
                     'CustomResourceDefinition.apiextensions.k8s.io "untyped.parity.dev" is invalid: '
                     "spec.validation.openAPIV3Schema.properties[spec].properties[model].type: Required value: "
                     "must not be empty for specified object fields")

    def test_crd_rule_that_does_not_compile_is_refused(self):
        crd = renamed(project_crd(), "syntaxes")
        spec_schema(crd)["x-kubernetes-validations"][0]["rule"] = "self.replicas >"
        r = self.c.post(CRDS, crd)
        self.assertEqual(r.status, 422, r)
        self.assertIn("spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: "
                      'Invalid value: "self.replicas >": compilation failed: ERROR: <input>:1:', r.body["message"])

    # --- CEL on custom objects ----------------------------------------------------------

    def test_every_cel_rule_of_the_project_crd_refuses_its_case_with_its_message(self):
        cases = [
            ("dims", {"model": {"dim": 66, "heads": 4}},
             'spec.model: Invalid value: "object": model.dim must be divisible by model.heads'),
            ("patches", {"model": {"imageSize": 28, "patchSize": 5}},
             'spec.model: Invalid value: "object": model.imageSize must be divisible by model.patchSize'),
            ("nosteps", {"training": {"steps": 0, "epochs": 0}},
             'spec.training: Invalid value: "object": set training.steps or training.epochs to a positive number'),
            ("warm", {"training": {"steps": 10, "optimizer": {"warmupSteps": 20}}},
             'spec.training: Invalid value: "object": training.optimizer.warmupSteps must not exceed '
             "training.steps"),
            ("minlr", {"training": {"steps": 10, "optimizer": {"warmupSteps": 1, "lr": 0.001, "minLr": 0.01}}},
             'spec.training.optimizer: Invalid value: "object": training.optimizer.minLr must not exceed '
             "training.optimizer.lr"),
            ("batch", {"replicas": 3},
             'spec: Invalid value: "object": training.globalBatchSize must be divisible by '
             "training.microBatchSize x world size (replicas x gpusPerReplica, or replicas when gpusPerReplica "
             "is 0)"),
            ("world", {"replicas": 3, "training": {"steps": 10, "globalBatchSize": 128,
                                                   "optimizer": {"warmupSteps": 1}}},
             'spec: Invalid value: "object": training.globalBatchSize must be divisible by the world size '
             "(replicas x gpusPerReplica, or replicas when gpusPerReplica is 0): every rank takes the same "
             "share"),
            ("scale", {"data": {"scale": [0.9, 0.5]}},
             'spec.data: Invalid value: "object": data.scale\'s minimum must not exceed its maximum'),
            ("ratio", {"data": {"ratio": [2, 0.5]}},
             'spec.data: Invalid value: "object": data.ratio\'s minimum must not exceed its maximum'),
            ("folder", {"data": {"format": "imagefolder", "uri": "s3://b/train"}},
             'spec.data: Invalid value: "object": imagefolder reads a local folder or mounted volume; '
             "write webdataset shards with vitjob-worker shards for S3"),
        ]
        for name, spec, message in cases:
            with self.subTest(name=name):
                self.refused(self.c.post(vj_path(), job(name, **spec)), 422,
                             'ViTJob.vitjob.dev "%s" is invalid: %s' % (name, message))

    def test_a_rule_that_divides_by_zero_reports_it_and_the_project_crd_guards_its_divisions(self):
        r = self.c.post(vj_path(), job("zero", replicas=0))
        self.refused(r, 422, 'ViTJob.vitjob.dev "zero" is invalid: spec.replicas: Invalid value: 0: '
                     "spec.replicas in body should be greater than or equal to 1")
        crd = renamed(project_crd(), "unguardeds")
        batch_rule = next(v for v in spec_schema(crd)["x-kubernetes-validations"]
                          if v["message"].startswith("training.globalBatchSize must be divisible"))
        batch_rule["rule"] = \
            "self.training.globalBatchSize % (self.training.microBatchSize * self.replicas) == 0"
        self.assertEqual(self.c.post(CRDS, crd).status, 201)
        obj = job("zero", replicas=0)
        obj["apiVersion"], obj["kind"] = "parity.dev/v1alpha1", "Unguarded"
        r = self.c.post("/apis/parity.dev/v1alpha1/namespaces/default/unguardeds", obj)
        self.assertEqual(r.status, 422, r)
        # the rule's message stands for the rule (ruleErrorString)
        self.assertIn('spec: Invalid value: "object": modulus by zero evaluating rule: '
                      "training.globalBatchSize must be divisible by training.microBatchSize x world size",
                      r.body["message"])
        self.assertIn("spec.replicas in body should be greater than or equal to 1", r.body["message"])

    def test_cel_rules_do_not_run_on_an_object_with_type_errors(self):
        r = self.c.post(vj_path(), job("typed", replicas="two"))
        self.refused(r, 422, 'ViTJob.vitjob.dev "typed" is invalid: [spec.replicas: Invalid value: "string": '
                     'spec.replicas in body must be of type integer: "string", <nil>: Invalid value: "null": some '
                     "validation rules were not checked because the object was invalid; correct the existing "
                     "errors to complete validation]")

    def test_a_valid_object_passes_every_rule_and_status_updates_run_them_too(self):
        self.assertEqual(self.c.post(vj_path(), job("fine")).status, 201)
        r = self.c.patch(vj_path(name="fine") + "/status", {"status": {"progress": {"step": 1}}})
        self.assertEqual(r.status, 200, r)

    # --- lists --------------------------------------------------------------------------

    def test_list_items_of_built_in_types_carry_no_kind_but_custom_ones_and_watch_events_do(self):
        self.c.post(NS + "/default/configmaps", {"metadata": {"name": "listed"}, "data": {}})
        items = self.c.get(NS + "/default/configmaps").body["items"]
        self.assertTrue(items)
        self.assertFalse([o for o in items if "kind" in o or "apiVersion" in o])
        self.c.post(vj_path(), job("listed"))
        self.assertEqual({o["kind"] for o in self.c.get(vj_path()).body["items"]}, {"ViTJob"})
        w = self.c.watch(NS + "/default/configmaps?watch=true&fieldSelector=metadata.name%3Dlisted")
        ev = w.next()
        w.close()
        self.assertEqual((ev["object"]["kind"], ev["object"]["apiVersion"]), ("ConfigMap", "v1"))

    # --- service accounts, tokens, RBAC -----------------------------------------------------

    def test_service_account_token_is_subject_to_rbac_with_the_real_wording(self):
        self.namespace("rbac1")
        t = self.token("rbac1", "robot")
        robot = self.server.client(token=t)
        self.refused(robot.get(NS + "/rbac1/pods"), 403,
                     'pods is forbidden: User "system:serviceaccount:rbac1:robot" cannot list resource "pods" '
                     'in API group "" in the namespace "rbac1"')
        self.refused(robot.get(NS + "/rbac1/pods/p"), 403,
                     'pods "p" is forbidden: User "system:serviceaccount:rbac1:robot" cannot get resource "pods" '
                     'in API group "" in the namespace "rbac1"')
        self.refused(robot.get("/api/v1/nodes"), 403,
                     'nodes is forbidden: User "system:serviceaccount:rbac1:robot" cannot list resource "nodes" '
                     'in API group "" at the cluster scope')
        self.assertEqual(robot.get("/api/v1").status, 200, "discovery is open to authenticated users")
        # a Role on one named object's subresource, bound to the robot
        self.c.post(vj_path("rbac1"), job("mine"))
        self.c.post(vj_path("rbac1"), job("theirs"))
        self.assertEqual(self.c.post(RBAC + "/namespaces/rbac1/roles", {
            "metadata": {"name": "status-writer"},
            "rules": [{"apiGroups": ["vitjob.dev"], "resources": ["vitjobs/status"], "resourceNames": ["mine"],
                       "verbs": ["get", "patch"]}]}).status, 201)
        self.assertEqual(self.c.post(RBAC + "/namespaces/rbac1/rolebindings", {
            "metadata": {"name": "status-writer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "status-writer"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "rbac1"}]}).status, 201)
        self.assertEqual(robot.patch(vj_path("rbac1", "mine") + "/status", {"status": {"phase": "Running"}}).status,
                         200)
        self.refused(robot.patch(vj_path("rbac1", "theirs") + "/status", {"status": {"phase": "Running"}}), 403,
                     'vitjobs.vitjob.dev "theirs" is forbidden: User "system:serviceaccount:rbac1:robot" cannot '
                     'patch resource "vitjobs/status" in API group "vitjob.dev" in the namespace "rbac1"')
        self.assertEqual(robot.patch(vj_path("rbac1", "mine"), {"spec": {"suspend": True}}).status, 403)

    def test_a_bound_token_stops_working_when_its_service_account_is_deleted(self):
        self.namespace("rbac2")
        t = self.token("rbac2", "shortlived")
        robot = self.server.client(token=t)
        self.assertEqual(robot.get("/api/v1").status, 200)
        self.c.delete(NS + "/rbac2/serviceaccounts/shortlived")
        self.assertEqual(robot.get("/api/v1").status, 401)
        self.assertEqual(self.server.client(token=t[:-2] + "xx").get("/api/v1").status, 401)

    def test_granting_permissions_not_held_is_refused_unless_escalate_or_bind_allows_it(self):
        self.namespace("rbac3")
        t = self.token("rbac3", "granter")
        granter = self.server.client(token=t)
        self.c.post(RBAC + "/namespaces/rbac3/roles", {"metadata": {"name": "role-admin"}, "rules": [
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
             "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
        self.c.post(RBAC + "/namespaces/rbac3/rolebindings", {
            "metadata": {"name": "role-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "role-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "granter", "namespace": "rbac3"}]})
        ok = granter.post(RBAC + "/namespaces/rbac3/roles", {"metadata": {"name": "pod-reader"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
        self.assertEqual(ok.status, 201, "granting what you hold is allowed")
        self.refused(granter.post(RBAC + "/namespaces/rbac3/roles", {"metadata": {"name": "secret-reader"},
                                                                     "rules": [{"apiGroups": [""],
                                                                                "resources": ["secrets"],
                                                                                "verbs": ["get", "list"]}]}),
                     403, 'roles.rbac.authorization.k8s.io "secret-reader" is forbidden: user '
                     '"system:serviceaccount:rbac3:granter" (groups=["system:serviceaccounts" '
                     '"system:serviceaccounts:rbac3" "system:authenticated"]) is attempting to grant RBAC '
                     "permissions not currently held:\n"
                     '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}')
        self.c.post(RBAC + "/namespaces/rbac3/roles", {"metadata": {"name": "secret-reader"}, "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]})
        bind = {"metadata": {"name": "read-secrets"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secret-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "granter", "namespace": "rbac3"}]}
        self.assertEqual(granter.post(RBAC + "/namespaces/rbac3/rolebindings", bind).status, 403)
        self.c.post(RBAC + "/namespaces/rbac3/roles", {"metadata": {"name": "binder"}, "rules": [
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "resourceNames": ["secret-reader"],
             "verbs": ["bind"]}]})
        self.c.post(RBAC + "/namespaces/rbac3/rolebindings", {
            "metadata": {"name": "binder"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binder"},
            "subjects": [{"kind": "ServiceAccount", "name": "granter", "namespace": "rbac3"}]})
        self.assertEqual(granter.post(RBAC + "/namespaces/rbac3/rolebindings", bind).status, 201,
                         "the bind verb allows binding a role one does not hold")

    def test_a_pod_whose_service_account_does_not_exist_is_refused_and_others_get_the_token_volume(self):
        self.namespace("team1")
        self.refused(self.c.post(NS + "/team1/pods", pod("w0", sa="vitjob-worker")), 403,
                     'pods "w0" is forbidden: error looking up service account team1/vitjob-worker: '
                     'serviceaccount "vitjob-worker" not found')
        got = self.c.post(NS + "/team1/pods", pod("w1")).body
        self.assertEqual(got["spec"]["serviceAccountName"], "default", "every namespace has its default")
        vols = [v for v in got["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
        self.assertEqual(len(vols), 1)
        self.assertEqual(got["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
                         "/var/run/secrets/kubernetes.io/serviceaccount")
        got = self.c.post(NS + "/team1/pods", pod("w2", automountServiceAccountToken=False)).body
        self.assertNotIn("volumes", got["spec"])

    # --- Pod Security -------------------------------------------------------------------

    def test_restricted_namespace_refuses_a_default_pod_with_the_real_message(self):
        self.namespace("strict", {"pod-security.kubernetes.io/enforce": "restricted"})
        self.refused(self.c.post(NS + "/strict/pods", pod("x")), 403,
                     'pods "x" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation '
                     '!= false (container "worker" must set securityContext.allowPrivilegeEscalation=false), '
                     'unrestricted capabilities (container "worker" must set securityContext.capabilities.drop='
                     '["ALL"]), runAsNonRoot != true (pod or container "worker" must set securityContext.'
                     'runAsNonRoot=true), seccompProfile (pod or container "worker" must set securityContext.'
                     'seccompProfile.type to "RuntimeDefault" or "Localhost")')
        ok = pod("y", securityContext={"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}})
        ok["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": False,
                                                          "capabilities": {"drop": ["ALL"]}}
        self.assertEqual(self.c.post(NS + "/strict/pods", ok).status, 201)

    def test_baseline_namespace_refuses_privileged_and_host_path_and_warn_only_warns(self):
        self.namespace("base", {"pod-security.kubernetes.io/enforce": "baseline",
                                "pod-security.kubernetes.io/warn": "restricted"})
        bad = pod("x", volumes=[{"name": "data", "hostPath": {"path": "/data"}}])
        bad["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        self.refused(self.c.post(NS + "/base/pods", bad), 403,
                     'pods "x" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume '
                     '"data"), privileged (container "worker" must not set securityContext.privileged=true)')
        r = self.c.post(NS + "/base/pods", pod("z"))
        self.assertEqual(r.status, 201)
        self.assertIn('would violate PodSecurity \\"restricted:latest\\": allowPrivilegeEscalation != false',
                      r.headers.get("Warning", ""))

    def test_an_invalid_pod_security_label_is_refused(self):
        r = self.c.post(NS, {"metadata": {"name": "typo", "labels": {"pod-security.kubernetes.io/enforce": "strict"}}})
        self.refused(r, 422, 'Namespace "typo" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: '
                     'Invalid value: "strict": must be one of privileged, baseline, restricted')

    # --- names and values --------------------------------------------------------------

    def test_service_names_must_be_dns_1035_labels(self):
        for name in ("1job", "my.job"):
            r = self.c.post(NS + "/default/services", {"metadata": {"name": name}, "spec": {"clusterIP": "None"}})
            self.refused(r, 422, 'Service "%s" is invalid: metadata.name: Invalid value: "%s": a DNS-1035 label '
                         "must consist of lower case alphanumeric characters or '-', start with an alphabetic "
                         "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex "
                         "used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')" % (name, name))

    def test_a_deployments_template_labels_are_validated_and_must_match_its_selector(self):
        def dep(labels, selector):
            return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                    "spec": {"selector": {"matchLabels": selector},
                             "template": {"metadata": {"labels": labels},
                                          "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
        r = self.c.post("/apis/apps/v1/namespaces/default/deployments",
                        dep({"app": "x", "team": "no spaces"}, {"app": "x"}))
        self.refused(r, 422, 'Deployment.apps "d" is invalid: spec.template.labels: Invalid value: "no spaces": '
                     "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
                     "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                     "'my_value',  or '12345', regex used for validation is "
                     "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
        r = self.c.post("/apis/apps/v1/namespaces/default/deployments", dep({"app": "y"}, {"app": "x"}))
        self.refused(r, 422, 'Deployment.apps "d" is invalid: spec.template.metadata.labels: Invalid value: '
                     'map[string]string{"app":"y"}: `selector` does not match template `labels`')

    def test_pod_hostname_must_be_a_dns_1123_label(self):
        r = self.c.post(NS + "/default/pods", pod("h", hostname="my.job-worker-0"))
        self.refused(r, 422, 'Pod "h" is invalid: spec.hostname: Invalid value: "my.job-worker-0": must not '
                     "contain dots")
        r = self.c.post(NS + "/default/pods", pod("h", hostname="Job-worker-0"))
        self.assertIn('spec.hostname: Invalid value: "Job-worker-0": a lowercase RFC 1123 label must consist',
                      r.body["message"])

    def test_a_quantity_that_is_not_one_is_a_400_and_requests_above_limits_a_422(self):
        bad = pod("q")
        bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
        self.refused(self.c.post(NS + "/default/pods", bad), 400,
                     'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular '
                     "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
        bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
        r = self.c.post(NS + "/default/pods", bad)
        self.assertEqual(r.status, 422, r)
        self.refused(r, 422, 'Pod "q" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must '
                     "be less than or equal to cpu limit of 1")


    # --- node affinity -------------------------------------------------------------------

    REQ = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    PREF = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"

    def affinity(self, name, required=None, preferred=None):
        """POST a pod with this node affinity: required a list of terms (or the
        selector itself when a dict), preferred a list of weighted terms."""
        na = {}
        if required is not None:
            na["requiredDuringSchedulingIgnoredDuringExecution"] = (
                required if isinstance(required, dict) else {"nodeSelectorTerms": required})
        if preferred is not None:
            na["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
        return self.c.post(NS + "/default/pods", pod(name, affinity={"nodeAffinity": na}))

    def test_node_affinity_with_every_valid_operator_is_accepted(self):
        r = self.affinity("aff-ok", required=[
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                                  {"key": "example.com/gpu", "operator": "Exists"},
                                  {"key": "spot", "operator": "DoesNotExist"},
                                  {"key": "cores", "operator": "Gt", "values": ["4"]}],
             "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]},
                             {"key": "metadata.name", "operator": "NotIn", "values": ["node-b"]}]}],
            preferred=[{"weight": 1, "preference": {}},
                       {"weight": 100, "preference": {"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": ["node-c"]}]}}])
        self.assertEqual(r.status, 201, r)

    def test_match_fields_in_or_not_in_takes_exactly_one_node_name(self):
        r = self.affinity("aff-f1", required=[{"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["node-a", "node-b"]}]}])
        self.refused(r, 422, 'Pod "aff-f1" is invalid: %s[0].matchFields[0].values: Required value: must be only '
                     "one value when `operator` is 'In' or 'NotIn' for node field selector" % self.REQ)
        r = self.affinity("aff-f1", required=[{"matchFields": [{"key": "metadata.name", "operator": "In"}]}])
        self.refused(r, 422, 'Pod "aff-f1" is invalid: %s[0].matchFields[0].values: Required value: must be only '
                     "one value when `operator` is 'In' or 'NotIn' for node field selector" % self.REQ)

    def test_match_fields_operator_must_be_in_or_not_in(self):
        r = self.affinity("aff-f2", required=[{"matchFields": [
            {"key": "metadata.name", "operator": "Exists", "values": ["node-a"]}]}])
        self.refused(r, 422, 'Pod "aff-f2" is invalid: %s[0].matchFields[0].operator: Invalid value: "Exists": not '
                     "a valid selector operator" % self.REQ)

    def test_match_fields_key_must_be_metadata_name(self):
        r = self.affinity("aff-f3", required=[{"matchFields": [
            {"key": "metadata.namespace", "operator": "In", "values": ["default"]}]}])
        self.refused(r, 422, 'Pod "aff-f3" is invalid: %s[0].matchFields[0].key: Invalid value: '
                     '"metadata.namespace": not a valid field selector key' % self.REQ)

    def test_match_fields_value_must_be_a_node_name_and_errors_come_in_a_list(self):
        r = self.affinity("aff-f4", required=[{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["Node_A"]}]},
            {"matchFields": [{"key": "spec.nodeName", "operator": "Gt"}]}])
        self.refused(r, 422, 'Pod "aff-f4" is invalid: [%s[0].matchFields[0].values[0]: Invalid value: "Node_A": '
                     "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                     "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                     "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), "
                     '%s[1].matchFields[0].operator: Invalid value: "Gt": not a valid selector operator, '
                     '%s[1].matchFields[0].key: Invalid value: "spec.nodeName": not a valid field selector key]'
                     % (self.REQ, self.REQ, self.REQ))

    def test_match_expressions_in_and_not_in_need_a_value(self):
        r = self.affinity("aff-e1", required=[{"matchExpressions": [{"key": "zone", "operator": "NotIn",
                                                                     "values": []}]}])
        self.refused(r, 422, 'Pod "aff-e1" is invalid: %s[0].matchExpressions[0].values: Required value: must be '
                     "specified when `operator` is 'In' or 'NotIn'" % self.REQ)

    def test_match_expressions_exists_and_does_not_exist_forbid_values(self):
        r = self.affinity("aff-e2", required=[{"matchExpressions": [{"key": "zone", "operator": "DoesNotExist",
                                                                     "values": ["a"]}]}])
        self.refused(r, 422, 'Pod "aff-e2" is invalid: %s[0].matchExpressions[0].values: Forbidden: may not be '
                     "specified when `operator` is 'Exists' or 'DoesNotExist'" % self.REQ)

    def test_match_expressions_gt_and_lt_take_exactly_one_value(self):
        r = self.affinity("aff-e3", required=[{"matchExpressions": [{"key": "cores", "operator": "Lt",
                                                                     "values": ["4", "8"]}]}])
        self.refused(r, 422, 'Pod "aff-e3" is invalid: %s[0].matchExpressions[0].values: Required value: must be '
                     "specified single value when `operator` is 'Lt' or 'Gt'" % self.REQ)

    def test_match_expressions_operator_must_be_a_known_one(self):
        # the real server answers Invalid (not Unsupported) with no list of operators
        r = self.affinity("aff-e4", required=[{"matchExpressions": [{"key": "zone", "operator": "Equals",
                                                                     "values": ["a"]}]}])
        self.refused(r, 422, 'Pod "aff-e4" is invalid: %s[0].matchExpressions[0].operator: Invalid value: "Equals": '
                     "not a valid selector operator" % self.REQ)

    def test_match_expressions_key_must_be_a_label_name(self):
        r = self.affinity("aff-e5", required=[{"matchExpressions": [{"key": "no spaces", "operator": "Exists"}]}])
        self.refused(r, 422, 'Pod "aff-e5" is invalid: %s[0].matchExpressions[0].key: Invalid value: "no spaces": '
                     "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                     "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                     "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')" % self.REQ)

    def test_required_node_affinity_needs_a_node_selector_term(self):
        for required in ([], {}):
            r = self.affinity("aff-r1", required=required)
            self.refused(r, 422, 'Pod "aff-r1" is invalid: %s: Required value: must have at least one node selector '
                         "term" % self.REQ)

    def test_preferred_node_affinity_weight_is_1_to_100(self):
        for w in (0, 101):
            r = self.affinity("aff-p1", preferred=[{"weight": w, "preference": {}}])
            self.refused(r, 422, 'Pod "aff-p1" is invalid: %s[0].weight: Invalid value: %d: must be in the range '
                         "1-100" % (self.PREF, w))

    def test_preferred_node_affinity_preference_is_validated_as_a_term(self):
        r = self.affinity("aff-p2", preferred=[{"weight": 5, "preference": {"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["node-a", "node-b"]}]}}])
        self.refused(r, 422, 'Pod "aff-p2" is invalid: %s[0].preference.matchFields[0].values: Required value: must '
                     "be only one value when `operator` is 'In' or 'NotIn' for node field selector" % self.PREF)
        r = self.affinity("aff-p2", preferred=[{"weight": 5, "preference": {"matchExpressions": [
            {"key": "zone", "operator": "In"}]}}])
        self.refused(r, 422, 'Pod "aff-p2" is invalid: %s[0].preference.matchExpressions[0].values: Required value: '
                     "must be specified when `operator` is 'In' or 'NotIn'" % self.PREF)

    # --- pods/binding and pod spec immutability ------------------------------------------

    def binding(self, name, node, kind="Node"):
        return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": kind, "name": node}}

    def test_binding_sets_node_name_once_and_answers_a_success_status(self):
        self.assertEqual(self.c.post(NS + "/default/pods", pod("bind1")).status, 201)
        r = self.c.post(NS + "/default/pods/bind1/binding", self.binding("bind1", "node-a"))
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.body, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                  "code": 201})
        p = self.c.get(NS + "/default/pods/bind1").body
        self.assertEqual(p["spec"]["nodeName"], "node-a")
        self.assertIn("PodScheduled", [c["type"] for c in p["status"]["conditions"] if c["status"] == "True"])
        r = self.c.post(NS + "/default/pods/bind1/binding", self.binding("bind1", "node-b"))
        self.refused(r, 409, 'Operation cannot be fulfilled on pods/binding "bind1": pod bind1 is already '
                     'assigned to node "node-a"')
        self.assertEqual(r.body["details"], {"name": "bind1", "kind": "pods/binding"})

    def test_binding_a_pod_being_deleted_or_missing_is_refused(self):
        p = pod("bind2")
        p["metadata"]["finalizers"] = ["parity.dev/hold"]
        self.assertEqual(self.c.post(NS + "/default/pods", p).status, 201)
        self.assertEqual(self.c.delete(NS + "/default/pods/bind2").status, 200)
        self.refused(self.c.post(NS + "/default/pods/bind2/binding", self.binding("bind2", "node-a")), 409,
                     'Operation cannot be fulfilled on pods/binding "bind2": pod bind2 is being deleted, cannot be '
                     "assigned to a host")
        self.c.patch(NS + "/default/pods/bind2", {"metadata": {"finalizers": None}})
        self.refused(self.c.post(NS + "/default/pods/nosuch/binding", self.binding("nosuch", "node-a")), 404,
                     'pods "nosuch" not found')

    def test_binding_to_something_other_than_a_node_or_under_another_name_is_refused(self):
        self.assertEqual(self.c.post(NS + "/default/pods", pod("bind3")).status, 201)
        r = self.c.post(NS + "/default/pods/bind3/binding", self.binding("bind3", "x", kind="Pod"))
        self.refused(r, 500, 'target.kind: Unsupported value: "Pod": supported values: "Node", "<empty>"')
        self.refused(self.c.post(NS + "/default/pods/bind3/binding", self.binding("other", "node-a")), 400,
                     "name in URL does not match name in Binding object")
        self.assertNotIn("nodeName", self.c.get(NS + "/default/pods/bind3").body["spec"])

    def test_binding_needs_create_on_pods_binding_for_a_service_account(self):
        self.namespace("bind4")
        robot = self.server.client(token=self.token("bind4", "scheduler"))
        self.assertEqual(self.c.post(NS + "/bind4/pods", pod("p")).status, 201)
        self.refused(robot.post(NS + "/bind4/pods/p/binding", self.binding("p", "node-a")), 403,
                     'pods "p" is forbidden: User "system:serviceaccount:bind4:scheduler" cannot create resource '
                     '"pods/binding" in API group "" in the namespace "bind4"')
        self.assertEqual(self.c.post(RBAC + "/namespaces/bind4/roles", {
            "metadata": {"name": "binder"},
            "rules": [{"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}]}).status, 201)
        self.assertEqual(self.c.post(RBAC + "/namespaces/bind4/rolebindings", {
            "metadata": {"name": "binder"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binder"},
            "subjects": [{"kind": "ServiceAccount", "name": "scheduler", "namespace": "bind4"}]}).status, 201)
        self.assertEqual(robot.post(NS + "/bind4/pods/p/binding", self.binding("p", "node-a")).status, 201)
        self.assertEqual(robot.patch(NS + "/bind4/pods/p", {"metadata": {"labels": {"a": "b"}}}).status, 403)

    def test_pod_spec_node_name_cannot_be_set_by_patch_or_update(self):
        self.assertEqual(self.c.post(NS + "/default/pods", pod("imm1")).status, 201)
        first = ('Pod "imm1" is invalid: spec: Forbidden: pod updates may not change fields other than '
                 "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
                 "`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                 "(allow it to be set to 1 if it was previously negative)")
        r = self.c.patch(NS + "/default/pods/imm1", {"spec": {"nodeName": "node-a"}})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.body["message"].split("\n")[0], first)
        self.assertIn("nodeName", r.body["message"])
        self.assertEqual(r.body["details"]["causes"][0]["field"], "spec")
        cur = self.c.get(NS + "/default/pods/imm1").body
        cur["spec"]["nodeName"] = "node-a"
        r = self.c.put(NS + "/default/pods/imm1", cur)
        self.assertEqual(r.body["message"].split("\n")[0], first)
        cur = self.c.get(NS + "/default/pods/imm1").body
        cur["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
        self.assertEqual(self.c.put(NS + "/default/pods/imm1", cur).status, 422)
        self.assertNotIn("nodeName", self.c.get(NS + "/default/pods/imm1").body["spec"])

    def test_pod_update_may_change_images_lower_the_deadline_and_add_tolerations_only(self):
        self.assertEqual(self.c.post(NS + "/default/pods", pod("imm2", activeDeadlineSeconds=100)).status, 201)
        r = self.c.patch(NS + "/default/pods/imm2", {"spec": {"activeDeadlineSeconds": 50,
                                                              "containers": [{"name": "worker", "image": "img:2"}]}},
                         ctype="application/strategic-merge-patch+json")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body["spec"]["containers"][0]["image"], "img:2")
        self.refused(self.c.patch(NS + "/default/pods/imm2", {"spec": {"activeDeadlineSeconds": 60}}), 422,
                     'Pod "imm2" is invalid: spec.activeDeadlineSeconds: Invalid value: 60: must be less than or '
                     "equal to previous value")
        self.refused(self.c.patch(NS + "/default/pods/imm2", {"spec": {"activeDeadlineSeconds": None}}), 422,
                     'Pod "imm2" is invalid: spec.activeDeadlineSeconds: Invalid value: "null": must not update '
                     "from a positive integer to nil value")
        tols = r.body["spec"]["tolerations"]
        more = tols + [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
        self.assertEqual(self.c.patch(NS + "/default/pods/imm2", {"spec": {"tolerations": more}}).status, 200)
        # (dropping a default toleration is no change: DefaultTolerationSeconds adds it back on update)
        self.refused(self.c.patch(NS + "/default/pods/imm2", {"spec": {"tolerations": tols}}), 422,
                     'Pod "imm2" is invalid: spec.tolerations: Forbidden: existing toleration can not be modified '
                     "except its tolerationSeconds")
        r = self.c.patch(NS + "/default/pods/imm2", {"spec": {"containers": [{"name": "extra", "image": "x"}]}},
                         ctype="application/strategic-merge-patch+json")
        self.refused(r, 422, 'Pod "imm2" is invalid: spec.containers: Forbidden: pod updates may not add or remove '
                     "containers")

    def test_pod_status_update_keeps_the_spec(self):
        self.assertEqual(self.c.post(NS + "/default/pods", pod("imm3")).status, 201)
        r = self.c.patch(NS + "/default/pods/imm3/status", {"spec": {"nodeName": "node-a"},
                                                            "status": {"phase": "Running"}})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body["status"]["phase"], "Running")
        self.assertNotIn("nodeName", r.body["spec"])

    # --- DefaultTolerationSeconds -----------------------------------------------------------

    def test_default_toleration_seconds_adds_not_ready_and_unreachable_for_300s(self):
        r = self.c.post(NS + "/default/pods", pod("dts1"))
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.body["spec"]["tolerations"], [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300}])

    def test_default_toleration_seconds_leaves_a_pod_that_already_tolerates_the_taint(self):
        own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
               "tolerationSeconds": 5}
        r = self.c.post(NS + "/default/pods", pod("dts2", tolerations=[own]))
        self.assertEqual([t["key"] for t in r.body["spec"]["tolerations"]],
                         ["node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"])
        self.assertEqual(r.body["spec"]["tolerations"][0], own)
        # an empty key with an empty effect tolerates every taint: nothing is added
        everything = [{"operator": "Exists"}]
        r = self.c.post(NS + "/default/pods", pod("dts3", tolerations=everything))
        self.assertEqual(r.body["spec"]["tolerations"], everything)
        # a NoSchedule toleration of the same key does not count
        nosched = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}]
        r = self.c.post(NS + "/default/pods", pod("dts4", tolerations=nosched))
        self.assertEqual(len(r.body["spec"]["tolerations"]), 3)

    # --- nodes and leases --------------------------------------------------------------------

    def test_the_system_namespaces_exist_and_node_names_are_dns_subdomains(self):
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.assertEqual(self.c.get(NS + "/" + ns).status, 200, ns)
        r = self.c.post("/api/v1/nodes", {"metadata": {"name": "Node_A"}})
        self.assertEqual(r.status, 422, r)
        self.assertTrue(r.body["message"].startswith('Node "Node_A" is invalid: metadata.name: Invalid value: '
                                                     '"Node_A": a lowercase RFC 1123 subdomain'), r)
        self.assertEqual(self.c.post("/api/v1/nodes", {"metadata": {"name": "node-a"}}).status, 201)
        r = self.c.patch("/api/v1/nodes/node-a/status", {"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})
        self.assertEqual(r.status, 200, r)
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "node-a"},
                 "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40}}
        self.assertEqual(self.c.post("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                                     lease).status, 201)

if __name__ == "__main__":
    testlimit.main(300)
