# kubeapi/cel.py: CRD validation rules (x-kubernetes-validations) evaluated
# with a real CEL implementation, Buf's conformance-tested @bufbuild/cel, run
# by Node.js in one long-lived child process (tests/cluster/cel/eval.mjs,
# installed by scripts/deps.sh with `npm ci`), spoken to in JSON lines.
# This side walks the object along its schema, types each value as
# kube-apiserver does (integer -> CEL int, number -> double, objects -> maps
# with has(), int-or-string -> either), and words the results as the real
# server: "<path>: Invalid value: "<type>": <message>", "failed rule: <rule>",
# "<error> evaluating rule: <rule>". Known gaps against kube-apiserver: rules
# are parsed but not type-checked when a CRD is created (a type error shows
# when a rule runs), no cost limits, no optional syntax (self.?x), and none of
# Kubernetes' CEL libraries (quantity, url, list isSorted/sum, ...): a rule
# that uses one fails with "no such overload". This project's rules need none.
# Must not: interpret CEL itself.

import json
import os
import subprocess
import threading

from . import errors

HERE = os.path.dirname(os.path.abspath(__file__))
EVAL = os.path.join(os.path.dirname(HERE), "cel", "eval.mjs")


class CelUnavailable(RuntimeError):
    pass


class _Process:
    def __init__(self):
        self.lock = threading.Lock()
        self.proc = None

    def _start(self):
        if not os.path.exists(os.path.join(os.path.dirname(EVAL), "node_modules", "@bufbuild", "cel")):
            raise CelUnavailable("the CEL evaluator is not installed (tests/cluster/cel/node_modules): "
                                 "run scripts/deps.sh")
        self.proc = subprocess.Popen(["node", EVAL], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=None, text=True, bufsize=1)

    def call(self, req):
        with self.lock:
            for attempt in (0, 1):
                if self.proc is None or self.proc.poll() is not None:
                    self._start()
                try:
                    self.proc.stdin.write(json.dumps(req) + "\n")
                    self.proc.stdin.flush()
                    line = self.proc.stdout.readline()
                    if line:
                        return json.loads(line)
                except (BrokenPipeError, ValueError):
                    pass
                self.proc = None
            raise errors.ApiError(500, "InternalError", "internal error: the CEL evaluator died")


_proc = _Process()


def check_available():
    """Raises CelUnavailable when the evaluator cannot run."""
    _proc.call({"op": "compile", "rule": "true"})


def compile_error(text):
    """None when text compiles, else the evaluator's message."""
    return _proc.call({"op": "compile", "rule": text}).get("error")


# --- typing values as kube-apiserver does -----------------------------------------

def _generic(v):
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return {"$int": str(v)}
    if isinstance(v, float):
        return v
    if isinstance(v, list):
        return [_generic(x) for x in v]
    return {"$map": {k: _generic(x) for k, x in v.items()}}


def typed(s, v):
    """v in the evaluator's encoding: {"$int": "12"} for CEL ints, numbers for
    doubles, {"$map": {...}} for objects."""
    if v is None or not isinstance(s, dict):
        return _generic(v)
    t = s.get("type")
    if s.get("x-kubernetes-int-or-string"):
        return {"$int": str(v)} if isinstance(v, int) and not isinstance(v, bool) else v
    if t == "integer" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return {"$int": str(int(v))}
    if t == "number" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, list):
        return [typed(s.get("items") or {}, x) for x in v]
    if isinstance(v, dict):
        props, addl = s.get("properties") or {}, s.get("additionalProperties")
        out = {}
        for k, x in v.items():
            sub = props.get(k, addl if isinstance(addl, dict) else None)
            out[k] = typed(sub, x) if sub is not None else _generic(x)
        return {"$map": out}
    return _generic(v)


def _type_word(s, v):
    if s.get("type"):
        return s["type"]
    if s.get("x-kubernetes-int-or-string"):
        return "integer" if isinstance(v, int) else "string"
    return "object"


def _collect(s, v, old, path, out):
    if v is None or not isinstance(s, dict):
        return
    for rule in s.get("x-kubernetes-validations") or []:
        text = rule.get("rule", "")
        if "oldSelf" in text and old is None:
            continue      # a transition rule: only on updates of an existing value
        out.append((rule, s, v, old, path))
    if isinstance(v, dict):
        props, addl = s.get("properties") or {}, s.get("additionalProperties")
        for k, x in v.items():
            sub = props.get(k, addl if isinstance(addl, dict) else None)
            if sub is not None:
                o = old.get(k) if isinstance(old, dict) else None
                p = (path + "." + k) if path else k
                if k not in props:
                    p = "%s[%s]" % (path, k)
                _collect(sub, x, o, p, out)
    elif isinstance(v, list) and isinstance(s.get("items"), dict):
        for i, x in enumerate(v):
            _collect(s["items"], x, None, "%s[%d]" % (path, i), out)


def _rule_string(rule):
    """ruleErrorString: the rule's message if it has one, else its text."""
    return (rule.get("message") or rule.get("rule", "")).strip()


def validate(s, v, old, path=""):
    """Field errors (field, reason, text) of every rule in s's subtree on v."""
    work = []
    _collect(s, v, old, path, work)
    if not work:
        return []
    req = {"op": "eval", "items": []}
    for rule, sub, val, o, p in work:
        item = {"rule": rule.get("rule", ""), "self": typed(sub, val)}
        if o is not None:
            item["oldSelf"] = typed(sub, o)
        if rule.get("messageExpression"):
            item["messageExpression"] = rule["messageExpression"]
        req["items"].append(item)
    results = _proc.call(req)["results"]
    errs = []
    for (rule, sub, val, o, p), res in zip(work, results):
        word = _type_word(sub, val)
        node = p or "<nil>"      # rules at the root report a nil path
        fpath = node + rule["fieldPath"] if rule.get("fieldPath") else node
        if "error" in res:
            if res["error"].startswith("no such overload"):
                why = ("'%s': call arguments did not match a supported operator, function or macro signature "
                       "for rule: %s" % (res["error"], _rule_string(rule)))
            else:
                why = "%s evaluating rule: %s" % (res["error"], _rule_string(rule))
            errs.append((node, "FieldValueInvalid", 'Invalid value: "%s": %s' % (word, why)))
            continue
        if res.get("value") is True:
            continue
        if res.get("value") is not False:
            errs.append((fpath, "FieldValueInvalid", 'Invalid value: "%s": rule did not evaluate to a bool: %s'
                         % (word, _rule_string(rule))))
            continue
        msg = (res.get("message") or rule.get("message") or "failed rule: %s" % rule.get("rule", "")).strip()
        reason = rule.get("reason", "FieldValueInvalid")
        if reason == "FieldValueForbidden":
            errs.append((fpath, reason, "Forbidden: " + msg))
        elif reason == "FieldValueRequired":
            errs.append((fpath, reason, "Required value: " + msg))
        elif reason == "FieldValueDuplicate":
            errs.append((fpath, reason, 'Duplicate value: "%s"' % word))
        else:
            errs.append((fpath, "FieldValueInvalid", 'Invalid value: "%s": %s' % (word, msg)))
    return errs
