# kubeapi/protobuf.py: request bodies in Kubernetes' protobuf encoding
# (Content-Type application/vnd.kubernetes.protobuf), which kubectl's typed
# clients send for `kubectl create secret|configmap|namespace|
# serviceaccount|token|role|rolebinding|clusterrole|clusterrolebinding`: the
# "k8s\0" magic, a runtime.Unknown envelope {typeMeta{apiVersion, kind},
# raw, contentEncoding, contentType}, and in raw the object, decoded here
# into the JSON object the real server would see. The field numbers are
# those of k8s.io/api's and apimachinery's generated.proto for the kinds
# above; a kind without a table is refused with 415 naming it.
# Must not: encode (answers are JSON, which every client accepts).

import base64
import datetime
import struct

from . import errors

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# A message is {field number: (json name, kind, sub)}; kind is one of
# "string", "bytes" (base64 in JSON), "int", "bool", "msg" (sub: table),
# "time" (metav1.Time), "map" (sub: the value kind, "string" or "bytes"),
# and a leading "*" marks repeated fields.
TYPE_META = {1: ("apiVersion", "string", None), 2: ("kind", "string", None)}
UNKNOWN = {1: ("typeMeta", "msg", TYPE_META), 2: ("raw", "raw", None), 3: ("contentEncoding", "string", None),
           4: ("contentType", "string", None)}
OWNER_REF = {1: ("kind", "string", None), 3: ("name", "string", None), 4: ("uid", "string", None),
             5: ("apiVersion", "string", None), 6: ("controller", "bool", None),
             7: ("blockOwnerDeletion", "bool", None)}
OBJECT_META = {1: ("name", "string", None), 2: ("generateName", "string", None), 3: ("namespace", "string", None),
               5: ("uid", "string", None), 6: ("resourceVersion", "string", None), 7: ("generation", "int", None),
               8: ("creationTimestamp", "time", None), 9: ("deletionTimestamp", "time", None),
               10: ("deletionGracePeriodSeconds", "int", None), 11: ("labels", "map", "string"),
               12: ("annotations", "map", "string"), 13: ("ownerReferences", "*msg", OWNER_REF),
               14: ("finalizers", "*string", None)}
META = {1: ("metadata", "msg", OBJECT_META)}
OBJECT_REF = {1: ("kind", "string", None), 2: ("namespace", "string", None), 3: ("name", "string", None),
              4: ("uid", "string", None), 5: ("apiVersion", "string", None), 6: ("resourceVersion", "string", None),
              7: ("fieldPath", "string", None)}
POLICY_RULE = {1: ("verbs", "*string", None), 2: ("apiGroups", "*string", None), 3: ("resources", "*string", None),
               4: ("resourceNames", "*string", None), 5: ("nonResourceURLs", "*string", None)}
SUBJECT = {1: ("kind", "string", None), 2: ("apiGroup", "string", None), 3: ("name", "string", None),
           4: ("namespace", "string", None)}
ROLE_REF = {1: ("apiGroup", "string", None), 2: ("kind", "string", None), 3: ("name", "string", None)}
LABEL_SELECTOR_REQ = {1: ("key", "string", None), 2: ("operator", "string", None), 3: ("values", "*string", None)}
LABEL_SELECTOR = {1: ("matchLabels", "map", "string"), 2: ("matchExpressions", "*msg", LABEL_SELECTOR_REQ)}
BOUND_REF = {1: ("kind", "string", None), 2: ("apiVersion", "string", None), 3: ("name", "string", None),
             4: ("uid", "string", None)}

# k8s.io/api/authorization/v1 (kubectl auth can-i)
RESOURCE_ATTRS = {1: ("namespace", "string", None), 2: ("verb", "string", None), 3: ("group", "string", None),
                  4: ("version", "string", None), 5: ("resource", "string", None),
                  6: ("subresource", "string", None), 7: ("name", "string", None)}
NON_RESOURCE_ATTRS = {1: ("path", "string", None), 2: ("verb", "string", None)}
SAR_SPEC = {1: ("resourceAttributes", "msg", RESOURCE_ATTRS), 2: ("nonResourceAttributes", "msg", NON_RESOURCE_ATTRS),
            3: ("user", "string", None), 4: ("groups", "*string", None), 6: ("uid", "string", None)}


def _with_meta(fields):
    return {**META, **fields}


