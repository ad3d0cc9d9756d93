#!/usr/bin/python3
# tests/cluster/test_defaults.py: a default never refuses what the user
# wrote, at the API server: for every CEL rule of the generated CRD
# (manifests/00-crd.yaml, `make schema`) that ties two or more fields
# together, a ViTJob that sets one of them to a valid value of its schema
# (its bounds, just inside an open one; values between; each enum value;
# ordered pairs) and leaves the others unset is accepted by the test API
# server (dry run). The cases come from the CRD, not from a list here: a new
# rule, or a new schema default that breaks one, is covered without an edit.
# The worker's side of the same property: tests/test_config.c.
#
# replicas is required, so a case always writes it: as its maximum (so that
# minAvailable <= replicas never refuses) and, when that is refused, as 1
# (a global batch the world size must divide): a case is refused only when
# both are, as the worker's property takes the world size as the user's.
# And where the rule is the world size's alone (globalBatchSize written,
# microBatchSize not), the API server and the worker (`vitjob-worker plan
# --config` on the same manifest) refuse exactly the same specs.
#
# Not asserted: training.epochs=0 alone, which the rule between steps and
# epochs refuses as the worker does: an unset steps means "from epochs", so
# the run asked for is the user's own zero epochs.
# Run: /usr/bin/python3 -m unittest tests/cluster/test_defaults.py

import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from tests.cluster import testlimit
from tests.cluster.harness import ServerProcess, load_yaml_docs

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT_CRD = os.path.join(HERE, "..", "..", "manifests", "00-crd.yaml")
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(HERE, "..", "..", "build")))
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
JOBS = "/apis/vitjob.dev/v1alpha1/namespaces/default/vitjobs?dryRun=All"
BETWEEN = (1e-4, 0.25, 0.5, 1, 2, 3, 7, 10, 50, 97, 100, 1000)
STRINGS = ("s3://bucket/train-{0..1}.tar", "/data/train")
EXEMPT = {("training", "epochs"): [0]}


def spec_schema(crd):
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def rules(schema, path=()):
    """(object path, rule text) of every x-kubernetes-validations rule under schema."""
    for r in schema.get("x-kubernetes-validations", []):
        yield path, r["rule"]
    for name, sub in schema.get("properties", {}).items():
        yield from rules(sub, path + (name,))


def at(schema, path):
    for name in path:
        schema = schema.get("properties", {}).get(name)
        if schema is None:
            return None
    return schema


def fields(spec, obj, rule):
    """The fields (paths from spec) a rule reads: self.a.b..., cut where a
    name is no property (a method: startsWith)."""
    out = []
    for m in re.finditer(r"self((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", rule):
        path = list(obj)
        for name in m.group(1).split(".")[1:]:
            if at(spec, path + [name]) is None:
                break
            path.append(name)
        sub = at(spec, path)
        if len(path) > len(obj) and "properties" not in sub and tuple(path) not in out:
            out.append(tuple(path))
    return out


def valid_values(s):
    if "enum" in s:
        return list(s["enum"])
    t = s.get("type")
    if t == "boolean":
        return [True, False]
    if t == "string":
        return list(STRINGS)
    if t in ("integer", "number") or (t == "array" and s.get("minItems") == 2):
        b = s if t != "array" else s["items"]
        integer = b.get("type") == "integer"
        lo, hi = b.get("minimum", 0), b.get("maximum", 1e6)
        if b.get("exclusiveMinimum"):
            lo = lo + 1 if integer else lo + (hi - lo) * 1e-6
        if b.get("exclusiveMaximum"):
            hi = hi - 1 if integer else hi - (hi - lo) * 1e-6
        if t == "array":
            return [[lo, hi], [lo + (hi - lo) / 4, lo + 3 * (hi - lo) / 4]]
        vals = [lo, hi] + [v for v in BETWEEN if lo <= v <= hi and (not integer or v == int(v))]
        return [int(v) if integer else v for v in vals]
    return []


