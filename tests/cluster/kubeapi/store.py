# kubeapi/store.py: object storage. Owns the global, monotonic resourceVersion,
# the bounded event history that watches read (older resourceVersions get 410
# Gone), and persistence in SQLite so that a restarted server keeps its
# objects, its history and its resourceVersion counter.

import collections
import copy
import json
import sqlite3
import threading

from . import errors


class Event:
    __slots__ = ("rv", "type", "key", "obj", "old")

    def __init__(self, rv, type_, key, obj, old):
        self.rv, self.type, self.key, self.obj, self.old = rv, type_, key, obj, old


class Store:
    """Objects keyed by (type key, namespace, name); every write takes the
    next resourceVersion and appends one event to the history. All methods
    are safe to call from any thread; `lock` may be held by callers that need
    read-modify-write atomicity (it is re-entrant)."""

    def __init__(self, path, history=1000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.objects = {}                      # (tkey, ns, name) -> obj
        self.by_type = {}                      # tkey -> {(ns, name): obj}, the same objects
        self.history = collections.deque()     # Event, oldest first
        self.history_max = history
        self.compacted = 0                     # every event with rv > compacted is kept
        self.rv = 0
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS objects (tkey TEXT, ns TEXT, name TEXT,"
                        " data TEXT, PRIMARY KEY (tkey, ns, name))")
        self.db.execute("CREATE TABLE IF NOT EXISTS events (rv INTEGER PRIMARY KEY,"
                        " type TEXT, tkey TEXT, ns TEXT, name TEXT, data TEXT, old TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER)")
        self._load()

    def _load(self):
        for tkey, ns, name, data in self.db.execute("SELECT tkey, ns, name, data FROM objects"):
            self.objects[(tkey, ns, name)] = json.loads(data)
            self.by_type.setdefault(tkey, {})[(ns, name)] = self.objects[(tkey, ns, name)]
        for k, v in self.db.execute("SELECT k, v FROM meta"):
            if k == "rv":
                self.rv = v
            elif k == "compacted":
                self.compacted = v
        rows = self.db.execute("SELECT rv, type, tkey, ns, name, data, old FROM events"
                               " ORDER BY rv").fetchall()
        for rv, type_, tkey, ns, name, data, old in rows[-self.history_max:]:
            self.history.append(Event(rv, type_, (tkey, ns, name), json.loads(data),
                                      json.loads(old) if old else None))
        if self.history and len(rows) > self.history_max:
            self.compacted = self.history[0].rv - 1

    def close(self):
        with self.lock:
            self.db.close()

    # --- reads -------------------------------------------------------------

    def get(self, tkey, ns, name):
        with self.lock:
            obj = self.objects.get((tkey, ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, tkey, ns=None):
        """Copies of the objects of one type (in one namespace if ns), sorted
        by namespace and name, and the resourceVersion of that snapshot."""
        with self.lock:
            items = [copy.deepcopy(o) for (t, n, _), o in self.objects.items()
                     if t == tkey and (ns is None or n == ns)]
            rv = self.rv
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return items, rv

    def peek(self, tkey, ns, name):
        """The stored object itself, not a copy: read it, never change it."""
        with self.lock:
            return self.objects.get((tkey, ns, name))

    def scan(self, tkey, ns=None):
        """The stored objects of one type (in one namespace if ns), not copies:
        read them, never change them. A snapshot list, safe to iterate."""
        with self.lock:
            return [o for (n, _), o in self.by_type.get(tkey, {}).items() if ns is None or n == ns]

    def keys(self):
        with self.lock:
            return list(self.objects.keys())

    # --- writes ------------------------------------------------------------

    def put(self, tkey, obj, dry_run=False):
        """Create or replace; sets metadata.resourceVersion. Returns a copy."""
        meta = obj["metadata"]
        key = (tkey, meta.get("namespace", ""), meta["name"])
        with self.lock:
            old = self.objects.get(key)
            if dry_run:
                obj = copy.deepcopy(obj)
                meta = obj["metadata"]
                meta["resourceVersion"] = str(self.rv) if old is None else meta.get("resourceVersion", "")
                return obj
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            stored = copy.deepcopy(obj)
            self.objects[key] = stored
            self.by_type.setdefault(tkey, {})[key[1:]] = stored
            self._record("ADDED" if old is None else "MODIFIED", key, stored, old)
            self.db.execute("INSERT OR REPLACE INTO objects VALUES (?,?,?,?)",
                            key + (json.dumps(stored),))
            self._commit()
            return copy.deepcopy(stored)

    def remove(self, tkey, ns, name, dry_run=False):
        """Delete; the returned copy carries the resourceVersion of the deletion."""
        key = (tkey, ns, name)
        with self.lock:
            old = self.objects.get(key)
            if old is None:
                return None
            if dry_run:
                return copy.deepcopy(old)
            del self.objects[key]
            self.by_type.get(tkey, {}).pop(key[1:], None)
            self.rv += 1
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._record("DELETED", key, gone, old)
            self.db.execute("DELETE FROM objects WHERE tkey=? AND ns=? AND name=?", key)
            self._commit()
            return copy.deepcopy(gone)

    def _record(self, type_, key, obj, old):
        self.history.append(Event(self.rv, type_, key, obj, old))
        self.db.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?)",
                        (self.rv, type_) + key + (json.dumps(obj), json.dumps(old) if old else None))
        while len(self.history) > self.history_max:
            self.compacted = self.history.popleft().rv
        self.changed.notify_all()

    def _commit(self):
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('rv', ?)", (self.rv,))
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('compacted', ?)", (self.compacted,))
        if self.rv % 100 == 0:
            self.db.execute("DELETE FROM events WHERE rv <= ?", (self.compacted,))

    # --- history -----------------------------------------------------------

    def events_after(self, rv, timeout):
        """Events with resourceVersion > rv, waiting up to timeout seconds for
        one to appear. Raises 410 Gone when the history no longer reaches rv."""
        with self.lock:
            if rv < self.compacted:
                raise errors.gone("too old resource version: %d (%d)" % (rv, self.compacted + 1))
            if self.rv <= rv and timeout > 0:
                self.changed.wait(timeout)
            if rv < self.compacted:
                raise errors.gone("too old resource version: %d (%d)" % (rv, self.compacted + 1))
            return [e for e in self.history if e.rv > rv]

    def check_not_compacted(self, rv):
        with self.lock:
            if rv < self.compacted:
                raise errors.gone("too old resource version: %d (%d)" % (rv, self.compacted + 1))

    def current_rv(self):
        with self.lock:
            return self.rv
