# controllers/base.py: what every controller does with the API server through
# the one client they share: writes that tolerate the expected races (a 404
# or 409 means someone changed the object in between: logged, and retried
# from a fresh read on the next pass), and Events, written best effort.
# Must not: list objects (manager.py does, once per pass) or hold the state
# of any one controller.

import http.client
import time

from tests.cluster.kubeapi.errors import ApiError

from .log import log
from .objects import CORE, stamp

# what a request that never got an answer raises
UNANSWERED = (OSError, http.client.HTTPException)


def describe(e):
    """An error as the controllers write it in logs and conditions."""
    if isinstance(e, ApiError):
        return "HTTP %d: %s" % (e.code, e.message)
    return str(e)


class Controller:
    def __init__(self, client):
        self.c = client

    def write(self, what, method, path, body=None, **kv):
        """The answer to one API write, or None when it failed (logged)."""
        try:
            return self.c.call(method, path, body)
        except ApiError as e:
            lvl = "debug" if e.code in (404, 409) else "error"
            log(lvl, event="write_failed", what=what, code=e.code, msg=describe(e), **kv)
        except UNANSWERED as e:
            log("error", event="write_failed", what=what, msg=repr(e), **kv)
        return None

    def event(self, obj, kind, api_version, reason, message, etype="Normal", component="default-scheduler"):
        m = obj["metadata"]
        ns = m.get("namespace") or "default"
        now_s = stamp()
        ev = {"apiVersion": "v1", "kind": "Event",
              "metadata": {"name": "%s.%x" % (m["name"], time.time_ns()), "namespace": ns},
              "involvedObject": {"kind": kind, "apiVersion": api_version, "name": m["name"],
                                 "namespace": m.get("namespace", ""), "uid": m.get("uid", ""),
                                 "resourceVersion": m.get("resourceVersion", "")},
              "reason": reason, "message": message, "type": etype, "count": 1,
              "source": {"component": component}, "firstTimestamp": now_s, "lastTimestamp": now_s,
              "reportingComponent": component, "reportingInstance": component}
        try:
            self.c.call("POST", "%s/namespaces/%s/events" % (CORE, ns), ev)
        except (ApiError,) + UNANSWERED as e:
            log("debug", event="event_failed", reason=reason, msg=describe(e))
