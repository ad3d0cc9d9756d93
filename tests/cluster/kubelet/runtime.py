# kubelet/runtime.py: containers as local processes: each one runs
# `nsenter --net=<the pod's netns> unshare --mount --uts` a shell that makes
# its mounts (mounts.py) and hostname, then execs its command (image.py) with
# its environment (env.py), as runAsUser/runAsGroup/fsGroup where set
# (setpriv); stdout and stderr go through pipes to the instance's log file
# (logs.py: <root>/logs/<ns>_<pod>_<uid>/<c>/<n>.log, CRI format, kept after
# the pod as /var/log/pods; the previous instance's file is kept for
# `kubectl logs --previous`). Each instance gets an empty file of its own,
# bind-mounted at its terminationMessagePath (pods.py reads it when it ends).
# Every container has
# PR_SET_PDEATHSIG SIGKILL and its own process group: a kubelet that dies
# takes its pods with it. Readiness probes (httpGet) run from here.
# Must not: decide a pod's phase (pods.py) or report status (status.py).

import ctypes
import http.client
import os
import signal
import subprocess
import time

from . import logs
from .api import now_rfc3339
from .env import env_for
from .image import argv_for, workdir_of
from .log import log
from .mounts import mount_script
from .pods import reap

PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


def _child_setup():
    # the container dies with its kubelet (the node), and gets a process group
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.setsid()


def termination_file(pod, c):
    """A new empty file for this instance's termination message, world-
    writable as a real kubelet makes it (<pod root>/termination/<c>/<n>);
    c.term_file names it. None when the container has no
    terminationMessagePath (the API server defaults it)."""
    c.term_file = None
    if not c.spec.get("terminationMessagePath"):
        return None
    d = os.path.join(pod.root, "termination", c.name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, str(c.starts))
    with open(path, "w"):
        pass
    os.chmod(path, 0o666)
    c.term_file = path
    return c.spec["terminationMessagePath"], path


class Runtime:
    def __init__(self, api, node, node_ip, root, bin_dir, volumes):
        self.api, self.node, self.node_ip = api, node, node_ip
        self.root, self.bin_dir, self.volumes = root, bin_dir, volumes

    def start(self, pod, c):
        """Starts container c of pod; where it cannot, c.failed_to_start says why."""
        spec = c.spec
        psc = pod.obj["spec"].get("securityContext") or {}
        csc = spec.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", uid))
        fs_group = psc.get("fsGroup")
        c.failed_to_start = None
        try:
            argv = argv_for(spec, self.bin_dir)
        except LookupError as e:
            c.failed_to_start = ("ErrImagePull", str(e))
            log("warn", "image_unknown", pod="%s/%s" % (pod.ns, pod.name), container=c.name, msg=e)
            return
        try:
            env = env_for(self.api, pod, spec, self.node, self.node_ip)
            vols = self.volumes.write(pod, uid, fs_group if fs_group is not None else gid)
            hostname = pod.obj["spec"].get("hostname") or pod.name
            term = termination_file(pod, c)
            wd = None if spec.get("workingDir") else workdir_of(spec)
            if wd:  # the image's WORKDIR: a directory of the pod, the container's user's
                host = os.path.join(pod.root, "workdir-" + c.name)
                os.makedirs(host, exist_ok=True)
                if uid is not None:
                    os.chown(host, uid, gid if gid is not None else uid)
                wd = (wd, host)
            lines = mount_script(pod, spec, vols, os.path.join(pod.root, "hosts"), self.bin_dir, term,
                                 wd)
        except (RuntimeError, KeyError, ValueError, OSError) as e:
            c.failed_to_start = ("CreateContainerConfigError", str(e))
            log("warn", "container_config_error", pod="%s/%s" % (pod.ns, pod.name), container=c.name, msg=e)
            return
        if spec.get("workingDir") or wd:
            lines.append("cd '%s'" % (spec.get("workingDir") or wd[0]))
        if uid is not None:
            groups = [str(g) for g in ([gid] if gid is not None else []) +
                      ([fs_group] if fs_group is not None else []) + list(psc.get("supplementalGroups") or [])]
            lines.append('exec setpriv --reuid %d --regid %d --groups %s --pdeathsig KILL -- "$@"' %
                         (uid, gid if gid is not None else uid, ",".join(groups) or str(uid)))
        else:
            lines.append('exec "$@"')
        # logs outlive the pod (as /var/log/pods): <root>/logs/<ns>_<pod>_<uid>/<container>/<n>.log
        logdir = os.path.join(self.root, "logs", "%s_%s_%s" % (pod.ns, pod.name, pod.uid), c.name)
        os.makedirs(logdir, exist_ok=True)
        path = os.path.join(logdir, "%d.log" % c.starts)
        cmd = ["nsenter", "--net=/run/netns/" + pod.netns, "unshare", "--mount", "--uts",
               "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(lines), "sh", hostname] + argv
        try:
            c.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=env, preexec_fn=_child_setup, close_fds=True)
        except OSError as e:
            c.failed_to_start = ("StartError", str(e))
            return
        c.pumps = logs.pump(c.proc, path)
        c.prev_log_path, c.log_path = c.log_path, path
        c.starts += 1
        c.started_at = now_rfc3339()
        c.exit_code = c.reason = c.message = c.finished_at = None
        c.ready = not spec.get("readinessProbe")
        c.probe_ok = c.probe_fails = 0
        c.next_probe = time.monotonic() + (spec.get("readinessProbe") or {}).get("initialDelaySeconds", 0)
        log("info", "container_started", pod="%s/%s" % (pod.ns, pod.name), container=c.name, pid=c.proc.pid,
            ip=pod.ip, restarts=c.restart_count)

    def probe(self, pod, c):
        """Container c's readiness probe (httpGet to the pod's address), when due: c.ready."""
        p = c.spec.get("readinessProbe") or {}
        hg = p.get("httpGet")
        if not hg or c.proc is None or c.exit_code is not None or time.monotonic() < c.next_probe:
            return
        c.next_probe = time.monotonic() + p.get("periodSeconds", 10)
        port = hg.get("port")
        if isinstance(port, str) and not port.isdigit():
            port = next((cp["containerPort"] for cp in c.spec.get("ports") or [] if cp.get("name") == port), None)
        ok = False
        if port is not None:
            try:
                conn = http.client.HTTPConnection(pod.ip, int(port), timeout=p.get("timeoutSeconds", 1))
                conn.request("GET", hg.get("path", "/"))
                ok = 200 <= conn.getresponse().status < 400
                conn.close()
            except (OSError, http.client.HTTPException):
                ok = False
        if ok:
            c.probe_fails = 0
            c.probe_ok += 1
            if c.probe_ok >= p.get("successThreshold", 1):
                c.ready = True
        else:
            c.probe_ok = 0
            c.probe_fails += 1
            if c.probe_fails >= p.get("failureThreshold", 3):
                c.ready = False

    def send_signal(self, pod, sig):
        """sig to every container of pod still running (to its process group)."""
        for c in pod.containers:
            if c.proc is not None and c.exit_code is None:
                try:
                    os.killpg(c.proc.pid, sig)
                except ProcessLookupError:
                    pass

    def stop(self, pod):
        """SIGKILL to what still runs, then its exit recorded."""
        self.send_signal(pod, signal.SIGKILL)
        for c in pod.containers:
            if c.proc is not None:
                try:
                    c.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        reap(pod)
