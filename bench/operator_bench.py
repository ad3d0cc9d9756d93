#!/usr/bin/python3
"""bench/operator_bench.py - `make bench`: the operator against the test API server.

Owns: measuring, on this machine, (1) the time from `kubectl apply` of a
1,024-replica ViTJob to all of its pods existing, (2) reconciles per second
while 500 single-replica ViTJobs are taken on, and (3) the operator's peak
RSS (VmHWM) after each. Prints one table. Not a test: nothing asserts a time.

The API server is tests/cluster/apiserver (Python, SQLite, one process), so
these numbers bound the operator from below: the server is the slower side
(its own CPU time is printed too). No peer operator can run here (no
Kubeflow), so there is no ratio column.

(4) --real-jobs N (issue 28): N one-replica ViTJobs on objects as big as a
real server's (the test server writes managedFields and a real server's
defaults), each against a fresh server: the operator of --build and, with
--peer-bin, a peer binary (e.g. the build before the cache transform) in the
same run: peak RSS, time to take all jobs on, reconciles per job and the
operator's API requests per second over a minute idle afterwards; then the
operator is restarted on the N jobs (its first lists hold N objects of each
kind) and its peak RSS is taken once every job has been reconciled.

usage: operator_bench.py [--build build] [--replicas 1024] [--jobs 500] [--workers 4]
                         [--real-jobs 0] [--peer-bin PATH] [--idle 60]
with the repository root on PYTHONPATH (it imports tests.cluster; `make
bench` sets it): PYTHONPATH=. bench/operator_bench.py ...
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

from tests.cluster.harness import ServerProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def vm_hwm_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def job(name, replicas):
    return {"apiVersion": "vitjob.dev/v1alpha1", "kind": "ViTJob", "metadata": {"name": name},
            "spec": {"replicas": replicas, "image": "ghcr.io/vitjob/vitjob-worker:bench",
                     "model": {"preset": "fmnist_tiny"},
                     "training": {"steps": 10, "globalBatchSize": 64 * replicas,
                                  "microBatchSize": 64, "optimizer": {"warmupSteps": 1}}}}


def count_pods(client, selector=None):
    path = "/api/v1/namespaces/default/pods?limit=2000"
    if selector:
        path += "&labelSelector=" + selector
    r = client.get(path)
    body = r.body if isinstance(r.body, dict) else json.loads(r.body)
    return len(body["items"])


def reconciles(port):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    return sum(float(v) for v in re.findall(r'^vitjob_reconcile_total\{[^}]*\} (\S+)$', text, re.M))


def count_all_pods(client):
    """The pods in default, from a one-item page's remainingItemCount: listing
    thousands of real-sized pods every half second would load the server
    more than the operator does."""
    r = client.get("/api/v1/namespaces/default/pods?limit=1")
    body = r.body if isinstance(r.body, dict) else json.loads(r.body)
    return len(body["items"]) + int(body["metadata"].get("remainingItemCount") or 0)


def api_requests(port):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    return sum(float(v) for v in re.findall(r'^vitjob_api_requests_total\{[^}]*\} (\S+)$', text, re.M))


def start_operator(binary, server, workers, tmp):
    log = open(os.path.join(tmp, "operator-%d.log" % time.monotonic_ns()), "w")
    op = subprocess.Popen([binary, "--kubeconfig", server.kubeconfig, "--metrics-addr", "127.0.0.1:0",
                           "--workers", str(workers), "--log-level", "warn"],
                          stdout=log, stderr=subprocess.STDOUT)
    port = None
    while port is None:  # the port is in the start line; warn level hides it: ask /proc
        time.sleep(0.2)
        out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
        m = re.search(r"127\.0\.0\.1:(\d+)\s.*pid=%d," % op.pid, out)
        port = int(m.group(1)) if m else None
    return op, port


def real_jobs_run(binary, n, workers, idle):
    """One fresh server, the operator `binary`, n one-replica jobs: a row."""
    tmp = tempfile.mkdtemp(prefix="operator-bench-real-")
    server = ServerProcess(os.path.join(tmp, "state"))
    env = dict(os.environ, KUBECONFIG=server.kubeconfig, HOME=tmp)
    op = None
    try:
        subprocess.run([KUBECTL, "apply", "-f", os.path.join(ROOT, "manifests", "00-crd.yaml")],
                       env=env, check=True, capture_output=True)
        op, port = start_operator(binary, server, workers, tmp)
        client = server.client()
        base = vm_hwm_mib(op.pid)
        docs = yaml.safe_dump_all(job("real-%d" % i, 1) for i in range(n))
        t0 = time.monotonic()
        subprocess.run([KUBECTL, "apply", "-f", "-"], input=docs, text=True, env=env, check=True,
                       capture_output=True)
        while count_all_pods(client) < n:
            time.sleep(0.5)
        took = time.monotonic() - t0
        r0, q0 = reconciles(port), api_requests(port)
        time.sleep(idle)
        r1, q1 = reconciles(port), api_requests(port)
        peak = vm_hwm_mib(op.pid)
        # a restart on the n jobs: the first list of every kind, n objects
        # each, then one reconcile per job; its peak once idle again
        op.terminate()
        op.wait(20)
        t0 = time.monotonic()
        op, port = start_operator(binary, server, workers, tmp)
        while True:
            try:
                if urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=10).status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        while reconciles(port) < n and time.monotonic() - t0 < 900:
            time.sleep(0.5)
        synced = time.monotonic() - t0
        time.sleep(min(idle, 20))
        return (os.path.basename(os.path.dirname(os.path.dirname(binary))) + "/" + os.path.basename(binary),
                "%.1f" % base, "%.1f" % peak, "%.1f s" % took,
                "%.3f" % ((r1 - r0) / n), "%.2f" % ((q1 - q0) / idle),
                "%.1f (%.0f s)" % (vm_hwm_mib(op.pid), synced))
    finally:
        if op and op.poll() is None:
            op.terminate()
            op.wait(20)
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--replicas", type=int, default=1024)
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--real-jobs", type=int, default=0)
    ap.add_argument("--peer-bin", default=None)
    ap.add_argument("--idle", type=float, default=60)
    args = ap.parse_args()
    if args.real_jobs:
        rows = []
        for b in ([args.peer_bin] if args.peer_bin else []) + [os.path.join(args.build, "bin", "vitjob-operator")]:
            rows.append(real_jobs_run(b, args.real_jobs, args.workers, args.idle))
        print("\n%d one-replica ViTJobs on real-sized objects (test API server, %d workers, idle %.0f s)\n"
              % (args.real_jobs, args.workers, args.idle))
        head = ("operator", "RSS at start MiB", "peak RSS MiB", "all jobs on", "reconciles/job idle",
                "API req/s idle", "restarted on them: peak RSS MiB (all reconciled)")
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return 0
    tmp = tempfile.mkdtemp(prefix="operator-bench-")
    server = ServerProcess(os.path.join(tmp, "state"))
    env = dict(os.environ, KUBECONFIG=server.kubeconfig, HOME=tmp)
    op = None
    try:
        subprocess.run([KUBECTL, "apply", "-f", os.path.join(ROOT, "manifests", "00-crd.yaml")],
                       env=env, check=True, capture_output=True)
        log = open(os.path.join(tmp, "operator.log"), "w")
        op = subprocess.Popen([os.path.join(args.build, "bin", "vitjob-operator"), "--kubeconfig",
                               server.kubeconfig, "--metrics-addr", "127.0.0.1:0",
                               "--workers", str(args.workers), "--log-level", "warn"],
                              stdout=log, stderr=subprocess.STDOUT)
        port = None
        while port is None:  # the port is in the start line; warn level hides it: ask /proc
            time.sleep(0.2)
            out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
            m = re.search(r"127\.0\.0\.1:(\d+)\s.*pid=%d," % op.pid, out)
            port = int(m.group(1)) if m else None
        client = server.client()
        rows = []

        # 1. one big job
        t0 = time.monotonic()
        subprocess.run([KUBECTL, "apply", "-f", "-"], input=json.dumps(job("big", args.replicas)),
                       text=True, env=env, check=True, capture_output=True)
        while count_pods(client, "vitjob.dev/job-name%3Dbig") < args.replicas:
            time.sleep(0.25)
        t_big = time.monotonic() - t0
        rows.append(("apply -> all pods of a %d-replica ViTJob" % args.replicas,
                     "%.1f s" % t_big, "%.0f pods/s" % (args.replicas / t_big),
                     "%.1f" % vm_hwm_mib(op.pid)))

        # 2. many small jobs
        before = reconciles(port)
        server_cpu0 = cpu_seconds(server.proc.pid)
        docs = yaml.safe_dump_all(job("small-%d" % i, 1) for i in range(args.jobs))
        t0 = time.monotonic()
        subprocess.run([KUBECTL, "apply", "-f", "-"], input=docs, text=True, env=env, check=True,
                       capture_output=True)
        t_applied = time.monotonic() - t0
        while count_pods(client) < args.replicas + args.jobs:
            time.sleep(0.25)
        elapsed = time.monotonic() - t0
        done = reconciles(port) - before
        rows.append(("%d ViTJobs: apply -> all pods (kubectl apply took %.1f s)"
                     % (args.jobs, t_applied), "%.1f s" % elapsed,
                     "%.0f reconciles/s (%d)" % (done / elapsed, done),
                     "%.1f" % vm_hwm_mib(op.pid)))
        server_cpu = cpu_seconds(server.proc.pid) - server_cpu0
        op_cpu = cpu_seconds(op.pid)

        print("\noperator benchmark (test API server on loopback, %d reconcile workers)\n"
              % args.workers)
        print("| %-62s | %8s | %28s | %13s |" % ("case", "time", "rate", "op peak RSS MiB"))
        print("|" + "|".join("-" * (w + 2) for w in (62, 8, 28, 13)) + "|")
        for r in rows:
            print("| %-62s | %8s | %28s | %13s |" % r)
        print("\nCPU seconds in case 2: API server %.1f, operator (whole run) %.1f"
              % (server_cpu, op_cpu))
    finally:
        if op and op.poll() is None:
            op.terminate()
            op.wait(20)
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
