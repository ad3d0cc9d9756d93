# kubelet/pods.py: the kubelet's own record of the pods it runs and their
# containers (processes, exits, restarts, readiness, the phase reported), and
# what a container's exit does to them: restartPolicy Always/OnFailure
# restarts in place with back-off (2^n/2 s, at most 300 s), Never and
# OnFailure pods end Succeeded or Failed; the message is the termination
# message file's end, or (FallbackToLogsOnError, a failed container, an
# empty file) the log's tail.
# Must not: start, signal or kill processes (runtime.py does), or talk to the
# API server.

import time

from . import logs
from .api import now_rfc3339
from .log import log

LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
TERM_FILE_BYTES = 4096      # the kubelet reads no more of the file (its end)


class Container:
    def __init__(self, spec):
        self.spec = spec
        self.name = spec["name"]
        self.proc = None
        self.log_path = None        # the log of the current (last started) instance
        self.prev_log_path = None   # the one before it (kubectl logs --previous)
        self.starts = 0
        self.pumps = []             # the threads writing the current instance's log
        self.started_at = None
        self.finished_at = None
        self.exit_code = None
        self.reason = None
        self.message = None
        self.term_file = None       # the current instance's termination message file (runtime.py)
        self.restart_count = 0
        self.next_start = 0.0
        self.ready = False
        self.probe_fails = 0
        self.probe_ok = 0
        self.next_probe = 0.0
        self.failed_to_start = None


class Pod:
    def __init__(self, obj, ip, netns, veth, root):
        self.obj = obj
        self.uid = obj["metadata"]["uid"]
        self.ns = obj["metadata"]["namespace"]
        self.name = obj["metadata"]["name"]
        self.ip, self.netns, self.veth, self.root = ip, netns, veth, root
        self.containers = [Container(c) for c in obj["spec"].get("containers", [])]
        self.term_sent = None       # monotonic time SIGTERM went out
        self.kill_at = None
        self.phase = "Pending"
        self.start_time = now_rfc3339()
        self.hosts_text = None
        self.status_sent = None
        self.done = False           # terminal: no more containers run


def reap(pod):
    """Records the exit of containers that ended; sets a finished pod's phase."""
    exited_now = False
    policy = pod.obj["spec"].get("restartPolicy", "Always")
    for c in pod.containers:
        if c.proc is None or c.exit_code is not None:
            continue
        rc = c.proc.poll()
        if rc is None:
            continue
        for t in c.pumps:          # its output written out (a child still holding the pipe: 1 s)
            t.join(1)
        c.exit_code = rc if rc >= 0 else 128 - rc
        c.finished_at = now_rfc3339()
        c.reason = "Completed" if c.exit_code == 0 else "Error"
        c.message = termination_message(c)
        exited_now = True
        log("info", "container_exited", pod="%s/%s" % (pod.ns, pod.name), container=c.name,
            exit_code=c.exit_code)
        if pod.term_sent is None and (policy == "Always" or (policy == "OnFailure" and c.exit_code != 0)):
            c.restart_count += 1
            c.next_start = time.monotonic() + min(300, 2 ** min(c.restart_count, 8) / 2)
    if exited_now and pod.term_sent is None:
        exited = [c for c in pod.containers if c.exit_code is not None]
        if len(exited) == len(pod.containers):
            if policy == "Never":
                pod.done = True
                pod.phase = "Succeeded" if all(c.exit_code == 0 for c in exited) else "Failed"
            elif policy == "OnFailure" and all(c.exit_code == 0 for c in exited):
                pod.done = True
                pod.phase = "Succeeded"


def termination_message(c):
    """What a real kubelet reports as the message: the end (at most 4096
    bytes) of the file at terminationMessagePath; when that is empty, under
    FallbackToLogsOnError and for a container that failed, the log's tail."""
    data = b""
    if c.term_file:
        try:
            with open(c.term_file, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - TERM_FILE_BYTES))
                data = f.read()
        except OSError:
            data = b""
    if data:
        return data.decode("utf-8", "replace")
    if c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError" and c.exit_code != 0:
        return log_tail(c)
    return None


def log_tail(c):
    """The end of a container's log: its termination message under FallbackToLogsOnError."""
    data = logs.text(c.log_path, LOG_TAIL_BYTES * 4) if c.log_path else b""
    lines = data.decode("utf-8", "replace").splitlines()[-LOG_TAIL_LINES:]
    return "\n".join(lines)[-LOG_TAIL_BYTES:]
