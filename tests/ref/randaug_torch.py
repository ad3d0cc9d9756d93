#!/usr/bin/python3
"""tests/ref/randaug_torch.py - worker/data/randaug.c and erasing.c (and
transform.c's 8-bit helpers) against a reference written here from timm's
documented behaviour, with PIL (Debian's python3-pil, Pillow 9.4) and torch,
through the test driver tests/ref/ra_check.c. No timm here: each op below is
what timm's auto_augment.py documents its op to be (the PIL call and its
arguments), and RandomErasing is timm's documented algorithm.

Owns six checks (tests/randaug.bats runs each):

  ops    each op of timm's two RandAugment sets at fixed arguments (the
         arguments of magnitudes 0, 3, 5, 9, 10 and past 10 with both
         signs, and edge arguments: rotations by 90/180/270, enhance factors
         0, 1 and past 1, posterize to 0 bits, solarize thresholds 0 and
         256), on noise, smooth, low-contrast, few-level, one-colour and
         tiny images, square and not, with the nearest, bilinear and bicubic
         filters and two fill colours: the C op against PIL's
         (ImageOps.autocontrast/equalize/invert/posterize/solarize, timm's
         solarize_add table through Image.point, ImageEnhance.Color/
         Contrast/Brightness/Sharpness, Image.rotate and Image.transform
         (AFFINE) with resample and fillcolor). Every byte must be equal.
  args   timm's level-to-argument rules (rotate (m/10)*30, shear (m/10)*0.3,
         translate (m/10)*0.45 with a random sign; posterize int((m/10)*4)
         and 4 - that; solarize min(256, int((m/10)*256)) and 256 - that;
         solarize_add min(128, int((m/10)*110)); enhance (m/10)*1.8 + 0.1 and
         max(0.1, 1 +- (m/10)*0.9)) at 2,000 magnitudes in [0, 30], both
         signs: the same doubles.
  apply  the whole of RandAugment (timm's RandAugment.__call__ and
         AugmentOp.__call__: n ops chosen with replacement, each applied
         with probability p, the magnitude noise clipped to [0, mmax or
         10], the signs) written here with its random numbers taken from
         the C stream (worker/data/rng.c reimplemented), on specs with and
         without inc1, noise, uniform magnitudes, p = 1 and p = 0, n up to
         6, mmax 30: the same ops, magnitudes, arguments and bytes.
  erase  timm's RandomErasing (probability, mode pixel/rand/const, area
         [0.02, 1/3], log-uniform aspect [0.3, 1/0.3], one box, 10
         attempts) written here on a torch tensor, its random numbers (and
         the normal values) taken from the C stream: the same box, values
         within 1e-5 (they are equal).
  u8     the 8-bit crop the loader hands RandAugment (xf_resample_u8)
         against PIL's crop + resize (what RandomResizedCrop does to a PIL
         image), bilinear and bicubic, down and up, flipped or not, on noise
         and smooth images. Both round each pass to 8 bits, but PIL sums in
         22-bit fixed point where the C sums floats, so a value near .5 may
         round the other way (then, rarely, by 2 after a bicubic upscale):
         at most 2 apart and at most 1% of the bytes differing, else a
         failure. Prints how many differ.
  norm   xf_normalize_u8 against torchvision's ToTensor then Normalize (and
         PIL's convert("L") first for one channel): within 1e-6.

Prints what it measured; exits 0 when all pass, 1 when not.

Usage: randaug_torch.py CHECK --bin build/bin/ra_check [--workdir DIR]
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image, ImageEnhance, ImageOps

from tests.ref.transform_torch import Xoshiro  # worker/data/rng.c, number for number

RESAMPLE = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}
LEVEL_DENOM = 10.0

INCREASING = ["AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing",
              "SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing",
              "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY",
              "TranslateXRel", "TranslateYRel"]
DEFAULT = ["AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize",
           "SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY",
           "TranslateXRel", "TranslateYRel"]
ALL_OPS = sorted(set(INCREASING) | set(DEFAULT))
SIGNED = {"Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel", "ColorIncreasing",
          "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing"}


# ---- the reference: timm's ops, as its documentation describes them ----------

def ref_op(name, arg, img, resample, fill):
    """timm's op `name` with its argument, on a PIL RGB image"""
    kw = dict(resample=RESAMPLE[resample], fillcolor=tuple(fill))
    if name == "AutoContrast":
        return ImageOps.autocontrast(img)
    if name == "Equalize":
        return ImageOps.equalize(img)
    if name == "Invert":
        return ImageOps.invert(img)
    if name == "Rotate":
        return img.rotate(arg, **kw)
    if name.startswith("Posterize"):
        bits = int(arg)
        return img if bits >= 8 else ImageOps.posterize(img, bits)
    if name.startswith("SolarizeAdd"):
        add = int(arg)
        lut = [min(255, i + add) if i < 128 else i for i in range(256)]
        return img.point(lut * 3)
    if name.startswith("Solarize"):
        return ImageOps.solarize(img, int(arg))
    for base, cls in (("Color", ImageEnhance.Color), ("Contrast", ImageEnhance.Contrast),
                      ("Brightness", ImageEnhance.Brightness), ("Sharpness", ImageEnhance.Sharpness)):
        if name.startswith(base):
            return cls(img).enhance(arg)
    if name == "ShearX":
        return img.transform(img.size, Image.AFFINE, (1, arg, 0, 0, 1, 0), **kw)
    if name == "ShearY":
        return img.transform(img.size, Image.AFFINE, (1, 0, 0, arg, 1, 0), **kw)
    if name == "TranslateXRel":
        return img.transform(img.size, Image.AFFINE, (1, 0, arg * img.size[0], 0, 1, 0), **kw)
    if name == "TranslateYRel":
        return img.transform(img.size, Image.AFFINE, (1, 0, 0, 0, 1, arg * img.size[1]), **kw)
    raise ValueError(name)


