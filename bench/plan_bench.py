#!/usr/bin/env python3
"""bench/plan_bench.py - `vitjob-worker plan --measure` against the
worker's measured rate: for fmnist_tiny, fmnist_small and vit_s16 (at
28x28x1, batch 16) at world sizes 1, 2 and 4 (every sharding mode; every
rank on this machine, so the plan is asked for --local-ranks), with and
without activation checkpointing, the planned images per second and its
terms (the CPU probes: the model's forward and backward of one micro-batch
and its optimizer step, run in as many processes at once as ranks; the
collectives' bytes and calls on loopback) beside the rate rank 0 reports:
steady, the median of its log intervals' img_per_s after the first (the
first step's allocations and thread start are not a step's time, and the
plan does not count them), and its whole run's (the done line, every step
timed); and the planned memory per
rank beside each rank's peak (event=memory); a markdown table. --before
DIR plans the same runs with another build too; --repeat N plans and
runs each config N times, alternating, and compares the medians (the
measured spread beside). Target for the time
model: within 25% (issue 29). It is a benchmark, not a test: on a shared
machine both rates move with the load.
Must not: assert anything (a benchmark prints).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchlib import train_ranks


MODELS = {  # the preset, the batch (global, micro: x 4 ranks divides global), the steps
    # (every step is timed, the first too: enough of them that it weighs little)
    "fmnist_tiny": (["--set", "model.preset=fmnist_tiny"], 64, 16, 240),
    "fmnist_small": (["--set", "model.preset=fmnist_small"], 64, 16, 20),
    "vit_s16": (["--set", "model.preset=vit_s16", "--set", "model.imageSize=28",
                 "--set", "model.patchSize=7", "--set", "model.channels=1",
                 "--set", "model.numClasses=10"], 16, 4, 10),
}


def config(model, mode, ckpt, steps, threads):
    preset, glob, micro, default_steps = MODELS[model]
    steps = steps or default_steps
    return preset + [
        "--set", "training.steps=%d" % steps, "--set", "training.optimizer.warmupSteps=2",
        "--set", "training.globalBatchSize=%d" % glob, "--set", "training.microBatchSize=%d" % micro,
        "--set", "training.threads=%d" % threads, "--set", "training.exportPath=",
        "--set", "training.logInterval=%d" % max(1, steps // 6),
        "--set", "training.sharding=%s" % mode,
        "--set", "training.activationCheckpointing=%s" % ("true" if ckpt else "false")]


def train(worker, world, args, tmp):
    codes, logs = train_ranks(worker, world, args + ["--log-level", "info"], tmp)
    if any(codes):
        return None
    out = {"peaks": []}
    for r, text in enumerate(logs):
        out["peaks"].append(int(re.search(r"event=memory rank=\d+ peak_bytes=(\d+)", text).group(1)))
        if r == 0:
            done = [l for l in text.splitlines() if "event=done steps" in l][0]
            out["whole"] = float(re.search(r"img_per_s=([\d.]+)", done).group(1))
            # steady: the median of the log intervals' rates after the first
            # (the first holds the first step: allocation, page faults, the
            # threads' start), which the plan does not count
            rates = [float(x) for x in re.findall(r"step=\d+/\d+ .*img_per_s=([\d.]+)", text)]
            later = sorted(rates[1:])
            out["img_s"] = later[len(later) // 2] if later else out["whole"]
    return out


def small_test_split(src, dst, n=64):
    """dst: Fashion-MNIST's training files from src, and its first n test
    images: the run evaluates at its end, outside the timed steps, and the
    whole test set would take minutes of a large model's time."""
    import gzip
    for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        os.symlink(os.path.join(src, f), os.path.join(dst, f))
    for f, head, size in (("t10k-images-idx3-ubyte.gz", 16, 784), ("t10k-labels-idx1-ubyte.gz", 8, 1)):
        data = gzip.open(os.path.join(src, f)).read()
        out = bytearray(data[:head + n * size])
        out[4:8] = n.to_bytes(4, "big")
        with gzip.open(os.path.join(dst, f), "wb", 1) as g:
            g.write(bytes(out))


def runs(args):
    """(model, world, mode, ckpt): world 1 once per checkpointing setting
    (every mode runs as none there), worlds 2 and 4 in every mode."""
    for model in args.models.split(","):
        for ckpt in [int(c) for c in args.ckpt.split(",")]:
            for world in [int(w) for w in args.worlds.split(",")]:
                for mode in (["none"] if world == 1 else args.modes.split(",")):
                    yield model, world, mode, ckpt


