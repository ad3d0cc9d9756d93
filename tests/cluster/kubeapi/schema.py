# kubeapi/schema.py: custom objects against their CRD's structural schema:
# defaulting, pruning of unknown fields, and validation with the error
# wording of the real API server (field path, Invalid/Required/Unsupported).

import copy
import json
import re

TYPE_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string",
              list: "array", dict: "object", type(None): "null"}


def type_name(v):
    return TYPE_NAMES.get(type(v), "object")


def fmt_value(v):
    """A value as Go's field error printing shows it."""
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if isinstance(v, int) or not v.is_integer() else str(int(v))
    return json.dumps(v, separators=(",", ":"))


def _type_ok(schema, v):
    t = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(v, (int, str)) and not isinstance(v, bool)
    if not t:
        return True
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return type_name(v) == t


# --- defaulting and pruning ----------------------------------------------------

def apply_defaults(schema, obj):
    """Fill in `default` values for absent properties, recursively (in place)."""
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name not in obj and "default" in sub:
                obj[name] = copy.deepcopy(sub["default"])
            if name in obj:
                apply_defaults(sub, obj[name])
        addl = schema.get("additionalProperties")
        if isinstance(addl, dict):
            for name in obj:
                if name not in props:
                    apply_defaults(addl, obj[name])
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            apply_defaults(schema["items"], item)


def prune(schema, obj, path="", root=False):
    """Drop fields the schema does not declare (in place) and nulls where the
    schema is not nullable. Returns the paths dropped, e.g. ['spec.foo']."""
    dropped = []
    if isinstance(obj, dict) and (schema.get("type") == "object" or "properties" in schema or root):
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") or addl is True or isinstance(addl, dict)
        for name in list(obj):
            sub = props.get(name)
            p = path + "." + name if path else name
            if root and name in ("apiVersion", "kind", "metadata"):
                continue
            if obj[name] is None and not (sub or {}).get("nullable"):
                del obj[name]
                continue
            if sub is not None:
                dropped += prune(sub, obj[name], p)
            elif isinstance(addl, dict):
                dropped += prune(addl, obj[name], p)
            elif not keep_unknown:
                del obj[name]
                dropped.append(p)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            dropped += prune(schema["items"], item, "%s[%d]" % (path, i))
    return dropped


# --- validation ------------------------------------------------------------------

def validate(schema, obj, path=""):
    """Errors as (field, reason, text) triples, in the real server's words."""
    errs = []
    _validate(schema, obj, path, errs, root=True)
    return errs


def _validate(s, v, path, errs, root=False):
    if v is None:
        if not s.get("nullable") and not root:
            errs.append((path, "FieldValueTypeInvalid", 'Invalid value: "null": %s in body must be of type %s: "null"'
                         % (path, s.get("type", "object"))))
        return
    if not _type_ok(s, v):
        want = "integer,string" if s.get("x-kubernetes-int-or-string") else s["type"]
        errs.append((path, "FieldValueTypeInvalid", 'Invalid value: "%s": %s in body must be of type %s: "%s"'
                     % (type_name(v), path, want, type_name(v))))
        return
    if "enum" in s and v not in s["enum"]:
        errs.append((path, "FieldValueNotSupported", "Unsupported value: %s: supported values: %s"
                     % (fmt_value(v), ", ".join(fmt_value(e) for e in s["enum"]))))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        _numeric(s, v, path, errs)
    if isinstance(v, str):
        if "minLength" in s and len(v) < s["minLength"]:
            errs.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be at least %d chars long"
                         % (fmt_value(v), path, s["minLength"])))
        if "maxLength" in s and len(v) > s["maxLength"]:
            errs.append((path, "FieldValueTooLong", "Too long: may not be more than %d bytes" % s["maxLength"]))
        if "pattern" in s and not re.search(s["pattern"], v):
            errs.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should match '%s'"
                         % (fmt_value(v), path, s["pattern"])))
    if isinstance(v, list):
        if "minItems" in s and len(v) < s["minItems"]:
            errs.append((path, "FieldValueInvalid", "Invalid value: %d: %s in body should have at least %d items"
                         % (len(v), path, s["minItems"])))
        if "maxItems" in s and len(v) > s["maxItems"]:
            errs.append((path, "FieldValueTooMany", "Too many: %d: must have at most %d items"
                         % (len(v), s["maxItems"])))
        if isinstance(s.get("items"), dict):
            for i, item in enumerate(v):
                _validate(s["items"], item, "%s[%d]" % (path, i), errs)
    if isinstance(v, dict):
        for req in s.get("required") or []:
            if req not in v:
                errs.append(((path + "." if path else "") + req, "FieldValueRequired", "Required value"))
        props = s.get("properties") or {}
        addl = s.get("additionalProperties")
        for name, sub in v.items():
            if root and name in ("apiVersion", "kind", "metadata"):
                continue
            p = path + "." + name if path else name
            if name in props:
                _validate(props[name], sub, p, errs)
            elif isinstance(addl, dict):
                _validate(addl, sub, p, errs)
        if "minProperties" in s and len(v) < s["minProperties"]:
            errs.append((path, "FieldValueInvalid", "Invalid value: %d: %s in body should have at least %d properties"
                         % (len(v), path, s["minProperties"])))
        if "maxProperties" in s and len(v) > s["maxProperties"]:
            errs.append((path, "FieldValueTooMany", "Too many: %d: must have at most %d items"
                         % (len(v), s["maxProperties"])))


def _numeric(s, v, path, errs):
    if "minimum" in s:
        if s.get("exclusiveMinimum") and v <= s["minimum"]:
            errs.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be greater than %s"
                         % (fmt_value(v), path, fmt_value(s["minimum"]))))
        elif v < s["minimum"]:
            errs.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be greater than or equal to %s"
                         % (fmt_value(v), path, fmt_value(s["minimum"]))))
    if "maximum" in s:
        if s.get("exclusiveMaximum") and v >= s["maximum"]:
            errs.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be less than %s"
                         % (fmt_value(v), path, fmt_value(s["maximum"]))))
        elif v > s["maximum"]:
            errs.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be less than or equal to %s"
                         % (fmt_value(v), path, fmt_value(s["maximum"]))))
    if "multipleOf" in s and s["multipleOf"] and (v / s["multipleOf"]) % 1:
        errs.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be a multiple of %s"
                     % (fmt_value(v), path, fmt_value(s["multipleOf"]))))


# --- CEL rules -----------------------------------------------------------------------

def validate_rules(schema, obj, old=None, errs_so_far=()):
    """The x-kubernetes-validations errors of obj (kubeapi/cel.py). As on the
    real server (1.29+), rules are not run on an object with type, required,
    too-long, too-many or unsupported-value errors: one error says so instead."""
    from . import cel
    if not _has_rules(schema):
        return []
    blocking = ("FieldValueTypeInvalid", "FieldValueRequired", "FieldValueTooLong", "FieldValueTooMany",
                "FieldValueNotSupported")
    if any(reason in blocking for _, reason, _ in errs_so_far):
        return [("<nil>", "FieldValueInvalid", "Invalid value: \"null\": some validation rules were not checked "
                 "because the object was invalid; correct the existing errors to complete validation")]
    return cel.validate(schema, obj, old, "")


def _has_rules(s):
    if not isinstance(s, dict):
        return False
    if s.get("x-kubernetes-validations"):
        return True
    subs = list((s.get("properties") or {}).values())
    subs += [s[k] for k in ("items", "additionalProperties") if isinstance(s.get(k), dict)]
    return any(_has_rules(x) for x in subs)
