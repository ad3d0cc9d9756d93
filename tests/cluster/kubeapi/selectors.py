# kubeapi/selectors.py: label selectors (=, ==, !=, in, notin, exists, !exists)
# and field selectors (=, ==, != on the fields each type supports).

import re

from . import errors
from .resources import FIELD_LABELS

_SET = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*")
_CMP = re.compile(r"^\s*([^\s!=(),<>]+)\s*(==|=|!=|<|>)\s*([^\s,]*)\s*")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*")


def parse_labels(text):
    """A label selector string -> list of predicates on a labels dict."""
    preds = []
    rest = (text or "").strip()
    while rest:
        m = _SET.match(rest)
        if m:
            key, op, vals = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            preds.append((lambda k, vs: lambda l: l.get(k) in vs)(key, vals) if op == "in"
                         else (lambda k, vs: lambda l: l.get(k) not in vs)(key, vals))
        else:
            m = _CMP.match(rest)
            if m:
                key, op, val = m.groups()
                if op in ("=", "=="):
                    preds.append((lambda k, v: lambda l: l.get(k) == v)(key, val))
                elif op == "!=":
                    preds.append((lambda k, v: lambda l: l.get(k) != v)(key, val))
                else:
                    try:
                        n = int(val)
                    except ValueError:
                        raise errors.bad_request("unable to parse requirement: invalid integer value %s" % val)
                    gt = op == ">"
                    preds.append((lambda k, n, gt: lambda l: k in l and l[k].lstrip("-").isdigit()
                                  and (int(l[k]) > n if gt else int(l[k]) < n))(key, n, gt))
            else:
                m = _EXISTS.match(rest)
                if not m or not m.group(2):
                    raise errors.bad_request("unable to parse requirement: %s" % rest)
                neg, key = m.groups()
                preds.append((lambda k: lambda l: k not in l)(key) if neg else (lambda k: lambda l: k in l)(key))
        rest = rest[m.end():].lstrip()
        if rest.startswith(","):
            rest = rest[1:].lstrip()
        elif rest:
            raise errors.bad_request("unable to parse requirement: found '%s', expected: ','" % rest[:1])
    return preds


def labels_match(preds, obj):
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(p(labels) for p in preds)


def field_value(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, dict):   # events: source -> source.component
        return cur.get("component", "")
    return str(cur)


def parse_fields(text, rtype):
    """A field selector string -> list of (path, op, value); 400 for a field
    the type does not support, as the real server answers."""
    out = []
    allowed = {"metadata.name", "metadata.namespace"} | set(FIELD_LABELS.get(rtype.resource, []))
    for term in filter(None, (t.strip() for t in (text or "").split(","))):
        m = re.match(r"^([^!=]+?)\s*(==|=|!=)\s*(.*)$", term)
        if not m:
            raise errors.bad_request("invalid selector: '%s'; can't understand '%s'" % (text, term))
        path, op, val = m.groups()
        if path not in allowed and not rtype.crd:
            raise errors.bad_request('field label not supported: %s' % path)
        if rtype.crd and path not in allowed:
            raise errors.bad_request('"%s" is not a known field selector: only "metadata.name", "metadata.namespace"' % path)
        out.append((path, op != "!=", val))
    return out


def fields_match(terms, obj):
    return all((field_value(obj, p) == v) == eq for p, eq, v in terms)
