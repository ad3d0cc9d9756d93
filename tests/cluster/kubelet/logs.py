# kubelet/logs.py: containers' logs, as a real kubelet and its CRI runtime
# keep them: one file per container instance,
# <root>/logs/<ns>_<pod>_<uid>/<container>/<n>.log (n counts its starts; the
# files outlive the pod, as /var/log/pods), in the CRI format, one record per
# line: "<RFC3339Nano time> <stdout|stderr> <F|P> <text>" (P: a part of a
# line longer than 16 KiB). pump() writes a process's stdout and stderr there;
# read() answers the options of GET /containerLogs (tailLines, sinceSeconds,
# timestamps, limitBytes; follow through follow()).
# Must not: block the sync loop (pumps are threads; readers run in the
# kubelet API's threads).

import datetime
import os
import threading
import time

MAX_LINE = 16 * 1024


def now_nano():
    ns = time.time_ns()
    t = datetime.datetime.fromtimestamp(ns // 10 ** 9, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + ".%09dZ" % (ns % 10 ** 9)


def parse_time(ts):
    """Seconds since the epoch of a record's RFC3339Nano time."""
    base, _, frac = ts.rstrip("Z").partition(".")
    t = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


class _Writer:
    """The log file of one instance, shared by its two pumps; closed by the last."""
    def __init__(self, path, users):
        self.f = open(path, "ab")
        self.lock = threading.Lock()
        self.users = users

    def write(self, stream, data):
        tag = b"P" if len(data) >= MAX_LINE and not data.endswith(b"\n") else b"F"
        if data.endswith(b"\n"):
            data = data[:-1]
        with self.lock:
            self.f.write(b"%s %s %s %s\n" % (now_nano().encode(), stream, tag, data))
            self.f.flush()

    def done(self):
        with self.lock:
            self.users -= 1
            if self.users == 0:
                self.f.close()


def pump(proc, path):
    """Threads that copy proc's stdout and stderr (pipes) into the log file path."""
    w = _Writer(path, 2)

    def run(pipe, stream):
        try:
            for data in iter(lambda: pipe.readline(MAX_LINE), b""):
                w.write(stream, data)
        finally:
            pipe.close()
            w.done()
    threads = [threading.Thread(target=run, args=(proc.stdout, b"stdout"), daemon=True, name="log-out"),
               threading.Thread(target=run, args=(proc.stderr, b"stderr"), daemon=True, name="log-err")]
    for t in threads:
        t.start()
    return threads


def parse(raw):
    """[(time string, stream, tag, text bytes)] of the complete records in raw."""
    out = []
    for line in raw.split(b"\n"):
        parts = line.split(b" ", 3)
        if len(parts) < 3:
            continue
        out.append((parts[0].decode(), parts[1], parts[2], parts[3] if len(parts) > 3 else b""))
    return out


def render(rec, timestamps):
    ts, _, tag, text = rec
    out = text + (b"\n" if tag != b"P" else b"")
    return (ts.encode() + b" " + out) if timestamps else out


def read(path, tail=None, since=None, timestamps=False):
    """(the log's text as GET /containerLogs answers it, the offset read up to)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return b"", 0
    end = raw.rfind(b"\n") + 1
    recs = parse(raw[:end])
    if since is not None:
        recs = [r for r in recs if parse_time(r[0]) >= since]
    if tail is not None:
        recs = recs[len(recs) - tail:] if tail > 0 else []
    return b"".join(render(r, timestamps) for r in recs), end


def text(path, max_bytes=None):
    """The plain text of a log (for the termination message)."""
    out, _ = read(path)
    return out if max_bytes is None else out[-max_bytes:]


def follow(path, offset, running, write, since=None, timestamps=False, period=0.1):
    """Writes what is appended to path after offset while running() holds,
    then what is left; write(data) returns False when the reader is gone."""
    with open(path, "rb") as f:
        f.seek(offset)
        buf = b""
        while True:
            alive = running()
            data = f.read()
            if data:
                buf += data
                end = buf.rfind(b"\n") + 1
                recs = parse(buf[:end])
                buf = buf[end:]
                if since is not None:
                    recs = [r for r in recs if parse_time(r[0]) >= since]
                out = b"".join(render(r, timestamps) for r in recs)
                if out and not write(out):
                    return
            elif not alive:
                return
            else:
                time.sleep(period)
