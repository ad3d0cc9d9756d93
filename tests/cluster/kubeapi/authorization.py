# kubeapi/authorization.py: the authorization.k8s.io/v1 API (SelfSubjectAccessReview,
# SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectRulesReview:
# create-only, never stored; `kubectl auth can-i`, `--list`) answered by the
# same RBAC code (kubeapi/rbac.py) that authorizes every request, and user
# impersonation (the Impersonate-User / -Group / -Uid / -Extra-* headers,
# `kubectl --as`), each checked as k8s.io/apiserver's impersonation filter
# checks it (verb `impersonate`), with the real server's wording.
# Must not: store a review, or let an impersonation through unchecked.

import urllib.parse

from . import errors, rbac
from .auth import User, split_sa_username

GROUP = "authorization.k8s.io"
VERSION = "v1"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"

# (resource, kind, namespaced), as discovery lists them
RESOURCES = [
    ("localsubjectaccessreviews", "LocalSubjectAccessReview", True),
    ("selfsubjectaccessreviews", "SelfSubjectAccessReview", False),
    ("selfsubjectrulesreviews", "SelfSubjectRulesReview", False),
    ("subjectaccessreviews", "SubjectAccessReview", False),
]
KINDS = {r: (k, ns) for r, k, ns in RESOURCES}

RESOURCE_ATTRIBUTES = ("namespace", "verb", "group", "version", "resource", "subresource", "name")
NON_RESOURCE_ATTRIBUTES = ("path", "verb")


class PlainError(Exception):
    """An answer k8s.io/apiserver writes as text/plain, not as a Status."""

    def __init__(self, code, text):
        super().__init__(text)
        self.code, self.text = code, text


def resource_list():
    return [{"name": r, "singularName": k.lower(), "namespaced": ns, "kind": k, "verbs": ["create"]}
            for r, k, ns in RESOURCES]


# --- impersonation ----------------------------------------------------------------------

IMPERSONATE_EXTRA = "impersonate-extra-"


def impersonate(authz, requestor, headers, request_uri):
    """The user a request runs as: requestor itself, or the one its
    Impersonate-* headers name once requestor may impersonate each part
    (403 in the real server's words otherwise)."""
    name = headers.get("Impersonate-User") or ""
    groups_given = headers.get_all("Impersonate-Group") or []
    uid = headers.get("Impersonate-Uid") or ""
    extra = {}
    for k, v in headers.items():
        if k.lower().startswith(IMPERSONATE_EXTRA):
            key = urllib.parse.unquote(k[len(IMPERSONATE_EXTRA):].lower())
            extra.setdefault(key, []).append(v)
    if not (name or groups_given or uid or extra):
        return requestor
    if not name:
        # buildImpersonationRequests' error, answered by responsewriters.InternalError
        raise PlainError(500, "Internal Server Error: %s: requested impersonation of %s without "
                         "impersonating a user" % (_goq(request_uri), ", ".join(
                             x for x, on in (("groups", groups_given), ("extra", extra), ("uid", uid)) if on)))
    checks = []
    sa = split_sa_username(name)
    if sa:
        checks.append(rbac.Attributes("impersonate", "", "serviceaccounts", "", sa[0], sa[1]))
        groups = [] if groups_given else ["system:serviceaccounts", "system:serviceaccounts:" + sa[0]]
    else:
        checks.append(rbac.Attributes("impersonate", "", "users", "", "", name))
        groups = []
    for g in groups_given:
        checks.append(rbac.Attributes("impersonate", "", "groups", "", "", g))
        groups.append(g)
    for key, values in extra.items():
        for v in values:
            checks.append(rbac.Attributes("impersonate", "authentication.k8s.io", "userextras", key, "", v))
    if uid:
        checks.append(rbac.Attributes("impersonate", "authentication.k8s.io", "uids", "", "", uid))
    for a in checks:
        authz.check(requestor, a)
    if name != "system:anonymous" and not any(g in (AUTHENTICATED, UNAUTHENTICATED) for g in groups):
        groups.append(AUTHENTICATED)
    return User(name, groups, sa=sa, uid=uid, extra=extra)


