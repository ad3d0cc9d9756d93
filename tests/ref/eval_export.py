#!/usr/bin/python3
"""tests/ref/eval_export.py - the worker's exported weights, evaluated by PyTorch.

Owns the check that a safetensors file exported by the C worker (timm
parameter names) loads unchanged into timm's VisionTransformer architecture
(tests/ref/torch_vit.py, load_state_dict(strict=True): no missing, extra or
reshaped tensors) and classifies the Fashion-MNIST test set (10000 images)
as well as the worker said it does.

The model shape comes from, in increasing priority: the weights themselves
(everything but the head count is readable from the tensor shapes), a
--config file (the worker's JSON or YAML config, bare spec or a whole ViTJob
manifest; its `model` keys), and the explicit flags. Explicit values that
disagree with the file are an error, not a silent override.

Usage:
  eval_export.py --weights model.safetensors --heads 4
                 [--image 28 --patch 7 --chans 1 --dim 64 --depth 4
                  --mlp-ratio 4 --classes 10] [--config cfg.json]
                 [--expect 0.8512 --tol 0.002] [--batch 500] [--threads 1]
Prints `accuracy=0.xxxx` on stdout. Exit 0 on success; 1 if --expect is
given and |accuracy - expect| > tol; 2 on bad arguments or an unloadable file.
"""

import argparse
import json
import math
import sys

import torch

from tests.ref import safetensors_io, torch_vit

# config key -> flag name (dest)
_CONFIG_KEYS = {"imageSize": "image", "patchSize": "patch", "channels": "chans", "dim": "dim",
                "depth": "depth", "heads": "heads", "mlpRatio": "mlp_ratio",
                "numClasses": "classes"}


def fail(msg):
    print("eval_export: " + msg, file=sys.stderr)
    sys.exit(2)


def dims_from_weights(w):
    """Model dims implied by timm-named tensors (all but heads)."""
    try:
        d, c, p, p2 = w["patch_embed.proj.weight"].shape
        n = w["pos_embed"].shape[1] - 1
        side = int(round(math.sqrt(n)))
        depth = 0
        while ("blocks.%d.norm1.weight" % depth) in w:
            depth += 1
        hidden = w["blocks.0.mlp.fc1.weight"].shape[0] if depth else 0
        classes = w["head.weight"].shape[0]
    except (KeyError, ValueError) as e:
        fail("weights do not look like a timm ViT: %s" % e)
    if p != p2 or side * side != n:
        fail("weights: non-square patches or patch grid")
    return {"image": side * p, "patch": p, "chans": c, "dim": d, "depth": depth,
            "mlp_ratio": hidden / d, "classes": classes}


def dims_from_config(path):
    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except ValueError:
        try:
            import yaml  # Debian's python3-yaml; only needed for YAML configs
        except ImportError:
            fail("%s: not JSON, and no yaml module to read YAML" % path)
        doc = yaml.safe_load(text)
    if isinstance(doc, dict) and "spec" in doc:  # a whole ViTJob manifest
        doc = doc["spec"]
    model = (doc or {}).get("model", {}) if isinstance(doc, dict) else {}
    return {dest: model[key] for key, dest in _CONFIG_KEYS.items() if key in model}


@torch.no_grad()
def evaluate(model, images, labels, batch):
    model.eval()
    correct = 0
    for i in range(0, images.shape[0], batch):
        logits = model(images[i:i + batch])
        correct += (logits.argmax(dim=1) == labels[i:i + batch]).sum().item()
    return correct / images.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True, help="safetensors with timm names")
    ap.add_argument("--config", help="the worker's config (JSON/YAML); its model keys")
    ap.add_argument("--image", type=int)
    ap.add_argument("--patch", type=int)
    ap.add_argument("--chans", type=int)
    ap.add_argument("--dim", type=int)
    ap.add_argument("--depth", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--mlp-ratio", dest="mlp_ratio", type=float)
    ap.add_argument("--classes", type=int)
    ap.add_argument("--expect", type=float, help="accuracy the worker reported")
    ap.add_argument("--tol", type=float, default=0.002, help="allowed |accuracy - expect|")
    ap.add_argument("--batch", type=int, default=500)
    # One thread by default: Debian's torch pairs libgomp with a separate
    # OpenBLAS pool, and idle OpenMP workers spinning against it can make a
    # busy machine many times slower (see bench/torch_train.py).
    ap.add_argument("--threads", type=int, default=1, help="torch threads; 0 = torch's default")
    ap.add_argument("--data-dir", default=torch_vit.FMNIST_DIR)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    try:
        weights = safetensors_io.load(args.weights)
    except (OSError, ValueError) as e:
        fail("cannot read %s: %s" % (args.weights, e))
    dims = dims_from_weights(weights)
    wanted = dims_from_config(args.config) if args.config else {}
    wanted.update({k: getattr(args, k) for k in _CONFIG_KEYS.values()
                   if getattr(args, k) is not None})
    for k, v in wanted.items():
        if k == "heads":
            continue
        if k == "mlp_ratio":
            same = torch_vit.mlp_hidden(dims["dim"], v) == torch_vit.mlp_hidden(dims["dim"], dims[k])
        else:
            same = v == dims[k]
        if not same:
            fail("%s=%s requested, but the weights have %s=%s" % (k, v, k, dims[k]))
    heads = wanted.get("heads")
    if not heads:
        fail("--heads is required (the weights do not record it)")
    if dims["dim"] % heads:
        fail("dim %d is not a multiple of heads %d" % (dims["dim"], heads))

    model = torch_vit.build_vit(dims["image"], dims["patch"], dims["chans"], dims["dim"],
                                dims["depth"], heads, dims["mlp_ratio"], dims["classes"])
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as e:
        fail("weights do not fit timm's VisionTransformer:\n%s" % e)

    images, labels = torch_vit.load_fashion_mnist("test", args.data_dir)
    if dims["image"] != images.shape[-1] or dims["chans"] != images.shape[1]:
        fail("model takes %dx%dx%d images; Fashion-MNIST is 28x28x1"
             % (dims["image"], dims["image"], dims["chans"]))
    acc = evaluate(model, images, labels, args.batch)
    print("accuracy=%.4f" % acc)
    if args.expect is not None and abs(acc - args.expect) > args.tol:
        print("eval_export: accuracy %.4f differs from expected %.4f by more than %g"
              % (acc, args.expect, args.tol), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
