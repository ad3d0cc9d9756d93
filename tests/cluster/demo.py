#!/usr/bin/python3
# tests/cluster/demo.py: `make demo`, the whole story on one machine: a local
# two-node cluster (tests/cluster/localcluster.py: the test API server, the
# controller-manager stand-in, two local kubelets, moto's S3 where moto is
# installed), `kubectl apply -f manifests/` (the operator runs from its
# Deployment, in-cluster), `kubectl apply -f manifests/examples/cpu/fashion-mnist.yaml`
# (2 CPU replicas training on Fashion-MNIST as JPEG webdataset shards that
# `vitjob-worker shards` writes first; shards and s3:// checkpoints on moto's
# S3 where moto is installed, else local files), `kubectl get vj` rows (a
# phase, a tenth of the steps) until the job ends, the test accuracy from
# status.progress and rank 0's last lines through `kubectl logs --tail=5`
# (the API server's pods/log, served by the local kubelet), the final checkpoint exported to
# BUILD/demo/model.safetensors, and everything stopped, also on Ctrl-C.
# Where the machine cannot run the cluster (not root, no network namespaces,
# no kubectl) it says why and exits 3; `make train` is the single-process run.
#   demo.py [--build build] [--timeout 900]
# Must not: leave processes or the pod network behind.

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from tests.cluster.localcluster import ROOT, LocalCluster, missing_prerequisites


def say(msg):
    print("demo: " + msg, flush=True)


def has_moto():
    py = shutil.which("python3")
    return py is not None and subprocess.run([py, "-c", "import moto, boto3"], stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL).returncode == 0


