#!/usr/bin/env bats
# tests/shardwriter.bats - `vitjob-worker shards` end to end
# (worker/data/shardwriter.c, worker/data/encode.c), read back by
# independent tools: Python's tarfile and PIL (/usr/bin/python3) and boto3.
# Fashion-MNIST (Debian's copy) becomes JPEG and PNG shards whose every
# sample has one image and one .cls, with the IDX's counts and labels and
# its pixels (PNG exactly, JPEG q95 within 16 per pixel and 1.6 on average
# per image); the same command twice gives byte-identical shards;
# --samples-per-shard and --shard-bytes cut as stated; an image folder made
# with PIL gives the keys, the labels in bytewise class order and the
# files' own bytes; refusals name the path or pattern with the documented
# exit code; and shards written to S3 (moto's server, signatures checked)
# are the bytes of the file output.
#
# BUILD (default build) points at the build tree; WORKER may override the
# binary (the ASan run uses build/asan). FMNIST: the IDX files' directory.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

setup_file() {
  export S3PY=${VITJOB_TEST_PYTHON:-python3}
  if ! "$S3PY" -c 'import moto, boto3' 2>/dev/null; then
    export S3_SKIP="no moto and boto3 in $S3PY (set VITJOB_TEST_PYTHON)"
    return 0
  fi
  "$S3PY" "$BATS_TEST_DIRNAME/s3/moto_server.py" --port 0 --env-out "$BATS_FILE_TMPDIR/s3.env" \
    --bucket vitjob-shards > "$BATS_FILE_TMPDIR/moto.log" 2>&1 3>&- &
  echo $! > "$BATS_FILE_TMPDIR/moto.pid"
  for _ in $(seq 1 300); do [ -s "$BATS_FILE_TMPDIR/s3.env" ] && break; sleep 0.1; done
  [ -s "$BATS_FILE_TMPDIR/s3.env" ] || { cat "$BATS_FILE_TMPDIR/moto.log"; return 1; }
}

teardown_file() {
  [ -f "$BATS_FILE_TMPDIR/moto.pid" ] && kill "$(cat "$BATS_FILE_TMPDIR/moto.pid")" 2>/dev/null
  return 0
}

setup() {
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
  PY=/usr/bin/python3
  TMP=$(mktemp -d)
}

teardown() { rm -rf "$TMP"; }

