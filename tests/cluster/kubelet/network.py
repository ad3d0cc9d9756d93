# kubelet/network.py: the pod network of this node: the bridge vjbr0
# (10.89.0.1/16 on the host, made once by whichever kubelet comes first), the
# node's address 10.89.N.1 on it, and for each pod a network namespace
# vj-<node>-K with a veth (host side vjhNxK on the bridge, eth0 inside at
# 10.89.N.K, default route through the bridge); what a killed run of this
# node left behind is removed at start.
# Must not: touch namespaces or interfaces of other nodes (their names carry
# the node's name and index).

import fcntl
import subprocess

BRIDGE = "vjbr0"
BRIDGE_IP = "10.89.0.1"
PREFIX = 16


def sh(*args, check=True):
    r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), r.stderr.strip()))
    return r


def ensure_bridge():
    """The host side of the pod network, made once by whichever kubelet comes first."""
    with open("/run/vitjob-kubelet-net.lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
            sh("ip", "link", "add", BRIDGE, "type", "bridge")
            sh("ip", "addr", "add", "%s/%d" % (BRIDGE_IP, PREFIX), "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")


class PodNetwork:
    def __init__(self, node, index):
        self.node, self.index = node, index
        self.node_ip = "10.89.%d.1" % index
        self.used_ips = set()

    def up(self):
        """The bridge, this node's address on it, and nothing left of a killed run."""
        ensure_bridge()
        sh("ip", "addr", "add", "%s/%d" % (self.node_ip, PREFIX), "dev", BRIDGE, check=False)
        self.clean_stale()

    def down(self):
        sh("ip", "addr", "del", "%s/%d" % (self.node_ip, PREFIX), "dev", BRIDGE, check=False)

    def alloc(self):
        """A new pod's (address, netns, host-side veth)."""
        for k in range(2, 255):
            if k not in self.used_ips:
                self.used_ips.add(k)
                break
        else:
            raise RuntimeError("no pod address left on node %s" % self.node)
        ip = "10.89.%d.%d" % (self.index, k)
        netns = "vj-%s-%d" % (self.node, k)
        host_if = "vjh%dx%d" % (self.index, k)
        sh("ip", "netns", "del", netns, check=False)
        sh("ip", "link", "del", host_if, check=False)
        sh("ip", "netns", "add", netns)
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", netns)
        sh("ip", "link", "set", host_if, "master", BRIDGE, "up")
        sh("ip", "-n", netns, "link", "set", "lo", "up")
        sh("ip", "-n", netns, "addr", "add", "%s/%d" % (ip, PREFIX), "dev", "eth0")
        sh("ip", "-n", netns, "link", "set", "eth0", "up")
        sh("ip", "-n", netns, "route", "add", "default", "via", BRIDGE_IP)
        return ip, netns, host_if

    def free(self, pod):
        sh("ip", "netns", "del", pod.netns, check=False)
        sh("ip", "link", "del", pod.veth, check=False)
        try:
            self.used_ips.discard(int(pod.ip.rsplit(".", 1)[1]))
        except ValueError:
            pass

    def clean_stale(self):
        """Namespaces and interfaces a previous run of this node left (killed with -9)."""
        r = sh("ip", "netns", "list", check=False)
        for line in r.stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith("vj-%s-" % self.node):
                sh("ip", "netns", "del", name, check=False)
        r = sh("ip", "-o", "link", "show", check=False)
        for line in r.stdout.splitlines():
            f = line.split(":")
            if len(f) > 1:
                name = f[1].strip().split("@")[0]
                if name.startswith("vjh%dx" % self.index):
                    sh("ip", "link", "del", name, check=False)