def write_shards(c, build, s3, text):
    """Fashion-MNIST as JPEG webdataset shards, written by `vitjob-worker
    shards` to moto's S3 (else to a local folder the pods read), and the
    job's data section pointed at them."""
    worker = os.path.join(build, "bin", "vitjob-worker")
    env = dict(os.environ)
    ep = []
    if s3:
        root = "s3://%s/fashion-mnist-shards" % c.s3["BUCKET"]
        ep = ["--endpoint", c.s3["S3_ENDPOINT"]]
        env.update({k: c.s3[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")})
    else:
        d = os.path.join(build, "demo", "shards")
        os.makedirs(d, exist_ok=True)
        root = "file://" + d
    for split, name in (("train", "train"), ("t10k", "test")):
        cmd = [worker, "shards", "--from", "/usr/share/datasets/fashion-mnist", "--split", split,
               "--out", "%s/%s-%%02d.tar" % (root, name), "--format", "jpeg", "--quality", "95"] + ep
        say(" ".join(["vitjob-worker"] + cmd[1:]))
        cmd += ["--log-level", "warn"]  # its summary lines, not one per shard
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
        print("".join(l + "\n" for l in out.splitlines() if l.startswith(("total", "data.uri"))), end="")
    data = ("  data:\n    format: webdataset\n    uri: %s/train-{00..05}.tar\n"
            "    testUri: %s/test-00.tar\n    mean: [0.286]\n    std: [0.353]\n"
            "    cropPct: 1\n" % (root, root))
    if s3:
        data += "    endpoint: %s\n" % c.s3["POD_ENDPOINT"]
    return re.sub(r"(?m)^  data:\n(    .*\n)+", lambda m: data, text, count=1)


def tenth(row):
    """A get vj row's phase and the tenth of the steps it is in (the row
    printed when either changes)."""
    cells = row.split()
    if len(cells) < 4 or not cells[2].isdigit() or not cells[3].isdigit():
        return tuple(cells[1:2])
    return (cells[1], int(cells[2]) * 10 // max(int(cells[3]), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    why = missing_prerequisites()
    if why:
        say("cannot run the local cluster here: %s; `make train` runs the same training in one process" % why)
        return 3
    build = os.path.abspath(args.build)
    work = os.path.join(build, "demo", "cluster")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    def interrupted(signum, frame):     # SIGTERM stops the demo as Ctrl-C does
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, interrupted)
    s3 = has_moto()
    c = LocalCluster(work, nodes=2, s3=s3, bin_dir=os.path.join(build, "bin"), lease_seconds=1,
                     grace_seconds=10)
    job = "fashion-mnist"
    try:
        say("starting the API server, the controllers, 2 local nodes%s" % (" and moto's S3" if s3 else ""))
        c.start()
        print(c.kubectl("get", "nodes", "-o", "wide").stdout, end="")
        say("kubectl apply -f manifests/")
        print(c.install_operator(), end="")
        n_op = len(c.get_json("pods", "-n", "vitjob-system").get("items", []))
        say("the operator is Ready (%d pods, one leads)" % n_op)
        with open(os.path.join(ROOT, "manifests", "examples", "cpu", "fashion-mnist.yaml")) as f:
            text = f.read()
        if s3:
            e = c.s3
            c.kubectl("create", "secret", "generic", "s3-credentials",
                      "--from-literal=AWS_ACCESS_KEY_ID=" + e["AWS_ACCESS_KEY_ID"],
                      "--from-literal=AWS_SECRET_ACCESS_KEY=" + e["AWS_SECRET_ACCESS_KEY"],
                      "--from-literal=AWS_REGION=" + e["AWS_REGION"])
            uri = "s3://%s/fashion-mnist" % e["BUCKET"]
            text = re.sub(r"(?m)^(  checkpoint:\n)    uri: .*\n",
                          "\\1    uri: %s\n    endpoint: %s\n    credentialsSecret: s3-credentials\n" %
                          (uri, e["POD_ENDPOINT"]), text)
            say("checkpoints to %s on moto's S3 (%s from the pods)" % (uri, e["POD_ENDPOINT"]))
        else:
            m = re.search(r"(?m)^    uri: file://(\S+)", text)
            uri = "file://" + m.group(1)
            os.makedirs(m.group(1), exist_ok=True)
            os.chmod(os.path.dirname(m.group(1)), 0o1777)
            os.chmod(m.group(1), 0o1777)
            say("moto not installed: checkpoints to %s" % uri)
        text = write_shards(c, build, s3, text)
        say("kubectl apply -f manifests/examples/cpu/fashion-mnist.yaml (data: the JPEG shards)")
        print(c.kubectl("apply", "-f", "-", input=text).stdout, end="")
        say("kubectl get vj %s -w (a row per phase, and per tenth of the steps)" % job)
        last, header = None, True
        deadline = time.monotonic() + args.timeout
        phase = None
        while time.monotonic() < deadline:
            r = c.kubectl("get", "vj", job, *([] if header else ["--no-headers"]), check=False)
            rows = r.stdout.strip().splitlines()
            row = rows[-1] if rows else ""
            key = tenth(row)
            if row and key != last:      # a new phase, or another tenth of the steps
                print("\n".join(rows) if header else row, flush=True)
                header = False
                last = key
            phase = (c.get_json("vj", job).get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(1)
        st = c.get_json("vj", job).get("status") or {}
        if phase != "Succeeded":
            say("the job did not succeed (phase %s): %s" % (phase, json.dumps(st.get("conditions"))))
            return 1
        rank0 = [p for p in c.get_json("pods", "-l", "vitjob.dev/job-name=%s,vitjob.dev/rank=0" % job)
                 .get("items", [])]
        rank0.sort(key=lambda p: int(p["metadata"]["labels"].get("vitjob.dev/restart", "0")))
        pr = st.get("progress") or {}
        say("Succeeded: %d steps, final loss %s, test accuracy %s (status.progress), %d restart(s)" % (
            pr.get("step", 0), pr.get("loss"), pr.get("testAccuracy", "?"), st.get("restarts", 0)))
        if rank0:
            name = rank0[-1]["metadata"]["name"]
            say("kubectl logs --tail=5 %s" % name)
            r = c.kubectl("logs", "--tail=5", name, check=False)
            print(r.stdout if r.returncode == 0 else r.stderr, end="", flush=True)
        out = os.path.join(build, "demo", "model.safetensors")
        cmd = [os.path.join(build, "bin", "vitjob-worker"), "export", "--from", uri, "--out", out]
        env = dict(os.environ)
        if s3:
            cmd += ["--endpoint", c.s3["S3_ENDPOINT"]]
            env.update({k: c.s3[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")})
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode == 0:
            say("the final checkpoint's weights (timm names): %s" % out)
        return 0
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        say("stopping the cluster")
        c.stop()


if __name__ == "__main__":
    sys.exit(main())
