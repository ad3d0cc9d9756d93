# kubeapi/crdcheck.py: what a real API server refuses in a
# CustomResourceDefinition (apiextensions-apiserver's validation), with its
# wording and field paths: the structural-schema rules (a type on every
# node, object at the root, the root metadata restricted to name and
# generateName, x-kubernetes-* extensions used as allowed, no uniqueItems,
# additionalProperties beside properties, list-map keys), then, only when
# the schema is structural (the real server reports one stage at a time),
# every `default` validated against its own node: pruned, checked against
# the schema and evaluated against the CEL rules of that node and below,
# without applying the nested defaults first; and every CEL rule compiled.
# Must not: change the CRD.

import copy
import json

from . import cel, schema

TYPES = ("object", "array", "string", "integer", "number", "boolean")
PRINTER_TYPES = ("integer", "number", "string", "boolean", "date")


def _q(v):
    return json.dumps(v) if isinstance(v, str) else schema.fmt_value(v)


def _structural(s, path, level, errs):
    """level: 'root', 'field' (a property or additionalProperties), 'item'."""
    if not isinstance(s, dict):
        errs.append((path, "FieldValueInvalid", "Invalid value: %s: must be an object" % _q(s)))
        return
    t = s.get("type", "")
    int_or_string = s.get("x-kubernetes-int-or-string") is True
    embedded = s.get("x-kubernetes-embedded-resource") is True
    if t and t not in TYPES:
        errs.append((path + ".type", "FieldValueNotSupported", "Unsupported value: %s: supported values: %s"
                     % (_q(t), ", ".join(_q(x) for x in TYPES))))
    if not t and not int_or_string and not embedded:
        why = {"root": "must not be empty at the root", "item": "must not be empty for specified array items",
               "field": "must not be empty for specified object fields"}[level]
        errs.append((path + ".type", "FieldValueRequired", "Required value: " + why))
    if int_or_string and t:
        errs.append((path + ".type", "FieldValueInvalid", "Invalid value: %s: must be empty if "
                     "x-kubernetes-int-or-string is true" % _q(t)))
    if level == "root" and t and t != "object":
        errs.append((path + ".type", "FieldValueInvalid", "Invalid value: %s: must be object at the root" % _q(t)))
    if s.get("x-kubernetes-preserve-unknown-fields") is False:
        errs.append((path + ".x-kubernetes-preserve-unknown-fields", "FieldValueInvalid",
                     "Invalid value: false: must be true or undefined"))
    if embedded and t != "object":
        errs.append((path + ".type", "FieldValueInvalid", "Invalid value: %s: must be object if "
                     "x-kubernetes-embedded-resource is true" % _q(t)))
    if s.get("uniqueItems") is True:
        errs.append((path + ".uniqueItems", "FieldValueForbidden", "Forbidden: uniqueItems cannot be set to true "
                     "since the runtime complexity becomes quadratic"))
    if "additionalProperties" in s and "properties" in s:
        errs.append((path + ".additionalProperties", "FieldValueForbidden",
                     "Forbidden: additionalProperties and properties are mutual exclusive"))
    if s.get("additionalProperties") is False:
        errs.append((path + ".additionalProperties", "FieldValueForbidden",
                     "Forbidden: must not be false (only true or a schema)"))
    if t == "array" and "items" not in s:
        errs.append((path + ".items", "FieldValueRequired", "Required value: must be specified"))
    lt = s.get("x-kubernetes-list-type")
    if lt is not None:
        if lt not in ("atomic", "set", "map"):
            errs.append((path + ".x-kubernetes-list-type", "FieldValueNotSupported", 'Unsupported value: %s: '
                         'supported values: "atomic", "set", "map"' % _q(lt)))
        if t != "array":
            errs.append((path + ".x-kubernetes-list-type", "FieldValueInvalid",
                         "Invalid value: %s: must only be used if type == array" % _q(lt)))
        if lt == "map":
            keys = s.get("x-kubernetes-list-map-keys") or []
            items = s.get("items") or {}
            if not keys:
                errs.append((path + ".x-kubernetes-list-map-keys", "FieldValueRequired",
                             "Required value: must not be empty if x-kubernetes-list-type is map"))
            if items.get("type") != "object":
                errs.append((path + ".items.type", "FieldValueInvalid", "Invalid value: %s: must be object if "
                             "parent array's x-kubernetes-list-type is map" % _q(items.get("type", ""))))
            for k in keys:
                p = (items.get("properties") or {}).get(k)
                if p is None:
                    errs.append((path + ".x-kubernetes-list-map-keys", "FieldValueInvalid", "Invalid value: %s: "
                                 "entries must all be names of item properties" % _q(keys)))
                elif k not in (items.get("required") or []) and "default" not in p:
                    errs.append((path + ".items.properties[%s]" % k, "FieldValueRequired", "Required value: this "
                                 "property is in x-kubernetes-list-map-keys, so it must have a default or be a "
                                 "required property"))
    elif "x-kubernetes-list-map-keys" in s:
        errs.append((path + ".x-kubernetes-list-map-keys", "FieldValueForbidden",
                     "Forbidden: must only be used if x-kubernetes-list-type is map"))
    for i, rule in enumerate(s.get("x-kubernetes-validations") or []):
        if not isinstance(rule, dict) or not rule.get("rule"):
            errs.append((path + ".x-kubernetes-validations[%d].rule" % i, "FieldValueRequired", "Required value"))

    props = s.get("properties") or {}
    for name, sub in props.items():
        p = "%s.properties[%s]" % (path, name)
        if level == "root" and name == "metadata":
            _metadata(sub, p, errs)
            continue
        if level == "root" and name in ("kind", "apiVersion") and isinstance(sub, dict) \
                and sub.get("type") not in (None, "string"):
            errs.append((p + ".type", "FieldValueInvalid", "Invalid value: %s: must be string" % _q(sub["type"])))
        _structural(sub, p, "field", errs)
    if isinstance(s.get("items"), dict):
        _structural(s["items"], path + ".items", "item", errs)
    elif "items" in s:
        errs.append((path + ".items", "FieldValueForbidden", "Forbidden: items must be a schema object and not an "
                     "array"))
    if isinstance(s.get("additionalProperties"), dict):
        _structural(s["additionalProperties"], path + ".additionalProperties", "field", errs)


