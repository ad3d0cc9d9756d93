#!/usr/bin/python3
"""tests/ref/check_against_torch.py - the C ViT against PyTorch, tensor by tensor.

Owns the test "the same ViT weights and batch give the same logits, loss and
every parameter gradient as PyTorch, and ten AdamW steps give the same losses
and final weights, and the same exponential moving average of the weights
(training.ema) as timm keeps it". For each model shape (case):

  1. build tests/ref/torch_vit.py's ViT, randomize every parameter
     (weights, biases, LayerNorm affine, cls_token, pos_embed: all non-trivial
     so every gradient is exercised), draw a random batch;
  2. write WORKDIR/<case>/W.safetensors (params by timm name, F32),
     IN.safetensors ("images" F32 (B,C,S,S), "labels" I64 (B,)) and cfg.json
     (the worker's bare-spec config; microBatchSize = B/2 so the C side
     accumulates gradients; the case's training.ema);
  3. run  BIN --config cfg.json --init W.safetensors --inputs IN.safetensors
              --out OUT.safetensors --steps STEPS
     which writes "logits" (B,K), "loss" (1,), "grads.<name>" at the initial
     weights, "losses" (STEPS,), "params.<name>" after STEPS AdamW steps and
     "ema.<name>", the EMA of the weights after them;
  4. do the same in PyTorch and compare: rel = max|c - t| / max(max|t|, 1e-12)
     per tensor (per element for loss and losses) must be below --tol, and
     below --ema-tol for the EMA.

The EMA reference is timm's, written here from its documented behaviour
(timm/utils/model_ema.py), not imported (no timm on this machine):
  - warmup off, ModelEmaV2: a copy of the model before the first step, then
    after every optimizer step  ema = decay * ema + (1 - decay) * weights;
  - warmup on, ModelEmaV3(decay, use_warmup=True) with its defaults
    (warmup_gamma 1, warmup_power 2/3, min_decay 0, update_after_step 0),
    updated after optimizer step n (1-based; timm's train.py passes
    step=num_updates, counted before the call) with
    decay_n = 0 if n - 1 <= 0 else min(decay, 1 - (1 + (n - 1))^(-2/3)),
    as ema.lerp_(weights, 1 - decay_n).

Every parameter must have a grad and a final value in OUT; a missing tensor,
a wrong shape or a non-finite value is a failure.

The regularisation cases (issue 27; names with a suffix, e.g. C-droppath)
train the same shapes with timm's recipe pieces, each against its timm
semantics in torch_vit.py, with and without the C side's activation
checkpointing (-ckpt). Their logits, loss and gradients must agree within
1e-5 (or --tol if smaller); the trajectory of STEPS AdamW steps (losses,
final params) within --tol, as the plain cases (measured: up to 7e-6 on the
final weights, where AdamW's normalisation amplifies rounding):
  * soft: the soft-target loss (timm's SoftTargetCrossEntropy) on arbitrary
    target rows, passed to the C side as IN's "targets" F32 (B,K);
  * smooth: training.labelSmoothing, the C side building its targets as the
    trainer does (timm's LabelSmoothingCrossEntropy in torch);
  * droppath: training.dropPath with a FIXED keep mask drawn here, IN's
    "droppath_keep" F32 (depth,2,B), which the C side turns into scales with
    the trainer's rule (worker/train/droppath.h: linear rates, 1/(1-p)) and
    torch applies through timm's drop_path (linspace rates, div by
    keep_prob); every dropping block has a dropped and a kept sample in each
    branch. The mask stays the same over the AdamW steps.

One exception to the final-params comparison: the key third of each
attn.qkv.bias. Adding a constant vector to every key shifts each row of
scores by a constant, which softmax ignores, so its true gradient is exactly
zero and both sides hold only rounding noise there (checked: grads.*.qkv.bias
is compared as a whole, so that noise must be ~0 relative to the q and v
parts). AdamW divides that noise by its own RMS (plus eps) and moves each
element by up to ~lr per step in a direction set by rounding, so its final
value is not reproducible between any two implementations (measured: ~1e-3
relative differences where everything else agrees to ~1e-6). The q and v
thirds are compared at --tol; the k third only has to stay within the
distance AdamW can move a parameter in STEPS steps.

Prints a line per tensor (or only failures with --quiet), a per-case count
and a summary with the total count; exits 0 if all pass, 1 if not.

Usage: check_against_torch.py --bin build/bin/vit_refcheck --workdir DIR
                              [--cases A,B,C] [--steps 10] [--tol 1e-4]
                              [--ref-dtype float32|float64] [--quiet]
"""