KINDS = {
    ("v1", "Secret"): _with_meta({2: ("data", "map", "bytes"), 3: ("type", "string", None),
                                    4: ("stringData", "map", "string"), 5: ("immutable", "bool", None)}),
    ("v1", "ConfigMap"): _with_meta({2: ("data", "map", "string"), 3: ("binaryData", "map", "bytes"),
                                       4: ("immutable", "bool", None)}),
    ("v1", "Namespace"): _with_meta({2: ("spec", "msg", {1: ("finalizers", "*string", None)})}),
    ("v1", "ServiceAccount"): _with_meta({2: ("secrets", "*msg", OBJECT_REF),
                                            3: ("imagePullSecrets", "*msg", {1: ("name", "string", None)}),
                                            4: ("automountServiceAccountToken", "bool", None)}),
    ("authentication.k8s.io/v1", "TokenRequest"): _with_meta({2: ("spec", "msg", {
        1: ("audiences", "*string", None), 4: ("expirationSeconds", "int", None),
        3: ("boundObjectRef", "msg", BOUND_REF)})}),
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): _with_meta({2: ("spec", "msg", {
        1: ("resourceAttributes", "msg", RESOURCE_ATTRS), 2: ("nonResourceAttributes", "msg", NON_RESOURCE_ATTRS)})}),
    ("authorization.k8s.io/v1", "SubjectAccessReview"): _with_meta({2: ("spec", "msg", SAR_SPEC)}),
    ("authorization.k8s.io/v1", "LocalSubjectAccessReview"): _with_meta({2: ("spec", "msg", SAR_SPEC)}),
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): _with_meta({2: ("spec", "msg", {
        1: ("namespace", "string", None)})}),
    ("rbac.authorization.k8s.io/v1", "Role"): _with_meta({2: ("rules", "*msg", POLICY_RULE)}),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): _with_meta({
        2: ("rules", "*msg", POLICY_RULE),
        3: ("aggregationRule", "msg", {1: ("clusterRoleSelectors", "*msg", LABEL_SELECTOR)})}),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): _with_meta({2: ("subjects", "*msg", SUBJECT),
                                                                   3: ("roleRef", "msg", ROLE_REF)}),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): _with_meta({2: ("subjects", "*msg", SUBJECT),
                                                                          3: ("roleRef", "msg", ROLE_REF)}),
}


class _Malformed(Exception):
    pass


def _varint(buf, i):
    shift = result = 0
    while True:
        if i >= len(buf):
            raise _Malformed("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise _Malformed("varint too long")


def _fields(buf):
    """(number, wire type, value) of each field: ints for varints, bytes for
    length-delimited, raw bytes for fixed widths."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise _Malformed("truncated field %d" % num)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise _Malformed("unsupported wire type %d" % wt)
        yield num, wt, v


def _time(buf):
    secs = 0
    for num, _, v in _fields(buf):
        if num == 1:
            secs = struct.unpack("<q", struct.pack("<Q", v))[0]
    if secs == 0:
        return None     # the zero time, null in JSON
    return datetime.datetime.fromtimestamp(secs, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _scalar(kind, v):
    if kind == "string":
        return v.decode("utf-8")
    if kind == "bytes":
        return base64.b64encode(v).decode()
    if kind == "int":
        return struct.unpack("<q", struct.pack("<Q", v))[0]
    if kind == "bool":
        return bool(v)
    raise _Malformed("bad kind %s" % kind)


def _message(buf, table):
    out = {}
    for num, _, v in _fields(buf):
        if num not in table:
            continue      # a field this table does not know: dropped, as unknown JSON fields are
        name, kind, sub = table[num]
        repeated = kind.startswith("*")
        kind = kind.lstrip("*")
        if kind == "msg":
            val = _message(v, sub)
        elif kind == "time":
            val = _time(v)
        elif kind == "raw":
            val = v
        elif kind == "map":
            k, x = "", b"" if sub == "bytes" else ""
            for n2, _, v2 in _fields(v):
                if n2 == 1:
                    k = v2.decode("utf-8")
                elif n2 == 2:
                    x = v2
            out.setdefault(name, {})[k] = _scalar(sub, x) if isinstance(x, bytes) else x
            continue
        else:
            val = _scalar(kind, v)
        if repeated:
            out.setdefault(name, []).append(val)
        elif val not in ("", 0, None) or isinstance(val, bool):
            out[name] = val     # Go writes empty strings and zeros; its JSON omits them
    return out


def decode(raw):
    """The JSON object of a protobuf request body."""
    if not raw.startswith(MAGIC):
        raise errors.bad_request("provided data does not appear to be a protobuf message, expected prefix "
                                 "[107 56 115 0]")
    try:
        env = _message(raw[len(MAGIC):], UNKNOWN)
        tm = env.get("typeMeta") or {}
        key = (tm.get("apiVersion", ""), tm.get("kind", ""))
        table = KINDS.get(key)
        if table is None:
            raise errors.ApiError(415, "UnsupportedMediaType", "the test API server cannot decode %s %s from "
                                  "protobuf; send it as application/json" % key)
        obj = {"apiVersion": key[0], "kind": key[1]}
        obj.update(_message(env.get("raw", b""), table))
        return obj
    except _Malformed as e:
        raise errors.bad_request("couldn't decode the protobuf body: %s" % e)
