#!/usr/bin/python3
"""tests/ref/transform_torch.py - worker/data/transform.c against torch and
torchvision, through the test driver tests/ref/xf_check.c.

Owns three checks (tests/transform.bats runs each):

  resample  random uint8 images and boxes; xf_resample (mean 0, std 1: values
            v/255) against torch.nn.functional.interpolate(crop.float()[None],
            size, mode, antialias=True, align_corners=False) / 255: bilinear
            and bicubic, downscales from 1.3x to 6x, upscales, non-square
            boxes and scales, crops away from the origin, 1x1 boxes and 1x1
            outputs, 1-pixel-wide boxes, flips against torch.flip, 1 channel
            against PIL's convert("L"); boxes with a fractional edge (what the
            loader hands after JPEG's DCT scaling), against interpolate with an
            explicit scale_factor (recompute_scale_factor=False: the box's own
            scale), a fractional left or top edge made whole by flipping the
            image first; and timm's evaluation transform: xf_center_crop_box's
            box resampled with bounds = the image against torchvision's
            Resize(floor(size / crop_pct), antialias=True) then
            CenterCrop(size). Every output value must be within --tol
            (default 1e-4) of torch's.
  rrc-rule  xf_random_resized_crop is torchvision's get_params: the real
            torchvision.transforms.RandomResizedCrop.get_params, with torch's
            random numbers replaced (unittest.mock) by the very numbers the C
            side draws (rng.c's xoshiro256** reimplemented here), must give
            the same box, draw for draw, for many shapes, scales and ratios.
  rrc-dist  10,000 C boxes against 10,000 of torchvision's own (its own RNG,
            torch.manual_seed) per image shape: two-sample Kolmogorov-Smirnov
            statistics of the area fraction, log aspect ratio and centre x, y
            must stay below --ks (0.03; the 0.1% critical value for 10,000
            against 10,000 is 0.0276), the fallback rates within 0.015. Seeds
            are fixed: the outcome is the same every run.

Prints what it measured (max differences, KS statistics, means and
quantiles); exits 0 when all pass, 1 when not.

Usage: transform_torch.py CHECK --bin build/bin/xf_check [--workdir DIR]
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
import torchvision.transforms as T
from PIL import Image

M64 = (1 << 64) - 1


# ---- resample ---------------------------------------------------------------

def interp(crop, size, mode, scale_factor=None):
    """torch on an (H, W, C) uint8 crop: (C, size_h, size_w) float, 0..1"""
    x = torch.from_numpy(np.ascontiguousarray(crop)).permute(2, 0, 1).float()[None]
    if scale_factor is None:
        y = F.interpolate(x, size=size, mode=mode, antialias=True, align_corners=False)
    else:
        y = F.interpolate(x, scale_factor=scale_factor, mode=mode, antialias=True,
                          align_corners=False, recompute_scale_factor=False)
        assert y.shape[2] >= size[0] and y.shape[3] >= size[1], (y.shape, size)
        y = y[:, :, :size[0], :size[1]]
    return (y[0] / 255.0).numpy()


def make_cases(rng):
    """(name, image, box (x, y, w, h), bounds, size, mode, channels, flip, expected)"""
    cases = []

    def image(w, h):
        # noise over a smooth ramp, so that both the filter's smoothing and
        # its edges are exercised
        yy, xx = np.mgrid[0:h, 0:w]
        ramp = 127 + 100 * np.sin(xx / 7.0) * np.cos(yy / 5.0)
        img = ramp[..., None] + rng.integers(-60, 61, size=(h, w, 3))
        return np.clip(img, 0, 255).astype(np.uint8)

    def crop_case(name, img, x, y, w, h, size, mode, flip=False, channels=3):
        src = img
        if channels == 1:
            src = np.asarray(Image.fromarray(img).convert("L"))[..., None]
        exp = interp(src[y:y + h, x:x + w], (size, size), mode)
        if flip:
            exp = np.ascontiguousarray(np.flip(exp, axis=2))
        cases.append((name, img, (x, y, w, h), "box", size, mode, channels, flip, exp))

    for mode in ("bilinear", "bicubic"):
        big = image(420, 330)
        # downscales 1.3x to 6x, square, away from the origin
        for f in (1.3, 2.0, 2.5, 3.7, 6.0):
            size = int(rng.integers(20, 50))
            w = int(round(size * f))
            x, y = int(rng.integers(0, 420 - w + 1)), int(rng.integers(0, 330 - w + 1))
            crop_case(f"{mode} down {f}x {w}x{w}@{x},{y} -> {size}", big, x, y, w, w, size, mode)
        # non-square boxes: down in one axis, up in the other, and both down unevenly
        crop_case(f"{mode} 300x20 -> 64 (x down, y up)", big, 17, 41, 300, 20, 64, mode)
        crop_case(f"{mode} 31x257 -> 48 (x up, y down)", big, 389, 0, 31, 257, 48, mode)
        crop_case(f"{mode} 401x133 -> 40", big, 19, 197, 401, 133, 40, mode)
        # upscales
        crop_case(f"{mode} up 40x30 -> 64", big, 100, 200, 40, 30, 64, mode)
        crop_case(f"{mode} up 17x23 -> 50", big, 3, 5, 17, 23, 50, mode)
        crop_case(f"{mode} whole image 420x330 -> 224", big, 0, 0, 420, 330, 224, mode)
        # 1x1-ish: one pixel to many, the whole image to one, one column, one row
        small = image(37, 29)
        crop_case(f"{mode} 1x1 box -> 7", small, 36, 28, 1, 1, 7, mode)
        crop_case(f"{mode} 37x29 -> 1x1", small, 0, 0, 37, 29, 1, mode)
        crop_case(f"{mode} 1x29 column -> 5", small, 11, 0, 1, 29, 5, mode)
        crop_case(f"{mode} 37x1 row -> 9", small, 0, 13, 37, 1, 9, mode)
        crop_case(f"{mode} 2x2 -> 2 (identity)", small, 20, 20, 2, 2, 2, mode)
        # flips
        crop_case(f"{mode} flip down 250x180 -> 56", big, 60, 70, 250, 180, 56, mode, flip=True)
        crop_case(f"{mode} flip up 20x20 -> 33", big, 400, 310, 20, 20, 33, mode, flip=True)
        # one channel: PIL's convert("L") first
        crop_case(f"{mode} L 200x150 -> 40", big, 5, 9, 200, 150, 40, mode, channels=1)
        crop_case(f"{mode} L flip 30x40 -> 50", big, 300, 250, 30, 40, 50, mode, flip=True, channels=1)

        # fractional edges, as after DCT scaling: whole left/top, fractional
        # right/bottom straight; fractional left/top by flipping the image so
        # that the edge becomes a right/bottom one
        for k in range(6):
            size = int(rng.integers(16, 48))
            fw, fh = float(rng.uniform(0.6, 5.0)) * size, float(rng.uniform(0.6, 5.0)) * size
            if abs(fw - round(fw)) < 0.05:
                fw += 0.25
            if abs(fh - round(fh)) < 0.05:
                fh += 0.25
            flipx, flipy = bool(k & 1), bool(k & 2)
            W, H = 420, 330
            # the whole edge of each axis, in the (possibly flipped) frame torch sees
            x0 = int(rng.integers(0, W - math.ceil(fw) + 1))
            y0 = int(rng.integers(0, H - math.ceil(fh) + 1))
            img = big
            seen = img[:, ::-1] if flipx else img
            seen = seen[::-1] if flipy else seen
            crop = seen[y0:min(H, math.ceil(y0 + fh)), x0:min(W, math.ceil(x0 + fw))]
            exp = interp(crop, (size, size), mode, scale_factor=(size / fh, size / fw))
            if flipx:
                exp = np.flip(exp, axis=2)
            if flipy:
                exp = np.flip(exp, axis=1)
            # the box in the original frame
            bx = W - (x0 + fw) if flipx else x0
            by = H - (y0 + fh) if flipy else y0
            cases.append((f"{mode} fractional box {bx:.3f},{by:.3f} {fw:.3f}x{fh:.3f} -> {size}"
                          f" (left {'frac' if flipx else 'whole'}, top {'frac' if flipy else 'whole'})",
                          img, (bx, by, fw, fh), "box", size, mode, 3, False,
                          np.ascontiguousarray(exp)))

    # timm's evaluation transform (the box comes from xf_center_crop_box, later)
    for (w, h, size, pct, mode) in ((500, 375, 224, 0.875, "bicubic"), (375, 500, 224, 0.9, "bilinear"),
                                    (333, 333, 160, 0.95, "bicubic"), (640, 427, 224, 1.0, "bicubic"),
                                    (257, 301, 96, 0.875, "bilinear"), (101, 900, 64, 0.8, "bicubic")):
        img = image(w, h)
        x = torch.from_numpy(img).permute(2, 0, 1).float()
        im = T.InterpolationMode.BICUBIC if mode == "bicubic" else T.InterpolationMode.BILINEAR
        y = T.CenterCrop(size)(T.Resize(math.floor(size / pct), interpolation=im, antialias=True)(x))
        cases.append((f"eval {w}x{h} size {size} crop_pct {pct} {mode}", img, ("center", pct), "image",
                      size, mode, 3, False, (y / 255.0).numpy()))
    return cases


def check_resample(args, work):
    rng = np.random.default_rng(20240525)
    cases = make_cases(rng)
    lines = []
    for i, (name, img, box, bounds, size, mode, ch, flip, exp) in enumerate(cases):
        h, w = img.shape[:2]
        ip = os.path.join(work, f"img{i}.rgb")
        np.ascontiguousarray(img).tofile(ip)
        if box[0] == "center":
            out = subprocess.run([args.bin, "center", str(w), str(h), str(size), repr(box[1])],
                                 check=True, capture_output=True, text=True).stdout.split()
            box = tuple(float(v) for v in out)
        lines.append(f"{ip} {w} {h} {box[0]!r} {box[1]!r} {box[2]!r} {box[3]!r} {bounds} {size} {mode}"
                     f" {ch} {int(flip)} {os.path.join(work, f'out{i}.f32')}\n")
    manifest = os.path.join(work, "manifest")
    with open(manifest, "w") as f:
        f.writelines(lines)
    r = subprocess.run([args.bin, "resample", manifest], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr, end="")
        print(f"FAIL: xf_check resample exited {r.returncode}")
        return 1
    worst, bad = 0.0, 0
    for i, (name, img, box, bounds, size, mode, ch, flip, exp) in enumerate(cases):
        got = np.fromfile(os.path.join(work, f"out{i}.f32"), dtype=np.float32)
        if got.size != exp.size:
            print(f"FAIL {name}: {got.size} values, torch has {exp.size}")
            bad += 1
            continue
        d = float(np.max(np.abs(got.reshape(exp.shape).astype(np.float64) - exp)))
        worst = max(worst, d)
        ok = d <= args.tol
        bad += not ok
        if not ok or not args.quiet:
            print(f"{'ok  ' if ok else 'FAIL'} max|xf - torch| = {d:.3g}  {name}")
    print(f"resample: {len(cases)} cases, {bad} failed; max difference {worst:.3g} (tol {args.tol:g}, values 0..1)")
    return 1 if bad else 0


# ---- random resized crop ----------------------------------------------------

def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


class Xoshiro:
    """worker/data/rng.c, number for number"""

    def __init__(self, seed, a=0, b=0):
        x, h = splitmix64(seed & M64)
        x = h ^ ((a * 0xD1342543DE82EF95) & M64)
        x, h = splitmix64(x)
        x = h ^ ((b * 0x2545F4914F6CDD1D) & M64)
        self.s = []
        for _ in range(4):
            x, v = splitmix64(x)
            self.s.append(v)

    def u64(self):
        s = self.s
        rotl = lambda v, k: ((v << k) | (v >> (64 - k))) & M64  # noqa: E731
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.u64() >> 40) / 16777216.0

    def below(self, n):
        limit = M64 - M64 % n
        while True:
            x = self.u64()
            if x < limit:
                return x % n


def c_boxes(args, w, h, scale, ratio, seed, n):
    out = subprocess.run([args.bin, "rrc", str(w), str(h), repr(scale[0]), repr(scale[1]), repr(ratio[0]),
                          repr(ratio[1]), str(seed), str(n)], check=True, capture_output=True, text=True).stdout
    return np.array([[float(v) for v in line.split()] for line in out.splitlines()]).reshape(-1, 4)


def image_of(w, h):
    return torch.zeros(1, 1, 1).expand(3, h, w)  # only its shape is read


def torchvision_boxes_fed(w, h, scale, ratio, seed, n):
    """torchvision's own get_params, its random numbers taken from the C stream"""
    r = Xoshiro(seed)
    img = image_of(w, h)
    real_empty = torch.empty

    class Empty:
        def uniform_(self, a, b):
            a, b = float(a), float(b)
            return torch.tensor([a + r.uniform() * (b - a)], dtype=torch.float64)

    def empty(*shape, **kw):
        return Empty() if shape == (1,) and not kw else real_empty(*shape, **kw)

    def randint(low, high, size):
        assert low == 0 and tuple(size) == (1,)
        return torch.tensor([r.below(int(high))])

    boxes = []
    with mock.patch.object(torch, "empty", empty), mock.patch.object(torch, "randint", randint):
        for _ in range(n):
            i, j, bh, bw = T.RandomResizedCrop.get_params(img, scale, ratio)
            boxes.append((j, i, bw, bh))
    return np.array(boxes, dtype=np.float64)


