# kubeapi/podlogs.py: GET pods/{name}/log, as a real 1.26 server answers it:
# PodLogOptions checked (container, follow, previous, timestamps,
# tailLines, sinceSeconds, limitBytes), the container picked (the only one,
# else `container` is required: "a container name must be specified for pod
# X, choose one of: [a b]"), then the request passed to the kubelet of the
# pod's node, GET https://<node address>:<daemonEndpoints.kubeletEndpoint.Port>
# /containerLogs/{ns}/{pod}/{container}, with the server's kubelet client
# certificate (tls.ensure_kubelet_client); the kubelet's own certificate is
# not verified, as a real server without --kubelet-certificate-authority.
# The address is the node's first of InternalIP, ExternalIP, Hostname (a
# real server's --kubelet-preferred-address-types as kubeadm sets it). A
# kubelet's error becomes the real server's: 400 BadRequest with its text
# ("previous terminated container ..."), 404 NotFound, else InternalError.
# A pod on no node answers an empty log, as a real server.
# Must not: buffer a followed log (http.py streams what open() returns).

import http.client
import ssl
import urllib.parse

from . import errors

MAX_ERROR_READ = 4096
CONNECT_TIMEOUT = 10


def _int_param(params, k):
    v = params.get(k)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise errors.bad_request('strconv.ParseInt: parsing "%s": invalid syntax' % v)


def _bool_param(params, k):
    v = params.get(k)
    if v in (None, "", "false", "0", "False"):
        return False
    if v in ("true", "1", "True"):
        return True
    raise errors.bad_request('strconv.ParseBool: parsing "%s": invalid syntax' % v)


def options(params):
    """The PodLogOptions of a request's query, validated as a real server does."""
    o = {"container": params.get("container") or "", "follow": _bool_param(params, "follow"),
         "previous": _bool_param(params, "previous"), "timestamps": _bool_param(params, "timestamps"),
         "tailLines": _int_param(params, "tailLines"), "sinceSeconds": _int_param(params, "sinceSeconds"),
         "limitBytes": _int_param(params, "limitBytes"), "sinceTime": params.get("sinceTime") or None}
    errs = []
    if o["tailLines"] is not None and o["tailLines"] < 0:
        errs.append(("tailLines", "FieldValueInvalid", "Invalid value: %d: must be greater than or equal to 0"
                     % o["tailLines"]))
    if o["limitBytes"] is not None and o["limitBytes"] < 1:
        errs.append(("limitBytes", "FieldValueInvalid", "Invalid value: %d: must be greater than 0"
                     % o["limitBytes"]))
    if o["sinceSeconds"] is not None and o["sinceTime"] is not None:
        errs.append(("", "FieldValueForbidden", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
    elif o["sinceSeconds"] is not None and o["sinceSeconds"] < 1:
        errs.append(("sinceSeconds", "FieldValueInvalid", "Invalid value: %d: must be greater than 0"
                     % o["sinceSeconds"]))
    if errs:
        raise errors.invalid("PodLogOptions", "", "", errs)
    return o


def container_of(pod, name):
    """The container the log is of, as the real server's validateContainer."""
    spec = pod.get("spec") or {}
    names = [c["name"] for c in spec.get("containers") or []]
    pname = pod["metadata"]["name"]
    if not name:
        if len(names) == 1:
            return names[0]
        if not names:
            raise errors.bad_request("a container name must be specified for pod %s" % pname)
        msg = "a container name must be specified for pod %s, choose one of: [%s]" % (pname, " ".join(names))
        inits = [c["name"] for c in spec.get("initContainers") or []]
        if inits:
            msg += " or one of the init containers: [%s]" % " ".join(inits)
        raise errors.bad_request(msg)
    every = names + [c["name"] for c in spec.get("initContainers") or []] + \
        [c["name"] for c in spec.get("ephemeralContainers") or []]
    if name not in every:
        raise errors.bad_request("container %s is not valid for pod %s" % (name, pname))
    return name


def node_endpoint(node):
    """(host, port) of a Node's kubelet API."""
    st = node.get("status") or {}
    port = ((st.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 0
    addrs = st.get("addresses") or []
    for kind in ("InternalIP", "ExternalIP", "Hostname"):
        for a in addrs:
            if a.get("type") == kind and a.get("address"):
                return a["address"], int(port)
    raise errors.ApiError(500, "InternalError", 'Internal error occurred: no preferred addresses found; '
                          'known addresses: %s' % addrs)


def open_log(api, ns, name, params, client_cert):
    """The kubelet's 200 answer (an http.client response to stream, with its
    connection as .conn), or None for a pod on no node; an ApiError else."""
    o = options(params)
    pods = api.registry.lookup("", "v1", "pods")
    nodes = api.registry.lookup("", "v1", "nodes")
    pod = api.get(pods, "v1", ns, name)
    container = container_of(pod, o["container"])
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        return None
    host, port = node_endpoint(api.get(nodes, "v1", "", node_name))
    q = []
    for k in ("follow", "previous", "timestamps"):
        if o[k]:
            q.append((k, "true"))
    for k in ("sinceSeconds", "sinceTime", "tailLines", "limitBytes"):
        if o[k] is not None:
            q.append((k, str(o[k])))
    path = "/containerLogs/%s/%s/%s" % tuple(urllib.parse.quote(s, safe="") for s in (ns, name, container))
    if q:
        path += "?" + urllib.parse.urlencode(q)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(*client_cert)
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=CONNECT_TIMEOUT)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
    except (OSError, http.client.HTTPException) as e:
        conn.close()
        raise errors.ApiError(500, "InternalError", "Get \"https://%s:%d%s\": %s" % (host, port, path, e))
    if 200 <= resp.status <= 206:
        if o["follow"]:
            conn.sock.settimeout(None)
        resp.conn = conn
        return resp
    text = resp.read(MAX_ERROR_READ).decode("utf-8", "replace").strip()
    conn.close()
    if resp.status == 400:
        raise errors.bad_request(text)
    if resp.status == 404:
        raise errors.ApiError(404, "NotFound", text or "the server could not find the requested resource",
                              {"name": name, "kind": "pods/log"})
    raise errors.ApiError(500, "InternalError", text or "an error on the server (\"\") has prevented the request "
                          "from succeeding")
