#!/usr/bin/python3
"""bench/loader_bench.py - the data pipeline against torchvision (issue 25):
decode + RandomResizedCrop(224) + horizontal flip + normalise, in images/s
and images/s per core, over the same tar shard in the same run.

Owns: making the shard (N JPEGs of ImageNet's typical size, 500x375, a
quarter of them 375x500, quality 90 with PIL's default 4:2:0, about 110 KB
each: smooth gradients, a few hard-edged shapes and noise, from a fixed
seed; kept in BUILD/bench/ and made again only when missing), running
build/bin/loader_bench (bench/loader_bench.c: decode_probe, the JPEG's
region at a fast DCT scale, xf_random_resized_crop, xf_resample_ex) with N
threads, and the peer: torchvision 0.14 + PIL 9.4 (Debian's
python3-torchvision, python3-pil) Compose([RandomResizedCrop(224,
interpolation=the same), RandomHorizontalFlip(), ToTensor(),
Normalize(ImageNet)]) over the same JPEG bytes of the same tar, read by a
torch Dataset, in a DataLoader with num_workers = N, batch 64 (persistent
workers, so that only the first of the repetitions pays their start). Each
throughput is the best of --reps epochs over the whole shard. Per core is
images/s / N for both (the peer's main process, which only receives the
batches, is not counted as a core; its CPU time is, in "CPU ms/image").
Then where the time goes for one thread, in thread CPU time: the C side's
stages (its --profile), the C side decoding whole images instead of
regions, and the peer's PIL decode against its transforms, in one process.
The machine may be shared: beside images/s (wall clock), both sides' CPU
time per image is measured and compared.
Must not: assert anything (a benchmark prints; tests check behaviour).

usage: bench/loader_bench.py [--build build] [--images 2000] [--threads 1,2]
                             [--interp bilinear,bicubic] [--reps 3]
"""
import argparse
import io
import os
import re
import subprocess
import sys
import tarfile
import time

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def make_image(rng, w, h):
    """smooth gradients, a few hard-edged discs and noise: q90 JPEGs of
    about 110 KB at 500x375, as ImageNet's are"""
    import numpy as np
    from PIL import Image
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    base = rng.uniform(40, 200, 3)
    for c in range(3):
        f = np.full((h, w), base[c], np.float32)
        for _ in range(4):
            fx, fy = rng.uniform(-0.05, 0.05, 2)
            f += rng.uniform(10, 40) * np.sin(fx * x + fy * y + rng.uniform(0, 6.3))
        img[..., c] = f
    for _ in range(rng.integers(2, 6)):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(20, 120)
        m = (x - cx) ** 2 + (y - cy) ** 2 < r * r
        img[m] = img[m] * 0.5 + rng.uniform(0, 255, 3) * 0.5
    sigma = rng.uniform(16, 34)
    img += rng.normal(0, sigma, (h, w, 1)) + rng.normal(0, sigma * 0.5, (h, w, 3))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def make_shard(path, n, seed=25):
    import numpy as np
    rng = np.random.default_rng(seed)
    tmp = path + ".tmp"
    sizes = []
    with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(n):
            w, h = (500, 375) if i % 4 else (375, 500)
            b = io.BytesIO()
            make_image(rng, w, h).save(b, "JPEG", quality=90)
            for name, data in ((f"{i:06d}.jpg", b.getvalue()),
                               (f"{i:06d}.cls", str(int(rng.integers(0, 1000))).encode())):
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            sizes.append(len(b.getvalue()))
    os.replace(tmp, path)
    return sizes


def jpeg_members(path):
    """(offset, size) of each .jpg member's data, in order"""
    with tarfile.open(path) as tf:
        return [(m.offset_data, m.size) for m in tf.getmembers() if m.name.endswith(".jpg")]


def peer_transform(interp):
    import torchvision.transforms as T
    mode = {"bilinear": T.InterpolationMode.BILINEAR, "bicubic": T.InterpolationMode.BICUBIC}[interp]
    return T.Compose([T.RandomResizedCrop(224, interpolation=mode), T.RandomHorizontalFlip(),
                      T.ToTensor(), T.Normalize(MEAN, STD)])


def make_dataset_class():
    import torch
    from PIL import Image

    class TarJpegs(torch.utils.data.Dataset):
        """the shard's JPEG bytes (the whole tar read into memory once, as
        the C side does), decoded with PIL and transformed"""

        def __init__(self, path, transform):
            with open(path, "rb") as f:
                self.tar = f.read()
            self.members = jpeg_members(path)
            self.transform = transform

        def __len__(self):
            return len(self.members)

        def __getitem__(self, i):
            off, size = self.members[i]
            img = Image.open(io.BytesIO(self.tar[off:off + size])).convert("RGB")
            return self.transform(img), 0

    return TarJpegs


def proc_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_peer(shard, workers, interp, reps, batch):
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ds = make_dataset_class()(shard, peer_transform(interp))
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, shuffle=False,
                                         persistent_workers=True)
    best, best_cpu = None, None
    it = None
    for rep in range(reps):
        it = iter(loader)
        pids = [w.pid for w in it._workers]
        c0 = time.process_time() + sum(proc_cpu_seconds(p) for p in pids)
        t0 = time.perf_counter()
        n = 0
        for x, _ in it:
            n += x.shape[0]
        dt = time.perf_counter() - t0
        cpu = time.process_time() + sum(proc_cpu_seconds(p) for p in pids) - c0
        print(f"peer: {interp} workers={workers} rep {rep}: {n} images in {dt:.3f} s, "
              f"{n / dt:.1f} images/s, {cpu / n * 1e3:.3f} CPU ms/image", flush=True)
        if best is None or dt < best:
            best, best_cpu = dt, cpu
    del it, loader
    return n / best, best_cpu / n * 1e3