def cases(spec):
    """(rule, field, value) for each field of each rule over two or more fields."""
    for obj, rule in rules(spec):
        fs = fields(spec, obj, rule)
        if len(fs) < 2:
            continue
        for f in fs:
            for v in valid_values(at(spec, f)):
                if v not in EXEMPT.get(f, []):
                    yield rule, f, v


def job(spec, field, value, replicas=None):
    """A ViTJob with only `field` set (and the required replicas and image:
    replicas as given, else as large as its schema allows, unless replicas
    is the field)."""
    s = {"replicas": replicas or at(spec, ("replicas",))["maximum"], "image": "img:1"}
    d = s
    for name in field[:-1]:
        d = d.setdefault(name, {})
    d[field[-1]] = value
    return {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob", "metadata": {"name": "one"},
            "spec": s}


class DefaultsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="defaults-")
        cls.server = ServerProcess(os.path.join(cls.tmp, "state"))
        cls.c = cls.server.client()
        cls.crd = load_yaml_docs(PROJECT_CRD)[0]
        r = cls.c.post(CRDS, cls.crd)
        assert r.status == 201, r

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_cases_cover_every_rule_between_fields(self):
        spec = spec_schema(self.crd)
        tied = {rule for _, rule in rules(spec) if len(fields(spec, _, rule)) >= 2}
        self.assertGreaterEqual(len(tied), 6, tied)
        covered = {rule for rule, _, _ in cases(spec)}
        self.assertEqual(covered, tied)
        for f in (("training", "steps"), ("training", "optimizer", "warmupSteps"),
                  ("training", "optimizer", "lr"), ("training", "optimizer", "minLr"),
                  ("training", "globalBatchSize"), ("training", "microBatchSize")):
            self.assertIn(f, {f for _, f, _ in cases(spec)})

    def test_one_field_of_a_rule_set_to_any_valid_value_with_the_others_unset_is_accepted(self):
        spec = spec_schema(self.crd)
        refused = []
        n = 0
        for rule, field, value in cases(spec):
            n += 1
            r = self.c.post(JOBS, job(spec, field, value))
            if r.status != 201 and field != ("replicas",):
                r = self.c.post(JOBS, job(spec, field, value, replicas=1))
            if r.status != 201:
                refused.append("%s=%s: %s" % (".".join(field), json.dumps(value),
                                              (r.body or {}).get("message", r.status)))
        self.assertGreater(n, 50)
        self.assertEqual(refused, [], "\n".join(refused))

    def test_a_global_batch_without_a_micro_batch_is_refused_by_both_where_the_world_size_does_not_divide_it(self):
        worker = os.path.join(BUILD, "bin", "vitjob-worker")
        if not os.access(worker, os.X_OK):
            self.skipTest("no %s (make)" % worker)
        disagree, refused = [], 0
        for replicas in (1, 2, 3):
            for gpus in (0, 1, 2, 4):
                for g in (1, 6, 64, 96, 97, 120, 128):
                    obj = {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob",
                           "metadata": {"name": "world"},
                           "spec": {"replicas": replicas, "gpusPerReplica": gpus, "image": "img:1",
                                    "training": {"globalBatchSize": g}}}
                    api = self.c.post(JOBS, obj)
                    path = os.path.join(self.tmp, "world.json")
                    with open(path, "w") as f:
                        json.dump(obj, f)
                    w = subprocess.run([worker, "plan", "--config", path], capture_output=True,
                                       text=True, timeout=60)
                    self.assertIn(w.returncode, (0, 2), w.stderr)
                    refused += w.returncode == 2
                    if (api.status == 201) != (w.returncode == 0):
                        disagree.append("replicas=%d gpusPerReplica=%d globalBatchSize=%d: API %s, "
                                        "worker exit %d %s" % (replicas, gpus, g, api.status,
                                                               w.returncode, w.stderr[-300:]))
                    elif api.status != 201:
                        self.assertIn("training.globalBatchSize must be divisible by the world size",
                                      api.body["message"])
        self.assertEqual(disagree, [], "\n".join(disagree))
        self.assertGreater(refused, 10)


if __name__ == "__main__":
    testlimit.main(300)
