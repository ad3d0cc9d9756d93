# kubeapi/apply.py: server-side apply (PATCH application/apply-patch+yaml) as
# a real 1.26 server serves it: the PatchOptions checks (fieldManager
# required for apply, force only with apply), the applied configuration
# decoded from YAML or JSON, merged into the live object (maps recursively,
# lists by the keys of managed.LIST_KEYS, sets of scalars as sets, the rest
# atomic), the fields the same manager applied last time and omits now
# pruned unless another manager owns them, conflicts with the other
# managers' fields (409, the real message and causes) unless force=true,
# and the managedFields that result (the manager's Apply entry, the fields
# taken from others). It computes the new object and its managedFields only:
# storing, defaulting, validation and admission stay in kubeapi/api.py.
# It must not decide anything about update/patch of the other content types.
# Not modelled: list and map types from a CRD's schema (x-kubernetes-list-
# type/-map-keys, x-kubernetes-map-type: LIST_KEYS applies by field name
# everywhere), unions, the upgrade path from client-side apply (a real
# server lets an apply through where the conflicting fields match the
# last-applied-configuration annotation), RBAC's "create" check when an
# apply creates, the cap of 10 Update entries, fieldValidation=Strict's
# duplicate-field check of the YAML, and the order of conflicts across
# several managers in details.causes (a Go map's order on a real server;
# sorted by manager here, as its message is).

import copy
import json

import yaml

from . import errors, managed

CONTENT_TYPE = "application/apply-patch+yaml"
PATCH_TYPES_BUILTIN = ("application/json-patch+json", "application/merge-patch+json",
                       "application/strategic-merge-patch+json", CONTENT_TYPE)
PATCH_TYPES_CUSTOM = ("application/json-patch+json", "application/merge-patch+json", CONTENT_TYPE)
FIELD_MANAGER_MAX = 128


def patch_types(rtype):
    """The media types PATCH accepts on rtype, in the order a real server lists them."""
    return PATCH_TYPES_CUSTOM if rtype.crd else PATCH_TYPES_BUILTIN


def check_options(params, is_apply):
    """ValidatePatchOptions: 422 PatchOptions.meta.k8s.io "" is invalid."""
    errs = []
    if not is_apply:
        if "force" in params:
            errs.append(("force", "FieldValueForbidden", "Forbidden: may not be specified for non-apply patch"))
    elif not params.get("fieldManager"):
        errs.append(("fieldManager", "FieldValueRequired", "Required value: is required for apply patch"))
    fm = params.get("fieldManager") or ""
    if len(fm.encode()) > FIELD_MANAGER_MAX:
        errs.append(("fieldManager", "FieldValueTooLong",
                     "Too long: must have at most %d bytes" % FIELD_MANAGER_MAX))
    if errs:
        parts = ["%s: %s" % (f, t) for f, _, t in errs]
        joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
        raise errors.ApiError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: %s' % joined,
                              {"group": "meta.k8s.io", "kind": "PatchOptions",
                               "causes": [{"reason": r, "message": t, "field": f} for f, r, t in errs]})


def forced(params):
    v = params.get("force")
    if v in (None, "", "false", "0", "False"):
        return False
    if v in ("true", "1", "True"):
        return True
    raise errors.bad_request('strconv.ParseBool: parsing "%s": invalid syntax' % v)


