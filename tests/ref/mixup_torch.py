#!/usr/bin/python3
"""tests/ref/mixup_torch.py - worker/data/mixup.c against a PyTorch reference
of timm's Mixup (timm/data/mixup.py, mode 'batch'), through the test driver
tests/ref/mixup_check.c.

The reference below is written from timm's documented behaviour (no timm on
this machine): for a FIXED draw (mixing or not, mixup or cutmix, lambda, the
box's random integers) it computes what timm's Mixup.__call__ returns:

  mixup   x = x * lam + x.flip(0) * (1 - lam)  (torch's in-place mul_/add_ on
          a float32 batch, as timm does)
  cutmix  timm's rand_bbox(img_shape, lam) with the centre (cy, cx) given:
          cut = int(side * sqrt(1 - lam)); rows clip(cy -+ cut_h // 2, 0, H),
          columns likewise; or rand_bbox_minmax with (cut_h, cut_w, top,
          left) given; x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh];
          lam = 1 - box area / (H * W) (correct_lam, timm's default)
  targets off = smoothing / K, on = 1 - smoothing + off; one-hot of the
          labels and of labels.flip(0) (torch.full + scatter_), mixed
          y1 * lam + y2 * (1 - lam)

Owns two checks (tests/mixup.bats runs each):

  apply  random batches (float32 images, int labels), even sizes 2 to 16, 1
         or 3 channels, square and non-square images, 10 to 1000 classes,
         smoothing 0, 0.1 and 0.3, draws of every kind (none, mixup at many
         lambdas including 0, cutmix boxes at every corner and edge, clipped
         and not, empty, minmax boxes): the box and lambda must be equal (box
         exact, lambda within 1e-12), every image value and target within
         --tol (default 1e-5); rows of the targets sum to 1 within 1e-6.
  beta   mixup_beta's draws against torch.distributions.Beta's (its own
         sampler, torch.manual_seed): 20,000 against 20,000 for symmetric
         alphas 0.1, 0.4, 0.8, 1, 2, 5 and two asymmetric pairs; the
         two-sample Kolmogorov-Smirnov statistic must stay below --ks (0.02;
         the 0.1% critical value for 20,000 against 20,000 is 0.0195) and the
         means within 0.01. Seeds are fixed: the outcome is the same every run.

Prints what it measured; exits 0 when all pass, 1 when not.

Usage: mixup_torch.py CHECK --bin build/bin/mixup_check [--workdir DIR]
"""

import argparse
import math
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch


# ---- the reference ----------------------------------------------------------

def one_hot(labels, num_classes, on_value, off_value):
    """timm's one_hot: a float32 (B, K) of off_value with on_value at each label"""
    x = labels.long().view(-1, 1)
    return torch.full((x.size(0), num_classes), off_value).scatter_(1, x, on_value)


def targets_of(labels, num_classes, lam, smoothing):
    """timm's mixup_target"""
    off = smoothing / num_classes
    on = 1.0 - smoothing + off
    y1 = one_hot(labels, num_classes, on, off)
    y2 = one_hot(labels.flip(0), num_classes, on, off)
    return y1 * lam + y2 * (1.0 - lam)