import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

from tests.ref import safetensors_io, torch_vit

# Model shapes to try. B must be even (the C side runs two micro-batches).
# ema: training.ema, without warmup (ModelEmaV2) and with (ModelEmaV3); the
# decays are small enough that ten steps move the EMA well away from both the
# initial and the final weights, so a wrong schedule cannot pass.
CASES = {
    # Fashion-MNIST-like: 16 patches, 4 heads of 8.
    "A": dict(image=28, patch=7, chans=1, dim=32, depth=2, heads=4, mlp_ratio=4.0,
              classes=10, batch=8, seed=1, ema=dict(decay=0.8, warmup=False)),
    # RGB, 2 heads of 12, fractional mlp ratio (hidden 60), odd class count.
    "B": dict(image=16, patch=4, chans=3, dim=24, depth=2, heads=2, mlp_ratio=2.5,
              classes=7, batch=6, seed=2, ema=dict(decay=0.9, warmup=True)),
    # More tokens (50) than dim per head, three blocks, one head.
    "C": dict(image=28, patch=4, chans=1, dim=16, depth=3, heads=1, mlp_ratio=2.0,
              classes=10, batch=4, seed=3, ema=dict(decay=0.7, warmup=True)),
}

# The regularisation cases: a base shape and what they add (see the top).
REG_TOL = 1e-5
for _name, _base, _extra in (
        ("A-soft", "A", dict(soft=True)),
        ("A-soft-ckpt", "A", dict(soft=True, ckpt=True)),
        ("B-smooth", "B", dict(smoothing=0.1)),
        ("B-smooth-ckpt", "B", dict(smoothing=0.1, ckpt=True)),
        ("C-droppath", "C", dict(drop_path=0.5)),
        ("C-droppath-ckpt", "C", dict(drop_path=0.5, ckpt=True)),
        ("A-droppath-smooth-ckpt", "A", dict(drop_path=0.3, smoothing=0.2, ckpt=True)),
        ("B-droppath-soft", "B", dict(drop_path=0.2, soft=True))):
    CASES[_name] = dict(CASES[_base], tol=REG_TOL, **_extra)

OPTIMIZER = {"lr": 1e-3, "weightDecay": 0.05, "betas": [0.9, 0.999], "eps": 1e-8,
             "warmupSteps": 3, "schedule": "cosine", "minLr": 1e-5, "gradClip": 1.0}


def build_model(c):
    return torch_vit.build_vit(c["image"], c["patch"], c["chans"], c["dim"], c["depth"],
                               c["heads"], c["mlp_ratio"], c["classes"],
                               c.get("drop_path", 0.0))


def soft_targets(c, gen):
    """Arbitrary target rows (B,K): uneven, some exactly zero, summing to 1."""
    t = torch.rand((c["batch"], c["classes"]), generator=gen) ** 3
    t[:, 1] = 0.0
    return t / t.sum(dim=1, keepdim=True)


def drop_path_keep(c, gen):
    """A fixed keep mask (depth, 2, B) of 0/1: Bernoulli(1 - rate) per
    element, then in every block whose rate is not 0 one sample dropped and
    one kept in each branch. Blocks of rate 0 keep everything (timm's
    Identity)."""
    L, B = c["depth"], c["batch"]
    rates = [x.item() for x in torch.linspace(0, c["drop_path"], L)]
    keep = torch.ones((L, 2, B))
    for l in range(L):
        if rates[l] == 0.0:
            continue
        keep[l] = (torch.rand((2, B), generator=gen) >= rates[l]).float()
        for br in range(2):
            keep[l, br, (l + br) % B] = 0.0
            keep[l, br, (l + br + 1) % B] = 1.0
    return keep


@torch.no_grad()
def randomize(model, gen):
    """Gives every parameter random, non-trivial values (a fresh-init model has
    zero biases and unit LayerNorm weights, whose gradients would then test
    less). Scales keep activations O(1) and the softmaxes unsaturated."""
    def randn(shape):
        return torch.randn(shape, generator=gen)

    def uniform(lo, hi):
        return lo + (hi - lo) * torch.rand((), generator=gen).item()

    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        is_norm = ".norm" in "." + name  # norm1, norm2, final norm
        if name == "cls_token":
            p.copy_(0.5 * randn(p.shape))
        elif name == "pos_embed":
            p.copy_(0.1 * randn(p.shape))
        elif is_norm and leaf == "weight":
            p.copy_(1.0 + 0.2 * randn(p.shape))
        elif is_norm and leaf == "bias":
            p.copy_(0.1 * randn(p.shape))
        elif leaf == "bias":
            p.copy_(uniform(0.02, 0.1) * randn(p.shape))
        else:  # Linear / Conv2d weights: truncated normal, per-tensor std
            std = uniform(0.05, 0.2)
            p.copy_(torch.fmod(randn(p.shape), 2.0) * std)


