# kubeapi/managed.py: metadata.managedFields as a real 1.26 server writes
# them on create, update and patch (operation Update): one entry per
# (manager, operation, subresource) with apiVersion, fieldsType FieldsV1,
# fieldsV1 (the fields that manager set, in the f:/k:{...}/v: encoding),
# manager (the fieldManager query parameter, else the User-Agent's program
# name: what precedes its first "/") and time. An update gives its manager
# the fields it added or changed and takes them from every other manager; a
# field removed leaves every set. A request that changes nothing leaves the
# entries as they were. Server-side apply (operation Apply: the applied
# set, pruning, conflicts, force) is kubeapi/apply.py's, on these sets.
# Not modelled: the exact struct/map distinction of every type (a "."
# member is written for list items and for the map-typed fields named in
# MAPS), entries sorted as a real server sorts them on create/update (apply
# sorts them), and fields that admission adds (they are attributed to the
# request's manager here).

import copy
import json

# list fields merged by key (the rest are atomic: "f:field": {}); the key
# fields in the order a real server prints them
LIST_KEYS = {
    "containers": ("name",), "initContainers": ("name",), "ephemeralContainers": ("name",),
    "volumes": ("name",), "env": ("name",), "volumeMounts": ("mountPath",),
    "imagePullSecrets": ("name",), "conditions": ("type",), "ownerReferences": ("uid",),
    "podIPs": ("ip",), "hostIPs": ("ip",), "clusterIPs": None,
}
SET_LISTS = ("finalizers",)          # lists of scalars merged as sets: v:"value"
MAPS = {"labels", "annotations", "data", "binaryData", "stringData", "nodeSelector", "limits",
        "requests", "matchLabels", "selector"}
META_KEPT = ("generateName", "labels", "annotations", "ownerReferences", "finalizers")


def _port_key(parent, item):
    if parent == "ports" and isinstance(item, dict):
        if "containerPort" in item:
            return {"containerPort": item["containerPort"], "protocol": item.get("protocol", "TCP")}
        if "port" in item:
            return {"port": item["port"], "protocol": item.get("protocol", "TCP")}
    return None


def _item_key(field, item):
    k = _port_key(field, item)
    if k is not None:
        return k
    keys = LIST_KEYS.get(field)
    if not keys or not isinstance(item, dict) or not all(x in item for x in keys):
        return None
    return {x: item[x] for x in keys}


def _fields(value, field=None, top=False):
    """The FieldsV1 set of value (a dict of path members to sub-sets)."""
    if isinstance(value, dict):
        out = {}
        if not top and (field in MAPS or field == "."):
            out["."] = {}
        for k, v in value.items():
            out["f:" + k] = _fields(v, k)
        return out
    if isinstance(value, list):
        if field in SET_LISTS and all(isinstance(x, str) for x in value):
            out = {".": {}} if value else {}
            for x in value:
                out["v:" + json.dumps(x)] = {}
            return out
        keyed = [_item_key(field, x) for x in value]
        if not value or any(k is None for k in keyed):
            return {}                       # atomic
        out = {".": {}}
        for k, x in zip(keyed, value):
            sub = _fields(x, ".")
            out["k:" + json.dumps(k, separators=(",", ":"), sort_keys=False)] = sub
        return out
    return {}


def object_fields(obj, subresource=None, has_status=False):
    """The fields of obj a writer sets: status alone for the status
    subresource, else everything but status (when it is a subresource),
    identity and server metadata."""
    if subresource == "status":
        return {"f:status": _fields(obj["status"], "status")} if "status" in obj else {}
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")
            and not (k == "status" and has_status)}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k in META_KEPT}
    if meta:
        body = dict(body, metadata=meta)
    return _fields(body, top=True)


def _leaves(fs, prefix=()):
    """The paths of a set (a member with no children is a leaf, "." too)."""
    for k, v in fs.items():
        if v:
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,)


def _add(fs, path):
    for p in path:
        fs = fs.setdefault(p, {})


def _remove(fs, path):
    """Removes path from fs, then every member left empty that was not a leaf."""
    if not path or path[0] not in fs:
        return
    if len(path) == 1:
        del fs[path[0]]
        return
    sub = fs[path[0]]
    _remove(sub, path[1:])
    if not sub:
        del fs[path[0]]


def _lookup(obj_fs, path):
    for p in path:
        if p not in obj_fs:
            return False
        obj_fs = obj_fs[p]
    return True


def _value_at(value, path):
    """The value at a set path in value (None when absent; list items by key)."""
    for p in path:
        if p == ".":
            return value
        if p.startswith("f:") and isinstance(value, dict):
            value = value.get(p[2:])
        elif p.startswith("k:") and isinstance(value, list):
            want = json.loads(p[2:])
            value = next((x for x in value if isinstance(x, dict) and all(x.get(k, "TCP" if k == "protocol" else None) == v
                                                                         for k, v in want.items())), None)
        elif p.startswith("v:") and isinstance(value, list):
            value = json.loads(p[2:]) if json.loads(p[2:]) in value else None
        else:
            return None
        if value is None:
            return None
    return value


def _changed(old, new, subresource, has_status):
    """The leaves of new that old lacks or holds with another value."""
    new_fs = object_fields(new, subresource, has_status)
    out = {}
    for path in _leaves(new_fs):
        if path[-1] == ".":
            if _value_at(old, path[:-1]) is None:
                _add(out, path)
            continue
        if _value_at(old, path) != _value_at(new, path):
            _add(out, path)
    return new_fs, out


def _entry(manager, operation, api_version, fs, time, subresource):
    e = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": time,
         "fieldsType": "FieldsV1", "fieldsV1": fs}
    if not manager:
        del e["manager"]
    if subresource:
        e["subresource"] = subresource
    return e


def _same(e, manager, operation, subresource):
    return (e.get("manager", "") == manager and e.get("operation") == operation
            and e.get("subresource") == subresource)


def on_create(obj, manager, api_version, time, has_status):
    """The entries of a created object."""
    fs = object_fields(obj, None, has_status)
    return [_entry(manager, "Update", api_version, fs, time, None)] if fs else []


def on_update(entries, old, new, manager, api_version, time, subresource, has_status):
    """The entries after an update of old into new by manager."""
    entries = copy.deepcopy([e for e in entries or [] if isinstance(e, dict)])
    new_fs, changed = _changed(old, new, subresource, has_status)
    # fields gone from the object leave every set (those of this side only)
    for e in entries:
        fs = e.get("fieldsV1") or {}
        if (e.get("subresource") == "status") != (subresource == "status"):
            continue
        for path in list(_leaves(fs)):
            if not _lookup(new_fs, path):
                _remove(fs, path)
        for path in _leaves(changed):
            _remove(fs, path)
        e["fieldsV1"] = fs
    mine = next((e for e in entries if _same(e, manager, "Update", subresource)), None)
    if mine is None and changed:
        mine = _entry(manager, "Update", api_version, {}, time, subresource)
        entries.append(mine)
    if mine is not None and changed:
        for path in _leaves(changed):
            _add(mine["fieldsV1"], path)
        mine["time"] = time
        mine["apiVersion"] = api_version
    return [e for e in entries if e.get("fieldsV1")]


def manager_of(params, user_agent):
    """fieldManager, else the User-Agent's program name (up to its first
    "/", at most 128 characters), as a real server derives it."""
    m = params.get("fieldManager")
    if m:
        return m
    return (user_agent or "").split("/", 1)[0][:128]