def main():
    ap = argparse.ArgumentParser(description="vitjob-worker plan --measure's img/s against "
                                 "measured runs of the same configs (every rank on this machine)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=0,
                    help="training steps per run, all timed (0: the model's, 10 to 60)")
    ap.add_argument("--models", default="fmnist_tiny,fmnist_small,vit_s16")
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--modes", default="none,grad-op,full")
    ap.add_argument("--ckpt", default="0,1", help="activation checkpointing: 0, 1 or 0,1")
    ap.add_argument("--threads", type=int, default=0,
                    help="training threads per rank (0: the cores / the ranks, at least 1)")
    ap.add_argument("--before", default="",
                    help="another build's vitjob-worker planned beside (the same runs measured)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="plan and run each config N times, alternating, and compare the medians "
                    "(this machine's run-to-run noise is +-10 to 20%%)")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                    help="Fashion-MNIST's directory (the runs evaluate on 64 of its test images)")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="plan-bench-data-")
    small_test_split(args.data, data)
    worker = os.path.join(args.build, "bin", "vitjob-worker")
    ncpu = os.cpu_count() or 2
    extra = " %s planned img/s | its planned / measured |" % args.before if args.before else ""
    print("| model | ranks | sharding | ckpt | planned img/s | measured img/s (steady) | planned / measured "
          "| whole run img/s | plan's terms, s per step |%s planned MiB/rank | peak MiB (rank 0) |" % extra)
    print("|---|---:|---|---|---:|---:|---:|---:|---|%s---:|---:|" % ("---:|---:|" if args.before else ""))
    ratios, bratios = [], []
    for model, world, mode, ckpt in runs(args):
        threads = args.threads or max(1, ncpu // world)
        cfg = config(model, mode, ckpt, args.steps, threads) + ["--set", "data.uri=" + data]
        # every rank runs on this machine: local ranks, which share its cores;
        # --repeat: plan, run, plan, run ... and the medians of each
        what = "| %s | %d | %s | %s |" % (model, world, mode, "yes" if ckpt else "no")
        plans, got, failed = [], [], None
        for _ in range(max(1, args.repeat)):
            plan = subprocess.run([worker, "plan"] + cfg + ["--local-ranks", str(world), "--measure",
                                                              "--json"],
                                  capture_output=True, text=True)
            if plan.returncode != 0:
                failed = "plan failed: %s" % plan.stderr.strip()[-120:]
                break
            plans.append(json.loads(plan.stdout))
            with tempfile.TemporaryDirectory() as tmp:
                r = train(worker, world, cfg, tmp)
            if not r:
                failed = "run failed"
                break
            got.append(r)
        if failed:
            print("%s %s |" % (what, failed))
            continue
        plans.sort(key=lambda q: q["time"]["imagesPerSecond"])
        got.sort(key=lambda q: q["img_s"])
        p, r = plans[len(plans) // 2], got[len(got) // 2]
        spread = "" if len(got) == 1 else " (%.0f-%.0f)" % (got[0]["img_s"], got[-1]["img_s"])
        before = None
        if args.before:
            b = subprocess.run([os.path.join(args.before, "bin", "vitjob-worker"), "plan"] + cfg +
                               ["--local-ranks", str(world), "--measure", "--json"],
                               capture_output=True, text=True)
            before = json.loads(b.stdout)["time"]["imagesPerSecond"] if b.returncode == 0 else 0
        t = p["time"]
        terms = " ".join("%s %.3g" % (k, t[key]) for k, key in (
            ("compute", "computeSeconds"), ("optim", "optimizerSeconds"),
            ("data", "dataSeconds"), ("coll", "collectiveSeconds"),
            ("calls", "collectiveLatencySeconds")) if key in t)
        planned = t["imagesPerSecond"]
        ratio = planned / r["img_s"] if r["img_s"] else 0
        ratios.append(ratio)
        if before is not None:
            bratio = before / r["img_s"] if r["img_s"] else 0
            bratios.append(bratio)
            terms += " | %.1f | %.2f" % (before, bratio)
        print("%s %.1f | %.1f%s | %.2f | %.1f | %s | %.2f | %.2f |" % (
            what, planned, r["img_s"], spread, ratio, r["whole"], terms, p["memoryPerRank"]["backend"] / 1048576,
            r["peaks"][0] / 1048576))
        sys.stdout.flush()
    for name, rs in (("planned / measured", ratios), ("before: planned / measured", bratios)):
        if rs:
            inside = sum(1 for x in rs if 0.75 <= x <= 1.25)
            print("\n%s: %.2f to %.2f, %d of %d runs within 25%%" % (
                name, min(rs), max(rs), inside, len(rs)))
    shutil.rmtree(data, ignore_errors=True)
    print("load average at the end: %s" % " ".join("%.1f" % x for x in os.getloadavg()))


if __name__ == "__main__":
    main()
