#!/usr/bin/env python3
"""bench/gpu_vs_torch.py - `make bench-gpu`: the GPU engine against PyTorch + timm.

Owns: running, on this machine's GPU and in one go, for each model (default
vit_b16 at batch 128 and vit_l16 at batch 64, 224x224, 1000 classes):
  (a) this engine, build/bin/gpu_bench (bench/gpu_bench.c), bf16-mixed: the
      trainer's whole step (zero grads, forward, backward, grad clip + AdamW),
      then a shorter --profile run for its per-op time table;
  (b) PyTorch + timm eager: timm.create_model('vit_base_patch16_224' /
      'vit_large_patch16_224', num_classes=1000), bf16 autocast over fp32
      weights, torch.optim.AdamW(fused=True) with timm's weight-decay groups,
      clip_grad_norm_ (the engine's recipe), the same batch, synthetic data
      already on the GPU; then torch.profiler over a few more steps for its
      top CUDA kernels;
  (c) the same model under torch.compile (default mode); the first step,
      which compiles, is timed on its own and kept out of the throughput.
Each run is its own subprocess, so that memory peaks are clean: the engine's
is everything allocated through its backend (ops_cuda_peak_bytes), PyTorch's
torch.cuda.max_memory_allocated(); neither counts the CUDA context.
Prints a markdown table (img/s, ms/step, achieved TFLOP/s, MFU, peak memory,
the engine's throughput as a multiple of each peer's), the engine's per-op
table and PyTorch's top kernels; --out also saves it. Not a test: nothing
here asserts a time.

Model FLOPs per image (the same count for every implementation) = 3 x the
forward matmuls and attention products: patch embed 2*N*(C*P*P)*D, per block
2*T*(3D*D + D*D + 2*D*H) + 2*2*T*T*D, head 2*D*K, T = N + 1. MFU = achieved
FLOP/s over the GPU's dense bf16 peak: 989.4 TFLOP/s for H100/H200 SXM (the
table below; --peak-tflops overrides).

The whole run keeps to --budget-s (default 470 s, for a 10-minute device
call that also builds): the cheap runs go first (all engine runs, then eager,
then compile, which spends most of its time compiling), each subprocess is
given only the time left, and runs that no longer fit are reported as
skipped.

usage: gpu_vs_torch.py [--build build] [--models vit_b16,vit_l16] [--batch N]
                       [--steps 20] [--warmup 5] [--profile-steps 3]
                       [--peak-tflops X] [--no-compile] [--no-torch]
                       [--budget-s 470] [--out FILE]
Exit: 0; 2 no GPU (one line saying why) or gpu_bench not built.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# preset: (image, patch, chans, dim, depth, heads, mlp_ratio, classes), as api/config_keys.c
DIMS = {
    "vit_ti16": (224, 16, 3, 192, 12, 3, 4.0, 1000),
    "vit_s16": (224, 16, 3, 384, 12, 6, 4.0, 1000),
    "vit_b16": (224, 16, 3, 768, 12, 12, 4.0, 1000),
    "vit_l16": (224, 16, 3, 1024, 24, 16, 4.0, 1000),
    "vit_h14": (224, 14, 3, 1280, 32, 16, 4.0, 1000),
}
TIMM = {
    "vit_ti16": "vit_tiny_patch16_224",
    "vit_s16": "vit_small_patch16_224",
    "vit_b16": "vit_base_patch16_224",
    "vit_l16": "vit_large_patch16_224",
    "vit_h14": "vit_huge_patch14_224",
}
DEFAULT_BATCH = {"vit_ti16": 256, "vit_s16": 256, "vit_b16": 128, "vit_l16": 64, "vit_h14": 32}
H100_SXM_BF16 = 989.4  # dense bf16 tensor-core TFLOP/s, H100 and H200 SXM (and GH200)


def peak_for(gpu):
    """(TFLOP/s, where the number comes from) for a GPU name, or (None, why)."""
    g = (gpu or "").upper()
    if "H100" in g or "H200" in g:
        if "PCIE" in g:
            return 756.0, "H100 PCIe dense bf16"
        if "NVL" in g:
            return 835.0, "H100/H200 NVL dense bf16"
        return H100_SXM_BF16, "H100/H200 SXM dense bf16"
    if "A100" in g:
        return 312.0, "A100 dense bf16"
    return None, "no known bf16 peak for %r: give --peak-tflops" % (gpu or "this GPU")


def flops_per_image(model):
    image, patch, chans, dim, depth, heads, mlp, classes = DIMS[model]
    n = (image // patch) ** 2
    t = n + 1
    h = round(dim * mlp)
    block = 2.0 * t * (3 * dim * dim + dim * dim + 2 * dim * h) + 2.0 * 2.0 * t * t * dim
    return 3.0 * (2.0 * n * (chans * patch * patch) * dim + depth * block + 2.0 * dim * classes)


# ---------------------------------------------------------------------------
# The subprocesses this script runs as (--probe, --peer): each prints one
# JSON line on stdout.

def probe():
    info = {"torch": None, "timm": None, "cuda": False, "device": None, "why": ""}
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "no torch"
        info["why"] = "torch is not importable (%s)" % e
        print(json.dumps(info))
        return 0
    info["torch"] = torch.__version__
    try:
        import timm
        info["timm"] = timm.__version__
    except Exception as e:  # noqa: BLE001
        info["timm_why"] = "timm is not importable (%s)" % e
    if torch.cuda.is_available():
        info["cuda"] = True
        info["device"] = torch.cuda.get_device_name(0)
        info["capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
        info["cuda_version"] = torch.version.cuda
    else:
        info["why"] = "torch %s: torch.cuda.is_available() is False" % torch.__version__
    print(json.dumps(info))
    return 0


def torch_peer(a):
    import warnings
    import torch
    import torch.nn.functional as F
    import timm

    warnings.simplefilter("ignore", FutureWarning)
    on_gpu = a.peer_device == "cuda"  # cpu: a smoke test of this code, nothing more
    if on_gpu and not torch.cuda.is_available():
        raise SystemExit("torch.cuda.is_available() is False")
    image, patch, chans, dim, depth, heads, mlp, classes = DIMS[a.model]
    dev = torch.device(a.peer_device)
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    torch.manual_seed(1234)
    torch.backends.cudnn.benchmark = True  # the patch-embed conv: torch's best
    model = timm.create_model(TIMM[a.model], pretrained=False, num_classes=classes).to(dev)
    model.train()
    fused_attn = bool(getattr(model.blocks[0].attn, "fused_attn", False))
    # timm's weight-decay groups, as the engine's (model.h: decay on >= 2-D
    # tensors except pos_embed and cls_token)
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 or name in skip else decay).append(p)
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}]
    try:  # fused=True arrived in torch 2.0 (and wants CUDA)
        if not on_gpu:
            raise TypeError("fused AdamW needs CUDA")
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, fused=True)
        adamw = "fused"
    except TypeError:
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
        adamw = "default (not fused)"
    run = torch.compile(model) if a.compile else model
    x = torch.randn(a.batch, chans, image, image, device=dev)
    y = torch.randint(0, classes, (a.batch,), device=dev)
    params = [p for p in model.parameters()]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(run(x), y)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
        opt.step()
        return loss

    t = time.perf_counter()
    loss = step()
    sync()
    first_s = time.perf_counter() - t  # torch.compile compiles here
    loss_first = float(loss)
    for _ in range(max(0, a.warmup - 1)):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    elapsed = time.perf_counter() - t0
    loss_last = float(loss)
    peak = torch.cuda.max_memory_allocated() if on_gpu else 0
    ips = a.steps * a.batch / elapsed
    fl = flops_per_image(a.model)
    out = {
        "impl": "pytorch compile" if a.compile else "pytorch eager",
        "model": a.model, "timm_model": TIMM[a.model], "torch": torch.__version__,
        "timm": timm.__version__,
        "device": torch.cuda.get_device_name(0) if on_gpu else a.peer_device,
        "batch": a.batch, "steps": a.steps, "warmup": a.warmup, "fused_attn": fused_attn,
        "adamw": adamw,
        "images_per_sec": ips, "ms_per_step": 1e3 * elapsed / a.steps,
        "tflops": ips * fl / 1e12, "flops_per_image": fl, "peak_device_bytes": peak,
        "first_step_s": first_s, "loss_first": loss_first, "loss_last": loss_last,
    }
    if a.kernels > 0 and a.profile_steps > 0:
        out.update(torch_kernels(torch, step, sync, on_gpu, a.profile_steps, a.kernels))
    print(json.dumps(out))
    return 0


def torch_kernels(torch, step, sync, on_gpu, steps, top):
    """torch.profiler over `steps` more steps: the top CUDA kernels by GPU time."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        sync()
    ka = prof.key_averages()

    def self_dev_us(e):  # renamed from self_cuda_time_total in torch 2.4
        v = getattr(e, "self_device_time_total", None)
        return v if v is not None else getattr(e, "self_cuda_time_total", 0)

    kernels = [e for e in ka if str(getattr(e, "device_type", "")).endswith("CUDA")]
    if not kernels:  # an old torch without per-kernel events: the ops with GPU time
        kernels = [e for e in ka if self_dev_us(e) > 0]
    kernels.sort(key=self_dev_us, reverse=True)
    total_us = sum(self_dev_us(e) for e in kernels)
    rows = [{"name": e.key[:200], "calls": e.count, "us": self_dev_us(e)} for e in kernels[:top]]
    table = ""
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            try:
                table = ka.table(sort_by=key, row_limit=top, max_name_column_width=70)
            except TypeError:
                table = ka.table(sort_by=key, row_limit=top)
            break
        except Exception:  # noqa: BLE001 - that torch calls the column otherwise
            continue
    return {"profile_steps": steps, "kernel_us_total": total_us, "kernels": rows,
            "kernel_table": table}


