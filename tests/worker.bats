#!/usr/bin/env bats
# tests/worker.bats - the vitjob-worker command line, end to end: bad input
# gets a clear message naming the file, key or value and the documented exit
# code (2 config, 3 data); training is deterministic; a small preset learns
# Fashion-MNIST; the exported safetensors file loads into the PyTorch
# (timm-architecture) model and gives the same accuracy.
#
# BUILD (default build) points at the build tree; WORKER may override the
# binary (the ASan run uses build/asan).

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

load recipe_helpers

# The runs that only need the process to train evaluate a short test set
# (SMALL: every training image, so that they train as on the whole data
# set, and the first 500 test images; recipe_helpers' fmnist_short): the
# evaluation of the whole test set at the end of each run cost most of this
# file's time, the sanitized pass's above all. The manifest's run and the
# signal tests keep the whole data set.
setup_file() { fmnist_short "$BATS_FILE_TMPDIR/fm" 500; }

setup() {
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  TMP=$(mktemp -d)
  SMALL=(--set data.uri="file://$BATS_FILE_TMPDIR/fm")
  # A fast configuration for the checks that only need the process to run
  # (QUICK on the data set it is given, FAST on SMALL).
  QUICK=(--set training.steps=3 --set training.optimizer.warmupSteps=1
         --set training.exportPath= --set training.threads=1)
  FAST=("${QUICK[@]}" "${SMALL[@]}")
}

teardown() { rm -rf "$TMP"; }

# Runs the worker; sets $status and $output (stderr merged).
worker() { run "$WORKER" "$@"; }

# wait_for TEXT FILE: until FILE holds TEXT (at most 120 s; then fails).
wait_for() {
  for _ in $(seq 1 1200); do grep -q "$1" "$2" && return 0; sleep 0.1; done
  echo "never saw '$1' in $2"; cat "$2"; return 1
}

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

# The summary's step_host_waits: the host waits for the device (kernels/ops.h
# host_waits; the CPU tables count them where the CUDA backend's would be)
# inside the steps after the first. One rank queues its steps and reads each
# step's loss and gradient norm one step later, so it makes none, around
# checkpoints and evaluations too; fp16-mixed reads its overflow verdict at
# once, a wait per step, as GradScaler's found_inf does.
@test "one rank's training steps make no host wait for the device in bf16 and fp32, and fp16-mixed one a step" {
  local dev=cpu; if have_gpu; then dev=cuda; fi
  for p in bf16-mixed fp32 fp16-mixed; do
    worker train --set training.device=$dev --set training.precision=$p "${FAST[@]}" \
      --set training.steps=7 --set training.evalInterval=3 \
      --set checkpoint.uri="file://$TMP/ck-$p" --set checkpoint.intervalSteps=2
    [ "$status" -eq 0 ]
    local want=0; [ $p = fp16-mixed ] && want=6
    [[ "$output" == *"\"step_host_waits\":$want}"* ]] || { echo "$p: ${output##*summary}"; false; }
  done
}

@test "missing dataset directory exits 3 naming the file" {
  worker train "${FAST[@]}" --set data.uri=file://$TMP/none
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
  worker train "${FAST[@]}" --set data.uri=$TMP/ds
  [ "$status" -eq 3 ]
  [[ "$output" == *"t10k-images-idx3-ubyte.gz"* ]]
  [[ "$output" == *"truncated"* ]]
}

