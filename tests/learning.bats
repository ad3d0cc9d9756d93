#!/usr/bin/env bats
# tests/learning.bats - the engine learns: fmnist_tiny trained for 600 steps
# (batch 128, about 1.3 epochs, no augmentation, lr 3e-3 cosine) on Fashion-
# MNIST reaches at least 80% test accuracy (a broken model stays near 10%;
# seen: 0.83-0.85); the exported safetensors file, loaded by timm's parameter
# names into the PyTorch model (tests/ref/torch_vit.py), gives the same test
# accuracy; model.init starts training from such a file; and the bf16-mixed
# recipe with activation checkpointing learns as well.

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
  run /usr/bin/python3 tests/ref/eval_export.py --weights "$LTMP/model.safetensors" --heads 4 \
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
