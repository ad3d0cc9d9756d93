#!/usr/bin/python3
"""tests/ref/finetune_torch.py - what the engine does when it finetunes,
against PyTorch references written from timm's documented behaviour (timm is
not installed here), through the test driver tests/ref/ft_check.c.

Owns four checks (tests/finetune.bats runs each):

  resample  pos_resample_bicubic_aa against timm's resample_abs_pos_embed:
            the grid (class token left out) reshaped to (1, D, h, w) and
            torch.nn.functional.interpolate(size, mode="bicubic",
            antialias=True, align_corners=False), flattened back; random
            unit-normal grids 7x7 -> 8x8, 14x14 -> 16x16, 16x16 -> 14x14,
            24x24 -> 12x12, 8x8 -> 12x12, 2x2 -> 9x9, 7x7 -> 7x7. Every value
            within --tol (1e-5).
  head      model_new_head_init against timm's head init (init_weights_vit_timm
            for the head Linear of weight_init '': trunc_normal_(std=.02) with
            timm's absolute bounds [-2, 2], bias zeros): 20,000 C weights
            against 20,000 of torch.nn.init.trunc_normal_ (fixed seeds):
            two-sample Kolmogorov-Smirnov statistic below 0.0195 (the 0.1%
            critical value for 20,000 against 20,000), the same against the
            N(0, 0.02^2) CDF below 0.0138; std within 2% of 0.02; biases 0;
            the same seed gives the same bits, another seed other values.
  groups    the optimizer's lr scale and weight decay of every parameter
            (optim_tensor_hparams) against timm's param_groups_layer_decay on
            the torch reference ViT (tests/ref/torch_vit.py): its layer map
            from VisionTransformer.group_matcher(coarse=False) as timm's
            group_with_matcher orders it (stem r'^cls_token|reg_token|
            pos_embed|patch_embed' ordinal 0, r'^blocks\\.(\\d+)' ordinal
            (1, i), r'^norm' (1, 99999) = MATCH_PREV_GROUP: merged into the
            last block, anything else last), scale layer_decay **
            (layer_max - layer), no weight decay for 1-D parameters and
            no_weight_decay() names; and with layerDecay 0 timm's
            param_groups_weight_decay (scale 1). Depths 1, 2, 12; decays
            0.75, 0.5, 0 (off), 1. Scales within 1e-12 relative, decays exact.
  steps     3 AdamW steps of the engine with layerDecay 0.65, weightDecay 0.05
            and gradClip 0.05 (clipping) and 0 against torch.optim.AdamW
            over timm's groups (lr = lr x lr_scale, as timm's scheduler sets
            it) after clip_grad_norm_, from the same weights and gradients:
            every parameter within 1e-6.

Prints what it measured; exits 0 when all pass, 1 when not.

Usage: finetune_torch.py CHECK --bin build/bin/ft_check [--tol 1e-5]
"""

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

from tests.ref import safetensors_io, torch_vit


def run_bin(args, stdin=None):
    r = subprocess.run(args, input=stdin, capture_output=True, check=False)
    if r.returncode != 0:
        raise SystemExit("%s failed: %s" % (" ".join(args), r.stderr.decode(errors="replace")))
    return r.stdout


# ---- resample ---------------------------------------------------------------

def timm_resample(grid, new):
    """timm's resample_abs_pos_embed on the grid part: (h*w, D) -> (nh*nw, D)"""
    (h, w), d = grid.shape[:2], grid.shape[2]
    x = grid.reshape(1, h, w, d).permute(0, 3, 1, 2)
    y = F.interpolate(x, size=new, mode="bicubic", antialias=True, align_corners=False)
    return y.permute(0, 2, 3, 1).reshape(-1, d)


def check_resample(args):
    cases = [((7, 7), (8, 8)), ((14, 14), (16, 16)), ((16, 16), (14, 14)), ((24, 24), (12, 12)),
             ((8, 8), (12, 12)), ((2, 2), (9, 9)), ((7, 7), (7, 7))]
    gen = torch.Generator().manual_seed(27)
    failed, worst = 0, 0.0
    for (h, w), (nh, nw) in cases:
        d = 32
        grid = torch.randn(h, w, d, generator=gen)
        want = timm_resample(grid, (nh, nw))
        out = run_bin([args.bin, "resample", str(h), str(w), str(d), str(nh), str(nw)],
                      stdin=grid.numpy().astype(np.float32).tobytes())
        got = torch.from_numpy(np.frombuffer(out, dtype=np.float32).copy()).reshape(-1, d)
        diff = (got - want).abs().max().item()
        worst = max(worst, diff)
        ok = diff <= args.tol
        failed += not ok
        print("resample %dx%d -> %dx%d (D %d): max |C - torch| %.3g%s" %
              (h, w, nh, nw, d, diff, "" if ok else "  FAIL"))
    print("resample: %d cases, %d failed (worst %.3g, tolerance %g)" %
          (len(cases), failed, worst, args.tol))
    return failed == 0


