#!/usr/bin/env python3
"""bench/plan_gpu_bench.py - `vitjob-worker plan --device cuda` against the
worker's own training runs on the GPU: per config, the planned images per
second beside the measured steady rate (the last log interval's img/s), and
the planned bytes of the backend's allocations beside the backend's measured
peak (the run's event=memory: ops_cuda_peak_bytes against jobplan_memory).

Owns: the GPU configs (fmnist_small from the IDX files; vit_b16 and vit_l16
at 224x224 from PNG webdataset shards that it writes itself from the same
Fashion-MNIST files with `vitjob-worker shards`), running plan and train for
each, and the markdown table. One process, one GPU (world 1).
Must not: assert anything (numbers only; tests/ checks behaviour), or
download data.

usage: bench/plan_gpu_bench.py --build B [--data IDX_DIR] [--gpu h100]
       [--steps 15] [--configs NAME,...] [--device cuda|cpu]
--device cpu runs fmnist_tiny and vit_ti16 on this machine's CPU (plan --measure), a smoke
test of the script. FITTED are the runs plan_time.c's GPU rates were read
from; HELD_OUT the runs that check them.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SHARDED = ["--set", "model.numClasses=10", "--set", "data.format=webdataset"]
# A config's name says it all: PRESET-bGLOBAL[-mbMICRO]-PRECISION[-ckpt], e.g.
# vit_b16-b256-mb64-bf16 (micro-batch = global when left out; bf16, fp16
# or fp32). vit_* read 224x224 PNG shards of Fashion-MNIST (10 classes);
# fmnist_* the IDX files.
FITTED = ["fmnist_tiny-b128-bf16", "fmnist_small-b128-bf16", "vit_s16-b128-bf16", "vit_b16-b128-bf16",
          "vit_b16-b128-bf16-ckpt", "vit_b16-b256-mb64-bf16", "vit_b16-b128-fp16", "vit_b16-b64-fp32",
          "vit_l16-b64-bf16-ckpt"]  # the runs the GPU rates in plan_time.c were read from
HELD_OUT = ["fmnist_tiny-b1024-bf16", "fmnist_small-b512-fp32-ckpt", "vit_ti16-b256-bf16",
            "vit_s16-b256-bf16-ckpt", "vit_b16-b32-bf16", "vit_b16-b192-mb96-fp16-ckpt",
            "vit_l16-b32-fp32", "vit_l16-b128-mb32-bf16"]  # runs the rates were not read from
PRECISIONS = {"bf16": "bf16-mixed", "fp16": "fp16-mixed", "fp32": "fp32"}
NAME = re.compile(r"^(fmnist_tiny|fmnist_small|vit_ti16|vit_s16|vit_b16|vit_l16)-b(\d+)(?:-mb(\d+))?"
                  r"-(bf16|fp16|fp32)(-ckpt)?$")


def parse(name):
    """(sets, global, micro, precision, checkpointing) of a config's name"""
    m = NAME.match(name)
    if not m:
        return None
    preset, glob, micro, prec, ckpt = m.groups()
    sets = ["--set", "model.preset=" + preset]
    if preset.startswith("vit_"):
        sets += SHARDED
    return sets, int(glob), int(micro or glob), PRECISIONS[prec], 1 if ckpt else 0


