#!/usr/bin/python3
"""tests/ref/bf16_vs_torch.py - the worker's training against PyTorch's, from
the same initial weights in the same data order (issue 42, item 6: is the
GPU's bf16-mixed accuracy gap the worker's rounding, or torch autocast's too?).

Owns, for each seed:
  1. the initial weights: tests/ref/torch_vit.py's ViT (timm's init) for the
     preset's shape, seeded with the seed, written as safetensors, which the
     worker loads (model.init, model.initHead=keep);
  2. the data order: build/bin/data_order (the trainer's own loader, data.c)
     gives the training-set indices of every optimizer step for
     training.seed = the seed, so torch takes the same batches in the same
     order; no augmentation on either side;
  3. the runs named by --runs, each STEPS AdamW steps of the same recipe
     (timm's parameter groups, linear warmup then cosine, clip_grad_norm_,
     cross-entropy, the batch of G in one piece):
       vitjob-fp32, vitjob-bf16   the worker (training.device=--device;
                                  bf16 = training.precision=bf16-mixed)
       vitjob-bf16-cpu, ...-fp32-cpu  the worker on the CPU whatever
                                  --device (bf16: its emulation of the GPU's
                                  recipe, the issue's baseline)
       torch-fp32, torch-bf16     PyTorch on --device (bf16 = autocast
                                  bfloat16 around forward and loss, fp32
                                  weights and AdamW, as timm's --amp-dtype
                                  bfloat16); evaluated the same way
     and their test accuracy on the 10,000 test images;
  4. a table (and --json): per run the test accuracy, the mean training loss
     of the last tenth of the steps, and per pair of runs of one seed the
     largest loss difference over the first --check-steps steps.

The fp32 pair is the wiring's proof: from the same weights and batches the
worker and torch must agree to --check-tol (relative) over the first
--check-steps losses; otherwise the script fails (exit 1) before any
accuracy is read, since a gap would say nothing. With --check-only it runs
just that pair for --check-steps steps (tests/learning.bats does, on the
CPU).

Usage: bf16_vs_torch.py --worker build/bin/vitjob-worker --order build/bin/data_order
         --workdir DIR [--device cpu|cuda] [--preset fmnist_small] [--steps 1406]
         [--seeds 1,2,3] [--runs vitjob-fp32,vitjob-bf16,torch-fp32,torch-bf16]
         [--check-steps 20] [--check-tol 1e-4] [--check-only] [--json OUT]
"""

import argparse
import copy
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from tests.ref import safetensors_io, torch_vit

# model.preset's shapes (api/config_keys.c's presets)
PRESETS = {"fmnist_tiny": dict(image=28, patch=7, chans=1, dim=64, depth=4, heads=4, mlp_ratio=4.0,
                               classes=10),
           "fmnist_small": dict(image=28, patch=4, chans=1, dim=128, depth=6, heads=4, mlp_ratio=4.0,
                                classes=10)}
# the recipe, passed to the worker key by key (no default of its own is used)
OPTIMIZER = {"name": "adamw", "lr": 3e-3, "weightDecay": 0.05, "betas": [0.9, 0.999], "eps": 1e-8,
             "schedule": "cosine", "minLr": 0.0, "gradClip": 1.0}
RUNS = ("vitjob-fp32", "vitjob-bf16", "torch-fp32", "torch-bf16", "vitjob-fp32-cpu", "vitjob-bf16-cpu")


def initial_weights(shape, seed, path):
    torch.manual_seed(seed)
    model = torch_vit.build_vit(**shape)
    safetensors_io.save(path, {n: p.detach().contiguous() for n, p in model.state_dict().items()})
    return model


def data_order(binary, n, seed, batch, steps, path):
    subprocess.run([binary, str(n), str(seed), str(batch), str(steps), path], check=True, timeout=60)
    with open(path, "rb") as f:
        raw = f.read()
    idx = torch.frombuffer(bytearray(raw), dtype=torch.int32).to(torch.int64)
    if idx.numel() != steps * batch:
        raise SystemExit("%s: %d indices, expected %d" % (path, idx.numel(), steps * batch))
    return idx.view(steps, batch)


