# kubelet/server.py: the kubelet API, the part the API server uses for
# `kubectl logs`: GET /containerLogs/{namespace}/{pod}/{container} with
# follow, previous, tailLines, timestamps, sinceSeconds, limitBytes, over
# HTTPS on the node's address (port 10250, or an ephemeral one where that is
# taken; the Node publishes it in status.daemonEndpoints), with a
# self-signed certificate, as a real kubelet serves without --tls-cert-file.
# Clients must present a certificate of the cluster CA (--client-ca-file:
# the API server's kubelet client certificate); without one: 401
# Unauthorized, as a real kubelet with anonymous auth off. Errors are plain
# text with the real kubelet's wording (400 for a container with no log to
# give, 404 for an unknown pod or container).
# Must not: change a pod or container (it only reads the kubelet's record and
# the log files).

import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import logs

PORT = 10250


class KubeletServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, kubelet, address, port, certfile, keyfile, client_ca):
        try:
            super().__init__((address, port), Handler)
        except OSError:
            super().__init__((address, 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certfile, keyfile)
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(client_ca)
        self.socket = ctx.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self.kubelet = kubelet

    @property
    def port(self):
        return self.server_address[1]

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, TimeoutError, OSError)):
            return
        super().handle_error(request, client_address)

    def start(self):
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
                         name="kubelet-api").start()
        return self


class LogError(Exception):
    def __init__(self, code, text):
        super().__init__(text)
        self.code, self.text = code, text


def _int(params, k):
    v = params.get(k)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise LogError(400, '%s: invalid value "%s"' % (k, v))


def find(kubelet, ns, pod_name, container, previous):
    """(pod, container, log path) that GET /containerLogs reads, or LogError."""
    pods = [p for p in list(kubelet.pods.values()) if p.ns == ns and p.name == pod_name]
    if not pods:
        raise LogError(404, 'pod "%s" does not exist' % pod_name)
    pod = pods[-1]
    c = next((c for c in pod.containers if c.name == container), None)
    if c is None:
        raise LogError(404, 'container "%s" not found in pod "%s"' % (container, pod_name))
    if previous:
        if c.prev_log_path is None:
            raise LogError(400, 'previous terminated container "%s" in pod "%s" not found' % (container, pod_name))
        return pod, c, c.prev_log_path
    if c.log_path is None:
        reason = c.failed_to_start[0] if c.failed_to_start else "ContainerCreating"
        if reason == "ErrImagePull":
            reason = "image can't be pulled"
        raise LogError(400, 'container "%s" in pod "%s" is waiting to start: %s' % (container, pod_name, reason))
    return pod, c, c.log_path


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "vitjob-local-kubelet"

    def log_message(self, fmt, *args):
        pass

    def _plain(self, code, text):
        data = (text + "\n").encode() if text else b""
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        try:
            self._get()
        except LogError as e:
            self._plain(e.code, e.text)
        except (ConnectionError, ssl.SSLError, BrokenPipeError):
            self.close_connection = True

    def _get(self):
        if not self.connection.getpeercert():
            raise LogError(401, "Unauthorized")
        url = urllib.parse.urlsplit(self.path)
        params = {k: v[0] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        if len(parts) != 4 or parts[0] != "containerLogs":
            raise LogError(404, "404 page not found")
        ns, pod_name, container = parts[1:]
        follow = params.get("follow") in ("true", "1")
        previous = params.get("previous") in ("true", "1")
        timestamps = params.get("timestamps") in ("true", "1")
        tail, since_s, limit = _int(params, "tailLines"), _int(params, "sinceSeconds"), _int(params, "limitBytes")
        since = time.time() - since_s if since_s else None
        pod, c, path = find(self.server.kubelet, ns, pod_name, container, previous)
        data, offset = logs.read(path, tail=tail if tail is not None and tail >= 0 else None, since=since,
                                 timestamps=timestamps)
        left = [limit if limit and limit > 0 else None]

        def cut(d):
            if left[0] is None:
                return d
            d = d[:left[0]]
            left[0] -= len(d)
            return d
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if not follow or previous:
            body = cut(data)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def write(d):
            d = cut(d)
            if d:
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(d), d))
                    self.wfile.flush()
                except (ConnectionError, ssl.SSLError, OSError):
                    return False
            return left[0] is None or left[0] > 0

        # follows this instance until it ends (a restart starts another file)
        if write(data):
            logs.follow(path, offset, lambda: c.log_path == path and c.proc is not None and c.exit_code is None,
                        write, since=since, timestamps=timestamps)
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (ConnectionError, ssl.SSLError, OSError):
            self.close_connection = True
