# kubelet/mounts.py: a container's mount namespace, as the shell lines run
# inside it before exec: its hostname, then bind mounts of its volumeMounts
# (subPath, readOnly), of the image (image.py) read-only, of the pod's hosts
# file and resolv.conf (dns.py), of the termination message file; a mount point missing on the host is made
# on a pod-private overlay (tmpfs) of its parent, so that nothing is created
# on the host.
# Must not: mount anything outside the container's namespace (the lines run
# under unshare --mount --propagation private), or over / itself.

import os

from .image import IMAGE_DIR


def mount_script(pod, c, vols, hosts_path, bin_dir, term=None, workdir=None):
    """The shell lines run inside the pod's namespaces before exec; term is
    (terminationMessagePath, the host file behind it) or None; workdir is
    (the image's working directory, the host directory behind it) or None."""
    lines = ["set -e", 'hostname "$1"', "shift"]
    targets = [(workdir[0], workdir[1], False)] if workdir else []
    for vm in c.get("volumeMounts") or []:
        src = vols.get(vm["name"])
        if src is None:
            raise RuntimeError("volumeMount %s: no volume of that name" % vm["name"])
        if vm.get("subPath"):
            src = os.path.join(src, vm["subPath"])
        targets.append((vm["mountPath"], src, vm.get("readOnly", False)))
    # the image, as a real container has it whatever the pod mounts
    # (an emptyDir at /tmp would hide a build under /tmp)
    targets.append((IMAGE_DIR, os.path.dirname(bin_dir), True))
    targets.append(("/etc/hosts", hosts_path, False))
    # cluster DNS is the hosts file: a resolver that fails at once (nothing
    # listens on the pod's own loopback) instead of waiting on the host's
    targets.append(("/etc/resolv.conf", os.path.join(pod.root, "resolv.conf"), False))
    if term:
        targets.append((term[0], term[1], False))
    ovl = os.path.join(pod.root, "overlay-" + c["name"])
    os.makedirs(ovl, exist_ok=True)
    overlaid = []
    n = 0
    for path, src, _ in sorted(targets, key=lambda t: t[0].count("/")):
        real = os.path.realpath(path)
        if os.path.lexists(real) or any(real.startswith(o + "/") for o in overlaid):
            continue
        parent = os.path.dirname(real)
        while not os.path.isdir(parent):
            parent = os.path.dirname(parent)
        if parent == "/":
            raise RuntimeError("mountPath %s: cannot make a mount point under /" % path)
        d = os.path.join(ovl, str(n))
        n += 1
        lines += ["mount -t tmpfs tmpfs '%s'" % d, "mkdir -p '%s/u' '%s/w'" % (d, d),
                  "mount -t overlay overlay -o 'lowerdir=%s,upperdir=%s/u,workdir=%s/w' '%s'" %
                  (parent, d, d, parent)]
        os.makedirs(d, exist_ok=True)
        overlaid.append(parent)
    # parents before children; a mount over a directory that holds a
    # source of another mount (a pod's emptyDir at /tmp, over the kubelet's
    # root or the build) last, so that it does not hide them
    sources = [t[1] for t in targets]

    def order(t):
        real = os.path.realpath(t[0]) if os.path.lexists(t[0]) else t[0]
        return (any(src.startswith(real.rstrip("/") + "/") for src in sources), real.count("/"))
    for path, src, ro in sorted(targets, key=order):
        real = os.path.realpath(path) if os.path.lexists(path) else path
        kind = "-f" if os.path.isfile(src) else "-d"
        mk = "mkdir -p '%s'" % real if kind == "-d" else "[ -e '%s' ] || touch '%s'" % (real, real)
        lines += [mk, "mount --bind '%s' '%s'" % (src, real)]
        if ro:
            lines.append("mount -o remount,bind,ro '%s'" % real)
    return lines