def run_worker(a, device, precision, seed, init, steps, warmup, batch, work):
    """The worker's run: (per-step losses, test accuracy)."""
    os.makedirs(work, exist_ok=True)
    cfg = {"model": {"preset": a.preset, "init": init, "initHead": "keep"},
           "data": {"uri": "file://" + a.data, "augment": False},
           "training": {"steps": steps, "globalBatchSize": batch, "microBatchSize": batch,
                        "precision": precision, "device": device, "seed": seed,
                        "dropPath": 0.0, "labelSmoothing": 0.0, "evalInterval": 0,
                        "logInterval": max(1, steps // 10), "exportPath": "",
                        "optimizer": dict(OPTIMIZER, warmupSteps=warmup)}}
    if a.threads:
        cfg["training"]["threads"] = a.threads
    with open(os.path.join(work, "cfg.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    metrics = os.path.join(work, "metrics.jsonl")
    with open(os.path.join(work, "log"), "w") as log:
        r = subprocess.run([a.worker, "train", "--config", os.path.join(work, "cfg.json"),
                            "--metrics", metrics], stdout=subprocess.PIPE, stderr=log, text=True,
                           timeout=a.run_timeout)
    if r.returncode != 0:
        raise SystemExit("the worker exited %d; its log: %s" % (r.returncode, os.path.join(work, "log")))
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    losses = [0.0] * steps
    with open(metrics) as f:
        for line in f:
            m = json.loads(line)
            if "loss" in m:
                losses[m["step"] - 1] = m["loss"]
    return losses, summary["test_accuracy"]


def run_torch(a, bf16, model, order, steps, warmup, train, test):
    """PyTorch's run of the same recipe: (per-step losses, test accuracy)."""
    dev = torch.device(a.device)
    model = model.to(dev)
    model.train()
    x_all, y_all = train[0].to(dev), train[1].to(dev)
    o = OPTIMIZER
    kw = {"fused": True} if dev.type == "cuda" else {"foreach": False}
    opt = torch.optim.AdamW(torch_vit.param_groups_weight_decay(model, o["weightDecay"]), lr=o["lr"],
                            betas=tuple(o["betas"]), eps=o["eps"], **kw)
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=bf16)
    losses = []
    for step in range(steps):
        lr = torch_vit.lr_at(step, o["lr"], warmup, steps, o["schedule"], o["minLr"])
        for g in opt.param_groups:
            g["lr"] = lr
        idx = order[step].to(dev)
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        losses.append(float(loss))
        loss.backward()
        torch_vit.clip_grad_norm(model.parameters(), o["gradClip"])
        opt.step()
    model.eval()
    correct = 0
    with torch.no_grad(), amp:
        for i in range(0, test[0].shape[0], 500):
            xb, yb = test[0][i:i + 500].to(dev), test[1][i:i + 500].to(dev)
            correct += int((model(xb).argmax(1) == yb).sum())
    return losses, correct / test[0].shape[0]


def max_rel(p, q, k):
    return max(abs(p[i] - q[i]) / max(abs(q[i]), 1e-12) for i in range(min(k, len(p), len(q))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", required=True)
    ap.add_argument("--order", required=True, help="build/bin/data_order")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--data", default=torch_vit.FMNIST_DIR)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--preset", default="fmnist_small", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int, default=1406, help="1406: 3 epochs of 60,000 in batches of 128")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--threads", type=int, default=0, help="the worker's training.threads (0: its own)")
    ap.add_argument("--check-steps", type=int, default=20)
    ap.add_argument("--check-tol", type=float, default=1e-4)
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--run-timeout", type=float, default=900, help="seconds for one worker run")
    ap.add_argument("--json")
    a = ap.parse_args()
    runs = ("vitjob-fp32", "torch-fp32") if a.check_only else tuple(a.runs.split(","))
    steps = a.check_steps if a.check_only else a.steps
    for r in runs:
        if r not in RUNS:
            ap.error("--runs: %s is not one of %s" % (r, ", ".join(RUNS)))
    check = "vitjob-fp32" in runs and "torch-fp32" in runs
    torch.set_num_threads(max(1, a.threads or os.cpu_count() or 1))
    # fp32 means fp32: no TF32 in torch's matmuls or in cuDNN's patch convolution
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    train = torch_vit.load_fashion_mnist("train", a.data)
    test = torch_vit.load_fashion_mnist("test", a.data)
    shape = PRESETS[a.preset]
    warmup = min(a.warmup, steps)
    results, failed = [], False
    print("preset=%s device=%s steps=%d batch=%d torch=%s" % (a.preset, a.device, steps, a.batch,
                                                             torch.__version__))
    for seed in [int(s) for s in a.seeds.split(",")]:
        work = os.path.join(a.workdir, "seed-%d" % seed)
        os.makedirs(work, exist_ok=True)
        init = os.path.join(work, "init.safetensors")
        model = initial_weights(shape, seed, init)
        order = data_order(a.order, train[0].shape[0], seed, a.batch, steps, os.path.join(work, "order.bin"))
        got = {}
        for r in runs:
            t0 = time.time()
            if r.startswith("vitjob"):
                got[r] = run_worker(a, "cpu" if r.endswith("-cpu") else a.device,
                                    "bf16-mixed" if "bf16" in r else "fp32", seed, init, steps,
                                    warmup, a.batch, os.path.join(work, r))
            else:
                got[r] = run_torch(a, r.endswith("bf16"), copy.deepcopy(model), order, steps, warmup,
                                   train, test)
            tail = got[r][0][-max(1, steps // 10):]
            row = {"seed": seed, "run": r, "test_accuracy": got[r][1],
                   "tail_loss": sum(tail) / len(tail), "seconds": round(time.time() - t0, 1)}
            results.append(row)
            print("seed=%d run=%-12s test_accuracy=%.4f tail_loss=%.4f seconds=%.1f"
                  % (seed, r, row["test_accuracy"], row["tail_loss"], row["seconds"]), flush=True)
            if check and r in ("vitjob-fp32", "torch-fp32") and "vitjob-fp32" in got and "torch-fp32" in got:
                d = max_rel(got["vitjob-fp32"][0], got["torch-fp32"][0], a.check_steps)
                ok = d <= a.check_tol
                failed |= not ok
                print("seed=%d check: the fp32 losses of the first %d steps agree within %.2g (tol %.2g): %s"
                      % (seed, a.check_steps, d, a.check_tol, "ok" if ok else "FAIL"), flush=True)
                if not ok:
                    break
        names = list(got)
        for i, p in enumerate(names):
            for q in names[i + 1:]:
                print("seed=%d %s vs %s: largest relative loss difference over the first %d steps %.3g, "
                      "accuracy %+.4f" % (seed, p, q, a.check_steps, max_rel(got[p][0], got[q][0], a.check_steps),
                                          got[p][1] - got[q][1]))
        if failed:
            break
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"preset": a.preset, "device": a.device, "steps": steps, "batch": a.batch,
                       "torch": torch.__version__, "results": results}, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