def _goq(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


# --- reviews ------------------------------------------------------------------------------

def _attrs(d, keys):
    """The attributes as the server echoes them: known fields, empty ones omitted."""
    return {k: d[k] for k in keys if isinstance(d.get(k), str) and d[k]}


def _go_struct(kind, d, keys):
    """Go's %#v of an internal authorization struct (the bad value of a field error)."""
    return "authorization.%s{%s}" % (kind, ", ".join(
        "%s:%s" % (k[0].upper() + k[1:], _goq(d.get(k) or "")) for k in keys))


def _spec_errors(spec, subject):
    """ValidateSubjectAccessReviewSpec / ValidateSelfSubjectAccessReviewSpec (1.26)."""
    errs = []
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if ra is not None and nra is not None:
        errs.append(("spec.nonResourceAttributes", "FieldValueInvalid", "Invalid value: %s: cannot be specified "
                     "in combination with resourceAttributes"
                     % _go_struct("NonResourceAttributes", nra, NON_RESOURCE_ATTRIBUTES)))
    if ra is None and nra is None:
        errs.append(("spec.resourceAttributes", "FieldValueInvalid", 'Invalid value: "null": exactly one of '
                     "nonResourceAttributes or resourceAttributes must be specified"))
    if subject and not spec.get("user") and not spec.get("groups"):
        errs.append(("spec.user", "FieldValueInvalid", 'Invalid value: "": at least one of user or group must '
                     "be specified"))
    return errs


def _invalid(errs):
    """apierrors.NewInvalid(authorizationapi.Kind(obj.Kind), "", errs): the
    decoded internal object carries no kind, so the message starts
    '.authorization.k8s.io "" is invalid' and details name no kind."""
    e = errors.invalid("", GROUP, "", errs)
    e.details.pop("name", None)
    e.details.pop("kind", None)
    return e


def _attributes(spec):
    ra = spec.get("resourceAttributes")
    if ra is not None:
        return rbac.Attributes(ra.get("verb") or "", ra.get("group") or "", ra.get("resource") or "",
                               ra.get("subresource") or "", ra.get("namespace") or "", ra.get("name") or "")
    nra = spec.get("nonResourceAttributes") or {}
    return rbac.Attributes(nra.get("verb") or "", path=nra.get("path") or "", resource_request=False)


def _echo_spec(spec, subject):
    out = {}
    if spec.get("resourceAttributes") is not None:
        out["resourceAttributes"] = _attrs(spec["resourceAttributes"], RESOURCE_ATTRIBUTES)
    if spec.get("nonResourceAttributes") is not None:
        out["nonResourceAttributes"] = _attrs(spec["nonResourceAttributes"], NON_RESOURCE_ATTRIBUTES)
    if subject:
        for k in ("user", "groups", "extra", "uid"):
            if spec.get(k):
                out[k] = spec[k]
    return out


def review(authz, user, resource, ns, body):
    """The answer (201) to POST /apis/authorization.k8s.io/v1/[namespaces/NS/]RESOURCE."""
    body = body if isinstance(body, dict) else {}
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    kind = KINDS[resource][0]
    meta = {"creationTimestamp": None}
    if resource == "selfsubjectrulesreviews":
        return _rules_review(authz, user, spec)
    subject = resource != "selfsubjectaccessreviews"
    errs = _spec_errors(spec, subject)
    if resource == "localsubjectaccessreviews":
        obj_ns = (body.get("metadata") or {}).get("namespace") or ns
        if obj_ns != ns:
            raise errors.bad_request("the namespace of the provided object does not match the namespace sent "
                                     "on the request")
        ra = spec.get("resourceAttributes")
        if ra is not None and (ra.get("namespace") or "") != ns:
            errs.append(("spec.resourceAttributes.namespace", "FieldValueInvalid",
                         "Invalid value: %s: must match metadata.namespace" % _goq(ra.get("namespace") or "")))
        if spec.get("nonResourceAttributes") is not None:
            errs.append(("spec.nonResourceAttributes", "FieldValueInvalid", "Invalid value: %s: disallowed on "
                         "this kind of request" % _go_struct("NonResourceAttributes", spec["nonResourceAttributes"],
                                                             NON_RESOURCE_ATTRIBUTES)))
        meta = {"namespace": ns, "creationTimestamp": None}
    if errs:
        raise _invalid(errs)
    if subject:
        name = spec.get("user") or ""
        subject_user = User(name, list(spec.get("groups") or []), sa=split_sa_username(name),
                            uid=spec.get("uid") or "", extra=dict(spec.get("extra") or {}))
    else:
        subject_user = user
    allowed, reason = authz.decide(subject_user, _attributes(spec))
    status = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {"kind": kind, "apiVersion": GROUP + "/" + VERSION, "metadata": meta,
            "spec": _echo_spec(spec, subject), "status": status}


def _rules_review(authz, user, spec):
    ns = spec.get("namespace") or ""
    if not ns:
        raise errors.bad_request("no namespace on request")
    resource_rules, non_resource_rules = [], []
    if user.admin:      # the privileged-group authorizer's rules come first
        resource_rules.append({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})
        non_resource_rules.append({"verbs": ["*"], "nonResourceURLs": ["*"]})
    for r in authz.rules_for(user, ns):
        if r.get("resources"):
            rr = {"verbs": list(r.get("verbs") or [])}
            for k in ("apiGroups", "resources", "resourceNames"):
                if r.get(k):
                    rr[k] = list(r[k])
            resource_rules.append(rr)
        if r.get("nonResourceURLs"):
            non_resource_rules.append({"verbs": list(r.get("verbs") or []),
                                       "nonResourceURLs": list(r["nonResourceURLs"])})
    return {"kind": "SelfSubjectRulesReview", "apiVersion": GROUP + "/" + VERSION,
            "metadata": {"creationTimestamp": None}, "spec": {},
            "status": {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                       "incomplete": False}}