def ref_arg(name, level, negate):
    """timm's level-to-argument rule at magnitude `level`; negate: what
    _randomly_negate drew"""
    sign = (lambda v: -v if negate else v)
    if name == "Rotate":
        return sign((level / LEVEL_DENOM) * 30.)
    if name == "Posterize":
        return int((level / LEVEL_DENOM) * 4)
    if name == "PosterizeIncreasing":
        return 4 - int((level / LEVEL_DENOM) * 4)
    if name == "Solarize":
        return min(256, int((level / LEVEL_DENOM) * 256))
    if name == "SolarizeIncreasing":
        return 256 - min(256, int((level / LEVEL_DENOM) * 256))
    if name == "SolarizeAdd":
        return min(128, int((level / LEVEL_DENOM) * 110))
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        return (level / LEVEL_DENOM) * 1.8 + 0.1
    if name.endswith("Increasing"):
        return max(0.1, 1.0 + sign((level / LEVEL_DENOM) * .9))
    if name in ("ShearX", "ShearY"):
        return sign((level / LEVEL_DENOM) * 0.3)
    if name in ("TranslateXRel", "TranslateYRel"):
        return sign((level / LEVEL_DENOM) * 0.45)
    return 0.0


class Stream:
    """the C stream, as Python's random and torch's normal_ are asked for"""

    def __init__(self, seed):
        self.r = Xoshiro(seed)

    def random(self):
        return self.r.uniform()

    def uniform(self, a, b):
        return a + (b - a) * self.r.uniform()

    def randint(self, a, b):
        return a + self.r.below(b - a + 1)

    def below(self, n):
        return self.r.below(n)

    def normal(self):
        """rng.c's rng_normal: Box-Muller in double, rounded to float"""
        u1 = ((self.r.u64() >> 11) + 1) * (1.0 / 9007199254740992.0)
        u2 = (self.r.u64() >> 11) * (1.0 / 9007199254740992.0)
        return float(np.float32(math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586477 * u2)))


