# kubelet/image.py: what a container image is on this node: images
# `*vitjob-worker*` and `*vitjob-operator*` run the binaries of --bin-dir,
# whose parent (the build: bin/, lib/) each pod sees read-only at
# /opt/vitjob as its image; the entrypoint is the binary of that name, and a
# container `command` is looked up on a PATH that starts with
# /opt/vitjob/bin. Any other image is refused (LookupError: the container
# fails with ErrImagePull).
# Must not: pull or unpack anything.

import os

# where a pod finds its "image": the build directory (bin/, lib/) mounted read-only
IMAGE_DIR = "/opt/vitjob"


def argv_for(c, bin_dir):
    """The command line of container c (its spec), with bin_dir the build's bin directory."""
    image = c.get("image") or ""
    if "vitjob-worker" in image:
        entry = ["vitjob-worker"]
    elif "vitjob-operator" in image:
        entry = ["vitjob-operator"]
    else:
        raise LookupError('image "%s": this kubelet runs only vitjob-worker and vitjob-operator '
                          "images (from %s)" % (image, bin_dir))
    argv = list(c.get("command") or entry) + list(c.get("args") or [])
    if "/" not in argv[0] and os.path.exists(os.path.join(bin_dir, argv[0])):
        argv[0] = os.path.join(IMAGE_DIR, "bin", argv[0])
    return argv
