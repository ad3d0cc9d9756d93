# kubeapi/resources.py: the resource types the server knows: the built-in
# table (core v1, apps, rbac, coordination, apiextensions) and the types a
# CustomResourceDefinition registers at run time.

from dataclasses import dataclass, field

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass
class ResourceType:
    group: str
    versions: list            # served versions, preferred (storage) first
    resource: str             # plural
    kind: str
    namespaced: bool = True
    short_names: list = field(default_factory=list)
    status: bool = False      # has a status subresource
    generation: bool = False  # metadata.generation counts spec changes
    printer_columns: dict = field(default_factory=dict)   # version -> [column]
    schemas: dict = field(default_factory=dict)           # version -> openAPIV3Schema
    categories: list = field(default_factory=list)
    crd: bool = False

    @property
    def key(self):
        """Store key prefix: 'pods', 'vitjobs.vitjob.dev'."""
        return self.resource + ("." + self.group if self.group else "")

    @property
    def singular(self):
        return self.kind.lower()

    def api_version(self, version):
        return version if not self.group else self.group + "/" + version


def _t(group, versions, resource, kind, **kw):
    return ResourceType(group, versions, resource, kind, **kw)


BUILTIN = [
    _t("", ["v1"], "namespaces", "Namespace", namespaced=False, short_names=["ns"], status=True),
    _t("", ["v1"], "pods", "Pod", short_names=["po"], status=True, categories=["all"]),
    _t("", ["v1"], "services", "Service", short_names=["svc"], status=True, categories=["all"]),
    _t("", ["v1"], "configmaps", "ConfigMap", short_names=["cm"]),
    _t("", ["v1"], "secrets", "Secret"),
    _t("", ["v1"], "events", "Event", short_names=["ev"]),
    _t("", ["v1"], "serviceaccounts", "ServiceAccount", short_names=["sa"]),
    _t("", ["v1"], "endpoints", "Endpoints", short_names=["ep"]),
    _t("", ["v1"], "nodes", "Node", namespaced=False, short_names=["no"], status=True),
    _t("apps", ["v1"], "deployments", "Deployment", short_names=["deploy"], status=True,
       generation=True, categories=["all"]),
    _t("apps", ["v1"], "replicasets", "ReplicaSet", short_names=["rs"], status=True,
       generation=True, categories=["all"]),
    _t("rbac.authorization.k8s.io", ["v1"], "roles", "Role"),
    _t("rbac.authorization.k8s.io", ["v1"], "rolebindings", "RoleBinding"),
    _t("rbac.authorization.k8s.io", ["v1"], "clusterroles", "ClusterRole", namespaced=False),
    _t("rbac.authorization.k8s.io", ["v1"], "clusterrolebindings", "ClusterRoleBinding",
       namespaced=False),
    _t("coordination.k8s.io", ["v1"], "leases", "Lease"),
    _t("apiextensions.k8s.io", ["v1"], "customresourcedefinitions", "CustomResourceDefinition",
       namespaced=False, short_names=["crd", "crds"], status=True, generation=True),
]

# Field selectors each type supports besides metadata.name / metadata.namespace.
FIELD_LABELS = {
    "pods": ["spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
             "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
             "status.podIP", "status.nominatedNodeName"],
    "events": ["involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion",
               "involvedObject.resourceVersion", "involvedObject.fieldPath",
               "reason", "reportingComponent", "source", "type"],
    "secrets": ["type"],
    "namespaces": ["status.phase"],
    "nodes": ["spec.unschedulable"],
    "replicasets": ["status.replicas"],
}


def types_from_crd(crd):
    """The ResourceType a CustomResourceDefinition object defines."""
    spec = crd["spec"]
    names = spec["names"]
    versions = [v for v in spec.get("versions", []) if v.get("served", True)]
    versions.sort(key=lambda v: not v.get("storage", False))
    rt = ResourceType(
        group=spec["group"], versions=[v["name"] for v in versions],
        resource=names["plural"], kind=names["kind"],
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=list(names.get("shortNames", [])),
        categories=list(names.get("categories", [])),
        generation=True, crd=True)
    for v in versions:
        if "status" in (v.get("subresources") or {}):
            rt.status = True
        rt.printer_columns[v["name"]] = v.get("additionalPrinterColumns") or []
        rt.schemas[v["name"]] = (v.get("schema") or {}).get("openAPIV3Schema") or {}
    return rt


class Registry:
    """Types by (group, version, resource); CRDs add and remove theirs."""

    def __init__(self):
        self.types = {}      # key -> ResourceType
        for rt in BUILTIN:
            self.types[rt.key] = rt

    def lookup(self, group, version, resource):
        rt = self.types.get(resource + ("." + group if group else ""))
        if rt is None or version not in rt.versions:
            return None
        return rt

    def by_key(self, key):
        return self.types.get(key)

    def add_crd(self, crd):
        rt = types_from_crd(crd)
        self.types[rt.key] = rt
        return rt

    def remove_crd(self, crd):
        key = crd["spec"]["names"]["plural"] + "." + crd["spec"]["group"]
        return self.types.pop(key, None)

    def groups(self):
        """{group: [versions]} in a stable order, core group excluded."""
        out = {}
        for rt in self.types.values():
            if rt.group:
                vs = out.setdefault(rt.group, [])
                for v in rt.versions:
                    if v not in vs:
                        vs.append(v)
        return out

    def in_group_version(self, group, version):
        return [rt for rt in self.types.values() if rt.group == group and version in rt.versions]
