#!/usr/bin/env python3
"""tests/fmnist_subset.py - a small Fashion-MNIST, as gzipped IDX files.

Owns: writing into OUT the first --train training images and labels
(train-*-ubyte.gz) and the first --test test images and labels
(t10k-*-ubyte.gz) of the Fashion-MNIST under --src, in the layout the
worker's data.format=fashion-mnist reads; with --test-from-train the t10k
files hold the first --test *training* images instead (an evaluation of the
training set). A count of 0 leaves that split's files out; "all" takes it
whole. --level 0 writes the files uncompressed (no .gz: the worker reads
both), which a process loads in a fraction of the time gunzip takes for the
whole training set. Used by the tests (tests/*.bats through tests/recipe_helpers.bash's
fmnist_subset), bench/recipe_bench.py and tools/device/pack.sh, so that
every small data set is cut the same way.
Must not: touch --src, or write anything outside OUT.

usage: fmnist_subset.py OUT --train N|all --test N|all [--test-from-train]
                        [--src /usr/share/datasets/fashion-mnist] [--level 0-9]
"""
import argparse
import gzip
import os
import shutil
import struct

SRC = "/usr/share/datasets/fashion-mnist"


def count(s):
    return None if s == "all" else int(s)


def write(src, out, split, n, level, as_split=None):
    """The first n images and labels of split, written as as_split's files."""
    dst = as_split or split
    if n is None and dst == split and level != 0:
        for kind in ("images-idx3", "labels-idx1"):
            shutil.copy(os.path.join(src, "%s-%s-ubyte.gz" % (split, kind)), out)
        return
    img = gzip.open(os.path.join(src, "%s-images-idx3-ubyte.gz" % split)).read()
    lab = gzip.open(os.path.join(src, "%s-labels-idx1-ubyte.gz" % split)).read()
    _, total, r, c = struct.unpack(">IIII", img[:16])
    n = total if n is None else n
    if n > total:
        raise SystemExit("fmnist_subset: %s has %d images, %d asked" % (split, total, n))
    for kind, data in (("images-idx3", struct.pack(">IIII", 0x803, n, r, c) + img[16:16 + n * r * c]),
                       ("labels-idx1", struct.pack(">II", 0x801, n) + lab[8:8 + n])):
        name = os.path.join(out, "%s-%s-ubyte" % (dst, kind))
        with (open(name, "wb") if level == 0 else gzip.open(name + ".gz", "wb", level)) as f:
            f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--train", type=count, required=True)
    ap.add_argument("--test", type=count, required=True)
    ap.add_argument("--test-from-train", action="store_true")
    ap.add_argument("--src", default=SRC)
    ap.add_argument("--level", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.train != 0:
        write(a.src, a.out, "train", a.train, a.level)
    if a.test != 0:
        if a.test_from_train:
            write(a.src, a.out, "train", a.test, a.level, as_split="t10k")
        else:
            write(a.src, a.out, "t10k", a.test, a.level)


if __name__ == "__main__":
    main()
