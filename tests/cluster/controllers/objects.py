# controllers/objects.py: reading and updating the fields of API objects as
# every controller does: their API paths, RFC 3339 timestamps, conditions,
# owners, and whether a pod is ready, terminal or being deleted.
# Must not: call the API server (base.Controller does).

import datetime

CORE = "/api/v1"
APPS = "/apis/apps/v1"


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def stamp(t=None):
    return (t or utcnow()).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s):
    """RFC 3339 (with or without fraction) -> aware datetime; None if absent or bad."""
    if not s:
        return None
    s = s.strip()
    if s.endswith("Z") or s.endswith("z"):
        s = s[:-1] + "+00:00"
    main, frac, rest = s, "", ""
    if "." in s:
        main, _, tail = s.partition(".")
        i = 0
        while i < len(tail) and tail[i].isdigit():
            i += 1
        frac, rest = tail[:i], tail[i:]
        s = main + ("." + (frac + "000000")[:6] if frac else "") + rest
    try:
        t = datetime.datetime.fromisoformat(s)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return t


def age(s, now):
    t = parse_time(s)
    return None if t is None else (now - t).total_seconds()


def cond(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def set_condition(conds, new, now_s):
    """Update or append new in conds; lastTransitionTime moves only when the status
    does. Returns True when anything changed."""
    for c in conds:
        if c.get("type") == new["type"]:
            changed = any(c.get(k) != new.get(k) for k in new if k not in ("lastTransitionTime",
                                                                            "lastUpdateTime",
                                                                            "lastProbeTime"))
            if not changed:
                return False
            if c.get("status") != new["status"]:
                c["lastTransitionTime"] = now_s
            c.update({k: v for k, v in new.items() if k != "lastTransitionTime"})
            return True
    n = dict(new)
    n.setdefault("lastTransitionTime", now_s)
    conds.append(n)
    return True


def terminal(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def deleting(obj):
    return bool(obj["metadata"].get("deletionTimestamp"))


def key(obj):
    m = obj["metadata"]
    return "%s/%s" % (m["namespace"], m["name"]) if m.get("namespace") else m["name"]


def controller_uid(obj):
    for r in obj["metadata"].get("ownerReferences") or []:
        if r.get("controller"):
            return r.get("uid")
    return None


def pod_ready(pod):
    c = cond(pod, "Ready")
    return bool(c and c.get("status") == "True")


def pod_path(pod, sub=""):
    m = pod["metadata"]
    return "%s/namespaces/%s/pods/%s%s" % (CORE, m["namespace"], m["name"], "/" + sub if sub else "")


def apps_path(kind, obj, sub=""):
    m = obj["metadata"]
    return "%s/namespaces/%s/%s/%s%s" % (APPS, m["namespace"], kind, m["name"], "/" + sub if sub else "")
