#!/usr/bin/env python3
"""bench/loader_gpu_bench.py - does the data loader feed a GPU? (issue 42, item 5)

Owns: making ImageNet-sized JPEGs (RGB, sides drawn from 300..500 pixels,
smooth random colour fields with per-channel noise, quality 90: about 100
KB each, ImageNet's train images average about 110) with Pillow in a process pool, packing them into webdataset shards
with `vitjob-worker shards` (an image folder: the files copied as they
are), then training the model from those shards with the loader's decode
threads at each of --workers, and printing one table: the steady img/s
(the last log interval), the seconds training waited for decoded samples
(the summary's data_wait_seconds) against the training seconds, and, for
the peer, gpu_bench's step on a batch already in memory (what the GPU does
when it never waits). The target: waiting <= 5% of the step.
Must not: assert anything (numbers only), download anything, or change the
GPU's settings.

usage: loader_gpu_bench.py [--build build] [--device cuda|cpu] [--model vit_b16]
                           [--batch 128] [--steps 40] [--images 4096]
                           [--workers 4,8,15] [--timeout 120] [--keep DIR]
--device cpu with a small --model, --batch and --images is this script's
smoke test on a machine without a GPU.
"""
import argparse
import json
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES = 10


def make_image(job):
    """One JPEG: smooth colour fields (a small random image upscaled) plus
    per-channel noise: about a photograph's bytes and decode work, neither a
    flat image's nor pure noise's."""
    path, seed = job
    from PIL import Image
    rng = random.Random(seed)
    w, h = rng.randint(300, 500), rng.randint(300, 500)
    small = Image.frombytes("RGB", (8, 8), bytes(rng.getrandbits(8) for _ in range(8 * 8 * 3)))
    img = small.resize((w, h), Image.BICUBIC)
    noise = Image.merge("RGB", [Image.effect_noise((w, h), 80) for _ in range(3)])
    img = Image.blend(img, noise, 0.45)  # about 100 KB at quality 90, ImageNet's ~110
    img.save(path, "JPEG", quality=90)
    return os.path.getsize(path)


def make_shards(worker, n, out):
    """n JPEGs in an image folder of CLASSES classes, then shards of 256;
    returns (data.uri, mean bytes per image)."""
    folder = os.path.join(out, "images")
    jobs = []
    for i in range(n):
        d = os.path.join(folder, "c%02d" % (i % CLASSES))
        os.makedirs(d, exist_ok=True)
        jobs.append((os.path.join(d, "%06d.jpg" % i), i))
    with multiprocessing.Pool() as pool:
        sizes = pool.map(make_image, jobs, chunksize=16)
    r = subprocess.run([worker, "shards", "--from", folder, "--out",
                        os.path.join(out, "train-%06d.tar"), "--samples-per-shard", "256"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("shards failed: " + r.stderr.strip()[-400:])
    m = re.search(r"data\.uri: (\S+)", r.stdout + r.stderr)
    if not m:
        sys.exit("shards printed no data.uri: " + (r.stdout + r.stderr)[-400:])
    shutil.rmtree(folder, ignore_errors=True)
    return "file://" + m.group(1), sum(sizes) / len(sizes)


def train(worker, args, uri, workers):
    """(summary dict, last logged img/s) of one training run, or (None, why)."""
    cmd = [worker, "train", "--set", "model.preset=" + args.model,
           "--set", "model.numClasses=%d" % CLASSES, "--set", "data.format=webdataset",
           "--set", "data.uri=" + uri, "--set", "data.testUri=", "--set", "data.augment=true",
           "--set", "data.workers=%d" % workers, "--set", "training.device=" + args.device,
           "--set", "training.precision=" + args.precision,
           "--set", "training.globalBatchSize=%d" % args.batch,
           "--set", "training.steps=%d" % args.steps, "--set", "training.optimizer.warmupSteps=2",
           "--set", "training.logInterval=%d" % max(1, args.steps // 4),
           "--set", "training.evalInterval=0", "--set", "training.exportPath=",
           "--log-level", "info"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, "timed out after %d s" % args.timeout
    if r.returncode != 0:
        err = [l for l in r.stderr.splitlines() if "level=error" in l or "level=fatal" in l]
        return None, "exit %d: %s" % (r.returncode, (err[-1] if err else r.stderr[-300:])[-300:])
    summary = [l for l in r.stdout.splitlines() if '"summary"' in l]
    rates = [float(x) for x in re.findall(r"step=\d+/\d+ .*img_per_s=([\d.]+)", r.stderr)]
    if not summary:
        return None, "no summary line"
    return json.loads(summary[-1]), (rates[-1] if rates else 0.0)


def gpu_step_rate(build, args):
    """gpu_bench's img/s for the same model and batch (the batch in memory), or None."""
    exe = os.path.join(build, "bin", "gpu_bench")
    try:
        r = subprocess.run([exe, "--model", args.model, "--batch", str(args.batch), "--precision",
                            args.precision, "--steps", "10", "--warmup", "3", "--device",
                            args.device, "--json"],
                           capture_output=True, text=True, timeout=args.timeout)
        return json.loads(r.stdout.strip().splitlines()[-1])["images_per_sec"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, IndexError):
        return None


def main():
    ap = argparse.ArgumentParser(description="the data loader feeding a GPU")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--model", default="vit_b16")
    ap.add_argument("--precision", default="bf16-mixed")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--workers", default="4,8,15", help="decode threads per run, comma-separated")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per training run")
    ap.add_argument("--keep", default="", help="write the shards here and keep them")
    a = ap.parse_args()
    try:
        import PIL  # noqa: F401 (the JPEGs are made with it)
    except ImportError:
        sys.exit("loader_gpu_bench: needs Pillow to make the JPEGs (Debian: python3-pil); "
                 "%s has none" % sys.executable)
    worker = os.path.join(a.build, "bin", "vitjob-worker")
    try:
        threads = [int(x) for x in a.workers.split(",") if x]
    except ValueError:
        sys.exit("--workers: comma-separated counts, e.g. 4,8,15")
    out = a.keep or tempfile.mkdtemp(prefix="loader-gpu-bench-")
    os.makedirs(out, exist_ok=True)
    uri, mean_bytes = make_shards(worker, a.images, out)
    print("%d JPEGs of 300..500 x 300..500 pixels, %.1f KB each on average, in shards of 256; "
          "%s %s batch %d, %d steps, %d CPUs" % (a.images, mean_bytes / 1000, a.model, a.precision,
                                                 a.batch, a.steps, os.cpu_count() or 0))
    peer = gpu_step_rate(a.build, a)
    print()
    print("| decode threads | img/s (last interval) | waited s | train s | waited / train |"
          " vs the batch in memory |")
    print("|---:|---:|---:|---:|---:|---:|")
    for w in threads:
        s, rate = train(worker, a, uri, w)
        if s is None:
            print("| %d | failed: %s | | | | |" % (w, rate))
            continue
        wait, ts = s.get("data_wait_seconds", 0.0), s.get("train_seconds", 0.0)
        print("| %d | %.1f | %.2f | %.2f | %.1f%% | %s |" % (
            w, rate, wait, ts, 100.0 * wait / ts if ts > 0 else 0.0,
            "%.2fx" % (rate / peer) if peer else "n/a"))
        sys.stdout.flush()
    if peer:
        print("\n- the batch in memory (gpu_bench, the same step without the loader): %.1f img/s"
              % peer)
    if not a.keep:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
