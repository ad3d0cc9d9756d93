# kubelet/dns.py: a pod's name service, which is its own files: /etc/hosts
# holds the pod itself and every pod of its namespace with hostname +
# subdomain where a headless Service of that subdomain exists, as
# <hostname>.<subdomain>.<ns>.svc and .svc.cluster.local (what cluster DNS
# answers), rewritten in place as pods come and go; /etc/resolv.conf names no
# reachable server, so that a name the hosts file lacks fails at once.
# Must not: replace the hosts file (the pod's /etc/hosts is a bind mount of
# its inode).

import os


def init_files(root, namespace):
    """A new pod's hosts file and resolv.conf, under its root."""
    with open(os.path.join(root, "hosts"), "w") as f:
        f.write("127.0.0.1\tlocalhost\n")
    with open(os.path.join(root, "resolv.conf"), "w") as f:
        f.write("search %s.svc.cluster.local svc.cluster.local cluster.local\n"
                "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n" % namespace)


def entries(all_pods, services):
    """ns -> [(ip, names...)] for pods with hostname + subdomain of a headless Service."""
    headless = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in services
                if (s.get("spec") or {}).get("clusterIP") == "None"}
    out = {}
    for p in all_pods:
        spec, st = p.get("spec") or {}, p.get("status") or {}
        ns = p["metadata"]["namespace"]
        ip = st.get("podIP")
        if not ip or not spec.get("hostname") or not spec.get("subdomain") or \
                (ns, spec["subdomain"]) not in headless or st.get("phase") in ("Succeeded", "Failed"):
            continue
        h, sd = spec["hostname"], spec["subdomain"]
        out.setdefault(ns, []).append((ip, "%s.%s.%s.svc.cluster.local" % (h, sd, ns),
                                       "%s.%s.%s.svc" % (h, sd, ns), "%s.%s" % (h, sd)))
    return out


def write_hosts(pod, entries):
    spec = pod.obj["spec"]
    h = spec.get("hostname") or pod.name
    lines = ["# Kubernetes-managed hosts file (vitjob local kubelet).",
             "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    own = [h]
    if spec.get("subdomain"):
        sd = spec["subdomain"]     # as the kubelet writes it, plus what cluster DNS answers
        own = ["%s.%s.%s.svc.cluster.local" % (h, sd, pod.ns), "%s.%s.%s.svc" % (h, sd, pod.ns),
               "%s.%s" % (h, sd), h]
    lines.append("%s\t%s" % (pod.ip, "\t".join(own)))
    for e in sorted(entries.get(pod.ns, [])):
        if e[0] != pod.ip:
            lines.append("\t".join(e))
    text = "\n".join(lines) + "\n"
    if text == pod.hosts_text:
        return
    # in place: the pod's /etc/hosts is a bind mount of this inode
    with open(os.path.join(pod.root, "hosts"), "r+") as f:
        f.seek(0)
        f.write(text)
        f.truncate()
    pod.hosts_text = text
