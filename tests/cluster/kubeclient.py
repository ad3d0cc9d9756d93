# tests/cluster/kubeclient.py: the one Kubernetes API client of the test
# cluster: the controllers, the kubelet and the tests all talk to the API
# server through it. HTTPS (or HTTP) to one server, its certificate checked
# against a CA, a bearer token or a client certificate, JSON in and out.
#   from_kubeconfig(path): configured from a kubeconfig's current context;
#   for_server(port, ca, token): the test API server (harness.ServerProcess).
#   request() and get/post/put/patch/delete: the answer, whatever its code;
#   call() and list(): the body of a 2xx answer, else kubeapi's ApiError;
#   watch(): an open watch stream, read event by event.
# A client opens one connection per request, or keeps one alive
# (keep_alive=True, for one thread), sending a request again once on a fresh
# connection when the kept one turns out closed.
# Must not: log or print the token or key material; retry anything else.

import base64
import http.client
import json
import os
import socket
import ssl
import tempfile
import urllib.parse

from tests.cluster.kubeapi.errors import ApiError

JSON = "application/json"


class Response:
    """An answer: its HTTP status, headers and body (decoded JSON, else text)."""

    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def __repr__(self):
        return "<%d %s>" % (self.status, json.dumps(self.body)[:400])


class Client:
    def __init__(self, server, context=None, token=None, user_agent=None, keep_alive=False):
        """server: the URL (https://host:port[/prefix]); context: the SSLContext
        that checks its certificate (and holds a client certificate)."""
        u = urllib.parse.urlsplit(server)
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        self.context = context
        self.token = token
        self.user_agent = user_agent
        self.keep_alive = keep_alive
        self._conn = None

    def connect(self, timeout=10):
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, extra=None):
        h = {"Accept": JSON}
        if self.user_agent:
            h["User-Agent"] = self.user_agent
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, ctype=JSON, headers=None):
        """The answer to one request (body: an object sent as JSON, bytes sent as
        they are, or None)."""
        h = self.headers(headers)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h["Content-Type"] = ctype
        for attempt in (0, 1):
            conn = self._conn or self.connect()
            try:
                conn.request(method, self.prefix + path, body=data, headers=h)
                r = conn.getresponse()
                raw = r.read()
                break
            except (OSError, http.client.HTTPException):
                conn.close()
                self._conn = None
                if attempt or not self.keep_alive:
                    raise
        if self.keep_alive:
            self._conn = conn
        else:
            conn.close()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return Response(r.status, r.headers, parsed)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def put(self, path, body, **kw):
        return self.request("PUT", path, body, **kw)

    def patch(self, path, body, ctype="application/merge-patch+json", **kw):
        return self.request("PATCH", path, body, ctype=ctype, **kw)

    def delete(self, path, body=None, **kw):
        return self.request("DELETE", path, body, **kw)

    def call(self, method, path, body=None, ctype=JSON):
        """The body of a successful answer; ApiError for a 4xx or 5xx."""
        r = self.request(method, path, body, ctype)
        if r.status >= 400:
            raise ApiError.from_response(r.status, r.body)
        return r.body

    def list(self, path):
        """The items of a list (GET path); ApiError as call()."""
        return (self.call("GET", path) or {}).get("items") or []

    def watch(self, path, headers=None):
        return Watch(self, path, headers)

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Watch:
    """An open watch; next() returns the next event or None at end of stream."""

    def __init__(self, client, path, headers=None):
        self.conn = client.connect(timeout=10)
        self.conn.request("GET", client.prefix + path, headers=client.headers(headers))
        self.resp = self.conn.getresponse()

    def next(self, timeout=30):
        """The next event, None at the end of the stream; AssertionError when
        nothing arrives within timeout seconds (a cap for a loaded machine: a
        caller that means to see that nothing arrives passes its own)."""
        self.conn.sock.settimeout(timeout)
        try:
            line = self.resp.readline()
        except (socket.timeout, TimeoutError):
            raise AssertionError("no watch event within %ss" % timeout)
        return json.loads(line) if line.strip() else None

    def collect(self, n, timeout=30):
        out = []
        for _ in range(n):
            ev = self.next(timeout)
            if ev is None:
                break
            out.append(ev)
        return out

    def close(self):
        self.conn.close()


def for_server(port, ca, token, host="127.0.0.1"):
    """A client of the test API server on host:port, trusting its CA file."""
    return Client("https://%s:%d" % (host, port), ssl.create_default_context(cafile=ca), token)


def from_kubeconfig(path, user_agent=None, keep_alive=False):
    """A client of the current context of a kubeconfig (token, tokenFile or
    client certificate; CA data or file, or insecure-skip-tls-verify).
    OSError, KeyError, ValueError or ssl.SSLError when it cannot be used."""
    import yaml
    with open(path) as f:
        cfg = yaml.safe_load(f)
    base = os.path.dirname(os.path.abspath(path))

    def named(section, name):
        for e in cfg.get(section) or []:
            if e.get("name") == name:
                return e.get(section[:-1]) or {}
        raise ValueError("kubeconfig %s has no %s %r" % (path, section[:-1], name))
    ctx = named("contexts", cfg.get("current-context"))
    cluster, user = named("clusters", ctx.get("cluster")), named("users", ctx.get("user"))
    context = None
    if urllib.parse.urlsplit(cluster["server"]).scheme == "https":
        context = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            context.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif cluster.get("certificate-authority"):
            context.load_verify_locations(os.path.join(base, cluster["certificate-authority"]))
        _load_client_cert(context, user, base)
    token = user.get("token")
    if not token and user.get("tokenFile"):
        with open(os.path.join(base, user["tokenFile"])) as f:
            token = f.read().strip()
    return Client(cluster["server"], context, token, user_agent, keep_alive)


def _load_client_cert(context, user, base):
    """The user's client certificate and key (files, or -data written to
    temporary files the context reads at once) into context, where given."""
    made = []
    try:
        paths = []
        for field in ("client-certificate", "client-key"):
            if user.get(field + "-data"):
                fd, p = tempfile.mkstemp(prefix="kubeclient-")
                made.append(p)
                with os.fdopen(fd, "wb") as f:
                    f.write(base64.b64decode(user[field + "-data"]))
                paths.append(p)
            else:
                paths.append(os.path.join(base, user[field]) if user.get(field) else None)
        if all(paths):
            context.load_cert_chain(*paths)
    finally:
        for p in made:
            os.unlink(p)
