# controllers/manager.py: one pass of every controller, and the passes until
# stopped. A pass lists nodes, leases in kube-node-lease, pods, deployments
# and replicasets once (polling, not watching) and hands them, in this
# order, to the node lifecycle controller (every node-monitor-period; the
# nodes it changed go on to the others), the pod GC (every pod-gc-period),
# the taint manager, the scheduler, the deployment and the replicaset
# controllers; then, while Kueue's CRDs are served (looked for again every
# kueue_probe_period while they are not), the Kueue stand-in with the
# Workloads, ClusterQueues, LocalQueues, WorkloadPriorityClasses and
# ResourceFlavors, listed once. A pass that fails (the API server unreachable, a list
# refused) is logged once until one succeeds again.
# Must not: write objects (each controller writes its own).

import time

from tests.cluster.kubeapi.errors import ApiError

from .base import UNANSWERED, describe
from .deployment import DeploymentController
from .kueue import KUEUE, Kueue
from .log import log
from .nodelifecycle import NodeLifecycle
from .objects import APPS, CORE
from .podgc import PodGC
from .replicaset import ReplicaSetController
from .scheduler import Scheduler
from .taintmanager import TaintManager

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


class Manager:
    def __init__(self, client, node_monitor_grace_period, node_monitor_period, node_startup_grace_period,
                 pod_gc_period):
        self.c = client
        self.node_monitor_period = node_monitor_period
        self.pod_gc_period = pod_gc_period
        self.last_monitor = 0.0
        self.last_gc = 0.0
        self.nodelifecycle = NodeLifecycle(client, node_monitor_grace_period, node_startup_grace_period)
        self.podgc = PodGC(client)
        self.taintmanager = TaintManager(client)
        self.scheduler = Scheduler(client)
        self.deployments = DeploymentController(client)
        self.replicasets = ReplicaSetController(client)
        self.kueue = Kueue(client)
        self.kueue_probe_period = 2.0
        self.last_kueue_probe = None

    def run_once(self):
        nodes = self.c.list(CORE + "/nodes")
        try:
            leases = self.c.list(LEASES)
        except ApiError as e:
            if e.code != 404:
                raise
            leases = []
        pods = self.c.list(CORE + "/pods")
        deploys = self.c.list(APPS + "/deployments")
        rss = self.c.list(APPS + "/replicasets")
        now_m = time.monotonic()
        if now_m - self.last_monitor >= self.node_monitor_period:
            self.last_monitor = now_m
            nodes = self.nodelifecycle.sync(nodes, leases, pods)
        if now_m - self.last_gc >= self.pod_gc_period:
            self.last_gc = now_m
            self.podgc.sync(nodes, pods)
        self.taintmanager.sync(nodes, pods)
        self.scheduler.sync(nodes, pods)
        self.deployments.sync(deploys, rss)
        self.replicasets.sync(rss, pods)
        self.kueue_pass(pods)

    def kueue_pass(self, pods):
        """The Kueue stand-in's pass, when its CRDs are served."""
        now_m = time.monotonic()
        if self.last_kueue_probe is not None and now_m - self.last_kueue_probe < self.kueue_probe_period:
            return
        try:
            cqs = self.c.list(KUEUE + "/clusterqueues")
        except ApiError as e:
            if e.code != 404:
                raise
            self.last_kueue_probe = now_m
            return
        self.last_kueue_probe = None
        self.kueue.sync(pods, self.c.list(KUEUE + "/workloads"), cqs, self.c.list(KUEUE + "/localqueues"),
                        self.c.list(KUEUE + "/workloadpriorityclasses"), self.c.list(KUEUE + "/resourceflavors"))

    def run(self, stop, poll_interval):
        """Passes every poll_interval seconds until the threading.Event stop is set."""
        last_err = None
        while not stop.is_set():
            try:
                self.run_once()
                if last_err:
                    log("info", event="api_reachable")
                    last_err = None
            except (ApiError,) + UNANSWERED as e:
                msg = describe(e) or repr(e)
                if msg != last_err:
                    log("error", event="pass_failed", msg=msg)
                last_err = msg
            stop.wait(poll_interval)
