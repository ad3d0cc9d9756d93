#!/usr/bin/env python3
"""bench/attention_vs_torch.py - the attention op alone: vitjob's kernels
against PyTorch's scaled_dot_product_attention backends (cuDNN's SDPA
among them, issue 42's peer) on the same GPU, in one run.

Owns: running `gpu_bench --attention` (bench/gpu_bench.c: path=flash, the
trainer's two-kernel backward; flash-sync; flash-fused, the candidate
tables' fused backward; unfused) and, in a subprocess of its own, torch's
SDPA on each backend it has (cuDNN, FlashAttention-2, memory-efficient,
math) at the same shapes: bf16, B x NH heads of hd = D/NH, T = the model's
tokens and 577; q, k, v strided views of one (B, T, 3, NH, hd) buffer, as
timm's Attention makes them (each a leaf, so that the backward's time is
SDPA's and not autograd's copy into a stacked gradient). Each forward and
each backward is timed between two synchronizes, after --warmup, as
gpu_bench times its own; the FLOPs are FlashAttention's count for every
path (forward 4*B*T*T*D, backward 2.5 times that). Prints one markdown
table (ms, TFLOP/s, each path's backward against cuDNN's), --json also
writes the rows. Not a test: nothing here asserts a time.
Must not: change the GPU's settings, or compare what it did not run (a
backend torch refuses for these shapes is reported as such).

usage: attention_vs_torch.py [--gpu-bench build/bin/gpu_bench] [--model vit_b16]
                             [--batch 128] [--steps 10] [--warmup 3] [--json FILE]
                             [--timeout 120]
       attention_vs_torch.py --torch-peer B T D NH STEPS WARMUP   (the subprocess)
Exit: 0; 2 gpu_bench missing or failed and no torch row either.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

from gpu_vs_torch import DIMS  # the presets' shapes, bench/gpu_vs_torch.py's table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


def flops(B, T, D):
    fwd = 4.0 * B * T * T * D
    return fwd, 2.5 * fwd


def torch_peer(B, T, D, NH, steps, warmup):
    """One JSON line per backend: its forward and backward ms, or why not."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    hd = D // NH
    g = torch.Generator(device="cuda").manual_seed(42)
    buf = torch.randn(B, T, 3, NH, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    qkv = buf.permute(2, 0, 3, 1, 4)  # (3, B, NH, T, hd), timm's
    q, k, v = (qkv[i].detach().requires_grad_() for i in range(3))
    dout = torch.randn(B, NH, T, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    fw, bw = flops(B, T, D)
    for name in BACKENDS:
        row = {"path": "torch-" + name.lower().replace("_attention", ""), "backend": name,
               "B": B, "T": T, "D": D, "NH": NH, "torch": torch.__version__}
        try:
            with sdpa_kernel(getattr(SDPBackend, name)):
                tf = tb = 0.0
                for i in range(warmup + steps):
                    q.grad = k.grad = v.grad = None
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    out = F.scaled_dot_product_attention(q, k, v)
                    torch.cuda.synchronize()
                    t1 = time.perf_counter()
                    out.backward(dout)
                    torch.cuda.synchronize()
                    t2 = time.perf_counter()
                    if i >= warmup:
                        tf += t1 - t0
                        tb += t2 - t1
            row.update(fwd_ms=1e3 * tf / steps, bwd_ms=1e3 * tb / steps,
                       fwd_tflops=fw * steps / tf / 1e12, bwd_tflops=bw * steps / tb / 1e12)
        except Exception as e:  # noqa: BLE001 - a backend refused: report why, go on
            msg = str(e).strip()
            row["why"] = msg.splitlines()[0][:200] if msg else type(e).__name__
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    return 0


LINE = re.compile(r"^attention (.*)$")


def ours(a):
    """gpu_bench --attention's lines as dicts, or ([], why)."""
    cmd = [a.gpu_bench, "--attention", "--model", a.model, "--batch", str(a.batch),
           "--steps", str(a.steps), "--warmup", str(a.warmup)]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=a.timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [], "%s: %s" % (a.gpu_bench, e)
    rows = []
    for l in p.stdout.splitlines():
        m = LINE.match(l)
        if not m:
            continue
        print(l, flush=True)  # gpu_bench's own line first: kept if the table below fails
        try:
            kv = dict(x.split("=", 1) for x in m.group(1).split())
            rows.append({"path": kv["path"], "backend": kv["backend"], "B": int(kv["B"]),
                         "T": int(kv["T"]), "D": int(kv["D"]), "NH": int(kv["NH"]),
                         "fwd_ms": float(kv["fwd_ms"]), "bwd_ms": float(kv["bwd_ms"]),
                         "fwd_tflops": float(kv["fwd_tflops"]),
                         "bwd_tflops": float(kv["bwd_tflops"])})
        except (KeyError, ValueError) as e:
            sys.stderr.write("attention_vs_torch: cannot read %r: %s\n" % (l, e))
    why = "" if p.returncode == 0 else (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    return rows, why


def theirs(a, B, T, D, NH):
    """The torch rows for one T from the subprocess, or ([], why)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-peer", str(B), str(T), str(D),
           str(NH), str(a.steps), str(a.warmup)]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return [], "timed out after %d s" % a.timeout
    rows = []
    for l in p.stdout.splitlines():
        if l.startswith("{"):
            print("torch " + l, flush=True)  # kept if the table below fails
            rows.append(json.loads(l))
    why = "" if p.returncode == 0 else (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    return rows, why


def render(rows, notes):
    out = ["| T | path | fwd ms | bwd ms | fwd TFLOP/s | bwd TFLOP/s | bwd vs torch-cudnn |",
           "|---:|---|---:|---:|---:|---:|---:|"]
    for T in sorted({r["T"] for r in rows}):
        at = [r for r in rows if r["T"] == T]
        cudnn = next((r for r in at if r["path"] == "torch-cudnn" and "bwd_ms" in r), None)
        for r in at:
            if "bwd_ms" not in r:
                out.append("| %d | %s | - | - | - | - | refused: %s |" % (
                    T, r["path"], r.get("why", "?").replace("|", "/")))
                continue
            vs = "%.2fx" % (cudnn["bwd_ms"] / r["bwd_ms"]) if cudnn else "-"
            out.append("| %d | %s | %.3f | %.3f | %.1f | %.1f | %s |" % (
                T, r["path"], r["fwd_ms"], r["bwd_ms"], r["fwd_tflops"], r["bwd_tflops"], vs))
    out += ["", "(bwd vs torch-cudnn: cuDNN's backward time over this path's; above 1 is faster)"]
    out += ["note: %s" % n for n in notes]
    return "\n".join(out)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-peer":
        B, T, D, NH, steps, warmup = (int(x) for x in sys.argv[2:8])
        return torch_peer(B, T, D, NH, steps, warmup)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu-bench", default=os.path.join("build", "bin", "gpu_bench"))
    ap.add_argument("--model", default="vit_b16", choices=sorted(DIMS))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=120, help="seconds for each subprocess")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    image, patch, _, D, _, NH, _, _ = DIMS[a.model]
    tokens = (image // patch) ** 2 + 1
    notes = []
    rows, why = ours(a)
    if why:
        notes.append("gpu_bench --attention: %s" % why)
    for T in (tokens, 577):
        got, why = theirs(a, a.batch, T, D, NH)
        rows += got
        if why:
            notes.append("torch at T=%d: %s" % (T, why))
    print(render(rows, notes))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "batch": a.batch, "rows": rows, "notes": notes}, f,
                      indent=1)
    return 0 if rows else 2


if __name__ == "__main__":
    sys.exit(main())
