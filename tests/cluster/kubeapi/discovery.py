# kubeapi/discovery.py: /version, the unaggregated discovery documents (/api,
# /api/v1, /apis, /apis/G, /apis/G/V) and the OpenAPI v3 documents kubectl
# reads to learn that the server does field validation (the PATCH operation
# of every kind lists the fieldValidation parameter).

import hashlib
import json

from . import authorization
from .resources import VERBS

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-vitjob-test", "gitCommit": "0" * 40,
           "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.0",
           "compiler": "gc", "platform": "linux/amd64"}


def api_versions(address):
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def _group(name, versions):
    vs = [{"groupVersion": "%s/%s" % (name, v), "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def _groups(registry):
    """The served groups: the registry's and authorization.k8s.io (never stored)."""
    out = dict(registry.groups())
    out.setdefault(authorization.GROUP, [authorization.VERSION])
    return out


def api_group_list(registry):
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g, vs) for g, vs in _groups(registry).items()]}


def api_group(registry, group):
    vs = _groups(registry).get(group)
    if not vs:
        return None
    return dict(_group(group, vs), kind="APIGroup", apiVersion="v1")


def resource_list(registry, group, version):
    if (group, version) == (authorization.GROUP, authorization.VERSION):
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group + "/" + version,
                "resources": authorization.resource_list()}
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources = []
    for rt in sorted(types, key=lambda t: t.resource):
        r = {"name": rt.resource, "singularName": rt.singular, "namespaced": rt.namespaced,
             "kind": rt.kind, "verbs": VERBS}
        if rt.short_names:
            r["shortNames"] = rt.short_names
        if rt.categories:
            r["categories"] = rt.categories
        resources.append(r)
        if rt.status:
            resources.append({"name": rt.resource + "/status", "singularName": "", "namespaced": rt.namespaced,
                              "kind": rt.kind, "verbs": ["get", "patch", "update"]})
        if rt.resource == "pods":      # as a real server lists it (binding: not listed here yet)
            resources.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod",
                              "verbs": ["get"]})
        if rt.resource == "serviceaccounts":
            resources.append({"name": "serviceaccounts/token", "singularName": "", "namespaced": True,
                              "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
                              "verbs": ["create"]})
    gv = version if not group else group + "/" + version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


# --- OpenAPI v3 ----------------------------------------------------------------------

def _gv_path(group, version):
    return "api/" + version if not group else "apis/%s/%s" % (group, version)


def openapi_gv(registry, group, version):
    types = registry.in_group_version(group, version)
    if not types:
        return None
    paths = {}
    schemas = {}
    for rt in types:
        gvk = {"group": rt.group, "version": version, "kind": rt.kind}
        base = "/" + _gv_path(group, version) + ("/namespaces/{namespace}" if rt.namespaced else "")
        params = [{"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
                  for n in ("dryRun", "fieldManager", "fieldValidation")]
        op = {"operationId": "patch" + rt.kind, "x-kubernetes-action": "patch",
              "x-kubernetes-group-version-kind": gvk, "parameters": params,
              "responses": {"200": {"description": "OK"}}}
        paths["%s/%s/{name}" % (base, rt.resource)] = {"patch": op}
        if rt.crd and rt.schemas.get(version):
            name = "%s.%s.%s" % (".".join(reversed(rt.group.split("."))), version, rt.kind)
            s = dict(rt.schemas[version])
            s["x-kubernetes-group-version-kind"] = [gvk]
            schemas[name] = s
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": schemas}}


def openapi_root(registry):
    out = {}
    gvs = [("", "v1")] + [(g, v) for g, vs in registry.groups().items() for v in vs]
    for g, v in gvs:
        doc = openapi_gv(registry, g, v)
        h = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:64].upper()
        out[_gv_path(g, v)] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (_gv_path(g, v), h)}
    return {"paths": out}
