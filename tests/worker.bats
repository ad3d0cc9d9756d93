#!/usr/bin/env bats
# tests/worker.bats - the vitjob-worker command line, end to end: bad input
# gets a clear message naming the file, key or value and the documented exit
# code (2 config, 3 data); training is deterministic; a small preset learns
# Fashion-MNIST; the exported safetensors file loads into the PyTorch
# (timm-architecture) model and gives the same accuracy.
#
# BUILD (default build) points at the build tree; WORKER may override the
# binary (the ASan run uses build/asan).

setup() {
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  TMP=$(mktemp -d)
  # A fast configuration for the checks that only need the process to run.
  FAST=(--set training.steps=3 --set training.optimizer.warmupSteps=1
        --set training.exportPath= --set training.threads=1)
}

teardown() { rm -rf "$TMP"; }

# Runs the worker; sets $status and $output (stderr merged).
worker() { run "$WORKER" "$@"; }

@test "unknown key in a config file exits 2 naming the file and the key" {
  printf 'training:\n  stpes: 10\n' > "$TMP/c.yaml"
  worker train --config "$TMP/c.yaml"
  [ "$status" -eq 2 ]
  [[ "$output" == *"$TMP/c.yaml"* ]]
  [[ "$output" == *"training.stpes"* ]]
}

@test "wrong type exits 2 naming the key and the value" {
  printf '{"training": {"steps": "ten"}}' > "$TMP/c.json"
  worker train --config "$TMP/c.json"
  [ "$status" -eq 2 ]
  [[ "$output" == *"training.steps"* ]]
  [[ "$output" == *"ten"* ]]
}

@test "out-of-range value exits 2 naming the key, the value and the range" {
  worker train --set training.microBatchSize=0
  [ "$status" -eq 2 ]
  [[ "$output" == *"training.microBatchSize=0"* ]]
  [[ "$output" == *"range"* ]]
}

@test "dim not divisible by heads exits 2 naming both" {
  worker train --set model.dim=100 --set model.heads=3
  [ "$status" -eq 2 ]
  [[ "$output" == *"model.dim=100"* ]]
  [[ "$output" == *"model.heads=3"* ]]
}

@test "image size not divisible by patch size exits 2 naming both" {
  worker train --set model.patchSize=5
  [ "$status" -eq 2 ]
  [[ "$output" == *"model.imageSize=28"* ]]
  [[ "$output" == *"model.patchSize=5"* ]]
}

@test "global batch not divisible by micro batch exits 2 naming both" {
  worker train --set training.globalBatchSize=100 --set training.microBatchSize=64
  [ "$status" -eq 2 ]
  [[ "$output" == *"globalBatchSize=100"* ]]
  [[ "$output" == *"microBatchSize=64"* ]]
}

@test "world size from the environment counts in batch divisibility" {
  VITJOB_REPLICAS=3 worker train --set training.globalBatchSize=128 --set training.microBatchSize=64
  [ "$status" -eq 2 ]
  [[ "$output" == *"globalBatchSize=128"* ]]
}

@test "bad enum value exits 2 listing the allowed values" {
  worker train --set training.precision=fp16
  [ "$status" -eq 2 ]
  [[ "$output" == *"fp16"* ]]
  [[ "$output" == *"bf16-mixed"* ]]
}

@test "missing config file exits 2 naming the file" {
  worker train --config "$TMP/nope.yaml"
  [ "$status" -eq 2 ]
  [[ "$output" == *"$TMP/nope.yaml"* ]]
}

@test "invalid YAML exits 2 with the line" {
  printf 'training:\n  steps: [1,\n' > "$TMP/bad.yaml"
  worker train --config "$TMP/bad.yaml"
  [ "$status" -eq 2 ]
  [[ "$output" == *"$TMP/bad.yaml"* ]]
  [[ "$output" == *"line"* ]]
}

@test "unknown command line argument exits 2" {
  worker train --bogus
  [ "$status" -eq 2 ]
  [[ "$output" == *"--bogus"* ]]
}

# A GPU the driver can see (then the two no-GPU tests below do not apply).
have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }

@test "device cuda without a usable GPU exits 2 with one clear line" {
  if have_gpu; then skip "a GPU is visible here"; fi
  worker train --set training.device=cuda "${FAST[@]}"
  [ "$status" -eq 2 ]
  [[ "$output" == *"training.device=cuda"* ]]
}