def parse_spec(spec):
    """timm's rand_augment_transform's reading of the string (the sections
    used here)"""
    cfg = dict(m=10, n=2, p=0.5, mstd=0.0, mmax=None, inc=False)
    for c in spec.split("-")[1:]:
        i = next(k for k, ch in enumerate(c) if ch.isdigit())
        key, val = c[:i], c[i:]
        if key == "mstd":
            cfg["mstd"] = float("inf") if float(val) > 100 else float(val)
        elif key == "mmax":
            cfg["mmax"] = int(val)
        elif key == "inc":
            cfg["inc"] = bool(val)
        elif key == "p":
            cfg["p"] = float(val)
        else:
            cfg[key] = int(val)
    return cfg


def ref_randaugment(spec, img, rnd, resample, fill):
    """timm's RandAugment(spec) with the random numbers from rnd; returns the
    image and, per chosen op, (name, applied, magnitude, arg)"""
    cfg = parse_spec(spec)
    ops = INCREASING if cfg["inc"] else DEFAULT
    chosen = [ops[rnd.below(len(ops))] for _ in range(cfg["n"])]  # np.random.choice, replace
    trace = []
    for name in chosen:
        # AugmentOp.__call__ (the C applies an op when u < p; timm skips it
        # when u > p: the same for every u but u == p)
        if cfg["p"] < 1.0 and rnd.random() > cfg["p"]:
            trace.append((name, 0, 0.0, 0.0))
            continue
        magnitude = cfg["m"]
        if cfg["mstd"] > 0:
            if cfg["mstd"] == float("inf"):
                magnitude = rnd.uniform(0, magnitude)
            else:
                magnitude = magnitude + cfg["mstd"] * rnd.normal()  # random.gauss(m, mstd)
        upper = cfg["mmax"] or LEVEL_DENOM
        magnitude = max(0., min(magnitude, upper))
        negate = rnd.random() > 0.5 if name in SIGNED else False
        arg = ref_arg(name, magnitude, negate)
        img = ref_op(name, arg, img, resample, fill)
        trace.append((name, 1, float(magnitude), float(arg)))
    return img, trace


def ref_erase(img, probability, mode, rnd):
    """timm's RandomErasing._erase on one CHW tensor (min_count = max_count =
    1); returns the box (top, left, h, w) or None"""
    if rnd.random() > probability:
        return None
    chan, img_h, img_w = img.shape
    area = img_h * img_w
    log_ratio = (math.log(0.3), math.log(1 / 0.3))
    for _ in range(10):
        target_area = rnd.uniform(0.02, 1 / 3) * area / 1
        aspect_ratio = math.exp(rnd.uniform(*log_ratio))
        h = int(round(math.sqrt(target_area * aspect_ratio)))
        w = int(round(math.sqrt(target_area / aspect_ratio)))
        if w < img_w and h < img_h:
            top = rnd.randint(0, img_h - h)
            left = rnd.randint(0, img_w - w)
            if mode == "pixel":
                fill = torch.tensor([rnd.normal() for _ in range(chan * h * w)],
                                    dtype=torch.float32).reshape(chan, h, w)
            elif mode == "rand":
                fill = torch.tensor([rnd.normal() for _ in range(chan)],
                                    dtype=torch.float32).reshape(chan, 1, 1)
            else:
                fill = torch.zeros((chan, 1, 1), dtype=torch.float32)
            img[:, top:top + h, left:left + w] = fill
            return (top, left, h, w)
    return None


# ---- test images -------------------------------------------------------------

