# tests/cluster/harness.py: what the cluster tests share: starting the test
# API server as a subprocess (port 0, temp state dir), an HTTPS client that
# trusts its CA and sends its token, a line reader for watch streams, polling
# until a condition holds (wait_for), and stopping a child process politely
# (stop_process).

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
APISERVER = os.path.join(HERE, "apiserver")
CRD = os.path.join(HERE, "testdata", "crd.yaml")


def wait_for(what, fn, timeout=15.0, interval=0.1):
    """Polls fn until it returns a truthy value, which it returns; fails naming `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


def stop_process(proc, timeout=10, sig=signal.SIGTERM):
    """Sends sig to a child still running, waits up to timeout, then kills it;
    returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class ServerProcess:
    def __init__(self, state, port=0, args=()):
        self.state = state
        try:
            os.unlink(os.path.join(state, "port"))   # rewritten when the server is ready
        except FileNotFoundError:
            pass
        os.makedirs(state, exist_ok=True)
        self.log = open(os.path.join(state, "apiserver.log"), "a")
        self.proc = subprocess.Popen([sys.executable, APISERVER, "--state", state, "--port", str(port)]
                                     + list(args), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        path = os.path.join(state, "port")
        while not os.path.exists(path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("apiserver did not start; see %s/apiserver.log" % state)
            time.sleep(0.05)
        with open(path) as f:
            self.port = int(f.read())
        with open(os.path.join(state, "token")) as f:
            self.token = f.read().strip()
        self.kubeconfig = os.path.join(state, "kubeconfig")
        self.ca = os.path.join(state, "pki", "ca.crt")

    def stop(self):
        stop_process(self.proc)
        self.log.close()

    def client(self, token=None):
        return Client(self.port, self.ca, self.token if token is None else token)


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def __repr__(self):
        return "<%d %s>" % (self.status, json.dumps(self.body)[:400])


class Client:
    def __init__(self, port, ca, token):
        self.port, self.token = port, token
        self.ctx = ssl.create_default_context(cafile=ca)

    def conn(self, timeout=10):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)

    def headers(self, extra=None):
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, ctype="application/json", headers=None):
        c = self.conn()
        h = self.headers(headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = ctype
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode()
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

    def watch(self, path, headers=None):
        return Watch(self, path, headers)


class Watch:
    """An open watch; next() returns the next event or None at end of stream."""

    def __init__(self, client, path, headers=None):
        self.conn = client.conn(timeout=10)
        self.conn.request("GET", path, headers=client.headers(headers))
        self.resp = self.conn.getresponse()

    def next(self, timeout=5):
        self.conn.sock.settimeout(timeout)
        try:
            line = self.resp.readline()
        except (socket.timeout, TimeoutError):
            raise AssertionError("no watch event within %ss" % timeout)
        return json.loads(line) if line.strip() else None

    def collect(self, n, timeout=5):
        out = []
        for _ in range(n):
            ev = self.next(timeout)
            if ev is None:
                break
            out.append(ev)
        return out

    def close(self):
        self.conn.close()


def load_yaml_docs(path):
    import yaml
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]