# ---- head init --------------------------------------------------------------

def ks_two(a, b):
    """two-sample Kolmogorov-Smirnov statistic"""
    a, b = np.sort(a), np.sort(b)
    allv = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, allv, side="right") / len(a)
    cdf_b = np.searchsorted(b, allv, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def ks_normal(a, std):
    """one-sample KS statistic against N(0, std^2)"""
    a = np.sort(a.astype(np.float64))
    n = len(a)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(a / (std * math.sqrt(2.0))))
    return float(max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(0, n) / n)))


def c_head(args, k, d, seed):
    out = run_bin([args.bin, "head", str(k), str(d), str(seed)])
    v = np.frombuffer(out, dtype=np.float32)
    return v[:k * d], v[k * d:]


def check_head(args):
    k, d = 200, 100
    w, b = c_head(args, k, d, 5)
    w2, _ = c_head(args, k, d, 5)
    w3, _ = c_head(args, k, d, 6)
    torch.manual_seed(0)
    ref = torch.empty(k, d)
    torch.nn.init.trunc_normal_(ref, std=0.02, a=-2.0, b=2.0)  # timm's bounds: absolute
    ref = ref.numpy().reshape(-1)
    ks2, ks1 = ks_two(w, ref), ks_normal(w, 0.02)
    std, mean = float(np.std(w.astype(np.float64))), float(np.mean(w.astype(np.float64)))
    checks = [
        ("KS against torch's trunc_normal_(std=.02) below 0.0195", ks2 < 0.0195),
        ("KS against N(0, 0.02^2) below 0.0138", ks1 < 0.0138),
        ("std within 2% of 0.02", abs(std - 0.02) < 0.0004),
        ("mean within 4 standard errors of 0", abs(mean) < 4 * 0.02 / math.sqrt(k * d)),
        ("biases all zero", bool(np.all(b == 0.0)) and len(b) == k),
        ("the same seed gives the same bits", w.tobytes() == w2.tobytes()),
        ("another seed gives other values", float(np.mean(w != w3)) > 0.99),
    ]
    print("head: C std %.6f mean %.2e (torch std %.6f); KS two-sample %.4f, against the "
          "normal CDF %.4f" % (std, mean, float(np.std(ref)), ks2, ks1))
    failed = 0
    for what, ok in checks:
        failed += not ok
        print("head: %s: %s" % (what, "ok" if ok else "FAIL"))
    print("head: %d checks, %d failed" % (len(checks), failed))
    return failed == 0


# ---- layer-decay groups -------------------------------------------------------

MATCH_PREV_GROUP = 99999.0


def timm_layer_map(names):
    """timm's group_parameters(model, model.group_matcher(coarse=False),
    reverse=True) for VisionTransformer, reimplemented from its rules: each
    name gets an ordinal tuple from the first matching pattern (the group's
    index, then the regex's groups, then the suffix; unmatched: (inf,));
    sorted ordinals become consecutive layer ids, except that an ordinal
    ending in MATCH_PREV_GROUP joins the layer before it."""
    patterns = [(re.compile(r"^cls_token|reg_token|pos_embed|patch_embed"), (0.0,), None),
                (re.compile(r"^blocks\.(\d+)"), (1.0,), None),
                (re.compile(r"^norm"), (1.0,), (MATCH_PREV_GROUP,))]

    def ordinal(name):
        for rx, prefix, suffix in patterns:
            m = rx.match(name)
            if m:
                return prefix + tuple(float(g) for g in m.groups()) + (suffix or ())
        return (math.inf,)

    ids, lid = {}, -1
    for key in sorted({ordinal(n) for n in names}):
        if lid < 0 or key[-1] != MATCH_PREV_GROUP:
            lid += 1
        ids[key] = lid
    return {n: ids[ordinal(n)] for n in names}


