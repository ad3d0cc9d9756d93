# kubelet/api.py: the kubelet's connection to the test API server, from the
# server's state directory (port, admin token, CA: a real kubelet uses its
# node credentials), through the one client (kubeclient.py); a request that
# gets no answer is logged and answered None. Also how the kubelet writes
# paths and timestamps for the API.
# Must not: log the token; retry (the sync loop comes round again).

import datetime
import http.client
import os
import urllib.parse

from tests.cluster import kubeclient

from .log import log


def q(s):
    """A name as one path segment."""
    return urllib.parse.quote(s, safe="")


def now_rfc3339(micro=False):
    t = datetime.datetime.now(datetime.timezone.utc)
    if micro:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class Api:
    def __init__(self, state):
        with open(os.path.join(state, "port")) as f:
            self.port = int(f.read())
        with open(os.path.join(state, "token")) as f:
            token = f.read().strip()
        self.ca_path = os.path.join(state, "pki", "ca.crt")
        self.client = kubeclient.for_server(self.port, self.ca_path, token)

    def call(self, method, path, body=None, ctype=kubeclient.JSON):
        """The answer (a kubeclient.Response, whatever its code), or None when none came."""
        try:
            return self.client.request(method, path, body, ctype=ctype)
        except (OSError, http.client.HTTPException) as e:
            log("warn", "api_error", method=method, path=path, error=e)
            return None

    def get_obj(self, kind, ns, name):
        """A namespaced core object (kind: its resource, e.g. secrets), or None."""
        r = self.call("GET", "/api/v1/namespaces/%s/%s/%s" % (q(ns), kind, q(name)))
        return r.body if r is not None and r.status == 200 else None
