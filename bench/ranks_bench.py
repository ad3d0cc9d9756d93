#!/usr/bin/env python3
"""bench/ranks_bench.py - training throughput and per-rank memory with many
ranks on loopback: vitjob-worker at world size 1, 2 and 4 with sharding
none, grad-op and full on fmnist_small (one thread per rank, so the 4-rank
rows share the machine's cores), printed as markdown tables.

Throughput: the images of the timed steps over their time, from rank 0's
summary (img_per_s: the global batch per second). Memory: each rank's
params + grads + optimizer bytes as it logs them (event=shard), and its
peak resident set (peak_rss_mib of its done line).

Then the peer: vitjob at 2 ranks (sharding none and grad-op) against
PyTorch's DistributedDataParallel on gloo (bench/ddp_train.py, run by
Debian's /usr/bin/python3, which has torch) with the same model, global
batch 64, micro-batch 16 (no_sync accumulation), one thread per rank, and
both at 1 rank (the same micro-batches: the compute per image without
collectives), taken in turns for --rounds rounds; each one's best and
median img/s, the ratio of vitjob's to DDP's at the same world size, and
vitjob's time inside its gradient collective per step.
Must not: assert anything (a benchmark prints).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from benchlib import free_port, train_ranks


def run(worker, world, mode, steps, tmp):
    args = ["--set", "model.preset=fmnist_small",
            "--set", "training.steps=%d" % steps, "--set", "training.optimizer.warmupSteps=2",
            "--set", "training.globalBatchSize=64", "--set", "training.microBatchSize=16",
            "--set", "training.threads=1", "--set", "training.exportPath=",
            "--set", "training.sharding=%s" % mode, "--set", "training.logInterval=1000000",
            "--log-level", "info"]
    codes, logs = train_ranks(worker, world, args, tmp)
    if any(codes):
        last = [l for l in logs[codes.index(next(c for c in codes if c))].splitlines() if l][-1:]
        return {"error": "exit %s: %s" % (codes, last[0][-160:] if last else "")}
    out = {"ranks": []}
    for r, text in enumerate(logs):
        shard = dict(re.findall(r"(\w+)=(\d+)", [l for l in text.splitlines() if "event=shard" in l][0]))
        done = [l for l in text.splitlines() if "event=done" in l][0]
        rss = float(re.search(r"peak_rss_mib=([\d.]+)", done).group(1))
        state = int(shard["param_bytes"]) + int(shard["grad_bytes"]) + int(shard["optim_bytes"])
        out["ranks"].append((state, rss))
        if r == 0:
            out["img_s"] = float(re.search(r"img_per_s=([\d.]+)", done).group(1))
            out["train_s"] = float(re.search(r"train_seconds=([\d.]+)", done).group(1))
            stats = [l for l in text.splitlines() if "event=comm_stats" in l]
            if stats:  # many ranks: seconds inside the collectives (worker/gang/comm.c)
                out["comm"] = {k: float(v) for k, v in re.findall(r"(\w+_s)=([\d.]+)", stats[0])}
    return out


def run_ddp(world, steps, tmp, python="/usr/bin/python3"):
    """PyTorch DDP on gloo (bench/ddp_train.py), world ranks on loopback."""
    port = free_port()
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, "ddp_train.py")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(here))  # it imports tests.ref.torch_vit
    procs = []
    for r in range(world):
        log = open(os.path.join(tmp, "ddp-%d.log" % r), "w")
        args = [python, script, "--rank", str(r), "--world", str(world), "--port", str(port),
                "--preset", "fmnist_small", "--global-batch", "64", "--micro-batch", "16",
                "--threads", "1", "--steps", str(steps)]
        try:
            procs.append((subprocess.Popen(args, stdout=subprocess.PIPE if r == 0 else
                                           subprocess.DEVNULL, stderr=log, text=True, env=env), log))
        except OSError as e:  # no such python: the row says so
            log.close()
            for p, _ in procs:
                p.kill()
            return {"error": "%s: %s" % (python, e)}
    out = procs[0][0].communicate()[0]
    codes = [p.wait() for p, _ in procs]
    for _, log in procs:
        log.close()
    if any(codes):
        text = open(os.path.join(tmp, "ddp-%d.log" % codes.index(next(c for c in codes if c)))).read()
        last = [l for l in text.splitlines() if l][-1:]
        return {"error": "exit %s: %s" % (codes, last[0][-160:] if last else "")}
    res = json.loads(out.strip().splitlines()[-1])
    return {"img_s": res["images_per_sec"], "torch": res["torch"]}


def ddp_table(worker, steps, rounds, tmp):
    """vitjob (none, grad-op) against DDP at 2 ranks, and both at 1 rank (the
    same micro-batches, so the compute per image), in turns."""
    kinds = [("vitjob none", 1, lambda: run(worker, 1, "none", steps, tmp)),
             ("PyTorch DDP (gloo)", 1, lambda: run_ddp(1, steps, tmp)),
             ("vitjob none", 2, lambda: run(worker, 2, "none", steps, tmp)),
             ("vitjob grad-op", 2, lambda: run(worker, 2, "grad-op", steps, tmp)),
             ("PyTorch DDP (gloo)", 2, lambda: run_ddp(2, steps, tmp))]
    load_before = open("/proc/loadavg").read().split()[0]
    got = {(k, w): [] for k, w, _ in kinds}
    comm_ms = {(k, w): [] for k, w, _ in kinds}
    errors, torch_version = {}, "?"
    for _ in range(rounds):
        for name, world, fn in kinds:
            r = fn()
            if "error" in r:
                errors[(name, world)] = r["error"]
                continue
            got[(name, world)].append(r["img_s"])
            torch_version = r.get("torch", torch_version)
            if "comm" in r:  # the step's gradient collective: all-reduce or reduce-scatter
                c = r["comm"]
                comm_ms[(name, world)].append(
                    1000 * (c.get("allreduce_s", 0) + c.get("reduce_scatter_s", 0)) / steps)
    print("\n## vitjob against PyTorch DDP on loopback (fmnist_small, global batch 64, "
          "micro-batch 16, no_sync accumulation, %d steps, 1 thread per rank, %d cores, "
          "torch %s, %d rounds in turns, load average before: %s)\n" % (
              steps, os.cpu_count(), torch_version, rounds, load_before))
    print("| implementation | ranks | img/s best | img/s median | runs | best / DDP best "
          "| median / DDP median | gradient collective ms/step (rank 0) |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    med = lambda v: sorted(v)[len(v) // 2]
    for name, world, _ in kinds:
        v = got[(name, world)]
        ddp = got[("PyTorch DDP (gloo)", world)]
        if not v:
            print("| %s | %d | failed: %s | | | | | |" % (name, world, errors.get((name, world), "?")))
            continue
        ratio = lambda a, b: "%.2fx" % (a / b) if b else "-"
        cm = comm_ms[(name, world)]
        print("| %s | %d | %.1f | %.1f | %s | %s | %s | %s |" % (
            name, world, max(v), med(v), " ".join("%.1f" % x for x in v),
            ratio(max(v), max(ddp) if ddp else 0), ratio(med(v), med(ddp) if ddp else 0),
            "%.1f" % med(cm) if cm else "-"))
    print("\nload average after: %s; img/s: the global batch's images over the summed wall "
          "time of every step (vitjob: its done line; DDP: bench/ddp_train.py, timed the same "
          "way); gradient collective: seconds inside the all-reduce (none) or reduce-scatter "
          "(grad-op) per step, from the worker's event=comm_stats" %
          open("/proc/loadavg").read().split()[0])
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the DDP comparison")
    ap.add_argument("--only", choices=("scaling", "ddp"),
                    help="print only the scaling table or only the DDP comparison")
    a = ap.parse_args()
    worker = os.path.join(a.build, "bin", "vitjob-worker")
    load_before = open("/proc/loadavg").read().split()[0]
    if a.only == "ddp":
        with tempfile.TemporaryDirectory() as tmp:
            ddp_table(worker, a.steps, a.rounds, tmp)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in (1, 2, 4):
            for mode in ("none", "grad-op", "full"):
                if world == 1 and mode != "none":
                    continue
                rows.append((world, mode, run(worker, world, mode, a.steps, tmp)))
    print("## Training with many ranks on loopback (fmnist_small, global batch 64, "
          "micro-batch 16, %d steps, 1 thread per rank, %d cores, load average before: %s, "
          "after: %s)\n" % (a.steps, os.cpu_count(), load_before,
                            open("/proc/loadavg").read().split()[0]))
    print("| world | sharding | img/s (job) | vs 1 rank | params+grads+optimizer per rank (MiB) "
          "| vs 1 rank | peak RSS per rank (MiB) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = rows[0][2]
    for world, mode, r in rows:
        if "error" in r:
            print("| %d | %s | refused or failed: %s | | | | |" % (world, mode, r["error"]))
            continue
        state = max(s for s, _ in r["ranks"])
        rss = max(x for _, x in r["ranks"])
        print("| %d | %s | %.1f | %.2fx | %.2f | %.3f | %.0f |" % (
            world, mode, r["img_s"], r["img_s"] / base["img_s"], state / 2**20,
            state / base["ranks"][0][0], rss))
    sys.stdout.flush()
    if a.only != "scaling":
        with tempfile.TemporaryDirectory() as tmp:
            ddp_table(worker, a.steps, a.rounds, tmp)


if __name__ == "__main__":
    main()
