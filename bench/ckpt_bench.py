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

Ratios are vitjob / peer (above 1: vitjob is faster). Saves are timed as
the second of two back to back, ours and the peer's alike (the first of
ours maps the host buffer; and a shared VM's disk writes the second
gigabyte of a burst slower than the first). Restore is what a resume does:
list, read the manifest, then read the state once, checking every block's
CRC as it arrives; on file:// it starts from a cold page cache where this
process may drop it (root), as a restarted pod on another node would, and
so does the peer's cat. The full verifying pass that `vitjob-worker
checkpoints` and `export` make over every block is printed below the
tables.
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
    print("| %-34s | %8.1f | %-34s | %8.1f | %5.2f |" % (name, ours, peer_name, peer, ours / peer))


def can_drop_caches():
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
        return True
    except OSError:
        return False


def drop_caches(cold):
    """The page cache emptied (a restore on a fresh node reads the disk)."""
    if cold:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")


def run_ours(bench, args, cold, env=None):
    """One ckpt_bench run: two saves, then (after the caches are dropped,
    when cold) the restore. Its key=value lines."""
    p = subprocess.Popen([bench, "--pause"] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=env)
    first = p.stdout.readline()
    if first.strip() != "saved":
        p.kill()
        raise RuntimeError("ckpt_bench: " + first)
    drop_caches(cold)
    out, _ = p.communicate("go\n")
    if p.returncode != 0:
        raise RuntimeError("ckpt_bench failed (%d)" % p.returncode)
    return kv(out)


def median(xs):
    return sorted(xs)[len(xs) // 2]


KEYS = ("save_s", "load_s", "find_s", "verify_s", "stall_s", "copy_s", "first_stall_s")


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
    cold = can_drop_caches()
    tmp = tempfile.mkdtemp(prefix="ckpt-bench-")
    moto_proc = None
    try:
        nbytes = a.params * 12
        mib = nbytes / 2**20
        raw = os.path.join(tmp, "raw.bin")
        with open(raw, "wb") as f:
            for _ in range(0, nbytes, 64 << 20):
                f.write(os.urandom(min(64 << 20, nbytes - f.tell())))
        cache = "cold page cache (dropped before each read)" if cold else \
            "warm page cache (cannot drop it here: not root)"
        print("\n## Checkpoint save and restore: %d parameters x 12 bytes = %.0f MiB, one rank\n"
              % (a.params, mib))
        print("Saves: the second of two back to back, for ours and the peer alike. "
              "Restores on file://: %s.\n" % cache)
        print("| vitjob | MiB/s | peer (same bytes, same run) | MiB/s | ratio |")
        print("|---|---:|---|---:|---:|")
        stalls = []
        runs = a.runs

        # file://: ours and the peer taken in turns, the median of each
        ours, dd, cat = [], [], []
        for _ in range(runs):
            ours.append(run_ours(bench, ["--uri", "file://" + os.path.join(tmp, "ck"),
                                         "--params", str(a.params)], cold))
            shutil.rmtree(os.path.join(tmp, "ck"), ignore_errors=True)
            copies = [os.path.join(tmp, "copy%d.bin" % i) for i in (1, 2)]
            subprocess.run(["cat", raw], check=True, stdout=subprocess.DEVNULL)  # source cached
            for i, c in enumerate(copies):
                t = timed(["dd", "if=" + raw, "of=" + c, "bs=64M", "conv=fsync", "status=none"])
            dd.append(t)
            drop_caches(cold)
            cat.append(timed(["cat", copies[1]], stdout=subprocess.DEVNULL))
            for c in copies:
                os.unlink(c)
        f = {k: median([float(d[k]) for d in ours]) for k in KEYS}
        row("file:// save", mib, f["save_s"], "dd bs=64M conv=fsync", median(dd))
        row("file:// restore (find + load)", mib, f["find_s"] + f["load_s"], "cat", median(cat))
        stalls.append(("file://", f))
        # s3://
        if have_moto:
            moto_proc, env = start_moto(tmp)
            ep = env["S3_ENDPOINT"]
            cenv = dict(os.environ, **env)
            curl = ["curl", "-sS", "--fail", "--aws-sigv4", "aws:amz:%s:s3" % env.get("AWS_REGION", "us-east-1"),
                    "--user", "%s:%s" % (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]),
                    "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
            ours, put, get = [], [], []
            for i in range(runs):
                ours.append(run_ours(bench, ["--uri", "s3://vitjob-bench/ck%d" % i, "--endpoint", ep,
                                             "--params", str(a.params)], False, cenv))
                urls = [ep + "/vitjob-bench/raw%d-%d.bin" % (i, k) for k in (1, 2)]
                for u in urls:
                    t = timed(curl + ["-T", raw, u], stdout=subprocess.DEVNULL)
                put.append(t)
                get.append(timed(curl + ["-o", "/dev/null", urls[1]]))
            # the same multipart upload by the AWS SDK for Python, parts and
            # threads as ours (s3_options' defaults: 16 MiB, 4 in flight)
            import boto3
            from boto3.s3.transfer import TransferConfig
            b3 = boto3.client("s3", endpoint_url=ep, region_name=env.get("AWS_REGION", "us-east-1"),
                              aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
            tc = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=16 << 20,
                                max_concurrency=4)
            sdk = []
            for i in range(runs):
                for k in (1, 2):
                    t0 = time.monotonic()
                    b3.upload_file(raw, "vitjob-bench", "sdk%d-%d.bin" % (i, k), Config=tc)
                    t = time.monotonic() - t0
                sdk.append(t)
            s = {k: median([float(d[k]) for d in ours]) for k in KEYS}
            row("s3:// save", mib, s["save_s"], "curl PUT, one stream", median(put))
            row("s3:// save (multipart, 16 MiB x 4)", mib, s["save_s"],
                "boto3 upload_file, 16 MiB x 4", median(sdk))
            row("s3:// restore (find + load)", mib, s["find_s"] + s["load_s"], "curl GET, one stream",
                median(get))
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
        print("\nA verifying pass over every block (`vitjob-worker checkpoints`, `export`), "
              "after the restore: %s." % ", ".join("%.1f MiB/s on %s" % (mib / d["verify_s"], n)
                                                  for n, d in stalls))
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