def write_config(path, c, steps):
    cfg = {
        "model": {"imageSize": c["image"], "patchSize": c["patch"], "channels": c["chans"],
                  "dim": c["dim"], "depth": c["depth"], "heads": c["heads"],
                  "mlpRatio": c["mlp_ratio"], "numClasses": c["classes"]},
        "data": {"augment": False},
        "training": {"steps": steps, "globalBatchSize": c["batch"],
                     "microBatchSize": c["batch"] // 2, "threads": 1,
                     "activationCheckpointing": bool(c.get("ckpt", False)),
                     "dropPath": c.get("drop_path", 0.0),
                     "labelSmoothing": c.get("smoothing", 0.0),
                     "optimizer": dict(OPTIMIZER), "ema": dict(c["ema"])},
    }
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def ema_decay(ema, n):
    """The decay of EMA update n (1-based): ModelEmaV2's constant decay, or
    ModelEmaV3's get_decay(step=n) with use_warmup and its defaults."""
    if not ema["warmup"]:
        return ema["decay"]
    gamma, power, min_decay, update_after_step = 1.0, 2.0 / 3.0, 0.0, 0
    s = max(0, n - update_after_step - 1)
    if s <= 0:
        return 0.0
    d = 1.0 - (1.0 + s / gamma) ** -power
    return max(min(d, ema["decay"]), min_decay)


@torch.no_grad()
def ema_step(ema, avg, model, n):
    """One EMA update after optimizer step n: ModelEmaV2's formula, or
    ModelEmaV3's lerp."""
    d = ema_decay(ema, n)
    for name, p in model.named_parameters():
        if ema["warmup"]:
            avg[name].lerp_(p, 1.0 - d)
        else:
            avg[name].copy_(d * avg[name] + (1.0 - d) * p)


def torch_reference(model, images, labels, steps, dtype, c, targets=None, keep=None):
    """PyTorch's answers: logits, loss, grads at the initial weights; losses
    over `steps` AdamW steps and the params after them, and the EMA of the
    weights (the case's training.ema). `model` is consumed. The loss is
    timm's for the case: soft targets, label smoothing, or plain
    cross-entropy; keep fixes drop path's masks."""
    ema = c["ema"]
    model = model.to(dtype)
    model.train()
    model.set_drop_path_masks(keep)
    x = images.to(dtype)

    def criterion(logits):
        if targets is not None:
            return torch_vit.soft_target_cross_entropy(logits, targets.to(dtype))
        if c.get("smoothing", 0.0) > 0:
            return torch_vit.label_smoothing_cross_entropy(logits, labels, c["smoothing"])
        return F.cross_entropy(logits, labels)

    logits = model(x)
    loss = criterion(logits)
    model.zero_grad(set_to_none=True)
    loss.backward()
    ref = {"logits": logits.detach().clone(), "loss": loss.detach().reshape(1).clone()}
    for name, p in model.named_parameters():
        ref["grads." + name] = p.grad.detach().clone()

    o = OPTIMIZER
    opt = torch.optim.AdamW(torch_vit.param_groups_weight_decay(model, o["weightDecay"]),
                            lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                            foreach=False)
    losses = []
    # the EMA model: a copy of the weights before the first step (timm copies
    # the model when it creates its ModelEma)
    avg = {name: p.detach().clone() for name, p in model.named_parameters()}
    for step in range(steps):
        lr = torch_vit.lr_at(step, o["lr"], o["warmupSteps"], steps, o["schedule"], o["minLr"])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = criterion(model(x))
        losses.append(loss.item())
        loss.backward()
        torch_vit.clip_grad_norm(model.parameters(), o["gradClip"])
        opt.step()
        ema_step(ema, avg, model, step + 1)
    ref["losses"] = torch.tensor(losses, dtype=dtype)
    for name, p in model.named_parameters():
        ref["params." + name] = p.detach().clone()
    for name in avg:
        ref["ema." + name] = avg[name]
    return ref


