# kubeapi/tls.py: the state directory's credentials: a CA and a server
# certificate for 127.0.0.1/localhost (plus any extra IP subjectAltNames asked
# for) made with the openssl command line, the admin bearer token, and the
# kubeconfig that kubectl and the operator read. Existing files are reused so
# that clients survive a restart; a server certificate that lacks a requested
# IP is re-issued from the same CA; the API server's client certificate for
# kubelets (pods/log), and a kubelet's self-signed serving certificate (as a
# real kubelet makes without --tls-cert-file). Must not: replace an existing CA.

import os
import secrets
import subprocess


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _cert_ips(crt):
    """The IP subjectAltNames of a certificate, as openssl prints them."""
    out = subprocess.run(["openssl", "x509", "-in", crt, "-noout", "-ext", "subjectAltName"],
                         check=True, capture_output=True, text=True).stdout
    return {p.strip()[len("IP Address:"):] for p in out.replace("\n", ",").split(",")
            if p.strip().startswith("IP Address:")}


def _issue_server(pki, ips):
    sans = ",".join(["IP:127.0.0.1"] + ["IP:%s" % ip for ip in ips if ip != "127.0.0.1"] + ["DNS:localhost"])
    _openssl("req", *EC, "-keyout", "server.key.new", "-out", "server.csr", "-subj", "/CN=vitjob-test-apiserver",
             cwd=pki)
    with open(os.path.join(pki, "server.ext"), "w") as f:
        f.write("subjectAltName=%s\n"
                "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n" % sans)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt.new", "-days", "3650", "-extfile", "server.ext", cwd=pki)
    os.chmod(os.path.join(pki, "server.key.new"), 0o600)
    os.replace(os.path.join(pki, "server.key.new"), os.path.join(pki, "server.key"))
    os.replace(os.path.join(pki, "server.crt.new"), os.path.join(pki, "server.crt"))


def ensure_certs(state, sans=()):
    """(ca.crt, server.crt, server.key) paths under state/pki; the server
    certificate names 127.0.0.1, localhost and every IP in sans."""
    pki = os.path.join(state, "pki")
    os.makedirs(pki, exist_ok=True)
    ca, crt, key = (os.path.join(pki, n) for n in ("ca.crt", "server.crt", "server.key"))
    if not (os.path.exists(ca) and os.path.exists(os.path.join(pki, "ca.key"))):
        _openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
                 "-subj", "/CN=vitjob-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=pki)
        os.chmod(os.path.join(pki, "ca.key"), 0o600)
        for p in (crt, key):
            if os.path.exists(p):
                os.unlink(p)
    if os.path.exists(crt) and os.path.exists(key):
        have = _cert_ips(crt)
        if all(ip in have for ip in sans):
            return ca, crt, key
        sans = sorted(have | set(sans))
    _issue_server(pki, sans)
    return ca, crt, key


def ensure_kubelet_client(state):
    """(crt, key) under state/pki: the API server's client certificate for
    kubelets (CN kube-apiserver-kubelet-client, as kubeadm issues it), signed
    by the cluster CA, which kubelets trust for clients."""
    pki = os.path.join(state, "pki")
    crt, key = (os.path.join(pki, n) for n in ("apiserver-kubelet-client.crt", "apiserver-kubelet-client.key"))
    if os.path.exists(crt) and os.path.exists(key):
        return crt, key
    _openssl("req", *EC, "-keyout", "kc.key.new", "-out", "kc.csr",
             "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client", cwd=pki)
    with open(os.path.join(pki, "kc.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n")
    _openssl("x509", "-req", "-in", "kc.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "kc.crt.new", "-days", "3650", "-extfile", "kc.ext", cwd=pki)
    os.chmod(os.path.join(pki, "kc.key.new"), 0o600)
    os.replace(os.path.join(pki, "kc.key.new"), key)
    os.replace(os.path.join(pki, "kc.crt.new"), crt)
    return crt, key


def self_signed(d, cn, ips):
    """(crt, key) under d: a self-signed serving certificate for cn and ips
    (a kubelet's own, as a real one makes at start)."""
    os.makedirs(d, exist_ok=True)
    crt, key = os.path.join(d, "kubelet.crt"), os.path.join(d, "kubelet.key")
    sans = ",".join(["DNS:%s" % cn] + ["IP:%s" % ip for ip in ips])
    _openssl("req", "-x509", *EC, "-keyout", key, "-out", crt, "-days", "3650", "-subj", "/CN=%s" % cn,
             "-addext", "subjectAltName=%s" % sans, "-addext", "extendedKeyUsage=serverAuth", cwd=d)
    os.chmod(key, 0o600)
    return crt, key


def ensure_token(state):
    path = os.path.join(state, "token")
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip()
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def write_kubeconfig(state, port, ca_path, token):
    import base64
    with open(ca_path, "rb") as f:
        ca_b64 = base64.b64encode(f.read()).decode()
    text = ("apiVersion: v1\nkind: Config\n"
            "clusters:\n- name: vitjob-test\n  cluster:\n    server: https://127.0.0.1:%d\n"
            "    certificate-authority-data: %s\n"
            "users:\n- name: admin\n  user:\n    token: %s\n"
            "contexts:\n- name: vitjob-test\n  context:\n    cluster: vitjob-test\n    user: admin\n"
            "    namespace: default\n"
            "current-context: vitjob-test\n") % (port, ca_b64, token)
    path = os.path.join(state, "kubeconfig")
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