RULE_CASES = [
    # (width, height, scale, ratio)
    (500, 375, (0.08, 1.0), (3 / 4, 4 / 3)),
    (375, 500, (0.08, 1.0), (3 / 4, 4 / 3)),
    (224, 224, (0.08, 1.0), (3 / 4, 4 / 3)),
    (500, 100, (0.08, 1.0), (3 / 4, 4 / 3)),   # some draws fall back
    (1000, 10, (0.08, 1.0), (3 / 4, 4 / 3)),   # always the fallback (wide)
    (10, 1000, (0.08, 1.0), (3 / 4, 4 / 3)),   # always the fallback (tall)
    (64, 64, (0.35, 1.0), (3 / 4, 4 / 3)),     # DeiT-tiny-like scale
    (333, 517, (0.5, 0.9), (0.5, 2.0)),
    (7, 5, (0.08, 1.0), (3 / 4, 4 / 3)),       # tiny image: rounding everywhere
    (300, 200, (1.0, 1.0), (1.0, 1.0)),        # degenerate ranges
    (97, 61, (0.08, 1.0), (0.2, 5.0)),         # wide ratio range
]


def check_rrc_rule(args, work):
    bad = 0
    total = 0
    for k, (w, h, scale, ratio) in enumerate(RULE_CASES):
        n = 2000
        seed = 1000 + k
        c = c_boxes(args, w, h, scale, ratio, seed, n)
        t = torchvision_boxes_fed(w, h, scale, ratio, seed, n)
        diff = np.nonzero(np.any(c != t, axis=1))[0]
        total += n
        if len(diff):
            bad += 1
            d = diff[0]
            print(f"FAIL {w}x{h} scale {scale} ratio {ratio}: {len(diff)} of {n} boxes differ;"
                  f" first, draw {d}: C {c[d].tolist()}, torchvision {t[d].tolist()}")
        elif not args.quiet:
            print(f"ok   {w}x{h} scale {scale} ratio {ratio}: {n} boxes identical")
    print(f"rrc-rule: {len(RULE_CASES)} cases, {total} boxes, {bad} cases differ")
    return 1 if bad else 0


