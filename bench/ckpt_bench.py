#!/usr/bin/env python3
"""bench/ckpt_bench.py - checkpoint throughput for a vit_b16-sized state
(86,567,656 fp32 parameters with AdamW m and v: 991 MiB) through the
worker's own save and restore path (build/bin/ckpt_bench), beside the same
bytes moved by the curl command line in one stream to the same server in
the same run, on S3 (moto's server on loopback, tests/s3/moto_server.py,
signatures checked) and on file:// (beside dd with conv=fsync, which writes
from user memory and syncs as a checkpoint does, and cat of one file).
Each is run --runs times in turns and the medians shown: the disk of a
shared VM varies by 3x from one run to the next.
Also the training stall of a background checkpoint next to its host copy.

Ratios are vitjob / peer (above 1: vitjob is faster). Restore is verify
(every block's CRC, which resume does before it trusts a step) plus load;
load alone is the peer's equal.
Must not: assert anything (a benchmark prints).
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def kv(text):
    return {k: v for k, v in re.findall(r"(\w+)=(\S+)", text)}


def timed(cmd, **kw):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, **kw)
    return time.monotonic() - t0


def start_moto(tmp):
    env_out = os.path.join(tmp, "s3.env")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests/s3/moto_server.py"),
                             "--port", "0", "--env-out", env_out, "--bucket", "vitjob-bench"],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "moto.log"), "w"))
    for _ in range(300):
        if os.path.exists(env_out) and os.path.getsize(env_out) > 0:
            break
        if proc.poll() is not None:
            raise RuntimeError("moto did not start: " + open(os.path.join(tmp, "moto.log")).read()[-400:])
        time.sleep(0.1)
    env = {}
    for line in open(env_out):
        k, _, v = line.strip().partition("=")
        if k:
            env[k] = v
    return proc, env


def row(name, mib, ours_s, peer_name, peer_s):
    ours, peer = mib / ours_s, mib / peer_s
    print("| %-28s | %8.1f | %-30s | %8.1f | %5.2f |" % (name, ours, peer_name, peer, ours / peer))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--params", type=int, default=86567656)
    ap.add_argument("--runs", type=int, default=3, help="runs of each, in turns; medians shown")
    a = ap.parse_args()
    bench = os.path.join(a.build, "bin", "ckpt_bench")
    try:
        import moto  # noqa: F401
        have_moto = shutil.which("curl") is not None
    except ImportError:
        have_moto = False
    tmp = tempfile.mkdtemp(prefix="ckpt-bench-")
    moto_proc = None
    try:
        nbytes = a.params * 12
        mib = nbytes / 2**20
        raw = os.path.join(tmp, "raw.bin")
        with open(raw, "wb") as f:
            for _ in range(0, nbytes, 64 << 20):
                f.write(os.urandom(min(64 << 20, nbytes - f.tell())))
        print("\n## Checkpoint save and restore: %d parameters x 12 bytes = %.0f MiB, one rank\n"
              % (a.params, mib))
        print("| vitjob | MiB/s | peer (same bytes, same run) | MiB/s | ratio |")
        print("|---|---:|---|---:|---:|")
        stalls = []
        runs = a.runs

        def median(xs):
            return sorted(xs)[len(xs) // 2]

        # file://: ours and the peer taken in turns, the median of each
        ours, dd, cat = [], [], []
        for _ in range(runs):
            out = subprocess.run([bench, "--uri", "file://" + os.path.join(tmp, "ck"),
                                  "--params", str(a.params)], check=True, capture_output=True,
                                 text=True).stdout
            ours.append(kv(out))
            shutil.rmtree(os.path.join(tmp, "ck"), ignore_errors=True)
            copy = os.path.join(tmp, "copy.bin")
            subprocess.run(["cat", raw], check=True, stdout=subprocess.DEVNULL)  # source cached
            dd.append(timed(["dd", "if=" + raw, "of=" + copy, "bs=64M", "conv=fsync",
                             "status=none"]))
            cat.append(timed(["cat", copy], stdout=subprocess.DEVNULL))
            os.unlink(copy)
        f = {k: median([float(d[k]) for d in ours]) for k in ("save_s", "load_s", "restore_s",
                                                                "stall_s", "copy_s", "first_stall_s")}
        row("file:// save", mib, f["save_s"], "dd bs=64M conv=fsync", median(dd))
        row("file:// load", mib, f["load_s"], "cat", median(cat))
        row("file:// restore (verify+load)", mib, f["restore_s"], "cat", median(cat))
        stalls.append(("file://", f))
        # s3://
        if have_moto:
            moto_proc, env = start_moto(tmp)
            ep = env["S3_ENDPOINT"]
            cenv = dict(os.environ, **env)
            curl = ["curl", "-sS", "--fail", "--aws-sigv4", "aws:amz:%s:s3" % env.get("AWS_REGION", "us-east-1"),
                    "--user", "%s:%s" % (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]),
                    "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
            url = ep + "/vitjob-bench/raw.bin"
            ours, put, get = [], [], []
            for i in range(runs):
                out = subprocess.run([bench, "--uri", "s3://vitjob-bench/ck%d" % i, "--endpoint", ep,
                                      "--params", str(a.params)], check=True, capture_output=True,
                                     text=True, env=cenv).stdout
                ours.append(kv(out))
                put.append(timed(curl + ["-T", raw, url], stdout=subprocess.DEVNULL))
                get.append(timed(curl + ["-o", "/dev/null", url]))
            s = {k: median([float(d[k]) for d in ours]) for k in ("save_s", "load_s", "restore_s",
                                                                    "stall_s", "copy_s", "first_stall_s")}
            row("s3:// save", mib, s["save_s"], "curl PUT, one stream", median(put))
            row("s3:// load", mib, s["load_s"], "curl GET, one stream", median(get))
            row("s3:// restore (verify+load)", mib, s["restore_s"], "curl GET, one stream", median(get))
            stalls.append(("s3://", s))
        else:
            print("| s3:// | - | skipped: no moto or no curl here | - | - |")
        print("\n## The training stall of a background checkpoint (same state)\n")
        print("| store | stall: ckpt_save held training (s) | host copy alone (s) | "
              "stall - copy (s) | whole save (s) |")
        print("|---|---:|---:|---:|---:|")
        for name, d in stalls:
            st, cpy = float(d["stall_s"]), float(d["copy_s"])
            print("| %s | %.4f | %.4f | %.4f | %.3f |" % (name, st, cpy, st - cpy, float(d["save_s"])))
        print("\nThe second checkpoint of a run, timed above, reuses the host buffer that the first "
              "one mapped; the first's stall (page faults included) was %s." %
              ", ".join("%.3f s on %s" % (d["first_stall_s"], n) for n, d in stalls))
    finally:
        if moto_proc:
            moto_proc.send_signal(signal.SIGTERM)
            moto_proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