def images(rng):
    """(name, HWC uint8 array)"""
    out = []

    def smooth(w, h, seed):
        yy, xx = np.mgrid[0:h, 0:w]
        r = np.random.RandomState(seed)
        chans = []
        for c in range(3):
            f = 60 + 30 * c
            v = 127 + 100 * np.sin(xx / (5.0 + c) + r.uniform(0, 6)) * np.cos(yy / (4.0 + c))
            chans.append(v + r.normal(0, f / 10.0, (h, w)))
        return np.clip(np.stack(chans, -1), 0, 255).astype(np.uint8)

    out.append(("noise 32x32", rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)))
    out.append(("smooth 37x23", smooth(37, 23, 1)))
    out.append(("smooth 48x48", smooth(48, 48, 2)))
    out.append(("smooth 224x224", smooth(224, 224, 3)))
    low = (100 + smooth(40, 30, 4) // 8).astype(np.uint8)  # values in [100, 131]
    out.append(("low contrast 40x30", low))
    few = (rng.integers(0, 4, (20, 20, 3)) * 60 + 10).astype(np.uint8)  # four levels per band
    out.append(("four levels 20x20", few))
    one = np.full((9, 9, 3), (200, 17, 90), np.uint8)
    out.append(("one colour 9x9", one))
    two = np.zeros((6, 10, 3), np.uint8)
    two[:, 5:] = 255
    out.append(("two values 10x6", two))
    out.append(("tiny 2x3", rng.integers(0, 256, (3, 2, 3), dtype=np.uint8)))
    out.append(("one pixel", rng.integers(0, 256, (1, 1, 3), dtype=np.uint8)))
    out.append(("line 17x1", rng.integers(0, 256, (1, 17, 3), dtype=np.uint8)))
    return out


def op_args(name):
    """the arguments an op is checked at"""
    mags = [0, 3, 5, 9, 10, 4.3721, 7.5, 12, 30]
    args = sorted({ref_arg(name, m, neg) for m in mags for neg in (False, True)})
    extra = {
        "Rotate": [90.0, -90.0, 180.0, 270.0, -180.0, 13.7, 359.0, -0.0],
        "ShearX": [0.05, -0.3, 1.7], "ShearY": [0.05, -0.3, 1.7],
        "TranslateXRel": [0.5, -1.2, 0.0314], "TranslateYRel": [0.5, -1.2, 0.0314],
        "Posterize": [8, 7, 1, 0], "PosterizeIncreasing": [-3, 0, 2],
        "Solarize": [0, 1, 255, 256], "SolarizeIncreasing": [0, 128, 256],
        "SolarizeAdd": [0, 128, 1],
    }
    for base in ("Color", "Contrast", "Brightness", "Sharpness"):
        for n in (base, base + "Increasing"):
            extra[n] = [0.0, 1.0, 0.1, 0.5, 1.9, 2.5, 3.0]
    return args + [a for a in extra.get(name, []) if a not in args]


# ---- the checks ---------------------------------------------------------------

def run(args, *cmd, stdin=None):
    return subprocess.run([args.bin, *cmd], check=True, capture_output=True, text=True,
                          input=stdin).stdout


def check_ops(args, work):
    rng = np.random.default_rng(27)
    imgs = images(rng)
    cases = []
    geometric = {"Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"}
    for name in ALL_OPS:
        for arg in op_args(name):
            for iname, img in imgs:
                for resample in (("nearest", "bilinear", "bicubic") if name in geometric else ("bicubic",)):
                    for fill in (((128, 128, 128), (124, 116, 104)) if name in geometric else ((128, 128, 128),)):
                        cases.append((name, arg, iname, img, resample, fill))
    lines = []
    for k, (name, arg, iname, img, resample, fill) in enumerate(cases):
        src = os.path.join(work, f"in{k}.raw")
        img.tofile(src)
        h, w = img.shape[:2]
        lines.append(f"{name} {float(arg)!r} {resample} {fill[0]} {fill[1]} {fill[2]} {w} {h} "
                     f"{src} {os.path.join(work, f'out{k}.raw')}\n")
    manifest = os.path.join(work, "ops.txt")
    with open(manifest, "w") as f:
        f.writelines(lines)
    run(args, "ops", manifest)
    bad = 0
    per_op = {}
    for k, (name, arg, iname, img, resample, fill) in enumerate(cases):
        h, w = img.shape[:2]
        c = np.fromfile(os.path.join(work, f"out{k}.raw"), np.uint8).reshape(h, w, 3)
        ref = np.asarray(ref_op(name, arg, Image.fromarray(img, "RGB"), resample, fill))
        d = np.abs(c.astype(int) - ref.astype(int))
        ndiff = int((d != 0).sum())
        key = name if name not in geometric else f"{name} ({resample})"
        st = per_op.setdefault(key, [0, 0, 0])
        st[0] += 1
        st[1] = max(st[1], int(d.max()))
        st[2] += ndiff
        if ndiff:
            bad += 1
            if bad <= 20:
                print(f"FAIL {name}({arg!r}) {resample} fill {fill} on {iname}: {ndiff} bytes differ, "
                      f"max {int(d.max())}")
    for key in sorted(per_op):
        n, mx, nd = per_op[key]
        if not args.quiet or nd:
            print(f"{'ok  ' if not nd else 'FAIL'} {key:34s} {n:4d} cases, max |C - PIL| {mx}, {nd} bytes differ")
    print(f"ops: {len(cases)} cases, {bad} failed")
    return 1 if bad else 0


def check_args(args, work):
    rng = np.random.default_rng(7)
    mags = list(rng.uniform(0, 30, 1900)) + [i / 10 for i in range(0, 101)]
    rows = [(name, float(m), neg) for name in ALL_OPS for m in mags for neg in (0, 1)]
    out = run(args, "args", stdin="".join(f"{n} {m!r} {g}\n" for n, m, g in rows)).split()
    bad = 0
    for (name, m, neg), c in zip(rows, out):
        want = float(ref_arg(name, m, bool(neg)))
        if float(c) != want:
            bad += 1
            if bad <= 10:
                print(f"FAIL {name} at magnitude {m!r} negate {neg}: C {c}, timm {want!r}")
    print(f"args: {len(rows)} cases, {bad} differ")
    return 1 if bad or len(out) != len(rows) else 0


APPLY_SPECS = [
    "rand-m9-mstd0.5-inc1",   # DeiT's
    "rand-m9-mstd0.5",        # the default op set
    "rand-m9-n6-p1-inc1",     # every chosen op applied
    "rand-m9-n3-p0",          # none applied
    "rand-m10-mstd101-inc1",  # uniform magnitudes
    "rand-m30-mmax30-mstd3-n4-inc1",  # past 10 (rotations past 90, posterize below 0 bits)
    "rand-m5-mstd1-p0.8",
]


def check_apply(args, work):
    rng = np.random.default_rng(3)
    imgs = [(n, i) for n, i in images(rng) if i.shape[0] * i.shape[1] >= 400]
    cases = []
    for s, spec in enumerate(APPLY_SPECS):
        for k in range(40):
            iname, img = imgs[(s + k) % len(imgs)]
            resample = ("bilinear", "bicubic", "nearest")[k % 3]
            fill = (124, 116, 104) if k % 2 else (128, 128, 128)
            cases.append((spec, 1000 * s + k, iname, img, resample, fill))
    lines = []
    for k, (spec, seed, iname, img, resample, fill) in enumerate(cases):
        src = os.path.join(work, f"a{k}.raw")
        img.tofile(src)
        h, w = img.shape[:2]
        lines.append(f"{spec} {seed} {resample} {fill[0]} {fill[1]} {fill[2]} {w} {h} {src} "
                     f"{os.path.join(work, f'b{k}.raw')}\n")
    manifest = os.path.join(work, "apply.txt")
    with open(manifest, "w") as f:
        f.writelines(lines)
    out = run(args, "apply", manifest).splitlines()
    bad = applied = 0
    at = 0
    for k, (spec, seed, iname, img, resample, fill) in enumerate(cases):
        n = int(out[at])
        ctrace = [tuple(line.split()) for line in out[at + 1:at + 1 + n]]
        at += 1 + n
        ctrace = [(a, int(b), float(c), float(d)) for a, b, c, d in ctrace]
        ref, rtrace = ref_randaugment(spec, Image.fromarray(img, "RGB"), Stream(seed), resample, fill)
        h, w = img.shape[:2]
        c = np.fromfile(os.path.join(work, f"b{k}.raw"), np.uint8).reshape(h, w, 3)
        same = ctrace == rtrace and np.array_equal(c, np.asarray(ref))
        applied += sum(t[1] for t in ctrace)
        if not same:
            bad += 1
            if bad <= 10:
                print(f"FAIL {spec} seed {seed} on {iname} ({resample}): C {ctrace} / reference {rtrace}; "
                      f"{int((c != np.asarray(ref)).sum())} bytes differ")
    print(f"apply: {len(cases)} cases ({applied} ops applied), {bad} failed")
    return 1 if bad else 0


def check_erase(args, work):
    rng = np.random.default_rng(11)
    cases = []
    for mode in ("pixel", "rand", "const"):
        for prob in (1.0, 0.25, 0.0):
            for (c, h, w) in ((3, 224, 224), (1, 32, 32), (3, 7, 5), (3, 40, 9)):
                for k in range(6):
                    cases.append((prob, mode, 100 * len(cases) + k, c, h, w))
    lines = []
    for k, (prob, mode, seed, c, h, w) in enumerate(cases):
        src = os.path.join(work, f"e{k}.raw")
        rng.normal(0, 1, (c, h, w)).astype(np.float32).tofile(src)
        lines.append(f"{prob!r} {mode} {seed} {c} {h} {w} {src} {os.path.join(work, f'f{k}.raw')}\n")
    manifest = os.path.join(work, "erase.txt")
    with open(manifest, "w") as f:
        f.writelines(lines)
    out = run(args, "erase", manifest).splitlines()
    bad = erased = 0
    worst = 0.0
    for k, (prob, mode, seed, c, h, w) in enumerate(cases):
        x = torch.from_numpy(np.fromfile(os.path.join(work, f"e{k}.raw"), np.float32).reshape(c, h, w))
        box = ref_erase(x, prob, mode, Stream(seed))
        cout = np.fromfile(os.path.join(work, f"f{k}.raw"), np.float32).reshape(c, h, w)
        cbox = None if out[k] == "none" else tuple(int(v) for v in out[k].split()[1:])
        d = float(np.abs(cout - x.numpy()).max())
        worst = max(worst, d)
        erased += cbox is not None
        if cbox != box or d > 1e-5:
            bad += 1
            if bad <= 10:
                print(f"FAIL p={prob} {mode} seed {seed} {c}x{h}x{w}: C box {cbox}, timm's {box}, "
                      f"max |C - ref| {d:.3g}")
    print(f"erase: {len(cases)} cases ({erased} erased), {bad} failed; max |C - reference| {worst:.3g}")
    return 1 if bad else 0


def check_u8(args, work):
    rng = np.random.default_rng(5)
    cases = []
    for k in range(60):
        w, h = int(rng.integers(20, 400)), int(rng.integers(20, 400))
        bw, bh = int(rng.integers(1, w + 1)), int(rng.integers(1, h + 1))
        x, y = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
        size = int((32, 56, 224, 17)[k % 4])
        interp = ("bilinear", "bicubic")[k % 2]
        flip = (k // 2) % 2
        img = images(np.random.default_rng(k))[3][1] if k % 3 == 0 else rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        if k % 3 == 0:
            img = np.asarray(Image.fromarray(img).resize((w, h), Image.BILINEAR))
        cases.append((img, w, h, x, y, bw, bh, size, interp, flip))
    lines = []
    for k, (img, w, h, x, y, bw, bh, size, interp, flip) in enumerate(cases):
        src = os.path.join(work, f"u{k}.raw")
        img.tofile(src)
        lines.append(f"{src} {w} {h} {x} {y} {bw} {bh} {size} {interp} {flip} {os.path.join(work, f'v{k}.raw')}\n")
    manifest = os.path.join(work, "u8.txt")
    with open(manifest, "w") as f:
        f.writelines(lines)
    run(args, "u8", manifest)
    bad = total = ndiff = 0
    worst = 0
    for k, (img, w, h, x, y, bw, bh, size, interp, flip) in enumerate(cases):
        c = np.fromfile(os.path.join(work, f"v{k}.raw"), np.uint8).reshape(size, size, 3)
        pil = Image.fromarray(img, "RGB").crop((x, y, x + bw, y + bh)).resize((size, size), RESAMPLE[interp])
        if flip:
            pil = pil.transpose(Image.FLIP_LEFT_RIGHT)
        d = np.abs(c.astype(int) - np.asarray(pil).astype(int))
        worst = max(worst, int(d.max()))
        total += d.size
        ndiff += int((d != 0).sum())
        if d.max() > 2:
            bad += 1
            print(f"FAIL case {k}: {w}x{h} box {x},{y} {bw}x{bh} to {size} {interp}: max {int(d.max())}")
        elif d.max() > 1 and not args.quiet:
            print(f"note case {k}: {w}x{h} box {x},{y} {bw}x{bh} to {size} {interp}: "
                  f"{int((d > 1).sum())} bytes differ by {int(d.max())}")
    frac = ndiff / total
    if frac > 0.01:
        bad += 1
        print(f"FAIL {100.0 * frac:.3f}% of the bytes differ (more than 1%)")
    print(f"u8: {len(cases)} cases, {bad} failed; max |C - PIL| {worst}, {ndiff} of {total} bytes "
          f"differ ({100.0 * frac:.3f}%)")
    return 1 if bad else 0


def check_norm(args, work):
    rng = np.random.default_rng(9)
    cases = []
    for k, (size, ch) in enumerate(((224, 3), (32, 3), (28, 1), (5, 1))):
        img = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        mean = [0.485, 0.456, 0.406] if ch == 3 else [0.286, 0, 0]
        std = [0.229, 0.224, 0.225] if ch == 3 else [0.353, 1, 1]
        cases.append((img, size, ch, mean, std))
    lines = []
    for k, (img, size, ch, mean, std) in enumerate(cases):
        src = os.path.join(work, f"n{k}.raw")
        img.tofile(src)
        lines.append(f"{src} {size} {ch} {' '.join(map(repr, mean))} {' '.join(map(repr, std))} "
                     f"{os.path.join(work, f'm{k}.raw')}\n")
    manifest = os.path.join(work, "norm.txt")
    with open(manifest, "w") as f:
        f.writelines(lines)
    run(args, "norm", manifest)
    bad = 0
    worst = 0.0
    for k, (img, size, ch, mean, std) in enumerate(cases):
        pil = Image.fromarray(img, "RGB")
        if ch == 1:
            pil = pil.convert("L")
        ref = T.Normalize(mean[:ch], std[:ch])(T.ToTensor()(pil)).numpy()
        c = np.fromfile(os.path.join(work, f"m{k}.raw"), np.float32).reshape(ch, size, size)
        d = float(np.abs(c - ref).max())
        worst = max(worst, d)
        if d > 1e-6:
            bad += 1
            print(f"FAIL {size}x{size}x{ch}: max |C - torchvision| {d:.3g}")
    print(f"norm: {len(cases)} cases, {bad} failed; max |C - torchvision| {worst:.3g}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("check", choices=("ops", "args", "apply", "erase", "u8", "norm"))
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workdir")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.workdir) as work:
        fn = {"ops": check_ops, "args": check_args, "apply": check_apply, "erase": check_erase,
              "u8": check_u8, "norm": check_norm}[args.check]
        return fn(args, work)


if __name__ == "__main__":
    sys.exit(main())
