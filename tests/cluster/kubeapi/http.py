# kubeapi/http.py: the HTTPS front end: bearer-token authentication
# (kubeapi/auth.py), impersonation (Impersonate-* headers,
# kubeapi/authorization.py) and RBAC authorization (kubeapi/rbac.py) of every
# request, the authorization.k8s.io access reviews, URL routing (discovery, OpenAPI, resource and subresource paths),
# pods/binding, pods/log (kubeapi/podlogs.py: proxied to the node's kubelet, streamed), request bodies in JSON or Kubernetes protobuf (kubeapi/protobuf.py), content
# negotiation (JSON, Table, PartialObjectMetadata) and chunked watch streams.

import http.client
import json
import re
import ssl
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import apply, authorization, discovery, errors, podlogs, protobuf, rbac, table
from .watch import WatchRequest

UNAUTHENTICATED = {"/version", "/healthz", "/livez", "/readyz"}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port, api, certfile, keyfile, verbose=False, bookmark_interval=60.0,
                 address="127.0.0.1"):
        super().__init__((address, port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certfile, keyfile)
        ctx.set_alpn_protocols(["http/1.1"])
        self.socket = ctx.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self.api, self.verbose = api, verbose
        self.bookmark_interval = bookmark_interval
        self.kubelet_client = None      # (crt, key) for pods/log (tls.ensure_kubelet_client)

    @property
    def port(self):
        return self.server_address[1]

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out as separate writes: without TCP_NODELAY, Nagle
    # holds the body until the client ACKs the headers (40 ms delayed ACK)
    disable_nagle_algorithm = True
    server_version = "vitjob-test-apiserver"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("%s\n" % (fmt % args))

    # --- plumbing ---------------------------------------------------------------

    def _send_json(self, code, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _raw_body(self):
        """The request body, read once (an error answered before the body was
        read must still consume it, or it would be taken for the next request)."""
        if self._body is None:
            n = int(self.headers.get("Content-Length") or 0)
            self._body = self.rfile.read(n) if n else b""
        return self._body

    def _read_body(self):
        raw = self._raw_body()
        if not raw:
            return None
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype == protobuf.CONTENT_TYPE:
            return protobuf.decode(raw)
        try:
            return json.loads(raw)
        except ValueError as e:
            raise errors.bad_request("couldn't get version/kind; json parse error: %s" % e)

    def _dispatch(self, method):
        url = urllib.parse.urlsplit(self.path)
        params = {k: v[0] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.rstrip("/") or "/"
        self._body = None
        try:
            self.user = self.server.api.auth.authenticate(self.headers.get("Authorization", ""))
            if self.user is None and path not in UNAUTHENTICATED:
                raise errors.unauthorized()
            if self.user is not None:
                self.user = authorization.impersonate(self.server.api.authz, self.user, self.headers, self.path)
            self._route(method, path, params)
        except errors.ApiError as e:
            self._raw_body()
            self._send_json(e.code, e.status())
        except authorization.PlainError as e:
            self._raw_body()
            data = (e.text + "\n").encode()
            self.send_response(e.code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (ConnectionError, ssl.SSLError):
            self.close_connection = True
        except Exception as e:  # a bug in the server: answer 500, keep serving
            import traceback
            traceback.print_exc()
            self._raw_body()
            self._send_json(500, errors.ApiError(500, "InternalError", "internal error: %r" % (e,)).status())

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    # --- routing ----------------------------------------------------------------

    def _authorize_path(self, path):
        if self.user is not None and path not in UNAUTHENTICATED:
            self.server.api.authz.check(self.user, rbac.Attributes(
                self.command.lower() if self.command != "HEAD" else "get", path=path, resource_request=False))

    def _route(self, method, path, params):
        api = self.server.api
        reg = api.registry
        if not (path.startswith("/api/") or (path.startswith("/apis/") and path.count("/") >= 3)):
            self._authorize_path(path)
        if path in ("/healthz", "/livez", "/readyz"):
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(data)
            return
        if path == "/version":
            return self._send_json(200, discovery.VERSION)
        if path == "/api":
            return self._send_json(200, discovery.api_versions("127.0.0.1:%d" % self.server.port))
        if path == "/apis":
            return self._send_json(200, discovery.api_group_list(reg))
        if path == "/openapi/v3":
            return self._send_json(200, discovery.openapi_root(reg))
        m = re.match(r"^/openapi/v3/(?:api/(v1)|apis/([^/]+)/([^/]+))$", path)
        if m:
            g, v = (("", "v1") if m.group(1) else (m.group(2), m.group(3)))
            doc = discovery.openapi_gv(reg, g, v)
            if doc is None:
                raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
            return self._send_json(200, doc)
        m = re.match(r"^/api/(v1)(/.*)?$", path) or re.match(r"^/apis/([^/]+)(/.*)?$", path)
        if not m:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        if path.startswith("/api/"):
            group, version, rest = "", m.group(1), m.group(2) or ""
        else:
            group = m.group(1)
            rest = m.group(2) or ""
            if not rest:
                doc = discovery.api_group(reg, group)
                if doc is None:
                    raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
                return self._send_json(200, doc)
            version, _, rest = rest[1:].partition("/")
            rest = "/" + rest if rest else ""
        parts = [urllib.parse.unquote(p) for p in rest.split("/") if p]
        if group == authorization.GROUP and version == authorization.VERSION and parts:
            return self._review(method, parts, params)
        if not parts:
            doc = discovery.resource_list(reg, group, version)
            if doc is None:
                raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
            return self._send_json(200, doc)
        ns = ""
        if parts[0] == "namespaces" and len(parts) >= 3 and reg.lookup(group, version, parts[2]):
            ns, parts = parts[1], parts[2:]
        rtype = reg.lookup(group, version, parts[0])
        if rtype is None or len(parts) > 3 or (ns and not rtype.namespaced):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else None
        if sub is not None and not ((sub == "status" and rtype.status) or
                                    (sub == "token" and rtype.resource == "serviceaccounts") or
                                    (sub in ("binding", "log") and rtype.resource == "pods")):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        if rtype.namespaced and name is not None and not ns:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        api.authz.check(self.user, rbac.Attributes(_verb(method, name, params), rtype.group, rtype.resource,
                                                   sub or "", ns, name or ""))
        self._resource(method, rtype, version, ns, name, sub, params)

    def _review(self, method, parts, params):
        """authorization.k8s.io/v1: create-only reviews, answered, never stored."""
        ns = ""
        if parts[0] == "namespaces" and len(parts) >= 3:
            ns, parts = parts[1], parts[2:]
        kind = authorization.KINDS.get(parts[0])
        if kind is None or len(parts) > 1 or bool(ns) != kind[1]:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        self.server.api.authz.check(self.user, rbac.Attributes(_verb(method, None, params), authorization.GROUP,
                                                               parts[0], "", ns, ""))
        if method != "POST":
            raise errors.method_not_allowed()
        self._send_json(201, authorization.review(self.server.api.authz, self.user, parts[0], ns,
                                                  self._read_body()))

    def _warning_headers(self, warnings):
        return [("Warning", '299 - "%s"' % w.replace('"', '\\"')) for w in warnings]

    def _present_one(self, rtype, version, obj, code=200, warnings=()):
        accept = self.headers.get("Accept", "")
        if table.wants_table(accept):
            obj = table.table(rtype, version, [obj], self._include(),
                              {"resourceVersion": obj["metadata"].get("resourceVersion", "")})
        elif "as=PartialObjectMetadata" in accept:
            obj = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
        self._send_json(code, obj, self._warning_headers(warnings))

    def _include(self):
        return self.url_params.get("includeObject") or "Metadata"

    def _resource(self, method, rtype, version, ns, name, sub, params):
        api = self.server.api
        self.url_params = params
        if sub == "token":
            if method != "POST":
                raise errors.method_not_allowed()
            return self._send_json(201, api.token_request(ns, name, self._read_body()))
        if sub == "log":
            if method != "GET":
                raise errors.method_not_allowed()
            return self._pod_log(ns, name, params)
        if sub == "binding":
            if method != "POST":
                raise errors.method_not_allowed()
            return self._send_json(201, api.bind(rtype, ns, name, self._read_body(), params))
        if method == "GET" and name is None:
            if params.get("watch") in ("true", "1"):
                return self._watch(rtype, version, ns, params)
            items, rv, cont, remaining = api.list(rtype, version, ns, params)
            meta = {"resourceVersion": str(rv)}
            if cont:
                meta["continue"] = cont
                if remaining is not None and not params.get("labelSelector") and not params.get("fieldSelector"):
                    meta["remainingItemCount"] = remaining
            accept = self.headers.get("Accept", "")
            if table.wants_table(accept):
                return self._send_json(200, table.table(rtype, version, items, self._include(), meta))
            if "as=PartialObjectMetadataList" in accept:
                return self._send_json(200, {
                    "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
                    "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                               "metadata": o["metadata"]} for o in items]})
            if not rtype.crd:   # a real server's built-in list items carry no kind/apiVersion
                for o in items:
                    o.pop("kind", None)
                    o.pop("apiVersion", None)
            return self._send_json(200, {"kind": rtype.kind + "List", "apiVersion": rtype.api_version(version),
                                         "metadata": meta, "items": items})
        if method == "GET":
            return self._present_one(rtype, version, api.get(rtype, version, ns, name))
        if method == "POST" and name is None:
            obj, warnings = api.create(rtype, version, ns, self._read_body(), params, user=self.user,
                                        agent=self.headers.get("User-Agent", ""))
            return self._present_one(rtype, version, obj, 201, warnings)
        if method == "PUT" and name is not None:
            obj, warnings = api.update(rtype, version, ns, name, self._read_body(), params, sub, user=self.user,
                                        agent=self.headers.get("User-Agent", ""))
            return self._present_one(rtype, version, obj, 200, warnings)
        if method == "PATCH" and name is not None and \
                (self.headers.get("Content-Type") or "").split(";")[0].strip() == apply.CONTENT_TYPE:
            obj, warnings, created = api.apply(rtype, version, ns, name, self._raw_body(), params, sub,
                                               user=self.user, agent=self.headers.get("User-Agent", ""))
            return self._present_one(rtype, version, obj, 201 if created else 200, warnings)
        if method == "PATCH" and name is not None:
            obj, warnings = api.patch(rtype, version, ns, name, self.headers.get("Content-Type"),
                                      self._read_body(), params, sub, user=self.user,
                                      agent=self.headers.get("User-Agent", ""))
            return self._present_one(rtype, version, obj, 200, warnings)
        if method == "DELETE" and name is not None and sub is None:
            obj = api.delete(rtype, version, ns, name, self._read_body(), params)
            return self._present_one(rtype, version, obj)
        if method == "DELETE" and name is None:
            items, rv = api.delete_collection(rtype, version, ns, self._read_body(), params)
            return self._send_json(200, {"kind": rtype.kind + "List", "apiVersion": rtype.api_version(version),
                                         "metadata": {"resourceVersion": str(rv)}, "items": items})
        raise errors.method_not_allowed()

    def _pod_log(self, ns, name, params):
        """GET pods/NAME/log: the kubelet's answer, streamed as it comes (chunked)."""
        resp = podlogs.open_log(self.server.api, ns, name, params, self.server.kubelet_client)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        try:
            while resp is not None:
                data = resp.read1(32768)
                if not data:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (ConnectionError, ssl.SSLError, OSError, http.client.HTTPException):
            self.close_connection = True
        finally:
            if resp is not None:
                resp.conn.close()

    def _watch(self, rtype, version, ns, params):
        accept = self.headers.get("Accept", "")
        req = WatchRequest(self.server.api, rtype, version, ns, params, as_table=table.wants_table(accept),
                           include=self._include(), bookmark_interval=self.server.bookmark_interval)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        lock = threading.Lock()

        def send(event):
            data = json.dumps(event).encode() + b"\n"
            with lock:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        try:
            req.run(send)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (ConnectionError, ssl.SSLError, OSError):
            self.close_connection = True


def _verb(method, name, params):
    """The authorization verb of a request, as the real server's request info."""
    if method == "GET":
        if params.get("watch") in ("true", "1"):
            return "watch"
        return "get" if name else "list"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
