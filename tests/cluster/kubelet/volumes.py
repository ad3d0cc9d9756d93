# kubelet/volumes.py: a pod's volumes, written under its root
# (<root>/volumes/<name>) for the container's mount namespace to bind-mount:
# ConfigMap and Secret (items, optional), downward API, projected
# (service-account token through the TokenRequest API, kube-root-ca.crt,
# ConfigMap, Secret, downward API) and emptyDir (mode 1777); files owned by
# runAsUser and fsGroup (else runAsGroup) where the pod sets them.
# Must not: log a token or a secret's data; support a volume type by
# silently leaving it empty (an unknown type fails the container).

import base64
import os

from .api import q
from .downward import field_ref


def key_files(data, items, binary=False):
    """{relative path: bytes} of a ConfigMap's or Secret's data."""
    out = {}
    conv = (lambda v: base64.b64decode(v)) if binary else (lambda v: v.encode())
    if items:
        for it in items:
            if it["key"] not in data:
                raise RuntimeError("key %s not found" % it["key"])
            out[it["path"]] = conv(data[it["key"]])
    else:
        for k, v in data.items():
            out[k] = conv(v)
    return out


class Volumes:
    def __init__(self, api, node, node_ip, ca_pem):
        """ca_pem: the cluster CA, kube-root-ca.crt's data where no controller published it."""
        self.api, self.node, self.node_ip, self.ca_pem = api, node, node_ip, ca_pem

    def sa_token(self, pod, audiences, seconds):
        sa = pod.obj["spec"].get("serviceAccountName") or "default"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": audiences, "expirationSeconds": seconds,
                         "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod.name,
                                            "uid": pod.uid}}}
        r = self.api.call("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (q(pod.ns), q(sa)), body)
        if r is None or r.status != 201:
            raise RuntimeError("serviceaccount %s/%s: token request failed (%s)" %
                               (pod.ns, sa, r.status if r is not None else "no answer"))
        return r.body["status"]["token"]

    def field(self, pod, item):
        """A downward API item's file content."""
        return field_ref(pod, item["fieldRef"]["fieldPath"], self.node, self.node_ip).encode()

    def volume_files(self, pod, vol):
        """{path: bytes} of one volume; None for an emptyDir."""
        if "emptyDir" in vol:
            return None
        if "configMap" in vol:
            src = vol["configMap"]
            cm = self.api.get_obj("configmaps", pod.ns, src["name"])
            if cm is None:
                if src.get("optional"):
                    return {}
                raise RuntimeError('configmap "%s" not found' % src["name"])
            return key_files(cm.get("data") or {}, src.get("items"))
        if "secret" in vol:
            src = vol["secret"]
            s = self.api.get_obj("secrets", pod.ns, src["secretName"])
            if s is None:
                if src.get("optional"):
                    return {}
                raise RuntimeError('secret "%s" not found' % src["secretName"])
            return key_files(s.get("data") or {}, src.get("items"), binary=True)
        if "downwardAPI" in vol:
            return {it["path"]: self.field(pod, it)
                    for it in vol["downwardAPI"].get("items", [])}
        if "projected" in vol:
            out = {}
            for s in vol["projected"].get("sources", []):
                if "serviceAccountToken" in s:
                    t = s["serviceAccountToken"]
                    aud = [t["audience"]] if t.get("audience") else []
                    out[t["path"]] = self.sa_token(pod, aud, t.get("expirationSeconds", 3607)).encode()
                elif "configMap" in s:
                    name = s["configMap"]["name"]
                    cm = self.api.get_obj("configmaps", pod.ns, name)
                    data = (cm or {}).get("data")
                    if cm is None and name == "kube-root-ca.crt":
                        data = {"ca.crt": self.ca_pem}   # published by a controller we do not run
                    if data is None:
                        raise RuntimeError('configmap "%s" not found' % name)
                    out.update(key_files(data, s["configMap"].get("items")))
                elif "secret" in s:
                    sec = self.api.get_obj("secrets", pod.ns, s["secret"]["name"])
                    if sec is None:
                        raise RuntimeError('secret "%s" not found' % s["secret"]["name"])
                    out.update(key_files(sec.get("data") or {}, s["secret"].get("items"), binary=True))
                elif "downwardAPI" in s:
                    for it in s["downwardAPI"].get("items", []):
                        out[it["path"]] = self.field(pod, it)
            return out
        raise RuntimeError("volume %s: this kubelet does not support its type" % vol.get("name"))

    def write(self, pod, uid, gid):
        """Materializes every volume; {name: host directory}."""
        out = {}
        for vol in pod.obj["spec"].get("volumes") or []:
            d = os.path.join(pod.root, "volumes", vol["name"])
            os.makedirs(d, exist_ok=True)
            files = self.volume_files(pod, vol)
            mode = 0o1777 if files is None else 0o755
            os.chmod(d, mode)
            for rel, data in (files or {}).items():
                p = os.path.join(d, rel)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "wb") as f:
                    f.write(data)
                os.chmod(p, 0o644 if uid is None else 0o640)
                if uid is not None:
                    os.chown(p, uid, gid)
            out[vol["name"]] = d
        return out
