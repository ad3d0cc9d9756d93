#!/usr/bin/env bats
# tests/learning.bats - the engine learns: fmnist_tiny trained for 600 steps
# (batch 128, about 1.3 epochs, no augmentation, lr 3e-3 cosine) on Fashion-
# MNIST reaches at least 80% test accuracy (a broken model stays near 10%;
# seen: 0.83-0.85); the exported safetensors file, loaded by timm's parameter
# names into the PyTorch model (tests/ref/torch_vit.py), gives the same test
# accuracy; model.init starts training from such a file; and the bf16-mixed
# recipe with activation checkpointing learns as well; and the same images as
# JPEG webdataset shards and as an image folder learn as well as the IDX files.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=600}"

setup_file() {
  export BUILD=${BUILD:-build}
  export WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  export LTMP=$(mktemp -d)
  "$WORKER" train --set training.steps=600 --set training.optimizer.warmupSteps=50 \
    --set training.optimizer.lr=3e-3 --set data.augment=false --set training.logInterval=100 \
    --set training.exportPath="$LTMP/model.safetensors" > "$LTMP/summary.json" 2> "$LTMP/log"
  echo $? > "$LTMP/rc"
}

teardown_file() { rm -rf "$LTMP"; }

accuracy() { sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p' "$1"; }

@test "fmnist_tiny reaches at least 80% test accuracy in 600 steps" {
  [ "$(cat "$LTMP/rc")" -eq 0 ]
  acc=$(accuracy "$LTMP/summary.json")
  echo "test accuracy: $acc"
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.80) }'
}

@test "the exported weights load into the timm-architecture PyTorch model with the same accuracy" {
  acc=$(accuracy "$LTMP/summary.json")
  run /usr/bin/python3 -m tests.ref.eval_export --weights "$LTMP/model.safetensors" --heads 4 \
    --expect "$acc" --tol 0.002
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"accuracy="* ]]
}

@test "model.init starts from an exported file (one near-zero-lr step keeps its accuracy)" {
  acc=$(accuracy "$LTMP/summary.json")
  run "$WORKER" train --set model.init="$LTMP/model.safetensors" --set training.steps=1 \
    --set training.optimizer.warmupSteps=0 --set training.optimizer.lr=1e-9 \
    --set training.optimizer.weightDecay=0 --set training.exportPath=
  [ "$status" -eq 0 ]
  [[ "$output" == *"event=init_loaded"* ]]
  got=$(echo "$output" | sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p')
  echo "trained $acc, restarted $got"
  awk -v a="$acc" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.002) }'
}

@test "bf16-mixed with activation checkpointing (the CPU's emulation of the GPU recipe) also reaches 80% in 600 steps" {
  run "$WORKER" train --set training.device=cpu --set training.precision=bf16-mixed \
    --set training.activationCheckpointing=true --set training.steps=600 \
    --set training.optimizer.warmupSteps=50 --set training.optimizer.lr=3e-3 \
    --set data.augment=false --set training.logInterval=100 --set training.exportPath=
  [ "$status" -eq 0 ]
  [[ "$output" == *"event=start backend=cpu-bf16 precision=bf16-mixed activation_checkpointing=1 "* ]]
  acc=$(echo "$output" | sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p')
  echo "bf16-mixed test accuracy: $acc"
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.80) }'
}

# shard_args URI TESTURI: the data keys that read what the IDX run read, in
# the IDX run's normalisation, with no augmentation and no resizing
shard_args() {
  SHARD=(--set "data.uri=$1" --set "data.testUri=$2" --set "data.mean=[0.286]"
         --set "data.std=[0.353]" --set data.cropPct=1 --set data.augment=false
         --set training.steps=600 --set training.optimizer.warmupSteps=50
         --set training.optimizer.lr=3e-3 --set training.logInterval=100 --set training.exportPath=)
}

within_point() { # A B: |A - B| <= 0.01
  echo "IDX $1, here $2"
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }'
}

@test "Fashion-MNIST as JPEG shards (quality 95) trains to the IDX run's test accuracy within 1 point in the same 600 steps" {
  d=$LTMP/shards
  "$WORKER" shards --from /usr/share/datasets/fashion-mnist --out "$d/train-%02d.tar" --format jpeg --quality 95
  "$WORKER" shards --from /usr/share/datasets/fashion-mnist --split t10k --out "$d/test-%02d.tar" --format jpeg --quality 95
  shard_args "file://$d/train-{00..05}.tar" "file://$d/test-00.tar"
  run "$WORKER" train --set data.format=webdataset "${SHARD[@]}"
  [ "$status" -eq 0 ]
  [[ "$output" == *"event=indexed key=data.uri"*"samples=60000"* ]]
  within_point "$(accuracy "$LTMP/summary.json")" "$(echo "$output" | sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p')"
}

@test "the same images as an image folder (PNG, one folder per class) train to the IDX run's accuracy within 1 point" {
  d=$LTMP/folder
  /usr/bin/python3 - "$d" <<'PY'
import gzip, os, sys
from PIL import Image
src, out = "/usr/share/datasets/fashion-mnist", sys.argv[1]
names = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]
# ImageFolder's label is the folder's position in sorted order: "c<k>_..." sorts k-th
for split in ("train", "t10k"):
    img = gzip.open("%s/%s-images-idx3-ubyte.gz" % (src, split)).read()[16:]
    lab = gzip.open("%s/%s-labels-idx1-ubyte.gz" % (src, split)).read()[8:]
    for c in range(10):
        os.makedirs("%s/%s/c%d_%s" % (out, split, c, names[c]), exist_ok=True)
    for i, y in enumerate(lab):
        Image.frombytes("L", (28, 28), img[i * 784:(i + 1) * 784]).save(
            "%s/%s/c%d_%s/%05d.png" % (out, split, y, names[y], i))
PY
  shard_args "$d/train" "$d/t10k"
  run "$WORKER" train --set data.format=imagefolder "${SHARD[@]}"
  [ "$status" -eq 0 ]
  [[ "$output" == *"event=indexed key=data.uri"*"units=60000 samples=60000"* ]]
  within_point "$(accuracy "$LTMP/summary.json")" "$(echo "$output" | sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p')"
}
