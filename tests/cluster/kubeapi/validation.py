# kubeapi/validation.py: what a real server's validation of the built-in
# types refuses in the objects this project writes, with its wording: name
# formats (DNS-1123 subdomains for most objects, DNS-1035 labels for
# Services, DNS-1123 labels for pod hostnames and subdomains, container
# names), resource quantities (a 400 at decoding, as Go's Quantity
# unmarshalling fails), requests above limits, extended resources,
# tolerations, node selectors, node affinity (operators, value counts, keys
# and weights of its required and preferred terms), service account names,
# and RBAC objects; what a pod update may change in the spec (images,
# activeDeadlineSeconds downwards, added tolerations, scheduling gates only
# removed and, while gated, nodeSelector entries only added, as 1.27 allows:
# nodeName only through pods/binding), and the pods/binding body.
# Must not: change the object (defaulting lives in api.py).

import re

from . import errors
from .quantity import parse_quantity

LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile("^" + LABEL_FMT + "$")
DNS1123_SUBDOMAIN = re.compile("^" + LABEL_FMT + r"(\." + LABEL_FMT + ")*$")
DNS1035_LABEL = re.compile("^[a-z]([-a-z0-9]*[a-z0-9])?$")
QNAME_PART = re.compile("^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
QUANTITY_REGEX = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"

SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                 "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                 "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
             "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
             "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
               "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
               "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
QNAME_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
             "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
             "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
                   "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                   "'my_value',  or '12345', regex used for validation is "
                   "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def q(v):
    """A value as Go's field errors quote it."""
    return '"%s"' % str(v).replace("\\", "\\\\").replace('"', '\\"')


def subdomain_errs(path, v):
    errs = []
    if len(v) > 253:
        errs.append((path, "FieldValueInvalid", "Invalid value: %s: must be no more than 253 characters" % q(v)))
    if not DNS1123_SUBDOMAIN.match(v):
        errs.append((path, "FieldValueInvalid", "Invalid value: %s: %s" % (q(v), SUBDOMAIN_MSG)))
    return errs


def label_errs(path, v, dns1035=False):
    if not dns1035 and "." in v and DNS1123_SUBDOMAIN.match(v) and len(v) <= 253:
        return [(path, "FieldValueInvalid", "Invalid value: %s: must not contain dots" % q(v))]
    errs = []
    if len(v) > 63:
        errs.append((path, "FieldValueInvalid", "Invalid value: %s: must be no more than 63 characters" % q(v)))
    if not (DNS1035_LABEL if dns1035 else DNS1123_LABEL).match(v):
        errs.append((path, "FieldValueInvalid", "Invalid value: %s: %s" % (q(v), DNS1035_MSG if dns1035 else LABEL_MSG)))
    return errs


def qualified_name_errs(path, v):
    name, prefix = v, None
    if "/" in v:
        prefix, _, name = v.partition("/")
        if "/" in name:
            return [(path, "FieldValueInvalid", "Invalid value: %s: a qualified name must consist of alphanumeric "
                     "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
                     "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                     "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' "
                     "(e.g. 'example.com/MyName')" % q(v))]
        if not prefix:
            return [(path, "FieldValueInvalid", "Invalid value: %s: prefix part must be non-empty" % q(v))]
        if not DNS1123_SUBDOMAIN.match(prefix) or len(prefix) > 253:
            return [(path, "FieldValueInvalid", "Invalid value: %s: prefix part %s" % (q(v), SUBDOMAIN_MSG))]
    if not name:
        return [(path, "FieldValueInvalid", "Invalid value: %s: name part must be non-empty" % q(v))]
    if len(name) > 63:
        return [(path, "FieldValueInvalid", "Invalid value: %s: name part must be no more than 63 characters" % q(v))]
    if not QNAME_PART.match(name):
        return [(path, "FieldValueInvalid", "Invalid value: %s: %s" % (q(v), QNAME_MSG))]
    return []


def label_value_errs(path, v):
    if v == "" or (len(v) <= 63 and QNAME_PART.match(v)):
        return []
    if len(v) > 63:
        return [(path, "FieldValueInvalid", "Invalid value: %s: must be no more than 63 characters" % q(v))]
    return [(path, "FieldValueInvalid", "Invalid value: %s: %s" % (q(v), LABEL_VALUE_MSG))]


# --- quantities ----------------------------------------------------------------

def check_quantities(kind, version, obj):
    """The 400 a real server answers when a quantity does not decode."""
    spec = obj.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for part in ("limits", "requests"):
            for val in ((c.get("resources") or {}).get(part) or {}).values():
                if parse_quantity(val) is None:
                    raise errors.bad_request('%s in version "%s" cannot be handled as a %s: quantities must match '
                                             "the regular expression '%s'" % (kind, version, kind, QUANTITY_REGEX))


def _standard_resource(name):
    return name in ("cpu", "memory", "ephemeral-storage", "pods", "storage") or name.startswith("hugepages-") \
        or "/" in name


def _extended(name):
    return "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")


