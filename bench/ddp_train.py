#!/usr/bin/python3
"""bench/ddp_train.py - one rank of the PyTorch peer of bench/ranks_bench.py:
DistributedDataParallel on gloo, the way vitjob-worker trains with many
ranks and sharding `none`.

Owns: training tests/ref/torch_vit.py's ViT (timm's architecture, the
shape of a vitjob preset) on Fashion-MNIST with DDP on the gloo backend
over loopback: each optimizer step takes a global batch split into equal
parts per rank, each part in micro-batches whose gradients accumulate
under DDP's no_sync() (only the last micro-batch's backward all-reduces,
overlapped with that backward as DDP does), each micro-batch's mean loss
scaled so the gradients are those of the global batch's mean; then
clip_grad_norm_(1.0) and AdamW with timm's parameter groups, as the worker
does. The samples are a shuffled permutation of the training set, each
rank reading its part of the step's samples (as the worker's loader).
Timing as the worker's: the sum of the steps' wall times (every step,
the first included), img/s = steps x global batch / that sum.

Threads: like bench/torch_train.py, OPENBLAS_NUM_THREADS=--threads and
OMP_WAIT_POLICY=PASSIVE unless already set, torch.set_num_threads.

Prints one JSON line from rank 0:
  {"impl": "pytorch-ddp-gloo", "torch": "1.13.1", "world": 2, ...,
   "images_per_sec": 234.5, "peak_rss_mib": 456.7, "final_loss": 1.23}
Must not: assert anything (a benchmark prints).

Usage: ddp_train.py --rank R --world N --port P [--preset fmnist_small]
                    [--global-batch 64] [--micro-batch 16] [--threads 1]
                    [--steps 12]
"""

import argparse
import json
import os
import resource
import sys
import time

# image, patch, channels, dim, depth, heads, mlp ratio, classes (api/config_keys.c)
PRESETS = {
    "fmnist_tiny": (28, 7, 1, 64, 4, 4, 4.0, 10),
    "fmnist_small": (28, 4, 1, 128, 6, 4, 4.0, 10),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--preset", default="fmnist_small", choices=sorted(PRESETS))
    ap.add_argument("--global-batch", dest="global_batch", type=int, default=64)
    ap.add_argument("--micro-batch", dest="micro_batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    part = a.global_batch // a.world
    if part * a.world != a.global_batch or part % a.micro_batch:
        ap.error("--global-batch must split into --world parts of whole micro-batches")

    # Must precede the first import of torch (see bench/torch_train.py).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tests.ref import torch_vit  # the repository root on PYTHONPATH (its launcher's)

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port,
                            rank=a.rank, world_size=a.world)

    images, labels = torch_vit.load_fashion_mnist("train", a.data_dir)
    n = images.shape[0]
    model = DDP(torch_vit.build_vit(*PRESETS[a.preset]))  # broadcasts rank 0's weights
    model.train()
    opt = torch.optim.AdamW(torch_vit.param_groups_weight_decay(model.module, 0.05), lr=a.lr,
                            betas=(0.9, 0.999), eps=1e-8)
    gen = torch.Generator().manual_seed(a.seed)
    order, pos = torch.randperm(n, generator=gen), 0
    accum = part // a.micro_batch

    def step():
        nonlocal order, pos
        if pos + a.global_batch > n:  # a new epoch at a step boundary
            order, pos = torch.randperm(n, generator=gen), 0
        mine = order[pos + a.rank * part:pos + (a.rank + 1) * part]
        pos += a.global_batch
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for k in range(accum):
            idx = mine[k * a.micro_batch:(k + 1) * a.micro_batch]
            x, y = images[idx], labels[idx]
            # DDP averages over ranks: scaling each micro-batch's mean by
            # micro/part makes the result the global batch's mean gradient
            if k < accum - 1:
                with model.no_sync():
                    loss = F.cross_entropy(model(x), y) * (a.micro_batch / part)
                    loss.backward()
            else:
                loss = F.cross_entropy(model(x), y) * (a.micro_batch / part)
                loss.backward()
            total += loss.item()
        torch_vit.clip_grad_norm(model.parameters(), 1.0)
        opt.step()
        return total

    elapsed, loss = 0.0, float("nan")
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        elapsed += time.perf_counter() - t0
    dist.barrier()
    if a.rank == 0:
        print(json.dumps({
            "impl": "pytorch-ddp-gloo",
            "torch": torch.__version__,
            "world": a.world,
            "threads": a.threads,
            "global_batch": a.global_batch,
            "micro_batch": a.micro_batch,
            "steps": a.steps,
            "images_per_sec": round(a.steps * a.global_batch / elapsed, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "final_loss": round(loss, 6),
        }))
        sys.stdout.flush()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