def _metadata(s, path, errs):
    """The root `metadata`: nothing but type object and name/generateName."""
    if not isinstance(s, dict):
        return
    rest = {k: v for k, v in s.items() if k not in ("type", "properties")}
    props = s.get("properties") or {}
    if (rest or set(props) - {"name", "generateName"} or s.get("type", "object") != "object"):
        errs.append((path, "FieldValueForbidden", "Forbidden: must not specify anything other than name and "
                     "generateName, but metadata is implicitly specified"))


def _defaults(s, path, errs, in_metadata=False):
    """Every default, against its own node (nested defaults not applied)."""
    if not isinstance(s, dict):
        return
    if "default" in s:
        d = s["default"]
        p = path + ".default"
        if in_metadata:
            errs.append((p, "FieldValueForbidden", "Forbidden: must not be set inside metadata"))
        else:
            pruned = copy.deepcopy(d)
            schema.prune(s, pruned)
            if pruned != d:
                errs.append((p, "FieldValueInvalid", "Invalid value: %s: must not have unknown fields" % _q(d)))
            else:
                verrs = schema.validate(s, d, p)
                if verrs:
                    errs.extend(verrs)
                else:
                    errs.extend(cel.validate(s, d, None, p))
    for name, sub in (s.get("properties") or {}).items():
        _defaults(sub, "%s.properties[%s]" % (path, name), errs,
                  in_metadata or (path.endswith("openAPIV3Schema") and name == "metadata"))
    if isinstance(s.get("items"), dict):
        _defaults(s["items"], path + ".items", errs, in_metadata)


