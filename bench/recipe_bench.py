#!/usr/bin/env python3
"""bench/recipe_bench.py - `make bench`: does DeiT's recipe do something?

Owns: training fmnist_small longer than the tests do, on a subset of
Fashion-MNIST's training images (small enough that the plain run overfits),
once without the recipe and once with dropPath, mixup + cutmix, label
smoothing and an EMA of the weights (issue 27), and printing one table: the
test accuracy (the t10k images), the training accuracy (the first
--train-eval training images, evaluated by the same weights) and the gap
between them, for each run.

The training accuracy comes from a second, identical run whose evaluation
split is the training subset (data.testUri names a folder whose t10k files
are training images): the worker trains deterministically for a given seed
and thread count, so both runs of a pair end with the same weights; the
table checks that their final losses are equal. The two runs of a pair run
at the same time, one thread each. With the EMA on, the summary's
test_accuracy is the EMA's and raw_test_accuracy the weights'; both are
shown. No accuracy target (the issue sets none): evidence that the pieces
act, as a smaller train/test gap. Not a test.

usage: recipe_bench.py [--build build] [--train-images 10000] [--epochs 6]
                       [--train-eval 5000] [--seed 1234]
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = "/usr/share/datasets/fashion-mnist"
RECIPE = ["training.dropPath=0.1", "data.mixup=0.8", "data.cutmix=1.0",
          "training.labelSmoothing=0.1", "training.ema.decay=0.998", "training.ema.warmup=true"]


def subset(folder, *args):
    """A Fashion-MNIST subset in folder, cut by tests/fmnist_subset.py (its arguments)."""
    subprocess.run(["python3", os.path.join(ROOT, "tests", "fmnist_subset.py"), folder,
                    "--src", FMNIST] + list(args), check=True)


def start(worker, sets):
    cmd = [worker, "train"]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def summary(p, what):
    out, err = p.communicate()
    if p.returncode != 0:
        raise SystemExit("bench: %s failed (%d): %s" % (what, p.returncode, err[-2000:]))
    return json.loads([l for l in out.splitlines() if '"summary"' in l][-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--train-images", dest="n", type=int, default=10000)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--train-eval", dest="n_eval", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    worker = os.path.join(a.build, "bin", "vitjob-worker")
    tmp = tempfile.mkdtemp(prefix="recipe-bench-")
    try:
        subset(tmp + "/data", "--train", str(a.n), "--test", "all")
        # the training subset's first n_eval images, as an evaluation split
        subset(tmp + "/train-eval", "--train", "0", "--test", str(min(a.n_eval, a.n)),
               "--test-from-train")
        steps = a.epochs * a.n // 128
        common = ["model.preset=fmnist_small", "data.uri=" + tmp + "/data",
                  "training.epochs=%d" % a.epochs, "training.seed=%d" % a.seed,
                  "training.threads=1", "training.exportPath=", "training.logInterval=1000000",
                  "training.optimizer.warmupSteps=%d" % min(50, steps // 10)]
        rows = []
        for name, extra in (("plain", []), ("recipe", RECIPE)):
            t0 = time.time()
            pt = start(worker, common + extra)
            pr = start(worker, common + extra + ["data.testUri=" + tmp + "/train-eval"])
            test, train = summary(pt, name), summary(pr, name + " (train eval)")
            secs = time.time() - t0
            if test["final_loss"] != train["final_loss"]:
                raise SystemExit("bench: the %s pair trained differently (final loss %r vs %r)"
                                 % (name, test["final_loss"], train["final_loss"]))
            rows.append((name, test, train, secs))
        print("## DeiT's recipe on fmnist_small (`bench/recipe_bench.py`)\n")
        print("%d training images, %d epochs (%d steps, batch 128), seed %d, 1 thread per run; "
              "train accuracy on the first %d training images; recipe: %s.\n"
              % (a.n, a.epochs, steps, a.seed, min(a.n_eval, a.n), ", ".join(RECIPE)))
        print("| run | weights | train acc | test acc | gap (train - test) | final loss | wall s |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for name, test, train, secs in rows:
            print("| %s | %s | %.4f | %.4f | %+.4f | %.4f | %.0f |"
                  % (name, "EMA" if test.get("ema") else "weights", train["test_accuracy"],
                     test["test_accuracy"], train["test_accuracy"] - test["test_accuracy"],
                     test["final_loss"], secs))
            if test.get("ema"):
                print("| %s | weights | %.4f | %.4f | %+.4f | | |"
                      % (name, train["raw_test_accuracy"], test["raw_test_accuracy"],
                         train["raw_test_accuracy"] - test["raw_test_accuracy"]))
        print("\n(The recipe's final loss is the loss on mixed, smoothed targets: not comparable.)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
