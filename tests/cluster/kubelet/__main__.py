# tests/cluster/kubelet: a local kubelet for the one-machine test cluster (a
# test and demo tool, never shipped). One process is one node:
#
#   python3 -m tests.cluster.kubelet --apiserver-state DIR --node NAME --index N
#           --root DIR --bin-dir build/bin [--port 10250] [--lease-seconds 10] [--period 0.3]
#           [--cpu N] [--memory-mi N] [--worker-env NAME=VALUE]... [-v]
#
# It registers the Node (Ready, capacity, allocatable) and renews its Lease in
# kube-node-lease, and runs the pods bound to it (spec.nodeName) as local
# processes, as a real kubelet runs containers:
#   - images: `*vitjob-worker*` and `*vitjob-operator*` run the binaries of
#     --bin-dir, whose parent (the build: bin/, lib/) each pod sees read-only
#     at /opt/vitjob as its image (the entrypoint is the binary of that name;
#     a container `command` is looked up on a PATH that starts with
#     /opt/vitjob/bin);
#     any other image fails the container (reason ErrImagePull).
#   - each pod has its own network namespace with a veth on the bridge vjbr0
#     (10.89.0.1/16 on the host side), address 10.89.N.K, its own UTS
#     namespace (hostname = spec.hostname or the pod name) and a private mount
#     namespace in which /etc/hosts is the pod's own: the pod itself, and every
#     pod of its namespace with hostname + subdomain where a headless Service
#     of that subdomain exists, as <hostname>.<subdomain>.<ns>.svc and
#     .svc.cluster.local (what cluster DNS answers), rewritten in place as pods
#     come and go; its /etc/resolv.conf names no reachable server, so that a
#     name the hosts file lacks fails at once.
#   - ConfigMap, Secret, projected (service-account token through the
#     TokenRequest API, kube-root-ca.crt, downward API), downward API and
#     emptyDir volumes are written under --root and bind-mounted at their
#     mountPath (missing mount points are made on a pod-private overlay of the
#     parent, so nothing is created on the host); env from value, secretKeyRef,
#     configMapKeyRef and fieldRef; KUBERNETES_SERVICE_HOST/PORT point at the
#     API server through the bridge; runAsUser/runAsGroup/fsGroup are honoured
#     (setpriv).
#   - status: phase, conditions, podIP/hostIP, containerStatuses with exit codes
#     and the termination message: the end (4096 bytes) of the file each
#     container instance has at its terminationMessagePath, or, for
#     terminationMessagePolicy FallbackToLogsOnError when that is empty and
#     the container failed, the log's tail (80 lines, 2048 bytes); readiness probes (httpGet); restartPolicy Always/OnFailure
#     restart in place with back-off.
#   - the kubelet API (server.py): GET /containerLogs over HTTPS on the node's
#     address, port --port (published in the Node's daemonEndpoints), for
#     clients with a certificate of the cluster CA (the API server's pods/log);
#     container output is kept per instance in CRI format (logs.py), the
#     previous instance's too.
#   - deletion: SIGTERM, the grace period, SIGKILL, then the kubelet confirms
#     the deletion (grace 0), as a real one does.
#   - killing the kubelet kills its pods (every container has PR_SET_PDEATHSIG
#     SIGKILL): a node that dies takes its pods with it.
# Not emulated: images and their filesystems (pods see the host's), resource
# limits (cgroups), liveness probes, readOnlyRootFilesystem, exec probes.
# Needs root (namespaces, veth, mounts) and iproute2, util-linux; without
# them, or with a bad --index, it exits 2 saying why.
# This file owns the command line and the checks before starting; the
# modules of this package do the rest (__init__.py lists them).
# Must not: log a token or a secret; touch pods of other nodes.

import argparse
import os
import shutil
import sys

from tests.cluster.kubelet import image, log
from tests.cluster.kubelet.sync import Kubelet


def main():
    p = argparse.ArgumentParser(prog="kubelet",
                                description="a local kubelet: runs the pods of one node as processes")
    p.add_argument("--apiserver-state", required=True, help="the test API server's state directory")
    p.add_argument("--node", required=True)
    p.add_argument("--index", type=int, required=True, help="1-254: the node's pod subnet 10.89.N.0/24")
    p.add_argument("--root", required=True, help="where pods' volumes, logs and hosts files live")
    p.add_argument("--bin-dir", required=True, help="the build's bin directory (vitjob-worker, vitjob-operator)")
    p.add_argument("--port", type=int, default=10250,
                   help="the kubelet API's port on the node's address (taken: an ephemeral one)")
    p.add_argument("--lease-seconds", type=float, default=10.0, help="seconds between Lease renewals")
    p.add_argument("--period", type=float, default=0.3, help="seconds between sync passes")
    p.add_argument("--cpu", type=int, default=0)
    p.add_argument("--memory-mi", type=int, default=0)
    p.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE",
                   help="one more ENV line of the worker image (a test's hook, e.g. VITJOB_TEST_HOLD)")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    for kv in args.worker_env:
        k, eq, v = kv.partition("=")
        if not k or not eq:
            print("kubelet: --worker-env %r: not NAME=VALUE" % kv, file=sys.stderr)
            return 2
        image.TEST_WORKER_ENV[k] = v
    log.VERBOSE = args.verbose
    if not 1 <= args.index <= 254:
        print("kubelet: --index %d: must be 1-254" % args.index, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("kubelet: needs root (network and mount namespaces)", file=sys.stderr)
        return 2
    for tool in ("ip", "nsenter", "unshare", "setpriv"):
        if shutil.which(tool) is None:
            print("kubelet: %s not found (iproute2, util-linux)" % tool, file=sys.stderr)
            return 2
    os.makedirs(args.root, exist_ok=True)
    Kubelet(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
