#!/usr/bin/python3
"""bench/cpu_vs_torch.py - `make bench`: the CPU engine against PyTorch.

Owns: running, in one go on this machine, (1) the OpenBLAS sgemm rate
(bench/sgemm_rate.c), (2) this engine's training throughput and peak memory
and (3) PyTorch's (Debian's python3-torch; tests/ref/torch_vit.py, timm's
architecture) on the same model config, batch, thread count and data
(Fashion-MNIST, no augmentation, fp32, AdamW + grad clip), then (4) this
engine's time to 85% test accuracy with the default config; and printing one
table with the ratios. Not a test: nothing here asserts a time.

Achieved FLOP rate = images/s x (6 x parameters x tokens + 12 x depth x
tokens^2 x dim), i.e. forward+backward matmul FLOPs plus the attention
score and value products, as a fraction of the sgemm rate.

PyTorch runs twice: tuned (OPENBLAS_NUM_THREADS = threads and
OMP_WAIT_POLICY=PASSIVE, so its two thread pools do not fight) and as
Debian's build runs out of the box (stock env, fewer steps: it is slow).

Each throughput is the best of --repeats runs (this machine's run-to-run
noise is about +-10%); the engine's runs include their first step, PyTorch's
skip 3 warm-up steps.

usage: cpu_vs_torch.py [--build build] [--threads N] [--repeats 3] [--quick]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"

MODELS = {  # name: (image, patch, chans, dim, depth, heads, mlp, classes), timed steps
    "fmnist_tiny": ((28, 7, 1, 64, 4, 4, 4.0, 10), 120),
    "fmnist_small": ((28, 4, 1, 128, 6, 4, 4.0, 10), 30),
}


def params_of(image, patch, chans, dim, depth, heads, mlp, classes):
    T = (image // patch) ** 2 + 1
    H = round(dim * mlp)
    per_block = 4 * dim + (3 * dim * dim + 3 * dim) + (dim * dim + dim) + (H * dim + H) + (dim * H + dim)
    return (dim + T * dim + dim * chans * patch * patch + dim + depth * per_block + 2 * dim
            + classes * dim + classes), T


def flops_per_image(m):
    image, patch, chans, dim, depth, heads, mlp, classes = m
    P, T = params_of(*m)
    return 6.0 * P * T + 12.0 * depth * T * T * dim


def run_json(cmd, env=None):
    out = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-3000:])
        raise SystemExit("bench: %s failed with %d" % (cmd[0], out.returncode))
    return json.loads(out.stdout.strip().splitlines()[-1])


def worker_sets(m, batch, threads, steps):
    image, patch, chans, dim, depth, heads, mlp, classes = m
    kv = {"model.preset": "", "model.imageSize": image, "model.patchSize": patch,
          "model.channels": chans, "model.dim": dim, "model.depth": depth, "model.heads": heads,
          "model.mlpRatio": mlp, "model.numClasses": classes, "training.steps": steps,
          "training.globalBatchSize": batch, "training.microBatchSize": batch,
          "training.threads": threads, "training.optimizer.warmupSteps": 1,
          "training.optimizer.schedule": "constant", "training.optimizer.lr": 1e-3,
          "training.exportPath": "", "training.logInterval": steps, "data.augment": "false"}
    args = []
    for k, v in kv.items():
        args += ["--set", "%s=%s" % (k, v)]
    return args


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement; best is kept")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="skip the time-to-85%% run")
    args = ap.parse_args()
    worker = os.path.join(args.build, "bin", "vitjob-worker")
    sgemm = run_json([os.path.join(args.build, "bin", "sgemm_rate"), "1024", str(args.threads)])
    rate = sgemm["gflops"]
    print("machine: %d threads, OpenBLAS sgemm (1024^3, A B^T) %.1f GFLOP/s" % (args.threads, rate))

    rows = []
    def best(cmd, env=None):
        runs = [run_json(cmd, env) for _ in range(args.repeats)]
        return max(runs, key=lambda r: r["images_per_sec"])

    for name, (m, steps) in MODELS.items():
        fl = flops_per_image(m)
        ours = best([worker, "train"] + worker_sets(m, args.batch, args.threads, steps))
        torch_args = [PY, "bench/torch_train.py", "--image", str(m[0]), "--patch", str(m[1]),
                      "--chans", str(m[2]), "--dim", str(m[3]), "--depth", str(m[4]),
                      "--heads", str(m[5]), "--mlp-ratio", str(m[6]), "--classes", str(m[7]),
                      "--batch", str(args.batch), "--threads", str(args.threads),
                      "--warmup-steps", "3"]
        # torch_train.py imports tests.ref.torch_vit: the repository root on its path
        tuned = best(torch_args + ["--steps", str(steps)], dict(os.environ, PYTHONPATH=ROOT))
        env = {k: v for k, v in os.environ.items()
               if k not in ("OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
        env["PYTHONPATH"] = ROOT
        stock = run_json(torch_args + ["--steps", str(max(3, steps // 4)), "--stock-env"], env)
        for impl, r in (("vitjob (C, CPU)", ours), ("pytorch tuned", tuned),
                        ("pytorch stock env", stock)):
            ips = r["images_per_sec"]
            rows.append((name, impl, ips, r["peak_rss_mib"], ips * fl / 1e9,
                         ours["images_per_sec"] / ips))

    hdr = ("model", "implementation", "img/s", "peak RSS MiB", "GFLOP/s", "% sgemm", "vitjob x")
    print()
    print("| %-12s | %-18s | %9s | %12s | %8s | %7s | %8s |" % hdr)
    print("|" + "|".join("-" * (w + 2) for w in (12, 18, 9, 12, 8, 7, 8)) + "|")
    for name, impl, ips, rss, gf, ratio in rows:
        print("| %-12s | %-18s | %9.1f | %12.1f | %8.1f | %6.1f%% | %7.2fx |"
              % (name, impl, ips, rss, gf, 100 * gf / rate, ratio))
    print()
    print("batch %d, fp32, AdamW + clip, Fashion-MNIST, best of %d; steps and FLOPs/image: %s"
          % (args.batch, args.repeats,
             ", ".join("%s %d steps %.1fM" % (n, st, flops_per_image(m) / 1e6)
                       for n, (m, st) in MODELS.items())))

    if not args.quick:
        metrics = os.path.join(args.build, "bench-time-to-85.jsonl")
        summary = run_json([worker, "train", "--set", "training.evalInterval=50",
                            "--set", "training.threads=%d" % args.threads,
                            "--set", "training.exportPath=", "--metrics", metrics])
        hit = None
        best = 0.0
        with open(metrics) as f:
            for line in f:
                r = json.loads(line)
                if "test_accuracy" in r:
                    best = max(best, r["test_accuracy"])
                    if hit is None and r["test_accuracy"] >= 0.85:
                        hit = r
        print()
        if hit:
            print("time to 85%% test accuracy (default config, fmnist_tiny, eval every 50 steps): "
                  "%.1f s of training (step %d, accuracy %.4f); final accuracy %.4f after %d steps"
                  % (hit["train_seconds"], hit["step"], hit["test_accuracy"],
                     summary["test_accuracy"], summary["steps"]))
        else:
            print("time to 85%%: not reached in %d steps (best %.4f)" % (summary["steps"], best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