@test "images of another size than model.imageSize exit 3 naming the images file and both sizes" {
  mkdir "$TMP/ds"
  # well-formed IDX files of 27x27 images (model.imageSize=28 is Fashion-MNIST's)
  python3 - "$TMP/ds" <<'PY'
import gzip, struct, sys
for split, n in (("train", 256), ("t10k", 64)):
    with gzip.open(f"{sys.argv[1]}/{split}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 27, 27) + bytes(n * 27 * 27))
    with gzip.open(f"{sys.argv[1]}/{split}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PY
  worker train "${FAST[@]}" --set data.uri=$TMP/ds
  [ "$status" -eq 3 ]
  [[ "$output" == *"$TMP/ds/train-images-idx3-ubyte.gz: images are 27x27 but model.imageSize=28"* ]]
}

@test "IDX file with the wrong magic exits 3 naming the file and the magic" {
  copy_dataset
  # a labels file where the images should be: magic 0x801, not 0x803
  cp "$TMP/ds/train-labels-idx1-ubyte.gz" "$TMP/ds/train-images-idx3-ubyte.gz"
  worker train "${FAST[@]}" --set data.uri=$TMP/ds
  [ "$status" -eq 3 ]
  [[ "$output" == *"train-images-idx3-ubyte.gz"* ]]
  [[ "$output" == *"magic"* ]]
}

@test "corrupt gzip stream exits 3, never a crash" {
  copy_dataset
  head -c 3000 /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz > "$TMP/ds/train-labels-idx1-ubyte.gz"
  worker train "${FAST[@]}" --set data.uri=$TMP/ds
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
  worker train --config examples/fmnist.yaml "${QUICK[@]}"
  [ "$status" -eq 0 ]
  [[ "$output" == *'"event":"summary"'* ]]
}

@test "two runs with the same config and seed give bit-identical loss trajectories" {
  args=(--set training.steps=12 --set training.optimizer.warmupSteps=2 --set training.exportPath=
        --set training.threads=2 --set data.augment=true
        "${SMALL[@]}")
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

@test "SIGTERM stops training with exit code 143, retried by the operator" {
  "$WORKER" train --set training.steps=100000 --set training.threads=1 --set training.exportPath= 2>"$TMP/log" &
  pid=$!
  wait_for "event=start" "$TMP/log"
  kill -TERM $pid
  wait $pid && st=0 || st=$?
  [ "$st" -eq 143 ]
  grep -q "stopped by signal" "$TMP/log"
  grep -q "class=stopped retried=yes" "$TMP/log"
}

# VITJOB_TEST_HOLD (worker/train/step_hold.h): how the cluster tests hold a
# job at a step instead of racing its training
@test "a test hold stops the loop before its step until its file goes, the trajectory unchanged" {
  args=(--set training.steps=6 --set training.optimizer.warmupSteps=1 --set training.exportPath=
        --set training.threads=1 --set training.logInterval=1 "${SMALL[@]}")
  "$WORKER" train "${args[@]}" --metrics "$TMP/a.jsonl" 2>/dev/null >/dev/null
  touch "$TMP/hold"
  VITJOB_TEST_HOLD="4:$TMP/hold" "$WORKER" train "${args[@]}" --metrics "$TMP/b.jsonl" 2>"$TMP/log" &
  pid=$!
  wait_for "event=test_hold rank=0 step=4 " "$TMP/log"
  # held before step 4: step 3 (queued behind it otherwise) is finished and logged, step 4 is not
  grep -q " step=3/6 " "$TMP/log"
  if grep -q " step=4/6 " "$TMP/log"; then echo "step 4 ran while held"; false; fi
  rm "$TMP/hold"
  wait $pid
  grep -q "event=test_released rank=0 step=4 .*why=file_removed" "$TMP/log"
  grep -q " step=6/6 " "$TMP/log"
  for f in a b; do grep '"loss"' "$TMP/$f.jsonl" > "$TMP/$f.loss"; done
  [ "$(wc -l < "$TMP/a.loss")" -eq 6 ]
  cmp "$TMP/a.loss" "$TMP/b.loss"
}

@test "SIGTERM during a test hold stops the run with exit code 143; a malformed hold exits naming the variable" {
  touch "$TMP/hold"
  VITJOB_TEST_HOLD="2:$TMP/hold" "$WORKER" train --set training.steps=5 --set training.threads=1 \
    --set training.exportPath= "${SMALL[@]}" 2>"$TMP/log" &
  pid=$!
  wait_for "event=test_hold rank=0 step=2 " "$TMP/log"
  kill -TERM $pid
  wait $pid && st=0 || st=$?
  [ "$st" -eq 143 ]
  grep -q "event=test_released rank=0 step=2 .*why=stop" "$TMP/log"
  grep -q "class=stopped" "$TMP/log"
  VITJOB_TEST_HOLD="2:relative/path" worker train "${FAST[@]}"
  [ "$status" -eq "$(code_of environment)" ]
  [[ "$output" == *'VITJOB_TEST_HOLD: entry \"2:relative/path\" is not STEP:PATH'* ]]
}

@test "activation checkpointing gives a bit-identical loss trajectory with less activation memory" {
  args=(--set training.steps=8 --set training.optimizer.warmupSteps=2 --set training.exportPath=
        --set training.threads=1
        "${SMALL[@]}")
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
        --set training.threads=2
        "${SMALL[@]}")
  "$WORKER" train "${args[@]}" --metrics "$TMP/f.jsonl" 2>/dev/null >/dev/null
  "$WORKER" train "${args[@]}" --set training.precision=bf16-mixed --metrics "$TMP/b.jsonl" 2>/dev/null >/dev/null
  loss() { sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$1"; }
  paste <(loss "$TMP/f.jsonl") <(loss "$TMP/b.jsonl") > "$TMP/pairs"
  [ "$(wc -l < "$TMP/pairs")" -eq 20 ]
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; if (d > 0) differ = 1 }
       END { printf "max |fp32 - bf16| = %g\n", m; exit !(m < 0.1 && differ) }' "$TMP/pairs"
}

@test "SIGTERM during the test-set evaluation stops it with exit code 143" {
  # fmnist_small's 10k-image evaluation takes many seconds on 2 cores
  "$WORKER" train --set model.preset=fmnist_small --set training.steps=1 \
    --set training.optimizer.warmupSteps=0 --set training.exportPath= --set training.logInterval=1 \
    2> "$TMP/log" > /dev/null &
  pid=$!
  wait_for "step=1/1" "$TMP/log"
  sleep 0.5
  kill -TERM $pid
  wait $pid && st=0 || st=$?
  [ "$st" -eq 143 ]
  grep -q "during the final evaluation" "$TMP/log"
  ! grep -q "event=done" "$TMP/log"
}
# ---- hostile and careless input: each ends cleanly, says why, and exits
# ---- with the code of the error class (vitjob-worker exit-codes)

# code_of CLASS: the exit code the table gives the class
code_of() { "$WORKER" exit-codes | awk -v c="$1" '$3 == c { print $1 }'; }

# A small model exported to $TMP/init.safetensors; poke_float OFFSET HEXBYTES
# overwrites 4 bytes of its first tensor's data.
export_init() {
  "$WORKER" train "${FAST[@]}" --set training.exportPath="$TMP/init.safetensors" >/dev/null 2>&1
}
poke_float() {
  python3 - "$TMP/init.safetensors" "$1" "$2" <<'PY'
import struct, sys
path, index, hexbytes = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    f.seek(8 + n + 4 * index)
    f.write(hexbytes)
PY
}

# (unsupported: no config of this build asks for what it cannot do; the class
# stays in the table, checked by the next test)
@test "every error class reachable without a GPU exits with the code of the table and says its class" {
  export_init
  poke_float 3 0000c07f   # NaN in the first tensor's 4th element
  mkdir "$TMP/dir"
  cases=(
    "usage|train --no-such-flag"
    "config|train --set training.steps=-1"
    "environment|env VITJOB_REPLICAS=two"
    "output|train --set training.exportPath=$TMP/no/such/dir/model.safetensors"
    "init_weights|train --set model.init=$TMP/init.safetensors"
    "too_large|train --set model.dim=8192 --set model.heads=64 --set model.depth=64"
    "data|train --set data.uri=$TMP/dir"
  )
  for c in "${cases[@]}"; do
    cls=${c%%|*} args=${c#*|}
    want=$(code_of "$cls")
    [ -n "$want" ]
    if [[ $args == env* ]]; then
      read -r _ var rest <<<"$args"
      run env "$var" "$WORKER" train "${FAST[@]}"
    else
      read -r -a a <<<"${args#train }"
      run "$WORKER" train "${FAST[@]}" "${a[@]}"
    fi
    echo "$cls: status $status (want $want): ${output: -300}"
    [ "$status" -eq "$want" ]
    [[ "$output" == *"class=$cls "* ]]
  done
}

@test "the exit-code table lists every class once with the contract's codes" {
  worker exit-codes
  [ "$status" -eq 0 ]
  for cls in usage config environment unsupported no_device output init_weights too_large \
             diverged data out_of_memory device_fault io stopped; do
    [ "$(awk -v c="$cls" '$3 == c' <<<"$output" | wc -l)" -eq 1 ]
  done
  # permanent (2, 3) is never retried; everything else is
  awk 'NR > 2 { if (($1 == 2 || $1 == 3) != ($2 == "no")) exit 1 }' <<<"$output"
}

@test "weights that overflow to an infinite loss end as diverged, not retried" {
  export_init
  poke_float 0 ffff7f7f   # 3.4e38 in the patch embedding
  poke_float 1 ffff7f7f
  worker train "${FAST[@]}" --set model.init="$TMP/init.safetensors"
  echo "$output" | tail -3
  [ "$status" -eq "$(code_of diverged)" ]
  [[ "$output" == *"class=diverged"* ]]
  [[ "$output" == *"lower training.optimizer.lr"* ]]
}

@test "NaN or Inf in model.init is refused before training, naming the tensor and element" {
  export_init
  poke_float 5 0000807f   # +Inf
  worker train "${FAST[@]}" --set model.init="$TMP/init.safetensors"
  [ "$status" -eq 2 ]
  [[ "$output" == *"holds Inf at element 5"* ]]
  [[ "$output" != *"event=start"* ]]
}

@test "a model larger than the memory available is refused before allocating, with both numbers" {
  worker train "${FAST[@]}" --set model.dim=8192 --set model.heads=64 --set model.depth=64
  [ "$status" -eq 2 ]
  [[ "$output" =~ needs\ [0-9]+\ bytes\ of\ host\ memory.*but\ [0-9]+\ are\ available ]]
}

# Output paths: refused before the data loads or any step runs.
@test "an unusable exportPath or metrics path exits 2 before the first step, naming the path" {
  touch "$TMP/file"
  mkdir "$TMP/sub"
  long=$TMP/$(printf 'x%.0s' $(seq 1 300))
  for p in "$TMP/missing/m.safetensors" "$TMP/sub" "$TMP/file/m.safetensors" "$long" "$TMP/sub/"; do
    worker train "${FAST[@]}" --set training.exportPath="$p"
    echo "$p -> $status: ${output: -200}"
    [ "$status" -eq 2 ]
    [[ "$output" == *"training.exportPath: "* ]]
    [[ "$output" != *"event=start"* ]]
    worker train "${FAST[@]}" --metrics "$p"
    [ "$status" -eq 2 ]
    [[ "$output" == *"--metrics: "* ]]
    [[ "$output" != *"event=start"* ]]
  done
}

@test "an output directory the worker cannot write is refused at start, not after training" {
  mkdir -m 0555 "$TMP/ro"
  chmod 0755 "$TMP"
  if [ "$(id -u)" -eq 0 ]; then
    run setpriv --reuid=65534 --regid=65534 --clear-groups "$WORKER" train "${FAST[@]}" \
      --set training.exportPath="$TMP/ro/m.safetensors"
  else
    worker train "${FAST[@]}" --set training.exportPath="$TMP/ro/m.safetensors"
  fi
  [ "$status" -eq 2 ]
  [[ "$output" == *"cannot create files in $TMP/ro: Permission denied"* ]]
  [[ "$output" != *"event=start"* ]]
}

@test "a character device or FIFO as exportPath or metrics path is refused and left as it was" {
  mkfifo "$TMP/fifo"
  for p in /dev/null "$TMP/fifo"; do
    run timeout 60 "$WORKER" train "${FAST[@]}" --set training.exportPath="$p"
    [ "$status" -eq 2 ]
    [[ "$output" == *"not a regular file"* ]]
    run timeout 60 "$WORKER" train "${FAST[@]}" --metrics "$p"
    [ "$status" -eq 2 ]
  done
  [ -c /dev/null ]
  [ -p "$TMP/fifo" ]
}

@test "a FIFO or directory as config, data or weights file is refused at once, never read" {
  mkfifo "$TMP/fifo"
  run timeout 60 "$WORKER" train --config "$TMP/fifo"
  [ "$status" -eq 2 ]
  [[ "$output" == *"is a FIFO, not a regular file"* ]]
  run timeout 60 "$WORKER" train --config "$TMP"
  [ "$status" -eq 2 ]
  [[ "$output" == *"is a directory, not a regular file"* ]]
  mkdir "$TMP/data"
  mkfifo "$TMP/data/train-images-idx3-ubyte"
  run timeout 60 "$WORKER" train "${FAST[@]}" --set data.uri="$TMP/data"
  [ "$status" -eq 3 ]
  [[ "$output" == *"is a FIFO"* ]]
  run timeout 60 "$WORKER" train "${FAST[@]}" --set model.init="$TMP/fifo"
  [ "$status" -eq 2 ]
  [[ "$output" == *"not a regular file"* ]]
  run timeout 60 "$WORKER" train "${FAST[@]}" --set model.init="$TMP"
  [ "$status" -eq 2 ]
  [[ "$output" == *"is a directory, not a regular file"* ]]
}

@test "the export replaces the old file whole: another link to it keeps the old bytes" {
  "$WORKER" train "${FAST[@]}" --set training.exportPath="$TMP/m.safetensors" >/dev/null 2>&1
  ln "$TMP/m.safetensors" "$TMP/old-link"
  cp "$TMP/m.safetensors" "$TMP/old-copy"
  "$WORKER" train "${FAST[@]}" --set training.seed=7 --set training.exportPath="$TMP/m.safetensors" >/dev/null 2>&1
  cmp "$TMP/old-link" "$TMP/old-copy"
  ! cmp -s "$TMP/m.safetensors" "$TMP/old-copy"
  [ -z "$(ls -A "$TMP" | grep vitjob-tmp)" ]
}

@test "a temporary left by a writer that was killed is removed by the next run" {
  # the name a writer of m.safetensors uses (lib/file.h), not locked: its writer is gone
  h=$(python3 -c 'import sys
h = 0xcbf29ce484222325
for b in b"m.safetensors": h = ((h ^ b) * 0x100000001b3) % 2**64
print("%016x" % h)')
  echo partial > "$TMP/.vitjob-tmp.$h.AbC123"
  echo other > "$TMP/.vitjob-tmp.0123456789abcdef.XyZ789"
  worker train "${FAST[@]}" --set training.exportPath="$TMP/m.safetensors"
  [ "$status" -eq 0 ]
  [[ "$output" == *"event=removed_temporaries path=$TMP/m.safetensors count=1"* ]]
  [ ! -e "$TMP/.vitjob-tmp.$h.AbC123" ]
  [ -e "$TMP/.vitjob-tmp.0123456789abcdef.XyZ789" ]
}

@test "an export that fails on a full disk is retried (io); on a read-only one it is refused at start" {
  mkdir "$TMP/full" "$TMP/ro"
  if ! mount -t tmpfs -o size=64k tmpfs "$TMP/full" 2>/dev/null; then skip "cannot mount a tmpfs here"; fi
  mount -t tmpfs -o ro,size=64k tmpfs "$TMP/ro"
  worker train "${FAST[@]}" --set training.exportPath="$TMP/full/m.safetensors"
  r1=$status o1=$output
  worker train "${FAST[@]}" --set training.exportPath="$TMP/ro/m.safetensors"
  umount "$TMP/full" "$TMP/ro"
  echo "full: $r1 ${o1: -300}"
  [ "$r1" -eq "$(code_of io)" ]
  [[ "$o1" == *"class=io"* ]]
  [[ "$o1" == *"No space left on device"* ]]
  [ "$status" -eq 2 ]
  [[ "$output" == *"Read-only file system"* ]]
  [[ "$output" != *"event=start"* ]]
}

@test "without training.threads the worker uses the CPUs its affinity allows, and says so" {
  [ "$(nproc --all)" -ge 2 ] || skip "one CPU: affinity cannot be narrower"
  run env -u OMP_NUM_THREADS taskset -c 0 "$WORKER" train --set training.steps=1 \
    --set training.optimizer.warmupSteps=0 --set training.exportPath= "${SMALL[@]}"
  [ "$status" -eq 0 ]
  [[ "$output" == *'threads=1 threads_source=affinity'* ]]
  [[ "$output" == *'"threads":1'* ]]
}

@test "training.threads above the CPUs the affinity allows is kept, with a warning naming both" {
  command -v taskset >/dev/null || skip "taskset missing"
  [ "$(nproc --all)" -ge 2 ] || skip "one CPU: affinity cannot be narrower"
  run taskset -c 0 "$WORKER" train "${FAST[@]}" --set training.steps=1 --set training.threads=4 \
    --set training.optimizer.warmupSteps=0
  [ "$status" -eq 0 ]
  [[ "$output" == *'level=warn'*'event=threads_above_cpus threads=4 cpus=1 cpus_source=affinity'* ]]
  [[ "$output" == *'threads=4 threads_source=training.threads'* ]]
  # at or below the CPUs allowed: no warning
  run taskset -c 0 "$WORKER" train "${FAST[@]}" --set training.steps=1 --set training.threads=1 \
    --set training.optimizer.warmupSteps=0
  [ "$status" -eq 0 ]
  [[ "$output" != *'threads_above_cpus'* ]]
}

@test "SIGTERM between micro-batches abandons the step and exits 143 without finishing it" {
  # 512 micro-batches in one step: tens of seconds of work
  "$WORKER" train --set training.steps=1 --set training.globalBatchSize=32768 \
    --set training.microBatchSize=64 --set training.optimizer.warmupSteps=0 \
    --set training.exportPath= --set training.threads=1 2> "$TMP/log" > /dev/null &
  pid=$!
  wait_for "event=start" "$TMP/log"
  sleep 1
  kill -TERM $pid
  wait $pid && st=0 || st=$?
  cat "$TMP/log" | tail -2
  [ "$st" -eq 143 ]
  grep -q "stopped by signal during step 1 (micro-batch [0-9]* of 512[,)].*the step was abandoned" "$TMP/log"
  ! grep -q "step=1/1" "$TMP/log"
}

@test "SIGINT inside one long forward pass stops between blocks and exits 130" {
  # one micro-batch through 128 blocks: the stop can only be seen between blocks
  "$WORKER" train --set training.steps=1 --set training.globalBatchSize=1024 \
    --set training.microBatchSize=1024 --set model.depth=128 \
    --set training.activationCheckpointing=true --set training.optimizer.warmupSteps=0 \
    --set training.exportPath= --set training.threads=1 2> "$TMP/log" > /dev/null &
  pid=$!
  wait_for "event=start" "$TMP/log"
  sleep 1
  kill -INT $pid
  wait $pid && st=0 || st=$?
  cat "$TMP/log" | tail -2
  [ "$st" -eq 130 ]
  grep -q "micro-batch 1 of 1, forward pass, before block [0-9]* of 128" "$TMP/log"
}

@test "gradient accumulation gives the same gradient as one big micro-batch" {
  args=(--set training.steps=1 --set training.optimizer.warmupSteps=0 --set training.exportPath=
        --set training.threads=1 --set training.globalBatchSize=64
        "${SMALL[@]}")
  "$WORKER" train "${args[@]}" --set training.microBatchSize=64 --metrics "$TMP/one.jsonl" >/dev/null 2>&1
  "$WORKER" train "${args[@]}" --set training.microBatchSize=16 --metrics "$TMP/four.jsonl" >/dev/null 2>&1
  g() { sed -n 's/.*"grad_norm":\([0-9.e+-]*\).*/\1/p' "$1"; }
  l() { sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$1"; }
  echo "grad_norm $(g "$TMP/one.jsonl") vs $(g "$TMP/four.jsonl"); loss $(l "$TMP/one.jsonl") vs $(l "$TMP/four.jsonl")"
  awk -v a="$(g "$TMP/one.jsonl")" -v b="$(g "$TMP/four.jsonl")" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d / a < 1e-5) }'
  awk -v a="$(l "$TMP/one.jsonl")" -v b="$(l "$TMP/four.jsonl")" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d / a < 1e-5) }'
}

@test "control characters in a path reach the log escaped, as one line" {
  worker train "${FAST[@]}" --set $'training.exportPath=/no/such\nts=0 level=error comp=forged msg=x\e[31m'
  [ "$status" -eq 2 ]
  [ "$(grep -c 'comp=forged' <<<"$output")" -eq 1 ]
  [[ "$output" == *'/no/such\nts=0 level=error comp=forged msg=x\u001b[31m'* ]]
  [[ "$output" != *$'\e'* ]]
  ! grep -q '^ts=0 ' <<<"$output"
}

@test "OMP_NUM_THREADS decides the threads when training.threads is not set, and a bad one is ignored" {
  run env OMP_NUM_THREADS=1 "$WORKER" train --set training.steps=1 --set training.optimizer.warmupSteps=0 \
    --set training.exportPath= "${SMALL[@]}"
  [ "$status" -eq 0 ]
  [[ "$output" == *'threads=1 threads_source=OMP_NUM_THREADS'* ]]
  run env OMP_NUM_THREADS=lots "$WORKER" train --set training.steps=1 \
    --set training.optimizer.warmupSteps=0 --set training.exportPath= "${SMALL[@]}"
  [ "$status" -eq 0 ]
  [[ "$output" == *'event=ignored_env name=OMP_NUM_THREADS value=lots'* ]]
}

@test "metrics and export naming the same file are refused at start" {
  worker train "${FAST[@]}" --set training.exportPath="$TMP/out" --metrics "$TMP/out"
  [ "$status" -eq 2 ]
  [[ "$output" == *"name the same file"* ]]
  touch "$TMP/out"
  ln "$TMP/out" "$TMP/out2"
  worker train "${FAST[@]}" --set training.exportPath="$TMP/out" --metrics "$TMP/out2"
  [ "$status" -eq 2 ]
}

# logfmt FILE: FILE's log lines decoded by go-logfmt, the reference parser
# (tests/logfmt_decode), one JSON array of [key, value] pairs a line, into
# FILE.pairs; fails if it refuses a line or the lines and records differ in
# number. Skips where the decoder was not built (no Go).
logfmt() {
  [ -x "$BUILD/bin/logfmt_decode" ] ||
    skip "tests/logfmt_decode not built (make needs golang-go and golang-github-go-logfmt-logfmt-dev)"
  "$BUILD/bin/logfmt_decode" < "$1" > "$1.pairs"
  [ "$(wc -l < "$1")" -eq "$(wc -l < "$1.pairs")" ]
}

# A directory name that forges a key in a log line that does not quote it.
forging_dir() { printf '%s' "$TMP/a\" forged=\"1 b\\c=d"$'\n'"e"$'\t'"f"; }

@test "a path with quotes, backslashes, spaces, = and control characters round-trips through a logfmt parser" {
  d=$(forging_dir)
  mkdir -p "$d"
  timeout 120 "$WORKER" train "${FAST[@]}" --set training.exportPath="$d/m.safetensors" \
    2> "$TMP/log" > /dev/null
  logfmt "$TMP/log"
  python3 - "$TMP/log.pairs" "$d/m.safetensors" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
path = sys.argv[2]
for r in recs:
    keys = [k for k, _ in r]
    assert keys[:3] == ["ts", "level", "comp"], r
    assert "forged" not in keys, r
    assert len(set(keys)) == len(keys), r
exported = [dict(r) for r in recs if ["event", "exported"] in r]
assert len(exported) == 1 and exported[0]["path"] == path, exported
config = [json.loads(dict(r)["config"]) for r in recs if ["event", "config"] in r]
assert config[0]["training"]["exportPath"] == path, config
PY
}

@test "an error naming a forging data path is one record whose msg holds the path exactly" {
  d=$(forging_dir)
  rc=0
  timeout 120 "$WORKER" train "${FAST[@]}" --set data.uri="file://$d" 2> "$TMP/log" > /dev/null || rc=$?
  [ "$rc" -eq 3 ]
  logfmt "$TMP/log"
  python3 - "$TMP/log.pairs" "$d" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
for r in recs:
    assert "forged" not in [k for k, _ in r], r
err = [dict(r) for r in recs if ["level", "error"] in r]
assert len(err) == 1, err
assert err[0]["exit_code"] == "3", err
assert err[0]["msg"] == sys.argv[2] + "/train-images-idx3-ubyte: cannot open dataset file: " \
    "No such file or directory", err
PY
}

# a small image folder made with PIL: 2 class folders of 8 28x28 gray PNGs
small_folder() {
  /usr/bin/python3 - "$1" <<'PY'
import os, sys
from PIL import Image
for c in ("a", "b"):
    os.makedirs(f"{sys.argv[1]}/{c}", exist_ok=True)
    for i in range(8):
        Image.new("L", (28, 28), 30 * i + (100 if c == "b" else 0)).save(f"{sys.argv[1]}/{c}/{i}.png")
PY
}

@test "start warnings: no data.testUri for an image folder and fewer class folders than model.numClasses, each once, and neither when absent" {
  small_folder "$TMP/img"
  F=(--set data.format=imagefolder --set "data.uri=file://$TMP/img" --set training.globalBatchSize=8
     --set training.microBatchSize=8 --set data.mean=[0.5] --set data.std=[0.5])
  worker train "${QUICK[@]}" "${F[@]}" --set model.numClasses=10
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$(grep -c 'level=warn .*event=no_test_set key=data.testUri' <<< "$output")" -eq 1 ]
  [[ "$output" == *'event=few_classes class_folders=2 num_classes=10 msg="data.uri has 2 class folders but model.numClasses=10: 8 of the model'* ]]
  worker train "${QUICK[@]}" "${F[@]}" --set model.numClasses=2 --set "data.testUri=file://$TMP/img"
  [ "$status" -eq 0 ]
  [[ "$output" != *"event=no_test_set"* ]]
  [[ "$output" != *"event=few_classes"* ]]
  # Fashion-MNIST has its own test split: no warning without data.testUri
  worker train "${FAST[@]}"
  [ "$status" -eq 0 ]
  [[ "$output" != *"event=no_test_set"* ]]
}

@test "start warning: 28x28 images upscaled to model.imageSize=56 (4x the area) on the CPU, once, with the run's planned time; none at imageSize 28" {
  small_folder "$TMP/img"
  F=(--set data.format=imagefolder --set "data.uri=file://$TMP/img" --set "data.testUri=file://$TMP/img"
     --set model.numClasses=2 --set training.globalBatchSize=8 --set training.microBatchSize=8
     --set data.mean=[0.5] --set data.std=[0.5] --set training.device=cpu)
  worker train "${QUICK[@]}" "${F[@]}" --set model.imageSize=56 --set model.patchSize=14
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$(grep -c 'level=warn .*event=upscale stored=28x28 image_size=56 area_factor=4.0 device=cpu' <<< "$output")" -eq 1 ]
  # the planned time: the seconds a step took so far x the run's 3 steps (their values not checked)
  line=$(grep 'event=upscale' <<< "$output")
  re="step_seconds=[0-9.e+-]+ planned_seconds=[0-9]+ msg=\"the images are 28x28 and model.imageSize=56: each is upscaled 4x in area and trained at that size's full cost on the CPU, [0-9.e+-]+ s a step so far: the run's 3 steps take about ([0-9]+[smhdy])+; a model.imageSize near the images' own size trains many times faster\"$"
  [[ "$line" =~ $re ]]
  worker train "${QUICK[@]}" "${F[@]}" --set model.imageSize=28 --set model.patchSize=7
  [ "$status" -eq 0 ]
  [[ "$output" != *"event=upscale"* ]]
}
