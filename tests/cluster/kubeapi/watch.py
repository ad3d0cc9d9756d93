# kubeapi/watch.py: watch streams. One JSON event per line (ADDED, MODIFIED,
# DELETED, BOOKMARK, ERROR), starting from the current state or from a
# resourceVersion in the history (410 Gone as an ERROR event when the history
# no longer reaches it), filtered by label/field selectors (an object leaving
# the selection is DELETED, entering it ADDED), with bookmarks and timeouts.

import time

from . import errors, selectors, table

DEFAULT_TIMEOUT = 1800


class WatchRequest:
    def __init__(self, api, rtype, version, ns, params, as_table=False, include="Metadata",
                 bookmark_interval=60.0):
        self.api, self.rtype, self.version, self.ns = api, rtype, version, ns
        self.labels = selectors.parse_labels(params.get("labelSelector"))
        self.fields = selectors.parse_fields(params.get("fieldSelector"), rtype)
        rv = params.get("resourceVersion") or ""
        if rv not in ("", "0") and not rv.isdigit():
            raise errors.bad_request("invalid resource version: %s" % rv)
        self.rv = rv
        self.timeout = float(params.get("timeoutSeconds") or DEFAULT_TIMEOUT)
        self.bookmarks = params.get("allowWatchBookmarks") in ("true", "1")
        self.initial = params.get("sendInitialEvents") == "true"
        self.as_table, self.include = as_table, include
        self.bookmark_interval = bookmark_interval
        self.sent_columns = False

    def _matches(self, obj):
        if obj is None:
            return False
        if self.ns and obj["metadata"].get("namespace", "") != self.ns:
            return False
        return selectors.labels_match(self.labels, obj) and selectors.fields_match(self.fields, obj)

    def _event(self, type_, obj):
        obj = self.api.present(self.rtype, self.version, obj)
        if self.as_table:
            obj = table.table(self.rtype, self.version, [obj], self.include,
                              {"resourceVersion": obj["metadata"]["resourceVersion"]},
                              with_columns=not self.sent_columns)
            self.sent_columns = True
        return {"type": type_, "object": obj}

    def _bookmark(self, rv, initial_end=False):
        meta = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"type": "BOOKMARK", "object": {"kind": self.rtype.kind,
                                               "apiVersion": self.rtype.api_version(self.version),
                                               "metadata": meta}}

    def run(self, send):
        """Stream events through send(dict) until the timeout or a send error."""
        store = self.api.store
        deadline = time.monotonic() + self.timeout
        if self.rv in ("", "0") or self.initial:
            items, cursor = store.list(self.rtype.key, self.ns or None)
            for o in items:
                if self._matches(o):
                    send(self._event("ADDED", o))
            if self.initial and self.bookmarks:
                send(self._bookmark(cursor, initial_end=True))
        else:
            cursor = int(self.rv)
        last_bookmark = time.monotonic()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            wait = min(left, self.bookmark_interval if self.bookmarks else left, 1.0)
            try:
                events = store.events_after(cursor, wait)
            except errors.ApiError as e:
                send({"type": "ERROR", "object": e.status()})
                return
            for e in events:
                cursor = e.rv
                if e.key[0] != self.rtype.key:
                    continue
                now_in = e.type != "DELETED" and self._matches(e.obj)
                was_in = e.type != "ADDED" and self._matches(e.old)
                if e.type == "DELETED" and was_in:
                    send(self._event("DELETED", e.obj))
                elif now_in and was_in:
                    send(self._event("MODIFIED", e.obj))
                elif now_in:
                    send(self._event("ADDED", e.obj))
                elif was_in:
                    send(self._event("DELETED", e.obj))
            if self.bookmarks and time.monotonic() - last_bookmark >= self.bookmark_interval:
                send(self._bookmark(cursor))
                last_bookmark = time.monotonic()
