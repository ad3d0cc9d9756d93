# tests/cluster/controllers: a stand-in for kube-scheduler and the parts of
# kube-controller-manager (Kubernetes 1.26 behaviour) that a one-machine test
# cluster needs, as one process (what each part does and leaves out: the
# header of its module):
#   python3 -m tests.cluster.controllers --kubeconfig PATH
#       [--node-monitor-grace-period S (40)] [--node-monitor-period S (1)]
#       [--node-startup-grace-period S (60)] [--pod-gc-period S (20)]
#       [--poll-interval S (0.3)] [-v]
#
# It polls (manager.py) rather than watching, and acts on what it read; a
# 409 or 404 on a write means someone else changed the object in between: it
# is logged and retried from a fresh read on the next pass (base.py). One
# key=value line per event goes to stderr (log.py; never the token); SIGTERM
# or SIGINT ends it cleanly (exit 0); an unusable kubeconfig exits 1.
# Events (Scheduled, FailedScheduling, SuccessfulCreate, ScalingReplicaSet,
# TaintManagerEviction, NodeNotReady) are written best effort.
# This file owns the command line and the process: one API client
# (kubeclient.py, a kept-alive connection) for every controller.
# Must not: hold any controller's logic.

import argparse
import signal
import ssl
import sys
import threading

from tests.cluster import kubeclient
from tests.cluster.controllers import log
from tests.cluster.controllers.manager import Manager


def main():
    p = argparse.ArgumentParser(prog="controllers", description="scheduler and controllers for the test cluster")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--node-monitor-grace-period", type=float, default=40.0,
                   help="seconds without a heartbeat before a node is marked Unknown")
    p.add_argument("--node-monitor-period", type=float, default=1.0, help="seconds between node checks")
    p.add_argument("--node-startup-grace-period", type=float, default=60.0,
                   help="seconds a node that never posted status is given")
    p.add_argument("--pod-gc-period", type=float, default=20.0, help="seconds between pod GC passes")
    p.add_argument("--poll-interval", type=float, default=0.3, help="seconds between passes")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    log.VERBOSE = args.verbose
    try:
        client = kubeclient.from_kubeconfig(args.kubeconfig, user_agent="vitjob-test-controllers",
                                            keep_alive=True)
    except (OSError, KeyError, ValueError, ssl.SSLError) as e:
        log.log("error", event="bad_kubeconfig", path=args.kubeconfig, msg=str(e))
        return 1
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    manager = Manager(client, args.node_monitor_grace_period, args.node_monitor_period,
                      args.node_startup_grace_period, args.pod_gc_period)
    log.log("info", event="started", server="%s:%s" % (client.host, client.port),
            node_monitor_grace_period=args.node_monitor_grace_period,
            node_monitor_period=args.node_monitor_period, pod_gc_period=args.pod_gc_period,
            poll_interval=args.poll_interval)
    manager.run(stop, args.poll_interval)
    client.close()
    log.log("info", event="stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