def _rules_compile(s, path, errs):
    if not isinstance(s, dict):
        return
    for i, rule in enumerate(s.get("x-kubernetes-validations") or []):
        text = rule.get("rule", "") if isinstance(rule, dict) else ""
        problem = cel.compile_error(text)
        if problem:
            errs.append((path + ".x-kubernetes-validations[%d].rule" % i, "FieldValueInvalid",
                         "Invalid value: %s: compilation failed: %s" % (_q(text), problem)))
        mx = rule.get("messageExpression") if isinstance(rule, dict) else None
        if mx:
            problem = cel.compile_error(mx)
            if problem:
                errs.append((path + ".x-kubernetes-validations[%d].messageExpression" % i, "FieldValueInvalid",
                             "Invalid value: %s: messageExpression compilation failed: %s" % (_q(mx), problem)))
    for name, sub in (s.get("properties") or {}).items():
        _rules_compile(sub, "%s.properties[%s]" % (path, name), errs)
    for key in ("items", "additionalProperties"):
        if isinstance(s.get(key), dict):
            _rules_compile(s[key], path + "." + key, errs)


def _versions(spec, errs):
    versions = spec.get("versions") or []
    if not versions:
        errs.append(("spec.versions", "FieldValueInvalid", "Invalid value: null: must have exactly one version "
                     "marked as storage version"))
        return []
    if sum(1 for v in versions if v.get("storage")) != 1:
        errs.append(("spec.versions", "FieldValueInvalid", "Invalid value: %s: must have exactly one version "
                     "marked as storage version" % json.dumps(versions, separators=(",", ":"))[:200]))
    for i, v in enumerate(versions):
        for j, col in enumerate(v.get("additionalPrinterColumns") or []):
            p = "spec.versions[%d].additionalPrinterColumns[%d]" % (i, j)
            if col.get("type") not in PRINTER_TYPES:
                errs.append((p + ".type", "FieldValueNotSupported", "Unsupported value: %s: supported values: %s"
                             % (_q(col.get("type", "")), ", ".join(_q(t) for t in PRINTER_TYPES))))
            if not str(col.get("jsonPath", "")).startswith("."):
                errs.append((p + ".jsonPath", "FieldValueInvalid", "Invalid value: %s: must be a simple json path "
                             "starting with ." % _q(col.get("jsonPath", ""))))
    return versions


def validate_crd(crd):
    """Field errors (field, reason, text) of a CRD, in the real server's words."""
    spec = crd.get("spec") or {}
    errs = []
    name = crd["metadata"].get("name", "")
    want = "%s.%s" % ((spec.get("names") or {}).get("plural", ""), spec.get("group", ""))
    if name != want:
        errs.append(("metadata.name", "FieldValueInvalid",
                     'Invalid value: "%s": must be spec.names.plural+"."+spec.group' % name))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errs.append(("spec.scope", "FieldValueNotSupported", 'Unsupported value: %s: supported values: '
                     '"Cluster", "Namespaced"' % _q(spec.get("scope", ""))))
    versions = _versions(spec, errs)
    if errs:
        return errs
    schemas = [((v.get("schema") or {}).get("openAPIV3Schema"), i) for i, v in enumerate(versions)]
    shared = all(json.dumps(sc, sort_keys=True) == json.dumps(schemas[0][0], sort_keys=True) for sc, _ in schemas)
    for sc, i in (schemas[:1] if shared else schemas):
        base = "spec.validation.openAPIV3Schema" if shared else "spec.versions[%d].schema.openAPIV3Schema" % i
        if sc is None:
            errs.append((base, "FieldValueRequired", "Required value: schemas are required"))
            continue
        stage = []
        _structural(sc, base, "root", stage)
        if not stage:
            _defaults(sc, base, stage)
            _rules_compile(sc, base, stage)
        errs += stage
    return errs
