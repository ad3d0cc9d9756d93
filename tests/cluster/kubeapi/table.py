# kubeapi/table.py: server-side printing (Accept: ...;as=Table;g=meta.k8s.io):
# a CRD's additionalPrinterColumns through a small JSONPath evaluator, and the
# usual columns of the built-in types.

import datetime
import re


# --- JSONPath subset: .a.b, [n], [*], [?(@.k=="v")] ------------------------------

_TOKEN = re.compile(r"""\.([A-Za-z0-9_\-$]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*==\s*["']([^"']*)["']\)\]|\[['"]([^'"]+)['"]\]""")


def jsonpath(obj, expr):
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    if expr.startswith("$"):
        expr = expr[1:]
    values = [obj]
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            return []
        pos = m.end()
        name, idx, fkey, fval, qname = m.groups()
        nxt = []
        for v in values:
            if name is not None or qname is not None:
                if isinstance(v, dict) and (name or qname) in v:
                    nxt.append(v[name or qname])
            elif idx is not None:
                if isinstance(v, list):
                    nxt.extend(v if idx == "*" else v[int(idx):int(idx) + 1])
            else:
                if isinstance(v, list):
                    for item in v:
                        cur = item
                        for part in fkey.split("."):
                            cur = cur.get(part) if isinstance(cur, dict) else None
                        if cur is not None and str(cur) == fval:
                            nxt.append(item)
        values = nxt
    return values


def _cell(values, col_type):
    if not values:
        return None
    v = values[0] if len(values) == 1 else ",".join(str(x) for x in values)
    if col_type == "date":
        return since(v) if isinstance(v, str) else v
    if col_type == "integer" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    if col_type == "string" and not isinstance(v, str):
        return v if isinstance(v, (int, float, bool)) else str(v)
    return v


# --- columns of the built-in types -------------------------------------------------

def _col(name, type_="string", fmt="", priority=0, desc=""):
    return {"name": name, "type": type_, "format": fmt, "description": desc or name, "priority": priority}


NAME = _col("Name", fmt="name", desc="Name must be unique within a namespace.")
AGE = _col("Age", desc="CreationTimestamp is a timestamp representing the server time when this object was created.")


