# kubelet/image.py: what a container image is on this node: images
# `*vitjob-worker*` and `*vitjob-operator*` run the binaries of --bin-dir,
# whose parent (the build: bin/, lib/) each pod sees read-only at
# /opt/vitjob as its image; the entrypoint is the binary of that name, and a
# container `command` is looked up on a PATH that starts with
# /opt/vitjob/bin. Any other image is refused (LookupError: the container
# fails with ErrImagePull). A worker container without workingDir starts in
# the image's WORKDIR, a fresh directory of the pod owned by its user, with
# the image's ENV.
# Must not: pull or unpack anything.

import os

# where a pod finds its "image": the build directory (bin/, lib/) mounted read-only
IMAGE_DIR = "/opt/vitjob"
# the worker image's WORKDIR (docker/worker.Dockerfile), its user's home:
# where a container without workingDir starts, writable by that user
WORKER_WORKDIR = "/home/vitjob"


# the worker image's ENV lines (docker/worker.Dockerfile) besides PATH: a
# container's own env may override them, as on a real node
WORKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
# more ENV lines for this node's worker image, as a test image would bake
# them (--worker-env: a test's VITJOB_TEST_* hook, e.g. test_elastic.py's
# VITJOB_TEST_HOLD); never part of a reference run's environment
TEST_WORKER_ENV = {}


def image_env_of(c):
    """The environment the image of container c (its spec) sets (ENV)."""
    return dict(WORKER_ENV, **TEST_WORKER_ENV) if "vitjob-worker" in (c.get("image") or "") else {}


def workdir_of(c):
    """The image's working directory of container c (its spec) when c sets
    no workingDir, or None (the operator's image: the kubelet's own)."""
    return WORKER_WORKDIR if "vitjob-worker" in (c.get("image") or "") else None


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
