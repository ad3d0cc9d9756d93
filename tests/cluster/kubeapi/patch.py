# kubeapi/patch.py: the three patch formats kubectl sends: JSON merge patch
# (RFC 7386), JSON patch (RFC 6902) and strategic merge patch (merge keys of
# the built-in types, $patch / $setElementOrder / $retainKeys /
# $deleteFromPrimitiveList directives).

import copy

from .errors import ApiError


class PatchError(ApiError):
    def __init__(self, message):
        super().__init__(422, "Invalid", message)


# --- JSON merge patch ------------------------------------------------------------

def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# --- JSON patch --------------------------------------------------------------------

def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError("invalid JSON pointer: %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts, op):
    cur = doc
    for p in parts:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise PatchError("jsonpatch %s operation does not apply: doc is missing path: /%s"
                             % (op, "/".join(parts)))
    return cur


def _get(doc, path, op):
    return _walk(doc, _pointer(path), op)


def _add(doc, path, value, op="add"):
    parts = _pointer(path)
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], op)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError("jsonpatch add operation does not apply: index out of range: %s" % path)
    else:
        raise PatchError("jsonpatch %s operation does not apply: doc is missing path: %s" % (op, path))
    return doc


def _remove(doc, path, op="remove"):
    parts = _pointer(path)
    parent = _walk(doc, parts[:-1], op)
    last = parts[-1] if parts else ""
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchError("jsonpatch %s operation does not apply: doc is missing path: %s" % (op, path))


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for o in ops:
        op, path = o.get("op"), o.get("path", "")
        if op == "add":
            doc = _add(doc, path, copy.deepcopy(o.get("value")))
        elif op == "remove":
            _remove(doc, path)
        elif op == "replace":
            _remove(doc, path, "replace")
            doc = _add(doc, path, copy.deepcopy(o.get("value")), "replace")
        elif op == "move":
            v = _remove(doc, o["from"], "move")
            doc = _add(doc, path, v, "move")
        elif op == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, o["from"], "copy")), "copy")
        elif op == "test":
            if _get(doc, path, "test") != o.get("value"):
                raise PatchError("the server rejected our request due to an error in our request: "
                                 "testing value %s failed: test failed" % path)
        else:
            raise PatchError("Unexpected kind: %s" % op)
    return doc


# --- strategic merge patch ---------------------------------------------------------

# List fields of the built-in types that merge by key (patchStrategy=merge).
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "volumeMounts": "mountPath",
    "volumeDevices": "devicePath", "imagePullSecrets": "name", "hostAliases": "ip",
    "conditions": "type", "ownerReferences": "uid", "resourceClaims": "name",
    "ephemeralContainerStatuses": "name", "containerStatuses": "name",
}
# Lists of scalars that merge as sets.
MERGE_PRIMITIVES = {"finalizers"}


def _merge_key(field, items):
    if field == "ports":
        sample = next((i for i in items if isinstance(i, dict)), {})
        return "containerPort" if "containerPort" in sample else "port"
    return MERGE_KEYS.get(field)


def strategic_merge_patch(target, patch):
    return _smp_map(copy.deepcopy(target) if isinstance(target, dict) else {}, patch)


def _smp_map(out, patch):
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    retain = patch.get("$retainKeys")
    orders = {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            f = k.split("/", 1)[1]
            if isinstance(out.get(f), list):
                out[f] = [x for x in out[f] if x not in v]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            merged = _smp_map(out[k] if isinstance(out.get(k), dict) else {}, v)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list):
            out[k] = _smp_list(k, out.get(k) if isinstance(out.get(k), list) else [], v)
        else:
            out[k] = copy.deepcopy(v)
    for f, order in orders.items():
        if isinstance(out.get(f), list):
            out[f] = _order(f, out[f], order)
    if retain is not None:
        for k in list(out):
            if k not in retain:
                del out[k]
    return out


def _smp_list(field, cur, patch):
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    if field in MERGE_PRIMITIVES:
        return cur + [copy.deepcopy(p) for p in patch if p not in cur]
    key = _merge_key(field, cur + patch)
    if not key or not all(isinstance(p, dict) for p in patch):
        return copy.deepcopy(patch)
    out = [copy.deepcopy(c) for c in cur]
    for p in patch:
        idx = next((i for i, c in enumerate(out) if isinstance(c, dict) and c.get(key) == p.get(key)), None)
        if p.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append(_smp_map({}, p))
        else:
            out[idx] = _smp_map(out[idx], p)
    return out


def _order(field, items, order):
    key = _merge_key(field, items)
    if key is None:
        pos = {v: i for i, v in enumerate(order) if not isinstance(v, (dict, list))}
        return sorted(items, key=lambda x: pos.get(x, len(pos)) if not isinstance(x, (dict, list)) else len(pos))
    pos = {o.get(key): i for i, o in enumerate(order) if isinstance(o, dict)}
    return sorted(items, key=lambda x: pos.get(x.get(key) if isinstance(x, dict) else None, len(pos)))