def _fmt_q(v):
    return v if isinstance(v, str) else ("%d" % v if float(v).is_integer() else str(v))


def container_resource_errs(path, res):
    errs = []
    limits, requests = (res or {}).get("limits") or {}, (res or {}).get("requests") or {}
    for part, m in (("limits", limits), ("requests", requests)):
        for k, v in m.items():
            p = "%s.%s[%s]" % (path, part, k)
            e = qualified_name_errs(p, k)
            if not e and not _standard_resource(k):
                e = [(p, "FieldValueInvalid", "Invalid value: %s: must be a standard resource for containers" % q(k))]
            errs += e
            val = parse_quantity(v)
            if val is not None and val < 0:
                errs.append((p, "FieldValueInvalid", "Invalid value: %s: must be greater than or equal to 0"
                             % q(_fmt_q(v))))
            if val is not None and _extended(k) and val.denominator != 1:
                errs.append((p, "FieldValueInvalid", "Invalid value: %s: must be an integer" % q(_fmt_q(v))))
    for k, v in requests.items():
        rv, lv = parse_quantity(v), parse_quantity(limits.get(k)) if k in limits else None
        p = "%s.requests" % path
        if _extended(k):
            if k not in limits:
                errs.append(("%s.limits" % path, "FieldValueRequired",
                             "Required value: Limit must be set for non overcommitable resources"))
            elif rv != lv:
                errs.append((p, "FieldValueInvalid", "Invalid value: %s: must be equal to %s limit of %s"
                             % (q(_fmt_q(v)), k, _fmt_q(limits[k]))))
        elif lv is not None and rv is not None and rv > lv:
            errs.append((p, "FieldValueInvalid", "Invalid value: %s: must be less than or equal to %s limit of %s"
                         % (q(_fmt_q(v)), k, _fmt_q(limits[k]))))
    return errs


# --- kinds ---------------------------------------------------------------------

def toleration_errs(path, tols):
    errs = []
    for i, t in enumerate(tols or []):
        p = "%s[%d]" % (path, i)
        key, op, val, eff = t.get("key", ""), t.get("operator", ""), t.get("value", ""), t.get("effect", "")
        if key:
            errs += qualified_name_errs(p + ".key", key)
        if not key and op != "Exists":
            errs.append((p + ".operator", "FieldValueInvalid", "Invalid value: %s: operator must be Exists when "
                         "`key` is empty, which means \"match all values and all keys\"" % q(op)))
        if op == "Exists" and val:
            secs = t.get("tolerationSeconds")
            gostruct = ('core.Toleration{Key:%s, Operator:"Exists", Value:%s, Effect:%s, TolerationSeconds:%s}'
                        % (q(key), q(val), q(eff), "(*int64)(nil)" if secs is None else "(*int64)(%d)" % secs))
            errs.append((p + ".operator", "FieldValueInvalid",
                         "Invalid value: %s: value must be empty when `operator` is 'Exists'" % gostruct))
        elif op in ("Equal", ""):
            errs += label_value_errs(p + ".operator", val)   # sic: the real server names .operator
        elif op not in ("Equal", "Exists", ""):
            errs.append((p + ".operator", "FieldValueNotSupported", 'Unsupported value: %s: supported values: '
                         '"Equal", "Exists"' % q(op)))
        if t.get("tolerationSeconds") is not None and eff != "NoExecute":
            errs.append((p + ".effect", "FieldValueInvalid", "Invalid value: %s: effect must be 'NoExecute' when "
                         "`tolerationSeconds` is set" % q(eff)))
        if eff not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            errs.append((p + ".effect", "FieldValueNotSupported", 'Unsupported value: %s: supported values: '
                         '"NoSchedule", "PreferNoSchedule", "NoExecute"' % q(eff)))
    return errs