def box_from_lam(h, w, lam, cy, cx):
    """timm's rand_bbox with the centre given (margin 0)"""
    ratio = np.sqrt(1 - lam)
    cut_h, cut_w = int(h * ratio), int(w * ratio)
    yl = int(np.clip(cy - cut_h // 2, 0, h))
    yh = int(np.clip(cy + cut_h // 2, 0, h))
    xl = int(np.clip(cx - cut_w // 2, 0, w))
    xh = int(np.clip(cx + cut_w // 2, 0, w))
    return yl, yh, xl, xh


def box_minmax(cut_h, cut_w, top, left):
    """timm's rand_bbox_minmax with its four draws given"""
    return top, top + cut_h, left, left + cut_w


def reference(x, labels, num_classes, smoothing, kind, lam, box):
    """timm's Mixup._mix_batch then mixup_target, for a fixed draw"""
    x = x.clone()
    if kind in ("cutmix", "minmax"):
        yl, yh, xl, xh = box
        x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        lam = 1.0 - (yh - yl) * (xh - xl) / float(x.shape[-2] * x.shape[-1])
    elif kind == "mixup":
        x_flipped = x.flip(0).mul_(1.0 - lam)
        x.mul_(lam).add_(x_flipped)
    else:
        lam = 1.0
    return x, targets_of(labels, num_classes, lam, smoothing), lam


# ---- apply -------------------------------------------------------------------

def cases(rng):
    """(B, C, H, W, K, smoothing, kind, lam, cy, cx, cut_h, cut_w, top, left)"""
    out = []
    shapes = [(2, 1, 28, 28, 10), (4, 3, 32, 32, 100), (8, 1, 28, 28, 10), (6, 3, 24, 40, 1000),
              (16, 1, 28, 28, 10), (4, 3, 17, 9, 5)]
    for (b, c, h, w, k) in shapes:
        for s in (0.0, 0.1, 0.3):
            out.append((b, c, h, w, k, s, "none", 1.0, 0, 0, 0, 0, 0, 0))
            for lam in (0.0, 0.5, 0.999, rng.random(), rng.random()):
                out.append((b, c, h, w, k, s, "mixup", lam, 0, 0, 0, 0, 0, 0))
            # cutmix: the corners, the edges, the middle and random centres;
            # a lambda near 1 gives an empty box, 0 the largest
            centres = [(0, 0), (0, w - 1), (h - 1, 0), (h - 1, w - 1), (h // 2, w // 2)]
            centres += [(rng.randrange(h), rng.randrange(w)) for _ in range(3)]
            for (cy, cx) in centres:
                lam = rng.choice([0.0, 0.3, rng.random(), 0.9999])
                out.append((b, c, h, w, k, s, "cutmix", lam, cy, cx, 0, 0, 0, 0))
            for _ in range(3):
                lo, hi = int(h * 0.2), int(h * 0.8)
                wlo, whi = int(w * 0.2), int(w * 0.8)
                ch = rng.randrange(lo, hi) if hi > lo else lo
                cw = rng.randrange(wlo, whi) if whi > wlo else wlo
                top, left = rng.randrange(h - ch), rng.randrange(w - cw)
                out.append((b, c, h, w, k, s, "minmax", 0.5, 0, 0, ch, cw, top, left))
    return out


def check_apply(args, work):
    rng = random.Random(2719)
    torch.manual_seed(2719)
    all_cases = cases(rng)
    lines, refs = [], []
    for i, (b, c, h, w, k, s, kind, lam, cy, cx, ch, cw, top, left) in enumerate(all_cases):
        x = torch.randn(b, c, h, w, dtype=torch.float32)
        labels = torch.randint(0, k, (b,), dtype=torch.int32)
        box = box_from_lam(h, w, lam, cy, cx) if kind == "cutmix" else \
            box_minmax(ch, cw, top, left) if kind == "minmax" else (0, 0, 0, 0)
        xr, tr, lamr = reference(x, labels, k, s, kind, lam, box)
        p = os.path.join(work, "c%d" % i)
        x.numpy().tofile(p + ".img")
        labels.numpy().astype("<i4").tofile(p + ".lbl")
        lines.append("%s.img %s.lbl %d %d %d %d %d %.17g %s %.17g %d %d %d %d %d %d %s.oimg %s.otgt\n"
                     % (p, p, b, c, h, w, k, s, kind, lam, cy, cx, ch, cw, top, left, p, p))
        refs.append((xr, tr, lamr, box if kind in ("cutmix", "minmax") else (0, 0, 0, 0)))
    manifest = os.path.join(work, "apply.txt")
    with open(manifest, "w") as f:
        f.writelines(lines)
    res = subprocess.run([args.bin, "apply", manifest], capture_output=True, text=True)
    if res.returncode != 0:
        print(res.stderr)
        return 1
    got = res.stdout.split("\n")
    failed, worst_img, worst_tgt, worst_lam, worst_sum = 0, 0.0, 0.0, 0.0, 0.0
    kinds = {}
    for i, (case, (xr, tr, lamr, box)) in enumerate(zip(all_cases, refs)):
        b, c, h, w, k, s, kind = case[:7]
        kinds[kind] = kinds.get(kind, 0) + 1
        f = got[i].split()
        lam_c, box_c = float(f[0]), tuple(int(v) for v in f[1:5])
        p = os.path.join(work, "c%d" % i)
        xc = torch.from_numpy(np.fromfile(p + ".oimg", dtype=np.float32).reshape(b, c, h, w))
        tc = torch.from_numpy(np.fromfile(p + ".otgt", dtype=np.float32).reshape(b, k))
        di = (xc - xr).abs().max().item()
        dt = (tc - tr).abs().max().item()
        dl = abs(lam_c - lamr)
        ds = (tc.double().sum(1) - 1).abs().max().item()
        worst_img, worst_tgt = max(worst_img, di), max(worst_tgt, dt)
        worst_lam, worst_sum = max(worst_lam, dl), max(worst_sum, ds)
        ok = di <= args.tol and dt <= args.tol and dl <= 1e-12 and ds <= 1e-6 and \
            (kind not in ("cutmix", "minmax") or box_c == box)
        if not ok:
            failed += 1
            if failed <= 10:
                print("FAIL case %d %s: image diff %.3g, target diff %.3g, lambda %.17g vs %.17g, "
                      "box %s vs %s, row sum off by %.3g"
                      % (i, case, di, dt, lam_c, lamr, box_c, box, ds))
    print("apply: kinds %s" % ", ".join("%s %d" % kv for kv in sorted(kinds.items())))
    print("apply: worst image difference %.3g, worst target difference %.3g, worst lambda "
          "difference %.3g, worst row-sum error %.3g (bound %g)"
          % (worst_img, worst_tgt, worst_lam, worst_sum, args.tol))
    print("apply: %d cases, %d failed" % (len(all_cases), failed))
    return 1 if failed else 0


# ---- beta --------------------------------------------------------------------

def ks2(a, b):
    """two-sample Kolmogorov-Smirnov statistic"""
    a, b = np.sort(a), np.sort(b)
    allv = np.concatenate([a, b])
    ca = np.searchsorted(a, allv, side="right") / len(a)
    cb = np.searchsorted(b, allv, side="right") / len(b)
    return float(np.max(np.abs(ca - cb)))


def check_beta(args, work):
    n = 20000
    pairs = [(0.1, 0.1), (0.4, 0.4), (0.8, 0.8), (1.0, 1.0), (2.0, 2.0), (5.0, 5.0),
             (0.5, 2.0), (3.0, 0.7)]
    failed = 0
    for i, (a, b) in enumerate(pairs):
        res = subprocess.run([args.bin, "beta", repr(a), repr(b), str(100 + i), str(n)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            print(res.stderr)
            return 1
        c = np.array([float(v) for v in res.stdout.split()])
        torch.manual_seed(100 + i)
        t = torch.distributions.Beta(torch.tensor(a, dtype=torch.float64),
                                     torch.tensor(b, dtype=torch.float64)).sample((n,)).numpy()
        ks = ks2(c, t)
        mean = a / (a + b)
        ok = len(c) == n and ks < args.ks and abs(c.mean() - mean) < 0.01 and \
            c.min() >= 0 and c.max() <= 1 and np.isfinite(c).all()
        failed += not ok
        print("beta(%g, %g): KS %.4f (bound %g), mean C %.4f torch %.4f exact %.4f, var C %.4f "
              "torch %.4f exact %.4f%s"
              % (a, b, ks, args.ks, c.mean(), t.mean(), mean, c.var(), t.var(),
                 a * b / ((a + b) ** 2 * (a + b + 1)), "" if ok else "  FAIL"))
    print("beta: %d pairs, %d failed" % (len(pairs), failed))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["apply", "beta"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workdir")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--ks", type=float, default=0.02)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as work:
        return {"apply": check_apply, "beta": check_beta}[args.check](args, work)


if __name__ == "__main__":
    sys.exit(main())
