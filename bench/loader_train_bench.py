#!/usr/bin/python3
"""bench/loader_train_bench.py - `make bench`: does the data loader keep up?

Owns: training fmnist_small for the same steps, threads and seed from the
Fashion-MNIST IDX files held in memory and from the same images as JPEG
webdataset shards (quality 95, written by `vitjob-worker shards`), through
the loader (decode threads, the queue of ready batches), in one run; and
printing one table: images/s of each (best of --repeats), the ratio, and
how long training waited for decoded samples. Target (issue 25): the shard
run within 5% of the in-memory one. Not a test: nothing here asserts a time.

usage: loader_train_bench.py [--build build] [--steps 60] [--repeats 3]
"""
import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = "/usr/share/datasets/fashion-mnist"


def train(worker, args):
    out = subprocess.run([worker, "train", "--set", "model.preset=fmnist_small"] + args,
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise SystemExit("bench: training failed (%d): %s" % (out.returncode, out.stderr[-2000:]))
    return json.loads([l for l in out.stdout.splitlines() if '"summary"' in l][-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    worker = os.path.join(a.build, "bin", "vitjob-worker")
    tmp = tempfile.mkdtemp(prefix="loader-train-bench-")
    for split, name in (("train", "train"), ("t10k", "test")):
        subprocess.run([worker, "shards", "--from", FMNIST, "--split", split, "--out",
                        "%s/%s-%%02d.tar" % (tmp, name), "--format", "jpeg", "--quality", "95"],
                       check=True, stdout=subprocess.DEVNULL)
    common = ["--set", "training.steps=%d" % a.steps, "--set", "training.optimizer.warmupSteps=5",
              "--set", "training.exportPath=", "--set", "data.augment=false",
              "--set", "training.evalInterval=0"]
    shards = ["--set", "data.format=webdataset", "--set", "data.uri=file://%s/train-{00..05}.tar" % tmp,
              "--set", "data.testUri=", "--set", "data.mean=[0.286]", "--set", "data.std=[0.353]",
              "--set", "data.cropPct=1"]
    rows = []
    for name, extra in (("IDX in memory", []), ("JPEG shards (loader)", shards)):
        best = None
        for _ in range(a.repeats):
            s = train(worker, common + extra)
            if best is None or s["images_per_sec"] > best["images_per_sec"]:
                best = s
        rows.append((name, best))
    base = rows[0][1]["images_per_sec"]
    print("| data | images/s (best of %d, %d steps) | vs memory | training waited for data, s |"
          % (a.repeats, a.steps))
    print("|---|---|---|---|")
    for name, s in rows:
        print("| %s | %.1f | %.3f | %.3f |" % (name, s["images_per_sec"], s["images_per_sec"] / base,
                                            s.get("data_wait_seconds", 0.0)))
    print("threads: %d compute (data.workers: what they leave, at least 1)" % rows[0][1]["threads"])
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