def run_c(build, shard, threads, interp, reps, batch, decode="region", profile=False):
    cmd = [os.path.join(build, "bin", "loader_bench"), shard, "--threads", str(threads),
           "--interp", interp, "--reps", str(reps), "--batch", str(batch), "--decode", decode]
    if profile:
        cmd.append("--profile")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    sys.stdout.write(out)
    res = dict(kv.split("=") for kv in re.search(r"^loader_bench_result (.*)$", out, re.M)
               .group(1).split())
    prof = None
    m = re.search(r"^loader_bench_profile (.*)$", out, re.M)
    if m:
        prof = dict(kv.split("=") for kv in m.group(1).split())
    return float(res["images_per_s"]), float(res["cpu_ms_per_image"]), prof


def peer_profile(shard, interp, n=500):
    """PIL's decode against the transforms, in this process, one thread;
    this thread's CPU time (wall-clock time would count other processes'
    turns on a shared machine)"""
    import torch
    from PIL import Image
    torch.set_num_threads(1)
    with open(shard, "rb") as f:
        tar = f.read()
    members = jpeg_members(shard)[:n]
    tf = peer_transform(interp)
    t_dec = t_tf = 0.0
    for off, size in members:
        t0 = time.thread_time()
        img = Image.open(io.BytesIO(tar[off:off + size])).convert("RGB")
        t1 = time.thread_time()
        tf(img)
        t_tf += time.thread_time() - t1
        t_dec += t1 - t0
    return t_dec / len(members) * 1e3, t_tf / len(members) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--interp", default="bilinear,bicubic")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    interps = args.interp.split(",")

    os.makedirs(os.path.join(args.build, "bench"), exist_ok=True)
    shard = os.path.join(args.build, "bench", f"loader-{args.images}-q90.tar")
    if not os.path.exists(shard):
        t0 = time.time()
        sizes = make_shard(shard, args.images)
        print(f"made {shard}: {len(sizes)} JPEGs, mean {sum(sizes) / len(sizes) / 1000:.1f} KB "
              f"(min {min(sizes) / 1000:.1f}, max {max(sizes) / 1000:.1f}), "
              f"{time.time() - t0:.0f} s", flush=True)
    members = jpeg_members(shard)
    mean_kb = sum(s for _, s in members) / len(members) / 1000
    import PIL
    import torch
    import torchvision
    print(f"shard {shard}: {len(members)} JPEGs, mean {mean_kb:.1f} KB; peer torch "
          f"{torch.__version__}, torchvision {torchvision.__version__}, PIL {PIL.__version__}; "
          f"{os.cpu_count()} CPUs", flush=True)

    rows = []
    for interp in interps:
        for n in threads:
            c_ips, c_cpu, _ = run_c(args.build, shard, n, interp, args.reps, args.batch)
            p_ips, p_cpu = run_peer(shard, n, interp, args.reps, args.batch)
            rows.append((interp, n, c_ips, c_cpu, p_ips, p_cpu))

    profiles = []
    for interp in interps:
        _, _, pr = run_c(args.build, shard, 1, interp, args.reps, args.batch, profile=True)
        full_ips, _, pf = run_c(args.build, shard, 1, interp, args.reps, args.batch,
                                decode="full", profile=True)
        dec, tfm = peer_profile(shard, interp)
        profiles.append((interp, pr, pf, full_ips, dec, tfm))

    print()
    print(f"Decode + RandomResizedCrop(224) + flip + normalise, {len(members)} JPEGs "
          f"(mean {mean_kb:.1f} KB, q90), best of {args.reps}; per core = images/s / N")
    print()
    print("| interp | N | vitjob images/s | per core | CPU ms/image | torchvision images/s "
          "| per core | CPU ms/image | ratio per core | ratio of CPU per image |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for interp, n, c_ips, c_cpu, p_ips, p_cpu in rows:
        print(f"| {interp} | {n} | {c_ips:.0f} | {c_ips / n:.0f} | {c_cpu:.3f} | {p_ips:.0f} "
              f"| {p_ips / n:.0f} | {p_cpu:.3f} | {c_ips / p_ips:.2f}x | {p_cpu / c_cpu:.2f}x |")
    print()
    print("ratio per core: vitjob's images/s over the peer's at the same N; ratio of CPU per "
          "image: the peer's CPU time per image (its workers' and its main process's) over "
          "vitjob's (its process's), the same number on a quiet machine and the one to trust "
          f"on a busy one (load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print()
    print("Where one thread's time goes, CPU ms/image (C: decoding the region vs the whole "
          "image; peer: PIL's decode vs the transforms, in one process, the first 500 images):")
    print()
    print("| interp | C probe+crop | C decode (region) | C resample+normalise | C total "
          "| C decode (whole image) | C total, whole image | region's share of the image "
          "| peer PIL decode | peer transforms | peer total |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for interp, pr, pf, full_ips, dec, tfm in profiles:
        tot = sum(float(pr[k]) for k in ("probe_ms", "decode_ms", "resample_ms", "free_ms"))
        totf = sum(float(pf[k]) for k in ("probe_ms", "decode_ms", "resample_ms", "free_ms"))
        print(f"| {interp} | {float(pr['probe_ms']):.3f} | {float(pr['decode_ms']):.3f} "
              f"| {float(pr['resample_ms']):.3f} | {tot:.3f} | {float(pf['decode_ms']):.3f} "
              f"| {totf:.3f} | {100 * float(pr['region_frac']):.0f}% (scale {float(pr['mean_scale']):.2f}) "
              f"| {dec:.3f} | {tfm:.3f} | {dec + tfm:.3f} |")


if __name__ == "__main__":
    main()