def rel_err(c, t, per_element):
    c = c.to(torch.float64)
    t = t.to(torch.float64)
    if per_element:
        return ((c - t).abs() / t.abs().clamp_min(1e-12)).max().item()
    return (c - t).abs().max().item() / max(t.abs().max().item(), 1e-12)


def is_qkv_bias_param(name):
    """Final qkv biases and their EMA: the key third is rounding noise moved
    by AdamW (see the top of the file)."""
    return name.startswith(("params.", "ema.")) and name.endswith(".attn.qkv.bias")


def check_qkv_bias(c, t, init, tol, max_move):
    """Final qkv bias: q and v thirds at tol; the k third (zero true gradient,
    see the top of the file) only within AdamW's reach of its initial value.
    Returns (rel err of q and v, status)."""
    d = t.shape[0] // 3
    qv = torch.cat((torch.arange(0, d), torch.arange(2 * d, 3 * d)))
    err = rel_err(c[qv], t[qv], per_element=False)
    if err >= tol:
        return err, "FAIL"
    drift = (c[d:2 * d].double() - init[d:2 * d].double()).abs().max().item()
    if drift > max_move:
        return err, "FAIL (k third moved %.3e > %.3e)" % (drift, max_move)
    return err, "ok (q,v; k third moved %.1e)" % drift


def compare(ref, out, init, tol, ema_tol, max_move, quiet, grad_tol=None):
    """Compares OUT against the reference (the EMA at ema_tol; logits, loss
    and grads.* at grad_tol when given); returns (compared, failures, the
    worst relative difference of the EMA)."""
    failures = 0
    compared = 0
    worst_ema = 0.0
    for name, t in ref.items():
        tol_here = ema_tol if name.startswith("ema.") else tol
        c = out.get(name)
        shape = "x".join(str(d) for d in t.shape)
        if c is None:
            status, err = "FAIL (missing in OUT)", float("nan")
        elif tuple(c.shape) != tuple(t.shape):
            status, err = "FAIL (shape %s)" % list(c.shape), float("nan")
        elif c.dtype != torch.float32:
            status, err = "FAIL (dtype %s, want F32)" % c.dtype, float("nan")
        elif not torch.isfinite(c).all():
            status, err = "FAIL (non-finite)", float("nan")
        elif is_qkv_bias_param(name):
            err, status = check_qkv_bias(c, t, init[name.split(".", 1)[1]], tol_here, max_move)
        else:
            err = rel_err(c, t, per_element=name in ("loss", "losses"))
            at_init = name in ("logits", "loss") or name.startswith("grads.")
            bound = grad_tol if grad_tol is not None and at_init else tol_here
            if name.startswith("ema."):
                # the EMA averages the weights' trajectory: it can be no
                # closer to the reference than the weights it averages
                # (held at tol; how close they come depends on the BLAS
                # kernels the CPU picks: 3e-5 on an AVX2 machine for one
                # tensor), so its own error is what it adds beyond theirs
                w = "params." + name[4:]
                if w in ref and w in out and tuple(out[w].shape) == tuple(ref[w].shape):
                    bound = tol_here + rel_err(out[w], ref[w], per_element=False)
            status = "ok" if err < bound else "FAIL"
        if name.startswith("ema.") and err == err:
            worst_ema = max(worst_ema, err)
        compared += 1
        failed = not status.startswith("ok")
        failures += failed
        if failed or not quiet:
            print("  %-36s %-12s rel %.3e  %s" % (name, shape, err, status))
    extra = sorted(set(out) - set(ref))
    if extra:
        print("  note: OUT has tensors not checked: %s" % ", ".join(extra))
    return compared, failures, worst_ema