need_fmnist() {
  [ -f "$FMNIST/t10k-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST in $FMNIST (scripts/deps.sh installs it)"
}

# check_idx DIR SPLIT FORMAT MAXDIFF MEANDIFF SHARD...: every sample of the
# shards has one image of FORMAT and one .cls; the keys are the split's
# indices, each once; the labels are the IDX's; decoded by PIL, every pixel
# is within MAXDIFF of the IDX's and each image's mean difference within
# MEANDIFF (MAXDIFF -1: labels only, no decoding).
check_idx() {
  "$PY" - "$@" <<'EOF'
import gzip, io, sys, tarfile
import numpy as np
from PIL import Image
d, split, fmt, maxd, meand, shards = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6:]
def idx(name, off):
    with open(f"{d}/{split}-{name}", "rb") as f:
        raw = f.read()
    return np.frombuffer(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw, np.uint8)[off:]
images = idx("images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
labels = idx("labels-idx1-ubyte.gz", 8)
seen = np.zeros(len(labels), bool)
worst = worst_mean = 0
for shard in shards:
    samples = {}
    order = []
    with tarfile.open(shard) as t:
        for m in t.getmembers():
            assert m.isfile() and m.mode == 0o644 and m.mtime == 0 and m.uid == 0, m.name
            key, ext = m.name.split(".", 1)
            if key not in samples:
                order.append(key)
                samples[key] = {}
            assert ext not in samples[key], f"{shard}: {m.name} twice"
            samples[key][ext] = t.extractfile(m).read()
    for key in order:
        s = samples[key]
        assert sorted(s) == ["cls", fmt], f"{shard}: {key} has {sorted(s)}"
        i = int(key)
        assert key == "%06d" % i and not seen[i], f"{shard}: key {key}"
        seen[i] = True
        assert s["cls"] == str(labels[i]).encode(), f"{key}: label {s['cls']} != {labels[i]}"
        if maxd < 0:
            continue
        im = Image.open(io.BytesIO(s[fmt]))
        assert im.format == {"jpg": "JPEG", "png": "PNG"}[fmt] and im.mode == "L", (im.format, im.mode)
        diff = np.abs(np.asarray(im, np.int16) - images[i])
        worst, worst_mean = max(worst, int(diff.max())), max(worst_mean, float(diff.mean()))
assert seen.all(), f"{int((~seen).sum())} samples missing"
assert maxd < 0 or (worst <= maxd and worst_mean <= meand), \
    f"pixels off by up to {worst}, {worst_mean:.3f} on average"
print(f"{len(labels)} samples; pixels off by up to {worst}, on average by {worst_mean:.3f} at worst")
EOF
}

@test "shards --help prints its usage; without --from and --out it exits 2 saying so" {
  run "$WORKER" shards --help
  [ "$status" -eq 0 ]
  [[ "$output" == *"usage: vitjob-worker shards --from SRC --out PATTERN"* ]]
  [[ "$output" == *"--shard-bytes SIZE"* ]]
  run "$WORKER" --help
  [[ "$output" == *"vitjob-worker shards --from SRC --out PATTERN"* ]]
  run "$WORKER" shards --out "$TMP/s-%d.tar"
  [ "$status" -eq 2 ]
  [[ "$output" == *"--from SRC and --out PATTERN are required"* ]]
}

@test "Fashion-MNIST to JPEG shards: every sample one .jpg and one .cls, the IDX's labels, pixels within 16 of the IDX's" {
  need_fmnist
  run "$WORKER" shards --from "$FMNIST" --split t10k --out "$TMP/jpg/test-%06d.tar" --samples-per-shard 4000
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [[ "$output" == *"data.uri: $TMP/jpg/test-{000000..000002}.tar"* ]]
  [[ "$output" == *"model.numClasses: 10"* ]]
  [[ "$output" == *"total: 3 shards, 10000 samples"* ]]
  run check_idx "$FMNIST" t10k jpg 16 1.6 "$TMP"/jpg/test-00000{0,1,2}.tar
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "Fashion-MNIST to PNG shards: PIL decodes every image to the IDX's pixels exactly" {
  need_fmnist
  run "$WORKER" shards --from "file://$FMNIST" --split t10k --format png --out "file://$TMP/png/test-%02d.tar"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [[ "$output" == *"data.uri: file://$TMP/png/test-{00..00}.tar"* ]]
  run check_idx "$FMNIST" t10k png 0 0 "$TMP/png/test-00.tar"
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "the training split in the default shards of 10000: 6 shards, the IDX's 60000 labels" {
  need_fmnist
  run "$WORKER" shards --from "$FMNIST" --out "$TMP/train-%06d.tar"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [ "$(grep -c '^wrote .*: 10000 samples, ' <<< "$output")" -eq 6 ]
  [[ "$output" == *"data.uri: $TMP/train-{000000..000005}.tar"* ]]
  run check_idx "$FMNIST" train jpg -1 0 "$TMP"/train-00000{0..5}.tar
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "the same command twice gives byte-identical shards (JPEG and PNG); another seed another order" {
  need_fmnist
  for f in jpeg png; do
    for run in a b; do
      "$WORKER" shards --from "$FMNIST" --split t10k --format "$f" --samples-per-shard 3000 \
        --shuffle-seed 5 --out "$TMP/$f$run/s-%03d.tar" > /dev/null 2>&1
    done
    [ "$(ls "$TMP/${f}a" | wc -l)" -eq 4 ]
    for s in "$TMP/${f}a"/*.tar; do cmp "$s" "$TMP/${f}b/$(basename "$s")"; done
  done
  "$WORKER" shards --from "$FMNIST" --split t10k --samples-per-shard 3000 --out "$TMP/c/s-%03d.tar" 2>/dev/null
  ! cmp -s "$TMP/jpega/s-000.tar" "$TMP/c/s-000.tar"
}

@test "the JPEGs are the bytes PIL's save(quality=95) writes, where PIL has the same libjpeg-turbo" {
  need_fmnist
  local a b
  a=$(dpkg-query -W -f='${Version}' libjpeg62-turbo 2>/dev/null) || true
  b=$(dpkg-query -W -f='${Version}' libturbojpeg0 2>/dev/null) || true
  [ -n "$a" ] && [ "$a" = "$b" ] || skip "PIL's libjpeg ($a) is not TurboJPEG's ($b)"
  "$WORKER" shards --from "$FMNIST" --split t10k --out "$TMP/s-%d.tar" 2>/dev/null
  run "$PY" - "$FMNIST" "$TMP/s-0.tar" <<'EOF'
import gzip, io, sys, tarfile
import numpy as np
from PIL import Image
images = np.frombuffer(gzip.open(sys.argv[1] + "/t10k-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 28, 28)
n = 0
with tarfile.open(sys.argv[2]) as t:
    for m in t.getmembers():
        if m.name.endswith(".jpg"):
            out = io.BytesIO()
            Image.fromarray(images[int(m.name[:6])]).save(out, "JPEG", quality=95)
            assert out.getvalue() == t.extractfile(m).read(), m.name
            n += 1
print(n, "JPEGs as PIL writes them")
EOF
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == "10000 JPEGs as PIL writes them" ]]
}

@test "--samples-per-shard and --shard-bytes cut as stated" {
  need_fmnist
  run "$WORKER" shards --from "$FMNIST" --split t10k --samples-per-shard 3000 --out "$TMP/n/s-%d.tar"
  [ "$status" -eq 0 ]
  [[ "$output" == *"s-0.tar: 3000 samples"*"s-1.tar: 3000 samples"*"s-2.tar: 3000 samples"*"s-3.tar: 1000 samples"* ]]
  [ ! -e "$TMP/n/s-4.tar" ]
  run "$WORKER" shards --from "$FMNIST" --split t10k --shard-bytes 1M --out "$TMP/b/s-%02d.tar"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  # every shard at most 1000000 bytes, and each closed only when its next
  # sample would not have fitted; together every sample
  run "$PY" - "$TMP/b" <<'EOF'
import glob, os, sys, tarfile
shards = sorted(glob.glob(sys.argv[1] + "/s-*.tar"))
total = 0
for i, s in enumerate(shards):
    size = os.path.getsize(s)
    assert size <= 1000000, (s, size)
    with tarfile.open(s) as t:
        total += sum(m.name.endswith(".cls") for m in t.getmembers())
    if i + 1 < len(shards):
        with tarfile.open(shards[i + 1]) as t:
            first = sum(512 + (m.size + 511) // 512 * 512 for m in t.getmembers()[:2])
        assert size + first > 1000000, (s, size, first)
assert total == 10000, total
print(len(shards))
EOF
  echo "$output"
  [ "$status" -eq 0 ]
  [ "${lines[0]}" -gt 20 ]
  run "$WORKER" shards --from "$FMNIST" --split t10k --shard-bytes 1.5M --out "$TMP/x/s-%d.tar"
  [ "$status" -eq 2 ]
  [[ "$output" == *"--shard-bytes '1.5M'"* ]]
}

# an image folder made with PIL: classes Dog, cat, n02 (bytewise order),
# JPEG and PNG files in mixed case, a nested folder, a dot in a stem, and
# two files that are not images
make_folder() {
  "$PY" - "$1" <<'EOF'
import os, sys
from PIL import Image
root = sys.argv[1]
files = {"cat/a.jpg": "JPEG", "cat/b.png": "PNG", "cat/x.y.jpg": "JPEG", "Dog/d1.JPEG": "JPEG",
         "Dog/d2.Png": "PNG", "n02/img_1.jpeg": "JPEG", "n02/sub/deeper/img_2.png": "PNG"}
for i, (rel, fmt) in enumerate(sorted(files.items())):
    os.makedirs(os.path.dirname(f"{root}/{rel}"), exist_ok=True)
    im = Image.new("RGB", (20 + 3 * i, 16 + i), (40 * i % 256, 90, 200 - 20 * i))
    im.save(f"{root}/{rel}", fmt, **({"quality": 80} if fmt == "JPEG" else {}))
with open(f"{root}/cat/notes.txt", "w") as f:
    f.write("not an image\n")
with open(f"{root}/LICENSE", "w") as f:
    f.write("beside the class folders\n")
EOF
}

@test "an image folder: keys <class>/<stem>, labels in bytewise class order, the files' own bytes" {
  make_folder "$TMP/img"
  run "$WORKER" shards --from "$TMP/img" --out "$TMP/out/s-%06d.tar" --samples-per-shard 3 --shuffle-seed 3
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [[ "$output" == *"total: 3 shards, 7 samples"*"; 2 files skipped"* ]]
  [[ "$output" == *$'model.numClasses: 3\nclasses:\n  0: Dog\n  1: cat\n  2: n02'* ]]
  run "$PY" - "$TMP/img" "$TMP"/out/s-00000{0,1,2}.tar <<'EOF'
import io, sys, tarfile
from PIL import Image
root, shards = sys.argv[1], sys.argv[2:]
want = {"Dog/d1": ("Dog/d1.JPEG", 0), "Dog/d2": ("Dog/d2.Png", 0), "cat/a": ("cat/a.jpg", 1),
        "cat/b": ("cat/b.png", 1), "cat/x_y": ("cat/x.y.jpg", 1), "n02/img_1": ("n02/img_1.jpeg", 2),
        "n02/sub/deeper/img_2": ("n02/sub/deeper/img_2.png", 2)}
got = {}
for s in shards:
    with tarfile.open(s) as t:
        for m in t.getmembers():
            # webdataset's key: the path up to the first dot of the basename
            head, _, base = m.name.rpartition("/")
            stem, ext = base.split(".", 1)
            key = f"{head}/{stem}"
            got.setdefault(key, {})[ext] = t.extractfile(m).read()
assert sorted(got) == sorted(want), sorted(got)
for key, (rel, label) in want.items():
    ext = rel.rsplit(".", 1)[1].lower()
    assert sorted(got[key]) == sorted(["cls", ext]), (key, sorted(got[key]))
    assert got[key]["cls"] == str(label).encode(), (key, got[key]["cls"])
    with open(f"{root}/{rel}", "rb") as f:
        assert got[key][ext] == f.read(), f"{key}: not the bytes of {rel}"
    Image.open(io.BytesIO(got[key][ext])).load()
print("ok")
EOF
  echo "$output"
  [ "$status" -eq 0 ]
  # shuffled: the shards do not hold the classes in order
  run "$PY" -c 'import sys, tarfile; print(" ".join(m.name for m in tarfile.open(sys.argv[1]).getmembers() if m.name.endswith(".cls")))' "$TMP/out/s-000000.tar"
  [ "$output" != "Dog/d1.cls Dog/d2.cls cat/a.cls" ]
}

@test "an image that cannot be decoded stops the run with exit 3 naming it and its fault; --skip-bad skips and counts it" {
  make_folder "$TMP/img"
  # cat/b.png cut to half its bytes, Dog/d1.JPEG with its header's bytes flipped
  "$PY" - "$TMP/img" <<'EOF'
import sys
root = sys.argv[1]
b = open(f"{root}/cat/b.png", "rb").read()
open(f"{root}/cat/b.png", "wb").write(b[: len(b) // 2])
j = bytearray(open(f"{root}/Dog/d1.JPEG", "rb").read())
j[4:40] = bytes(x ^ 0xFF for x in j[4:40])
open(f"{root}/Dog/d1.JPEG", "wb").write(bytes(j))
EOF
  run "$WORKER" shards --from "$TMP/img" --out "$TMP/out/s-%06d.tar" --no-shuffle
  echo "$output"
  [ "$status" -eq 3 ]
  # bytewise order: Dog/d1.JPEG is the first image
  [[ "$output" == *"image file cannot be decoded ("*"): $TMP/img/Dog/d1.JPEG; --skip-bad leaves out"* ]]
  [[ "$output" != *".c:"* ]]
  rm "$TMP/img/Dog/d1.JPEG"
  run "$WORKER" shards --from "$TMP/img" --out "$TMP/out/s-%06d.tar"
  [ "$status" -eq 3 ]
  [[ "$output" == *"image file is truncated: $TMP/img/cat/b.png"* ]]
  run "$WORKER" shards --from "$TMP/img" --out "$TMP/out/s-%06d.tar" --skip-bad
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"total: 1 shards, 5 samples"*"; 3 files skipped (1 could not be decoded)"* ]]
  [[ "$output" == *"event=skipped path=$TMP/img/cat/b.png reason=\"image file is truncated: "* ]]
  run "$PY" -c 'import sys, tarfile; print(" ".join(m.name for m in tarfile.open(sys.argv[1]).getmembers()))' "$TMP/out/s-000000.tar"
  [[ "$output" != *"cat/b."* ]]
  # --help tells of it
  run "$WORKER" shards --help
  [[ "$output" == *"[--skip-bad]"* ]]
}

@test "refusals name what is wrong: a missing SRC (3), a pattern without %d (2), an empty folder (3), an unwritable output (2), IDX options for a folder (2)" {
  run "$WORKER" shards --from "$TMP/nowhere" --out "$TMP/s-%d.tar"
  [ "$status" -eq 3 ]
  [[ "$output" == *"$TMP/nowhere: No such file or directory"* ]]
  mkdir "$TMP/empty"
  run "$WORKER" shards --from "$TMP/empty" --out "$TMP/s.tar"
  [ "$status" -eq 2 ]
  [[ "$output" == *"--out $TMP/s.tar: no shard number"* ]]
  run "$WORKER" shards --from "$TMP/empty" --out "$TMP/s-%d.tar"
  [ "$status" -eq 3 ]
  [[ "$output" == *"$TMP/empty: an empty data set"* ]]
  mkdir -p "$TMP/img/cat" && touch "$TMP/img/cat/readme.txt"
  run "$WORKER" shards --from "$TMP/img" --out "$TMP/s-%d.tar"
  [ "$status" -eq 3 ]
  [[ "$output" == *"$TMP/img/cat: a class folder with no .jpg, .jpeg or .png files"* ]]
  make_folder "$TMP/ok"
  touch "$TMP/file"
  run "$WORKER" shards --from "$TMP/ok" --out "$TMP/file/s-%d.tar"
  [ "$status" -eq 2 ]
  [[ "$output" == *"$TMP/file"* ]]
  run "$WORKER" shards --from "$TMP/ok" --out "$TMP/o/s-%d.tar" --format png
  [ "$status" -eq 2 ]
  [[ "$output" == *"is an image folder"*"--format"* ]]
  [ ! -e "$TMP/o/s-0.tar" ]
}

@test "S3: the shards written to moto are the bytes of the file output; a missing bucket exits 2 naming the URI" {
  [ -z "${S3_SKIP:-}" ] || skip "$S3_SKIP"
  need_fmnist
  set -a; . "$BATS_FILE_TMPDIR/s3.env"; set +a
  local args=(--from "$FMNIST" --split t10k --format png --samples-per-shard 4000)
  run "$WORKER" shards "${args[@]}" --out "s3://vitjob-shards/fm/test-%06d.tar" --endpoint "$S3_ENDPOINT"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [[ "$output" == *"data.uri: s3://vitjob-shards/fm/test-{000000..000002}.tar"* ]]
  "$WORKER" shards "${args[@]}" --out "$TMP/test-%06d.tar" 2>/dev/null >/dev/null
  run "$S3PY" "$BATS_TEST_DIRNAME/s3/s3ctl.py" readall s3://vitjob-shards/fm/
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  local want
  want=$(cd "$TMP" && for f in test-*.tar; do echo "$f $(stat -c %s "$f") $(sha256sum < "$f" | cut -d' ' -f1)"; done)
  [ "$output" = "$want" ] || { echo "s3: $output"; echo "file: $want"; false; }
  run "$WORKER" shards "${args[@]}" --out "s3://no-such-bucket/x-%d.tar" --endpoint "$S3_ENDPOINT"
  [ "$status" -eq 2 ]
  [[ "$output" == *"s3://no-such-bucket/x-0.tar"* ]]
}