def human_duration(seconds):
    """Go's duration.HumanDuration, as kubectl shows ages."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    m = s // 60
    if m < 10:
        return "%dm" % m if s % 60 == 0 else "%dm%ds" % (m, s % 60)
    if m < 180:
        return "%dm" % m
    h = s // 3600
    if h < 8:
        return "%dh" % h if m % 60 == 0 else "%dh%dm" % (h, m % 60)
    if h < 48:
        return "%dh" % h
    if h < 24 * 8:
        return "%dd" % (h // 24) if h % 24 == 0 else "%dd%dh" % (h // 24, h % 24)
    if h < 24 * 365 * 2:
        return "%dd" % (h // 24)
    if h < 24 * 365 * 8:
        dy = (h // 24) % 365
        return "%dy" % (h // 24 // 365) if dy == 0 else "%dy%dd" % (h // 24 // 365, dy)
    return "%dy" % (h // 24 // 365)


def since(ts):
    if not ts:
        return "<unknown>"
    try:
        t = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return "<unknown>"
    return human_duration((datetime.datetime.now(datetime.timezone.utc) - t).total_seconds())


def _age(o):
    return since(o["metadata"].get("creationTimestamp"))


def _pod_row(o):
    spec, st = o.get("spec") or {}, o.get("status") or {}
    statuses = st.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(c.get("restartCount", 0) for c in statuses)
    reason = st.get("reason") or st.get("phase") or "Pending"
    for c in statuses:
        state = c.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason"):
            reason = state["terminated"]["reason"]
    if o["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return [o["metadata"]["name"], "%d/%d" % (ready, len(spec.get("containers") or [])), reason,
            restarts, _age(o), st.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
            "<none>", "<none>"]


def _svc_ports(o):
    ports = (o.get("spec") or {}).get("ports") or []
    return ",".join("%s/%s" % (p.get("port"), p.get("protocol", "TCP")) for p in ports) or "<none>"


BUILTIN_COLUMNS = {
    "pods": ([NAME, _col("Ready"), _col("Status"), _col("Restarts", "string"), AGE,
              _col("IP", priority=1), _col("Node", priority=1),
              _col("Nominated Node", priority=1), _col("Readiness Gates", priority=1)], _pod_row),
    "services": ([NAME, _col("Type"), _col("Cluster-IP"), _col("External-IP"), _col("Port(s)"), AGE],
                 lambda o: [o["metadata"]["name"], (o.get("spec") or {}).get("type", "ClusterIP"),
                            (o.get("spec") or {}).get("clusterIP", "None"), "<none>", _svc_ports(o), _age(o)]),
    "namespaces": ([NAME, _col("Status"), AGE],
                   lambda o: [o["metadata"]["name"], (o.get("status") or {}).get("phase", "Active"), _age(o)]),
    "configmaps": ([NAME, _col("Data", "integer"), AGE],
                   lambda o: [o["metadata"]["name"], len(o.get("data") or {}) + len(o.get("binaryData") or {}), _age(o)]),
    "secrets": ([NAME, _col("Type"), _col("Data", "integer"), AGE],
                lambda o: [o["metadata"]["name"], o.get("type", "Opaque"), len(o.get("data") or {}), _age(o)]),
    "deployments": ([NAME, _col("Ready"), _col("Up-to-date", "integer"), _col("Available", "integer"), AGE],
                    lambda o: [o["metadata"]["name"], "%d/%d" % ((o.get("status") or {}).get("readyReplicas", 0),
                                                                 (o.get("spec") or {}).get("replicas", 1)),
                               (o.get("status") or {}).get("updatedReplicas", 0),
                               (o.get("status") or {}).get("availableReplicas", 0), _age(o)]),
    "leases": ([NAME, _col("Holder"), AGE],
               lambda o: [o["metadata"]["name"], (o.get("spec") or {}).get("holderIdentity", ""), _age(o)]),
    "customresourcedefinitions": ([NAME, _col("Created At", "date")],
                                  lambda o: [o["metadata"]["name"], o["metadata"].get("creationTimestamp")]),
    "events": ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")],
               lambda o: [since(o.get("lastTimestamp") or o.get("eventTime") or o["metadata"].get("creationTimestamp")), o.get("type", ""),
                          o.get("reason", ""),
                          "%s/%s" % ((o.get("involvedObject") or {}).get("kind", "").lower(),
                                     (o.get("involvedObject") or {}).get("name", "")),
                          o.get("message", "")]),
}


def columns_and_row(rtype, version):
    """(columnDefinitions, row function) for a type."""
    if rtype.crd:
        cols = [NAME]
        specs = rtype.printer_columns.get(version) or []
        for c in specs:
            cols.append(_col(c["name"], c.get("type", "string"), c.get("format", ""),
                             c.get("priority", 0), c.get("description", "")))
        if not specs:
            cols.append(_col("Age", "date"))
            specs = [{"jsonPath": ".metadata.creationTimestamp", "type": "date"}]

        def row(o):
            return [o["metadata"]["name"]] + [_cell(jsonpath(o, c["jsonPath"]), c.get("type", "string"))
                                              for c in specs]
        return cols, row
    if rtype.resource in BUILTIN_COLUMNS:
        return BUILTIN_COLUMNS[rtype.resource]
    return [NAME, AGE], lambda o: [o["metadata"]["name"], _age(o)]


def row_object(obj, include):
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(rtype, version, objs, include="Metadata", list_meta=None, with_columns=True):
    cols, rowf = columns_and_row(rtype, version)
    rows = []
    for o in objs:
        r = {"cells": rowf(o)}
        ob = row_object(o, include)
        if ob is not None:
            r["object"] = ob
        rows.append(r)
    t = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta or {}, "rows": rows}
    t["columnDefinitions"] = cols if with_columns else None
    return t


def wants_table(accept):
    return "as=Table" in (accept or "")