@test "device auto without a usable GPU trains on the CPU and logs why" {
  if have_gpu; then skip "a GPU is visible here"; fi
  worker train --set training.device=auto "${FAST[@]}"
  [ "$status" -eq 0 ]
  [[ "$output" == *"event=device device=cpu reason="* ]]
  [[ "$output" == *"event=start backend=cpu "* ]]
}

# A stand-in NVIDIA driver library with nothing in it: the CUDA runtime finds
# libcuda.so.1 but no driver behind it.
fake_driver() {
  echo 'int vitjob_fake_driver;' > "$TMP/f.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$TMP/libcuda.so.1" "$TMP/f.c"
}

@test "device cuda with a driver library but no GPU loads the CUDA plugin, which says why" {
  if have_gpu; then skip "a GPU is visible here"; fi
  [ -f "$(dirname "$WORKER")/../lib/libvitjob_cuda.so" ] || skip "built without nvcc: no CUDA plugin"
  fake_driver
  LD_LIBRARY_PATH=$TMP worker train --set training.device=cuda "${FAST[@]}"
  [ "$status" -eq 2 ]
  [[ "$output" == *"training.device=cuda: no usable CUDA GPU: "* ]]
  [[ "$output" != *"is not installed"* ]] # the plugin answered, not the loader
}

@test "device cuda with a missing CUDA plugin names the file it tried" {
  if have_gpu; then skip "a GPU is visible here"; fi
  fake_driver
  LD_LIBRARY_PATH=$TMP VITJOB_CUDA_BACKEND=$TMP/none.so worker train --set training.device=cuda "${FAST[@]}"
  [ "$status" -eq 2 ]
  [[ "$output" == *"cannot load the CUDA backend $TMP/none.so"* ]]
}

@test "bf16-mixed on the CPU runs the cpu-bf16 backend" {
  worker train --set training.device=cpu --set training.precision=bf16-mixed "${FAST[@]}"
  [ "$status" -eq 0 ]
  [[ "$output" == *"event=start backend=cpu-bf16 precision=bf16-mixed "* ]]
}

@test "missing dataset directory exits 3 naming the file" {
  worker train --set data.uri=file://$TMP/none "${FAST[@]}"
  [ "$status" -eq 3 ]
  [[ "$output" == *"$TMP/none/train-images-idx3-ubyte"* ]]
}