# ---------------------------------------------------------------------------
# The driver.

class Budget:
    def __init__(self, seconds):
        self.t0 = time.monotonic()
        self.end = self.t0 + seconds

    def left(self):
        return self.end - time.monotonic()

    def elapsed(self):
        return time.monotonic() - self.t0


def run_json(cmd, timeout):
    """Runs cmd in its own process group; returns (json or None, rc, message)."""
    try:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    except OSError as e:
        return None, 127, "%s: %s" % (cmd[0], e)
    try:
        out, err = p.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # its own group: compile workers too
        except ProcessLookupError:
            pass
        try:
            p.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a grandchild left the group, holding the pipes
            pass
        return None, 124, "timed out after %.0f s (budget)" % timeout
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if p.returncode == 0 and lines:
        try:
            return json.loads(lines[-1]), 0, ""
        except ValueError as e:
            return None, 1, "bad JSON from %s: %s" % (cmd[0], e)
    tail = [l.strip() for l in err.strip().splitlines() if l.strip()]
    msg = tail[-1] if tail else "exit status %d, no message" % p.returncode
    return None, p.returncode or 1, msg


def log(budget, msg):
    sys.stderr.write("[%5.0fs] %s\n" % (budget.elapsed(), msg))
    sys.stderr.flush()


def cell(msg, width=90):
    msg = msg.replace("|", "/").replace("\n", " ")
    return msg if len(msg) <= width else msg[:width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default="vit_b16,vit_l16",
                    help="comma-separated presets: %s" % ",".join(DIMS))
    ap.add_argument("--batch", default="",
                    help="images per step: N for every model, or MODEL=N,... (default: %s)"
                    % ", ".join("%s=%d" % kv for kv in DEFAULT_BATCH.items()))
    ap.add_argument("--steps", type=int, default=20, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (>= 1)")
    ap.add_argument("--profile-steps", dest="profile_steps", type=int, default=3,
                    help="steps of the engine's --profile run and of torch.profiler; 0 = none")
    ap.add_argument("--kernels", type=int, default=15, help="top torch CUDA kernels shown")
    ap.add_argument("--grad-clip", dest="grad_clip", type=float, default=1.0,
                    help="global grad-norm clip in every implementation; 0 = off")
    ap.add_argument("--peak-tflops", dest="peak_tflops", type=float, default=0.0,
                    help="the GPU's dense bf16 peak (default: from its name; "
                    "989.4 on H100/H200 SXM)")
    ap.add_argument("--no-torch", dest="no_torch", action="store_true", help="the engine only")
    ap.add_argument("--no-compile", dest="no_compile", action="store_true",
                    help="skip the torch.compile runs (the slowest: compiling takes minutes)")
    ap.add_argument("--python", default=sys.executable, help="the python with torch and timm")
    ap.add_argument("--budget-s", dest="budget_s", type=float, default=470.0,
                    help="wall-clock budget of the whole run, in seconds")
    ap.add_argument("--out", help="also write the markdown report here")
    # the subprocess modes
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--peer-device", dest="peer_device", default="cuda", choices=("cuda", "cpu"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.probe:
        return probe()
    if args.peer:
        args.batch = int(args.batch)
        return torch_peer(args)

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in DIMS:
            ap.error("--models: unknown %r (one of %s)" % (m, ", ".join(DIMS)))
    if args.steps < 1 or args.warmup < 1 or args.profile_steps < 0:
        ap.error("--steps and --warmup must be >= 1, --profile-steps >= 0")
    batch = dict((m, DEFAULT_BATCH[m]) for m in models)
    try:
        for item in [b for b in args.batch.split(",") if b.strip()]:
            if "=" in item:
                m, n = item.split("=", 1)
                if m.strip() not in batch:
                    ap.error("--batch: %r is not in --models" % m.strip())
                batch[m.strip()] = int(n)
            else:
                batch = dict((m, int(item)) for m in models)
    except ValueError:
        ap.error("--batch: N or MODEL=N,... with integers N, got %r" % args.batch)
    if min(batch.values()) < 1:
        ap.error("--batch must be >= 1")
    bench = os.path.abspath(os.path.join(args.build, "bin", "gpu_bench"))
    if not os.access(bench, os.X_OK):
        sys.stderr.write("gpu_vs_torch: %s is not built: run `make build/bin/gpu_bench` "
                         "(`make bench-gpu` does)\n" % bench)
        return 2
    budget = Budget(args.budget_s)

    # What torch sees (in a subprocess: this process keeps no CUDA context).
    info, rc, msg = run_json([args.python, os.path.abspath(__file__), "--probe"],
                             min(180.0, budget.left()))
    info = info or {"torch": None, "timm": None, "cuda": False, "why": msg}
    gpu = info.get("device")
    if not gpu and shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        gpu = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
    if args.peak_tflops > 0:
        peak, peak_src = args.peak_tflops, "--peak-tflops"
    else:
        peak, peak_src = peak_for(gpu)
    torch_why = ""
    if args.no_torch:
        torch_why = "--no-torch"
    elif not info.get("torch"):
        torch_why = info.get("why") or "torch is not importable"
    elif not info.get("timm"):
        torch_why = info.get("timm_why") or "timm is not importable"
    elif not info.get("cuda"):
        torch_why = info.get("why") or "torch sees no GPU"
    if torch_why and not args.no_torch:
        log(budget, "PyTorch peers skipped: %s; running the engine only" % torch_why)

    results = {}  # (model, impl) -> dict, or {"error": msg}

    def vitjob(m, profile):
        cmd = [bench, "--model", m, "--batch", str(batch[m]), "--device", "cuda",
               "--precision", "bf16-mixed", "--grad-clip", repr(args.grad_clip), "--json"]
        if profile:
            cmd += ["--steps", str(args.profile_steps), "--warmup", "1", "--profile"]
        else:
            cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
        if peak:
            cmd += ["--peak-tflops", repr(peak)]
        return run_json(cmd, budget.left())

    def torch_run(m, compiled):
        cmd = [args.python, os.path.abspath(__file__), "--peer", "--model", m,
               "--batch", str(batch[m]), "--steps", str(args.steps), "--warmup",
               str(args.warmup), "--grad-clip", repr(args.grad_clip),
               "--kernels", str(0 if compiled else args.kernels),
               "--profile-steps", str(args.profile_steps)]
        if compiled:
            cmd.append("--compile")
        return run_json(cmd, budget.left())

    phases = [("vitjob", lambda m: vitjob(m, False))]
    if args.profile_steps > 0:
        phases.append(("vitjob profile", lambda m: vitjob(m, True)))
    if not torch_why:
        phases.append(("pytorch eager", lambda m: torch_run(m, False)))
        if not args.no_compile:
            phases.append(("pytorch compile", lambda m: torch_run(m, True)))
    for impl, fn in phases:
        for m in models:
            if budget.left() < 15:
                results[(m, impl)] = {"error": "skipped: the --budget-s of %.0f s ran out"
                                      % args.budget_s}
                log(budget, "%s %s: skipped (budget)" % (m, impl))
                continue
            log(budget, "%s %s (batch %d) ..." % (m, impl, batch[m]))
            r, rc, msg = fn(m)
            if impl == "vitjob" and rc == 2:
                # no GPU (or a bad flag): nothing else can be measured either
                sys.stderr.write("gpu_vs_torch: cannot run the engine: %s%s\n" % (
                    msg, "" if info.get("cuda") else "; torch: %s" % (info.get("why") or "-")))
                return 2
            results[(m, impl)] = r if r is not None else {"error": msg}
            if r is not None:
                log(budget, "%s %s: %.1f img/s, %.2f ms/step" % (
                    m, impl, r["images_per_sec"], r["ms_per_step"]))
            else:
                log(budget, "%s %s: FAILED: %s" % (m, impl, msg))

    report = render(args, models, batch, results, info, gpu, peak, peak_src, torch_why, budget)
    sys.stdout.write(report)
    sys.stdout.flush()
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    return 0


def render(args, models, batch, results, info, gpu, peak, peak_src, torch_why, budget):
    L = []
    L.append("## vitjob GPU engine vs PyTorch + timm (`make bench-gpu`)")
    L.append("")
    L.append("GPU: %s; MFU against %s TFLOP/s (%s). torch %s, timm %s%s." % (
        gpu or "unknown", "%.1f" % peak if peak else "n/a", peak_src,
        info.get("torch") or "-", info.get("timm") or "-",
        ", CUDA %s" % info["cuda_version"] if info.get("cuda_version") else ""))
    L.append("Batch per step: %s; %d timed steps after %d warm-up; bf16-mixed everywhere "
             "(fp32 master weights, bf16 matmuls), AdamW + grad-norm clip %g, synthetic data."
             % (", ".join("%s %d" % (m, batch[m]) for m in models), args.steps, args.warmup,
                args.grad_clip))
    if torch_why:
        L.append("PyTorch peers not run: %s." % torch_why)
    L.append("")
    hdr = ("model", "implementation", "batch", "img/s", "ms/step", "TFLOP/s", "MFU",
           "peak mem GiB", "vitjob vs this")
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "|".join("---" if i < 2 else "---:" for i in range(len(hdr))) + "|")
    names = [("vitjob", "vitjob (C/CUDA)"), ("pytorch eager", "pytorch eager (timm)"),
             ("pytorch compile", "pytorch torch.compile (timm)")]
    notes = []
    for m in models:
        ours = results.get((m, "vitjob"), {})
        fl = ours.get("flops_per_image") or flops_per_image(m)
        for key, label in names:
            r = results.get((m, key))
            if r is None:
                continue
            if "error" in r:
                err = r["error"]
                if not err.startswith("skipped"):
                    err = "FAILED: " + err
                L.append("| %s | %s | %d | %s | | | | | |" % (m, label, batch[m], cell(err)))
                continue
            ips = r["images_per_sec"]
            tf = ips * fl / 1e12
            ratio = ("%.2fx" % (ours["images_per_sec"] / ips)) if "images_per_sec" in ours else "-"
            L.append("| %s | %s | %d | %.1f | %.2f | %.1f | %s | %.2f | %s |" % (
                m, label, batch[m], ips, r["ms_per_step"], tf,
                "%.1f%%" % (100 * tf / peak) if peak else "n/a",
                r["peak_device_bytes"] / 2 ** 30, ratio))
            if key == "pytorch compile":
                notes.append("%s torch.compile: first step (compiling) %.1f s, not timed"
                             % (m, r["first_step_s"]))
            if key == "pytorch eager" and "fused_attn" in r:
                notes.append("%s timm: attention %s, AdamW %s" % (
                    m, "F.scaled_dot_product_attention (fused)" if r["fused_attn"]
                    else "unfused (softmax(QK^T)V in eager ops)", r.get("adamw", "?")))
            if key == "vitjob":
                notes.append("%s vitjob: loss %.4f -> %.4f, %.1f M params, setup %.1f s "
                             "(not timed)" % (m, r["loss_first"], r["loss_last"],
                                              r["params"] / 1e6, r.get("setup_s", 0.0)))
    L.append("")
    L.append("- FLOPs/image = 3 x forward (matmuls + the two attention products), the same "
             "count for every row: %s." % ", ".join(
                 "%s %.2f G" % (m, (results.get((m, "vitjob"), {}).get("flops_per_image")
                                    or flops_per_image(m)) / 1e9) for m in models))
    L.append("- vitjob vs this = vitjob's img/s / this row's (above 1: vitjob is faster).")
    L.append("- Peak memory: vitjob, every allocation through its backend (parameters, grads, "
             "AdamW state, activations, cuBLASLt workspace, scratch); PyTorch, "
             "torch.cuda.max_memory_allocated(). Neither counts the CUDA context.")
    L.append("- vitjob's step uploads the batch from (pageable) host memory, as its trainer "
             "does (the `upload` row below); the PyTorch peers keep the batch on the GPU. "
             "vitjob also waits for the loss and the grad norm each step (two host syncs); "
             "the PyTorch loop never syncs.")
    for n in notes:
        L.append("- " + n)
    L.append("")

    for m in models:
        p = results.get((m, "vitjob profile"))
        if p and "profile" in p:
            steps = p["steps"]
            step_ms = p["ms_per_step"]
            L.append("### %s: vitjob time per op (--profile, %d steps, batch %d)" % (
                m, steps, p["batch"]))
            L.append("")
            L.append("Each op runs between two synchronizes, so the profiled step (%.2f ms) is "
                     "slower than the real one (%s). Matmul shapes N x IC x OC, attention "
                     "B x T x D x NH." % (step_ms, "%.2f ms" % results[(m, "vitjob")]["ms_per_step"]
                                        if "ms_per_step" in results.get((m, "vitjob"), {})
                                        else "not measured"))
            L.append("")
            L.append("| op | shape | calls | total ms | ms/step | % of step | TFLOP/s |")
            L.append("|---|---|---:|---:|---:|---:|---:|")
            for row in p["profile"]:
                ms = row["ms"] / steps
                L.append("| %s | %s | %d | %.2f | %.3f | %.1f%% | %s |" % (
                    row["op"], row["shape"], row["calls"], row["ms"], ms, 100 * ms / step_ms,
                    "%.1f" % (row["flops"] / (row["ms"] * 1e-3) / 1e12)
                    if row["flops"] > 0 and row["ms"] > 0 else ""))
            outside = step_ms - p["profile_ops_ms"] / steps
            L.append("| (outside ops: host work, syncs) | | | %.2f | %.3f | %.1f%% | |" % (
                outside * steps, outside, 100 * outside / step_ms))
            L.append("")
        elif p and "error" in p:
            L.append("### %s: vitjob per-op profile: %s" % (m, cell(p["error"], 200)))
            L.append("")
        e = results.get((m, "pytorch eager"))
        if e and e.get("kernels"):
            ps = e["profile_steps"]
            L.append("### %s: PyTorch eager, top %d CUDA kernels (torch.profiler, %d steps)" % (
                m, len(e["kernels"]), ps))
            L.append("")
            L.append("GPU kernel time %.2f ms/step (the step takes %.2f ms)." % (
                e["kernel_us_total"] / 1e3 / ps, e["ms_per_step"]))
            L.append("")
            L.append("| kernel | calls/step | ms/step | % of kernel time |")
            L.append("|---|---:|---:|---:|")
            for k in e["kernels"]:
                L.append("| `%s` | %g | %.3f | %.1f%% |" % (
                    cell(k["name"], 100).replace("`", "'"), k["calls"] / ps,
                    k["us"] / 1e3 / ps,
                    100 * k["us"] / e["kernel_us_total"] if e["kernel_us_total"] else 0))
            if e.get("kernel_table"):
                L.append("")
                L.append("key_averages().table, sorted by self CUDA time:")
                L.append("")
                L.append("```")
                L.append(e["kernel_table"].rstrip())
                L.append("```")
            L.append("")
    L.append("Whole run: %.0f s." % budget.elapsed())
    L.append("")
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