def write_shards(worker, data, out):
    """PNG shards of Fashion-MNIST's training split; returns (data.uri,
    data.testUri): every shard, and the first one for the final evaluation."""
    r = subprocess.run([worker, "shards", "--from", data, "--out", os.path.join(out, "train-%06d.tar"),
                        "--format", "png", "--samples-per-shard", "2000"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("shards failed: " + r.stderr.strip()[-400:])
    m = re.search(r"data\.uri: (\S+)", r.stdout + r.stderr)
    if not m:
        sys.exit("shards printed no data.uri: " + r.stdout[-400:])
    return "file://" + m.group(1), "file://" + os.path.join(out, "train-000000.tar")


def config(name, steps, device, uri, test_uri, idx):
    sets, glob, micro, prec, ckpt = parse(name)
    data = (["--set", "data.uri=" + uri, "--set", "data.testUri=" + test_uri]
            if "data.format=webdataset" in sets else ["--set", "data.uri=file://" + idx])
    return sets + data + [
        "--set", "training.steps=%d" % steps, "--set", "training.optimizer.warmupSteps=2",
        "--set", "training.globalBatchSize=%d" % glob, "--set", "training.microBatchSize=%d" % micro,
        "--set", "training.precision=" + prec, "--set", "training.device=" + device,
        "--set", "training.activationCheckpointing=%s" % ("true" if ckpt else "false"),
        "--set", "training.logInterval=5", "--set", "training.exportPath="]


def main():
    ap = argparse.ArgumentParser(description="the plan's img/s and memory against GPU training runs")
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                    help="Fashion-MNIST IDX files (the shards are written from their training split)")
    ap.add_argument("--gpu", default="h100", help="plan --gpu: h100, h200, a100, v100")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=15, help="steps per run (the rate is the last 5's)")
    ap.add_argument("--configs", default="")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per training run")
    args = ap.parse_args()
    names = (args.configs.split(",") if args.configs else
             FITTED + HELD_OUT if args.device == "cuda" else ["fmnist_tiny-b32-mb16-bf16-ckpt", "vit_ti16-b4-bf16"])
    for n in names:
        if not parse(n):
            sys.exit("config %s: not PRESET-bGLOBAL[-mbMICRO]-bf16|fp16|fp32[-ckpt]" % n)
    worker = os.path.join(args.build, "bin", "vitjob-worker")
    tmp = tempfile.mkdtemp(prefix="plan-gpu-bench-")
    uri, test_uri = write_shards(worker, args.data, tmp)
    plan_dev = ["--device", "cuda", "--gpu", args.gpu] if args.device == "cuda" else ["--device", "cpu",
                                                                                     "--measure"]
    print("| config | planned img/s | measured img/s (last 5 steps) | planned / measured "
          "| planned backend MiB | peak backend MiB | planned / peak | plan's total MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        cfg = config(name, args.steps, args.device, uri, test_uri, args.data)
        p = subprocess.run([worker, "plan"] + cfg + plan_dev + ["--json"], capture_output=True, text=True)
        if p.returncode != 0:
            print("| %s | plan failed: %s |" % (name, p.stderr.strip()[-200:]))
            continue
        plan = json.loads(p.stdout)
        try:
            t = subprocess.run([worker, "train"] + cfg + ["--log-level", "info"], capture_output=True,
                               text=True, timeout=args.timeout)
            log, rc = t.stderr, t.returncode
        except subprocess.TimeoutExpired as e:
            log, rc = (e.stderr or b"").decode(errors="replace"), "timeout"
        rates = [float(x) for x in re.findall(r"step=\d+/\d+ .*img_per_s=([\d.]+)", log)]
        mem = re.search(r"event=memory rank=0 peak_bytes=(\d+) planned_bytes=(\d+)", log)
        if rc != 0 or not rates or not mem:
            tail = [l for l in log.splitlines() if "level=error" in l or "level=fatal" in l][-1:]
            print("| %s | %.1f | run failed (rc %s): %s |" % (
                name, plan["time"]["imagesPerSecond"], rc, (tail[0] if tail else log[-200:])[-200:]))
            continue
        peak, planned = int(mem.group(1)), int(mem.group(2))
        pi, mi = plan["time"]["imagesPerSecond"], rates[-1]
        print("| %s%s | %.1f | %.1f | %.2f | %.1f | %.1f | %.3f | %.1f |" % (
            name, " (held out)" if name in HELD_OUT else "", pi, mi, pi / mi, planned / 2**20, peak / 2**20, planned / peak,
            plan["memoryPerRank"]["total"] / 2**20))
        sys.stdout.flush()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