def run_case(key, c, args):
    print("case %s: %s" % (key, ", ".join("%s=%s" % kv for kv in c.items())))
    assert c["batch"] % 2 == 0, "batch must be even"
    wd = os.path.join(args.workdir, key)
    os.makedirs(wd, exist_ok=True)
    w_path, in_path, cfg_path, out_path = (os.path.join(wd, n) for n in
                                           ("W.safetensors", "IN.safetensors", "cfg.json",
                                            "OUT.safetensors"))

    torch.manual_seed(c["seed"])
    gen = torch.Generator().manual_seed(c["seed"])
    model = build_model(c)
    randomize(model, gen)
    images = torch.randn((c["batch"], c["chans"], c["image"], c["image"]), generator=gen)
    labels = torch.randint(0, c["classes"], (c["batch"],), generator=gen, dtype=torch.int64)
    inputs = {"images": images, "labels": labels}
    targets = soft_targets(c, gen) if c.get("soft") else None
    keep = drop_path_keep(c, gen) if c.get("drop_path", 0.0) > 0 else None
    if targets is not None:
        inputs["targets"] = targets
    if keep is not None:
        inputs["droppath_keep"] = keep

    safetensors_io.save(w_path, {n: p.detach().float().contiguous()
                                 for n, p in model.named_parameters()})
    safetensors_io.save(in_path, inputs)
    write_config(cfg_path, c, args.steps)
    if os.path.exists(out_path):
        os.remove(out_path)

    cmd = [args.bin, "--config", cfg_path, "--init", w_path, "--inputs", in_path,
           "--out", out_path, "--steps", str(args.steps)]
    print("  $ " + " ".join(cmd))
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=args.timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        print("  FAIL: could not run %s: %s" % (args.bin, e))
        return 0, 1
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout.decode("utf-8", "replace"))
        print("  FAIL: %s exited with %d" % (args.bin, proc.returncode))
        return 0, 1
    try:
        out = safetensors_io.load(out_path)
    except (OSError, ValueError) as e:
        print("  FAIL: cannot read %s: %s" % (out_path, e))
        return 0, 1

    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    ref = torch_reference(model, images, labels, args.steps, getattr(torch, args.ref_dtype), c,
                          targets, keep)
    # AdamW moves an element by at most ~lr * (1-b1)/sqrt(1-b2) ~ 3.2 lr per
    # step (plus decay, none for biases); a generous bound for the k third.
    o = OPTIMIZER
    max_move = 4.0 * sum(torch_vit.lr_at(s, o["lr"], o["warmupSteps"], args.steps,
                                         o["schedule"], o["minLr"]) for s in range(args.steps))
    grad_tol = min(args.tol, c["tol"]) if "tol" in c else None
    compared, failures, worst_ema = compare(ref, out, init, args.tol, args.ema_tol, max_move,
                                            args.quiet, grad_tol)
    # the EMA must have moved: not the initial weights, not the final ones
    for name in init:
        e, p, w0 = ref["ema." + name], ref["params." + name], init[name].to(ref["ema." + name])
        if name.endswith(".attn.qkv.bias") or p.numel() == 0:
            continue
        if torch.equal(e, p) or torch.equal(e, w0):
            print("  FAIL: the reference EMA of %s equals the %s weights: the case tests "
                  "nothing" % (name, "final" if torch.equal(e, p) else "initial"))
            failures += 1
    print("case %s: %d tensors compared, %d failed (tol %g%s); EMA (%s) worst rel %.3e (tol %g)"
          % (key, compared, failures, args.tol,
             "" if grad_tol is None else ", logits/loss/grads %g" % grad_tol,
             "warmup" if c["ema"]["warmup"] else "no warmup", worst_ema, args.ema_tol))
    return compared, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="the C program (build/bin/vit_refcheck)")
    ap.add_argument("--workdir", required=True, help="where inputs and outputs are written")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, of %s" % list(CASES))
    ap.add_argument("--steps", type=int, default=10, help="AdamW steps to compare")
    ap.add_argument("--tol", type=float, default=1e-4, help="max relative error per tensor")
    ap.add_argument("--ema-tol", type=float, default=1e-5,
                    help="max relative error per tensor of the EMA of the weights")
    ap.add_argument("--ref-dtype", choices=("float32", "float64"), default="float32",
                    help="precision of the PyTorch reference (the C side is always F32)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per BIN run")
    ap.add_argument("--quiet", action="store_true", help="print only failures and summaries")
    args = ap.parse_args()

    torch.set_num_threads(1)
    keys = [k.strip() for k in args.cases.split(",") if k.strip()]
    unknown = [k for k in keys if k not in CASES]
    if unknown or not keys:
        ap.error("unknown case(s) %s; have %s" % (unknown, list(CASES)))

    total, failed = 0, 0
    for key in keys:
        n, f = run_case(key, CASES[key], args)
        total += n
        failed += f
    ok = failed == 0 and total > 0
    print("%s: %d tensors compared over %d case(s), %d failed (tol %g, reference %s)"
          % ("PASS" if ok else "FAIL", total, len(keys), failed, args.tol, args.ref_dtype))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
