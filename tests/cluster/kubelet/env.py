# kubelet/env.py: a container's environment: PATH (the image's bin first),
# HOSTNAME, HOME, KUBERNETES_SERVICE_HOST/PORT (the API server through the
# bridge), the image's ENV (image.py), then its env in order: value (with
# $(VAR) of earlier ones), fieldRef (downward.py), secretKeyRef and
# configMapKeyRef (optional ones skipped when missing); and the environment
# of a worker run outside the cluster as a pod's reference.
# Must not: log a value (secrets end up here); fall back to the kubelet's
# own environment.

import base64

from .downward import field_ref
from .image import IMAGE_DIR, WORKER_ENV, image_env_of
from .network import BRIDGE_IP


def image_path():
    """A worker container's PATH: the image's bin first."""
    return IMAGE_DIR + "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def reference_worker_env(**extra):
    """The environment of a vitjob-worker started outside the cluster as the
    reference a pod's run is compared with, bit for bit: what env_for gives a
    worker container before its spec's env (PATH, HOME, the image's ENV),
    plus extra; none of this machine's own variables, which a pod does not
    get either and some of which change the bits (OPENBLAS_CORETYPE picks
    OpenBLAS's kernels: seen on an AVX-512 machine that sets it)."""
    env = {"PATH": image_path(), "HOME": "/"}
    env.update(WORKER_ENV)
    env.update(extra)
    return env


def env_for(api, pod, c, node, node_ip):
    """The environment of container c (its spec) of pod."""
    env = {"PATH": image_path(),
           "HOSTNAME": pod.obj["spec"].get("hostname") or pod.name,
           "HOME": "/",
           "KUBERNETES_SERVICE_HOST": BRIDGE_IP,
           "KUBERNETES_SERVICE_PORT": str(api.port),
           "KUBERNETES_SERVICE_PORT_HTTPS": str(api.port),
           "KUBERNETES_PORT": "tcp://%s:%d" % (BRIDGE_IP, api.port)}
    env.update(image_env_of(c))
    for e in c.get("env") or []:
        if "value" in e:
            v = e["value"]
            for k2, v2 in env.items():      # $(VAR) references to earlier variables
                v = v.replace("$(%s)" % k2, v2)
            env[e["name"]] = v
            continue
        vf = e.get("valueFrom") or {}
        if "fieldRef" in vf:
            env[e["name"]] = field_ref(pod, vf["fieldRef"]["fieldPath"], node, node_ip)
        elif "secretKeyRef" in vf:
            ref = vf["secretKeyRef"]
            s = api.get_obj("secrets", pod.ns, ref["name"])
            if s is None or ref["key"] not in (s.get("data") or {}):
                if ref.get("optional"):
                    continue
                raise RuntimeError('secret "%s" not found' % ref["name"] if s is None else
                                   "couldn't find key %s in Secret %s/%s" % (ref["key"], pod.ns, ref["name"]))
            env[e["name"]] = base64.b64decode(s["data"][ref["key"]]).decode()
        elif "configMapKeyRef" in vf:
            ref = vf["configMapKeyRef"]
            cm = api.get_obj("configmaps", pod.ns, ref["name"])
            if cm is None or ref["key"] not in (cm.get("data") or {}):
                if ref.get("optional"):
                    continue
                raise RuntimeError('configmap "%s" not found' % ref["name"] if cm is None else
                                   "couldn't find key %s in ConfigMap %s/%s" % (ref["key"], pod.ns, ref["name"]))
            env[e["name"]] = cm["data"][ref["key"]]
        else:
            raise RuntimeError("env %s: this kubelet does not support its valueFrom" % e["name"])
    return env
