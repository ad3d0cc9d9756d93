# kubeapi/rbac.py: authorization as the real server's RBAC authorizer does it
# (Roles, ClusterRoles, RoleBindings, ClusterRoleBindings: verbs, apiGroups,
# resources with subresources, resourceNames, nonResourceURLs), with the 403
# wording of k8s.io/apiserver, plus the bootstrap policy every cluster has
# (discovery, /version, /healthz, self-reviews for authenticated users), and
# RBAC's escalation prevention on writes of roles and bindings: a user may
# only grant what it holds, unless it has the `escalate` / `bind` verbs.
# Must not: decide anything for system:masters (they may do everything).

from dataclasses import dataclass

from . import errors

RBAC_GROUP = "rbac.authorization.k8s.io"

# system:discovery, system:public-info-viewer and system:basic-user, bound to
# system:authenticated in every cluster (public-info-viewer to
# system:unauthenticated too): what a token may do with no binding.
# (binding = role name, rules, groups bound)
BOOTSTRAP = [
    ("system:discovery", [
        {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*",
                                               "/version", "/version/", "/healthz", "/livez", "/readyz"]}],
     ["system:authenticated"]),
    ("system:public-info-viewer", [
        {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"]}],
     ["system:authenticated", "system:unauthenticated"]),
    ("system:basic-user", [
        {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
         "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
        {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]}],
     ["system:authenticated"]),
]
BOOTSTRAP_RULES = [r for _, rules, _ in BOOTSTRAP for r in rules]


@dataclass
class Attributes:
    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True


def _has(values, v):
    values = values or []
    return "*" in values or v in values


def _resource_matches(rule, resource, sub):
    combined = resource + ("/" + sub if sub else "")
    rs = rule.get("resources") or []
    return "*" in rs or combined in rs or (bool(sub) and "*/" + sub in rs)


def _url_matches(rule, path):
    for u in rule.get("nonResourceURLs") or []:
        if u == "*" or u == path or (u.endswith("*") and path.startswith(u[:-1])):
            return True
    return False


def rule_allows(rule, a):
    if not _has(rule.get("verbs"), a.verb):
        return False
    if not a.resource_request:
        return _url_matches(rule, a.path)
    if not _has(rule.get("apiGroups"), a.group) or not _resource_matches(rule, a.resource, a.subresource):
        return False
    names = rule.get("resourceNames") or []
    return not names or a.name in names


def _subject_matches(subj, user, binding_ns):
    kind = subj.get("kind")
    if kind == "ServiceAccount":
        return user.sa is not None and user.sa == (subj.get("namespace") or binding_ns, subj.get("name"))
    if kind == "User":
        return subj.get("name") == user.name
    if kind == "Group":
        return subj.get("name") in user.groups
    return False


class Authorizer:
    def __init__(self, store):
        self.store = store

    def _role_rules(self, ref, ns):
        if ref.get("kind") == "ClusterRole":
            role = self.store.peek("clusterroles." + RBAC_GROUP, "", ref.get("name"))
        else:
            role = self.store.peek("roles." + RBAC_GROUP, ns, ref.get("name"))
        return (role or {}).get("rules") or []

    def sourced_rules(self, user, ns):
        """(rule, source) for every rule that applies to user in namespace ns
        ("" = cluster-wide only), in the order the RBAC authorizer visits
        them: source words the binding as the authorizer's reason does."""
        for name, rules, groups in BOOTSTRAP:
            g = next((g for g in groups if g in user.groups), None)
            if g is not None:
                src = 'ClusterRoleBinding "%s" of ClusterRole "%s" to Group "%s"' % (name, name, g)
                for r in rules:
                    yield r, src
        for b in self.store.scan("clusterrolebindings." + RBAC_GROUP, ""):
            subj = next((s for s in b.get("subjects") or [] if _subject_matches(s, user, "")), None)
            if subj is not None:
                ref = b.get("roleRef") or {}
                src = 'ClusterRoleBinding "%s" of %s "%s" to %s' % (
                    b["metadata"]["name"], ref.get("kind"), ref.get("name"), _describe_subject(subj, ""))
                for r in self._role_rules(ref, ""):
                    yield r, src
        if ns:
            for b in self.store.scan("rolebindings." + RBAC_GROUP, ns):
                subj = next((s for s in b.get("subjects") or [] if _subject_matches(s, user, ns)), None)
                if subj is not None:
                    ref = b.get("roleRef") or {}
                    src = 'RoleBinding "%s/%s" of %s "%s" to %s' % (
                        b["metadata"]["name"], ns, ref.get("kind"), ref.get("name"), _describe_subject(subj, ns))
                    for r in self._role_rules(ref, ns):
                        yield r, src

    def rules_for(self, user, ns):
        """Every rule that applies to user in namespace ns ("" = cluster-wide only)."""
        return [r for r, _ in self.sourced_rules(user, ns)]

    def decide(self, user, a):
        """(allowed, reason) as the real server's authorizer chain answers a
        SubjectAccessReview: system:masters allowed with no reason, RBAC's
        "RBAC: allowed by ..." naming the first binding that allows, or no
        opinion (denied stays false) with no reason."""
        if user.admin:
            return True, ""
        for r, src in self.sourced_rules(user, a.namespace):
            if rule_allows(r, a):
                return True, "RBAC: allowed by " + src
        return False, ""

    def allowed(self, user, a):
        if user.admin:
            return True
        return any(rule_allows(r, a) for r in self.rules_for(user, a.namespace))

    def check(self, user, a, rtype=None):
        """Raises the real server's 403 when user may not do a."""
        if not self.allowed(user, a):
            raise forbidden(user, a)

    # --- escalation prevention ------------------------------------------------------

    def confirm_no_escalation(self, user, ns, rules, resource, name):
        """Raises 403 when `rules` grant something user does not hold in ns."""
        if user.admin:
            return
        owner = self.rules_for(user, ns)
        missing = [r for r in _atomic(rules) if not any(_covers(o, r) for o in owner)]
        if missing:
            raise errors.forbidden_named(
                resource, RBAC_GROUP, name,
                "user %s (groups=%s) is attempting to grant RBAC permissions not currently held:\n%s"
                % (_goq(user.name), "[" + " ".join(_goq(g) for g in user.groups) + "]",
                   "\n".join(_compact_rules(missing))))

    def may_bind(self, user, ns, role_ref):
        """The `bind` verb on the referenced role."""
        a = Attributes("bind", RBAC_GROUP, "clusterroles" if role_ref.get("kind") == "ClusterRole" else "roles",
                       "", ns if role_ref.get("kind") != "ClusterRole" else "", role_ref.get("name", ""))
        return self.allowed(user, a)

    def may_escalate(self, user, ns, resource):
        return self.allowed(user, Attributes("escalate", RBAC_GROUP, resource, "", ns))

    def role_ref_rules(self, ref, ns):
        return self._role_rules(ref, ns)


def _describe_subject(s, binding_ns):
    if s.get("kind") == "ServiceAccount":
        return 'ServiceAccount "%s/%s"' % (s.get("name"), s.get("namespace") or binding_ns)
    return '%s "%s"' % (s.get("kind"), s.get("name"))


def _goq(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def _atomic(rules):
    """Rules broken into one verb, group, resource and name each, as RBAC's
    escalation check does."""
    out = []
    for r in rules:
        verbs = r.get("verbs") or []
        if r.get("nonResourceURLs"):
            for u in r["nonResourceURLs"]:
                for v in verbs:
                    out.append({"verbs": [v], "nonResourceURLs": [u]})
            continue
        for g in r.get("apiGroups") or []:
            for res in r.get("resources") or []:
                for v in verbs:
                    names = r.get("resourceNames") or []
                    if names:
                        for n in names:
                            out.append({"verbs": [v], "apiGroups": [g], "resources": [res], "resourceNames": [n]})
                    else:
                        out.append({"verbs": [v], "apiGroups": [g], "resources": [res]})
    return out


def _covers(owner, r):
    """Whether owner rule grants everything atomic rule r grants."""
    if not _has(owner.get("verbs"), r["verbs"][0]):
        return False
    if "nonResourceURLs" in r:
        return _url_matches(owner, r["nonResourceURLs"][0]) if not r["nonResourceURLs"][0].endswith("*") \
            else any(u == "*" or (u.endswith("*") and r["nonResourceURLs"][0].startswith(u[:-1]))
                     for u in owner.get("nonResourceURLs") or [])
    if not _has(owner.get("apiGroups"), r["apiGroups"][0]):
        return False
    res = r["resources"][0]
    ors = owner.get("resources") or []
    sub = res.split("/", 1)[1] if "/" in res else ""
    if not ("*" in ors or res in ors or (sub and "*/" + sub in ors)):
        return False
    onames = owner.get("resourceNames") or []
    if not onames:
        return True
    return bool(r.get("resourceNames")) and r["resourceNames"][0] in onames


def _compact(r):
    """rbacv1helpers.CompactString: Go's %q of each []string, e.g. ["get" "list"]."""
    parts = []
    for key, label in (("apiGroups", "APIGroups"), ("resources", "Resources"),
                       ("nonResourceURLs", "NonResourceURLs"), ("resourceNames", "ResourceNames"),
                       ("verbs", "Verbs")):
        if r.get(key):
            parts.append("%s:[%s]" % (label, " ".join(_goq(v) for v in r[key])))
    return "{" + ", ".join(parts) + "}"


def _compact_rules(atoms):
    """CompactRules: atoms that share one group and resource (and at most one
    name) become one rule with their verbs in order; lines sorted."""
    merged, order = {}, []
    for a in atoms:
        if "nonResourceURLs" in a:
            key = ("url", a["nonResourceURLs"][0], a["verbs"][0])
        else:
            key = (a["apiGroups"][0], a["resources"][0], tuple(a.get("resourceNames") or []))
        if key in merged and key[0] != "url":
            merged[key]["verbs"].append(a["verbs"][0])
        else:
            merged[key] = {k: list(v) for k, v in a.items()}
            order.append(key)
    return sorted(_compact(merged[k]) for k in order)


def forbidden(user, a):
    """The real server's 403 for an authorization refusal."""
    if not a.resource_request:
        return errors.ApiError(403, "Forbidden", 'forbidden: User "%s" cannot %s path "%s"'
                               % (user.name, a.verb, a.path), {})
    resource = a.resource + ("/" + a.subresource if a.subresource else "")
    if a.namespace:
        why = 'User "%s" cannot %s resource "%s" in API group "%s" in the namespace "%s"' % (
            user.name, a.verb, resource, a.group, a.namespace)
    else:
        why = 'User "%s" cannot %s resource "%s" in API group "%s" at the cluster scope' % (
            user.name, a.verb, resource, a.group)
    return errors.forbidden_named(a.resource, a.group, a.name, why)