class _Loader(yaml.SafeLoader):
    """YAML as sigs.k8s.io/yaml reads it: timestamps stay strings."""


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def decode(raw):
    """The applied configuration: a YAML (or JSON) mapping."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else (raw or "")
    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else yaml.load(text, Loader=_Loader)
    except ValueError:
        try:
            doc = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError as e:
            raise errors.bad_request("error decoding YAML: %s" % str(e).replace("\n", " "))
    except yaml.YAMLError as e:
        raise errors.bad_request("error decoding YAML: %s" % str(e).replace("\n", " "))
    if doc is None:
        doc = {}
    doc = _jsonable(doc)
    if not isinstance(doc, dict):
        raise errors.bad_request("error decoding YAML: error unmarshaling JSON: while decoding JSON: "
                                 "json: cannot unmarshal %s into Go value of type map[string]interface {}"
                                 % ("array" if isinstance(doc, list) else "string"))
    return doc


def _jsonable(v):
    """Map keys as sigs.k8s.io/yaml turns them into JSON: `on: x` is "true"."""
    if isinstance(v, dict):
        return {(("true" if k else "false") if isinstance(k, bool) else "null" if k is None else str(k)):
                _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def check_config(rtype, version, config, ns, name):
    """What the field manager refuses before merging (400/500 as a real server)."""
    want = rtype.api_version(version)
    if config.get("apiVersion", "") != want:
        raise errors.bad_request("Incorrect version specified in apply patch. Specified patch version: %s, "
                                 "expected: %s" % (config.get("apiVersion", ""), want))
    meta = config.get("metadata")
    if isinstance(meta, dict) and meta.get("managedFields") is not None:
        raise errors.bad_request("metadata.managedFields must be nil")
    if config.get("kind", "") != rtype.kind:
        gv = want if "/" in want else "/" + want
        gvk = "%s, Kind=%s" % (gv, config.get("kind", ""))
        raise errors.ApiError(500, "", "failed to create typed patch object (%s/%s; %s): no corresponding type "
                                       "for %s" % (ns, (meta or {}).get("name", ""), gvk, gvk))


# --- merging ---------------------------------------------------------------------

def _keys(field, items):
    """The path element of each item of a list (None when the list is atomic)."""
    if field in managed.SET_LISTS and all(isinstance(x, str) for x in items):
        return ["v:" + json.dumps(x) for x in items]
    out = []
    for x in items:
        k = managed._item_key(field, x)
        if k is None:
            return None
        out.append("k:" + json.dumps(k, separators=(",", ":")))
    return out


def _merge_list(field, live, config):
    """Associative lists: the items of both, shared ones merged, in the
    order structured-merge-diff gives (config order for shared items,
    live-only items kept where they stood)."""
    lk, rk = _keys(field, live), _keys(field, config)
    if lk is None or rk is None:
        return copy.deepcopy(config)
    lmap, rmap = dict(zip(lk, live)), dict(zip(rk, config))
    shared = [k for k in rk if k in lmap]
    out, i, j = [], 0, 0
    nxt = shared.pop(0) if shared else None

    def item(k):
        if k in lmap and k in rmap:
            return merge(lmap[k], rmap[k])
        return copy.deepcopy(rmap[k] if k in rmap else lmap[k])

    while i < len(lk) or j < len(rk):
        if i < len(lk) and j < len(rk):
            if lk[i] == rk[j]:
                out.append(item(lk[i]))
                i, j = i + 1, j + 1
                nxt = shared.pop(0) if shared else None
                continue
            if lk[i] in rmap and nxt is not None and nxt != lk[i]:
                i += 1
                continue
        if i < len(lk) and lk[i] not in rmap:
            out.append(item(lk[i]))
            i += 1
            continue
        if j < len(rk):
            out.append(item(rk[j]))
            if nxt is not None and nxt == rk[j]:
                nxt = shared.pop(0) if shared else None
            j += 1
        else:
            i += 1
    return out


def merge(live, config, field=None):
    """live with config applied: maps merge, lists by key or atomic; a null
    in config drops the field."""
    if isinstance(live, dict) and isinstance(config, dict):
        out = copy.deepcopy(live)
        for k, v in config.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = merge(out[k], v, k)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if isinstance(live, list) and isinstance(config, list):
        return _merge_list(field, live, config)
    return copy.deepcopy(config)


def _drop_nulls(v):
    if isinstance(v, dict):
        return {k: _drop_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_drop_nulls(x) for x in v]
    return v


# --- field sets --------------------------------------------------------------------

def applied_fields(config, subresource, has_status):
    """The set an applier owns: the configuration's fields (list items with
    their "." member; maps without one, as a real Apply entry shows them)."""
    def strip(fs, in_item):
        out = {}
        for k, v in fs.items():
            if k == "." and not in_item:
                continue
            out[k] = strip(v, k.startswith(("k:", "v:")))
        return out
    return strip(managed.object_fields(_drop_nulls(config), subresource, has_status), False)


def _leaves(fs):
    return set(managed._leaves(fs))


def _members(leaves, named_only):
    """Every path the set makes a member: its leaves (a "." leaf stands for
    its parent) and, for the items it may remove, the named fields above."""
    out = set()
    for p in leaves:
        q = p[:-1] if p[-1] == "." else p
        if q:
            out.add(q)
        for n in range(1, len(q)):
            if not named_only or q[n - 1].startswith("f:"):
                out.add(q[:n])
    return out


def _remove_path(obj, path):
    """Removes the field or list item at path from obj (nothing if absent)."""
    cur = obj
    for p in path[:-1]:
        cur = _step(cur, p)
        if cur is None:
            return
    last = path[-1]
    if last.startswith("f:") and isinstance(cur, dict):
        cur.pop(last[2:], None)
    elif last.startswith(("k:", "v:")) and isinstance(cur, list):
        for i, x in enumerate(cur):
            if _matches(last, x):
                del cur[i]
                return


def _matches(elem, x):
    if elem.startswith("v:"):
        return x == json.loads(elem[2:])
    want = json.loads(elem[2:])
    return isinstance(x, dict) and all(x.get(k, "TCP" if k == "protocol" else None) == v for k, v in want.items())


def _step(cur, p):
    if p.startswith("f:") and isinstance(cur, dict):
        return cur.get(p[2:])
    if p.startswith(("k:", "v:")) and isinstance(cur, list):
        return next((x for x in cur if _matches(p, x)), None)
    return None


def prune(merged, last, kept):
    """Removes what last owned that no set in kept owns any part of."""
    if not last:
        return merged
    keep = set()
    for fs in kept:
        keep |= _members(_leaves(fs), named_only=False)
    cands = sorted(_members(_leaves(last), named_only=True) - keep, key=len)
    gone = []
    for p in cands:
        if any(p[:len(g)] == g for g in gone):
            continue
        _remove_path(merged, p)
        gone.append(p)
    return merged


# --- conflicts ---------------------------------------------------------------------

def _path_string(path):
    out = []
    for p in path:
        if p == ".":
            continue
        if p.startswith("f:"):
            out.append("." + p[2:])
        elif p.startswith("k:"):
            kv = json.loads(p[2:])
            out.append("[" + ",".join("%s=%s" % (k, json.dumps(v)) for k, v in sorted(kv.items())) + "]")
        elif p.startswith("v:"):
            out.append("[=%s]" % json.dumps(json.loads(p[2:])))
    return "".join(out)


def _ordered(fs, prefix=()):
    """The paths of a set in the order structured-merge-diff iterates them:
    at each level its members, then the sets below, each sorted."""
    def rank(k):
        return ({"f": 0, "k": 1, "v": 2}.get(k[0], 3), k)
    members = sorted((k for k, v in fs.items() if k != "." and (not v or "." in v)), key=rank)
    for k in members:
        yield prefix + (k,)
    for k in sorted((k for k, v in fs.items() if any(x != "." for x in v)), key=rank):
        yield from _ordered({x: y for x, y in fs[k].items() if x != "."}, prefix + (k,))


def _identifier(e):
    ident = {"manager": e.get("manager", ""), "operation": e.get("operation")}
    if e.get("operation") != "Apply":
        ident["apiVersion"] = e.get("apiVersion", "")
    if e.get("subresource"):
        ident["subresource"] = e["subresource"]
    return json.dumps(ident, separators=(",", ":"))


def _print_manager(e):
    s = json.dumps(e.get("manager", ""))
    if e.get("subresource"):
        s += " with subresource %s" % json.dumps(e["subresource"])
    if e.get("operation") == "Update":
        s += " using %s" % e.get("apiVersion", "")
    return s


def conflict_error(conflicts):
    """conflicts: [(entry, FieldsV1 set)]: the 409 a real server answers."""
    conflicts = sorted(conflicts, key=lambda c: _identifier(c[0]))
    flat = [(e, path) for e, fs in conflicts for path in _ordered(fs)]
    causes = [{"reason": "FieldManagerConflict", "message": "conflict with %s" % _print_manager(e),
               "field": _path_string(p)} for e, p in flat]
    if len(flat) == 1:
        msg = "Apply failed with 1 conflict: conflict with %s: %s" % (_print_manager(flat[0][0]),
                                                                       _path_string(flat[0][1]))
    else:
        lines = []
        for e, fs in conflicts:
            lines.append("conflicts with %s:" % _print_manager(e))
            lines += ["- %s" % _path_string(p) for p in _ordered(fs)]
        msg = "Apply failed with %d conflicts: %s" % (len(flat), "\n".join(lines))
    return errors.ApiError(409, "Conflict", msg, {"causes": causes})


# --- the whole apply -----------------------------------------------------------------

def _sort_key(e):
    return (e.get("operation", ""), e.get("time") or "", e.get("manager", ""), e.get("apiVersion", ""),
            e.get("subresource", ""))


def apply(live, config, entries, manager, api_version, time, subresource, has_status, force):
    """(new object, new managedFields) of applying config to live (None when
    the object does not exist yet) by manager. Raises the 409 of a conflict."""
    side = lambda e: (e.get("subresource") == "status") == (subresource == "status")   # noqa: E731
    entries = copy.deepcopy([e for e in entries or [] if isinstance(e, dict)])
    old = live or {}
    merged = merge(copy.deepcopy(old), config)
    new_set = applied_fields(config, subresource, has_status)
    mine = next((e for e in entries if managed._same(e, manager, "Apply", subresource)), None)
    others = [e for e in entries if e is not mine]
    if mine is not None:
        merged = prune(merged, mine.get("fieldsV1") or {},
                       [new_set] + [e.get("fieldsV1") or {} for e in others])
    new_fs, changed = managed._changed(old, merged, subresource, has_status)
    changed_leaves = _leaves(changed)
    conflicts = []
    for e in others:
        hit = {}
        for p in _leaves(e.get("fieldsV1") or {}):
            if p in changed_leaves:
                managed._add(hit, p)
        if hit:
            conflicts.append((e, hit))
    if conflicts and not force:
        raise conflict_error(conflicts)
    for e, hit in conflicts:
        for p in _leaves(hit):
            managed._remove(e["fieldsV1"], p)
    for e in others:
        if not side(e):
            continue
        fs = e.get("fieldsV1") or {}
        for p in list(managed._leaves(fs)):
            if not managed._lookup(new_fs, p):
                managed._remove(fs, p)
        e["fieldsV1"] = fs
    removed = _leaves(object_side(old, subresource, has_status)) - _leaves(new_fs)
    touched = bool(changed_leaves or removed)
    if mine is None:
        mine = managed._entry(manager, "Apply", api_version, {}, time, subresource)
        if not touched:
            del mine["time"]
        entries.append(mine)
    mine["fieldsV1"] = new_set
    mine["apiVersion"] = api_version
    if touched:
        mine["time"] = time
    out = [e for e in entries if e.get("fieldsV1")]
    out.sort(key=_sort_key)
    return merged, out


def object_side(obj, subresource, has_status):
    return managed.object_fields(obj, subresource, has_status) if obj else {}
