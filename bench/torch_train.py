#!/usr/bin/python3
"""bench/torch_train.py - the PyTorch peer of the CPU training benchmark.

Owns: training tests/ref/torch_vit.py's ViT (timm's architecture) on
Fashion-MNIST on the CPU with the worker's recipe - fp32, AdamW with timm's
parameter groups (lr 1e-3, weight decay 0.05, betas 0.9/0.999, eps 1e-8),
clip_grad_norm_(1.0), constant lr, sequential batches of the training set
with no augmentation - and measuring it the way the C benchmark does:
--warmup-steps untimed steps, then --steps timed ones (time.perf_counter
around the whole optimizer step, data slicing included).

Prints one JSON line:
  {"impl": "pytorch", "torch": "1.13.0", "threads": 4, "batch": 64,
   "images_per_sec": 1234.5, "peak_rss_mib": 456.7, "final_loss": 1.23}
peak_rss_mib is the process's peak resident set (ru_maxrss, KiB on Linux),
which includes the dataset (about 190 MiB as float32) and torch itself.

Threads: Debian's torch runs its own ops on libgomp and its matmuls on
OpenBLAS (pthreads build), which keeps a separate pool sized to every core.
So that --threads N really means N cores, and so that idle OpenMP workers do
not spin against the BLAS threads (measured: with the defaults, 2 threads on
a 2-core machine ran ~13x slower than 1), this sets, before torch loads and
unless already set in the environment, OPENBLAS_NUM_THREADS=N and
OMP_WAIT_POLICY=PASSIVE.

Usage: torch_train.py --image 28 --patch 7 --chans 1 --dim 64 --depth 4
                      --heads 4 --mlp-ratio 4 --classes 10 --batch 64
                      --threads 4 --steps 50 --warmup-steps 5 [--seed 1234]
"""

import argparse
import json
import os
import resource
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--image", type=int, default=28)
    ap.add_argument("--patch", type=int, default=7)
    ap.add_argument("--chans", type=int, default=1)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--mlp-ratio", dest="mlp_ratio", type=float, default=4.0)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup-steps", dest="warmup_steps", type=int, default=3,
                    help="untimed steps first")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--stock-env", dest="stock_env", action="store_true",
                    help="leave OPENBLAS_NUM_THREADS and OMP_WAIT_POLICY as the "
                         "environment has them (Debian's torch as a user runs it)")
    args = ap.parse_args()
    if args.steps < 1 or args.batch < 1 or args.threads < 1:
        ap.error("--steps, --batch and --threads must be positive")

    # Must precede the first import of torch (see the top of the file).
    if not args.stock_env:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    import torch.nn.functional as F
    from tests.ref import torch_vit  # the repository root on PYTHONPATH (its launcher's)

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)

    images, labels = torch_vit.load_fashion_mnist("train", args.data_dir)
    if args.image != images.shape[-1] or args.chans != images.shape[1]:
        ap.error("Fashion-MNIST is 28x28x1; got --image %d --chans %d" % (args.image, args.chans))
    n = images.shape[0]

    model = torch_vit.build_vit(args.image, args.patch, args.chans, args.dim, args.depth,
                                args.heads, args.mlp_ratio, args.classes)
    model.train()
    opt = torch.optim.AdamW(torch_vit.param_groups_weight_decay(model, 0.05), lr=args.lr,
                            betas=(0.9, 0.999), eps=1e-8)

    pos = 0

    def step():
        nonlocal pos
        if pos + args.batch > n:  # wrap to the start, dropping the ragged tail
            pos = 0
        x = images[pos:pos + args.batch]
        y = labels[pos:pos + args.batch]
        pos += args.batch
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        torch_vit.clip_grad_norm(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for _ in range(args.warmup_steps):
        step()
    t0 = time.perf_counter()
    loss = float("nan")
    for _ in range(args.steps):
        loss = step()
    elapsed = time.perf_counter() - t0

    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "impl": "pytorch" + (" (stock env)" if args.stock_env else ""),
        "torch": torch.__version__,
        "threads": args.threads,
        "batch": args.batch,
        "images_per_sec": round(args.steps * args.batch / elapsed, 2),
        "peak_rss_mib": round(peak_kib / 1024.0, 1),
        "final_loss": round(loss, 6),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