def timm_groups(model, weight_decay, layer_decay):
    """{name: (lr_scale, weight_decay)}: timm's param_groups_layer_decay, or
    with layer_decay 0 (off) param_groups_weight_decay (scale 1)"""
    skip = model.no_weight_decay()
    params = list(model.named_parameters())
    if not layer_decay:
        return {n: (1.0, 0.0 if (p.ndim <= 1 or n.endswith(".bias") or n in skip)
                    else weight_decay) for n, p in params}
    layer_map = timm_layer_map([n for n, _ in params])
    num_layers = max(layer_map.values()) + 1
    layer_max = num_layers - 1
    scales = [layer_decay ** (layer_max - i) for i in range(num_layers)]
    out = {}
    for n, p in params:
        wd = 0.0 if (p.ndim <= 1 or n in skip) else weight_decay
        out[n] = (scales[layer_map.get(n, layer_max)], wd)
    return out


def ref_model(depth):
    return torch_vit.build_vit(8, 4, 1, 8, depth, 2, 2.0, 3)


def check_groups(args):
    failed = cases = 0
    for depth in (1, 2, 12):
        model = ref_model(depth)
        for decay in (0.75, 0.5, 0.0, 1.0):
            want = timm_groups(model, 0.05, decay)
            out = run_bin([args.bin, "groups", str(depth), repr(decay), "0.05"]).decode()
            got = {}
            for line in out.splitlines():
                name, scale, wd = line.split()
                got[name] = (float(scale), float(wd))
            cases += 1
            bad = []
            if set(got) != set(want):
                bad.append("names differ: %s" % sorted(set(got) ^ set(want)))
            for n in sorted(set(got) & set(want)):
                (gs, gw), (ws, ww) = got[n], want[n]
                if abs(gs - ws) > 1e-12 * ws or gw != ww:
                    bad.append("%s: scale %.17g wd %g, timm %.17g wd %g" % (n, gs, gw, ws, ww))
            failed += bool(bad)
            scales = sorted({s for s, _ in want.values()})
            print("groups depth %d layerDecay %g: %d parameters, %d lr scales (%.4g .. %.4g), "
                  "%d with weight decay%s" % (depth, decay, len(want), len(scales), scales[0],
                                              scales[-1], sum(w > 0 for _, w in want.values()),
                                              "" if not bad else "  FAIL"))
            for b in bad[:10]:
                print("  " + b)
    print("groups: %d cases, %d failed" % (cases, failed))
    return failed == 0


# ---- AdamW steps over the groups ---------------------------------------------

def check_steps(args):
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for clip in (0.05, 0.0):
            depth, decay, wd, lr, n = 2, 0.65, 0.05, 0.01, 3
            path = os.path.join(tmp, "steps.safetensors")
            run_bin([args.bin, "steps", str(depth), repr(decay), repr(wd), repr(lr), repr(clip),
                     str(n), path])
            t = safetensors_io.load(path)
            model = ref_model(depth)
            groups = timm_groups(model, wd, decay)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.copy_(t["init." + name])
            params = dict(model.named_parameters())
            opt = torch.optim.AdamW(
                [{"params": [p], "lr": lr * groups[name][0], "weight_decay": groups[name][1]}
                 for name, p in params.items()], lr=lr, betas=(0.9, 0.999), eps=1e-8)
            for s in range(n):
                for name, p in params.items():
                    p.grad = t["grad.%d.%s" % (s, name)].clone()
                if clip > 0:
                    torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
                opt.step()
            worst, worst_name = 0.0, ""
            for name, p in params.items():
                d = (p.detach() - t["final." + name]).abs().max().item()
                if d > worst:
                    worst, worst_name = d, name
            moved = min((p.detach() - t["init." + name]).abs().max().item()
                        for name, p in params.items())
            ok = worst <= 1e-6 and moved > 0
            failed += not ok
            print("steps gradClip %g: %d AdamW steps, layerDecay %g: max |C - torch| %.3g (%s); "
                  "every tensor moved: %s%s" % (clip, n, decay, worst, worst_name, moved > 0,
                                                "" if ok else "  FAIL"))
    print("steps: 2 cases, %d failed" % failed)
    return failed == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["resample", "head", "groups", "steps"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    ok = {"resample": check_resample, "head": check_head, "groups": check_groups,
          "steps": check_steps}[args.check](args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
