#!/usr/bin/python3
"""tests/ref/grad_scaler_ref.py - the loss scaler's trajectory as
torch.cuda.amp.GradScaler computes it, for worker/train/loss_scale.c
(tests/test_loss_scale.c runs this and compares every line exactly).

GradScaler's two kernels (_amp_foreach_non_finite_check_and_unscale_ and
_amp_update_scale_) exist only for CUDA in Debian's torch 1.13 (checked:
NotImplementedError on the CPU), so this re-implements GradScaler's
documented loop with float32 tensors, the kernels' rules written out:

  scaler.scale(loss)   the loss (its gradient's seed) times the fp32 scale
  scaler.unscale_(opt) inv_scale = scale.double().reciprocal().float();
                       found_inf = 1 when any gradient is inf or NaN; every
                       gradient *= inv_scale
  scaler.step(opt)     optimizer.step() unless found_inf
  scaler.update()      found_inf: scale = float(scale * backoff_factor),
                       growth_tracker = 0;
                       else successful = growth_tracker + 1; when it equals
                       growth_interval: new = float(scale * growth_factor),
                       scale = new if finite (never grown past fp32's range),
                       growth_tracker = 0; else growth_tracker = successful

Each step's gradients are real tensors (a seeded randn clamped to [-1, 1],
scaled like a backward under the scale); at the listed steps one element is set to inf or
NaN (alternately), as an fp16 overflow makes it.

Usage: grad_scaler_ref.py INIT GROWTH BACKOFF INTERVAL STEPS OVERFLOWS
  INIT, GROWTH, BACKOFF: decimal or hex floats (C's %a).
  OVERFLOWS: comma-separated 0-based steps ("" none).
Prints one line per step: "STEP SKIPPED SCALE_USED INV_SCALE SCALE_AFTER
TRACKER SKIPPED_TOTAL", floats as float.hex (exact).
"""
import sys

import torch


def number(text):
    """a float written in decimal or as C's %a (hex)"""
    return float.fromhex(text) if "0x" in text.lower() else float(text)


def main():
    init, growth, backoff = number(sys.argv[1]), number(sys.argv[2]), number(sys.argv[3])
    interval, steps = int(sys.argv[4]), int(sys.argv[5])
    overflows = {int(s) for s in sys.argv[6].split(",") if s} if len(sys.argv) > 6 else set()
    scale = torch.full((1,), init, dtype=torch.float32)
    tracker = torch.zeros((1,), dtype=torch.int32)
    gen = torch.Generator().manual_seed(0)
    skipped_total = 0
    kinds = [float("inf"), float("nan"), float("-inf")]
    for step in range(steps):
        used = scale.clone()
        # |g| <= 1 before scaling: finite at every fp32 scale (up to 2^127)
        grads = [torch.randn(7, generator=gen).clamp(-1, 1) * used,
                 torch.randn(3, generator=gen).clamp(-1, 1) * used]
        if step in overflows:
            grads[step % 2][step % 3] = kinds[step % 3]
        # unscale_
        inv_scale = scale.double().reciprocal().float()
        found_inf = torch.zeros((1,), dtype=torch.float32)
        for g in grads:
            if not bool(torch.isfinite(g).all()):
                found_inf.fill_(1.0)
            g.mul_(inv_scale)
        # step: skipped when found_inf
        skipped = bool(found_inf.item() > 0)
        skipped_total += skipped
        # update (_amp_update_scale_)
        if skipped:
            scale.fill_(float(torch.tensor(scale.item() * backoff, dtype=torch.float32)))
            tracker.fill_(0)
        else:
            successful = int(tracker.item()) + 1
            if successful == interval:
                new = torch.tensor(scale.item() * growth, dtype=torch.float32)
                if bool(torch.isfinite(new)):
                    scale.fill_(new.item())
                tracker.fill_(0)
            else:
                tracker.fill_(successful)
        print(step, int(skipped), used.item().hex(), inv_scale.item().hex(),
              scale.item().hex(), int(tracker.item()), skipped_total)


if __name__ == "__main__":
    main()