def ks_2samp(a, b):
    """the two-sample Kolmogorov-Smirnov statistic sup |F_a - F_b|"""
    a, b = np.sort(a), np.sort(b)
    v = np.concatenate([a, b])
    fa = np.searchsorted(a, v, side="right") / len(a)
    fb = np.searchsorted(b, v, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


def fallback_box(w, h, ratio):
    in_ratio = w / h
    bw, bh = w, h
    if in_ratio < min(ratio):
        bh = int(round(bw / min(ratio)))
    elif in_ratio > max(ratio):
        bw = int(round(bh * max(ratio)))
    return ((w - bw) // 2, (h - bh) // 2, bw, bh)


def stats(boxes, w, h):
    x, y, bw, bh = boxes.T
    return {"area": bw * bh / (w * h), "log_ar": np.log(bw / bh),
            "cx": (x + bw / 2) / w, "cy": (y + bh / 2) / h}


def check_rrc_dist(args, work):
    n = 10000
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    bad = 0
    worst = 0.0
    for k, (w, h) in enumerate(((500, 375), (375, 500), (224, 224), (500, 100), (1000, 50))):
        c = c_boxes(args, w, h, scale, ratio, 77 + k, n)
        torch.manual_seed(4242 + k)
        img = image_of(w, h)
        t = []
        for _ in range(n):
            i, j, bh, bw = T.RandomResizedCrop.get_params(img, list(scale), list(ratio))
            t.append((j, i, bw, bh))
        t = np.array(t, dtype=np.float64)
        fb = np.array(fallback_box(w, h, ratio), dtype=np.float64)
        fc, ft = float(np.mean(np.all(c == fb, axis=1))), float(np.mean(np.all(t == fb, axis=1)))
        ok = abs(fc - ft) <= 0.015
        print(f"{w}x{h}: fallback rate C {fc:.4f} torchvision {ft:.4f}{'' if ok else '  FAIL'}")
        bad += not ok
        sc, st = stats(c, w, h), stats(t, w, h)
        for key in sc:
            ks = ks_2samp(sc[key], st[key])
            worst = max(worst, ks)
            q = lambda v: " ".join(f"{x:7.4f}" for x in np.quantile(v, (0.1, 0.5, 0.9)))  # noqa: E731
            ok = ks <= args.ks
            bad += not ok
            print(f"  {key:6s} KS {ks:.4f}{'' if ok else ' FAIL'}  mean C {np.mean(sc[key]):7.4f}"
                  f" tv {np.mean(st[key]):7.4f}  q10/50/90 C {q(sc[key])}  tv {q(st[key])}")
    print(f"rrc-dist: {n} draws a shape, largest KS statistic {worst:.4f} (limit {args.ks}), {bad} failed")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("check", choices=("resample", "rrc-rule", "rrc-dist"))
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workdir")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--ks", type=float, default=0.03)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.workdir) as work:
        fn = {"resample": check_resample, "rrc-rule": check_rrc_rule, "rrc-dist": check_rrc_dist}[args.check]
        return fn(args, work)


if __name__ == "__main__":
    sys.exit(main())
