#!/usr/bin/python3
# tests/cluster/up.py: `make cluster` and `make cluster-down`, the local
# two-node cluster of tests/cluster/localcluster.py kept up for a user to try
# things: `start` runs this module's `serve` in a session of its own (it
# outlives make), which starts the cluster (the test API server, the
# controllers, the kubelets), applies manifests/ and waits for the operator
# (LocalCluster.install_operator), then writes DIR/ready; `start` waits for
# that, shows the nodes and the operator's pod, and prints the line to
# export KUBECONFIG. `serve` stops everything on SIGTERM or SIGINT; `stop`
# sends it SIGTERM and waits until it is gone. `start` with a cluster up
# prints the line again.
#   up.py start [--build build] [--dir BUILD/cluster] [--nodes 2] [--timeout 180]
#   up.py stop  [--build build] [--dir BUILD/cluster]
# Exit codes: 0 done, 1 the cluster did not come up (the end of its log is
# printed), 3 this machine cannot run it (not root, no network namespaces,
# no kubectl; the reason is printed).
# Must not: start a second cluster beside a running one, or stop processes
# it did not start (only the pid in DIR/pid, which `serve` wrote).

import argparse
import os
import signal
import subprocess
import sys
import time

from tests.cluster.localcluster import ROOT, LocalCluster, missing_prerequisites


def paths(args):
    d = os.path.abspath(args.dir or os.path.join(args.build, "cluster"))
    return d, os.path.join(d, "pid"), os.path.join(d, "ready")


def running(pidfile):
    """The pid of the cluster's `serve` when it runs, else None."""
    try:
        with open(pidfile) as f:
            pid = int(f.read())
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"tests.cluster.up" not in f.read():
                return None
        return pid
    except (OSError, ValueError):
        return None


def export_line(d):
    return "export KUBECONFIG=%s" % os.path.join(d, "apiserver", "kubeconfig")


def kubectl_show(d, *args):
    env = dict(os.environ, KUBECONFIG=os.path.join(d, "apiserver", "kubeconfig"))
    r = subprocess.run(["kubectl"] + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    print(r.stdout, end="")


def start(args):
    d, pidfile, ready = paths(args)
    if running(pidfile):
        print("cluster: already running (pid %d); `make cluster-down` stops it" % running(pidfile))
        print(export_line(d))
        return 0
    why = missing_prerequisites()
    if why:
        print("cluster: cannot run the local cluster here: %s" % why)
        return 3
    os.makedirs(d, exist_ok=True)
    for f in (pidfile, ready):
        if os.path.exists(f):
            os.unlink(f)
    log = os.path.join(d, "cluster.log")
    print("cluster: starting the API server, the controllers, %d local nodes and the operator "
          "(log: %s)" % (args.nodes, log), flush=True)
    with open(log, "a") as out:
        p = subprocess.Popen([sys.executable, "-m", "tests.cluster.up", "serve", "--dir", d, "--build",
                              args.build, "--nodes", str(args.nodes)],
                             cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
    deadline = time.monotonic() + args.timeout
    while not os.path.exists(ready):
        if p.poll() is not None or time.monotonic() > deadline:
            if p.poll() is None:
                p.terminate()
                p.wait(60)
            print("cluster: did not come up; the end of %s:" % log)
            with open(log) as f:
                print("".join(f.readlines()[-20:]), end="")
            return 1
        time.sleep(0.2)
    kubectl_show(d, "get", "nodes")
    kubectl_show(d, "get", "pods", "-n", "vitjob-system")
    print("cluster: up; `make cluster-down` stops it. To use it:")
    print(export_line(d))
    return 0


def serve(args):
    d, pidfile, ready = paths(args)
    stop = []
    signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))
    signal.signal(signal.SIGINT, lambda s, f: stop.append(s))
    with open(pidfile, "w") as f:
        f.write("%d\n" % os.getpid())
    c = LocalCluster(d, nodes=args.nodes, bin_dir=os.path.join(os.path.abspath(args.build), "bin"),
                     lease_seconds=1, grace_seconds=10)
    try:
        c.start()
        print(c.install_operator(), end="", flush=True)
        with open(ready, "w") as f:
            f.write(c.kubeconfig + "\n")
        print("ready: %s" % c.kubeconfig, flush=True)
        while not stop:
            signal.pause()
        print("stopping (signal %d)" % stop[0], flush=True)
        return 0
    finally:
        c.stop()
        for f in (ready, pidfile):
            if os.path.exists(f):
                os.unlink(f)


def stop(args):
    d, pidfile, _ = paths(args)
    pid = running(pidfile)
    if not pid:
        print("cluster: none running (no live pid in %s)" % pidfile)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 90
    while running(pidfile) == pid and os.path.exists("/proc/%d" % pid):
        if time.monotonic() > deadline:
            print("cluster: pid %d still running after 90 s; see %s/cluster.log" % (pid, d))
            return 1
        time.sleep(0.2)
    print("cluster: stopped")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["start", "stop", "serve"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default=None)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=180)
    args = ap.parse_args()
    return {"start": start, "stop": stop, "serve": serve}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