FIELD_SELECTOR_KEYS = ("metadata.name",)


def node_requirement_errs(path, rq):
    """One matchExpressions entry: its operator's value count, its key a label name."""
    op, vals = rq.get("operator", ""), rq.get("values") or []
    errs = []
    if op in ("In", "NotIn"):
        if not vals:
            errs.append((path + ".values", "FieldValueRequired",
                         "Required value: must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist"):
        if vals:
            errs.append((path + ".values", "FieldValueForbidden",
                         "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op in ("Gt", "Lt"):
        if len(vals) != 1:
            errs.append((path + ".values", "FieldValueRequired",
                         "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'"))
    else:
        errs.append((path + ".operator", "FieldValueInvalid",
                     "Invalid value: %s: not a valid selector operator" % q(op)))
    return errs + qualified_name_errs(path + ".key", rq.get("key", ""))


def node_field_requirement_errs(path, rq):
    """One matchFields entry: In or NotIn with exactly one value, key metadata.name,
    the value a node name."""
    op, key, vals = rq.get("operator", ""), rq.get("key", ""), rq.get("values") or []
    errs = []
    if op in ("In", "NotIn"):
        if len(vals) != 1:
            errs.append((path + ".values", "FieldValueRequired", "Required value: must be only one value when "
                         "`operator` is 'In' or 'NotIn' for node field selector"))
    else:
        errs.append((path + ".operator", "FieldValueInvalid",
                     "Invalid value: %s: not a valid selector operator" % q(op)))
    if key not in FIELD_SELECTOR_KEYS:
        errs.append((path + ".key", "FieldValueInvalid", "Invalid value: %s: not a valid field selector key" % q(key)))
    else:
        for i, v in enumerate(vals):
            errs += subdomain_errs("%s.values[%d]" % (path, i), v)
    return errs


def node_selector_term_errs(path, term):
    errs = []
    for j, rq in enumerate((term or {}).get("matchExpressions") or []):
        errs += node_requirement_errs("%s.matchExpressions[%d]" % (path, j), rq)
    for j, rq in enumerate((term or {}).get("matchFields") or []):
        errs += node_field_requirement_errs("%s.matchFields[%d]" % (path, j), rq)
    return errs


def node_affinity_errs(path, na):
    """spec.affinity.nodeAffinity: a required selector needs a term; preferred terms
    weigh 1-100; every term's requirements as above."""
    errs = []
    req = (na or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is not None:
        p = path + ".requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        terms = req.get("nodeSelectorTerms") or []
        if not terms:
            errs.append((p, "FieldValueRequired", "Required value: must have at least one node selector term"))
        for i, term in enumerate(terms):
            errs += node_selector_term_errs("%s[%d]" % (p, i), term)
    for i, pref in enumerate((na or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        p = "%s.preferredDuringSchedulingIgnoredDuringExecution[%d]" % (path, i)
        w = pref.get("weight") or 0
        if not 1 <= w <= 100:
            errs.append((p + ".weight", "FieldValueInvalid", "Invalid value: %d: must be in the range 1-100" % w))
        errs += node_selector_term_errs(p + ".preference", pref.get("preference"))
    return errs


def pod_errs(obj):
    spec = obj.get("spec") or {}
    errs = []
    for f in ("hostname", "subdomain"):
        if spec.get(f):
            errs += label_errs("spec." + f, spec[f])
    if spec.get("serviceAccountName"):
        errs += subdomain_errs("spec.serviceAccountName", spec["serviceAccountName"])
    for f in ("priorityClassName", "schedulerName"):
        if spec.get(f):
            errs += subdomain_errs("spec." + f, spec[f])
    for k, v in (spec.get("nodeSelector") or {}).items():
        errs += qualified_name_errs("spec.nodeSelector", k) + label_value_errs("spec.nodeSelector", v)
    errs += node_affinity_errs("spec.affinity.nodeAffinity", (spec.get("affinity") or {}).get("nodeAffinity"))
    errs += toleration_errs("spec.tolerations", spec.get("tolerations"))
    for i, c in enumerate(spec.get("containers") or []):
        p = "spec.containers[%d]" % i
        if not c.get("name"):
            errs.append((p + ".name", "FieldValueRequired", "Required value"))
        else:
            errs += label_errs(p + ".name", c["name"])
        if not c.get("image"):
            errs.append((p + ".image", "FieldValueRequired", "Required value"))
        errs += container_resource_errs(p + ".resources", c.get("resources"))
    return errs


def role_errs(obj):
    errs = []
    for i, r in enumerate(obj.get("rules") or []):
        p = "rules[%d]" % i
        if not r.get("verbs"):
            errs.append((p + ".verbs", "FieldValueRequired", "Required value: verbs must contain at least one value"))
        if r.get("nonResourceURLs"):
            if obj.get("kind") == "Role" or "namespace" in obj.get("metadata", {}):
                errs.append((p + ".nonResourceURLs", "FieldValueInvalid", "Invalid value: %s: namespaced rules "
                             "cannot apply to non-resource URLs" % q(r["nonResourceURLs"])))
        elif not r.get("apiGroups") or not r.get("resources"):
            if not r.get("apiGroups"):
                errs.append((p + ".apiGroups", "FieldValueRequired", "Required value: resource rules must supply "
                             "at least one api group"))
            if not r.get("resources"):
                errs.append((p + ".resources", "FieldValueRequired", "Required value: resource rules must supply "
                             "at least one resource"))
    return errs


def binding_errs(obj):
    errs = []
    ref = obj.get("roleRef") or {}
    if ref.get("apiGroup") != "rbac.authorization.k8s.io":
        errs.append(("roleRef.apiGroup", "FieldValueNotSupported", 'Unsupported value: %s: supported values: '
                     '"rbac.authorization.k8s.io"' % q(ref.get("apiGroup", ""))))
    kinds = ("Role", "ClusterRole") if "namespace" in obj.get("metadata", {}) else ("ClusterRole",)
    if ref.get("kind") not in kinds:
        errs.append(("roleRef.kind", "FieldValueNotSupported", "Unsupported value: %s: supported values: %s"
                     % (q(ref.get("kind", "")), ", ".join(q(k) for k in kinds))))
    if not ref.get("name"):
        errs.append(("roleRef.name", "FieldValueRequired", "Required value"))
    for i, s in enumerate(obj.get("subjects") or []):
        p = "subjects[%d]" % i
        if s.get("kind") == "ServiceAccount":
            if s.get("apiGroup"):
                errs.append((p + ".apiGroup", "FieldValueNotSupported", 'Unsupported value: %s: supported values: '
                             '""' % q(s["apiGroup"])))
            if not s.get("namespace") and "namespace" not in obj.get("metadata", {}):
                errs.append((p + ".namespace", "FieldValueRequired", "Required value"))
        elif s.get("kind") not in ("User", "Group"):
            errs.append((p + ".kind", "FieldValueNotSupported", 'Unsupported value: %s: supported values: '
                         '"ServiceAccount", "User", "Group"' % q(s.get("kind", ""))))
        if not s.get("name"):
            errs.append((p + ".name", "FieldValueRequired", "Required value"))
    return errs


def name_errs(rtype, name):
    """metadata.name as the type's own name validation judges it: Services are
    DNS-1035 labels, namespaces DNS-1123 labels, RBAC objects path segments,
    everything else DNS-1123 subdomains."""
    r = rtype.resource
    if r == "services":
        return label_errs("metadata.name", name, dns1035=True)
    if r == "namespaces":
        return label_errs("metadata.name", name)
    if r in ("roles", "clusterroles", "rolebindings", "clusterrolebindings"):
        for bad in ("/", "%"):
            if bad in name:
                return [("metadata.name", "FieldValueInvalid", "Invalid value: %s: may not contain '%s'"
                         % (q(name), bad))]
        if name in (".", ".."):
            return [("metadata.name", "FieldValueInvalid", "Invalid value: %s: may not be '%s'" % (q(name), name))]
        return []
    return subdomain_errs("metadata.name", name)


WORKLOADS = ("deployments", "replicasets", "statefulsets", "daemonsets", "jobs")


def template_errs(obj):
    """A workload's pod template labels, as ValidatePodTemplateSpec (path
    spec.template.labels) and the selector check of apps' validation
    judge them."""
    spec = obj.get("spec") or {}
    tmpl = spec.get("template") or {}
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    errs = []
    for k, v in labels.items():
        errs += qualified_name_errs("spec.template.labels", k)
        errs += label_value_errs("spec.template.labels", v)
    want = (spec.get("selector") or {}).get("matchLabels") or {}
    if want and any(labels.get(k) != v for k, v in want.items()):
        shown = ", ".join('"%s":"%s"' % (k, labels[k]) for k in sorted(labels))
        errs.append(("spec.template.metadata.labels", "FieldValueInvalid",
                     "Invalid value: map[string]string{%s}: `selector` does not match template `labels`"
                     % shown))
    return errs


def validate_builtin(rtype, obj):
    """422 field errors of a built-in object (after the name check)."""
    r = rtype.resource
    if r == "pods":
        return pod_errs(obj)
    if r in WORKLOADS:
        return template_errs(obj)
    if r in ("roles", "clusterroles"):
        return role_errs(obj)
    if r in ("rolebindings", "clusterrolebindings"):
        return binding_errs(obj)
    return []


# --- pod updates ------------------------------------------------------------------

UPDATABLE_POD_SPEC_FIELDS = [
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
]
MAX_INT32 = 2 ** 31 - 1


def _semantic(v):
    """A value with nulls, empty strings, lists and maps dropped: Go's omitempty
    and Semantic.DeepEqual see those as unset."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            x = _semantic(x)
            if x is not None and x != "" and x != [] and x != {}:
                out[k] = x
        return out
    if isinstance(v, list):
        return [_semantic(x) for x in v]
    return v


def _spec_diff(old, new, path="spec"):
    """Lines '- path: old' / '+ path: new' for each leaf that differs: an
    approximation of the cmp.Diff a real server appends."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            out += _spec_diff(old.get(k), new.get(k), "%s.%s" % (path, k))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out += _spec_diff(a, b, "%s[%d]" % (path, i))
        return out
    if old == new:
        return []
    import json
    return ["- \t%s: %s" % (path, json.dumps(old)), "+ \t%s: %s" % (path, json.dumps(new))]


def _same_toleration(old, new):
    a = {k: v for k, v in old.items() if k != "tolerationSeconds"}
    b = {k: v for k, v in new.items() if k != "tolerationSeconds"}
    return _semantic(a) == _semantic(b)


def pod_update_errs(old, new):
    """Field errors of a pod update (not status) as ValidatePodUpdate words them."""
    os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
    for f in ("containers", "initContainers"):
        if len(os_.get(f) or []) != len(ns_.get(f) or []):
            return [("spec." + f, "FieldValueForbidden", "Forbidden: pod updates may not add or remove containers")]
    errs = []
    new_ads, old_ads = ns_.get("activeDeadlineSeconds"), os_.get("activeDeadlineSeconds")
    if new_ads is not None:
        if not isinstance(new_ads, int) or new_ads < 0 or new_ads > MAX_INT32:
            return errs + [("spec.activeDeadlineSeconds", "FieldValueInvalid", "Invalid value: %s: must be between "
                            "0 and %d, inclusive" % (new_ads, MAX_INT32))]
        if old_ads is not None and old_ads < new_ads:
            return errs + [("spec.activeDeadlineSeconds", "FieldValueInvalid", "Invalid value: %d: must be less "
                            "than or equal to previous value" % new_ads)]
    elif old_ads is not None:
        errs.append(("spec.activeDeadlineSeconds", "FieldValueInvalid", 'Invalid value: "null": must not update '
                     "from a positive integer to nil value"))
    new_tols = ns_.get("tolerations") or []
    for t in os_.get("tolerations") or []:
        if not any(_same_toleration(t, n) for n in new_tols):
            errs.append(("spec.tolerations", "FieldValueForbidden",
                         "Forbidden: existing toleration can not be modified except its tolerationSeconds"))
            break
    errs += _gate_errs(os_, ns_)
    munged = dict(ns_)
    if os_.get("schedulingGates"):
        # a gated pod's nodeSelector may grow (1.27+, KEP-3838), as Kueue's ungating uses
        old_sel, new_sel = os_.get("nodeSelector") or {}, ns_.get("nodeSelector") or {}
        if any(new_sel.get(k) != v for k, v in old_sel.items()):
            errs.append(("spec.nodeSelector", "FieldValueInvalid", "Invalid value: map[string]string{%s}: only "
                         "additions to spec.nodeSelector are allowed (no mutations or deletions)"
                         % ", ".join("%s:%s" % (q(k), q(v)) for k, v in sorted(new_sel.items()))))
        munged.pop("nodeSelector", None)
        if "nodeSelector" in os_:
            munged["nodeSelector"] = os_["nodeSelector"]
    for f in ("containers", "initContainers"):
        if f in munged:
            munged[f] = [dict(c, image=o.get("image")) for c, o in zip(ns_[f], os_.get(f) or [])]
    for f in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
        munged.pop(f, None)
        if f in os_:
            munged[f] = os_[f]
    old_grace = os_.get("terminationGracePeriodSeconds")
    if old_grace is not None and old_grace < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    a, b = _semantic(os_), _semantic(munged)
    if a != b:
        diff = "\n".join(["  core.PodSpec{"] + _spec_diff(a, b) + ["  }"])
        errs.append(("spec", "FieldValueForbidden", "Forbidden: pod updates may not change fields other than %s\n%s"
                     % (",".join(UPDATABLE_POD_SPEC_FIELDS), diff)))
    return errs


def _gate_errs(old_spec, new_spec):
    """validateOnlyDeletedSchedulingGates: a pod's scheduling gates can only be removed."""
    had = {g.get("name") for g in old_spec.get("schedulingGates") or []}
    return [("spec.schedulingGates[%d].name" % i, "FieldValueForbidden",
             "Forbidden: only deletion is allowed, but found new scheduling gate '%s'" % g.get("name"))
            for i, g in enumerate(new_spec.get("schedulingGates") or []) if g.get("name") not in had]


def binding_target_errs(binding):
    """ValidatePodBinding: the target must be a Node (or kind left empty) and named."""
    target = binding.get("target") or {}
    errs = []
    kind = target.get("kind") or ""
    if kind and kind != "Node":
        errs.append(("target.kind", "FieldValueNotSupported",
                     'Unsupported value: %s: supported values: "Node", "<empty>"' % q(kind)))
    if not target.get("name"):
        errs.append(("target.name", "FieldValueRequired", "Required value"))
    return errs