# A copy of the real dataset with one file replaced.
copy_dataset() {
  mkdir -p "$TMP/ds"
  cp /usr/share/datasets/fashion-mnist/*.gz "$TMP/ds/"
}

@test "truncated IDX file exits 3 naming the file" {
  copy_dataset
  gzip -dc /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz | head -c 100000 | gzip > "$TMP/ds/t10k-images-idx3-ubyte.gz"
  worker train --set data.uri=$TMP/ds "${FAST[@]}"
  [ "$status" -eq 3 ]
  [[ "$output" == *"t10k-images-idx3-ubyte.gz"* ]]
  [[ "$output" == *"truncated"* ]]
}

@test "IDX file with the wrong magic exits 3 naming the file and the magic" {
  copy_dataset
  # a labels file where the images should be: magic 0x801, not 0x803
  cp "$TMP/ds/train-labels-idx1-ubyte.gz" "$TMP/ds/train-images-idx3-ubyte.gz"
  worker train --set data.uri=$TMP/ds "${FAST[@]}"
  [ "$status" -eq 3 ]
  [[ "$output" == *"train-images-idx3-ubyte.gz"* ]]
  [[ "$output" == *"magic"* ]]
}

@test "corrupt gzip stream exits 3, never a crash" {
  copy_dataset
  head -c 3000 /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz > "$TMP/ds/train-labels-idx1-ubyte.gz"
  worker train --set data.uri=$TMP/ds "${FAST[@]}"
  [ "$status" -eq 3 ]
  [[ "$output" == *"train-labels-idx1-ubyte.gz"* ]]
}

@test "model.init with a file of another shape exits 2 naming the tensor" {
  worker train "${FAST[@]}" --set training.exportPath=$TMP/w.safetensors
  [ "$status" -eq 0 ]
  worker train "${FAST[@]}" --set model.dim=32 --set model.init=$TMP/w.safetensors
  [ "$status" -eq 2 ]
  [[ "$output" == *"$TMP/w.safetensors"* ]]
  [[ "$output" == *"cls_token"* ]]
}

@test "a whole ViTJob manifest runs as a config file" {
  worker train --config examples/fmnist.yaml "${FAST[@]}"
  [ "$status" -eq 0 ]
  [[ "$output" == *'"event":"summary"'* ]]
}

@test "two runs with the same config and seed give bit-identical loss trajectories" {
  args=(--set training.steps=12 --set training.optimizer.warmupSteps=2 --set training.exportPath=
        --set training.threads=2 --set data.augment=true)
  "$WORKER" train "${args[@]}" --metrics "$TMP/a.jsonl" 2>/dev/null >/dev/null
  "$WORKER" train "${args[@]}" --metrics "$TMP/b.jsonl" 2>/dev/null >/dev/null
  # loss, lr and grad norm of every step, printed with 17 significant digits (exact doubles)
  # (the eval lines carry wall-clock seconds, so they are left out)
  for f in a b; do grep '"loss"' "$TMP/$f.jsonl" > "$TMP/$f.loss"; done
  [ "$(wc -l < "$TMP/a.loss")" -eq 12 ]
  cmp "$TMP/a.loss" "$TMP/b.loss"
  # and another seed gives another trajectory (the check can fail)
  "$WORKER" train "${args[@]}" --set training.seed=7 --metrics "$TMP/c.jsonl" 2>/dev/null >/dev/null
  grep '"loss"' "$TMP/c.jsonl" > "$TMP/c.loss"
  ! cmp -s "$TMP/a.loss" "$TMP/c.loss"
}

@test "SIGTERM stops training with a retryable exit code" {
  "$WORKER" train --set training.steps=100000 --set training.threads=1 --set training.exportPath= 2>"$TMP/log" &
  pid=$!
  sleep 2
  kill -TERM $pid
  wait $pid && st=0 || st=$?
  [ "$st" -ne 0 ] && [ "$st" -ne 2 ] && [ "$st" -ne 3 ]
  grep -q "stopped by signal" "$TMP/log"
}

@test "activation checkpointing gives a bit-identical loss trajectory with less activation memory" {
  args=(--set training.steps=8 --set training.optimizer.warmupSteps=2 --set training.exportPath=
        --set training.threads=1)
  "$WORKER" train "${args[@]}" --metrics "$TMP/a.jsonl" 2> "$TMP/a.log" > /dev/null
  "$WORKER" train "${args[@]}" --set training.activationCheckpointing=true \
    --metrics "$TMP/b.jsonl" 2> "$TMP/b.log" > /dev/null
  cmp <(grep '"loss"' "$TMP/a.jsonl") <(grep '"loss"' "$TMP/b.jsonl")
  a=$(sed -n 's/.*activation_mib=\([0-9.]*\).*/\1/p' "$TMP/a.log")
  b=$(sed -n 's/.*activation_mib=\([0-9.]*\).*/\1/p' "$TMP/b.log")
  echo "activations: plain $a MiB, checkpointed $b MiB"
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a / 2) }'
}

@test "bf16-mixed on the CPU tracks the fp32 losses for 20 steps within 0.1 (and differs from them)" {
  args=(--set training.steps=20 --set training.optimizer.warmupSteps=3 --set training.exportPath=
        --set training.threads=2)
  "$WORKER" train "${args[@]}" --metrics "$TMP/f.jsonl" 2>/dev/null >/dev/null
  "$WORKER" train "${args[@]}" --set training.precision=bf16-mixed --metrics "$TMP/b.jsonl" 2>/dev/null >/dev/null
  loss() { sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$1"; }
  paste <(loss "$TMP/f.jsonl") <(loss "$TMP/b.jsonl") > "$TMP/pairs"
  [ "$(wc -l < "$TMP/pairs")" -eq 20 ]
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; if (d > 0) differ = 1 }
       END { printf "max |fp32 - bf16| = %g\n", m; exit !(m < 0.1 && differ) }' "$TMP/pairs"
}

@test "SIGTERM during the test-set evaluation stops it promptly with a retryable exit code" {
  # fmnist_small's 10k-image evaluation takes many seconds on 2 cores
  "$WORKER" train --set model.preset=fmnist_small --set training.steps=1 \
    --set training.optimizer.warmupSteps=0 --set training.exportPath= --set training.logInterval=1 \
    2> "$TMP/log" > /dev/null &
  pid=$!
  for i in $(seq 1 600); do grep -q "step=1/1" "$TMP/log" && break; sleep 0.1; done
  grep -q "step=1/1" "$TMP/log"
  sleep 0.5
  kill -TERM $pid
  t0=$(date +%s)
  wait $pid && st=0 || st=$?
  [ "$st" -eq 1 ]
  [ $(( $(date +%s) - t0 )) -le 5 ]
  grep -q "during the final evaluation" "$TMP/log"
}
